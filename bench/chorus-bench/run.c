/*
 * The timed loops of chorus-bench and rank 0's text tables.
 *
 * For each size: a barrier, then the timed calls (out of place, then in place where the
 * collective has an in-place form), then with -c 1 one checked call on fresh data. Every
 * rank measures its own mean time per call; the times of all ranks are gathered, and the
 * row shows the one that -a asks for (the slowest rank's by default: a collective is done
 * when its slowest rank is done), with the mean, fastest and slowest kept for the latency
 * table and the JSON file.
 *
 * With -G the buffers are device memory and every call is enqueued on one stream, as in
 * nccl-tests: the timed calls go back to back (-z 1: a synchronisation after each) and one
 * stream synchronisation ends the loop before the host clock is read; the checks copy the
 * data in and the result out through host mirrors (gpu.c). --backend nccl makes the same
 * calls through NCCL (nccl.c); the host collectives around them (barriers, the gathered
 * times, the sum of the wrong counts) stay on the Chorus communicator.
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const avg_mode_names[] = {"rank 0's time", "the mean over ranks",
                                             "the fastest rank's time", "the slowest rank's time"};

void bench_fail_text(bench_t *b, chorus_status_t status, const char *what, size_t bytes,
                     const char *text)
{
    fprintf(stderr, "chorus-bench: rank %d: %s failed (%zu bytes): %s: %s\n", b->rank, what, bytes,
            chorus_status_string(status), text);
    fflush(stdout);
    chorus_comm_abort(b->comm);
    chorus_comm_destroy(b->comm);
    exit(1);
}

void bench_fail(bench_t *b, chorus_status_t status, const char *what, size_t bytes)
{
    bench_fail_text(b, status, what, bytes,
                    b->opt.backend == BACKEND_NCCL && bench_nccl_error()[0] != '\0'
                        ? bench_nccl_error()
                        : chorus_last_error());
}

/* The ring exchange of sendrecv: both directions in one group, so that no rank waits for
 * its successor to post a receive first. */
static chorus_status_t run_sendrecv(const bench_t *b, const test_t *t, size_t count,
                                    const void *send, void *recv)
{
    int next = (t->rank + 1) % t->nranks, prev = (t->rank + t->nranks - 1) % t->nranks;
    chorus_status_t status, end_status;

    status = chorus_group_start();
    if (status != CHORUS_SUCCESS) return status;
    status = chorus_send(send, count, t->dtype, next, b->comm, b->stream);
    if (status == CHORUS_SUCCESS)
        status = chorus_recv(recv, count, t->dtype, prev, b->comm, b->stream);
    end_status = chorus_group_end();
    return status != CHORUS_SUCCESS ? status : end_status;
}

/* The v-forms' arrays for blocks of per elements each: counts all per, displacements
 * rank * per, in send and receive buffers alike. Refilled only when per changes, so the
 * timed loop does not pay for it; every rank passes the same arrays, as the matching rules
 * of chorus.h require. */
static void uniform_layout(bench_t *b, size_t per)
{
    if (b->vper == per) return;
    for (int r = 0; r < b->nranks; r++) {
        b->vcounts[r] = per;
        b->vdispls[r] = (size_t)r * per;
    }
    b->vper = per;
}

chorus_status_t bench_run_coll(bench_t *b, const test_t *t, const counts_t *c, const void *send,
                               void *recv)
{
    void *s = b->stream;
    size_t per = c->param_count;

    if (b->opt.backend == BACKEND_NCCL) return bench_nccl_run(b, t, c, send, recv);
    switch (t->coll) {
    case COLL_ALLREDUCE:
        return chorus_allreduce(send, recv, c->param_count, t->dtype, t->op, b->comm, s);
    case COLL_ALLGATHER: return chorus_allgather(send, recv, c->param_count, t->dtype, b->comm, s);
    case COLL_REDUCE_SCATTER:
        return chorus_reduce_scatter(send, recv, c->param_count, t->dtype, t->op, b->comm, s);
    case COLL_BROADCAST:
        return chorus_broadcast(send, recv, c->param_count, t->dtype, t->root, b->comm, s);
    case COLL_REDUCE:
        return chorus_reduce(send, recv, c->param_count, t->dtype, t->op, t->root, b->comm, s);
    case COLL_ALLTOALL: return chorus_alltoall(send, recv, c->param_count, t->dtype, b->comm, s);
    case COLL_SENDRECV: return run_sendrecv(b, t, c->param_count, send, recv);
    case COLL_BARRIER: return chorus_barrier(b->comm);
    case COLL_GATHER: return chorus_gather(send, recv, per, t->dtype, t->root, b->comm, s);
    case COLL_SCATTER: return chorus_scatter(send, recv, per, t->dtype, t->root, b->comm, s);
    case COLL_ALLGATHERV:
        uniform_layout(b, per);
        return chorus_allgatherv(send, recv, per, b->vcounts, b->vdispls, t->dtype, b->comm, s);
    case COLL_REDUCE_SCATTERV:
        uniform_layout(b, per);
        return chorus_reduce_scatterv(send, recv, b->vcounts, t->dtype, t->op, b->comm, s);
    case COLL_ALLTOALLV:
        uniform_layout(b, per);
        return chorus_alltoallv(send, recv, b->vcounts, b->vdispls, b->vcounts, b->vdispls,
                                t->dtype, b->comm, s);
    default: return CHORUS_ERR_INVALID_ARGUMENT;
    }
}

/* The algorithm the library chooses for this call, as the row records it. Point-to-point
 * exchanges have no algorithm to choose; NCCL does not say which it picks. */
static void chosen_algo(bench_t *b, const test_t *t, const counts_t *c, char *out, size_t size)
{
    const char *name = "p2p";
    chorus_status_t status;

    if (t->coll != COLL_SENDRECV && b->opt.backend == BACKEND_NCCL) {
        name = "nccl";
    } else if (t->coll != COLL_SENDRECV) {
        status = chorus_algorithm_name(b->comm, bench_coll_name(t->coll), c->param_count, t->dtype,
                                       &name);
        if (status != CHORUS_SUCCESS) bench_fail(b, status, "chorus_algorithm_name", 0);
    }
    snprintf(out, size, "%s", name);
}

/* The model's time for this call on the comm's choice, for buffers as the row has them
 * (registered with -R 1, in place or not), -1 when there is none. */
static double predicted(const bench_t *b, const test_t *t, const counts_t *c, int in_place)
{
    unsigned flags = (b->opt.registered && !b->opt.device ? CHORUS_PREDICT_REGISTERED : 0u) |
                     (in_place ? CHORUS_PREDICT_IN_PLACE : 0u);
    double us = -1.0;

    if (t->coll == COLL_SENDRECV || b->opt.backend == BACKEND_NCCL ||
        chorus_algorithm_predict_buffers(b->comm, bench_coll_name(t->coll), NULL, c->param_count,
                                         t->dtype, flags, &us) != CHORUS_SUCCESS)
        return -1.0;
    return us;
}

/* Index of name in bench_algo_names, 0 if absent. */
static int algo_index(const char *name)
{
    for (int i = 0; i < BENCH_NALGOS; i++)
        if (name != NULL && strcmp(bench_algo_names[i], name) == 0) return i;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* algbw and busbw in GB/s (10^9 bytes), with the byte counts and factors of nccl-tests. */
static void bandwidth(const test_t *t, const counts_t *c, double sec, double *algbw_p,
                      double *busbw_p)
{
    double n = t->nranks, bytes = (double)c->param_count * (double)chorus_dtype_size(t->dtype);
    double factor = 1.0;

    switch (t->coll) {
    case COLL_ALLREDUCE: factor = 2.0 * (n - 1) / n; break;
    /* nccl-tests gives gather and scatter allgather's bytes and factor (the root moves
     * n - 1 blocks of the n it holds); the v-forms, with equal blocks, their regular
     * counterparts'. */
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL:
    case COLL_GATHER:
    case COLL_SCATTER:
    case COLL_ALLGATHERV:
    case COLL_REDUCE_SCATTERV:
    case COLL_ALLTOALLV:
        bytes *= n;
        factor = (n - 1) / n;
        break;
    case COLL_BARRIER: bytes = 0.0; break;
    default: break; /* broadcast, reduce, sendrecv: factor 1 */
    }
    *algbw_p = sec > 0.0 ? bytes / 1.0e9 / sec : 0.0;
    *busbw_p = *algbw_p * factor;
}

/* In-place alltoall through NCCL's grouped send and receive would overwrite blocks that
 * are still being sent, so that backend times it out of place only. */
static int has_in_place(const bench_t *b, coll_t coll)
{
    return bench_coll_has_in_place(coll) &&
           !(b->opt.backend == BACKEND_NCCL && coll == COLL_ALLTOALL);
}

static void *buffer_at(const test_t *t, void *base, size_t offset)
{
    return (char *)base + offset * (size_t)t->rank * chorus_dtype_size(t->dtype);
}

/* Without -n: one timed call estimates the cost of a call, and the iteration count makes
 * the timed loops of this size last about --time-per-size. Ranks may estimate differently,
 * and every rank must make the same number of calls: they agree on the largest count. */
static int choose_iters(bench_t *b, const test_t *t, const counts_t *c, size_t bytes)
{
    chorus_status_t status;
    int32_t iters;
    double start, sec, budget;

    if (b->opt.iters > 0) return b->opt.iters;
    status = chorus_barrier(b->comm);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, "barrier", bytes);
    start = now_s();
    status = bench_run_coll(b, t, c, b->sendbuf, b->recvbuf);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, bench_coll_name(t->coll), bytes);
    bench_gpu_sync(b, bytes);
    sec = now_s() - start;
    budget = b->opt.time_per_size / (has_in_place(b, t->coll) ? 2.0 : 1.0);
    if (sec <= 0.0 || budget / sec >= BENCH_ITERS_MAX)
        iters = BENCH_ITERS_MAX;
    else if (budget / sec <= BENCH_ITERS_MIN)
        iters = BENCH_ITERS_MIN;
    else
        iters = (int32_t)(budget / sec);
    status = chorus_allreduce(&iters, &iters, 1, CHORUS_INT32, CHORUS_MAX, b->comm, NULL);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, "allreduce of the iteration count", bytes);
    return (int)iters;
}

/* Gathers every rank's mean time and fills the row's time and latency spread. */
static void spread(bench_t *b, double sec, size_t bytes, row_t *row)
{
    chorus_status_t status;
    double sum = 0.0, lo, hi, pick;

    status = chorus_allgather(&sec, b->times, 1, CHORUS_FLOAT64, b->comm, NULL);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, "allgather of the times", bytes);
    lo = hi = b->times[0];
    for (int r = 0; r < b->nranks; r++) {
        sum += b->times[r];
        if (b->times[r] < lo) lo = b->times[r];
        if (b->times[r] > hi) hi = b->times[r];
    }
    switch (b->opt.avg_mode) {
    case AVG_RANK0: pick = b->times[0]; break;
    case AVG_MEAN: pick = sum / b->nranks; break;
    case AVG_MIN: pick = lo; break;
    default: pick = hi; break;
    }
    row->time_us = pick * 1.0e6;
    row->lat_avg_us = sum / b->nranks * 1.0e6;
    row->lat_min_us = lo * 1.0e6;
    row->lat_max_us = hi * 1.0e6;
}

static void print_half(const row_t *row)
{
    char time_str[32], wrong_str[32];

    snprintf(time_str, sizeof(time_str),
             row->time_us >= 10000.0 ? "%7.0f"
             : row->time_us >= 100.0 ? "%7.1f"
                                     : "%7.2f",
             row->time_us);
    if (row->wrong < 0)
        snprintf(wrong_str, sizeof(wrong_str), "%5s", "N/A");
    else
        snprintf(wrong_str, sizeof(wrong_str), "%5lld", (long long)row->wrong);
    printf("  %7s  %6.2f  %6.2f  %5s", time_str, row->algbw, row->busbw, wrong_str);
}

void bench_row_init(bench_t *b, const test_t *t, const counts_t *c, int in_place, uint64_t shown,
                    int iters, row_t *row)
{
    *row = (row_t){.coll = t->coll,
                   .has_dtype = t->coll != COLL_BARRIER,
                   .has_op = bench_coll_reduces(t->coll),
                   .has_root = bench_coll_rooted(t->coll),
                   .dtype = t->dtype,
                   .op = t->op,
                   .root = t->root,
                   .in_place = in_place,
                   .size = shown,
                   .count = c->param_count,
                   .wrong = -1,
                   .iters = iters,
                   .predicted_us = predicted(b, t, c, in_place),
                   .pass = algo_index(b->pass_algo)};
    chosen_algo(b, t, c, row->algo, sizeof(row->algo));
}

void bench_row_time(bench_t *b, const test_t *t, const counts_t *c, row_t *row)
{
    void *send = row->in_place ? buffer_at(t, b->recvbuf, c->send_inplace_offset) : b->sendbuf;
    void *recv = row->in_place ? buffer_at(t, b->recvbuf, c->recv_inplace_offset) : b->recvbuf;
    chorus_status_t status;
    double start, sec;

    status = chorus_barrier(b->comm);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, "barrier", row->size);
    start = now_s();
    for (int iter = 0; iter < row->iters; iter++) {
        status = bench_run_coll(b, t, c, send, recv);
        if (status != CHORUS_SUCCESS) bench_fail(b, status, bench_coll_name(t->coll), row->size);
        if (b->opt.blocking && b->gpu != NULL) bench_gpu_sync(b, row->size);
    }
    bench_gpu_sync(b, row->size);
    sec = (now_s() - start) / row->iters;
    spread(b, sec, row->size, row);
    bandwidth(t, c, row->time_us * 1.0e-6, &row->algbw, &row->busbw);
}

void bench_row_check(bench_t *b, const test_t *t, const counts_t *c, row_t *row)
{
    chorus_status_t status;
    uint64_t wrong;
    void *send, *recv;

    if (!b->opt.check || t->coll == COLL_BARRIER) return;
    bench_gpu_prepare(b, t, c, row->in_place, &send, &recv);
    status = bench_run_coll(b, t, c, send, recv);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, bench_coll_name(t->coll), row->size);
    wrong = bench_count_wrong(t, c, bench_gpu_result(b, t, c, recv));
    status = chorus_allreduce(&wrong, &wrong, 1, CHORUS_UINT64, CHORUS_SUM, b->comm, NULL);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, "allreduce of the check", row->size);
    row->wrong = (int64_t)wrong;
    b->res.wrong_total += wrong;
}

/* One half of a line: the timed loop, then (with -c 1) one checked call on fresh data. */
static void bench_time(bench_t *b, const test_t *t, const counts_t *c, int in_place, uint64_t shown,
                       int iters)
{
    row_t row;

    bench_row_init(b, t, c, in_place, shown, iters, &row);
    bench_row_time(b, t, c, &row);
    bench_row_check(b, t, c, &row);
    if (t->coll != COLL_BARRIER) {
        b->res.busbw_sum += row.busbw;
        b->res.busbw_count++;
    }
    if (b->rank == 0) {
        if (bench_results_add(&b->res, &row) != 0)
            bench_fail(b, CHORUS_ERR_NO_MEMORY, "allocation", 0);
        print_half(&row);
    }
}

/* Runs warm-up iterations at the largest and the smallest size, as nccl-tests does. */
static void warm_up(bench_t *b, const test_t *t)
{
    size_t es = chorus_dtype_size(t->dtype);
    size_t sizes[2] = {b->opt.max_bytes, b->opt.min_bytes};

    for (int s = 0; s < 2; s++) {
        counts_t c = bench_counts(t->coll, sizes[s] / es, t->nranks);
        for (int i = 0; i < b->opt.warmup; i++) {
            chorus_status_t status = bench_run_coll(b, t, &c, b->sendbuf, b->recvbuf);
            if (status != CHORUS_SUCCESS) bench_fail(b, status, "warm-up", sizes[s]);
        }
        bench_gpu_sync(b, sizes[s]);
        if (t->coll == COLL_BARRIER) break;
    }
}

static void print_columns(const bench_t *b, coll_t coll)
{
    if (b->rank != 0) return;
    printf("#\n# %s: the time column is %s (-a %d)%s%s\n", bench_coll_name(coll),
           avg_mode_names[b->opt.avg_mode], (int)b->opt.avg_mode,
           b->pass_algo != NULL ? "; --algo all pass: " : "",
           b->pass_algo != NULL ? b->pass_algo : "");
    printf("#%72s%28s\n", "out-of-place", "in-place");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %5s%s\n", "size",
           "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
           "busbw", "#wrong", "iters", b->pass_algo != NULL ? "  algo          pred(us)" : "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
    fflush(stdout);
}

/* The OSU-style table: for the small sizes, the spread of the per-rank mean times. */
static void print_latency(const bench_t *b, size_t first_row)
{
    const results_t *r = &b->res;
    int header = 0;

    if (b->rank != 0) return;
    for (size_t i = first_row; i < r->nrows; i++) {
        const row_t *row = &r->rows[i];
        if (row->size > b->opt.lat_max) continue;
        if (!header) {
            printf("#\n# %s latency across ranks, sizes <= %zu B: mean, fastest and slowest "
                   "rank's time per call (us)\n",
                   bench_coll_name(row->coll), b->opt.lat_max);
            printf("# %10s  %8s  %6s  %12s  %9s  %9s  %9s  %5s\n", "size (B)", "type", "redop",
                   "placement", "avg", "min", "max", "iters");
            header = 1;
        }
        printf("  %10llu  %8s  %6s  %12s  %9.2f  %9.2f  %9.2f  %5d\n",
               (unsigned long long)row->size,
               row->has_dtype ? chorus_dtype_name(row->dtype) : "none",
               row->has_op ? chorus_op_name(row->op) : "none",
               row->in_place ? "in-place" : "out-of-place", row->lat_avg_us, row->lat_min_us,
               row->lat_max_us, row->iters);
    }
    fflush(stdout);
}

static void time_sizes(bench_t *b, const test_t *t)
{
    size_t es = chorus_dtype_size(t->dtype);
    int rooted = bench_coll_rooted(t->coll), in_place = has_in_place(b, t->coll);
    const char *op_name = bench_coll_reduces(t->coll) ? chorus_op_name(t->op) : "none";

    warm_up(b, t);
    for (size_t size = b->opt.min_bytes; size <= b->opt.max_bytes;) {
        counts_t c = bench_counts(t->coll, size / es, t->nranks);
        uint64_t shown = (c.send_count > c.recv_count ? c.send_count : c.recv_count) * es;
        size_t next = b->opt.factor > 1 ? size * b->opt.factor : size + b->opt.step_bytes;
        char algo[BENCH_ALGO_NAME_BYTES];
        int iters;

        /* A forced pass of --algo all times only what its algorithm runs: where the library
         * falls back to another, that one has its own pass. Every rank sees the same. */
        chosen_algo(b, t, &c, algo, sizeof(algo));
        if (b->pass_algo != NULL && strcmp(b->pass_algo, "auto") != 0 &&
            strcmp(b->pass_algo, algo) != 0) {
            if (t->coll == COLL_BARRIER || next <= size) break;
            size = next;
            continue;
        }
        iters = choose_iters(b, t, &c, shown);
        if (b->rank == 0)
            printf("%12llu  %12zu  %8s  %6s  %6d", (unsigned long long)shown, c.param_count,
                   t->coll == COLL_BARRIER ? "none" : chorus_dtype_name(t->dtype), op_name,
                   rooted ? t->root : -1);
        bench_time(b, t, &c, 0, shown, iters);
        if (in_place)
            bench_time(b, t, &c, 1, shown, iters);
        else if (b->rank == 0)
            printf("  %7s  %6s  %6s  %5s", "-", "-", "-", "-");
        if (b->rank == 0) {
            printf("  %5d", iters);
            if (b->pass_algo != NULL)
                printf("  %-13s %9.1f", algo, b->res.rows[b->res.nrows - 1].predicted_us);
            printf("\n");
            fflush(stdout);
        }
        /* A barrier has no size: one line is the whole measurement. */
        if (t->coll == COLL_BARRIER) break;
        if (next <= size) break;
        size = next;
    }
}

static void run_coll_tests(bench_t *b, coll_t coll)
{
    int reduces = bench_coll_reduces(coll), moves_data = coll != COLL_BARRIER;
    int first_dtype = b->opt.all_dtypes && moves_data ? 0 : (int)b->opt.dtype;
    int last_dtype = b->opt.all_dtypes && moves_data ? CHORUS_NUM_DTYPES - 1 : (int)b->opt.dtype;
    int first_op = b->opt.all_ops && reduces ? 0 : (int)b->opt.op;
    int last_op = b->opt.all_ops && reduces ? CHORUS_NUM_OPS - 1 : (int)b->opt.op;
    size_t first_row = b->res.nrows;

    if (b->opt.backend == BACKEND_NCCL && coll == COLL_BARRIER) {
        if (b->rank == 0) printf("#\n# barrier: NCCL has no barrier: skipped\n");
        return;
    }
    /* Every rank decides alike (the options are the same everywhere), so no rank waits. */
    if (b->opt.device && bench_coll_host_only(coll)) {
        if (b->rank == 0)
            printf("#\n# %s: Chorus runs it on host memory only: skipped with -G\n",
                   bench_coll_name(coll));
        return;
    }
    print_columns(b, coll);
    for (int d = first_dtype; d <= last_dtype; d++) {
        for (int o = first_op; o <= last_op; o++) {
            test_t t = {coll, (chorus_dtype_t)d, (chorus_op_t)o, b->opt.root, b->rank, b->nranks};
            time_sizes(b, &t);
        }
    }
    print_latency(b, first_row);
}

void bench_run(bench_t *b)
{
    if (!b->opt.all_colls) {
        run_coll_tests(b, b->opt.coll);
        return;
    }
    for (int c = 0; c < COLL_COUNT; c++)
        run_coll_tests(b, (coll_t)c);
}

/* Nonzero if two rows time the same call (collective, type, op, placement, size). */
static int same_call(const row_t *x, const row_t *y)
{
    return x->coll == y->coll && x->dtype == y->dtype && x->op == y->op &&
           x->in_place == y->in_place && x->size == y->size;
}

void bench_print_picks(const bench_t *b)
{
    const results_t *r = &b->res;
    int header = 0, misses = 0;

    if (b->rank != 0) return;
    for (size_t i = 0; i < r->nrows; i++) {
        const row_t *pick = &r->rows[i], *best = NULL, *same = NULL;
        if (pick->pass != 0 || pick->in_place) continue;
        for (size_t j = 0; j < r->nrows; j++) {
            const row_t *f = &r->rows[j];
            if (f->pass == 0 || !same_call(f, pick)) continue;
            if (best == NULL || f->time_us < best->time_us) best = f;
            /* calibrate times each algorithm at several chunks: its fastest counts. */
            if (strcmp(f->algo, pick->algo) == 0 && (same == NULL || f->time_us < same->time_us))
                same = f;
        }
        if (best == NULL) continue;
        if (!header) {
            printf("#\n# --algo all: the tuner's pick (auto) against the fastest forced "
                   "algorithm, out of place (medians of the interleaved rounds).\n# choice = the "
                   "pick's own forced time / the best forced time (the quality of the "
                   "choice);\n# auto = the auto variant's time / the best forced time (adds "
                   "the noise of a second measurement)\n");
            printf("# %10s  %14s  %-13s %9s %9s  %-13s %9s  %6s  %6s\n", "size (B)", "collective",
                   "pick", "time(us)", "pred(us)", "best forced", "time(us)", "choice", "auto");
            header = 1;
        }
        double ratio = best->time_us > 0.0 ? pick->time_us / best->time_us : 1.0;
        /* A pick that no forced pass measured (the forced pass fell back) is judged by the
         * auto pass itself. */
        double choice = same != NULL && best->time_us > 0.0 ? same->time_us / best->time_us : ratio;
        misses += choice > 1.10;
        printf("  %10llu  %14s  %-13s %9.1f %9.1f  %-13s %9.1f  %6.3f  %6.3f%s\n",
               (unsigned long long)pick->size, bench_coll_name(pick->coll), pick->algo,
               pick->time_us, pick->predicted_us, best->algo, best->time_us, choice, ratio,
               choice > 1.10 ? "  > 1.10" : "");
    }
    if (header) printf("# sizes where the choice is more than 10%% slower: %d\n", misses);
    fflush(stdout);
}
