/*
 * The shm transport: the transport contract suite (transport_contract.h) over fork()ed
 * processes, plus what only shm has: 8 ranks at once, segment names gone from /dev/shm
 * after setup, bad address blobs, futex wake-ups that are not lost, and (printed, not
 * asserted) 8 MiB throughput and 8-byte ping-pong latency.
 */
#include "unit/transport_contract.h"

#include "transport/shm/shm.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>

static tpc_config_t shm_cfg = {&chorus__tp_shm_ops, 0};

static shm_tp_t *shm_of(tpc_ctx_t *ctx)
{
    return (shm_tp_t *)ctx->tp;
}

/* Setup unlinks every segment: nothing of the job is left in /dev/shm. */
static int case_unlinked(tpc_ctx_t *ctx)
{
    int fd = shm_open(shm_of(ctx)->own.name, O_RDONLY, 0);

    if (fd >= 0 || errno != ENOENT) {
        if (fd >= 0) close(fd);
        return tpc_fail(ctx, "segment %s still exists after connect_all", shm_of(ctx)->own.name);
    }
    return tpc_barrier(ctx);
}

static void test_unlinked_after_connect(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&shm_cfg, 3, case_unlinked, 0, NULL), 0);
}

static void test_fifo_8_ranks(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&shm_cfg, 8, tpc_case_fifo, 0, NULL), 0);
}

/* Rank 7 dies right after its connect_all while the others may still be finishing theirs:
 * a peer that completed its side of the setup and then died must not fail the setup of the
 * others (it did, rarely, in tpc_test_death_3), and 7 survivors must still talk. */
static void test_death_8_ranks(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&shm_cfg, 8, tpc_case_death, 0, NULL), 0);
}

/* The parent spoils rank 1's blob in the table (how depends on arg): every rank must fail
 * connect_all with an error, none may crash or hang. */
static void spoil_blob(const uint8_t *blobs, int nranks, void *arg)
{
    shm_blob_t *b = (shm_blob_t *)(uintptr_t)(blobs + CHORUS_TP_BLOB_MAX);
    int how = *(int *)arg;

    (void)nranks;
    switch (how) {
    case 0: b->magic ^= 1; break;
    case 1: memset(b->name, 'x', sizeof(b->name)); break; /* no NUL */
    case 2: snprintf(b->name, sizeof(b->name), "/chorus-no-such-segment"); break;
    case 3: snprintf(b->name, sizeof(b->name), "/chorus-../../etc/passwd"); break;
    default: b->rank = 0; break;
    }
}

static int case_never(tpc_ctx_t *ctx)
{
    return tpc_fail(ctx, "connect_all succeeded with a spoiled blob");
}

static void test_bad_blob(void **state)
{
    (void)state;
    for (int how = 0; how < 5; how++) {
        tpc_hooks_t hooks = {spoil_blob, NULL, &how};

        assert_int_equal(tpc_run(&shm_cfg, 3, case_never, 0, &hooks), 3);
    }
}

static void test_bad_token_refused(void **state)
{
    shm_blob_t blob;
    uint8_t secret[CHORUS_SECRET_BYTES] = {1, 2, 3};
    chorus_tp_params_t params;
    chorus_tp_t *tp = NULL;
    shm_tp_t *s;
    shm_seg_t peer;
    uint8_t mask[2] = {1, 1};
    size_t len;
    int ready = 0;
    (void)state;

    /* In one process: make a laid-out segment for rank 1, then check it as rank 0 with
     * another secret. The check must fail with CHORUS_ERR_AUTH. */
    memset(&params, 0, sizeof(params));
    params.rank = 1;
    params.nranks = 2;
    params.secret = secret;
    params.comm_id = 42;
    assert_int_equal(chorus__tp_shm_ops.init(&params, &tp), CHORUS_SUCCESS);
    assert_int_equal(chorus__tp_shm_ops.get_addr(tp, &blob, &len), CHORUS_SUCCESS);
    s = (shm_tp_t *)tp;
    assert_int_equal(shm_seg_layout(&s->own, &s->params, mask, s->ring_size), CHORUS_SUCCESS);
    memset(&peer, 0, sizeof(peer));
    peer.fd = -1;
    params.rank = 0;
    assert_int_equal(shm_seg_attach(&peer, &params, 1, &blob, &ready), CHORUS_SUCCESS);
    assert_int_equal(ready, 1);
    shm_seg_close(&peer);
    secret[0] ^= 0x80;
    memset(&peer, 0, sizeof(peer));
    peer.fd = -1;
    assert_int_equal(shm_seg_attach(&peer, &params, 1, &blob, &ready), CHORUS_ERR_AUTH);
    assert_non_null(strstr(chorus_last_error(), "peer 1"));
    shm_seg_close(&peer);
    /* A header that lies about its size is refused before anything else is read. */
    secret[0] ^= 0x80;
    s->own.hdr->ring_size = s->ring_size << 1;
    memset(&peer, 0, sizeof(peer));
    peer.fd = -1;
    assert_int_equal(shm_seg_attach(&peer, &params, 1, &blob, &ready), CHORUS_ERR_REMOTE);
    shm_seg_close(&peer);
    chorus__tp_shm_ops.fini(tp);
}

/* Wake-ups are not lost: rank 1 waits only in wait() with a long timeout, so a lost
 * wake-up would cost 100 ms (the slice wait() sleeps at most) per round trip. */
static int case_wakeups(tpc_ctx_t *ctx)
{
    const int rounds = 30;
    int peer = ctx->rank ^ 1;
    uint64_t t0 = chorus__now_ns();
    uint8_t b = 0;

    for (int i = 0; i < rounds; i++) {
        chorus_tp_req_t req;
        int sending = (i & 1) == ctx->rank;

        memset(&req, 0, sizeof(req));
        if (sending) {
            /* Let the peer fall asleep first. */
            const struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
            ctx->ops->isend(ctx->tp, peer, &b, 1, &req);
        } else {
            ctx->ops->irecv(ctx->tp, peer, &b, 1, &req);
        }
        while (!req.done) {
            if (ctx->ops->progress(ctx->tp) != CHORUS_SUCCESS) return tpc_fail(ctx, "progress");
            if (!req.done) ctx->ops->wait(ctx->tp, 10000000);
            if (chorus__now_ns() - t0 > 20000000000ull) return tpc_fail(ctx, "hung");
        }
        if (req.status != CHORUS_SUCCESS) return tpc_fail(ctx, "round %d", i);
    }
    /* 30 rounds of 2 ms sleeps plus wake-ups: far below the 3 s that lost ones cost. */
    if (chorus__now_ns() - t0 > 1500000000ull) {
        return tpc_fail(ctx, "%d round trips took %.0f ms: wake-ups were lost", rounds,
                        (double)(chorus__now_ns() - t0) / 1e6);
    }
    return tpc_barrier(ctx);
}

static void test_wakeups(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&shm_cfg, 2, case_wakeups, 0, NULL), 0);
}

/* Throughput of 8 MiB messages (arg 0) and 8-byte ping-pong latency (arg 1), driven the
 * way the engine drives a transport (spin on progress, then yield). Printed only. */
static int drive(tpc_ctx_t *ctx, chorus_tp_req_t *req)
{
    uint64_t deadline = chorus__deadline_after(TPC_WAIT_S);
    int idle = 0;

    while (!req->done) {
        if (ctx->ops->progress(ctx->tp) != CHORUS_SUCCESS) return -1;
        if (req->done) break;
        if (++idle > 64) sched_yield();
        if (chorus__deadline_passed(deadline)) return -1;
    }
    return req->status == CHORUS_SUCCESS ? 0 : -1;
}

static int case_bench(tpc_ctx_t *ctx)
{
    const size_t n = ctx->arg == 0 ? 8u << 20 : 8;
    const int iters = ctx->arg == 0 ? 40 : 20000;
    int peer = ctx->rank ^ 1;
    uint8_t *buf = calloc(1, n);
    uint64_t t0 = 0;

    if (buf == NULL) return tpc_fail(ctx, "calloc");
    for (int i = -5; i < iters; i++) {
        chorus_tp_req_t req;
        int first = ctx->rank == 0;

        if (i == 0) t0 = chorus__now_ns();
        for (int leg = 0; leg < (ctx->arg == 0 ? 1 : 2); leg++) {
            int send = (leg == 0) == first;

            memset(&req, 0, sizeof(req));
            if (send) ctx->ops->isend(ctx->tp, peer, buf, n, &req);
            else ctx->ops->irecv(ctx->tp, peer, buf, n, &req);
            if (drive(ctx, &req) != 0) return tpc_fail(ctx, "bench iteration %d", i);
        }
    }
    if (ctx->rank == 1) {
        double s = (double)(chorus__now_ns() - t0) / 1e9;

        if (ctx->arg == 0) {
            printf("shm: 8 MiB messages: %.2f GB/s\n", (double)n * iters / s / 1e9);
        } else {
            printf("shm: 8-byte ping-pong: %.2f us one way\n", s * 1e6 / iters / 2);
        }
    }
    free(buf);
    return tpc_barrier(ctx);
}

/* A measurement, not a test: run only when SHM_BENCH is set (speed is judged in bench/). */
static void bench_shm(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&shm_cfg, 2, case_bench, 0, NULL), 0);
    assert_int_equal(tpc_run(&shm_cfg, 2, case_bench, 1, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TPC_CONTRACT_TESTS(&shm_cfg),
        cmocka_unit_test(test_unlinked_after_connect),
        cmocka_unit_test(test_fifo_8_ranks),
        cmocka_unit_test(test_death_8_ranks),
        cmocka_unit_test(test_bad_blob),
        cmocka_unit_test(test_bad_token_refused),
        cmocka_unit_test(test_wakeups),
    };
    if (getenv("SHM_BENCH") != NULL) {
        const struct CMUnitTest bench[] = {cmocka_unit_test(bench_shm)};
        return cmocka_run_group_tests(bench, NULL, NULL);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
