/*
 * CPU reduction, division and copy kernels (kernels.h), every dtype x op generated once
 * from the X-macro lists of reduce_ops.h.
 *
 * Vectorisation. At -O2, GCC 12 only vectorises a loop when the vector code replaces the
 * scalar loop entirely: no run-time alias checks and no scalar epilogue. So the work is
 * cut into fixed-size blocks whose loops have a constant trip count, and the pointers of
 * a block are `restrict`. Because dst may alias a or b exactly, which `restrict` forbids,
 * each op has one block loop per aliasing case (dst distinct, dst == a, dst == b, all
 * three equal), chosen at run time; only the short tail runs as a plain scalar loop. The
 * loops are compiled twice, the second time for AVX2 (reduce_ops.h), and
 * chorus_kernel_reduce_fn() hands out the copy the CPU can run.
 *
 * Large outputs. When a call's working set is larger than the last-level cache, each
 * block is reduced into a buffer on the stack and written out with non-temporal stores
 * (chorus__kernel_use_stream): a plain store would first read the destination line from
 * memory, a third more traffic for a two-source sum, only to evict it again.
 *
 * fp16 and bf16 blocks are widened into float arrays on the stack, reduced there and
 * rounded back; the whole block is read before any of it is written, so any exact
 * aliasing is safe without special cases, and the tail goes through the same code on a
 * zero-padded copy. They are compute-bound, so they never stream.
 */
#include "kernels.h"

#include "reduce_ops.h"
#include "util/status.h"

#include <string.h>

/* ---- Reduce loops for types the CPU computes natively ---- */

/* _stream reduces through a stack block into non-temporal stores and returns how many
 * elements it did (0 when dst cannot be aligned for them); the rest, fewer than a block,
 * is the caller's. */
#define DEFINE_NATIVE_OP(name, T, op)                                                              \
    static void KSFX(name##_##op##_3)(T *restrict d, const T *restrict a, const T *restrict b)     \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(a[j], b[j]);                                                        \
    }                                                                                              \
    static void KSFX(name##_##op##_da)(T *restrict d, const T *restrict b)                         \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(d[j], b[j]);                                                        \
    }                                                                                              \
    static void KSFX(name##_##op##_db)(T *restrict d, const T *restrict a)                         \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(a[j], d[j]);                                                        \
    }                                                                                              \
    static void KSFX(name##_##op##_dd)(T *d)                                                       \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(d[j], d[j]);                                                        \
    }                                                                                              \
    static size_t KSFX(name##_##op##_stream)(T *d, const T *a, const T *b, size_t n)               \
    {                                                                                              \
        T tmp[NATIVE_BLOCK];                                                                       \
        size_t i = chorus__stream_head(d, sizeof(T));                                              \
        if (i > n - NATIVE_BLOCK) return 0;                                                        \
        for (size_t j = 0; j < i; j++)                                                             \
            d[j] = name##_##op(a[j], b[j]);                                                        \
        for (; i + NATIVE_BLOCK <= n; i += NATIVE_BLOCK) {                                         \
            for (size_t l = 0; l < sizeof(tmp); l += 64) {                                         \
                CHORUS__PREFETCH((const char *)(a + i) + STREAM_PREFETCH + l);                     \
                CHORUS__PREFETCH((const char *)(b + i) + STREAM_PREFETCH + l);                     \
            }                                                                                      \
            KSFX(name##_##op##_3)(tmp, a + i, b + i);                                              \
            chorus__kernel_stream(d + i, tmp, sizeof(tmp));                                        \
        }                                                                                          \
        chorus__kernel_stream_fence();                                                             \
        return i;                                                                                  \
    }                                                                                              \
    static void KSFX(reduce_##name##_##op)(void *dst, const void *a_, const void *b_, size_t n)    \
    {                                                                                              \
        T *d = dst;                                                                                \
        const T *a = a_, *b = b_;                                                                  \
        size_t i = 0;                                                                              \
        if (n >= NATIVE_BLOCK && chorus__kernel_use_stream(3 * n * sizeof(T)))                     \
            i = KSFX(name##_##op##_stream)(d, a, b, n);                                            \
        for (; i + NATIVE_BLOCK <= n; i += NATIVE_BLOCK) {                                         \
            if (d != a && d != b)                                                                  \
                KSFX(name##_##op##_3)(d + i, a + i, b + i);                                        \
            else if (d != b)                                                                       \
                KSFX(name##_##op##_da)(d + i, b + i);                                              \
            else if (d != a)                                                                       \
                KSFX(name##_##op##_db)(d + i, a + i);                                              \
            else                                                                                   \
                KSFX(name##_##op##_dd)(d + i);                                                     \
        }                                                                                          \
        for (; i < n; i++)                                                                         \
            d[i] = name##_##op(a[i], b[i]);                                                        \
    }

#define DEFINE_NATIVE_OPS(name, T)                                                                 \
    DEFINE_NATIVE_OP(name, T, sum)                                                                 \
    DEFINE_NATIVE_OP(name, T, prod)                                                                \
    DEFINE_NATIVE_OP(name, T, min)                                                                 \
    DEFINE_NATIVE_OP(name, T, max)

#define X_INT(name, e, T, U) DEFINE_NATIVE_OPS(name, T)
#define X_FLOAT(name, e, T) DEFINE_NATIVE_OPS(name, T)

/* ---- Reduce loops for fp16 and bf16, through float ---- */

#define DEFINE_HALF_OP(name, TO_F, FROM_F, op)                                                     \
    static void KSFX(name##_##op##_block)(uint16_t *d, const uint16_t *a, const uint16_t *b)       \
    {                                                                                              \
        float fa[HALF_BLOCK], fb[HALF_BLOCK];                                                      \
        for (size_t j = 0; j < HALF_BLOCK; j++) {                                                  \
            fa[j] = TO_F(a[j]);                                                                    \
            fb[j] = TO_F(b[j]);                                                                    \
        }                                                                                          \
        for (size_t j = 0; j < HALF_BLOCK; j++)                                                    \
            d[j] = FROM_F(float32_##op(fa[j], fb[j]));                                             \
    }                                                                                              \
    static void KSFX(reduce_##name##_##op)(void *dst, const void *a_, const void *b_, size_t n)    \
    {                                                                                              \
        uint16_t *d = dst;                                                                         \
        const uint16_t *a = a_, *b = b_;                                                           \
        size_t i = 0;                                                                              \
        for (; i + HALF_BLOCK <= n; i += HALF_BLOCK)                                               \
            KSFX(name##_##op##_block)(d + i, a + i, b + i);                                        \
        if (i < n) {                                                                               \
            uint16_t ta[HALF_BLOCK] = {0}, tb[HALF_BLOCK] = {0};                                   \
            memcpy(ta, a + i, (n - i) * sizeof(*a));                                               \
            memcpy(tb, b + i, (n - i) * sizeof(*b));                                               \
            KSFX(name##_##op##_block)(ta, ta, tb);                                                 \
            memcpy(d + i, ta, (n - i) * sizeof(*d));                                               \
        }                                                                                          \
    }

#define X_HALF(name, e, TO_F, FROM_F)                                                              \
    DEFINE_HALF_OP(name, TO_F, FROM_F, sum)                                                        \
    DEFINE_HALF_OP(name, TO_F, FROM_F, prod)                                                       \
    DEFINE_HALF_OP(name, TO_F, FROM_F, min)                                                        \
    DEFINE_HALF_OP(name, TO_F, FROM_F, max)

/* ---- The dispatch tables, indexed by dtype and op (AVG excluded) ---- */

#define ROW(name, e, ...)                                                                          \
    [e] = {KSFX(reduce_##name##_sum), KSFX(reduce_##name##_prod), KSFX(reduce_##name##_min),       \
           KSFX(reduce_##name##_max)},

/* Every loop and the table that lists them, named through KSFX. */
#define DEFINE_REDUCE_ALL()                                                                        \
    INT_TYPES(X_INT)                                                                               \
    FLOAT_TYPES(X_FLOAT)                                                                           \
    HALF_TYPES(X_HALF)                                                                             \
    static const chorus_reduce_fn_t KSFX(reduce_table)[CHORUS_NUM_DTYPES][CHORUS_AVG] = {          \
        INT_TYPES(ROW) FLOAT_TYPES(ROW) HALF_TYPES(ROW)};

#define KSFX(f) f
DEFINE_REDUCE_ALL()
#undef KSFX

#if CHORUS__KERNELS_X86
CHORUS__AVX2_BEGIN
#define KSFX(f) f##_avx2
DEFINE_REDUCE_ALL()
#undef KSFX
CHORUS__AVX2_END
#endif

chorus_reduce_fn_t chorus_kernel_reduce_fn(chorus_dtype_t dtype, chorus_op_t op)
{
    if ((unsigned)dtype >= CHORUS_NUM_DTYPES || (unsigned)op >= CHORUS_AVG) return NULL;
#if CHORUS__KERNELS_X86
    if (chorus__kernel_have_avx2()) return reduce_table_avx2[dtype][op];
#endif
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
