/*
 * Local reduction and copy kernels. They know datatypes and operations and nothing else:
 * no communicators, no transports. Every op x dtype is generated once (X-macros) in
 * reduce_cpu.c as a loop the compiler vectorises.
 *
 * Semantics (the reference the unit tests check against):
 * - Integer SUM and PROD wrap modulo 2^bits (computed in unsigned arithmetic, so no UB).
 * - MIN and MAX propagate NaN: if either operand is NaN the result is NaN (the first
 *   NaN operand, a, wins when both are NaN).
 * - FLOAT16 and BFLOAT16 are widened to float, reduced, and rounded back to
 *   nearest-even (NaN stays NaN, overflow becomes infinity).
 * - AVG is not a kernel op: the caller reduces with SUM and then calls
 *   chorus_kernel_divide() once on the result. For integers the division truncates
 *   toward zero; for floats it is a true division (bf16/fp16 through float).
 */
#ifndef CHORUS_KERNELS_H
#define CHORUS_KERNELS_H

#include "chorus.h"

#include <stddef.h>
#include <stdint.h>

/* dst[i] = a[i] op b[i] for i < count. op must not be AVG (use SUM). dst may alias a or b
 * exactly (same pointer); partial overlap is not allowed. Returns
 * CHORUS_ERR_INVALID_ARGUMENT for an unknown dtype or op. */
chorus_status_t chorus_kernel_reduce(void *dst, const void *a, const void *b, size_t count,
                                     chorus_dtype_t dtype, chorus_op_t op);

/* dst[i] = src[0][i] op src[1][i] op ... op src[nsrc-1][i], combined left to right (so the
 * result is the same bytes as chaining chorus_kernel_reduce in that order), in one pass:
 * each source read once, dst written once. nsrc >= 1; dst may alias src[0] exactly, and
 * must not overlap the other sources. */
chorus_status_t chorus_kernel_reduce_multi(void *dst, const void *const *src, int nsrc,
                                           size_t count, chorus_dtype_t dtype, chorus_op_t op);

/* Most sources of chorus_kernel_reduce_exact. Its accumulator (exact_sum.h) adds less than
 * 2^32 to an int64 limb per source and carries only at the end, so 2^31 sources fit without
 * overflow; this limit keeps a factor 2 below that and is still far above any rank count. */
#define CHORUS_EXACT_MAX_SRC (1 << 30)

/* dst[i] = (src[0][i] + src[1][i] + ... + src[nsrc-1][i]) / divisor, computed exactly and
 * rounded once to nearest-even: the bytes do not depend on the order of the sources or on
 * how they were grouped. dtype: CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32,
 * CHORUS_FLOAT64 (anything else: CHORUS_ERR_INVALID_ARGUMENT). divisor >= 1 (1: the sum;
 * nranks: the average, rounded once). 1 <= nsrc <= CHORUS_EXACT_MAX_SRC.
 *
 * The result is the exact real sum of the inputs, divided exactly by divisor, rounded to
 * nearest-even in dtype, subnormals included; a result beyond the largest finite value
 * rounds to +-inf as IEEE round-to-nearest does (at or past the largest finite value plus
 * half an ulp). Specials: any NaN input, or +inf and -inf both present, give the type's
 * canonical quiet NaN (positive: 0x7e00 fp16, 0x7fc0 bf16, 0x7fc00000 float32,
 * 0x7ff8000000000000 float64), whatever the payloads, so that the bytes stay order
 * independent; otherwise an infinity gives that infinity. Zeros: an exact zero sum is -0 only
 * when every input is -0 (IEEE's sum of -0s), else +0 (exact cancellation gives +0 under
 * round-to-nearest); a nonzero sum whose quotient rounds to zero keeps its sign, as IEEE
 * division would. The result does not depend on the floating-point environment (rounding
 * mode, flush-to-zero). dst may alias src[0] exactly (same pointer); no other overlap. */
chorus_status_t chorus_kernel_reduce_exact(void *dst, const void *const *src, int nsrc,
                                           size_t count, chorus_dtype_t dtype, uint64_t divisor);

/* buf[i] = buf[i] / divisor for i < count (the end of AVG). divisor >= 1. */
chorus_status_t chorus_kernel_divide(void *buf, size_t count, chorus_dtype_t dtype,
                                     uint64_t divisor);

/* memcpy (no overlap) with non-temporal stores when `traffic`, the bytes the caller's whole
 * operation moves, exceeds the last-level cache; plain memcpy otherwise. */
void chorus_kernel_copy_stream(void *dst, const void *src, size_t bytes, size_t traffic);

/* memmove-safe copy of bytes; a no-op when dst == src. */
void chorus_kernel_copy(void *dst, const void *src, size_t bytes);

/* The reduce loop for one dtype x op, for callers that apply it many times. NULL when
 * the pair is invalid. */
typedef void (*chorus_reduce_fn_t)(void *dst, const void *a, const void *b, size_t count);
chorus_reduce_fn_t chorus_kernel_reduce_fn(chorus_dtype_t dtype, chorus_op_t op);

/* Scalar conversions used by the kernels and the tests (round to nearest even). */
float chorus_half_to_float(uint16_t h);
uint16_t chorus_float_to_half(float f);
float chorus_bf16_to_float(uint16_t b);
uint16_t chorus_float_to_bf16(float f);

#endif
