/*
 * Internal to kernels/: what the two-source kernels (reduce_cpu.c) and the n-source ones
 * (reduce_multi.c) share, so that every dtype x op is still defined in one place: the
 * element operations, the X-macro type lists, the switch into AVX2 code (isa.c says
 * whether the CPU has it) and the non-temporal stores for outputs too large to cache.
 *
 * AVX2. Each .c file defines its loops once, naming every function through KSFX(), and
 * expands them twice: as plain C for the baseline of the target (SSE2 on x86-64), and,
 * with GCC or Clang on x86-64, again between CHORUS__AVX2_BEGIN and CHORUS__AVX2_END with
 * KSFX adding `_avx2`. The compiler vectorises the same loops for 256-bit registers; the
 * tables of function pointers for AVX2 are used only where the CPU has it
 * (chorus__kernel_have_avx2). No intrinsic appears in the loops themselves, so both
 * copies compute the same bytes: the elementwise operations are exact IEEE operations
 * whatever the vector width, and ISO C mode (-std=c11) keeps GCC from contracting
 * a * b + c into an FMA.
 */
#ifndef CHORUS_KERNELS_REDUCE_OPS_H
#define CHORUS_KERNELS_REDUCE_OPS_H

#include "half.h"

#include <stddef.h>
#include <stdint.h>

/* Elements per block of the native types: a multiple of every vector length (up to 64
 * int8 lanes). fp16 and bf16 use larger blocks: their loops are compute-bound. */
#define NATIVE_BLOCK 64

/* Streaming loops read two or more sources from memory; the hardware prefetcher follows
 * one stream well and several less so. Asking for the lines STREAM_PREFETCH bytes ahead
 * keeps enough reads in flight to cover memory latency. A prefetch never faults, so
 * running past the end of a source is harmless. */
#define STREAM_PREFETCH 4096
#if defined(__GNUC__)
#define CHORUS__PREFETCH(p) __builtin_prefetch((p), 0, 0)
#else
#define CHORUS__PREFETCH(p) ((void)(p))
#endif
#define HALF_BLOCK 256

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS__KERNELS_X86 1
#if defined(__clang__)
#define CHORUS__AVX2_BEGIN                                                                         \
    _Pragma("clang attribute push(__attribute__((target(\"avx2\"))), apply_to = function)")
#define CHORUS__AVX2_END _Pragma("clang attribute pop")
#else
#define CHORUS__AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2\")")
#define CHORUS__AVX2_END _Pragma("GCC pop_options")
#endif
#else
#define CHORUS__KERNELS_X86 0
#endif

/* ---- isa.c ---- */

/* Nonzero when the AVX2 copies of the loops may run on this CPU. */
int chorus__kernel_have_avx2(void);

/* For the tests: nonzero makes chorus__kernel_have_avx2() answer 0, so that the baseline
 * loops run on a CPU with AVX2 too; 0 restores the CPU's answer. */
void chorus__kernel_force_baseline(int on);

/* Whether a call that moves `traffic` bytes (reads plus writes) should write its output
 * with non-temporal stores: only when the working set is too large for the last-level
 * cache, where a cached store would first read every destination line from memory
 * (read for ownership) and then evict data the caller still needs. Always 0 off x86. */
int chorus__kernel_use_stream(size_t traffic);

/* For the tests: stream from `traffic` bytes on (0: back to the last-level cache size). */
void chorus__kernel_set_stream_threshold(size_t traffic);

/* Copies `bytes` (a multiple of 16) from src to dst (16-byte aligned) with non-temporal
 * stores. A run of such copies ends with chorus__kernel_stream_fence(), so that the data
 * are visible before any later store (a flag another process polls, say). SSE2 is part of
 * x86-64, so this needs no dispatch; the write-combining buffers merge the 16-byte stores
 * into whole lines. */
#if CHORUS__KERNELS_X86
#include <emmintrin.h>

static inline void chorus__kernel_stream(void *dst, const void *src, size_t bytes)
{
    __m128i *d = dst;
    const unsigned char *s = src;

    for (size_t i = 0; i < bytes / 16; i++)
        _mm_stream_si128(d + i, _mm_loadu_si128((const __m128i *)(const void *)(s + 16 * i)));
}

static inline void chorus__kernel_stream_fence(void)
{
    _mm_sfence();
}
#else
#include <string.h>

static inline void chorus__kernel_stream(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}

static inline void chorus__kernel_stream_fence(void)
{
}
#endif

/* Elements to handle before dst reaches 16-byte alignment, or SIZE_MAX when it never
 * can (dst not aligned to its element size). */
static inline size_t chorus__stream_head(const void *dst, size_t esize)
{
    size_t mis = (size_t)((uintptr_t)dst & 15u);

    if (mis == 0) return 0;
    if (mis % esize != 0) return SIZE_MAX;
    return (16 - mis) / esize;
}

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

#define X_INT_ELEMS(name, e, T, U) DEFINE_INT_ELEMS(name, T, U)
#define X_FLOAT_ELEMS(name, e, T) DEFINE_FLOAT_ELEMS(name, T)
INT_TYPES(X_INT_ELEMS)
FLOAT_TYPES(X_FLOAT_ELEMS)
#undef X_INT_ELEMS
#undef X_FLOAT_ELEMS

#endif
