/*
 * Unit tests of the local kernels (kernels/kernels.h) and the dtype/op helpers.
 *
 * Every kernel result is compared bit for bit with a scalar reference written here
 * independently: integers through wider or unsigned arithmetic, floats through double,
 * and fp16/bf16 decoded into double by their fields and rounded back by an explicit
 * round-to-nearest-even on the exact value. Two NaNs compare equal; nothing else is
 * compared loosely.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Deterministic random numbers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    /* xorshift64*: plenty for test data, and the same on every run. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* ---- Reference fp16 and bf16, by their fields ---- */

/* A binary format with `mbits` mantissa bits and exponent bias `bias`, stored in 16 bits
 * with 15 - mbits exponent bits. */
typedef struct {
    int mbits;
    int bias;
} ref_fmt_t;

static const ref_fmt_t FMT_HALF = {10, 15};
static const ref_fmt_t FMT_BF16 = {7, 127};

static double ref_decode(ref_fmt_t f, uint16_t v)
{
    int ebits = 15 - f.mbits;
    int e = (v >> f.mbits) & ((1 << ebits) - 1);
    int m = v & ((1 << f.mbits) - 1);
    double s = (v & 0x8000) ? -1.0 : 1.0;
    if (e == (1 << ebits) - 1) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp(m, 1 - f.bias - f.mbits);
    return s * ldexp(m + (1 << f.mbits), e - f.bias - f.mbits);
}

/* Rounds q >= 0 to the nearest integer, ties to the even one. */
static double ref_rne(double q)
{
    double fl = floor(q), diff = q - fl;
    if (diff > 0.5 || (diff == 0.5 && fmod(fl, 2.0) != 0.0)) fl += 1.0;
    return fl;
}

/* Rounds an exact value (a double) to the format, nearest even. */
static uint16_t ref_encode(ref_fmt_t f, double x)
{
    int ebits = 15 - f.mbits;
    int emax = (1 << ebits) - 2 - f.bias; /* largest normal exponent */
    int emin = 1 - f.bias;                /* smallest normal exponent */
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t inf = (uint16_t)(sign | (((1 << ebits) - 1) << f.mbits));
    double ax = fabs(x);
    if (isnan(x)) return (uint16_t)(inf | (1 << (f.mbits - 1)));
    if (isinf(x)) return inf;
    if (ax < ldexp(1.0, emin)) {
        /* Subnormal: count units of the smallest subnormal; 2^mbits units is the smallest
         * normal, which has exactly that bit pattern. */
        double q = ref_rne(ldexp(ax, f.mbits - emin));
        return (uint16_t)(sign | (uint16_t)q);
    }
    int e;
    frexp(ax, &e);
    e -= 1; /* ax in [2^e, 2^(e+1)) */
    double q = ref_rne(ldexp(ax, f.mbits - e));
    if (q == ldexp(1.0, f.mbits + 1)) {
        q /= 2;
        e += 1;
    }
    if (e > emax) return inf;
    return (uint16_t)(sign | ((e + f.bias) << f.mbits) | ((uint16_t)q - (1 << f.mbits)));
}

/* ---- Reference reduction, one element at a time ---- */

static int64_t ref_wrap_signed(int64_t v, int bits)
{
    int64_t m = (int64_t)1 << bits;
    v = ((v % m) + m) % m;
    return v >= m / 2 ? v - m : v;
}

#define REF_MINMAX(op, x, y)                                                                       \
    ((op) == CHORUS_MIN ? ((y) < (x) ? (y) : (x)) : ((y) > (x) ? (y) : (x)))

static double ref_float_op(chorus_op_t op, double x, double y)
{
    switch (op) {
    case CHORUS_SUM: return x + y;
    case CHORUS_PROD: return x * y;
    default:
        if (isnan(x)) return x;
        if (isnan(y)) return y;
        return REF_MINMAX(op, x, y);
    }
}

static void ref_elem(chorus_dtype_t dt, chorus_op_t op, const void *pa, const void *pb, void *out)
{
    switch (dt) {
    case CHORUS_INT8: {
        int x = *(const int8_t *)pa, y = *(const int8_t *)pb;
        int64_t r = op == CHORUS_SUM ? x + y : op == CHORUS_PROD ? x * y : REF_MINMAX(op, x, y);
        *(int8_t *)out = (int8_t)ref_wrap_signed(r, 8);
        break;
    }
    case CHORUS_UINT8: {
        unsigned x = *(const uint8_t *)pa, y = *(const uint8_t *)pb;
        unsigned r = op == CHORUS_SUM ? x + y : op == CHORUS_PROD ? x * y : REF_MINMAX(op, x, y);
        *(uint8_t *)out = (uint8_t)(r % 256);
        break;
    }
    case CHORUS_INT32: {
        int64_t x = *(const int32_t *)pa, y = *(const int32_t *)pb;
        int64_t r;
        if (op == CHORUS_PROD) {
            uint64_t p = (uint64_t)x * (uint64_t)y;
            r = ref_wrap_signed((int64_t)(p & 0xffffffffu), 32);
        } else {
            r = op == CHORUS_SUM ? x + y : REF_MINMAX(op, x, y);
        }
        *(int32_t *)out = (int32_t)ref_wrap_signed(r, 32);
        break;
    }
    case CHORUS_UINT32: {
        uint64_t x = *(const uint32_t *)pa, y = *(const uint32_t *)pb;
        uint64_t r = op == CHORUS_SUM ? x + y : op == CHORUS_PROD ? x * y : REF_MINMAX(op, x, y);
        *(uint32_t *)out = (uint32_t)(r % 4294967296u);
        break;
    }
    case CHORUS_INT64: {
        int64_t x = *(const int64_t *)pa, y = *(const int64_t *)pb;
        /* Sums and products modulo 2^64 are defined in unsigned arithmetic. */
        uint64_t r = op == CHORUS_SUM    ? (uint64_t)x + (uint64_t)y
                     : op == CHORUS_PROD ? (uint64_t)x * (uint64_t)y
                                         : (uint64_t)REF_MINMAX(op, x, y);
        memcpy(out, &r, 8);
        break;
    }
    case CHORUS_UINT64: {
        uint64_t x = *(const uint64_t *)pa, y = *(const uint64_t *)pb;
        uint64_t r = op == CHORUS_SUM ? x + y : op == CHORUS_PROD ? x * y : REF_MINMAX(op, x, y);
        memcpy(out, &r, 8);
        break;
    }
    case CHORUS_FLOAT16:
    case CHORUS_BFLOAT16: {
        ref_fmt_t f = dt == CHORUS_FLOAT16 ? FMT_HALF : FMT_BF16;
        double r = ref_float_op(op, ref_decode(f, *(const uint16_t *)pa),
                                ref_decode(f, *(const uint16_t *)pb));
        *(uint16_t *)out = ref_encode(f, r);
        break;
    }
    case CHORUS_FLOAT32: {
        /* Rounding the double result to float is a correct single rounding here: double
         * holds products exactly and sums with a harmless double rounding (53 >= 2*24+2). */
        double r = ref_float_op(op, *(const float *)pa, *(const float *)pb);
        *(float *)out = (float)r;
        break;
    }
    case CHORUS_FLOAT64:
        *(double *)out = ref_float_op(op, *(const double *)pa, *(const double *)pb);
        break;
    default: fail_msg("bad dtype %d", (int)dt);
    }
}

/* ---- Comparison ---- */

static int is_nan_elem(chorus_dtype_t dt, const void *p)
{
    uint16_t h;
    switch (dt) {
    case CHORUS_FLOAT16: memcpy(&h, p, 2); return (h & 0x7c00) == 0x7c00 && (h & 0x03ff);
    case CHORUS_BFLOAT16: memcpy(&h, p, 2); return (h & 0x7f80) == 0x7f80 && (h & 0x007f);
    case CHORUS_FLOAT32: return isnan(*(const float *)p);
    case CHORUS_FLOAT64: return isnan(*(const double *)p);
    default: return 0;
    }
}

static void print_elem(const char *what, const void *p, size_t size)
{
    uint64_t v = 0;
    memcpy(&v, p, size); /* little-endian test hosts */
    print_error("  %s = 0x%0*llx\n", what, (int)(2 * size), (unsigned long long)v);
}

/* Asserts that got and want hold the same n elements, NaN matching any NaN. On a
 * mismatch it prints the inputs a and b (when given) along with the results. */
static void expect_same(chorus_dtype_t dt, const void *got, const void *want, size_t n,
                        const void *a, const void *b, const char *ctx)
{
    size_t sz = chorus_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        const char *g = (const char *)got + i * sz, *w = (const char *)want + i * sz;
        if (is_nan_elem(dt, g) && is_nan_elem(dt, w)) continue;
        if (memcmp(g, w, sz) != 0) {
            print_error("%s: %s element %zu of %zu differs\n", ctx, chorus_dtype_name(dt), i, n);
            if (a != NULL) print_elem("a   ", (const char *)a + i * sz, sz);
            if (b != NULL) print_elem("b   ", (const char *)b + i * sz, sz);
            print_elem("got ", g, sz);
            print_elem("want", w, sz);
            fail();
        }
    }
}

/* ---- Test data ---- */

static const uint16_t half_specials[] = {0x7e00, 0xfe00, 0x7c01, 0x7c00, 0xfc00, 0x0000,
                                         0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff,
                                         0xfbff, 0x3c00, 0xbc00, 0x0200};
static const uint16_t bf16_specials[] = {0x7fc0, 0xffc0, 0x7f81, 0x7f80, 0xff80, 0x0000,
                                         0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f,
                                         0xff7f, 0x3f80, 0xbf80, 0x0040};

/* Random floats: a mix of special values, full-range bit patterns and values of similar
 * size (whose sums round in interesting ways). */
static float rand_float(void)
{
    static const uint32_t sp[] = {0x7fc00000, 0xffc00001, 0x7f800001, 0x7f800000, 0xff800000,
                                  0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff,
                                  0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000};
    uint64_t r = rng();
    uint32_t bits;
    if (r % 8 == 0) {
        bits = sp[(r >> 8) % (sizeof(sp) / sizeof(sp[0]))];
    } else if (r % 8 < 4) {
        bits = (uint32_t)(r >> 32);
    } else {
        bits = (uint32_t)((r >> 32) & 0x807fffffu) | (uint32_t)((124 + (r >> 16) % 6) << 23);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static double rand_double(void)
{
    static const uint64_t sp[] = {0x7ff8000000000000ull, 0xfff8000000000001ull,
                                  0x7ff0000000000001ull, 0x7ff0000000000000ull,
                                  0xfff0000000000000ull, 0x0ull,
                                  0x8000000000000000ull, 0x1ull,
                                  0x000fffffffffffffull, 0x0010000000000000ull,
                                  0x7fefffffffffffffull, 0xffefffffffffffffull};
    uint64_t r = rng(), bits;
    if (r % 8 == 0) {
        bits = sp[(r >> 8) % (sizeof(sp) / sizeof(sp[0]))];
    } else if (r % 8 < 4) {
        bits = rng();
    } else {
        bits = (rng() & 0x800fffffffffffffull) | ((uint64_t)(1020 + r % 6) << 52);
    }
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

static uint16_t rand_half16(chorus_dtype_t dt)
{
    const uint16_t *sp = dt == CHORUS_FLOAT16 ? half_specials : bf16_specials;
    uint64_t r = rng();
    if (r % 8 == 0) return sp[(r >> 8) % 16];
    if (r % 8 < 4) return (uint16_t)(r >> 32);
    /* Exponent near that of 1.0, any sign and mantissa. */
    if (dt == CHORUS_FLOAT16)
        return (uint16_t)(((r >> 32) & 0x83ff) | ((13 + (r >> 16) % 5) << 10));
    return (uint16_t)(((r >> 32) & 0x807f) | ((125 + (r >> 16) % 5) << 7));
}

static void fill_random(chorus_dtype_t dt, void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng();
        switch (dt) {
        case CHORUS_INT8:
        case CHORUS_UINT8: {
            /* Favour the edges, where wrapping happens. */
            static const uint8_t edge[] = {0, 1, 0x7f, 0x80, 0xff, 0xfe, 2, 0x81};
            ((uint8_t *)buf)[i] = r % 4 == 0 ? edge[(r >> 8) % 8] : (uint8_t)(r >> 40);
            break;
        }
        case CHORUS_INT32:
        case CHORUS_UINT32: {
            static const uint32_t edge[] = {0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 2, 3};
            ((uint32_t *)buf)[i] = r % 4 == 0 ? edge[(r >> 8) % 7] : (uint32_t)(r >> 32);
            break;
        }
        case CHORUS_INT64:
        case CHORUS_UINT64: {
            static const uint64_t edge[] = {
                0, 1, 0x7fffffffffffffffull, 0x8000000000000000ull, 0xffffffffffffffffull, 2, 3};
            ((uint64_t *)buf)[i] = r % 4 == 0 ? edge[(r >> 8) % 7] : rng();
            break;
        }
        case CHORUS_FLOAT16:
        case CHORUS_BFLOAT16: ((uint16_t *)buf)[i] = rand_half16(dt); break;
        case CHORUS_FLOAT32: ((float *)buf)[i] = rand_float(); break;
        case CHORUS_FLOAT64: ((double *)buf)[i] = rand_double(); break;
        default: fail();
        }
    }
}

/* ---- Reduce against the reference ---- */

/* 64-byte aligned memory; C11 wants the size to be a multiple of the alignment. */
static unsigned char *alloc64(size_t bytes)
{
    unsigned char *p = aligned_alloc(64, (bytes + 64) / 64 * 64);
    assert_non_null(p);
    return p;
}

static const size_t lengths[] = {0, 1, 7, 33, 63, 64, 65, 255, 256, 257, 1000 + 3};

typedef enum { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B, ALIAS_ALL, ALIAS_COUNT } alias_t;
static const char *const alias_names[] = {"distinct", "dst==a", "dst==b", "dst==a==b"};

/* One dtype x op x length x aliasing x alignment case. Buffers start `off` elements past
 * a 64-byte boundary (different for a, b and dst), so vector loops see unaligned data. */
static void check_reduce_case(chorus_dtype_t dt, chorus_op_t op, size_t n, alias_t alias,
                              int unaligned)
{
    size_t sz = chorus_dtype_size(dt), cap = (n + 8) * sz;
    unsigned char *ma = alloc64(cap + 64), *mb = alloc64(cap + 64), *md = alloc64(cap + 64);
    unsigned char *want = alloc64(cap), *ca = alloc64(cap), *cb = alloc64(cap);
    unsigned char *a = ma + (unaligned ? 1 : 0) * sz, *b = mb + (unaligned ? 3 : 0) * sz;
    unsigned char *d = md + (unaligned ? 2 : 0) * sz;
    fill_random(dt, a, n + 1);
    fill_random(dt, b, n + 1);
    fill_random(dt, d, n + 1);
    if (alias == ALIAS_DST_A) d = a;
    if (alias == ALIAS_DST_B) d = b;
    if (alias == ALIAS_ALL) b = d = a;
    for (size_t i = 0; i < n; i++)
        ref_elem(dt, op, a + i * sz, b + i * sz, want + i * sz);
    memcpy(ca, a, n * sz); /* the inputs, for the message when dst overwrites them */
    memcpy(cb, b, n * sz);
    unsigned char guard[8];
    memcpy(guard, d + n * sz, sz); /* the element after the end must stay untouched */

    assert_int_equal(chorus_kernel_reduce(d, a, b, n, dt, op), CHORUS_SUCCESS);

    char ctx[128];
    snprintf(ctx, sizeof(ctx), "reduce %s n=%zu %s%s", chorus_op_name(op), n, alias_names[alias],
             unaligned ? " unaligned" : "");
    expect_same(dt, d, want, n, ca, cb, ctx);
    assert_memory_equal(d + n * sz, guard, sz);

    /* The function pointer form runs the same loop. */
    if (alias == ALIAS_NONE && n > 0) {
        memset(d, 0, n * sz);
        chorus_reduce_fn_t fn = chorus_kernel_reduce_fn(dt, op);
        assert_non_null(fn);
        fn(d, a, b, n);
        expect_same(dt, d, want, n, ca, cb, ctx);
    }
    free(ca);
    free(cb);
    free(ma);
    free(mb);
    free(md);
    free(want);
}

static void check_reduce_dtype(chorus_dtype_t dt)
{
    for (chorus_op_t op = CHORUS_SUM; op < CHORUS_AVG; op++)
        for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++)
            for (alias_t al = ALIAS_NONE; al < ALIAS_COUNT; al++)
                for (int un = 0; un < 2; un++)
                    check_reduce_case(dt, op, lengths[li], al, un);
}

static void test_reduce_int8(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_INT8);
}
static void test_reduce_uint8(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_UINT8);
}
static void test_reduce_int32(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_INT32);
}
static void test_reduce_uint32(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_UINT32);
}
static void test_reduce_int64(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_INT64);
}
static void test_reduce_uint64(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_UINT64);
}
static void test_reduce_float16(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_FLOAT16);
}
static void test_reduce_bfloat16(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_BFLOAT16);
}
static void test_reduce_float32(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_FLOAT32);
}
static void test_reduce_float64(void **state)
{
    (void)state;
    check_reduce_dtype(CHORUS_FLOAT64);
}

/* ---- Multi-source reduce against chaining ---- */

/* reduce_ops.h is internal to kernels/; the tests use its switches that force the
 * non-temporal path onto small buffers and the baseline (non-AVX2) loops onto this CPU. */
void chorus__kernel_set_stream_threshold(size_t traffic);
void chorus__kernel_force_baseline(int on);

#define MULTI_MAX 9

static const size_t multi_lengths[] = {0, 1, 7, 63, 64, 65, 1000 + 3, 16 * 64 + 5, 40 * 64 + 17};

/* reduce_multi against two references: chorus_kernel_reduce chained left to right, which
 * must give the same bytes (except which NaN a SUM or PROD of two NaNs returns: IEEE 754
 * leaves that open, and x86 takes it from the operand order the compiler picks); and this
 * file's scalar reference folded the same way, which pins the per-step rounding of fp16
 * and bf16 and the NaN order of MIN and MAX independently of the kernels. */
static void check_multi_case(chorus_dtype_t dt, chorus_op_t op, size_t n, int nsrc, int in_place,
                             int unaligned)
{
    size_t sz = chorus_dtype_size(dt), cap = (n + 8) * sz;
    unsigned char *mem[MULTI_MAX], *md = alloc64(cap + 64), *chain = alloc64(cap);
    unsigned char *want = alloc64(cap), *src0 = alloc64(cap), *d;
    const void *src[MULTI_MAX];
    char ctx[128];

    for (int s = 0; s < nsrc; s++) {
        mem[s] = alloc64(cap + 64);
        src[s] = mem[s] + (unaligned ? (size_t)(s % 5 + 1) : 0) * sz;
        fill_random(dt, (void *)src[s], n + 1);
    }
    d = md + (unaligned ? 3 : 0) * sz;
    fill_random(dt, d, n + 1);
    if (in_place) d = (unsigned char *)src[0];
    memcpy(src0, src[0], n * sz);
    /* Chained kernel, and the scalar reference, both out of place. */
    if (n > 0) memcpy(chain, src[0], n * sz);
    for (int s = 1; s < nsrc; s++)
        assert_int_equal(chorus_kernel_reduce(chain, chain, src[s], n, dt, op), CHORUS_SUCCESS);
    for (size_t i = 0; i < n; i++) {
        memcpy(want + i * sz, src0 + i * sz, sz);
        for (int s = 1; s < nsrc; s++)
            ref_elem(dt, op, want + i * sz, (const char *)src[s] + i * sz, want + i * sz);
    }
    unsigned char guard[8];
    memcpy(guard, d + n * sz, sz);

    assert_int_equal(chorus_kernel_reduce_multi(d, src, nsrc, n, dt, op), CHORUS_SUCCESS);

    snprintf(ctx, sizeof(ctx), "reduce_multi %s n=%zu nsrc=%d%s%s", chorus_op_name(op), n, nsrc,
             in_place ? " dst==src[0]" : "", unaligned ? " unaligned" : "");
    expect_same(dt, d, want, n, src0, nsrc > 1 ? src[1] : NULL, ctx);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *g = d + i * sz, *c = chain + i * sz;
        if ((op == CHORUS_SUM || op == CHORUS_PROD) && is_nan_elem(dt, g) && is_nan_elem(dt, c))
            continue;
        if (memcmp(g, c, sz) != 0) {
            print_error("%s: %s element %zu differs from chained reduce\n", ctx,
                        chorus_dtype_name(dt), i);
            print_elem("got    ", g, sz);
            print_elem("chained", c, sz);
            fail();
        }
    }
    assert_memory_equal(d + n * sz, guard, sz);
    for (int s = 0; s < nsrc; s++)
        free(mem[s]);
    free(md);
    free(chain);
    free(want);
    free(src0);
}

static void check_multi_dtype(chorus_dtype_t dt)
{
    for (chorus_op_t op = CHORUS_SUM; op < CHORUS_AVG; op++)
        for (size_t li = 0; li < sizeof(multi_lengths) / sizeof(multi_lengths[0]); li++)
            for (int nsrc = 1; nsrc <= MULTI_MAX; nsrc++)
                for (int ip = 0; ip < 2; ip++)
                    check_multi_case(dt, op, multi_lengths[li], nsrc, ip, (int)(li + nsrc) % 2);
}

static void test_multi_all_dtypes(void **state)
{
    (void)state;
    for (chorus_dtype_t dt = CHORUS_INT8; dt < CHORUS_NUM_DTYPES; dt++)
        check_multi_dtype(dt);
}

/* The same cases with every call taking the non-temporal path (for outputs larger than
 * the cache), which has its own head, chunking and tail. */
static void test_multi_streamed(void **state)
{
    (void)state;
    chorus__kernel_set_stream_threshold(1);
    for (chorus_dtype_t dt = CHORUS_INT8; dt < CHORUS_NUM_DTYPES; dt++) {
        check_multi_dtype(dt);
        for (chorus_op_t op = CHORUS_SUM; op < CHORUS_AVG; op++)
            for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++)
                for (alias_t al = ALIAS_NONE; al < ALIAS_COUNT; al++)
                    check_reduce_case(dt, op, lengths[li], al, (int)li % 2);
    }
    chorus__kernel_set_stream_threshold(0);
}

/* The baseline loops (SSE2 on x86-64), which an AVX2 CPU would otherwise never run: two
 * and n sources, cached and streamed. */
static void test_baseline_loops(void **state)
{
    (void)state;
    chorus__kernel_force_baseline(1);
    for (chorus_dtype_t dt = CHORUS_INT8; dt < CHORUS_NUM_DTYPES; dt++) {
        check_reduce_dtype(dt);
        check_multi_dtype(dt);
    }
    chorus__kernel_set_stream_threshold(1);
    for (chorus_dtype_t dt = CHORUS_INT8; dt < CHORUS_NUM_DTYPES; dt++)
        check_multi_dtype(dt);
    chorus__kernel_set_stream_threshold(0);
    chorus__kernel_force_baseline(0);
}

/* NaN order across sources: MIN and MAX return the first NaN met, left to right, with its
 * payload (quieted for fp16 and bf16, which round through float after each step). */
static void test_multi_nan(void **state)
{
    (void)state;
    enum { N = 200, NSRC = 5 };
    float f[NSRC][N], out[N];
    uint16_t h[NSRC][N], hout[N];
    const void *fs[NSRC], *hs[NSRC];
    static const uint32_t fbits[NSRC] = {0x3f800000, 0x7fc00011, 0xbf800000, 0xffc00022,
                                         0x7f800000};
    static const uint16_t hbits[NSRC] = {0x3c00, 0x7c11, 0xbc00, 0xfe22, 0x7c00};

    for (int s = 0; s < NSRC; s++) {
        for (int i = 0; i < N; i++) {
            memcpy(&f[s][i], &fbits[s], 4);
            h[s][i] = hbits[s];
        }
        fs[s] = f[s];
        hs[s] = h[s];
    }
    for (chorus_op_t op = CHORUS_MIN; op <= CHORUS_MAX; op++) {
        uint32_t bits;
        assert_int_equal(chorus_kernel_reduce_multi(out, fs, NSRC, N, CHORUS_FLOAT32, op),
                         CHORUS_SUCCESS);
        for (int i = 0; i < N; i++) {
            memcpy(&bits, &out[i], 4);
            assert_int_equal(bits, 0x7fc00011);
        }
        /* Sources 2.. only: the first NaN is now source 3's. */
        assert_int_equal(chorus_kernel_reduce_multi(out, fs + 2, 3, N, CHORUS_FLOAT32, op),
                         CHORUS_SUCCESS);
        memcpy(&bits, &out[N - 1], 4);
        assert_int_equal(bits, 0xffc00022);
        /* fp16: the signalling NaN 0x7c11 comes out quiet, 0x7e11. */
        assert_int_equal(chorus_kernel_reduce_multi(hout, hs, NSRC, N, CHORUS_FLOAT16, op),
                         CHORUS_SUCCESS);
        for (int i = 0; i < N; i++)
            assert_int_equal(hout[i], 0x7e11);
    }
    /* A sum that meets a NaN stays NaN; one that meets inf and -inf becomes NaN. */
    fs[0] = f[0];
    fs[1] = f[4];
    fs[2] = f[2];
    for (int i = 0; i < N; i++)
        f[2][i] = -INFINITY;
    assert_int_equal(chorus_kernel_reduce_multi(out, fs, 3, N, CHORUS_FLOAT32, CHORUS_SUM),
                     CHORUS_SUCCESS);
    assert_true(isnan(out[0]) && isnan(out[N - 1]));
}

/* fp16 rounds after every step: 2048 + 1 + 1 is 2048 chained (each +1 ties to even), not
 * the 2050 that a float accumulator would give. */
static void test_multi_half_steps(void **state)
{
    (void)state;
    enum { N = 300 };
    uint16_t a[N], one[N], out[N];
    for (int i = 0; i < N; i++) {
        a[i] = 0x6800;
        one[i] = 0x3c00;
    }
    const void *src[3] = {a, one, one};
    assert_int_equal(chorus_kernel_reduce_multi(out, src, 3, N, CHORUS_FLOAT16, CHORUS_SUM),
                     CHORUS_SUCCESS);
    for (int i = 0; i < N; i++)
        assert_int_equal(out[i], 0x6800);
    /* Integers wrap at every step too, which is the same as wrapping once. */
    int8_t x[N], y[N], r[N];
    for (int i = 0; i < N; i++) {
        x[i] = 100;
        y[i] = 100;
    }
    const void *isrc[4] = {x, y, y, x};
    assert_int_equal(chorus_kernel_reduce_multi(r, isrc, 4, N, CHORUS_INT8, CHORUS_SUM),
                     CHORUS_SUCCESS);
    for (int i = 0; i < N; i++)
        assert_int_equal(r[i], (int8_t)(uint8_t)400);
}

static void test_multi_invalid(void **state)
{
    (void)state;
    float a[4] = {1, 2, 3, 4}, d[4] = {0};
    const void *src[2] = {a, a}, *nul[2] = {a, NULL};
    assert_int_equal(chorus_kernel_reduce_multi(d, src, 2, 4, CHORUS_FLOAT32, CHORUS_AVG),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_multi(d, src, 2, 4, CHORUS_NUM_DTYPES, CHORUS_SUM),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_multi(d, src, 0, 4, CHORUS_FLOAT32, CHORUS_SUM),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_multi(d, NULL, 2, 4, CHORUS_FLOAT32, CHORUS_SUM),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_multi(d, nul, 2, 4, CHORUS_FLOAT32, CHORUS_SUM),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_true(d[0] == 0 && d[3] == 0);
    assert_int_equal(chorus_kernel_reduce_multi(NULL, NULL, 3, 0, CHORUS_INT8, CHORUS_MAX),
                     CHORUS_SUCCESS);
}

/* ---- Hand-picked reduce cases ---- */

/* Reduces one pair (plus padding to exercise the vector path) and returns element 0. */
static void reduce_one(chorus_dtype_t dt, chorus_op_t op, const void *x, const void *y, void *out)
{
    size_t sz = chorus_dtype_size(dt), n = 300;
    unsigned char *a = calloc(n, sz), *b = calloc(n, sz), *d = calloc(n, sz);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) {
        memcpy(a + i * sz, x, sz);
        memcpy(b + i * sz, y, sz);
    }
    assert_int_equal(chorus_kernel_reduce(d, a, b, n, dt, op), CHORUS_SUCCESS);
    for (size_t i = 1; i < n; i++)
        assert_memory_equal(d + i * sz, d, sz);
    memcpy(out, d, sz);
    free(a);
    free(b);
    free(d);
}

static void test_integer_wraparound(void **state)
{
    (void)state;
    int8_t i8;
    reduce_one(CHORUS_INT8, CHORUS_SUM, &(int8_t){127}, &(int8_t){1}, &i8);
    assert_int_equal(i8, -128);
    reduce_one(CHORUS_INT8, CHORUS_SUM, &(int8_t){-128}, &(int8_t){-1}, &i8);
    assert_int_equal(i8, 127);
    reduce_one(CHORUS_INT8, CHORUS_PROD, &(int8_t){-128}, &(int8_t){-1}, &i8);
    assert_int_equal(i8, -128);
    reduce_one(CHORUS_INT8, CHORUS_PROD, &(int8_t){16}, &(int8_t){16}, &i8);
    assert_int_equal(i8, 0);
    uint8_t u8;
    reduce_one(CHORUS_UINT8, CHORUS_SUM, &(uint8_t){255}, &(uint8_t){1}, &u8);
    assert_int_equal(u8, 0);
    reduce_one(CHORUS_UINT8, CHORUS_PROD, &(uint8_t){255}, &(uint8_t){255}, &u8);
    assert_int_equal(u8, 1);
    int32_t i32;
    reduce_one(CHORUS_INT32, CHORUS_SUM, &(int32_t){INT32_MAX}, &(int32_t){1}, &i32);
    assert_int_equal(i32, INT32_MIN);
    reduce_one(CHORUS_INT32, CHORUS_PROD, &(int32_t){65536}, &(int32_t){-65536}, &i32);
    assert_int_equal(i32, 0);
    uint32_t u32;
    reduce_one(CHORUS_UINT32, CHORUS_PROD, &(uint32_t){UINT32_MAX}, &(uint32_t){UINT32_MAX}, &u32);
    assert_int_equal(u32, 1);
    int64_t i64;
    reduce_one(CHORUS_INT64, CHORUS_PROD, &(int64_t){INT64_MIN}, &(int64_t){-1}, &i64);
    assert_true(i64 == INT64_MIN);
    reduce_one(CHORUS_INT64, CHORUS_SUM, &(int64_t){INT64_MAX}, &(int64_t){INT64_MAX}, &i64);
    assert_true(i64 == -2);
    reduce_one(CHORUS_INT64, CHORUS_MIN, &(int64_t){INT64_MIN}, &(int64_t){INT64_MAX}, &i64);
    assert_true(i64 == INT64_MIN);
    uint64_t u64;
    reduce_one(CHORUS_UINT64, CHORUS_PROD, &(uint64_t){UINT64_MAX}, &(uint64_t){2}, &u64);
    assert_true(u64 == UINT64_MAX - 1);
    reduce_one(CHORUS_UINT64, CHORUS_SUM, &(uint64_t){UINT64_MAX}, &(uint64_t){UINT64_MAX}, &u64);
    assert_true(u64 == UINT64_MAX - 1);
    reduce_one(CHORUS_UINT64, CHORUS_MAX, &(uint64_t){UINT64_MAX}, &(uint64_t){1}, &u64);
    assert_true(u64 == UINT64_MAX);
}

static void expect_f32_bits(chorus_op_t op, uint32_t x, uint32_t y, uint32_t want)
{
    float fx, fy, got;
    uint32_t gbits;
    memcpy(&fx, &x, 4);
    memcpy(&fy, &y, 4);
    reduce_one(CHORUS_FLOAT32, op, &fx, &fy, &got);
    memcpy(&gbits, &got, 4);
    if (gbits != want) {
        print_error("float32 %s(0x%08x, 0x%08x) = 0x%08x, want 0x%08x\n", chorus_op_name(op), x, y,
                    gbits, want);
        fail();
    }
}

static void test_float_specials(void **state)
{
    (void)state;
    /* NaN propagation: a's NaN wins when both are NaN (payloads tell them apart). */
    expect_f32_bits(CHORUS_MIN, 0x7fc00001, 0x3f800000, 0x7fc00001);
    expect_f32_bits(CHORUS_MIN, 0x3f800000, 0x7fc00002, 0x7fc00002);
    expect_f32_bits(CHORUS_MAX, 0x7fc00001, 0x7fc00002, 0x7fc00001);
    expect_f32_bits(CHORUS_MIN, 0xffc00003, 0x7fc00002, 0xffc00003);
    expect_f32_bits(CHORUS_MAX, 0xff800000, 0x7fc00002, 0x7fc00002);
    expect_f32_bits(CHORUS_MIN, 0xff800000, 0x7f800000, 0xff800000);
    expect_f32_bits(CHORUS_MAX, 0xff800000, 0x7f800000, 0x7f800000);
    /* Signed zeros: equal values give a. */
    expect_f32_bits(CHORUS_MIN, 0x80000000, 0x00000000, 0x80000000);
    expect_f32_bits(CHORUS_MIN, 0x00000000, 0x80000000, 0x00000000);
    expect_f32_bits(CHORUS_SUM, 0x80000000, 0x80000000, 0x80000000);
    expect_f32_bits(CHORUS_SUM, 0x80000000, 0x00000000, 0x00000000);
    /* Infinities and denormals stay exact (no flush to zero). */
    float inf = INFINITY, ninf = -INFINITY, r;
    reduce_one(CHORUS_FLOAT32, CHORUS_SUM, &inf, &ninf, &r); /* the NaN's sign is the CPU's */
    assert_true(isnan(r));
    expect_f32_bits(CHORUS_SUM, 0x00000001, 0x00000001, 0x00000002);
    expect_f32_bits(CHORUS_SUM, 0x007fffff, 0x00000001, 0x00800000);
    expect_f32_bits(CHORUS_PROD, 0x00800000, 0x3f000000, 0x00400000);
    expect_f32_bits(CHORUS_SUM, 0x7f7fffff, 0x7f7fffff, 0x7f800000);

    double d;
    reduce_one(CHORUS_FLOAT64, CHORUS_SUM, &(double){4.9406564584124654e-324},
               &(double){4.9406564584124654e-324}, &d);
    assert_true(d == 2 * 4.9406564584124654e-324);
    reduce_one(CHORUS_FLOAT64, CHORUS_PROD, &(double){-0.0}, &(double){5.0}, &d);
    assert_true(d == 0.0 && signbit(d));
    reduce_one(CHORUS_FLOAT64, CHORUS_MAX, &(double){NAN}, &(double){INFINITY}, &d);
    assert_true(isnan(d));
}

static void expect_h16(chorus_dtype_t dt, chorus_op_t op, uint16_t x, uint16_t y, uint16_t want)
{
    uint16_t got;
    reduce_one(dt, op, &x, &y, &got);
    if (got != want) {
        print_error("%s %s(0x%04x, 0x%04x) = 0x%04x, want 0x%04x\n", chorus_dtype_name(dt),
                    chorus_op_name(op), x, y, got, want);
        fail();
    }
}

static void test_half_reduce_rounding(void **state)
{
    (void)state;
    /* fp16: 2048 + 1 = 2049 is halfway between 2048 and 2050: even mantissa wins. */
    expect_h16(CHORUS_FLOAT16, CHORUS_SUM, 0x6800, 0x3c00, 0x6800);
    expect_h16(CHORUS_FLOAT16, CHORUS_SUM, 0x6801, 0x3c00, 0x6802); /* 2051 -> 2052 */
    expect_h16(CHORUS_FLOAT16, CHORUS_SUM, 0x7bff, 0x4800, 0x7bff); /* 65504 + 8 */
    expect_h16(CHORUS_FLOAT16, CHORUS_SUM, 0x7bff, 0x4c00, 0x7c00); /* 65504 + 16 -> inf */
    expect_h16(CHORUS_FLOAT16, CHORUS_PROD, 0x7bff, 0x4000, 0x7c00);
    expect_h16(CHORUS_FLOAT16, CHORUS_PROD, 0xfbff, 0x4000, 0xfc00);
    expect_h16(CHORUS_FLOAT16, CHORUS_SUM, 0x0001, 0x0001, 0x0002); /* subnormals */
    expect_h16(CHORUS_FLOAT16, CHORUS_SUM, 0x03ff, 0x0001, 0x0400);
    expect_h16(CHORUS_FLOAT16, CHORUS_PROD, 0x0001, 0x3800, 0x0000); /* 2^-25: tie to 0 */
    expect_h16(CHORUS_FLOAT16, CHORUS_PROD, 0x0003, 0x3800, 0x0002); /* 1.5 -> 2 */
    expect_h16(CHORUS_FLOAT16, CHORUS_PROD, 0x8001, 0x3800, 0x8000);
    uint16_t h, inf = 0x7c00, ninf = 0xfc00;
    reduce_one(CHORUS_FLOAT16, CHORUS_SUM, &inf, &ninf, &h); /* inf - inf is NaN */
    assert_true((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0);
    expect_h16(CHORUS_FLOAT16, CHORUS_MIN, 0x7e01, 0x7e02, 0x7e01);
    expect_h16(CHORUS_FLOAT16, CHORUS_MAX, 0x3c00, 0x7e02, 0x7e02);
    expect_h16(CHORUS_FLOAT16, CHORUS_MIN, 0x8000, 0x0000, 0x8000);
    /* bf16: 256 + 1 is halfway between 256 and 258. */
    expect_h16(CHORUS_BFLOAT16, CHORUS_SUM, 0x4380, 0x3f80, 0x4380);
    expect_h16(CHORUS_BFLOAT16, CHORUS_SUM, 0x4381, 0x3f80, 0x4382);
    expect_h16(CHORUS_BFLOAT16, CHORUS_SUM, 0x7f7f, 0x7f7f, 0x7f80);
    expect_h16(CHORUS_BFLOAT16, CHORUS_PROD, 0xff7f, 0x4000, 0xff80);
    expect_h16(CHORUS_BFLOAT16, CHORUS_SUM, 0x0001, 0x0001, 0x0002);
    expect_h16(CHORUS_BFLOAT16, CHORUS_MIN, 0x7fc1, 0x7fc2, 0x7fc1);
}

/* ---- Conversions ---- */

static void expect_conv16(chorus_dtype_t dt, float f, uint16_t want)
{
    uint16_t got = dt == CHORUS_FLOAT16 ? chorus_float_to_half(f) : chorus_float_to_bf16(f);
    if (got != want) {
        print_error("%s(%a) = 0x%04x, want 0x%04x\n", chorus_dtype_name(dt), (double)f, got, want);
        fail();
    }
}

/* Every 16-bit pattern widens to the exact value and rounds back to itself; the midpoint
 * between neighbours rounds to the even one, and a float either side of it to the nearer. */
static void check_conversions_exhaustive(chorus_dtype_t dt)
{
    ref_fmt_t fmt = dt == CHORUS_FLOAT16 ? FMT_HALF : FMT_BF16;
    uint16_t inf = dt == CHORUS_FLOAT16 ? 0x7c00 : 0x7f80;
    for (uint32_t v = 0; v <= 0xffff; v++) {
        uint16_t h = (uint16_t)v;
        float f = dt == CHORUS_FLOAT16 ? chorus_half_to_float(h) : chorus_bf16_to_float(h);
        double want = ref_decode(fmt, h);
        if (isnan(want)) {
            assert_true(isnan(f));
            uint16_t back =
                dt == CHORUS_FLOAT16 ? chorus_float_to_half(f) : chorus_float_to_bf16(f);
            assert_true((back & inf) == inf && (back & ~(inf | 0x8000)) != 0);
            assert_int_equal(back & 0x8000, h & 0x8000);
            continue;
        }
        if ((double)f != want || !signbit(f) != !signbit(want)) {
            print_error("%s 0x%04x widened to %a, want %a\n", chorus_dtype_name(dt), h, (double)f,
                        want);
            fail();
        }
        expect_conv16(dt, f, h);
        if ((h & 0x7fff) >= inf - 1) continue; /* no finite upper neighbour */
        double next = ref_decode(fmt, (uint16_t)(h + 1));
        double mid = (want + next) / 2; /* exact in float for both formats */
        float fm = (float)mid;
        assert_true((double)fm == mid);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
        expect_conv16(dt, fm, even);
        expect_conv16(dt, nextafterf(fm, 0.0f), h);
        expect_conv16(dt, nextafterf(fm, (float)next * 2), (uint16_t)(h + 1));
    }
}

static void test_half_conversions(void **state)
{
    (void)state;
    check_conversions_exhaustive(CHORUS_FLOAT16);
    /* Overflow and underflow at the ends of the fp16 range. */
    expect_conv16(CHORUS_FLOAT16, 65504.0f, 0x7bff);
    expect_conv16(CHORUS_FLOAT16, nextafterf(65520.0f, 0.0f), 0x7bff);
    expect_conv16(CHORUS_FLOAT16, 65520.0f, 0x7c00);
    expect_conv16(CHORUS_FLOAT16, -65520.0f, 0xfc00);
    expect_conv16(CHORUS_FLOAT16, 1e10f, 0x7c00);
    expect_conv16(CHORUS_FLOAT16, FLT_MAX, 0x7c00);
    expect_conv16(CHORUS_FLOAT16, INFINITY, 0x7c00);
    expect_conv16(CHORUS_FLOAT16, -INFINITY, 0xfc00);
    expect_conv16(CHORUS_FLOAT16, 0x1p-25f, 0x0000);
    expect_conv16(CHORUS_FLOAT16, -0x1p-25f, 0x8000);
    expect_conv16(CHORUS_FLOAT16, nextafterf(0x1p-25f, 1.0f), 0x0001);
    expect_conv16(CHORUS_FLOAT16, 0x1p-149f, 0x0000); /* float denormal */
    expect_conv16(CHORUS_FLOAT16, -0.0f, 0x8000);
    expect_conv16(CHORUS_FLOAT16, nextafterf(0x1p-14f, 0.0f), 0x0400);
    assert_true(isnan(chorus_half_to_float(0x7c01)));
    /* A NaN whose payload lives only in the low 13 bits must not become infinity. */
    uint32_t low_nan = 0x7f800001;
    float fn;
    memcpy(&fn, &low_nan, 4);
    assert_int_equal(chorus_float_to_half(fn), 0x7e00);
    assert_int_equal(chorus_float_to_half(-NAN) & 0xfe00, 0xfe00);
}

static void test_bf16_conversions(void **state)
{
    (void)state;
    check_conversions_exhaustive(CHORUS_BFLOAT16);
    expect_conv16(CHORUS_BFLOAT16, FLT_MAX, 0x7f80);
    expect_conv16(CHORUS_BFLOAT16, -FLT_MAX, 0xff80);
    uint32_t below = 0x7f7f7fff;
    float fb;
    memcpy(&fb, &below, 4);
    expect_conv16(CHORUS_BFLOAT16, fb, 0x7f7f);
    expect_conv16(CHORUS_BFLOAT16, 0x1p-149f, 0x0000);
    expect_conv16(CHORUS_BFLOAT16, -0x1p-149f, 0x8000);
    expect_conv16(CHORUS_BFLOAT16, 0x1p-133f, 0x0001);
    expect_conv16(CHORUS_BFLOAT16, 0x1p-134f, 0x0000);
    expect_conv16(CHORUS_BFLOAT16, 0x3p-134f, 0x0002);
    /* A NaN whose payload lives only in the low 16 bits must not become infinity. */
    uint32_t low_nan = 0x7f800001;
    memcpy(&fb, &low_nan, 4);
    assert_int_equal(chorus_float_to_bf16(fb), 0x7fc0);
}

/* Random float bit patterns against the reference rounding. */
static void test_conversions_random(void **state)
{
    (void)state;
    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = (uint32_t)rng();
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f)) continue;
        expect_conv16(CHORUS_FLOAT16, f, ref_encode(FMT_HALF, f));
        expect_conv16(CHORUS_BFLOAT16, f, ref_encode(FMT_BF16, f));
    }
}

/* ---- Divide ---- */

static void test_divide_integers(void **state)
{
    (void)state;
    int32_t v32[] = {-7, 7, -8, INT32_MIN, INT32_MAX, 0, -1, 1};
    const int32_t w32[] = {-3, 3, -4, -1073741824, 1073741823, 0, 0, 0};
    assert_int_equal(chorus_kernel_divide(v32, 8, CHORUS_INT32, 2), CHORUS_SUCCESS);
    assert_memory_equal(v32, w32, sizeof(w32));

    int32_t m32[] = {INT32_MIN, INT32_MAX, INT32_MIN + 1, -5};
    const int32_t wm32[] = {-1, 0, 0, 0};
    assert_int_equal(chorus_kernel_divide(m32, 4, CHORUS_INT32, 2147483648u), CHORUS_SUCCESS);
    assert_memory_equal(m32, wm32, sizeof(wm32));

    int8_t v8[] = {-128, 127, -127, -3, 3};
    const int8_t w8[] = {-1, 0, 0, 0, 0};
    assert_int_equal(chorus_kernel_divide(v8, 5, CHORUS_INT8, 128), CHORUS_SUCCESS);
    assert_memory_equal(v8, w8, sizeof(w8));
    int8_t x8[] = {-128, 127, -128};
    const int8_t wx8[] = {0, 0, -128};
    assert_int_equal(chorus_kernel_divide(x8, 2, CHORUS_INT8, 129), CHORUS_SUCCESS);
    assert_int_equal(chorus_kernel_divide(x8 + 2, 1, CHORUS_INT8, 1), CHORUS_SUCCESS);
    assert_memory_equal(x8, wx8, sizeof(wx8));

    int64_t v64[] = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MAX, -9};
    assert_int_equal(chorus_kernel_divide(v64, 1, CHORUS_INT64, 1), CHORUS_SUCCESS);
    assert_int_equal(chorus_kernel_divide(v64 + 1, 1, CHORUS_INT64, 1ull << 63), CHORUS_SUCCESS);
    assert_int_equal(chorus_kernel_divide(v64 + 2, 3, CHORUS_INT64, UINT64_MAX), CHORUS_SUCCESS);
    assert_true(v64[0] == INT64_MIN && v64[1] == -1 && v64[2] == 0 && v64[3] == 0 && v64[4] == 0);
    int64_t s64[] = {-9, 9, INT64_MIN};
    assert_int_equal(chorus_kernel_divide(s64, 3, CHORUS_INT64, 4), CHORUS_SUCCESS);
    assert_true(s64[0] == -2 && s64[1] == 2 && s64[2] == INT64_MIN / 4);

    uint64_t u64[] = {UINT64_MAX, 5, 0};
    assert_int_equal(chorus_kernel_divide(u64, 3, CHORUS_UINT64, 3), CHORUS_SUCCESS);
    assert_true(u64[0] == UINT64_MAX / 3 && u64[1] == 1 && u64[2] == 0);
    uint8_t u8[] = {255, 254};
    assert_int_equal(chorus_kernel_divide(u8, 2, CHORUS_UINT8, 1000), CHORUS_SUCCESS);
    assert_true(u8[0] == 0 && u8[1] == 0);
    uint32_t u32[] = {UINT32_MAX, 7};
    assert_int_equal(chorus_kernel_divide(u32, 2, CHORUS_UINT32, 7), CHORUS_SUCCESS);
    assert_true(u32[0] == UINT32_MAX / 7 && u32[1] == 1);
}

/* Reference quotient of one element, truncating toward zero for integers. */
static void ref_divide(chorus_dtype_t dt, const void *in, void *out, uint64_t dv)
{
    int64_t s;
    uint64_t u, mag;
    switch (dt) {
    case CHORUS_INT8: s = *(const int8_t *)in; break;
    case CHORUS_INT32: s = *(const int32_t *)in; break;
    case CHORUS_INT64: s = *(const int64_t *)in; break;
    case CHORUS_UINT8: u = *(const uint8_t *)in; goto unsigned_div;
    case CHORUS_UINT32: u = *(const uint32_t *)in; goto unsigned_div;
    case CHORUS_UINT64: u = *(const uint64_t *)in; goto unsigned_div;
    case CHORUS_FLOAT16:
    case CHORUS_BFLOAT16: {
        ref_fmt_t f = dt == CHORUS_FLOAT16 ? FMT_HALF : FMT_BF16;
        *(uint16_t *)out = ref_encode(f, ref_decode(f, *(const uint16_t *)in) / (double)dv);
        return;
    }
    case CHORUS_FLOAT32: *(float *)out = (float)(*(const float *)in / (double)dv); return;
    case CHORUS_FLOAT64: *(double *)out = *(const double *)in / (double)dv; return;
    default: fail(); return;
    }
    /* Signed: divide the magnitude, then put the sign back. */
    mag = s < 0 ? 0 - (uint64_t)s : (uint64_t)s;
    mag /= dv;
    u = s < 0 ? 0 - mag : mag;
    memcpy(out, &u, chorus_dtype_size(dt)); /* little-endian: the low bytes */
    return;
unsigned_div:
    u /= dv;
    memcpy(out, &u, chorus_dtype_size(dt));
}

static void test_divide_random(void **state)
{
    (void)state;
    /* fp16 and bf16 divide through float, which rounds twice; that is still exact for
     * divisors below 2^12 (fp16) and 2^15 (bf16), so the large divisor is only used for
     * the other types. */
    static const uint64_t divisors[] = {1, 2, 3, 7, 8, 100, 2047, 4095, 1000003};
    for (chorus_dtype_t dt = CHORUS_INT8; dt < CHORUS_NUM_DTYPES; dt++) {
        size_t sz = chorus_dtype_size(dt);
        for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++) {
            for (size_t di = 0; di < sizeof(divisors) / sizeof(divisors[0]); di++) {
                size_t n = lengths[li];
                if (sz == 2 && divisors[di] >= 4096) continue;
                unsigned char *m = alloc64((n + 2) * sz), *want = alloc64(n * sz);
                unsigned char *copy = alloc64(n * sz);
                unsigned char *buf = m + sz; /* off the 64-byte boundary */
                fill_random(dt, buf, n + 1);
                for (size_t i = 0; i < n; i++)
                    ref_divide(dt, buf + i * sz, want + i * sz, divisors[di]);
                unsigned char guard[8];
                memcpy(guard, buf + n * sz, sz);
                memcpy(copy, buf, n * sz);
                assert_int_equal(chorus_kernel_divide(buf, n, dt, divisors[di]), CHORUS_SUCCESS);
                char ctx[64];
                snprintf(ctx, sizeof(ctx), "divide n=%zu by %llu", n,
                         (unsigned long long)divisors[di]);
                expect_same(dt, buf, want, n, copy, NULL, ctx);
                assert_memory_equal(buf + n * sz, guard, sz);
                free(copy);
                free(m);
                free(want);
            }
        }
    }
}

static void test_divide_floats(void **state)
{
    (void)state;
    float f[] = {1.0f, -3.0f, 0x1p-149f, INFINITY, -0.0f};
    assert_int_equal(chorus_kernel_divide(f, 5, CHORUS_FLOAT32, 2), CHORUS_SUCCESS);
    assert_true(f[0] == 0.5f && f[1] == -1.5f && f[2] == 0.0f && f[3] == INFINITY);
    assert_true(f[4] == 0.0f && signbit(f[4]));
    uint16_t h[] = {0x3c00, 0x0001, 0x0003, 0x7bff, 0xfc00};
    assert_int_equal(chorus_kernel_divide(h, 5, CHORUS_FLOAT16, 2), CHORUS_SUCCESS);
    /* 1/2; 2^-25 ties to 0; 3 * 2^-25 ties to 2 * 2^-24; 65504/2; -inf. */
    assert_int_equal(h[0], 0x3800);
    assert_int_equal(h[1], 0x0000);
    assert_int_equal(h[2], 0x0002);
    assert_int_equal(h[3], 0x77ff);
    assert_int_equal(h[4], 0xfc00);
    uint16_t b[] = {0x3f80, 0x4040};
    assert_int_equal(chorus_kernel_divide(b, 2, CHORUS_BFLOAT16, 3), CHORUS_SUCCESS);
    assert_int_equal(b[0], 0x3eab); /* 1/3 = 0x3eaaaaab in float, rounds up */
    assert_int_equal(b[1], 0x3f80);
}

/* ---- Errors, copy, names ---- */

static void test_invalid_arguments(void **state)
{
    (void)state;
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, d[4] = {0};
    assert_int_equal(chorus_kernel_reduce(d, a, b, 4, CHORUS_FLOAT32, CHORUS_AVG),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce(d, a, b, 4, CHORUS_FLOAT32, (chorus_op_t)99),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce(d, a, b, 4, (chorus_dtype_t)99, CHORUS_SUM),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce(d, a, b, 4, (chorus_dtype_t)-1, CHORUS_SUM),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce(d, a, b, 4, CHORUS_NUM_DTYPES, CHORUS_SUM),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_true(d[0] == 0 && d[3] == 0);
    assert_null(chorus_kernel_reduce_fn(CHORUS_FLOAT32, CHORUS_AVG));
    assert_null(chorus_kernel_reduce_fn(CHORUS_NUM_DTYPES, CHORUS_SUM));
    assert_null(chorus_kernel_reduce_fn(CHORUS_INT8, (chorus_op_t)-1));
    for (chorus_dtype_t dt = CHORUS_INT8; dt < CHORUS_NUM_DTYPES; dt++)
        for (chorus_op_t op = CHORUS_SUM; op < CHORUS_AVG; op++)
            assert_non_null(chorus_kernel_reduce_fn(dt, op));
    /* A count of 0 touches nothing, so NULL buffers are fine. */
    assert_int_equal(chorus_kernel_reduce(NULL, NULL, NULL, 0, CHORUS_INT64, CHORUS_PROD),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus_kernel_divide(NULL, 0, CHORUS_FLOAT16, 3), CHORUS_SUCCESS);
    assert_int_equal(chorus_kernel_divide(a, 4, CHORUS_FLOAT32, 0), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_divide(a, 4, (chorus_dtype_t)10, 2),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_true(a[0] == 1 && a[3] == 4);
}

static void test_copy(void **state)
{
    (void)state;
    unsigned char buf[64], want[64];
    for (int i = 0; i < 64; i++)
        buf[i] = (unsigned char)i;
    chorus_kernel_copy(buf + 3, buf, 40); /* overlapping, forward */
    for (int i = 0; i < 64; i++)
        want[i] = (unsigned char)(i < 3 ? i : i < 43 ? i - 3 : i);
    assert_memory_equal(buf, want, 64);
    for (int i = 0; i < 64; i++)
        buf[i] = (unsigned char)i;
    chorus_kernel_copy(buf, buf + 5, 50); /* overlapping, backward */
    for (int i = 0; i < 64; i++)
        want[i] = (unsigned char)(i < 50 ? i + 5 : i);
    assert_memory_equal(buf, want, 64);
    chorus_kernel_copy(buf, buf, 64);
    assert_memory_equal(buf, want, 64);
    chorus_kernel_copy(NULL, NULL, 0);
    chorus_kernel_copy(buf, NULL, 0);
    assert_memory_equal(buf, want, 64);
    unsigned char other[64];
    chorus_kernel_copy(other, buf, 64);
    assert_memory_equal(other, want, 64);
}

static void test_dtype_names(void **state)
{
    (void)state;
    static const struct {
        chorus_dtype_t dt;
        size_t size;
        const char *name;
    } want[] = {
        {CHORUS_INT8, 1, "int8"},       {CHORUS_UINT8, 1, "uint8"},
        {CHORUS_INT32, 4, "int32"},     {CHORUS_UINT32, 4, "uint32"},
        {CHORUS_INT64, 8, "int64"},     {CHORUS_UINT64, 8, "uint64"},
        {CHORUS_FLOAT16, 2, "float16"}, {CHORUS_BFLOAT16, 2, "bfloat16"},
        {CHORUS_FLOAT32, 4, "float32"}, {CHORUS_FLOAT64, 8, "float64"},
    };
    assert_int_equal(sizeof(want) / sizeof(want[0]), CHORUS_NUM_DTYPES);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_int_equal(chorus_dtype_size(want[i].dt), want[i].size);
        assert_string_equal(chorus_dtype_name(want[i].dt), want[i].name);
    }
    assert_int_equal(chorus_dtype_size(CHORUS_NUM_DTYPES), 0);
    assert_int_equal(chorus_dtype_size((chorus_dtype_t)-1), 0);
    assert_null(chorus_dtype_name(CHORUS_NUM_DTYPES));
    assert_null(chorus_dtype_name((chorus_dtype_t)-1));
    assert_string_equal(chorus_op_name(CHORUS_SUM), "sum");
    assert_string_equal(chorus_op_name(CHORUS_PROD), "prod");
    assert_string_equal(chorus_op_name(CHORUS_MIN), "min");
    assert_string_equal(chorus_op_name(CHORUS_MAX), "max");
    assert_string_equal(chorus_op_name(CHORUS_AVG), "avg");
    assert_null(chorus_op_name(CHORUS_NUM_OPS));
    assert_null(chorus_op_name((chorus_op_t)-1));
}

/* The streaming copy gives memcpy's bytes at every length and alignment, on both the
 * cached and the non-temporal path, and touches nothing outside the destination. */
static void test_copy_stream(void **state)
{
    enum { N = 4096 + 64 };
    static unsigned char src[N], dst[N + 64], want[N + 64];
    static const size_t lens[] = {0, 1, 15, 16, 255, 256, 257, 1000, 4095, 4096};
    (void)state;

    for (size_t i = 0; i < N; i++) src[i] = (unsigned char)(i * 131u + 7u);
    for (int forced = 0; forced < 2; forced++) {
        chorus__kernel_set_stream_threshold(forced ? 1 : 0);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (size_t so = 0; so < 3; so++)
                for (size_t d_off = 0; d_off < 19; d_off += 3) {
                    memset(dst, 0xa5, sizeof dst);
                    memset(want, 0xa5, sizeof want);
                    memcpy(want + d_off, src + so, lens[li]);
                    chorus_kernel_copy_stream(dst + d_off, src + so, lens[li],
                                              forced ? (size_t)1 << 40 : 0);
                    assert_memory_equal(dst, want, sizeof dst);
                }
    }
    chorus__kernel_set_stream_threshold(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_names),        cmocka_unit_test(test_reduce_int8),
        cmocka_unit_test(test_reduce_uint8),       cmocka_unit_test(test_reduce_int32),
        cmocka_unit_test(test_reduce_uint32),      cmocka_unit_test(test_reduce_int64),
        cmocka_unit_test(test_reduce_uint64),      cmocka_unit_test(test_reduce_float16),
        cmocka_unit_test(test_reduce_bfloat16),    cmocka_unit_test(test_reduce_float32),
        cmocka_unit_test(test_reduce_float64),     cmocka_unit_test(test_integer_wraparound),
        cmocka_unit_test(test_float_specials),     cmocka_unit_test(test_half_reduce_rounding),
        cmocka_unit_test(test_half_conversions),   cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_conversions_random), cmocka_unit_test(test_divide_integers),
        cmocka_unit_test(test_divide_random),      cmocka_unit_test(test_divide_floats),
        cmocka_unit_test(test_invalid_arguments),  cmocka_unit_test(test_copy),
        cmocka_unit_test(test_multi_all_dtypes),   cmocka_unit_test(test_multi_streamed),
        cmocka_unit_test(test_multi_nan),          cmocka_unit_test(test_multi_half_steps),
        cmocka_unit_test(test_multi_invalid),      cmocka_unit_test(test_baseline_loops),
        cmocka_unit_test(test_copy_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
