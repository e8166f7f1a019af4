/*
 * UCX transport: the receiver-driven RMA rendezvous for messages of at least
 * CHORUS_UCX_RMA_MIN bytes. Message k from s to r:
 *
 *   s: RTS (16 bytes: its length) to r; waits for the RTR.
 *   r: registers its buffer (through the cache), packs the remote key and sends the RTR
 *      (address, length, key); waits for the RTS and the FIN.
 *   s: checks the RTR against its length, ucp_put_nbx's the data from its own cached
 *      registration, flushes the endpoint (the put has landed), then sends the FIN.
 *   r: the FIN says the data is there (or why not): the receive completes.
 *
 * Both sides start at once (the RTS and the RTR cross), so the data moves one half round
 * trip after both are posted, the same as UCX's own rendezvous; what it adds is that the
 * data goes by one-sided put from registrations kept across messages, which is what rc, dc
 * and cuda_ipc do natively. The RTS exists so that a receiver that took the tag path
 * while its sender took this one (their lengths differ, or their CHORUS_UCX_RMA_MIN does)
 * gets a message and fails with a length mismatch instead of waiting forever (ucx.h, tags).
 *
 * Off by default (CHORUS_UCX_RMA_MIN=0), from a measurement on this 2-core VM with no RDMA
 * NIC: chorus-bench -b 1M -e 64M -f 4 -w 3 -n 10 -c 0, 2 local ranks, best of 3, busbw in
 * GB/s, tag path (0) / RMA (64K):
 *   UCX_TLS=tcp      sendrecv  1M 1.54/0.34  64M 1.26/0.25   allreduce 1M 1.26/0.18  64M 0.54/0.27
 *   UCX_TLS=sm,self  sendrecv  1M 2.72/5.17  64M 1.53/2.73   allreduce 1M 1.64/0.71  64M 0.95/0.13
 * Over tcp a put is emulated by the receiver's progress and the flush costs a round trip per
 * message, so it loses everywhere; over shared memory (cma) a lone stream gains ~1.8x but a
 * pipelined allreduce, whose flushes wait on every put in flight on the endpoint, loses. It
 * is for rc, dc and cuda_ipc, where puts are native: measure there before turning it on.
 *
 * Each rendezvous is a ucx_rma_t whose parts (UCX operations) end through
 * chorus__ucx_rma_event, from UCX's callbacks; the next step is taken later by
 * chorus__ucx_rma_run (from progress() and the posts), never inside a callback.
 */
#include "transport/transport.h"

#ifdef CHORUS_HAVE_UCX

#include "transport/ucx/ucx.h"

#include "util/log.h"

#include <stdlib.h>
#include <string.h>

#define RMA_RTR_MAGIC 0x43525452u   /* "CRTR" */
#define RMA_FIN_MAGIC 0x4346494eu   /* "CFIN" */
#define RMA_CTL_BYTES UCX_RTS_BYTES /* RTS: magic, length; FIN: magic, code, length */
#define RMA_RTR_HEAD 24             /* magic, key length, address, length */
#define RMA_RKEY_MAX 1024           /* rc + dc + shared memory keys are a few hundred bytes */

/* The parts of a rendezvous. */
enum { PART_RTS, PART_RTR, PART_FIN, PART_PUT, PART_FLUSH };

/* What a FIN says. */
enum { FIN_OK = 0, FIN_MISMATCH = 1, FIN_BAD_RTR = 2, FIN_PUT_FAILED = 3 };

typedef struct ucx_rma {
    struct ucx_rma *prev, *next; /* tp->rma_head */
    struct ucx_rma *ready_next;  /* tp->rma_ready */
    int queued;
    chorus_tp_req_t *req; /* the caller's; NULL once completed or detached */
    int peer;
    int send;
    uint64_t seq;
    void *buf;
    size_t bytes;
    chorus_reg_t *reg; /* our buffer's registration, held until the end */
    ucp_rkey_h rkey;   /* the receiver's key (sender) */
    int pending;       /* parts in flight */
    int got_rtr, started, flushed, fin_sent;
    unsigned fin_code;          /* what the sender's FIN says */
    void *fin_request;          /* the receiver's FIN receive while pending */
    int cancel_fin;             /* the FIN will never come: cancel its receive */
    chorus_status_t status;     /* the first error */
    uint8_t ctl[RMA_CTL_BYTES]; /* RTS out / in */
    uint8_t fin[RMA_CTL_BYTES]; /* FIN out / in */
    size_t rtr_len;
    uint8_t rtr[RMA_RTR_HEAD + RMA_RKEY_MAX];
} ucx_rma_t;

static void rma_ctl(uint8_t *p, uint32_t magic, uint32_t code, uint64_t len)
{
    chorus__ucx_put_be32(p, magic);
    chorus__ucx_put_be32(p + 4, code);
    chorus__ucx_put_be64(p + 8, len);
}

/* Records the first error of a rendezvous. */
static void rma_error(ucx_rma_t *rma, chorus_status_t status)
{
    if (rma->status == CHORUS_SUCCESS) rma->status = status;
}

static void rma_queue(ucx_tp_t *tp, ucx_rma_t *rma)
{
    if (rma->queued) return;
    rma->queued = 1;
    rma->ready_next = tp->rma_ready;
    tp->rma_ready = rma;
}

static ucx_rma_t *rma_new(ucx_tp_t *tp, int peer, int send, void *buf, size_t bytes,
                          chorus_tp_req_t *req)
{
    ucx_rma_t *rma = calloc(1, sizeof(*rma));

    if (rma == NULL) return NULL;
    rma->peer = peer;
    rma->send = send;
    rma->buf = buf;
    rma->bytes = bytes;
    rma->req = req;
    rma->next = tp->rma_head;
    if (tp->rma_head != NULL) tp->rma_head->prev = rma;
    tp->rma_head = rma;
    chorus__tp_req_reset(req, peer, buf, bytes, send ? UCX_REQ_SEND : UCX_REQ_RECV);
    return rma;
}

/* Frees a rendezvous that has nothing in flight (or whose worker is gone). */
static void rma_free(ucx_tp_t *tp, ucx_rma_t *rma)
{
    if (rma->prev != NULL)
        rma->prev->next = rma->next;
    else
        tp->rma_head = rma->next;
    if (rma->next != NULL) rma->next->prev = rma->prev;
    if (rma->rkey != NULL) ucp_rkey_destroy(rma->rkey);
    if (rma->reg != NULL) chorus__ucx_mem_put(tp, rma->reg);
    free(rma);
}

/* Posts one message part of a rendezvous. */
static void rma_post(ucx_tp_t *tp, ucx_rma_t *rma, int part, int send, void *buf, size_t bytes,
                     ucp_tag_t tag, ucp_tag_t mask, void **request_p)
{
    ucx_target_t t = {.rma = rma, .part = part, .mask = mask, .request_p = request_p};

    rma->pending++;
    (void)chorus__ucx_post_to(tp, rma->peer, send, buf, bytes, tag, UCX_REQ_CTRL, &t);
}

/* Tracks an RMA operation (put, flush) UCX returned: NULL and errors ended at once. */
static void rma_track(ucx_tp_t *tp, ucx_rma_t *rma, int part, void *r)
{
    ucx_target_t t = {.rma = rma, .part = part, .mask = UCX_TAG_FULL};

    rma->pending++;
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        chorus__ucx_rma_event(tp, rma, part, UCS_PTR_STATUS(r), 0);
        return;
    }
    chorus__ucx_track(tp, rma->peer, r, &t);
}

static void rma_rma_done(void *request, ucs_status_t st, void *user_data)
{
    ucx_slot_t *s = request;
    ucx_tp_t *tp = user_data;

    if (tp->closing || s->rma == NULL) {
        ucp_request_free(s);
        return;
    }
    ucx_rma_t *rma = s->rma;
    int part = s->part;

    chorus__ucx_unlink(tp, s);
    s->rma = NULL;
    ucp_request_free(s);
    chorus__ucx_rma_event(tp, rma, part, st, 0);
}

chorus_status_t chorus__ucx_rma_isend(ucx_tp_t *tp, int peer, const void *buf, size_t bytes,
                                      chorus_tp_req_t *req)
{
    ucx_peer_t *pp = &tp->peers[peer];
    chorus_reg_t *reg;
    chorus_status_t status = chorus__ucx_mem_get(tp, buf, bytes, &reg);

    if (status != CHORUS_SUCCESS) {
        return chorus__error_context(status, "rank %d: ucx: isend of %zu bytes to peer %d",
                                     tp->rank, bytes, peer);
    }
    ucx_rma_t *rma = rma_new(tp, peer, 1, (void *)buf, bytes, req);
    if (rma == NULL) {
        chorus__ucx_mem_put(tp, reg);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ucx: isend to peer %d: out of memory",
                             tp->rank, peer);
    }
    rma->reg = reg;
    rma->seq = pp->send_seq++;
    chorus__ucx_put_be64(rma->ctl, chorus__ucx_rts_magic(pp->key_out, rma->seq));
    chorus__ucx_put_be64(rma->ctl + 8, bytes);
    rma_post(tp, rma, PART_RTR, 0, rma->rtr, sizeof(rma->rtr),
             chorus__ucx_rtr_tag(tp->rank, rma->seq, pp->key_in), UCX_TAG_FULL, NULL);
    rma_post(tp, rma, PART_RTS, 1, rma->ctl, RMA_CTL_BYTES,
             chorus__ucx_rts_tag(tp->rank, rma->seq, pp->key_out), UCX_TAG_FULL, NULL);
    chorus__ucx_rma_run(tp);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__ucx_rma_irecv(ucx_tp_t *tp, int peer, void *buf, size_t bytes,
                                      chorus_tp_req_t *req)
{
    ucx_peer_t *pp = &tp->peers[peer];
    chorus_reg_t *reg = NULL;
    const void *rkey = NULL;
    size_t rkey_len = 0;
    chorus_status_t status = chorus__ucx_mem_get(tp, buf, bytes, &reg);

    if (status != CHORUS_SUCCESS) goto err;
    status = chorus__ucx_rkey(tp, reg, &rkey, &rkey_len);
    if (status == CHORUS_SUCCESS && rkey_len > RMA_RKEY_MAX) {
        status = chorus__error(CHORUS_ERR_UNSUPPORTED,
                               "rank %d: ucx: a remote key of %zu bytes, more than %d: narrow "
                               "UCX_TLS or set CHORUS_UCX_RMA_MIN=0",
                               tp->rank, rkey_len, RMA_RKEY_MAX);
    }
    if (status != CHORUS_SUCCESS) goto err_reg;
    ucx_rma_t *rma = rma_new(tp, peer, 0, buf, bytes, req);
    if (rma == NULL) goto err_nomem;
    rma->reg = reg;
    rma->seq = pp->recv_seq++;
    chorus__ucx_put_be32(rma->rtr, RMA_RTR_MAGIC);
    chorus__ucx_put_be32(rma->rtr + 4, (uint32_t)rkey_len);
    chorus__ucx_put_be64(rma->rtr + 8, (uint64_t)(uintptr_t)buf);
    chorus__ucx_put_be64(rma->rtr + 16, bytes);
    memcpy(rma->rtr + RMA_RTR_HEAD, rkey, rkey_len);
    rma->rtr_len = RMA_RTR_HEAD + rkey_len;
    /* The RTS receive also matches the data of a sender that took the tag path. */
    rma_post(tp, rma, PART_RTS, 0, rma->ctl, RMA_CTL_BYTES,
             chorus__ucx_data_tag(peer, rma->seq, pp->key_in), UCX_TAG_DATA_MASK, NULL);
    rma_post(tp, rma, PART_FIN, 0, rma->fin, RMA_CTL_BYTES,
             chorus__ucx_fin_tag(tp->rank, rma->seq, pp->key_in), UCX_TAG_FULL, &rma->fin_request);
    rma_post(tp, rma, PART_RTR, 1, rma->rtr, rma->rtr_len,
             chorus__ucx_rtr_tag(peer, rma->seq, pp->key_out), UCX_TAG_FULL, NULL);
    chorus__ucx_rma_run(tp);
    return CHORUS_SUCCESS;

err_nomem:
    status = chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ucx: out of memory", tp->rank);
err_reg:
    chorus__ucx_mem_put(tp, reg);
err:
    return chorus__error_context(status, "rank %d: ucx: irecv of %zu bytes from peer %d", tp->rank,
                                 bytes, peer);
}

/* The receiver's view of an RTS part that ended: the sender's length, or the data of a
 * sender that took the tag path. */
static void rma_got_rts(ucx_tp_t *tp, ucx_rma_t *rma, ucs_status_t st, size_t length)
{
    ucx_peer_t *pp = &tp->peers[rma->peer];
    int data = length != RMA_CTL_BYTES ||
               chorus__ucx_get_be64(rma->ctl) != chorus__ucx_rts_magic(pp->key_in, rma->seq);

    if (st == UCS_ERR_MESSAGE_TRUNCATED || (st == UCS_OK && data)) {
        /* The sender took the tag path, so there is no FIN to wait for. */
        rma->cancel_fin = 1;
        rma_error(rma,
                  chorus__error(CHORUS_ERR_MISMATCH,
                                "rank %d: ucx: peer %d sent %s bytes on the tag path for an "
                                "RMA receive of %zu bytes (length mismatch, or "
                                "CHORUS_UCX_RMA_MIN differs between the ranks)",
                                tp->rank, rma->peer, st == UCS_OK ? "a few" : "more", rma->bytes));
        return;
    }
    if (st != UCS_OK) return;
    uint64_t len = chorus__ucx_get_be64(rma->ctl + 8);
    if (len != rma->bytes) {
        rma_error(rma, chorus__error(CHORUS_ERR_MISMATCH,
                                     "rank %d: ucx: peer %d sent %llu bytes for a receive of %zu "
                                     "bytes (length mismatch)",
                                     tp->rank, rma->peer, (unsigned long long)len, rma->bytes));
    }
}

/* The receiver's view of the FIN. */
static void rma_got_fin(ucx_tp_t *tp, ucx_rma_t *rma, ucs_status_t st, size_t length)
{
    static const char *const why[] = {"", "length mismatch", "our RTR was unusable",
                                      "its put failed"};

    rma->fin_request = NULL;
    if (st == UCS_ERR_MESSAGE_TRUNCATED)
        length = 0; /* more than a FIN: a bad one */
    else if (st != UCS_OK)
        return;
    uint32_t code = chorus__ucx_get_be32(rma->fin + 4);
    if (length != RMA_CTL_BYTES || chorus__ucx_get_be32(rma->fin) != RMA_FIN_MAGIC ||
        code > FIN_PUT_FAILED) {
        rma_error(rma, chorus__error(CHORUS_ERR_REMOTE,
                                     "rank %d: ucx: peer %d sent a bad FIN for message %llu",
                                     tp->rank, rma->peer, (unsigned long long)rma->seq));
    } else if (code != FIN_OK) {
        rma_error(rma, chorus__error(CHORUS_ERR_REMOTE,
                                     "rank %d: ucx: peer %d ended its RMA send of %llu bytes "
                                     "into our receive of %zu bytes: %s",
                                     tp->rank, rma->peer,
                                     (unsigned long long)chorus__ucx_get_be64(rma->fin + 8),
                                     rma->bytes, why[code]));
    }
}

void chorus__ucx_rma_event(ucx_tp_t *tp, ucx_rma_t *rma, int part, ucs_status_t st, size_t length)
{
    static const char *const names[] = {"RTS", "RTR", "FIN", "put", "flush"};

    rma->pending--;
    if (!rma->send && part == PART_RTS) rma_got_rts(tp, rma, st, length);
    if (!rma->send && part == PART_FIN) rma_got_fin(tp, rma, st, length);
    if (st == UCS_OK) {
        if (rma->send && part == PART_RTR) {
            rma->got_rtr = 1;
            rma->rtr_len = length;
        }
        if (part == PART_FLUSH) rma->flushed = 1;
    } else if (st != UCS_ERR_MESSAGE_TRUNCATED || rma->send) {
        ucx_peer_t *pp = &tp->peers[rma->peer];
        /* A cancel is ours (a failed peer or a FIN that will not come); anything else
         * means the endpoint is gone: progress() fails the peer. */
        if (st != UCS_ERR_CANCELED && pp->error == CHORUS_SUCCESS) {
            if (pp->ep_status == UCS_OK) pp->ep_status = st;
            tp->ep_errors = 1;
        }
        if (st != UCS_ERR_CANCELED || !rma->cancel_fin) {
            rma_error(rma, chorus__error(CHORUS_ERR_REMOTE,
                                         "rank %d: ucx: RMA %s of %zu bytes %s peer %d: %s "
                                         "failed: %s",
                                         tp->rank, rma->send ? "send" : "receive", rma->bytes,
                                         rma->send ? "to" : "from", rma->peer, names[part],
                                         ucs_status_string(st)));
        }
    }
    rma_queue(tp, rma);
}

/* Checks the receiver's RTR: 0 and its address and key, or a FIN code with the error set. */
static unsigned rma_check_rtr(ucx_tp_t *tp, ucx_rma_t *rma, uint64_t *addr_p)
{
    const uint8_t *p = rma->rtr;
    uint32_t klen = chorus__ucx_get_be32(p + 4);
    uint64_t len = chorus__ucx_get_be64(p + 16);

    if (rma->rtr_len < RMA_RTR_HEAD || chorus__ucx_get_be32(p) != RMA_RTR_MAGIC || klen == 0 ||
        klen > RMA_RKEY_MAX || RMA_RTR_HEAD + (size_t)klen != rma->rtr_len) {
        rma_error(rma, chorus__error(CHORUS_ERR_REMOTE,
                                     "rank %d: ucx: RMA send to peer %d: its RTR for message %llu "
                                     "is malformed (%zu bytes, key of %u)",
                                     tp->rank, rma->peer, (unsigned long long)rma->seq,
                                     rma->rtr_len, klen));
        return FIN_BAD_RTR;
    }
    if (len != rma->bytes) {
        rma_error(rma, chorus__error(CHORUS_ERR_MISMATCH,
                                     "rank %d: ucx: RMA send of %zu bytes to peer %d: it posted a "
                                     "receive of %llu bytes (length mismatch)",
                                     tp->rank, rma->bytes, rma->peer, (unsigned long long)len));
        return FIN_MISMATCH;
    }
    ucs_status_t st = ucp_ep_rkey_unpack(tp->peers[rma->peer].ep, p + RMA_RTR_HEAD, &rma->rkey);
    if (st != UCS_OK) {
        rma->rkey = NULL;
        rma_error(rma, chorus__error(CHORUS_ERR_REMOTE,
                                     "rank %d: ucx: RMA send to peer %d: unpacking its remote key: "
                                     "%s",
                                     tp->rank, rma->peer, ucs_status_string(st)));
        return FIN_BAD_RTR;
    }
    *addr_p = chorus__ucx_get_be64(p + 8);
    return FIN_OK;
}

/* The sender's next step: the put and flush once the RTR is in, the FIN once flushed (or
 * at once, saying why, when the put cannot be made). */
static void rma_send_step(ucx_tp_t *tp, ucx_rma_t *rma)
{
    ucx_peer_t *pp = &tp->peers[rma->peer];
    ucp_request_param_t param;
    uint64_t addr = 0;

    /* The endpoint is gone (ucx_leave): the peer was failed there, and this with it. */
    if (pp->ep == NULL) return;
    if (rma->got_rtr && !rma->started) {
        rma->started = 1;
        rma->fin_code = rma_check_rtr(tp, rma, &addr);
        if (rma->fin_code == FIN_OK) {
            memset(&param, 0, sizeof(param));
            param.op_attr_mask =
                UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
            param.cb.send = rma_rma_done;
            param.user_data = tp;
            param.memh = chorus__ucx_memh(rma->reg);
            rma_track(tp, rma, PART_PUT,
                      ucp_put_nbx(pp->ep, rma->buf, rma->bytes, addr, rma->rkey, &param));
            param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
            rma_track(tp, rma, PART_FLUSH, ucp_ep_flush_nbx(pp->ep, &param));
        }
    }
    if (rma->started && !rma->fin_sent && pp->error == CHORUS_SUCCESS &&
        (rma->fin_code != FIN_OK || rma->pending == 0)) {
        if (rma->fin_code == FIN_OK && (!rma->flushed || rma->status != CHORUS_SUCCESS))
            rma->fin_code = FIN_PUT_FAILED;
        rma->fin_sent = 1;
        rma_ctl(rma->fin, RMA_FIN_MAGIC, rma->fin_code, rma->bytes);
        rma_post(tp, rma, PART_FIN, 1, rma->fin, RMA_CTL_BYTES,
                 chorus__ucx_fin_tag(rma->peer, rma->seq, pp->key_out), UCX_TAG_FULL, NULL);
    }
}

/* Ends a rendezvous with nothing in flight: completes the caller's request and frees it.
 * Returns 0 if it must wait on. */
static int rma_try_finish(ucx_tp_t *tp, ucx_rma_t *rma)
{
    if (rma->pending > 0) return 0;
    if (rma->send && rma->req != NULL && !rma->fin_sent && rma->status == CHORUS_SUCCESS) return 0;
    if (rma->req != NULL) {
        if (rma->status == CHORUS_SUCCESS) {
            if (rma->send)
                tp->rma_sends++;
            else
                tp->rma_recvs++;
        }
        rma->req->status = rma->status;
        rma->req->done = 1;
        rma->req = NULL;
    }
    rma_free(tp, rma);
    return 1;
}

void chorus__ucx_rma_run(ucx_tp_t *tp)
{
    /* Steps may queue the same or other rendezvous again: take the list as it is. */
    while (tp->rma_ready != NULL) {
        ucx_rma_t *list = tp->rma_ready;

        tp->rma_ready = NULL;
        while (list != NULL) {
            ucx_rma_t *rma = list;

            list = rma->ready_next;
            rma->queued = 0;
            if (rma->req != NULL && rma->send) rma_send_step(tp, rma);
            if (!rma->send && rma->cancel_fin && rma->fin_request != NULL) {
                void *r = rma->fin_request;
                rma->fin_request = NULL;
                ucp_request_cancel(tp->worker, r);
            }
            if (rma->queued) continue; /* an immediate completion queued it again */
            rma_try_finish(tp, rma);
        }
    }
}

void chorus__ucx_rma_fail_peer(ucx_tp_t *tp, int peer, chorus_status_t status)
{
    for (ucx_rma_t *rma = tp->rma_head; rma != NULL; rma = rma->next) {
        if (rma->peer != peer || rma->req == NULL) continue;
        rma->req->status = status;
        rma->req->done = 1;
        rma->req = NULL;
        rma_error(rma, status);
        /* Freed once its parts, cancelled by the caller, have ended. */
        rma_queue(tp, rma);
    }
}

void chorus__ucx_rma_free_all(ucx_tp_t *tp)
{
    tp->rma_ready = NULL;
    while (tp->rma_head != NULL)
        rma_free(tp, tp->rma_head);
}

#endif
