/*
 * chorus_kernel_reduce_exact (kernels.h) on the CPU: the exact sum of n sources, divided and
 * rounded once, so that the bytes do not depend on the order of the sources.
 *
 * Two paths, both correctly rounded, so they give the same bytes for any element either can
 * take (the unit test checks both against an independent reference):
 *
 * - The fast path (fp16, bf16, float32). Every value of these formats is a double, and the
 *   double sum of an element's values is exact when they span few enough bits: all are
 *   multiples of the quantum of the smallest nonzero one, and |sum| < n * 2^(emax + 1), so
 *   the sum fits a 53-bit significand when (emax - emin) + P + ceil(log2 n) <= 53 (P: the
 *   format's significand bits; emin, emax: the binades of the smallest nonzero and of the
 *   largest magnitude). Every partial sum obeys the same bound, so each addition is exact in
 *   any order, and so is the sign of a zero sum (-0 only from -0 + -0; the sum starts from
 *   -0, the identity). The check needs the smallest nonzero and the largest magnitude, kept as
 *   the unsigned minimum and maximum of the bits without sign. fp16 spans 30 binades, so its
 *   sums are always exact up to 8192 sources and it needs only the maximum (for specials).
 *
 *   Division. With 1 < d < 2^(53 - P) the double quotient q = RN53(sum / d) may be rounded
 *   once more without harm. A second rounding can only differ from one when q lands exactly on
 *   a halfway point M between two values of the format while sum / d != M (no halfway point
 *   can lie strictly between them: it is a double, and rounding is monotone). Then sum - M d
 *   is nonzero, at most d * 2^(e - 53) in magnitude (half an ulp of M, times d; M in
 *   [2^e, 2^(e+1))), and a multiple of the coarser of two quanta: M's, at least 2^(e - P) (M
 *   has at most P + 1 bits), which needs d >= 2^(53 - P); or sum's, at least
 *   2^(e + floor(log2 d) - 52) as |sum| >= 2^e d (1 - 2^-53), which exceeds d * 2^(e - 53)
 *   unless d is a power of two, and then the division is exact. Larger divisors take the
 *   exact path.
 *
 *   Rounding the double: float32 by the hardware conversion; bf16 and fp16 by converting to
 *   float rounded to odd (the hardware's nearest float, moved toward zero when it rounded
 *   away from it, with its last bit set when inexact), whose 24 bits hold the double's
 *   sticky information, then by half.h's round-to-nearest-even conversion: rounding to odd
 *   with 2 or more extra bits, then to nearest, is one correct rounding.
 *
 *   The fast path declines, per element: an exponent spread too wide, a NaN or an infinity,
 *   and, when MXCSR has flush-to-zero or denormals-are-zero set (some frameworks set them;
 *   off x86-64 always, as portable code cannot tell), a float32 or bf16 subnormal input or
 *   result, which the hardware would then flush (fp16's subnormals are normal floats, and
 *   its rounding meets no float subnormal it needs). Gradients (a few binades apart) take
 *   the fast path for nearly every element.
 * - The exact path (exact_sum.h, the code the CUDA kernel runs): for the declined elements,
 *   for float64 (its values already fill a double: no wider hardware type holds their sum),
 *   and for calls the fast path cannot take at all (other rounding modes, large divisors,
 *   too many sources). It costs a few limbs of integer work per value and a long division
 *   when the divisor is not 1: tens of nanoseconds per element.
 *
 * The floating-point environment: the fast path's additions are exact, but its division and
 * conversions round in the current mode, so outside round-to-nearest the whole call takes the
 * exact path, which uses no floating point at all.
 *
 * Blocks. EXACT_BLOCK elements at a time: the sources are folded in groups of up to
 * EXACT_GROUP per pass over the block (each source read once, the partial sums and bits in
 * L1 between passes, as in reduce_multi.c); one more loop divides and rounds into a local
 * output block and tells whether it declined any element; if so, a scalar pass finds them
 * and redoes them by the exact path, which reads their sources again from L1; then the block
 * is copied out (with non-temporal stores when the call's traffic exceeds the last-level
 * cache, as reduce_multi.c does). Sources are read before their block of dst is written, so
 * dst may be src[0]. Full blocks run the loops with constant trip counts, which GCC's -O2
 * vectoriser needs; they are compiled twice, plain and for AVX2, like reduce_multi.c's.
 */
#include "kernels.h"

#include "exact_sum.h"
#include "half.h"
#include "reduce_ops.h"
#include "util/status.h"

#include <string.h>
#if CHORUS__KERNELS_X86
#include <xmmintrin.h>
#else
#include <fenv.h>
#endif

_Static_assert(CHORUS_EXACT_MAX_SRC <= CHORUS__EXACT_HEADROOM,
               "the exact accumulator cannot take CHORUS_EXACT_MAX_SRC additions");

/* Elements per block: 2 KiB of double partial sums, at most 1 KiB each of minimum and
 * maximum bits. */
#define EXACT_BLOCK 256
/* Sources folded per pass over a block. */
#define EXACT_GROUP 4

/* The loop bodies are inlined into callers that pass constant trip counts and group sizes:
 * GCC's -O2 vectoriser takes only loops with no scalar remainder. */
#if defined(__GNUC__)
#define EXACT_INLINE static inline __attribute__((always_inline))
#else
#define EXACT_INLINE static inline
#endif

/* What every block of one call needs. */
typedef struct {
    int nsrc;
    int lim;     /* largest exponent spread the fast path takes; < 0: no fast path */
    int div;     /* divisor > 1 */
    uint64_t d;  /* the divisor */
    double dd;   /* the divisor as a double (exact: below 2^53 whenever lim >= 0) */
    int careful; /* flush-to-zero or denormals-are-zero may be on: decline subnormals */
} exact_call_t;

/* The fast path's spread limit for n sources of P-bit values (see above), or -1. */
static int spread_limit(int nsrc, int P)
{
    int lg = 0;

    while (lg < 31 && ((int64_t)1 << lg) < nsrc)
        lg++;
    return 53 - P - lg >= 0 ? 53 - P - lg : -1;
}

/* Whether the largest magnitude amax is an infinity or NaN, or lies more than lim binades
 * above the smallest nonzero one amin (both float bits without sign): one comparison with
 * the smaller of two thresholds. A subnormal amin counts as binade 0, one below its quantum's
 * binade, which only declines a few more elements. No threshold passes 2^32. */
static inline uint32_t beyond(uint32_t amin, uint32_t amax, int lim)
{
    uint32_t t = (amin & 0x7f800000u) + ((uint32_t)(lim + 1) << 23);

    return amax >= (t < 0x7f800000u ? t : 0x7f800000u);
}

/* Each format's value as float bits: exact, and for fp16 a normal float even for its
 * subnormals (so not subject to DAZ). */
static inline uint32_t f32_widen(uint32_t x)
{
    return x;
}

static inline uint32_t bf16_widen(uint16_t x)
{
    return (uint32_t)x << 16;
}

static inline uint32_t f16_widen(uint16_t x)
{
    return chorus__f32_bits(chorus__half_to_float_inline(x));
}

/* 0 < |x| < 2^-126: a float subnormal, which FTZ would flush. */
static inline int float_subnormal(double x)
{
    return (x < 0x1p-126) & (x > -0x1p-126) & (x != 0);
}

/* x rounded to float, to odd (see above). */
static inline float float_round_odd(double x)
{
    float f = (float)x;
    double back = (double)f;
    uint32_t inexact = back != x, away = (back > x) ^ (x < 0);

    return chorus__f32_from_bits((chorus__f32_bits(f) - (inexact & away)) | inexact);
}

static inline uint16_t double_to_bf16(double x)
{
    return chorus__float_to_bf16_inline(float_round_odd(x));
}

static inline uint16_t double_to_f16(double x)
{
    return chorus__float_to_half_inline(float_round_odd(x));
}

static inline uint32_t double_to_f32(double x)
{
    return chorus__f32_bits((float)x);
}

/* Whether a result is a subnormal the conversion could flush (FTZ). */
static inline int f32_sub_output(double x)
{
    return float_subnormal(x);
}

static inline int bf16_sub_output(double x)
{
    return float_subnormal(x);
}

static inline int f16_sub_output(double x)
{
    (void)x;
    return 0;
}

/*
 * The loops of one format NAME (element type T): every value is widened to a float first (its
 * bits by WIDEN), so that the three formats share their bookkeeping on float bits.
 * - NAME_group folds K sources, from src[s], into the block's partial sums acc, the smallest
 *   nonzero magnitude minus 1 (lo: a zero wraps to the largest value and never wins) and the
 *   largest magnitude (hi), as float bits without sign; FIRST starts them (the sum from -0,
 *   the identity of addition). LO: whether lo is kept (fp16 needs no spread check).
 * - NAME_declines tells whether the fast path declines an element, NAME_fin divides (DIV) and
 *   rounds a block and tells whether it declined any.
 */
#define EX_FOLD(x, WIDEN, LO)                                                                      \
    do {                                                                                           \
        uint32_t w_ = WIDEN((x)[j]), m_ = w_ & 0x7fffffffu, l_ = m_ - 1u;                          \
        a += (double)chorus__f32_from_bits(w_);                                                    \
        if (LO) l = l_ < l ? l_ : l;                                                               \
        h = m_ > h ? m_ : h;                                                                       \
    } while (0)

#define DEFINE_FORMAT(NAME, T, WIDEN, LO, FROM_DOUBLE)                                             \
    EXACT_INLINE void KSFX(NAME##_group)(double *restrict acc, uint32_t *restrict lo,              \
                                         uint32_t *restrict hi, const void *const *src, int s,     \
                                         int K, int FIRST, size_t i, size_t n)                     \
    {                                                                                              \
        const T *restrict x0 = (const T *)src[s] + i;                                              \
        const T *restrict x1 = K > 1 ? (const T *)src[s + 1] + i : x0;                             \
        const T *restrict x2 = K > 2 ? (const T *)src[s + 2] + i : x0;                             \
        const T *restrict x3 = K > 3 ? (const T *)src[s + 3] + i : x0;                             \
        for (size_t j = 0; j < n; j++) {                                                           \
            double a = FIRST ? -0.0 : acc[j];                                                      \
            uint32_t l = FIRST || !LO ? 0xffffffffu : lo[j], h = FIRST ? 0 : hi[j];                \
            EX_FOLD(x0, WIDEN, LO);                                                                \
            if (K > 1) EX_FOLD(x1, WIDEN, LO);                                                     \
            if (K > 2) EX_FOLD(x2, WIDEN, LO);                                                     \
            if (K > 3) EX_FOLD(x3, WIDEN, LO);                                                     \
            acc[j] = a;                                                                            \
            if (LO) lo[j] = l;                                                                     \
            hi[j] = h;                                                                             \
        }                                                                                          \
    }                                                                                              \
    /* A full block, in groups of up to EXACT_GROUP sources, each a loop of its own. */            \
    static void KSFX(NAME##_sum_full)(double *acc, uint32_t *lo, uint32_t *hi,                     \
                                      const void *const *src, int nsrc, size_t i)                  \
    {                                                                                              \
        for (int s = 0, k; s < nsrc; s += k) {                                                     \
            k = nsrc - s < EXACT_GROUP ? nsrc - s : EXACT_GROUP;                                   \
            switch (k + (s == 0 ? 4 : 0)) {                                                        \
            case 1: KSFX(NAME##_group)(acc, lo, hi, src, s, 1, 0, i, EXACT_BLOCK); break;          \
            case 2: KSFX(NAME##_group)(acc, lo, hi, src, s, 2, 0, i, EXACT_BLOCK); break;          \
            case 3: KSFX(NAME##_group)(acc, lo, hi, src, s, 3, 0, i, EXACT_BLOCK); break;          \
            case 4: KSFX(NAME##_group)(acc, lo, hi, src, s, 4, 0, i, EXACT_BLOCK); break;          \
            case 5: KSFX(NAME##_group)(acc, lo, hi, src, s, 1, 1, i, EXACT_BLOCK); break;          \
            case 6: KSFX(NAME##_group)(acc, lo, hi, src, s, 2, 1, i, EXACT_BLOCK); break;          \
            case 7: KSFX(NAME##_group)(acc, lo, hi, src, s, 3, 1, i, EXACT_BLOCK); break;          \
            default: KSFX(NAME##_group)(acc, lo, hi, src, s, 4, 1, i, EXACT_BLOCK); break;         \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* The last, partial block: one source per pass (scalar loops). */                             \
    static void KSFX(NAME##_sum_part)(double *acc, uint32_t *lo, uint32_t *hi,                     \
                                      const void *const *src, int nsrc, size_t i, size_t n)        \
    {                                                                                              \
        KSFX(NAME##_group)(acc, lo, hi, src, 0, 1, 1, i, n);                                       \
        for (int s = 1; s < nsrc; s++)                                                             \
            KSFX(NAME##_group)(acc, lo, hi, src, s, 1, 0, i, n);                                   \
    }                                                                                              \
    /* An infinity or NaN, a spread beyond lim, or (CAREFUL) a float subnormal input or            \
     * result. */                                                                                  \
    EXACT_INLINE uint32_t KSFX(NAME##_declines)(const uint32_t *lo, const uint32_t *hi, size_t j,  \
                                                double x, int lim, int CAREFUL)                    \
    {                                                                                              \
        uint32_t amax = hi[j], amin = LO ? lo[j] + 1u : 0u;                                        \
        uint32_t b = LO ? beyond(amin, amax, lim) : amax >= 0x7f800000u;                           \
        if (CAREFUL) b |= (uint32_t)(((amin - 1u) < 0x007fffffu) | NAME##_sub_output(x));          \
        return b;                                                                                  \
    }                                                                                              \
    EXACT_INLINE uint32_t KSFX(NAME##_fin)(                                                        \
        T *restrict out, const double *restrict acc, const uint32_t *restrict lo,                  \
        const uint32_t *restrict hi, size_t n, int lim, double dd, int DIV, int CAREFUL)           \
    {                                                                                              \
        uint32_t any = 0;                                                                          \
        for (size_t j = 0; j < n; j++) {                                                           \
            double x = DIV ? acc[j] / dd : acc[j];                                                 \
            any |= KSFX(NAME##_declines)(lo, hi, j, x, lim, CAREFUL);                              \
            out[j] = (T)FROM_DOUBLE(x);                                                            \
        }                                                                                          \
        return any;                                                                                \
    }                                                                                              \
    /* One block: the fast loops, then the exact path for what they declined. */                   \
    static void KSFX(NAME##_block)(void *out_, const void *const *src, size_t i, size_t n,         \
                                   const exact_call_t *c)                                          \
    {                                                                                              \
        double acc[EXACT_BLOCK];                                                                   \
        uint32_t lo[EXACT_BLOCK], hi[EXACT_BLOCK];                                                 \
        T *out = out_;                                                                             \
        const int lim = c->lim, careful = c->careful;                                              \
        const double dd = c->dd;                                                                   \
        uint32_t any;                                                                              \
        if (n == EXACT_BLOCK) {                                                                    \
            KSFX(NAME##_sum_full)(acc, lo, hi, src, c->nsrc, i);                                   \
            switch (c->div + 2 * careful) {                                                        \
            case 0: any = KSFX(NAME##_fin)(out, acc, lo, hi, EXACT_BLOCK, lim, dd, 0, 0); break;   \
            case 1: any = KSFX(NAME##_fin)(out, acc, lo, hi, EXACT_BLOCK, lim, dd, 1, 0); break;   \
            case 2: any = KSFX(NAME##_fin)(out, acc, lo, hi, EXACT_BLOCK, lim, dd, 0, 1); break;   \
            default: any = KSFX(NAME##_fin)(out, acc, lo, hi, EXACT_BLOCK, lim, dd, 1, 1); break;  \
            }                                                                                      \
        } else {                                                                                   \
            KSFX(NAME##_sum_part)(acc, lo, hi, src, c->nsrc, i, n);                                \
            any = KSFX(NAME##_fin)(out, acc, lo, hi, n, lim, dd, c->div, careful);                 \
        }                                                                                          \
        for (size_t j = 0; any && j < n; j++) {                                                    \
            double x = c->div ? acc[j] / dd : acc[j];                                              \
            if (KSFX(NAME##_declines)(lo, hi, j, x, lim, careful))                                 \
                out[j] = chorus__exact_elem_##NAME(src, c->nsrc, i + j, c->d);                     \
        }                                                                                          \
    }

#define DEFINE_EXACT_ALL()                                                                         \
    DEFINE_FORMAT(f32, uint32_t, f32_widen, 1, double_to_f32)                                      \
    DEFINE_FORMAT(bf16, uint16_t, bf16_widen, 1, double_to_bf16)                                   \
    DEFINE_FORMAT(f16, uint16_t, f16_widen, 0, double_to_f16)

#define KSFX(f) f
DEFINE_EXACT_ALL()
#undef KSFX

#if CHORUS__KERNELS_X86
CHORUS__AVX2_BEGIN
#define KSFX(f) f##_avx2
DEFINE_EXACT_ALL()
#undef KSFX
CHORUS__AVX2_END
#endif

typedef void (*block_fn_t)(void *out, const void *const *src, size_t i, size_t n,
                           const exact_call_t *c);

/* The exact path alone, for float64 and for calls the fast path cannot take at all. */
#define DEFINE_EXACT_BLOCK(NAME, OUT_T)                                                            \
    static void NAME##_exact_block(void *out_, const void *const *src, size_t i, size_t n,         \
                                   const exact_call_t *c)                                          \
    {                                                                                              \
        OUT_T *out = out_;                                                                         \
        for (size_t j = 0; j < n; j++)                                                             \
            out[j] = chorus__exact_elem_##NAME(src, c->nsrc, i + j, c->d);                         \
    }
DEFINE_EXACT_BLOCK(f16, uint16_t)
DEFINE_EXACT_BLOCK(bf16, uint16_t)
DEFINE_EXACT_BLOCK(f32, uint32_t)
DEFINE_EXACT_BLOCK(f64, uint64_t)

/* The floating-point environment: whether it rounds to nearest, and whether it may flush
 * subnormals (*careful). On x86-64 the fast path's arithmetic is SSE, whose modes are MXCSR's
 * (glibc's fegetround reads the x87 control word); elsewhere flushing is not visible to
 * portable code, so the fast path always declines subnormals there. */
static int rounds_to_nearest(int *careful)
{
#if CHORUS__KERNELS_X86
    unsigned int csr = _mm_getcsr();
    *careful = (csr & 0x8040u) != 0; /* FTZ, DAZ */
    return (csr & 0x6000u) == 0;
#else
    *careful = 1;
    return fegetround() == FE_TONEAREST;
#endif
}

static int significand_bits(chorus_dtype_t dtype)
{
    switch (dtype) {
    case CHORUS_FLOAT16: return 11;
    case CHORUS_BFLOAT16: return 8;
    case CHORUS_FLOAT32: return 24;
    case CHORUS_FLOAT64: return 53;
    default: return 0;
    }
}

/* The fast path's limit for this call, or -1 when the call takes the exact path only. */
static int call_limit(chorus_dtype_t dtype, int nsrc, uint64_t divisor, int *careful)
{
    int P = significand_bits(dtype), lim = spread_limit(nsrc, P);

    if (!rounds_to_nearest(careful) || dtype == CHORUS_FLOAT64 ||
        divisor >= ((uint64_t)1 << (53 - P)))
        return -1;
    /* fp16 checks no spread: its whole range (29 binades apart at most) must fit */
    if (dtype == CHORUS_FLOAT16 && lim < 29) return -1;
    return lim;
}

static block_fn_t pick_block(chorus_dtype_t dtype, int fast)
{
#if CHORUS__KERNELS_X86
    int avx2 = chorus__kernel_have_avx2();
#define FAST(NAME) (avx2 ? NAME##_block_avx2 : NAME##_block)
#else
#define FAST(NAME) NAME##_block
#endif
    switch (dtype) {
    case CHORUS_FLOAT16: return fast ? FAST(f16) : f16_exact_block;
    case CHORUS_BFLOAT16: return fast ? FAST(bf16) : bf16_exact_block;
    case CHORUS_FLOAT32: return fast ? FAST(f32) : f32_exact_block;
    default: return f64_exact_block;
    }
#undef FAST
}

static chorus_status_t check_args(void *dst, const void *const *src, int nsrc, size_t count,
                                  chorus_dtype_t dtype, uint64_t divisor)
{
    if (significand_bits(dtype) == 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "kernel reduce_exact: dtype %d is not a floating-point type",
                             (int)dtype);
    }
    if (nsrc < 1 || nsrc > CHORUS_EXACT_MAX_SRC || divisor == 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "kernel reduce_exact: %d sources (1..%d), divisor %llu (>= 1)", nsrc,
                             CHORUS_EXACT_MAX_SRC, (unsigned long long)divisor);
    }
    if (count == 0) return CHORUS_SUCCESS;
    if (dst == NULL || src == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "kernel reduce_exact: dst %p, src %p for %zu elements", dst,
                             (const void *)src, count);
    }
    for (int s = 0; s < nsrc; s++) {
        if (src[s] == NULL) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "kernel reduce_exact: source %d of %d is NULL", s, nsrc);
        }
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_kernel_reduce_exact(void *dst, const void *const *src, int nsrc,
                                           size_t count, chorus_dtype_t dtype, uint64_t divisor)
{
    chorus_status_t st = check_args(dst, src, nsrc, count, dtype, divisor);
    union {
        uint16_t h[EXACT_BLOCK];
        uint32_t f[EXACT_BLOCK];
        uint64_t d[EXACT_BLOCK];
    } out; /* one block of any format */
    size_t esize, bbytes;
    exact_call_t c;
    block_fn_t fn;
    int stream;

    if (st != CHORUS_SUCCESS || count == 0) return st;
    esize = chorus_dtype_size(dtype);
    bbytes = EXACT_BLOCK * esize;
    c.nsrc = nsrc;
    c.d = divisor;
    c.div = divisor > 1;
    c.dd = (double)divisor;
    c.lim = call_limit(dtype, nsrc, divisor, &c.careful);
    fn = pick_block(dtype, c.lim >= 0);
    stream = ((uintptr_t)dst & 15u) == 0 &&
             chorus__kernel_use_stream((size_t)(nsrc + 1) * count * esize);

    for (size_t i = 0; i < count; i += EXACT_BLOCK) {
        size_t n = count - i < EXACT_BLOCK ? count - i : EXACT_BLOCK;
        char *d = (char *)dst + i * esize;

        /* Straight into dst, unless dst is src[0], which the exact path may still read after
         * the block is rounded, or the block is to be streamed out. */
        if (!stream && dst != src[0]) {
            fn(d, src, i, n, &c);
            continue;
        }
        fn(&out, src, i, n, &c);
        if (stream && n == EXACT_BLOCK)
            chorus__kernel_stream(d, &out, bbytes);
        else
            memcpy(d, &out, n * esize);
    }
    if (stream) chorus__kernel_stream_fence();
    return CHORUS_SUCCESS;
}
