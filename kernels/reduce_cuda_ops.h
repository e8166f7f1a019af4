/*
 * Element operations of the CUDA kernels (reduce_cuda.cu), written once for the device and
 * for a host unit test (tests/unit/test_cuda_ops.c), which compiles this header with cc and
 * checks every op x dtype against the CPU kernels. No GPU is needed to test the arithmetic
 * the device runs; only the conversion instructions differ between the two builds.
 *
 * CHORUS_CU_FN makes each function `__host__ __device__ __forceinline__` under nvcc and
 * `static inline` under a C compiler.
 *
 * Semantics are those of kernels.h, step by step as reduce_ops.h computes them: integer SUM
 * and PROD in the unsigned twin type (wrapping), MIN and MAX propagating NaN with the first
 * operand winning when both are NaN or equal, fp16 and bf16 widened to float, combined, and
 * rounded back to nearest-even after every operation.
 *
 * Conversions. On the device, the native instructions (cvt.f32.f16, cvt.rn.f16.f32,
 * cvt.rn.bf16.f32) round exactly as the CPU code of half.h for every non-NaN value: both are
 * IEEE round-to-nearest-even with subnormals (nvcc does not flush them without
 * -ftz=true). For NaN the hardware returns a canonical NaN, while the CPU keeps the sign and
 * the top payload bits; a NaN that MIN or MAX passes through would then change its bytes, so
 * NaN takes the CPU's bit formula on the device as well (one compare and select, free in a
 * memory-bound kernel). Under nvcc's host pass the functions use half.h directly; under cc,
 * the public conversions of kernels.h, the reference itself.
 *
 * The end of the file declares the launchers of reduce_cuda.cu for the plugin
 * (lib/gpu/plugin); they take no CUDA type so that the plugin's C and the test need no CUDA
 * header for them.
 */
#ifndef CHORUS_KERNELS_REDUCE_CUDA_OPS_H
#define CHORUS_KERNELS_REDUCE_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define CHORUS_CU_FN __host__ __device__ __forceinline__
#include "half.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#define CHORUS_CU_FN static inline
#include "kernels.h"
#endif

/* ---- Conversions ---- */

CHORUS_CU_FN float chorus__cu_half_to_float(uint16_t h)
{
#if defined(__CUDA_ARCH__)
    if ((h & 0x7fffu) > 0x7c00u) {
        return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u |
                               ((uint32_t)(h & 0x03ffu) << 13));
    }
    return __half2float(__ushort_as_half(h));
#elif defined(__CUDACC__)
    return chorus__half_to_float_inline(h);
#else
    return chorus_half_to_float(h);
#endif
}

CHORUS_CU_FN uint16_t chorus__cu_float_to_half(float f)
{
#if defined(__CUDA_ARCH__)
    uint32_t x = __float_as_uint(f);
    uint16_t r = __half_as_ushort(__float2half_rn(f));
    if (f != f) r = (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x03ffu));
    return r;
#elif defined(__CUDACC__)
    return chorus__float_to_half_inline(f);
#else
    return chorus_float_to_half(f);
#endif
}

/* bf16 is the top half of a float: widening is a shift on every build, NaN included. */
CHORUS_CU_FN float chorus__cu_bf16_to_float(uint16_t b)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float((uint32_t)b << 16);
#elif defined(__CUDACC__)
    return chorus__bf16_to_float_inline(b);
#else
    return chorus_bf16_to_float(b);
#endif
}

CHORUS_CU_FN uint16_t chorus__cu_float_to_bf16(float f)
{
#if defined(__CUDA_ARCH__)
    uint32_t x = __float_as_uint(f);
    uint16_t r = __bfloat16_as_ushort(__float2bfloat16_rn(f));
    if (f != f) r = (uint16_t)((x >> 16) | 0x0040u);
    return r;
#elif defined(__CUDACC__)
    return chorus__float_to_bf16_inline(f);
#else
    return chorus_float_to_bf16(f);
#endif
}

/* ---- Element operations: chorus__cu_<dtype>_<op>(x, y) ---- */

#define CHORUS_CU_INT_OPS(name, T, U)                                                              \
    CHORUS_CU_FN T chorus__cu_##name##_sum(T x, T y)                                               \
    {                                                                                              \
        return (T)(U)((U)x + (U)y);                                                                \
    }                                                                                              \
    CHORUS_CU_FN T chorus__cu_##name##_prod(T x, T y)                                              \
    {                                                                                              \
        return (T)(U)((U)x * (U)y);                                                                \
    }                                                                                              \
    CHORUS_CU_FN T chorus__cu_##name##_min(T x, T y)                                               \
    {                                                                                              \
        return y < x ? y : x;                                                                      \
    }                                                                                              \
    CHORUS_CU_FN T chorus__cu_##name##_max(T x, T y)                                               \
    {                                                                                              \
        return y > x ? y : x;                                                                      \
    }

#define CHORUS_CU_FLOAT_OPS(name, T)                                                               \
    CHORUS_CU_FN T chorus__cu_##name##_sum(T x, T y)                                               \
    {                                                                                              \
        return x + y;                                                                              \
    }                                                                                              \
    CHORUS_CU_FN T chorus__cu_##name##_prod(T x, T y)                                              \
    {                                                                                              \
        return x * y;                                                                              \
    }                                                                                              \
    CHORUS_CU_FN T chorus__cu_##name##_min(T x, T y)                                               \
    {                                                                                              \
        return (y < x || (y != y && x == x)) ? y : x;                                              \
    }                                                                                              \
    CHORUS_CU_FN T chorus__cu_##name##_max(T x, T y)                                               \
    {                                                                                              \
        return (y > x || (y != y && x == x)) ? y : x;                                              \
    }

/* Each fp16/bf16 step is the float32 step between the widened operands, rounded back. */
#define CHORUS_CU_HALF_OP(name, TO_F, FROM_F, op)                                                  \
    CHORUS_CU_FN uint16_t chorus__cu_##name##_##op(uint16_t x, uint16_t y)                         \
    {                                                                                              \
        return FROM_F(chorus__cu_float32_##op(TO_F(x), TO_F(y)));                                  \
    }
#define CHORUS_CU_HALF_OPS(name, TO_F, FROM_F)                                                     \
    CHORUS_CU_HALF_OP(name, TO_F, FROM_F, sum)                                                     \
    CHORUS_CU_HALF_OP(name, TO_F, FROM_F, prod)                                                    \
    CHORUS_CU_HALF_OP(name, TO_F, FROM_F, min)                                                     \
    CHORUS_CU_HALF_OP(name, TO_F, FROM_F, max)

CHORUS_CU_INT_OPS(int8, int8_t, uint8_t)
CHORUS_CU_INT_OPS(uint8, uint8_t, uint8_t)
CHORUS_CU_INT_OPS(int32, int32_t, uint32_t)
CHORUS_CU_INT_OPS(uint32, uint32_t, uint32_t)
CHORUS_CU_INT_OPS(int64, int64_t, uint64_t)
CHORUS_CU_INT_OPS(uint64, uint64_t, uint64_t)
CHORUS_CU_FLOAT_OPS(float32, float)
CHORUS_CU_FLOAT_OPS(float64, double)
CHORUS_CU_HALF_OPS(float16, chorus__cu_half_to_float, chorus__cu_float_to_half)
CHORUS_CU_HALF_OPS(bfloat16, chorus__cu_bf16_to_float, chorus__cu_float_to_bf16)

/* ---- Division, the end of AVG: chorus__cu_<dtype>_div(x, divisor), divisor >= 1 ---- */

/* Signed types truncate toward zero. A divisor above the type's maximum cannot be
 * converted to it; then every quotient is 0 except MIN / (MAX + 1) = -1 (as reduce_cpu.c). */
#define CHORUS_CU_DIV_SIGNED(name, T, TMAX)                                                        \
    CHORUS_CU_FN T chorus__cu_##name##_div(T x, uint64_t d)                                        \
    {                                                                                              \
        if (d > (uint64_t)TMAX) return (d == (uint64_t)TMAX + 1 && x == -TMAX - 1) ? (T)-1 : (T)0; \
        return (T)(x / (T)d);                                                                      \
    }
#define CHORUS_CU_DIV_UNSIGNED(name, T)                                                            \
    CHORUS_CU_FN T chorus__cu_##name##_div(T x, uint64_t d)                                        \
    {                                                                                              \
        return (T)(x / d);                                                                         \
    }
#define CHORUS_CU_DIV_FLOAT(name, T)                                                               \
    CHORUS_CU_FN T chorus__cu_##name##_div(T x, uint64_t d)                                        \
    {                                                                                              \
        return x / (T)d;                                                                           \
    }
#define CHORUS_CU_DIV_HALF(name, TO_F, FROM_F)                                                     \
    CHORUS_CU_FN uint16_t chorus__cu_##name##_div(uint16_t x, uint64_t d)                          \
    {                                                                                              \
        return FROM_F(TO_F(x) / (float)d);                                                         \
    }

CHORUS_CU_DIV_SIGNED(int8, int8_t, INT8_MAX)
CHORUS_CU_DIV_UNSIGNED(uint8, uint8_t)
CHORUS_CU_DIV_SIGNED(int32, int32_t, INT32_MAX)
CHORUS_CU_DIV_UNSIGNED(uint32, uint32_t)
CHORUS_CU_DIV_SIGNED(int64, int64_t, INT64_MAX)
CHORUS_CU_DIV_UNSIGNED(uint64, uint64_t)
CHORUS_CU_DIV_FLOAT(float32, float)
CHORUS_CU_DIV_FLOAT(float64, double)
CHORUS_CU_DIV_HALF(float16, chorus__cu_half_to_float, chorus__cu_float_to_half)
CHORUS_CU_DIV_HALF(bfloat16, chorus__cu_bf16_to_float, chorus__cu_float_to_bf16)

/* ---- Launchers (reduce_cuda.cu), for the plugin ---- */

/* At most this many sources per reduce (gpu.h). */
#define CHORUS_CU_MAX_SRC 16

#ifdef __cplusplus
extern "C" {
#endif

/* Each enqueues one kernel on `stream` (a cudaStream_t; NULL is the legacy default stream)
 * on the calling thread's current device and returns the cudaError_t of the launch (0 on
 * success). dtype and op are chorus_dtype_t and chorus_op_t values the caller has checked
 * (op never AVG); 1 <= nsrc <= CHORUS_CU_MAX_SRC. */
int chorus__cu_reduce(void *dst, const void *const *src, int nsrc, size_t count, int dtype, int op,
                      void *stream);
int chorus__cu_divide(void *buf, size_t count, int dtype, uint64_t divisor, void *stream);
/* One thread that spins until (int64_t)(*flag - value) >= 0, the rule of
 * cuStreamWaitValue64(CU_STREAM_WAIT_VALUE_GEQ); flag is a device address of mapped pinned
 * host memory. For devices without 64-bit stream memory operations. */
int chorus__cu_spin_wait(volatile uint64_t *flag, uint64_t value, void *stream);
/* chorus_kernel_reduce_exact (kernels.h) on the device: dst[i] = (src[0][i] + ... +
 * src[nsrc-1][i]) / divisor, exact and rounded once, one thread per element running the
 * element code of exact_sum.h (whose host test is tests/unit/test_reduce_exact.c), so the
 * bytes are the CPU kernel's. dtype: CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32 or
 * CHORUS_FLOAT64; divisor >= 1; 1 <= nsrc <= CHORUS_CU_MAX_SRC; dst may be src[0]. Else
 * cudaErrorInvalidValue. Each element costs a few limbs of integer work (in local memory)
 * per source and a long division when divisor > 1, so expect it slower than
 * chorus__cu_reduce; its speed on a device has not been measured yet. */
int chorus__cu_reduce_exact(void *dst, const void *const *src, int nsrc, size_t count, int dtype,
                            uint64_t divisor, void *stream);
/* Loads every kernel above on the current device (they load lazily otherwise); returns the
 * cudaError_t. stream_wait_flag calls it once per device before the first wait it enqueues,
 * as a first launch while a stream waits for the proxy could deadlock. */
int chorus__cu_preload(void);

#ifdef __cplusplus
}
#endif

#endif
