/*
 * chorus_kernel_reduce_exact (kernels/kernels.h) and its element code (kernels/exact_sum.h,
 * which the CUDA kernel runs) against an independent reference written here.
 *
 * The reference is deliberately plain and shares nothing with exact_sum.h: every input is
 * decoded by its fields into an integer multiple of the format's smallest subnormal, the
 * positive and the negative ones are summed separately as wide unsigned integers (arrays of
 * 32-bit words, schoolbook addition) and subtracted at the end; the magnitude, shifted left by
 * 96 bits, is divided by the divisor bit by bit; and the quotient is rounded to nearest-even
 * by reading its bits, with the exponent and the subnormal case worked out explicitly.
 *
 * Every case compares, element by element and byte for byte: the CPU kernel with the
 * reference, and the element code run on the host in the CUDA kernel's loop (one call of
 * chorus__exact_elem_<format> per element) with the CPU kernel. Many cases also permute the
 * sources and check the bytes do not move. Inputs cover every format over its whole range
 * (subnormals included), narrow ranges (the CPU kernel's fast path), cancellation, exact ties,
 * the overflow threshold, signed zeros and the specials, nsrc 1..9 and 1000, divisors 1, 2,
 * 3, 7, 8, nsrc and two larger than 2^32; then aliasing, argument checks, the streaming
 * stores, the baseline (non-AVX2) loops and other floating-point environments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "exact_sum.h"
#include "kernels.h"

#include <fenv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#endif

/* reduce_ops.h is internal to kernels/; as test_kernels.c, the tests use its switches that
 * force the non-temporal path and the baseline (non-AVX2) loops. */
void chorus__kernel_set_stream_threshold(size_t traffic);
void chorus__kernel_force_baseline(int on);

/* ---- Deterministic random numbers ---- */

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* ---- Formats ---- */

typedef struct {
    chorus_dtype_t dtype;
    int P; /* significand bits, the implicit one included */
    int W; /* exponent bits */
    size_t size;
    const char *name;
} fmt_t;

static const fmt_t FMTS[4] = {
    {CHORUS_FLOAT16, 11, 5, 2, "float16"},
    {CHORUS_BFLOAT16, 8, 8, 2, "bfloat16"},
    {CHORUS_FLOAT32, 24, 8, 4, "float32"},
    {CHORUS_FLOAT64, 53, 11, 8, "float64"},
};

static uint64_t emax_field(const fmt_t *f)
{
    return ((uint64_t)1 << f->W) - 1;
}

static uint64_t frac_mask(const fmt_t *f)
{
    return ((uint64_t)1 << (f->P - 1)) - 1;
}

static uint64_t make(const fmt_t *f, int neg, uint64_t e, uint64_t frac)
{
    return ((uint64_t)neg << (f->P - 1 + f->W)) | (e << (f->P - 1)) | (frac & frac_mask(f));
}

static uint64_t neg_of(const fmt_t *f, uint64_t x)
{
    return x ^ ((uint64_t)1 << (f->P - 1 + f->W));
}

static uint64_t max_finite(const fmt_t *f)
{
    return make(f, 0, emax_field(f) - 1, frac_mask(f));
}

static uint64_t pos_inf(const fmt_t *f)
{
    return make(f, 0, emax_field(f), 0);
}

static uint64_t canon_nan(const fmt_t *f)
{
    return make(f, 0, emax_field(f), (uint64_t)1 << (f->P - 2));
}

/* ---- The reference: wide unsigned integers ---- */

#define NW 80 /* 2560 bits: float64's range, 1000 sources and the 96-bit shift fit */

typedef struct {
    uint32_t w[NW];
} big_t;

/* a += m * 2^scale: each 32-bit half of m, shifted within 64 bits, placed into four words,
 * then added with the carry rippling up. */
static void big_add_shifted(big_t *a, uint64_t m, int scale)
{
    uint32_t t[4] = {0, 0, 0, 0};
    int k0 = scale / 32;
    uint64_t carry = 0;

    for (int h = 0; h < 2; h++) {
        uint64_t part = ((m >> (32 * h)) & 0xffffffffu) << (scale % 32);
        t[h] |= (uint32_t)part;
        t[h + 1] |= (uint32_t)(part >> 32);
    }
    for (int k = k0; k < NW && (k < k0 + 4 || carry); k++) {
        uint64_t s = (uint64_t)a->w[k] + (k < k0 + 4 ? t[k - k0] : 0) + carry;
        a->w[k] = (uint32_t)s;
        carry = s >> 32;
    }
    assert_int_equal(carry, 0);
}

/* a -= b, a >= b */
static void big_sub(big_t *a, const big_t *b)
{
    uint64_t borrow = 0;

    for (int k = 0; k < NW; k++) {
        uint64_t s = (uint64_t)a->w[k] - b->w[k] - borrow;
        a->w[k] = (uint32_t)s;
        borrow = (s >> 32) != 0;
    }
    assert_int_equal(borrow, 0);
}

static int big_cmp(const big_t *a, const big_t *b)
{
    for (int k = NW - 1; k >= 0; k--)
        if (a->w[k] != b->w[k]) return a->w[k] < b->w[k] ? -1 : 1;
    return 0;
}

static int big_bit(const big_t *a, int b)
{
    return b >= 0 && b < NW * 32 ? (int)((a->w[b / 32] >> (b % 32)) & 1u) : 0;
}

static int big_top(const big_t *a)
{
    for (int k = NW - 1; k >= 0; k--)
        if (a->w[k] != 0)
            for (int b = 31;; b--)
                if ((a->w[k] >> b) & 1u) return 32 * k + b;
    return -1;
}

/* Whether any of bits [0, n) is set. */
static int big_any_below(const big_t *a, int n)
{
    for (int k = 0; k < NW && 32 * k < n; k++) {
        uint32_t mask = n - 32 * k >= 32 ? 0xffffffffu : (1u << (n - 32 * k)) - 1u;
        if (a->w[k] & mask) return 1;
    }
    return 0;
}

/* q = a / d, the remainder returned: word by word (schoolbook short division) when d < 2^32,
 * else one bit at a time (2r + 1 may then pass 2^64: `top` holds that bit). */
static uint64_t big_div(big_t *q, const big_t *a, uint64_t d)
{
    uint64_t r = 0;

    memset(q, 0, sizeof *q);
    if (d < ((uint64_t)1 << 32)) {
        for (int k = NW - 1; k >= 0; k--) {
            uint64_t cur = (r << 32) | a->w[k];
            q->w[k] = (uint32_t)(cur / d);
            r = cur % d;
        }
        return r;
    }
    for (int b = big_top(a); b >= 0; b--) {
        uint64_t top = r >> 63;
        r = (r << 1) | (uint64_t)big_bit(a, b);
        if (top || r >= d) {
            r -= d;
            q->w[b / 32] |= 1u << (b % 32);
        }
    }
    return r;
}

/* The exact sum of vals[0..n) (bits of format f), divided by d and rounded: its bits. */
static uint64_t ref_exact(const fmt_t *f, const uint64_t *vals, int n, uint64_t d)
{
    const int G = 96;
    big_t pos, neg, *mag, q, shifted;
    int nan = 0, pinf = 0, ninf = 0, all_negzero = 1, negative, t, e, lsb;
    uint64_t signbit = (uint64_t)1 << (f->P - 1 + f->W), rem, mant = 0;
    int round, sticky;

    memset(&pos, 0, sizeof pos);
    memset(&neg, 0, sizeof neg);
    for (int s = 0; s < n; s++) {
        uint64_t x = vals[s], e_field = (x >> (f->P - 1)) & emax_field(f);
        uint64_t frac = x & frac_mask(f), m;
        int sign = (x & signbit) != 0, scale;

        if (x != signbit) all_negzero = 0;
        if (e_field == emax_field(f)) {
            if (frac != 0)
                nan = 1;
            else if (sign)
                ninf = 1;
            else
                pinf = 1;
            continue;
        }
        /* value = m * 2^scale smallest subnormals */
        m = e_field == 0 ? frac : frac + ((uint64_t)1 << (f->P - 1));
        scale = e_field == 0 ? 0 : (int)e_field - 1;
        big_add_shifted(sign ? &neg : &pos, m, scale);
    }
    if (nan || (pinf && ninf)) return canon_nan(f);
    if (pinf) return pos_inf(f);
    if (ninf) return pos_inf(f) | signbit;

    negative = big_cmp(&neg, &pos) > 0;
    mag = negative ? &neg : &pos;
    big_sub(mag, negative ? &pos : &neg);
    if (big_top(mag) < 0) return all_negzero ? signbit : 0;

    /* q = mag * 2^G / d: the quotient with G fraction bits */
    memset(&shifted, 0, sizeof shifted);
    for (int k = 0; k + G / 32 < NW; k++)
        shifted.w[k + G / 32] = mag->w[k];
    rem = big_div(&q, &shifted, d);
    t = big_top(&q);
    assert_true(t >= 0);
    e = t - G; /* the leading bit's position, in smallest subnormals */
    lsb = e - (f->P - 1) > 0 ? e - (f->P - 1) : 0;
    for (int b = t; b >= lsb + G; b--)
        mant = 2 * mant + (uint64_t)big_bit(&q, b);
    round = big_bit(&q, lsb + G - 1);
    sticky = rem != 0 || big_any_below(&q, lsb + G - 1);
    if (round && (sticky || (mant & 1))) mant++;
    if (mant == (uint64_t)1 << f->P) {
        mant >>= 1;
        lsb++;
    }
    {
        uint64_t out_sign = negative ? signbit : 0, e_out, frac_out;
        if (mant >= (uint64_t)1 << (f->P - 1)) {
            e_out = (uint64_t)lsb + 1;
            frac_out = mant - ((uint64_t)1 << (f->P - 1));
        } else {
            assert_int_equal(lsb, 0);
            e_out = 0;
            frac_out = mant;
        }
        if (e_out >= emax_field(f)) return out_sign | pos_inf(f);
        return out_sign | (e_out << (f->P - 1)) | frac_out;
    }
}

/* ---- Running a case ---- */

typedef struct {
    const fmt_t *f;
    int nsrc;
    size_t count;
    uint64_t *v; /* v[s * count + i]: bits of source s, element i */
} case_t;

static case_t case_new(const fmt_t *f, int nsrc, size_t count)
{
    case_t c = {f, nsrc, count, calloc((size_t)nsrc * (count ? count : 1), sizeof(uint64_t))};
    assert_non_null(c.v);
    return c;
}

static void case_free(case_t *c)
{
    free(c->v);
    c->v = NULL;
}

static uint64_t load(const fmt_t *f, const void *p, size_t i)
{
    switch (f->size) {
    case 2: return ((const uint16_t *)p)[i];
    case 4: return ((const uint32_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

static void store(const fmt_t *f, void *p, size_t i, uint64_t x)
{
    switch (f->size) {
    case 2: ((uint16_t *)p)[i] = (uint16_t)x; break;
    case 4: ((uint32_t *)p)[i] = (uint32_t)x; break;
    default: ((uint64_t *)p)[i] = x; break;
    }
}

/* The CUDA kernel's loop, on the host: one element-code call per element. */
static void host_elem_loop(const fmt_t *f, void *dst, const void *const *src, int nsrc,
                           size_t count, uint64_t d)
{
    for (size_t i = 0; i < count; i++) {
        switch (f->dtype) {
        case CHORUS_FLOAT16: store(f, dst, i, chorus__exact_elem_f16(src, nsrc, i, d)); break;
        case CHORUS_BFLOAT16: store(f, dst, i, chorus__exact_elem_bf16(src, nsrc, i, d)); break;
        case CHORUS_FLOAT32: store(f, dst, i, chorus__exact_elem_f32(src, nsrc, i, d)); break;
        default: store(f, dst, i, chorus__exact_elem_f64(src, nsrc, i, d)); break;
        }
    }
}

static void report(const case_t *c, size_t i, uint64_t d, const char *what, uint64_t got,
                   uint64_t want)
{
    printf(
        "%s: %s, nsrc %d, divisor %llu, element %zu: got 0x%llx, want 0x%llx; inputs:", c->f->name,
        what, c->nsrc, (unsigned long long)d, i, (unsigned long long)got, (unsigned long long)want);
    for (int s = 0; s < c->nsrc && s < 12; s++)
        printf(" 0x%llx", (unsigned long long)c->v[(size_t)s * c->count + i]);
    printf("%s\n", c->nsrc > 12 ? " ..." : "");
}

static size_t cases_run, elements_checked;

/* Checks case c with divisor d: the kernel against the reference and against the element
 * loop; then `perms` permutations of the sources (all of them when perms < 0 and nsrc <= 5),
 * and the same call with dst = src[0]. */
static void check_case(const case_t *c, uint64_t d, int perms)
{
    const fmt_t *f = c->f;
    size_t bytes = c->count * f->size + 1;
    void **bufs = calloc((size_t)c->nsrc, sizeof(void *));
    const void **src = calloc((size_t)c->nsrc, sizeof(void *));
    int *order = calloc((size_t)c->nsrc, sizeof(int));
    uint64_t *one = calloc((size_t)c->nsrc, sizeof(uint64_t));
    unsigned char *dst = malloc(bytes), *host = malloc(bytes), *perm = malloc(bytes);
    int nperm = 0;

    assert_true(bufs && src && order && one && dst && host && perm);
    for (int s = 0; s < c->nsrc; s++) {
        bufs[s] = malloc(bytes);
        assert_non_null(bufs[s]);
        for (size_t i = 0; i < c->count; i++)
            store(f, bufs[s], i, c->v[(size_t)s * c->count + i]);
        src[s] = bufs[s];
        order[s] = s;
    }
    assert_int_equal(chorus_kernel_reduce_exact(dst, src, c->nsrc, c->count, f->dtype, d),
                     CHORUS_SUCCESS);
    host_elem_loop(f, host, src, c->nsrc, c->count, d);
    for (size_t i = 0; i < c->count; i++) {
        uint64_t got = load(f, dst, i), want, h = load(f, host, i);
        for (int s = 0; s < c->nsrc; s++)
            one[s] = c->v[(size_t)s * c->count + i];
        want = ref_exact(f, one, c->nsrc, d);
        if (got != want) report(c, i, d, "kernel != reference", got, want);
        assert_true(got == want);
        if (h != got) report(c, i, d, "element code != kernel", h, got);
        assert_true(h == got);
    }

    /* Permutations: all of them for nsrc <= 5 (perms < 0), else `perms` random ones. */
    if (perms < 0 && c->nsrc <= 5) perms = 1000;
    while (nperm < perms) {
        if (c->nsrc <= 5) {
            /* next lexicographic permutation of order[] */
            int k = c->nsrc - 2, l = c->nsrc - 1;
            while (k >= 0 && order[k] > order[k + 1])
                k--;
            if (k < 0) break;
            while (order[l] < order[k])
                l--;
            int t = order[k];
            order[k] = order[l];
            order[l] = t;
            for (int a = k + 1, b = c->nsrc - 1; a < b; a++, b--) {
                t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
        } else {
            for (int s = c->nsrc - 1; s > 0; s--) {
                int r = (int)(rng() % (uint64_t)(s + 1)), t = order[s];
                order[s] = order[r];
                order[r] = t;
            }
        }
        for (int s = 0; s < c->nsrc; s++)
            src[s] = bufs[order[s]];
        assert_int_equal(chorus_kernel_reduce_exact(perm, src, c->nsrc, c->count, f->dtype, d),
                         CHORUS_SUCCESS);
        assert_memory_equal(perm, dst, c->count * f->size);
        nperm++;
    }

    /* dst = src[0] */
    for (int s = 0; s < c->nsrc; s++)
        src[s] = bufs[s];
    assert_int_equal(chorus_kernel_reduce_exact(bufs[0], src, c->nsrc, c->count, f->dtype, d),
                     CHORUS_SUCCESS);
    assert_memory_equal(bufs[0], dst, c->count * f->size);

    cases_run++;
    elements_checked += c->count;
    for (int s = 0; s < c->nsrc; s++)
        free(bufs[s]);
    free(bufs);
    free(src);
    free(order);
    free(one);
    free(dst);
    free(host);
    free(perm);
}

/* 1 (the sum), small odd divisors and powers of two, nsrc (the average), and two beyond 32
 * bits (the element code's bit-serial division; both take the CPU kernel's exact path). */
static int divisors(int nsrc, uint64_t *out)
{
    int n = 0;
    out[n++] = 1;
    out[n++] = 2;
    out[n++] = 3;
    out[n++] = 7;
    out[n++] = 8;
    out[n++] = (uint64_t)nsrc;
    out[n++] = ((uint64_t)1 << 40) + 7;
    out[n++] = UINT64_MAX;
    return n;
}

static void check_all_divisors(const case_t *c, int perms)
{
    uint64_t d[8];
    int nd = divisors(c->nsrc, d);

    for (int k = 0; k < nd; k++)
        check_case(c, d[k], k == 0 || perms < 0 ? perms : perms / 4);
}

/* ---- Value generators (bits of format f) ---- */

/* Any finite value: every exponent, subnormals one time in eight, zeros now and then. */
static uint64_t rand_any(const fmt_t *f)
{
    uint64_t r = rng(), e = (r & 7) == 0 ? 0 : (r >> 3) % emax_field(f);
    if ((r >> 40) % 64 == 0) return make(f, (int)(r >> 50) & 1, 0, 0);
    return make(f, (int)(r >> 63), e, rng());
}

/* A normal value with biased exponent in [e0, e0 + span). */
static uint64_t rand_near(const fmt_t *f, uint64_t e0, uint64_t span)
{
    uint64_t r = rng();
    return make(f, (int)(r >> 63), e0 + r % span, rng());
}

/* Biased exponent of 1.0 */
static uint64_t bias(const fmt_t *f)
{
    return emax_field(f) / 2;
}

static const int NSRC_LIST[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1000};
#define N_NSRC ((int)(sizeof NSRC_LIST / sizeof NSRC_LIST[0]))

static size_t count_for(int nsrc)
{
    return nsrc > 100 ? 37 : 300;
}

/* ---- Tests ---- */

/* Random values over the whole range of each format, subnormals included. */
static void test_random_wide(void **state)
{
    (void)state;
    for (int fi = 0; fi < 4; fi++)
        for (int k = 0; k < N_NSRC; k++) {
            case_t c = case_new(&FMTS[fi], NSRC_LIST[k], count_for(NSRC_LIST[k]));
            for (size_t i = 0; i < (size_t)c.nsrc * c.count; i++)
                c.v[i] = rand_any(c.f);
            check_all_divisors(&c, c.nsrc <= 5 ? -1 : 6);
            case_free(&c);
        }
}

/* Values within a few binades of 1 (typical data: the CPU kernel's fast path), a few binades
 * of the largest exponents and of the smallest normal ones, and spreads around the fast
 * path's limit. */
static void test_random_narrow(void **state)
{
    (void)state;
    for (int fi = 0; fi < 4; fi++) {
        const fmt_t *f = &FMTS[fi];
        const uint64_t e0s[] = {bias(f) - 2, emax_field(f) - 4, 1, bias(f) - 10};
        const uint64_t spans[] = {4, 3, 3, 40};
        for (int z = 0; z < 4; z++)
            for (int k = 0; k < N_NSRC; k++) {
                uint64_t span =
                    spans[z] < emax_field(f) - e0s[z] ? spans[z] : emax_field(f) - e0s[z];
                case_t c = case_new(f, NSRC_LIST[k], count_for(NSRC_LIST[k]));
                for (size_t i = 0; i < (size_t)c.nsrc * c.count; i++)
                    c.v[i] = rand_near(f, e0s[z], span);
                check_all_divisors(&c, c.nsrc <= 5 ? -1 : 4);
                case_free(&c);
            }
    }
}

/* x, -x pairs plus tiny values; pairs a, -(a +- a few ulps) whose sum is a few ulps at
 * scattered scales; everything shuffled over the sources. */
static void test_cancellation(void **state)
{
    (void)state;
    for (int fi = 0; fi < 4; fi++) {
        const fmt_t *f = &FMTS[fi];
        for (int k = 0; k < N_NSRC; k++) {
            int n = NSRC_LIST[k];
            case_t c = case_new(f, n, count_for(n));
            uint64_t *col = calloc((size_t)n, sizeof(uint64_t));
            assert_non_null(col);
            for (size_t i = 0; i < c.count; i++) {
                int mode = (int)(i % 3), s = 0;
                for (; s + 1 < n; s += 2) {
                    uint64_t a = mode == 2 ? rand_near(f, 1, emax_field(f) - 2) : rand_any(f);
                    uint64_t b = neg_of(f, a);
                    if (mode >= 1 && (a & frac_mask(f)) > 8 &&
                        (a & frac_mask(f)) < frac_mask(f) - 8)
                        b += rng() % 7 - 3; /* -(a +- up to 3 ulps): same binade */
                    col[s] = a;
                    col[s + 1] = b;
                }
                if (s < n) col[s] = rand_near(f, 0, 3); /* a tiny leftover */
                for (int t = n - 1; t > 0; t--) {
                    int r = (int)(rng() % (uint64_t)(t + 1));
                    uint64_t x = col[t];
                    col[t] = col[r];
                    col[r] = x;
                }
                for (int t = 0; t < n; t++)
                    c.v[(size_t)t * c.count + i] = col[t];
            }
            check_all_divisors(&c, n <= 5 ? -1 : 4);
            free(col);
            case_free(&c);
        }
    }
}

/* Exact ties: x + half an ulp of x (even and odd x), x + half an ulp +- a tiny value, the
 * same with every value repeated d times and divided by d, and ties between subnormals. */
static void test_ties(void **state)
{
    (void)state;
    for (int fi = 0; fi < 4; fi++) {
        const fmt_t *f = &FMTS[fi];
        for (int rep = 1; rep <= 3; rep++) {
            int n = 3 * rep;
            case_t c = case_new(f, n, 600);
            for (size_t i = 0; i < c.count; i++) {
                /* an exponent whose half ulp is a normal value */
                uint64_t e = (uint64_t)f->P + 1 + rng() % (emax_field(f) - (uint64_t)f->P - 2);
                uint64_t frac = (rng() & frac_mask(f) & ~(uint64_t)1) | (i & 1);
                int neg = (int)(i >> 1) & 1, mode = (int)(i % 5);
                uint64_t x = make(f, neg, e, frac);
                uint64_t h = make(f, neg, e - (uint64_t)(f->P - 1) - 1, 0); /* half ulp of x */
                uint64_t tiny = make(f, mode == 3, 1 + rng() % 3, rng());
                uint64_t col[3] = {x, h, mode >= 3 ? tiny : make(f, rng() & 1, 0, 0)};
                if (i % 7 == 0) { /* subnormal ties: 1, 3 or 5 quanta over 2 */
                    col[0] = make(f, neg, 0, 1 + 2 * (rng() % 3));
                    col[1] = make(f, 0, 0, 0);
                    col[2] = make(f, 1, 0, 0);
                }
                for (int r = 0; r < rep; r++)
                    for (int t = 0; t < 3; t++)
                        c.v[(size_t)(3 * r + t) * c.count + i] = col[t];
            }
            check_case(&c, 1, -1);
            check_case(&c, (uint64_t)rep, 3);
            check_case(&c, 2 * (uint64_t)rep, 3); /* the subnormal ties */
            case_free(&c);
        }
    }
}

/* Around the largest finite value M: M + M overflows, (M + M) / 2 does not, M + tiny stays,
 * M + half an ulp is a tie that rounds to even (up: infinity), minus a tiny value it stays. */
static void test_overflow(void **state)
{
    (void)state;
    for (int fi = 0; fi < 4; fi++) {
        const fmt_t *f = &FMTS[fi];
        uint64_t M = max_finite(f), z = make(f, 0, 0, 0);
        uint64_t half = make(f, 0, emax_field(f) - 1 - (uint64_t)f->P, 0);
        uint64_t tiny = make(f, 0, 0, 1), ulp = make(f, 0, emax_field(f) - (uint64_t)f->P, 0);
        const uint64_t rows[][3] = {
            {M, M, z},
            {M, tiny, z},
            {M, half, z},
            {M, half, neg_of(f, tiny)},
            {neg_of(f, M), neg_of(f, M), z},
            {M, M, neg_of(f, M)},
            {M, M, M},
            {neg_of(f, M), neg_of(f, half), z},
            {M, ulp, neg_of(f, ulp)},
            {neg_of(f, M), half, half},
            {M, neg_of(f, half), half},
            {make(f, 0, emax_field(f) - 1, 0), make(f, 0, emax_field(f) - 1, 0), half},
        };
        const int nrows = (int)(sizeof rows / sizeof rows[0]);
        case_t c = case_new(f, 3, (size_t)nrows);
        assert_int_equal(nrows, 12);
        for (int r = 0; r < nrows; r++)
            for (int t = 0; t < 3; t++)
                c.v[(size_t)t * c.count + (size_t)r] = rows[r][t];
        check_all_divisors(&c, -1);
        /* the verdicts that must hold whatever the reference says */
        {
            const void *src[3];
            uint16_t b16[3][12];
            uint32_t b32[3][12];
            uint64_t b64[3][12], out[12];
            for (int t = 0; t < 3; t++)
                for (int r = 0; r < nrows; r++) {
                    b16[t][r] = (uint16_t)rows[r][t];
                    b32[t][r] = (uint32_t)rows[r][t];
                    b64[t][r] = rows[r][t];
                }
            for (int t = 0; t < 3; t++)
                src[t] = f->size == 2   ? (const void *)b16[t]
                         : f->size == 4 ? (const void *)b32[t]
                                        : (const void *)b64[t];
            assert_int_equal(chorus_kernel_reduce_exact(out, src, 3, 12, f->dtype, 1),
                             CHORUS_SUCCESS);
            assert_true(load(f, out, 0) == pos_inf(f));            /* M + M */
            assert_true(load(f, out, 1) == M);                     /* M + tiny */
            assert_true(load(f, out, 2) == pos_inf(f));            /* M + half: tie, even */
            assert_true(load(f, out, 3) == M);                     /* M + half - tiny */
            assert_true(load(f, out, 4) == neg_of(f, pos_inf(f))); /* -M - M */
            assert_true(load(f, out, 5) == M);                     /* M + M - M */
            assert_int_equal(chorus_kernel_reduce_exact(out, src, 3, 12, f->dtype, 2),
                             CHORUS_SUCCESS);
            assert_true(load(f, out, 0) == M); /* (M + M) / 2 */
            assert_int_equal(chorus_kernel_reduce_exact(out, src, 3, 12, f->dtype, 3),
                             CHORUS_SUCCESS);
            assert_true(load(f, out, 6) == M); /* (M + M + M) / 3 */
        }
        case_free(&c);
    }
}

/* Signed zeros: all -0 gives -0, any +0 or a cancellation gives +0, a nonzero sum whose
 * quotient rounds to zero keeps its sign. */
static void test_zeros(void **state)
{
    (void)state;
    for (int fi = 0; fi < 4; fi++) {
        const fmt_t *f = &FMTS[fi];
        uint64_t pz = make(f, 0, 0, 0), nz = make(f, 1, 0, 0), q = make(f, 0, 0, 1);
        uint64_t x = make(f, 0, bias(f), 12345);
        const uint64_t rows[][3] = {
            {nz, nz, nz},          {nz, pz, nz},           {pz, pz, pz}, {x, neg_of(f, x), nz},
            {neg_of(f, x), x, nz}, {neg_of(f, q), nz, nz}, {q, nz, nz},  {neg_of(f, q), pz, nz},
            {q, neg_of(f, q), nz}, {nz, nz, pz},
        };
        const int nrows = (int)(sizeof rows / sizeof rows[0]);
        for (int n = 1; n <= 3; n++) {
            case_t c = case_new(f, n, (size_t)nrows);
            for (int r = 0; r < nrows; r++)
                for (int t = 0; t < n; t++)
                    c.v[(size_t)t * c.count + (size_t)r] = rows[r][t];
            check_all_divisors(&c, -1);
            case_free(&c);
        }
        /* explicit verdicts */
        {
            uint64_t in[3][4], out[4];
            const void *src[3];
            for (int t = 0; t < 3; t++) {
                for (int r = 0; r < 4; r++)
                    store(f, in[t], (size_t)r, rows[r == 3 ? 5 : r][t]);
                src[t] = in[t];
            }
            assert_int_equal(chorus_kernel_reduce_exact(out, src, 3, 4, f->dtype, 3),
                             CHORUS_SUCCESS);
            assert_true(load(f, out, 0) == nz); /* -0 -0 -0 */
            assert_true(load(f, out, 1) == pz); /* -0 +0 -0 */
            assert_true(load(f, out, 2) == pz);
            assert_true(load(f, out, 3) == nz); /* -q / 3 rounds to -0 */
        }
    }
}

/* NaNs (any sign and payload, quiet or signalling), infinities of one or both signs, mixed
 * with finite values. */
static void test_specials(void **state)
{
    (void)state;
    for (int fi = 0; fi < 4; fi++) {
        const fmt_t *f = &FMTS[fi];
        uint64_t inf = pos_inf(f), ninf = neg_of(f, inf);
        uint64_t snan = make(f, 1, emax_field(f), 1),
                 qnan = make(f, 0, emax_field(f), frac_mask(f));
        for (int k = 0; k < N_NSRC; k++) {
            int n = NSRC_LIST[k];
            case_t c = case_new(f, n, 300);
            for (size_t i = 0; i < c.count; i++) {
                for (int s = 0; s < n; s++)
                    c.v[(size_t)s * c.count + i] = rand_any(f);
                /* plant 1..3 specials at random sources */
                for (int p = 0; p <= (int)(i % 3); p++) {
                    uint64_t r = rng(), sp;
                    switch ((r >> 8) % 5) {
                    case 0: sp = inf; break;
                    case 1: sp = ninf; break;
                    case 2: sp = snan; break;
                    case 3: sp = qnan; break;
                    default: sp = (i & 1) ? inf : ninf; break;
                    }
                    c.v[(size_t)(r % (uint64_t)n) * c.count + i] = sp;
                }
            }
            check_all_divisors(&c, n <= 5 ? -1 : 4);
            case_free(&c);
        }
        /* explicit verdicts */
        {
            uint64_t in[2][4], out[4];
            const void *src[2] = {in[0], in[1]};
            const uint64_t rows[4][2] = {
                {inf, ninf}, {snan, inf}, {inf, max_finite(f)}, {ninf, ninf}};
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 2; t++)
                    store(f, in[t], (size_t)r, rows[r][t]);
            assert_int_equal(chorus_kernel_reduce_exact(out, src, 2, 4, f->dtype, 1),
                             CHORUS_SUCCESS);
            assert_true(load(f, out, 0) == canon_nan(f));
            assert_true(load(f, out, 1) == canon_nan(f));
            assert_true(load(f, out, 2) == inf);
            assert_true(load(f, out, 3) == ninf);
        }
    }
    assert_true(canon_nan(&FMTS[0]) == 0x7e00u);
    assert_true(canon_nan(&FMTS[1]) == 0x7fc0u);
    assert_true(canon_nan(&FMTS[2]) == 0x7fc00000u);
    assert_true(canon_nan(&FMTS[3]) == 0x7ff8000000000000ull);
}

/* Many values of one sign in one binade whose top bits land in the same 32-bit digit of the
 * element code's accumulator (biased exponent 96 is position 95: bits 31 and up), so that the
 * carries out of that digit are the largest; and the same with a few of opposite sign. */
static void test_same_binade(void **state)
{
    (void)state;
    for (int fi = 0; fi < 4; fi++) {
        const fmt_t *f = &FMTS[fi];
        uint64_t e = fi == 0 ? 30 : 96;
        for (int n = 9; n <= 1000; n += 991) {
            case_t c = case_new(f, n, 40);
            for (size_t i = 0; i < c.count; i++)
                for (int s = 0; s < n; s++) {
                    uint64_t x = make(f, 0, e, frac_mask(f) - rng() % 16);
                    c.v[(size_t)s * c.count + i] = (i & 1) && s % 7 == 3 ? neg_of(f, x) : x;
                }
            check_all_divisors(&c, 3);
            case_free(&c);
        }
    }
}

/* The normal value c * 2^x of format f (c > 0, at most P significant bits), with sign. */
static uint64_t encode(const fmt_t *f, int neg, uint64_t c, int x)
{
    int t = 63;
    while (!((c >> t) & 1))
        t--;
    /* shift c so that its top bit is the implicit one */
    c = t <= f->P - 1 ? c << (f->P - 1 - t) : c >> (t - (f->P - 1));
    x += t - (f->P - 1);
    assert_true(x + f->P - 1 + (int)bias(f) >= 1);
    return make(f, neg, (uint64_t)(x + f->P - 1 + (int)bias(f)), c);
}

static int bit_length(uint64_t x)
{
    int b = 0;
    while (x >> b)
        b++;
    return b;
}

/* ceil(log2 n) */
static int log2_ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

/* The CPU kernel's fast path adds in doubles when (spread) + P + ceil(log2 n) <= 53. Just past
 * that, an addition can round: n - 2 large values whose sum X is exactly halfway between two
 * values of the format, at the top of the range n values can reach, and two small ones at
 * `spread` binades below, whose sum is one unit of their last bit, so the exact total is just
 * off the halfway point. Spreads around the limit, every order (at random above 5 sources). */
static void test_fast_path_limit(void **state)
{
    (void)state;
    /* bf16 and float32: fp16's 30 binades never reach its limit (42 - ceil(log2 n)) */
    for (int fi = 1; fi < 3; fi++) {
        const fmt_t *f = &FMTS[fi];
        for (int k = 0; k < N_NSRC; k++) {
            int n = NSRC_LIST[k], L = log2_ceil(n), lim = 53 - f->P - L;
            /* the large values' exponent: n of them stay below the largest binade */
            int e = (int)emax_field(f) - 1 - (int)bias(f) - L - 1;
            if (n < 4) continue;
            for (int spread = lim - 1; spread <= lim + 2; spread++) {
                case_t c = case_new(f, n, 64);
                for (size_t i = 0; i < c.count; i++) {
                    int neg = (int)(i & 1), lowneg = (int)(i >> 1) & 1;
                    uint64_t top = (uint64_t)1 << (f->P - 1), m[1000], X = 0, grid, want;
                    /* large mantissas in the upper quarter, in units of 2^(e - P + 1) */
                    for (int s = 0; s < n - 2; s++) {
                        m[s] = 2 * top - 1 - rng() % (top / 4);
                        X += m[s];
                    }
                    /* the format's grid at X: ulps of 2^(bits(X) - P) units; make X a
                     * midpoint by moving the last large mantissa down */
                    grid = (uint64_t)1 << (bit_length(X) - f->P);
                    want = (X & ~(grid - 1)) + grid / 2;
                    if (want > X) want -= grid;
                    for (int s = 0; X > want; s++) {
                        uint64_t take = X - want < m[s] - top ? X - want : m[s] - top;
                        m[s] -= take;
                        X -= take;
                    }
                    for (int s = 0; s < n - 2; s++)
                        c.v[(size_t)s * c.count + i] = encode(f, neg, m[s], e - f->P + 1);
                    /* y1 + y2 = +-2^(e - spread - P + 1): one unit of their last bit */
                    {
                        uint64_t a = top + 1 + rng() % (top / 2);
                        int x = e - spread - f->P + 1;
                        c.v[(size_t)(n - 2) * c.count + i] = encode(f, neg ^ lowneg, a, x);
                        c.v[(size_t)(n - 1) * c.count + i] = encode(f, !(neg ^ lowneg), a - 1, x);
                    }
                }
                check_case(&c, 1, n <= 5 ? -1 : 30);
                check_case(&c, 3, 4);
                case_free(&c);
            }
        }
    }
}

/* More sources than fp16's whole range lets a double sum exactly (8192): one smallest
 * subnormal, then 8200 copies of the largest value and 8200 of its negative. Summed in this
 * order in doubles, the partial sums pass 2^29, where the subnormal is half an ulp. */
static void test_f16_many_sources(void **state)
{
    const fmt_t *f = &FMTS[0];
    const int n = 3 + 2 * 8200;
    case_t c = case_new(f, n, 4);
    (void)state;

    for (size_t i = 0; i < c.count; i++) {
        c.v[0 * c.count + i] = make(f, 0, 0, 3);
        c.v[1 * c.count + i] = make(f, 1, 0, 2 + (i & 1));
        c.v[2 * c.count + i] = make(f, (int)(i >> 1), 0, 0);
        for (int s = 3; s < n; s++)
            c.v[(size_t)s * c.count + i] = s < 3 + 8200 ? max_finite(f) : neg_of(f, max_finite(f));
    }
    check_case(&c, 1, 2);
    check_case(&c, 3, 0);
    case_free(&c);
}

/* After a division, the fast path's double quotient can land exactly halfway between two
 * values of the format while the exact quotient is not halfway, when the divisor exceeds
 * 2^(53 - P): S / d with S = floor or ceil(m * d / 2^k), m odd (a halfway point). The fast
 * path must notice and defer to the exact path. float32 and bf16 (fp16's 40-bit range cannot
 * make such an S). */
static void test_double_rounding_traps(void **state)
{
    (void)state;
    for (int fi = 1; fi < 3; fi++) {
        const fmt_t *f = &FMTS[fi];
        int npieces = 48 / f->P, k = 9, found = 0;
        case_t c = case_new(f, npieces, 48);
        uint64_t d = ((uint64_t)1 << (53 - f->P + 2)) + 2 * (rng() % 1000) + 1;

        for (int tries = 0; found < (int)c.count && tries < 1000000; tries++) {
            uint64_t m = ((uint64_t)1 << f->P) | (rng() & (((uint64_t)1 << f->P) - 1)) | 1;
            uint64_t md = m * d, S = (md >> k) + (tries & 1), Srest;
            double q = (double)S / (double)d, M = (double)m / (double)(1 << k);
            int neg = (int)(rng() & 1), u = fi == 2 ? -16 : 0;

            if (S >> 48 || q != M || S << k == md) continue;
            Srest = S;
            for (int p = 0; p < npieces; p++) {
                int shift = 48 - f->P * (p + 1);
                uint64_t piece = (Srest >> shift) & (((uint64_t)1 << f->P) - 1);
                c.v[(size_t)p * c.count + (size_t)found] =
                    piece ? encode(f, neg, piece, shift + u) : make(f, neg, 0, 0);
            }
            found++;
        }
        assert_int_equal(found, c.count);
        check_case(&c, d, c.nsrc <= 5 ? -1 : 4);
        case_free(&c);
    }
}

/* Long vectors mixing elements of both CPU paths within blocks, a partial last block, and
 * dst = src[0]; with the streaming stores forced on, and with the baseline loops. */
static void check_long(void)
{
    for (int fi = 0; fi < 4; fi++) {
        const fmt_t *f = &FMTS[fi];
        case_t c = case_new(f, 4, 3 * 256 + 17);
        for (size_t i = 0; i < (size_t)c.nsrc * c.count; i++)
            c.v[i] = (i % 97 == 3) ? rand_any(f) : rand_near(f, bias(f) - 3, 6);
        check_case(&c, 1, 2);
        check_case(&c, 4, 2);
        case_free(&c);
    }
}

static void test_long_and_stream(void **state)
{
    (void)state;
    check_long();
    chorus__kernel_set_stream_threshold(1);
    check_long();
    chorus__kernel_set_stream_threshold(0);
}

static void test_baseline_loops(void **state)
{
    (void)state;
#if defined(__x86_64__)
    chorus__kernel_force_baseline(1);
    check_long();
    for (int fi = 0; fi < 4; fi++) {
        case_t c = case_new(&FMTS[fi], 5, 500);
        for (size_t i = 0; i < (size_t)c.nsrc * c.count; i++)
            c.v[i] = (i & 1) ? rand_any(c.f) : rand_near(c.f, bias(c.f), 2);
        check_all_divisors(&c, 2);
        case_free(&c);
    }
    chorus__kernel_force_baseline(0);
#endif
}

/* The kernel's fast path and its exact path give the same bytes: the same inputs in
 * round-upward mode (where the kernel takes the exact path only) against the default. */
static void test_paths_agree(void **state)
{
    (void)state;
    for (int fi = 0; fi < 3; fi++) {
        const fmt_t *f = &FMTS[fi];
        for (int k = 0; k < N_NSRC; k++) {
            int n = NSRC_LIST[k];
            size_t count = 2048;
            uint64_t dv[8];
            int nd = divisors(n, dv);
            void **bufs = calloc((size_t)n, sizeof(void *));
            unsigned char *a = malloc(count * f->size), *b = malloc(count * f->size);
            assert_true(bufs && a && b);
            for (int s = 0; s < n; s++) {
                bufs[s] = malloc(count * f->size);
                assert_non_null(bufs[s]);
                for (size_t i = 0; i < count; i++)
                    store(f, bufs[s], i,
                          (i % 8 == 0) ? rand_any(f) : rand_near(f, bias(f) - 8, 10));
            }
            for (int di = 0; di < nd; di++) {
                assert_int_equal(chorus_kernel_reduce_exact(a, (const void *const *)bufs, n, count,
                                                            f->dtype, dv[di]),
                                 CHORUS_SUCCESS);
                assert_int_equal(fesetround(FE_UPWARD), 0);
                assert_int_equal(chorus_kernel_reduce_exact(b, (const void *const *)bufs, n, count,
                                                            f->dtype, dv[di]),
                                 CHORUS_SUCCESS);
                assert_int_equal(fesetround(FE_TONEAREST), 0);
                assert_memory_equal(a, b, count * f->size);
            }
            for (int s = 0; s < n; s++)
                free(bufs[s]);
            free(bufs);
            free(a);
            free(b);
        }
    }
}

/* Other floating-point environments give the same, correct bytes: every rounding mode, and
 * on x86-64 flush-to-zero with denormals-are-zero (which some frameworks set). */
static void test_fp_environment(void **state)
{
    const int modes[] = {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    (void)state;
    for (int m = 0; m < 3; m++) {
        assert_int_equal(fesetround(modes[m]), 0);
        for (int fi = 0; fi < 4; fi++) {
            case_t c = case_new(&FMTS[fi], 3, 300);
            for (size_t i = 0; i < (size_t)c.nsrc * c.count; i++)
                c.v[i] = (i & 1) ? rand_any(c.f) : rand_near(c.f, 1, 3);
            check_case(&c, 1, 0);
            check_case(&c, 3, 0);
            case_free(&c);
        }
    }
    assert_int_equal(fesetround(FE_TONEAREST), 0);
#ifdef HAVE_MXCSR
    {
        unsigned int saved = _mm_getcsr();
        _mm_setcsr(saved | 0x8040u); /* FTZ | DAZ */
        for (int fi = 0; fi < 4; fi++) {
            case_t c = case_new(&FMTS[fi], 3, 600);
            for (size_t i = 0; i < (size_t)c.nsrc * c.count; i++)
                c.v[i] =
                    (i % 3 == 0) ? make(c.f, rng() & 1, 0, rng()) : rand_near(c.f, 1, 2 + (i & 1));
            check_case(&c, 1, 0);
            check_case(&c, 2, 0);
            check_case(&c, 3, 0);
            case_free(&c);
        }
        _mm_setcsr(saved);
    }
#endif
}

static void test_invalid_args(void **state)
{
    float a[4] = {1, 2, 3, 4}, out[4];
    const void *src[2] = {a, a};
    const void *nulls[2] = {a, NULL};
    const chorus_dtype_t bad_types[] = {CHORUS_INT8,       CHORUS_UINT8,      CHORUS_INT32,
                                        CHORUS_UINT32,     CHORUS_INT64,      CHORUS_UINT64,
                                        CHORUS_NUM_DTYPES, (chorus_dtype_t)-1};
    (void)state;

    for (size_t k = 0; k < sizeof bad_types / sizeof bad_types[0]; k++)
        assert_int_equal(chorus_kernel_reduce_exact(out, src, 2, 4, bad_types[k], 1),
                         CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_exact(out, src, 0, 4, CHORUS_FLOAT32, 1),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_exact(out, src, -1, 4, CHORUS_FLOAT32, 1),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(
        chorus_kernel_reduce_exact(out, src, CHORUS_EXACT_MAX_SRC + 1, 4, CHORUS_FLOAT32, 1),
        CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_exact(out, src, 2, 4, CHORUS_FLOAT32, 0),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_exact(out, src, 2, 0, CHORUS_INT32, 1),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_exact(out, nulls, 2, 4, CHORUS_FLOAT32, 1),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_exact(NULL, src, 2, 4, CHORUS_FLOAT32, 1),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus_kernel_reduce_exact(out, NULL, 2, 4, CHORUS_FLOAT32, 1),
                     CHORUS_ERR_INVALID_ARGUMENT);
    /* nothing to do is not an error, and writes nothing */
    memset(out, 0x5a, sizeof out);
    assert_int_equal(chorus_kernel_reduce_exact(NULL, NULL, 2, 0, CHORUS_FLOAT32, 1),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus_kernel_reduce_exact(out, src, 2, 4, CHORUS_FLOAT32, 1), CHORUS_SUCCESS);
    assert_true(out[0] == 2.0f && out[3] == 8.0f);
    assert_true(CHORUS_EXACT_MAX_SRC >= 65536);
    assert_true((int64_t)CHORUS_EXACT_MAX_SRC <= CHORUS__EXACT_HEADROOM);
}

/* Known answers, so that the reference itself is pinned to a few facts. */
static void test_reference_known(void **state)
{
    (void)state;
    /* float32 */
    {
        const fmt_t *f = &FMTS[2];
        uint64_t one = 0x3f800000u, eps_half = 0x33800000u /* 2^-24 */, m1 = 0x3f800001u;
        uint64_t v2[2] = {one, eps_half}, v3[2] = {m1, eps_half}, v4[3] = {one, one, one};
        assert_true(ref_exact(f, v2, 2, 1) == one);         /* tie to even: down */
        assert_true(ref_exact(f, v3, 2, 1) == 0x3f800002u); /* tie to even: up */
        assert_true(ref_exact(f, v4, 3, 3) == one);
        assert_true(ref_exact(f, v4, 1, 3) == 0x3eaaaaabu); /* 1/3 */
        assert_true(ref_exact(f, v4, 2, 3) == 0x3f2aaaabu); /* 2/3 */
        uint64_t sub[1] = {0x00000003u};
        assert_true(ref_exact(f, sub, 1, 2) == 0x00000002u); /* 1.5 quanta: even */
    }
    /* float64: 0.1 + 0.2 exactly rounded is 0.30000000000000004 (one rounding) */
    {
        const fmt_t *f = &FMTS[3];
        uint64_t v[2] = {0x3fb999999999999aull, 0x3fc999999999999aull};
        assert_true(ref_exact(f, v, 2, 1) == 0x3fd3333333333334ull);
    }
    /* fp16: 65504 + 16 is the tie to 65536: infinity */
    {
        const fmt_t *f = &FMTS[0];
        uint64_t v[2] = {0x7bffu, 0x4c00u};
        assert_true(ref_exact(f, v, 2, 1) == 0x7c00u);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_known),
        cmocka_unit_test(test_invalid_args),
        cmocka_unit_test(test_random_wide),
        cmocka_unit_test(test_random_narrow),
        cmocka_unit_test(test_cancellation),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_zeros),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_same_binade),
        cmocka_unit_test(test_fast_path_limit),
        cmocka_unit_test(test_f16_many_sources),
        cmocka_unit_test(test_double_rounding_traps),
        cmocka_unit_test(test_long_and_stream),
        cmocka_unit_test(test_baseline_loops),
        cmocka_unit_test(test_paths_agree),
        cmocka_unit_test(test_fp_environment),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);

    printf("reduce_exact: %zu cases, %zu elements checked against the reference\n", cases_run,
           elements_checked);
    return rc;
}
