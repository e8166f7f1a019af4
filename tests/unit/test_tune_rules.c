/*
 * Unit test of the calibration file's measured decisions (lib/tune/tune_rules.c): rules of
 * this communicator's shape are kept and others skipped, malformed rules are refused with
 * their line, the nearest rule within two size classes is found, rewriting the file keeps
 * every other line, the tuner follows a rule it can run and ignores one it cannot, and
 * chorus_tune_record checks its arguments and round-trips through a new communicator.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tune/tune.h"
#include "util/config.h"
#include "util/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void scoped_defaults(chorus_tune_params_t *p, const char *scope)
{
    chorus__tune_params_default(p);
    snprintf(p->rule_scope, sizeof p->rule_scope, "%s", scope);
}

static void test_rules_in_and_out_of_scope(void **state)
{
    chorus_tune_params_t p;

    (void)state;
    scoped_defaults(&p, "tcp.8x1");
    assert_int_equal(chorus__tune_params_parse("rule.allreduce.tcp.8x1.1048576 = rd 131072\n"
                                               "rule.allreduce.tcp.4x1.1048576 = tree 65536\n"
                                               "rule.allgather.shm.8x1.4096 = bruck 524288\n"
                                               "rule.broadcast.tcp.8x1.65536 = tree 524288\n",
                                               "test", &p),
                     CHORUS_SUCCESS);
    assert_int_equal(p.rule_algo[CHORUS_COLL_ALLREDUCE][20], CHORUS_ALGO_RD);
    assert_int_equal(p.rule_chunk_log2[CHORUS_COLL_ALLREDUCE][20], 17);
    assert_int_equal(p.rule_algo[CHORUS_COLL_BROADCAST][16], CHORUS_ALGO_TREE);
    /* Other shapes: nothing stored. */
    assert_int_equal(p.rule_algo[CHORUS_COLL_ALLGATHER][12], 0);
    for (int c = 0; c < CHORUS_TUNE_NCLASSES; c++)
        if (c != 20) assert_int_equal(p.rule_algo[CHORUS_COLL_ALLREDUCE][c], 0);
    /* Rules alone are not numbers of the model: the quick measurement still runs. */
    assert_int_equal(p.from_file, 0);
}

static void test_rules_malformed(void **state)
{
    static const char *const bad[] = {
        "rule.allreduce.tcp.8x1.1048576 = rd",            /* no chunk */
        "rule.allreduce.tcp.8x1.1048576 = rd 4096 extra", /* trailing token */
        "rule.allreduce.tcp.8x1.1048576 = auto 4096",     /* not an algorithm */
        "rule.allreduce.tcp.8x1.1048576 = rd 0",          /* empty chunk */
        "rule.allreduce.tcp.8x1.0 = rd 4096",             /* empty size */
        "rule.allreduce.tcp.8x1.-5 = rd 4096",            /* negative size */
        "rule.allreduce.tcp.8x1 = rd 4096",               /* no size */
        "rule.frobnicate.tcp.8x1.4096 = rd 4096",         /* unknown collective */
        "rule.allreduce = rd 4096",                       /* no shape */
    };
    chorus_tune_params_t p, before;
    char text[256];

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        scoped_defaults(&p, "tcp.8x1");
        before = p;
        snprintf(text, sizeof text, "# comment\n%s\n", bad[i]);
        assert_int_equal(chorus__tune_params_parse(text, "cal.conf", &p),
                         CHORUS_ERR_INVALID_ARGUMENT);
        /* The message names the file and the line; p is unchanged. */
        assert_non_null(strstr(chorus_last_error(), "cal.conf:2"));
        assert_memory_equal(&p, &before, sizeof p);
    }
}

static void test_rules_nearest(void **state)
{
    chorus_tune_params_t p;
    chorus_algo_t algo = CHORUS_ALGO_AUTO;
    uint64_t chunk = 0;

    (void)state;
    scoped_defaults(&p, "shm.4x1");
    assert_int_equal(chorus__tune_params_parse("rule.allreduce.shm.4x1.65536 = tree 65536\n"
                                               "rule.allreduce.shm.4x1.1048576 = ring 1048576\n",
                                               "test", &p),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus__tune_rule_find(&p, CHORUS_COLL_ALLREDUCE, 65536, &algo, &chunk), 1);
    assert_int_equal(algo, CHORUS_ALGO_TREE);
    assert_int_equal(chunk, 65536);
    /* 2^17 is one class from 2^16: tree. */
    assert_int_equal(chorus__tune_rule_find(&p, CHORUS_COLL_ALLREDUCE, 131072, &algo, &chunk), 1);
    assert_int_equal(algo, CHORUS_ALGO_TREE);
    /* 2^18 is two classes from both: the smaller size's rule. */
    assert_int_equal(chorus__tune_rule_find(&p, CHORUS_COLL_ALLREDUCE, 262144, &algo, &chunk), 1);
    assert_int_equal(algo, CHORUS_ALGO_TREE);
    /* 2^19 is one from 2^20. */
    assert_int_equal(chorus__tune_rule_find(&p, CHORUS_COLL_ALLREDUCE, 524288, &algo, &chunk), 1);
    assert_int_equal(algo, CHORUS_ALGO_RING);
    assert_int_equal(chunk, 1048576);
    /* 2^22 is two above the largest rule; 2^23 three: no rule. */
    assert_int_equal(chorus__tune_rule_find(&p, CHORUS_COLL_ALLREDUCE, 4u << 20, &algo, &chunk), 1);
    assert_int_equal(chorus__tune_rule_find(&p, CHORUS_COLL_ALLREDUCE, 8u << 20, &algo, &chunk), 0);
    assert_int_equal(chorus__tune_rule_find(&p, CHORUS_COLL_ALLREDUCE, 1024, &algo, &chunk), 0);
    /* Another collective has no rules. */
    assert_int_equal(chorus__tune_rule_find(&p, CHORUS_COLL_ALLGATHER, 65536, &algo, &chunk), 0);
}

/* The file's whole text. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = calloc(1, 65536);

    assert_non_null(f);
    assert_non_null(text);
    assert_true(fread(text, 1, 65535, f) < 65535);
    fclose(f);
    return text;
}

static void test_file_set(void **state)
{
    char dir[] = "/tmp/chorus-test-rules-XXXXXX", path[256], *text;
    chorus_tune_params_t p;

    (void)state;
    assert_non_null(mkdtemp(dir));
    /* A missing last directory is created. */
    snprintf(path, sizeof path, "%s/sub/tune.conf", dir);
    assert_int_equal(chorus__tune_file_set(path, "rule.allreduce.tcp.2x1.65536", "rd 524288"),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus__tune_file_set(path, "copy_ns", "0.5"), CHORUS_SUCCESS);
    assert_int_equal(chorus__tune_file_set(path, "rule.allreduce.tcp.2x1.1048576", "ring 131072"),
                     CHORUS_SUCCESS);
    /* Replacing a key keeps the other lines and their order. */
    assert_int_equal(chorus__tune_file_set(path, "rule.allreduce.tcp.2x1.65536", "tree 65536"),
                     CHORUS_SUCCESS);
    text = slurp(path);
    assert_true(text[0] == '#');
    assert_null(strstr(text, "rd 524288"));
    assert_non_null(strstr(text, "copy_ns = 0.5\nrule.allreduce.tcp.2x1.1048576 = ring 131072\n"
                                 "rule.allreduce.tcp.2x1.65536 = tree 65536\n"));
    free(text);
    /* The result is a calibration file the tuner reads. */
    scoped_defaults(&p, "tcp.2x1");
    assert_int_equal(chorus__tune_params_load(path, &p), CHORUS_SUCCESS);
    assert_true(p.copy_ns == 0.5);
    assert_int_equal(p.from_file, 1);
    assert_int_equal(p.rule_algo[CHORUS_COLL_ALLREDUCE][16], CHORUS_ALGO_TREE);
    assert_int_equal(p.rule_algo[CHORUS_COLL_ALLREDUCE][20], CHORUS_ALGO_RING);
    /* An unwritable place fails with a message that names it. */
    assert_int_equal(chorus__tune_file_set("/proc/chorus-no/such/tune.conf", "copy_ns", "1"),
                     CHORUS_ERR_SYSTEM);
    assert_non_null(strstr(chorus_last_error(), "/proc/chorus-no/such"));
    unlink(path);
    snprintf(path, sizeof path, "%s/sub", dir);
    rmdir(path);
    rmdir(dir);
}

/* A tuner of 4 ranks over tcp on one host (no arena) with the given rules. */
static chorus_tune_t *tune_with_rules(const char *rules)
{
    chorus_tune_params_t p;
    chorus_tune_topo_t t;
    chorus_tune_t *tune = NULL;

    scoped_defaults(&p, "tcp.4x1");
    assert_int_equal(chorus__tune_params_parse(rules, "test", &p), CHORUS_SUCCESS);
    memset(&t, 0, sizeof t);
    t.nranks = 4;
    t.nhosts = 1;
    t.local_kind = CHORUS_TUNE_TCP;
    t.nlocal = 4;
    t.cores = 2;
    assert_int_equal(chorus__tune_create_topo(&t, &p, &tune), CHORUS_SUCCESS);
    return tune;
}

static void test_choose_follows_rules(void **state)
{
    chorus_tune_t *plain = tune_with_rules(""), *ruled;
    chorus_tune_choice_t model, c;
    /* A rule that names what the model does not pick at 1 MiB, so that following it shows. */
    chorus_algo_t other;

    (void)state;
    model = chorus__tune_choose(plain, CHORUS_COLL_ALLREDUCE, 1u << 20, 0);
    other = model.algo == CHORUS_ALGO_RABENSEIFNER ? CHORUS_ALGO_SWING : CHORUS_ALGO_RABENSEIFNER;
    ruled = tune_with_rules(other == CHORUS_ALGO_SWING
                                ? "rule.allreduce.tcp.4x1.1048576 = swing 131072\n"
                                : "rule.allreduce.tcp.4x1.1048576 = rabenseifner 131072\n");
    c = chorus__tune_choose(ruled, CHORUS_COLL_ALLREDUCE, 1u << 20, 0);
    assert_int_equal(c.algo, other);
    assert_int_equal(c.chunk_bytes, 131072);
    assert_true(c.us > 0.0);
    /* Within two classes the rule holds too. */
    c = chorus__tune_choose(ruled, CHORUS_COLL_ALLREDUCE, 3u << 20, 0);
    assert_int_equal(c.algo, other);
    /* A chunk forced by the caller wins over the rule's. */
    c = chorus__tune_choose(ruled, CHORUS_COLL_ALLREDUCE, 1u << 20, 65536);
    assert_int_equal(c.algo, other);
    assert_int_equal(c.chunk_bytes, 65536);
    /* Far from every rule, the model decides. */
    c = chorus__tune_choose(ruled, CHORUS_COLL_ALLREDUCE, 64, 0);
    assert_int_equal(c.algo, chorus__tune_choose(plain, CHORUS_COLL_ALLREDUCE, 64, 0).algo);
    chorus__tune_destroy(ruled);
    /* A rule this comm cannot run (the arena, absent here) is ignored for the model's pick. */
    ruled = tune_with_rules("rule.allreduce.tcp.4x1.1048576 = arena 524288\n");
    c = chorus__tune_choose(ruled, CHORUS_COLL_ALLREDUCE, 1u << 20, 0);
    assert_int_equal(c.algo, model.algo);
    chorus__tune_destroy(ruled);
    chorus__tune_destroy(plain);
}

/* A one-rank communicator reading the calibration file at path. */
static chorus_comm_t one_rank_comm(const char *path)
{
    chorus_unique_id_t id;
    chorus_comm_t comm = NULL;

    setenv("CHORUS_TUNE_FILE", path, 1);
    unsetenv("CHORUS_ALGO");
    unsetenv("CHORUS_CHUNK_SIZE");
    chorus__config_reload();
    assert_int_equal(chorus_get_unique_id(&id), CHORUS_SUCCESS);
    assert_int_equal(chorus_comm_init(&comm, 1, &id, 0), CHORUS_SUCCESS);
    return comm;
}

static void test_record_round_trip(void **state)
{
    char path[] = "/tmp/chorus-test-record-XXXXXX";
    chorus_comm_t comm;
    const char *name = NULL, *before = NULL;
    int fd;

    (void)state;
    fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    comm = one_rank_comm(path);
    assert_int_equal(chorus_algorithm_name(comm, "allreduce", 1u << 18, CHORUS_FLOAT32, &before),
                     CHORUS_SUCCESS);
    /* Bad arguments: each refused with a message, the file untouched. */
    assert_int_equal(chorus_tune_record(NULL, "allreduce", 1u << 20, "ring", 65536),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_tune_record(comm, "allreduce", 1u << 20, NULL, 65536),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_tune_record(comm, "allsum", 1u << 20, "ring", 65536),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "allsum"));
    assert_int_equal(chorus_tune_record(comm, "allreduce", 1u << 20, "auto", 65536),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_tune_record(comm, "alltoall", 1u << 20, "rabenseifner", 65536),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_tune_record(comm, "allreduce", 0, "ring", 65536),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_tune_record(comm, "allreduce", 1u << 20, "ring", 0),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(access(path, F_OK), -1);
    /* A rule that differs from the model's pick, recorded and read by a new comm. */
    assert_int_equal(chorus_tune_record(comm, "allreduce", 1u << 20,
                                        strcmp(before, "rd") == 0 ? "ring" : "rd", 131072),
                     CHORUS_SUCCESS);
    chorus_comm_destroy(comm);
    comm = one_rank_comm(path);
    assert_int_equal(chorus_algorithm_name(comm, "allreduce", 1u << 18, CHORUS_FLOAT32, &name),
                     CHORUS_SUCCESS);
    assert_string_equal(name, strcmp(before, "rd") == 0 ? "ring" : "rd");
    chorus_comm_destroy(comm);
    unlink(path);
    unsetenv("CHORUS_TUNE_FILE");
    chorus__config_reload();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_in_and_out_of_scope),
        cmocka_unit_test(test_rules_malformed),
        cmocka_unit_test(test_rules_nearest),
        cmocka_unit_test(test_file_set),
        cmocka_unit_test(test_choose_follows_rules),
        cmocka_unit_test(test_record_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
