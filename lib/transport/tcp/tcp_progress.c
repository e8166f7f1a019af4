/*
 * TCP transport: the data path. Each peer has a FIFO of sends and a FIFO of receives
 * (linked through chorus_tp_req_t.next). req->offset counts the bytes of header plus
 * payload moved so far, so a request survives partial reads and writes at any byte. The
 * header of a send is built in req->priv when it is posted; the header of a receive is
 * read into req->priv. Nothing here blocks: sockets are nonblocking and wait() is the only
 * place that sleeps.
 */
#include "transport/tcp/tcp.h"

#include "util/log.h"
#include "util/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define TCP_SLICE ((size_t)1 << 30) /* at most this many bytes per system call */
#define TCP_IOV_MAX 64              /* iovec entries per sendmsg: batches small sends */

static void complete(chorus_tp_req_t *req, chorus_status_t status)
{
    req->status = status;
    req->done = 1;
}

static void encode_header(uint8_t *hdr, uint64_t bytes)
{
    for (int i = 0; i < 8; i++)
        hdr[i] = (uint8_t)(bytes >> (56 - 8 * i));
    for (int i = 0; i < 4; i++)
        hdr[8 + i] = (uint8_t)(TCP_MSG_MAGIC >> (24 - 8 * i));
    memset(hdr + 12, 0, 4);
}

static uint64_t decode_u64(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static void complete_queue(chorus_tp_req_t **head_p, chorus_tp_req_t **tail_p,
                           chorus_status_t status)
{
    chorus_tp_req_t *req = *head_p;
    *head_p = *tail_p = NULL;
    while (req != NULL) {
        chorus_tp_req_t *next = req->next;
        req->next = NULL;
        complete(req, status);
        req = next;
    }
}

chorus_status_t tcp_fail_peer(chorus_tp_t *tp, int peer, chorus_status_t status, int err,
                              const char *fmt, ...)
{
    tcp_peer_t *pp = &tp->peers[peer];
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (err != 0) {
        chorus__error_errno(status, err, "%s", msg);
    } else {
        chorus__error(status, "%s", msg);
    }
    /* Closing (rather than leaving the socket half read) makes the peer see the failure
     * too, so that its pending requests fail instead of waiting for a deadline. */
    if (pp->fd >= 0) close(pp->fd);
    pp->fd = -1;
    pp->error = status;
    complete_queue(&pp->sq_head, &pp->sq_tail, status);
    complete_queue(&pp->rq_head, &pp->rq_tail, status);
    if (tp->error == CHORUS_SUCCESS) tp->error = status;
    return status;
}

/* Credits n bytes written to the send queue of pp, completing whole messages. */
static void advance_sends(tcp_peer_t *pp, size_t n)
{
    while (n > 0) {
        chorus_tp_req_t *req = pp->sq_head;
        size_t remaining = TCP_HDR_BYTES + req->bytes - req->offset;
        if (n < remaining) {
            req->offset += n;
            return;
        }
        n -= remaining;
        pp->sq_head = req->next;
        if (pp->sq_head == NULL) pp->sq_tail = NULL;
        req->next = NULL;
        complete(req, CHORUS_SUCCESS);
    }
}

/* Writes as much of the send queue as the socket takes, header and payload of several
 * messages in one sendmsg. */
static void send_peer(chorus_tp_t *tp, int peer)
{
    tcp_peer_t *pp = &tp->peers[peer];
    while (pp->sq_head != NULL) {
        struct iovec iov[TCP_IOV_MAX];
        size_t total = 0;
        int cnt = 0;
        for (chorus_tp_req_t *req = pp->sq_head; req != NULL; req = req->next) {
            size_t off = req->offset;
            if (cnt > TCP_IOV_MAX - 2 || total >= TCP_SLICE) break;
            if (off < TCP_HDR_BYTES) {
                iov[cnt].iov_base = (uint8_t *)req->priv + off;
                iov[cnt++].iov_len = TCP_HDR_BYTES - off;
                total += TCP_HDR_BYTES - off;
                off = TCP_HDR_BYTES;
            }
            size_t left = req->bytes - (off - TCP_HDR_BYTES);
            size_t take = left < TCP_SLICE - total ? left : TCP_SLICE - total;
            if (take > 0) {
                iov[cnt].iov_base = (uint8_t *)req->buf + (off - TCP_HDR_BYTES);
                iov[cnt++].iov_len = take;
                total += take;
            }
            if (take < left) break;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = sendmsg(pp->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            int err = errno;
            tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, err == EPIPE || err == ECONNRESET ? 0 : err,
                          "rank %d: tcp: peer %d closed the connection (sending)", tp->rank, peer);
            return;
        }
        advance_sends(pp, (size_t)n);
        if ((size_t)n < total) return;
    }
}

/* Checks a header that has just been read completely. */
static chorus_status_t check_header(chorus_tp_t *tp, int peer, chorus_tp_req_t *req)
{
    const uint8_t *hdr = (const uint8_t *)req->priv;
    uint64_t len = decode_u64(hdr, 8);
    uint32_t magic = (uint32_t)decode_u64(hdr + 8, 4);

    if (magic != TCP_MSG_MAGIC || decode_u64(hdr + 12, 4) != 0) {
        return tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                             "rank %d: tcp: peer %d sent a bad header (magic 0x%08x)", tp->rank,
                             peer, magic);
    }
    if (len > TCP_MAX_MSG) {
        return tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                             "rank %d: tcp: peer %d announced %llu bytes, more than 2^40", tp->rank,
                             peer, (unsigned long long)len);
    }
    if (len != (uint64_t)req->bytes) {
        return tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                             "rank %d: tcp: peer %d sent %llu bytes for a receive of %zu "
                             "bytes (length mismatch)",
                             tp->rank, peer, (unsigned long long)len, req->bytes);
    }
    return CHORUS_SUCCESS;
}

/* Reads into the posted receives of one peer, in order. The header and the payload of the
 * head receive are read in one readv; a header that does not match is caught before
 * anything beyond the posted size could be read. */
static void recv_peer(chorus_tp_t *tp, int peer)
{
    tcp_peer_t *pp = &tp->peers[peer];
    while (pp->rq_head != NULL) {
        chorus_tp_req_t *req = pp->rq_head;
        struct iovec iov[2];
        size_t total = 0;
        int cnt = 0;
        size_t done = req->offset > TCP_HDR_BYTES ? req->offset - TCP_HDR_BYTES : 0;
        if (req->offset < TCP_HDR_BYTES) {
            iov[cnt].iov_base = (uint8_t *)req->priv + req->offset;
            iov[cnt++].iov_len = TCP_HDR_BYTES - req->offset;
            total += TCP_HDR_BYTES - req->offset;
        }
        size_t left = req->bytes - done;
        if (left > TCP_SLICE) left = TCP_SLICE;
        if (left > 0) {
            iov[cnt].iov_base = (uint8_t *)req->buf + done;
            iov[cnt++].iov_len = left;
            total += left;
        }
        ssize_t n = readv(pp->fd, iov, cnt);
        if (n == 0) {
            tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                          "rank %d: tcp: peer %d closed the connection", tp->rank, peer);
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            int err = errno;
            tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, err == ECONNRESET ? 0 : err,
                          "rank %d: tcp: peer %d closed the connection (receiving)", tp->rank,
                          peer);
            return;
        }
        size_t before = req->offset;
        req->offset += (size_t)n;
        if (before < TCP_HDR_BYTES && req->offset >= TCP_HDR_BYTES &&
            check_header(tp, peer, req) != CHORUS_SUCCESS) {
            return;
        }
        if (req->offset == TCP_HDR_BYTES + req->bytes) {
            pp->rq_head = req->next;
            if (pp->rq_head == NULL) pp->rq_tail = NULL;
            req->next = NULL;
            complete(req, CHORUS_SUCCESS);
            continue;
        }
        if ((size_t)n < total) return;
    }
}

/* Validates a request; on a failed connection completes it at once (it counts as posted). */
static chorus_status_t post_check(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                                  chorus_tp_req_t *req, const char *what)
{
    if (req == NULL || peer < 0 || peer >= tp->nranks || peer == tp->rank ||
        (buf == NULL && bytes > 0) || (uint64_t)bytes > TCP_MAX_MSG) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: tcp: %s to/from peer %d of %zu bytes: bad arguments",
                             tp->rank, what, peer, bytes);
    }
    if (tp->peers[peer].error == CHORUS_SUCCESS && tp->peers[peer].fd < 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: tcp: %s: peer %d is not "
                             "connected",
                             tp->rank, what, peer);
    }
    chorus__tp_req_reset(req, peer, buf, bytes, 0); /* the caller sets kind */
    return CHORUS_SUCCESS;
}

chorus_status_t tcp_isend(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                          chorus_tp_req_t *req)
{
    chorus_status_t status = post_check(tp, peer, buf, bytes, req, "isend");
    if (status != CHORUS_SUCCESS) return status;
    tcp_peer_t *pp = &tp->peers[peer];
    if (pp->error != CHORUS_SUCCESS) {
        complete(req, pp->error);
        chorus__error(pp->error, "rank %d: tcp: isend: the connection to peer %d failed earlier",
                      tp->rank, peer);
        return CHORUS_SUCCESS;
    }
    req->kind = TCP_REQ_SEND;
    encode_header((uint8_t *)req->priv, bytes);
    if (pp->sq_tail != NULL) {
        pp->sq_tail->next = req;
        pp->sq_tail = req;
    } else {
        /* An idle connection: start writing now, which saves a round of progress(). */
        pp->sq_head = pp->sq_tail = req;
        send_peer(tp, peer);
    }
    return CHORUS_SUCCESS;
}

chorus_status_t tcp_irecv(chorus_tp_t *tp, int peer, void *buf, size_t bytes, chorus_tp_req_t *req)
{
    chorus_status_t status = post_check(tp, peer, buf, bytes, req, "irecv");
    if (status != CHORUS_SUCCESS) return status;
    tcp_peer_t *pp = &tp->peers[peer];
    if (pp->error != CHORUS_SUCCESS) {
        complete(req, pp->error);
        chorus__error(pp->error, "rank %d: tcp: irecv: the connection to peer %d failed earlier",
                      tp->rank, peer);
        return CHORUS_SUCCESS;
    }
    req->kind = TCP_REQ_RECV;
    if (pp->rq_tail != NULL) {
        pp->rq_tail->next = req;
        pp->rq_tail = req;
    } else {
        /* The first receive on an idle connection: the message is often in the socket
         * already (the peer sent first), and reading it now saves a round of progress(). */
        pp->rq_head = pp->rq_tail = req;
        recv_peer(tp, peer);
    }
    return CHORUS_SUCCESS;
}

chorus_status_t tcp_progress(chorus_tp_t *tp)
{
    for (int p = 0; p < tp->nranks; p++) {
        tcp_peer_t *pp = &tp->peers[p];
        if (pp->fd >= 0 && pp->sq_head != NULL) send_peer(tp, p);
        if (pp->fd >= 0 && pp->rq_head != NULL) recv_peer(tp, p);
    }
    return tp->error;
}

chorus_status_t tcp_wait(chorus_tp_t *tp, uint64_t timeout_us)
{
    nfds_t nfds = 0;
    for (int p = 0; p < tp->nranks; p++) {
        tcp_peer_t *pp = &tp->peers[p];
        if (pp->fd < 0 || (pp->sq_head == NULL && pp->rq_head == NULL)) continue;
        tp->pfds[nfds].fd = pp->fd;
        tp->pfds[nfds].events =
            (short)((pp->rq_head != NULL ? POLLIN : 0) | (pp->sq_head != NULL ? POLLOUT : 0));
        tp->pfds[nfds++].revents = 0;
    }
    if (tp->abort_flag != NULL && atomic_load_explicit(tp->abort_flag, memory_order_relaxed)) {
        return chorus__error(CHORUS_ERR_ABORTED, "rank %d: tcp: wait: aborted", tp->rank);
    }
    /* Nothing pending means nothing to wait for: sleeping would only delay the caller. */
    if (nfds == 0) return CHORUS_SUCCESS;
    struct timespec ts = {(time_t)(timeout_us / 1000000), (long)(timeout_us % 1000000) * 1000};
    if (ppoll(tp->pfds, nfds, &ts, NULL) < 0 && errno != EINTR) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: tcp: poll", tp->rank);
    }
    return CHORUS_SUCCESS;
}
