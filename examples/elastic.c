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
 *   --grow DIR       after a shrink, grow back to the first size (chorus_comm_grow): rank
 *                    0 makes an id and writes it to DIR/grow.id (128 bytes) with
 *                    DIR/grow.info ("SIZE FIRST_NEW_RANK"), for the new processes to join
 *   --join DIR       a new process: waits for DIR/grow.id, joins as the first new rank
 *                    (--join-index K: the K-th), takes the step to resume from rank 0's
 *                    broadcast, and trains with the others
 * Prints, with epoch times for the scripts:
 *   rank R: step K failed at E: <message>
 *   rank R: shrunk to N ranks (lost: 5) in T s
 *   rank R: grown to N ranks in T s (at E)
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

/* DIR/NAME, written under another name and renamed: a reader never sees half of it. */
static int write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[4096], tmp[4200];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    f = fopen(tmp, "wb");
    if (f == NULL) return -1;
    if (fwrite(data, 1, len, f) != len) {
        fclose(f);
        return -1;
    }
    if (fclose(f) != 0) return -1;
    return rename(tmp, path);
}

/* DIR/<rank>.pid: the pid, then a newline, for the scripts that kill ranks. */
static void write_pid(const char *dir, int rank)
{
    char name[32], text[32];

    snprintf(name, sizeof name, "%d.pid", rank);
    snprintf(text, sizeof text, "%ld\n", (long)getpid());
    (void)write_file(dir, name, text, strlen(text));
}

/* Rank 0's side of a growth: a fresh id (this process serves its rendezvous), written
 * where the new processes look; then every rank of comm takes them in. */
static chorus_status_t grow_back(chorus_comm_t *comm_p, int target, const char *dir, int me)
{
    chorus_unique_id_t id;
    chorus_comm_t bigger;
    chorus_status_t st;
    int rank, size;

    chorus_comm_rank(*comm_p, &rank);
    chorus_comm_size(*comm_p, &size);
    if (rank == 0) {
        char info[64];
        st = chorus_get_unique_id(&id);
        if (st != CHORUS_SUCCESS) return st;
        snprintf(info, sizeof info, "%d %d\n", target, size);
        if (write_file(dir, "grow.info", info, strlen(info)) != 0 ||
            write_file(dir, "grow.id", &id, sizeof id) != 0)
            printf("rank %d: cannot write the id into %s\n", me, dir);
    }
    st = chorus_comm_grow(*comm_p, target - size, rank == 0 ? &id : NULL, &bigger);
    if (st != CHORUS_SUCCESS) return st;
    chorus_comm_destroy(*comm_p);
    *comm_p = bigger;
    return CHORUS_SUCCESS;
}

/* A new process: the id and its rank from dir (waiting for them up to a minute). */
static chorus_status_t join(const char *dir, int index, chorus_comm_t *comm_p)
{
    char path[4096];
    chorus_unique_id_t id;
    int size = 0, first = 0;
    FILE *f = NULL;

    snprintf(path, sizeof path, "%s/grow.id", dir);
    for (int tries = 0; tries < 6000 && (f = fopen(path, "rb")) == NULL; tries++) usleep(10000);
    if (f == NULL || fread(&id, 1, sizeof id, f) != sizeof id) {
        if (f != NULL) fclose(f);
        fprintf(stderr, "join: no id in %s\n", path);
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/grow.info", dir);
    f = fopen(path, "r");
    if (f == NULL || fscanf(f, "%d %d", &size, &first) != 2) {
        if (f != NULL) fclose(f);
        fprintf(stderr, "join: no size in %s\n", path);
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    fclose(f);
    return chorus_comm_init(comm_p, size, &id, first + index);
}

static void *die_later(void *arg)
{
    (void)arg;
    usleep((useconds_t)(die_ms * 1000));
    raise(SIGKILL);
    return NULL;
}

int main(int argc, char **argv)
{
    long steps = 200;
    size_t count = (size_t)4 << 20;
    const char *pid_dir = NULL, *grow_dir = NULL, *join_dir = NULL;
    int die_rank = -1, recoveries = 0, first_rank, rank, size, fresh = 0, join_index = 0;
    int first_size;
    chorus_comm_t comm;
    chorus_status_t st;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0) steps = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--count") == 0) count = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--pid-dir") == 0) pid_dir = argv[i + 1];
        else if (strcmp(argv[i], "--die-in-shrink") == 0)
            sscanf(argv[i + 1], "%d:%ld", &die_rank, &die_ms);
        else if (strcmp(argv[i], "--grow") == 0) grow_dir = argv[i + 1];
        else if (strcmp(argv[i], "--join") == 0) join_dir = argv[i + 1];
        else if (strcmp(argv[i], "--join-index") == 0) join_index = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: see the comment at the top of examples/elastic.c\n");
            return 1;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    st = join_dir != NULL ? join(join_dir, join_index, &comm) : chorus_comm_init_env(&comm);
    if (st != CHORUS_SUCCESS) {
        fprintf(stderr, "init: %s: %s\n", chorus_status_string(st), chorus_last_error());
        return 1;
    }
    chorus_comm_rank(comm, &rank);
    chorus_comm_size(comm, &size);
    first_rank = rank;
    first_size = size;
    int32_t *grad = malloc(count * sizeof *grad);
    if (grad == NULL) return 1;
    long step = 0;
    if (join_dir != NULL) {
        /* The state to resume from: rank 0's step. */
        int64_t from = 0;
        st = chorus_broadcast(&from, &from, 1, CHORUS_INT64, 0, comm, NULL);
        if (st != CHORUS_SUCCESS) {
            printf("rank %d: the state broadcast failed: %s\n", rank, chorus_last_error());
            return 1;
        }
        step = (long)from;
        fresh = 1;
        printf("rank %d: joined %d ranks at %.3f, resuming at step %ld\n", rank, size,
               epoch_s(), step);
    }

    while (step < steps) {
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
        if (chorus_allreduce(&resume, &resume, 1, CHORUS_INT64, CHORUS_MIN, comm, NULL) !=
            CHORUS_SUCCESS)
            continue;
        step = (long)resume;
        if (grow_dir != NULL && size < first_size) {
            /* Back to full size: the new processes join, and take the step from rank 0. */
            double g0 = epoch_s();
            st = grow_back(&comm, first_size, grow_dir, first_rank);
            if (st != CHORUS_SUCCESS) {
                printf("rank %d: grow failed: %s: %s\n", first_rank, chorus_status_string(st),
                       chorus_last_error());
                continue; /* the next call fails too, and the loop shrinks again */
            }
            chorus_comm_rank(comm, &rank);
            chorus_comm_size(comm, &size);
            printf("rank %d: grown to %d ranks in %.3f s (at %.3f)\n", first_rank, size,
                   epoch_s() - g0, epoch_s());
            if (chorus_broadcast(&resume, &resume, 1, CHORUS_INT64, 0, comm, NULL) !=
                CHORUS_SUCCESS)
                continue;
        }
    }
    printf("rank %d: done: %ld steps, %d recoveries, all sums correct\n", first_rank, steps,
           recoveries);
    chorus_comm_destroy(comm);
    free(grad);
    return 0;
}
