/*
 * The virtual transport: every rank of a world lives in this process. A send completes
 * only when the receive it matches has been posted and the bytes copied, so a schedule
 * that completes here does not lean on any buffering a real transport might offer.
 */
#include "transport/virtual/virtual.h"

#include "util/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    chorus_tp_req_t *head;
    chorus_tp_req_t *tail;
} vqueue_t;

struct chorus_tp {
    chorus_vworld_t *world;
    int rank;
    vqueue_t *sendq; /* per destination */
    vqueue_t *recvq; /* per source */
};

struct chorus_vworld {
    int nranks;
    struct chorus_tp *eps;
};

static void vq_push(vqueue_t *q, chorus_tp_req_t *req)
{
    req->next = NULL;
    if (q->tail != NULL) q->tail->next = req;
    else q->head = req;
    q->tail = req;
}

static chorus_tp_req_t *vq_pop(vqueue_t *q)
{
    chorus_tp_req_t *req = q->head;
    q->head = req->next;
    if (q->head == NULL) q->tail = NULL;
    return req;
}

chorus_status_t chorus__vworld_create(int nranks, chorus_vworld_t **world_p)
{
    chorus_vworld_t *w = calloc(1, sizeof(*w));
    if (w == NULL) goto err;
    w->nranks = nranks;
    w->eps = calloc((size_t)nranks, sizeof(*w->eps));
    if (w->eps == NULL) goto err_world;
    for (int r = 0; r < nranks; r++) {
        w->eps[r].world = w;
        w->eps[r].rank = r;
        w->eps[r].sendq = calloc((size_t)nranks, sizeof(vqueue_t));
        w->eps[r].recvq = calloc((size_t)nranks, sizeof(vqueue_t));
        if (w->eps[r].sendq == NULL || w->eps[r].recvq == NULL) goto err_eps;
    }
    *world_p = w;
    return CHORUS_SUCCESS;

err_eps:
    chorus__vworld_destroy(w);
    return chorus__error(CHORUS_ERR_NO_MEMORY, "virtual: no memory for %d ranks", nranks);
err_world:
    free(w);
err:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "virtual: no memory for %d ranks", nranks);
}

chorus_tp_t *chorus__vworld_tp(chorus_vworld_t *world, int rank)
{
    return &world->eps[rank];
}

void chorus__vworld_destroy(chorus_vworld_t *world)
{
    if (world == NULL) return;
    for (int r = 0; r < world->nranks; r++) {
        free(world->eps[r].sendq);
        free(world->eps[r].recvq);
    }
    free(world->eps);
    free(world);
}

static chorus_status_t v_post(chorus_tp_t *tp, int peer, void *buf, size_t bytes,
                              chorus_tp_req_t *req, int is_send)
{
    if (peer < 0 || peer >= tp->world->nranks) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: virtual: peer %d out of range",
                             tp->rank, peer);
    }
    req->done = 0;
    req->status = CHORUS_SUCCESS;
    req->buf = buf;
    req->bytes = bytes;
    req->peer = peer;
    vq_push(is_send ? &tp->sendq[peer] : &tp->recvq[peer], req);
    return CHORUS_SUCCESS;
}

static chorus_status_t v_isend(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                               chorus_tp_req_t *req)
{
    return v_post(tp, peer, (void *)buf, bytes, req, 1);
}

static chorus_status_t v_irecv(chorus_tp_t *tp, int peer, void *buf, size_t bytes,
                               chorus_tp_req_t *req)
{
    return v_post(tp, peer, buf, bytes, req, 0);
}

/* Matches the heads of one sender's queue and one receiver's queue. */
static chorus_status_t v_match(vqueue_t *sq, vqueue_t *rq, int src, int dst)
{
    chorus_status_t status = CHORUS_SUCCESS;
    while (sq->head != NULL && rq->head != NULL) {
        chorus_tp_req_t *s = vq_pop(sq);
        chorus_tp_req_t *r = vq_pop(rq);
        if (s->bytes != r->bytes) {
            status = chorus__error(CHORUS_ERR_MISMATCH,
                                   "rank %d: virtual: message from rank %d has %zu bytes, "
                                   "receive expects %zu",
                                   dst, src, s->bytes, r->bytes);
            s->status = r->status = status;
        } else if (s->bytes > 0) {
            memcpy(r->buf, s->buf, s->bytes);
        }
        s->done = 1;
        r->done = 1;
    }
    return status;
}

static chorus_status_t v_progress(chorus_tp_t *tp)
{
    chorus_vworld_t *w = tp->world;
    chorus_status_t status = CHORUS_SUCCESS;
    for (int p = 0; p < w->nranks; p++) {
        chorus_status_t s1 = v_match(&w->eps[p].sendq[tp->rank], &tp->recvq[p], p, tp->rank);
        chorus_status_t s2 = v_match(&tp->sendq[p], &w->eps[p].recvq[tp->rank], tp->rank, p);
        if (status == CHORUS_SUCCESS) status = s1 != CHORUS_SUCCESS ? s1 : s2;
    }
    return status;
}

static chorus_status_t v_wait(chorus_tp_t *tp, uint64_t timeout_us)
{
    (void)tp;
    (void)timeout_us;
    return CHORUS_SUCCESS;
}

static chorus_status_t v_init(const chorus_tp_params_t *params, chorus_tp_t **tp_p)
{
    (void)params;
    (void)tp_p;
    return chorus__error(CHORUS_ERR_UNSUPPORTED,
                         "virtual: endpoints come from chorus__vworld_create, not init");
}

static chorus_status_t v_get_addr(chorus_tp_t *tp, void *blob, size_t *len_p)
{
    (void)blob;
    *len_p = 0;
    (void)tp;
    return CHORUS_SUCCESS;
}

static chorus_status_t v_connect_all(chorus_tp_t *tp, const uint8_t *peer_mask, const void *blobs,
                                     uint64_t deadline_ns)
{
    (void)tp;
    (void)peer_mask;
    (void)blobs;
    (void)deadline_ns;
    return CHORUS_SUCCESS;
}

static void v_fini(chorus_tp_t *tp)
{
    (void)tp; /* owned by the world */
}

const chorus_tp_ops_t chorus__tp_virtual_ops = {
    .size = sizeof(chorus_tp_ops_t),
    .name = "virtual",
    .caps = CHORUS_TP_CAP_HOST_MEM,
    .init = v_init,
    .get_addr = v_get_addr,
    .connect_all = v_connect_all,
    .isend = v_isend,
    .irecv = v_irecv,
    .progress = v_progress,
    .wait = v_wait,
    .reg_mem = NULL,
    .dereg_mem = NULL,
    .fini = v_fini,
};
