/*
 * Reduction of several sources at once (kernels.h): the arena's slice owners fold every
 * local rank's contribution into one output.
 *
 * The result must be the bytes of chaining the two-source kernel left to right, and for
 * the native types it is by construction: each element is folded as
 * op(...op(op(s0, s1), s2)..., sn-1), every step an exact IEEE or wrapping integer
 * operation whose result has the element's type, so keeping the partial result in a
 * register instead of storing and reloading it changes nothing.
 *
 * One pass. The work goes in chunks of up to CHUNK_BLOCKS blocks of NATIVE_BLOCK elements.
 * A chunk's first group folds src[0] and up to MAX_GROUP further sources in registers and
 * stores the partial result; each further group reloads it from L1, folds up to MAX_GROUP
 * more sources in and stores it again. So every source is read from memory once and dst
 * written once, the partial result never leaves L1, and no loop keeps more than
 * MAX_GROUP + 2 streams in flight.
 * Every block loop has a constant trip count and `restrict` pointers so that the compiler
 * vectorises it (see reduce_cpu.c); when dst is src[0], its groups all fold into dst.
 * Outputs too large to cache are streamed out, as in reduce_cpu.c.
 *
 * fp16 and bf16 round to their own format after every pairwise step, so their partial
 * results cannot stay in float: they chain the two-source kernel itself, in blocks small
 * enough for dst to stay in L1, which is the reference semantics by definition. Their
 * conversions make them compute-bound anyway.
 */
#include "kernels.h"

#include "reduce_ops.h"
#include "util/status.h"

#include <string.h>

/* Sources folded into a partial result per pass over a block. */
#define MAX_GROUP 4
/* Blocks per chunk: the partial results of a chunk (at most 8 KiB) stay in L1 while each
 * group of sources is folded in. */
#define CHUNK_BLOCKS 16
/* Whole blocks in a chunk when `left` elements remain. */
#define CHUNK_NBLK(left)                                                                           \
    ((left) / NATIVE_BLOCK < CHUNK_BLOCKS ? (left) / NATIVE_BLOCK : CHUNK_BLOCKS)
/* Elements per chained step of the fp16 and bf16 path: 2 KiB. */
#define CHAIN_BLOCK (4 * HALF_BLOCK)

typedef void (*multi_fn_t)(void *dst, const void *const *src, int nsrc, size_t count);

/* Source k at element i + o, o running over the blocks of a chunk. */
#define SRC(T, k) ((const T *)src[k] + i + o)
#define FOR_BLOCKS for (size_t o = 0; o < nblk * NATIVE_BLOCK; o += NATIVE_BLOCK)

/* The group loops: _mK folds x0..xK into d, _aK folds x1..xK into d itself. */
#define DEFINE_GROUPS(name, T, op)                                                                 \
    static void KSFX(name##_##op##_m1)(T *restrict d, const T *restrict x0, const T *restrict x1)  \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(x0[j], x1[j]);                                                      \
    }                                                                                              \
    static void KSFX(name##_##op##_m2)(T *restrict d, const T *restrict x0, const T *restrict x1,  \
                                       const T *restrict x2)                                       \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(name##_##op(x0[j], x1[j]), x2[j]);                                  \
    }                                                                                              \
    static void KSFX(name##_##op##_m3)(T *restrict d, const T *restrict x0, const T *restrict x1,  \
                                       const T *restrict x2, const T *restrict x3)                 \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(name##_##op(name##_##op(x0[j], x1[j]), x2[j]), x3[j]);              \
    }                                                                                              \
    static void KSFX(name##_##op##_m4)(T *restrict d, const T *restrict x0, const T *restrict x1,  \
                                       const T *restrict x2, const T *restrict x3,                 \
                                       const T *restrict x4)                                       \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(                                                                    \
                name##_##op(name##_##op(name##_##op(x0[j], x1[j]), x2[j]), x3[j]), x4[j]);        \
    }                                                                                              \
    static void KSFX(name##_##op##_a1)(T *restrict d, const T *restrict x1)                        \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(d[j], x1[j]);                                                       \
    }                                                                                              \
    static void KSFX(name##_##op##_a2)(T *restrict d, const T *restrict x1, const T *restrict x2)  \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(name##_##op(d[j], x1[j]), x2[j]);                                   \
    }                                                                                              \
    static void KSFX(name##_##op##_a3)(T *restrict d, const T *restrict x1, const T *restrict x2,  \
                                       const T *restrict x3)                                       \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(name##_##op(name##_##op(d[j], x1[j]), x2[j]), x3[j]);               \
    }                                                                                              \
    static void KSFX(name##_##op##_a4)(T *restrict d, const T *restrict x1, const T *restrict x2,  \
                                       const T *restrict x3, const T *restrict x4)                 \
    {                                                                                              \
        for (size_t j = 0; j < NATIVE_BLOCK; j++)                                                  \
            d[j] = name##_##op(                                                                    \
                name##_##op(name##_##op(name##_##op(d[j], x1[j]), x2[j]), x3[j]), x4[j]);          \
    }

/* Blocks [i, i + nblk * NATIVE_BLOCK) into out (dst + i, or a stack chunk to stream out),
 * nblk <= CHUNK_BLOCKS. Each group runs over the whole chunk before the next, so the
 * choice of loop is made once per chunk and the partial results stay in L1. `s` is 1 when
 * out already holds src[0]'s elements (dst is src[0]), else 0. */
#define DEFINE_MULTI_CHUNK(name, T, op)                                                            \
    static void KSFX(name##_##op##_mchunk)(T *out, const void *const *src, int nsrc, size_t i,     \
                                           size_t nblk, int s)                                     \
    {                                                                                              \
        if (s == 0) {                                                                              \
            int k = nsrc - 1 < MAX_GROUP ? nsrc - 1 : MAX_GROUP;                                   \
            if (k == 1)                                                                            \
                FOR_BLOCKS KSFX(name##_##op##_m1)(out + o, SRC(T, 0), SRC(T, 1));                  \
            if (k == 2)                                                                            \
                FOR_BLOCKS KSFX(name##_##op##_m2)(out + o, SRC(T, 0), SRC(T, 1), SRC(T, 2));       \
            if (k == 3)                                                                            \
                FOR_BLOCKS KSFX(name##_##op##_m3)(out + o, SRC(T, 0), SRC(T, 1), SRC(T, 2),        \
                                                  SRC(T, 3));                                      \
            if (k == 4)                                                                            \
                FOR_BLOCKS KSFX(name##_##op##_m4)(out + o, SRC(T, 0), SRC(T, 1), SRC(T, 2),        \
                                                  SRC(T, 3), SRC(T, 4));                           \
            s = k + 1;                                                                             \
        }                                                                                          \
        for (int k; s < nsrc; s += k) {                                                            \
            k = nsrc - s < MAX_GROUP ? nsrc - s : MAX_GROUP;                                       \
            if (k == 1) FOR_BLOCKS KSFX(name##_##op##_a1)(out + o, SRC(T, s));                     \
            if (k == 2) FOR_BLOCKS KSFX(name##_##op##_a2)(out + o, SRC(T, s), SRC(T, s + 1));      \
            if (k == 3)                                                                            \
                FOR_BLOCKS KSFX(name##_##op##_a3)(out + o, SRC(T, s), SRC(T, s + 1),               \
                                                  SRC(T, s + 2));                                  \
            if (k == 4)                                                                            \
                FOR_BLOCKS KSFX(name##_##op##_a4)(out + o, SRC(T, s), SRC(T, s + 1),               \
                                                  SRC(T, s + 2), SRC(T, s + 3));                   \
        }                                                                                          \
    }

/* Element i folded from every source, for the ends that do not fill a block. The sources
 * are read before dst is written, so dst may be src[0]. */
#define DEFINE_MULTI_ELEM(name, T, op)                                                             \
    static void KSFX(name##_##op##_melem)(T *d, const void *const *src, int nsrc, size_t i)        \
    {                                                                                              \
        const size_t o = 0;                                                                        \
        T acc = name##_##op(*SRC(T, 0), *SRC(T, 1));                                               \
        for (int s = 2; s < nsrc; s++)                                                             \
            acc = name##_##op(acc, *SRC(T, s));                                                    \
        d[i] = acc;                                                                                \
    }

/* The whole call: nsrc >= 2 and count >= 1. */
#define DEFINE_MULTI_OP(name, T, op)                                                               \
    DEFINE_GROUPS(name, T, op)                                                                     \
    DEFINE_MULTI_CHUNK(name, T, op)                                                                \
    DEFINE_MULTI_ELEM(name, T, op)                                                                 \
    static void KSFX(multi_##name##_##op)(void *dst, const void *const *src, int nsrc, size_t n)   \
    {                                                                                              \
        T *d = dst, tmp[CHUNK_BLOCKS * NATIVE_BLOCK];                                              \
        size_t i = 0, head = 0, nblk;                                                              \
        int stream = n >= NATIVE_BLOCK &&                                                          \
                     chorus__kernel_use_stream((size_t)(nsrc + 1) * n * sizeof(T));                \
        if (stream) {                                                                              \
            head = chorus__stream_head(d, sizeof(T));                                              \
            stream = head <= n - NATIVE_BLOCK;                                                     \
        }                                                                                          \
        if (stream) {                                                                              \
            for (; i < head; i++)                                                                  \
                KSFX(name##_##op##_melem)(d, src, nsrc, i);                                        \
            for (; i + NATIVE_BLOCK <= n; i += nblk * NATIVE_BLOCK) {                              \
                nblk = CHUNK_NBLK(n - i);                                                          \
                KSFX(name##_##op##_mchunk)(tmp, src, nsrc, i, nblk, 0);                            \
                chorus__kernel_stream(d + i, tmp, nblk * NATIVE_BLOCK * sizeof(T));                \
            }                                                                                      \
            chorus__kernel_stream_fence();                                                         \
        }                                                                                          \
        for (; i + NATIVE_BLOCK <= n; i += nblk * NATIVE_BLOCK) {                                  \
            nblk = CHUNK_NBLK(n - i);                                                              \
            KSFX(name##_##op##_mchunk)(d + i, src, nsrc, i, nblk, dst == src[0]);                  \
        }                                                                                          \
        for (; i < n; i++)                                                                         \
            KSFX(name##_##op##_melem)(d, src, nsrc, i);                                            \
    }

#define DEFINE_MULTI_OPS(name, T)                                                                  \
    DEFINE_MULTI_OP(name, T, sum)                                                                  \
    DEFINE_MULTI_OP(name, T, prod)                                                                 \
    DEFINE_MULTI_OP(name, T, min)                                                                  \
    DEFINE_MULTI_OP(name, T, max)

#define X_INT(name, e, T, U) DEFINE_MULTI_OPS(name, T)
#define X_FLOAT(name, e, T) DEFINE_MULTI_OPS(name, T)

/* fp16 and bf16 have no entry: they take the chained path. */
#define ROW(name, e, ...)                                                                          \
    [e] = {KSFX(multi_##name##_sum), KSFX(multi_##name##_prod), KSFX(multi_##name##_min),          \
           KSFX(multi_##name##_max)},

#define DEFINE_MULTI_ALL()                                                                         \
    INT_TYPES(X_INT)                                                                               \
    FLOAT_TYPES(X_FLOAT)                                                                           \
    static const multi_fn_t KSFX(multi_table)[CHORUS_NUM_DTYPES][CHORUS_AVG] = {                   \
        INT_TYPES(ROW) FLOAT_TYPES(ROW)};

#define KSFX(f) f
DEFINE_MULTI_ALL()
#undef KSFX

#if CHORUS__KERNELS_X86
CHORUS__AVX2_BEGIN
#define KSFX(f) f##_avx2
DEFINE_MULTI_ALL()
#undef KSFX
CHORUS__AVX2_END
#endif

/* The reference semantics, literally: the two-source kernel applied source after source,
 * a block at a time so that dst's block stays in L1 between the steps. */
static void multi_chained(chorus_reduce_fn_t fn, size_t esize, void *dst,
                          const void *const *src, int nsrc, size_t count)
{
    for (size_t done = 0; done < count; done += CHAIN_BLOCK) {
        size_t n = count - done < CHAIN_BLOCK ? count - done : CHAIN_BLOCK, off = done * esize;
        char *d = (char *)dst + off;

        fn(d, (const char *)src[0] + off, (const char *)src[1] + off, n);
        for (int s = 2; s < nsrc; s++)
            fn(d, d, (const char *)src[s] + off, n);
    }
}

static multi_fn_t multi_fn(chorus_dtype_t dtype, chorus_op_t op)
{
#if CHORUS__KERNELS_X86
    if (chorus__kernel_have_avx2()) return multi_table_avx2[dtype][op];
#endif
    return multi_table[dtype][op];
}

chorus_status_t chorus_kernel_reduce_multi(void *dst, const void *const *src, int nsrc,
                                           size_t count, chorus_dtype_t dtype, chorus_op_t op)
{
    chorus_reduce_fn_t fn = chorus_kernel_reduce_fn(dtype, op);
    multi_fn_t multi;

    if (fn == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "kernel reduce_multi: %s (dtype %d, op %d)",
                             op == CHORUS_AVG ? "avg is not a kernel op (reduce with sum, then "
                                                "divide)"
                                              : "unknown dtype or op",
                             (int)dtype, (int)op);
    }
    if (nsrc < 1 || (count > 0 && (dst == NULL || src == NULL))) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "kernel reduce_multi: %d sources, dst %p, src %p for %zu elements",
                             nsrc, dst, (const void *)src, count);
    }
    if (count == 0) return CHORUS_SUCCESS;
    for (int s = 0; s < nsrc; s++) {
        if (src[s] == NULL) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "kernel reduce_multi: source %d of %d is NULL", s, nsrc);
        }
    }
    if (nsrc == 1) {
        if (dst != src[0]) memcpy(dst, src[0], count * chorus_dtype_size(dtype));
        return CHORUS_SUCCESS;
    }
    multi = multi_fn(dtype, op);
    if (multi != NULL)
        multi(dst, src, nsrc, count);
    else
        multi_chained(fn, chorus_dtype_size(dtype), dst, src, nsrc, count);
    return CHORUS_SUCCESS;
}
