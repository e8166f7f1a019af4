/*
 * The UCX transport: the transport contract suite (tests/unit/transport_contract.h) over
 * UCP, then what is particular to it: the address blob, a rogue that does not know the
 * job's secret, and the stub of a build without UCX. The cases run over whatever UCX_TLS
 * is in effect (tests/run_tests.sh also runs the collective matrix over tcp and sm,self).
 */
#include "unit/transport_contract.h"

#ifdef CHORUS_HAVE_UCX
#include "transport/ucx/ucx.h"
#endif

static tpc_config_t ucx_cfg = {&chorus__tp_ucx_ops, 0};

#ifdef CHORUS_HAVE_UCX

/* An instance that is never connected: init, get_addr (the blob fits and starts with the
 * magic), wait and progress with nothing to do, fini; bad parameters are refused. */
static void test_init_fini(void **state)
{
    uint8_t secret[CHORUS_SECRET_BYTES] = {1};
    chorus_tp_params_t params = {.rank = 0, .nranks = 3, .secret = secret};
    uint8_t blob[CHORUS_TP_BLOB_MAX];
    chorus_tp_t *tp = NULL;
    size_t len = 0;
    (void)state;
    assert_int_equal(chorus__tp_ucx_ops.init(NULL, &tp), CHORUS_ERR_INVALID_ARGUMENT);
    params.rank = 3;
    assert_int_equal(chorus__tp_ucx_ops.init(&params, &tp), CHORUS_ERR_INVALID_ARGUMENT);
    params.rank = 0;
    assert_int_equal(chorus__tp_ucx_ops.init(&params, &tp), CHORUS_SUCCESS);
    assert_int_equal(chorus__tp_ucx_ops.get_addr(tp, blob, &len), CHORUS_SUCCESS);
    assert_true(len > UCX_BLOB_HEAD && len <= CHORUS_TP_BLOB_MAX);
    assert_int_equal(chorus__ucx_get_be32(blob), UCX_BLOB_MAGIC);
    assert_int_equal(chorus__ucx_get_be32(blob + 4 + UCX_NONCE_BYTES), len - UCX_BLOB_HEAD);
    assert_int_equal(chorus__tp_ucx_ops.wait(tp, 1000), CHORUS_SUCCESS);
    assert_int_equal(chorus__tp_ucx_ops.progress(tp), CHORUS_SUCCESS);
    chorus__tp_ucx_ops.fini(tp);
}

/* Data tags: distinct for distinct (sender, sequence) under one key, never the control
 * bit pattern of a handshake for small keys, and the key changes every tag. */
static void test_tags(void **state)
{
    (void)state;
    assert_int_not_equal(chorus__ucx_data_tag(1, 0, 0), chorus__ucx_data_tag(2, 0, 0));
    assert_int_not_equal(chorus__ucx_data_tag(1, 0, 0), chorus__ucx_data_tag(1, 1, 0));
    assert_int_equal(chorus__ucx_data_tag(3, 5, 0), (uint64_t)3 << UCX_SEQ_BITS | 5);
    assert_int_equal(chorus__ucx_data_tag(3, 5, 0xF0F0) ^ 0xF0F0, chorus__ucx_data_tag(3, 5, 0));
    assert_int_equal(chorus__ucx_data_tag(UCX_MAX_RANKS - 1, 7, 0) & UCX_TAG_CTRL, 0);
    assert_int_not_equal(chorus__ucx_ctrl_tag(1, 9, 0) & UCX_TAG_CTRL, 0);
    assert_int_not_equal(chorus__ucx_ctrl_tag(1, 9, 0), chorus__ucx_ctrl_tag(2, 9, 0));
    assert_int_not_equal(chorus__ucx_ctrl_tag(1, 9, 0), chorus__ucx_ctrl_tag(1, 9, 1));
    assert_int_not_equal(chorus__ucx_ctrl_tag(1, 9, 0), chorus__ucx_ctrl_tag(1, 10, 0));
}

/* A rogue process with rank 0's identity but a wrong secret (arg 1) or another
 * communicator's nonce and id (arg 0) sends its handshake to rank 1 before the real rank 0
 * does. Rank 1 must refuse it and still connect to rank 0; the rogue never connects. */
static int rogue_main(const uint8_t *blobs, int arg)
{
    uint8_t secret[CHORUS_SECRET_BYTES];
    uint8_t mask[2] = {0, 1};
    chorus_tp_params_t params;
    chorus_tp_t *tp;

    memcpy(secret, tpc_secret, sizeof(secret));
    if (arg == 1) secret[0] ^= 1;
    memset(&params, 0, sizeof(params));
    params.rank = 0;
    params.nranks = 2;
    params.secret = secret;
    params.comm_id = arg == 1 ? tpc_comm_id : tpc_comm_id + 1;
    if (chorus__tp_ucx_ops.init(&params, &tp) != CHORUS_SUCCESS) return 10;
    /* Rank 1 never proves the secret to this instance: its proof is bound to the real rank
     * 0's nonce, so the rogue must end in CHORUS_ERR_AUTH or TIMEOUT, never connect. */
    chorus_status_t st =
        chorus__tp_ucx_ops.connect_all(tp, mask, blobs, chorus__deadline_after(3.0));
    chorus__tp_ucx_ops.fini(tp);
    return st == CHORUS_SUCCESS ? 12 : 0;
}

/* The rogue gets a head start so that rank 1 meets it before the real rank 0. */
static void run_rogue(int arg)
{
    tpc_run_rogue(&ucx_cfg, rogue_main, arg, 300000000);
}

static void test_rogue_wrong_comm(void **state)
{
    (void)state;
    run_rogue(0);
}

static void test_rogue_wrong_secret(void **state)
{
    (void)state;
    run_rogue(1);
}

/* Throughput of 8 MiB messages from rank 0 to rank 1, 4 in flight (informational), and
 * the last message into each of rank 1's buffers checked whole. Rank 1 starts with its
 * buffers poisoned (the complement of their last message) and the messages into a buffer
 * alternate between that complement and the pattern, ending on the pattern: a byte that
 * any message leaves unwritten, the last included, then still holds a complement and
 * fails the check, at no cost inside the timed loop. */
static int case_bandwidth(tpc_ctx_t *ctx)
{
    enum { MSGS = 32, INFLIGHT = 4, ROUNDS = MSGS / INFLIGHT };
    const size_t n = 8u << 20;
    uint8_t *bufs[INFLIGHT], *comp[INFLIGHT] = {NULL};
    chorus_tp_req_t reqs[INFLIGHT];
    memset(reqs, 0, sizeof(reqs));
    for (int i = 0; i < INFLIGHT; i++) {
        bufs[i] = malloc(n);
        if (bufs[i] == NULL) return tpc_fail(ctx, "malloc");
        if (ctx->rank == 0) {
            comp[i] = malloc(n);
            if (comp[i] == NULL) return tpc_fail(ctx, "malloc");
            tpc_fill(bufs[i], n, 0, 1, 7 + i);
            tpc_poison(comp[i], n, 0, 1, 7 + i);
        } else {
            tpc_poison(bufs[i], n, 0, 1, 7 + i);
        }
        reqs[i].done = 1;
    }
    if (tpc_barrier(ctx) != 0) return 1;
    uint64_t t0 = chorus__now_ns();
    for (int m = 0; m < MSGS; m++) {
        int slot = m % INFLIGHT, round = m / INFLIGHT;
        chorus_tp_req_t *req = &reqs[slot];
        if (tpc_wait_reqs(ctx, req, 1, TPC_WAIT_S, NULL) != 0) return tpc_fail(ctx, "hung");
        if (req->status != CHORUS_SUCCESS) return tpc_fail(ctx, "message %d failed", m);
        uint8_t *out = (ROUNDS - 1 - round) % 2 == 0 ? bufs[slot] : comp[slot];
        chorus_status_t st = ctx->rank == 0 ? ctx->ops->isend(ctx->tp, 1, out, n, req)
                                            : ctx->ops->irecv(ctx->tp, 0, bufs[slot], n, req);
        if (st != CHORUS_SUCCESS) return tpc_fail(ctx, "post");
    }
    if (tpc_wait_reqs(ctx, reqs, INFLIGHT, TPC_WAIT_S, NULL) != 0) return tpc_fail(ctx, "hung");
    double s = (double)(chorus__now_ns() - t0) / 1e9;
    for (int i = 0; i < INFLIGHT; i++) {
        long long bad = ctx->rank == 1 ? tpc_check(bufs[i], n, 0, 1, 7 + i) : -1;
        if (reqs[i].status != CHORUS_SUCCESS || bad >= 0) {
            return tpc_fail(ctx, "bandwidth: last message into buffer %d: status %d, bad byte %lld",
                            i, (int)reqs[i].status, bad);
        }
        free(bufs[i]);
        free(comp[i]);
    }
    if (ctx->rank == 1) {
        const char *tls = getenv("UCX_TLS");
        printf("ucx (UCX_TLS=%s): %d x 8 MiB rank 0 -> 1: %.2f GB/s (%.3f s)\n",
               tls != NULL ? tls : "default", MSGS, (double)MSGS * (double)n / s / 1e9, s);
    }
    return tpc_barrier(ctx);
}

static void test_bandwidth(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&ucx_cfg, 2, case_bandwidth, 0, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_fini),
        cmocka_unit_test(test_tags),
        TPC_CONTRACT_TESTS(&ucx_cfg),
        cmocka_unit_test(test_rogue_wrong_comm),
        cmocka_unit_test(test_rogue_wrong_secret),
        cmocka_unit_test(test_bandwidth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* !CHORUS_HAVE_UCX */

/* Without UCX the transport is a stub that says what is missing. */
static void test_stub(void **state)
{
    uint8_t secret[CHORUS_SECRET_BYTES] = {1};
    chorus_tp_params_t params = {.rank = 0, .nranks = 2, .secret = secret};
    chorus_tp_t *tp = NULL;
    (void)state;
    assert_int_equal(chorus__tp_ucx_ops.init(&params, &tp), CHORUS_ERR_UNSUPPORTED);
    assert_non_null(strstr(chorus_last_error(), "libucx-dev"));
    printf("skipped: built without UCX (apt-get install libucx-dev)\n");
    skip();
}

int main(void)
{
    (void)ucx_cfg;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stub)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
