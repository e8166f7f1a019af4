/*
 * Data path of the ib transport. A message goes as one or more fragments, each copied into
 * a staging slot and RDMA-written into the peer's slot of the same number, with the
 * sequence number in the immediate; the receiver copies fragments, in sequence order, into
 * the receive at the head of that peer's queue. Copying on both sides keeps every written
 * byte in memory registered once at init, so no user buffer is ever pinned behind the
 * user's back. Messages that take the zero-copy rendezvous instead (ib.h; large ones, and
 * every one in device memory) put only their RTS and FIN through the slots; ib_tp_zc.c
 * moves them. Per-pair FIFO follows from one sequence per direction and one queue per peer
 * and kind, and from a rendezvous send holding later sends back until its FIN went.
 */
#ifdef CHORUS_HAVE_IBV

#include "transport/ib/ib_verbs.h"

#include "util/clock.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

chorus_status_t ib_peer_fail(ib_tp_t *tp, ib_peer_t *p, chorus_status_t status, const char *fmt,
                             ...)
{
    va_list ap;

    if (p->failed != CHORUS_SUCCESS) return p->failed;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof(p->why), fmt, ap);
    va_end(ap);
    p->failed = status;
    if (tp->unreported == CHORUS_SUCCESS) tp->unreported = status;
    chorus__error(status, "rank %d: ib: %s", tp->rank, p->why);
    chorus__tp_queue_fail(&p->sq_head, &p->sq_tail, status);
    chorus__tp_queue_fail(&p->rq_head, &p->rq_tail, status);
    ib_zc_fail(tp, p, status);
    return status;
}

void ib_fail_all(ib_tp_t *tp, chorus_status_t status, const char *why)
{
    for (int r = 0; r < tp->nranks; r++) {
        ib_peer_t *p = &tp->peers[r];

        if (p->rank < 0 || (p->sq_head == NULL && p->rq_head == NULL && p->zd_head == NULL &&
                            p->ztx_reg.reg == NULL && p->zrx_reg.reg == NULL)) {
            continue;
        }
        ib_peer_fail(tp, p, status, "peer %d: %s", r, why);
    }
}

/* The slot k of peer p in a region shaped like rx_buf / tx_buf. */
static uint8_t *slot_at(uint8_t *region, int peer, uint32_t k)
{
    return region + ((size_t)peer * IB_NSLOTS + k) * IB_SLOT_BYTES;
}

chorus_status_t ib_post_recv(ib_tp_t *tp, ib_peer_t *p)
{
    struct ibv_recv_wr wr, *bad = NULL;

    /* Writes with immediate consume a receive but place nothing through it. */
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = ib_wr_id(p->rank, IB_WR_RECV, 0);
    if (ibv_post_recv(p->qp, &wr, &bad) != 0) {
        return ib_peer_fail(tp, p, CHORUS_ERR_SYSTEM, "posting a receive to peer %d failed",
                            p->rank);
    }
    return CHORUS_SUCCESS;
}

/* Posts a write with immediate: bytes of staging slot k into the peer's slot k (bytes 0:
 * a credit or liveness message that places nothing). */
static chorus_status_t post_write(ib_tp_t *tp, ib_peer_t *p, unsigned kind, uint32_t k,
                                  uint32_t bytes, uint32_t imm)
{
    struct ibv_send_wr wr, *bad = NULL;
    struct ibv_sge sge;

    memset(&wr, 0, sizeof(wr));
    sge.addr = (uint64_t)(uintptr_t)slot_at(tp->tx_buf, p->rank, k);
    sge.length = bytes;
    sge.lkey = tp->tx_mr->lkey;
    wr.wr_id = ib_wr_id(p->rank, kind, k);
    wr.sg_list = bytes > 0 ? &sge : NULL;
    wr.num_sge = bytes > 0 ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = p->remote_addr + (uint64_t)k * IB_SLOT_BYTES;
    wr.wr.rdma.rkey = p->rkey;
    if (ibv_post_send(p->qp, &wr, &bad) != 0) {
        return ib_peer_fail(tp, p, CHORUS_ERR_SYSTEM, "posting a write to peer %d failed", p->rank);
    }
    p->sq_posted++;
    return CHORUS_SUCCESS;
}

int ib_tx_fragment(ib_tp_t *tp, ib_peer_t *p, const void *payload, uint32_t len, uint64_t total,
                   uint32_t flags, unsigned kind, uint32_t *seq_p)
{
    uint32_t k = p->cr.tx_seq % IB_NSLOTS, seq;
    ib_frag_hdr_t *h;

    /* Two entries of the send queue stay free for credits and liveness writes. */
    if (p->tx_busy[k] || p->sq_posted >= (int)IB_SQ_DEPTH - 2) return 0;
    if (!ib_credit_tx_reserve(&p->cr, &seq, &k)) return 0;
    h = (ib_frag_hdr_t *)slot_at(tp->tx_buf, p->rank, k);
    h->magic = IB_FRAG_MAGIC;
    h->seq = seq;
    h->credit = ib_credit_rx_take(&p->cr); /* piggy-backed */
    h->len = len;
    h->total = total;
    h->flags = flags;
    h->pad = 0;
    if (len > 0) memcpy(h + 1, payload, len);
    if (post_write(tp, p, kind, k, (uint32_t)sizeof(*h) + len, seq & IB_IMM_MASK) !=
        CHORUS_SUCCESS) {
        return 0;
    }
    p->tx_busy[k] = 1;
    if (seq_p != NULL) *seq_p = seq;
    return 1;
}

chorus_status_t ib_send_hello(ib_tp_t *tp, ib_peer_t *p)
{
    uint8_t mac[IB_HELLO_MAC];
    chorus_status_t status = ib_hello_mac(tp, tp->rank, p->rank, p->nonce, p->qp->qp_num, mac);

    if (status != CHORUS_SUCCESS) return status;
    if (!ib_tx_fragment(tp, p, mac, sizeof(mac), sizeof(mac), IB_FRAG_FIRST | IB_FRAG_HELLO,
                        IB_WR_DATA, NULL)) {
        return p->failed != CHORUS_SUCCESS ? p->failed
                                           : chorus__error(CHORUS_ERR_INTERNAL,
                                                           "rank %d: ib: no slot for the hello to "
                                                           "peer %d",
                                                           tp->rank, p->rank);
    }
    p->hello_sent = 1;
    return CHORUS_SUCCESS;
}

/* Pushes a due RTR or FIN, then queued sends, out as far as credit goes. */
static void peer_tx(ib_tp_t *tp, ib_peer_t *p)
{
    if (p->failed != CHORUS_SUCCESS || !ib_zc_tx_control(tp, p)) return;
    while (p->sq_head != NULL && p->failed == CHORUS_SUCCESS) {
        chorus_tp_req_t *req = p->sq_head;
        size_t left = req->bytes - req->offset;
        uint32_t len = left < IB_FRAG_PAYLOAD ? (uint32_t)left : (uint32_t)IB_FRAG_PAYLOAD;

        if (req->priv[IB_PRIV_PATH] == IB_PATH_RNDV) {
            if (!ib_zc_tx(tp, p, req) || !ib_zc_tx_control(tp, p)) break;
            continue;
        }
        if (!ib_tx_fragment(tp, p, (const uint8_t *)req->buf + req->offset, len, req->bytes,
                            req->priv[IB_PRIV_STARTED] ? 0 : IB_FRAG_FIRST, IB_WR_DATA, NULL)) {
            break;
        }
        req->priv[IB_PRIV_STARTED] = 1;
        req->offset += len;
        if (req->offset == req->bytes) {
            chorus__tp_queue_pop(&p->sq_head, &p->sq_tail);
            chorus__tp_req_complete(
                req, CHORUS_SUCCESS); /* the bytes are in staging: the buffer is free */
        }
    }
}

/* Returns owed credit explicitly. Called after peer_tx: a fragment that went took the
 * credit with it, so what is still owed has no carrier. */
static void return_credit(ib_tp_t *tp, ib_peer_t *p)
{
    uint32_t credit;

    if (p->failed != CHORUS_SUCCESS || !ib_credit_rx_owed(&p->cr)) return;
    if (p->sq_posted >= (int)IB_SQ_DEPTH) return; /* after the next send completion */
    credit = ib_credit_rx_take(&p->cr);
    post_write(tp, p, IB_WR_CREDIT, 0, 0, IB_IMM_CREDIT | (credit & IB_IMM_MASK));
}

/* The head receive refuses the eager message whose first fragment is h: another length,
 * or bytes the CPU would have to copy into device memory (a peer without GPUDirect RDMA). */
static void rx_refuse(ib_tp_t *tp, ib_peer_t *p, chorus_tp_req_t *req, const ib_frag_hdr_t *h)
{
    chorus_status_t status;

    if (h->total != req->bytes) {
        status = chorus__error(CHORUS_ERR_MISMATCH,
                               "rank %d: ib: message from peer %d has %llu bytes, the receive "
                               "expects %zu",
                               tp->rank, p->rank, (unsigned long long)h->total, req->bytes);
    } else {
        status = chorus__error(CHORUS_ERR_UNSUPPORTED,
                               "rank %d: ib: peer %d sent %llu bytes through the slots, but the "
                               "receive is in device memory, which the CPU cannot copy into (the "
                               "peer's transport has no device memory calls: GPUDirect RDMA is "
                               "unavailable there)",
                               tp->rank, p->rank, (unsigned long long)h->total);
    }
    chorus__tp_queue_pop(&p->rq_head, &p->rq_tail);
    chorus__tp_req_complete(req, status);
    p->rx_skip = h->total - h->len;
    ib_credit_rx_consume(&p->cr);
}

/* Copies arrived fragments, in order, into the queued receives; rendezvous fragments go to
 * ib_tp_zc.c. */
static void peer_rx(ib_tp_t *tp, ib_peer_t *p)
{
    uint32_t k;

    while (p->failed == CHORUS_SUCCESS && p->verified && ib_credit_rx_peek(&p->cr, &k)) {
        const ib_frag_hdr_t *h = (const ib_frag_hdr_t *)slot_at(tp->rx_buf, p->rank, k);
        chorus_tp_req_t *req = p->rq_head;
        int first = (h->flags & IB_FRAG_FIRST) != 0;
        ib_rx_action_t action;

        if (p->rx_skip > 0) {
            /* The rest of a message its receive refused. */
            if (first || h->len > p->rx_skip) goto corrupt;
            p->rx_skip -= h->len;
            ib_credit_rx_consume(&p->cr);
            continue;
        }
        action = ib_rndv_rx_classify(&p->z, h->flags, req != NULL,
                                     req != NULL && req->priv[IB_PRIV_STARTED]);
        if (action == IB_RX_WAIT) break;
        if (action == IB_RX_BAD) goto corrupt;
        if (action != IB_RX_EAGER) {
            if (!ib_zc_rx(tp, p, h, action)) return;
            continue;
        }
        if (first != !req->priv[IB_PRIV_STARTED] || h->len > h->total) goto corrupt;
        if (first && (h->total != req->bytes || (h->total > 0 && req->priv[IB_PRIV_DEVICE]))) {
            rx_refuse(tp, p, req, h);
            continue;
        }
        if (h->total != req->bytes || h->len > req->bytes - req->offset) goto corrupt;
        if (h->len > 0) memcpy((uint8_t *)req->buf + req->offset, h + 1, h->len);
        req->priv[IB_PRIV_STARTED] = 1;
        req->offset += h->len;
        ib_credit_rx_consume(&p->cr);
        if (req->offset == req->bytes) {
            chorus__tp_queue_pop(&p->rq_head, &p->rq_tail);
            chorus__tp_req_complete(req, CHORUS_SUCCESS);
        }
    }
    return;

corrupt:
    ib_peer_fail(tp, p, CHORUS_ERR_REMOTE, "peer %d sent a fragment out of place", p->rank);
}

/* The first fragment of a connection: the hello and its proof of the secret. */
static void take_hello(ib_tp_t *tp, ib_peer_t *p, const ib_frag_hdr_t *h)
{
    uint8_t want[IB_HELLO_MAC];

    if (!(h->flags & IB_FRAG_HELLO) || h->len != IB_HELLO_MAC ||
        ib_hello_mac(tp, p->rank, tp->rank, tp->nonce, p->remote_qpn, want) != CHORUS_SUCCESS ||
        CRYPTO_memcmp(want, h + 1, IB_HELLO_MAC) != 0) {
        ib_peer_fail(tp, p, CHORUS_ERR_AUTH, "peer %d did not prove the job secret", p->rank);
        return;
    }
    ib_credit_rx_consume(&p->cr);
    p->verified = 1;
}

/* A write with immediate from p has landed. */
static void on_arrival(ib_tp_t *tp, ib_peer_t *p, uint32_t imm)
{
    const ib_frag_hdr_t *h;
    uint32_t seq, k;

    if (p->failed != CHORUS_SUCCESS) return;
    if (ib_post_recv(tp, p) != CHORUS_SUCCESS) return;
    if (imm & IB_IMM_CREDIT) {
        if (ib_credit_tx_update_imm(&p->cr, imm & IB_IMM_MASK) < 0) {
            ib_peer_fail(tp, p, CHORUS_ERR_REMOTE,
                         "peer %d returned credit for writes never "
                         "made",
                         p->rank);
        }
        return;
    }
    if (ib_credit_rx_arrive(&p->cr, imm, &seq, &k) != 0) {
        ib_peer_fail(tp, p, CHORUS_ERR_REMOTE, "peer %d wrote without credit", p->rank);
        return;
    }
    h = (const ib_frag_hdr_t *)slot_at(tp->rx_buf, p->rank, k);
    if (h->magic != IB_FRAG_MAGIC || h->seq != seq || h->len > IB_FRAG_PAYLOAD) {
        ib_peer_fail(tp, p, CHORUS_ERR_REMOTE, "peer %d wrote a corrupt fragment header", p->rank);
        return;
    }
    if (!p->verified) {
        take_hello(tp, p, h);
        return;
    }
    /* Nothing of a peer is read before its hello; a second hello is out of place. */
    if ((h->flags & IB_FRAG_HELLO) || ib_credit_tx_update(&p->cr, h->credit) < 0) {
        ib_peer_fail(tp, p, CHORUS_ERR_REMOTE, "peer %d sent a bad fragment", p->rank);
    }
}

static const char *kind_name(unsigned kind)
{
    return kind == IB_WR_RECV    ? "receive"
           : kind == IB_WR_DATA  ? "write"
           : kind == IB_WR_ZDATA ? "rendezvous RDMA write"
           : kind == IB_WR_FIN   ? "rendezvous FIN write"
                                 : "credit write";
}

static void on_completion(ib_tp_t *tp, const struct ibv_wc *wc)
{
    int rank = (int)(wc->wr_id >> 32);
    unsigned kind = (unsigned)(wc->wr_id >> 16) & 0xffff;
    uint32_t k = (uint32_t)wc->wr_id & 0xffff;
    ib_peer_t *p;

    if (rank < 0 || rank >= tp->nranks || tp->peers[rank].rank < 0) return;
    p = &tp->peers[rank];
    if (kind != IB_WR_RECV) p->sq_posted--;
    if (wc->status != IBV_WC_SUCCESS) {
        /* After the first error the QP flushes everything: only the first one is news. */
        ib_peer_fail(tp, p, CHORUS_ERR_REMOTE, "peer %d: %s failed: %s (peer dead or gone?)", rank,
                     kind_name(kind), ibv_wc_status_str(wc->status));
        return;
    }
    if ((kind == IB_WR_DATA || kind == IB_WR_FIN) && k < IB_NSLOTS) p->tx_busy[k] = 0;
    if (kind == IB_WR_FIN || kind == IB_WR_ZDATA) ib_zc_completion(tp, p, kind);
    if (kind == IB_WR_RECV && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        on_arrival(tp, p, ntohl(wc->imm_data));
    }
}

chorus_status_t ib_poll(ib_tp_t *tp)
{
    struct ibv_wc wc[16];
    int n;

    for (int i = 0; i < tp->nstash; i++)
        on_completion(tp, &tp->stash[i]);
    tp->nstash = 0;
    do {
        n = ibv_poll_cq(tp->cq, 16, wc);
        if (n < 0) return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: ib: poll CQ failed", tp->rank);
        for (int i = 0; i < n; i++)
            on_completion(tp, &wc[i]);
    } while (n == 16);
    for (int r = 0; r < tp->nranks; r++) {
        ib_peer_t *p = &tp->peers[r];

        if (p->rank < 0 || p->failed != CHORUS_SUCCESS) continue;
        peer_tx(tp, p);
        peer_rx(tp, p);
        peer_tx(tp, p); /* queued fragments carry the credit the receives just freed */
        return_credit(tp, p);
    }
    return CHORUS_SUCCESS;
}

/* A peer we wait for may have died without a word: RC notices only when a write to it
 * goes unacknowledged, so a silent peer with requests pending gets a zero-length write now
 * and then (it also carries our credit, which the peer ignores when stale). */
static void ping_silent(ib_tp_t *tp, ib_peer_t *p, uint64_t now)
{
    uint32_t credit;

    if (p->sq_posted > 0 || (p->sq_head == NULL && p->rq_head == NULL)) return;
    if (now - p->last_ping_ns < IB_PING_NS) return;
    p->last_ping_ns = now;
    credit = ib_credit_rx_take(&p->cr);
    post_write(tp, p, IB_WR_CREDIT, 0, 0, IB_IMM_CREDIT | (credit & IB_IMM_MASK));
}

static chorus_status_t post_check(ib_tp_t *tp, int peer, const void *buf, size_t bytes,
                                  chorus_tp_req_t *req, const char *what)
{
    if (!tp->connected || peer < 0 || peer >= tp->nranks || tp->peers[peer].rank < 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: ib: %s with peer %d, which is not connected", tp->rank, what,
                             peer);
    }
    if (req == NULL || (buf == NULL && bytes > 0)) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: ib: %s with peer %d: bad arguments", tp->rank, what, peer);
    }
    return CHORUS_SUCCESS;
}

/* Posts a request on one of p's queues (send: 1), or completes it at once on a failed peer. */
static chorus_status_t post(ib_tp_t *tp, int peer, const void *buf, size_t bytes,
                            chorus_tp_req_t *req, int send)
{
    chorus_status_t status = post_check(tp, peer, buf, bytes, req, send ? "isend" : "irecv");
    ib_peer_t *p;

    if (status != CHORUS_SUCCESS) return status;
    p = &tp->peers[peer];
    chorus__tp_req_reset(req, peer, buf, bytes, send ? IB_REQ_SEND : IB_REQ_RECV);
    memset(req->priv, 0, sizeof(req->priv));
    req->priv[IB_PRIV_DEVICE] = (uint64_t)(bytes > 0 && ib_is_device(tp, buf));
    req->priv[IB_PRIV_PATH] = ib_rndv_path(bytes, (int)req->priv[IB_PRIV_DEVICE],
                                           tp->regcache_dev != NULL, tp->zcopy_min);
    if (p->failed != CHORUS_SUCCESS) {
        chorus__tp_req_complete(req, chorus__error(p->failed, "rank %d: ib: %s", tp->rank, p->why));
        return CHORUS_SUCCESS;
    }
    if (send) {
        chorus__tp_queue_push(&p->sq_head, &p->sq_tail, req);
        if (p->sq_head == req) peer_tx(tp, p);
    } else {
        chorus__tp_queue_push(&p->rq_head, &p->rq_tail, req);
        if (p->rq_head == req) {
            peer_rx(tp, p);
            return_credit(tp, p);
        }
    }
    /* The peer is heard from from now on: liveness is measured from the first wait. */
    if (p->sq_posted == 0) p->last_ping_ns = chorus__now_ns();
    return CHORUS_SUCCESS;
}

chorus_status_t ib_isend(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                         chorus_tp_req_t *req)
{
    return post((ib_tp_t *)tp, peer, buf, bytes, req, 1);
}

chorus_status_t ib_irecv(chorus_tp_t *tp, int peer, void *buf, size_t bytes, chorus_tp_req_t *req)
{
    return post((ib_tp_t *)tp, peer, buf, bytes, req, 0);
}

chorus_status_t ib_progress(chorus_tp_t *tp_)
{
    ib_tp_t *tp = (ib_tp_t *)tp_;
    chorus_status_t status = ib_poll(tp);
    uint64_t now = chorus__now_ns();

    for (int r = 0; r < tp->nranks; r++) {
        ib_peer_t *p = &tp->peers[r];

        if (p->rank >= 0 && p->failed == CHORUS_SUCCESS) ping_silent(tp, p, now);
    }
    if (status == CHORUS_SUCCESS && tp->unreported != CHORUS_SUCCESS) {
        status = tp->unreported;
        tp->unreported = CHORUS_SUCCESS;
    }
    return status;
}

chorus_status_t ib_wait(chorus_tp_t *tp_, uint64_t timeout_us)
{
    ib_tp_t *tp = (ib_tp_t *)tp_;
    struct pollfd pfd;
    int n;

    if (!tp->connected || tp->nstash > 0) return CHORUS_SUCCESS;
    if (tp->params.abort_flag != NULL &&
        atomic_load_explicit(tp->params.abort_flag, memory_order_relaxed)) {
        return chorus__error(CHORUS_ERR_ABORTED, "rank %d: ib: wait aborted", tp->rank);
    }
    /* Arm, then look once more: a completion that came before arming raises no event.
     * What that look finds is kept for progress(), which alone completes requests. */
    if (ibv_req_notify_cq(tp->cq, 0) != 0) {
        return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: ib: arming the CQ failed", tp->rank);
    }
    n = ibv_poll_cq(tp->cq, IB_STASH, tp->stash);
    if (n != 0) {
        tp->nstash = n > 0 ? n : 0;
        return CHORUS_SUCCESS;
    }
    /* Sleep in slices of at most 100 ms, so that silent peers still get pinged. */
    if (timeout_us > 100000) timeout_us = 100000;
    pfd.fd = tp->channel->fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    if (poll(&pfd, 1, (int)((timeout_us + 999) / 1000)) > 0) {
        struct ibv_cq *cq;
        void *ctx;

        if (ibv_get_cq_event(tp->channel, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
    }
    return CHORUS_SUCCESS;
}

#endif /* CHORUS_HAVE_IBV */
