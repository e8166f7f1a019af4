/*
 * The element code of chorus_kernel_reduce_exact (kernels.h): the exact sum of one element's
 * sources, divided exactly and rounded once. Written once, in portable C on the bits of the
 * values, for three users: the CPU kernel (reduce_exact.c) for the elements its fast path
 * cannot take and for float64, the CUDA kernel (reduce_cuda.cu), and a host unit test
 * (tests/unit/test_reduce_exact.c) that runs the CUDA kernel's loop with cc and compares it
 * with the CPU kernel and with an independent reference.
 *
 * CHORUS_EXACT_FN makes each function `__host__ __device__ __forceinline__` under nvcc and
 * `static inline` under a C compiler. Nothing here uses floating-point arithmetic, libc or a
 * 128-bit type: values come in and go out as their bits, so the result cannot depend on
 * rounding modes, flush-to-zero or the compiler. The one builtin, a count of leading zeros,
 * is guarded and has a portable fallback.
 *
 * The accumulator (Kulisch style). A value of a format is m * 2^p units of the format's
 * smallest subnormal, with m < 2^53 and 0 <= p < 2^W - 2 (p = biased exponent - 1, or 0 for
 * subnormals). The accumulator holds sum(limb[k] * 2^(32k)) in those units: 32-bit digits in
 * int64 limbs. Adding a value adds its m, shifted by p mod 32, as 2 or 3 digits of less
 * than 2^32 each into limbs p/32, p/32 + 1 (and + 2 for float64), with the value's sign, and
 * carries nothing; so limbs stay below N * 2^32 in magnitude after N additions, and
 * CHORUS__EXACT_HEADROOM = 2^31 additions fit in an int64 before any carry (kernels.h sets
 * CHORUS_EXACT_MAX_SRC below it). Carries are propagated once, when rounding.
 *
 * The limbs cover the whole range of the format plus the headroom (float64: 2046 exponents,
 * 53 mantissa bits and 31 bits of growth, 67 limbs), but an element's values usually touch
 * a few: the accumulator keeps the range [lo, hi] of limbs it holds and normalises only that.
 * The narrow formats (3 or 10 limbs) zero all their limbs at the start, which costs a few
 * stores and no data-dependent branch; float64 zeroes a limb only when the range first grows
 * over it, so its start costs nothing either (and the CUDA kernel's per-thread local memory
 * traffic stays small).
 *
 * Rounding. The carried and sign-corrected magnitude is divided by the divisor digit by digit
 * (long division; each step divides a value below divisor * 2^32, which fits 64 bits when
 * the divisor is below 2^32; larger divisors go bit by bit), only as far as three quotient
 * digits after the first nonzero one: enough for a 64-bit window starting at its leading
 * bit, while the remainder and the digits not reached become the sticky bit. The window is
 * rounded to nearest-even at the format's precision, or at the subnormal quantum where the
 * result is subnormal, and encoded as (lsb << (P - 1)) + mantissa, where lsb is the position
 * of the result's last bit in units of the smallest subnormal: this one formula gives
 * subnormals, the carry of a mantissa that rounds up into the exponent, and infinity for a
 * result that rounds past the largest finite value, as IEEE round-to-nearest does.
 *
 * Specials and zeros (kernels.h): a NaN, or both infinities, give the canonical quiet NaN;
 * otherwise an infinity gives itself; a zero sum is -0 only when every input is -0; a
 * nonzero sum whose quotient rounds to zero keeps its sign.
 */
#ifndef CHORUS_KERNELS_EXACT_SUM_H
#define CHORUS_KERNELS_EXACT_SUM_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define CHORUS_EXACT_FN __host__ __device__ __forceinline__
#else
#define CHORUS_EXACT_FN static inline
#endif

/* Additions an accumulator takes before a limb could overflow (see above). */
#define CHORUS__EXACT_HEADROOM ((int64_t)1 << 31)

/* Limbs per format: the highest limb an addition touches (largest p over 32, plus 1 or 2
 * for the digits of the mantissa), plus one for the carries of 2^31 additions. */
#define CHORUS__EXACT_LIMBS_F16 3   /* p <= 29: limbs 0..1, carry into 2 */
#define CHORUS__EXACT_LIMBS_BF16 10 /* p <= 253: limbs 7..8, carry into 9 */
#define CHORUS__EXACT_LIMBS_F32 10
#define CHORUS__EXACT_LIMBS_F64 67 /* p <= 2045: limbs 63..65, carry into 66 */

/* flags */
#define CHORUS__EXACT_NAN 1u
#define CHORUS__EXACT_PINF 2u
#define CHORUS__EXACT_NINF 4u
#define CHORUS__EXACT_NOT_NEGZERO 8u /* an input other than -0 was added */

typedef struct {
    int64_t *limb; /* the caller's array of CHORUS__EXACT_LIMBS_<format> limbs */
    int lo, hi;    /* limbs [lo, hi] hold the value; none while hi < lo */
    int zeroed;    /* every limb was zeroed at the start: no lazy zeroing */
    unsigned flags;
} chorus_exact_acc_t;

/* Starts an empty accumulator on limbs. nzero > 0 zeroes that many limbs now (the narrow
 * formats: a few stores, and no data-dependent branch when the range grows); 0 zeroes each
 * limb when the range first grows over it (float64, whose 67 limbs are mostly unused). */
CHORUS_EXACT_FN void chorus__exact_init(chorus_exact_acc_t *a, int64_t *limbs, int nzero)
{
    for (int k = 0; k < nzero; k++)
        limbs[k] = 0;
    a->limb = limbs;
    a->lo = 1 << 30;
    a->hi = -1;
    a->zeroed = nzero > 0;
    a->flags = 0;
}

/* Makes limbs [k, top] part of the value, zeroing those that were not. */
CHORUS_EXACT_FN void chorus__exact_cover(chorus_exact_acc_t *a, int k, int top)
{
    if (a->zeroed) {
        a->lo = k < a->lo ? k : a->lo;
        a->hi = top > a->hi ? top : a->hi;
        return;
    }
    if (a->hi < a->lo) {
        for (int j = k; j <= top; j++)
            a->limb[j] = 0;
        a->lo = k;
        a->hi = top;
        return;
    }
    while (a->lo > k)
        a->limb[--a->lo] = 0;
    while (a->hi < top)
        a->limb[++a->hi] = 0;
}

/* Adds (-1)^neg * m * 2^p units; m < 2^53, and m < 2^32 when ndig is 2. */
CHORUS_EXACT_FN void chorus__exact_add_mag(chorus_exact_acc_t *a, int neg, uint64_t m, int p,
                                           int ndig)
{
    int k = p >> 5;
    unsigned off = (unsigned)p & 31u;
    /* Digit 0 is the low 32 bits of m << off; t is m >> (32 - off), the digits above (the
     * shift is 1..32, never 64, so no bit of m is lost or undefined). */
    int64_t d0 = (int64_t)(((m & 0xffffffffu) << off) & 0xffffffffu);
    uint64_t t = m >> (32u - off);
    int64_t d1 = (int64_t)(t & 0xffffffffu), d2 = (int64_t)(t >> 32);
    int64_t mask = -(int64_t)neg; /* the sign is data: negate through a mask, no branch */

    d0 = (d0 ^ mask) - mask;
    d1 = (d1 ^ mask) - mask;
    d2 = (d2 ^ mask) - mask;
    chorus__exact_cover(a, k, k + ndig - 1);
    a->limb[k] += d0;
    a->limb[k + 1] += d1;
    if (ndig > 2) a->limb[k + 2] += d2;
}

/* Adds the value with bits x of the format with P significand bits (implicit bit included)
 * and W exponent bits; ndig as for chorus__exact_add_mag. */
CHORUS_EXACT_FN void chorus__exact_add_bits(chorus_exact_acc_t *a, uint64_t x, int P, int W,
                                            int ndig)
{
    const uint64_t fmask = ((uint64_t)1 << (P - 1)) - 1;
    const uint64_t emax = ((uint64_t)1 << W) - 1;
    uint64_t sign = x >> (P - 1 + W), e = (x >> (P - 1)) & emax, f = x & fmask;

    if (x != (uint64_t)1 << (P - 1 + W)) a->flags |= CHORUS__EXACT_NOT_NEGZERO; /* not -0 */
    if (e == emax) {
        a->flags |= f != 0 ? CHORUS__EXACT_NAN : sign ? CHORUS__EXACT_NINF : CHORUS__EXACT_PINF;
        return;
    }
    if (e == 0 && f == 0) return;
    if (e != 0)
        chorus__exact_add_mag(a, (int)sign, f | (fmask + 1), (int)e - 1, ndig);
    else
        chorus__exact_add_mag(a, (int)sign, f, 0, ndig);
}

CHORUS_EXACT_FN void chorus__exact_add_f16(chorus_exact_acc_t *a, uint16_t x)
{
    chorus__exact_add_bits(a, x, 11, 5, 2);
}

CHORUS_EXACT_FN void chorus__exact_add_bf16(chorus_exact_acc_t *a, uint16_t x)
{
    chorus__exact_add_bits(a, x, 8, 8, 2);
}

CHORUS_EXACT_FN void chorus__exact_add_f32(chorus_exact_acc_t *a, uint32_t x)
{
    chorus__exact_add_bits(a, x, 24, 8, 2);
}

CHORUS_EXACT_FN void chorus__exact_add_f64(chorus_exact_acc_t *a, uint64_t x)
{
    chorus__exact_add_bits(a, x, 53, 11, 3);
}

/* floor(v / 2^32) of a limb, without right-shifting a negative number (implementation
 * defined in C): v minus its low digit is a multiple of 2^32, so the division is exact. */
CHORUS_EXACT_FN int64_t chorus__exact_carry_of(int64_t v)
{
    return (v - (int64_t)((uint64_t)v & 0xffffffffu)) / ((int64_t)1 << 32);
}

/* Propagates the carries: limbs [lo, hi) become digits in [0, 2^32) and limb hi the signed
 * top, which is negative exactly when the value is. A top of 2^32 or more moves up a limb
 * (the limb counts above leave room for it). */
CHORUS_EXACT_FN void chorus__exact_carry(chorus_exact_acc_t *a)
{
    for (int k = a->lo; k < a->hi; k++) {
        int64_t c = chorus__exact_carry_of(a->limb[k]);
        a->limb[k] -= c * ((int64_t)1 << 32);
        a->limb[k + 1] += c;
    }
    if (a->limb[a->hi] > (int64_t)0xffffffff) {
        int64_t c = chorus__exact_carry_of(a->limb[a->hi]);
        a->limb[a->hi] -= c * ((int64_t)1 << 32);
        a->limb[++a->hi] = c;
    }
}

/* Leaves the magnitude as digits [lo, hi] with limb hi nonzero (hi < lo: zero) and returns
 * 1 when the value is negative. The sign is data: a negative value is negated (each limb
 * through a mask, no branch) and carried again. */
CHORUS_EXACT_FN int chorus__exact_normalise(chorus_exact_acc_t *a)
{
    int64_t mask;

    if (a->hi < a->lo) return 0;
    chorus__exact_carry(a);
    mask = a->limb[a->hi] < 0 ? -1 : 0;
    for (int k = a->lo; k <= a->hi; k++)
        a->limb[k] = (a->limb[k] ^ mask) - mask;
    chorus__exact_carry(a);
    while (a->hi >= a->lo && a->limb[a->hi] == 0)
        a->hi--;
    return (int)(mask & 1);
}

/* Digit j of the magnitude: 0 outside [lo, hi], in particular below limb 0 (the fraction
 * digits of the quotient). */
CHORUS_EXACT_FN uint32_t chorus__exact_digit(const chorus_exact_acc_t *a, int j)
{
    return j >= a->lo && j <= a->hi ? (uint32_t)a->limb[j] : 0u;
}

/* One step of the long division: (r * 2^32 + digit) / d, r < d, the new remainder in r. */
CHORUS_EXACT_FN uint32_t chorus__exact_div_step(uint64_t *r, uint32_t digit, uint64_t d)
{
    uint32_t q = 0;

    if (d == 1) return digit;
    if (d <= 0xffffffffu) {
        uint64_t t = (*r << 32) | digit;
        *r = t % d;
        return (uint32_t)(t / d);
    }
    /* d >= 2^32: one bit at a time; 2r + 1 may pass 2^64, whose bit `top` keeps. */
    for (int b = 31; b >= 0; b--) {
        uint64_t top = *r >> 63;
        *r = (*r << 1) | ((digit >> b) & 1u);
        q <<= 1;
        if (top || *r >= d) {
            *r -= d;
            q |= 1u;
        }
    }
    return q;
}

/* Leading zero bits of a nonzero 32-bit value: the hardware's count where the compiler
 * offers it, else by halving. */
CHORUS_EXACT_FN int chorus__exact_clz32(uint32_t v)
{
#if defined(__CUDA_ARCH__)
    return __clz((int)v);
#elif defined(__GNUC__) || defined(__clang__)
    return __builtin_clz(v);
#else
    int n = 0;

    if (v <= 0x0000ffffu) n += 16, v <<= 16;
    if (v <= 0x00ffffffu) n += 8, v <<= 8;
    if (v <= 0x0fffffffu) n += 4, v <<= 4;
    if (v <= 0x3fffffffu) n += 2, v <<= 2;
    if (v <= 0x7fffffffu) n += 1;
    return n;
#endif
}

/* The accumulated value divided by d (>= 1), rounded to nearest-even in the format with P
 * significand bits and W exponent bits: its bits, sign included. Consumes the
 * accumulator. */
CHORUS_EXACT_FN uint64_t chorus__exact_round(chorus_exact_acc_t *a, uint64_t d, int P, int W)
{
    const uint64_t inf = (((uint64_t)1 << W) - 1) << (P - 1);
    const uint64_t signbit = (uint64_t)1 << (P - 1 + W);
    uint64_t sign, r = 0, w, mant, up;
    uint32_t q0, q1, q2;
    int j, lz, e, lsb, drop, sticky;

    if ((a->flags & CHORUS__EXACT_NAN) || (a->flags & (CHORUS__EXACT_PINF | CHORUS__EXACT_NINF)) ==
                                              (CHORUS__EXACT_PINF | CHORUS__EXACT_NINF))
        return inf | ((uint64_t)1 << (P - 2));
    if (a->flags & CHORUS__EXACT_PINF) return inf;
    if (a->flags & CHORUS__EXACT_NINF) return signbit | inf;
    sign = chorus__exact_normalise(a) ? signbit : 0;
    if (a->hi < a->lo) return (a->flags & CHORUS__EXACT_NOT_NEGZERO) ? 0 : signbit;

    /* Quotient digits from the top until the first nonzero one, q0 at digit j (j < 0: a
     * fraction digit; at most two are needed, since d < 2^64), and the two after it. */
    for (j = a->hi;; j--) {
        q0 = chorus__exact_div_step(&r, chorus__exact_digit(a, j), d);
        if (q0 != 0) break;
    }
    q1 = chorus__exact_div_step(&r, chorus__exact_digit(a, j - 1), d);
    q2 = chorus__exact_div_step(&r, chorus__exact_digit(a, j - 2), d);
    sticky = r != 0;
    for (int k = a->lo; k < j - 2; k++)
        sticky |= a->limb[k] != 0;

    /* The 64 bits from the leading one down; q2's bits below them join the sticky bit. */
    lz = chorus__exact_clz32(q0);
    w = ((uint64_t)q0 << (32 + lz)) | ((uint64_t)q1 << lz) | ((uint64_t)q2 >> (32 - lz));
    sticky |= (((uint64_t)q2 << lz) & 0xffffffffu) != 0;
    e = 32 * j + 31 - lz; /* position of the leading one; bit 0 is the smallest subnormal */

    lsb = e - (P - 1) > 0 ? e - (P - 1) : 0;
    drop = 63 - (e - lsb); /* bits of w below the result's last bit */
    if (drop > 64) {
        mant = 0, up = 0; /* below half the smallest subnormal */
    } else if (drop == 64) {
        mant = 0, up = sticky || (w << 1) != 0; /* the round bit is w's leading one */
    } else {
        uint64_t half = (uint64_t)1 << (drop - 1);
        mant = w >> drop;
        up = (w & half) && (sticky || (w & (half - 1)) != 0 || (mant & 1));
    }
    if (lsb > (1 << W) - 3) return sign | inf;
    return sign | (((uint64_t)lsb << (P - 1)) + mant + up);
}

/* One output element from nsrc sources (the CUDA kernel's loop body): src[s] are arrays of
 * the format's bits, element i of each is added, the sum divided by d and rounded. */
CHORUS_EXACT_FN uint16_t chorus__exact_elem_f16(const void *const *src, int nsrc, size_t i,
                                                uint64_t d)
{
    int64_t limbs[CHORUS__EXACT_LIMBS_F16];
    chorus_exact_acc_t a;

    chorus__exact_init(&a, limbs, CHORUS__EXACT_LIMBS_F16);
    for (int s = 0; s < nsrc; s++)
        chorus__exact_add_f16(&a, ((const uint16_t *)src[s])[i]);
    return (uint16_t)chorus__exact_round(&a, d, 11, 5);
}

CHORUS_EXACT_FN uint16_t chorus__exact_elem_bf16(const void *const *src, int nsrc, size_t i,
                                                 uint64_t d)
{
    int64_t limbs[CHORUS__EXACT_LIMBS_BF16];
    chorus_exact_acc_t a;

    chorus__exact_init(&a, limbs, CHORUS__EXACT_LIMBS_BF16);
    for (int s = 0; s < nsrc; s++)
        chorus__exact_add_bf16(&a, ((const uint16_t *)src[s])[i]);
    return (uint16_t)chorus__exact_round(&a, d, 8, 8);
}

CHORUS_EXACT_FN uint32_t chorus__exact_elem_f32(const void *const *src, int nsrc, size_t i,
                                                uint64_t d)
{
    int64_t limbs[CHORUS__EXACT_LIMBS_F32];
    chorus_exact_acc_t a;

    chorus__exact_init(&a, limbs, CHORUS__EXACT_LIMBS_F32);
    for (int s = 0; s < nsrc; s++)
        chorus__exact_add_f32(&a, ((const uint32_t *)src[s])[i]);
    return (uint32_t)chorus__exact_round(&a, d, 24, 8);
}

CHORUS_EXACT_FN uint64_t chorus__exact_elem_f64(const void *const *src, int nsrc, size_t i,
                                                uint64_t d)
{
    int64_t limbs[CHORUS__EXACT_LIMBS_F64];
    chorus_exact_acc_t a;

    chorus__exact_init(&a, limbs, 0);
    for (int s = 0; s < nsrc; s++)
        chorus__exact_add_f64(&a, ((const uint64_t *)src[s])[i]);
    return chorus__exact_round(&a, d, 53, 11);
}

#endif
