/*
 * Internal to kernels/: fp16 and bf16 <-> float conversions as branch-free inline code,
 * so that the block loops of reduce_cpu.c inline and vectorise them. half.c exports the
 * public scalar versions declared in kernels.h on top of these.
 *
 * Rounding is to nearest, ties to even; NaN stays NaN (made quiet, sign and top payload
 * bits kept); overflow becomes infinity; subnormals are handled in both directions.
 * Plain C bit manipulation only: no _Float16, no intrinsics, no libm. The one float
 * addition (subnormal fp16) assumes the default rounding mode; flush-to-zero modes do not
 * change its results because float subnormals are far below the fp16 range.
 */
#ifndef CHORUS_KERNELS_HALF_H
#define CHORUS_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t chorus__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float chorus__f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* cond ? a : b as bit masks. Written as a ternary, GCC turns the choice into branches and
 * moves the float arithmetic into one of them, where it may no longer be vectorised. */
static inline uint32_t chorus__select_u32(int cond, uint32_t a, uint32_t b)
{
    uint32_t mask = 0u - (uint32_t)(cond != 0);
    return (a & mask) | (b & ~mask);
}

static inline float chorus__half_to_float_inline(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    /* Normal numbers keep their mantissa; the exponent is rebiased from 15 to 127. */
    uint32_t normal = (em << 13) + ((127u - 15u) << 23);
    /* Infinity and NaN need the all-ones float exponent instead. */
    uint32_t infnan = (em << 13) | 0x7f800000u;
    /* A subnormal m * 2^-24 is (0.5 + m * 2^-24) - 0.5, where the first term is m placed
     * in the mantissa of 0.5; the subtraction is exact. Zero falls out as +0. */
    uint32_t sub = chorus__f32_bits(chorus__f32_from_bits(em | 0x3f000000u) - 0.5f);
    uint32_t mag =
        chorus__select_u32(em < 0x0400u, sub, chorus__select_u32(em >= 0x7c00u, infnan, normal));
    return chorus__f32_from_bits(sign | mag);
}

static inline uint16_t chorus__float_to_half_inline(float f)
{
    uint32_t x = chorus__f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    /* Normal range: rebias, then add 0x0fff plus the lowest kept bit before dropping 13
     * bits, which rounds to nearest even; a carry out of the mantissa bumps the exponent,
     * which is right, and values from 65520 up reach 0x7c00 (infinity). */
    uint32_t normal = (ax - ((127u - 15u) << 23) + 0x0fffu + ((ax >> 13) & 1u)) >> 13;
    /* Below 2^-14 the result is subnormal: adding 0.5 makes the hardware round |f| to a
     * multiple of 2^-24 (the ulp of 0.5), ties to even, and the count of those is the
     * fp16 bit pattern (1024 is the smallest normal, also right). */
    uint32_t sub = chorus__f32_bits(chorus__f32_from_bits(ax) + 0.5f) - 0x3f000000u;
    uint32_t nan = 0x7e00u | ((ax >> 13) & 0x03ffu);
    uint32_t mag =
        chorus__select_u32(ax > 0x7f800000u, nan,
                           chorus__select_u32(ax >= 0x477ff000u, 0x7c00u,
                                              chorus__select_u32(ax >= 0x38800000u, normal, sub)));
    return (uint16_t)(sign | mag);
}

static inline float chorus__bf16_to_float_inline(uint16_t b)
{
    return chorus__f32_from_bits((uint32_t)b << 16);
}

static inline uint16_t chorus__float_to_bf16_inline(float f)
{
    uint32_t x = chorus__f32_bits(f);
    /* Adding 0x7fff plus the lowest kept bit rounds to nearest even; the carry turns the
     * largest floats into infinity. NaN must not round (it could become infinity), so it
     * is truncated and made quiet instead. */
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;
    return (uint16_t)chorus__select_u32((x & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

#endif
