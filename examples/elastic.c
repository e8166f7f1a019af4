/* A training-like loop that survives the death of ranks. The data set is SHARDS shards;
 * each rank owns the shards s with s % size == rank and contributes, at every step, the sum
 * of its shards' "gradients" (int32, so that the check is exact). The allreduced sum does
 * not depend on how many ranks share the work, so every step is checked against the value
 * it must have. When a call fails (a rank died), the survivors shrink the communicator, the
 * shards are dealt again over the ranks that are left, and they resume from the earliest
 * step any of them had not finished (a collective that fails on one rank may have completed
 * on another).
 *
 *   chorusrun -n 8 --on-failure continue -- ./elastic [--steps N] [--count N]
 *
 * Options (for tests/fault/test_fault_shrink.sh):
 *   --steps N        steps to complete (default 200)
 *   --count N        int32 elements per allreduce (default 4M: 16 MiB)
 *   --pid-dir DIR    after the first step, write DIR/<rank>.pid (so a script knows whom to
 *                    kill and that the loop runs)
 *   --die-in-shrink R:MS  rank R (of the first communicator) kills itself MS milliseconds
 *                    after it begins its first shrink: a second death during the recovery
 * Prints, with epoch times for the scripts:
 *   rank R: step K failed at E: <message>
 *   rank R: shrunk to N ranks (lost: 5) in T s
 *   rank R: step K correct on the new communicator at E
 *   rank R: done: N steps, M recoveries, all sums correct
 * Exit status: 0 done, 1 an unrecoverable error, 6 a wrong sum.
 */
#include <chorus.h>

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SHARDS 840 /* divisible by 1..8, so the work is even at any size up to 8 */

static double epoch_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The gradient of shard s at step k, element i: (s + 1) * w(i, k). A rank's contribution is
 * the sum over its shards, that is (sum of s + 1) * w(i, k). */
static int32_t weight(size_t i, long step)
{
    return (int32_t)(1 + (i + (size_t)step) % 5);
}

static int64_t owned_sum(int rank, int size)
{
    int64_t sum = 0;
    for (int s = rank; s < SHARDS; s += size) sum += s + 1;
    return sum;
}

static long die_ms = -1;

static void *die_later(void *arg)
{
    (void)arg;
    usleep((useconds_t)(die_ms * 1000));
    raise(SIGKILL);
    return NULL;
}

static void write_pid(const char *dir, int rank)
{
    char path[4096], tmp[4096];
    FILE *f;

    snprintf(tmp, sizeof tmp, "%s/.%d.tmp", dir, rank);
    snprintf(path, sizeof path, "%s/%d.pid", dir, rank);
    f = fopen(tmp, "w");
    if (f == NULL) return;
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
    rename(tmp, path);
}

int main(int argc, char **argv)
{
    long steps = 200;
    size_t count = (size_t)4 << 20;
    const char *pid_dir = NULL;
    int die_rank = -1, recoveries = 0, first_rank, rank, size, fresh = 0;
    chorus_comm_t comm;
    chorus_status_t st;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0) steps = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--count") == 0) count = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--pid-dir") == 0) pid_dir = argv[i + 1];
        else if (strcmp(argv[i], "--die-in-shrink") == 0)
            sscanf(argv[i + 1], "%d:%ld", &die_rank, &die_ms);
        else {
            fprintf(stderr, "usage: see the comment at the top of examples/elastic.c\n");
            return 1;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    st = chorus_comm_init_env(&comm);
    if (st != CHORUS_SUCCESS) {
        fprintf(stderr, "init: %s: %s\n", chorus_status_string(st), chorus_last_error());
        return 1;
    }
    chorus_comm_rank(comm, &rank);
    chorus_comm_size(comm, &size);
    first_rank = rank;
    int32_t *grad = malloc(count * sizeof *grad);
    if (grad == NULL) return 1;

    for (long step = 0; step < steps;) {
        int64_t mine = owned_sum(rank, size), all = (int64_t)SHARDS * (SHARDS + 1) / 2;
        for (size_t i = 0; i < count; i++) grad[i] = (int32_t)mine * weight(i, step);
        st = chorus_allreduce(grad, grad, count, CHORUS_INT32, CHORUS_SUM, comm, NULL);
        if (st == CHORUS_SUCCESS) {
            for (size_t i = 0; i < count; i++) {
                if (grad[i] != (int32_t)all * weight(i, step)) {
                    printf("rank %d: WRONG sum at step %ld, element %zu: %d, not %d\n", rank,
                           step, i, grad[i], (int32_t)all * weight(i, step));
                    return 6;
                }
            }
            if (fresh) printf("rank %d: step %ld correct on the new communicator at %.3f\n",
                              first_rank, step, epoch_s());
            fresh = 0;
            if (step == 0 && pid_dir != NULL) write_pid(pid_dir, first_rank);
            step++;
            continue;
        }
        /* A rank died (or left): agree with the others on who is left, and go on. */
        printf("rank %d: step %ld failed at %.3f: %s\n", first_rank, step, epoch_s(),
               chorus_last_error());
        if (first_rank == die_rank && recoveries == 0) {
            pthread_t t;
            pthread_create(&t, NULL, die_later, NULL);
        }
        double t0 = epoch_s();
        chorus_comm_t smaller;
        st = chorus_comm_shrink(comm, 0, &smaller);
        if (st != CHORUS_SUCCESS) {
            printf("rank %d: shrink failed: %s: %s\n", first_rank, chorus_status_string(st),
                   chorus_last_error());
            chorus_comm_destroy(comm);
            return 1;
        }
        int lost[8], nlost = 0;
        chorus_comm_failed_ranks(comm, lost, 8, &nlost);
        chorus_comm_destroy(comm);
        comm = smaller;
        chorus_comm_rank(comm, &rank);
        chorus_comm_size(comm, &size);
        printf("rank %d: shrunk to %d ranks (lost:", first_rank, size);
        for (int k = 0; k < nlost && k < 8; k++) printf(" %d", lost[k]);
        printf(") in %.3f s\n", epoch_s() - t0);
        recoveries++;
        fresh = 1;
        /* A collective that fails on one rank may have completed on another (the dead
         * rank's data had reached it): the survivors resume from the earliest step. If
         * this call fails too (another death), the loop shrinks again. */
        int64_t resume = step;
        if (chorus_allreduce(&resume, &resume, 1, CHORUS_INT64, CHORUS_MIN, comm, NULL) ==
            CHORUS_SUCCESS)
            step = (long)resume;
    }
    printf("rank %d: done: %ld steps, %d recoveries, all sums correct\n", first_rank, steps,
           recoveries);
    chorus_comm_destroy(comm);
    free(grad);
    return 0;
}
