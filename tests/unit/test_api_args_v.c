/*
 * The arguments of gather, scatter and the v-forms (issue 41), as test_api_args.c does for
 * the older collectives: every bad argument returns the documented status with a message
 * naming the rank, the operation and what is wrong, and the valid calls on one rank give
 * the exact result. The checks that need several blocks (overlaps, a rank's own count) run
 * on rank 0 of a 3-rank communicator made by threads of this process; they fail before any
 * communication, so the other ranks never call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpu/gpu.h"

#include "chorus.h"

#include <pthread.h>

#define EXPECT_ERR(call, code, what)                                                      \
    do {                                                                                  \
        chorus_status_t st_ = (call);                                                     \
        const char *msg_ = chorus_last_error();                                           \
        if (st_ != (code) || strstr(msg_, (what)) == NULL)                                \
            print_error("%s -> %d (%s), want %d naming \"%s\"\n", #call, (int)st_, msg_,  \
                        (int)(code), (what));                                             \
        assert_int_equal(st_, (code));                                                    \
        assert_non_null(strstr(msg_, (what)));                                            \
    } while (0)

#define EXPECT_OK(call)                                                                 \
    do {                                                                                \
        chorus_status_t st_ = (call);                                                   \
        if (st_ != CHORUS_SUCCESS) print_error("%s: %s\n", #call, chorus_last_error()); \
        assert_int_equal(st_, CHORUS_SUCCESS);                                          \
    } while (0)

#define INVAL CHORUS_ERR_INVALID_ARGUMENT
#define I32 CHORUS_INT32

static chorus_comm_t g_one;   /* one rank */
static chorus_comm_t g_three[3];

typedef struct {
    chorus_unique_id_t id;
    int rank;
    chorus_status_t st;
} init_t;

static void *init_main(void *arg)
{
    init_t *t = arg;
    t->st = chorus_comm_init(&g_three[t->rank], 3, &t->id, t->rank);
    return NULL;
}

static int setup(void **state)
{
    chorus_unique_id_t id;
    init_t t[3];
    pthread_t th[3];
    (void)state;

    if (chorus_get_unique_id(&id) != CHORUS_SUCCESS || chorus_comm_init(&g_one, 1, &id, 0))
        return -1;
    if (chorus_get_unique_id(&id) != CHORUS_SUCCESS) return -1;
    for (int r = 0; r < 3; r++) {
        t[r].id = id;
        t[r].rank = r;
        if (pthread_create(&th[r], NULL, init_main, &t[r]) != 0) return -1;
    }
    for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 3; r++)
        if (t[r].st != CHORUS_SUCCESS) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    chorus_comm_destroy(g_one);
    for (int r = 0; r < 3; r++) chorus_comm_destroy(g_three[r]);
    return 0;
}

static void test_null_and_codes(void **state)
{
    int32_t a[64] = {0}, b[64];
    size_t c1[1] = {4}, d1[1] = {0};
    chorus_comm_t c = g_one;
    chorus_request_t req = NULL;
    int stream;
    (void)state;

    EXPECT_ERR(chorus_gather(a, b, 4, I32, 0, NULL, NULL), INVAL, "gather: comm is NULL");
    EXPECT_ERR(chorus_alltoallv(a, b, c1, d1, c1, d1, I32, NULL, NULL), INVAL,
               "alltoallv: comm is NULL");
    EXPECT_ERR(chorus_gather(NULL, b, 4, I32, 0, c, NULL), INVAL, "rank 0: gather: sendbuf is NULL");
    EXPECT_ERR(chorus_gather(a, NULL, 4, I32, 0, c, NULL), INVAL, "gather: recvbuf is NULL");
    EXPECT_ERR(chorus_scatter(NULL, b, 4, I32, 0, c, NULL), INVAL, "scatter: sendbuf is NULL");
    EXPECT_ERR(chorus_scatter(a, b, 4, I32, 1, c, NULL), INVAL, "scatter: root 1 out of range");
    EXPECT_ERR(chorus_gather(a, b, 4, I32, -1, c, NULL), INVAL, "gather: root -1 out of range");
    EXPECT_ERR(chorus_gather(a, b, 4, (chorus_dtype_t)77, 0, c, NULL), INVAL,
               "gather: unknown dtype 77");
    EXPECT_ERR(chorus_allgatherv(a, b, 4, NULL, d1, I32, c, NULL), INVAL,
               "allgatherv: recvcounts is NULL");
    EXPECT_ERR(chorus_allgatherv(a, b, 4, c1, NULL, I32, c, NULL), INVAL,
               "allgatherv: displs is NULL");
    EXPECT_ERR(chorus_allgatherv(NULL, b, 4, c1, d1, I32, c, NULL), INVAL,
               "allgatherv: sendbuf is NULL");
    EXPECT_ERR(chorus_allgatherv(a, NULL, 4, c1, d1, I32, c, NULL), INVAL,
               "allgatherv: recvbuf is NULL");
    EXPECT_ERR(chorus_allgatherv(a, b, 3, c1, d1, I32, c, NULL), INVAL,
               "sendcount 3 but recvcounts[0] = 4");
    EXPECT_ERR(chorus_reduce_scatterv(a, b, NULL, I32, CHORUS_SUM, c, NULL), INVAL,
               "reduce_scatterv: recvcounts is NULL");
    EXPECT_ERR(chorus_reduce_scatterv(a, b, c1, I32, (chorus_op_t)9, c, NULL), INVAL,
               "reduce_scatterv: unknown op 9");
    EXPECT_ERR(chorus_reduce_scatterv(NULL, b, c1, I32, CHORUS_SUM, c, NULL), INVAL,
               "reduce_scatterv: sendbuf is NULL");
    EXPECT_ERR(chorus_alltoallv(a, b, NULL, d1, c1, d1, I32, c, NULL), INVAL,
               "alltoallv: sendcounts is NULL");
    EXPECT_ERR(chorus_alltoallv(a, b, c1, NULL, c1, d1, I32, c, NULL), INVAL,
               "alltoallv: sdispls is NULL");
    EXPECT_ERR(chorus_alltoallv(a, b, c1, d1, NULL, d1, I32, c, NULL), INVAL,
               "alltoallv: recvcounts is NULL");
    EXPECT_ERR(chorus_alltoallv(a, b, c1, d1, c1, NULL, I32, c, NULL), INVAL,
               "alltoallv: rdispls is NULL");
    EXPECT_ERR(chorus_alltoallv(a, NULL, c1, d1, c1, d1, I32, c, NULL), INVAL,
               "alltoallv: recvbuf is NULL");
    /* Host memory with a stream is refused: unsupported without a GPU, and with one (or the
     * fake plugin) an invalid argument, since the buffers are host memory. */
    EXPECT_ERR(chorus_gather(a, b, 4, I32, 0, c, &stream),
               chorus__gpu() != NULL ? INVAL : CHORUS_ERR_UNSUPPORTED, "gather");
    EXPECT_ERR(chorus_allgatherv(a, b, 4, c1, d1, I32, c, &stream),
               chorus__gpu() != NULL ? INVAL : CHORUS_ERR_UNSUPPORTED, "allgatherv");
    /* Nonblocking: the same checks, no request made. */
    EXPECT_ERR(chorus_igather(a, b, 4, I32, 0, c, NULL), INVAL, "igather: req_p is NULL");
    EXPECT_ERR(chorus_ialltoallv(a, b, c1, d1, NULL, d1, I32, c, &req), INVAL,
               "alltoallv: recvcounts is NULL");
    assert_null(req);
    EXPECT_ERR(chorus_ireduce_scatterv(a, b, c1, I32, (chorus_op_t)-1, c, &req), INVAL,
               "unknown op");
    assert_null(req);
}

static void test_blocks(void **state)
{
    int32_t buf[256] = {0}, out[256];
    chorus_comm_t c = g_three[0];
    size_t four[3] = {4, 4, 4}, d_ok[3] = {0, 10, 20}, d_bad[3] = {0, 13, 3};
    size_t huge[3] = {4, (size_t)1 << 40, 4}, d_end[3] = {0, 10, SIZE_MAX - 2};
    size_t sc[3] = {4, 4, 4}, sd[3] = {0, 0, 0}, rc[3] = {5, 4, 4};
    (void)state;

    /* Overlapping receive blocks: both ranks named. */
    EXPECT_ERR(chorus_allgatherv(buf, out, 4, four, d_bad, I32, c, NULL), INVAL,
               "rank 0: allgatherv: the blocks of ranks 0 and 2 overlap");
    EXPECT_ERR(chorus_allgatherv(buf, out, 4, huge, d_ok, I32, c, NULL), INVAL,
               "recvcounts[1] = 1099511627776 elements of 4 bytes is too large");
    EXPECT_ERR(chorus_allgatherv(buf, out, 4, four, d_end, I32, c, NULL), INVAL,
               "the block of rank 2");
    EXPECT_ERR(chorus_reduce_scatterv(buf, out, huge, I32, CHORUS_SUM, c, NULL), INVAL,
               "too large");
    /* alltoallv: send blocks may overlap (they are only read), receive blocks may not. */
    EXPECT_ERR(chorus_alltoallv(buf, out, sc, sd, four, sd, I32, c, NULL), INVAL,
               "alltoallv: the blocks of ranks 0 and 1 overlap (recvcounts[0] = 4 at rdispls[0]");
    EXPECT_ERR(chorus_alltoallv(buf, out, sc, sd, rc, d_ok, I32, c, NULL), INVAL,
               "sendcounts[0] = 4 but recvcounts[0] = 5");
    EXPECT_ERR(chorus_alltoallv(buf, buf + 8, sc, d_ok, four, d_ok, I32, c, NULL), INVAL,
               "alltoallv has no in-place form");
    /* Overlaps that are not the in-place layouts. */
    EXPECT_ERR(chorus_allgatherv(buf + 11, buf, 4, four, d_ok, I32, c, NULL), INVAL,
               "sendbuf == recvbuf + displs[rank]");
    EXPECT_ERR(chorus_reduce_scatterv(buf, buf + 1, four, I32, CHORUS_SUM, c, NULL), INVAL,
               "recvbuf == sendbuf + the sum of recvcounts[0..rank)");
    EXPECT_ERR(chorus_gather(buf + 4, buf, 4, I32, 0, c, NULL), INVAL,
               "gather: sendbuf and recvbuf overlap");
    EXPECT_ERR(chorus_scatter(buf, buf + 3, 4, I32, 0, c, NULL), INVAL,
               "scatter: sendbuf and recvbuf overlap");
    /* Not the root: gather's recvbuf and scatter's sendbuf are not used at all. */
    EXPECT_ERR(chorus_gather(NULL, NULL, 4, I32, 1, c, NULL), INVAL, "gather: sendbuf is NULL");
    EXPECT_ERR(chorus_scatter(NULL, NULL, 4, I32, 1, c, NULL), INVAL, "scatter: recvbuf is NULL");
}

static void test_one_rank(void **state)
{
    int32_t in[16], out[32];
    chorus_comm_t c = g_one;
    chorus_request_t req = NULL;
    size_t n5[1] = {5}, at3[1] = {3}, zero[1] = {0}, at0[1] = {0};
    const char *name;
    double us;
    (void)state;

    for (int i = 0; i < 16; i++) in[i] = 100 + i;
    memset(out, 0xee, sizeof out);
    EXPECT_OK(chorus_gather(in, out, 5, I32, 0, c, NULL));
    assert_memory_equal(out, in, 5 * sizeof *in);
    assert_int_equal(out[5], (int32_t)0xeeeeeeee);
    memset(out, 0xee, sizeof out);
    EXPECT_OK(chorus_scatter(in, out, 5, I32, 0, c, NULL));
    assert_memory_equal(out, in, 5 * sizeof *in);
    memset(out, 0xee, sizeof out);
    EXPECT_OK(chorus_allgatherv(in, out, 5, n5, at3, I32, c, NULL));
    assert_int_equal(out[2], (int32_t)0xeeeeeeee); /* before the block: untouched */
    assert_memory_equal(out + 3, in, 5 * sizeof *in);
    assert_int_equal(out[8], (int32_t)0xeeeeeeee);
    memset(out, 0xee, sizeof out);
    EXPECT_OK(chorus_reduce_scatterv(in, out, n5, I32, CHORUS_AVG, c, NULL));
    assert_memory_equal(out, in, 5 * sizeof *in);
    memset(out, 0xee, sizeof out);
    EXPECT_OK(chorus_alltoallv(in, out, n5, at3, n5, at0, I32, c, NULL));
    assert_memory_equal(out, in + 3, 5 * sizeof *in);
    /* In place. */
    memcpy(out, in, sizeof in);
    EXPECT_OK(chorus_gather(out, out, 5, I32, 0, c, NULL));
    EXPECT_OK(chorus_allgatherv(out + 3, out, 5, n5, at3, I32, c, NULL));
    EXPECT_OK(chorus_reduce_scatterv(out, out, n5, I32, CHORUS_SUM, c, NULL));
    assert_memory_equal(out, in, sizeof in);
    /* Nothing to move: NULL buffers are fine. */
    EXPECT_OK(chorus_gather(NULL, NULL, 0, I32, 0, c, NULL));
    EXPECT_OK(chorus_allgatherv(NULL, NULL, 0, zero, at0, I32, c, NULL));
    EXPECT_OK(chorus_reduce_scatterv(NULL, NULL, zero, I32, CHORUS_MAX, c, NULL));
    EXPECT_OK(chorus_alltoallv(NULL, NULL, zero, at0, zero, at0, I32, c, NULL));
    /* Nonblocking. */
    memset(out, 0xee, sizeof out);
    EXPECT_OK(chorus_iallgatherv(in, out, 5, n5, at3, I32, c, &req));
    EXPECT_OK(chorus_wait(&req));
    assert_memory_equal(out + 3, in, 5 * sizeof *in);
    EXPECT_OK(chorus_iscatter(in, out, 2, I32, 0, c, &req));
    EXPECT_OK(chorus_wait(&req));
    assert_memory_equal(out, in, 2 * sizeof *in);
    /* Introspection: one algorithm each, which the model does not cost. */
    EXPECT_OK(chorus_algorithm_name(c, "gather", 5, I32, &name));
    assert_string_equal(name, "direct");
    EXPECT_OK(chorus_algorithm_name(c, "allgatherv", 5, I32, &name));
    assert_string_equal(name, "ring");
    EXPECT_OK(chorus_algorithm_name(c, "alltoallv", 5, I32, &name));
    assert_string_equal(name, "pairwise");
    EXPECT_ERR(chorus_algorithm_predict(c, "scatter", NULL, 5, I32, &us), CHORUS_ERR_UNSUPPORTED,
               "does not cover scatter");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_and_codes),
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_one_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
