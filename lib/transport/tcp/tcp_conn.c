/*
 * TCP transport: instance life cycle and connection setup.
 *
 * One connection per peer pair: the lower rank connects, the higher rank accepts. The
 * accepting side runs in a helper thread while this thread makes the outgoing
 * connections, so every rank serves its listener while it waits on its own connects and
 * no cycle of ranks can wait on each other. Every connection is authenticated with the
 * job secret (util/auth.h) and carries a hello (magic, communicator id, rank) that the
 * acceptor checks; anything else is refused, logged, and setup goes on.
 */
#include "transport/tcp/tcp.h"

#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/sock.h"
#include "util/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The state shared with the accepting thread during connect_all. The two flags are the
 * only fields both threads touch while it runs. What else the accepting thread writes
 * (status, msg, tp->peers[p].fd of the lower ranks, which the connecting thread leaves
 * alone) happens before its release store of `finished`, and is read only after the
 * acquire load that sees it and pthread_join. */
typedef struct {
    chorus_tp_t *tp;
    const uint8_t *peer_mask;
    uint64_t deadline_ns;
    chorus_acceptor_t *acc;
    atomic_int stop;     /* set by the connecting thread: give up accepting */
    atomic_int finished; /* set by the accepting thread when it returns */
    chorus_status_t status;
    char msg[512]; /* the accepting thread's detail message, for the caller's thread */
} tcp_accept_ctx_t;

static void put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_be64(const uint8_t *p)
{
    return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

/* The largest buffer the kernel lets an unprivileged socket ask for (net.core.*mem_max). */
static uint64_t read_sysctl(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (f == NULL) return 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return v;
}

/* Asking for a buffer turns the kernel's autotuning off for that socket, and the request
 * is silently capped at *mem_max (often 208 KiB). A capped buffer is far worse than
 * autotuning, so ask only where the kernel would grant the whole size. */
static int pick_buf(uint64_t want, const char *sysctl, int rank, const char *what)
{
    uint64_t max = read_sysctl(sysctl);
    if (want == 0) return 0;
    if (want > INT32_MAX / 2) want = INT32_MAX / 2;
    if (max < want) {
        CHORUS_INFO("tcp", "rank %d: %s: %s is %llu < CHORUS_TCP_BUF %llu, keeping autotuning",
                    rank, what, sysctl, (unsigned long long)max, (unsigned long long)want);
        return 0;
    }
    return (int)want;
}

/* Keep-alive probes find a peer that went silent (its host or link down) on connections
 * no data moves on; tcp_check_peers covers those with data in flight. Probes start after
 * a fifth of CHORUS_TCP_KEEPALIVE of silence and repeat every fifth, so the kernel gives
 * up after about the whole of it. No TCP_USER_TIMEOUT: it would also kill a connection
 * whose receiver merely holds a zero window that long, which a late rank does legitimately. */
static void tcp_keepalive_socket(const chorus_tp_t *tp, int fd)
{
    int one = 1, idle, cnt = 4;

    if (tp->keepalive_s <= 0) return;
    idle = tp->keepalive_s / 5 > 0 ? tp->keepalive_s / 5 : 1;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0) {
        CHORUS_WARN("tcp", "rank %d: keep-alive: %s", tp->rank, strerror(errno));
    }
}

void tcp_tune_socket(const chorus_tp_t *tp, int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        CHORUS_WARN("tcp", "rank %d: TCP_NODELAY: %s", tp->rank, strerror(errno));
    }
    if (tp->sndbuf > 0 &&
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &tp->sndbuf, sizeof(tp->sndbuf)) != 0) {
        CHORUS_WARN("tcp", "rank %d: SO_SNDBUF %d: %s", tp->rank, tp->sndbuf, strerror(errno));
    }
    if (tp->rcvbuf > 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &tp->rcvbuf, sizeof(tp->rcvbuf)) != 0) {
        CHORUS_WARN("tcp", "rank %d: SO_RCVBUF %d: %s", tp->rank, tp->rcvbuf, strerror(errno));
    }
    tcp_keepalive_socket(tp, fd);
}

static chorus_status_t tcp_init(const chorus_tp_params_t *params, chorus_tp_t **tp_p)
{
    chorus_status_t status;
    struct sockaddr_storage addr;
    chorus_tp_t *tp;

    if (params == NULL || params->nranks <= 0 || params->rank < 0 ||
        params->rank >= params->nranks || params->secret == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tcp: init: bad parameters");
    }
    tp = calloc(1, sizeof(*tp));
    if (tp == NULL) goto err_nomem;
    tp->peers = calloc((size_t)params->nranks, sizeof(*tp->peers));
    tp->pfds = calloc((size_t)params->nranks, sizeof(*tp->pfds));
    tp->check_peer = calloc((size_t)params->nranks, sizeof(*tp->check_peer));
    if (tp->peers == NULL || tp->pfds == NULL || tp->check_peer == NULL) goto err_free;
    for (int p = 0; p < params->nranks; p++)
        tp->peers[p].fd = -1;
    tp->rank = params->rank;
    tp->nranks = params->nranks;
    memcpy(tp->secret, params->secret, CHORUS_SECRET_BYTES);
    tp->comm_id = params->comm_id;
    tp->timeout_s = params->timeout_s;
    tp->abort_flag = params->abort_flag;
    tp->keepalive_s = (int)chorus__config_seconds("CHORUS_TCP_KEEPALIVE", 10);
    tp->blame = -1;
    tp->error = CHORUS_SUCCESS;

    uint64_t want = chorus__config_size("CHORUS_TCP_BUF", 4u << 20);
    tp->sndbuf = pick_buf(want, "/proc/sys/net/core/wmem_max", tp->rank, "SO_SNDBUF");
    tp->rcvbuf = pick_buf(want, "/proc/sys/net/core/rmem_max", tp->rank, "SO_RCVBUF");

    if (params->listen_addr != NULL) {
        memcpy(&addr, params->listen_addr, sizeof(addr));
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&addr;
        memset(&addr, 0, sizeof(addr));
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    if (addr.ss_family == AF_INET) {
        ((struct sockaddr_in *)&addr)->sin_port = 0;
    } else if (addr.ss_family == AF_INET6) {
        ((struct sockaddr_in6 *)&addr)->sin6_port = 0;
    }
    int backlog = tp->nranks + 64;
    CHORUS_CHECK_GOTO(chorus__sock_listen(&addr, backlog, &tp->listen_fd, &tp->bound), err_ctx);
    /* Accepted sockets inherit the listener's buffers, which must be set before the SYN
     * so that the window scale can cover them. */
    tcp_tune_socket(tp, tp->listen_fd);
    *tp_p = tp;
    return CHORUS_SUCCESS;

err_ctx:
    chorus__error_context(status, "rank %d: tcp: init", params->rank);
    free(tp->pfds);
    free(tp->peers);
    free(tp);
    return status;
err_free:
    free(tp->pfds);
    free(tp->check_peer);
    free(tp->peers);
    free(tp);
err_nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: tcp: init: out of memory", params->rank);
}

static chorus_status_t tcp_get_addr(chorus_tp_t *tp, void *blob, size_t *len_p)
{
    memcpy(blob, &tp->bound, sizeof(tp->bound));
    *len_p = sizeof(tp->bound);
    return CHORUS_SUCCESS;
}

int chorus__tcp_hello_check(const uint8_t *hello, size_t len, uint64_t comm_id, int rank,
                            const uint8_t *peer_mask, const char **why_p)
{
    if (len != TCP_HELLO_BYTES || get_be32(hello) != TCP_HELLO_MAGIC) {
        *why_p = "not a tcp transport hello";
        return -1;
    }
    if (get_be64(hello + 8) != comm_id) {
        *why_p = "hello for another communicator";
        return -1;
    }
    uint32_t peer = get_be32(hello + 4);
    if (rank <= 0 || peer >= (uint32_t)rank || !peer_mask[peer]) {
        *why_p = "rank not expected to connect here";
        return -1;
    }
    return (int)peer;
}

/* Checks an authenticated hello; returns the peer rank, or -1 (with why) to refuse. */
static int check_hello(const tcp_accept_ctx_t *ctx, const uint8_t *hello, size_t len,
                       const char **why_p)
{
    const chorus_tp_t *tp = ctx->tp;
    int peer = chorus__tcp_hello_check(hello, len, tp->comm_id, tp->rank, ctx->peer_mask, why_p);

    if (peer >= 0 && tp->peers[peer].fd >= 0) {
        *why_p = "rank already connected";
        return -1;
    }
    return peer;
}

static void *accept_main(void *arg)
{
    tcp_accept_ctx_t *ctx = arg;
    chorus_tp_t *tp = ctx->tp;
    int missing = 0;

    chorus__log_set_rank(tp->rank);
    for (int p = 0; p < tp->rank; p++)
        missing += ctx->peer_mask[p] && tp->peers[p].fd < 0;
    ctx->status = CHORUS_SUCCESS;
    while (missing > 0) {
        uint8_t hello[CHORUS_AUTH_HELLO_MAX];
        size_t len = 0;
        const char *why = NULL;
        int fd = -1;
        chorus_status_t status = chorus__acceptor_accept(ctx->acc, hello, sizeof(hello), &len,
                                                         ctx->deadline_ns, &ctx->stop, &fd);
        if (status != CHORUS_SUCCESS) {
            chorus__error_context(status, "rank %d: tcp: accepting from %d lower rank(s)", tp->rank,
                                  missing);
            ctx->status = status;
            snprintf(ctx->msg, sizeof(ctx->msg), "%s", chorus_last_error());
            break;
        }
        int peer = check_hello(ctx, hello, len, &why);
        if (peer < 0) {
            CHORUS_WARN("tcp", "rank %d: refused an authenticated connection: %s", tp->rank, why);
            close(fd);
            continue;
        }
        status = chorus__sock_set_nonblocking(fd, 1);
        if (status != CHORUS_SUCCESS) {
            close(fd);
            ctx->status = chorus__error_context(status, "rank %d: tcp: peer %d", tp->rank, peer);
            snprintf(ctx->msg, sizeof(ctx->msg), "%s", chorus_last_error());
            break;
        }
        tcp_tune_socket(tp, fd);
        tp->peers[peer].fd = fd;
        missing--;
        CHORUS_TRACE("tcp", "rank %d: accepted peer %d", tp->rank, peer);
    }
    atomic_store_explicit(&ctx->finished, 1, memory_order_release);
    return NULL;
}

/* Makes the outgoing connection to one higher peer and proves the secret to it. */
static chorus_status_t connect_peer(chorus_tp_t *tp, int peer, const void *blob,
                                    uint64_t deadline_ns)
{
    chorus_status_t status;
    struct sockaddr_storage addr;
    uint8_t hello[TCP_HELLO_BYTES];
    char text[80];
    int fd = -1;

    memcpy(&addr, blob, sizeof(addr));
    put_be32(hello, TCP_HELLO_MAGIC);
    put_be32(hello + 4, (uint32_t)tp->rank);
    put_be64(hello + 8, tp->comm_id);
    if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) {
        status = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                               "rank %d: tcp: peer %d's address has a bad family", tp->rank, peer);
        goto err;
    }
    /* The buffers are sized before connect() (see chorus__sock_connect_buf for why). */
    status = chorus__sock_connect_buf(&addr, tp->sndbuf, tp->rcvbuf, deadline_ns, tp->abort_flag,
                                      &fd);
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "rank %d: tcp: connect to peer %d", tp->rank, peer);
        goto err;
    }
    tcp_tune_socket(tp, fd);
    CHORUS_CHECK_GOTO(chorus__auth_client(fd, tp->secret, hello, sizeof(hello), deadline_ns),
                      err_close);
    CHORUS_CHECK_GOTO(chorus__sock_set_nonblocking(fd, 1), err_close);
    tp->peers[peer].fd = fd;
    CHORUS_TRACE("tcp", "rank %d: connected to peer %d", tp->rank, peer);
    return CHORUS_SUCCESS;

err_close:
    close(fd);
err:
    return chorus__error_context(status, "rank %d: tcp: connecting to peer %d at %s", tp->rank,
                                 peer, chorus__sock_addr_str(&addr, text, sizeof(text)));
}

/* Waits for the accepting thread, passing an abort on to it. */
static void join_acceptor(chorus_tp_t *tp, tcp_accept_ctx_t *ctx, pthread_t thread)
{
    const struct timespec tick = {0, 1000000};
    while (!atomic_load_explicit(&ctx->finished, memory_order_acquire)) {
        if (tp->abort_flag != NULL && atomic_load_explicit(tp->abort_flag, memory_order_relaxed))
            atomic_store_explicit(&ctx->stop, 1, memory_order_relaxed);
        nanosleep(&tick, NULL);
    }
    pthread_join(thread, NULL);
}

static chorus_status_t tcp_connect_all(chorus_tp_t *tp, const uint8_t *peer_mask, const void *blobs,
                                       uint64_t deadline_ns)
{
    chorus_status_t status = CHORUS_SUCCESS;
    tcp_accept_ctx_t ctx;
    pthread_t thread;
    int need_accept = 0;

    for (int p = 0; p < tp->rank; p++)
        need_accept |= peer_mask[p] && tp->peers[p].fd < 0;
    memset(&ctx, 0, sizeof(ctx));
    atomic_init(&ctx.stop, 0);
    atomic_init(&ctx.finished, 0);
    ctx.tp = tp;
    ctx.peer_mask = peer_mask;
    ctx.deadline_ns = deadline_ns;
    if (need_accept) {
        CHORUS_CHECK_GOTO(
            chorus__acceptor_create(tp->listen_fd, tp->secret, "tcp transport", &ctx.acc), err);
        int rc = pthread_create(&thread, NULL, accept_main, &ctx);
        if (rc != 0) {
            status = chorus__error_errno(CHORUS_ERR_SYSTEM, rc,
                                         "rank %d: tcp: starting the accept thread", tp->rank);
            goto err_acceptor;
        }
    }
    for (int p = tp->rank + 1; p < tp->nranks && status == CHORUS_SUCCESS; p++) {
        if (!peer_mask[p] || tp->peers[p].fd >= 0) continue;
        status = connect_peer(tp, p, (const uint8_t *)blobs + (size_t)p * CHORUS_TP_BLOB_MAX,
                              deadline_ns);
    }
    if (need_accept) {
        if (status != CHORUS_SUCCESS) atomic_store_explicit(&ctx.stop, 1, memory_order_relaxed);
        join_acceptor(tp, &ctx, thread);
        chorus__acceptor_destroy(ctx.acc);
        if (status == CHORUS_SUCCESS && ctx.status != CHORUS_SUCCESS) {
            status = chorus__error(ctx.status, "%s", ctx.msg);
        }
    }
    if (status == CHORUS_SUCCESS && tp->abort_flag != NULL &&
        atomic_load_explicit(tp->abort_flag, memory_order_relaxed)) {
        status = chorus__error(CHORUS_ERR_ABORTED, "rank %d: tcp: connect_all aborted", tp->rank);
    }
    return status;

err_acceptor:
    chorus__acceptor_destroy(ctx.acc);
err:
    return status;
}

/* How long a destroy after a failure waits, in all, for the peers it left to close their
 * side (tcp_fini). */
#define TCP_FINI_WAIT_S 0.2

/* Reads and drops what the peer sent until its end of stream or the deadline; returns 1 at
 * the end of stream. */
static int tcp_drain(int fd, uint64_t deadline_ns)
{
    char sink[4096];

    for (;;) {
        ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0) return 1;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
        if (n > 0) continue;
        if (chorus__deadline_passed(deadline_ns)) return 0;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        (void)poll(&pfd, 1, chorus__deadline_ms_left(deadline_ns, 10));
    }
}

static void tcp_fini(chorus_tp_t *tp)
{
    /* After a failure, what a peer sends after our goodbye would meet a closed socket and
     * come back as a reset, which can make the peer lose the goodbye (and report a crash
     * instead of the reason). So a connection we left is closed once the peer has closed
     * its side too (it does on reading the goodbye), or after TCP_FINI_WAIT_S in all. */
    uint64_t deadline = chorus__deadline_after(TCP_FINI_WAIT_S);

    if (tp == NULL) return;
    for (int p = 0; p < tp->nranks; p++) {
        if (tp->peers[p].fd < 0) continue;
        tcp_say_goodbye(tp, p);
        if (tp->peers[p].error != CHORUS_SUCCESS) {
            shutdown(tp->peers[p].fd, SHUT_WR);
            (void)tcp_drain(tp->peers[p].fd, deadline);
        }
        close(tp->peers[p].fd);
    }
    if (tp->listen_fd >= 0) close(tp->listen_fd);
    free(tp->pfds);
    free(tp->check_peer);
    free(tp->peers);
    free(tp);
}

const chorus_tp_ops_t chorus__tp_tcp_ops = {
    .size = sizeof(chorus_tp_ops_t),
    .name = "tcp",
    .caps = CHORUS_TP_CAP_HOST_MEM,
    .init = tcp_init,
    .get_addr = tcp_get_addr,
    .connect_all = tcp_connect_all,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .progress = tcp_progress,
    .wait = tcp_wait,
    .reg_mem = NULL,
    .dereg_mem = NULL,
    .fini = tcp_fini,
    .instance_caps = NULL,
    .leave = tcp_leave,
    .isend_queued = tcp_isend_queued,
    .peek = tcp_peek,
};
