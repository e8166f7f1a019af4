/*
 * lib/trace: the Chrome trace writer and the merge of parts (times moved to the job's
 * first event, exact to the nanosecond; a file that is not a part refused), and the
 * CHORUS_TRACE recorder of one rank (off without the variable; on, it writes its part and,
 * as the job's last rank, the merged file).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "trace/trace.h"
#include "trace/trace_json.h"
#include "util/clock.h"
#include "util/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/chorus-test-trace-XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_part(const char *path, int pid, uint64_t origin_us)
{
    FILE *f = fopen(path, "w");
    chorus_tjson_t w;
    chorus_tev_t send = {0.5, 2.25, 4096, 1 - pid, CHORUS_TEV_SEND, NULL, NULL};
    chorus_tev_t call = {0, 3, 4096, -1, CHORUS_TEV_CALL, "allreduce #1", "ring"};
    chorus_tev_t reduce = {2.5, 2.75, 4096, -1, CHORUS_TEV_REDUCE, NULL, NULL};

    assert_non_null(f);
    chorus__tjson_begin(&w, f, origin_us);
    chorus__tjson_process(&w, pid, "rank \"quoted\"\n");
    chorus__tjson_event(&w, pid, &send);
    chorus__tjson_event(&w, pid, &reduce);
    chorus__tjson_event(&w, pid, &call);
    assert_int_equal(chorus__tjson_end(&w, "run", "\"rank\": 0"), 0);
    fclose(f);
}

/* The "ts" of the first event of pid with phase ph and category cat (-1 if none). */
static double find_ts(json_t *events, int pid, const char *ph, const char *cat)
{
    size_t k;
    json_t *e;
    json_array_foreach(events, k, e)
    {
        const char *p = json_string_value(json_object_get(e, "ph"));
        const char *c = json_string_value(json_object_get(e, "cat"));
        if (p != NULL && strcmp(p, ph) == 0 && c != NULL && strcmp(c, cat) == 0 &&
            json_integer_value(json_object_get(e, "pid")) == pid)
            return json_number_value(json_object_get(e, "ts"));
    }
    return -1;
}

static void test_write_and_merge(void **state)
{
    char a[256], b[256], out[256], bad[256];
    const char *parts[2] = {a, b};
    json_error_t err;
    json_t *root, *events;
    FILE *f;

    (void)state;
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(out, sizeof out, "%s/merged.json", dir);
    /* Wall-clock origins of today's size, a millisecond apart. */
    write_part(a, 0, 1796225826646000ull);
    write_part(b, 1, 1796225826647000ull);
    /* A part alone is valid JSON, its times absolute. */
    root = json_load_file(a, 0, &err);
    assert_non_null(root);
    assert_true(find_ts(json_object_get(root, "traceEvents"), 0, "b", "send") > 1.7e15);
    json_decref(root);

    assert_int_equal(chorus__tjson_merge(out, parts, 2), CHORUS_SUCCESS);
    root = json_load_file(out, 0, &err);
    if (root == NULL) fail_msg("%s: line %d: %s", out, err.line, err.text);
    events = json_object_get(root, "traceEvents");
    /* Per part: 5 metadata, 2 + 1 + 1 events, 1 closing line; and the merge's own. */
    assert_int_equal(json_array_size(events), 2 * 10 + 1);
    /* The origin is the earliest event (a's call at 0): a's send begins 0.5 us after it,
     * b's a millisecond later, to the nanosecond. */
    assert_true(find_ts(events, 0, "X", "call") == 0);
    assert_true(find_ts(events, 0, "b", "send") == 0.5);
    assert_true(find_ts(events, 0, "e", "send") == 2.25);
    assert_true(find_ts(events, 1, "b", "send") == 1000.5);
    assert_true(find_ts(events, 1, "X", "reduce") == 1002.5);
    json_decref(root);

    /* Something else is refused by name, and out is left as it was. */
    snprintf(bad, sizeof bad, "%s/bad", dir);
    f = fopen(bad, "w");
    assert_non_null(f);
    fputs("{\"traceEvents\":[\n{\"ph\":\"X\"}\n", f); /* cut short: no closing line */
    fclose(f);
    parts[1] = bad;
    assert_int_equal(chorus__tjson_merge(out, parts, 2), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "bad"));
    root = json_load_file(out, 0, &err);
    assert_non_null(root);
    json_decref(root);
}

static void test_recorder(void **state)
{
    char path[256], part[300];
    chorus_trace_t *t;
    json_error_t err;
    json_t *root, *events, *e;
    size_t k;
    int calls = 0, sends = 0;
    uint64_t t0;

    (void)state;
    unsetenv("CHORUS_TRACE");
    chorus__config_reload();
    assert_null(chorus__trace_open(0x1234, 0, 1));

    snprintf(path, sizeof path, "%s/run.json", dir);
    setenv("CHORUS_TRACE", path, 1);
    chorus__config_reload();
    t = chorus__trace_open(0x1234, 0, 1);
    assert_non_null(t);
    t0 = chorus__now_ns();
    chorus__trace_add(t, CHORUS_TEV_SEND, 0, 64, t0, t0 + 1500);
    chorus__trace_add(t, CHORUS_TEV_WAIT, -1, 0, t0 + 100, t0 + 900);
    chorus__trace_call(t, "allreduce #1", "tree", 64, t0, t0 + 2000);
    chorus__trace_close(t);
    /* One rank: its part is the whole job, merged and gone. */
    snprintf(part, sizeof part, "%s.%016llx.0", path, 0x1234ull);
    assert_int_not_equal(access(part, F_OK), 0);
    root = json_load_file(path, 0, &err);
    if (root == NULL) fail_msg("%s: line %d: %s", path, err.line, err.text);
    events = json_object_get(root, "traceEvents");
    json_array_foreach(events, k, e)
    {
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (cat != NULL && strcmp(cat, "call") == 0) {
            calls++;
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(e, "args"), "algo")), "tree");
            assert_true(json_number_value(json_object_get(e, "dur")) == 2.0);
        }
        if (cat != NULL && strcmp(cat, "send") == 0) sends++;
    }
    assert_int_equal(calls, 1);
    assert_int_equal(sends, 2); /* begin and end */
    /* 1.5 us, read back from two times printed to the nanosecond (not exact in binary). */
    assert_true(fabs(find_ts(events, 0, "e", "send") - find_ts(events, 0, "b", "send") - 1.5) < 1e-6);
    json_decref(root);
    unsetenv("CHORUS_TRACE");
    chorus__config_reload();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_and_merge),
        cmocka_unit_test(test_recorder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
