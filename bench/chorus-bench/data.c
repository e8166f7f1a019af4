/*
 * Buffer contents and result checks of chorus-bench.
 *
 * Every value is a small non-negative integer chosen so that every partial result of the
 * collective is exact in the datatype, whatever order the library reduces in: then a
 * correct result is bit for bit the expected one and the check can demand equality.
 *   sum, avg  v = b(i) + 2 * ((r + i) mod n), b(i) = i mod (B + 1), with B chosen so that
 *             the total n * B + n (n - 1) stays within the exact range; the total is a
 *             multiple of n, so the average is exact too.
 *   prod      v in {1, 2}: exactly i mod (min(n, 6) + 1) ranks hold a 2, so every
 *             product is a power of two no larger than 64.
 *   min, max and the collectives that only move data (sendrecv, gather, scatter and the
 *             v-forms included):
 *             v = (7 i + 31 r + 1) mod (L + 1).
 * L is the largest integer below which every integer is exact in the datatype and no
 * sum overflows (127 for the 8-bit types, 256 for bfloat16, 2048 for float16). Integer
 * types wrap (as the library specifies) when n is so large that no choice avoids it; the
 * expected value wraps the same way. Float16 and bfloat16 stay exact up to 16 ranks.
 * Receive buffers are filled with 0xa5 bytes, a negative or out-of-range value in every
 * datatype that no result contains.
 */
#include "bench.h"

#include <string.h>

#define GARBAGE_BYTE 0xa5
#define PROD_MAX_TWOS 6

counts_t bench_counts(coll_t coll, size_t count, int nranks)
{
    size_t n = (size_t)nranks, per_rank = count / n;
    counts_t c = {count, count, count, 0, 0};

    /* Gather is laid out as allgather and scatter as reduce_scatter (nccl-tests'
     * gather_perf and scatter_perf): on the root, in place, the root's own block is
     * sendbuf == recvbuf + root * count (gather) or recvbuf == sendbuf + root * count
     * (scatter), which is the library's in-place rule; the other ranks use one buffer too. */
    switch (coll) {
    case COLL_ALLGATHER:
    case COLL_ALLGATHERV:
    case COLL_GATHER:
        c.send_count = per_rank;
        c.recv_count = per_rank * n;
        c.param_count = per_rank;
        c.send_inplace_offset = per_rank;
        break;
    case COLL_REDUCE_SCATTER:
    case COLL_REDUCE_SCATTERV:
    case COLL_SCATTER:
        c.send_count = per_rank * n;
        c.recv_count = per_rank;
        c.param_count = per_rank;
        c.recv_inplace_offset = per_rank;
        break;
    case COLL_ALLTOALL:
    case COLL_ALLTOALLV:
        c.send_count = per_rank * n;
        c.recv_count = per_rank * n;
        c.param_count = per_rank;
        break;
    case COLL_BARRIER: c = (counts_t){0, 0, 0, 0, 0}; break;
    default: break; /* allreduce, broadcast, reduce, sendrecv: count in and out */
    }
    return c;
}

int bench_coll_reduces(coll_t coll)
{
    return coll == COLL_ALLREDUCE || coll == COLL_REDUCE_SCATTER || coll == COLL_REDUCE ||
           coll == COLL_REDUCE_SCATTERV;
}

int bench_coll_rooted(coll_t coll)
{
    return coll == COLL_BROADCAST || coll == COLL_REDUCE || coll == COLL_GATHER ||
           coll == COLL_SCATTER;
}

/* Sendrecv in place would receive into the buffer it is still sending from within one
 * group, which the API does not define; chorus_alltoallv has no in-place form (chorus.h);
 * a barrier has no buffers. */
int bench_coll_has_in_place(coll_t coll)
{
    return coll != COLL_SENDRECV && coll != COLL_BARRIER && coll != COLL_ALLTOALLV;
}

int bench_coll_host_only(coll_t coll)
{
    return coll >= COLL_GATHER && coll < COLL_COUNT;
}

/* The rooted and irregular collectives have one algorithm each (chorus.h,
 * chorus_algorithm_name); sendrecv is point to point. */
int bench_coll_has_algos(coll_t coll)
{
    return coll != COLL_SENDRECV && !bench_coll_host_only(coll);
}

static int64_t exact_limit(chorus_dtype_t dtype)
{
    switch (dtype) {
    case CHORUS_INT8:
    case CHORUS_UINT8: return 127;
    case CHORUS_BFLOAT16: return 256;
    case CHORUS_FLOAT16: return 2048;
    default: return 1 << 20;
    }
}

static int is_float(chorus_dtype_t dtype)
{
    return dtype == CHORUS_FLOAT16 || dtype == CHORUS_BFLOAT16 || dtype == CHORUS_FLOAT32 ||
           dtype == CHORUS_FLOAT64;
}

/* The value that rank r holds at index i of its send buffer. */
static int64_t gen(const test_t *t, int r, size_t i)
{
    int64_t limit = exact_limit(t->dtype), n = t->nranks;

    if (bench_coll_reduces(t->coll) && (t->op == CHORUS_SUM || t->op == CHORUS_AVG)) {
        int64_t b_max = limit / n - (n - 1);
        if (b_max < 0) b_max = 0;
        return (int64_t)(i % (size_t)(b_max + 1)) + 2 * (int64_t)((i + (size_t)r) % (size_t)n);
    }
    if (bench_coll_reduces(t->coll) && t->op == CHORUS_PROD) {
        size_t twos = (size_t)(n < PROD_MAX_TWOS ? n : PROD_MAX_TWOS);
        return (3 * i + (size_t)r) % (size_t)n < i % (twos + 1) ? 2 : 1;
    }
    return (int64_t)((7 * i + 31 * (size_t)r + 1) % (size_t)(limit + 1));
}

static uint16_t float_to_half_bits(float f)
{
    uint32_t x, sign, mant, half;
    int32_t exp;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000u;
    exp = (int32_t)((x >> 23) & 0xffu) - 127 + 15;
    mant = x & 0x7fffffu;
    if (((x >> 23) & 0xffu) == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        uint32_t shift = (uint32_t)(14 - exp), rem, mid;
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        half = mant >> shift;
        rem = mant & ((1u << shift) - 1);
        mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    /* Round to nearest even; a carry out of the mantissa correctly bumps the exponent. */
    if ((mant & 0x1fffu) > 0x1000u || ((mant & 0x1fffu) == 0x1000u && (half & 1u))) half++;
    return (uint16_t)half;
}

static uint16_t float_to_bf16_bits(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* Stores an integer value (for integer types, already reduced modulo 2^bits) or a
 * floating point value at element index of buf. */
static void store(chorus_dtype_t dtype, void *buf, size_t index, int64_t ivalue, double fvalue)
{
    char *p = (char *)buf + index * chorus_dtype_size(dtype);

    switch (dtype) {
    case CHORUS_INT8:
    case CHORUS_UINT8: *(uint8_t *)p = (uint8_t)ivalue; break;
    case CHORUS_INT32:
    case CHORUS_UINT32: {
        uint32_t v = (uint32_t)ivalue;
        memcpy(p, &v, sizeof(v));
        break;
    }
    case CHORUS_INT64:
    case CHORUS_UINT64: memcpy(p, &ivalue, sizeof(ivalue)); break;
    case CHORUS_FLOAT16: {
        uint16_t v = float_to_half_bits((float)fvalue);
        memcpy(p, &v, sizeof(v));
        break;
    }
    case CHORUS_BFLOAT16: {
        uint16_t v = float_to_bf16_bits((float)fvalue);
        memcpy(p, &v, sizeof(v));
        break;
    }
    case CHORUS_FLOAT32: {
        float v = (float)fvalue;
        memcpy(p, &v, sizeof(v));
        break;
    }
    case CHORUS_FLOAT64: memcpy(p, &fvalue, sizeof(fvalue)); break;
    default: break;
    }
}

static void store_value(chorus_dtype_t dtype, void *buf, size_t index, int64_t value)
{
    store(dtype, buf, index, value, (double)value);
}

/* Sign-extends or zero-extends the low bits of an integer result, as the datatype holds it. */
static int64_t wrap_int(chorus_dtype_t dtype, uint64_t v)
{
    switch (dtype) {
    case CHORUS_INT8: return (int8_t)(uint8_t)v;
    case CHORUS_UINT8: return (uint8_t)v;
    case CHORUS_INT32: return (int32_t)(uint32_t)v;
    case CHORUS_UINT32: return (uint32_t)v;
    default: return (int64_t)v;
    }
}

/* The expected reduction over all ranks of the values at index i, stored at out[0]. */
static void expected_reduction(const test_t *t, size_t i, void *out)
{
    uint64_t iacc = t->op == CHORUS_PROD ? 1 : 0;
    double facc = t->op == CHORUS_PROD ? 1.0 : 0.0;
    int64_t best = gen(t, 0, i);

    for (int r = 0; r < t->nranks; r++) {
        int64_t v = gen(t, r, i);
        if (t->op == CHORUS_PROD) {
            iacc *= (uint64_t)v;
            facc *= (double)v;
        } else {
            iacc += (uint64_t)v;
            facc += (double)v;
        }
        if ((t->op == CHORUS_MIN && v < best) || (t->op == CHORUS_MAX && v > best)) best = v;
    }
    if (t->op == CHORUS_MIN || t->op == CHORUS_MAX) {
        store_value(t->dtype, out, 0, best);
    } else if (is_float(t->dtype)) {
        store(t->dtype, out, 0, 0, t->op == CHORUS_AVG ? facc / t->nranks : facc);
    } else {
        int64_t v = wrap_int(t->dtype, iacc);
        /* Integer AVG divides the wrapped sum, truncating toward zero (as in C). */
        if (t->op == CHORUS_AVG) {
            if (t->dtype == CHORUS_UINT64)
                v = (int64_t)((uint64_t)v / (uint64_t)t->nranks);
            else
                v /= t->nranks;
        }
        store_value(t->dtype, out, 0, v);
    }
}

/* The expected value of element j of this rank's result. */
static void expected(const test_t *t, const counts_t *c, size_t j, void *out)
{
    size_t per = c->param_count;

    switch (t->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE: expected_reduction(t, j, out); break;
    case COLL_REDUCE_SCATTER:
    case COLL_REDUCE_SCATTERV: expected_reduction(t, (size_t)t->rank * per + j, out); break;
    case COLL_BROADCAST: store_value(t->dtype, out, 0, gen(t, t->root, j)); break;
    case COLL_SCATTER:
        store_value(t->dtype, out, 0, gen(t, t->root, (size_t)t->rank * per + j));
        break;
    case COLL_ALLGATHER:
    case COLL_ALLGATHERV:
    case COLL_GATHER: store_value(t->dtype, out, 0, gen(t, (int)(j / per), j % per)); break;
    case COLL_ALLTOALL:
    case COLL_ALLTOALLV:
        store_value(t->dtype, out, 0, gen(t, (int)(j / per), (size_t)t->rank * per + j % per));
        break;
    case COLL_SENDRECV:
        store_value(t->dtype, out, 0, gen(t, (t->rank + t->nranks - 1) % t->nranks, j));
        break;
    default: break;
    }
}

void bench_prepare(const test_t *t, const counts_t *c, int in_place, void *sendbuf, void *base_recv,
                   void **send_p, void **recv_p)
{
    size_t es = chorus_dtype_size(t->dtype);
    size_t base_count = c->send_count > c->recv_count ? c->send_count : c->recv_count;
    char *send = sendbuf, *recv = base_recv;

    if (in_place) {
        send = (char *)base_recv + c->send_inplace_offset * (size_t)t->rank * es;
        recv = (char *)base_recv + c->recv_inplace_offset * (size_t)t->rank * es;
        memset(base_recv, GARBAGE_BYTE, base_count * es);
    } else {
        memset(base_recv, GARBAGE_BYTE, c->recv_count * es);
    }
    for (size_t i = 0; i < c->send_count; i++)
        store_value(t->dtype, send, i, gen(t, t->rank, i));
    *send_p = send;
    *recv_p = recv;
}

size_t bench_count_wrong(const test_t *t, const counts_t *c, const void *recv)
{
    size_t es = chorus_dtype_size(t->dtype), wrong = 0;
    unsigned char want[8];

    /* Reduce and gather write only on the root; the other ranks have nothing to check. */
    if ((t->coll == COLL_REDUCE || t->coll == COLL_GATHER) && t->rank != t->root) return 0;
    for (size_t j = 0; j < c->recv_count; j++) {
        expected(t, c, j, want);
        if (memcmp((const char *)recv + j * es, want, es) != 0) wrong++;
    }
    return wrong;
}
