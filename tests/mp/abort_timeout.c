/*
 * A blocked call ends on the communicator's own deadline (chorus_comm_set_timeout) and on
 * chorus_comm_abort from another thread, on two ranks where rank 1 never makes the call.
 *
 *   mp_abort_timeout --case timeout|abort [--coll allreduce|allgather]
 *
 * timeout: CHORUS_TIMEOUT stays at its (long) value; rank 0 sets 1 s on its comm and must
 *          get CHORUS_ERR_TIMEOUT, after at least 1 s and long before CHORUS_TIMEOUT.
 * abort:   a second thread of rank 0 aborts the comm 0.5 s into the call; the call must
 *          return CHORUS_ERR_ABORTED soon after, a later call must fail at once with the
 *          same status, and destroy must return.
 * allreduce runs on the arena over shm and on schedules over tcp; allgather on schedules.
 * The bounds are generous (10 s where 1 s is expected): they tell a deadline that works
 * from one that is ignored, not fast from slow. Rank 1 waits for rank 0 to finish (a file
 * would need a shared path; it sleeps instead), then destroys its comm without calling.
 */
#include "chorus.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *abort_later(void *arg)
{
    struct timespec half = {0, 500000000};
    nanosleep(&half, NULL);
    if (chorus_comm_abort((chorus_comm_t)arg) != CHORUS_SUCCESS) {
        fprintf(stderr, "rank 0: chorus_comm_abort failed: %s\n", chorus_last_error());
        exit(1);
    }
    return NULL;
}

static chorus_status_t call(chorus_comm_t comm, int allgather, const int32_t *send, int32_t *recv)
{
    return allgather ? chorus_allgather(send, recv, 1024, CHORUS_INT32, comm, NULL)
                     : chorus_allreduce(send, recv, 1024, CHORUS_INT32, CHORUS_SUM, comm, NULL);
}

int main(int argc, char **argv)
{
    const char *which = NULL, *coll = "allreduce";
    int32_t *send = calloc(2048, sizeof *send), *recv = calloc(2048, sizeof *recv);
    chorus_comm_t comm;
    chorus_status_t st, want;
    pthread_t thread;
    double t0, took;
    int rank, allgather, ok = 1;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--case") == 0) which = argv[i + 1];
        if (strcmp(argv[i], "--coll") == 0) coll = argv[i + 1];
    }
    if (which == NULL || (strcmp(which, "timeout") != 0 && strcmp(which, "abort") != 0) ||
        send == NULL || recv == NULL) {
        fprintf(stderr, "usage: mp_abort_timeout --case timeout|abort [--coll allreduce|allgather]\n");
        return 2;
    }
    allgather = strcmp(coll, "allgather") == 0;
    if (chorus_comm_init_env(&comm) != CHORUS_SUCCESS || chorus_comm_rank(comm, &rank) != 0) {
        fprintf(stderr, "init failed: %s\n", chorus_last_error());
        return 2;
    }
    /* One call that both make, so that the comm is warm. */
    if (call(comm, allgather, send, recv) != CHORUS_SUCCESS) {
        fprintf(stderr, "rank %d: first %s failed: %s\n", rank, coll, chorus_last_error());
        return 1;
    }
    if (rank != 0) {
        sleep(2); /* rank 0 is done by then: its call ends after 1 s or 0.5 s */
        chorus_comm_destroy(comm);
        free(send);
        free(recv);
        return 0;
    }
    if (strcmp(which, "timeout") == 0) {
        want = CHORUS_ERR_TIMEOUT;
        if (chorus_comm_set_timeout(comm, 1.0) != CHORUS_SUCCESS) {
            fprintf(stderr, "rank 0: set_timeout failed: %s\n", chorus_last_error());
            return 1;
        }
    } else {
        want = CHORUS_ERR_ABORTED;
        if (pthread_create(&thread, NULL, abort_later, comm) != 0) return 1;
    }
    t0 = now_s();
    st = call(comm, allgather, send, recv);
    took = now_s() - t0;
    printf("rank 0: %s %s returned %s after %.3f s: %s\n", which, coll, chorus_status_string(st),
           took, chorus_last_error());
    if (st != want) {
        fprintf(stderr, "rank 0: expected %s\n", chorus_status_string(want));
        ok = 0;
    }
    if (took > 10.0 || (want == CHORUS_ERR_TIMEOUT && took < 0.99)) {
        fprintf(stderr, "rank 0: %.3f s is not the deadline asked for\n", took);
        ok = 0;
    }
    if (want == CHORUS_ERR_ABORTED) {
        pthread_join(thread, NULL);
        t0 = now_s();
        st = call(comm, allgather, send, recv);
        if (st != CHORUS_ERR_ABORTED || now_s() - t0 > 1.0) {
            fprintf(stderr, "rank 0: a call after the abort returned %s after %.3f s\n",
                    chorus_status_string(st), now_s() - t0);
            ok = 0;
        }
    }
    chorus_comm_destroy(comm);
    free(send);
    free(recv);
    return ok ? 0 : 1;
}
