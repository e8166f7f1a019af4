/*
 * Unit tests of what chorus_comm_init_env reads from launchers (lib/bootstrap/hostlist.c,
 * slurm.c, pmix.c, env.c): Slurm host lists as scontrol expands them, the root and port of
 * a Slurm step, the precedence of PMIx and CHORUS_LAUNCHER, and the errors for what does
 * not parse. The end-to-end runs are tests/mp/launch_slurm_env.sh (Slurm variables, no
 * PMIx) and tests/mp/launch_mpirun.sh (Open MPI's mpirun and its PMIx server).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/launch.h"
#include "util/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every host of list, space-separated, through chorus__hostlist_nth. */
static void expand(const char *list, char *out, size_t len)
{
    long n, i;
    char host[64];

    assert_int_equal(chorus__hostlist_count(list, &n), CHORUS_SUCCESS);
    out[0] = '\0';
    for (i = 0; i < n; i++) {
        assert_int_equal(chorus__hostlist_nth(list, i, host, sizeof(host)), CHORUS_SUCCESS);
        if (i > 0) strncat(out, " ", len - strlen(out) - 1);
        strncat(out, host, len - strlen(out) - 1);
    }
}

static void test_hostlist_expand(void **state)
{
    /* Expected lists as `scontrol show hostnames` prints them (one per line there). */
    static const char *const cases[][2] = {
        {"node1", "node1"},
        {"a,b,c", "a b c"},
        {"node[1-3]", "node1 node2 node3"},
        {"node[01-04,07]", "node01 node02 node03 node04 node07"},
        {"node[08-10]", "node08 node09 node10"},
        {"node[8-10]", "node8 node9 node10"},
        {"host[0-1],login,gpu[3,5]", "host0 host1 login gpu3 gpu5"},
        {"rack[1-2]-n[0-1]", "rack1-n0 rack1-n1 rack2-n0 rack2-n1"},
        {"[1-2]x", "1x 2x"},
        {"n[007]", "n007"},
    };
    char out[256];
    size_t i;
    (void)state;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expand(cases[i][0], out, sizeof(out));
        if (strcmp(out, cases[i][1]) != 0) fail_msg("%s -> '%s', want '%s'", cases[i][0], out, cases[i][1]);
    }
}

static void test_hostlist_bad(void **state)
{
    static const char *const bad[] = {
        "",          "node[",      "node[1-",    "node[1-2",   "node]",      "node[]",
        "node[a-b]", "node[3-1]",  "node[1,]",   "a,,b",       ",a",         "a,",
        "node[1-2]]", "n[1234567890]", "n[0-999999999]x[0-999999999]",
    };
    char host[64];
    long n;
    size_t i;
    (void)state;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (chorus__hostlist_count(bad[i], &n) != CHORUS_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' was accepted", bad[i]);
    }
    assert_int_equal(chorus__hostlist_count(NULL, &n), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__hostlist_nth("node[1-3]", 3, host, sizeof(host)),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__hostlist_nth("node[1-3]", -1, host, sizeof(host)),
                     CHORUS_ERR_INVALID_ARGUMENT);
    /* A name that does not fit the caller's buffer is an error, never a truncation. */
    assert_int_equal(chorus__hostlist_nth("averyveryverylongname[1-3]", 0, host, 8),
                     CHORUS_ERR_INVALID_ARGUMENT);
}

static void test_slurm_port(void **state)
{
    int p;
    (void)state;

    /* In range, the same for equal ids, different for the steps of a job and for
     * neighbouring jobs. */
    for (unsigned long job = 0; job < 3000; job += 7) {
        for (unsigned long step = 0; step < 4; step++) {
            p = chorus__slurm_port(job, step);
            assert_true(p >= CHORUS_SLURM_PORT_BASE);
            assert_true(p < CHORUS_SLURM_PORT_BASE + CHORUS_SLURM_PORT_SPAN);
            assert_true(p < 32768); /* below the ephemeral ports of connect() */
            assert_int_equal(p, chorus__slurm_port(job, step));
        }
        assert_int_not_equal(chorus__slurm_port(job, 0), chorus__slurm_port(job, 1));
        assert_int_not_equal(chorus__slurm_port(job, 0), chorus__slurm_port(job + 1, 0));
    }
    assert_int_equal(chorus__slurm_port(12345, 2), CHORUS_SLURM_PORT_BASE + (12345 * 37 + 2) % 16000);
}

static const char *const launch_vars[] = {
    "CHORUS_RANK",        "CHORUS_WORLD_SIZE",    "RANK",
    "WORLD_SIZE",         "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",       "SLURM_NTASKS",         "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",  "SLURM_JOB_ID",
    "SLURM_JOBID",        "SLURM_STEP_ID",        "SLURM_STEPID",
    "SLURM_NODEID",       "SLURM_LOCALID",        "PMI_RANK",
    "PMI_SIZE",           "PMIX_NAMESPACE",       "PMIX_RANK",
    "CHORUS_UNIQUE_ID",   "CHORUS_ROOT",          "MASTER_ADDR",
    "MASTER_PORT",        "CHORUS_SECRET",        "CHORUS_LAUNCHER",
};

static void env_clear(void)
{
    for (size_t i = 0; i < sizeof(launch_vars) / sizeof(launch_vars[0]); i++)
        unsetenv(launch_vars[i]);
    setenv("CHORUS_SECRET", "00112233445566778899aabbccddeeff", 1);
    chorus__config_reload();
}

static chorus_status_t from_env(int *rank_p, int *n_p, int *root_p, chorus_id_info_t *info_p)
{
    chorus_unique_id_t id;
    chorus_status_t st;

    chorus__config_reload();
    st = chorus__bootstrap_id_from_env(&id, rank_p, n_p, root_p);
    if (st == CHORUS_SUCCESS && info_p != NULL)
        assert_int_equal(chorus__id_decode(&id, info_p), CHORUS_SUCCESS);
    return st;
}

static void set_slurm_step(const char *procid)
{
    setenv("SLURM_PROCID", procid, 1);
    setenv("SLURM_NTASKS", "16", 1); /* the job's: the step's count wins */
    setenv("SLURM_STEP_NUM_TASKS", "8", 1);
    setenv("SLURM_STEP_NODELIST", "localhost,node[2-4]", 1);
    setenv("SLURM_JOB_NODELIST", "other[1-9]", 1);
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_STEP_ID", "3", 1);
    setenv("SLURM_LOCALID", "1", 1);
}

static void test_slurm_root(void **state)
{
    chorus_id_info_t a, b;
    int rank, n, root;
    uint16_t port = (uint16_t)chorus__slurm_port(4242, 3);
    (void)state;

    env_clear();
    set_slurm_step("5");
    assert_int_equal(from_env(&rank, &n, &root, &a), CHORUS_SUCCESS);
    assert_int_equal(rank, 5);
    assert_int_equal(n, 8);
    assert_int_equal(root, CHORUS_BS_ROOT_RANK0);
    assert_int_equal(ntohs(((struct sockaddr_in *)&a.root_addr)->sin_port), port);
    assert_non_null(strstr(chorus__bootstrap_env_source(), "SLURM_PROCID"));
    assert_non_null(strstr(chorus__bootstrap_env_source(), "local rank 1"));

    /* Task 0 serves it on every interface, and every task agrees on the id. */
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NODEID", "0", 1);
    assert_int_equal(from_env(&rank, &n, &root, &b), CHORUS_SUCCESS);
    assert_int_equal(root, CHORUS_BS_ROOT_ANY);
    assert_int_equal(a.comm_id, b.comm_id);
    assert_memory_equal(&a.root_addr, &b.root_addr, sizeof(a.root_addr));

    /* Task 0 elsewhere than on the first host: said at once. */
    setenv("SLURM_NODEID", "2", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("SLURM_NODEID", "0", 1);

    /* The step's list first, else the job's; a bad list or no job id is an error. */
    unsetenv("SLURM_STEP_NODELIST");
    setenv("SLURM_JOB_NODELIST", "localhost", 1);
    assert_int_equal(from_env(&rank, &n, &root, &b), CHORUS_SUCCESS);
    setenv("SLURM_JOB_NODELIST", "node[1-", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("SLURM_JOB_NODELIST", "localhost", 1);
    unsetenv("SLURM_JOB_ID");
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);

    /* An explicit root wins over the derived one. */
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("CHORUS_ROOT", "127.0.0.1:29999", 1);
    assert_int_equal(from_env(&rank, &n, &root, &b), CHORUS_SUCCESS);
    assert_int_equal(root, CHORUS_BS_ROOT_ADDR);
    assert_int_equal(ntohs(((struct sockaddr_in *)&b.root_addr)->sin_port), 29999);
    env_clear();
}

static void test_launcher_forced(void **state)
{
    int rank, n, root;
    (void)state;

    env_clear();
    setenv("CHORUS_ROOT", "127.0.0.1:29999", 1);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_SUCCESS);
    assert_int_equal(rank, 1);
    setenv("CHORUS_LAUNCHER", "mpi", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_SUCCESS);
    assert_int_equal(rank, 2);
    assert_int_equal(n, 6);
    assert_non_null(strstr(chorus__bootstrap_env_source(), "OMPI_COMM_WORLD_RANK"));
    setenv("CHORUS_LAUNCHER", "slurm", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("CHORUS_LAUNCHER", "lsf", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);

    /* PMIx variables with no server behind them: a build with PMIx reports the failed
     * connection (it never hangs); one without reads mpirun's variables. Forcing mpi
     * skips PMIx either way. */
    unsetenv("CHORUS_LAUNCHER");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("PMIX_NAMESPACE", "chorus-test-none", 1);
    setenv("PMIX_RANK", "2", 1);
    setenv("PMIX_SERVER_URI41", "chorus-test.0;tcp4://127.0.0.1:1", 1);
    setenv("PMIX_SERVER_URI4", "chorus-test.0;tcp4://127.0.0.1:1", 1);
    if (chorus__pmix_built()) {
        assert_int_not_equal(from_env(&rank, &n, &root, NULL), CHORUS_SUCCESS);
    } else {
        assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_SUCCESS);
        assert_int_equal(rank, 2);
    }
    setenv("CHORUS_LAUNCHER", "mpi", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_SUCCESS);
    assert_int_equal(rank, 2);
    unsetenv("PMIX_SERVER_URI41");
    unsetenv("PMIX_SERVER_URI4");
    env_clear();
}

/* mpirun's variables and no root, in a build that cannot ask PMIx: the message says what
 * to do. */
static void test_no_root_message(void **state)
{
    int rank, n, root;
    (void)state;

    env_clear();
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "CHORUS_ROOT"));
    env_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostlist_expand), cmocka_unit_test(test_hostlist_bad),
        cmocka_unit_test(test_slurm_port),      cmocka_unit_test(test_slurm_root),
        cmocka_unit_test(test_launcher_forced), cmocka_unit_test(test_no_root_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
