/*
 * The flight recorder (lib/core/flight.c) on a 1-rank communicator: the dump on request is
 * JSON whose entries are the calls made, in order, with their count, datatype, reduction,
 * algorithm, state and status; the ring keeps the last CHORUS_FR_ENTRIES (8 here) of 20; an
 * abort writes the record to CHORUS_FR_DIR by itself; and the argument errors of
 * chorus_comm_dump_flight_record.
 */
#include "chorus.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char g_dir[64];

static chorus_comm_t one_rank_comm(void)
{
    chorus_unique_id_t id;
    chorus_comm_t comm = NULL;

    assert_int_equal(chorus_get_unique_id(&id), CHORUS_SUCCESS);
    assert_int_equal(chorus_comm_init(&comm, 1, &id, 0), CHORUS_SUCCESS);
    return comm;
}

/* The one record in g_dir, parsed (and removed). */
static json_t *read_record(void)
{
    char cmd[160], path[256] = "";
    json_error_t err;
    json_t *root;
    FILE *p;

    snprintf(cmd, sizeof cmd, "ls %s/chorus-fr.*.0.json", g_dir);
    p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(path, sizeof path, p));
    pclose(p);
    path[strcspn(path, "\n")] = '\0';
    root = json_load_file(path, 0, &err);
    if (root == NULL) fail_msg("%s: line %d: %s", path, err.line, err.text);
    unlink(path);
    return root;
}

static void test_dump_and_ring(void **state)
{
    chorus_comm_t comm = one_rank_comm();
    float a[32] = {0}, b[32];
    json_t *root, *entries;
    (void)state;

    for (int i = 0; i < 19; i++)
        assert_int_equal(chorus_allreduce(a, b, 3 + (size_t)i, CHORUS_FLOAT32, CHORUS_MAX, comm,
                                          NULL),
                         CHORUS_SUCCESS);
    assert_int_equal(chorus_broadcast(a, b, 5, CHORUS_INT8, 0, comm, NULL), CHORUS_SUCCESS);
    assert_int_equal(chorus_comm_dump_flight_record(comm, g_dir), CHORUS_SUCCESS);
    root = read_record();
    assert_int_equal(json_integer_value(json_object_get(root, "chorus_flight_record")), 1);
    assert_int_equal(json_integer_value(json_object_get(root, "rank")), 0);
    assert_int_equal(json_integer_value(json_object_get(root, "nranks")), 1);
    assert_string_equal(json_string_value(json_object_get(root, "reason")), "request");
    assert_int_equal(json_integer_value(json_object_get(root, "newest")), 20);
    assert_int_equal(json_integer_value(json_object_get(root, "in_flight")), 0);
    entries = json_object_get(root, "entries");
    /* CHORUS_FR_ENTRIES=8: calls 13 to 20, oldest first. */
    assert_int_equal(json_array_size(entries), 8);
    for (size_t k = 0; k < 8; k++) {
        json_t *e = json_array_get(entries, k);
        int seq = 13 + (int)k;
        assert_int_equal(json_integer_value(json_object_get(e, "seq")), seq);
        assert_string_equal(json_string_value(json_object_get(e, "state")), "done");
        assert_string_equal(json_string_value(json_object_get(e, "status")), "success");
        assert_true(json_integer_value(json_object_get(e, "end_ns")) >=
                    json_integer_value(json_object_get(e, "begin_ns")));
        assert_non_null(json_string_value(json_object_get(e, "algo")));
        if (seq < 20) {
            assert_string_equal(json_string_value(json_object_get(e, "op")), "allreduce");
            assert_int_equal(json_integer_value(json_object_get(e, "count")), 3 + seq - 1);
            assert_string_equal(json_string_value(json_object_get(e, "dtype")), "float32");
            assert_string_equal(json_string_value(json_object_get(e, "redop")), "max");
            assert_int_equal(json_integer_value(json_object_get(e, "root")), -1);
        } else {
            assert_string_equal(json_string_value(json_object_get(e, "op")), "broadcast");
            assert_int_equal(json_integer_value(json_object_get(e, "count")), 5);
            assert_string_equal(json_string_value(json_object_get(e, "dtype")), "int8");
            assert_int_equal(json_integer_value(json_object_get(e, "root")), 0);
        }
    }
    json_decref(root);
    assert_int_equal(chorus_comm_destroy(comm), CHORUS_SUCCESS);
}

/* An abort writes the ring to CHORUS_FR_DIR without being asked. A call refused afterwards
 * (the comm failed earlier) never started: it is not recorded. (Calls that fail while
 * running are recorded failed and written by themselves: tests/mp/flight.sh.) */
static void test_abort_writes_record(void **state)
{
    chorus_comm_t comm = one_rank_comm();
    int32_t a[4] = {1, 2, 3, 4}, b[4];
    json_t *root, *entries, *last;
    (void)state;

    assert_int_equal(chorus_allreduce(a, b, 4, CHORUS_INT32, CHORUS_SUM, comm, NULL),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus_comm_abort(comm), CHORUS_SUCCESS);
    root = read_record();
    assert_string_equal(json_string_value(json_object_get(root, "reason")), "abort");
    json_decref(root);
    assert_int_equal(chorus_allreduce(a, b, 4, CHORUS_INT32, CHORUS_SUM, comm, NULL),
                     CHORUS_ERR_ABORTED);
    assert_int_equal(chorus_comm_dump_flight_record(comm, NULL), CHORUS_SUCCESS);
    root = read_record();
    entries = json_object_get(root, "entries");
    assert_int_equal(json_array_size(entries), 1);
    last = json_array_get(entries, 0);
    assert_int_equal(json_integer_value(json_object_get(last, "seq")), 1);
    assert_string_equal(json_string_value(json_object_get(last, "state")), "done");
    json_decref(root);
    assert_int_equal(chorus_comm_destroy(comm), CHORUS_SUCCESS);
}

static void test_dump_errors(void **state)
{
    chorus_comm_t comm = one_rank_comm();
    char longdir[700];
    (void)state;

    assert_int_equal(chorus_comm_dump_flight_record(NULL, g_dir), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "comm is NULL"));
    assert_int_equal(chorus_comm_dump_flight_record(comm, "/nonexistent/dir"), CHORUS_ERR_SYSTEM);
    assert_non_null(strstr(chorus_last_error(), "rank 0: writing the flight record into "
                                                "/nonexistent/dir"));
    memset(longdir, 'd', sizeof longdir - 1);
    longdir[0] = '/';
    longdir[sizeof longdir - 1] = '\0';
    assert_int_equal(chorus_comm_dump_flight_record(comm, longdir), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "too long"));
    assert_int_equal(chorus_comm_destroy(comm), CHORUS_SUCCESS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dump_and_ring),
        cmocka_unit_test(test_abort_writes_record),
        cmocka_unit_test(test_dump_errors),
    };
    int rc;

    /* Read once per process, at the first communicator. */
    snprintf(g_dir, sizeof g_dir, "/tmp/chorus-fr-test.XXXXXX");
    if (mkdtemp(g_dir) == NULL) return 1;
    setenv("CHORUS_FR_DIR", g_dir, 1);
    setenv("CHORUS_FR_ENTRIES", "8", 1);
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(g_dir);
    return rc;
}
