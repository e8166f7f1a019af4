/*
 * UCX transport: the data path. Every send and receive is one UCP tagged operation whose
 * completion arrives through ucx_send_done / ucx_recv_done during ucp_worker_progress. A
 * failed peer (UCX's endpoint error callback, or an operation that ended in error) is
 * handled from progress(), outside UCX's callbacks: its pending requests are completed
 * with the error at once and their UCX operations cancelled.
 */
#include "transport/transport.h"

#ifdef CHORUS_HAVE_UCX

#include "transport/ucx/ucx.h"

#include "util/log.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void ucx_finish(chorus_tp_req_t *req, chorus_status_t status)
{
    req->status = status;
    req->done = 1;
}

void chorus__ucx_unlink(ucx_tp_t *tp, ucx_slot_t *s)
{
    if (s->peer < 0) return;
    ucx_peer_t *pp = &tp->peers[s->peer];
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        pp->head = s->next;
    if (s->next != NULL) s->next->prev = s->prev;
    s->prev = s->next = NULL;
    s->peer = -1;
}

/* The status of an operation that UCX ended with st (not UCS_OK). */
static chorus_status_t ucx_failed(ucx_tp_t *tp, ucx_slot_t *s, ucs_status_t st)
{
    ucx_peer_t *pp = &tp->peers[s->peer];

    if (pp->error != CHORUS_SUCCESS) return chorus__error(pp->error, "%s", pp->why);
    if (st == UCS_ERR_MESSAGE_TRUNCATED) {
        return chorus__error(CHORUS_ERR_MISMATCH,
                             "rank %d: ucx: peer %d sent more than the %zu bytes of the receive "
                             "(length mismatch)",
                             tp->rank, s->peer, s->bytes);
    }
    /* Anything else means the endpoint is gone: fail the peer from progress(). */
    if (pp->ep_status == UCS_OK) pp->ep_status = st;
    tp->ep_errors = 1;
    if (tp->error == CHORUS_SUCCESS) tp->error = CHORUS_ERR_REMOTE;
    return chorus__error(CHORUS_ERR_REMOTE, "rank %d: ucx: %s peer %d failed: %s", tp->rank,
                         s->kind == UCX_REQ_RECV ? "receiving from" : "sending to", s->peer,
                         ucs_status_string(st));
}

/* The status of a data receive into req that ended with st and length bytes; magic is how
 * an RTS for it would start (ucx.h). */
static chorus_status_t ucx_recv_status(ucx_tp_t *tp, int peer, const chorus_tp_req_t *req,
                                       ucs_status_t st, size_t length, uint64_t magic)
{
    if (st == UCS_OK && length == UCX_RTS_BYTES && req->bytes == UCX_RTS_BYTES &&
        chorus__ucx_get_be64(req->buf) == magic) {
        return chorus__error(CHORUS_ERR_MISMATCH,
                             "rank %d: ucx: peer %d sent a message through the RMA rendezvous "
                             "for a receive of %zu bytes (length mismatch, or "
                             "CHORUS_UCX_RMA_MIN differs between the ranks)",
                             tp->rank, peer, req->bytes);
    }
    if (st == UCS_OK && length != req->bytes) {
        return chorus__error(CHORUS_ERR_MISMATCH,
                             "rank %d: ucx: peer %d sent %zu bytes for a receive of %zu bytes "
                             "(length mismatch)",
                             tp->rank, peer, length, req->bytes);
    }
    return CHORUS_SUCCESS;
}

static void ucx_done(ucx_tp_t *tp, ucx_slot_t *s, ucs_status_t st, const ucp_tag_recv_info_t *info)
{
    chorus_status_t status = CHORUS_SUCCESS;

    if (tp->in_post) {
        /* A receive that completed inside its post (see chorus__ucx_post). */
        tp->imm_done = 1;
        tp->imm_status = st;
        tp->imm_length = info != NULL ? info->length : 0;
        ucp_request_free(s);
        return;
    }
    if (tp->closing) {
        /* fini detached everything: neither requests nor rendezvous may be touched. */
        ucp_request_free(s);
        return;
    }
    if (s->reg != NULL) chorus__ucx_mem_put(tp, s->reg);
    s->reg = NULL;
    if (s->rma != NULL) {
        struct ucx_rma *rma = s->rma;
        int part = s->part;

        s->rma = NULL;
        chorus__ucx_unlink(tp, s);
        ucp_request_free(s);
        chorus__ucx_rma_event(tp, rma, part, st, info != NULL ? info->length : 0);
        return;
    }
    if (s->req != NULL && s->peer >= 0) {
        if (st != UCS_OK) {
            status = ucx_failed(tp, s, st);
        } else if (info != NULL) {
            status = ucx_recv_status(tp, s->peer, s->req, st, info->length, s->rts_magic);
        }
        ucx_finish(s->req, status);
    }
    chorus__ucx_unlink(tp, s);
    s->req = NULL;
    ucp_request_free(s);
}

static void ucx_send_done(void *request, ucs_status_t st, void *user_data)
{
    ucx_done(user_data, request, st, NULL);
}

static void ucx_recv_done(void *request, ucs_status_t st, const ucp_tag_recv_info_t *info,
                          void *user_data)
{
    ucx_done(user_data, request, st, info);
}

/* The status of an operation on req that completed inside its post (UCX returned no
 * request): st UCS_OK with length bytes, or an error. */
static chorus_status_t ucx_immediate(ucx_tp_t *tp, int peer, int send, const chorus_tp_req_t *req,
                                     ucs_status_t st, size_t length, uint64_t magic)
{
    size_t bytes = req->bytes;

    if (st == UCS_OK && send) return CHORUS_SUCCESS;
    if (st == UCS_OK) return ucx_recv_status(tp, peer, req, st, length, magic);
    if (st == UCS_ERR_MESSAGE_TRUNCATED) {
        return chorus__error(CHORUS_ERR_MISMATCH,
                             "rank %d: ucx: peer %d sent more than the %zu bytes of the receive "
                             "(length mismatch)",
                             tp->rank, peer, bytes);
    }
    chorus__ucx_fail_peer(tp, peer, CHORUS_ERR_REMOTE, "rank %d: ucx: %s peer %d: %s", tp->rank,
                          send ? "sending to" : "receiving from", peer, ucs_status_string(st));
    if (tp->error == CHORUS_SUCCESS) tp->error = CHORUS_ERR_REMOTE;
    return CHORUS_ERR_REMOTE;
}

/* Links a pending UCX request of peer to its target. */
void chorus__ucx_track(ucx_tp_t *tp, int peer, void *request, const ucx_target_t *t)
{
    ucx_peer_t *pp = &tp->peers[peer];
    ucx_slot_t *s = request;

    s->req = t->req;
    s->rma = t->rma;
    s->part = t->part;
    s->reg = t->reg;
    s->tp = tp;
    s->peer = peer;
    s->prev = NULL;
    s->next = pp->head;
    if (pp->head != NULL) pp->head->prev = s;
    pp->head = s;
}

/* Ends a target whose operation completed inside its post. */
static void ucx_settle(ucx_tp_t *tp, int peer, int send, const ucx_target_t *t, ucs_status_t st,
                       size_t length)
{
    if (t->reg != NULL) chorus__ucx_mem_put(tp, t->reg);
    if (t->rma != NULL) {
        chorus__ucx_rma_event(tp, t->rma, t->part, st, length);
        return;
    }
    ucx_finish(t->req, ucx_immediate(tp, peer, send, t->req, st, length, t->rts_magic));
}

/* A send that completes at once returns no request (NULL or an error status) and never
 * calls back. A receive that completes at once does not fill recv_info in UCX 1.13, so
 * receives are posted with UCP_OP_ATTR_FLAG_NO_IMM_CMPL, which makes UCX call the callback
 * inside the post: tp->in_post tells the callback to leave the result in tp->imm_*. */
chorus_status_t chorus__ucx_post_to(ucx_tp_t *tp, int peer, int send, void *buf, size_t bytes,
                                    ucp_tag_t tag, int kind, const ucx_target_t *t)
{
    ucx_peer_t *pp = &tp->peers[peer];
    ucp_request_param_t param;
    void *r;

    if (t->req != NULL) chorus__tp_req_reset(t->req, peer, buf, bytes, kind);
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.user_data = tp;
    if (t->reg != NULL) {
        /* The cached registration: UCX need not register (pin) the buffer per message. */
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh = chorus__ucx_memh(t->reg);
    }
    tp->imm_done = 0;
    if (t->request_p != NULL) *t->request_p = NULL;
    if (send) {
        param.cb.send = ucx_send_done;
        r = ucp_tag_send_nbx(pp->ep, buf, bytes, tag, &param);
    } else {
        param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        param.cb.recv = ucx_recv_done;
        tp->in_post = 1;
        r = ucp_tag_recv_nbx(tp->worker, buf, bytes, tag, t->mask, &param);
        tp->in_post = 0;
        if (tp->imm_done) {
            ucx_settle(tp, peer, 0, t, tp->imm_status, tp->imm_length);
            return CHORUS_SUCCESS;
        }
    }
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        ucx_settle(tp, peer, send, t, UCS_PTR_STATUS(r), 0);
        return CHORUS_SUCCESS;
    }
    ucx_slot_t *s = r;
    if (t->request_p != NULL) *t->request_p = r;
    chorus__ucx_track(tp, peer, s, t);
    s->kind = send ? UCX_REQ_SEND : kind;
    s->bytes = bytes;
    s->rts_magic = t->rts_magic;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__ucx_post(ucx_tp_t *tp, int peer, int send, void *buf, size_t bytes,
                                 ucp_tag_t tag, int kind, chorus_tp_req_t *req)
{
    ucx_target_t t = {.req = req, .mask = UCX_TAG_FULL};
    return chorus__ucx_post_to(tp, peer, send, buf, bytes, tag, kind, &t);
}

chorus_status_t chorus__ucx_fail_peer(ucx_tp_t *tp, int peer, chorus_status_t status,
                                      const char *fmt, ...)
{
    ucx_peer_t *pp = &tp->peers[peer];
    char msg[320];
    va_list ap;
    int pending = pp->head != NULL;

    if (pp->error != CHORUS_SUCCESS) return chorus__error(pp->error, "%s", pp->why);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    chorus__error(status, "%s", msg);
    snprintf(pp->why, sizeof(pp->why), "%s", msg);
    pp->error = status;
    /* Complete first, then cancel: a cancel may finish at once, later, or (a rendezvous
     * in flight) only when the endpoint is destroyed; the callers must not wait for it. */
    for (ucx_slot_t *s = pp->head; s != NULL; s = s->next) {
        if (s->req != NULL) ucx_finish(s->req, status);
        s->req = NULL;
    }
    chorus__ucx_rma_fail_peer(tp, peer, status);
    for (ucx_slot_t *s = pp->head, *next; s != NULL; s = next) {
        next = s->next;
        ucp_request_cancel(tp->worker, s);
    }
    /* A peer that closed with nothing pending (it destroyed its communicator) is not an
     * error of the transport until someone posts to it. */
    if (pending && tp->error == CHORUS_SUCCESS) tp->error = status;
    return status;
}

chorus_status_t chorus__ucx_handle_errors(ucx_tp_t *tp)
{
    if (!tp->ep_errors) return tp->error;
    tp->ep_errors = 0;
    for (int p = 0; p < tp->nranks; p++) {
        ucx_peer_t *pp = &tp->peers[p];
        if (pp->ep_status == UCS_OK || pp->error != CHORUS_SUCCESS) continue;
        chorus__ucx_fail_peer(tp, p, CHORUS_ERR_REMOTE,
                              "rank %d: ucx: peer %d failed or closed its endpoint (%s)", tp->rank,
                              p, ucs_status_string(pp->ep_status));
    }
    return tp->error;
}

/* Checks a peer for isend/irecv; completes req at once when the peer has failed. Returns
 * 1 when req is done, 0 when it should be posted, -1 (with an error) for bad arguments. */
static int ucx_check_peer(ucx_tp_t *tp, int peer, const char *op, const void *buf, size_t bytes,
                          chorus_tp_req_t *req, chorus_status_t *status_p)
{
    if (req == NULL || peer < 0 || peer >= tp->nranks || peer == tp->rank ||
        (tp->peers[peer].ep == NULL && tp->peers[peer].error == CHORUS_SUCCESS) ||
        (buf == NULL && bytes > 0)) {
        *status_p = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                  "rank %d: ucx: %s: peer %d is not connected or bad arguments",
                                  tp->rank, op, peer);
        return -1;
    }
    chorus__ucx_handle_errors(tp);
    ucx_peer_t *pp = &tp->peers[peer];
    if (pp->error == CHORUS_SUCCESS) return 0;
    chorus__tp_req_reset(req, peer, buf, bytes, 0);
    ucx_finish(req, chorus__error(pp->error, "%s", pp->why));
    if (tp->error == CHORUS_SUCCESS) tp->error = pp->error;
    *status_p = CHORUS_SUCCESS;
    return 1;
}

/* The cached registration for a tag-path message of bytes at buf, or NULL where UCX does
 * better without one (small messages, no memory events: see ucx_mem.c) or registering
 * failed (the message then goes without; UCX registers it itself). */
static chorus_reg_t *ucx_data_reg(ucx_tp_t *tp, const void *buf, size_t bytes)
{
    chorus_reg_t *reg = NULL;

    if (bytes < UCX_MEMH_MIN || !tp->mem_events) return NULL;
    if (chorus__ucx_mem_get(tp, buf, bytes, &reg) != CHORUS_SUCCESS) {
        CHORUS_INFO("ucx", "rank %d: %s", tp->rank, chorus_last_error());
        return NULL;
    }
    return reg;
}

chorus_status_t chorus__ucx_isend(chorus_tp_t *tpv, int peer, const void *buf, size_t bytes,
                                  chorus_tp_req_t *req)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;
    chorus_status_t status = CHORUS_SUCCESS;

    if (ucx_check_peer(tp, peer, "isend", buf, bytes, req, &status) != 0) return status;
    if (tp->rma_min > 0 && bytes >= tp->rma_min) {
        return chorus__ucx_rma_isend(tp, peer, buf, bytes, req);
    }
    ucx_peer_t *pp = &tp->peers[peer];
    ucp_tag_t tag = chorus__ucx_data_tag(tp->rank, pp->send_seq++, pp->key_out);
    ucx_target_t t = {.req = req, .reg = ucx_data_reg(tp, buf, bytes), .mask = UCX_TAG_FULL};
    return chorus__ucx_post_to(tp, peer, 1, (void *)buf, bytes, tag, UCX_REQ_SEND, &t);
}

chorus_status_t chorus__ucx_irecv(chorus_tp_t *tpv, int peer, void *buf, size_t bytes,
                                  chorus_tp_req_t *req)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;
    chorus_status_t status = CHORUS_SUCCESS;

    if (ucx_check_peer(tp, peer, "irecv", buf, bytes, req, &status) != 0) return status;
    if (tp->rma_min > 0 && bytes >= tp->rma_min) {
        return chorus__ucx_rma_irecv(tp, peer, buf, bytes, req);
    }
    ucx_peer_t *pp = &tp->peers[peer];
    ucp_tag_t tag = chorus__ucx_data_tag(peer, pp->recv_seq++, pp->key_in);
    /* The mask also matches an RTS for this message: see ucx.h. */
    ucx_target_t t = {.req = req,
                      .reg = ucx_data_reg(tp, buf, bytes),
                      .mask = UCX_TAG_DATA_MASK,
                      .rts_magic = chorus__ucx_rts_magic(pp->key_in, pp->recv_seq - 1)};
    return chorus__ucx_post_to(tp, peer, 0, buf, bytes, tag, UCX_REQ_RECV, &t);
}

chorus_status_t chorus__ucx_progress(chorus_tp_t *tpv)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;

    /* A bounded number of passes: progress() never blocks, even under a flood. */
    for (int i = 0; i < 64 && ucp_worker_progress(tp->worker) != 0; i++) {
    }
    chorus__ucx_rma_run(tp);
    return chorus__ucx_handle_errors(tp);
}

chorus_status_t chorus__ucx_wait(chorus_tp_t *tpv, uint64_t timeout_us)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;
    struct pollfd pfd = {.fd = tp->efd, .events = POLLIN};
    ucs_status_t st;

    if (tp->ep_errors || tp->rma_ready != NULL) return CHORUS_SUCCESS;
    st = ucp_worker_arm(tp->worker);
    if (st == UCS_ERR_BUSY) return CHORUS_SUCCESS; /* events are waiting: progress them */
    if (st != UCS_OK) {
        return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: ucx: arming the worker: %s", tp->rank,
                             ucs_status_string(st));
    }
    /* Round up, so that a short wait still sleeps instead of spinning. */
    uint64_t ms = (timeout_us + 999) / 1000;
    (void)poll(&pfd, 1, ms > 1000000 ? 1000000 : (int)ms);
    return CHORUS_SUCCESS;
}

#endif
