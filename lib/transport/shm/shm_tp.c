/*
 * Data path of the shm transport: per-peer FIFO queues of requests, progress through the
 * rings, futex wake-ups, and detection of peers that died or closed.
 *
 * Wake-ups follow the classic store/fence/load handshake. A waiter sets its `sleeping`
 * flag, reads its doorbell, fences, re-checks for work and only then sleeps on the
 * doorbell. A side that moved a ring counter fences and, if the other side's flag is
 * set, bumps its doorbell and wakes it. With full fences on both sides either the waiter
 * sees the new counter or the mover sees the flag, so no wake-up is lost, and movers pay
 * nothing but one load while nobody sleeps.
 */
#include "transport/shm/shm.h"
#include "util/proc.h"

#include "util/clock.h"
#include "util/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void shm_notify(shm_peer_t *p)
{
    shm_seg_hdr_t *hdr = p->seg.hdr;

    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&hdr->sleeping)) {
        atomic_fetch_add(&hdr->doorbell, 1);
        chorus__futex_wake(&hdr->doorbell, 1);
    }
}

chorus_status_t shm_peer_fail(shm_tp_t *tp, shm_peer_t *p, chorus_status_t status, const char *fmt,
                              ...)
{
    va_list ap;

    if (p->failed != CHORUS_SUCCESS) return p->failed;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof(p->why), fmt, ap);
    va_end(ap);
    p->failed = status;
    if (tp->unreported == CHORUS_SUCCESS) tp->unreported = status;
    chorus__error(status, "rank %d: shm: %s", tp->rank, p->why);
    chorus__tp_queue_fail(&p->sq_head, &p->sq_tail, status);
    chorus__tp_queue_fail(&p->rq_head, &p->rq_tail, status);
    return status;
}

/* Pushes queued sends into the peer's ring as far as it has room. */
static chorus_status_t peer_tx(shm_tp_t *tp, shm_peer_t *p)
{
    unsigned moved = 0;

    while (p->sq_head != NULL) {
        chorus_tp_req_t *req = p->sq_head;
        uint64_t cur = req->offset;
        unsigned f = shm_ring_tx(&p->tx, req->buf, req->bytes, &cur);

        req->offset = cur;
        moved |= f;
        if (f & SHM_RING_CORRUPT) {
            return shm_peer_fail(tp, p, CHORUS_ERR_REMOTE,
                                 "peer %d corrupted the counters of our ring to it", p->rank);
        }
        if (!(f & SHM_RING_DONE)) break;
        chorus__tp_queue_pop(&p->sq_head, &p->sq_tail);
        chorus__tp_req_complete(req, CHORUS_SUCCESS);
    }
    if (moved & SHM_RING_MOVED) shm_notify(p);
    return CHORUS_SUCCESS;
}

/* Copies arrived messages into the queued receives, in order. */
static chorus_status_t peer_rx(shm_tp_t *tp, shm_peer_t *p)
{
    unsigned moved = shm_ring_rx_drain(&p->rx);

    while (p->rq_head != NULL && !(moved & SHM_RING_CORRUPT)) {
        chorus_tp_req_t *req = p->rq_head;
        uint64_t cur = req->offset, len = 0;
        unsigned f = shm_ring_rx(&p->rx, req->buf, req->bytes, &cur, &len);

        req->offset = cur;
        moved |= f;
        if (f & SHM_RING_CORRUPT) break;
        if (!(f & SHM_RING_DONE)) break;
        chorus__tp_queue_pop(&p->rq_head, &p->rq_tail);
        if (f & SHM_RING_MISMATCH) {
            /* The stream stays in step (the payload is skipped), so only this receive
             * fails; the engine reports the mismatch. */
            chorus__tp_req_complete(
                req, chorus__error(CHORUS_ERR_MISMATCH,
                                   "rank %d: shm: message from peer %d has %llu bytes, "
                                   "the receive expects %zu",
                                   tp->rank, p->rank, (unsigned long long)len, req->bytes));
        } else {
            chorus__tp_req_complete(req, CHORUS_SUCCESS);
        }
    }
    if (moved & SHM_RING_MOVED) shm_notify(p);
    if (moved & SHM_RING_CORRUPT) {
        return shm_peer_fail(tp, p, CHORUS_ERR_REMOTE,
                             "peer %d sent a corrupt message header or counter", p->rank);
    }
    return CHORUS_SUCCESS;
}

/* Nonzero if the peer's process is gone without having closed its side: killed or crashed.
 * A peer that called fini set `closed` first, and its exit afterwards is no failure. */
static int peer_died(const shm_peer_t *p)
{
    return p->pid_check && atomic_load(&p->seg.hdr->closed) == 0 && chorus__pid_dead(p->blob.pid);
}

/* Fails a peer that closed while we wait for it, once what it sent before is delivered. */
static chorus_status_t peer_check_closed(shm_tp_t *tp, shm_peer_t *p)
{
    if (p->failed != CHORUS_SUCCESS || (p->sq_head == NULL && p->rq_head == NULL)) {
        return CHORUS_SUCCESS;
    }
    if (atomic_load(&p->seg.hdr->closed) == 0) return CHORUS_SUCCESS;
    /* Its last messages may still be in our ring: deliver them first. */
    if (peer_rx(tp, p) != CHORUS_SUCCESS && p->failed != CHORUS_SUCCESS) return p->failed;
    if (p->sq_head == NULL && (p->rq_head == NULL || shm_ring_rx_ready(&p->rx))) {
        return CHORUS_SUCCESS;
    }
    if (atomic_load(&p->seg.hdr->closed) == SHM_CLOSED_MISMATCH)
        return shm_peer_fail(tp, p, CHORUS_ERR_MISMATCH, "peer %d left because the ranks' "
                             "calls differ; the rank that compared them names both calls",
                             p->rank);
    return shm_peer_fail(tp, p, CHORUS_ERR_REMOTE, "peer %d closed its connection", p->rank);
}

/* Called while requests are pending. Deaths are looked for on every peer, not only on
 * those we wait for: a collective needs every rank sooner or later, and the survivors that
 * noticed a death close their connections in turn, so waiting to see a closed neighbour
 * would blame the wrong rank. Deaths are therefore checked (and reported) before closes. */
static chorus_status_t check_peers(shm_tp_t *tp, int force)
{
    chorus_status_t first = CHORUS_SUCCESS;
    uint64_t now = chorus__now_ns();

    if (!force && now - tp->last_check_ns < SHM_CHECK_NS) return CHORUS_SUCCESS;
    tp->last_check_ns = now;
    for (int i = 0; i < tp->npeers; i++) {
        shm_peer_t *p = &tp->peers[i];

        if (p->failed != CHORUS_SUCCESS || !peer_died(p)) continue;
        shm_peer_fail(tp, p, CHORUS_ERR_REMOTE, "peer %d (pid %u) died", p->rank, p->blob.pid);
        if (first == CHORUS_SUCCESS) first = p->failed;
    }
    /* A close seen now would overwrite the death's message: the death is the news. */
    if (first != CHORUS_SUCCESS) return first;
    for (int i = 0; i < tp->npeers; i++) {
        chorus_status_t status = peer_check_closed(tp, &tp->peers[i]);

        if (first == CHORUS_SUCCESS) first = status;
    }
    return first;
}

static chorus_status_t post_check(shm_tp_t *tp, int peer, const void *buf, size_t bytes,
                                  chorus_tp_req_t *req, const char *what)
{
    if (!tp->connected || peer < 0 || peer >= tp->nranks || tp->by_rank[peer] == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: shm: %s with peer %d, which is not connected", tp->rank,
                             what, peer);
    }
    if (req == NULL || (buf == NULL && bytes > 0) || (uint64_t)bytes >= SHM_MSG_MAX) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: shm: %s with peer %d: bad "
                             "arguments",
                             tp->rank, what, peer);
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t shm_isend(chorus_tp_t *tp_, int peer, const void *buf, size_t bytes,
                                 chorus_tp_req_t *req)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;
    chorus_status_t status = post_check(tp, peer, buf, bytes, req, "isend");
    shm_peer_t *p;

    if (status != CHORUS_SUCCESS) return status;
    p = tp->by_rank[peer];
    chorus__tp_req_reset(req, peer, buf, bytes, SHM_REQ_SEND);
    if (p->failed != CHORUS_SUCCESS) {
        chorus__tp_req_complete(req,
                                chorus__error(p->failed, "rank %d: shm: %s", tp->rank, p->why));
        return CHORUS_SUCCESS;
    }
    chorus__tp_queue_push(&p->sq_head, &p->sq_tail, req);
    /* Start at once when first in line: a small message is then done before the engine
     * comes back, which is most of the latency. */
    if (p->sq_head == req) peer_tx(tp, p);
    return CHORUS_SUCCESS;
}

static chorus_status_t shm_irecv(chorus_tp_t *tp_, int peer, void *buf, size_t bytes,
                                 chorus_tp_req_t *req)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;
    chorus_status_t status = post_check(tp, peer, buf, bytes, req, "irecv");
    shm_peer_t *p;

    if (status != CHORUS_SUCCESS) return status;
    p = tp->by_rank[peer];
    chorus__tp_req_reset(req, peer, buf, bytes, SHM_REQ_RECV);
    if (p->failed != CHORUS_SUCCESS) {
        chorus__tp_req_complete(req,
                                chorus__error(p->failed, "rank %d: shm: %s", tp->rank, p->why));
        return CHORUS_SUCCESS;
    }
    chorus__tp_queue_push(&p->rq_head, &p->rq_tail, req);
    if (p->rq_head == req) peer_rx(tp, p);
    return CHORUS_SUCCESS;
}

static int shm_peek(chorus_tp_t *tp_, int peer, void *buf, size_t len)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;
    shm_peer_t *p;

    if (peer < 0 || peer >= tp->nranks || peer == tp->rank) return 0;
    p = tp->by_rank[peer];
    /* With a receive posted, the ring may be in the middle of a message. */
    if (p == NULL || p->failed != CHORUS_SUCCESS || p->rq_head != NULL) return 0;
    return shm_ring_peek(&p->rx, buf, len);
}

static chorus_status_t shm_progress(chorus_tp_t *tp_)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;
    chorus_status_t first = CHORUS_SUCCESS;
    int pending = 0;

    for (int i = 0; i < tp->npeers; i++) {
        shm_peer_t *p = &tp->peers[i];
        chorus_status_t status = CHORUS_SUCCESS;

        if (p->failed != CHORUS_SUCCESS) continue;
        if (p->sq_head != NULL) status = peer_tx(tp, p);
        if (status == CHORUS_SUCCESS && (p->rq_head != NULL || p->rx.discard > 0)) {
            peer_rx(tp, p);
        }
        pending |= p->sq_head != NULL || p->rq_head != NULL;
    }
    if (pending) check_peers(tp, 0);
    /* Peer failures are returned once, by the progress() call that follows them. */
    if (tp->unreported != CHORUS_SUCCESS) {
        first = tp->unreported;
        tp->unreported = CHORUS_SUCCESS;
    }
    return first;
}

/* Nonzero if progress() could move something now. */
static int has_work(shm_tp_t *tp)
{
    for (int i = 0; i < tp->npeers; i++) {
        shm_peer_t *p = &tp->peers[i];

        if (p->failed != CHORUS_SUCCESS) continue;
        if ((p->rq_head != NULL || p->rx.discard > 0) && shm_ring_rx_ready(&p->rx)) return 1;
        if (p->sq_head != NULL && shm_ring_tx_ready(&p->tx)) return 1;
        if ((p->sq_head != NULL || p->rq_head != NULL) && atomic_load(&p->seg.hdr->closed)) {
            return 1;
        }
    }
    return 0;
}

static chorus_status_t shm_wait(chorus_tp_t *tp_, uint64_t timeout_us)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;
    shm_seg_hdr_t *hdr = tp->own.hdr;
    uint32_t bell;

    if (!tp->connected) return CHORUS_SUCCESS;
    if (tp->params.abort_flag != NULL &&
        atomic_load_explicit(tp->params.abort_flag, memory_order_relaxed)) {
        return chorus__error(CHORUS_ERR_ABORTED, "rank %d: shm: wait aborted", tp->rank);
    }
    /* Sleep in slices so that dead peers are noticed even if nobody wakes us. */
    if (timeout_us > SHM_CHECK_NS / 1000) timeout_us = SHM_CHECK_NS / 1000;
    atomic_store(&hdr->sleeping, 1);
    bell = atomic_load(&hdr->doorbell);
    atomic_thread_fence(memory_order_seq_cst);
    if (!has_work(tp) && timeout_us > 0) {
        chorus__futex_wait(&hdr->doorbell, bell, timeout_us * 1000);
    }
    atomic_store(&hdr->sleeping, 0);
    /* What it finds is returned by the next progress(), like any peer failure. */
    check_peers(tp, 0);
    return CHORUS_SUCCESS;
}

const chorus_tp_ops_t chorus__tp_shm_ops = {
    .size = sizeof(chorus_tp_ops_t),
    .name = "shm",
    .caps = CHORUS_TP_CAP_HOST_MEM | CHORUS_TP_CAP_SAME_HOST,
    .init = shm_init,
    .get_addr = shm_get_addr,
    .connect_all = shm_connect_all,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .progress = shm_progress,
    .wait = shm_wait,
    .reg_mem = NULL,
    .dereg_mem = NULL,
    .fini = shm_fini,
    .instance_caps = NULL,
    .leave = shm_leave,
    .isend_queued = NULL,
    .peek = shm_peek,
};
