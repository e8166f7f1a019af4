/*
 * Unit test of the hierarchical allreduce (lib/algo/hier.c) on synthetic host maps: the
 * schedules of all ranks run through the engine over the virtual transport in this
 * process, advanced round robin until every one is done; a full pass in which no rank
 * moves is a deadlock, and the stuck schedules are printed. (The harness follows
 * tests/unit/test_algo.c.)
 *
 * Integer results are compared exactly with a brute-force reference (signed types compare
 * signed for MIN and MAX; SUM and PROD wrap modulo 2^bits). Float results must be
 * bitwise the same on every rank and within the rounding bound of an n-term sum of
 * positive values: (n - 1) u sum|x|, u the type's unit roundoff. Every case also checks
 * that every rank holds the same bytes and that the send buffer is untouched out of place.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "algo/algo.h"
#include "core/engine.h"
#include "kernels.h"
#include "topo/topo.h"
#include "transport/virtual/virtual.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 32

typedef struct {
    const char *name;
    int n;
    int host_of[MAX_RANKS];
    int nhosts;
} hmap_t;

typedef struct {
    const hmap_t *map;
    uint64_t count;
    uint64_t chunk;
    int inplace;
    chorus_dtype_t dtype;
    chorus_op_t op;
} hc_t;

/* args.ring_order of every case run while it is set (NULL: none); kept outside hc_t so
 * that the cases' positional initialisers stay complete. */
static const int *test_ring_order;

typedef struct {
    chorus_sched_t sched;
    chorus_exec_t exec;
    char *send, *recv, *scratch;
    int done;
} hrank_t;

/* Host maps (hosts numbered by first appearance, as lib/core numbers them). */
static const hmap_t map_one1 = {"1 host x 1", 1, {0}, 1};
static const hmap_t map_one3 = {"1 host x 3", 3, {0, 0, 0}, 1};
static const hmap_t map_one5 = {"1 host x 5", 5, {0, 0, 0, 0, 0}, 1};
static const hmap_t map_2x1 = {"2 hosts x 1", 2, {0, 1}, 2};
static const hmap_t map_2x2 = {"2 hosts x 2", 4, {0, 0, 1, 1}, 2};
static const hmap_t map_3x4 = {"3 hosts x 4", 12, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}, 3};
static const hmap_t map_4x2i = {"4 hosts x 2, host r % 4", 8, {0, 1, 2, 3, 0, 1, 2, 3}, 4};
static const hmap_t map_5x1 = {"5 hosts x 1", 5, {0, 1, 2, 3, 4}, 5};
static const hmap_t map_312 = {"hosts of 3, 1, 2", 6, {0, 0, 0, 1, 2, 2}, 3};
static const hmap_t map_312i = {"hosts of 3, 1, 2 interleaved", 6, {0, 1, 2, 0, 2, 0}, 3};
static const hmap_t map_mixed = {"hosts of 1, 4, 2, 3 interleaved", 10,
                                 {0, 1, 1, 2, 3, 1, 3, 2, 3, 1}, 4};
static const hmap_t map_7x3 = {"7 hosts x 3, scattered", 21,
                               {0, 1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5},
                               7};

static const hmap_t *const all_maps[] = {&map_one1, &map_one3, &map_one5, &map_2x1,
                                         &map_2x2,  &map_3x4,  &map_4x2i, &map_5x1,
                                         &map_312,  &map_312i, &map_mixed, &map_7x3};
#define NMAPS (sizeof(all_maps) / sizeof(all_maps[0]))

/* ---- Values ---- */

static int is_float(chorus_dtype_t d)
{
    return d == CHORUS_FLOAT16 || d == CHORUS_BFLOAT16 || d == CHORUS_FLOAT32 ||
           d == CHORUS_FLOAT64;
}

static int is_signed(chorus_dtype_t d)
{
    return d == CHORUS_INT8 || d == CHORUS_INT32 || d == CHORUS_INT64;
}

/* Irregular small integers (int8 sees negative ones too). */
static uint64_t ival(int r, uint64_t i)
{
    return ((i * 37 + (uint64_t)r * 101 + (i * (uint64_t)r) % 17) % 251) + 1;
}

/* Positive floats whose sums depend on the order of addition in the last bits. */
static double fval(int r, uint64_t i)
{
    return 1.0 / (double)(r + 1) + (double)(i % 1000) * 1e-3;
}

static void store_u(char *p, size_t es, uint64_t v)
{
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

/* An integer element, sign-extended for signed types. */
static int64_t load_i(const char *p, chorus_dtype_t d)
{
    uint8_t u8;
    uint32_t u32;
    uint64_t u64;

    switch (chorus_dtype_size(d)) {
    case 1:
        memcpy(&u8, p, 1);
        return is_signed(d) ? (int64_t)(int8_t)u8 : (int64_t)u8;
    case 4:
        memcpy(&u32, p, 4);
        return is_signed(d) ? (int64_t)(int32_t)u32 : (int64_t)u32;
    default: memcpy(&u64, p, 8); return (int64_t)u64;
    }
}

static void store_f(char *p, chorus_dtype_t d, double v)
{
    float f = (float)v;
    uint16_t h;

    switch (d) {
    case CHORUS_FLOAT16: h = chorus_float_to_half(f); memcpy(p, &h, 2); break;
    case CHORUS_BFLOAT16: h = chorus_float_to_bf16(f); memcpy(p, &h, 2); break;
    case CHORUS_FLOAT32: memcpy(p, &f, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

static double load_f(const char *p, chorus_dtype_t d)
{
    uint16_t h;
    float f;
    double v;

    switch (d) {
    case CHORUS_FLOAT16: memcpy(&h, p, 2); return chorus_half_to_float(h);
    case CHORUS_BFLOAT16: memcpy(&h, p, 2); return chorus_bf16_to_float(h);
    case CHORUS_FLOAT32: memcpy(&f, p, 4); return f;
    default: memcpy(&v, p, 8); return v;
    }
}

/* Unit roundoff of a float type. */
static double unit_roundoff(chorus_dtype_t d)
{
    switch (d) {
    case CHORUS_FLOAT16: return ldexp(1.0, -11);
    case CHORUS_BFLOAT16: return ldexp(1.0, -8);
    case CHORUS_FLOAT32: return ldexp(1.0, -24);
    default: return ldexp(1.0, -53);
    }
}

static void fill(const hc_t *t, int r, char *buf)
{
    size_t es = chorus_dtype_size(t->dtype);
    uint64_t i;

    for (i = 0; i < t->count; i++) {
        if (is_float(t->dtype))
            store_f(buf + i * es, t->dtype, fval(r, i));
        else
            store_u(buf + i * es, es, ival(r, i));
    }
}

/* ---- Running ---- */

static void describe(const hc_t *t, char *out, size_t len)
{
    snprintf(out, len, "hier allreduce on %s (n=%d) count=%llu chunk=%llu %s %s %s",
             t->map->name, t->map->n, (unsigned long long)t->count,
             (unsigned long long)t->chunk, t->inplace ? "in-place" : "out-of-place",
             chorus_dtype_name(t->dtype), chorus_op_name(t->op));
    if (test_ring_order != NULL) {
        size_t used = strlen(out);
        int i;

        for (i = 0; i < t->map->n && used + 8 < len; i++, used = strlen(out))
            snprintf(out + used, len - used, "%s%d", i ? "," : " order ", test_ring_order[i]);
    }
}

static chorus_coll_args_t args_of(const hc_t *t, int r)
{
    chorus_coll_args_t a;

    memset(&a, 0, sizeof(a));
    a.coll = CHORUS_COLL_ALLREDUCE;
    a.rank = r;
    a.nranks = t->map->n;
    a.count = t->count;
    a.chunk_count = t->chunk;
    a.host_of = t->map->host_of;
    a.nhosts = t->map->nhosts;
    a.ring_order = test_ring_order;
    return a;
}

static char *xalloc(uint64_t bytes, int fill_byte)
{
    char *p;

    if (bytes == 0) return NULL;
    p = malloc((size_t)bytes);
    assert_non_null(p);
    memset(p, fill_byte, (size_t)bytes);
    return p;
}

static void report_stuck(const hc_t *t, hrank_t *ranks)
{
    char what[256];
    int r, printed = 0;

    describe(t, what, sizeof(what));
    print_error("deadlock: %s\n", what);
    for (r = 0; r < t->map->n; r++) {
        if (ranks[r].done) continue;
        print_error("rank %d: %u of %u steps done\n", r, ranks[r].exec.ndone,
                    ranks[r].sched.nsteps);
        if (printed++ < 4 && ranks[r].sched.nsteps <= 200)
            chorus__sched_dump(&ranks[r].sched, stderr);
    }
}

static void start_rank(const hc_t *t, int r, hrank_t *tr, chorus_peer_tp_t *peers,
                       chorus_vworld_t *world, const char *what)
{
    size_t es = chorus_dtype_size(t->dtype);
    chorus_coll_args_t a = args_of(t, r);
    void *bufs[CHORUS_NUM_BUFS];
    chorus_status_t st;
    int n = t->map->n, p;

    chorus__sched_init(&tr->sched, r, n);
    st = chorus__algo_build(CHORUS_ALGO_HIER, &a, &tr->sched);
    if (st != CHORUS_SUCCESS) fail_msg("%s: build failed on rank %d: %d", what, r, st);
    tr->send = xalloc(t->count * es, 0);
    tr->recv = t->inplace ? tr->send : xalloc(t->count * es, 0xEE);
    if (t->count) fill(t, r, tr->send);
    tr->scratch = xalloc(tr->sched.scratch_count * es, 0x5A);
    for (p = 0; p < n; p++) {
        peers[p].ops = &chorus__tp_virtual_ops;
        peers[p].tp = chorus__vworld_tp(world, r);
    }
    bufs[CHORUS_BUF_SEND] = tr->send;
    bufs[CHORUS_BUF_RECV] = tr->recv;
    bufs[CHORUS_BUF_SCRATCH] = tr->scratch;
    st = chorus__exec_start(&tr->exec, &tr->sched, bufs, t->dtype, t->op, peers, &peers[r], 1,
                            what);
    assert_int_equal(st, CHORUS_SUCCESS);
}

/* Builds every rank's schedule, runs them all, and leaves the results in ranks. */
static hrank_t *run_case(const hc_t *t)
{
    int n = t->map->n, r, idle = 0;
    chorus_vworld_t *world = NULL;
    chorus_peer_tp_t *peers;
    hrank_t *ranks;
    char what[256];

    describe(t, what, sizeof(what));
    assert_int_equal(chorus__vworld_create(n, &world), CHORUS_SUCCESS);
    ranks = calloc((size_t)n, sizeof(*ranks));
    peers = calloc((size_t)n * (size_t)n, sizeof(*peers));
    assert_non_null(ranks);
    assert_non_null(peers);
    for (r = 0; r < n; r++) start_rank(t, r, &ranks[r], &peers[r * n], world, what);
    for (;;) {
        int all = 1, moved = 0;

        for (r = 0; r < n; r++) {
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
    for (r = 0; r < n; r++) chorus__exec_fini(&ranks[r].exec);
    free(peers);
    chorus__vworld_destroy(world);
    return ranks;
}

static void free_ranks(const hc_t *t, hrank_t *ranks)
{
    int r;

    for (r = 0; r < t->map->n; r++) {
        chorus__sched_fini(&ranks[r].sched);
        if (ranks[r].recv != ranks[r].send) free(ranks[r].recv);
        free(ranks[r].send);
        free(ranks[r].scratch);
    }
    free(ranks);
}

/* ---- Checking ---- */

static uint64_t int_reduce(chorus_op_t op, chorus_dtype_t d, uint64_t acc, uint64_t v)
{
    int64_t sa, sv;

    switch (op) {
    case CHORUS_SUM: return acc + v;
    case CHORUS_PROD: return acc * v;
    default: break;
    }
    /* Compare as the dtype does: sign-extend the stored bits of signed types. */
    {
        char pa[8], pv[8];
        size_t es = chorus_dtype_size(d);

        store_u(pa, es, acc);
        store_u(pv, es, v);
        sa = load_i(pa, d);
        sv = load_i(pv, d);
    }
    if (op == CHORUS_MIN) return (is_signed(d) ? sv < sa : (uint64_t)sv < (uint64_t)sa) ? v : acc;
    return (is_signed(d) ? sv > sa : (uint64_t)sv > (uint64_t)sa) ? v : acc;
}

static void check_int(const hc_t *t, const char *got, const char *what)
{
    size_t es = chorus_dtype_size(t->dtype);
    uint64_t i, mask = es >= 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * es)) - 1);
    int r;

    for (i = 0; i < t->count; i++) {
        uint64_t acc = ival(0, i) & mask, g;
        char want[8];

        for (r = 1; r < t->map->n; r++) acc = int_reduce(t->op, t->dtype, acc, ival(r, i)) & mask;
        store_u(want, es, acc);
        if (memcmp(want, got + i * es, es) != 0) {
            g = (uint64_t)load_i(got + i * es, t->dtype) & mask;
            fail_msg("%s: recv[%llu] = %llu, expected %llu", what, (unsigned long long)i,
                     (unsigned long long)g, (unsigned long long)acc);
        }
    }
}

/* Inputs are first rounded to the dtype, so the bound covers only the reductions. */
static void check_float(const hc_t *t, const char *got, const char *what)
{
    size_t es = chorus_dtype_size(t->dtype);
    double u = unit_roundoff(t->dtype);
    char x[8];
    uint64_t i;
    int r;

    for (i = 0; i < t->count; i++) {
        double acc = 0, sum = 0, g = load_f(got + i * es, t->dtype), bound = 0;

        for (r = 0; r < t->map->n; r++) {
            double v;

            store_f(x, t->dtype, fval(r, i));
            v = load_f(x, t->dtype);
            sum += v;
            if (r == 0) acc = v;
            else if (t->op == CHORUS_SUM) acc += v;
            else if (t->op == CHORUS_PROD) acc *= v;
            else if (t->op == CHORUS_MIN) acc = v < acc ? v : acc;
            else acc = v > acc ? v : acc;
        }
        /* n - 1 roundings, each of relative size at most u (positive terms, so every
         * partial is at most the total); MIN and MAX round nothing. */
        if (t->op == CHORUS_SUM) bound = (t->map->n - 1) * u * sum * 1.001;
        if (t->op == CHORUS_PROD) bound = (t->map->n - 1) * u * fabs(acc) * 1.01;
        if (!(fabs(g - acc) <= bound))
            fail_msg("%s: recv[%llu] = %.17g, expected %.17g within %g", what,
                     (unsigned long long)i, g, acc, bound);
    }
}

static void check_case(const hc_t *t)
{
    size_t es = chorus_dtype_size(t->dtype);
    uint64_t bytes = t->count * es;
    hrank_t *ranks = run_case(t);
    char what[256];
    int r;

    describe(t, what, sizeof(what));
    for (r = 1; r < t->map->n; r++)
        if (bytes && memcmp(ranks[r].recv, ranks[0].recv, (size_t)bytes) != 0) {
            uint64_t i = 0;

            while (memcmp(ranks[r].recv + i * es, ranks[0].recv + i * es, es) == 0) i++;
            fail_msg("%s: rank %d's result differs from rank 0's at element %llu", what, r,
                     (unsigned long long)i);
        }
    if (bytes && is_float(t->dtype)) check_float(t, ranks[0].recv, what);
    else if (bytes) check_int(t, ranks[0].recv, what);
    /* The send buffer is read-only: out of place it must be untouched. */
    if (!t->inplace && bytes) {
        char *orig = xalloc(bytes, 0);

        for (r = 0; r < t->map->n; r++) {
            fill(t, r, orig);
            if (memcmp(orig, ranks[r].send, (size_t)bytes) != 0)
                fail_msg("%s: rank %d's send buffer changed", what, r);
        }
        free(orig);
    }
    free_ranks(t, ranks);
}

/* ---- Tests ---- */

/* Every map x small and uneven counts x chunk sizes x in/out of place, int32 sum. */
static void test_maps_counts(void **state)
{
    static const uint64_t chunks[] = {0, 1, 3, 1000};
    size_t mi, ci, k;
    int ip;

    (void)state;
    for (mi = 0; mi < NMAPS; mi++) {
        const hmap_t *m = all_maps[mi];
        uint64_t counts[] = {0, 1, 2, 7, (uint64_t)m->n - 1, (uint64_t)m->n + 1, 1001};

        for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++)
                for (ip = 0; ip < 2; ip++) {
                    hc_t t = {m, counts[ci], chunks[k], ip, CHORUS_INT32, CHORUS_SUM};

                    /* One-element chunks of 1001 on 21 ranks: slow, nothing new. */
                    if (chunks[k] == 1 && counts[ci] > 100 && m->n > 12) continue;
                    check_case(&t);
                }
    }
}

/* Every integer dtype x op, exact; on maps that exercise each phase, with short chunks
 * (ring between hosts) and the default one (recursive doubling for these small slices). */
static void test_int_dtypes_ops(void **state)
{
    static const chorus_dtype_t dts[] = {CHORUS_INT8,  CHORUS_UINT8,  CHORUS_INT32,
                                         CHORUS_UINT32, CHORUS_INT64, CHORUS_UINT64};
    static const hmap_t *const maps[] = {&map_one3, &map_2x2, &map_4x2i, &map_312i, &map_3x4};
    size_t d, mi;
    int op, ip;

    (void)state;
    for (mi = 0; mi < sizeof(maps) / sizeof(maps[0]); mi++)
        for (d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
            for (op = CHORUS_SUM; op <= CHORUS_MAX; op++)
                for (ip = 0; ip < 4; ip++) {
                    hc_t t = {maps[mi], 301, ip < 2 ? 7 : 0, ip & 1, dts[d], (chorus_op_t)op};
                    check_case(&t);
                }
}

/* Every float dtype x op: bitwise identical everywhere and within the bound; ring and
 * recursive doubling between hosts, as above. */
static void test_float_dtypes_ops(void **state)
{
    static const chorus_dtype_t dts[] = {CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32,
                                         CHORUS_FLOAT64};
    static const hmap_t *const maps[] = {&map_2x2,  &map_3x4,  &map_4x2i,
                                         &map_312,  &map_mixed, &map_7x3};
    size_t d, mi;
    int op, ip;

    (void)state;
    for (mi = 0; mi < sizeof(maps) / sizeof(maps[0]); mi++)
        for (d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
            for (op = CHORUS_SUM; op <= CHORUS_MAX; op++)
                for (ip = 0; ip < 4; ip++) {
                    hc_t t = {maps[mi], 1001, ip < 2 ? 17 : 0, ip & 1, dts[d], (chorus_op_t)op};

                    /* The product of more than 6 of these values leaves float16's normal
                     * range, where the relative bound no longer holds. */
                    if (dts[d] == CHORUS_FLOAT16 && op == CHORUS_PROD && maps[mi]->n > 6)
                        continue;
                    check_case(&t);
                }
}

/* Large-ish vectors with small chunks: long pipelines across the three phases. */
static void test_large_small_chunks(void **state)
{
    static const hmap_t *const maps[] = {&map_2x2, &map_3x4, &map_4x2i, &map_312i};
    size_t mi;
    int ip;

    (void)state;
    for (mi = 0; mi < sizeof(maps) / sizeof(maps[0]); mi++)
        for (ip = 0; ip < 2; ip++) {
            hc_t t = {maps[mi], 100003, 97, ip, CHORUS_UINT8, CHORUS_SUM};
            hc_t f = {maps[mi], 100003, 1000, ip, CHORUS_FLOAT32, CHORUS_SUM};

            check_case(&t);
            check_case(&f);
        }
}

/* The point of the algorithm: between hosts, a ring allreduce per slice moves 2 (H - 1)
 * count elements in all, whatever the number of ranks per host, and within host h the
 * reduce-scatter and allgather move 2 (m_h - 1) count. Counted from the schedules, on
 * slices long enough for the ring (not recursive doubling) between hosts. */
static void test_traffic(void **state)
{
    static const hmap_t *const maps[] = {&map_2x2, &map_3x4, &map_4x2i, &map_312i, &map_mixed,
                                         &map_7x3};
    size_t mi;
    uint32_t k;

    (void)state;
    for (mi = 0; mi < sizeof(maps) / sizeof(maps[0]); mi++) {
        const hmap_t *m = maps[mi];
        hc_t t = {m, 200003, 4096, 0, CHORUS_INT32, CHORUS_SUM};
        uint64_t inter = 0, intra[MAX_RANKS] = {0}, per_host[MAX_RANKS] = {0};
        int r, h;

        for (r = 0; r < m->n; r++) {
            chorus_coll_args_t a = args_of(&t, r);
            chorus_sched_t s;

            chorus__sched_init(&s, r, m->n);
            assert_int_equal(chorus__algo_build(CHORUS_ALGO_HIER, &a, &s), CHORUS_SUCCESS);
            for (k = 0; k < s.nsteps; k++) {
                const chorus_step_t *st = &s.steps[k];

                if (st->kind != CHORUS_STEP_SEND) continue;
                if (m->host_of[st->peer] == m->host_of[r]) intra[m->host_of[r]] += st->count;
                else inter += st->count;
            }
            chorus__sched_fini(&s);
            per_host[m->host_of[r]]++;
        }
        assert_int_equal(inter, 2 * (uint64_t)(m->nhosts - 1) * t.count);
        for (h = 0; h < m->nhosts; h++)
            assert_int_equal(intra[h], 2 * (per_host[h] - 1) * t.count);
    }
}

static void test_errors_and_support(void **state)
{
    static const int bad_map[4] = {0, 1, 5, 1};
    static const int gap_map[4] = {0, 0, 2, 2};
    chorus_coll_args_t a;
    chorus_sched_t s;

    (void)state;
    assert_true(chorus__algo_supports(CHORUS_ALGO_HIER, CHORUS_COLL_ALLREDUCE));
    assert_false(chorus__algo_supports(CHORUS_ALGO_HIER, CHORUS_COLL_ALLGATHER));
    assert_int_equal(chorus__algo_parse("hier"), CHORUS_ALGO_HIER);
    memset(&a, 0, sizeof(a));
    a.coll = CHORUS_COLL_ALLREDUCE;
    a.nranks = 4;
    a.count = 10;
    a.host_of = bad_map;
    a.nhosts = 2;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_HIER, &a, &s), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__sched_fini(&s);
    a.host_of = gap_map;
    a.nhosts = 3;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_HIER, &a, &s), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__sched_fini(&s);
    a.coll = CHORUS_COLL_BROADCAST;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_HIER, &a, &s), CHORUS_ERR_UNSUPPORTED);
    chorus__sched_fini(&s);
    /* No map at all means one host: a plain intra-host reduce-scatter + allgather. */
    {
        static const hmap_t none = {"no map", 4, {0, 0, 0, 0}, 0};
        hc_t t = {&none, 1001, 0, 1, CHORUS_INT64, CHORUS_SUM};

        check_case(&t);
    }
}

/* Hosts ordered by the topology's ring order (lib/topo: NUMA nodes grouped, NIC-near ranks
 * at both ends), and by scrambled orders that do not keep hosts contiguous (hier uses only
 * the order within each host): exact integer results for every op, float results the same
 * bytes on every rank and within the bound, in and out of place, ring and recursive
 * doubling between hosts; the intra-host ring follows the order; traffic is unchanged. */
static void test_hier_ring_order(void **state)
{
    static const int numa5[5] = {1, 0, 1, 0, 1}, nic5[1] = {0};
    static const int numa8[8] = {1, 1, 0, 0, 1, 1, 0, 0}, nic8[4] = {0, 1, -1, 1};
    static const int numa10[10] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, nic10[4] = {1, 1, 0, 1};
    static const int scr6[6] = {5, 3, 1, 4, 2, 0};
    static const int scr21[21] = {20, 3, 7, 11, 15, 19, 2, 6, 10, 14, 18, 1, 5, 9, 13, 17,
                                  0, 4, 8, 12, 16};
    static const chorus_dtype_t dts[] = {CHORUS_INT8, CHORUS_UINT32, CHORUS_INT64,
                                         CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32,
                                         CHORUS_FLOAT64};
    struct {
        const hmap_t *map;
        int order[MAX_RANKS];
    } cases[6];
    size_t c, d;
    int op, ip, i;

    (void)state;
    cases[0].map = &map_one5;
    cases[1].map = &map_4x2i;
    cases[2].map = &map_mixed;
    cases[3].map = &map_3x4;
    cases[4].map = &map_312i;
    cases[5].map = &map_7x3;
    assert_int_equal(chorus__topo_ring_order(5, map_one5.host_of, 1, numa5, nic5,
                                             cases[0].order), CHORUS_SUCCESS);
    assert_int_equal(chorus__topo_ring_order(8, map_4x2i.host_of, 4, numa8, nic8,
                                             cases[1].order), CHORUS_SUCCESS);
    assert_int_equal(chorus__topo_ring_order(10, map_mixed.host_of, 4, numa10, nic10,
                                             cases[2].order), CHORUS_SUCCESS);
    /* The first host of 3 x 4 reversed, the others as they are. */
    for (i = 0; i < 12; i++) cases[3].order[i] = i < 4 ? 3 - i : i;
    memcpy(cases[4].order, scr6, sizeof scr6);
    memcpy(cases[5].order, scr21, sizeof scr21);
    /* One host of 5: node 0 holds the NIC, its ranks 1 and 3 go to both ends. */
    {
        static const int want5[5] = {1, 0, 2, 4, 3};
        assert_memory_equal(cases[0].order, want5, sizeof want5);
    }

    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const hmap_t *m = cases[c].map;

        test_ring_order = cases[c].order;
        for (d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (op = CHORUS_SUM; op <= CHORUS_MAX; op++)
                for (ip = 0; ip < 4; ip++) {
                    hc_t t = {m, 301, ip < 2 ? 7 : 0, ip & 1, dts[d], (chorus_op_t)op};

                    if (dts[d] == CHORUS_FLOAT16 && op == CHORUS_PROD && m->n > 6) continue;
                    /* 21 ranks: the sums are enough to see a wrong path. */
                    if (m->n > 12 && op != CHORUS_SUM) continue;
                    check_case(&t);
                }
        {
            hc_t t = {m, 100003, 997, 0, CHORUS_FLOAT32, CHORUS_SUM};
            check_case(&t);
        }
    }

    /* Phase 1's first message goes to the next rank of the host in the order. */
    test_ring_order = cases[0].order;
    for (i = 0; i < 5; i++) {
        hc_t t = {&map_one5, 1001, 0, 0, CHORUS_INT32, CHORUS_SUM};
        chorus_coll_args_t a = args_of(&t, cases[0].order[i]);
        chorus_sched_t s;
        uint32_t k;

        chorus__sched_init(&s, a.rank, 5);
        assert_int_equal(chorus__algo_build(CHORUS_ALGO_HIER, &a, &s), CHORUS_SUCCESS);
        for (k = 0; k < s.nsteps && s.steps[k].kind != CHORUS_STEP_SEND; k++) continue;
        assert_true(k < s.nsteps);
        assert_int_equal(s.steps[k].peer, cases[0].order[(i + 1) % 5]);
        chorus__sched_fini(&s);
    }
    test_ring_order = NULL;
}

/* An order that is not a permutation is refused, not turned into a hang. */
static void test_hier_bad_order(void **state)
{
    static const int dup[4] = {0, 1, 1, 3};
    hc_t t = {&map_2x2, 10, 0, 0, CHORUS_INT32, CHORUS_SUM};
    chorus_coll_args_t a;
    chorus_sched_t s;

    (void)state;
    test_ring_order = dup;
    a = args_of(&t, 0);
    test_ring_order = NULL;
    chorus__sched_init(&s, 0, 4);
    assert_int_equal(chorus__algo_build(CHORUS_ALGO_HIER, &a, &s), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "hier"));
    chorus__sched_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors_and_support),
        cmocka_unit_test(test_traffic),
        cmocka_unit_test(test_maps_counts),
        cmocka_unit_test(test_int_dtypes_ops),
        cmocka_unit_test(test_float_dtypes_ops),
        cmocka_unit_test(test_large_small_chunks),
        cmocka_unit_test(test_hier_ring_order),
        cmocka_unit_test(test_hier_bad_order),
    };
    if (getenv("ALGO_TEST_FILTER")) cmocka_set_test_filter(getenv("ALGO_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
