/*
 * The memory-bandwidth bound of -R runs (issue 38): on one host, a collective on registered
 * memory moves its bytes with the processors' loads and stores, so the machine's memory
 * bandwidth bounds it. This file measures that bandwidth in the same run (every rank copies
 * at once, as the ranks of a collective do) and, for each row timed out of place, prints the
 * busbw the bound allows and the fraction of it the row reached; --json carries both
 * (metadata.memory_bandwidth, rows[].bound_busbw and bound_fraction).
 *
 * The model (bench/README.md, "Registered memory", has the derivation): a memcpy of X bytes reads X and writes X,
 * so the ranks' copies together give a traffic rate M = 2 x (bytes copied per second, all
 * ranks). A call whose single-copy path reads and writes T bytes in all (every rank
 * together) takes at least T / M. With B the row's bytes (nccl-tests' convention) and n
 * ranks, T is:
 *   allgather, alltoall, broadcast   2 n B    every rank reads and writes all of B once
 *   reduce_scatter                   (n+1) B  every rank reads its block of every input
 *                                             (B in all) and writes B / n
 *   allreduce one-shot               n (n+1) B  every rank reads all n vectors, writes one
 *   allreduce two-shot               (3n-1) B   a slice of each vector and its own slice
 *                                             out (B + B/n), then the others' slices in
 *                                             and out (2 (n-1) B / n)
 * allreduce takes the one-shot path up to CHORUS_WIN_ONESHOT_MAX (256 KiB; times 4 / n above
 * 4 ranks) and on 2 ranks, as the library does. The other collectives get no bound.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MEMBW_BYTES ((size_t)64 << 20) /* past any last-level cache of these machines */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes per second that all ranks copy together, each copying MEMBW_BYTES at once; 0 when
 * the measure failed (no memory). Collective. */
static double membw_measure(bench_t *b)
{
    char *src = malloc(MEMBW_BYTES), *dst = malloc(MEMBW_BYTES);
    double best = 1e30, slowest = 0.0;
    int ok = src != NULL && dst != NULL, all_ok = 0;

    if (ok) {
        memset(src, 1, MEMBW_BYTES);
        memset(dst, 2, MEMBW_BYTES);
    }
    (void)chorus_allreduce(&ok, &all_ok, 1, CHORUS_INT32, CHORUS_MIN, b->comm, NULL);
    for (int rep = 0; rep < 3 && all_ok; rep++) {
        double t0;
        (void)chorus_barrier(b->comm);
        t0 = now_s();
        memcpy(dst, src, MEMBW_BYTES);
        if (now_s() - t0 < best) best = now_s() - t0;
    }
    free(src);
    free(dst);
    if (!all_ok) return 0.0;
    /* The slowest rank's best copy: all copied at once for that long at least. */
    (void)chorus_allreduce(&best, &slowest, 1, CHORUS_FLOAT64, CHORUS_MAX, b->comm, NULL);
    return slowest > 0.0 ? (double)MEMBW_BYTES * b->nranks / slowest : 0.0;
}

/* T / B of the table above, or 0 when there is no bound. */
static double traffic_per_byte(coll_t coll, int n, uint64_t bytes)
{
    size_t one_shot_max = (size_t)256 << 10;
    const char *env = getenv("CHORUS_WIN_ONESHOT_MAX");

    if (env != NULL && bench_parse_size(env, &one_shot_max) != 0) one_shot_max = (size_t)256 << 10;
    switch (coll) {
    case COLL_ALLGATHER:
    case COLL_ALLTOALL:
    case COLL_BROADCAST: return 2.0 * n;
    case COLL_REDUCE_SCATTER: return n + 1.0;
    case COLL_ALLREDUCE:
        if (n > 4) one_shot_max = one_shot_max * 4 / (size_t)n;
        if (n == 2 || bytes <= one_shot_max) return (double)n * (n + 1);
        return 3.0 * n - 1;
    default: return 0.0;
    }
}

void bench_membw_report(bench_t *b)
{
    double copy = membw_measure(b), traffic_rate = 2.0 * copy;

    if (b->rank != 0) return;
    b->res.meta.membw_copy_Bps = copy;
    if (copy <= 0.0) {
        printf("# Memory bandwidth     : not measured (no memory for 2 x %zu bytes)\n#\n",
               MEMBW_BYTES);
        return;
    }
    printf("# Memory bandwidth     : %.2f GB/s copied by %d ranks at once (memcpy of %zu MiB "
           "each; %.2f GB/s of reads and writes)\n", copy / 1e9, b->nranks, MEMBW_BYTES >> 20,
           traffic_rate / 1e9);
    printf("# The bound it sets on each row out of place (bench/chorus-bench/membw.c):\n");
    printf("#  %-15s %12s %10s %10s %9s\n", "collective", "size (B)", "busbw", "bound",
           "fraction");
    for (size_t i = 0; i < b->res.nrows; i++) {
        row_t *row = &b->res.rows[i];
        double per = traffic_per_byte(row->coll, b->nranks, row->size), t_min, bound;
        if (row->in_place || per <= 0.0 || row->time_us <= 0.0 || row->size == 0) continue;
        t_min = per * (double)row->size / traffic_rate * 1e6; /* us */
        bound = row->busbw * row->time_us / t_min;
        row->bound_busbw = bound; /* for --json */
        printf("#  %-15s %12llu %10.2f %10.2f %9.2f\n", bench_coll_name(row->coll),
               (unsigned long long)row->size, row->busbw, bound, row->busbw / bound);
    }
    printf("#\n");
}
