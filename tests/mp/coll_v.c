/*
 * The matrix of the collectives of issue 41 (gather, scatter, allgatherv, reduce_scatterv,
 * alltoallv), as tests/mp/coll_matrix.c is for the others: every dtype, every op for
 * reduce_scatterv, count patterns with odd, zero and uneven per-rank counts, roots first,
 * last and middle, in place and not, blocking and nonblocking (alternate cases), with
 * exact expected values computed here from (rank, index).
 *
 *   chorusrun -n 4 -- mp_coll_v [--quick] [--colls gather,alltoallv] [--dtypes int32]
 *       [--verbose] [--registered all|odd|even [--registered-bytes N]]
 *
 * --registered: the buffers of the ranks it names come from one chorus_mem_alloc window
 * (a bump allocator), so that the library reads them in place (issue 38); the run fails if
 * no call read a window.
 *
 * Every receive buffer starts as the bitwise complement of what the call must write into
 * its blocks (so a block left unwritten is caught however its values look) and a fixed
 * pattern between and around the blocks (gaps in the displacements), which must come back
 * untouched; 64-byte canaries guard both ends. Integer results are exact; floating-point
 * reductions are held to the bound of n - 1 roundings in any order. allgatherv results are
 * compared bitwise across ranks (hashes). The nonblocking cases overwrite their count
 * arrays right after the chorus_i* call, which the library must have copied.
 * Rank 0 prints "N passed, N failed"; the exit status is non-zero on any failure.
 */
#include "mp/mp_common.h"
#include "util/status.h" /* CHORUS_PRINTF */

#include <getopt.h>
#include <math.h>
#include <stdarg.h>

enum { V_GATHER, V_SCATTER, V_ALLGATHERV, V_REDUCE_SCATTERV, V_ALLTOALLV, NV };
static const char *const v_names[NV] = {"gather", "scatter", "allgatherv", "reduce_scatterv",
                                        "alltoallv"};

#define RAW (-1)
#define GAP_FILL 0x5c
#define SPAN ((size_t)1 << 24) /* index space of one destination's block in a source */

typedef struct {
    chorus_comm_t comm;
    int rank, n, verbose, quick;
    uint64_t seed;
    uint64_t *keys; /* per rank, the random stream key of the current case */
    size_t ncases, nfail, case_fail;
    char desc[160];
    uint64_t hashes[1024];
    size_t nhash;
} vctx_t;

static void vfail(vctx_t *c, const char *fmt, ...) CHORUS_PRINTF(2, 3);
static void vfail(vctx_t *c, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    if (c->case_fail++) return; /* one line per case */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("FAIL %s rank=%d nranks=%d: %s\n", c->desc, c->rank, c->n, msg);
}

static void case_begin(vctx_t *c, const char *fmt, ...) CHORUS_PRINTF(2, 3);
static void case_begin(vctx_t *c, const char *fmt, ...)
{
    va_list ap;
    uint64_t s = mp_mix(c->seed ^ (++c->ncases * 0x632be59bd9b4e019ULL));

    va_start(ap, fmt);
    vsnprintf(c->desc, sizeof c->desc, fmt, ap);
    va_end(ap);
    c->case_fail = 0;
    for (int q = 0; q < c->n; q++) c->keys[q] = mp_rank_key(s, q);
}

static void case_end(vctx_t *c)
{
    if (c->case_fail) c->nfail++;
}

static void die_on(vctx_t *c, chorus_status_t st, const char *fn)
{
    char what[256];
    snprintf(what, sizeof what, "%s (%s)", fn, c->desc);
    mp_die_on_error(st, c->comm, c->rank, what);
}

/* ---- Values ---- */

/* Element `index` of rank q's input: RAW random bits, or for a reduction values whose
 * reduction is exact (integers: wrapping, small factors for prod, no overflow for avg) or
 * well conditioned (floats). */
static void gen(const vctx_t *c, chorus_dtype_t dt, int op, int q, size_t index, void *buf,
                size_t j)
{
    uint64_t r = mp_rand(c->keys[q], index);
    int bits = (int)mp_dtype_size(dt) * 8;

    if (op == RAW) {
        mp_put_bits(dt, buf, j, r);
    } else if (mp_is_float(dt)) {
        double u = mp_unit(r), s = (r & 1) ? -1.0 : 1.0;
        double v = op == CHORUS_PROD ? 1.0 + (u - 0.5) / 8
                   : op == CHORUS_MIN || op == CHORUS_MAX ? s * (1.0 + 999.0 * u)
                                                          : s * (0.5 + 0.5 * u);
        mp_put_float(dt, buf, j, v);
    } else if (op == CHORUS_PROD) {
        static const int64_t sv[] = {1, 2, 3, -1, -2};
        mp_put_bits(dt, buf, j, mp_is_signed(dt) ? (uint64_t)sv[r % 5] : 1 + r % 3);
    } else if (op == CHORUS_AVG) {
        uint64_t range = (bits == 64 ? ~0ULL : (1ULL << bits) - 1) / 2 / (uint64_t)c->n;
        mp_put_bits(dt, buf, j, mp_is_signed(dt) ? r % (2 * range + 1) - range : r % range);
    } else {
        mp_put_bits(dt, buf, j, r);
    }
}

static void fill(const vctx_t *c, chorus_dtype_t dt, int op, int q, size_t index, size_t count,
                 void *buf)
{
    for (size_t j = 0; j < count; j++) gen(c, dt, op, q, index + j, buf, j);
}

/* got[j] against the reduction over ranks of element index + j (integers exact, floats
 * within (n-1) roundings plus avg's division). Returns 0 after a failure. */
static int check_reduced(vctx_t *c, chorus_dtype_t dt, int op, const void *got, size_t j,
                         size_t index)
{
    uint64_t e;
    if (!mp_is_float(dt)) {
        int bits = (int)mp_dtype_size(dt) * 8;
        uint64_t mask = bits == 64 ? ~0ULL : (1ULL << bits) - 1, acc = 0;
        int64_t smin = INT64_MAX, smax = INT64_MIN, ssum = 0;
        uint64_t umin = ~0ULL, umax = 0;
        for (int q = 0; q < c->n; q++) {
            gen(c, dt, op, q, index, &e, 0);
            int64_t s = mp_get_int(dt, &e, 0);
            uint64_t u = mp_get_bits(dt, &e, 0);
            acc = q == 0 ? (uint64_t)s : op == CHORUS_PROD ? acc * (uint64_t)s : acc + (uint64_t)s;
            smin = s < smin ? s : smin, smax = s > smax ? s : smax;
            umin = u < umin ? u : umin, umax = u > umax ? u : umax;
            ssum += op == CHORUS_AVG && mp_is_signed(dt) ? s : 0;
        }
        uint64_t want = acc;
        if (op == CHORUS_MIN) want = mp_is_signed(dt) ? (uint64_t)smin : umin;
        if (op == CHORUS_MAX) want = mp_is_signed(dt) ? (uint64_t)smax : umax;
        if (op == CHORUS_AVG)
            want = mp_is_signed(dt) ? (uint64_t)(ssum / c->n) : (acc & mask) / (uint64_t)c->n;
        if ((mp_get_bits(dt, got, j) & mask) == (want & mask)) return 1;
        vfail(c, "index %zu: got 0x%llx expected 0x%llx", j,
              (unsigned long long)mp_get_bits(dt, got, j), (unsigned long long)(want & mask));
        return 0;
    }
    long double ref = 0, sabs = 0, u = mp_unit_roundoff(dt), x;
    for (int q = 0; q < c->n; q++) {
        gen(c, dt, op, q, index, &e, 0);
        x = mp_get_float(dt, &e, 0);
        ref = q == 0 ? x : op == CHORUS_PROD ? ref * x : op == CHORUS_MIN ? fminl(ref, x)
                         : op == CHORUS_MAX ? fmaxl(ref, x) : ref + x;
        sabs += fabsl(x);
    }
    long double gamma = (c->n - 1) * u / (1 - (c->n - 1) * u), bound = 0, eps = c->n * 0x1p-62L;
    if (op == CHORUS_SUM) bound = gamma * sabs + u * fabsl(ref) + eps * sabs;
    if (op == CHORUS_AVG) ref /= c->n, bound = (gamma + eps) * sabs / c->n + 3 * u * fabsl(ref);
    if (op == CHORUS_PROD) bound = (gamma + eps) * fabsl(ref);
    long double have = mp_get_float(dt, got, j);
    if (fabsl(have - ref) <= bound) return 1;
    vfail(c, "index %zu: got %.17Lg expected %.17Lg (bound %.3Lg)", j, have, ref, bound);
    return 0;
}

/* ---- --registered: buffers in this rank's chorus_mem_alloc window (issue 38) ----
 * Guarded buffers as mp_guarded's, from the window (mp_bump_t). Ranks outside the chosen
 * set (odd, even) allocate the window too (the call is collective) but keep using malloc,
 * so calls mix registered and plain buffers. */
static mp_bump_t reg = {.prog = "mp_coll_v"};

static unsigned char *vguarded(size_t bytes)
{
    unsigned char *p = mp_bump_alloc(&reg, bytes + 2 * MP_GUARD);

    if (p == NULL) return mp_guarded(bytes);
    memset(p, 0xa5, bytes + 2 * MP_GUARD); /* as mp_guarded */
    memset(p + MP_GUARD, 0, bytes);
    return p + MP_GUARD;
}

static void vguarded_free(unsigned char *buf)
{
    if (buf != NULL && !mp_bump_free(&reg, buf - MP_GUARD)) mp_guarded_free(buf);
}

/* ---- Receive buffers: complement inside the blocks, a pattern between them ---- */

typedef struct {
    unsigned char *p; /* the buffer (GUARD bytes of canary before and after) */
    size_t bytes;
} vbuf_t;

static vbuf_t vbuf_new(size_t bytes)
{
    vbuf_t b = {vguarded(bytes), bytes};
    memset(b.p, GAP_FILL, bytes);
    return b;
}

/* Poisons block [off, off + count) with the complement of what must land there. */
static void vbuf_poison(vbuf_t *b, size_t esize, size_t off, const void *want, size_t count)
{
    for (size_t i = 0; i < count * esize; i++)
        b->p[off * esize + i] = (unsigned char)~((const unsigned char *)want)[i];
}

/* Checks the canaries and that every byte outside the marked blocks is still GAP_FILL. */
static void vbuf_check_gaps(vctx_t *c, const vbuf_t *b, const uint8_t *in_block)
{
    if (!mp_guards_intact(b->p, b->bytes)) vfail(c, "a canary around recvbuf was overwritten");
    for (size_t i = 0; i < b->bytes; i++)
        if (!in_block[i] && b->p[i] != GAP_FILL) {
            vfail(c, "recvbuf byte %zu outside every block was written", i);
            return;
        }
}

static void mark(uint8_t *in_block, size_t esize, size_t off, size_t count)
{
    memset(in_block + off * esize, 1, count * esize);
}

/* Checks a data block: got[0..count) equal to want. */
static void check_block(vctx_t *c, chorus_dtype_t dt, const void *got, const void *want,
                        size_t count, int from, const char *what)
{
    size_t es = mp_dtype_size(dt);
    for (size_t j = 0; j < count; j++)
        if (memcmp((const char *)got + j * es, (const char *)want + j * es, es) != 0) {
            vfail(c, "%s from rank %d, index %zu: got 0x%llx expected 0x%llx", what, from, j,
                  (unsigned long long)mp_get_bits(dt, got, j),
                  (unsigned long long)mp_get_bits(dt, want, j));
            return;
        }
}

static void wait_req(vctx_t *c, chorus_status_t st, chorus_request_t *req, const char *fn)
{
    die_on(c, st, fn);
    die_on(c, chorus_wait(req), "chorus_wait");
}

/* ---- Count patterns ---- */

#define NPAT 5
/* Rank q's block length in pattern k (allgatherv, reduce_scatterv): all zero; uneven with
 * zeros; only the last and middle rank; multi-chunk (with CHORUS_CHUNK_SIZE=4K); odd. */
static size_t pat_count(int k, int q, int n)
{
    switch (k) {
    case 0: return 0;
    case 1: return (size_t)((q * 7 + 3) % 11) * (q % 3 != 1);
    case 2: return q == n - 1 ? 1001 : q == n / 2 ? 3 : 0;
    case 3: return 2000 + 37 * (size_t)q;
    default: return 1 + 2 * (size_t)(q % 2);
    }
}

/* What rank r sends rank p in alltoallv pattern k. */
static size_t a2a_count(int k, int r, int p, int n)
{
    switch (k) {
    case 0: return 0;
    case 1: return (size_t)((r * 3 + p * 5 + 1) % 7);
    case 2: return (r + p) % n == 0 ? 513 : 0;
    case 3: return 1500 + 11 * (size_t)r + 3 * (size_t)p;
    default: return (size_t)(r == p) + (size_t)(p == 0);
    }
}

/* ---- The collectives ---- */

static void run_gather(vctx_t *c, chorus_dtype_t dt, size_t count, int root, int inplace,
                       int nb)
{
    size_t es = mp_dtype_size(dt), n = (size_t)c->n;
    int me = c->rank, is_root = me == root;
    vbuf_t recv = {NULL, 0};
    unsigned char *send, *want = malloc(count * n * es + 1);
    uint8_t *in_block = calloc(count * n * es + 1, 1);
    chorus_request_t req = NULL;

    case_begin(c, "gather %s count=%zu root=%d inplace=%d nb=%d", mp_dtype_name(dt), count,
               root, inplace, nb);
    for (int q = 0; q < c->n; q++) fill(c, dt, RAW, q, 0, count, want + q * count * es);
    if (is_root) {
        recv = vbuf_new(count * n * es);
        vbuf_poison(&recv, es, 0, want, count * n);
        mark(in_block, es, 0, count * n);
    }
    send = inplace && is_root ? recv.p + (size_t)me * count * es : vguarded(count * es);
    fill(c, dt, RAW, me, 0, count, send);
    if (nb) wait_req(c, chorus_igather(send, recv.p, count, dt, root, c->comm, &req), &req,
                     "chorus_igather");
    else die_on(c, chorus_gather(send, recv.p, count, dt, root, c->comm, NULL), "chorus_gather");
    if (is_root) {
        for (int q = 0; q < c->n; q++)
            check_block(c, dt, recv.p + q * count * es, want + q * count * es, count, q, "block");
        vbuf_check_gaps(c, &recv, in_block);
    }
    if (!(inplace && is_root)) {
        check_block(c, dt, send, want + (size_t)me * count * es, count, me, "sendbuf changed:");
        vguarded_free(send);
    }
    if (recv.p != NULL) vguarded_free(recv.p);
    free(want);
    free(in_block);
    case_end(c);
}

static void run_scatter(vctx_t *c, chorus_dtype_t dt, size_t count, int root, int inplace,
                        int nb)
{
    size_t es = mp_dtype_size(dt), n = (size_t)c->n;
    int me = c->rank, is_root = me == root;
    unsigned char *send = NULL, *want = malloc(count * es + 1), *recvp;
    uint8_t *in_block = calloc(count * es + 1, 1);
    vbuf_t recv = {NULL, 0};
    chorus_request_t req = NULL;

    case_begin(c, "scatter %s count=%zu root=%d inplace=%d nb=%d", mp_dtype_name(dt), count,
               root, inplace, nb);
    /* Root's block for rank p, element j, is its element p * SPAN + j. */
    fill(c, dt, RAW, root, (size_t)me * SPAN, count, want);
    if (is_root) {
        send = vguarded(count * n * es);
        for (int p = 0; p < c->n; p++) fill(c, dt, RAW, root, p * SPAN, count, send + p * count * es);
    }
    if (inplace && is_root) {
        recvp = send + (size_t)me * count * es;
    } else {
        recv = vbuf_new(count * es);
        vbuf_poison(&recv, es, 0, want, count);
        mark(in_block, es, 0, count);
        recvp = recv.p;
    }
    if (nb) wait_req(c, chorus_iscatter(send, recvp, count, dt, root, c->comm, &req), &req,
                     "chorus_iscatter");
    else die_on(c, chorus_scatter(send, recvp, count, dt, root, c->comm, NULL), "chorus_scatter");
    check_block(c, dt, recvp, want, count, root, "block");
    if (recv.p != NULL) vbuf_check_gaps(c, &recv, in_block), vguarded_free(recv.p);
    if (send != NULL) {
        if (!mp_guards_intact(send, count * n * es)) vfail(c, "sendbuf canary overwritten");
        vguarded_free(send);
    }
    free(want);
    free(in_block);
    case_end(c);
}

/* Blocks in reverse rank order, 3 elements apart, one element in front. */
static size_t layout_reverse(const size_t *counts, int n, size_t *displs)
{
    size_t off = 1;
    for (int q = n - 1; q >= 0; q--) displs[q] = off, off += counts[q] + 3;
    return off + 2;
}

static void run_allgatherv(vctx_t *c, chorus_dtype_t dt, int pat, int inplace, int nb)
{
    int n = c->n, me = c->rank;
    size_t es = mp_dtype_size(dt), *counts = malloc(n * sizeof *counts);
    size_t *displs = malloc(n * sizeof *displs), total;
    chorus_request_t req = NULL;

    for (int q = 0; q < n; q++) counts[q] = pat_count(pat, q, n);
    total = layout_reverse(counts, n, displs);
    case_begin(c, "allgatherv %s pattern=%d inplace=%d nb=%d", mp_dtype_name(dt), pat, inplace,
               nb);
    vbuf_t recv = vbuf_new(total * es);
    uint8_t *in_block = calloc(total * es + 1, 1);
    unsigned char *want = malloc(total * es + 1), *send;
    for (int q = 0; q < n; q++) {
        fill(c, dt, RAW, q, 0, counts[q], want + displs[q] * es);
        vbuf_poison(&recv, es, displs[q], want + displs[q] * es, counts[q]);
        mark(in_block, es, displs[q], counts[q]);
    }
    send = inplace ? recv.p + displs[me] * es : vguarded(counts[me] * es);
    fill(c, dt, RAW, me, 0, counts[me], send);
    if (nb) {
        chorus_status_t st = chorus_iallgatherv(send, recv.p, counts[me], counts, displs, dt,
                                                c->comm, &req);
        memset(counts, 0xff, n * sizeof *counts); /* the library holds its own copy */
        memset(displs, 0xff, n * sizeof *displs);
        wait_req(c, st, &req, "chorus_iallgatherv");
        for (int q = 0; q < n; q++) counts[q] = pat_count(pat, q, n);
        layout_reverse(counts, n, displs);
    } else {
        die_on(c, chorus_allgatherv(send, recv.p, counts[me], counts, displs, dt, c->comm, NULL),
               "chorus_allgatherv");
    }
    for (int q = 0; q < n; q++)
        check_block(c, dt, recv.p + displs[q] * es, want + displs[q] * es, counts[q], q, "block");
    vbuf_check_gaps(c, &recv, in_block);
    if (c->nhash < sizeof c->hashes / sizeof c->hashes[0])
        c->hashes[c->nhash++] = mp_hash(recv.p, total * es);
    if (!inplace) {
        check_block(c, dt, send, want + displs[me] * es, counts[me], me, "sendbuf changed:");
        vguarded_free(send);
    }
    vguarded_free(recv.p);
    free(want);
    free(in_block);
    free(counts);
    free(displs);
    case_end(c);
}

static void run_reduce_scatterv(vctx_t *c, chorus_dtype_t dt, int op, int pat, int inplace,
                                int nb)
{
    int n = c->n, me = c->rank;
    size_t es = mp_dtype_size(dt), *counts = malloc(n * sizeof *counts), total = 0, mine = 0;
    chorus_request_t req = NULL;

    for (int q = 0; q < n; q++) {
        counts[q] = pat_count(pat, q, n);
        mine += q < me ? counts[q] : 0;
        total += counts[q];
    }
    case_begin(c, "reduce_scatterv %s %s pattern=%d inplace=%d nb=%d", mp_dtype_name(dt),
               mp_op_name(op), pat, inplace, nb);
    unsigned char *send = vguarded(total * es), *recvp;
    uint8_t *in_block = calloc(counts[me] * es + 1, 1);
    vbuf_t recv = {NULL, 0};
    fill(c, dt, op, me, 0, total, send);
    if (inplace) {
        recvp = send + mine * es;
    } else {
        /* Poisoned with the complement of this rank's input: a reduction's result is not
         * known to the bit, but one never written would be caught (its inputs differ). */
        recv = vbuf_new(counts[me] * es);
        vbuf_poison(&recv, es, 0, send + mine * es, counts[me]);
        mark(in_block, es, 0, counts[me]);
        recvp = recv.p;
    }
    if (nb) {
        chorus_status_t st = chorus_ireduce_scatterv(send, recvp, counts, dt, op, c->comm, &req);
        memset(counts, 0xff, n * sizeof *counts);
        wait_req(c, st, &req, "chorus_ireduce_scatterv");
        for (int q = 0; q < n; q++) counts[q] = pat_count(pat, q, n);
    } else {
        die_on(c, chorus_reduce_scatterv(send, recvp, counts, dt, op, c->comm, NULL),
               "chorus_reduce_scatterv");
    }
    for (size_t j = 0; j < counts[me]; j++)
        if (!check_reduced(c, dt, op, recvp, j, mine + j)) break;
    if (!inplace) {
        unsigned char *orig = malloc(total * es + 1);
        fill(c, dt, op, me, 0, total, orig);
        if (memcmp(orig, send, total * es) != 0) vfail(c, "sendbuf was modified");
        free(orig);
        vbuf_check_gaps(c, &recv, in_block);
        vguarded_free(recv.p);
    }
    if (!mp_guards_intact(send, total * es)) vfail(c, "a canary around sendbuf was overwritten");
    vguarded_free(send);
    free(in_block);
    free(counts);
    case_end(c);
}

/* alltoallv's layout on this rank: send blocks in reverse rank order 2 apart, receive blocks
 * from rank me + 1 on, 1 apart. Returns the elements of sendbuf and recvbuf. */
static void a2a_layout(const vctx_t *c, int pat, size_t *sc, size_t *sd, size_t *rc, size_t *rd,
                       size_t *stotal_p, size_t *rtotal_p)
{
    int n = c->n, me = c->rank;
    size_t stotal = 1, rtotal = 2;

    for (int k = n - 1; k >= 0; k--) {
        sc[k] = a2a_count(pat, me, k, n);
        sd[k] = stotal, stotal += sc[k] + 2;
    }
    for (int k = 0; k < n; k++) {
        int p = (me + 1 + k) % n;
        rc[p] = a2a_count(pat, p, me, n);
        rd[p] = rtotal, rtotal += rc[p] + 1;
    }
    *stotal_p = stotal;
    *rtotal_p = rtotal;
}

static void run_alltoallv(vctx_t *c, chorus_dtype_t dt, int pat, int nb)
{
    int n = c->n, me = c->rank;
    size_t es = mp_dtype_size(dt), sz = n * sizeof(size_t), stotal, rtotal;
    size_t *sc = malloc(sz), *sd = malloc(sz), *rc = malloc(sz), *rd = malloc(sz);
    chorus_request_t req = NULL;

    a2a_layout(c, pat, sc, sd, rc, rd, &stotal, &rtotal);
    case_begin(c, "alltoallv %s pattern=%d nb=%d", mp_dtype_name(dt), pat, nb);
    unsigned char *send = vguarded(stotal * es), *want = malloc(rtotal * es + 1);
    unsigned char *orig = malloc(stotal * es + 1);
    vbuf_t recv = vbuf_new(rtotal * es);
    uint8_t *in_block = calloc(rtotal * es + 1, 1);
    memset(send, GAP_FILL, stotal * es);
    /* Rank q's block for p, element j, is its element p * SPAN + j. */
    for (int p = 0; p < n; p++) {
        fill(c, dt, RAW, me, p * SPAN, sc[p], send + sd[p] * es);
        fill(c, dt, RAW, p, me * SPAN, rc[p], want + rd[p] * es);
        vbuf_poison(&recv, es, rd[p], want + rd[p] * es, rc[p]);
        mark(in_block, es, rd[p], rc[p]);
    }
    memcpy(orig, send, stotal * es);
    if (nb) {
        chorus_status_t st = chorus_ialltoallv(send, recv.p, sc, sd, rc, rd, dt, c->comm, &req);
        memset(sc, 0xff, sz), memset(sd, 0xff, sz), memset(rc, 0xff, sz), memset(rd, 0xff, sz);
        wait_req(c, st, &req, "chorus_ialltoallv");
        a2a_layout(c, pat, sc, sd, rc, rd, &stotal, &rtotal);
    } else {
        die_on(c, chorus_alltoallv(send, recv.p, sc, sd, rc, rd, dt, c->comm, NULL),
               "chorus_alltoallv");
    }
    for (int p = 0; p < n; p++)
        check_block(c, dt, recv.p + rd[p] * es, want + rd[p] * es, rc[p], p, "block");
    vbuf_check_gaps(c, &recv, in_block);
    if (memcmp(orig, send, stotal * es) != 0) vfail(c, "sendbuf was modified");
    if (!mp_guards_intact(send, stotal * es)) vfail(c, "a canary around sendbuf was overwritten");
    vguarded_free(send);
    vguarded_free(recv.p);
    free(want), free(orig), free(in_block), free(sc), free(sd), free(rc), free(rd);
    case_end(c);
}

/* ---- Driver ---- */

/* Every rank's allgatherv results of the batch must be the same bytes. */
static void flush_hashes(vctx_t *c)
{
    size_t k = c->nhash;
    uint64_t *all = malloc(k * (size_t)c->n * sizeof *all + 1);

    die_on(c, chorus_allgather(c->hashes, all, k, CHORUS_UINT64, c->comm, NULL),
           "allgather of result hashes");
    for (size_t j = 0; j < k; j++)
        for (int q = 0; q < c->n; q++)
            if (all[(size_t)q * k + j] != c->hashes[j]) {
                printf("FAIL allgatherv batch case %zu rank=%d: result differs bitwise from "
                       "rank %d's\n", j, c->rank, q);
                c->nfail++;
                break;
            }
    free(all);
    c->nhash = 0;
}

static void run_dtype(vctx_t *c, const int *colls, chorus_dtype_t dt)
{
    int n = c->n, roots[3] = {0, n - 1, n / 2}, nroots = n == 1 ? 1 : n == 2 ? 2 : 3;
    size_t counts[] = {0, 1, 7, (size_t)n - 1, 3001};
    int ncounts = c->quick ? 3 : 5, nb = 0;

    for (int ci = 0; ci < ncounts; ci++)
        for (int ri = 0; ri < nroots; ri++)
            for (int ip = 0; ip < 2; ip++) {
                size_t cnt = counts[c->quick ? (ci == 2 ? 4 : ci + 1) % 5 : ci];
                if (colls[V_GATHER]) run_gather(c, dt, cnt, roots[ri], ip, nb ^= 1);
                if (colls[V_SCATTER]) run_scatter(c, dt, cnt, roots[ri], ip, nb ^= 1);
            }
    for (int pat = 0; pat < NPAT; pat++) {
        if (c->quick && pat != 1 && pat != 2) continue;
        for (int ip = 0; ip < 2; ip++) {
            if (colls[V_ALLGATHERV]) run_allgatherv(c, dt, pat, ip, nb ^= 1);
            for (int op = 0; op < CHORUS_NUM_OPS && colls[V_REDUCE_SCATTERV]; op++)
                if (!c->quick || op == (int)(pat + dt) % CHORUS_NUM_OPS)
                    run_reduce_scatterv(c, dt, op, pat, ip, nb ^= 1);
        }
        if (colls[V_ALLTOALLV]) run_alltoallv(c, dt, pat, nb ^= 1);
    }
    flush_hashes(c);
}

static int parse_list(const char *list, const char *const *names, int count, int *flags)
{
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", list);
    memset(flags, 0, sizeof(int) * (size_t)count);
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < count; i++)
            if (strcmp(t, "all") == 0 || strcmp(t, names[i]) == 0) flags[i] = found = 1;
        if (!found) {
            fprintf(stderr, "mp_coll_v: unknown name '%s'\n", t);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"quick", no_argument, NULL, 'q'},       {"colls", required_argument, NULL, 'c'},
        {"dtypes", required_argument, NULL, 'd'}, {"verbose", no_argument, NULL, 'v'},
        {"registered", required_argument, NULL, 'R'},
        {"registered-bytes", required_argument, NULL, 'B'},
        {NULL, 0, NULL, 0}};
    const char *colls_arg = "all", *dtypes_arg = NULL, *dnames[CHORUS_NUM_DTYPES];
    const char *registered = NULL;
    size_t registered_bytes = (size_t)64 << 20;
    void *win = NULL;
    int colls[NV], dtypes[CHORUS_NUM_DTYPES], opt;
    vctx_t c;

    memset(&c, 0, sizeof c);
    c.seed = 0x5eed;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < CHORUS_NUM_DTYPES; i++) dnames[i] = mp_dtype_name(i);
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 'q') c.quick = 1;
        else if (opt == 'c') colls_arg = optarg;
        else if (opt == 'd') dtypes_arg = optarg;
        else if (opt == 'v') c.verbose = 1;
        else if (opt == 'R') registered = optarg;
        else if (opt == 'B') registered_bytes = strtoull(optarg, NULL, 0);
        else return 2;
    }
    if (registered != NULL && strcmp(registered, "all") != 0 && strcmp(registered, "odd") != 0 &&
        strcmp(registered, "even") != 0) {
        fprintf(stderr, "mp_coll_v: --registered all|odd|even\n");
        return 2;
    }
    if (dtypes_arg == NULL) dtypes_arg = c.quick ? "int8,int32,float16,float32" : "all";
    if (parse_list(colls_arg, v_names, NV, colls) != 0 ||
        parse_list(dtypes_arg, dnames, CHORUS_NUM_DTYPES, dtypes) != 0)
        return 2;
    c.comm = mp_init_env("mp_coll_v", &c.rank, &c.n);
    c.keys = malloc((size_t)c.n * sizeof *c.keys);
    if (registered != NULL) {
        die_on(&c, chorus_mem_alloc(c.comm, registered_bytes, &win), "chorus_mem_alloc");
        if (strcmp(registered, "all") == 0 || (c.rank % 2 == 1) == (strcmp(registered, "odd") == 0)) {
            reg.base = win;
            reg.size = registered_bytes;
        }
    }
    double t0 = mp_now();
    for (int dt = 0; dt < CHORUS_NUM_DTYPES; dt++) {
        if (!dtypes[dt]) continue;
        run_dtype(&c, colls, (chorus_dtype_t)dt);
        if (c.verbose && c.rank == 0)
            printf("  %-9s %5zu cases so far %7.2f s\n", dnames[dt], c.ncases, mp_now() - t0);
    }
    /* A case failed if it failed on any rank. */
    uint64_t fails = c.nfail, all_fails = 0;
    die_on(&c, chorus_allreduce(&fails, &all_fails, 1, CHORUS_UINT64, CHORUS_SUM, c.comm, NULL),
           "allreduce of the failure counts");
    if (registered != NULL) {
        /* The windows must have been read in place somewhere, or the run proved nothing. */
        uint64_t bytes = 0, all_bytes = 0;
        die_on(&c, chorus_mem_stats(c.comm, NULL, &bytes), "chorus_mem_stats");
        die_on(&c, chorus_allreduce(&bytes, &all_bytes, 1, CHORUS_UINT64, CHORUS_SUM, c.comm,
                                    NULL), "allreduce of the window bytes");
        if (c.n > 1 && all_bytes == 0) {
            if (c.rank == 0) printf("FAIL --registered %s: no call read a peer's window\n", registered);
            all_fails++;
        }
        if (c.rank == 0)
            printf("mp_coll_v: --registered %s: %llu bytes read from peers' windows\n", registered,
                   (unsigned long long)all_bytes);
        die_on(&c, chorus_mem_free(c.comm, win), "chorus_mem_free");
    }
    if (c.rank == 0)
        printf("mp_coll_v: nranks=%d transport=%s: %zu cases, %llu failed (%.2f s)\n", c.n,
               getenv("CHORUS_TRANSPORT") ? getenv("CHORUS_TRANSPORT") : "auto", c.ncases,
               (unsigned long long)all_fails, mp_now() - t0);
    die_on(&c, chorus_barrier(c.comm), "final barrier");
    chorus_comm_destroy(c.comm);
    free(c.keys);
    return all_fails == 0 ? 0 : 1;
}
