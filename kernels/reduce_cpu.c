/*
 * CPU reduction, division and copy kernels (kernels.h), every dtype x op generated once
 * from the X-macro lists below.
 *
 * Vectorisation. At -O2, GCC 12 only vectorises a loop when the vector code replaces the
 * scalar loop entirely: no run-time alias checks and no scalar epilogue. So the work is
 * cut into fixed-size blocks whose loops have a constant trip count, and the pointers of
 * a block are `restrict`. Because dst may alias a or b exactly, which `restrict` forbids,
 * each op has one block loop per aliasing case (dst distinct, dst == a, dst == b, all
 * three equal), chosen at run time; only the short tail runs as a plain scalar loop.
 *
 * fp16 and bf16 blocks are widened into float arrays on the stack, reduced there and
 * rounded back; the whole block is read before any of it is written, so any exact
 * aliasing is safe without special cases, and the tail goes through the same code on a
 * zero-padded copy.
 */
#include "kernels.h"

#include "half.h"
#include "util/status.h"

#include <string.h>

/* Elements per block: a multiple of every vector length (up to 64 int8 lanes). */
#define NATIVE_BLOCK 64
#define HALF_BLOCK 256

/* ---- Element operations ---- */

/* Integer SUM and PROD run in the unsigned twin type, where wrapping is defined. The
 * conversion back to a signed type wraps modulo 2^bits on every compiler Chorus supports.
 * The 8-bit types promote to int, whose range holds any sum or product of two of them. */
#define DEFINE_INT_ELEMS(name, T, U)                                                               \
    static inline T name##_sum(T x, T y)                                                           \
    {                                                                                              \
        return (T)(U)((U)x + (U)y);                                                                \
    }                                                                                              \
    static inline T name##_prod(T x, T y)                                                          \
    {                                                                                              \
        return (T)(U)((U)x * (U)y);                                                                \
    }                                                                                              \
    static inline T name##_min(T x, T y)                                                           \
    {                                                                                              \
        return y < x ? y : x;                                                                      \
    }                                                                                              \
    static inline T name##_max(T x, T y)                                                           \
    {                                                                                              \
        return y > x ? y : x;                                                                      \
    }

/* MIN and MAX propagate NaN: x (from a) wins if it is NaN, else y if that is NaN. Equal
 * values (including -0.0 against +0.0) give x. */
#define DEFINE_FLOAT_ELEMS(name, T)                                                                \
    static inline T name##_sum(T x, T y)                                                           \
    {                                                                                              \
        return x + y;                                                                              \
    }                                                                                              \
    static inline T name##_prod(T x, T y)                                                          \
    {                                                                                              \
        return x * y;                                                                              \
    }                                                                                              \
    static inline T name##_min(T x, T y)                                                           \
    {                                                                                              \
        return (y < x || (y != y && x == x)) ? y : x;                                              \
    }                                                                                              \
    static inline T name##_max(T x, T y)                                                           \
    {                                                                                              \
        return (y > x || (y != y && x == x)) ? y : x;                                              \
    }

/* ---- The type lists: name, enum, C type, and the unsigned twin or float converters ---- */

#define INT_TYPES(X)                                                                               \
    X(int8, CHORUS_INT8, int8_t, uint8_t)                                                          \
    X(uint8, CHORUS_UINT8, uint8_t, uint8_t)                                                       \
    X(int32, CHORUS_INT32, int32_t, uint32_t)                                                      \
    X(uint32, CHORUS_UINT32, uint32_t, uint32_t)                                                   \
    X(int64, CHORUS_INT64, int64_t, uint64_t)                                                      \
    X(uint64, CHORUS_UINT64, uint64_t, uint64_t)

#define FLOAT_TYPES(X)                                                                             \
    X(float32, CHORUS_FLOAT32, float)                                                              \
    X(float64, CHORUS_FLOAT64, double)

#define HALF_TYPES(X)                                                                              \
    X(float16, CHORUS_FLOAT16, chorus__half_to_float_inline, chorus__float_to_half_inline)         \
    X(bfloat16, CHORUS_BFLOAT16, chorus__bf16_to_float_inline, chorus__float_to_bf16_inline)

/* ---- Reduce loops for types the CPU computes natively ---- */

#define DEFINE_NATIVE_OP(name, T, op)                                                              \
    static void name##_##op##_3(T *restrict d, const T *restrict a, const T *restrict b)           \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(a[j], b[j]);                                                        \
    }                                                                                              \
    static void name##_##op##_da(T *restrict d, const T *restrict b)                               \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(d[j], b[j]);                                                        \
    }                                                                                              \
    static void name##_##op##_db(T *restrict d, const T *restrict a)                               \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(a[j], d[j]);                                                        \
    }                                                                                              \
    static void name##_##op##_dd(T *d)                                                             \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(d[j], d[j]);                                                        \
    }                                                                                              \
    static void reduce_##name##_##op(void *dst, const void *a_, const void *b_, size_t n)          \
    {                                                                                              \
        T *d = dst;                                                                                \
        const T *a = a_, *b = b_;                                                                  \
        size_t i = 0;                                                                              \
        for (; i + NATIVE_BLOCK <= n; i += NATIVE_BLOCK) {                                         \
            if (d != a && d != b)                                                                  \
                name##_##op##_3(d + i, a + i, b + i);                                              \
            else if (d != b)                                                                       \
                name##_##op##_da(d + i, b + i);                                                    \
            else if (d != a)                                                                       \
                name##_##op##_db(d + i, a + i);                                                    \
            else                                                                                   \
                name##_##op##_dd(d + i);                                                           \
        }                                                                                          \
        for (; i < n; i++)                                                                         \
            d[i] = name##_##op(a[i], b[i]);                                                        \
    }

#define DEFINE_NATIVE_OPS(name, T)                                                                 \
    DEFINE_NATIVE_OP(name, T, sum)                                                                 \
    DEFINE_NATIVE_OP(name, T, prod)                                                                \
    DEFINE_NATIVE_OP(name, T, min)                                                                 \
    DEFINE_NATIVE_OP(name, T, max)

#define X_INT(name, e, T, U) DEFINE_INT_ELEMS(name, T, U) DEFINE_NATIVE_OPS(name, T)
#define X_FLOAT(name, e, T) DEFINE_FLOAT_ELEMS(name, T) DEFINE_NATIVE_OPS(name, T)
INT_TYPES(X_INT)
FLOAT_TYPES(X_FLOAT)
#undef X_INT
#undef X_FLOAT

/* ---- Reduce loops for fp16 and bf16, through float ---- */

#define DEFINE_HALF_OP(name, TO_F, FROM_F, op)                                                     \
    static void name##_##op##_block(uint16_t *d, const uint16_t *a, const uint16_t *b)             \
    {                                                                                              \
        float fa[HALF_BLOCK], fb[HALF_BLOCK];                                                      \
        for (size_t j = 0; j < HALF_BLOCK; j++) {                                                  \
            fa[j] = TO_F(a[j]);                                                                    \
            fb[j] = TO_F(b[j]);                                                                    \
        }                                                                                          \
        for (size_t j = 0; j < HALF_BLOCK; j++)                                                    \
            d[j] = FROM_F(float32_##op(fa[j], fb[j]));                                             \
    }                                                                                              \
    static void reduce_##name##_##op(void *dst, const void *a_, const void *b_, size_t n)          \
    {                                                                                              \
        uint16_t *d = dst;                                                                         \
        const uint16_t *a = a_, *b = b_;                                                           \
        size_t i = 0;                                                                              \
        for (; i + HALF_BLOCK <= n; i += HALF_BLOCK)                                               \
            name##_##op##_block(d + i, a + i, b + i);                                              \
        if (i < n) {                                                                               \
            uint16_t ta[HALF_BLOCK] = {0}, tb[HALF_BLOCK] = {0};                                   \
            memcpy(ta, a + i, (n - i) * sizeof(*a));                                               \
            memcpy(tb, b + i, (n - i) * sizeof(*b));                                               \
            name##_##op##_block(ta, ta, tb);                                                       \
            memcpy(d + i, ta, (n - i) * sizeof(*d));                                               \
        }                                                                                          \
    }

#define X_HALF(name, e, TO_F, FROM_F)                                                              \
    DEFINE_HALF_OP(name, TO_F, FROM_F, sum)                                                        \
    DEFINE_HALF_OP(name, TO_F, FROM_F, prod)                                                       \
    DEFINE_HALF_OP(name, TO_F, FROM_F, min)                                                        \
    DEFINE_HALF_OP(name, TO_F, FROM_F, max)
HALF_TYPES(X_HALF)
#undef X_HALF

/* ---- The dispatch table, indexed by dtype and op (AVG excluded) ---- */

#define ROW(name, e, ...)                                                                          \
    [e] = {reduce_##name##_sum, reduce_##name##_prod, reduce_##name##_min, reduce_##name##_max},
static const chorus_reduce_fn_t reduce_table[CHORUS_NUM_DTYPES][CHORUS_AVG] = {
    INT_TYPES(ROW) FLOAT_TYPES(ROW) HALF_TYPES(ROW)};
#undef ROW

chorus_reduce_fn_t chorus_kernel_reduce_fn(chorus_dtype_t dtype, chorus_op_t op)
{
    if ((unsigned)dtype >= CHORUS_NUM_DTYPES || (unsigned)op >= CHORUS_AVG) return NULL;
    return reduce_table[dtype][op];
}

chorus_status_t chorus_kernel_reduce(void *dst, const void *a, const void *b, size_t count,
                                     chorus_dtype_t dtype, chorus_op_t op)
{
    chorus_reduce_fn_t fn = chorus_kernel_reduce_fn(dtype, op);

    if (fn == NULL) {
        if (op == CHORUS_AVG) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "kernel reduce: avg is not a kernel op (reduce with sum, "
                                 "then divide)");
        }
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "kernel reduce: unknown dtype %d or op %d", (int)dtype, (int)op);
    }
    fn(dst, a, b, count);
    return CHORUS_SUCCESS;
}

/* ---- Division, the end of AVG ---- */

/* Signed types truncate toward zero, as C division does. A divisor above the type's
 * maximum cannot be converted to the type; then every quotient is 0 except
 * MIN / (MAX + 1) = -1. C division itself is safe: the divisor is never -1. */
#define DEFINE_DIVIDE_SIGNED(name, T, TMAX)                                                        \
    static void divide_##name(void *buf, size_t n, uint64_t divisor)                               \
    {                                                                                              \
        T *p = buf;                                                                                \
        if (divisor > (uint64_t)TMAX) {                                                            \
            int minus_one = divisor == (uint64_t)TMAX + 1;                                         \
            for (size_t i = 0; i < n; i++)                                                         \
                p[i] = (minus_one && p[i] == -TMAX - 1) ? -1 : 0;                                  \
            return;                                                                                \
        }                                                                                          \
        T dv = (T)divisor;                                                                         \
        for (size_t i = 0; i < n; i++)                                                             \
            p[i] = (T)(p[i] / dv);                                                                 \
    }

#define DEFINE_DIVIDE_UNSIGNED(name, T)                                                            \
    static void divide_##name(void *buf, size_t n, uint64_t divisor)                               \
    {                                                                                              \
        T *p = buf;                                                                                \
        for (size_t i = 0; i < n; i++)                                                             \
            p[i] = (T)(p[i] / divisor);                                                            \
    }

/* Floats divide in blocks so the loop vectorises; the tail is scalar. */
#define DEFINE_DIVIDE_FLOAT(name, T)                                                               \
    static void divide_##name##_block(T *p, T dv)                                                  \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            p[j] = p[j] / dv;                                                                      \
    }                                                                                              \
    static void divide_##name(void *buf, size_t n, uint64_t divisor)                               \
    {                                                                                              \
        T *p = buf;                                                                                \
        T dv = (T)divisor;                                                                         \
        size_t i = 0;                                                                              \
        for (; i + NATIVE_BLOCK <= n; i += NATIVE_BLOCK)                                           \
            divide_##name##_block(p + i, dv);                                                      \
        for (; i < n; i++)                                                                         \
            p[i] = p[i] / dv;                                                                      \
    }

#define DEFINE_DIVIDE_HALF(name, TO_F, FROM_F)                                                     \
    static void divide_##name##_block(uint16_t *p, float dv)                                       \
    {                                                                                              \
        for (size_t j = 0; j < HALF_BLOCK; j++)                                                    \
            p[j] = FROM_F(TO_F(p[j]) / dv);                                                        \
    }                                                                                              \
    static void divide_##name(void *buf, size_t n, uint64_t divisor)                               \
    {                                                                                              \
        uint16_t *p = buf;                                                                         \
        float dv = (float)divisor;                                                                 \
        size_t i = 0;                                                                              \
        for (; i + HALF_BLOCK <= n; i += HALF_BLOCK)                                               \
            divide_##name##_block(p + i, dv);                                                      \
        if (i < n) {                                                                               \
            uint16_t t[HALF_BLOCK] = {0};                                                          \
            memcpy(t, p + i, (n - i) * sizeof(*p));                                                \
            divide_##name##_block(t, dv);                                                          \
            memcpy(p + i, t, (n - i) * sizeof(*p));                                                \
        }                                                                                          \
    }

DEFINE_DIVIDE_SIGNED(int8, int8_t, INT8_MAX)
DEFINE_DIVIDE_UNSIGNED(uint8, uint8_t)
DEFINE_DIVIDE_SIGNED(int32, int32_t, INT32_MAX)
DEFINE_DIVIDE_UNSIGNED(uint32, uint32_t)
DEFINE_DIVIDE_SIGNED(int64, int64_t, INT64_MAX)
DEFINE_DIVIDE_UNSIGNED(uint64, uint64_t)
DEFINE_DIVIDE_FLOAT(float32, float)
DEFINE_DIVIDE_FLOAT(float64, double)
#define X_DIV_HALF(name, e, TO_F, FROM_F) DEFINE_DIVIDE_HALF(name, TO_F, FROM_F)
HALF_TYPES(X_DIV_HALF)
#undef X_DIV_HALF

typedef void (*divide_fn_t)(void *buf, size_t count, uint64_t divisor);

#define DIV_ROW(name, e, ...) [e] = divide_##name,
static const divide_fn_t divide_table[CHORUS_NUM_DTYPES] = {INT_TYPES(DIV_ROW) FLOAT_TYPES(DIV_ROW)
                                                                HALF_TYPES(DIV_ROW)};
#undef DIV_ROW

chorus_status_t chorus_kernel_divide(void *buf, size_t count, chorus_dtype_t dtype,
                                     uint64_t divisor)
{
    if ((unsigned)dtype >= CHORUS_NUM_DTYPES) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "kernel divide: unknown dtype %d",
                             (int)dtype);
    }
    if (divisor == 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "kernel divide: divisor 0 for %s",
                             chorus_dtype_name(dtype));
    }
    divide_table[dtype](buf, count, divisor);
    return CHORUS_SUCCESS;
}

/* ---- Copy ---- */

void chorus_kernel_copy(void *dst, const void *src, size_t bytes)
{
    /* memmove with a NULL pointer is undefined even for 0 bytes. */
    if (dst == src || bytes == 0) return;
    memmove(dst, src, bytes);
}
