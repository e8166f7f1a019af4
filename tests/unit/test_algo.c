/*
 * Unit test of the schedule builder and of every algorithm, run through the engine over
 * the virtual transport: all ranks of a collective live in this process and are advanced
 * round robin until every schedule is done. A full pass in which no rank moves is a
 * deadlock (the virtual transport has no timers), and the stuck schedules are printed.
 *
 * Integer data with a closed-form expected value makes the checks exact: rank r's
 * element i is (A * i + B * r + C) mod 2^bits, so the sum over ranks is known without
 * a loop. Other ops use a less regular pattern and a brute-force reference.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "algo/algo.h"
#include "core/engine.h"
#include "topo/topo.h"
#include "transport/virtual/virtual.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG_COUNT 1000003u

typedef struct {
    chorus_algo_t algo;
    chorus_coll_t coll;
    int n;
    uint64_t count;
    int root;
    uint64_t chunk;
    int inplace;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int pattern; /* 0: linear (closed-form sum), 1: irregular small values */
} tc_t;

/* args.ring_order of every case run while it is set (NULL: rank order); kept outside tc_t
 * so that the cases' positional initialisers stay complete. */
static const int *test_ring_order;

typedef struct {
    chorus_sched_t sched;
    chorus_exec_t exec;
    char *alloc[2];
    char *send, *recv, *scratch;
    int done;
} trank_t;

/* ---- Values ---- */

static uint64_t width_mask(size_t es)
{
    return es >= 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * es)) - 1);
}

static uint64_t val(const tc_t *t, int r, uint64_t i)
{
    if (t->pattern == 0) return i * 7 + (uint64_t)r * 13 + 1;
    return ((i * 37 + (uint64_t)r * 101 + (i * (uint64_t)r) % 17) % 251) + 1;
}

static uint64_t load(const char *buf, size_t es, uint64_t i)
{
    const char *p = buf + i * es;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;

    switch (es) {
    case 1: memcpy(&u8, p, 1); return u8;
    case 2: memcpy(&u16, p, 2); return u16;
    case 4: memcpy(&u32, p, 4); return u32;
    default: memcpy(&u64, p, 8); return u64;
    }
}

static void store(char *buf, size_t es, uint64_t i, uint64_t v)
{
    char *p = buf + i * es;
    uint8_t u8 = (uint8_t)v;
    uint16_t u16 = (uint16_t)v;
    uint32_t u32 = (uint32_t)v;

    switch (es) {
    case 1: memcpy(p, &u8, 1); break;
    case 2: memcpy(p, &u16, 2); break;
    case 4: memcpy(p, &u32, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

/* op over all ranks of val(r, i), modulo 2^bits (values stay positive, so MIN and MAX
 * compare alike signed or not). */
static uint64_t reduced(const tc_t *t, uint64_t i, size_t es)
{
    uint64_t n = (uint64_t)t->n, acc;
    int r;

    if (t->op == CHORUS_SUM && t->pattern == 0)
        return (n * (i * 7 + 1) + 13 * (n * (n - 1) / 2)) & width_mask(es);
    acc = val(t, 0, i) & width_mask(es);
    for (r = 1; r < t->n; r++) {
        uint64_t v = val(t, r, i) & width_mask(es);
        switch (t->op) {
        case CHORUS_SUM: acc = acc + v; break;
        case CHORUS_PROD: acc = acc * v; break;
        case CHORUS_MIN: acc = v < acc ? v : acc; break;
        default: acc = v > acc ? v : acc; break;
        }
        acc &= width_mask(es);
    }
    return acc;
}

/* ---- Layout ---- */

static int is_root_coll(chorus_coll_t c)
{
    return c == CHORUS_COLL_BROADCAST || c == CHORUS_COLL_REDUCE;
}

/* Elements of the send and receive buffers of rank r (0: the buffer is not passed). */
static void buf_elems(const tc_t *t, int r, uint64_t *send_p, uint64_t *recv_p)
{
    uint64_t c = t->count, nc = (uint64_t)t->n * t->count;

    switch (t->coll) {
    case CHORUS_COLL_ALLGATHER: *send_p = c; *recv_p = nc; break;
    case CHORUS_COLL_REDUCE_SCATTER: *send_p = nc; *recv_p = c; break;
    case CHORUS_COLL_ALLTOALL: *send_p = nc; *recv_p = nc; break;
    case CHORUS_COLL_BARRIER: *send_p = 0; *recv_p = 0; break;
    case CHORUS_COLL_BROADCAST: *send_p = r == t->root ? c : 0; *recv_p = c; break;
    case CHORUS_COLL_REDUCE: *send_p = c; *recv_p = r == t->root ? c : 0; break;
    default: *send_p = c; *recv_p = c; break;
    }
}

/* ---- Buffers ----
 *
 * The big cases allocate and free gigabytes per case, and most of their time went to the
 * kernel clearing freshly mapped pages (75% system time under perf). Freed blocks are
 * kept and handed out again to a request of at least a quarter of their size, the buffer
 * placed at the block's end so that an overrun still runs off the end of a malloc'd
 * block. A new block reserves twice the request, so that the next rank count's slightly
 * larger buffers fit too; the front half is never touched until they do, and untouched
 * pages of a large malloc (an mmap) are not resident. The first request of 1 MiB or
 * more that no kept block fits releases them all, so the process holds little more than
 * the largest case did (the small cases that run between two big ones keep them). Under AddressSanitizer every buffer is its own malloc, exactly sized. */
#if defined(__SANITIZE_ADDRESS__)
#define POOL_SLOTS 0
#else
#define POOL_SLOTS 512
#endif

typedef struct {
    char *base;
    size_t cap;
    char *user; /* NULL while kept */
} pool_block_t;

static pool_block_t pool[POOL_SLOTS + 1];
static size_t pool_used;

static void pool_release_kept(void)
{
    size_t i, k = 0;

    for (i = 0; i < pool_used; i++) {
        if (pool[i].user == NULL) free(pool[i].base);
        else pool[k++] = pool[i];
    }
    pool_used = k;
}

static char *pool_get(size_t bytes)
{
    size_t i;
    char *p;

    for (i = 0; i < pool_used; i++) {
        if (pool[i].user == NULL && pool[i].cap >= bytes && pool[i].cap / 4 <= bytes) {
            pool[i].user = pool[i].base + (pool[i].cap - bytes);
            return pool[i].user;
        }
    }
    if (bytes >= ((size_t)1 << 20)) pool_release_kept();
    if (pool_used == POOL_SLOTS || bytes > SIZE_MAX / 2) return malloc(bytes);
    p = malloc(2 * bytes);
    if (p == NULL) return NULL;
    pool[pool_used].base = p;
    pool[pool_used].cap = 2 * bytes;
    pool[pool_used].user = p + bytes;
    return pool[pool_used++].user;
}

static void xfree(void *p)
{
    size_t i;

    if (p == NULL) return;
    for (i = 0; i < pool_used; i++) {
        if (pool[i].user == p) {
            pool[i].user = NULL;
            return;
        }
    }
    free(p);
}

static char *xalloc(uint64_t elems, size_t es, int fill)
{
    char *p;

    if (elems == 0) return NULL;
    p = pool_get((size_t)(elems * es));
    assert_non_null(p);
    memset(p, fill, (size_t)(elems * es));
    return p;
}

/* Writes val(t, r, start..start+n-1) to buf; typed loops, as this is most of the test's
 * time. */
static void fill_at(const tc_t *t, int r, char *buf, uint64_t start, uint64_t n, size_t es)
{
    uint64_t i;

    if (t->dtype == CHORUS_FLOAT32) {
        /* Sums of these depend on the order of addition in the last bits. */
        for (i = 0; i < n; i++) {
            float f = (float)(1.0 / (double)(r + 1) + (double)(start + i) * 1e-3);
            memcpy(buf + i * es, &f, 4);
        }
    } else if (t->pattern == 0 && es == 1) {
        uint8_t *p = (uint8_t *)buf, b = (uint8_t)(r * 13 + 1 + start * 7);
        for (i = 0; i < n; i++) p[i] = (uint8_t)(b + (uint8_t)(i * 7));
    } else if (t->pattern == 0 && es == 4) {
        uint32_t *p = (uint32_t *)(void *)buf, b = (uint32_t)(r * 13 + 1 + start * 7);
        for (i = 0; i < n; i++) p[i] = b + (uint32_t)(i * 7);
    } else {
        for (i = 0; i < n; i++) store(buf, es, i, val(t, r, start + i));
    }
}

static void fill_send(const tc_t *t, int r, char *buf, uint64_t n, size_t es)
{
    fill_at(t, r, buf, 0, n, es);
}

/* The sum over ranks at indices start.. of the linear pattern: n * (7 i + 1) + 13 n(n-1)/2. */
static void fill_sum(const tc_t *t, char *buf, uint64_t start, uint64_t count, size_t es)
{
    uint64_t n = (uint64_t)t->n, b = n * (7 * start + 1) + 13 * (n * (n - 1) / 2), i;

    if (es == 1) {
        uint8_t *p = (uint8_t *)buf;
        for (i = 0; i < count; i++) p[i] = (uint8_t)(b + (uint8_t)(i * 7 * n));
    } else if (es == 4) {
        uint32_t *p = (uint32_t *)(void *)buf;
        for (i = 0; i < count; i++) p[i] = (uint32_t)(b + i * 7 * n);
    } else {
        for (i = 0; i < count; i++) store(buf, es, i, b + i * 7 * n);
    }
}

/* Allocates rank r's buffers in the layout chorus.h gives for in-place calls. */
static void setup_bufs(const tc_t *t, int r, trank_t *tr, size_t es)
{
    uint64_t ns, nr, c = t->count;

    buf_elems(t, r, &ns, &nr);
    if (!t->inplace || ns == 0 || nr == 0) {
        tr->send = tr->alloc[0] = xalloc(ns, es, 0);
        tr->recv = tr->alloc[1] = xalloc(nr, es, 0xEE);
    } else if (t->coll == CHORUS_COLL_ALLGATHER) {
        tr->recv = tr->alloc[0] = xalloc(nr, es, 0xEE);
        tr->send = tr->recv + (uint64_t)r * c * es;
    } else if (t->coll == CHORUS_COLL_REDUCE_SCATTER) {
        tr->send = tr->alloc[0] = xalloc(ns, es, 0);
        tr->recv = tr->send + (uint64_t)r * c * es;
    } else {
        tr->send = tr->recv = tr->alloc[0] = xalloc(ns > nr ? ns : nr, es, 0);
    }
    if (ns) fill_send(t, r, tr->send, ns, es);
}

/* ---- Running ---- */

static void describe(const tc_t *t, char *out, size_t len)
{
    snprintf(out, len, "%s %s n=%d count=%llu root=%d chunk=%llu %s %s %s",
             chorus__algo_name(t->algo), chorus__coll_name(t->coll), t->n,
             (unsigned long long)t->count, t->root, (unsigned long long)t->chunk,
             t->inplace ? "in-place" : "out-of-place", chorus_dtype_name(t->dtype),
             chorus_op_name(t->op));
    if (test_ring_order != NULL) {
        size_t used = strlen(out);
        int i;

        for (i = 0; i < t->n && used + 8 < len; i++, used = strlen(out))
            snprintf(out + used, len - used, "%s%d", i ? "," : " order ", test_ring_order[i]);
    }
}

static void report_stuck(const tc_t *t, trank_t *ranks)
{
    char what[256];
    int r, printed = 0;

    describe(t, what, sizeof(what));
    print_error("deadlock: %s\n", what);
    for (r = 0; r < t->n; r++) {
        if (ranks[r].done) continue;
        print_error("rank %d: %u of %u steps done\n", r, ranks[r].exec.ndone,
                    ranks[r].sched.nsteps);
        if (printed++ < 4 && ranks[r].sched.nsteps <= 200)
            chorus__sched_dump(&ranks[r].sched, stderr);
    }
}

/* Builds every rank's schedule, runs them all, and leaves the results in ranks. */
static trank_t *run_case(const tc_t *t)
{
    size_t es = chorus_dtype_size(t->dtype);
    chorus_vworld_t *world = NULL;
    chorus_peer_tp_t *peers;
    trank_t *ranks;
    int r, idle = 0;
    char what[256];

    describe(t, what, sizeof(what));
    assert_int_equal(chorus__vworld_create(t->n, &world), CHORUS_SUCCESS);
    ranks = calloc((size_t)t->n, sizeof(*ranks));
    peers = calloc((size_t)t->n * (size_t)t->n, sizeof(*peers));
    assert_non_null(ranks);
    assert_non_null(peers);
    for (r = 0; r < t->n; r++) {
        chorus_coll_args_t a = {.coll = t->coll, .rank = r, .nranks = t->n, .count = t->count,
                                 .root = t->root, .chunk_count = t->chunk,
                                 .ring_order = test_ring_order};
        trank_t *tr = &ranks[r];
        chorus_status_t st;
        void *bufs[CHORUS_NUM_BUFS];
        int p;

        chorus__sched_init(&tr->sched, r, t->n);
        st = chorus__algo_build(t->algo, &a, &tr->sched);
        if (st != CHORUS_SUCCESS) fail_msg("%s: build failed on rank %d: %d", what, r, st);
        setup_bufs(t, r, tr, es);
        tr->scratch = xalloc(tr->sched.scratch_count, es, 0x5A);
        for (p = 0; p < t->n; p++) {
            peers[r * t->n + p].ops = &chorus__tp_virtual_ops;
            peers[r * t->n + p].tp = chorus__vworld_tp(world, r);
        }
        bufs[CHORUS_BUF_SEND] = tr->send;
        bufs[CHORUS_BUF_RECV] = tr->recv;
        bufs[CHORUS_BUF_SCRATCH] = tr->scratch;
        st = chorus__exec_start(&tr->exec, &tr->sched, bufs, t->dtype, t->op, &peers[r * t->n],
                                &peers[r * t->n + r], 1, what);
        assert_int_equal(st, CHORUS_SUCCESS);
    }
    for (;;) {
        int all = 1, moved = 0;

        for (r = 0; r < t->n; r++) {
            int done = 0, progressed = 0;
            chorus_status_t st;

            if (ranks[r].done) continue;
            st = chorus__exec_progress(&ranks[r].exec, &done, &progressed);
            if (st != CHORUS_SUCCESS) fail_msg("%s: rank %d: %s", what, r, chorus_last_error());
            ranks[r].done = done;
            all &= done;
            moved |= progressed;
        }
        if (all) break;
        idle = moved ? 0 : idle + 1;
        if (idle > 2) {
            report_stuck(t, ranks);
            fail_msg("%s: deadlock", what);
        }
    }
    for (r = 0; r < t->n; r++) chorus__exec_fini(&ranks[r].exec);
    free(peers);
    chorus__vworld_destroy(world);
    return ranks;
}

static void free_ranks(const tc_t *t, trank_t *ranks)
{
    int r;

    for (r = 0; r < t->n; r++) {
        chorus__sched_fini(&ranks[r].sched);
        xfree(ranks[r].alloc[0]);
        xfree(ranks[r].alloc[1]);
        xfree(ranks[r].scratch);
    }
    free(ranks);
}

/* The value rank r must hold at recv index i. */
static uint64_t expected(const tc_t *t, int r, uint64_t i, size_t es)
{
    uint64_t c = t->count;

    switch (t->coll) {
    case CHORUS_COLL_ALLGATHER: return val(t, (int)(i / c), i % c) & width_mask(es);
    case CHORUS_COLL_REDUCE_SCATTER: return reduced(t, (uint64_t)r * c + i, es);
    case CHORUS_COLL_BROADCAST: return val(t, t->root, i) & width_mask(es);
    case CHORUS_COLL_ALLTOALL:
        return val(t, (int)(i / c), (uint64_t)r * c + i % c) & width_mask(es);
    default: return reduced(t, i, es);
    }
}

/* Rank r's expected receive buffer (NULL when it receives nothing). */
static char *expected_buf(const tc_t *t, int r, size_t es)
{
    uint64_t ns, nr, i;
    char *e;

    buf_elems(t, r, &ns, &nr);
    e = xalloc(nr, es, 0);
    if (t->coll == CHORUS_COLL_BROADCAST) {
        if (nr) fill_send(t, t->root, e, nr, es);
        return e;
    }
    if (t->coll == CHORUS_COLL_ALLGATHER || t->coll == CHORUS_COLL_ALLTOALL) {
        uint64_t from = t->coll == CHORUS_COLL_ALLTOALL ? (uint64_t)r * t->count : 0;
        for (i = 0; i < (uint64_t)t->n; i++)
            if (t->count) fill_at(t, (int)i, e + i * t->count * es, from, t->count, es);
        return e;
    }
    if (t->op == CHORUS_SUM && t->pattern == 0 && t->dtype != CHORUS_FLOAT32) {
        uint64_t from = t->coll == CHORUS_COLL_REDUCE_SCATTER ? (uint64_t)r * t->count : 0;
        if (nr) fill_sum(t, e, from, nr, es);
        return e;
    }
    for (i = 0; i < nr; i++) store(e, es, i, expected(t, r, i, es));
    return e;
}

/* Collectives whose result is the same on every rank. */
static int same_everywhere(chorus_coll_t c)
{
    return c == CHORUS_COLL_ALLREDUCE || c == CHORUS_COLL_ALLGATHER || c == CHORUS_COLL_BROADCAST;
}

static void check_case(const tc_t *t)
{
    size_t es = chorus_dtype_size(t->dtype);
    trank_t *ranks = run_case(t);
    char *want = NULL;
    int r;

    for (r = 0; r < t->n; r++) {
        uint64_t ns, nr, i;

        buf_elems(t, r, &ns, &nr);
        if (want == NULL || !same_everywhere(t->coll)) {
            xfree(want);
            want = expected_buf(t, r, es);
        }
        if (nr && memcmp(ranks[r].recv, want, (size_t)(nr * es)) != 0) {
            char what[256];

            for (i = 0; load(ranks[r].recv, es, i) == load(want, es, i); i++) continue;
            describe(t, what, sizeof(what));
            if (ranks[r].sched.nsteps <= 200) chorus__sched_dump(&ranks[r].sched, stderr);
            fail_msg("%s: rank %d recv[%llu] = %llu, expected %llu", what, r,
                     (unsigned long long)i, (unsigned long long)load(ranks[r].recv, es, i),
                     (unsigned long long)load(want, es, i));
        }
        /* The send buffer is read-only (out of place it must be untouched). */
        if (!t->inplace && ns) {
            char *orig = xalloc(ns, es, 0);
            fill_send(t, r, orig, ns, es);
            if (memcmp(orig, ranks[r].send, (size_t)(ns * es)) != 0)
                fail_msg("rank %d: the send buffer changed", r);
            xfree(orig);
        }
    }
    xfree(want);
    free_ranks(t, ranks);
}

/* ---- The matrix ---- */

static const int matrix_n[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
                               13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
                               25, 26, 27, 28, 29, 30, 31, 32, 33, 64};

static int scales_with_n(chorus_coll_t c)
{
    return c == CHORUS_COLL_ALLGATHER || c == CHORUS_COLL_ALLTOALL ||
           c == CHORUS_COLL_REDUCE_SCATTER;
}

static void matrix(chorus_algo_t algo, chorus_coll_t coll)
{
    size_t ni;
    /* ALGO_TEST_BIG=all runs the 1000003-element case at every rank count (several GB and
     * minutes for the collectives whose buffers grow with n): `make test-full`. */
    const char *big_env = getenv("ALGO_TEST_BIG");
    int big_all = big_env != NULL && strcmp(big_env, "all") == 0;

    for (ni = 0; ni < sizeof(matrix_n) / sizeof(matrix_n[0]); ni++) {
        int n = matrix_n[ni], ci, ri, k, ip;
        uint64_t counts[5] = {0, 1, 7, (uint64_t)(n - 1), BIG_COUNT};
        int roots[3] = {0, n - 1, n / 2};
        uint64_t chunks[3] = {0, 3, 1000};

        for (ci = 0; ci < 5; ci++) {
            uint64_t count = counts[ci];
            int big = count == BIG_COUNT;

            if (ci == 3 && (count == 0 || count == 1 || count == 7)) continue;
            /* Keep memory and time bounded: n * 1M-element buffers only up to 8 ranks, and
             * big vectors on a spread of sizes rather than all 34. */
            if (big && !big_all && scales_with_n(coll) && n > 8) continue;
            if (big && !big_all && n > 8 && n != 13 && n != 33 && n != 64) continue;
            for (ri = 0; ri < (is_root_coll(coll) ? 3 : 1); ri++) {
                if (ri > 0 && roots[ri] == roots[ri - 1]) continue;
                if (ri == 2 && roots[2] == roots[0]) continue;
                for (k = 0; k < 3; k++) {
                    /* 3-element chunks of 1M would be 300K steps; 1000-element ones on
                     * small sizes only. */
                    if (big && (k == 1 || (k == 2 && n > 8))) continue;
                    for (ip = 0; ip < 2; ip++) {
                        tc_t t = {algo, coll, n, count, roots[ri], chunks[k], ip,
                                  big ? CHORUS_UINT8 : CHORUS_INT32, CHORUS_SUM, 0};
                        check_case(&t);
                    }
                }
            }
        }
    }
}

/* The ring in an order other than rank order: the order lib/topo makes for 2 hosts x 4
 * interleaved ranks (which must cross between hosts only twice), and scrambled orders of
 * other sizes, for every ring collective, with and without NUMA refinement, in and out of
 * place, pipelined and not. Results must be exactly those of rank order. */
static void test_ring_permuted(void **state)
{
    static const int host_2x4[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    static const int numa_2x4[8] = {1, 1, 0, 0, 1, 1, 0, 0};
    static const int nic_2x4[2] = {0, 1};
    static const chorus_coll_t colls[] = {CHORUS_COLL_ALLREDUCE, CHORUS_COLL_ALLGATHER,
                                          CHORUS_COLL_REDUCE_SCATTER, CHORUS_COLL_BROADCAST,
                                          CHORUS_COLL_REDUCE};
    const uint64_t counts[] = {1, 7, 8, 1000, BIG_COUNT};
    const uint64_t chunks[] = {0, 3};
    int orders[4][64], sizes[4] = {8, 8, 5, 13}, o, i, n;
    size_t c, ci, k;

    (void)state;
    assert_int_equal(chorus__topo_ring_order(8, host_2x4, 2, NULL, NULL, orders[0]),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus__topo_ring_crossings(8, host_2x4, orders[0]), 2);
    assert_int_equal(chorus__topo_ring_order(8, host_2x4, 2, numa_2x4, nic_2x4, orders[1]),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus__topo_ring_crossings(8, host_2x4, orders[1]), 2);
    /* Scrambled: position i holds rank (i * step + 3) mod n, step coprime to n. */
    for (o = 2; o < 4; o++)
        for (i = 0, n = sizes[o]; i < n; i++) orders[o][i] = (i * (o == 2 ? 2 : 5) + 3) % n;
    for (o = 0; o < 4; o++) {
        n = sizes[o];
        test_ring_order = orders[o];
        for (c = 0; c < sizeof colls / sizeof colls[0]; c++)
            for (ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                for (k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
                    int root = (int)(ci % (size_t)n), ip;

                    if (counts[ci] == BIG_COUNT && chunks[k] == 3) continue;
                    for (ip = 0; ip < 2; ip++) {
                        tc_t t = {CHORUS_ALGO_RING, colls[c], n, counts[ci], root, chunks[k],
                                  ip, counts[ci] == BIG_COUNT ? CHORUS_UINT8 : CHORUS_INT32,
                                  CHORUS_SUM, 0};
                        check_case(&t);
                    }
                }
    }
    test_ring_order = NULL;
}

/* An order that is not a permutation is refused, not turned into a hang. */
static void test_ring_bad_order(void **state)
{
    static const int dup[4] = {0, 1, 1, 3}, range[4] = {0, 1, 2, 4};
    chorus_coll_args_t a = {.coll = CHORUS_COLL_ALLREDUCE, .rank = 0, .nranks = 4, .count = 8};
    chorus_sched_t s;

    (void)state;
    a.ring_order = dup;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_RING, &a, &s), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__sched_fini(&s);
    a.ring_order = range;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_RING, &a, &s), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__sched_fini(&s);
}

/* One cmocka test per algorithm x collective, so that a failure names the pair. */
#define MATRIX_TEST(name, algo, coll)  \
    static void name(void **state)     \
    {                                  \
        (void)state;                   \
        matrix(algo, coll);            \
    }

MATRIX_TEST(test_ring_allreduce, CHORUS_ALGO_RING, CHORUS_COLL_ALLREDUCE)
MATRIX_TEST(test_ring_allgather, CHORUS_ALGO_RING, CHORUS_COLL_ALLGATHER)
MATRIX_TEST(test_ring_reduce_scatter, CHORUS_ALGO_RING, CHORUS_COLL_REDUCE_SCATTER)
MATRIX_TEST(test_ring_broadcast, CHORUS_ALGO_RING, CHORUS_COLL_BROADCAST)
MATRIX_TEST(test_ring_reduce, CHORUS_ALGO_RING, CHORUS_COLL_REDUCE)
MATRIX_TEST(test_tree_allreduce, CHORUS_ALGO_TREE, CHORUS_COLL_ALLREDUCE)
MATRIX_TEST(test_tree_broadcast, CHORUS_ALGO_TREE, CHORUS_COLL_BROADCAST)
MATRIX_TEST(test_tree_reduce, CHORUS_ALGO_TREE, CHORUS_COLL_REDUCE)
MATRIX_TEST(test_rd_allreduce, CHORUS_ALGO_RD, CHORUS_COLL_ALLREDUCE)
MATRIX_TEST(test_pairwise_alltoall, CHORUS_ALGO_PAIRWISE, CHORUS_COLL_ALLTOALL)
MATRIX_TEST(test_rd_allgather, CHORUS_ALGO_RD, CHORUS_COLL_ALLGATHER)
MATRIX_TEST(test_rabenseifner_allreduce, CHORUS_ALGO_RABENSEIFNER, CHORUS_COLL_ALLREDUCE)
MATRIX_TEST(test_rabenseifner_reduce_scatter, CHORUS_ALGO_RABENSEIFNER,
            CHORUS_COLL_REDUCE_SCATTER)
MATRIX_TEST(test_bruck_allgather, CHORUS_ALGO_BRUCK, CHORUS_COLL_ALLGATHER)
MATRIX_TEST(test_swing_allreduce, CHORUS_ALGO_SWING, CHORUS_COLL_ALLREDUCE)
MATRIX_TEST(test_direct_allreduce, CHORUS_ALGO_DIRECT, CHORUS_COLL_ALLREDUCE)
MATRIX_TEST(test_direct_reduce_scatter, CHORUS_ALGO_DIRECT, CHORUS_COLL_REDUCE_SCATTER)
MATRIX_TEST(test_direct_reduce, CHORUS_ALGO_DIRECT, CHORUS_COLL_REDUCE)

/* The halving algorithms derive peers and block positions from rank arithmetic (Swing's
 * from its reach sets), which the matrix checks up to 64 ranks; a few larger sizes, powers
 * of two and not, with each op, catch a pairing that only goes wrong further out. */
static void test_halving_many_ranks(void **state)
{
    static const chorus_algo_t algos[] = {CHORUS_ALGO_RABENSEIFNER, CHORUS_ALGO_SWING};
    static const int sizes[] = {100, 128, 256};
    size_t a, si;

    (void)state;
    for (a = 0; a < 2; a++)
        for (si = 0; si < 3; si++) {
            tc_t t = {algos[a], CHORUS_COLL_ALLREDUCE, sizes[si], 1000, 0, 0, (int)si % 2,
                      CHORUS_INT32, CHORUS_SUM, 0};

            check_case(&t);
            t.op = CHORUS_MAX;
            t.pattern = 1;
            t.count = 3 * (uint64_t)sizes[si] + 1;
            check_case(&t);
        }
    {
        tc_t t = {CHORUS_ALGO_RABENSEIFNER, CHORUS_COLL_REDUCE_SCATTER, 100, 3, 0, 0, 1,
                  CHORUS_INT32, CHORUS_SUM, 0};

        check_case(&t);
    }
}

/* A barrier has no data: check that it completes on every size and that no rank can
 * finish before every rank has started (rank 0 alone must not get through). */
static void test_dissemination_barrier(void **state)
{
    size_t ni;

    (void)state;
    for (ni = 0; ni < sizeof(matrix_n) / sizeof(matrix_n[0]); ni++) {
        tc_t t = {CHORUS_ALGO_DISSEMINATION, CHORUS_COLL_BARRIER, matrix_n[ni], 0, 0, 0, 0,
                  CHORUS_INT32, CHORUS_SUM, 0};
        free_ranks(&t, run_case(&t));
    }
}

static void test_barrier_waits_for_all(void **state)
{
    int n, late;

    (void)state;
    for (n = 2; n <= 17; n++) {
        for (late = 0; late < n; late++) {
            chorus_vworld_t *world = NULL;
            chorus_sched_t *s = calloc((size_t)n, sizeof(*s));
            chorus_exec_t *x = calloc((size_t)n, sizeof(*x));
            chorus_peer_tp_t *peers = calloc((size_t)n * (size_t)n, sizeof(*peers));
            char *scratch = calloc(64, 8);
            int r, p, iter, done = 0, prog;

            assert_int_equal(chorus__vworld_create(n, &world), CHORUS_SUCCESS);
            for (r = 0; r < n; r++) {
                chorus_coll_args_t a = {.coll = CHORUS_COLL_BARRIER, .rank = r, .nranks = n};
                void *bufs[CHORUS_NUM_BUFS] = {NULL, NULL, scratch};

                chorus__sched_init(&s[r], r, n);
                assert_int_equal(chorus__algo_build(CHORUS_ALGO_AUTO, &a, &s[r]), CHORUS_SUCCESS);
                for (p = 0; p < n; p++) {
                    peers[r * n + p].ops = &chorus__tp_virtual_ops;
                    peers[r * n + p].tp = chorus__vworld_tp(world, r);
                }
                assert_int_equal(chorus__exec_start(&x[r], &s[r], bufs, CHORUS_INT32, CHORUS_SUM,
                                                    &peers[r * n], &peers[r * n + r], 1, "barrier"),
                                 CHORUS_SUCCESS);
            }
            /* Everyone but `late` runs for a while: nobody may finish. */
            for (iter = 0; iter < 50; iter++)
                for (r = 0; r < n; r++) {
                    if (r == late) continue;
                    assert_int_equal(chorus__exec_progress(&x[r], &done, &prog), CHORUS_SUCCESS);
                    if (done)
                        fail_msg("n=%d: rank %d left the barrier before rank %d came", n, r,
                                 late);
                }
            for (r = 0; r < n; r++) {
                chorus__exec_fini(&x[r]);
                chorus__sched_fini(&s[r]);
            }
            chorus__vworld_destroy(world);
            free(s);
            free(x);
            free(peers);
            free(scratch);
        }
    }
}

/* ---- Ops, floats ---- */

static void test_ops(void **state)
{
    static const struct {
        chorus_algo_t algo;
        chorus_coll_t coll;
    } pairs[] = {
        {CHORUS_ALGO_RING, CHORUS_COLL_ALLREDUCE},  {CHORUS_ALGO_RING, CHORUS_COLL_REDUCE_SCATTER},
        {CHORUS_ALGO_RING, CHORUS_COLL_REDUCE},     {CHORUS_ALGO_TREE, CHORUS_COLL_ALLREDUCE},
        {CHORUS_ALGO_TREE, CHORUS_COLL_REDUCE},     {CHORUS_ALGO_RD, CHORUS_COLL_ALLREDUCE},
        {CHORUS_ALGO_RABENSEIFNER, CHORUS_COLL_ALLREDUCE},
        {CHORUS_ALGO_RABENSEIFNER, CHORUS_COLL_REDUCE_SCATTER},
        {CHORUS_ALGO_SWING, CHORUS_COLL_ALLREDUCE},
        {CHORUS_ALGO_DIRECT, CHORUS_COLL_ALLREDUCE}, {CHORUS_ALGO_DIRECT, CHORUS_COLL_REDUCE},
        {CHORUS_ALGO_DIRECT, CHORUS_COLL_REDUCE_SCATTER},
    };
    static const int sizes[] = {2, 5, 8, 13};
    size_t p, si;
    int op, ip;

    (void)state;
    for (p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++)
        for (si = 0; si < 4; si++)
            for (op = CHORUS_SUM; op <= CHORUS_MAX; op++)
                for (ip = 0; ip < 2; ip++) {
                    tc_t t = {pairs[p].algo, pairs[p].coll, sizes[si], 100, sizes[si] / 2, 7, ip,
                              CHORUS_INT32, (chorus_op_t)op, 1};
                    check_case(&t);
                    t.dtype = CHORUS_UINT64;
                    check_case(&t);
                }
}

/* A float32 allreduce case: every rank must hold the very same bits, and they must be a
 * sum. */
static void check_float_allreduce(const tc_t *t)
{
    trank_t *ranks = run_case(t);
    uint64_t i;
    int r, q;

    for (r = 1; r < t->n; r++)
        if (memcmp(ranks[r].recv, ranks[0].recv, t->count * 4) != 0)
            fail_msg("%s n=%d %s%s: rank %d's float result differs from rank 0's",
                     chorus__algo_name(t->algo), t->n, t->inplace ? "in-place" : "oop",
                     test_ring_order != NULL ? " (ring order)" : "", r);
    for (i = 0; i < t->count; i++) {
        double want = 0;
        float got;
        for (q = 0; q < t->n; q++) want += 1.0 / (double)(q + 1) + (double)i * 1e-3;
        memcpy(&got, ranks[0].recv + i * 4, 4);
        if (fabs(got - want) > 1e-4 * fabs(want))
            fail_msg("float sum %llu: %g, expected %g", (unsigned long long)i, (double)got,
                     want);
    }
    free_ranks(t, ranks);
}

/* Float allreduce: every rank must hold the very same bits, and they must be a sum. */
static void test_float_bitwise(void **state)
{
    static const chorus_algo_t algos[] = {CHORUS_ALGO_RING, CHORUS_ALGO_TREE, CHORUS_ALGO_RD,
                                          CHORUS_ALGO_RABENSEIFNER, CHORUS_ALGO_SWING,
                                          CHORUS_ALGO_DIRECT};
    static const int sizes[] = {2, 3, 6, 7, 8, 12, 13, 16, 33};
    size_t a, si;
    int ip;

    (void)state;
    for (a = 0; a < sizeof(algos) / sizeof(algos[0]); a++)
        for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
            for (ip = 0; ip < 2; ip++) {
                tc_t t = {algos[a], CHORUS_COLL_ALLREDUCE, sizes[si], 1001, 0, 17, ip,
                          CHORUS_FLOAT32, CHORUS_SUM, 2};
                check_float_allreduce(&t);
            }
}

/* Edges of one tree (tree 0/1 of the allreduce, 2: rooted at root) that join ranks of
 * different hosts, after checking that the nodes make one tree: one root, and every
 * parent lists its child. */
static int tree_crossings(int n, const int *order, const int *host_of, int tree, int root)
{
    int r, j, roots = 0, cross = 0;

    for (r = 0; r < n; r++) {
        chorus_tree_node_t t = chorus__algo_tree_node(n, order, host_of, tree, root, r);

        if (t.parent < 0) {
            roots++;
            if (tree == 2) assert_int_equal(r, root);
            continue;
        }
        chorus_tree_node_t p = chorus__algo_tree_node(n, order, host_of, tree, root, t.parent);
        assert_true(p.child[0] == r || p.child[1] == r);
        cross += host_of[r] != host_of[t.parent];
        for (j = 0; j < 2; j++)
            if (t.child[j] >= 0)
                assert_int_equal(
                    chorus__algo_tree_node(n, order, host_of, tree, root, t.child[j]).parent, r);
    }
    assert_int_equal(roots, 1);
    return cross;
}

/* Trees over the topology's order. 2 hosts x 4 ranks interleaved (host_of = 0,1,0,1,...).
 * The binary tree over labels 0..7 has the edges 0-4, 4-2, 4-6, 2-1, 2-3, 6-5, 6-7.
 * Rank order: tree 0's label is the rank, so an edge crosses when its labels differ in
 * parity: 2-1, 2-3, 6-5, 6-7, 4 edges; tree 1's label is 7 - rank, which flips every
 * parity, 4 again; the rooted tree's label is rank - root, 4 for every root. Topology
 * order 0,2,4,6,1,3,5,7: labels 0..3 are one host and 4..7 the other (tree 1: 7 - position,
 * the same split), so only 0-4 and 4-2 cross, 2 per tree; the rooted tree rotates at the
 * boundary of the root's host and swaps the root to label 0 inside it, 2 for every root.
 * No tree of this shape does better: no edge splits it 4 / 4. The NUMA-refined order of
 * the same hosts splits the same way. Then the tree collectives in these orders (and a
 * scrambled one) give exact results, and float sums the same bits on every rank. */
static void test_tree_ring_order(void **state)
{
    static const int host_2x4[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    static const int numa_2x4[8] = {1, 1, 0, 0, 1, 1, 0, 0};
    static const int nic_2x4[2] = {0, 1};
    static const int scrambled[13] = {3, 8, 0, 5, 10, 2, 7, 12, 4, 9, 1, 6, 11};
    static const chorus_coll_t colls[] = {CHORUS_COLL_ALLREDUCE, CHORUS_COLL_BROADCAST,
                                          CHORUS_COLL_REDUCE};
    static const uint64_t counts[] = {1, 7, 1000, BIG_COUNT};
    int orders[2][8], o, root, tree, ip;
    size_t c, ci;

    (void)state;
    assert_int_equal(chorus__topo_ring_order(8, host_2x4, 2, NULL, NULL, orders[0]),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus__topo_ring_order(8, host_2x4, 2, numa_2x4, nic_2x4, orders[1]),
                     CHORUS_SUCCESS);
    for (tree = 0; tree < 2; tree++) {
        assert_int_equal(tree_crossings(8, NULL, host_2x4, tree, 0), 4);
        for (o = 0; o < 2; o++)
            assert_int_equal(tree_crossings(8, orders[o], host_2x4, tree, 0), 2);
    }
    for (root = 0; root < 8; root++) {
        assert_int_equal(tree_crossings(8, NULL, host_2x4, 2, root), 4);
        for (o = 0; o < 2; o++)
            assert_int_equal(tree_crossings(8, orders[o], host_2x4, 2, root), 2);
    }
    /* Without an order the trees are those of rank labels, as before topologies. */
    for (root = 0; root < 8; root++) {
        chorus_tree_node_t t = chorus__algo_tree_node(8, NULL, NULL, 2, root, root);
        assert_int_equal(t.parent, -1);
        assert_int_equal(t.child[1], (root + 4) % 8);
    }

    for (o = 0; o < 3; o++) {
        int n = o < 2 ? 8 : 13;

        test_ring_order = o < 2 ? orders[o] : scrambled;
        for (c = 0; c < sizeof colls / sizeof colls[0]; c++)
            for (ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                for (ip = 0; ip < 2; ip++) {
                    int big = counts[ci] == BIG_COUNT;
                    tc_t t = {CHORUS_ALGO_TREE, colls[c], n, counts[ci], (int)(ci * 3) % n,
                              big ? 0 : 3, ip, big ? CHORUS_UINT8 : CHORUS_INT32, CHORUS_SUM, 0};
                    check_case(&t);
                }
        for (ip = 0; ip < 2; ip++) {
            tc_t t = {CHORUS_ALGO_TREE, CHORUS_COLL_ALLREDUCE, n, 1001, 0, 17, ip,
                      CHORUS_FLOAT32, CHORUS_SUM, 2};
            check_float_allreduce(&t);
        }
    }
    test_ring_order = NULL;
}

/* A tree over an order that is not a permutation is refused, not turned into a hang. */
static void test_tree_bad_order(void **state)
{
    static const int dup[4] = {0, 1, 1, 3};
    chorus_coll_args_t a = {.coll = CHORUS_COLL_ALLREDUCE, .rank = 0, .nranks = 4, .count = 8};
    chorus_sched_t s;

    (void)state;
    a.ring_order = dup;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_TREE, &a, &s), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "tree"));
    chorus__sched_fini(&s);
}

/* ---- The builder ---- */

static int overlap(chorus_ref_t a, uint64_t na, chorus_ref_t b, uint64_t nb)
{
    return a.buf == b.buf && a.off < b.off + nb && b.off < a.off + na;
}

/* The regions a step reads and writes, as the builder must see them (an empty message
 * counts as one element). */
static int accesses(const chorus_step_t *s, chorus_ref_t *ref, int *write)
{
    int n = 0;

    switch (s->kind) {
    case CHORUS_STEP_SEND: ref[n] = s->src; write[n++] = 0; break;
    case CHORUS_STEP_RECV: ref[n] = s->dst; write[n++] = 1; break;
    case CHORUS_STEP_REDUCE:
        ref[n] = s->src; write[n++] = 0;
        ref[n] = s->src2; write[n++] = 0;
        ref[n] = s->dst; write[n++] = 1;
        break;
    default: ref[n] = s->src; write[n++] = 0; ref[n] = s->dst; write[n++] = 1; break;
    }
    return n;
}

static int conflict(const chorus_step_t *a, const chorus_step_t *b)
{
    chorus_ref_t ra[3], rb[3];
    int wa[3], wb[3], na = accesses(a, ra, wa), nb = accesses(b, rb, wb), i, j;
    uint64_t ca = a->count ? a->count : 1, cb = b->count ? b->count : 1;

    for (i = 0; i < na; i++)
        for (j = 0; j < nb; j++)
            if ((wa[i] || wb[j]) && overlap(ra[i], ca, rb[j], cb)) return 1;
    return 0;
}

/* Random schedules against brute force: every edge joins conflicting steps, ndeps
 * counts the edges, and every conflicting pair is ordered by a path. */
static void test_sched_dependencies(void **state)
{
    int iter;

    (void)state;
    srand(12345);
    for (iter = 0; iter < 3000; iter++) {
        chorus_sched_t s;
        int n = 1 + rand() % 60, i, j, x;
        uint32_t k, *nd;
        char *reach;

        chorus__sched_init(&s, 0, 2);
        for (i = 0; i < n; i++) {
            int kind = rand() % 4;
            uint64_t c = (uint64_t)(rand() % 8);
            chorus_ref_t a = chorus_ref((chorus_buf_id_t)(rand() % 3), (uint64_t)(rand() % 20));
            chorus_ref_t b = chorus_ref((chorus_buf_id_t)(rand() % 3), (uint64_t)(rand() % 20));
            chorus_ref_t d = chorus_ref((chorus_buf_id_t)(1 + rand() % 2), (uint64_t)(rand() % 20));

            if (kind == 0) chorus__sched_send(&s, 1, a, c);
            else if (kind == 1) chorus__sched_recv(&s, 1, d, c);
            else if (kind == 2) chorus__sched_reduce(&s, d, a, b, c);
            else chorus__sched_copy(&s, d, a, c);
        }
        assert_int_equal(chorus__sched_finalize(&s), CHORUS_SUCCESS);
        n = (int)s.nsteps;
        for (i = 0; i < n; i++)
            if ((s.steps[i].kind == CHORUS_STEP_REDUCE || s.steps[i].kind == CHORUS_STEP_COPY))
                assert_true(s.steps[i].count > 0);
        reach = calloc((size_t)n * (size_t)n + 1, 1);
        nd = calloc((size_t)n + 1, sizeof(*nd));
        for (i = n - 1; i >= 0; i--) {
            const chorus_step_t *st = &s.steps[i];
            reach[i * n + i] = 1;
            for (k = 0; k < st->nsucc; k++) {
                j = (int)s.succ[st->succ_begin + k];
                assert_true(j > i);
                assert_true(conflict(st, &s.steps[j]));
                nd[j]++;
                for (x = 0; x < n; x++) reach[i * n + x] |= reach[j * n + x];
            }
        }
        for (j = 0; j < n; j++) {
            assert_int_equal(nd[j], s.steps[j].ndeps);
            for (i = 0; i < j; i++)
                if (conflict(&s.steps[i], &s.steps[j]) && !reach[i * n + j]) {
                    chorus__sched_dump(&s, stderr);
                    fail_msg("steps %d and %d conflict but are not ordered", i, j);
                }
        }
        free(reach);
        free(nd);
        chorus__sched_fini(&s);
    }
}

static void test_sched_scratch_and_errors(void **state)
{
    chorus_sched_t s;
    chorus_coll_args_t a = {.coll = CHORUS_COLL_ALLTOALL, .nranks = 4, .count = 10};

    (void)state;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__sched_scratch(&s, 10), 0);
    assert_int_equal(chorus__sched_scratch(&s, 5), 10);
    assert_int_equal(s.scratch_count, 15);
    chorus__sched_copy(&s, RECV_AT(0), SEND_AT(0), 0);
    chorus__sched_reduce(&s, RECV_AT(0), SEND_AT(0), SEND_AT(0), 0);
    chorus__sched_send(&s, 1, SEND_AT(0), 0);
    assert_int_equal(s.nsteps, 1);
    assert_int_equal(chorus__sched_finalize(&s), CHORUS_SUCCESS);
    chorus__sched_fini(&s);

    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_RING, &a, &s), CHORUS_ERR_UNSUPPORTED);
    chorus__sched_fini(&s);
    a.coll = CHORUS_COLL_BROADCAST;
    a.root = 4;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_RING, &a, &s), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__sched_fini(&s);
}

static void test_names(void **state)
{
    int a, c;

    (void)state;
    for (a = 0; a < CHORUS_NUM_ALGOS; a++)
        assert_int_equal(chorus__algo_parse(chorus__algo_name((chorus_algo_t)a)), a);
    assert_int_equal(chorus__algo_parse("RING"), CHORUS_ALGO_RING);
    assert_int_equal(chorus__algo_parse("nope"), -1);
    assert_int_equal(chorus__algo_parse(NULL), -1);
    assert_null(chorus__algo_name(CHORUS_NUM_ALGOS));
    assert_string_equal(chorus__coll_name(CHORUS_COLL_REDUCE_SCATTER), "reduce_scatter");
    for (c = 0; c < CHORUS_NUM_COLLS; c++) assert_non_null(chorus__coll_name((chorus_coll_t)c));
    assert_true(chorus__algo_supports(CHORUS_ALGO_TREE, CHORUS_COLL_REDUCE));
    assert_false(chorus__algo_supports(CHORUS_ALGO_TREE, CHORUS_COLL_ALLGATHER));
    assert_false(chorus__algo_supports(CHORUS_ALGO_AUTO, CHORUS_COLL_ALLREDUCE));
    assert_true(chorus__algo_supports(CHORUS_ALGO_RD, CHORUS_COLL_ALLGATHER));
    assert_true(chorus__algo_supports(CHORUS_ALGO_RABENSEIFNER, CHORUS_COLL_REDUCE_SCATTER));
    assert_false(chorus__algo_supports(CHORUS_ALGO_SWING, CHORUS_COLL_ALLGATHER));
    assert_false(chorus__algo_supports(CHORUS_ALGO_BRUCK, CHORUS_COLL_ALLREDUCE));
}

/* With ALGO_TEST_BIG=all, these four hold 8-9 GB each (n x 1M-element buffers on 64
 * simulated ranks), the others at most 4.2 GB (measured with /usr/bin/time -f %M). make
 * check runs ALGO_TEST_PART=heavy and =light at once: on 2 cores that halves the wait, and
 * two heavy ones never run together (8.6 + 4.2 GB at most). */
static int is_heavy(const char *name)
{
    static const char *const heavy[] = {"test_pairwise_alltoall", "test_rabenseifner_reduce_scatter",
                                        "test_bruck_allgather", "test_direct_reduce_scatter"};
    size_t i;

    for (i = 0; i < sizeof(heavy) / sizeof(heavy[0]); i++)
        if (strcmp(name, heavy[i]) == 0) return 1;
    return 0;
}

int main(void)
{
    const char *part = getenv("ALGO_TEST_PART");
    struct CMUnitTest chosen[64];
    size_t i, k = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_sched_dependencies),
        cmocka_unit_test(test_sched_scratch_and_errors),
        cmocka_unit_test(test_ring_allreduce),
        cmocka_unit_test(test_ring_allgather),
        cmocka_unit_test(test_ring_reduce_scatter),
        cmocka_unit_test(test_ring_broadcast),
        cmocka_unit_test(test_ring_reduce),
        cmocka_unit_test(test_ring_permuted),
        cmocka_unit_test(test_ring_bad_order),
        cmocka_unit_test(test_tree_allreduce),
        cmocka_unit_test(test_tree_broadcast),
        cmocka_unit_test(test_tree_reduce),
        cmocka_unit_test(test_rd_allreduce),
        cmocka_unit_test(test_pairwise_alltoall),
        cmocka_unit_test(test_rd_allgather),
        cmocka_unit_test(test_rabenseifner_allreduce),
        cmocka_unit_test(test_rabenseifner_reduce_scatter),
        cmocka_unit_test(test_bruck_allgather),
        cmocka_unit_test(test_swing_allreduce),
        cmocka_unit_test(test_direct_allreduce),
        cmocka_unit_test(test_direct_reduce_scatter),
        cmocka_unit_test(test_direct_reduce),
        cmocka_unit_test(test_halving_many_ranks),
        cmocka_unit_test(test_dissemination_barrier),
        cmocka_unit_test(test_barrier_waits_for_all),
        cmocka_unit_test(test_ops),
        cmocka_unit_test(test_float_bitwise),
        cmocka_unit_test(test_tree_ring_order),
        cmocka_unit_test(test_tree_bad_order),
    };
    /* ALGO_TEST_FILTER=test_ring_* runs a subset while working on one algorithm. */
    if (getenv("ALGO_TEST_FILTER")) cmocka_set_test_filter(getenv("ALGO_TEST_FILTER"));
    if (part == NULL || part[0] == '\0') return cmocka_run_group_tests(tests, NULL, NULL);
    if (strcmp(part, "heavy") != 0 && strcmp(part, "light") != 0) {
        fprintf(stderr, "ALGO_TEST_PART=%s: heavy or light\n", part);
        return 2;
    }
    assert_true(sizeof(tests) / sizeof(tests[0]) <= sizeof(chosen) / sizeof(chosen[0]));
    for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        if (is_heavy(tests[i].name) == (strcmp(part, "heavy") == 0)) chosen[k++] = tests[i];
    return _cmocka_run_group_tests(part, chosen, k, NULL, NULL);
}
