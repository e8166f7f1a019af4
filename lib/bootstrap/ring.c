/*
 * The bootstrap ring: each rank learns every rank's listening address from the root, then
 * connects to rank + 1 and accepts rank - 1, both authenticated. Allgather passes blocks
 * around that ring in nranks - 1 steps; a barrier is an allgather of one byte.
 *
 * Every ring message starts with a header ("BSAG", u32 sequence, u64 block size) so that
 * ranks that disagree on the size or the number of calls get CHORUS_ERR_MISMATCH, not
 * garbage or a hang.
 */
#include "bootstrap/bs_internal.h"

#include "util/auth.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sock.h"
#include "util/status.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>

#define RING_POLL_SLICE_MS 100
#define RING_HEADER_BYTES 16

struct chorus_bootstrap {
    chorus_id_info_t info;
    int rank;
    int nranks;
    double timeout_s;
    const atomic_int *abort_flag;
    struct sockaddr_storage local_addr; /* port 0: for transports to listen on */
    int next_fd;                        /* to rank + 1 */
    int prev_fd;                        /* from rank - 1 */
    uint32_t seq;                       /* allgathers done so far */
    /* The ring listener stays for the communicator's life: chorus_comm_shrink's survivors
     * reach each other there (authenticated) when the ring is broken. */
    int listen_fd;
    chorus_acceptor_t *acc;
    uint8_t *table; /* every rank's listener, packed (nranks * CHORUS_BS_ADDR_BYTES) */
};

/* The abort flag is set by another thread (chorus_comm_abort). It publishes no other data,
 * so a relaxed load is enough: a set flag is seen within a poll slice or two. */
static int ring_aborted(const atomic_int *abort_flag)
{
    return abort_flag != NULL && atomic_load_explicit(abort_flag, memory_order_relaxed) != 0;
}

/* One nonblocking step of I/O; returns 0 (progress or would block) or the errno / -1 for
 * a closed peer. */
static int ring_io(int fd, int sending, char *buf, size_t *done, size_t len)
{
    ssize_t n;

    if (sending) {
        n = send(fd, buf + *done, len - *done, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
        n = recv(fd, buf + *done, len - *done, MSG_DONTWAIT);
        if (n == 0) return -1;
    }
    if (n > 0) {
        *done += (size_t)n;
        return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    return errno;
}

static chorus_status_t ring_io_error(int err, int sending, const char *what)
{
    if (err == -1 || err == EPIPE || err == ECONNRESET) {
        return chorus__error(CHORUS_ERR_REMOTE, "%s: the %s rank closed the connection", what,
                             sending ? "receiving" : "sending");
    }
    return chorus__error_errno(CHORUS_ERR_SYSTEM, err, "%s: %s", what, sending ? "send" : "recv");
}

chorus_status_t chorus__bs_exchange(int send_fd, const void *sbuf, size_t slen, int recv_fd,
                                    void *rbuf, size_t rlen, uint64_t deadline_ns,
                                    const atomic_int *abort_flag, const char *what)
{
    size_t sent = 0, got = 0;

    for (;;) {
        struct pollfd pfds[2];
        int n = 0, rc, err;

        if (sent < slen) {
            err = ring_io(send_fd, 1, (char *)(uintptr_t)sbuf, &sent, slen);
            if (err != 0) return ring_io_error(err, 1, what);
        }
        if (got < rlen) {
            err = ring_io(recv_fd, 0, rbuf, &got, rlen);
            if (err != 0) return ring_io_error(err, 0, what);
        }
        if (sent == slen && got == rlen) return CHORUS_SUCCESS;
        if (ring_aborted(abort_flag)) {
            return chorus__error(CHORUS_ERR_ABORTED, "%s: aborted", what);
        }
        if (chorus__deadline_passed(deadline_ns)) {
            return chorus__error(CHORUS_ERR_TIMEOUT,
                                 "%s: timed out (sent %zu of %zu, "
                                 "received %zu of %zu bytes)",
                                 what, sent, slen, got, rlen);
        }
        if (sent < slen) pfds[n++] = (struct pollfd){.fd = send_fd, .events = POLLOUT};
        if (got < rlen) pfds[n++] = (struct pollfd){.fd = recv_fd, .events = POLLIN};
        rc = poll(pfds, (nfds_t)n, chorus__deadline_ms_left(deadline_ns, RING_POLL_SLICE_MS));
        if (rc < 0 && errno != EINTR) {
            return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "%s: poll", what);
        }
    }
}

/* Waits until fd has bytes to read (the peer's challenge), watching the abort flag:
 * chorus__auth_client has none, and the peer may take long to start serving. */
static chorus_status_t ring_wait_readable(int fd, uint64_t deadline_ns,
                                          const atomic_int *abort_flag, const char *what)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc;

        if (ring_aborted(abort_flag)) {
            return chorus__error(CHORUS_ERR_ABORTED, "%s: aborted", what);
        }
        if (chorus__deadline_passed(deadline_ns)) {
            return chorus__error(CHORUS_ERR_TIMEOUT, "%s: no answer before the deadline", what);
        }
        rc = poll(&pfd, 1, chorus__deadline_ms_left(deadline_ns, RING_POLL_SLICE_MS));
        if (rc > 0) return CHORUS_SUCCESS;
        if (rc < 0 && errno != EINTR) {
            return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "%s: poll", what);
        }
    }
}

static void ring_hello(const chorus_bootstrap_t *bs, uint32_t purpose,
                       const struct sockaddr_storage *addr, uint8_t out[CHORUS_BS_HELLO_BYTES])
{
    chorus_bs_hello_t h;

    memset(&h, 0, sizeof(h));
    h.purpose = purpose;
    h.comm_id = bs->info.comm_id;
    h.rank = (uint32_t)bs->rank;
    h.nranks = (uint32_t)bs->nranks;
    if (addr != NULL) h.addr = *addr;
    chorus__bs_hello_pack(&h, out);
}

/* Whether this thread's last meeting with the root found nobody listening by the deadline. */
static _Thread_local int root_unreached;

int chorus__bootstrap_root_unreached(void)
{
    return root_unreached;
}

/* The root gave up at its deadline: CHORUS_ERR_TIMEOUT naming the ranks that never came. */
static chorus_status_t ring_read_verdict(int fd, const chorus_bootstrap_t *bs, const char *what)
{
    uint8_t body[CHORUS_BS_MISS_MAX_BYTES];
    uint64_t until = chorus__deadline_after(1.0);
    size_t len = 4;
    char text[256];
    uint32_t missing;
    chorus_status_t status;

    status = chorus__bs_exchange(-1, NULL, 0, fd, body, 4, until, bs->abort_flag, what);
    if (status != CHORUS_SUCCESS) return status;
    missing = chorus__bs_get32(body);
    if (missing > 0 && missing < (uint32_t)bs->nranks) {
        len += 4 * (size_t)(missing < CHORUS_BS_MISS_LIST ? missing : CHORUS_BS_MISS_LIST);
        status = chorus__bs_exchange(-1, NULL, 0, fd, body + 4, len - 4, until, bs->abort_flag,
                                     what);
        if (status != CHORUS_SUCCESS) return status;
    }
    chorus__bs_root_verdicts_settle(1.0);
    status = chorus__bs_miss_describe(body, len, bs->nranks, text, sizeof(text));
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "%s: the root's verdict", what);
    return chorus__error(CHORUS_ERR_TIMEOUT, "timed out: %s", text);
}

/* Registers with the root and receives the address table (nranks packed addresses). */
static chorus_status_t ring_meet_root(chorus_bootstrap_t *bs, const struct sockaddr_storage *me,
                                      uint64_t deadline_ns, uint8_t **table_p)
{
    uint8_t hello[CHORUS_BS_HELLO_BYTES], head[8], *table;
    size_t len = (size_t)CHORUS_BS_ADDR_BYTES * bs->nranks;
    const char *what = "the root"; /* the context below names its address */
    char text[80];
    uint64_t verdict_by = deadline_ns;
    chorus_status_t status;
    int fd;

    table = malloc(len);
    if (table == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "%s: address table", what);
    root_unreached = 0;
    status = chorus__sock_connect(&bs->info.root_addr, deadline_ns, bs->abort_flag, &fd);
    if (status != CHORUS_SUCCESS) {
        root_unreached = status == CHORUS_ERR_TIMEOUT;
        goto err_free;
    }
    ring_hello(bs, CHORUS_BS_PURPOSE_ROOT, me, hello);
    CHORUS_CHECK_GOTO(ring_wait_readable(fd, deadline_ns, bs->abort_flag, what), err_close);
    CHORUS_CHECK_GOTO(chorus__auth_client(fd, bs->info.secret, hello, sizeof(hello), deadline_ns),
                      err_close);
    /* A little past the deadline: the root's verdict comes at the root's own deadline. */
    if (deadline_ns < UINT64_MAX - (uint64_t)(CHORUS_BS_VERDICT_GRACE_S * 1e9))
        verdict_by = deadline_ns + (uint64_t)(CHORUS_BS_VERDICT_GRACE_S * 1e9);
    status = chorus__bs_exchange(-1, NULL, 0, fd, head, sizeof(head), verdict_by, bs->abort_flag,
                                 "the root's table");
    if (status == CHORUS_ERR_TIMEOUT) {
        status = chorus__error(status, "timed out: not every rank came, and the root has not "
                               "said which yet (it does at its own deadline, CHORUS_TIMEOUT "
                               "where it runs)");
        goto err_close;
    }
    if (status != CHORUS_SUCCESS) goto err_close;
    if (memcmp(head, "MISS", 4) == 0 && chorus__bs_get32(head + 4) == (uint32_t)bs->nranks) {
        status = ring_read_verdict(fd, bs, what);
        goto err_close;
    }
    if (memcmp(head, "TABL", 4) != 0 || chorus__bs_get32(head + 4) != (uint32_t)bs->nranks) {
        status = chorus__error(CHORUS_ERR_MISMATCH,
                               "%s: the root's table is for %u ranks, "
                               "this rank was told %d",
                               what, chorus__bs_get32(head + 4), bs->nranks);
        goto err_close;
    }
    CHORUS_CHECK_GOTO(
        chorus__bs_exchange(-1, NULL, 0, fd, table, len, verdict_by, bs->abort_flag, what),
        err_close);
    close(fd);
    *table_p = table;
    return CHORUS_SUCCESS;

err_close:
    close(fd);
err_free:
    free(table);
    return chorus__error_context(status, "meeting the root %s",
                                 chorus__sock_addr_str(&bs->info.root_addr, text, sizeof(text)));
}

static chorus_status_t ring_connect_next(chorus_bootstrap_t *bs, const uint8_t *table,
                                         uint64_t deadline_ns)
{
    int next = (bs->rank + 1) % bs->nranks;
    struct sockaddr_storage addr;
    uint8_t hello[CHORUS_BS_HELLO_BYTES];
    chorus_status_t status;
    char what[96];
    int fd;

    CHORUS_CHECK_GOTO(chorus__bs_unpack_addr(table + (size_t)CHORUS_BS_ADDR_BYTES * next, &addr),
                      err);
    CHORUS_CHECK_GOTO(chorus__sock_connect(&addr, deadline_ns, bs->abort_flag, &fd), err);
    ring_hello(bs, CHORUS_BS_PURPOSE_RING, NULL, hello);
    snprintf(what, sizeof(what), "bootstrap: rank %d: rank %d's challenge", bs->rank, next);
    CHORUS_CHECK_GOTO(ring_wait_readable(fd, deadline_ns, bs->abort_flag, what), err_close);
    CHORUS_CHECK_GOTO(chorus__auth_client(fd, bs->info.secret, hello, sizeof(hello), deadline_ns),
                      err_close);
    bs->next_fd = fd;
    return CHORUS_SUCCESS;

err_close:
    close(fd);
err:
    return chorus__error_context(status, "bootstrap: rank %d: connecting to rank %d", bs->rank,
                                 next);
}

/* Accepts rank - 1. An authenticated connection that is not rank - 1 of this
 * communicator (a stale job sharing the secret) is dropped and logged. */
static chorus_status_t ring_accept_prev(chorus_bootstrap_t *bs, chorus_acceptor_t *acc,
                                        uint64_t deadline_ns)
{
    uint32_t prev = (uint32_t)((bs->rank + bs->nranks - 1) % bs->nranks);
    uint8_t buf[CHORUS_BS_HELLO_BYTES];
    chorus_bs_hello_t h;
    chorus_status_t status;
    size_t len;
    int fd;

    for (;;) {
        memset(&h, 0, sizeof(h));
        status =
            chorus__acceptor_accept(acc, buf, sizeof(buf), &len, deadline_ns, bs->abort_flag, &fd);
        if (status != CHORUS_SUCCESS) {
            return chorus__error_context(status, "bootstrap: rank %d: waiting for rank %u",
                                         bs->rank, prev);
        }
        if (chorus__bs_hello_unpack(buf, len, &h) == CHORUS_SUCCESS &&
            h.purpose == CHORUS_BS_PURPOSE_RING && h.comm_id == bs->info.comm_id &&
            h.rank == prev && h.nranks == (uint32_t)bs->nranks) {
            bs->prev_fd = fd;
            return CHORUS_SUCCESS;
        }
        CHORUS_WARN("bootstrap",
                    "rank %d: dropped an authenticated connection that is not "
                    "rank %u of this communicator (claims rank %u of %u)",
                    bs->rank, prev, (unsigned)h.rank, (unsigned)h.nranks);
        close(fd);
    }
}

/* Listens, meets the root, then links the ring. Odd ranks accept before they connect and
 * even ranks the other way round: if everyone connected first, everyone would wait for a
 * challenge that nobody sends. */
static chorus_status_t ring_link(chorus_bootstrap_t *bs, uint64_t deadline_ns)
{
    struct sockaddr_storage bound;
    chorus_acceptor_t *acc;
    chorus_status_t status;
    uint8_t *table = NULL;
    char what[64];
    int lfd;

    CHORUS_CHECK_GOTO(chorus__sock_pick_local_addr(&bs->info.root_addr, &bs->local_addr), err);
    CHORUS_CHECK_GOTO(chorus__sock_listen(&bs->local_addr, 64, &lfd, &bound), err);
    snprintf(what, sizeof(what), "bootstrap ring rank %d", bs->rank);
    CHORUS_CHECK_GOTO(chorus__acceptor_create(lfd, bs->info.secret, what, &acc), err_close);
    CHORUS_CHECK_GOTO(ring_meet_root(bs, &bound, deadline_ns, &table), err_acc);
    if (bs->nranks > 1) {
        if (bs->rank % 2 == 1) {
            CHORUS_CHECK_GOTO(ring_accept_prev(bs, acc, deadline_ns), err_table);
            CHORUS_CHECK_GOTO(ring_connect_next(bs, table, deadline_ns), err_table);
        } else {
            CHORUS_CHECK_GOTO(ring_connect_next(bs, table, deadline_ns), err_table);
            CHORUS_CHECK_GOTO(ring_accept_prev(bs, acc, deadline_ns), err_table);
        }
    }
    /* The listener stays, for chorus_comm_shrink: a stranger who connects later waits in
     * its backlog until a shrink's acceptor refuses it (it never learns the secret). */
    bs->table = table;
    bs->acc = acc;
    bs->listen_fd = lfd;
    return CHORUS_SUCCESS;

err_table:
    free(table);
err_acc:
    chorus__acceptor_destroy(acc);
err_close:
    close(lfd);
err:
    return status;
}

chorus_status_t chorus__bootstrap_init(const chorus_unique_id_t *id, int rank, int nranks,
                                       double timeout_s, const atomic_int *abort_flag,
                                       chorus_bootstrap_t **bs_p)
{
    chorus_bootstrap_t *bs;
    chorus_status_t status;

    if (id == NULL || bs_p == NULL || nranks < 1 || nranks > CHORUS_BS_MAX_RANKS || rank < 0 ||
        rank >= nranks) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: rank %d of %d is not a valid rank", rank, nranks);
    }
    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "bootstrap: rank %d", rank);
    bs->rank = rank;
    bs->nranks = nranks;
    bs->timeout_s = timeout_s;
    bs->abort_flag = abort_flag;
    bs->next_fd = -1;
    bs->prev_fd = -1;
    bs->listen_fd = -1;
    CHORUS_CHECK_GOTO(chorus__id_decode(id, &bs->info), err_free);
    CHORUS_CHECK_GOTO(ring_link(bs, chorus__deadline_after(timeout_s)), err_fds);
    CHORUS_INFO("bootstrap", "rank %d of %d: ring connected", rank, nranks);
    *bs_p = bs;
    return CHORUS_SUCCESS;

err_fds:
    if (bs->next_fd >= 0) close(bs->next_fd);
    if (bs->prev_fd >= 0) close(bs->prev_fd);
err_free:
    OPENSSL_cleanse(bs, sizeof(*bs));
    free(bs);
    return status;
}

chorus_status_t chorus__bootstrap_allgather(chorus_bootstrap_t *bs, void *data, size_t size)
{
    uint64_t deadline_ns = chorus__deadline_after(bs->timeout_s);
    uint8_t shead[RING_HEADER_BYTES], rhead[RING_HEADER_BYTES];
    char *base = data;
    char what[128];
    chorus_status_t status;
    int step, n = bs->nranks;
    uint32_t seq = bs->seq++;

    if (n == 1 || size == 0) return CHORUS_SUCCESS;
    memcpy(shead, "BSAG", 4);
    chorus__bs_put32(shead + 4, seq);
    chorus__bs_put64(shead + 8, size);
    for (step = 0; step < n - 1; step++) {
        int sblock = (bs->rank - step + n) % n, rblock = (bs->rank - step - 1 + n) % n;
        snprintf(what, sizeof(what),
                 "bootstrap: rank %d: allgather #%u step %d (to rank %d, "
                 "from rank %d)",
                 bs->rank, seq, step, (bs->rank + 1) % n, (bs->rank - 1 + n) % n);
        status = chorus__bs_exchange(bs->next_fd, shead, sizeof(shead), bs->prev_fd, rhead,
                                     sizeof(rhead), deadline_ns, bs->abort_flag, what);
        if (status != CHORUS_SUCCESS) return status;
        if (memcmp(rhead, "BSAG", 4) != 0 || chorus__bs_get32(rhead + 4) != seq ||
            chorus__bs_get64(rhead + 8) != size) {
            return chorus__error(CHORUS_ERR_MISMATCH,
                                 "%s: the previous rank sent allgather #%u of %llu bytes, "
                                 "expected #%u of %zu",
                                 what, chorus__bs_get32(rhead + 4),
                                 (unsigned long long)chorus__bs_get64(rhead + 8), seq, size);
        }
        status = chorus__bs_exchange(bs->next_fd, base + (size_t)sblock * size, size, bs->prev_fd,
                                     base + (size_t)rblock * size, size, deadline_ns,
                                     bs->abort_flag, what);
        if (status != CHORUS_SUCCESS) return status;
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__bootstrap_barrier(chorus_bootstrap_t *bs)
{
    chorus_status_t status;
    char *tokens;

    if (bs->nranks == 1) return CHORUS_SUCCESS;
    tokens = calloc((size_t)bs->nranks, 1);
    if (tokens == NULL) {
        return chorus__error(CHORUS_ERR_NO_MEMORY, "bootstrap: rank %d: barrier", bs->rank);
    }
    /* Having everyone's byte proves that everyone has arrived. */
    tokens[bs->rank] = 1;
    status = chorus__bootstrap_allgather(bs, tokens, 1);
    free(tokens);
    return status;
}

const struct sockaddr_storage *chorus__bootstrap_local_addr(const chorus_bootstrap_t *bs)
{
    return &bs->local_addr;
}

const chorus_id_info_t *chorus__bootstrap_id_info(const chorus_bootstrap_t *bs)
{
    return &bs->info;
}

chorus_status_t chorus__bootstrap_peer_addr(const chorus_bootstrap_t *bs, int rank,
                                            struct sockaddr_storage *addr_p)
{
    if (rank < 0 || rank >= bs->nranks || bs->table == NULL)
        return chorus__error(CHORUS_ERR_INTERNAL, "bootstrap: rank %d: no address for rank %d",
                             bs->rank, rank);
    return chorus__bs_unpack_addr(bs->table + (size_t)CHORUS_BS_ADDR_BYTES * rank, addr_p);
}

chorus_acceptor_t *chorus__bootstrap_acceptor(chorus_bootstrap_t *bs)
{
    return bs->acc;
}

int chorus__bootstrap_ring_gone(chorus_bootstrap_t *bs, int *rank_p)
{
    struct pollfd pfd[2];
    int n = 0;

    if (bs == NULL) return 0;
    if (bs->next_fd >= 0) pfd[n++] = (struct pollfd){.fd = bs->next_fd, .events = POLLIN};
    if (bs->prev_fd >= 0) pfd[n++] = (struct pollfd){.fd = bs->prev_fd, .events = POLLIN};
    if (n == 0 || poll(pfd, (nfds_t)n, 0) <= 0) return 0;
    for (int i = 0; i < n; i++) {
        char c;
        if (pfd[i].revents == 0) continue;
        /* Data (a bootstrap collective the neighbour started) is no departure: only the end
         * of the stream or an error is. */
        if (!(pfd[i].revents & (POLLHUP | POLLERR)) &&
            recv(pfd[i].fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0)
            continue;
        *rank_p = pfd[i].fd == bs->next_fd ? (bs->rank + 1) % bs->nranks
                                           : (bs->rank + bs->nranks - 1) % bs->nranks;
        return 1;
    }
    return 0;
}

void chorus__bootstrap_close_ring(chorus_bootstrap_t *bs)
{
    if (bs->next_fd >= 0) close(bs->next_fd);
    if (bs->prev_fd >= 0) close(bs->prev_fd);
    bs->next_fd = bs->prev_fd = -1;
}

void chorus__bootstrap_close_listener(chorus_bootstrap_t *bs)
{
    if (bs->acc != NULL) chorus__acceptor_destroy(bs->acc);
    if (bs->listen_fd >= 0) close(bs->listen_fd);
    bs->acc = NULL;
    bs->listen_fd = -1;
}

void chorus__bootstrap_destroy(chorus_bootstrap_t *bs)
{
    if (bs == NULL) return;
    chorus__bootstrap_close_ring(bs);
    if (bs->acc != NULL) chorus__acceptor_destroy(bs->acc);
    if (bs->listen_fd >= 0) close(bs->listen_fd);
    free(bs->table);
    OPENSSL_cleanse(bs, sizeof(*bs));
    free(bs);
}
