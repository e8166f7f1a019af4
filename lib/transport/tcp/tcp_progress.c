/*
 * TCP transport: the data path. Each peer has a FIFO of sends and a FIFO of receives
 * (linked through chorus_tp_req_t.next). req->offset counts the bytes of header plus
 * payload moved so far, so a request survives partial reads and writes at any byte. The
 * header of a send is built in req->priv when it is posted; the header of a receive is
 * read into req->priv. Nothing here blocks: sockets are nonblocking and wait() is the only
 * place that sleeps.
 */
#include "transport/tcp/tcp.h"

#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define TCP_SLICE ((size_t)1 << 30) /* at most this many bytes per system call */
#define TCP_IOV_MAX 64              /* iovec entries per sendmsg: batches small sends */
#define TCP_PAIR_MAX 256            /* a head receive this small is read with the next one */

static const char *others_dead(chorus_tp_t *tp, int peer, char *buf, size_t size);

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
    snprintf(pp->why, sizeof pp->why, "%s", chorus_last_error());
    if (tp->blame < 0 && status != CHORUS_ERR_MISMATCH) tp->blame = peer;
    if (status == CHORUS_ERR_MISMATCH && pp->fd >= 0 && pp->error == CHORUS_SUCCESS) {
        /* The peer's message did not match our receive: tell it why we stop (a goodbye
         * saying mismatch), then a FIN; the socket stays until fini, since closing it
         * with its unread payload would reset the connection and could lose the goodbye. */
        chorus_status_t left = tp->left;

        tp->left = CHORUS_ERR_MISMATCH;
        tcp_say_goodbye(tp, peer);
        tp->left = left;
        shutdown(pp->fd, SHUT_WR);
    } else {
        /* Closing (rather than leaving the socket half read) makes the peer see the
         * failure too, so that its pending requests fail instead of waiting for a
         * deadline. */
        if (pp->fd >= 0) close(pp->fd);
        pp->fd = -1;
    }
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

static chorus_status_t goodbye_failure(chorus_tp_t *tp, int peer, const tcp_hdr_t *h, int scan);

/* A send failed because the peer closed: if the peer said goodbye first and no receive
 * from it is halfway through a message, its goodbye (in our receive queue) says why it
 * left, which is what the failure should report (a mismatch stays a mismatch). Nonzero
 * when it did: the peer has been failed with that reason. */
static int goodbye_waiting(chorus_tp_t *tp, int peer)
{
    tcp_peer_t *pp = &tp->peers[peer];
    uint8_t hdr[TCP_HDR_BYTES];
    tcp_hdr_t h;

    if (pp->fd < 0 || (pp->rq_head != NULL && pp->rq_head->offset > 0)) return 0;
    if (recv(pp->fd, hdr, sizeof hdr, MSG_PEEK | MSG_DONTWAIT) != (ssize_t)sizeof hdr) return 0;
    if (chorus__tcp_header_decode(hdr, 0, tp->rank, tp->nranks, &h) != TCP_HDR_BYE) return 0;
    (void)recv(pp->fd, hdr, sizeof hdr, MSG_DONTWAIT);
    goodbye_failure(tp, peer, &h, 0);
    return 1;
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
            char why[256];
            if (goodbye_waiting(tp, peer)) return;
            tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, err == EPIPE || err == ECONNRESET ? 0 : err,
                          "rank %d: tcp: peer %d closed the connection (sending)%s", tp->rank, peer,
                          others_dead(tp, peer, why, sizeof why));
            return;
        }
        advance_sends(pp, (size_t)n);
        if ((size_t)n < total) return;
    }
}

tcp_hdr_verdict_t chorus__tcp_header_decode(const uint8_t hdr[TCP_HDR_BYTES], size_t posted,
                                            int rank, int nranks, tcp_hdr_t *out)
{
    out->len = decode_u64(hdr, 8);
    out->magic = (uint32_t)decode_u64(hdr + 8, 4);
    out->word = (uint32_t)decode_u64(hdr + 12, 4);
    out->blame = -1;
    out->mismatch = 0;
    if (out->magic == TCP_BYE_MAGIC && out->len == 0) {
        uint32_t who = out->word & TCP_BYE_BLAME_MASK;

        /* The word is the peer's to fill: only a rank of ours (not us) is believed. */
        if (who > 0 && who <= (uint32_t)nranks && (int)who - 1 != rank) out->blame = (int)who - 1;
        out->mismatch = (out->word >> 24) == TCP_BYE_MISMATCH;
        return TCP_HDR_BYE;
    }
    if (out->magic != TCP_MSG_MAGIC || out->word != 0) return TCP_HDR_BAD_MAGIC;
    if (out->len > TCP_MAX_MSG) return TCP_HDR_TOO_LONG;
    if (out->len != (uint64_t)posted) return TCP_HDR_MISMATCH;
    return TCP_HDR_MSG;
}

/* A goodbye where data was expected, or one that says its sender left after a failure:
 * fails the peer, naming the rank it blames (the cause, not one more rank that left). */
static chorus_status_t goodbye_failure(chorus_tp_t *tp, int peer, const tcp_hdr_t *h, int scan)
{
    char why[256];

    /* Not from inside a scan (it uses the same scratch): the scan names the dead itself. */
    why[0] = '\0';

    tp->peers[peer].bye = 1;
    if (h->mismatch)
        return tcp_fail_peer(tp, peer, CHORUS_ERR_MISMATCH, 0,
                             "rank %d: tcp: peer %d left because the ranks' calls differ; the "
                             "rank that compared them names both calls", tp->rank, peer);
    if (h->blame >= 0) {
        if (tp->blame < 0) tp->blame = h->blame;
        return tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                             "rank %d: tcp: peer %d left after it lost peer %d%s", tp->rank, peer,
                             h->blame, scan ? others_dead(tp, peer, why, sizeof why) : why);
    }
    return tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                         "rank %d: tcp: peer %d closed its connection (it destroyed its "
                         "communicator)%s", tp->rank, peer,
                         scan ? others_dead(tp, peer, why, sizeof why) : why);
}

/* Checks a header that has just been read completely. */
static chorus_status_t check_header(chorus_tp_t *tp, int peer, chorus_tp_req_t *req)
{
    tcp_hdr_t h;

    switch (chorus__tcp_header_decode((const uint8_t *)req->priv, req->bytes, tp->rank,
                                      tp->nranks, &h)) {
    case TCP_HDR_MSG: return CHORUS_SUCCESS;
    case TCP_HDR_BYE: return goodbye_failure(tp, peer, &h, 1);
    case TCP_HDR_TOO_LONG:
        return tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                             "rank %d: tcp: peer %d announced %llu bytes, more than 2^40", tp->rank,
                             peer, (unsigned long long)h.len);
    case TCP_HDR_MISMATCH:
        return tcp_fail_peer(tp, peer, CHORUS_ERR_MISMATCH, 0,
                             "rank %d: tcp: peer %d sent %llu bytes for a receive of %zu "
                             "bytes (length mismatch)",
                             tp->rank, peer, (unsigned long long)h.len, req->bytes);
    default:
        return tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                             "rank %d: tcp: peer %d sent a bad header (magic 0x%08x)", tp->rank,
                             peer, h.magic);
    }
}

/* Credits n bytes read to the receive req (from its offset on); returns the bytes it took.
 * Checks the header once complete: nonzero *bad when it failed the peer. */
static size_t credit_recv(chorus_tp_t *tp, int peer, chorus_tp_req_t *req, size_t n, int *bad)
{
    size_t want = TCP_HDR_BYTES + req->bytes - req->offset, take = n < want ? n : want;
    size_t before = req->offset;

    req->offset += take;
    if (before < TCP_HDR_BYTES && req->offset >= TCP_HDR_BYTES &&
        check_header(tp, peer, req) != CHORUS_SUCCESS)
        *bad = 1;
    return take;
}

/* Reads a small head receive and the receive after it in one readv: a call signature and
 * the first data behind it, which arrive together (isend_queued), cost one system call.
 * Returns 1 when it did (the queue moved on), 0 to take the one-at-a-time path. */
static int recv_pair(chorus_tp_t *tp, int peer)
{
    tcp_peer_t *pp = &tp->peers[peer];
    chorus_tp_req_t *a = pp->rq_head, *b = a->next;
    struct iovec iov[4];
    int bad = 0;

    if (a->offset != 0 || b == NULL || a->bytes > TCP_PAIR_MAX || b->bytes > TCP_SLICE) return 0;
    iov[0] = (struct iovec){a->priv, TCP_HDR_BYTES};
    iov[1] = (struct iovec){a->buf, a->bytes};
    iov[2] = (struct iovec){b->priv, TCP_HDR_BYTES};
    iov[3] = (struct iovec){b->buf, b->bytes};
    ssize_t n = readv(pp->fd, iov, 4);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
        return 0; /* end of stream or an error: the plain path reports it */
    }
    /* A header that does not match fails the peer: what was read past it is then garbage
     * in a receive that fails with it. */
    size_t used = credit_recv(tp, peer, a, (size_t)n, &bad);
    if (bad) return 1;
    if (a->offset < TCP_HDR_BYTES + a->bytes) return 1;
    pp->rq_head = b;
    a->next = NULL;
    complete(a, CHORUS_SUCCESS);
    if ((size_t)n > used) {
        credit_recv(tp, peer, b, (size_t)n - used, &bad);
        if (bad) return 1;
        if (b->offset == TCP_HDR_BYTES + b->bytes) {
            pp->rq_head = b->next;
            if (pp->rq_head == NULL) pp->rq_tail = NULL;
            b->next = NULL;
            complete(b, CHORUS_SUCCESS);
        }
    }
    return 1;
}

/* Reads into the posted receives of one peer, in order. The header and the payload of the
 * head receive are read in one readv; a header that does not match is caught before
 * anything beyond the posted size could be read (recv_pair excepted, see there). */
static void recv_peer(chorus_tp_t *tp, int peer)
{
    tcp_peer_t *pp = &tp->peers[peer];
    while (pp->rq_head != NULL) {
        if (pp->rq_head->next != NULL && pp->rq_head->offset == 0 &&
            pp->rq_head->bytes <= TCP_PAIR_MAX) {
            chorus_tp_req_t *head = pp->rq_head;
            if (recv_pair(tp, peer)) {
                if (pp->rq_head == head || pp->error != CHORUS_SUCCESS) return;
                continue;
            }
        }
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
            char why[256];
            tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, 0,
                          "rank %d: tcp: peer %d closed the connection%s", tp->rank, peer,
                          others_dead(tp, peer, why, sizeof why));
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            int err = errno;
            char why[256];
            tcp_fail_peer(tp, peer, CHORUS_ERR_REMOTE, err == ECONNRESET ? 0 : err,
                          "rank %d: tcp: peer %d closed the connection (receiving)%s", tp->rank,
                          peer, others_dead(tp, peer, why, sizeof why));
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

/* Queues a send; hold leaves it unwritten (isend_queued), else it is written now when the
 * connection is idle or when it follows what isend_queued held back (one write for both). */
static chorus_status_t post_send(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                                 chorus_tp_req_t *req, int hold)
{
    chorus_status_t status = post_check(tp, peer, buf, bytes, req, "isend");
    if (status != CHORUS_SUCCESS) return status;
    tcp_peer_t *pp = &tp->peers[peer];
    if (pp->error != CHORUS_SUCCESS) {
        complete(req, pp->error);
        chorus__error(pp->error, "%s (%s after the failure)", pp->why, "isend");
        return CHORUS_SUCCESS;
    }
    req->kind = TCP_REQ_SEND;
    encode_header((uint8_t *)req->priv, bytes);
    int idle = pp->sq_head == NULL;
    chorus__tp_queue_push(&pp->sq_head, &pp->sq_tail, req);
    if (hold) {
        pp->held = 1; /* written by the next isend to peer, or by progress() */
    } else if (idle || pp->held) {
        pp->held = 0;
        send_peer(tp, peer);
    }
    return CHORUS_SUCCESS;
}

chorus_status_t tcp_isend(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                          chorus_tp_req_t *req)
{
    return post_send(tp, peer, buf, bytes, req, 0);
}

chorus_status_t tcp_isend_queued(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                                 chorus_tp_req_t *req)
{
    return post_send(tp, peer, buf, bytes, req, 1);
}

int tcp_peek(chorus_tp_t *tp, int peer, void *buf, size_t len)
{
    uint8_t tmp[TCP_HDR_BYTES + 64];
    tcp_peer_t *pp;
    tcp_hdr_t h;

    if (peer < 0 || peer >= tp->nranks || peer == tp->rank || len > 64) return 0;
    pp = &tp->peers[peer];
    /* With a receive posted, the stream may be in the middle of a message. */
    if (pp->fd < 0 || pp->error != CHORUS_SUCCESS || pp->bye || pp->rq_head != NULL) return 0;
    if (recv(pp->fd, tmp, TCP_HDR_BYTES + len, MSG_PEEK | MSG_DONTWAIT) !=
        (ssize_t)(TCP_HDR_BYTES + len))
        return 0;
    if (chorus__tcp_header_decode(tmp, len, tp->rank, tp->nranks, &h) != TCP_HDR_MSG) return 0;
    memcpy(buf, tmp + TCP_HDR_BYTES, len);
    return 1;
}


chorus_status_t tcp_irecv(chorus_tp_t *tp, int peer, void *buf, size_t bytes, chorus_tp_req_t *req)
{
    chorus_status_t status = post_check(tp, peer, buf, bytes, req, "irecv");
    if (status != CHORUS_SUCCESS) return status;
    tcp_peer_t *pp = &tp->peers[peer];
    if (pp->error != CHORUS_SUCCESS) {
        complete(req, pp->error);
        chorus__error(pp->error, "%s (%s after the failure)", pp->why, "irecv");
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
    int pending = 0;
    for (int p = 0; p < tp->nranks; p++) {
        tcp_peer_t *pp = &tp->peers[p];
        pp->held = 0;
        if (pp->fd >= 0 && pp->sq_head != NULL) send_peer(tp, p);
        if (pp->fd >= 0 && pp->rq_head != NULL) recv_peer(tp, p);
        pending |= pp->sq_head != NULL || pp->rq_head != NULL;
    }
    if (pending) tcp_check_peers(tp, 0);
    return tp->error;
}

chorus_status_t tcp_wait(chorus_tp_t *tp, uint64_t timeout_us)
{
    nfds_t nfds = 0;
    int pending = 0;
    for (int p = 0; p < tp->nranks; p++) {
        tcp_peer_t *pp = &tp->peers[p];
        /* Idle connections are watched too (for their end of stream only), so that a
         * rank that died wakes us even when we wait for somebody else. */
        if (pp->fd < 0 || pp->bye || pp->error != CHORUS_SUCCESS) continue;
        tp->pfds[nfds].fd = pp->fd;
        tp->pfds[nfds].events = (short)((pp->rq_head != NULL ? POLLIN : POLLRDHUP) |
                                        (pp->sq_head != NULL ? POLLOUT : 0));
        tp->pfds[nfds++].revents = 0;
        pending |= pp->sq_head != NULL || pp->rq_head != NULL;
    }
    if (tp->abort_flag != NULL && atomic_load_explicit(tp->abort_flag, memory_order_relaxed)) {
        return chorus__error(CHORUS_ERR_ABORTED, "rank %d: tcp: wait: aborted", tp->rank);
    }
    /* Nothing pending means nothing to wait for: sleeping would only delay the caller. */
    if (!pending) return CHORUS_SUCCESS;
    struct timespec ts = {(time_t)(timeout_us / 1000000), (long)(timeout_us % 1000000) * 1000};
    if (ppoll(tp->pfds, nfds, &ts, NULL) < 0 && errno != EINTR) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: tcp: poll", tp->rank);
    }
    /* What it finds is returned by the next progress(), like any connection error. */
    tcp_check_peers(tp, 0);
    return CHORUS_SUCCESS;
}

void tcp_say_goodbye(chorus_tp_t *tp, int peer)
{
    tcp_peer_t *pp = &tp->peers[peer];
    uint8_t hdr[TCP_HDR_BYTES];
    uint32_t word;

    /* In the middle of a message the peer would read the goodbye as payload: then the
     * plain end of stream must do. */
    if (pp->fd < 0 || pp->error != CHORUS_SUCCESS ||
        (pp->sq_head != NULL && pp->sq_head->offset > 0)) {
        return;
    }
    encode_header(hdr, 0);
    word = tp->blame >= 0 && (uint32_t)tp->blame < TCP_BYE_BLAME_MASK ? (uint32_t)tp->blame + 1
                                                                       : 0;
    if (tp->left == CHORUS_ERR_MISMATCH) word |= TCP_BYE_MISMATCH << 24;
    for (int i = 0; i < 4; i++) {
        hdr[8 + i] = (uint8_t)(TCP_BYE_MAGIC >> (24 - 8 * i));
        hdr[12 + i] = (uint8_t)(word >> (24 - 8 * i));
    }
    (void)send(pp->fd, hdr, sizeof(hdr), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void tcp_leave(chorus_tp_t *tp, chorus_status_t status)
{
    if (tp == NULL || status == CHORUS_SUCCESS || tp->left != CHORUS_SUCCESS) return;
    tp->left = status;
    for (int p = 0; p < tp->nranks; p++) {
        tcp_peer_t *pp = &tp->peers[p];

        /* A failed connection already told its peer what it could. */
        if (pp->fd < 0 || pp->error != CHORUS_SUCCESS) continue;
        /* A signature held back (isend_queued) goes first: the peer can then name our
         * call when it reports the mismatch. */
        if (pp->held) {
            pp->held = 0;
            send_peer(tp, p);
            if (pp->fd < 0 || pp->error != CHORUS_SUCCESS) continue;
        }
        tcp_say_goodbye(tp, p);
        /* A FIN after the goodbye, and the socket kept until fini: closing it with unread
         * data from the peer would send a reset, which can make the peer lose the goodbye
         * (its send fails before it reads) and report a closed connection instead. */
        shutdown(pp->fd, SHUT_WR);
        pp->error = status;
        snprintf(pp->why, sizeof pp->why, "rank %d: tcp: this rank left after its "
                 "communicator failed (%s)", tp->rank, chorus_status_string(status));
        complete_queue(&pp->sq_head, &pp->sq_tail, status);
        complete_queue(&pp->rq_head, &pp->rq_tail, status);
    }
    if (tp->error == CHORUS_SUCCESS) tp->error = status;
}

/* What an idle connection (no receive posted) tells: 1 the peer died (its stream ended
 * without a goodbye), 0 nothing wrong (a goodbye is consumed here), and -1 that data
 * waits first, so that the end of stream is left for the receives to find. */
static int idle_stream_ended(chorus_tp_t *tp, int peer)
{
    tcp_peer_t *pp = &tp->peers[peer];
    uint8_t hdr[TCP_HDR_BYTES];
    tcp_hdr_t h;
    int avail = 0;

    if (ioctl(pp->fd, FIONREAD, &avail) != 0) return 0;
    if (avail == 0) return 1;
    if (avail != TCP_HDR_BYTES || recv(pp->fd, hdr, sizeof hdr, MSG_PEEK | MSG_DONTWAIT) !=
                                          (ssize_t)sizeof hdr) {
        return -1;
    }
    if (chorus__tcp_header_decode(hdr, 0, tp->rank, tp->nranks, &h) != TCP_HDR_BYE) return -1;
    (void)recv(pp->fd, hdr, sizeof hdr, MSG_DONTWAIT);
    /* A peer that left after a failure takes the communicator down with it. */
    if (h.word != 0) goodbye_failure(tp, peer, &h, 0);
    pp->bye = 1;
    return 0;
}

/* Nonzero if data we sent to peer has waited for an acknowledgement longer than the
 * keep-alive time: its host or link is down. A receiver that only holds a zero window
 * still acknowledges our window probes, so a late rank does not count. */
static int peer_silent(chorus_tp_t *tp, int peer)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;

    if (tp->keepalive_s <= 0 || tp->peers[peer].sq_head == NULL) return 0;
    if (getsockopt(tp->peers[peer].fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return 0;
    return ti.tcpi_unacked > 0 && ti.tcpi_last_ack_recv >= (uint32_t)tp->keepalive_s * 1000u;
}

/* One look at every connection (but `except`'s): fills tp->pfds / tp->check_peer with the
 * poll results (entry k for peer who[k], negated as ~p when that peer's stream ended without
 * a goodbye), the names of those peers into names ("5" or "5, 6"). Returns how many. */
static int scan_peers(chorus_tp_t *tp, int except, nfds_t *n_p, char *names, size_t size)
{
    int *who = tp->check_peer, ndead = 0;
    size_t len = 0;
    nfds_t n = 0;

    names[0] = '\0';
    for (int p = 0; p < tp->nranks; p++) {
        if (tp->peers[p].fd < 0 || tp->peers[p].bye || tp->peers[p].error != CHORUS_SUCCESS ||
            p == except)
            continue;
        tp->pfds[n].fd = tp->peers[p].fd;
        tp->pfds[n].events = POLLRDHUP;
        tp->pfds[n].revents = 0;
        who[n++] = p;
    }
    *n_p = 0;
    if (n == 0 || poll(tp->pfds, n, 0) < 0) return 0;
    *n_p = n;
    for (nfds_t k = 0; k < n; k++) {
        int p = who[k];
        short ev = tp->pfds[k].revents;
        if (ev & POLLERR) {
            /* A reset is how a killed rank's stream often ends (it left data unread). Any
             * other error (a keep-alive timeout) fails the peer here: the error is read
             * only once. */
            int err = 0;
            socklen_t elen = sizeof err;
            if (getsockopt(tp->peers[p].fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
            if (err != ECONNRESET && err != EPIPE) {
                if (err != 0) {
                    tcp_fail_peer(tp, p, CHORUS_ERR_REMOTE, err,
                                  "rank %d: tcp: the connection to peer %d failed%s", tp->rank, p,
                                  err == ETIMEDOUT ? " (no keep-alive answer: host or link down?)"
                                                   : "");
                }
                continue;
            }
        } else if (!(ev & (POLLRDHUP | POLLHUP)) || tp->peers[p].rq_head != NULL ||
                   idle_stream_ended(tp, p) != 1) {
            continue;
        }
        who[k] = ~p;
        if (len < size) {
            len += (size_t)snprintf(names + len, size - len, "%s%d", ndead ? ", " : "", p);
        }
        ndead++;
    }
    return ndead;
}

/* For a failure of peer: the peers that died meanwhile, as "; peer 5 closed ..." or "".
 * When a rank dies, the survivors that saw it first leave in turn, and a rank that waits
 * on one of those would otherwise blame it and not the dead rank. */
static const char *others_dead(chorus_tp_t *tp, int peer, char *buf, size_t size)
{
    char names[96];
    nfds_t n;
    int ndead = scan_peers(tp, peer, &n, names, sizeof names);

    if (ndead == 0) return "";
    snprintf(buf, size, "; peer%s %s closed the connection without a goodbye (killed or crashed)",
             ndead > 1 ? "s" : "", names);
    return buf;
}

chorus_status_t tcp_check_peers(chorus_tp_t *tp, int force)
{
    char dead[128];
    nfds_t n;
    int ndead;
    uint64_t now = chorus__now_ns();

    if (!force && now - tp->last_check_ns < TCP_CHECK_NS) return tp->error;
    tp->last_check_ns = now;
    /* The ranks whose streams ended without a goodbye are named together: one pass may see
     * a dead rank and a survivor that left because of it. */
    ndead = scan_peers(tp, -1, &n, dead, sizeof dead);
    for (nfds_t k = 0; k < n; k++) {
        int p = tp->check_peer[k] < 0 ? ~tp->check_peer[k] : tp->check_peer[k];
        if (tp->peers[p].fd < 0) continue;
        if (tp->check_peer[k] < 0) {
            tcp_fail_peer(tp, p, CHORUS_ERR_REMOTE, 0,
                          "rank %d: tcp: peer%s %s closed the connection without a goodbye "
                          "(killed or crashed)", tp->rank, ndead > 1 ? "s" : "", dead);
        } else if (peer_silent(tp, p)) {
            tcp_fail_peer(tp, p, CHORUS_ERR_REMOTE, 0,
                          "rank %d: tcp: peer %d acknowledged nothing for %d s (host or link "
                          "down?)", tp->rank, p, tp->keepalive_s);
        }
    }
    return tp->error;
}
