/*
 * Unit test of chorus__comm_what: the "<name> #<seq>" text every message of an operation
 * carries, built from a decimal counter advanced in place. Checked against snprintf for
 * every number of a long run, across carries (9 -> 10, 999 -> 1000), after jumps of the
 * sequence (device calls number themselves without a text), and when the buffer is short.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct chorus_comm *what_comm(void)
{
    struct chorus_comm *c = calloc(1, sizeof *c);

    assert_non_null(c);
    c->hang_slot = -1; /* no hang report slot: chorus__hang_begin does nothing */
    return c;
}

static void expect_what(struct chorus_comm *c, const char *name)
{
    char got[64], want[64];

    chorus__comm_what(c, name, got, sizeof got);
    snprintf(want, sizeof want, "%s #%llu", name, (unsigned long long)c->seq);
    assert_string_equal(got, want);
}

static void test_what_counts(void **state)
{
    struct chorus_comm *c = what_comm();
    const char *names[] = {"allreduce", "broadcast", "reduce_scatter", "barrier"};

    (void)state;
    for (int i = 0; i < 12000; i++) expect_what(c, names[i % 4]);
    free(c);
}

static void test_what_jumps(void **state)
{
    struct chorus_comm *c = what_comm();
    uint64_t starts[] = {8, 98, 99, 998, 999999, 1, 4294967295ULL, UINT64_MAX - 3, 41};

    (void)state;
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
        c->seq = starts[k]; /* as a device call's c->seq++ leaves it: no text for it */
        for (int i = 0; i < 3; i++) expect_what(c, "allgather");
    }
    free(c);
}

static void test_what_short_buffer(void **state)
{
    struct chorus_comm *c = what_comm();
    char buf[12];

    (void)state;
    c->seq = 122;
    chorus__comm_what(c, "reduce_scatter", buf, sizeof buf);
    /* The number survives; the name gives way. */
    assert_string_equal(buf, "reduce #123");
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_what_counts),
        cmocka_unit_test(test_what_jumps),
        cmocka_unit_test(test_what_short_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
