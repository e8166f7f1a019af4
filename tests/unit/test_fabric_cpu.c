/*
 * chorus-fabric's CPU sampler (bench/fabric/cpu.c): /proc/stat's aggregate line parsed, the
 * busy and softirq fractions between two samples, the saturation thresholds, and
 * CHORUS_FABRIC_PROC_STAT with "%d" (the hook tests/mp/fabric_local.sh plays a saturated
 * host with). The real /proc/stat is read once, where there is one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fabric_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* user nice system idle iowait irq softirq steal guest guest_nice */
static const char *g_stat0 = "cpu  1000 0 500 8000 100 0 100 0 0 0\n"
                             "cpu0 500 0 250 4000 50 0 50 0 0 0\n"
                             "intr 12345\n";
/* 1000 jiffies later: 30 idle, 10 iowait, 410 softirq, the rest user and system. */
static const char *g_stat1 = "cpu  1300 0 750 8030 110 0 510 0 0 0\n"
                             "cpu0 650 0 375 4015 55 0 255 0 0 0\n";

static void test_parse_and_fractions(void **state)
{
    fabric_cpu_sample_t a, b;
    double busy, softirq;

    (void)state;
    assert_int_equal(fabric_cpu_parse(g_stat0, &a), 0);
    assert_int_equal(a.ok, 1);
    assert_true(a.total == 9700 && a.idle == 8100 && a.softirq == 100);
    assert_int_equal(fabric_cpu_parse(g_stat1, &b), 0);
    fabric_cpu_fractions(&a, &b, &busy, &softirq);
    assert_true(busy > 0.959 && busy < 0.961);
    assert_true(softirq > 0.409 && softirq < 0.411);
    assert_int_equal(fabric_cpu_saturated(busy, softirq), 1);
    /* Backwards or unmoved counters, or a failed sample, say nothing. */
    fabric_cpu_fractions(&b, &a, &busy, &softirq);
    assert_true(busy < 0 && softirq < 0);
    fabric_cpu_fractions(&a, &a, &busy, &softirq);
    assert_true(busy < 0 && softirq < 0);
    assert_int_equal(fabric_cpu_parse("cpu0 1 2 3 4 5 6 7\n", &a), -1);
    assert_int_equal(a.ok, 0);
    assert_int_equal(fabric_cpu_parse("cpu  1 2 3\n", &a), -1);
}

static void test_thresholds(void **state)
{
    (void)state;
    assert_int_equal(fabric_cpu_saturated(0.90, 0.0), 1);
    assert_int_equal(fabric_cpu_saturated(0.89, 0.29), 0);
    assert_int_equal(fabric_cpu_saturated(0.5, 0.30), 1);
    assert_int_equal(fabric_cpu_saturated(-1, -1), 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* CHORUS_FABRIC_PROC_STAT=DIR/stat.%d reads DIR/stat.0, then DIR/stat.1. */
static void test_fake_path(void **state)
{
    char dir[256], path[300], pattern[300];
    fabric_cpu_sample_t a, b;
    double busy, softirq;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/fabric-cpu.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/stat.0", dir);
    write_file(path, g_stat0);
    snprintf(path, sizeof(path), "%s/stat.1", dir);
    write_file(path, g_stat1);
    snprintf(pattern, sizeof(pattern), "%s/stat.%%d", dir);
    setenv("CHORUS_FABRIC_PROC_STAT", pattern, 1);
    assert_int_equal(fabric_cpu_sample(0, &a), 0);
    assert_int_equal(fabric_cpu_sample(1, &b), 0);
    fabric_cpu_fractions(&a, &b, &busy, &softirq);
    assert_true(busy > 0.959 && busy < 0.961);
    assert_int_equal(fabric_cpu_sample(2, &b), -1); /* no stat.2 */
    assert_int_equal(b.ok, 0);
    unsetenv("CHORUS_FABRIC_PROC_STAT");
    snprintf(path, sizeof(path), "%s/stat.0", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/stat.1", dir);
    unlink(path);
    rmdir(dir);
}

static void test_real_proc_stat(void **state)
{
    fabric_cpu_sample_t a;

    (void)state;
    if (access("/proc/stat", R_OK) != 0) {
        print_message("skipped: no /proc/stat\n");
        skip();
    }
    assert_int_equal(fabric_cpu_sample(0, &a), 0);
    assert_true(a.total > 0 && a.idle <= a.total && a.softirq <= a.total);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_fractions),
        cmocka_unit_test(test_thresholds),
        cmocka_unit_test(test_fake_path),
        cmocka_unit_test(test_real_proc_stat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
