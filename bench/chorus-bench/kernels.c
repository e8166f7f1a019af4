/*
 * `chorus-bench kernels`: the local reduction kernels (kernels/kernels.h) against memcpy,
 * on one core, in one process, with no communicator.
 *
 * Every cell is timed the same way: a calibrated number of calls per sample (so that one
 * sample lasts about a millisecond), samples until the cell has had --time seconds, and
 * the best sample wins, since on a shared machine noise only ever makes a call slower.
 * Each row has its own memcpy reference, of the same output size on the same buffers
 * (src[0] to dst; in place, src[1] to dst), whose samples alternate with the kernel's, so
 * that the ratio compares two numbers taken on the same machine at the same moment.
 *
 * Bandwidth is given two ways, because they answer different questions:
 * - traffic: bytes the kernel must move between the core and memory, reads plus writes,
 *   per second. memcpy of B bytes moves 2B (read B, write B); a reduction of n sources
 *   into B output bytes moves (n + 1)B. The read-for-ownership of a cached store is not
 *   counted for either, so a kernel that avoids it (or a memcpy that uses non-temporal
 *   stores) gets no credit for it. This is the number the ratio column compares.
 * - out: output bytes per second, B / time, what a caller sees as "reduced per second".
 */
#include "bench.h"
#include "kernels.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KB_MAX_SIZES 16
#define KB_MAX_SRC 8
#define KB_SAMPLE_S 1e-3
#define KB_MIN_SAMPLES 3

/* The entry point main.c hands `chorus-bench kernels ...` to; argv[0] is "kernels". */
int bench_kernels_main(int argc, char **argv);

typedef struct {
    size_t sizes[KB_MAX_SIZES];
    int nsizes;
    int dtype; /* -1: all */
    int op;    /* -1: all */
    int nsrcs[KB_MAX_SRC];
    int nnsrc;
    double time_per_cell;
    int in_place;
    const char *json_path;
} kopts_t;

/* What one timed cell ran: memcpy (nsrc 0), reduce (nsrc 2, two-source kernel) or
 * reduce_multi (nsrc sources). */
typedef struct {
    const char *kernel;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int nsrc;
    size_t bytes, count;
    void *dst;
    const void *src[KB_MAX_SRC];
} cell_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run_cell(const cell_t *c, long calls)
{
    for (long i = 0; i < calls; i++) {
        if (c->nsrc == 0)
            memcpy(c->dst, c->src[0], c->bytes);
        else if (strcmp(c->kernel, "reduce") == 0)
            (void)chorus_kernel_reduce(c->dst, c->src[0], c->src[1], c->count, c->dtype, c->op);
        else
            (void)chorus_kernel_reduce_multi(c->dst, c->src, c->nsrc, c->count, c->dtype, c->op);
    }
}

/* Calls per sample such that a sample lasts about KB_SAMPLE_S. */
static long calibrate(const cell_t *c)
{
    long calls = 1;
    double t0, t;

    run_cell(c, 1); /* warm the caches and the branch predictors */
    for (;;) {
        t0 = now_s();
        run_cell(c, calls);
        t = now_s() - t0;
        if (t >= KB_SAMPLE_S || calls >= (1L << 24)) return calls;
        calls *= t > KB_SAMPLE_S / 16 ? 2 : 8;
    }
}

static double sample(const cell_t *c, long calls)
{
    double t0 = now_s();

    run_cell(c, calls);
    return (now_s() - t0) / (double)calls;
}

/* Seconds per call of c and, when ref is not NULL, of ref: the best sample of each, the
 * samples of the two alternating so that both see the same machine. */
static void time_cells(const cell_t *c, const cell_t *ref, double budget, double *sec_p,
                       double *ref_sec_p)
{
    long calls = calibrate(c), ref_calls = ref != NULL ? calibrate(ref) : 0;
    double best = 1e30, ref_best = 1e30, start = now_s(), t;
    int samples = 0;

    while (samples < KB_MIN_SAMPLES || now_s() - start < budget) {
        t = sample(c, calls);
        best = t < best ? t : best;
        if (ref != NULL) {
            t = sample(ref, ref_calls);
            ref_best = t < ref_best ? t : ref_best;
        }
        samples++;
    }
    *sec_p = best;
    if (ref != NULL) *ref_sec_p = ref_best;
}

/* Every element 1: sums stay finite for as long as a run lasts in place, products stay 1,
 * and no value is subnormal (which would time a slow path). */
static void fill_ones(void *buf, size_t count, chorus_dtype_t dt)
{
    for (size_t i = 0; i < count; i++) {
        switch (dt) {
        case CHORUS_INT8:
        case CHORUS_UINT8: ((uint8_t *)buf)[i] = 1; break;
        case CHORUS_INT32:
        case CHORUS_UINT32: ((uint32_t *)buf)[i] = 1; break;
        case CHORUS_INT64:
        case CHORUS_UINT64: ((uint64_t *)buf)[i] = 1; break;
        case CHORUS_FLOAT16: ((uint16_t *)buf)[i] = 0x3c00; break;
        case CHORUS_BFLOAT16: ((uint16_t *)buf)[i] = 0x3f80; break;
        case CHORUS_FLOAT32: ((float *)buf)[i] = 1.0f; break;
        case CHORUS_FLOAT64: ((double *)buf)[i] = 1.0; break;
        default: break;
        }
    }
}

static int parse_list(const char *text, int (*one)(const char *, void *), void *out, int max)
{
    char buf[256], *save = NULL, *tok;
    int n = 0;

    if (strlen(text) >= sizeof(buf)) return -1;
    strcpy(buf, text);
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (n == max || one(tok, (char *)out + (size_t)n * sizeof(size_t)) != 0) return -1;
        n++;
    }
    return n > 0 ? n : -1;
}

static int one_size(const char *tok, void *out)
{
    return bench_parse_size(tok, (size_t *)out);
}

static int parse_name(const char *text, int count, const char *(*name)(int), int *out_p)
{
    if (strcmp(text, "all") == 0) {
        *out_p = -1;
        return 0;
    }
    for (int i = 0; i < count; i++) {
        if (strcmp(text, name(i)) == 0) {
            *out_p = i;
            return 0;
        }
    }
    return -1;
}

static const char *dtype_name_i(int i)
{
    return chorus_dtype_name((chorus_dtype_t)i);
}

static const char *op_name_i(int i)
{
    return chorus_op_name((chorus_op_t)i);
}

static void kernels_usage(FILE *out)
{
    fprintf(out, "usage: chorus-bench kernels [options]\n"
                 "  -s, --sizes LIST      output sizes, comma-separated (default 32K,1M,64M)\n"
                 "  -b, --minbytes SIZE   with -e: sizes from SIZE to -e, times -f each step\n"
                 "  -e, --maxbytes SIZE\n"
                 "  -f, --stepfactor N    (default 4)\n"
                 "  -d, --datatype TYPE   a dtype name or all (default all)\n"
                 "  -o, --op OP           sum, prod, min, max or all (default all)\n"
                 "  -m, --nsrc LIST       source counts for reduce_multi (default 2,4,8)\n"
                 "  -t, --time SEC        timed seconds per cell, best sample wins (default 0.05)\n"
                 "  -i, --in-place        dst is src[0], as the arena calls it\n"
                 "      --json FILE       every row as JSON\n"
                 "traffic = bytes read + bytes written per second: memcpy 2B, n sources (n+1)B;\n"
                 "out = output bytes per second; ratio = traffic / memcpy traffic.\n");
}

/* Returns 0 to run, 1 after help, -1 on a usage error (printed). */
static int kernels_parse(int argc, char **argv, kopts_t *o)
{
    size_t minb = 0, maxb = 0, factor = 4;
    size_t nsrc_tmp[KB_MAX_SRC];

    memset(o, 0, sizeof(*o));
    o->sizes[0] = (size_t)32 << 10;
    o->sizes[1] = (size_t)1 << 20;
    o->sizes[2] = (size_t)64 << 20;
    o->nsizes = 3;
    o->dtype = -1;
    o->op = -1;
    o->nsrcs[0] = 2;
    o->nsrcs[1] = 4;
    o->nsrcs[2] = 8;
    o->nnsrc = 3;
    o->time_per_cell = 0.05;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int n, takes = 1;

        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            kernels_usage(stdout);
            return 1;
        } else if (strcmp(a, "-i") == 0 || strcmp(a, "--in-place") == 0) {
            o->in_place = 1;
            takes = 0;
        } else if (v == NULL) {
            goto bad;
        } else if (strcmp(a, "-s") == 0 || strcmp(a, "--sizes") == 0) {
            if ((n = parse_list(v, one_size, o->sizes, KB_MAX_SIZES)) < 0) goto bad;
            o->nsizes = n;
        } else if (strcmp(a, "-b") == 0 || strcmp(a, "--minbytes") == 0) {
            if (bench_parse_size(v, &minb) != 0) goto bad;
        } else if (strcmp(a, "-e") == 0 || strcmp(a, "--maxbytes") == 0) {
            if (bench_parse_size(v, &maxb) != 0) goto bad;
        } else if (strcmp(a, "-f") == 0 || strcmp(a, "--stepfactor") == 0) {
            if (bench_parse_size(v, &factor) != 0 || factor < 2) goto bad;
        } else if (strcmp(a, "-d") == 0 || strcmp(a, "--datatype") == 0) {
            if (parse_name(v, CHORUS_NUM_DTYPES, dtype_name_i, &o->dtype) != 0) goto bad;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--op") == 0) {
            if (parse_name(v, CHORUS_AVG, op_name_i, &o->op) != 0) goto bad;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--nsrc") == 0) {
            if ((n = parse_list(v, one_size, nsrc_tmp, KB_MAX_SRC)) < 0) goto bad;
            for (int k = 0; k < n; k++) {
                if (nsrc_tmp[k] < 1 || nsrc_tmp[k] > KB_MAX_SRC) goto bad;
                o->nsrcs[k] = (int)nsrc_tmp[k];
            }
            o->nnsrc = n;
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--time") == 0) {
            o->time_per_cell = atof(v);
            if (!(o->time_per_cell > 0.0) || o->time_per_cell > 60.0) goto bad;
        } else if (strcmp(a, "--json") == 0) {
            o->json_path = v;
        } else {
            goto bad;
        }
        i += takes;
        continue;
    bad:
        fprintf(stderr, "chorus-bench kernels: bad option or value: %s%s%s\n", a,
                v != NULL && takes ? " " : "", v != NULL && takes ? v : "");
        kernels_usage(stderr);
        return -1;
    }
    if (minb != 0 || maxb != 0) {
        if (minb == 0 || maxb < minb) {
            fprintf(stderr, "chorus-bench kernels: -b and -e go together, -b <= -e\n");
            return -1;
        }
        o->nsizes = 0;
        for (size_t s = minb; s <= maxb && o->nsizes < KB_MAX_SIZES; s *= factor) {
            o->sizes[o->nsizes++] = s;
            if (s > SIZE_MAX / factor) break;
        }
    }
    return 0;
}

/* One printed and recorded row. */
typedef struct {
    size_t bytes;
    const char *kernel;
    int nsrc;
    chorus_dtype_t dtype;
    chorus_op_t op;
    double sec, out_gbs, traffic_gbs, memcpy_traffic_gbs;
} krow_t;

static void print_row(const krow_t *r)
{
    int copy = r->nsrc == 0;

    printf("%10zu  %-12s %4d  %-8s %-4s %11.2f %9.2f %9.2f %9.2f %6.2f %6.2f\n", r->bytes,
           r->kernel, copy ? 1 : r->nsrc, copy ? "-" : chorus_dtype_name(r->dtype),
           copy ? "-" : chorus_op_name(r->op), r->sec * 1e6, r->out_gbs, r->traffic_gbs,
           r->memcpy_traffic_gbs, r->traffic_gbs / r->memcpy_traffic_gbs,
           r->out_gbs / (r->memcpy_traffic_gbs / 2));
}

static int json_add_row(json_t *rows, const krow_t *r)
{
    json_t *o = json_pack(
        "{s:I,s:s,s:i,s:s,s:s,s:f,s:f,s:f,s:f,s:f}", "bytes", (json_int_t)r->bytes, "kernel",
        r->kernel, "nsrc", r->nsrc, "dtype", r->nsrc == 0 ? "-" : chorus_dtype_name(r->dtype), "op",
        r->nsrc == 0 ? "-" : chorus_op_name(r->op), "time_us", r->sec * 1e6, "out_gbps", r->out_gbs,
        "traffic_gbps", r->traffic_gbs, "memcpy_traffic_gbps", r->memcpy_traffic_gbs,
        "ratio_traffic", r->traffic_gbs / r->memcpy_traffic_gbs);
    return o == NULL ? -1 : json_array_append_new(rows, o);
}

/* Times c, with memcpy of the same output size from src[0] to dst alongside unless c is
 * that memcpy itself. */
static krow_t measure(const cell_t *c, double budget)
{
    krow_t r;
    cell_t copy = *c;
    double copy_sec = 0.0;
    int reads = c->nsrc == 0 ? 1 : c->nsrc;

    copy.kernel = "memcpy";
    copy.nsrc = 0;
    if (c->dst == c->src[0]) copy.src[0] = c->src[1]; /* in place: memcpy needs two buffers */
    memset(&r, 0, sizeof(r));
    r.bytes = c->bytes;
    r.kernel = c->kernel;
    r.nsrc = c->nsrc;
    r.dtype = c->dtype;
    r.op = c->op;
    time_cells(c, c->nsrc == 0 ? NULL : &copy, budget, &r.sec, &copy_sec);
    if (c->nsrc == 0) copy_sec = r.sec;
    r.out_gbs = (double)c->bytes / r.sec * 1e-9;
    r.traffic_gbs = r.out_gbs * (reads + 1);
    r.memcpy_traffic_gbs = 2.0 * (double)c->bytes / copy_sec * 1e-9;
    return r;
}

/* Times every row of one size into rows[] (a memcpy row first); returns the row count. */
static int bench_size(const kopts_t *o, size_t bytes, void *dst, void **src, krow_t *rows)
{
    int nrows = 0, max_src = 2;
    cell_t c;

    for (int k = 0; k < o->nnsrc; k++)
        max_src = o->nsrcs[k] > max_src ? o->nsrcs[k] : max_src;
    memset(&c, 0, sizeof(c));
    c.kernel = "memcpy";
    c.bytes = bytes;
    c.dst = dst;
    c.src[0] = src[0];
    rows[0] = measure(&c, o->time_per_cell * 2);
    for (int dt = 0; dt < CHORUS_NUM_DTYPES; dt++) {
        size_t esize = chorus_dtype_size((chorus_dtype_t)dt);
        if (o->dtype >= 0 && dt != o->dtype) continue;
        for (int s = 0; s < max_src; s++)
            fill_ones(src[s], bytes / esize, (chorus_dtype_t)dt);
        fill_ones(dst, bytes / esize, (chorus_dtype_t)dt);
        for (int op = 0; op < CHORUS_AVG; op++) {
            if (o->op >= 0 && op != o->op) continue;
            c.dtype = (chorus_dtype_t)dt;
            c.op = (chorus_op_t)op;
            c.count = bytes / esize;
            c.bytes = c.count * esize;
            c.dst = o->in_place ? src[0] : dst;
            for (int s = 0; s < max_src; s++)
                c.src[s] = src[s];
            c.kernel = "reduce";
            c.nsrc = 2;
            rows[++nrows] = measure(&c, o->time_per_cell);
            c.kernel = "reduce_multi";
            for (int k = 0; k < o->nnsrc; k++) {
                c.nsrc = o->nsrcs[k];
                rows[++nrows] = measure(&c, o->time_per_cell);
            }
        }
    }
    return nrows + 1;
}

static void *alloc_touched(size_t bytes)
{
    void *p = NULL;

    if (posix_memalign(&p, 4096, bytes) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

static int run_sizes(const kopts_t *o, json_t *jrows)
{
    int max_src = 2, per_size = (1 + o->nnsrc) * CHORUS_NUM_DTYPES * CHORUS_AVG + 1;
    krow_t *rows = calloc((size_t)per_size, sizeof(*rows));
    void *src[KB_MAX_SRC] = {0}, *dst = NULL;
    int rc = 1;

    for (int k = 0; k < o->nnsrc; k++)
        max_src = o->nsrcs[k] > max_src ? o->nsrcs[k] : max_src;
    if (rows == NULL) goto out;
    for (int si = 0; si < o->nsizes; si++) {
        size_t bytes = o->sizes[si];
        int n, ok;

        /* A size's buffers are freed before the next size's are made, so the largest
         * size alone bounds the memory used: (max nsrc + 1) buffers. */
        dst = alloc_touched(bytes + 64);
        for (int s = 0; s < max_src; s++)
            src[s] = alloc_touched(bytes + 64);
        ok = dst != NULL;
        for (int s = 0; s < max_src; s++)
            ok = ok && src[s] != NULL;
        if (!ok) {
            fprintf(stderr, "chorus-bench kernels: out of memory for %zu-byte buffers\n", bytes);
            goto out;
        }
        n = bench_size(o, bytes, dst, src, rows);
        for (int i = 0; i < n; i++) {
            print_row(&rows[i]);
            if (jrows != NULL && json_add_row(jrows, &rows[i]) != 0) goto out;
        }
        fflush(stdout);
        free(dst);
        dst = NULL;
        for (int s = 0; s < max_src; s++) {
            free(src[s]);
            src[s] = NULL;
        }
    }
    rc = 0;
out:
    free(dst);
    for (int s = 0; s < max_src; s++)
        free(src[s]);
    free(rows);
    return rc;
}

int bench_kernels_main(int argc, char **argv)
{
    kopts_t o;
    json_t *doc = NULL, *jrows = NULL;
    int rc = kernels_parse(argc, argv, &o);

    if (rc != 0) return rc < 0 ? 2 : 0;
    if (o.json_path != NULL) {
        doc = json_object();
        jrows = json_array();
        if (doc == NULL || jrows == NULL || json_object_set(doc, "rows", jrows) != 0) {
            fprintf(stderr, "chorus-bench kernels: out of memory\n");
            rc = 1;
            goto out;
        }
    }
    printf("# chorus-bench kernels: one core; best sample of >= %g s per cell%s\n", o.time_per_cell,
           o.in_place ? "; in place (dst = src[0])" : "");
    printf("# traffic = (reads + writes) bytes/s: memcpy moves 2B, n sources (n+1)B; "
           "out = output B/s\n");
    printf("# ratio: traffic / memcpy traffic; out-ratio: out / memcpy out\n");
    printf("#%9s  %-12s %4s  %-8s %-4s %11s %9s %9s %9s %6s %6s\n", "bytes", "kernel", "nsrc",
           "dtype", "op", "time(us)", "out GB/s", "trafGB/s", "cpyGB/s", "ratio", "outrat");
    rc = run_sizes(&o, jrows);
    if (rc == 0 && doc != NULL) {
        json_t *s =
            json_pack("{s:f,s:b}", "time_per_cell", o.time_per_cell, "in_place", o.in_place);
        if (s == NULL || json_object_set_new(doc, "options", s) != 0 ||
            json_dump_file(doc, o.json_path, JSON_INDENT(2)) != 0) {
            fprintf(stderr, "chorus-bench kernels: cannot write %s\n", o.json_path);
            rc = 1;
        }
    }
out:
    json_decref(jrows);
    json_decref(doc);
    return rc;
}
