/*
 * The public API on a one-rank communicator in one process: every bad argument of every
 * entry point returns the documented status and a message naming the operation, and every
 * valid call gives the exact result (with one rank, each collective is a copy). One test,
 * test_split_order, runs 4 ranks as threads for chorus_comm_split's order; test_grow grows a
 * comm to 2 ranks, the second a thread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chorus.h"

#include <pthread.h>
#include "util/config.h"

#define N 37 /* odd, so no algorithm lines up with it by chance */

static chorus_comm_t g_comm;

/* The call returns `code`, and the thread's message is non-empty and mentions `what`. */
#define EXPECT_ERR(call, code, what)                                      \
    do {                                                                  \
        chorus_status_t st_ = (call);                                     \
        const char *msg_ = chorus_last_error();                           \
        if (st_ != (code) || msg_ == NULL || strstr(msg_, (what)) == NULL) \
            print_error("%s -> %d (%s), want %d naming \"%s\"\n", #call,  \
                        (int)st_, msg_ ? msg_ : "(null)", (int)(code), (what)); \
        assert_int_equal(st_, (code));                                    \
        assert_non_null(msg_);                                            \
        assert_true(msg_[0] != '\0');                                     \
        assert_non_null(strstr(msg_, (what)));                            \
    } while (0)

#define EXPECT_OK(call)                                                              \
    do {                                                                             \
        chorus_status_t st_ = (call);                                                \
        if (st_ != CHORUS_SUCCESS) print_error("%s: %s\n", #call, chorus_last_error()); \
        assert_int_equal(st_, CHORUS_SUCCESS);                                       \
    } while (0)

static chorus_status_t new_comm(chorus_comm_t *comm_p)
{
    chorus_unique_id_t id;
    chorus_status_t st = chorus_get_unique_id(&id);
    if (st != CHORUS_SUCCESS) return st;
    return chorus_comm_init(comm_p, 1, &id, 0);
}

static int setup(void **state)
{
    (void)state;
    if (new_comm(&g_comm) != CHORUS_SUCCESS) {
        print_error("cannot make a 1-rank communicator: %s\n", chorus_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return chorus_comm_destroy(g_comm) == CHORUS_SUCCESS ? 0 : -1;
}

/* Fills n elements of dtype with small integers every type holds exactly. */
static void fill(void *buf, size_t n, chorus_dtype_t dtype, int seed)
{
    for (size_t i = 0; i < n; i++) {
        int v = (int)((i * 7 + (size_t)seed * 3) % 100);
        switch (dtype) {
        case CHORUS_INT8: ((int8_t *)buf)[i] = (int8_t)(v - 50); break;
        case CHORUS_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
        case CHORUS_INT32: ((int32_t *)buf)[i] = v - 50; break;
        case CHORUS_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
        case CHORUS_INT64: ((int64_t *)buf)[i] = v - 50; break;
        case CHORUS_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
        /* Small integers are exact in binary16 and bfloat16: sign, exponent, mantissa. */
        case CHORUS_FLOAT16: {
            uint16_t h = 0;
            if (v) {
                int e = 0;
                while ((v >> e) > 1) e++;
                h = (uint16_t)(((e + 15) << 10) | (((unsigned)v << 10 >> e) & 0x3ff));
            }
            ((uint16_t *)buf)[i] = h;
            break;
        }
        case CHORUS_BFLOAT16: {
            float f = (float)v;
            uint32_t u;
            memcpy(&u, &f, 4);
            ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
            break;
        }
        case CHORUS_FLOAT32: ((float *)buf)[i] = (float)(v - 50); break;
        case CHORUS_FLOAT64: ((double *)buf)[i] = v - 50; break;
        default: break;
        }
    }
}

/* ---- bad arguments ---- */

/* The library says what it was built with, and it was built with what this test was: the
 * build records its configuration (tools/configure.sh) and every object depends on it, so a
 * library compiled before a package was installed cannot be linked with tests compiled
 * after (issue 16: a stale stub library made the ib tests fail to link). */
static void test_build_info(void **state)
{
    char want[64];
    const char *info = chorus_build_info();

    (void)state;
    assert_non_null(info);
    snprintf(want, sizeof want, "chorus %d.%d.%d: ", CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR,
             CHORUS_VERSION_PATCH);
    assert_memory_equal(info, want, strlen(want));
    assert_int_equal(chorus_version(), CHORUS_VERSION_CODE);
#ifdef CHORUS_HAVE_UCX
    assert_non_null(strstr(info, "ucx yes"));
#else
    assert_non_null(strstr(info, "ucx no (stub"));
#endif
#ifdef CHORUS_HAVE_IBV
    assert_non_null(strstr(info, "ib verbs yes"));
#else
    assert_non_null(strstr(info, "ib verbs no (stub"));
#endif
#ifdef CHORUS_HAVE_HWLOC
    assert_non_null(strstr(info, "hwloc yes"));
#else
    assert_non_null(strstr(info, "hwloc no"));
#endif
}

static void test_null_comm_everywhere(void **state)
{
    int x = 0, buf[4] = {0};
    chorus_status_t st;
    chorus_comm_t nc;
    (void)state;

    EXPECT_ERR(chorus_comm_rank(NULL, &x), CHORUS_ERR_INVALID_ARGUMENT, "rank");
    EXPECT_ERR(chorus_comm_size(NULL, &x), CHORUS_ERR_INVALID_ARGUMENT, "size");
    EXPECT_ERR(chorus_comm_split(NULL, 0, 0, &nc), CHORUS_ERR_INVALID_ARGUMENT, "split");
    EXPECT_ERR(chorus_comm_abort(NULL), CHORUS_ERR_INVALID_ARGUMENT, "abort");
    EXPECT_ERR(chorus_comm_get_async_error(NULL, &st), CHORUS_ERR_INVALID_ARGUMENT,
               "async_error");
    EXPECT_ERR(chorus_allreduce(buf, buf, 4, CHORUS_INT32, CHORUS_SUM, NULL, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allreduce");
    EXPECT_ERR(chorus_allgather(buf, buf, 1, CHORUS_INT32, NULL, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allgather");
    EXPECT_ERR(chorus_reduce_scatter(buf, buf, 1, CHORUS_INT32, CHORUS_SUM, NULL, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce_scatter");
    EXPECT_ERR(chorus_broadcast(buf, buf, 4, CHORUS_INT32, 0, NULL, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "broadcast");
    EXPECT_ERR(chorus_reduce(buf, buf, 4, CHORUS_INT32, CHORUS_SUM, 0, NULL, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce");
    EXPECT_ERR(chorus_alltoall(buf, buf, 1, CHORUS_INT32, NULL, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "alltoall");
    EXPECT_ERR(chorus_send(buf, 1, CHORUS_INT32, 0, NULL, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "send");
    EXPECT_ERR(chorus_recv(buf, 1, CHORUS_INT32, 0, NULL, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "recv");
    EXPECT_ERR(chorus_barrier(NULL), CHORUS_ERR_INVALID_ARGUMENT, "barrier");
    EXPECT_OK(chorus_comm_destroy(NULL));
}

static void test_init_bad_args(void **state)
{
    chorus_unique_id_t id;
    chorus_comm_t c = (chorus_comm_t)&id; /* a sentinel: must stay untouched */
    int x;
    chorus_status_t st;
    (void)state;

    memset(&id, 0, sizeof id);
    EXPECT_ERR(chorus_get_unique_id(NULL), CHORUS_ERR_INVALID_ARGUMENT, "unique_id");
    EXPECT_ERR(chorus_comm_init(NULL, 1, &id, 0), CHORUS_ERR_INVALID_ARGUMENT, "comm_init");
    EXPECT_ERR(chorus_comm_init(&c, 1, NULL, 0), CHORUS_ERR_INVALID_ARGUMENT, "comm_init");
    EXPECT_ERR(chorus_comm_init(&c, 0, &id, 0), CHORUS_ERR_INVALID_ARGUMENT, "comm_init");
    EXPECT_ERR(chorus_comm_init(&c, -3, &id, 0), CHORUS_ERR_INVALID_ARGUMENT, "comm_init");
    EXPECT_ERR(chorus_comm_init(&c, 4, &id, 5), CHORUS_ERR_INVALID_ARGUMENT,
               "chorus_comm_init: rank 5 out of range for 4 ranks");
    EXPECT_ERR(chorus_comm_init(&c, 4, &id, -1), CHORUS_ERR_INVALID_ARGUMENT, "out of range");
    /* An id of zeros is malformed: the bootstrap refuses it before any network wait. */
    EXPECT_ERR(chorus_comm_init(&c, 1, &id, 0), CHORUS_ERR_INVALID_ARGUMENT, "comm_init");
    assert_ptr_equal(c, (chorus_comm_t)&id);
    EXPECT_ERR(chorus_comm_init_env(NULL), CHORUS_ERR_INVALID_ARGUMENT, "init_env");

    EXPECT_ERR(chorus_comm_rank(g_comm, NULL), CHORUS_ERR_INVALID_ARGUMENT, "rank_p");
    EXPECT_ERR(chorus_comm_size(g_comm, NULL), CHORUS_ERR_INVALID_ARGUMENT, "size_p");
    EXPECT_ERR(chorus_comm_get_async_error(g_comm, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "async_error");
    EXPECT_OK(chorus_comm_rank(g_comm, &x));
    assert_int_equal(x, 0);
    EXPECT_OK(chorus_comm_size(g_comm, &x));
    assert_int_equal(x, 1);
    EXPECT_OK(chorus_comm_get_async_error(g_comm, &st));
    assert_int_equal(st, CHORUS_SUCCESS);
}

static void test_bad_dtype_op(void **state)
{
    int buf[8] = {0}, out[8];
    chorus_comm_t c = g_comm;
    const chorus_dtype_t bad[] = {(chorus_dtype_t)42, (chorus_dtype_t)-1, CHORUS_NUM_DTYPES};
    (void)state;

    EXPECT_ERR(chorus_allreduce(buf, out, 4, (chorus_dtype_t)42, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "rank 0: allreduce: unknown dtype 42");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        chorus_dtype_t d = bad[i];
        EXPECT_ERR(chorus_allreduce(buf, out, 4, d, CHORUS_SUM, c, NULL),
                   CHORUS_ERR_INVALID_ARGUMENT, "allreduce: unknown dtype");
        EXPECT_ERR(chorus_allgather(buf, out, 4, d, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
                   "allgather: unknown dtype");
        EXPECT_ERR(chorus_reduce_scatter(buf, out, 4, d, CHORUS_SUM, c, NULL),
                   CHORUS_ERR_INVALID_ARGUMENT, "reduce_scatter: unknown dtype");
        EXPECT_ERR(chorus_broadcast(buf, out, 4, d, 0, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
                   "broadcast: unknown dtype");
        EXPECT_ERR(chorus_reduce(buf, out, 4, d, CHORUS_SUM, 0, c, NULL),
                   CHORUS_ERR_INVALID_ARGUMENT, "reduce: unknown dtype");
        EXPECT_ERR(chorus_alltoall(buf, out, 4, d, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
                   "alltoall: unknown dtype");
        EXPECT_ERR(chorus_send(buf, 4, d, 0, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
                   "send: unknown dtype");
        EXPECT_ERR(chorus_recv(out, 4, d, 0, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
                   "recv: unknown dtype");
    }
    EXPECT_ERR(chorus_allreduce(buf, out, 4, CHORUS_INT32, (chorus_op_t)99, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "rank 0: allreduce: unknown op 99");
    EXPECT_ERR(chorus_allreduce(buf, out, 4, CHORUS_INT32, CHORUS_NUM_OPS, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allreduce: unknown op");
    EXPECT_ERR(chorus_reduce_scatter(buf, out, 4, CHORUS_INT32, (chorus_op_t)-2, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce_scatter: unknown op");
    EXPECT_ERR(chorus_reduce(buf, out, 4, CHORUS_INT32, (chorus_op_t)7, 0, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce: unknown op");
    /* A count of 0 still checks its arguments. */
    EXPECT_ERR(chorus_allreduce(NULL, NULL, 0, (chorus_dtype_t)42, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "unknown dtype");
}

static void test_bad_root_peer(void **state)
{
    int buf[4] = {0}, out[4];
    chorus_comm_t c = g_comm;
    (void)state;

    EXPECT_ERR(chorus_broadcast(buf, out, 4, CHORUS_INT32, 1, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "broadcast: root 1 out of range");
    EXPECT_ERR(chorus_broadcast(buf, out, 4, CHORUS_INT32, -1, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "broadcast: root -1 out of range");
    EXPECT_ERR(chorus_reduce(buf, out, 4, CHORUS_INT32, CHORUS_SUM, 3, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce: root 3 out of range");
    EXPECT_ERR(chorus_send(buf, 4, CHORUS_INT32, 1, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "send: peer 1 out of range");
    EXPECT_ERR(chorus_recv(buf, 4, CHORUS_INT32, -1, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "recv: peer -1 out of range");
}

static void test_null_buffers(void **state)
{
    int buf[4] = {0}, out[4];
    chorus_comm_t c = g_comm;
    (void)state;

    EXPECT_ERR(chorus_allreduce(NULL, out, 4, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allreduce: sendbuf is NULL");
    EXPECT_ERR(chorus_allreduce(buf, NULL, 4, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allreduce: recvbuf is NULL");
    EXPECT_ERR(chorus_allgather(NULL, out, 4, CHORUS_INT32, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allgather: sendbuf is NULL");
    EXPECT_ERR(chorus_allgather(buf, NULL, 4, CHORUS_INT32, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allgather: recvbuf is NULL");
    EXPECT_ERR(chorus_reduce_scatter(NULL, out, 4, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce_scatter: sendbuf is NULL");
    EXPECT_ERR(chorus_reduce_scatter(buf, NULL, 4, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce_scatter: recvbuf is NULL");
    /* Rank 0 is the root here, so both buffers are needed. */
    EXPECT_ERR(chorus_broadcast(NULL, out, 4, CHORUS_INT32, 0, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "broadcast: sendbuf is NULL");
    EXPECT_ERR(chorus_broadcast(buf, NULL, 4, CHORUS_INT32, 0, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "broadcast: recvbuf is NULL");
    EXPECT_ERR(chorus_reduce(NULL, out, 4, CHORUS_INT32, CHORUS_SUM, 0, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce: sendbuf is NULL");
    EXPECT_ERR(chorus_reduce(buf, NULL, 4, CHORUS_INT32, CHORUS_SUM, 0, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce: recvbuf is NULL");
    EXPECT_ERR(chorus_alltoall(NULL, out, 4, CHORUS_INT32, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "alltoall: sendbuf is NULL");
    EXPECT_ERR(chorus_alltoall(buf, NULL, 4, CHORUS_INT32, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "alltoall: recvbuf is NULL");
    EXPECT_ERR(chorus_send(NULL, 4, CHORUS_INT32, 0, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "send: buf is NULL");
    EXPECT_ERR(chorus_recv(NULL, 4, CHORUS_INT32, 0, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "recv: buf is NULL");
}

static void test_count_overflow_and_stream(void **state)
{
    int buf[4] = {0}, out[4];
    int fake_stream;
    chorus_comm_t c = g_comm;
    const size_t huge = ((size_t)1 << 40) / 4 + 1; /* just over 2^40 bytes of int32 */
    (void)state;

    EXPECT_ERR(chorus_allreduce(buf, out, SIZE_MAX, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allreduce: count");
    EXPECT_ERR(chorus_allreduce(buf, out, huge, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "too large");
    EXPECT_ERR(chorus_allgather(buf, out, SIZE_MAX / 2, CHORUS_UINT8, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allgather: count");
    EXPECT_ERR(chorus_alltoall(buf, out, huge, CHORUS_INT32, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "alltoall: count");
    EXPECT_ERR(chorus_send(buf, SIZE_MAX, CHORUS_FLOAT64, 0, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "send: count");

    EXPECT_ERR(chorus_allreduce(buf, out, 4, CHORUS_INT32, CHORUS_SUM, c, &fake_stream),
               CHORUS_ERR_UNSUPPORTED, "allreduce: stream");
    EXPECT_ERR(chorus_allgather(buf, out, 1, CHORUS_INT32, c, &fake_stream),
               CHORUS_ERR_UNSUPPORTED, "CUDA");
    EXPECT_ERR(chorus_reduce_scatter(buf, out, 1, CHORUS_INT32, CHORUS_SUM, c, &fake_stream),
               CHORUS_ERR_UNSUPPORTED, "reduce_scatter");
    EXPECT_ERR(chorus_broadcast(buf, out, 4, CHORUS_INT32, 0, c, &fake_stream),
               CHORUS_ERR_UNSUPPORTED, "broadcast");
    EXPECT_ERR(chorus_reduce(buf, out, 4, CHORUS_INT32, CHORUS_SUM, 0, c, &fake_stream),
               CHORUS_ERR_UNSUPPORTED, "reduce");
    EXPECT_ERR(chorus_alltoall(buf, out, 1, CHORUS_INT32, c, &fake_stream),
               CHORUS_ERR_UNSUPPORTED, "alltoall");
    EXPECT_ERR(chorus_send(buf, 1, CHORUS_INT32, 0, c, &fake_stream), CHORUS_ERR_UNSUPPORTED,
               "send");
    EXPECT_ERR(chorus_recv(buf, 1, CHORUS_INT32, 0, c, &fake_stream), CHORUS_ERR_UNSUPPORTED,
               "recv");
}

static void test_partial_overlap(void **state)
{
    int buf[16] = {0};
    chorus_comm_t c = g_comm;
    (void)state;

    EXPECT_ERR(chorus_allreduce(buf, buf + 1, 4, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allreduce: sendbuf and recvbuf overlap");
    EXPECT_ERR(chorus_allreduce(buf + 3, buf, 4, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "overlap");
    EXPECT_ERR(chorus_allgather(buf + 1, buf, 2, CHORUS_INT32, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "allgather: sendbuf and recvbuf overlap");
    EXPECT_ERR(chorus_reduce_scatter(buf, buf + 1, 2, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce_scatter: sendbuf and recvbuf overlap");
    EXPECT_ERR(chorus_broadcast(buf, buf + 2, 4, CHORUS_INT32, 0, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "broadcast: sendbuf and recvbuf overlap");
    EXPECT_ERR(chorus_reduce(buf + 2, buf, 4, CHORUS_INT32, CHORUS_MAX, 0, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "reduce: sendbuf and recvbuf overlap");
    EXPECT_ERR(chorus_alltoall(buf, buf + 1, 4, CHORUS_INT32, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "alltoall: sendbuf and recvbuf overlap");
    /* Adjacent is not overlapping. */
    EXPECT_OK(chorus_allreduce(buf, buf + 4, 4, CHORUS_INT32, CHORUS_SUM, c, NULL));
}

static void test_group_errors(void **state)
{
    int a[4] = {1, 2, 3, 4}, b[8] = {0}, a8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    chorus_comm_t c = g_comm;
    (void)state;

    EXPECT_ERR(chorus_group_end(), CHORUS_ERR_INVALID_ARGUMENT, "group_end");
    EXPECT_ERR(chorus_send(a, 4, CHORUS_INT32, 0, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "send: a send to self outside a group");
    EXPECT_ERR(chorus_recv(b, 4, CHORUS_INT32, 0, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "recv");

    /* An unmatched send to self fails the group. */
    EXPECT_OK(chorus_group_start());
    EXPECT_OK(chorus_send(a, 4, CHORUS_INT32, 0, c, NULL));
    EXPECT_ERR(chorus_group_end(), CHORUS_ERR_INVALID_ARGUMENT, "no matching recv");

    /* Sizes of a self pair must agree. */
    EXPECT_OK(chorus_group_start());
    EXPECT_OK(chorus_send(a, 4, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_recv(b, 8, CHORUS_INT32, 0, c, NULL));
    EXPECT_ERR(chorus_group_end(), CHORUS_ERR_INVALID_ARGUMENT, "16 bytes");
    /* The other way round too: a larger send must not spill past the receive. */
    b[4] = -9;
    EXPECT_OK(chorus_group_start());
    EXPECT_OK(chorus_send(a8, 8, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_recv(b, 4, CHORUS_INT32, 0, c, NULL));
    EXPECT_ERR(chorus_group_end(), CHORUS_ERR_INVALID_ARGUMENT,
               "a send to self of 32 bytes meets a recv from self of 16 bytes");
    assert_int_equal(b[4], -9);

    /* A bad call inside a group fails the whole group, and nothing runs. */
    b[0] = -7;
    EXPECT_OK(chorus_group_start());
    EXPECT_OK(chorus_send(a, 4, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_recv(b, 4, CHORUS_INT32, 0, c, NULL));
    EXPECT_ERR(chorus_send(a, 4, CHORUS_INT32, 9, c, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "peer 9");
    EXPECT_ERR(chorus_group_end(), CHORUS_ERR_INVALID_ARGUMENT, "peer 9");
    assert_int_equal(b[0], -7);

    /* Collectives are not part of groups. */
    EXPECT_OK(chorus_group_start());
    EXPECT_ERR(chorus_allreduce(a, b, 4, CHORUS_INT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_UNSUPPORTED, "allreduce");
    EXPECT_OK(chorus_group_end());

    /* The comm is still fine afterwards: argument errors do not fail it. */
    chorus_status_t st;
    EXPECT_OK(chorus_comm_get_async_error(c, &st));
    assert_int_equal(st, CHORUS_SUCCESS);
}

/* ---- exact results ---- */

static void test_allreduce_every_dtype_op(void **state)
{
    chorus_comm_t c = g_comm;
    (void)state;

    for (int d = 0; d < CHORUS_NUM_DTYPES; d++) {
        size_t es = chorus_dtype_size((chorus_dtype_t)d);
        unsigned char in[N * 8], want[N * 8], out[N * 8 + 1];
        for (int op = 0; op < CHORUS_NUM_OPS; op++) {
            fill(in, N, (chorus_dtype_t)d, d + op);
            memcpy(want, in, N * es);
            memset(out, 0xa5, sizeof out);
            EXPECT_OK(chorus_allreduce(in, out, N, (chorus_dtype_t)d, (chorus_op_t)op, c, NULL));
            assert_memory_equal(out, want, N * es);
            assert_int_equal(out[N * es], 0xa5); /* nothing written past the end */
            assert_memory_equal(in, want, N * es);
            /* In place. */
            EXPECT_OK(chorus_allreduce(in, in, N, (chorus_dtype_t)d, (chorus_op_t)op, c, NULL));
            assert_memory_equal(in, want, N * es);
        }
    }
}

static void test_avg_int_and_reduce_variants(void **state)
{
    chorus_comm_t c = g_comm;
    int32_t in[N], out[N], want[N];
    int64_t big[3] = {-7, 7, INT64_MIN + 1}, bigout[3];
    (void)state;

    for (int i = 0; i < N; i++) want[i] = in[i] = i * 13 - 200;
    EXPECT_OK(chorus_allreduce(in, out, N, CHORUS_INT32, CHORUS_AVG, c, NULL));
    assert_memory_equal(out, want, sizeof want);
    EXPECT_OK(chorus_allreduce(big, bigout, 3, CHORUS_INT64, CHORUS_AVG, c, NULL));
    assert_memory_equal(bigout, big, sizeof big);

    memset(out, 0, sizeof out);
    EXPECT_OK(chorus_reduce(in, out, N, CHORUS_INT32, CHORUS_AVG, 0, c, NULL));
    assert_memory_equal(out, want, sizeof want);
    memset(out, 0, sizeof out);
    EXPECT_OK(chorus_reduce(in, out, N, CHORUS_INT32, CHORUS_MIN, 0, c, NULL));
    assert_memory_equal(out, want, sizeof want);
    EXPECT_OK(chorus_reduce(in, in, N, CHORUS_INT32, CHORUS_PROD, 0, c, NULL));
    assert_memory_equal(in, want, sizeof want);

    memset(out, 0, sizeof out);
    EXPECT_OK(chorus_reduce_scatter(in, out, N, CHORUS_INT32, CHORUS_AVG, c, NULL));
    assert_memory_equal(out, want, sizeof want);
    EXPECT_OK(chorus_reduce_scatter(in, in, N, CHORUS_INT32, CHORUS_SUM, c, NULL));
    assert_memory_equal(in, want, sizeof want);
}

static void test_copy_collectives(void **state)
{
    chorus_comm_t c = g_comm;
    double in[N], out[N + 1], want[N];
    (void)state;

    for (int i = 0; i < N; i++) want[i] = in[i] = i * 0.5 - 3;
    for (int k = 0; k < 3; k++) {
        memset(out, 0, sizeof out);
        out[N] = 99.0;
        if (k == 0) EXPECT_OK(chorus_allgather(in, out, N, CHORUS_FLOAT64, c, NULL));
        if (k == 1) EXPECT_OK(chorus_broadcast(in, out, N, CHORUS_FLOAT64, 0, c, NULL));
        if (k == 2) EXPECT_OK(chorus_alltoall(in, out, N, CHORUS_FLOAT64, c, NULL));
        assert_memory_equal(out, want, sizeof want);
        assert_true(out[N] == 99.0);
    }
    /* In place: allgather's sendbuf is recvbuf + rank * count, which is recvbuf here. */
    EXPECT_OK(chorus_allgather(in, in, N, CHORUS_FLOAT64, c, NULL));
    assert_memory_equal(in, want, sizeof want);
    EXPECT_OK(chorus_broadcast(in, in, N, CHORUS_FLOAT64, 0, c, NULL));
    assert_memory_equal(in, want, sizeof want);
    EXPECT_OK(chorus_alltoall(in, in, N, CHORUS_FLOAT64, c, NULL));
    assert_memory_equal(in, want, sizeof want);
    EXPECT_OK(chorus_barrier(c));

    /* Large enough for the ring and several pipeline chunks. */
    size_t big = (1u << 20) + 3;
    float *src = malloc(big * sizeof *src), *dst = malloc(big * sizeof *dst);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < big; i++) src[i] = (float)(i % 1000);
    EXPECT_OK(chorus_allreduce(src, dst, big, CHORUS_FLOAT32, CHORUS_SUM, c, NULL));
    assert_memory_equal(src, dst, big * sizeof *src);
    memset(dst, 0, big * sizeof *dst);
    EXPECT_OK(chorus_broadcast(src, dst, big, CHORUS_FLOAT32, 0, c, NULL));
    assert_memory_equal(src, dst, big * sizeof *src);
    free(src);
    free(dst);
}

static void test_count_zero(void **state)
{
    chorus_comm_t c = g_comm;
    (void)state;

    EXPECT_OK(chorus_allreduce(NULL, NULL, 0, CHORUS_FLOAT32, CHORUS_SUM, c, NULL));
    EXPECT_OK(chorus_allgather(NULL, NULL, 0, CHORUS_FLOAT32, c, NULL));
    EXPECT_OK(chorus_reduce_scatter(NULL, NULL, 0, CHORUS_FLOAT32, CHORUS_AVG, c, NULL));
    EXPECT_OK(chorus_broadcast(NULL, NULL, 0, CHORUS_FLOAT32, 0, c, NULL));
    EXPECT_OK(chorus_reduce(NULL, NULL, 0, CHORUS_FLOAT32, CHORUS_MAX, 0, c, NULL));
    EXPECT_OK(chorus_alltoall(NULL, NULL, 0, CHORUS_FLOAT32, c, NULL));
    EXPECT_OK(chorus_send(NULL, 0, CHORUS_FLOAT32, 0, c, NULL));
    EXPECT_OK(chorus_recv(NULL, 0, CHORUS_FLOAT32, 0, c, NULL));
}

static void test_self_sendrecv_group(void **state)
{
    chorus_comm_t c = g_comm;
    int32_t a[N], b[N];
    uint8_t x[5] = {1, 2, 3, 4, 5}, y[5] = {0};
    (void)state;

    for (int i = 0; i < N; i++) a[i] = i * i;
    memset(b, 0, sizeof b);
    EXPECT_OK(chorus_group_start());
    EXPECT_OK(chorus_group_start()); /* nesting: only the outermost end runs */
    EXPECT_OK(chorus_recv(b, N, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_send(a, N, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_group_end());
    assert_int_equal(b[1], 0);
    EXPECT_OK(chorus_send(x, 5, CHORUS_UINT8, 0, c, NULL));
    EXPECT_OK(chorus_recv(y, 5, CHORUS_UINT8, 0, c, NULL));
    EXPECT_OK(chorus_group_end());
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(x, y, sizeof x);
}

static void test_self_sendrecv_order(void **state)
{
    chorus_comm_t c = g_comm;
    int32_t a[N], b[N], a2[3] = {7, 8, 9}, b2[3] = {0};
    (void)state;

    for (int i = 0; i < N; i++) a[i] = i * i;
    memset(b, 0, sizeof b);
    EXPECT_OK(chorus_group_start());
    EXPECT_OK(chorus_recv(b, N, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_send(a, N, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_send(a2, 3, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_recv(b2, 3, CHORUS_INT32, 0, c, NULL));
    EXPECT_OK(chorus_group_end());
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(a2, b2, sizeof a2);
}

static void test_split(void **state)
{
    chorus_comm_t c = g_comm, sub = (chorus_comm_t)&sub, none = (chorus_comm_t)&none;
    int r = -1, n = -1;
    int64_t v[3] = {5, -6, 7}, w[3] = {0};
    (void)state;

    EXPECT_ERR(chorus_comm_split(c, 0, 0, NULL), CHORUS_ERR_INVALID_ARGUMENT, "newcomm_p");
    EXPECT_ERR(chorus_comm_split(c, -5, 0, &sub), CHORUS_ERR_INVALID_ARGUMENT, "color -5");
    assert_ptr_equal(sub, (chorus_comm_t)&sub);

    EXPECT_OK(chorus_comm_split(c, CHORUS_SPLIT_NOCOLOR, 0, &none));
    assert_null(none);

    EXPECT_OK(chorus_comm_split(c, 3, 10, &sub));
    assert_non_null(sub);
    assert_ptr_not_equal(sub, c);
    EXPECT_OK(chorus_comm_rank(sub, &r));
    EXPECT_OK(chorus_comm_size(sub, &n));
    assert_int_equal(r, 0);
    assert_int_equal(n, 1);
    EXPECT_OK(chorus_allreduce(v, w, 3, CHORUS_INT64, CHORUS_SUM, sub, NULL));
    assert_memory_equal(v, w, sizeof v);

    /* A group holds operations of one communicator. */
    EXPECT_OK(chorus_group_start());
    EXPECT_OK(chorus_send(v, 3, CHORUS_INT64, 0, c, NULL));
    EXPECT_ERR(chorus_recv(w, 3, CHORUS_INT64, 0, sub, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "one communicator");
    EXPECT_ERR(chorus_group_end(), CHORUS_ERR_INVALID_ARGUMENT, "one communicator");

    EXPECT_OK(chorus_comm_destroy(sub));
    /* The parent still works. */
    EXPECT_OK(chorus_allreduce(v, w, 3, CHORUS_INT64, CHORUS_MAX, c, NULL));
    assert_memory_equal(v, w, sizeof v);
}

/* chorus_comm_split's order on 4 ranks (threads of this process, the one place in this
 * file with more than one): a smaller key comes first, and ranks of equal key keep their
 * order in the parent. */
typedef struct {
    chorus_unique_id_t id;
    int rank;
    int eq_rank;  /* in the split by parity with one key for all */
    int rev_rank; /* in the split of everyone with key 1 for ranks 0-1, 0 for 2-3 */
    chorus_status_t st;
    char err[256];
} split_rank_t;

static void *split_rank_main(void *arg)
{
    split_rank_t *s = arg;
    chorus_comm_t c = NULL, eq = NULL, rev = NULL;

    s->st = chorus_comm_init(&c, 4, &s->id, s->rank);
    if (s->st == CHORUS_SUCCESS) s->st = chorus_comm_split(c, s->rank % 2, 7, &eq);
    if (s->st == CHORUS_SUCCESS) s->st = chorus_comm_rank(eq, &s->eq_rank);
    if (s->st == CHORUS_SUCCESS) s->st = chorus_comm_split(c, 0, s->rank < 2 ? 1 : 0, &rev);
    if (s->st == CHORUS_SUCCESS) s->st = chorus_comm_rank(rev, &s->rev_rank);
    if (s->st != CHORUS_SUCCESS) snprintf(s->err, sizeof s->err, "%s", chorus_last_error());
    if (rev != NULL) chorus_comm_destroy(rev);
    if (eq != NULL) chorus_comm_destroy(eq);
    if (c != NULL) chorus_comm_destroy(c);
    return NULL;
}

static void test_split_order(void **state)
{
    split_rank_t ranks[4];
    pthread_t th[4];
    chorus_unique_id_t id;
    const int want_eq[4] = {0, 0, 1, 1}, want_rev[4] = {2, 3, 0, 1};
    (void)state;

    EXPECT_OK(chorus_get_unique_id(&id));
    for (int r = 0; r < 4; r++) {
        memset(&ranks[r], 0, sizeof ranks[r]);
        ranks[r].id = id;
        ranks[r].rank = r;
        ranks[r].eq_rank = ranks[r].rev_rank = -1;
        assert_int_equal(pthread_create(&th[r], NULL, split_rank_main, &ranks[r]), 0);
    }
    for (int r = 0; r < 4; r++) assert_int_equal(pthread_join(th[r], NULL), 0);
    for (int r = 0; r < 4; r++) {
        if (ranks[r].st != CHORUS_SUCCESS) print_error("rank %d: %s\n", r, ranks[r].err);
        assert_int_equal(ranks[r].st, CHORUS_SUCCESS);
        if (ranks[r].eq_rank != want_eq[r] || ranks[r].rev_rank != want_rev[r])
            print_error("rank %d: new ranks %d and %d, want %d and %d\n", r, ranks[r].eq_rank,
                        ranks[r].rev_rank, want_eq[r], want_rev[r]);
        assert_int_equal(ranks[r].eq_rank, want_eq[r]);
        assert_int_equal(ranks[r].rev_rank, want_rev[r]);
    }
}

/* Recovery calls: their arguments, and a shrink of a one-rank comm (the whole protocol with
 * nobody else: it decides alone and forms a new comm). tests/fault/test_fault_shrink.sh and
 * tests/unit/test_agree.c cover the deaths. */
static void test_revoke_shrink(void **state)
{
    chorus_comm_t c, small = (chorus_comm_t)&small;
    int lost[4] = {-1, -1, -1, -1}, n = -1, r = -1;
    int32_t v[2] = {3, 4}, w[2] = {0};
    (void)state;

    EXPECT_ERR(chorus_comm_revoke(NULL), CHORUS_ERR_INVALID_ARGUMENT, "comm is NULL");
    EXPECT_ERR(chorus_comm_shrink(NULL, 0, &small), CHORUS_ERR_INVALID_ARGUMENT, "comm is NULL");
    EXPECT_ERR(chorus_comm_failed_ranks(NULL, lost, 4, &n), CHORUS_ERR_INVALID_ARGUMENT,
               "comm is NULL");
    assert_int_equal(new_comm(&c), CHORUS_SUCCESS);
    EXPECT_ERR(chorus_comm_shrink(c, 0, NULL), CHORUS_ERR_INVALID_ARGUMENT, "newcomm_p");
    EXPECT_ERR(chorus_comm_shrink(c, 1, &small), CHORUS_ERR_INVALID_ARGUMENT, "flags 0x1");
    EXPECT_ERR(chorus_comm_failed_ranks(c, NULL, 4, &n), CHORUS_ERR_INVALID_ARGUMENT, "max 4");
    EXPECT_ERR(chorus_comm_failed_ranks(c, lost, 4, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "count_p");
    EXPECT_ERR(chorus_comm_failed_ranks(c, lost, -1, &n), CHORUS_ERR_INVALID_ARGUMENT, "max -1");
    assert_ptr_equal(small, (chorus_comm_t)&small);
    EXPECT_OK(chorus_comm_failed_ranks(c, lost, 4, &n));
    assert_int_equal(n, 0);

    /* Revoked: every later call fails at once, and says why. */
    EXPECT_OK(chorus_comm_revoke(c));
    EXPECT_ERR(chorus_allreduce(v, w, 2, CHORUS_INT32, CHORUS_SUM, c, NULL), CHORUS_ERR_ABORTED,
               "revoked");
    EXPECT_OK(chorus_comm_shrink(c, 0, &small));
    assert_non_null(small);
    assert_ptr_not_equal(small, c);
    EXPECT_OK(chorus_comm_failed_ranks(c, NULL, 0, &n));
    assert_int_equal(n, 0);
    EXPECT_ERR(chorus_comm_shrink(c, 0, &small), CHORUS_ERR_INVALID_ARGUMENT, "shrunk already");
    EXPECT_OK(chorus_comm_destroy(c));
    EXPECT_OK(chorus_comm_rank(small, &r));
    EXPECT_OK(chorus_comm_size(small, &n));
    assert_int_equal(r, 0);
    assert_int_equal(n, 1);
    EXPECT_OK(chorus_allreduce(v, w, 2, CHORUS_INT32, CHORUS_SUM, small, NULL));
    assert_memory_equal(v, w, sizeof v);
    EXPECT_OK(chorus_comm_destroy(small));
}

/* chorus_comm_grow: its argument errors, then a 1-rank comm that takes in a second rank
 * (another thread joins with chorus_comm_init on the id), and an allreduce over the two. */
typedef struct {
    chorus_unique_id_t id;
    chorus_status_t status;
    int32_t sum;
} grow_joiner_t;

static void *grow_joiner(void *arg)
{
    grow_joiner_t *j = arg;
    chorus_comm_t c = NULL;
    int32_t v = 20;

    j->status = chorus_comm_init(&c, 2, &j->id, 1);
    if (j->status == CHORUS_SUCCESS) {
        j->status = chorus_allreduce(&v, &j->sum, 1, CHORUS_INT32, CHORUS_SUM, c, NULL);
        chorus_comm_destroy(c);
    }
    return NULL;
}

static void test_grow(void **state)
{
    chorus_comm_t c, big = (chorus_comm_t)&big;
    grow_joiner_t j;
    pthread_t t;
    int r = -1, n = -1;
    int32_t v = 22, sum = 0;
    (void)state;

    memset(&j, 0, sizeof j);
    EXPECT_ERR(chorus_comm_grow(NULL, 1, &j.id, &big), CHORUS_ERR_INVALID_ARGUMENT,
               "comm is NULL");
    assert_int_equal(new_comm(&c), CHORUS_SUCCESS);
    EXPECT_ERR(chorus_comm_grow(c, 1, &j.id, NULL), CHORUS_ERR_INVALID_ARGUMENT, "newcomm_p");
    EXPECT_ERR(chorus_comm_grow(c, 0, &j.id, &big), CHORUS_ERR_INVALID_ARGUMENT, "0 new ranks");
    EXPECT_ERR(chorus_comm_grow(c, -3, &j.id, &big), CHORUS_ERR_INVALID_ARGUMENT, "-3 new ranks");
    EXPECT_ERR(chorus_comm_grow(c, 1 << 30, &j.id, &big), CHORUS_ERR_INVALID_ARGUMENT,
               "new ranks");
    EXPECT_ERR(chorus_comm_grow(c, 1, NULL, &big), CHORUS_ERR_INVALID_ARGUMENT, "id is NULL");
    assert_ptr_equal(big, (chorus_comm_t)&big);

    EXPECT_OK(chorus_get_unique_id(&j.id));
    assert_int_equal(pthread_create(&t, NULL, grow_joiner, &j), 0);
    EXPECT_OK(chorus_comm_grow(c, 1, &j.id, &big));
    EXPECT_OK(chorus_comm_rank(big, &r));
    EXPECT_OK(chorus_comm_size(big, &n));
    assert_int_equal(r, 0);
    assert_int_equal(n, 2);
    EXPECT_OK(chorus_allreduce(&v, &sum, 1, CHORUS_INT32, CHORUS_SUM, big, NULL));
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(j.status, CHORUS_SUCCESS);
    assert_int_equal(sum, 42);
    assert_int_equal(j.sum, 42);
    /* The old comm is untouched and still works. */
    EXPECT_OK(chorus_allreduce(&v, &sum, 1, CHORUS_INT32, CHORUS_SUM, c, NULL));
    assert_int_equal(sum, 22);
    EXPECT_OK(chorus_comm_destroy(big));
    EXPECT_OK(chorus_comm_destroy(c));
}

static void test_abort_then_destroy(void **state)
{
    chorus_comm_t c;
    chorus_status_t st;
    float f[4] = {1, 2, 3, 4}, g[4];
    chorus_comm_t sub = (chorus_comm_t)&sub;
    (void)state;

    EXPECT_OK(new_comm(&c));
    EXPECT_OK(chorus_comm_abort(c));
    EXPECT_OK(chorus_comm_abort(c)); /* twice is fine */
    EXPECT_OK(chorus_comm_get_async_error(c, &st));
    assert_int_equal(st, CHORUS_ERR_ABORTED);
    EXPECT_ERR(chorus_allreduce(f, g, 4, CHORUS_FLOAT32, CHORUS_SUM, c, NULL),
               CHORUS_ERR_ABORTED, "failed earlier");
    EXPECT_ERR(chorus_barrier(c), CHORUS_ERR_ABORTED, "barrier");
    EXPECT_ERR(chorus_broadcast(f, g, 4, CHORUS_FLOAT32, 0, c, NULL), CHORUS_ERR_ABORTED,
               "aborted");
    EXPECT_ERR(chorus_comm_split(c, 0, 0, &sub), CHORUS_ERR_ABORTED, "comm_split");
    assert_ptr_equal(sub, (chorus_comm_t)&sub);
    EXPECT_OK(chorus_group_start());
    EXPECT_ERR(chorus_send(f, 4, CHORUS_FLOAT32, 0, c, NULL), CHORUS_ERR_ABORTED, "send");
    EXPECT_ERR(chorus_group_end(), CHORUS_ERR_ABORTED, "failed earlier");
    /* Bad arguments are still reported as such. */
    EXPECT_ERR(chorus_allreduce(f, g, 4, (chorus_dtype_t)42, CHORUS_SUM, c, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "unknown dtype 42");
    EXPECT_OK(chorus_comm_destroy(c));
}

/* ---- chorus_algorithm_name ---- */

static const char *const query_colls[] = {"allreduce", "allgather", "reduce_scatter", "broadcast",
                                          "reduce",    "alltoall",  "barrier"};
#define NQUERY (sizeof query_colls / sizeof query_colls[0])

/* The collectives each algorithm implements, in query_colls order (lib/algo/algo.c). */
static const struct {
    const char *name;
    int supports[NQUERY];
} query_algos[] = {
    {"ring", {1, 1, 1, 1, 1, 0, 0}},     {"tree", {1, 0, 0, 1, 1, 0, 0}},
    {"rd", {1, 1, 0, 0, 0, 0, 0}},       {"pairwise", {0, 0, 0, 0, 0, 1, 0}},
    {"dissemination", {0, 0, 0, 0, 0, 0, 1}}, {"rabenseifner", {1, 0, 1, 0, 0, 0, 0}},
    {"bruck", {0, 1, 0, 0, 0, 0, 0}},    {"swing", {1, 0, 0, 0, 0, 0, 0}},
    {"hier", {1, 0, 0, 0, 0, 0, 0}},
};

/* The name chorus_algorithm_name gives, failing the test on an error. */
static const char *query(chorus_comm_t c, const char *coll, size_t count, chorus_dtype_t dtype)
{
    const char *name = NULL;
    EXPECT_OK(chorus_algorithm_name(c, coll, count, dtype, &name));
    assert_non_null(name);
    assert_true(name[0] != '\0');
    return name;
}

/* Sets CHORUS_ALGO (NULL: unset) and makes a fresh communicator, which reads it. */
static chorus_comm_t comm_with_algo(const char *algo)
{
    chorus_comm_t c = NULL;

    if (algo != NULL)
        assert_int_equal(setenv("CHORUS_ALGO", algo, 1), 0);
    else
        assert_int_equal(unsetenv("CHORUS_ALGO"), 0);
    chorus__config_reload();
    EXPECT_OK(new_comm(&c));
    return c;
}

static void test_algorithm_name_bad_args(void **state)
{
    const char *name = "untouched";
    const chorus_dtype_t bad[] = {(chorus_dtype_t)42, (chorus_dtype_t)-1, CHORUS_NUM_DTYPES};
    const char *unknown[] = {"", "allreduc", "Allreduce", "sendrecv", "send", "allreduce "};
    char msg[64];
    (void)state;

    EXPECT_ERR(chorus_algorithm_name(NULL, "allreduce", 4, CHORUS_FLOAT32, &name),
               CHORUS_ERR_INVALID_ARGUMENT, "chorus_algorithm_name: comm is NULL");
    EXPECT_ERR(chorus_algorithm_name(g_comm, NULL, 4, CHORUS_FLOAT32, &name),
               CHORUS_ERR_INVALID_ARGUMENT, "rank 0: chorus_algorithm_name: collective is NULL");
    EXPECT_ERR(chorus_algorithm_name(g_comm, "allreduce", 4, CHORUS_FLOAT32, NULL),
               CHORUS_ERR_INVALID_ARGUMENT, "rank 0: chorus_algorithm_name: name_p is NULL");
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        EXPECT_ERR(chorus_algorithm_name(g_comm, unknown[i], 4, CHORUS_FLOAT32, &name),
                   CHORUS_ERR_INVALID_ARGUMENT,
                   "rank 0: chorus_algorithm_name: unknown collective");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(msg, sizeof msg, "rank 0: chorus_algorithm_name: unknown dtype %d", (int)bad[i]);
        EXPECT_ERR(chorus_algorithm_name(g_comm, "allreduce", 4, bad[i], &name),
                   CHORUS_ERR_INVALID_ARGUMENT, msg);
        /* The dtype is checked for a barrier too, though its count is ignored. */
        EXPECT_ERR(chorus_algorithm_name(g_comm, "barrier", 0, bad[i], &name),
                   CHORUS_ERR_INVALID_ARGUMENT, msg);
    }
    assert_string_equal(name, "untouched"); /* outputs are set only on success */
    /* A success clears the previous message. */
    assert_string_equal(query(g_comm, "barrier", 0, CHORUS_UINT8), "dissemination");
    assert_string_equal(chorus_last_error(), "");
}

static void test_algorithm_name_choices(void **state)
{
    char *saved = getenv("CHORUS_ALGO") ? strdup(getenv("CHORUS_ALGO")) : NULL;
    const char *auto_small[NQUERY], *auto_large[NQUERY];
    const size_t small = 1, large = (size_t)1 << 20; /* 4 bytes and 4 MiB of float32 */
    chorus_comm_t c;
    (void)state;

    /* Automatic choice without the cost model (CHORUS_TUNE=0): the size threshold of
     * lib/core/select.c (64 KiB per rank). The model's own choices are tested in
     * test_tune.c. */
    setenv("CHORUS_TUNE", "0", 1);
    c = comm_with_algo(NULL);
    for (size_t i = 0; i < NQUERY; i++) {
        auto_small[i] = query(c, query_colls[i], small, CHORUS_FLOAT32);
        auto_large[i] = query(c, query_colls[i], large, CHORUS_FLOAT32);
    }
    assert_string_equal(auto_small[0], "rd");
    assert_string_equal(auto_large[0], "ring");
    assert_string_equal(auto_small[1], "ring");
    assert_string_equal(auto_small[2], "ring");
    assert_string_equal(auto_small[3], "tree");
    assert_string_equal(auto_large[3], "ring");
    assert_string_equal(auto_small[4], "tree");
    assert_string_equal(auto_large[4], "ring");
    assert_string_equal(auto_small[5], "pairwise");
    assert_string_equal(auto_large[5], "pairwise");
    assert_string_equal(auto_small[6], "dissemination");
    assert_string_equal(query(c, "barrier", large, CHORUS_FLOAT64), "dissemination");
    /* Bytes decide, not elements: 20000 int8 are small, 20000 float64 are not. */
    assert_string_equal(query(c, "allreduce", 20000, CHORUS_INT8), "rd");
    assert_string_equal(query(c, "allreduce", 20000, CHORUS_FLOAT64), "ring");
    /* A count no call would accept saturates rather than wrapping to a small message. */
    assert_string_equal(query(c, "allreduce", SIZE_MAX, CHORUS_FLOAT64), "ring");
    /* The answer is a static string: the same pointer every time. */
    assert_ptr_equal(query(c, "alltoall", 8, CHORUS_INT32), query(c, "alltoall", 9, CHORUS_INT8));
    EXPECT_OK(chorus_comm_destroy(c));

    /* CHORUS_ALGO forces an algorithm wherever it implements the collective; elsewhere the
     * automatic choice stands. */
    for (size_t a = 0; a < sizeof query_algos / sizeof query_algos[0]; a++) {
        c = comm_with_algo(query_algos[a].name);
        for (size_t i = 0; i < NQUERY; i++) {
            const char *want_s = query_algos[a].supports[i] ? query_algos[a].name : auto_small[i];
            const char *want_l = query_algos[a].supports[i] ? query_algos[a].name : auto_large[i];
            assert_string_equal(query(c, query_colls[i], small, CHORUS_FLOAT32), want_s);
            assert_string_equal(query(c, query_colls[i], large, CHORUS_FLOAT32), want_l);
        }
        EXPECT_OK(chorus_comm_destroy(c));
    }
    /* The long name parses too; a bad name falls back to the automatic choice. */
    c = comm_with_algo("recursive_doubling");
    assert_string_equal(query(c, "allreduce", large, CHORUS_FLOAT32), "rd");
    EXPECT_OK(chorus_comm_destroy(c));
    c = comm_with_algo("no_such_algorithm");
    assert_string_equal(query(c, "allreduce", large, CHORUS_FLOAT32), "ring");
    assert_string_equal(query(c, "allreduce", small, CHORUS_FLOAT32), "rd");
    EXPECT_OK(chorus_comm_destroy(c));
    /* A communicator keeps the setting it was created with. */
    c = comm_with_algo("tree");
    assert_int_equal(unsetenv("CHORUS_ALGO"), 0);
    chorus__config_reload();
    assert_string_equal(query(c, "allreduce", large, CHORUS_FLOAT32), "tree");
    EXPECT_OK(chorus_comm_destroy(c));

    if (saved != NULL) assert_int_equal(setenv("CHORUS_ALGO", saved, 1), 0);
    assert_int_equal(unsetenv("CHORUS_TUNE"), 0);
    chorus__config_reload();
    free(saved);
}

int main(void)
{
    /* These tables check the host-only answers (a stream with host buffers is
     * UNSUPPORTED there); with a GPU the same call is INVALID_ARGUMENT, which
     * tests/gpu/coll_matrix.c checks. So no GPU plugin, whatever the machine has. */
    setenv("CHORUS_CUDA_PLUGIN", "none", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_info),
        cmocka_unit_test(test_null_comm_everywhere),
        cmocka_unit_test(test_init_bad_args),
        cmocka_unit_test(test_bad_dtype_op),
        cmocka_unit_test(test_bad_root_peer),
        cmocka_unit_test(test_null_buffers),
        cmocka_unit_test(test_count_overflow_and_stream),
        cmocka_unit_test(test_partial_overlap),
        cmocka_unit_test(test_group_errors),
        cmocka_unit_test(test_allreduce_every_dtype_op),
        cmocka_unit_test(test_avg_int_and_reduce_variants),
        cmocka_unit_test(test_copy_collectives),
        cmocka_unit_test(test_count_zero),
        cmocka_unit_test(test_self_sendrecv_group),
        cmocka_unit_test(test_self_sendrecv_order),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_order),
        cmocka_unit_test(test_abort_then_destroy),
        cmocka_unit_test(test_revoke_shrink),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_algorithm_name_bad_args),
        cmocka_unit_test(test_algorithm_name_choices),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
