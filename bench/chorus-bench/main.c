/*
 * chorus-bench: bandwidth and latency of Chorus collectives, in the style of nccl-tests.
 *
 *   chorusrun -n 4 -- chorus-bench allreduce -b 8 -e 64M -f 4 -c 1
 *
 * Every rank runs it; rank 0 prints the table. The columns, the size conventions and the
 * bus bandwidth factors are those of nccl-tests (see bench/README.md), so that numbers can
 * be compared with NCCL's. The process exits non-zero when a check found a wrong value or
 * a call failed.
 */
#include "bench.h"
#include "util/config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    coll_t coll;
    size_t min_bytes, max_bytes, step_bytes;
    size_t factor; /* > 1: multiply the size; 1: add step_bytes */
    int iters, warmup, check, root;
    int all_dtypes, all_ops;
    chorus_dtype_t dtype;
    chorus_op_t op;
} options_t;

typedef struct {
    options_t opt;
    chorus_comm_t comm;
    int rank, nranks;
    void *sendbuf, *recvbuf;
    double bw_sum;
    int bw_count;
    uint64_t wrong_total;
} bench_t;

static const char *const coll_names[COLL_COUNT] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall",
};

static const char *const dtype_aliases[][2] = {
    {"half", "float16"}, {"fp16", "float16"},   {"bf16", "bfloat16"}, {"float", "float32"},
    {"fp32", "float32"}, {"double", "float64"}, {"int", "int32"},     {"char", "int8"},
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: chorus-bench COLLECTIVE [options]    (run on every rank, e.g. under chorusrun)\n"
        "       chorus-bench --help-env\n"
        "COLLECTIVE: allreduce allgather reduce_scatter broadcast reduce alltoall\n"
        "options (as nccl-tests):\n"
        "  -b, --minbytes SIZE   smallest size in bytes, K/M/G suffixes (default 32M)\n"
        "  -e, --maxbytes SIZE   largest size (default 32M)\n"
        "  -f, --stepfactor N    multiply the size by N at each step\n"
        "  -i, --stepbytes SIZE  else add SIZE at each step (default 1M)\n"
        "  -n, --iters N         timed iterations per size (default 20)\n"
        "  -w, --warmup_iters N  warm-up iterations (default 5)\n"
        "  -c, --check 0|1       check the results (default 1)\n"
        "  -d, --datatype TYPE   int8 uint8 int32 uint32 int64 uint64 float16 bfloat16\n"
        "                        float32 float64, or all (default float32)\n"
        "  -o, --op OP           sum prod min max avg, or all (default sum)\n"
        "  -r, --root N          root of broadcast and reduce (default 0)\n"
        "  -h, --help            this help\n"
        "      --help-env        the CHORUS_* environment variables\n");
}

/* Sizes as nccl-tests reads them: K, M and G are powers of 1024. */
static int parse_size(const char *text, size_t *bytes_p)
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
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' || v > (SIZE_MAX >> shift)) return -1;
    *bytes_p = (size_t)(v << shift);
    return 0;
}

static int parse_int(const char *text, int min, int *value_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > 1000000000) return -1;
    *value_p = (int)v;
    return 0;
}

static int parse_dtype(const char *text, options_t *opt)
{
    if (strcasecmp(text, "all") == 0) {
        opt->all_dtypes = 1;
        return 0;
    }
    for (size_t i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++)
        if (strcasecmp(text, dtype_aliases[i][0]) == 0) text = dtype_aliases[i][1];
    for (int d = 0; d < CHORUS_NUM_DTYPES; d++) {
        const char *name = chorus_dtype_name((chorus_dtype_t)d);
        if (name != NULL && strcasecmp(text, name) == 0) {
            opt->dtype = (chorus_dtype_t)d;
            return 0;
        }
    }
    return -1;
}

static int parse_op(const char *text, options_t *opt)
{
    if (strcasecmp(text, "all") == 0) {
        opt->all_ops = 1;
        return 0;
    }
    for (int o = 0; o < CHORUS_NUM_OPS; o++) {
        const char *name = chorus_op_name((chorus_op_t)o);
        if (name != NULL && strcasecmp(text, name) == 0) {
            opt->op = (chorus_op_t)o;
            return 0;
        }
    }
    return -1;
}

/* Copies a collective name without its underscores and without a trailing "_perf", so that
 * the nccl-tests names (all_reduce, all_reduce_perf) are accepted too. */
static void squeeze_name(const char *text, char *out, size_t size)
{
    size_t n = 0;

    for (; *text != '\0' && strcmp(text, "_perf") != 0 && n < size - 1; text++)
        if (*text != '_') out[n++] = *text;
    out[n] = '\0';
}

static int parse_coll(const char *text, coll_t *coll_p)
{
    char name[32], want[32];

    squeeze_name(text, name, sizeof(name));
    for (int c = 0; c < COLL_COUNT; c++) {
        squeeze_name(coll_names[c], want, sizeof(want));
        if (strcmp(name, want) == 0) {
            *coll_p = (coll_t)c;
            return 0;
        }
    }
    return -1;
}

/* Returns 0 to run, 1 when a help text was printed, -1 on a usage error. */
static int parse_options(int argc, char **argv, options_t *opt)
{
    static const struct option longs[] = {
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"stepbytes", required_argument, NULL, 'i'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"root", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {"help-env", no_argument, NULL, 'E'},
        {NULL, 0, NULL, 0},
    };
    int c, factor = 1, bad;

    *opt = (options_t){.coll = COLL_COUNT,
                       .min_bytes = 32 << 20,
                       .max_bytes = 32 << 20,
                       .step_bytes = 1 << 20,
                       .factor = 1,
                       .iters = 20,
                       .warmup = 5,
                       .check = 1,
                       .dtype = CHORUS_FLOAT32,
                       .op = CHORUS_SUM};
    while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:r:h", longs, NULL)) != -1) {
        switch (c) {
        case 'b': bad = parse_size(optarg, &opt->min_bytes); break;
        case 'e': bad = parse_size(optarg, &opt->max_bytes); break;
        case 'i': bad = parse_size(optarg, &opt->step_bytes); break;
        case 'f': bad = parse_int(optarg, 1, &factor); break;
        case 'n': bad = parse_int(optarg, 1, &opt->iters); break;
        case 'w': bad = parse_int(optarg, 0, &opt->warmup); break;
        case 'c': bad = parse_int(optarg, 0, &opt->check); break;
        case 'r': bad = parse_int(optarg, 0, &opt->root); break;
        case 'd': bad = parse_dtype(optarg, opt); break;
        case 'o': bad = parse_op(optarg, opt); break;
        case 'h': usage(stdout); return 1;
        case 'E': chorus__config_print(stdout); return 1;
        default: usage(stderr); return -1;
        }
        if (bad) {
            fprintf(stderr, "chorus-bench: invalid value '%s' for -%c\n", optarg, c);
            return -1;
        }
    }
    opt->factor = (size_t)factor;
    if (optind != argc - 1 || parse_coll(argv[optind], &opt->coll) != 0) {
        if (optind < argc) fprintf(stderr, "chorus-bench: unknown collective '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    if (opt->min_bytes > opt->max_bytes || (opt->factor == 1 && opt->step_bytes == 0)) {
        fprintf(stderr, "chorus-bench: need minbytes <= maxbytes and a step that grows\n");
        return -1;
    }
    return 0;
}

/* A failed call ends the benchmark on this rank; chorusrun then stops the others. */
static void fail(bench_t *b, chorus_status_t status, const char *what, size_t bytes)
{
    fprintf(stderr, "chorus-bench: rank %d: %s failed (%zu bytes): %s: %s\n", b->rank, what, bytes,
            chorus_status_string(status), chorus_last_error());
    fflush(stdout);
    chorus_comm_abort(b->comm);
    chorus_comm_destroy(b->comm);
    exit(1);
}

static chorus_status_t run_coll(const bench_t *b, const test_t *t, const counts_t *c,
                                const void *send, void *recv)
{
    switch (t->coll) {
    case COLL_ALLREDUCE:
        return chorus_allreduce(send, recv, c->param_count, t->dtype, t->op, b->comm, NULL);
    case COLL_ALLGATHER:
        return chorus_allgather(send, recv, c->param_count, t->dtype, b->comm, NULL);
    case COLL_REDUCE_SCATTER:
        return chorus_reduce_scatter(send, recv, c->param_count, t->dtype, t->op, b->comm, NULL);
    case COLL_BROADCAST:
        return chorus_broadcast(send, recv, c->param_count, t->dtype, t->root, b->comm, NULL);
    case COLL_REDUCE:
        return chorus_reduce(send, recv, c->param_count, t->dtype, t->op, t->root, b->comm, NULL);
    case COLL_ALLTOALL: return chorus_alltoall(send, recv, c->param_count, t->dtype, b->comm, NULL);
    default: return CHORUS_ERR_INVALID_ARGUMENT;
    }
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
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL:
        bytes *= n;
        factor = (n - 1) / n;
        break;
    default: break;
    }
    *algbw_p = sec > 0.0 ? bytes / 1.0e9 / sec : 0.0;
    *busbw_p = *algbw_p * factor;
}

/* One half of a row: the timed loop, then (with -c 1) one checked call on fresh data. */
static void bench_time(bench_t *b, const test_t *t, const counts_t *c, int in_place, size_t bytes)
{
    void *send, *recv;
    chorus_status_t status;
    double sec, algbw, busbw;
    char time_str[32], wrong_str[32];

    send = in_place ? (char *)b->recvbuf +
                          c->send_inplace_offset * (size_t)t->rank * chorus_dtype_size(t->dtype)
                    : b->sendbuf;
    recv = in_place ? (char *)b->recvbuf +
                          c->recv_inplace_offset * (size_t)t->rank * chorus_dtype_size(t->dtype)
                    : b->recvbuf;
    status = chorus_barrier(b->comm);
    if (status != CHORUS_SUCCESS) fail(b, status, "barrier", bytes);
    double start = now_s();
    for (int iter = 0; iter < b->opt.iters; iter++) {
        status = run_coll(b, t, c, send, recv);
        if (status != CHORUS_SUCCESS) fail(b, status, coll_names[t->coll], bytes);
    }
    sec = (now_s() - start) / b->opt.iters;
    /* The time of a collective is the time of its slowest rank. */
    status = chorus_allreduce(&sec, &sec, 1, CHORUS_FLOAT64, CHORUS_MAX, b->comm, NULL);
    if (status != CHORUS_SUCCESS) fail(b, status, "allreduce of the times", bytes);
    bandwidth(t, c, sec, &algbw, &busbw);
    b->bw_sum += busbw;
    b->bw_count++;

    snprintf(wrong_str, sizeof(wrong_str), "%5s", "N/A");
    if (b->opt.check) {
        uint64_t wrong;
        bench_prepare(t, c, in_place, b->sendbuf, b->recvbuf, &send, &recv);
        status = run_coll(b, t, c, send, recv);
        if (status != CHORUS_SUCCESS) fail(b, status, coll_names[t->coll], bytes);
        wrong = bench_count_wrong(t, c, recv);
        status = chorus_allreduce(&wrong, &wrong, 1, CHORUS_UINT64, CHORUS_SUM, b->comm, NULL);
        if (status != CHORUS_SUCCESS) fail(b, status, "allreduce of the check", bytes);
        b->wrong_total += wrong;
        snprintf(wrong_str, sizeof(wrong_str), "%5llu", (unsigned long long)wrong);
    }
    double usec = sec * 1.0e6;
    snprintf(time_str, sizeof(time_str),
             usec >= 10000.0 ? "%7.0f"
             : usec >= 100.0 ? "%7.1f"
                             : "%7.2f",
             usec);
    if (b->rank == 0) printf("  %7s  %6.2f  %6.2f  %5s", time_str, algbw, busbw, wrong_str);
}

/* Runs warmup iterations at the largest and the smallest size, as nccl-tests does. */
static void warm_up(bench_t *b, const test_t *t)
{
    size_t es = chorus_dtype_size(t->dtype);
    size_t sizes[2] = {b->opt.max_bytes, b->opt.min_bytes};

    for (int s = 0; s < 2; s++) {
        counts_t c = bench_counts(t->coll, sizes[s] / es, t->nranks);
        for (int iter = 0; iter < b->opt.warmup; iter++) {
            chorus_status_t status = run_coll(b, t, &c, b->sendbuf, b->recvbuf);
            if (status != CHORUS_SUCCESS) fail(b, status, coll_names[t->coll], sizes[s]);
        }
    }
}

static void time_test(bench_t *b, const test_t *t)
{
    size_t es = chorus_dtype_size(t->dtype);
    int rooted = t->coll == COLL_BROADCAST || t->coll == COLL_REDUCE;
    const char *op_name = bench_coll_reduces(t->coll) ? chorus_op_name(t->op) : "none";
    counts_t full = bench_counts(t->coll, b->opt.max_bytes / es, t->nranks);
    void *send, *recv;

    /* Timed runs start from valid values (no NaNs from uninitialised memory). */
    bench_prepare(t, &full, 0, b->sendbuf, b->recvbuf, &send, &recv);
    chorus_status_t status = chorus_barrier(b->comm);
    if (status != CHORUS_SUCCESS) fail(b, status, "barrier", 0);
    warm_up(b, t);
    for (size_t size = b->opt.min_bytes; size <= b->opt.max_bytes;) {
        counts_t c = bench_counts(t->coll, size / es, t->nranks);
        size_t shown = (c.send_count > c.recv_count ? c.send_count : c.recv_count) * es;
        if (b->rank == 0)
            printf("%12zu  %12zu  %8s  %6s  %6d", shown, c.param_count, chorus_dtype_name(t->dtype),
                   op_name, rooted ? t->root : -1);
        bench_time(b, t, &c, 0, shown);
        bench_time(b, t, &c, 1, shown);
        if (b->rank == 0) {
            printf("\n");
            fflush(stdout);
        }
        size_t next = b->opt.factor > 1 ? size * b->opt.factor : size + b->opt.step_bytes;
        if (next <= size) break;
        size = next;
    }
}

/* The nccl-tests header, with one line per rank in place of the GPU list. */
static void print_header(bench_t *b)
{
    struct {
        int32_t pid;
        char host[60];
    } me, *all;
    chorus_status_t status;

    memset(&me, 0, sizeof(me));
    me.pid = (int32_t)getpid();
    if (gethostname(me.host, sizeof(me.host) - 1) != 0) strcpy(me.host, "?");
    all = calloc((size_t)b->nranks, sizeof(*all));
    if (all == NULL) fail(b, CHORUS_ERR_NO_MEMORY, "allocation", 0);
    status = chorus_allgather(&me, all, sizeof(me), CHORUS_UINT8, b->comm, NULL);
    if (status != CHORUS_SUCCESS) fail(b, status, "allgather of the rank list", sizeof(me));
    if (b->rank == 0) {
        printf("# chorus-bench %s (Chorus %d): nranks %d minBytes %zu maxBytes %zu step: %zu(%s) "
               "warmup iters: %d iters: %d validation: %d\n",
               coll_names[b->opt.coll], chorus_version(), b->nranks, b->opt.min_bytes,
               b->opt.max_bytes, b->opt.factor > 1 ? b->opt.factor : b->opt.step_bytes,
               b->opt.factor > 1 ? "factor" : "bytes", b->opt.warmup, b->opt.iters, b->opt.check);
        printf("#\n# Using devices\n");
        for (int r = 0; r < b->nranks; r++)
            printf("#  Rank %2d Group  0 Pid %6d on %10s device  cpu\n", r, (int)all[r].pid,
                   all[r].host);
        printf("#\n");
        printf("#%72s%28s\n", "out-of-place", "in-place");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
        fflush(stdout);
    }
    free(all);
}

static void run_tests(bench_t *b)
{
    int first_dtype = b->opt.all_dtypes ? 0 : (int)b->opt.dtype;
    int last_dtype = b->opt.all_dtypes ? CHORUS_NUM_DTYPES - 1 : (int)b->opt.dtype;
    int reduces = bench_coll_reduces(b->opt.coll);
    int first_op = b->opt.all_ops && reduces ? 0 : (int)b->opt.op;
    int last_op = b->opt.all_ops && reduces ? CHORUS_NUM_OPS - 1 : (int)b->opt.op;

    for (int d = first_dtype; d <= last_dtype; d++) {
        for (int o = first_op; o <= last_op; o++) {
            test_t t = {b->opt.coll, (chorus_dtype_t)d, (chorus_op_t)o,
                        b->opt.root, b->rank,           b->nranks};
            time_test(b, &t);
        }
    }
}

static void *alloc_buffer(bench_t *b, size_t bytes)
{
    void *p = NULL;

    /* Page-aligned and touched, so that page faults stay out of the timings. */
    if (posix_memalign(&p, 4096, bytes) != 0) fail(b, CHORUS_ERR_NO_MEMORY, "allocation", bytes);
    memset(p, 0, bytes);
    return p;
}

int main(int argc, char **argv)
{
    bench_t b;
    chorus_status_t status;
    int rc;

    memset(&b, 0, sizeof(b));
    rc = parse_options(argc, argv, &b.opt);
    if (rc != 0) return rc < 0 ? 2 : 0;
    status = chorus_comm_init_env(&b.comm);
    if (status != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-bench: chorus_comm_init_env failed: %s: %s\n",
                chorus_status_string(status), chorus_last_error());
        return 1;
    }
    if (chorus_comm_rank(b.comm, &b.rank) != CHORUS_SUCCESS ||
        chorus_comm_size(b.comm, &b.nranks) != CHORUS_SUCCESS)
        fail(&b, CHORUS_ERR_INTERNAL, "rank and size", 0);
    if (b.opt.root >= b.nranks) {
        if (b.rank == 0)
            fprintf(stderr, "chorus-bench: root %d is not a rank of %d\n", b.opt.root, b.nranks);
        chorus_comm_destroy(b.comm);
        return 2;
    }
    /* Both buffers hold the largest size; sizes are rounded down to whole elements. */
    b.sendbuf = alloc_buffer(&b, b.opt.max_bytes + 64);
    b.recvbuf = alloc_buffer(&b, b.opt.max_bytes + 64);
    print_header(&b);
    run_tests(&b);
    if (b.rank == 0) {
        printf("# Out of bounds values : %llu %s\n", (unsigned long long)b.wrong_total,
               b.wrong_total == 0 ? "OK" : "FAILED");
        printf("# Avg bus bandwidth    : %g\n#\n", b.bw_count > 0 ? b.bw_sum / b.bw_count : 0.0);
        fflush(stdout);
    }
    /* Rank 0 has written everything before any rank exits (a failing exit status makes
     * chorusrun stop the others). */
    status = chorus_barrier(b.comm);
    if (status != CHORUS_SUCCESS) fail(&b, status, "final barrier", 0);
    free(b.sendbuf);
    free(b.recvbuf);
    chorus_comm_destroy(b.comm);
    return b.wrong_total == 0 ? 0 : 1;
}
