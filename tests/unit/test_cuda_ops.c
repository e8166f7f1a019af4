/*
 * The element operations of the CUDA kernels (kernels/reduce_cuda_ops.h), compiled here
 * with cc, against the CPU kernels (kernels.h): the device runs this same code, so with no
 * GPU this is where its arithmetic is tested (tests/gpu/kernel_bench.c checks the kernels
 * themselves where a GPU exists).
 *
 * Each check applies the op element by element and compares the bytes with
 * chorus_kernel_reduce, chorus_kernel_reduce_multi or chorus_kernel_divide on the same
 * inputs. MIN and MAX select an operand, so their NaNs must be the same bytes too; for SUM,
 * PROD and division a NaN only has to be a NaN (the GPU's arithmetic makes a canonical
 * NaN, the CPU's keeps a payload). Everything else is compared exactly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels.h"
#include "reduce_cuda_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_RANDOM 4096
/* fp16/bf16: every value of the first operand against this many second operands (the
 * edge values, then random ones). */
#define N_SWEEP_B 96

/* ---- Deterministic random numbers ---- */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* ---- The device ops as loops over arrays, indexed like the CPU tables ---- */

#define DEF_APPLY(name, T, op)                                                                     \
    static void cu_##name##_##op(void *d, const void *a, const void *b, size_t n)                  \
    {                                                                                              \
        T *dd = d;                                                                                 \
        const T *aa = a, *bb = b;                                                                  \
        for (size_t i = 0; i < n; i++)                                                             \
            dd[i] = chorus__cu_##name##_##op(aa[i], bb[i]);                                        \
    }
#define DEF_DIV(name, T)                                                                           \
    static void cu_##name##_div(void *buf, size_t n, uint64_t d)                                   \
    {                                                                                              \
        T *p = buf;                                                                                \
        for (size_t i = 0; i < n; i++)                                                             \
            p[i] = chorus__cu_##name##_div(p[i], d);                                               \
    }
#define DEF_TYPE(name, T)                                                                          \
    DEF_APPLY(name, T, sum)                                                                        \
    DEF_APPLY(name, T, prod)                                                                       \
    DEF_APPLY(name, T, min)                                                                        \
    DEF_APPLY(name, T, max)                                                                        \
    DEF_DIV(name, T)

#define TYPES(X)                                                                                   \
    X(CHORUS_INT8, int8, int8_t)                                                                   \
    X(CHORUS_UINT8, uint8, uint8_t)                                                                \
    X(CHORUS_INT32, int32, int32_t)                                                                \
    X(CHORUS_UINT32, uint32, uint32_t)                                                             \
    X(CHORUS_INT64, int64, int64_t)                                                                \
    X(CHORUS_UINT64, uint64, uint64_t)                                                             \
    X(CHORUS_FLOAT16, float16, uint16_t)                                                           \
    X(CHORUS_BFLOAT16, bfloat16, uint16_t)                                                         \
    X(CHORUS_FLOAT32, float32, float)                                                              \
    X(CHORUS_FLOAT64, float64, double)

#define X_DEF(e, name, T) DEF_TYPE(name, T)
TYPES(X_DEF)
#undef X_DEF

typedef void (*div_fn_t)(void *buf, size_t n, uint64_t d);

#define X_ROW(e, name, T)                                                                          \
    [e] = {cu_##name##_sum, cu_##name##_prod, cu_##name##_min, cu_##name##_max},
static const chorus_reduce_fn_t cu_table[CHORUS_NUM_DTYPES][CHORUS_AVG] = {TYPES(X_ROW)};
#undef X_ROW
#define X_DROW(e, name, T) [e] = cu_##name##_div,
static const div_fn_t cu_div_table[CHORUS_NUM_DTYPES] = {TYPES(X_DROW)};
#undef X_DROW

/* ---- Values ---- */

/* Edge values as bit patterns (little-endian bytes of the element). */
static const uint64_t edges_i8[] = {0, 1, 0xff, 0x7f, 0x80, 0x7e, 0x81, 2, 0x10, 0xf0};
static const uint64_t edges_i32[] = {0,          1,          0xffffffff, 0x7fffffff, 0x80000000,
                                     0x7ffffffe, 0x80000001, 0x10000,    46341,      0xffff0000};
static const uint64_t edges_i64[] = {0,
                                     1,
                                     UINT64_MAX,
                                     0x7fffffffffffffffull,
                                     0x8000000000000000ull,
                                     0x8000000000000001ull,
                                     0x100000000ull,
                                     3037000500ull,
                                     0xffffffff00000000ull};
static const uint64_t edges_f16[] = {0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00,
                                     0x7c01, 0xfe01, 0x7dff, 0x7bff, 0xfbff, 0x0001, 0x8001,
                                     0x03ff, 0x0400, 0x3800, 0x4000, 0x5bff, 0x0200};
static const uint64_t edges_bf16[] = {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0,
                                      0x7f81, 0xffc1, 0x7fbf, 0x7f7f, 0xff7f, 0x0001, 0x8001,
                                      0x007f, 0x0080, 0x3f00, 0x4000, 0x3f81, 0x0040};
static const uint64_t edges_f32[] = {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000,
                                     0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x7fbfffff,
                                     0x7f7fffff, 0xff7fffff, 0x00800000, 0x00000001, 0x807fffff,
                                     0x477fe000, 0x477ff000, 0x33800000, 0x4b800000, 0x3f800001};
static const uint64_t edges_f64[] = {
    0x0000000000000000ull, 0x8000000000000000ull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
    0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull, 0xfff8000000000001ull,
    0x7ff0000000000001ull, 0x7fefffffffffffffull, 0xffefffffffffffffull, 0x0010000000000000ull,
    0x0000000000000001ull, 0x800fffffffffffffull, 0x3ff0000000000001ull, 0x4340000000000000ull};

static const uint64_t *edges_of(chorus_dtype_t dt, size_t *n)
{
#define E(a)                                                                                       \
    do {                                                                                           \
        *n = sizeof(a) / sizeof(a[0]);                                                             \
        return a;                                                                                  \
    } while (0)
    switch (dt) {
    case CHORUS_INT8:
    case CHORUS_UINT8: E(edges_i8);
    case CHORUS_INT32:
    case CHORUS_UINT32: E(edges_i32);
    case CHORUS_INT64:
    case CHORUS_UINT64: E(edges_i64);
    case CHORUS_FLOAT16: E(edges_f16);
    case CHORUS_BFLOAT16: E(edges_bf16);
    case CHORUS_FLOAT32: E(edges_f32);
    default: E(edges_f64);
    }
#undef E
}

/* A small number: sums and products of these stay in range, so the rounding paths (not
 * just overflow to infinity) are exercised. */
static void small_value(chorus_dtype_t dt, void *p)
{
    double v = (double)((int)(rng() % 2001) - 1000) / (double)(1 + rng() % 64);
    float f = (float)v;
    uint16_t h;

    switch (dt) {
    case CHORUS_FLOAT16:
        h = chorus_float_to_half(f);
        memcpy(p, &h, 2);
        break;
    case CHORUS_BFLOAT16:
        h = chorus_float_to_bf16(f);
        memcpy(p, &h, 2);
        break;
    case CHORUS_FLOAT32: memcpy(p, &f, 4); break;
    case CHORUS_FLOAT64: memcpy(p, &v, 8); break;
    default: {
        uint64_t u = rng() % 7 == 0 ? rng() : (uint64_t)(int64_t)(v * 4);
        memcpy(p, &u, chorus_dtype_size(dt)); /* little-endian: the low bytes */
        break;
    }
    }
}

/* Random elements: a quarter edge values, a quarter small numbers, half random bits. */
static void fill(chorus_dtype_t dt, void *buf, size_t n)
{
    size_t es = chorus_dtype_size(dt), ne;
    const uint64_t *edges = edges_of(dt, &ne);
    unsigned char *b = buf;

    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng(), kind = r & 3;
        if (kind == 0) r = edges[(r >> 8) % ne];
        if (kind == 1)
            small_value(dt, b + i * es);
        else
            memcpy(b + i * es, &r, es);
    }
}

static int is_nan(chorus_dtype_t dt, const unsigned char *p)
{
    uint16_t h;
    uint32_t u;
    uint64_t v;

    switch (dt) {
    case CHORUS_FLOAT16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00;
    case CHORUS_BFLOAT16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80;
    case CHORUS_FLOAT32: memcpy(&u, p, 4); return (u & 0x7fffffffu) > 0x7f800000u;
    case CHORUS_FLOAT64:
        memcpy(&v, p, 8);
        return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return 0;
    }
}

/* Asserts got == want element by element; NaN matches any NaN when nan_any. */
static void expect_same(chorus_dtype_t dt, int op, const void *got, const void *want, size_t n,
                        int nan_any, const char *what)
{
    size_t es = chorus_dtype_size(dt);
    const unsigned char *g = got, *w = want;

    for (size_t i = 0; i < n; i++) {
        const unsigned char *gi = g + i * es, *wi = w + i * es;
        if (memcmp(gi, wi, es) == 0) continue;
        if (nan_any && is_nan(dt, gi) && is_nan(dt, wi)) continue;
        uint64_t gv = 0, wv = 0;
        memcpy(&gv, gi, es);
        memcpy(&wv, wi, es);
        fail_msg("%s: %s %s element %zu: device op 0x%llx, CPU kernel 0x%llx", what,
                 chorus_dtype_name(dt), op >= 0 ? chorus_op_name((chorus_op_t)op) : "div", i,
                 (unsigned long long)gv, (unsigned long long)wv);
    }
}

/* ---- Tests ---- */

/* Every op x dtype on random and edge values, and every pair of edge values. */
static void test_pairs(void **state)
{
    (void)state;
    for (int dt = 0; dt < CHORUS_NUM_DTYPES; dt++) {
        size_t es = chorus_dtype_size(dt), ne, n = N_RANDOM;
        const uint64_t *edges = edges_of(dt, &ne);
        unsigned char *a = malloc((n + ne * ne) * es), *b = malloc((n + ne * ne) * es);
        unsigned char *want = malloc((n + ne * ne) * es), *got = malloc((n + ne * ne) * es);
        assert_non_null(a), assert_non_null(b), assert_non_null(want), assert_non_null(got);
        fill(dt, a, n);
        fill(dt, b, n);
        for (size_t i = 0; i < ne; i++) {
            for (size_t j = 0; j < ne; j++) {
                memcpy(a + (n + i * ne + j) * es, &edges[i], es);
                memcpy(b + (n + i * ne + j) * es, &edges[j], es);
            }
        }
        n += ne * ne;
        for (int op = 0; op < CHORUS_AVG; op++) {
            assert_int_equal(chorus_kernel_reduce(want, a, b, n, dt, op), CHORUS_SUCCESS);
            cu_table[dt][op](got, a, b, n);
            expect_same(dt, op, got, want, n, op == CHORUS_SUM || op == CHORUS_PROD, "pairs");
        }
        free(a), free(b), free(want), free(got);
    }
}

/* fp16 and bf16: all 65536 values of a against N_SWEEP_B values of b (edges first). */
static void sweep_half(chorus_dtype_t dt)
{
    uint16_t *a = malloc(65536 * 2), *b = malloc(65536 * 2), *want = malloc(65536 * 2);
    uint16_t *got = malloc(65536 * 2);
    size_t ne;
    const uint64_t *edges = edges_of(dt, &ne);

    assert_non_null(a), assert_non_null(b), assert_non_null(want), assert_non_null(got);
    for (uint32_t i = 0; i < 65536; i++)
        a[i] = (uint16_t)i;
    for (int k = 0; k < N_SWEEP_B; k++) {
        uint16_t bv = k < (int)ne ? (uint16_t)edges[k] : (uint16_t)rng();
        for (uint32_t i = 0; i < 65536; i++)
            b[i] = bv;
        for (int op = 0; op < CHORUS_AVG; op++) {
            int arith = op == CHORUS_SUM || op == CHORUS_PROD;
            /* Both orders: a op b and b op a (the NaN choice depends on the order). */
            assert_int_equal(chorus_kernel_reduce(want, a, b, 65536, dt, op), CHORUS_SUCCESS);
            cu_table[dt][op](got, a, b, 65536);
            expect_same(dt, op, got, want, 65536, arith, "sweep a op b");
            assert_int_equal(chorus_kernel_reduce(want, b, a, 65536, dt, op), CHORUS_SUCCESS);
            cu_table[dt][op](got, b, a, 65536);
            expect_same(dt, op, got, want, 65536, arith, "sweep b op a");
        }
    }
    free(a), free(b), free(want), free(got);
}

static void test_sweep_float16(void **state)
{
    (void)state;
    sweep_half(CHORUS_FLOAT16);
}

static void test_sweep_bfloat16(void **state)
{
    (void)state;
    sweep_half(CHORUS_BFLOAT16);
}

/* The kernels fold sources left to right with one op per step: the same bytes as
 * chorus_kernel_reduce_multi for 1 to 16 sources, fp16/bf16 rounding after every step. */
static void test_multi(void **state)
{
    static const int nsrcs[] = {1, 2, 3, 5, 8, 16};
    const size_t n = 1031;

    (void)state;
    for (int dt = 0; dt < CHORUS_NUM_DTYPES; dt++) {
        size_t es = chorus_dtype_size(dt);
        unsigned char *srcbuf = malloc(16 * n * es), *want = malloc(n * es), *got = malloc(n * es);
        const void *src[16];
        assert_non_null(srcbuf), assert_non_null(want), assert_non_null(got);
        fill(dt, srcbuf, 16 * n);
        for (int s = 0; s < 16; s++)
            src[s] = srcbuf + (size_t)s * n * es;
        for (size_t k = 0; k < sizeof(nsrcs) / sizeof(nsrcs[0]); k++) {
            int ns = nsrcs[k];
            for (int op = 0; op < CHORUS_AVG; op++) {
                assert_int_equal(chorus_kernel_reduce_multi(want, src, ns, n, dt, op),
                                 CHORUS_SUCCESS);
                memcpy(got, src[0], n * es);
                for (int s = 1; s < ns; s++)
                    cu_table[dt][op](got, got, src[s], n);
                expect_same(dt, op, got, want, n, op == CHORUS_SUM || op == CHORUS_PROD, "multi");
            }
        }
        free(srcbuf), free(want), free(got);
    }
}

/* Division (the end of AVG): truncation toward zero, divisors beyond the type's range,
 * floats as true division, fp16/bf16 through float. */
static void test_divide(void **state)
{
    static const uint64_t divisors[] = {1,          2,          3,           7,
                                        127,        128,        129,         255,
                                        256,        1000,       0x7fffffff,  0x80000000,
                                        0x80000001, 0xffffffff, 0x100000000, 0x7fffffffffffffff,
                                        1ull << 63, UINT64_MAX, 65504,       1ull << 40};
    const size_t n = N_RANDOM;

    (void)state;
    for (int dt = 0; dt < CHORUS_NUM_DTYPES; dt++) {
        size_t es = chorus_dtype_size(dt), ne;
        const uint64_t *edges = edges_of(dt, &ne);
        unsigned char *orig = malloc(n * es), *want = malloc(n * es), *got = malloc(n * es);
        assert_non_null(orig), assert_non_null(want), assert_non_null(got);
        fill(dt, orig, n);
        for (size_t i = 0; i < ne; i++)
            memcpy(orig + i * es, &edges[i], es);
        for (size_t k = 0; k < sizeof(divisors) / sizeof(divisors[0]); k++) {
            memcpy(want, orig, n * es);
            memcpy(got, orig, n * es);
            assert_int_equal(chorus_kernel_divide(want, n, dt, divisors[k]), CHORUS_SUCCESS);
            cu_div_table[dt](got, n, divisors[k]);
            expect_same(dt, -1, got, want, n, 1, "divide");
        }
        free(orig), free(want), free(got);
    }
}

/* Spot checks with known answers, so that the comparison above cannot pass by both
 * sides being wrong the same way. */
static void test_known(void **state)
{
    (void)state;
    assert_int_equal(chorus__cu_int8_sum(127, 1), -128);
    assert_int_equal(chorus__cu_int8_prod(-128, -1), -128);
    assert_int_equal(chorus__cu_uint8_sum(255, 2), 1);
    assert_int_equal(chorus__cu_int32_sum(INT32_MAX, 1), INT32_MIN);
    assert_true(chorus__cu_int64_prod(INT64_MIN, -1) == INT64_MIN);
    assert_int_equal(chorus__cu_int32_div(-7, 2), -3);
    assert_int_equal(chorus__cu_int8_div(-128, 128), -1);
    assert_int_equal(chorus__cu_int8_div(-127, 128), 0);
    assert_true(chorus__cu_int64_div(INT64_MIN, 1ull << 63) == -1);
    /* In fp16, 1 + 2^-11 (half an ulp) ties to even, 1.0; 1 + 3 * 2^-12 rounds up. */
    assert_int_equal(chorus__cu_float16_sum(0x3c00, 0x1000), 0x3c00);
    assert_int_equal(chorus__cu_float16_sum(0x3c00, 0x1200), 0x3c01);
    assert_int_equal(chorus__cu_float16_sum(0x7bff, 0x7bff), 0x7c00); /* overflow: inf */
    assert_int_equal(chorus__cu_bfloat16_sum(0x3f80, 0x3f80), 0x4000);
    /* NaN wins MIN/MAX; the first operand's NaN when both are NaN; -0 vs +0 keeps a. */
    assert_int_equal(chorus__cu_float16_min(0x3c00, 0x7e01), 0x7e01);
    assert_int_equal(chorus__cu_float16_max(0xfe02, 0x7e01), 0xfe02);
    assert_int_equal(chorus__cu_bfloat16_max(0x8000, 0x0000), 0x8000);
    assert_true(chorus__cu_float32_min(1.0f, 0.0f / 0.0f) !=
                chorus__cu_float32_min(1.0f, 0.0f / 0.0f));
    assert_int_equal(chorus__cu_bfloat16_div(0x4040, 2), 0x3fc0); /* 3 / 2 = 1.5 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known),         cmocka_unit_test(test_pairs),
        cmocka_unit_test(test_sweep_float16), cmocka_unit_test(test_sweep_bfloat16),
        cmocka_unit_test(test_multi),         cmocka_unit_test(test_divide),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
