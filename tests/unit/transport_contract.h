/*
 * The transport contract suite: the same cases over any transport (lib/transport/
 * transport.h), each run by N real processes made with fork().
 *
 * Entry point. In a cmocka test file:
 *
 *     #include "unit/transport_contract.h"
 *     static tpc_config_t cfg = {&chorus__tp_shm_ops, 0};   // or TPC_STRANGER, see below
 *     int main(void)
 *     {
 *         const struct CMUnitTest tests[] = {TPC_CONTRACT_TESTS(&cfg)};
 *         return cmocka_run_group_tests(tests, NULL, NULL);
 *     }
 *
 * Flags: TPC_STRANGER runs the stranger case, for transports whose address blob starts
 * with a struct sockaddr_storage (a plain socket connects to it and sends garbage during
 * connect_all). TPC_LOOSE_DEATH accepts that a peer death is noticed only by requests
 * posted to that peer (not by progress()).
 *
 * How a case runs (tpc_run): the parent makes one socketpair per child and forks N children.
 * Each child inits the transport, sends its address blob to the parent, gets every blob
 * back, calls connect_all with every other rank in the mask, runs the case function and
 * exits with its result (0 = pass). The parent reaps them all within TPC_CASE_TIMEOUT_S
 * seconds (killing stragglers) and the cmocka test asserts that every child exited 0.
 * Every wait in a child is a progress() + wait() loop bounded by a deadline, so a broken
 * transport fails a case instead of hanging it. Extra, transport-specific cases can use
 * tpc_run() with their own case function and the tpc_* helpers.
 */
#ifndef CHORUS_TESTS_TRANSPORT_CONTRACT_H
#define CHORUS_TESTS_TRANSPORT_CONTRACT_H

#include "transport/transport.h"
#include "util/auth.h"
#include "util/clock.h"
#include "util/status.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define TPC_STRANGER (1u << 0)
#define TPC_LOOSE_DEATH (1u << 1)

#define TPC_MAX_RANKS 8
#define TPC_CASE_TIMEOUT_S 60.0 /* the parent kills children of a case after this */
#define TPC_WAIT_S 20.0         /* every wait inside a child */

/* Everything here is static in a header: a test file that uses only part of it must not
 * trip -Wunused-function, which C compilers do not raise for unused static inline
 * functions. */
#define TPC_FN static inline

typedef struct {
    const chorus_tp_ops_t *ops;
    unsigned flags;
} tpc_config_t;

/* What a case function gets in each child. */
typedef struct {
    const chorus_tp_ops_t *ops;
    chorus_tp_t *tp;
    int rank;
    int nranks;
    int arg;        /* the case's argument (from tpc_run) */
    unsigned flags; /* tpc_config_t.flags */
} tpc_ctx_t;

typedef int (*tpc_case_fn)(tpc_ctx_t *ctx); /* 0 = pass */

/* Optional parent-side hooks: before_tables runs once every child's blob is known and
 * before the children get the table (so it happens during connect_all); after_children
 * runs once all children are reaped. */
typedef struct {
    void (*before_tables)(const uint8_t *blobs, int nranks, void *arg);
    void (*after_children)(void *arg);
    void *arg;
} tpc_hooks_t;

/* The job secret and communicator id of the current case (for hooks that play rogue). */
static uint8_t tpc_secret[CHORUS_SECRET_BYTES]; /* used by tpc_run and tpc_child */
static uint64_t tpc_comm_id;

/* Reports a failure from a child (stderr, with the rank) and returns 1. */
TPC_FN int tpc_fail(const tpc_ctx_t *ctx, const char *fmt, ...) CHORUS_PRINTF(2, 3);
TPC_FN int tpc_fail(const tpc_ctx_t *ctx, const char *fmt, ...)
{
    char line[1024], what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    /* One write per line, so that lines of several children do not interleave. */
    int n = snprintf(line, sizeof(line), "[contract %s rank %d/%d] FAIL: %s (last error: %s)\n",
                     ctx->ops->name, ctx->rank, ctx->nranks, what, chorus_last_error());
    if (n > 0) (void)!write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    return 1;
}

/* The content of byte i of message seq from src to dst: every byte depends on all four,
 * so a message delivered to the wrong receive, out of order or shifted is caught. */
TPC_FN uint8_t tpc_byte(int src, int dst, int seq, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ (uint64_t)(unsigned)seq << 40 ^
                 (uint64_t)(unsigned)src << 24 ^ (uint64_t)(unsigned)dst << 32;
    x ^= x >> 29;
    return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

TPC_FN void tpc_fill(uint8_t *buf, size_t n, int src, int dst, int seq)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = tpc_byte(src, dst, seq, i);
}

/* Fills a receive buffer with the complement of message seq's pattern before the receive
 * is posted. Every byte then differs from the one the message must put there, so a byte
 * the transport leaves unwritten fails tpc_check; a constant such as 0xEE would pass
 * wherever the pattern happens to hold it. Bytes past the receive, poisoned the same way,
 * also differ from anything a longer message from src would write there, which
 * tpc_untouched checks. */
TPC_FN void tpc_poison(uint8_t *buf, size_t n, int src, int dst, int seq)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)~tpc_byte(src, dst, seq, i);
}

/* Returns the first index in [from, to) whose byte no longer holds what tpc_poison put
 * there, or -1: a receive must not write outside its own length. */
TPC_FN long long tpc_untouched(const uint8_t *buf, size_t from, size_t to, int src, int dst,
                               int seq)
{
    for (size_t i = from; i < to; i++) {
        uint8_t poison = (uint8_t)~tpc_byte(src, dst, seq, i);
        if (buf[i] != poison) return (long long)i;
    }
    return -1;
}

/* Returns the first wrong byte index, or -1 when all of buf is right. */
TPC_FN long long tpc_check(const uint8_t *buf, size_t n, int src, int dst, int seq)
{
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != tpc_byte(src, dst, seq, i)) return (long long)i;
    }
    return -1;
}

/* Drives progress() + wait() until every request is done or timeout_s passes. Returns 0
 * when all are done, -1 at the deadline. *prog_p (may be NULL) gets the first error that
 * progress() returned. */
TPC_FN int tpc_wait_reqs(tpc_ctx_t *ctx, chorus_tp_req_t *reqs, int n, double timeout_s,
                         chorus_status_t *prog_p)
{
    uint64_t deadline = chorus__deadline_after(timeout_s);
    chorus_status_t first = CHORUS_SUCCESS;
    for (;;) {
        chorus_status_t st = ctx->ops->progress(ctx->tp);
        if (st != CHORUS_SUCCESS && first == CHORUS_SUCCESS) first = st;
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !reqs[i].done;
        if (left == 0) break;
        if (chorus__deadline_passed(deadline)) {
            if (prog_p != NULL) *prog_p = first;
            return -1;
        }
        ctx->ops->wait(ctx->tp, 1000);
    }
    if (prog_p != NULL) *prog_p = first;
    return 0;
}

/* Zero-length messages to and from every peer: after it, every message sent before it
 * has been received, so a child may exit without cutting a peer's transfer short. */
TPC_FN int tpc_barrier(tpc_ctx_t *ctx)
{
    chorus_tp_req_t reqs[2 * TPC_MAX_RANKS];
    int n = 0;
    memset(reqs, 0, sizeof(reqs));
    for (int p = 0; p < ctx->nranks; p++) {
        if (p == ctx->rank) continue;
        if (ctx->ops->irecv(ctx->tp, p, NULL, 0, &reqs[n++]) != CHORUS_SUCCESS ||
            ctx->ops->isend(ctx->tp, p, NULL, 0, &reqs[n++]) != CHORUS_SUCCESS) {
            return tpc_fail(ctx, "barrier: posting to peer %d failed", p);
        }
    }
    if (tpc_wait_reqs(ctx, reqs, n, TPC_WAIT_S, NULL) != 0) {
        return tpc_fail(ctx, "barrier: timed out");
    }
    for (int i = 0; i < n; i++) {
        if (reqs[i].status != CHORUS_SUCCESS) return tpc_fail(ctx, "barrier: request failed");
    }
    return 0;
}

TPC_FN int tpc_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

TPC_FN int tpc_read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The body of child `rank`: set up, exchange blobs through fd, connect, run the case. */
TPC_FN int tpc_child(const tpc_config_t *cfg, int rank, int nranks, tpc_case_fn fn, int arg, int fd)
{
    static uint8_t blobs[TPC_MAX_RANKS * CHORUS_TP_BLOB_MAX];
    uint8_t blob[CHORUS_TP_BLOB_MAX];
    uint8_t mask[TPC_MAX_RANKS];
    tpc_ctx_t ctx = {cfg->ops, NULL, rank, nranks, arg, cfg->flags};
    chorus_tp_params_t params;
    size_t len = 0;
    int rc;

    memset(&params, 0, sizeof(params));
    params.rank = rank;
    params.nranks = nranks;
    params.secret = tpc_secret;
    params.comm_id = tpc_comm_id;
    params.timeout_s = TPC_WAIT_S;
    if (cfg->ops->init(&params, &ctx.tp) != CHORUS_SUCCESS) return tpc_fail(&ctx, "init");
    memset(blob, 0, sizeof(blob));
    if (cfg->ops->get_addr(ctx.tp, blob, &len) != CHORUS_SUCCESS || len > sizeof(blob)) {
        rc = tpc_fail(&ctx, "get_addr");
        goto out;
    }
    if (tpc_write_all(fd, blob, sizeof(blob)) != 0 ||
        tpc_read_all(fd, blobs, (size_t)nranks * CHORUS_TP_BLOB_MAX) != 0) {
        rc = tpc_fail(&ctx, "blob exchange with the parent");
        goto out;
    }
    for (int p = 0; p < nranks; p++)
        mask[p] = p != rank;
    if (cfg->ops->connect_all(ctx.tp, mask, blobs, chorus__deadline_after(TPC_WAIT_S)) !=
        CHORUS_SUCCESS) {
        rc = tpc_fail(&ctx, "connect_all");
        goto out;
    }
    rc = fn(&ctx);
out:
    cfg->ops->fini(ctx.tp);
    return rc;
}

/* Runs fn in nranks forked children; returns the number of children that did not exit 0
 * (each is reported on stderr). hooks may be NULL. */
TPC_FN int tpc_run(const tpc_config_t *cfg, int nranks, tpc_case_fn fn, int arg,
                   const tpc_hooks_t *hooks)
{
    static uint8_t blobs[TPC_MAX_RANKS * CHORUS_TP_BLOB_MAX];
    pid_t pids[TPC_MAX_RANKS];
    int fds[TPC_MAX_RANKS];
    int failed = 0;

    if (nranks < 1 || nranks > TPC_MAX_RANKS) return nranks;
    if (chorus__random_bytes(tpc_secret, sizeof(tpc_secret)) != CHORUS_SUCCESS ||
        chorus__random_bytes(&tpc_comm_id, sizeof(tpc_comm_id)) != CHORUS_SUCCESS) {
        return nranks;
    }
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < nranks; r++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return nranks;
        pids[r] = fork();
        if (pids[r] == 0) {
            close(sv[0]);
            for (int q = 0; q < r; q++)
                close(fds[q]);
            alarm((unsigned)TPC_CASE_TIMEOUT_S + 5); /* a last resort against a hang */
            int rc = tpc_child(cfg, r, nranks, fn, arg, sv[1]);
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
        close(sv[1]);
        fds[r] = sv[0];
    }
    /* Every child sends its blob, then gets the whole table. */
    for (int r = 0; r < nranks; r++) {
        if (tpc_read_all(fds[r], blobs + (size_t)r * CHORUS_TP_BLOB_MAX, CHORUS_TP_BLOB_MAX)) {
            fprintf(stderr, "[contract] rank %d sent no address blob\n", r);
            failed++;
        }
    }
    if (failed == 0 && hooks != NULL && hooks->before_tables != NULL) {
        hooks->before_tables(blobs, nranks, hooks->arg);
    }
    for (int r = 0; r < nranks; r++) {
        if (failed == 0) tpc_write_all(fds[r], blobs, (size_t)nranks * CHORUS_TP_BLOB_MAX);
        close(fds[r]); /* a child still waiting for the table sees EOF and fails */
    }
    failed = 0;
    uint64_t deadline = chorus__deadline_after(TPC_CASE_TIMEOUT_S);
    for (int left = nranks; left > 0;) {
        int reaped = 0;
        /* Only our own children: a hook may have forked others that it reaps itself. */
        for (int r = 0; r < nranks; r++) {
            int st;
            if (pids[r] == 0 || waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
            pids[r] = 0;
            left--;
            reaped++;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "[contract %s] rank %d of %d: %s %d\n", cfg->ops->name, r, nranks,
                        WIFEXITED(st) ? "exit" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                failed++;
            }
        }
        if (reaped > 0) continue;
        if (chorus__deadline_passed(deadline)) {
            for (int r = 0; r < nranks; r++) {
                if (pids[r] == 0) continue;
                fprintf(stderr, "[contract %s] rank %d of %d hung: killed\n", cfg->ops->name, r,
                        nranks);
                kill(pids[r], SIGKILL);
                waitpid(pids[r], NULL, 0);
                pids[r] = 0;
                failed++;
                left--;
            }
            break;
        }
        const struct timespec tick = {0, 2000000};
        nanosleep(&tick, NULL);
    }
    if (hooks != NULL && hooks->after_children != NULL) hooks->after_children(hooks->arg);
    return failed;
}

/* ---- The cases ---- */

/* Ranks pair up (0-1, 2-3, ...); the even rank pings, the odd one checks and pongs back. */
TPC_FN int tpc_case_pingpong(tpc_ctx_t *ctx)
{
    static const size_t sizes[] = {0,     1,     3,        8,        4093,
                                   65536, 65537, 1u << 20, 8u << 20, (8u << 20) + 13};
    int peer = ctx->rank ^ 1;
    if (peer >= ctx->nranks) return tpc_barrier(ctx);
    uint8_t *buf = malloc((8u << 20) + 13);
    if (buf == NULL) return tpc_fail(ctx, "malloc");
    int pinger = (ctx->rank & 1) == 0;
    for (int seq = 0; seq < (int)(sizeof(sizes) / sizeof(sizes[0])); seq++) {
        size_t n = sizes[seq];
        for (int leg = 0; leg < 2; leg++) {
            int sending = (leg == 0) == pinger;
            int src = sending ? ctx->rank : peer;
            int dst = sending ? peer : ctx->rank;
            chorus_tp_req_t req;
            chorus_status_t st;
            memset(&req, 0, sizeof(req));
            if (sending) {
                tpc_fill(buf, n, src, dst, seq);
                st = ctx->ops->isend(ctx->tp, peer, buf, n, &req);
            } else {
                tpc_poison(buf, n, src, dst, seq);
                st = ctx->ops->irecv(ctx->tp, peer, buf, n, &req);
            }
            if (st != CHORUS_SUCCESS) return tpc_fail(ctx, "post %zu bytes", n);
            if (tpc_wait_reqs(ctx, &req, 1, TPC_WAIT_S, NULL) != 0 ||
                req.status != CHORUS_SUCCESS) {
                return tpc_fail(ctx, "%s of %zu bytes did not complete", sending ? "send" : "recv",
                                n);
            }
            long long bad = sending ? -1 : tpc_check(buf, n, src, dst, seq);
            if (bad >= 0) return tpc_fail(ctx, "%zu bytes: byte %lld is wrong", n, bad);
        }
    }
    free(buf);
    return tpc_barrier(ctx);
}

#define TPC_FIFO_MSGS 48

TPC_FN size_t tpc_fifo_size(int src, int dst, int seq)
{
    if (seq % 7 == 3) return 0;
    if (seq % 11 == 5) return (size_t)300000 + (size_t)seq * 17;
    return (size_t)(seq * 977 + src * 31 + dst * 7) % 9000;
}

/* Every rank has TPC_FIFO_MSGS messages in flight to every other rank at once, of mixed
 * sizes; all receives are posted up front, and each message is checked exactly. */
TPC_FN int tpc_case_fifo(tpc_ctx_t *ctx)
{
    int npeers = ctx->nranks - 1, nreq = 2 * npeers * TPC_FIFO_MSGS, k = 0;
    chorus_tp_req_t *reqs = calloc((size_t)nreq, sizeof(*reqs));
    uint8_t **bufs = calloc((size_t)nreq, sizeof(*bufs));
    int rc = 0;
    if (reqs == NULL || bufs == NULL) return tpc_fail(ctx, "calloc");
    for (int seq = 0; seq < TPC_FIFO_MSGS; seq++) {
        for (int p = 0; p < ctx->nranks; p++) {
            if (p == ctx->rank) continue;
            size_t n = tpc_fifo_size(p, ctx->rank, seq);
            bufs[k] = malloc(n + 1);
            if (bufs[k] == NULL) return tpc_fail(ctx, "malloc");
            /* One byte more than the receive, poisoned too, catches a write past it. */
            tpc_poison(bufs[k], n + 1, p, ctx->rank, seq);
            if (ctx->ops->irecv(ctx->tp, p, bufs[k], n, &reqs[k]) != CHORUS_SUCCESS) {
                return tpc_fail(ctx, "irecv %d from %d", seq, p);
            }
            k++;
        }
    }
    /* Sends go round-robin over the peers, so every connection is busy at once. */
    for (int seq = 0; seq < TPC_FIFO_MSGS; seq++) {
        for (int i = 1; i < ctx->nranks; i++) {
            int p = (ctx->rank + i) % ctx->nranks;
            size_t n = tpc_fifo_size(ctx->rank, p, seq);
            bufs[k] = malloc(n + 1);
            if (bufs[k] == NULL) return tpc_fail(ctx, "malloc");
            tpc_fill(bufs[k], n, ctx->rank, p, seq);
            if (ctx->ops->isend(ctx->tp, p, bufs[k], n, &reqs[k]) != CHORUS_SUCCESS) {
                return tpc_fail(ctx, "isend %d to %d", seq, p);
            }
            k++;
        }
    }
    if (tpc_wait_reqs(ctx, reqs, nreq, TPC_WAIT_S, NULL) != 0) return tpc_fail(ctx, "timeout");
    k = 0;
    for (int seq = 0; seq < TPC_FIFO_MSGS && rc == 0; seq++) {
        for (int p = 0; p < ctx->nranks && rc == 0; p++) {
            if (p == ctx->rank) continue;
            size_t n = tpc_fifo_size(p, ctx->rank, seq);
            long long bad = tpc_check(bufs[k], n, p, ctx->rank, seq);
            if (reqs[k].status != CHORUS_SUCCESS || bad >= 0 ||
                tpc_untouched(bufs[k], n, n + 1, p, ctx->rank, seq) >= 0) {
                rc = tpc_fail(ctx, "message %d from %d (%zu bytes): status %d, bad byte %lld", seq,
                              p, n, (int)reqs[k].status, bad);
            }
            k++;
        }
    }
    for (int i = 0; i < nreq; i++) {
        if (reqs[i].status != CHORUS_SUCCESS && rc == 0) rc = tpc_fail(ctx, "request %d", i);
        free(bufs[i]);
    }
    free(bufs);
    free(reqs);
    return rc != 0 ? rc : tpc_barrier(ctx);
}

/* Both ends of every pair send a message larger than any socket or ring buffer before
 * either posts its receive: a transport that blocks a send until the receive exists
 * would deadlock here. */
TPC_FN int tpc_case_bidir(tpc_ctx_t *ctx)
{
    const size_t n = 24u << 20;
    int peer = ctx->rank ^ 1;
    if (peer >= ctx->nranks) return tpc_barrier(ctx);
    uint8_t *out = malloc(n), *in = malloc(n);
    chorus_tp_req_t reqs[2];
    memset(reqs, 0, sizeof(reqs));
    if (out == NULL || in == NULL) return tpc_fail(ctx, "malloc");
    tpc_fill(out, n, ctx->rank, peer, 1);
    tpc_poison(in, n, peer, ctx->rank, 1);
    if (ctx->ops->isend(ctx->tp, peer, out, n, &reqs[0]) != CHORUS_SUCCESS) {
        return tpc_fail(ctx, "isend");
    }
    for (int i = 0; i < 50; i++)
        ctx->ops->progress(ctx->tp);
    if (ctx->ops->irecv(ctx->tp, peer, in, n, &reqs[1]) != CHORUS_SUCCESS) {
        return tpc_fail(ctx, "irecv");
    }
    if (tpc_wait_reqs(ctx, reqs, 2, TPC_WAIT_S, NULL) != 0) return tpc_fail(ctx, "deadlock");
    long long bad = tpc_check(in, n, peer, ctx->rank, 1);
    if (reqs[0].status != CHORUS_SUCCESS || reqs[1].status != CHORUS_SUCCESS || bad >= 0) {
        return tpc_fail(ctx, "bidir: status %d/%d, bad byte %lld", (int)reqs[0].status,
                        (int)reqs[1].status, bad);
    }
    free(out);
    free(in);
    return tpc_barrier(ctx);
}

/* Rank 0 sends 64 bytes; rank 1 posts a receive of 32 (arg 0) or 96 bytes (arg 1) and
 * must get CHORUS_ERR_MISMATCH, never bytes past its buffer. Rank 0's send may end either
 * way (it may never complete, for a transport that does not buffer). */
TPC_FN int tpc_case_mismatch(tpc_ctx_t *ctx)
{
    uint8_t buf[256];
    chorus_tp_req_t req;
    memset(&req, 0, sizeof(req));
    if (ctx->rank == 0) {
        tpc_fill(buf, 64, 0, 1, 0);
        if (ctx->ops->isend(ctx->tp, 1, buf, 64, &req) != CHORUS_SUCCESS) {
            return tpc_fail(ctx, "isend");
        }
        tpc_wait_reqs(ctx, &req, 1, 3.0, NULL);
        return 0;
    }
    size_t n = ctx->arg == 0 ? 32 : 96;
    /* Poisoned against rank 0's message, so that any of its bytes written past the
     * receive shows, whatever its value. */
    tpc_poison(buf, sizeof(buf), 0, 1, 0);
    if (ctx->ops->irecv(ctx->tp, 0, buf, n, &req) != CHORUS_SUCCESS) {
        return tpc_fail(ctx, "irecv");
    }
    if (tpc_wait_reqs(ctx, &req, 1, TPC_WAIT_S, NULL) != 0) {
        return tpc_fail(ctx, "a mismatched receive never completed");
    }
    if (req.status != CHORUS_ERR_MISMATCH) {
        return tpc_fail(ctx, "mismatch: status %d, not CHORUS_ERR_MISMATCH", (int)req.status);
    }
    long long past = tpc_untouched(buf, n, sizeof(buf), 0, 1, 0);
    if (past >= 0) return tpc_fail(ctx, "byte %lld past the receive was written", past);
    return 0;
}

/* The last rank dies abruptly (after one message, arg 0; or halfway through sending a
 * 64 MiB message, arg 1). Every other rank has a receive pending from it and must see
 * CHORUS_ERR_REMOTE within the deadline; the survivors then still talk to each other. */
TPC_FN int tpc_case_death(tpc_ctx_t *ctx)
{
    const size_t big = 64u << 20;
    int dead = ctx->nranks - 1;
    size_t n = ctx->arg == 0 ? 8 : big;
    uint8_t *buf = malloc(big);
    chorus_tp_req_t req;
    chorus_status_t prog = CHORUS_SUCCESS;
    if (buf == NULL) return tpc_fail(ctx, "malloc");
    memset(&req, 0, sizeof(req));
    if (ctx->rank == dead) {
        tpc_fill(buf, n, dead, 0, 0);
        if (ctx->ops->isend(ctx->tp, 0, buf, ctx->arg == 0 ? 8 : n, &req) != CHORUS_SUCCESS) {
            _exit(1);
        }
        if (ctx->arg == 0) tpc_wait_reqs(ctx, &req, 1, TPC_WAIT_S, NULL);
        /* A completed send may still sit in the transport's own queue (UCX completes a
         * short send once it is copied): progress a while, as a process that dies some
         * time after its last send would have, so that what it sent leaves it. */
        uint64_t until = chorus__now_ns() + 50u * 1000 * 1000;
        for (int i = 0; i < 3 || chorus__now_ns() < until; i++)
            ctx->ops->progress(ctx->tp);
        _exit(0); /* no fini: the connections just drop */
    }
    if (ctx->rank == 0 && ctx->arg == 0) {
        tpc_poison(buf, 8, dead, 0, 0);
        if (ctx->ops->irecv(ctx->tp, dead, buf, 8, &req) != CHORUS_SUCCESS ||
            tpc_wait_reqs(ctx, &req, 1, TPC_WAIT_S, NULL) != 0 || req.status != CHORUS_SUCCESS ||
            tpc_check(buf, 8, dead, 0, 0) >= 0) {
            return tpc_fail(ctx, "the message before the death");
        }
        memset(&req, 0, sizeof(req));
    }
    if (ctx->rank == 0 && ctx->arg != 0) {
        /* Mid-send: receive only once the sender has died (it progresses 50 ms), so that
         * at most what the transport buffers has left it however fast the machine is
         * (with the receive posted, 64 MiB can arrive whole within the 50 ms). */
        struct timespec late = {0, 200 * 1000 * 1000};
        nanosleep(&late, NULL);
    }
    if (ctx->ops->irecv(ctx->tp, dead, buf, ctx->rank == 0 ? n : 8, &req) != CHORUS_SUCCESS) {
        return tpc_fail(ctx, "irecv from the dying rank");
    }
    if (tpc_wait_reqs(ctx, &req, 1, TPC_WAIT_S, &prog) != 0) {
        return tpc_fail(ctx, "a receive from a dead peer hung");
    }
    if (req.status != CHORUS_ERR_REMOTE) {
        return tpc_fail(ctx, "receive from a dead peer: status %d", (int)req.status);
    }
    if (!(ctx->flags & TPC_LOOSE_DEATH) && prog != CHORUS_ERR_REMOTE) {
        return tpc_fail(ctx, "progress() returned %d after a peer died", (int)prog);
    }
    /* A later request to the dead peer completes at once with an error. */
    memset(&req, 0, sizeof(req));
    if (ctx->ops->isend(ctx->tp, dead, buf, 4, &req) == CHORUS_SUCCESS &&
        (tpc_wait_reqs(ctx, &req, 1, TPC_WAIT_S, NULL) != 0 || req.status == CHORUS_SUCCESS)) {
        return tpc_fail(ctx, "a send to a dead peer succeeded");
    }
    free(buf);
    if (ctx->nranks <= 2) return 0;
    /* The survivors' own connections are unaffected. */
    chorus_tp_req_t reqs[2 * TPC_MAX_RANKS];
    uint8_t in[TPC_MAX_RANKS][16], out[16];
    int k = 0;
    memset(reqs, 0, sizeof(reqs));
    tpc_fill(out, sizeof(out), ctx->rank, -1, 9);
    for (int p = 0; p < dead; p++) {
        if (p == ctx->rank) continue;
        tpc_poison(in[p], 16, p, -1, 9);
        if (ctx->ops->irecv(ctx->tp, p, in[p], 16, &reqs[k++]) != CHORUS_SUCCESS ||
            ctx->ops->isend(ctx->tp, p, out, 16, &reqs[k++]) != CHORUS_SUCCESS) {
            return tpc_fail(ctx, "posting to survivor %d", p);
        }
    }
    if (tpc_wait_reqs(ctx, reqs, k, TPC_WAIT_S, NULL) != 0) {
        return tpc_fail(ctx, "survivors could not talk");
    }
    for (int p = 0, i = 0; p < dead; p++) {
        if (p == ctx->rank) continue;
        if (reqs[i].status != CHORUS_SUCCESS || tpc_check(in[p], 16, p, -1, 9) >= 0) {
            return tpc_fail(ctx, "message from survivor %d", p);
        }
        i += 2;
    }
    return 0;
}

/* The parent connects plain sockets to every rank's address before the children start
 * connect_all: one sends garbage, one says nothing. Setup must still succeed. */
typedef struct {
    int fds[2 * TPC_MAX_RANKS];
    int nfds;
} tpc_stranger_t;

TPC_FN void tpc_stranger_start(const uint8_t *blobs, int nranks, void *arg)
{
    tpc_stranger_t *s = arg;
    uint8_t garbage[700]; /* more than any handshake message, so the check must fail */
    for (size_t i = 0; i < sizeof(garbage); i++)
        garbage[i] = (uint8_t)(i * 37 + 11);
    s->nfds = 0;
    for (int r = 0; r < nranks; r++) {
        struct sockaddr_storage addr;
        memcpy(&addr, blobs + (size_t)r * CHORUS_TP_BLOB_MAX, sizeof(addr));
        socklen_t len =
            addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        for (int k = 0; k < 2; k++) {
            int fd = socket(addr.ss_family, SOCK_STREAM, 0);
            if (fd < 0) continue;
            if (connect(fd, (struct sockaddr *)&addr, len) != 0) {
                close(fd);
                continue;
            }
            if (k == 0) (void)send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL);
            s->fds[s->nfds++] = fd;
        }
    }
}

TPC_FN void tpc_stranger_end(void *arg)
{
    tpc_stranger_t *s = arg;
    for (int i = 0; i < s->nfds; i++)
        close(s->fds[i]);
    s->nfds = 0;
}

TPC_FN int tpc_case_exchange(tpc_ctx_t *ctx)
{
    return tpc_case_fifo(ctx);
}

/* ---- A rogue process next to a case ----
 * A transport's own test plays an impostor: rogue(blobs, arg) runs in a process forked
 * once the address blobs are known, head_start_ns before the ranks start, so that it meets
 * them first. Its exit code is the verdict (0: it was refused as it should be). */

typedef int (*tpc_rogue_fn)(const uint8_t *blobs, int arg);

typedef struct {
    tpc_rogue_fn rogue;
    int arg;
    long head_start_ns;
    pid_t pid;
    int exit_code;
} tpc_rogue_t;

TPC_FN void tpc_rogue_start(const uint8_t *blobs, int nranks, void *varg)
{
    tpc_rogue_t *r = varg;
    (void)nranks;
    r->pid = fork();
    if (r->pid == 0) {
        alarm(30);
        _exit(r->rogue(blobs, r->arg));
    }
    const struct timespec ts = {0, r->head_start_ns};
    nanosleep(&ts, NULL);
}

TPC_FN void tpc_rogue_end(void *varg)
{
    tpc_rogue_t *r = varg;
    int st = 0;
    r->exit_code = -1;
    if (r->pid > 0 && waitpid(r->pid, &st, 0) == r->pid && WIFEXITED(st))
        r->exit_code = WEXITSTATUS(st);
}

/* The FIFO case on 2 ranks with the rogue alongside: both must pass. */
TPC_FN void tpc_run_rogue(const tpc_config_t *cfg, tpc_rogue_fn rogue, int arg,
                          long head_start_ns)
{
    tpc_rogue_t r = {rogue, arg, head_start_ns, 0, -1};
    tpc_hooks_t hooks = {tpc_rogue_start, tpc_rogue_end, &r};
    assert_int_equal(tpc_run(cfg, 2, tpc_case_fifo, 0, &hooks), 0);
    assert_int_equal(r.exit_code, 0);
}

/* ---- cmocka wrappers: the initial state is the tpc_config_t ---- */

#define TPC_DEFINE(name, nranks, fn, arg)                                                          \
    TPC_FN void tpc_test_##name(void **state)                                                      \
    {                                                                                              \
        const tpc_config_t *cfg = *state;                                                          \
        assert_int_equal(tpc_run(cfg, nranks, fn, arg, NULL), 0);                                  \
    }

TPC_DEFINE(pingpong_2, 2, tpc_case_pingpong, 0)
TPC_DEFINE(pingpong_4, 4, tpc_case_pingpong, 0)
TPC_DEFINE(fifo_2, 2, tpc_case_fifo, 0)
TPC_DEFINE(fifo_3, 3, tpc_case_fifo, 0)
TPC_DEFINE(fifo_4, 4, tpc_case_fifo, 0)
TPC_DEFINE(bidir_2, 2, tpc_case_bidir, 0)
TPC_DEFINE(mismatch_short, 2, tpc_case_mismatch, 0)
TPC_DEFINE(mismatch_long, 2, tpc_case_mismatch, 1)
TPC_DEFINE(death_2, 2, tpc_case_death, 0)
TPC_DEFINE(death_3, 3, tpc_case_death, 0)
TPC_DEFINE(death_midsend_2, 2, tpc_case_death, 1)

TPC_FN void tpc_test_stranger(void **state)
{
    const tpc_config_t *cfg = *state;
    tpc_stranger_t s;
    tpc_hooks_t hooks = {tpc_stranger_start, tpc_stranger_end, &s};
    if (!(cfg->flags & TPC_STRANGER)) {
        printf("skipped: the %s transport's address blob is not a sockaddr\n", cfg->ops->name);
        skip();
    }
    memset(&s, 0, sizeof(s));
    assert_int_equal(tpc_run(cfg, 3, tpc_case_exchange, 0, &hooks), 0);
}

#define TPC_CONTRACT_TESTS(cfg)                                                                    \
    cmocka_unit_test_prestate(tpc_test_pingpong_2, (cfg)),                                         \
        cmocka_unit_test_prestate(tpc_test_pingpong_4, (cfg)),                                     \
        cmocka_unit_test_prestate(tpc_test_fifo_2, (cfg)),                                         \
        cmocka_unit_test_prestate(tpc_test_fifo_3, (cfg)),                                         \
        cmocka_unit_test_prestate(tpc_test_fifo_4, (cfg)),                                         \
        cmocka_unit_test_prestate(tpc_test_bidir_2, (cfg)),                                        \
        cmocka_unit_test_prestate(tpc_test_mismatch_short, (cfg)),                                 \
        cmocka_unit_test_prestate(tpc_test_mismatch_long, (cfg)),                                  \
        cmocka_unit_test_prestate(tpc_test_death_2, (cfg)),                                        \
        cmocka_unit_test_prestate(tpc_test_death_3, (cfg)),                                        \
        cmocka_unit_test_prestate(tpc_test_death_midsend_2, (cfg)),                                \
        cmocka_unit_test_prestate(tpc_test_stranger, (cfg))

#endif
