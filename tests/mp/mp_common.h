/*
 * Helpers shared by the multi-process test programs in tests/mp. Every program is its
 * own binary, so everything here is static inline; the programs use only the public API.
 *
 * Element access: the tests keep their own float16 / bfloat16 conversions (round to
 * nearest even) so that a bug in the library's kernels cannot hide itself in the check.
 */
#ifndef CHORUS_TESTS_MP_COMMON_H
#define CHORUS_TESTS_MP_COMMON_H

#include "chorus.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- Random-ish values that depend only on (seed, rank, index) ---- */

static inline uint64_t mp_mix(uint64_t x)
{
    /* splitmix64's finalizer: every input bit reaches every output bit. */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The key of one rank's stream; mp_rand(key, index) is then one mix per value. */
static inline uint64_t mp_rank_key(uint64_t seed, int rank)
{
    return mp_mix(seed ^ ((uint64_t)(rank + 1) << 48));
}

static inline uint64_t mp_rand(uint64_t key, uint64_t index)
{
    return mp_mix(key ^ index);
}

/* Uniform in [0, 1). */
static inline double mp_unit(uint64_t r)
{
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

/* FNV-1a over bytes: used to compare whole result buffers across ranks bitwise. */
static inline uint64_t mp_hash(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* ---- float16 / bfloat16 ---- */

static inline float mp_bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t mp_float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float mp_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return mp_bits_to_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* Subnormal: the value is man * 2^-24, exact in float. */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return mp_bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t mp_float_to_half(float f)
{
    uint32_t u = mp_float_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to infinity */
    if (a < 0x38800000u) {
        /* Result is subnormal or zero: round a * 2^24 to an integer, nearest even. */
        float v = mp_bits_to_float(a) * 16777216.0f;
        uint32_t m = (uint32_t)v;
        float rest = v - (float)m;
        if (rest > 0.5f || (rest == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t mant = a + 0xfffu + ((a >> 13) & 1); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((mant - 0x38000000u) >> 13));
}

static inline float mp_bf16_to_float(uint16_t b)
{
    return mp_bits_to_float((uint32_t)b << 16);
}

static inline uint16_t mp_float_to_bf16(float f)
{
    uint32_t u = mp_float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* ---- Typed element access ---- */

static inline int mp_is_float(chorus_dtype_t dt)
{
    return dt == CHORUS_FLOAT16 || dt == CHORUS_BFLOAT16 || dt == CHORUS_FLOAT32 ||
           dt == CHORUS_FLOAT64;
}

static inline int mp_is_signed(chorus_dtype_t dt)
{
    return dt == CHORUS_INT8 || dt == CHORUS_INT32 || dt == CHORUS_INT64;
}

static inline size_t mp_dtype_size(chorus_dtype_t dt)
{
    static const size_t sizes[CHORUS_NUM_DTYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    return sizes[dt];
}

static inline const char *mp_dtype_name(chorus_dtype_t dt)
{
    static const char *names[CHORUS_NUM_DTYPES] = {"int8",  "uint8",   "int32",    "uint32",
                                                   "int64", "uint64",  "float16",  "bfloat16",
                                                   "float32", "float64"};
    return names[dt];
}

static inline const char *mp_op_name(chorus_op_t op)
{
    static const char *names[CHORUS_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};
    return names[op];
}

/* The raw bits of element i, zero-extended. */
static inline uint64_t mp_get_bits(chorus_dtype_t dt, const void *buf, size_t i)
{
    const unsigned char *p = (const unsigned char *)buf + i * mp_dtype_size(dt);
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    switch (mp_dtype_size(dt)) {
    case 1: memcpy(&u8, p, 1); return u8;
    case 2: memcpy(&u16, p, 2); return u16;
    case 4: memcpy(&u32, p, 4); return u32;
    default: memcpy(&u64, p, 8); return u64;
    }
}

static inline void mp_put_bits(chorus_dtype_t dt, void *buf, size_t i, uint64_t v)
{
    unsigned char *p = (unsigned char *)buf + i * mp_dtype_size(dt);
    uint8_t u8 = (uint8_t)v;
    uint16_t u16 = (uint16_t)v;
    uint32_t u32 = (uint32_t)v;
    switch (mp_dtype_size(dt)) {
    case 1: memcpy(p, &u8, 1); break;
    case 2: memcpy(p, &u16, 2); break;
    case 4: memcpy(p, &u32, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

/* Integer element as int64 (sign-extended for signed types, zero-extended otherwise). */
static inline int64_t mp_get_int(chorus_dtype_t dt, const void *buf, size_t i)
{
    uint64_t u = mp_get_bits(dt, buf, i);
    int bits = (int)mp_dtype_size(dt) * 8;
    if (mp_is_signed(dt) && bits < 64 && (u >> (bits - 1)) & 1) u |= ~0ULL << bits;
    return (int64_t)u;
}

static inline long double mp_get_float(chorus_dtype_t dt, const void *buf, size_t i)
{
    uint64_t u = mp_get_bits(dt, buf, i);
    double d;
    switch (dt) {
    case CHORUS_FLOAT16: return mp_half_to_float((uint16_t)u);
    case CHORUS_BFLOAT16: return mp_bf16_to_float((uint16_t)u);
    case CHORUS_FLOAT32: return mp_bits_to_float((uint32_t)u);
    default: memcpy(&d, &u, 8); return d;
    }
}

/* Stores v rounded to the type (nearest even). */
static inline void mp_put_float(chorus_dtype_t dt, void *buf, size_t i, double v)
{
    uint64_t u;
    switch (dt) {
    case CHORUS_FLOAT16: u = mp_float_to_half((float)v); break;
    case CHORUS_BFLOAT16: u = mp_float_to_bf16((float)v); break;
    case CHORUS_FLOAT32: u = mp_float_to_bits((float)v); break;
    default: memcpy(&u, &v, 8); break;
    }
    mp_put_bits(dt, buf, i, u);
}

/* Unit roundoff of a float type (fp16/bf16 results are rounded after every operation). */
static inline long double mp_unit_roundoff(chorus_dtype_t dt)
{
    switch (dt) {
    case CHORUS_FLOAT16: return 1.0L / 2048;
    case CHORUS_BFLOAT16: return 1.0L / 256;
    case CHORUS_FLOAT32: return 1.0L / 16777216;
    default: return 1.0L / 9007199254740992.0L;
    }
}

/* ---- --registered: buffers from this rank's chorus_mem_alloc window ----
 * A bump allocator over the window (64-byte aligned); it starts over whenever every buffer
 * it gave has been freed. With base NULL (the rank's buffers are not registered) it gives
 * nothing and owns nothing, and the caller uses its usual allocator. */
typedef struct {
    unsigned char *base;
    size_t size, top;
    int live;
    const char *prog; /* for the message when the window is too small */
} mp_bump_t;

/* bytes from the window, or NULL when b has none; exits when the window is too small. */
static inline void *mp_bump_alloc(mp_bump_t *b, size_t bytes)
{
    unsigned char *p;

    if (b->base == NULL) return NULL;
    b->top = (b->top + 63) / 64 * 64;
    if (b->size - b->top < bytes) {
        fprintf(stderr, "%s: the registered window (%zu bytes) is too small: raise "
                "--registered-bytes\n", b->prog, b->size);
        exit(1);
    }
    p = b->base + b->top;
    b->top += bytes;
    b->live++;
    return p;
}

/* 1 when p came from the window (and is now given back), 0 when it is not b's. */
static inline int mp_bump_free(mp_bump_t *b, const void *p)
{
    const unsigned char *q = p;

    if (b->base == NULL || q < b->base || q >= b->base + b->size) return 0;
    if (--b->live == 0) b->top = 0;
    return 1;
}

/* ---- Guarded buffers: overruns show in the canary zones on both sides ---- */

#define MP_GUARD 64 /* bytes of 0xa5 on each side */

/* A zeroed buffer of bytes between two guard zones; exits when out of memory. */
static inline unsigned char *mp_guarded(size_t bytes)
{
    unsigned char *p = malloc(bytes + 2 * MP_GUARD);

    if (p == NULL) exit(1);
    memset(p, 0xa5, bytes + 2 * MP_GUARD);
    memset(p + MP_GUARD, 0, bytes);
    return p + MP_GUARD;
}

/* Nonzero when both guard zones of a buffer from mp_guarded(bytes) are untouched. */
static inline int mp_guards_intact(const unsigned char *buf, size_t bytes)
{
    for (size_t i = 0; i < MP_GUARD; i++)
        if (buf[-1 - (long)i] != 0xa5 || buf[bytes + i] != 0xa5) return 0;
    return 1;
}

static inline void mp_guarded_free(unsigned char *buf)
{
    if (buf != NULL) free(buf - MP_GUARD);
}

/* ---- Checks that record a failure and go on ----
 * For programs that declare `static int g_rank, g_fail;`: CHECK prints "FAIL rank R line L:
 * ..." and sets g_fail; OK checks that a call returned CHORUS_SUCCESS, naming the call, its
 * status and chorus_last_error(). */
#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            printf("FAIL rank %d line %d: ", g_rank, __LINE__);                                \
            printf(__VA_ARGS__);                                                               \
            printf("\n");                                                                      \
            g_fail = 1;                                                                        \
        }                                                                                      \
    } while (0)

#define OK(call)                                                                               \
    do {                                                                                       \
        chorus_status_t st_ = (call);                                                          \
        CHECK(st_ == CHORUS_SUCCESS, "%s: %s: %s", #call, chorus_status_string(st_),           \
              chorus_last_error());                                                            \
    } while (0)

/* ---- Misc ---- */

static inline double mp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Joins the job described by the environment or exits with a message. */
static inline chorus_comm_t mp_init_env(const char *prog, int *rank_p, int *nranks_p)
{
    chorus_comm_t comm = NULL;
    chorus_status_t st = chorus_comm_init_env(&comm);
    if (st != CHORUS_SUCCESS) {
        fprintf(stderr, "%s: chorus_comm_init_env: %s: %s\n", prog, chorus_status_string(st),
                chorus_last_error());
        exit(1);
    }
    if (chorus_comm_rank(comm, rank_p) != CHORUS_SUCCESS ||
        chorus_comm_size(comm, nranks_p) != CHORUS_SUCCESS) {
        fprintf(stderr, "%s: cannot read rank / size: %s\n", prog, chorus_last_error());
        exit(1);
    }
    return comm;
}

/* Prints the failed call and ends the process: after an API error the ranks may no
 * longer agree on what comes next, so going on could only hang until the timeout. */
static inline void mp_die_on_error(chorus_status_t st, chorus_comm_t comm, int rank,
                                   const char *what)
{
    if (st == CHORUS_SUCCESS) return;
    printf("FAIL rank %d: %s returned %s: %s\n", rank, what, chorus_status_string(st),
           chorus_last_error());
    fflush(stdout);
    if (comm != NULL) {
        chorus_comm_abort(comm);
        chorus_comm_destroy(comm);
    }
    exit(1);
}

#endif
