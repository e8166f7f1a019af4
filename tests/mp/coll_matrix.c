/*
 * The collective matrix: every collective x every dtype x every op x in-place and
 * out-of-place x roots x counts, on however many ranks the launcher started, with exact
 * expected values computed here from (rank, index). Run one process per algorithm
 * (--algo or CHORUS_ALGO), since the library reads its configuration once.
 *
 *   chorusrun -n 4 -- mp_coll_matrix [--algo ring] [--quick] [--colls allreduce,reduce]
 *       [--dtypes float32,int8] [--ops sum,max] [--counts 0,1,7,n-1,3001] [--large N]
 *       [--large-colls allreduce,...] [--seed S] [--verbose]
 *       [--registered all|odd|even [--registered-bytes N]]
 *
 * --registered: the buffers of the ranks it names (all, odd or even ranks) come from one
 * chorus_mem_alloc window (issue 38), at the offsets a bump allocator gives (send and
 * receive buffers side by side, canaries between), so every collective runs with peers'
 * data read straight from their windows, and with odd/even, mixed with ranks whose
 * buffers are not registered.
 *
 * Each failure prints one line (collective, dtype, op, count, in-place, root, first wrong
 * index, got vs expected); rank 0 prints "N passed, N failed" at the end; the exit status
 * is non-zero on any failure. An API error ends the process at once (the ranks would no
 * longer agree on what comes next), which makes the launcher stop the others.
 */
#include "mp/mp_common.h"
#include "util/status.h" /* CHORUS_PRINTF */

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>

enum {
    C_ALLREDUCE,
    C_ALLGATHER,
    C_REDUCE_SCATTER,
    C_BROADCAST,
    C_REDUCE,
    C_ALLTOALL,
    C_P2P_RING,
    C_P2P_PAIRS,
    C_SENDRECV,
    C_BARRIER,
    C_NAN,
    NCOLLS
};

static const char *coll_names[NCOLLS] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",  "alltoall",
    "p2p_ring",  "p2p_pairs", "sendrecv",       "barrier",   "nan_minmax"};

#define RAW (-1) /* generator kind for data-movement collectives: random bits */
#define GUARD 64 /* bytes of canary on each side of every buffer */
#define MAX_COUNTS 16

typedef struct {
    int coll;
    chorus_dtype_t dt;
    int op; /* RAW for data movement */
    size_t count;
    int inplace;
    int root; /* -1: not rooted */
    uint64_t seed;
    size_t id;
} mcase_t;

typedef struct {
    chorus_comm_t comm;
    int rank;
    int n;
    const char *algo;
    int verbose;
    const char *registered; /* --registered: all, odd, even (NULL: off) */
    size_t registered_bytes;
    void *reg_win;          /* this rank's window, freed at the end */
    uint64_t base_seed;
    uint64_t *keys; /* per rank, the random stream key of the current case */
    uint8_t *state; /* per case: 0 passed, 1 skipped, 2 failed */
    size_t ncases;
    size_t cap;
    mcase_t *pend; /* cases whose result hash waits for the cross-rank comparison */
    uint64_t *pend_hash;
    size_t npend;
    size_t local_fail;
} ctx_t;

/* ---- Cases and failures ---- */

static mcase_t case_new(ctx_t *c, int coll, chorus_dtype_t dt, int op, size_t count,
                        int inplace, int root)
{
    if (c->ncases == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 1024;
        c->state = realloc(c->state, c->cap);
        if (c->state == NULL) abort();
    }
    mcase_t k = {coll, dt, op, count, inplace, root, 0, c->ncases};
    k.seed = mp_mix(c->base_seed ^ (k.id * 0x632be59bd9b4e019ULL));
    for (int q = 0; q < c->n; q++) c->keys[q] = mp_rank_key(k.seed, q);
    c->state[c->ncases++] = 0;
    return k;
}

static void case_desc(const ctx_t *c, const mcase_t *k, char *buf, size_t len)
{
    char root[16] = "-";
    if (k->root >= 0) snprintf(root, sizeof(root), "%d", k->root);
    snprintf(buf, len, "%s %s %s count=%zu inplace=%d root=%s algo=%s nranks=%d",
             coll_names[k->coll], mp_dtype_name(k->dt), k->op >= 0 ? mp_op_name(k->op) : "-",
             k->count, k->inplace, root, c->algo, c->n);
}

/* Records a failure of case k on this rank; only its first failure prints a line. */
static void case_fail(ctx_t *c, const mcase_t *k, const char *fmt, ...) CHORUS_PRINTF(3, 4);
static void case_fail(ctx_t *c, const mcase_t *k, const char *fmt, ...)
{
    if (c->state[k->id] == 2) return;
    c->state[k->id] = 2;
    c->local_fail++;
    char desc[256], detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    case_desc(c, k, desc, sizeof(desc));
    printf("FAIL %s rank=%d: %s\n", desc, c->rank, detail);
    fflush(stdout);
}

/* Returns 1 if the call succeeded, 0 if the case is skipped (a forced algorithm that does
 * not implement the collective may say so); any other error ends the process. */
static int call_ok(ctx_t *c, const mcase_t *k, chorus_status_t st, const char *fn)
{
    if (st == CHORUS_SUCCESS) return 1;
    if (st == CHORUS_ERR_UNSUPPORTED && strcmp(c->algo, "auto") != 0) {
        c->state[k->id] = 1;
        return 0;
    }
    char desc[256], what[320];
    case_desc(c, k, desc, sizeof(desc));
    snprintf(what, sizeof(what), "%s (%s)", fn, desc);
    mp_die_on_error(st, c->comm, c->rank, what);
    return 0;
}

/* ---- Buffers with canaries ----
 * A program that includes this file (tests/gpu/coll_matrix.c) may define
 * COLL_MATRIX_BUF_ALLOC / COLL_MATRIX_BUF_FREE to learn which memory the test calls use. */

#ifndef COLL_MATRIX_BUF_ALLOC
#define COLL_MATRIX_BUF_ALLOC(bytes) malloc(bytes)
#define COLL_MATRIX_BUF_FREE(p) free(p)
#endif

/* --registered: this rank's window (mp_bump_t), when its buffers are registered. */
static mp_bump_t reg = {.prog = "mp_coll_matrix"};

static void *buf_alloc_raw(size_t bytes)
{
    void *p = mp_bump_alloc(&reg, bytes);
    return p != NULL ? p : COLL_MATRIX_BUF_ALLOC(bytes);
}

static void buf_free_raw(void *p)
{
    if (!mp_bump_free(&reg, p)) COLL_MATRIX_BUF_FREE(p);
}

static void *gbuf_alloc(size_t bytes)
{
    unsigned char *p = buf_alloc_raw(bytes + 2 * GUARD);
    if (p == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    memset(p, 0xa5, GUARD);
    memset(p + GUARD, 0xcc, bytes); /* poison: a result never written is noticed */
    memset(p + GUARD + bytes, 0x5a, GUARD);
    return p + GUARD;
}

static void gbuf_check(ctx_t *c, const mcase_t *k, const void *buf, size_t bytes,
                       const char *name)
{
    const unsigned char *p = (const unsigned char *)buf - GUARD;
    for (size_t i = 0; i < GUARD; i++) {
        if (p[i] != 0xa5) {
            case_fail(c, k, "%s: byte %zd before the buffer was overwritten", name,
                      (ssize_t)i - GUARD);
            return;
        }
        if (p[GUARD + bytes + i] != 0x5a) {
            case_fail(c, k, "%s: byte %zu past the end was overwritten", name, i);
            return;
        }
    }
}

static void gbuf_free(void *buf)
{
    if (buf != NULL) buf_free_raw((unsigned char *)buf - GUARD);
}

/* ---- Input values ---- */

/* Element `index` of `rank`'s input, stored at buf[j]. RAW: random bits. Reductions:
 * floats in ranges where the error bound below is tight (no cancellation to subnormals,
 * products near 1); integers full range for sum/min/max (sum and prod wrap, which the
 * API defines), {1,2,3,-1,-2} for prod, and a range whose sum cannot overflow for avg. */
static void gen(chorus_dtype_t dt, int op, int n, uint64_t key, size_t index,
                void *buf, size_t j)
{
    uint64_t r = mp_rand(key, index);
    if (op == RAW) {
        mp_put_bits(dt, buf, j, r);
        return;
    }
    if (mp_is_float(dt)) {
        double u = mp_unit(r), s = (r & 1) ? -1.0 : 1.0, v;
        if (op == CHORUS_SUM || op == CHORUS_AVG) v = s * (0.5 + 0.5 * u);
        else if (op == CHORUS_PROD) v = 1.0 + (u - 0.5) / 8;
        else v = s * (1.0 + 999.0 * u);
        mp_put_float(dt, buf, j, v);
        return;
    }
    int bits = (int)mp_dtype_size(dt) * 8;
    uint64_t v = r;
    if (op == CHORUS_PROD) {
        static const int64_t sv[] = {1, 2, 3, -1, -2};
        v = mp_is_signed(dt) ? (uint64_t)sv[r % 5] : 1 + r % 3;
    } else if (op == CHORUS_AVG && mp_is_signed(dt)) {
        uint64_t range = ((1ULL << (bits - 1)) - 1) / (uint64_t)n; /* |sum| < 2^(bits-1) */
        /* Unsigned arithmetic: for int64 on one rank, 2 * range + 1 is 2^64 - 1 and the
         * signed difference would overflow; the wrapped result is the same bit pattern. */
        v = r % (2 * range + 1) - range;
    } else if (op == CHORUS_AVG) {
        uint64_t max = bits == 64 ? ~0ULL : (1ULL << bits) - 1;
        uint64_t range = max / (uint64_t)n;
        v = range == ~0ULL ? r : r % (range + 1);
    }
    mp_put_bits(dt, buf, j, v);
}

static void fill(chorus_dtype_t dt, int op, int n, uint64_t key, size_t base, size_t count,
                 void *buf)
{
    for (size_t j = 0; j < count; j++) gen(dt, op, n, key, base + j, buf, j);
}

/* ---- Checks ---- */

static void fmt_elem(chorus_dtype_t dt, const void *buf, size_t j, char *out, size_t len)
{
    if (mp_is_float(dt)) snprintf(out, len, "%.10Lg", mp_get_float(dt, buf, j));
    else if (mp_is_signed(dt)) snprintf(out, len, "%lld", (long long)mp_get_int(dt, buf, j));
    else snprintf(out, len, "%llu", (unsigned long long)mp_get_bits(dt, buf, j));
}

/* Results that every rank holds bitwise identical (the hash comparison checks that) are
 * checked in slices: rank r checks the indices j = r mod n, which keeps the cost of the
 * check linear in the number of ranks instead of quadratic. */
static size_t first_index(const ctx_t *c, int split)
{
    return split ? (size_t)c->rank : 0;
}

static size_t index_step(const ctx_t *c, int split)
{
    return split ? (size_t)c->n : 1;
}

/* got[j] must equal the RAW element (base + j) of rank `src`. */
static int check_raw(ctx_t *c, const mcase_t *k, const void *got, size_t count, int src,
                     size_t base, const char *where, int split)
{
    uint64_t e;
    for (size_t j = first_index(c, split); j < count; j += index_step(c, split)) {
        gen(k->dt, RAW, c->n, c->keys[src], base + j, &e, 0);
        uint64_t want = mp_get_bits(k->dt, &e, 0), have = mp_get_bits(k->dt, got, j);
        if (want != have) {
            case_fail(c, k, "%s index %zu: got 0x%llx expected 0x%llx (from rank %d)", where, j,
                      (unsigned long long)have, (unsigned long long)want, src);
            return 0;
        }
    }
    return 1;
}

static int check_int_elem(ctx_t *c, const mcase_t *k, const void *got, size_t j, size_t index)
{
    chorus_dtype_t dt = k->dt;
    int bits = (int)mp_dtype_size(dt) * 8;
    uint64_t mask = bits == 64 ? ~0ULL : (1ULL << bits) - 1, acc = 0, x;
    int64_t smin = INT64_MAX, smax = INT64_MIN, ssum = 0;
    uint64_t umin = ~0ULL, umax = 0;
    for (int q = 0; q < c->n; q++) {
        gen(dt, k->op, c->n, c->keys[q], index, &x, 0);
        int64_t s = mp_get_int(dt, &x, 0);
        uint64_t u = (uint64_t)s;
        acc = q == 0 ? u : (k->op == CHORUS_PROD ? acc * u : acc + u); /* wraps mod 2^64 */
        smin = s < smin ? s : smin;
        smax = s > smax ? s : smax;
        umin = u < umin ? u : umin;
        umax = u > umax ? u : umax;
        if (k->op == CHORUS_AVG && mp_is_signed(dt)) ssum += s; /* cannot overflow */
    }
    uint64_t want = acc;
    if (k->op == CHORUS_MIN) want = mp_is_signed(dt) ? (uint64_t)smin : umin;
    if (k->op == CHORUS_MAX) want = mp_is_signed(dt) ? (uint64_t)smax : umax;
    if (k->op == CHORUS_AVG)
        want = mp_is_signed(dt) ? (uint64_t)(ssum / c->n) : acc / (uint64_t)c->n;
    if ((mp_get_bits(dt, got, j) & mask) == (want & mask)) return 1;
    uint64_t wbuf;
    char g[64], w[64];
    mp_put_bits(dt, &wbuf, 0, want);
    fmt_elem(dt, got, j, g, sizeof(g));
    fmt_elem(dt, &wbuf, 0, w, sizeof(w));
    case_fail(c, k, "index %zu: got %s expected %s", j, g, w);
    return 0;
}

/* Floats: min/max exact; sum |got - ref| <= (n-1)u/(1-(n-1)u) * sum|x| + u|ref|; avg the
 * same over n plus two more roundings; prod relative (n-1)u/(1-(n-1)u). The reference is
 * in long double, whose own error is covered by a last n * 2^-62 term. */
static int check_float_elem(ctx_t *c, const mcase_t *k, const void *got, size_t j,
                            size_t index)
{
    chorus_dtype_t dt = k->dt;
    long double ref = 0, sabs = 0, x, u = mp_unit_roundoff(dt);
    uint64_t e;
    for (int q = 0; q < c->n; q++) {
        gen(dt, k->op, c->n, c->keys[q], index, &e, 0);
        x = mp_get_float(dt, &e, 0);
        if (q == 0) ref = x;
        else if (k->op == CHORUS_PROD) ref *= x;
        else if (k->op == CHORUS_MIN) ref = x < ref ? x : ref;
        else if (k->op == CHORUS_MAX) ref = x > ref ? x : ref;
        else ref += x;
        sabs += fabsl(x);
    }
    long double gamma = (c->n - 1) * u / (1 - (c->n - 1) * u), bound = 0;
    long double eps_ref = c->n * 0x1p-62L;
    if (k->op == CHORUS_SUM) bound = gamma * sabs + u * fabsl(ref) + eps_ref * sabs;
    if (k->op == CHORUS_AVG) {
        ref /= c->n;
        bound = (gamma * sabs + eps_ref * sabs) / c->n + 3 * u * fabsl(ref);
    }
    if (k->op == CHORUS_PROD) bound = (gamma + eps_ref) * fabsl(ref);
    long double have = mp_get_float(dt, got, j);
    if (fabsl(have - ref) <= bound) return 1; /* false for NaN */
    case_fail(c, k, "index %zu: got %.17Lg expected %.17Lg (bound %.3Lg)", j, have, ref, bound);
    return 0;
}

/* got[j] must be the reduction over ranks of element (base + j) of their inputs. */
static void check_reduce(ctx_t *c, const mcase_t *k, const void *got, size_t count, size_t base,
                         int split)
{
    for (size_t j = first_index(c, split); j < count; j += index_step(c, split)) {
        int ok = mp_is_float(k->dt) ? check_float_elem(c, k, got, j, base + j)
                                    : check_int_elem(c, k, got, j, base + j);
        if (!ok) return;
    }
}

/* An out-of-place send buffer must come back unchanged. */
static void check_intact(ctx_t *c, const mcase_t *k, const void *buf, size_t count)
{
    size_t sz = mp_dtype_size(k->dt);
    unsigned char *want = malloc(count * sz + 1);
    fill(k->dt, k->op, c->n, c->keys[c->rank], 0, count, want);
    for (size_t j = 0; j < count; j++) {
        if (memcmp((const char *)buf + j * sz, want + j * sz, sz) != 0) {
            case_fail(c, k, "sendbuf index %zu was modified", j);
            break;
        }
    }
    free(want);
}

/* ---- Cross-rank bitwise agreement ---- */

static void flush_hashes(ctx_t *c)
{
    if (c->npend == 0) return;
    uint64_t *all = malloc(c->npend * (size_t)c->n * sizeof(uint64_t));
    chorus_status_t st = chorus_allgather(c->pend_hash, all, c->npend, CHORUS_UINT64, c->comm,
                                          NULL);
    mp_die_on_error(st, c->comm, c->rank, "allgather of result hashes");
    for (size_t j = 0; j < c->npend; j++) {
        if (c->state[c->pend[j].id] == 1) continue;
        for (int q = 0; q < c->n; q++) {
            if (all[(size_t)q * c->npend + j] != c->pend_hash[j]) {
                case_fail(c, &c->pend[j], "result differs bitwise from rank %d's", q);
                break;
            }
        }
    }
    free(all);
    c->npend = 0;
}

static void push_hash(ctx_t *c, const mcase_t *k, const void *buf, size_t bytes)
{
    if (c->npend == 512) flush_hashes(c);
    if (c->pend == NULL) {
        c->pend = malloc(512 * sizeof(*c->pend));
        c->pend_hash = malloc(512 * sizeof(*c->pend_hash));
    }
    c->pend[c->npend] = *k;
    c->pend_hash[c->npend++] = mp_hash(buf, bytes);
}

/* ---- The collectives ---- */

static void run_allreduce(ctx_t *c, chorus_dtype_t dt, int op, size_t count, int inplace)
{
    mcase_t k = case_new(c, C_ALLREDUCE, dt, op, count, inplace, -1);
    size_t bytes = count * mp_dtype_size(dt);
    void *recv = gbuf_alloc(bytes), *send = inplace ? recv : gbuf_alloc(bytes);
    fill(dt, op, c->n, c->keys[c->rank], 0, count, send);
    if (call_ok(c, &k, chorus_allreduce(send, recv, count, dt, op, c->comm, NULL),
                "chorus_allreduce")) {
        check_reduce(c, &k, recv, count, 0, 1);
        if (!inplace) check_intact(c, &k, send, count);
    }
    gbuf_check(c, &k, recv, bytes, "recvbuf");
    push_hash(c, &k, recv, bytes);
    if (!inplace) gbuf_check(c, &k, send, bytes, "sendbuf"), gbuf_free(send);
    gbuf_free(recv);
}

static void run_allgather(ctx_t *c, chorus_dtype_t dt, size_t count, int inplace)
{
    mcase_t k = case_new(c, C_ALLGATHER, dt, RAW, count, inplace, -1);
    size_t sz = mp_dtype_size(dt), bytes = count * sz;
    char *recv = gbuf_alloc(bytes * c->n);
    void *send = inplace ? recv + (size_t)c->rank * bytes : gbuf_alloc(bytes);
    fill(dt, RAW, c->n, c->keys[c->rank], 0, count, send);
    if (call_ok(c, &k, chorus_allgather(send, recv, count, dt, c->comm, NULL),
                "chorus_allgather")) {
        for (int q = 0; q < c->n; q++)
            if (!check_raw(c, &k, recv + (size_t)q * bytes, count, q, 0, "recvbuf block", 1))
                break;
        if (!inplace) check_intact(c, &k, send, count);
    }
    gbuf_check(c, &k, recv, bytes * c->n, "recvbuf");
    push_hash(c, &k, recv, bytes * c->n);
    if (!inplace) gbuf_check(c, &k, send, bytes, "sendbuf"), gbuf_free(send);
    gbuf_free(recv);
}

static void run_reduce_scatter(ctx_t *c, chorus_dtype_t dt, int op, size_t count, int inplace)
{
    mcase_t k = case_new(c, C_REDUCE_SCATTER, dt, op, count, inplace, -1);
    size_t sz = mp_dtype_size(dt), bytes = count * sz;
    char *send = gbuf_alloc(bytes * c->n);
    void *recv = inplace ? send + (size_t)c->rank * bytes : gbuf_alloc(bytes);
    fill(dt, op, c->n, c->keys[c->rank], 0, count * c->n, send);
    if (call_ok(c, &k, chorus_reduce_scatter(send, recv, count, dt, op, c->comm, NULL),
                "chorus_reduce_scatter")) {
        check_reduce(c, &k, recv, count, (size_t)c->rank * count, 0);
        if (!inplace) check_intact(c, &k, send, count * c->n);
    }
    gbuf_check(c, &k, send, bytes * c->n, "sendbuf");
    if (!inplace) gbuf_check(c, &k, recv, bytes, "recvbuf"), gbuf_free(recv);
    gbuf_free(send);
}

static void run_broadcast(ctx_t *c, chorus_dtype_t dt, size_t count, int root, int inplace)
{
    mcase_t k = case_new(c, C_BROADCAST, dt, RAW, count, inplace, root);
    size_t bytes = count * mp_dtype_size(dt);
    void *recv = gbuf_alloc(bytes), *send = NULL;
    /* Out of place, non-roots pass NULL: the API says sendbuf is only read on root. */
    if (inplace) send = recv;
    else if (c->rank == root) send = gbuf_alloc(bytes);
    if (c->rank == root) fill(dt, RAW, c->n, c->keys[root], 0, count, send);
    if (call_ok(c, &k, chorus_broadcast(send, recv, count, dt, root, c->comm, NULL),
                "chorus_broadcast")) {
        check_raw(c, &k, recv, count, root, 0, "recvbuf", 1);
        if (!inplace && c->rank == root) check_intact(c, &k, send, count);
    }
    gbuf_check(c, &k, recv, bytes, "recvbuf");
    push_hash(c, &k, recv, bytes);
    if (send != NULL && send != recv) gbuf_check(c, &k, send, bytes, "sendbuf"), gbuf_free(send);
    gbuf_free(recv);
}

static void run_reduce(ctx_t *c, chorus_dtype_t dt, int op, size_t count, int root, int inplace)
{
    mcase_t k = case_new(c, C_REDUCE, dt, op, count, inplace, root);
    size_t bytes = count * mp_dtype_size(dt);
    void *send = gbuf_alloc(bytes), *recv = NULL;
    /* Out of place, non-roots pass NULL: the API says recvbuf is only written on root. */
    if (inplace) recv = send;
    else if (c->rank == root) recv = gbuf_alloc(bytes);
    fill(dt, op, c->n, c->keys[c->rank], 0, count, send);
    if (call_ok(c, &k, chorus_reduce(send, recv, count, dt, op, root, c->comm, NULL),
                "chorus_reduce")) {
        if (c->rank == root) check_reduce(c, &k, recv, count, 0, 0);
        if (!inplace) check_intact(c, &k, send, count);
    }
    gbuf_check(c, &k, send, bytes, "sendbuf");
    if (recv != NULL && recv != send) gbuf_check(c, &k, recv, bytes, "recvbuf"), gbuf_free(recv);
    gbuf_free(send);
}

static void run_alltoall(ctx_t *c, chorus_dtype_t dt, size_t count, int inplace)
{
    mcase_t k = case_new(c, C_ALLTOALL, dt, RAW, count, inplace, -1);
    size_t bytes = count * mp_dtype_size(dt) * c->n;
    char *recv = gbuf_alloc(bytes), *send = inplace ? recv : gbuf_alloc(bytes);
    fill(dt, RAW, c->n, c->keys[c->rank], 0, count * c->n, send);
    if (call_ok(c, &k, chorus_alltoall(send, recv, count, dt, c->comm, NULL),
                "chorus_alltoall")) {
        /* Block q of recvbuf is block `rank` of rank q's sendbuf. */
        for (int q = 0; q < c->n; q++) {
            const char *blk = recv + (size_t)q * count * mp_dtype_size(dt);
            if (!check_raw(c, &k, blk, count, q, (size_t)c->rank * count, "recvbuf block", 0))
                break;
        }
        if (!inplace) check_intact(c, &k, send, count * c->n);
    }
    gbuf_check(c, &k, recv, bytes, "recvbuf");
    if (!inplace) gbuf_check(c, &k, send, bytes, "sendbuf"), gbuf_free(send);
    gbuf_free(recv);
}

/* Runs a recorded group of sends and receives; the first error wins. */
static chorus_status_t group_end_after(chorus_status_t st)
{
    chorus_status_t end = chorus_group_end();
    return st != CHORUS_SUCCESS ? st : end;
}

/* Every rank sends to the next and receives from the previous, in one group. */
static void run_p2p_ring(ctx_t *c, chorus_dtype_t dt, size_t count)
{
    if (c->n < 2) return; /* a rank talking to itself is not part of the contract */
    mcase_t k = case_new(c, C_P2P_RING, dt, RAW, count, 0, -1);
    size_t bytes = count * mp_dtype_size(dt);
    void *send = gbuf_alloc(bytes), *recv = gbuf_alloc(bytes);
    int next = (c->rank + 1) % c->n, prev = (c->rank + c->n - 1) % c->n;
    fill(dt, RAW, c->n, c->keys[c->rank], 0, count, send);
    chorus_status_t st = chorus_group_start();
    if (st == CHORUS_SUCCESS) {
        st = chorus_send(send, count, dt, next, c->comm, NULL);
        if (st == CHORUS_SUCCESS) st = chorus_recv(recv, count, dt, prev, c->comm, NULL);
        st = group_end_after(st);
    }
    if (call_ok(c, &k, st, "group send/recv ring")) {
        check_raw(c, &k, recv, count, prev, 0, "recvbuf", 0);
        check_intact(c, &k, send, count);
    }
    gbuf_check(c, &k, send, bytes, "sendbuf");
    gbuf_check(c, &k, recv, bytes, "recvbuf");
    gbuf_free(send);
    gbuf_free(recv);
}

/* Every rank sends two messages to every other rank in one group, receives posted first
 * and in the opposite peer order; the two messages of a pair must arrive in order. */
static void run_p2p_pairs(ctx_t *c, chorus_dtype_t dt, size_t count)
{
    if (c->n < 2) return;
    mcase_t k = case_new(c, C_P2P_PAIRS, dt, RAW, count, 0, -1);
    size_t sz = mp_dtype_size(dt), bytes = 2 * (size_t)c->n * count * sz, blk = count * sz;
    char *send = gbuf_alloc(bytes), *recv = gbuf_alloc(bytes);
    fill(dt, RAW, c->n, c->keys[c->rank], 0, 2 * (size_t)c->n * count, send);
    chorus_status_t st = chorus_group_start();
    if (st == CHORUS_SUCCESS) {
        for (int p = c->n - 1; p >= 0 && st == CHORUS_SUCCESS; p--) {
            if (p == c->rank) continue;
            st = chorus_recv(recv + 2 * p * blk, count, dt, p, c->comm, NULL);
            if (st == CHORUS_SUCCESS)
                st = chorus_recv(recv + (2 * p + 1) * blk, count, dt, p, c->comm, NULL);
        }
        for (int p = 0; p < c->n && st == CHORUS_SUCCESS; p++) {
            if (p == c->rank) continue;
            st = chorus_send(send + 2 * p * blk, count, dt, p, c->comm, NULL);
            if (st == CHORUS_SUCCESS)
                st = chorus_send(send + (2 * p + 1) * blk, count, dt, p, c->comm, NULL);
        }
        st = group_end_after(st);
    }
    if (call_ok(c, &k, st, "group send/recv all pairs")) {
        for (int p = 0; p < c->n; p++) {
            if (p == c->rank) continue;
            size_t first = 2 * (size_t)c->rank * count;
            if (!check_raw(c, &k, recv + 2 * p * blk, count, p, first, "first message", 0) ||
                !check_raw(c, &k, recv + (2 * p + 1) * blk, count, p, first + count,
                           "second message", 0))
                break;
        }
        check_intact(c, &k, send, 2 * (size_t)c->n * count);
    }
    gbuf_check(c, &k, send, bytes, "sendbuf");
    gbuf_check(c, &k, recv, bytes, "recvbuf");
    gbuf_free(send);
    gbuf_free(recv);
}

/* Blocking send and recv outside a group between rank pairs (0,1), (2,3), ...: the even
 * rank sends first, so the pair cannot deadlock even if a send waits for its receiver. */
static void run_sendrecv(ctx_t *c, chorus_dtype_t dt, size_t count)
{
    if (c->n < 2) return;
    mcase_t k = case_new(c, C_SENDRECV, dt, RAW, count, 0, -1);
    int partner = c->rank ^ 1;
    size_t bytes = count * mp_dtype_size(dt);
    void *send = gbuf_alloc(bytes), *recv = gbuf_alloc(bytes);
    fill(dt, RAW, c->n, c->keys[c->rank], 0, count, send);
    if (partner < c->n) {
        chorus_status_t st;
        if (c->rank % 2 == 0) {
            st = chorus_send(send, count, dt, partner, c->comm, NULL);
            if (st == CHORUS_SUCCESS) st = chorus_recv(recv, count, dt, partner, c->comm, NULL);
        } else {
            st = chorus_recv(recv, count, dt, partner, c->comm, NULL);
            if (st == CHORUS_SUCCESS) st = chorus_send(send, count, dt, partner, c->comm, NULL);
        }
        if (call_ok(c, &k, st, "blocking send/recv")) {
            check_raw(c, &k, recv, count, partner, 0, "recvbuf", 0);
            check_intact(c, &k, send, count);
        }
    }
    gbuf_check(c, &k, send, bytes, "sendbuf");
    gbuf_check(c, &k, recv, bytes, "recvbuf");
    gbuf_free(send);
    gbuf_free(recv);
}

/* Each round every rank creates a file, enters the barrier, then requires everyone's file
 * of that round; the last rank arrives late on purpose so that a barrier that does not wait
 * is caught. The directory name comes from rank 0 by broadcast. */
static void run_barrier(ctx_t *c)
{
    mcase_t k = case_new(c, C_BARRIER, CHORUS_UINT8, RAW, 0, 0, -1);
    char dir[64] = "", path[96];
    if (c->rank == 0) {
        snprintf(dir, sizeof(dir), "/tmp/chorus-mp-barrier-XXXXXX");
        if (mkdtemp(dir) == NULL) {
            printf("FAIL rank 0: mkdtemp: %s\n", strerror(errno));
            dir[0] = '\0';
        }
    }
    chorus_status_t st = chorus_broadcast(dir, dir, sizeof(dir), CHORUS_UINT8, 0, c->comm, NULL);
    mp_die_on_error(st, c->comm, c->rank, "broadcast of the barrier directory");
    if (dir[0] == '\0') exit(1);
    for (int round = 0; round < 4; round++) {
        if (c->rank == c->n - 1 && round % 2 == 0) usleep(30000);
        snprintf(path, sizeof(path), "%s/%d.%d", dir, round, c->rank);
        FILE *f = fopen(path, "w");
        if (f != NULL) fclose(f);
        if (!call_ok(c, &k, chorus_barrier(c->comm), "chorus_barrier")) break;
        for (int q = 0; q < c->n; q++) {
            struct stat sb;
            snprintf(path, sizeof(path), "%s/%d.%d", dir, round, q);
            if (stat(path, &sb) != 0) {
                case_fail(c, &k, "round %d: left the barrier before rank %d entered it",
                          round, q);
                break;
            }
        }
    }
    mp_die_on_error(chorus_barrier(c->comm), c->comm, c->rank, "chorus_barrier");
    for (int round = 0; round < 4; round++) {
        snprintf(path, sizeof(path), "%s/%d.%d", dir, round, c->rank);
        unlink(path);
    }
    mp_die_on_error(chorus_barrier(c->comm), c->comm, c->rank, "chorus_barrier");
    if (c->rank == 0) rmdir(dir);
}

/* MIN and MAX propagate NaN (chorus.h): NaN from one rank at index 2 and from another at
 * index 4 must come out as NaN there, and exact values elsewhere. */
static void run_nan(ctx_t *c, chorus_dtype_t dt, int op)
{
    enum { COUNT = 6 };
    mcase_t k = case_new(c, C_NAN, dt, op, COUNT, 0, -1);
    size_t bytes = COUNT * mp_dtype_size(dt);
    void *send = gbuf_alloc(bytes), *recv = gbuf_alloc(bytes);
    fill(dt, op, c->n, c->keys[c->rank], 0, COUNT, send);
    if (c->rank == c->n - 1) mp_put_float(dt, send, 2, NAN);
    if (c->rank == 0) mp_put_float(dt, send, 4, NAN);
    if (call_ok(c, &k, chorus_allreduce(send, recv, COUNT, dt, op, c->comm, NULL),
                "chorus_allreduce")) {
        for (size_t j = 0; j < COUNT; j++) {
            long double got = mp_get_float(dt, recv, j);
            if (j == 2 || j == 4) {
                if (!isnan(got)) case_fail(c, &k, "index %zu: got %.10Lg expected NaN", j, got);
            } else if (!check_float_elem(c, &k, recv, j, j)) {
                break;
            }
        }
    }
    gbuf_check(c, &k, recv, bytes, "recvbuf");
    push_hash(c, &k, recv, bytes);
    gbuf_free(send);
    gbuf_free(recv);
}

/* ---- Driver ---- */

typedef struct {
    int colls[NCOLLS];
    int large_colls[NCOLLS];
    int dtypes[CHORUS_NUM_DTYPES];
    int ops[CHORUS_NUM_OPS];
    long counts[MAX_COUNTS]; /* -1 stands for n-1 */
    int ncounts;
    size_t large;
} plan_t;

/* The distinct counts of the plan for n ranks, in order. */
static int plan_counts(const plan_t *p, int n, size_t *out)
{
    int m = 0;
    for (int i = 0; i < p->ncounts; i++) {
        size_t v = p->counts[i] < 0 ? (size_t)(n - 1) : (size_t)p->counts[i];
        int dup = 0;
        for (int j = 0; j < m; j++) dup |= out[j] == v;
        if (!dup) out[m++] = v;
    }
    return m;
}

static int plan_roots(int n, int *roots)
{
    int m = 0, cand[3] = {0, n - 1, n / 2};
    for (int i = 0; i < 3; i++) {
        int dup = 0;
        for (int j = 0; j < m; j++) dup |= roots[j] == cand[i];
        if (!dup) roots[m++] = cand[i];
    }
    return m;
}

static void run_coll_dtype(ctx_t *c, const plan_t *p, int coll, chorus_dtype_t dt)
{
    size_t counts[MAX_COUNTS];
    int roots[3], nc = plan_counts(p, c->n, counts), nr = plan_roots(c->n, roots);
    for (int ci = 0; ci < nc; ci++) {
        size_t cnt = counts[ci];
        for (int ip = 0; ip < 2; ip++) {
            if (coll == C_ALLGATHER) run_allgather(c, dt, cnt, ip);
            if (coll == C_ALLTOALL) run_alltoall(c, dt, cnt, ip);
            for (int ri = 0; ri < nr && coll == C_BROADCAST; ri++)
                run_broadcast(c, dt, cnt, roots[ri], ip);
            for (int op = 0; op < CHORUS_NUM_OPS; op++) {
                if (!p->ops[op]) continue;
                if (coll == C_ALLREDUCE) run_allreduce(c, dt, op, cnt, ip);
                if (coll == C_REDUCE_SCATTER) run_reduce_scatter(c, dt, op, cnt, ip);
                for (int ri = 0; ri < nr && coll == C_REDUCE; ri++)
                    run_reduce(c, dt, op, cnt, roots[ri], ip);
            }
        }
        if (ci > 0) continue; /* the point-to-point patterns carry no in-place or op */
        for (int cj = 0; cj < nc; cj++) {
            if (coll == C_P2P_RING) run_p2p_ring(c, dt, counts[cj]);
            if (coll == C_P2P_PAIRS) run_p2p_pairs(c, dt, counts[cj]);
            if (coll == C_SENDRECV) run_sendrecv(c, dt, counts[cj]);
        }
    }
    flush_hashes(c);
}

/* The ~1M-element cases: one or two per collective, not the whole cross product. */
static void run_large(ctx_t *c, const plan_t *p)
{
    size_t big = p->large, per = big / (size_t)c->n + 1;
    int n = c->n;
    if (big == 0) return;
    if (p->large_colls[C_ALLREDUCE]) {
        run_allreduce(c, CHORUS_FLOAT32, CHORUS_SUM, big, 0);
        run_allreduce(c, CHORUS_BFLOAT16, CHORUS_AVG, big, 1);
        run_allreduce(c, CHORUS_INT64, CHORUS_MAX, big, 0);
    }
    if (p->large_colls[C_REDUCE_SCATTER]) run_reduce_scatter(c, CHORUS_FLOAT32, CHORUS_SUM, per, 1);
    if (p->large_colls[C_ALLGATHER]) run_allgather(c, CHORUS_UINT8, per, 0);
    if (p->large_colls[C_BROADCAST]) run_broadcast(c, CHORUS_FLOAT64, big, n - 1, 0);
    if (p->large_colls[C_REDUCE]) run_reduce(c, CHORUS_FLOAT32, CHORUS_SUM, big, n / 2, 1);
    if (p->large_colls[C_ALLTOALL]) run_alltoall(c, CHORUS_INT32, per, 0);
    if (p->large_colls[C_P2P_RING] && n > 1) run_p2p_ring(c, CHORUS_FLOAT16, big);
    flush_hashes(c);
}

/* Sets flags[i] for each comma-separated name of list found in names ("all": every one). */
static int parse_names(const char *list, const char *const *names, int count, int *flags)
{
    char buf[512], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", list);
    memset(flags, 0, sizeof(int) * (size_t)count);
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < count; i++) {
            if (strcmp(t, "all") == 0 || strcmp(t, names[i]) == 0) flags[i] = found = 1;
        }
        if (!found) {
            fprintf(stderr, "mp_coll_matrix: unknown name '%s'\n", t);
            return -1;
        }
    }
    return 0;
}

static int parse_counts(const char *list, plan_t *p)
{
    char buf[256], *save = NULL, *end;
    snprintf(buf, sizeof(buf), "%s", list);
    p->ncounts = 0;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (p->ncounts == MAX_COUNTS) return -1;
        if (strcmp(t, "n-1") == 0) {
            p->counts[p->ncounts++] = -1;
            continue;
        }
        long v = strtol(t, &end, 10);
        if (*end != '\0' || v < 0) return -1;
        p->counts[p->ncounts++] = v;
    }
    return 0;
}

/* The collectives a forced algorithm implements (lib/algo/algo.h); "auto" runs them all. */
static const char *default_colls(const char *algo)
{
    if (strcmp(algo, "ring") == 0) return "allreduce,allgather,reduce_scatter,broadcast,reduce";
    if (strcmp(algo, "tree") == 0) return "allreduce,broadcast,reduce";
    if (strcmp(algo, "rd") == 0) return "allreduce,nan_minmax";
    return "all";
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mp_coll_matrix [--algo A] [--quick] [--colls LIST] [--dtypes LIST]\n"
            "       [--ops LIST] [--counts LIST] [--large N] [--large-colls LIST]\n"
            "       [--seed S] [--verbose] [--registered all|odd|even [--registered-bytes N]]\n"
            "  LIST: comma-separated names or 'all'; counts may use 'n-1'.\n"
            "  Collectives: allreduce allgather reduce_scatter broadcast reduce alltoall\n"
            "  p2p_ring p2p_pairs sendrecv barrier nan_minmax.\n");
}

static int parse_args(int argc, char **argv, plan_t *p, ctx_t *c)
{
    static const struct option opts[] = {
        {"algo", required_argument, NULL, 'a'},   {"quick", no_argument, NULL, 'q'},
        {"colls", required_argument, NULL, 'c'},  {"dtypes", required_argument, NULL, 'd'},
        {"ops", required_argument, NULL, 'o'},    {"counts", required_argument, NULL, 'n'},
        {"large", required_argument, NULL, 'l'},  {"large-colls", required_argument, NULL, 'L'},
        {"seed", required_argument, NULL, 's'},   {"verbose", no_argument, NULL, 'v'},
        {"registered", required_argument, NULL, 'R'},
        {"registered-bytes", required_argument, NULL, 'B'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    const char *colls = NULL, *dtypes = "all", *ops = "all", *counts = "0,1,7,n-1,3001";
    const char *large_colls = "all";
    const char *dnames[CHORUS_NUM_DTYPES], *onames[CHORUS_NUM_OPS];
    int opt, rc = 0;
    for (int i = 0; i < CHORUS_NUM_DTYPES; i++) dnames[i] = mp_dtype_name(i);
    for (int i = 0; i < CHORUS_NUM_OPS; i++) onames[i] = mp_op_name(i);
    p->large = (1u << 20) + 3;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'a': setenv("CHORUS_ALGO", optarg, 1); break;
        case 'q': counts = "0,1,n-1,1000", p->large = 0; break;
        case 'c': colls = optarg; break;
        case 'd': dtypes = optarg; break;
        case 'o': ops = optarg; break;
        case 'n': counts = optarg; break;
        case 'l': p->large = strtoull(optarg, NULL, 10); break;
        case 'L': large_colls = optarg; break;
        case 's': c->base_seed = strtoull(optarg, NULL, 0); break;
        case 'v': c->verbose = 1; break;
        case 'R': c->registered = optarg; break;
        case 'B': c->registered_bytes = strtoull(optarg, NULL, 0); break;
        default: usage(); return -1;
        }
    }
    /* The library reads CHORUS_ALGO when the communicator is made, after this. */
    c->algo = getenv("CHORUS_ALGO") != NULL && getenv("CHORUS_ALGO")[0] ? getenv("CHORUS_ALGO")
                                                                         : "auto";
    if (colls == NULL) colls = default_colls(c->algo);
    rc |= parse_names(colls, coll_names, NCOLLS, p->colls);
    rc |= parse_names(large_colls, coll_names, NCOLLS, p->large_colls);
    rc |= parse_names(dtypes, dnames, CHORUS_NUM_DTYPES, p->dtypes);
    rc |= parse_names(ops, onames, CHORUS_NUM_OPS, p->ops);
    if (parse_counts(counts, p) != 0) {
        fprintf(stderr, "mp_coll_matrix: bad --counts '%s'\n", counts);
        rc = -1;
    }
    for (int i = 0; i < NCOLLS; i++) p->large_colls[i] &= p->colls[i];
    if (rc != 0) usage();
    return rc;
}

static void run_plan(ctx_t *c, const plan_t *p)
{
    for (int coll = 0; coll < NCOLLS; coll++) {
        if (!p->colls[coll]) continue;
        double t0 = mp_now();
        size_t first = c->ncases;
        if (coll == C_BARRIER) {
            run_barrier(c);
        } else if (coll == C_NAN) {
            for (int dt = CHORUS_FLOAT16; dt <= CHORUS_FLOAT64; dt++) {
                if (!p->dtypes[dt]) continue;
                if (p->ops[CHORUS_MIN]) run_nan(c, dt, CHORUS_MIN);
                if (p->ops[CHORUS_MAX]) run_nan(c, dt, CHORUS_MAX);
            }
            flush_hashes(c);
        } else {
            for (int dt = 0; dt < CHORUS_NUM_DTYPES; dt++)
                if (p->dtypes[dt]) run_coll_dtype(c, p, coll, dt);
        }
        if (c->verbose && c->rank == 0)
            printf("  %-14s %5zu cases %7.2f s\n", coll_names[coll], c->ncases - first,
                   mp_now() - t0);
    }
    double t0 = mp_now();
    size_t first = c->ncases;
    run_large(c, p);
    if (c->verbose && c->rank == 0 && c->ncases > first)
        printf("  %-14s %5zu cases %7.2f s\n", "large", c->ncases - first, mp_now() - t0);
}

int main(int argc, char **argv)
{
    plan_t p;
    ctx_t c;
    memset(&p, 0, sizeof(p));
    memset(&c, 0, sizeof(c));
    c.base_seed = 0x5eed;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parse_args(argc, argv, &p, &c) != 0) return 2;
    c.comm = mp_init_env("mp_coll_matrix", &c.rank, &c.n);
    c.keys = malloc((size_t)c.n * sizeof(*c.keys));
    if (c.registered != NULL) {
        void *win = NULL;
        int mine = strcmp(c.registered, "all") == 0 ||
                   (strcmp(c.registered, "odd") == 0 && c.rank % 2 == 1) ||
                   (strcmp(c.registered, "even") == 0 && c.rank % 2 == 0);
        if (!mine && strcmp(c.registered, "odd") != 0 && strcmp(c.registered, "even") != 0) {
            fprintf(stderr, "mp_coll_matrix: --registered all, odd or even\n");
            return 2;
        }
        reg.size = c.registered_bytes ? c.registered_bytes : (size_t)64 << 20;
        /* Collective: every rank makes the window; the ranks not named keep using malloc. */
        mp_die_on_error(chorus_mem_alloc(c.comm, reg.size, &win), c.comm, c.rank,
                        "chorus_mem_alloc");
        if (mine) reg.base = win;
        c.reg_win = win;
    }
    double t0 = mp_now();
    run_plan(&c, &p);

    /* A case passed if it passed on every rank: MAX over ranks of 0/1/2 per case. */
    flush_hashes(&c);
    uint8_t *all = malloc(c.ncases + 1);
    chorus_status_t st = chorus_allreduce(c.state, all, c.ncases, CHORUS_UINT8, CHORUS_MAX,
                                          c.comm, NULL);
    mp_die_on_error(st, c.comm, c.rank, "allreduce of the case results");
    size_t counted[3] = {0, 0, 0};
    for (size_t i = 0; i < c.ncases; i++) counted[all[i] <= 2 ? all[i] : 2]++;
    if (c.rank == 0) {
        printf("mp_coll_matrix: algo=%s nranks=%d transport=%s: %zu passed, %zu failed, "
               "%zu skipped (%.2f s)\n",
               c.algo, c.n, getenv("CHORUS_TRANSPORT") ? getenv("CHORUS_TRANSPORT") : "auto",
               counted[0], counted[2], counted[1], mp_now() - t0);
    }
    int failed = c.local_fail > 0 || counted[2] > 0;
    if (c.registered != NULL && strcmp(c.registered, "all") == 0 && c.n > 1 &&
        !(getenv("CHORUS_ARENA") != NULL && strcmp(getenv("CHORUS_ARENA"), "0") == 0)) {
        /* Every rank registered: some calls must have read their peers' buffers in place. */
        uint64_t calls = 0, bytes = 0;
        mp_die_on_error(chorus_mem_stats(c.comm, &calls, &bytes), c.comm, c.rank,
                        "chorus_mem_stats");
        if (calls == 0 || bytes == 0) {
            printf("[%d] FAIL --registered all: no call read its peers' windows (%llu calls, "
                   "%llu bytes)\n", c.rank, (unsigned long long)calls, (unsigned long long)bytes);
            failed = 1;
        } else if (c.verbose) {
            printf("[%d] %llu calls read every peer's window, %llu bytes from windows\n", c.rank,
                   (unsigned long long)calls, (unsigned long long)bytes);
        }
    }
    /* The summary is out before any rank exits (a failing exit stops the others). */
    mp_die_on_error(chorus_barrier(c.comm), c.comm, c.rank, "final barrier");
    if (c.reg_win != NULL)
        mp_die_on_error(chorus_mem_free(c.comm, c.reg_win), c.comm, c.rank, "chorus_mem_free");
    chorus_comm_destroy(c.comm);
    free(all);
    free(c.state);
    free(c.pend);
    free(c.pend_hash);
    free(c.keys);
    return failed ? 1 : 0;
}
