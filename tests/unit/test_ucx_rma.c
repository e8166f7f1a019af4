/*
 * The UCX transport's registration cache and RMA rendezvous, for real, over UCX_TLS=tcp and
 * UCX_TLS=sm,self (each case runs once per setting, two forked ranks, with
 * CHORUS_UCX_RMA_MIN=64K): messages below, at and above the threshold with exact bytes, a
 * cache hit on the second send of a buffer, a buffer unmapped and mapped again between sends,
 * mismatched lengths across the two paths, and forged RTRs; every error must name the rank
 * and the peer, and nothing may hang.
 */
#include "unit/transport_contract.h"

#ifdef CHORUS_HAVE_UCX
#include "transport/ucx/ucx.h"
#include "util/config.h"
#include "util/regcache.h"

#include <sys/mman.h>

#define RMA_MIN ((size_t)64 << 10)

static tpc_config_t ucx_cfg = {&chorus__tp_ucx_ops, 0};
static const char *const tls_list[] = {"tcp", "sm,self"};

static ucx_tp_t *ucx(tpc_ctx_t *ctx)
{
    return (ucx_tp_t *)ctx->tp;
}

/* One message of n bytes from rank 0 to rank 1 (pattern seq), checked byte for byte. */
static int one_message(tpc_ctx_t *ctx, uint8_t *buf, size_t n, int seq)
{
    chorus_tp_req_t req;
    chorus_status_t st;

    memset(&req, 0, sizeof(req));
    if (ctx->rank == 0) {
        tpc_fill(buf, n, 0, 1, seq);
        st = ctx->ops->isend(ctx->tp, 1, buf, n, &req);
    } else {
        tpc_poison(buf, n, 0, 1, seq);
        st = ctx->ops->irecv(ctx->tp, 0, buf, n, &req);
    }
    if (st != CHORUS_SUCCESS) return tpc_fail(ctx, "post of %zu bytes", n);
    if (tpc_wait_reqs(ctx, &req, 1, TPC_WAIT_S, NULL) != 0) return tpc_fail(ctx, "%zu hung", n);
    if (req.status != CHORUS_SUCCESS) return tpc_fail(ctx, "%zu bytes: status %d", n, req.status);
    long long bad = ctx->rank == 1 ? tpc_check(buf, n, 0, 1, seq) : -1;
    if (bad >= 0) return tpc_fail(ctx, "%zu bytes: byte %lld wrong", n, bad);
    return 0;
}

/* Sizes around the threshold: exact bytes, and only those at or above it go by RMA. */
static int case_sizes(tpc_ctx_t *ctx)
{
    static const size_t sizes[] = {RMA_MIN - 1, RMA_MIN, RMA_MIN + 1, (1u << 20) + 3, 8u << 20};
    uint8_t *buf = malloc((8u << 20) + 64);

    if (buf == NULL) return tpc_fail(ctx, "malloc");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t before = ctx->rank == 0 ? ucx(ctx)->rma_sends : ucx(ctx)->rma_recvs;
        /* An odd offset: registrations are rounded out to pages. */
        if (one_message(ctx, buf + (i & 1) * 7, sizes[i], (int)i) != 0) return 1;
        uint64_t after = ctx->rank == 0 ? ucx(ctx)->rma_sends : ucx(ctx)->rma_recvs;
        if (after - before != (sizes[i] >= RMA_MIN)) {
            return tpc_fail(ctx, "%zu bytes: %llu RMA transfers, want %d", sizes[i],
                            (unsigned long long)(after - before), sizes[i] >= RMA_MIN);
        }
    }
    free(buf);
    return tpc_barrier(ctx);
}

/* The second send of a buffer finds its registration: a hit, no new miss, on both sides. */
static int case_cache_hit(tpc_ctx_t *ctx)
{
    const size_t n = 1u << 20;
    uint8_t *buf = malloc(n);
    chorus_regcache_stats_t s1, s2;

    if (buf == NULL) return tpc_fail(ctx, "malloc");
    if (one_message(ctx, buf, n, 1) != 0) return 1;
    chorus__regcache_stats(ucx(ctx)->regcache, &s1);
    if (one_message(ctx, buf, n, 2) != 0) return 1;
    chorus__regcache_stats(ucx(ctx)->regcache, &s2);
    if (ucx(ctx)->mem_events && (s2.hits <= s1.hits || s2.misses != s1.misses)) {
        return tpc_fail(ctx, "second send: hits %llu -> %llu, misses %llu -> %llu",
                        (unsigned long long)s1.hits, (unsigned long long)s2.hits,
                        (unsigned long long)s1.misses, (unsigned long long)s2.misses);
    }
    if (!ucx(ctx)->mem_events && s2.entries != 0)
        return tpc_fail(ctx, "without memory events nothing may stay registered");
    free(buf);
    return tpc_barrier(ctx);
}

/* A buffer unmapped and mapped again between two sends (mmap itself, not malloc: whether
 * free() unmaps depends on the allocator, and valgrind's never does): the stale
 * registration is dropped (UCX's unmap event) and the second message is exact. */
static int case_realloc(tpc_ctx_t *ctx)
{
    const size_t n = 8u << 20;
    chorus_regcache_stats_t s1, s2;
    uint8_t *buf = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (buf == MAP_FAILED) return tpc_fail(ctx, "mmap");
    if (one_message(ctx, buf, n, 3) != 0) return 1;
    chorus__regcache_stats(ucx(ctx)->regcache, &s1);
    munmap(buf, n);
    buf = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return tpc_fail(ctx, "mmap");
    if (one_message(ctx, buf, n, 4) != 0) return 1;
    chorus__regcache_stats(ucx(ctx)->regcache, &s2);
    if (ucx(ctx)->mem_events && s2.invalidations <= s1.invalidations) {
        return tpc_fail(ctx, "the unmapped buffer's registration was not invalidated");
    }
    munmap(buf, n);
    return tpc_barrier(ctx);
}

/* Waits for req, which must fail with CHORUS_ERR_MISMATCH for a length mismatch and
 * CHORUS_ERR_REMOTE for anything else, and a message naming this rank, the peer and
 * `what`. */
static int expect_error(tpc_ctx_t *ctx, chorus_tp_req_t *req, const char *what)
{
    chorus_status_t want_status =
        strstr(what, "length mismatch") != NULL ? CHORUS_ERR_MISMATCH : CHORUS_ERR_REMOTE;
    char want[64];

    if (tpc_wait_reqs(ctx, req, 1, TPC_WAIT_S, NULL) != 0) return tpc_fail(ctx, "%s: hung", what);
    if (req->status != want_status) {
        return tpc_fail(ctx, "%s: status %d, not %s", what, req->status,
                        chorus_status_string(want_status));
    }
    snprintf(want, sizeof(want), "rank %d: ucx:", ctx->rank);
    const char *msg = chorus_last_error();
    if (strstr(msg, want) == NULL || strstr(msg, "peer") == NULL || strstr(msg, what) == NULL)
        return tpc_fail(ctx, "%s: the error does not say where: %s", what, msg);
    return 0;
}

/* Lengths that differ: both above the threshold (RMA on both sides), and across the two
 * paths either way. The receive always fails (never a hang, never bytes past it); the RMA
 * sender fails too when it can tell. */
static int case_mismatch(tpc_ctx_t *ctx)
{
    static const size_t send_n[] = {1u << 20, 1u << 20, 32u << 10};
    static const size_t recv_n[] = {512u << 10, 32u << 10, 1u << 20};
    uint8_t *buf = malloc((1u << 20) + 64);
    chorus_tp_req_t req;

    if (buf == NULL) return tpc_fail(ctx, "malloc");
    /* The sender's bytes are the pattern and the receiver's buffer starts as its
     * complement, so that any byte of the message written past the receive shows. The
     * sender fills its buffer once: the send of case 1 never ends and keeps it. */
    if (ctx->rank == 0) tpc_fill(buf, (1u << 20) + 64, 0, 1, 0);
    for (int i = 0; i < 3; i++) {
        memset(&req, 0, sizeof(req));
        if (ctx->rank == 1) tpc_poison(buf, (1u << 20) + 64, 0, 1, 0);
        chorus_status_t st = ctx->rank == 0 ? ctx->ops->isend(ctx->tp, 1, buf, send_n[i], &req)
                                            : ctx->ops->irecv(ctx->tp, 0, buf, recv_n[i], &req);
        if (st != CHORUS_SUCCESS) return tpc_fail(ctx, "post %d", i);
        if (ctx->rank == 1) {
            if (expect_error(ctx, &req, "length mismatch") != 0) return 1;
            long long past = tpc_untouched(buf, recv_n[i], recv_n[i] + 64, 0, 1, 0);
            if (past >= 0) return tpc_fail(ctx, "case %d: byte %lld written", i, past);
        } else if (i == 0 && expect_error(ctx, &req, "length mismatch") != 0) {
            return 1;
        }
        /* The sender of case 1 waits for an RTR that never comes; fini cancels it. */
    }
    free(buf);
    return tpc_barrier(ctx);
}

/* Rank 1 forges the RTR of rank 0's first message: a wrong magic (arg 0) or a key length
 * past the end of the message (arg 1). Rank 0's send fails naming the RTR; rank 1 gets a
 * FIN that says so. */
static int case_bad_rtr(tpc_ctx_t *ctx)
{
    const size_t n = 1u << 20;
    ucx_tp_t *tp = ucx(ctx);
    chorus_tp_req_t req, fin_req;
    uint8_t *buf = malloc(n), rtr[40], fin[UCX_RTS_BYTES];

    if (buf == NULL) return tpc_fail(ctx, "malloc");
    memset(&req, 0, sizeof(req));
    if (ctx->rank == 0) {
        tpc_fill(buf, n, 0, 1, 0);
        if (ctx->ops->isend(ctx->tp, 1, buf, n, &req) != CHORUS_SUCCESS)
            return tpc_fail(ctx, "isend");
        if (expect_error(ctx, &req, "RTR") != 0) return 1;
        free(buf);
        return 0;
    }
    ucx_peer_t *pp = &tp->peers[0];
    memset(rtr, 0, sizeof(rtr));
    chorus__ucx_put_be32(rtr, ctx->arg == 0 ? 0x12345678u : 0x43525452u);
    chorus__ucx_put_be32(rtr + 4, ctx->arg == 0 ? 16 : 1000);
    chorus__ucx_put_be64(rtr + 8, (uint64_t)(uintptr_t)buf);
    chorus__ucx_put_be64(rtr + 16, n);
    memset(&fin_req, 0, sizeof(fin_req));
    if (chorus__ucx_post(tp, 0, 0, fin, sizeof(fin), chorus__ucx_fin_tag(1, 0, pp->key_in),
                         UCX_REQ_CTRL, &fin_req) != CHORUS_SUCCESS ||
        chorus__ucx_post(tp, 0, 1, rtr, sizeof(rtr), chorus__ucx_rtr_tag(0, 0, pp->key_out),
                         UCX_REQ_CTRL, &req) != CHORUS_SUCCESS) {
        return tpc_fail(ctx, "forging");
    }
    if (tpc_wait_reqs(ctx, &fin_req, 1, TPC_WAIT_S, NULL) != 0) return tpc_fail(ctx, "no FIN");
    if (fin_req.status != CHORUS_SUCCESS || chorus__ucx_get_be32(fin + 4) != 2)
        return tpc_fail(ctx, "FIN: status %d, code %u", fin_req.status,
                        chorus__ucx_get_be32(fin + 4));
    free(buf);
    return 0;
}

/* Runs fn on 2 ranks under each UCX_TLS, with the threshold at RMA_MIN. */
static void run_all(tpc_case_fn fn, int arg)
{
    for (size_t i = 0; i < sizeof(tls_list) / sizeof(tls_list[0]); i++) {
        setenv("UCX_TLS", tls_list[i], 1);
        printf("UCX_TLS=%s\n", tls_list[i]);
        fflush(stdout);
        assert_int_equal(tpc_run(&ucx_cfg, 2, fn, arg, NULL), 0);
    }
}

static void test_sizes(void **state)
{
    (void)state;
    run_all(case_sizes, 0);
}

static void test_cache_hit(void **state)
{
    (void)state;
    run_all(case_cache_hit, 0);
}

static void test_free_realloc(void **state)
{
    (void)state;
    run_all(case_realloc, 0);
}

static void test_mismatch(void **state)
{
    (void)state;
    run_all(case_mismatch, 0);
}

static void test_bad_rtr_magic(void **state)
{
    (void)state;
    run_all(case_bad_rtr, 0);
}

static void test_bad_rtr_key_length(void **state)
{
    (void)state;
    run_all(case_bad_rtr, 1);
}

/* reg_mem / dereg_mem: a handle covering the range, the same entry again while held. */
static void test_reg_mem(void **state)
{
    uint8_t secret[CHORUS_SECRET_BYTES] = {1};
    chorus_tp_params_t params = {.rank = 0, .nranks = 1, .secret = secret};
    chorus_tp_t *tp = NULL;
    void *h1 = NULL, *h2 = NULL;
    uint8_t *buf = malloc(1u << 20);
    (void)state;
    assert_non_null(buf);
    assert_int_equal(chorus__tp_ucx_ops.init(&params, &tp), CHORUS_SUCCESS);
    printf("UCX memory events: %s\n", ((ucx_tp_t *)tp)->mem_events ? "on" : "off (not cached)");
    assert_int_equal(chorus__tp_ucx_ops.reg_mem(tp, buf, 1u << 20, &h1), CHORUS_SUCCESS);
    assert_int_equal(chorus__tp_ucx_ops.reg_mem(tp, buf + 4096, 4096, &h2), CHORUS_SUCCESS);
    assert_ptr_equal(h1, h2);
    chorus_reg_t *reg = h1;
    assert_true(reg->start <= (uintptr_t)buf && (uintptr_t)buf + (1u << 20) <= reg->end);
    assert_int_equal(chorus__tp_ucx_ops.dereg_mem(tp, h2), CHORUS_SUCCESS);
    assert_int_equal(chorus__tp_ucx_ops.dereg_mem(tp, h1), CHORUS_SUCCESS);
    assert_int_equal(chorus__tp_ucx_ops.dereg_mem(tp, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__tp_ucx_ops.fini(tp);
    free(buf);
}

int main(void)
{
    setenv("CHORUS_UCX_RMA_MIN", "64K", 1);
    chorus__config_reload();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reg_mem),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_cache_hit),
        cmocka_unit_test(test_free_realloc),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_bad_rtr_magic),
        cmocka_unit_test(test_bad_rtr_key_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* !CHORUS_HAVE_UCX */

static void test_stub(void **state)
{
    (void)state;
    printf("skipped: built without UCX (apt-get install libucx-dev)\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stub)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
