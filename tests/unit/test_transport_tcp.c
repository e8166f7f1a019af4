/*
 * The TCP transport: the transport contract suite (transport_contract.h), plus what only
 * TCP has: raw bytes on the socket (bad headers, a message trickled one byte at a time),
 * rogue processes that know the secret but not the communicator (or neither), argument
 * checks, and a throughput figure for 8 MiB messages.
 */
#include "unit/transport_contract.h"

#include "transport/tcp/tcp.h"
#include "util/config.h"
#include "util/sock.h"

#include <netinet/tcp.h>

static tpc_config_t tcp_cfg = {&chorus__tp_tcp_ops, TPC_STRANGER};

/* The socket that carries the connection to peer, for tests that write raw bytes. */
static int tcp_fd(tpc_ctx_t *ctx, int peer)
{
    return ctx->tp->peers[peer].fd;
}

static void put_header(uint8_t *hdr, uint64_t len, uint32_t magic)
{
    for (int i = 0; i < 8; i++)
        hdr[i] = (uint8_t)(len >> (56 - 8 * i));
    for (int i = 0; i < 4; i++)
        hdr[8 + i] = (uint8_t)(magic >> (24 - 8 * i));
    memset(hdr + 12, 0, 4);
}

/* Blocking write of raw bytes on a nonblocking socket, in pieces of `piece` bytes. */
static int raw_write(int fd, const uint8_t *buf, size_t len, size_t piece, long pause_ns)
{
    size_t off = 0;
    while (off < len) {
        size_t n = len - off < piece ? len - off : piece;
        ssize_t w = send(fd, buf + off, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            poll(&pfd, 1, 100);
            continue;
        }
        if (w < 0) return -1;
        off += (size_t)w;
        if (pause_ns > 0) {
            struct timespec ts = {0, pause_ns};
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

/* Rank 0 writes raw bytes to rank 1, which posts a 100-byte receive. arg 0: a valid
 * message trickled one byte at a time (must arrive intact); arg 1: a bad magic; arg 2: a
 * length above 2^40; arg 3: the header alone, then the connection closes mid-message. */
static int case_raw(tpc_ctx_t *ctx)
{
    uint8_t msg[TCP_HDR_BYTES + 100], buf[200];
    chorus_tp_req_t req;
    memset(&req, 0, sizeof(req));
    if (ctx->rank == 0) {
        static const uint32_t magic[] = {TCP_MSG_MAGIC, 0xdeadbeef, TCP_MSG_MAGIC, TCP_MSG_MAGIC};
        uint64_t len = ctx->arg == 2 ? ((uint64_t)1 << 40) + 1 : 100;
        put_header(msg, len, magic[ctx->arg]);
        tpc_fill(msg + TCP_HDR_BYTES, 100, 0, 1, 0);
        size_t n = ctx->arg == 3 ? TCP_HDR_BYTES + 10 : sizeof(msg);
        if (raw_write(tcp_fd(ctx, 1), msg, n, ctx->arg == 0 ? 1 : n, 300000) != 0) {
            return tpc_fail(ctx, "raw write");
        }
        return ctx->arg == 0 ? tpc_barrier(ctx) : 0;
    }
    /* All of buf, past the 100 bytes too, so that a write beyond the receive shows. */
    tpc_poison(buf, sizeof(buf), 0, 1, 0);
    if (ctx->ops->irecv(ctx->tp, 0, buf, 100, &req) != CHORUS_SUCCESS) {
        return tpc_fail(ctx, "irecv");
    }
    if (tpc_wait_reqs(ctx, &req, 1, TPC_WAIT_S, NULL) != 0) return tpc_fail(ctx, "hung");
    if (ctx->arg == 0) {
        if (req.status != CHORUS_SUCCESS || tpc_check(buf, 100, 0, 1, 0) >= 0 ||
            tpc_untouched(buf, 100, sizeof(buf), 0, 1, 0) >= 0) {
            return tpc_fail(ctx, "trickled message: status %d", (int)req.status);
        }
        return tpc_barrier(ctx);
    }
    if (req.status != CHORUS_ERR_REMOTE) return tpc_fail(ctx, "status %d", (int)req.status);
    if (strstr(chorus_last_error(), "peer 0") == NULL) {
        return tpc_fail(ctx, "the error does not name the peer");
    }
    if (tpc_untouched(buf, 100, sizeof(buf), 0, 1, 0) >= 0) {
        return tpc_fail(ctx, "wrote past the receive");
    }
    return 0;
}

static void test_raw_trickle(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&tcp_cfg, 2, case_raw, 0, NULL), 0);
}

static void test_raw_bad_magic(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&tcp_cfg, 2, case_raw, 1, NULL), 0);
}

static void test_raw_huge_length(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&tcp_cfg, 2, case_raw, 2, NULL), 0);
}

static void test_raw_cut(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&tcp_cfg, 2, case_raw, 3, NULL), 0);
}

/* Bad arguments are refused without posting; nothing is sent. */
static int case_args(tpc_ctx_t *ctx)
{
    chorus_tp_req_t req;
    uint8_t b[4] = {0};
    const chorus_tp_ops_t *o = ctx->ops;
    int self = ctx->rank, other = 1 - ctx->rank;
    if (o->isend(ctx->tp, self, b, 4, &req) != CHORUS_ERR_INVALID_ARGUMENT ||
        o->isend(ctx->tp, 2, b, 4, &req) != CHORUS_ERR_INVALID_ARGUMENT ||
        o->isend(ctx->tp, -1, b, 4, &req) != CHORUS_ERR_INVALID_ARGUMENT ||
        o->irecv(ctx->tp, other, NULL, 4, &req) != CHORUS_ERR_INVALID_ARGUMENT ||
        o->isend(ctx->tp, other, b, (size_t)TCP_MAX_MSG + 1, &req) != CHORUS_ERR_INVALID_ARGUMENT) {
        return tpc_fail(ctx, "a bad argument was accepted");
    }
    return tpc_barrier(ctx);
}

static void test_bad_args(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&tcp_cfg, 2, case_args, 0, NULL), 0);
}

/* A rogue process with the right secret but another communicator id (arg 0), or with a
 * wrong secret (arg 1), connects to rank 1 as "rank 0" before the real rank 0 does. Rank
 * 1 must refuse it and still connect to the real rank 0; the rogue must never get data. */
static int rogue_main(const uint8_t *blobs, int arg)
{
    uint8_t secret[CHORUS_SECRET_BYTES];
    uint8_t mask[2] = {0, 1};
    chorus_tp_params_t params;
    chorus_tp_t *tp;
    chorus_tp_req_t req;
    uint8_t buf[8];
    tpc_ctx_t ctx = {&chorus__tp_tcp_ops, NULL, 0, 2, arg, 0};

    memcpy(secret, tpc_secret, sizeof(secret));
    if (arg == 1) secret[0] ^= 1;
    memset(&params, 0, sizeof(params));
    params.rank = 0;
    params.nranks = 2;
    params.secret = secret;
    params.comm_id = tpc_comm_id + 1;
    if (chorus__tp_tcp_ops.init(&params, &tp) != CHORUS_SUCCESS) return 10;
    ctx.tp = tp;
    chorus_status_t st =
        chorus__tp_tcp_ops.connect_all(tp, mask, blobs, chorus__deadline_after(5.0));
    int rc = 0;
    if (st == CHORUS_SUCCESS) {
        /* The handshake may finish before rank 1 reads the hello: the refusal then shows
         * as a closed connection. */
        memset(&req, 0, sizeof(req));
        if (chorus__tp_tcp_ops.irecv(tp, 1, buf, 8, &req) != CHORUS_SUCCESS ||
            tpc_wait_reqs(&ctx, &req, 1, TPC_WAIT_S, NULL) != 0 ||
            req.status != CHORUS_ERR_REMOTE) {
            rc = 11;
        }
        if (arg == 1) rc = 12; /* a wrong secret must never connect */
    }
    chorus__tp_tcp_ops.fini(tp);
    return rc;
}

/* The rogue gets a head start so that rank 1 meets it before the real rank 0. */
static void run_rogue(int arg)
{
    tpc_run_rogue(&tcp_cfg, rogue_main, arg, 200000000);
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
    enum { MSGS = 48, INFLIGHT = 4, ROUNDS = MSGS / INFLIGHT };
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
            tpc_fill(bufs[i], n, 0, 1, i);
            tpc_poison(comp[i], n, 0, 1, i);
        } else {
            tpc_poison(bufs[i], n, 0, 1, i);
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
        long long bad = ctx->rank == 1 ? tpc_check(bufs[i], n, 0, 1, i) : -1;
        if (reqs[i].status != CHORUS_SUCCESS || bad >= 0) {
            return tpc_fail(ctx, "bandwidth: last message into buffer %d: status %d, bad byte %lld",
                            i, (int)reqs[i].status, bad);
        }
        free(bufs[i]);
        free(comp[i]);
    }
    if (ctx->rank == 1) {
        printf("tcp: %d x 8 MiB rank 0 -> 1 over loopback: %.2f GB/s (%.3f s)\n", MSGS,
               (double)MSGS * (double)n / s / 1e9, s);
    }
    return tpc_barrier(ctx);
}

static void test_bandwidth(void **state)
{
    (void)state;
    assert_int_equal(tpc_run(&tcp_cfg, 2, case_bandwidth, 0, NULL), 0);
}

/* Small socket buffers (CHORUS_TCP_BUF=16K): every connection must have them from its
 * handshake on (smallbuf_check_socket, the regression check for buffers set after
 * connect()), and then carries a stream of messages of random sizes both ways, a window of
 * them in flight per peer, receives reposted as they complete (as the engine does). A
 * direction that stalls on TCP's persist timer (a few hundred ms per window) cannot move
 * 8 MiB within TPC_WAIT_S. Whether such a stall shows depends on how the kernel rounds
 * the window (the 1M-element allreduce of mp_coll_matrix hit it after ~500 collectives),
 * which is why the socket check does not wait for it. */
#define SMALLBUF_WINDOW 8
#define SMALLBUF_BYTES ((size_t)8 << 20) /* per direction of every connection */
#define SMALLBUF_MAX ((size_t)256 << 10) /* the largest message */
#define SMALLBUF_TINY 400
#define SMALLBUF_LARGE 16

static size_t smallbuf_size(int src, int dst, int seq)
{
    uint64_t x = (uint64_t)(unsigned)seq * 0x9E3779B97F4A7C15ull ^
                 (uint64_t)(unsigned)(src * 64 + dst) << 48;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    /* Rounds of SMALLBUF_TINY tiny messages (as many small collectives send) and then
     * SMALLBUF_LARGE ones of random sizes up to SMALLBUF_MAX. */
    if (seq % (SMALLBUF_TINY + SMALLBUF_LARGE) < SMALLBUF_TINY) return (size_t)(x >> 8) % 65;
    return (size_t)(x >> 8) % (SMALLBUF_MAX + 1);
}

/* The number of messages from src to dst: the first ones that add up to SMALLBUF_BYTES. */
static int smallbuf_count(int src, int dst)
{
    size_t total = 0;
    int seq = 0;
    while (total < SMALLBUF_BYTES)
        total += smallbuf_size(src, dst, seq++);
    return seq;
}

typedef struct {
    chorus_tp_req_t req;
    uint8_t *buf;
    int seq; /* the message in this slot; -1 when the slot is idle */
} smallbuf_slot_t;

/* Posts message seq to / from peer in slot s. */
static int smallbuf_post(tpc_ctx_t *ctx, smallbuf_slot_t *s, int send, int peer, int seq)
{
    int src = send ? ctx->rank : peer, dst = send ? peer : ctx->rank;
    size_t n = smallbuf_size(src, dst, seq);
    chorus_status_t st;
    memset(&s->req, 0, sizeof(s->req));
    s->seq = seq;
    if (send) {
        tpc_fill(s->buf, n, src, dst, seq);
        st = ctx->ops->isend(ctx->tp, peer, s->buf, n, &s->req);
    } else {
        /* One byte more than the receive, poisoned too, catches a write past it. */
        tpc_poison(s->buf, n + 1, src, dst, seq);
        st = ctx->ops->irecv(ctx->tp, peer, s->buf, n, &s->req);
    }
    if (st != CHORUS_SUCCESS) return tpc_fail(ctx, "%s %d: post", send ? "isend" : "irecv", seq);
    return 0;
}

/* Handles a completed slot: checks a receive, then reposts the slot's next message. */
static int smallbuf_reap(tpc_ctx_t *ctx, smallbuf_slot_t *s, int send, int peer, int *next,
                         int count, int *left)
{
    int src = send ? ctx->rank : peer, dst = send ? peer : ctx->rank;
    size_t n = smallbuf_size(src, dst, s->seq);
    if (s->req.status != CHORUS_SUCCESS) {
        return tpc_fail(ctx, "message %d %s peer %d: status %d", s->seq, send ? "to" : "from",
                        peer, (int)s->req.status);
    }
    if (!send) {
        long long bad = tpc_check(s->buf, n, src, dst, s->seq);
        if (bad >= 0 || tpc_untouched(s->buf, n, n + 1, src, dst, s->seq) >= 0) {
            return tpc_fail(ctx, "message %d from %d (%zu bytes): bad byte %lld", s->seq, peer,
                            n, bad);
        }
    }
    (*left)--;
    s->seq = -1;
    if (*next < count) return smallbuf_post(ctx, s, send, peer, (*next)++);
    return 0;
}

/* The connection to peer runs with the small buffers, and this end's segments fit in the
 * window the peer can offer. Linux sizes a sender's segments to half of the largest window
 * the receiver ever offered; a receive buffer that was set only after the handshake (the
 * SYN advertised the default, 64 KiB) leaves segments of 32 KiB that a 32 KiB buffer can
 * never again make room for, and each one then waits for TCP's persist timer. Both ends
 * have the same CHORUS_TCP_BUF, so this end's buffer stands for the peer's. */
static int smallbuf_check_socket(tpc_ctx_t *ctx, int peer)
{
    struct tcp_info ti;
    int rcvbuf = 0;
    socklen_t len = sizeof(rcvbuf);
    if (getsockopt(tcp_fd(ctx, peer), SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len) != 0) {
        return tpc_fail(ctx, "SO_RCVBUF: %s", strerror(errno));
    }
    /* The kernel reports twice what was asked for (its bookkeeping overhead). */
    if (rcvbuf != 2 * (16 << 10)) return tpc_fail(ctx, "peer %d: SO_RCVBUF %d", peer, rcvbuf);
    len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(tcp_fd(ctx, peer), IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) {
        return tpc_fail(ctx, "TCP_INFO: %s", strerror(errno));
    }
    if (ti.tcpi_snd_mss == 0 || ti.tcpi_snd_mss > (unsigned)rcvbuf / 2) {
        return tpc_fail(ctx,
                        "peer %d: segments of %u bytes cannot fit the window of a %d-byte "
                        "receive buffer (send window scale %u, receive window scale %u)",
                        peer, ti.tcpi_snd_mss, rcvbuf, ti.tcpi_snd_wscale, ti.tcpi_rcv_wscale);
    }
    return 0;
}

static int case_small_buffers(tpc_ctx_t *ctx)
{
    enum { W = SMALLBUF_WINDOW };
    const int nr = ctx->nranks;
    smallbuf_slot_t slots[TPC_MAX_RANKS][2][W];
    int next[TPC_MAX_RANKS][2], count[TPC_MAX_RANKS][2], left = 0, rc = 0;
    memset(slots, 0, sizeof(slots));
    for (int p = 0; p < nr; p++) {
        if (p != ctx->rank && smallbuf_check_socket(ctx, p) != 0) return 1;
    }
    for (int p = 0; p < nr && rc == 0; p++) {
        if (p == ctx->rank) continue;
        for (int d = 0; d < 2 && rc == 0; d++) { /* d 0: receives, d 1: sends */
            count[p][d] = d ? smallbuf_count(ctx->rank, p) : smallbuf_count(p, ctx->rank);
            next[p][d] = 0;
            left += count[p][d];
            for (int w = 0; w < W && rc == 0; w++) {
                smallbuf_slot_t *s = &slots[p][d][w];
                s->seq = -1;
                s->buf = malloc(SMALLBUF_MAX + 1);
                if (s->buf == NULL) return tpc_fail(ctx, "malloc");
                if (next[p][d] < count[p][d]) rc = smallbuf_post(ctx, s, d, p, next[p][d]++);
            }
        }
    }
    uint64_t deadline = chorus__deadline_after(TPC_WAIT_S);
    while (rc == 0 && left > 0) {
        chorus_status_t st = ctx->ops->progress(ctx->tp);
        if (st != CHORUS_SUCCESS) rc = tpc_fail(ctx, "progress: status %d", (int)st);
        int moved = 0;
        for (int p = 0; p < nr && rc == 0; p++) {
            if (p == ctx->rank) continue;
            for (int d = 0; d < 2 && rc == 0; d++) {
                for (int w = 0; w < W && rc == 0; w++) {
                    smallbuf_slot_t *s = &slots[p][d][w];
                    if (s->seq < 0 || !s->req.done) continue;
                    rc = smallbuf_reap(ctx, s, d, p, &next[p][d], count[p][d], &left);
                    moved = 1;
                }
            }
        }
        if (rc == 0 && !moved) {
            if (chorus__deadline_passed(deadline)) {
                rc = tpc_fail(ctx, "small buffers: %d messages still pending after %.0f s",
                              left, TPC_WAIT_S);
            } else {
                ctx->ops->wait(ctx->tp, 1000);
            }
        }
    }
    for (int p = 0; p < nr; p++) {
        for (int d = 0; d < 2 && p != ctx->rank; d++) {
            for (int w = 0; w < W; w++)
                free(slots[p][d][w].buf);
        }
    }
    return rc != 0 ? rc : tpc_barrier(ctx);
}

static void test_small_buffers(void **state)
{
    (void)state;
    /* Above net.core.[rw]mem_max the transport keeps autotuning instead. */
    static const char *const limits[] = {"/proc/sys/net/core/rmem_max",
                                         "/proc/sys/net/core/wmem_max"};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(limits[i], "r");
        unsigned long long max = 0;
        if (f != NULL && fscanf(f, "%llu", &max) != 1) max = 0;
        if (f != NULL) fclose(f);
        if (max < (16u << 10)) {
            printf("skipped: %s is %llu, below the 16 KiB this test asks for\n", limits[i], max);
            skip();
        }
    }
    /* The children inherit the reloaded configuration. */
    assert_int_equal(setenv("CHORUS_TCP_BUF", "16K", 1), 0);
    chorus__config_reload();
    int rc = tpc_run(&tcp_cfg, 3, case_small_buffers, 0, NULL);
    unsetenv("CHORUS_TCP_BUF");
    chorus__config_reload();
    assert_int_equal(rc, 0);
}

/* An instance that is never connected: init, get_addr and fini alone, and NULL params. */
static void test_init_fini(void **state)
{
    uint8_t secret[CHORUS_SECRET_BYTES] = {1};
    chorus_tp_params_t params = {.rank = 0, .nranks = 3, .secret = secret};
    uint8_t blob[CHORUS_TP_BLOB_MAX];
    struct sockaddr_storage addr;
    chorus_tp_t *tp = NULL;
    size_t len = 0;
    (void)state;
    assert_int_equal(chorus__tp_tcp_ops.init(NULL, &tp), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__tp_tcp_ops.init(&params, &tp), CHORUS_SUCCESS);
    assert_int_equal(chorus__tp_tcp_ops.get_addr(tp, blob, &len), CHORUS_SUCCESS);
    assert_true(len <= CHORUS_TP_BLOB_MAX);
    memcpy(&addr, blob, sizeof(addr));
    assert_int_equal(addr.ss_family, AF_INET);
    assert_int_equal(((struct sockaddr_in *)&addr)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    assert_int_not_equal(((struct sockaddr_in *)&addr)->sin_port, 0);
    assert_int_equal(chorus__tp_tcp_ops.wait(tp, 1000), CHORUS_SUCCESS);
    assert_int_equal(chorus__tp_tcp_ops.progress(tp), CHORUS_SUCCESS);
    chorus__tp_tcp_ops.fini(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_fini),          TPC_CONTRACT_TESTS(&tcp_cfg),
        cmocka_unit_test(test_raw_trickle),        cmocka_unit_test(test_raw_bad_magic),
        cmocka_unit_test(test_raw_huge_length),    cmocka_unit_test(test_raw_cut),
        cmocka_unit_test(test_bad_args),           cmocka_unit_test(test_rogue_wrong_comm),
        cmocka_unit_test(test_rogue_wrong_secret), cmocka_unit_test(test_bandwidth),
        cmocka_unit_test(test_small_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
