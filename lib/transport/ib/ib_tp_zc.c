/*
 * The verbs side of the ib transport's zero-copy rendezvous (ib.h says how it goes;
 * ib_rndv.c holds its decisions, formats and state). Host buffers are registered with
 * ibv_reg_mr; device buffers through the dma-buf the core's GPU plugin exports
 * (params.mem->dmabuf, then ibv_reg_dmabuf_mr with the buffer's address as the iova, so
 * that the peer writes to the address it was told): GPUDirect RDMA, the NIC reading and
 * writing GPU memory with no copy through the host. Host and device registrations live in
 * two caches, so that a host range and a device range never alias one another.
 */
#ifdef CHORUS_HAVE_IBV

#include "transport/ib/ib_verbs.h"

#include "util/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ZC_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

int ib_is_device(const ib_tp_t *tp, const void *buf)
{
    const chorus_tp_mem_ops_t *mem = tp->params.mem;

    return mem != NULL && mem->is_device != NULL && buf != NULL && mem->is_device(buf) == 1;
}

int ib_reg_host_cb(void *ctx, void *addr, size_t len, void **mr_p, uint32_t *lkey_p,
                   uint32_t *rkey_p)
{
    ib_tp_t *tp = ctx;
    struct ibv_mr *mr = tp->reg_host(tp->pd, addr, len, ZC_ACCESS);

    if (mr == NULL) return -1;
    *mr_p = mr;
    *lkey_p = mr->lkey;
    *rkey_p = mr->rkey;
    return 0;
}

int ib_reg_dev_cb(void *ctx, void *addr, size_t len, void **mr_p, uint32_t *lkey_p,
                  uint32_t *rkey_p)
{
    ib_tp_t *tp = ctx;
    const chorus_tp_mem_ops_t *mem = tp->params.mem;
    struct ibv_mr *mr;
    uint64_t offset = 0;
    int fd = -1, err;
    chorus_status_t status;

    if (mem == NULL || mem->dmabuf == NULL) {
        tp->reg_status = CHORUS_ERR_UNSUPPORTED;
        snprintf(tp->reg_why, sizeof(tp->reg_why), "no dma-buf export call was given");
        errno = EOPNOTSUPP;
        return -1;
    }
    status = mem->dmabuf(addr, len, &fd, &offset);
    if (status != CHORUS_SUCCESS) {
        tp->reg_status = status;
        snprintf(tp->reg_why, sizeof(tp->reg_why), "dma-buf export unsupported (%s)",
                 chorus_last_error());
        errno = EOPNOTSUPP;
        return -1;
    }
    mr = tp->reg_dmabuf(tp->pd, offset, len, (uint64_t)(uintptr_t)addr, fd, ZC_ACCESS);
    err = errno;
    close(fd); /* the registration holds its own reference to the dma-buf */
    if (mr == NULL) {
        tp->reg_status = err == EOPNOTSUPP ? CHORUS_ERR_UNSUPPORTED : CHORUS_ERR_SYSTEM;
        snprintf(tp->reg_why, sizeof(tp->reg_why), "ibv_reg_dmabuf_mr failed: %s (errno %d)%s",
                 strerror(err), err,
                 err == EOPNOTSUPP ? ": the NIC or its driver cannot register dma-bufs" : "");
        errno = err;
        return -1;
    }
    *mr_p = mr;
    *lkey_p = mr->lkey;
    *rkey_p = mr->rkey;
    return 0;
}

void ib_dereg_cb(void *ctx, void *mr)
{
    ib_tp_t *tp = ctx;

    tp->dereg(mr);
}

/* A registration of [buf, buf + len) for peer p: a cached one (reg_mem's) or one made for
 * this message. what names the buffer in messages ("send", "receive"). */
static chorus_status_t zc_get(ib_tp_t *tp, ib_peer_t *p, void *buf, size_t len, int device,
                              const char *what, ib_zreg_t *z)
{
    chorus_regcache_t *rc = device ? tp->regcache_dev : tp->regcache;
    chorus_status_t status;
    char why[256];

    if (rc == NULL) {
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: ib: peer %d: the %zu-byte %s buffer at %p is device "
                             "memory: GPUDirect RDMA unavailable (no device memory calls)",
                             tp->rank, p->rank, len, what, buf);
    }
    z->device = device;
    z->reg = chorus__regcache_find(rc, buf, len);
    z->transient = z->reg == NULL;
    if (z->reg != NULL) return CHORUS_SUCCESS;
    tp->reg_why[0] = '\0';
    tp->reg_status = CHORUS_ERR_SYSTEM;
    status = chorus__regcache_get(rc, buf, len, &z->reg);
    if (status == CHORUS_SUCCESS) return CHORUS_SUCCESS;
    z->reg = NULL;
    snprintf(why, sizeof(why), "%s", tp->reg_why[0] != '\0' ? tp->reg_why : chorus_last_error());
    if (device) {
        return chorus__error(tp->reg_status,
                             "rank %d: ib: peer %d: GPUDirect RDMA unavailable for the %zu-byte "
                             "%s buffer at %p in device memory: %s",
                             tp->rank, p->rank, len, what, buf, why);
    }
    return chorus__error(status, "rank %d: ib: peer %d: registering the %zu-byte %s buffer: %s",
                         tp->rank, p->rank, len, what, why);
}

static void zc_put(ib_tp_t *tp, chorus_reg_t *reg, int device, int transient)
{
    chorus_regcache_t *rc = device ? tp->regcache_dev : tp->regcache;

    if (reg == NULL) return;
    if (transient) chorus__regcache_invalidate(rc, (void *)reg->start, reg->end - reg->start);
    chorus__regcache_put(rc, reg);
}

/* Fails p with the error just raised (its text without the "rank N: ib: " already there). */
static void zc_peer_fail(ib_tp_t *tp, ib_peer_t *p, chorus_status_t status)
{
    const char *msg = chorus_last_error();
    const char *tail = strstr(msg, "ib: ");
    char why[256];

    snprintf(why, sizeof(why), "%s", tail != NULL ? tail + 4 : msg);
    ib_peer_fail(tp, p, status, "%s", why);
}

int ib_zc_tx_control(ib_tp_t *tp, ib_peer_t *p)
{
    if (p->rtr_due) {
        uint8_t b[IB_RTR_BYTES];

        ib_rtr_encode(&p->rtr_out, b);
        if (!ib_tx_fragment(tp, p, b, IB_RTR_BYTES, IB_RTR_BYTES, IB_FRAG_RTR, IB_WR_DATA, NULL))
            return 0;
        p->rtr_due = 0;
    }
    if (p->fin_due) {
        uint8_t b[IB_FIN_BYTES];

        ib_fin_encode(&p->fin_out, b);
        if (!ib_tx_fragment(tp, p, b, IB_FIN_BYTES, IB_FIN_BYTES, IB_FRAG_FIN, IB_WR_DATA, NULL))
            return 0;
        p->fin_due = 0;
    }
    return 1;
}

/* Posts one signalled RDMA WRITE of len bytes at offset of the send's source. */
static chorus_status_t post_zwrite(ib_tp_t *tp, ib_peer_t *p, const chorus_tp_req_t *req,
                                   uint32_t len)
{
    struct ibv_send_wr wr, *bad = NULL;
    struct ibv_sge sge;

    memset(&wr, 0, sizeof(wr));
    sge.addr = (uint64_t)(uintptr_t)req->buf + req->offset;
    sge.length = len;
    sge.lkey = p->ztx_reg.reg->lkey;
    wr.wr_id = ib_wr_id(p->rank, IB_WR_ZDATA, 0);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = p->z.rtr.addr + req->offset;
    wr.wr.rdma.rkey = p->z.rtr.rkey;
    if (ibv_post_send(p->qp, &wr, &bad) != 0) {
        return ib_peer_fail(tp, p, CHORUS_ERR_SYSTEM, "posting an RDMA write to peer %d failed",
                            p->rank);
    }
    p->sq_posted++;
    return CHORUS_SUCCESS;
}

/* The send at the head gives up with status; the receiver, which accepted, hears a FIN. */
static int zc_tx_give_up(ib_peer_t *p, chorus_tp_req_t *req, chorus_status_t status,
                         uint32_t why)
{
    p->fin_due = 1;
    p->fin_out.rts_seq = p->z.tx_seq;
    p->fin_out.status = why;
    p->fin_out.len = req->bytes;
    ib_rndv_tx_done(&p->z);
    chorus__tp_queue_pop(&p->sq_head, &p->sq_tail);
    chorus__tp_req_complete(req, status);
    return 1;
}

int ib_zc_tx(ib_tp_t *tp, ib_peer_t *p, chorus_tp_req_t *req)
{
    int device = (int)req->priv[IB_PRIV_DEVICE];
    uint8_t b[IB_FIN_BYTES > IB_RTS_BYTES ? IB_FIN_BYTES : IB_RTS_BYTES];
    ib_fin_t fin;

    if (!req->priv[IB_PRIV_STARTED]) {
        ib_rts_t rts = {req->bytes, (uint32_t)device};
        uint32_t seq;

        ib_rts_encode(&rts, b);
        if (!ib_tx_fragment(tp, p, b, IB_RTS_BYTES, req->bytes, IB_FRAG_FIRST | IB_FRAG_RTS,
                            IB_WR_DATA, &seq)) {
            return 0;
        }
        req->priv[IB_PRIV_STARTED] = 1;
        ib_rndv_tx_rts(&p->z, seq, req->bytes);
        return 0;
    }
    if (p->z.tx_state != IB_ZTX_WRITE) return 0;
    if (p->ztx_reg.reg == NULL) {
        chorus_status_t status = zc_get(tp, p, req->buf, req->bytes, device, "send", &p->ztx_reg);

        if (status != CHORUS_SUCCESS) return zc_tx_give_up(p, req, status, IB_RNDV_REG);
    }
    while (req->offset < req->bytes) {
        size_t left = req->bytes - req->offset;
        uint32_t len = left < tp->max_msg ? (uint32_t)left : (uint32_t)tp->max_msg;

        /* Three entries stay free: the FIN, and credits and liveness writes. */
        if (p->sq_posted >= (int)IB_SQ_DEPTH - 3) return 0;
        if (post_zwrite(tp, p, req, len) != CHORUS_SUCCESS) return 0;
        req->offset += len;
    }
    fin.rts_seq = p->z.tx_seq;
    fin.status = IB_RNDV_OK;
    fin.len = req->bytes;
    ib_fin_encode(&fin, b);
    if (!ib_tx_fragment(tp, p, b, IB_FIN_BYTES, IB_FIN_BYTES, IB_FRAG_FIN, IB_WR_FIN, NULL))
        return 0;
    ib_rndv_tx_done(&p->z);
    /* The source may be read until the FIN's completion, which RC orders after the data's;
     * until then the send keeps its registration (STARTED 2: made for this message). */
    req->priv[IB_PRIV_REG] = (uint64_t)(uintptr_t)p->ztx_reg.reg;
    req->priv[IB_PRIV_STARTED] = 1 + (uint64_t)p->ztx_reg.transient;
    p->ztx_reg.reg = NULL;
    chorus__tp_queue_pop(&p->sq_head, &p->sq_tail);
    chorus__tp_queue_push(&p->zd_head, &p->zd_tail, req);
    return 1;
}

/* Ends a send that waited for its FIN's completion. */
static void zd_finish(ib_tp_t *tp, ib_peer_t *p, chorus_status_t status)
{
    chorus_tp_req_t *req = p->zd_head;

    chorus__tp_queue_pop(&p->zd_head, &p->zd_tail);
    zc_put(tp, (chorus_reg_t *)(uintptr_t)req->priv[IB_PRIV_REG], (int)req->priv[IB_PRIV_DEVICE],
           req->priv[IB_PRIV_STARTED] == 2);
    chorus__tp_req_complete(req, status);
}

void ib_zc_completion(ib_tp_t *tp, ib_peer_t *p, unsigned kind)
{
    if (kind == IB_WR_FIN && p->zd_head != NULL) zd_finish(tp, p, CHORUS_SUCCESS);
}

void ib_zc_fail(ib_tp_t *tp, ib_peer_t *p, chorus_status_t status)
{
    while (p->zd_head != NULL)
        zd_finish(tp, p, status);
    /* Deregistering the receive also keeps a peer that still writes out of it. */
    zc_put(tp, p->ztx_reg.reg, p->ztx_reg.device, p->ztx_reg.transient);
    zc_put(tp, p->zrx_reg.reg, p->zrx_reg.device, p->zrx_reg.transient);
    p->ztx_reg.reg = p->zrx_reg.reg = NULL;
}

/* An RTR for the send at the head of our queue. */
static int zc_take_rtr(ib_tp_t *tp, ib_peer_t *p, const ib_frag_hdr_t *h)
{
    chorus_tp_req_t *req = p->sq_head;
    chorus_status_t status;
    ib_rtr_t rtr;
    int fin;

    status = ib_rtr_decode((const uint8_t *)(h + 1), h->len, tp->rank, p->rank, &rtr);
    if (status == CHORUS_SUCCESS &&
        (p->z.tx_state != IB_ZTX_WAIT_RTR || rtr.rts_seq != p->z.tx_seq)) {
        status = ib_rndv_tx_rtr(&p->z, &rtr, &fin); /* out of place: says so */
    }
    if (status == CHORUS_SUCCESS && req == NULL) {
        status = chorus__error(CHORUS_ERR_INTERNAL, "rank %d: ib: peer %d: an RTR and no send",
                               tp->rank, p->rank);
    }
    if (status != CHORUS_SUCCESS) {
        zc_peer_fail(tp, p, status);
        return 0;
    }
    ib_credit_rx_consume(&p->cr);
    status = ib_rndv_tx_rtr(&p->z, &rtr, &fin);
    if (status != CHORUS_SUCCESS) {
        if (fin) return zc_tx_give_up(p, req, status, IB_RNDV_LEN);
        chorus__tp_queue_pop(&p->sq_head, &p->sq_tail);
        chorus__tp_req_complete(req, status);
    }
    return 1;
}

/* An RTS for the receive at the head of our queue. */
static int zc_take_rts(ib_tp_t *tp, ib_peer_t *p, const ib_frag_hdr_t *h, chorus_tp_req_t *req)
{
    chorus_status_t status;
    ib_rts_t rts;

    status = ib_rts_decode((const uint8_t *)(h + 1), h->len, tp->rank, p->rank, &rts);
    if (status == CHORUS_SUCCESS && (rts.len != h->total || p->rtr_due)) {
        status = chorus__error(CHORUS_ERR_REMOTE, "rank %d: ib: peer %d sent an RTS out of place",
                               tp->rank, p->rank);
    }
    if (status != CHORUS_SUCCESS) {
        zc_peer_fail(tp, p, status);
        return 0;
    }
    ib_credit_rx_consume(&p->cr);
    memset(&p->rtr_out, 0, sizeof(p->rtr_out));
    p->rtr_out.rts_seq = h->seq;
    p->rtr_out.len = req->bytes;
    p->rtr_due = 1;
    status = ib_rndv_rx_rts(&p->z, h->seq, &rts, req->bytes);
    if (status == CHORUS_SUCCESS) {
        status = zc_get(tp, p, req->buf, req->bytes, (int)req->priv[IB_PRIV_DEVICE], "receive",
                        &p->zrx_reg);
        if (status == CHORUS_SUCCESS) {
            p->rtr_out.status = IB_RNDV_OK;
            p->rtr_out.addr = (uint64_t)(uintptr_t)req->buf;
            p->rtr_out.rkey = p->zrx_reg.reg->rkey;
            req->priv[IB_PRIV_STARTED] = 1;
            return 1;
        }
        ib_rndv_rx_abort(&p->z);
        p->rtr_out.status = IB_RNDV_REG;
    } else {
        p->rtr_out.status = IB_RNDV_LEN;
    }
    chorus__tp_queue_pop(&p->rq_head, &p->rq_tail);
    chorus__tp_req_complete(req, status);
    return 1;
}

/* The FIN of the rendezvous the head receive waits for. */
static int zc_take_fin(ib_tp_t *tp, ib_peer_t *p, const ib_frag_hdr_t *h, chorus_tp_req_t *req)
{
    chorus_status_t status;
    ib_fin_t fin;

    status = ib_fin_decode((const uint8_t *)(h + 1), h->len, tp->rank, p->rank, &fin);
    if (status == CHORUS_SUCCESS && fin.rts_seq != p->z.rx_seq) {
        status = ib_rndv_rx_fin(&p->z, &fin); /* out of place: says so */
    }
    if (status != CHORUS_SUCCESS) {
        zc_peer_fail(tp, p, status);
        return 0;
    }
    ib_credit_rx_consume(&p->cr);
    status = ib_rndv_rx_fin(&p->z, &fin);
    zc_put(tp, p->zrx_reg.reg, p->zrx_reg.device, p->zrx_reg.transient);
    p->zrx_reg.reg = NULL;
    chorus__tp_queue_pop(&p->rq_head, &p->rq_tail);
    chorus__tp_req_complete(req, status);
    return 1;
}

int ib_zc_rx(ib_tp_t *tp, ib_peer_t *p, const ib_frag_hdr_t *h, ib_rx_action_t action)
{
    switch (action) {
    case IB_RX_CONTROL:
        return zc_take_rtr(tp, p, h);
    case IB_RX_RTS:
        return zc_take_rts(tp, p, h, p->rq_head);
    case IB_RX_FIN:
        return zc_take_fin(tp, p, h, p->rq_head);
    default:
        return 0;
    }
}

#endif /* CHORUS_HAVE_IBV */
