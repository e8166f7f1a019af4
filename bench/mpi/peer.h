/*
 * The driver shared by the peer benchmarks that chorus-bench is compared with
 * (bench/mpi/ompi-bench.c for Open MPI, bench/gloo/gloo-bench.cc for Gloo): the options,
 * the sizes, the buffer contents, the timing, the checks and the table, with the
 * conventions of chorus-bench and nccl-tests (bench/README.md), so that the three tables
 * line up row for row and column for column. Every collective that the three libraries
 * share is measured: allreduce, allgather, reduce_scatter, broadcast, reduce, alltoall and
 * barrier, and the rooted and irregular ones gather, scatter, allgatherv, reduce_scatterv
 * and alltoallv (the v-forms with equal blocks, as chorus-bench runs them; a backend may
 * skip those), in float32 with sum and root 0 (-r picks another root).
 *
 * What must match chorus-bench, and where chorus-bench defines it:
 *   counts and in-place layout  bench_counts() in bench/chorus-bench/data.c (peer_counts)
 *   values filled and expected  gen() and expected() in data.c (peer_value, peer_expected)
 *   receive buffers             0xa5 bytes; results compared bit for bit (memcmp)
 *   timing                      bench_row_time() in run.c: barrier, the timed calls, the
 *                               slowest rank's mean; algbw/busbw with the nccl-tests bytes
 *                               and factors (bandwidth() in run.c)
 *   rows                        print_columns(), time_sizes() and print_half() in run.c,
 *                               with the iters column; the barrier is one row of size 0
 *
 * Each program fills a peer_backend_t with its library's calls and hands it to
 * peer_main(). The header is written in the common subset of C11 and C++17 because the
 * Gloo program is C++.
 */
#ifndef CHORUS_BENCH_PEER_H
#define CHORUS_BENCH_PEER_H

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* chorus-bench's collectives in its order (coll_t in bench/chorus-bench/bench.h), less
 * sendrecv, which has no counterpart among the peers' collectives. */
enum {
    PEER_ALLREDUCE,
    PEER_ALLGATHER,
    PEER_REDUCE_SCATTER,
    PEER_BROADCAST,
    PEER_REDUCE,
    PEER_ALLTOALL,
    PEER_BARRIER,
    PEER_GATHER,
    PEER_SCATTER,
    PEER_ALLGATHERV,
    PEER_REDUCE_SCATTERV,
    PEER_ALLTOALLV,
    PEER_NCOLLS
};

static const char *const peer_coll_names[PEER_NCOLLS] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast",  "reduce",          "alltoall",
    "barrier",   "gather",    "scatter",        "allgatherv", "reduce_scatterv", "alltoallv"};

/* The exit status of a collective that a library cannot run here, after a line
 * "skipped: <reason>" (as chorus-bench and the tests use it). */
#define PEER_EXIT_SKIPPED 77

/* Elements of each buffer for one size, exactly as bench_counts() in chorus-bench. In
 * place, send is base + send_off * rank and recv is base + recv_off * rank. */
typedef struct {
    size_t send, recv, param, send_off, recv_off;
} peer_counts_t;

/* One call, with the arguments chorus-bench passes to Chorus for the same row:
 *   count     the call's count argument: every element for allreduce, broadcast and
 *             reduce, per rank for allgather, reduce_scatter, gather, scatter and the
 *             v-forms (every block of a v-form holds count elements, at rank * count),
 *             per peer for alltoall, 0 for barrier;
 *   send/recv out of place, two buffers; in place, both point into one buffer as
 *             chorus-bench lays it out (allgather, allgatherv, gather: send = recv +
 *             rank * count; reduce_scatter, reduce_scatterv, scatter: recv = send +
 *             rank * count, send being the whole input; the others: send == recv;
 *             alltoallv has no in-place form). The backend makes its library's in-place
 *             call (MPI_IN_PLACE on the root of gather and scatter, no Gloo input);
 *   root      broadcast, reduce, gather and scatter. */
typedef struct {
    int coll;
    const float *send;
    float *recv;
    size_t count;
    int root;
    int in_place;
} peer_call_t;

/* The library under test. Every call returns 0 on success and nonzero after printing why. */
typedef struct {
    const char *prog;    /* "ompi-bench" */
    const char *library; /* "Open MPI v4.1.4" */
    int rank, nranks;
    void *ctx;
    /* One collective, PEER_BARRIER included. */
    int (*coll)(void *ctx, const peer_call_t *call);
    /* Optional (NULL): builds what the library binds once to a buffer and size (Gloo's
     * algorithm objects), so that the timed loop that follows measures the calls alone,
     * as those objects' users run them. Called before every series of calls on the same
     * pointers and count (warm-up, timed loop and check); coll() must still work without. */
    int (*setup)(void *ctx, const peer_call_t *call);
    int (*barrier)(void *ctx);                    /* synchronisation before timed loops */
    int (*max_double)(void *ctx, double *value);  /* in place, over the ranks */
    int (*sum_u64)(void *ctx, uint64_t *value);   /* in place, over the ranks */
    int (*gather_pids)(void *ctx, int32_t *pids); /* nranks entries, optional (NULL) */
    /* 1 when an in-place reduce_scatter (and reduce_scatterv) leaves this rank's block at
     * the start of the
     * buffer (MPI's MPI_IN_PLACE rule, Gloo's ReduceScatterHalvingDoubling) rather than at
     * recv (chorus-bench's layout, after nccl-tests): the check then reads it there, so
     * that the timed call stays the library's own in-place call without an extra copy. */
    int in_place_rs_at_start;
} peer_backend_t;

typedef struct {
    int coll;
    size_t min_bytes, max_bytes, factor;
    int iters, warmup, check, root;
} peer_opts_t;

static void peer_usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s COLLECTIVE [-b SIZE] [-e SIZE] [-f N] [-n N] [-w N] [-c 0|1] [-r ROOT]\n"
            "  COLLECTIVE: allreduce allgather reduce_scatter broadcast reduce alltoall barrier\n"
            "  gather scatter allgatherv reduce_scatterv alltoallv (equal blocks)\n"
            "  (nccl-tests names such as all_reduce_perf work too). float32 only, sum for the\n"
            "  reductions. Options as chorus-bench (bench/README.md): -b/-e smallest/largest\n"
            "  size (K M G suffixes), -f size factor (>= 2), -n timed iterations, -w warm-up\n"
            "  iterations, -c check the results, -r root of broadcast, reduce, gather and\n"
            "  scatter (0).\n",
            prog);
}

static int peer_parse_size(const char *text, size_t *bytes_p)
{
    char *end;
    unsigned long long v;
    int shift = 0;

    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *text == '-') return -1;
    if (*end != '\0' && strchr("kKmMgG", *end) != NULL) {
        shift = strchr("kK", *end) != NULL ? 10 : strchr("mM", *end) != NULL ? 20 : 30;
        end++;
    }
    if (*end != '\0' || v > (SIZE_MAX >> shift)) return -1;
    *bytes_p = (size_t)(v << shift);
    return 0;
}

/* Copies a collective name lower-cased, without its underscores and without a trailing
 * "_perf", as chorus-bench compares them, so that the nccl-tests names (all_reduce_perf)
 * are accepted too. */
static void peer_squeeze(const char *text, char *out, size_t size)
{
    size_t n = 0;

    for (; *text != '\0' && strcmp(text, "_perf") != 0 && n + 1 < size; text++)
        if (*text != '_') out[n++] = (char)tolower((unsigned char)*text);
    out[n] = '\0';
}

/* Parses argv (argv[1] is the collective); returns 0, or -1 after printing the usage. */
static int peer_parse(int argc, char **argv, const char *prog, peer_opts_t *opt)
{
    char name[32], want[32];
    size_t v;

    opt->coll = -1;
    opt->min_bytes = opt->max_bytes = (size_t)32 << 20;
    opt->factor = 2;
    opt->iters = 20;
    opt->warmup = 5;
    opt->check = 1;
    opt->root = 0;
    if (argc < 2) goto err_usage;
    peer_squeeze(argv[1], name, sizeof(name));
    for (int c = 0; c < PEER_NCOLLS; c++) {
        peer_squeeze(peer_coll_names[c], want, sizeof(want));
        if (strcmp(name, want) == 0) opt->coll = c;
    }
    if (opt->coll < 0) goto err_usage;
    for (int i = 2; i < argc; i += 2) {
        if (argv[i][0] != '-' || argv[i][1] == '\0' || argv[i][2] != '\0' || i + 1 >= argc)
            goto err_usage;
        /* Only float32 and sum are measured; -d and -o are accepted so that a chorus-bench
         * command line runs. */
        if (argv[i][1] == 'd' || argv[i][1] == 'o') continue;
        if (peer_parse_size(argv[i + 1], &v) != 0) goto err_usage;
        switch (argv[i][1]) {
        case 'b': opt->min_bytes = v; break;
        case 'e': opt->max_bytes = v; break;
        case 'f': opt->factor = v; break;
        case 'n': opt->iters = (int)v; break;
        case 'w': opt->warmup = (int)v; break;
        case 'c': opt->check = v != 0; break;
        case 'r': opt->root = v < 1000000 ? (int)v : -1; break;
        default: goto err_usage;
        }
    }
    if (opt->factor < 2 || opt->iters < 1 || opt->root < 0 || opt->min_bytes > opt->max_bytes ||
        opt->max_bytes > ((size_t)1 << 33))
        goto err_usage;
    return 0;
err_usage:
    peer_usage(prog);
    return -1;
}

static int peer_reduces(int coll)
{
    return coll == PEER_ALLREDUCE || coll == PEER_REDUCE_SCATTER || coll == PEER_REDUCE ||
           coll == PEER_REDUCE_SCATTERV;
}

static int peer_rooted(int coll)
{
    return coll == PEER_BROADCAST || coll == PEER_REDUCE || coll == PEER_GATHER ||
           coll == PEER_SCATTER;
}

/* As bench_coll_has_in_place(): chorus_alltoallv has no in-place form, so no peer times
 * one; a barrier has no buffers. */
static int peer_has_in_place(int coll)
{
    return coll != PEER_BARRIER && coll != PEER_ALLTOALLV;
}

/* The split of count elements (size / 4) among the buffers, as bench_counts(). */
static peer_counts_t peer_counts(int coll, size_t count, int nranks)
{
    size_t n = (size_t)nranks, per = count / n;
    peer_counts_t c;

    c.send = c.recv = c.param = count;
    c.send_off = c.recv_off = 0;
    switch (coll) {
    case PEER_ALLGATHER:
    case PEER_ALLGATHERV:
    case PEER_GATHER:
        c.send = c.param = c.send_off = per;
        c.recv = per * n;
        break;
    case PEER_REDUCE_SCATTER:
    case PEER_REDUCE_SCATTERV:
    case PEER_SCATTER:
        c.send = per * n;
        c.recv = c.param = c.recv_off = per;
        break;
    case PEER_ALLTOALL:
    case PEER_ALLTOALLV:
        c.send = c.recv = per * n;
        c.param = per;
        break;
    case PEER_BARRIER: c.send = c.recv = c.param = 0; break;
    default: break; /* allreduce, broadcast, reduce: count in and out */
    }
    return c;
}

/* The size column: the larger buffer in bytes. */
static size_t peer_shown(const peer_counts_t *c)
{
    return (c->send > c->recv ? c->send : c->recv) * sizeof(float);
}

/* chorus-bench's exact_limit() for float32: sums of values up to it stay exact. */
#define PEER_EXACT_LIMIT ((int64_t)1 << 20)

/* The value rank r holds at index i of its send buffer: gen() of chorus-bench for float32
 * and sum. For the sums, b(i) + 2((r + i) mod n) with b(i) bounded so that the total over
 * the ranks stays exact whatever order a library adds in; for the collectives that move
 * data, (7i + 31r + 1) mod (L + 1). */
static float peer_value(int coll, int nranks, int r, size_t i)
{
    int64_t n = nranks;

    if (peer_reduces(coll)) {
        int64_t b_max = PEER_EXACT_LIMIT / n - (n - 1);
        if (b_max < 0) b_max = 0;
        return (float)((int64_t)(i % (size_t)(b_max + 1)) +
                       2 * (int64_t)((i + (size_t)r) % (size_t)n));
    }
    return (float)((7 * i + 31 * (size_t)r + 1) % (size_t)(PEER_EXACT_LIMIT + 1));
}

/* The sum over the ranks at index i: exact, so the float is the one any order gives. */
static float peer_sum(int coll, int nranks, size_t i)
{
    double s = 0.0;

    for (int r = 0; r < nranks; r++)
        s += peer_value(coll, nranks, r, i);
    return (float)s;
}

/* Element j of this rank's result, as expected() in chorus-bench. */
static float peer_expected(const peer_backend_t *be, int coll, size_t per, int root, size_t j)
{
    int n = be->nranks;

    switch (coll) {
    case PEER_REDUCE_SCATTER:
    case PEER_REDUCE_SCATTERV: return peer_sum(coll, n, (size_t)be->rank * per + j);
    case PEER_BROADCAST: return peer_value(coll, n, root, j);
    case PEER_SCATTER: return peer_value(coll, n, root, (size_t)be->rank * per + j);
    case PEER_ALLGATHER:
    case PEER_ALLGATHERV:
    case PEER_GATHER: return peer_value(coll, n, (int)(j / per), j % per);
    case PEER_ALLTOALL:
    case PEER_ALLTOALLV:
        return peer_value(coll, n, (int)(j / per), (size_t)be->rank * per + j % per);
    default: return peer_sum(coll, n, j); /* allreduce, reduce */
    }
}

/* The pointers of a call on this size, as chorus-bench times it: two buffers out of place,
 * one buffer (recvbuf) laid out with the in-place offsets in place. */
static peer_call_t peer_call(const peer_backend_t *be, const peer_opts_t *opt,
                             const peer_counts_t *c, int in_place, float *sendbuf, float *recvbuf)
{
    peer_call_t call;
    size_t rank = (size_t)be->rank;

    call.coll = opt->coll;
    call.send = in_place ? recvbuf + c->send_off * rank : sendbuf;
    call.recv = in_place ? recvbuf + c->recv_off * rank : recvbuf;
    call.count = c->param;
    call.root = opt->root;
    call.in_place = in_place;
    return call;
}

/* Fills the buffers of a checked call, as bench_prepare(): recv (in place: the whole
 * buffer) with 0xa5 bytes, a negative float that no correct result holds, and send with
 * this rank's values. */
static void peer_prepare(const peer_backend_t *be, const peer_call_t *call, const peer_counts_t *c,
                         float *recvbuf)
{
    size_t base = c->send > c->recv ? c->send : c->recv;
    float *send = (float *)call->send; /* the driver's own buffer, written before the call */

    memset(call->in_place ? recvbuf : call->recv, 0xa5,
           (call->in_place ? base : c->recv) * sizeof(float));
    for (size_t i = 0; i < c->send; i++)
        send[i] = peer_value(call->coll, be->nranks, be->rank, i);
}

/* Result elements of this rank that differ bit for bit from the expected ones, as
 * bench_count_wrong(): reduce and gather write only on the root. */
static uint64_t peer_count_wrong(const peer_backend_t *be, const peer_call_t *call,
                                 const peer_counts_t *c)
{
    const float *result = call->recv;
    uint64_t wrong = 0;

    if ((call->coll == PEER_REDUCE || call->coll == PEER_GATHER) && be->rank != call->root)
        return 0;
    if ((call->coll == PEER_REDUCE_SCATTER || call->coll == PEER_REDUCE_SCATTERV) &&
        call->in_place && be->in_place_rs_at_start)
        result = call->send;
    for (size_t j = 0; j < c->recv; j++) {
        float want = peer_expected(be, call->coll, c->param, call->root, j);
        wrong += memcmp(&result[j], &want, sizeof(float)) != 0;
    }
    return wrong;
}

static double peer_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* algbw and busbw in GB/s with the bytes and factors of nccl-tests, as bandwidth() in
 * chorus-bench: bytes are count * 4, times n for allgather, reduce_scatter, alltoall,
 * gather, scatter and the v-forms (whose count is per rank or per peer), with the factor
 * (n - 1) / n; the barrier moves none. */
static void peer_bandwidth(int coll, int nranks, size_t count, double sec, double *algbw_p,
                           double *busbw_p)
{
    double n = nranks, bytes = (double)count * sizeof(float), factor = 1.0;

    switch (coll) {
    case PEER_ALLREDUCE: factor = 2.0 * (n - 1) / n; break;
    case PEER_ALLGATHER:
    case PEER_REDUCE_SCATTER:
    case PEER_ALLTOALL:
    case PEER_GATHER:
    case PEER_SCATTER:
    case PEER_ALLGATHERV:
    case PEER_REDUCE_SCATTERV:
    case PEER_ALLTOALLV:
        bytes *= n;
        factor = (n - 1) / n;
        break;
    case PEER_BARRIER: bytes = 0.0; break;
    default: break; /* broadcast, reduce: 1 */
    }
    *algbw_p = sec > 0.0 ? bytes / 1.0e9 / sec : 0.0;
    *busbw_p = *algbw_p * factor;
}

typedef struct {
    const peer_backend_t *be;
    peer_opts_t opt;
    float *sendbuf, *recvbuf;
    uint64_t wrong_total;
    double bw_sum;
    int bw_count;
} peer_run_t;

static int peer_setup(const peer_backend_t *be, const peer_call_t *call)
{
    return be->setup != NULL ? be->setup(be->ctx, call) : 0;
}

/* One half of a row (out of place or in place): the slowest rank's mean time over the
 * timed iterations, then one checked call on fresh data. Returns 0 or -1. */
static int peer_half(peer_run_t *run, const peer_counts_t *c, int in_place)
{
    const peer_backend_t *be = run->be;
    peer_call_t call = peer_call(be, &run->opt, c, in_place, run->sendbuf, run->recvbuf);
    double sec, algbw, busbw, usec;
    char wrong_str[32] = "  N/A";

    if (peer_setup(be, &call) != 0 || be->barrier(be->ctx) != 0) return -1;
    double start = peer_now();
    for (int it = 0; it < run->opt.iters; it++)
        if (be->coll(be->ctx, &call) != 0) return -1;
    sec = (peer_now() - start) / run->opt.iters;
    if (be->max_double(be->ctx, &sec) != 0) return -1;
    peer_bandwidth(call.coll, be->nranks, call.count, sec, &algbw, &busbw);
    if (call.coll != PEER_BARRIER) {
        run->bw_sum += busbw;
        run->bw_count++;
    }
    /* A barrier has nothing to check: its #wrong stays N/A, as in chorus-bench. */
    if (run->opt.check && call.coll != PEER_BARRIER) {
        uint64_t wrong;
        peer_prepare(be, &call, c, run->recvbuf);
        if (be->coll(be->ctx, &call) != 0) return -1;
        wrong = peer_count_wrong(be, &call, c);
        if (be->sum_u64(be->ctx, &wrong) != 0) return -1;
        run->wrong_total += wrong;
        snprintf(wrong_str, sizeof(wrong_str), "%5llu", (unsigned long long)wrong);
    }
    usec = sec * 1.0e6;
    if (be->rank == 0)
        printf(usec >= 10000.0 ? "  %7.0f  %6.2f  %6.2f  %5s"
               : usec >= 100.0 ? "  %7.1f  %6.2f  %6.2f  %5s"
                               : "  %7.2f  %6.2f  %6.2f  %5s",
               usec, algbw, busbw, wrong_str);
    return 0;
}

static void peer_header(const peer_run_t *run)
{
    const peer_backend_t *be = run->be;
    int32_t *pids = (int32_t *)calloc((size_t)be->nranks, sizeof(int32_t));
    char host[64] = "?";
    int have_pids = pids != NULL && be->gather_pids != NULL && be->gather_pids(be->ctx, pids) == 0;

    gethostname(host, sizeof(host) - 1);
    if (be->rank == 0) {
        printf("# %s %s (%s): nranks %d minBytes %zu maxBytes %zu step: %zu(factor) "
               "warmup iters: %d iters: %d validation: %d\n#\n# Using devices\n",
               be->prog, peer_coll_names[run->opt.coll], be->library, be->nranks,
               run->opt.min_bytes, run->opt.max_bytes, run->opt.factor, run->opt.warmup,
               run->opt.iters, run->opt.check);
        for (int r = 0; r < be->nranks; r++)
            printf("#  Rank %2d Group  0 Pid %6d on %10s device  cpu\n", r,
                   have_pids ? (int)pids[r] : -1, host);
        printf("#\n# %s: the time column is the slowest rank's time (-a 3)\n",
               peer_coll_names[run->opt.coll]);
        printf("#%72s%28s\n", "out-of-place", "in-place");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %5s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong", "iters");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
    }
    free(pids);
}

/* Warm-up calls at the largest and the smallest size, out of place, as chorus-bench's
 * warm_up(); a barrier has one size. */
static int peer_warm_up(peer_run_t *run)
{
    const peer_backend_t *be = run->be;
    size_t sizes[2] = {run->opt.max_bytes, run->opt.min_bytes};

    for (int s = 0; s < 2; s++) {
        peer_counts_t c = peer_counts(run->opt.coll, sizes[s] / sizeof(float), be->nranks);
        peer_call_t call = peer_call(be, &run->opt, &c, 0, run->sendbuf, run->recvbuf);
        if (peer_setup(be, &call) != 0) return -1;
        for (int it = 0; it < run->opt.warmup; it++)
            if (be->coll(be->ctx, &call) != 0) return -1;
        if (run->opt.coll == PEER_BARRIER) break;
    }
    return 0;
}

/* Runs the whole benchmark on this rank; returns the exit status (0, or 1 when a call
 * failed or a result was wrong, 2 for a root that is not a rank). */
static int peer_main(const peer_backend_t *be, const peer_opts_t *opt)
{
    peer_run_t run;
    /* Both buffers hold the largest size, page-aligned, as chorus-bench's. */
    size_t alloc = (opt->max_bytes + 64 + 4095) / 4096 * 4096;
    int coll = opt->coll, status = 1;

    if (opt->root >= be->nranks) {
        if (be->rank == 0)
            fprintf(stderr, "%s: root %d is not a rank of %d\n", be->prog, opt->root, be->nranks);
        return 2;
    }
    memset(&run, 0, sizeof(run));
    run.be = be;
    run.opt = *opt;
    if (posix_memalign((void **)&run.sendbuf, 4096, alloc) != 0) goto err;
    if (posix_memalign((void **)&run.recvbuf, 4096, alloc) != 0) goto err_free_send;
    /* Every page is touched before timing, as chorus-bench's host_buffer() does. */
    memset(run.sendbuf, 0, alloc);
    memset(run.recvbuf, 0, alloc);
    peer_header(&run);
    if (peer_warm_up(&run) != 0) goto err_free_recv;
    for (size_t size = opt->min_bytes; size <= opt->max_bytes; size *= opt->factor) {
        peer_counts_t c = peer_counts(coll, size / sizeof(float), be->nranks);
        if (be->rank == 0)
            printf("%12zu  %12zu  %8s  %6s  %6d", peer_shown(&c), c.param,
                   coll == PEER_BARRIER ? "none" : "float32", peer_reduces(coll) ? "sum" : "none",
                   peer_rooted(coll) ? opt->root : -1);
        if (peer_half(&run, &c, 0) != 0) goto err_free_recv;
        if (peer_has_in_place(coll)) {
            if (peer_half(&run, &c, 1) != 0) goto err_free_recv;
        } else if (be->rank == 0) {
            printf("  %7s  %6s  %6s  %5s", "-", "-", "-", "-");
        }
        if (be->rank == 0) {
            printf("  %5d\n", opt->iters);
            fflush(stdout);
        }
        /* A barrier has no size: one row is the whole measurement. */
        if (coll == PEER_BARRIER || size == 0 || size > opt->max_bytes / opt->factor) break;
    }
    if (be->rank == 0) {
        printf("#\n# Out of bounds values : %llu %s\n", (unsigned long long)run.wrong_total,
               run.wrong_total == 0 ? "OK" : "FAILED");
        printf("# Avg bus bandwidth    : %g\n#\n",
               run.bw_count > 0 ? run.bw_sum / run.bw_count : 0.0);
        fflush(stdout);
    }
    status = run.wrong_total == 0 ? 0 : 1;
err_free_recv:
    free(run.recvbuf);
err_free_send:
    free(run.sendbuf);
err:
    if (status != 0 && run.wrong_total == 0)
        fprintf(stderr, "%s: rank %d: benchmark failed\n", be->prog, be->rank);
    return status;
}

#endif
