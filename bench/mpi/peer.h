/*
 * The driver shared by the peer benchmarks that chorus-bench is compared with
 * (bench/mpi/ompi-bench.c for Open MPI, bench/gloo/gloo-bench.cc for Gloo): the options,
 * the sizes, the timing, the checks and the table, with the conventions of chorus-bench
 * and nccl-tests (bench/README.md), so that the three tables line up column for column.
 * Only allreduce (sum) and allgather of float32 are measured, the two collectives that all
 * three libraries implement the same way.
 *
 * Each program fills a peer_backend_t with its library's calls and hands it to
 * peer_main(). The header is written in the common subset of C11 and C++17 because the
 * Gloo program is C++.
 */
#ifndef CHORUS_BENCH_PEER_H
#define CHORUS_BENCH_PEER_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { PEER_ALLREDUCE, PEER_ALLGATHER };

/* The library under test. Every call returns 0 on success and nonzero after printing why.
 * coll(): count is the element count of the call (per rank for allgather); in place, send
 * points into recv as bench/README.md describes and the backend passes its own in-place
 * form (MPI_IN_PLACE, no Gloo input). */
typedef struct {
    const char *prog;    /* "ompi-bench" */
    const char *library; /* "Open MPI 4.1.4" */
    int rank, nranks;
    void *ctx;
    int (*coll)(void *ctx, int coll, const float *send, float *recv, size_t count, int in_place);
    int (*barrier)(void *ctx);
    int (*max_double)(void *ctx, double *value);  /* in place, over the ranks */
    int (*sum_u64)(void *ctx, uint64_t *value);   /* in place, over the ranks */
    int (*gather_pids)(void *ctx, int32_t *pids); /* nranks entries, optional (NULL) */
} peer_backend_t;

typedef struct {
    int coll;
    size_t min_bytes, max_bytes, factor;
    int iters, warmup, check;
} peer_opts_t;

static void peer_usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s allreduce|allgather [-b SIZE] [-e SIZE] [-f N] [-n N] [-w N] [-c 0|1]\n"
            "  float32 only; sum for allreduce. Options as chorus-bench (bench/README.md):\n"
            "  -b/-e smallest/largest size (K M G suffixes), -f size factor (>= 2),\n"
            "  -n timed iterations, -w warm-up iterations, -c check the results.\n",
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

/* Parses argv (argv[1] is the collective); returns 0, or -1 after printing the usage. */
static int peer_parse(int argc, char **argv, const char *prog, peer_opts_t *opt)
{
    size_t v;

    opt->coll = PEER_ALLREDUCE;
    opt->min_bytes = opt->max_bytes = (size_t)32 << 20;
    opt->factor = 2;
    opt->iters = 20;
    opt->warmup = 5;
    opt->check = 1;
    if (argc < 2) goto err_usage;
    if (strcmp(argv[1], "allreduce") == 0 || strcmp(argv[1], "all_reduce_perf") == 0)
        opt->coll = PEER_ALLREDUCE;
    else if (strcmp(argv[1], "allgather") == 0 || strcmp(argv[1], "all_gather_perf") == 0)
        opt->coll = PEER_ALLGATHER;
    else
        goto err_usage;
    for (int i = 2; i < argc; i += 2) {
        if (argv[i][0] != '-' || argv[i][1] == '\0' || argv[i][2] != '\0' || i + 1 >= argc)
            goto err_usage;
        if (peer_parse_size(argv[i + 1], &v) != 0) goto err_usage;
        switch (argv[i][1]) {
        case 'b': opt->min_bytes = v; break;
        case 'e': opt->max_bytes = v; break;
        case 'f': opt->factor = v; break;
        case 'n': opt->iters = (int)v; break;
        case 'w': opt->warmup = (int)v; break;
        case 'c': opt->check = v != 0; break;
        case 'd':
        case 'o': break; /* only float32 sum; accepted so that a chorus-bench line runs */
        default: goto err_usage;
        }
    }
    if (opt->factor < 2 || opt->iters < 1 || opt->min_bytes > opt->max_bytes ||
        opt->max_bytes > ((size_t)1 << 33))
        goto err_usage;
    return 0;
err_usage:
    peer_usage(prog);
    return -1;
}

/* Element counts for a size, as chorus-bench splits it: allreduce moves count elements,
 * allgather count/n from each rank, and the size shown is the larger buffer. */
static size_t peer_count(int coll, size_t bytes, int nranks, size_t *shown_p)
{
    size_t count = bytes / sizeof(float);

    if (coll == PEER_ALLGATHER) count /= (size_t)nranks;
    *shown_p = (coll == PEER_ALLGATHER ? count * (size_t)nranks : count) * sizeof(float);
    return count;
}

/* Exact small integers: any order of summation over up to 16k ranks gives the same float. */
static float peer_value(int rank, size_t i)
{
    return (float)((7 * i + 31 * (size_t)rank + 1) % 1025);
}

/* Fills send with this rank's values and recv with 0xa5 bytes, a negative float that no
 * correct result holds; in place, send is the rank's slot of recv. */
static void peer_prepare(const peer_backend_t *be, int coll, size_t count, int in_place,
                         float *sendbuf, float *recvbuf, float **send_p)
{
    size_t recv_count = coll == PEER_ALLGATHER ? count * (size_t)be->nranks : count;
    float *send = sendbuf;

    memset(recvbuf, 0xa5, recv_count * sizeof(float));
    if (in_place) send = coll == PEER_ALLGATHER ? recvbuf + (size_t)be->rank * count : recvbuf;
    for (size_t i = 0; i < count; i++)
        send[i] = peer_value(be->rank, i);
    *send_p = send;
}

static uint64_t peer_count_wrong(const peer_backend_t *be, int coll, size_t count,
                                 const float *recv)
{
    uint64_t wrong = 0;

    if (coll == PEER_ALLGATHER) {
        for (int r = 0; r < be->nranks; r++)
            for (size_t i = 0; i < count; i++)
                wrong += recv[(size_t)r * count + i] != peer_value(r, i);
        return wrong;
    }
    for (size_t i = 0; i < count; i++) {
        double expect = 0.0;
        for (int r = 0; r < be->nranks; r++)
            expect += peer_value(r, i);
        wrong += recv[i] != (float)expect;
    }
    return wrong;
}

static double peer_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    const peer_backend_t *be;
    peer_opts_t opt;
    float *sendbuf, *recvbuf;
    uint64_t wrong_total;
    double bw_sum;
    int bw_count;
} peer_run_t;

/* One half of a row (out of place or in place): the slowest rank's mean time over the
 * timed iterations, then one checked call on fresh data. Returns 0 or -1. */
static int peer_half(peer_run_t *run, size_t count, int in_place)
{
    const peer_backend_t *be = run->be;
    int coll = run->opt.coll;
    float *send =
        in_place ? (coll == PEER_ALLGATHER ? run->recvbuf + (size_t)be->rank * count : run->recvbuf)
                 : run->sendbuf;
    double n = be->nranks, sec, algbw, busbw, usec;
    double bytes = (double)count * sizeof(float) * (coll == PEER_ALLGATHER ? n : 1.0);
    double factor = coll == PEER_ALLGATHER ? (n - 1) / n : 2.0 * (n - 1) / n;
    char wrong_str[32] = "  N/A";

    if (be->barrier(be->ctx) != 0) return -1;
    double start = peer_now();
    for (int it = 0; it < run->opt.iters; it++)
        if (be->coll(be->ctx, coll, send, run->recvbuf, count, in_place) != 0) return -1;
    sec = (peer_now() - start) / run->opt.iters;
    if (be->max_double(be->ctx, &sec) != 0) return -1;
    algbw = sec > 0.0 ? bytes / 1.0e9 / sec : 0.0;
    busbw = algbw * factor;
    run->bw_sum += busbw;
    run->bw_count++;
    if (run->opt.check) {
        uint64_t wrong;
        peer_prepare(be, coll, count, in_place, run->sendbuf, run->recvbuf, &send);
        if (be->coll(be->ctx, coll, send, run->recvbuf, count, in_place) != 0) return -1;
        wrong = peer_count_wrong(be, coll, count, run->recvbuf);
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
               be->prog, run->opt.coll == PEER_ALLGATHER ? "allgather" : "allreduce", be->library,
               be->nranks, run->opt.min_bytes, run->opt.max_bytes, run->opt.factor, run->opt.warmup,
               run->opt.iters, run->opt.check);
        for (int r = 0; r < be->nranks; r++)
            printf("#  Rank %2d Group  0 Pid %6d on %10s device  cpu\n", r,
                   have_pids ? (int)pids[r] : -1, host);
        printf("#\n#%72s%28s\n", "out-of-place", "in-place");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
    }
    free(pids);
}

/* Runs the whole benchmark on this rank; returns the exit status (0, or 1 when a call
 * failed or a result was wrong). */
static int peer_main(const peer_backend_t *be, const peer_opts_t *opt)
{
    peer_run_t run;
    size_t shown, full = peer_count(opt->coll, opt->max_bytes, be->nranks, &shown);
    size_t alloc = (shown + 4095) / 4096 * 4096 + 4096;
    size_t warm_sizes[2] = {opt->max_bytes, opt->min_bytes};
    float *send;
    int status = 1;

    memset(&run, 0, sizeof(run));
    run.be = be;
    run.opt = *opt;
    if (posix_memalign((void **)&run.sendbuf, 4096, alloc) != 0) goto err;
    if (posix_memalign((void **)&run.recvbuf, 4096, alloc) != 0) goto err_free_send;
    /* Timed runs start from valid values, and every page is touched before timing. */
    memset(run.sendbuf, 0, alloc);
    peer_prepare(be, opt->coll, full, 0, run.sendbuf, run.recvbuf, &send);
    peer_header(&run);
    for (int s = 0; s < 2; s++) {
        size_t count = peer_count(opt->coll, warm_sizes[s], be->nranks, &shown);
        for (int it = 0; it < opt->warmup; it++)
            if (be->coll(be->ctx, opt->coll, run.sendbuf, run.recvbuf, count, 0) != 0)
                goto err_free_recv;
    }
    for (size_t size = opt->min_bytes; size <= opt->max_bytes; size *= opt->factor) {
        size_t count = peer_count(opt->coll, size, be->nranks, &shown);
        if (be->rank == 0)
            printf("%12zu  %12zu  %8s  %6s  %6d", shown, count, "float32",
                   opt->coll == PEER_ALLGATHER ? "none" : "sum", -1);
        if (peer_half(&run, count, 0) != 0 || peer_half(&run, count, 1) != 0) goto err_free_recv;
        if (be->rank == 0) {
            printf("\n");
            fflush(stdout);
        }
        if (size == 0) break;
    }
    if (be->rank == 0) {
        printf("# Out of bounds values : %llu %s\n", (unsigned long long)run.wrong_total,
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
