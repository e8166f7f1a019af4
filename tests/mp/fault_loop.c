/*
 * The victim and survivors of the fault-injection tests (tests/fault/test_fault_*.sh):
 * every rank runs int32 allreduces in a loop until one fails, then destroys its
 * communicator and says how it ended. The scripts inject the fault from outside (kill -9,
 * a link taken down) or through --idle-rank (a rank that stops calling).
 *
 *   mp_fault_loop [--count N] [--seconds S] [--pid-dir DIR] [--idle-rank R]
 *                 [--idle-after K] [--idle-seconds S] [--die-signal N] [--linger S]
 *                 [--registered]
 *
 *   --count N        int32 elements per allreduce (default 4M: 16 MiB)
 *   --registered     both buffers from chorus_mem_alloc: peers read them in place, so a
 *                    rank killed mid-call is one whose buffers its peers are reading
 *   --seconds S      give up (exit 1) when no call failed after S seconds (default 60)
 *   --pid-dir DIR    after --idle-after iterations, write DIR/<rank>.pid (the pid, then a
 *                    newline) so the script knows whom to kill and that the loop runs
 *   --idle-rank R    rank R stops calling allreduce after --idle-after iterations
 *                    (default 2) and sleeps --idle-seconds (default 10) before destroying
 *   --die-signal N   instead, the idle rank raises signal N there (9: killed, as kill -9;
 *                    11: a crash, which the flight recorder's handler sees)
 *   --linger S       after a failed call, wait S seconds before destroying: ranks whose
 *                    deadlines pass at nearly the same moment then each see their own
 *                    timeout, not the first one's departure
 *
 * Launched by chorusrun or tests/cluster/cluster.sh (chorus_comm_init_env). Each rank prints
 *   rank R: status S after T s (at E): <message>
 * when a call fails (S the status, as CHORUS_ERR_REMOTE; T the seconds the failing call
 * took; E the epoch time of the failure, for the script's time to detection), then
 *   rank R: destroy returned after T s
 * Exit status: 0 the loop ran --seconds without error (or this is the idle rank);
 * 3 CHORUS_ERR_REMOTE; 4 CHORUS_ERR_TIMEOUT; 5 any other error; 6 a wrong result;
 * 2 bad usage or init failed.
 */
#include "chorus.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    size_t count;
    double seconds;
    const char *pid_dir;
    int idle_rank;
    int idle_after;
    double idle_seconds;
    int die_signal;
    double linger;
    int registered;
} options_t;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double epoch_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse(int argc, char **argv, options_t *o)
{
    *o = (options_t){.count = (size_t)4 << 20, .seconds = 60, .idle_rank = -1, .idle_after = 2,
                     .idle_seconds = 10};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--registered") == 0) {
            o->registered = 1;
            continue;
        }
        if (v == NULL) return -1;
        if (strcmp(a, "--count") == 0) o->count = strtoull(v, NULL, 0);
        else if (strcmp(a, "--seconds") == 0) o->seconds = atof(v);
        else if (strcmp(a, "--pid-dir") == 0) o->pid_dir = v;
        else if (strcmp(a, "--idle-rank") == 0) o->idle_rank = atoi(v);
        else if (strcmp(a, "--idle-after") == 0) o->idle_after = atoi(v);
        else if (strcmp(a, "--idle-seconds") == 0) o->idle_seconds = atof(v);
        else if (strcmp(a, "--die-signal") == 0) o->die_signal = atoi(v);
        else if (strcmp(a, "--linger") == 0) o->linger = atof(v);
        else return -1;
        i++;
    }
    return o->count > 0 ? 0 : -1;
}

static void write_pid(const char *dir, int rank)
{
    char path[4096], tmp[4096];
    FILE *f;

    /* Written under another name and renamed, so the script never reads half a pid. */
    snprintf(tmp, sizeof tmp, "%s/.%d.tmp", dir, rank);
    snprintf(path, sizeof path, "%s/%d.pid", dir, rank);
    f = fopen(tmp, "w");
    if (f == NULL) return;
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
    rename(tmp, path);
}

static const char *status_name(chorus_status_t st)
{
    switch (st) {
    case CHORUS_ERR_REMOTE: return "CHORUS_ERR_REMOTE";
    case CHORUS_ERR_TIMEOUT: return "CHORUS_ERR_TIMEOUT";
    case CHORUS_ERR_ABORTED: return "CHORUS_ERR_ABORTED";
    case CHORUS_ERR_MISMATCH: return "CHORUS_ERR_MISMATCH";
    case CHORUS_ERR_SYSTEM: return "CHORUS_ERR_SYSTEM";
    default: return chorus_status_string(st);
    }
}

static int exit_code(chorus_status_t st)
{
    if (st == CHORUS_ERR_REMOTE) return 3;
    if (st == CHORUS_ERR_TIMEOUT) return 4;
    return 5;
}

/* Every rank contributes rank + 1 + (i mod 7): the sum is exact in int32. */
static int check(const int32_t *buf, size_t count, int nranks)
{
    for (size_t i = 0; i < count; i++) {
        int32_t want = (int32_t)(nranks * (nranks + 1) / 2 + nranks * (int)(i % 7));
        if (buf[i] != want) return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options_t o;
    chorus_comm_t comm;
    chorus_status_t st;
    int rank, nranks, rc = 0;
    double t_end;

    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: see the comment at the top of tests/mp/fault_loop.c\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    st = chorus_comm_init_env(&comm);
    if (st != CHORUS_SUCCESS) {
        printf("init failed: %s: %s\n", chorus_status_string(st), chorus_last_error());
        return 2;
    }
    chorus_comm_rank(comm, &rank);
    chorus_comm_size(comm, &nranks);
    int32_t *send, *recv;
    void *win = NULL;
    if (o.registered) {
        st = chorus_mem_alloc(comm, 2 * o.count * sizeof(int32_t), &win);
        if (st != CHORUS_SUCCESS) {
            printf("rank %d: chorus_mem_alloc: %s: %s\n", rank, chorus_status_string(st),
                   chorus_last_error());
            return 2;
        }
        send = win;
        recv = send + o.count;
    } else {
        send = malloc(o.count * sizeof(int32_t));
        recv = malloc(o.count * sizeof(int32_t));
    }
    if (send == NULL || recv == NULL) {
        printf("rank %d: out of memory\n", rank);
        return 2;
    }
    for (size_t i = 0; i < o.count; i++) send[i] = (int32_t)(rank + 1 + (int)(i % 7));

    t_end = mono_s() + o.seconds;
    for (long it = 0; mono_s() < t_end; it++) {
        if (it == o.idle_after && o.pid_dir != NULL) write_pid(o.pid_dir, rank);
        if (it == o.idle_after && rank == o.idle_rank && o.die_signal > 0) {
            printf("rank %d: raising signal %d at iteration %ld\n", rank, o.die_signal, it);
            fflush(stdout);
            raise(o.die_signal);
        }
        if (it == o.idle_after && rank == o.idle_rank) {
            printf("rank %d: idle from iteration %ld for %.0f s\n", rank, it, o.idle_seconds);
            usleep((useconds_t)(o.idle_seconds * 1e6));
            break;
        }
        double t0 = mono_s();
        st = chorus_allreduce(send, recv, o.count, CHORUS_INT32, CHORUS_SUM, comm, NULL);
        if (st != CHORUS_SUCCESS) {
            printf("rank %d: status %s after %.3f s (at %.3f): %s\n", rank,
                   status_name(st), mono_s() - t0, epoch_s(), chorus_last_error());
            rc = exit_code(st);
            break;
        }
        /* The first results are checked whole: a fault must never pass for success. */
        if (it < 2 && check(recv, o.count, nranks) != 0) {
            printf("rank %d: wrong result in iteration %ld\n", rank, it);
            rc = 6;
            break;
        }
    }
    if (rc == 0 && rank != o.idle_rank) printf("rank %d: no error in %.0f s\n", rank, o.seconds);
    if (rc != 0 && o.linger > 0) usleep((useconds_t)(o.linger * 1e6));
    double t0 = mono_s();
    chorus_comm_destroy(comm); /* frees the window too */
    printf("rank %d: destroy returned after %.3f s\n", rank, mono_s() - t0);
    if (win == NULL) {
        free(send);
        free(recv);
    }
    return rc;
}
