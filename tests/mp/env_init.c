/*
 * A small job for the launcher tests (mpirun.sh, torchrun.sh, stranger.sh): joins through
 * chorus_comm_init_env() and runs a few collectives whose results are checked exactly.
 *
 *   mp_env_init [--rounds N] [--ready DIR] [--pause FILE]
 *
 * --ready DIR: after the first round, each rank creates DIR/ready.<rank>.
 * --pause FILE: then waits (at most 120 s) for FILE to exist before the other rounds, so a
 * script can do something to the job while it is between collectives.
 * The rank and size the library reports must match the launcher's variables (CHORUS_RANK,
 * RANK or OMPI_COMM_WORLD_RANK, and the matching size) when they are set.
 */
#include "mp/mp_common.h"

#include <getopt.h>
#include <sys/stat.h>

static int failures;

static void expect_env(const char *var, int got, const char *what, int rank)
{
    const char *v = getenv(var);
    if (v != NULL && v[0] != '\0' && atoi(v) != got) {
        printf("FAIL rank %d: %s is %d but %s says %s\n", rank, what, got, var, v);
        failures++;
    }
}

static void round_of_collectives(chorus_comm_t comm, int rank, int n, int round)
{
    enum { COUNT = 1000 };
    int32_t a[COUNT];
    int64_t mine[3], all[3 * 64];
    float b[COUNT];
    for (int i = 0; i < COUNT; i++) a[i] = rank * 100000 + i * 7 + round;
    mp_die_on_error(chorus_allreduce(a, a, COUNT, CHORUS_INT32, CHORUS_SUM, comm, NULL), comm,
                    rank, "allreduce");
    for (int i = 0; i < COUNT; i++) {
        int32_t want = 100000 * (n * (n - 1) / 2) + n * (i * 7 + round);
        if (a[i] != want) {
            printf("FAIL rank %d round %d: allreduce index %d: got %d expected %d\n", rank,
                   round, i, a[i], want);
            failures++;
            break;
        }
    }
    for (int i = 0; i < 3; i++) mine[i] = (int64_t)rank << 40 | (int64_t)(round * 3 + i);
    if (n <= 64) {
        mp_die_on_error(chorus_allgather(mine, all, 3, CHORUS_INT64, comm, NULL), comm, rank,
                        "allgather");
        for (int q = 0; q < n * 3; q++) {
            int64_t want = (int64_t)(q / 3) << 40 | (int64_t)(round * 3 + q % 3);
            if (all[q] != want) {
                printf("FAIL rank %d round %d: allgather index %d: got %lld expected %lld\n",
                       rank, round, q, (long long)all[q], (long long)want);
                failures++;
                break;
            }
        }
    }
    for (int i = 0; i < COUNT; i++) b[i] = rank == n - 1 ? (float)i * 0.25f + (float)round : -1;
    mp_die_on_error(chorus_broadcast(b, b, COUNT, CHORUS_FLOAT32, n - 1, comm, NULL), comm, rank,
                    "broadcast");
    for (int i = 0; i < COUNT; i++) {
        if (b[i] != (float)i * 0.25f + (float)round) {
            printf("FAIL rank %d round %d: broadcast index %d: got %g\n", rank, round, i, b[i]);
            failures++;
            break;
        }
    }
    mp_die_on_error(chorus_barrier(comm), comm, rank, "barrier");
}

static void wait_for_file(const char *path, int rank)
{
    struct stat sb;
    double deadline = mp_now() + 120;
    while (stat(path, &sb) != 0) {
        if (mp_now() > deadline) {
            printf("FAIL rank %d: %s did not appear within 120 s\n", rank, path);
            exit(1);
        }
        usleep(20000);
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"rounds", required_argument, NULL, 'r'},
                                         {"ready", required_argument, NULL, 'd'},
                                         {"pause", required_argument, NULL, 'p'},
                                         {NULL, 0, NULL, 0}};
    const char *ready = NULL, *pause_file = NULL;
    int rounds = 3, opt, rank, n;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 'r') rounds = atoi(optarg);
        else if (opt == 'd') ready = optarg;
        else if (opt == 'p') pause_file = optarg;
        else return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    chorus_comm_t comm = mp_init_env("mp_env_init", &rank, &n);
    expect_env("CHORUS_RANK", rank, "rank", rank);
    expect_env("RANK", rank, "rank", rank);
    expect_env("OMPI_COMM_WORLD_RANK", rank, "rank", rank);
    expect_env("CHORUS_WORLD_SIZE", n, "size", rank);
    expect_env("WORLD_SIZE", n, "size", rank);
    expect_env("OMPI_COMM_WORLD_SIZE", n, "size", rank);
    for (int round = 0; round < rounds; round++) {
        round_of_collectives(comm, rank, n, round);
        if (round > 0 || (ready == NULL && pause_file == NULL)) continue;
        if (ready != NULL) {
            char path[512];
            snprintf(path, sizeof(path), "%s/ready.%d", ready, rank);
            FILE *f = fopen(path, "w");
            if (f != NULL) fclose(f);
        }
        if (pause_file != NULL) wait_for_file(pause_file, rank);
    }
    printf("mp_env_init: rank %d of %d: %d rounds, %s\n", rank, n, rounds,
           failures ? "FAILED" : "all exact");
    chorus_comm_destroy(comm);
    return failures ? 1 : 0;
}
