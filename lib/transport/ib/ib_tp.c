/*
 * The ib transport: native libibverbs RC queue pairs (lib/transport/ib/ib.h says how data
 * moves). This file sets up and tears down; ib_tp_data.c is the data path.
 *
 * Setup. init opens the device (CHORUS_IB_HCA, RoCE GID choice), registers the receive
 * region and the staging region, and creates one RC QP for every other rank, so that the
 * address blob can carry all their QP numbers (3 bytes each: at most IB_MAX_RANKS ranks;
 * beyond that the QP numbers need a second exchange, which is not written yet). connect_all
 * moves the masked peers' QPs to RTR and RTS from their blobs, posts receives, and sends
 * each peer a hello: the first fragment of the connection, whose HMAC proves the job
 * secret against the peer's fresh nonce. It returns once every peer's hello was checked;
 * no fragment is taken before that. Where libibverbs is missing, the transport is a stub
 * whose init says which package to install.
 */
#include "transport/ib/ib.h"

#include "util/log.h"

#include <string.h>

#ifndef CHORUS_HAVE_IBV

static chorus_status_t stub_init(const chorus_tp_params_t *params, chorus_tp_t **tp_p)
{
    (void)tp_p;
    return chorus__error(CHORUS_ERR_UNSUPPORTED,
                         "rank %d: ib: this Chorus was built without libibverbs (apt-get install "
                         "libibverbs-dev, then rebuild)",
                         params != NULL ? params->rank : -1);
}

static chorus_status_t stub_get_addr(chorus_tp_t *tp, void *blob, size_t *len_p)
{
    (void)tp, (void)blob, (void)len_p;
    return chorus__error(CHORUS_ERR_UNSUPPORTED, "ib: built without libibverbs");
}

static chorus_status_t stub_connect_all(chorus_tp_t *tp, const uint8_t *peer_mask,
                                        const void *blobs, uint64_t deadline_ns)
{
    (void)tp, (void)peer_mask, (void)blobs, (void)deadline_ns;
    return chorus__error(CHORUS_ERR_UNSUPPORTED, "ib: built without libibverbs");
}

static chorus_status_t stub_isend(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                                  chorus_tp_req_t *req)
{
    (void)tp, (void)peer, (void)buf, (void)bytes, (void)req;
    return chorus__error(CHORUS_ERR_UNSUPPORTED, "ib: built without libibverbs");
}

static chorus_status_t stub_irecv(chorus_tp_t *tp, int peer, void *buf, size_t bytes,
                                  chorus_tp_req_t *req)
{
    (void)tp, (void)peer, (void)buf, (void)bytes, (void)req;
    return chorus__error(CHORUS_ERR_UNSUPPORTED, "ib: built without libibverbs");
}

static chorus_status_t stub_progress(chorus_tp_t *tp)
{
    (void)tp;
    return CHORUS_SUCCESS;
}

static chorus_status_t stub_wait(chorus_tp_t *tp, uint64_t timeout_us)
{
    (void)tp, (void)timeout_us;
    return CHORUS_SUCCESS;
}

static void stub_fini(chorus_tp_t *tp)
{
    (void)tp;
}

const chorus_tp_ops_t chorus__tp_ib_ops = {
    .size = sizeof(chorus_tp_ops_t),
    .name = "ib",
    .caps = CHORUS_TP_CAP_HOST_MEM,
    .init = stub_init,
    .get_addr = stub_get_addr,
    .connect_all = stub_connect_all,
    .isend = stub_isend,
    .irecv = stub_irecv,
    .progress = stub_progress,
    .wait = stub_wait,
    .reg_mem = NULL,
    .dereg_mem = NULL,
    .fini = stub_fini,
    .instance_caps = NULL, /* caps: host memory; init refuses anyway */
};

#else /* CHORUS_HAVE_IBV */

#include "transport/ib/ib_verbs.h"
#include "util/clock.h"
#include "util/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

chorus_status_t ib_hello_mac(const ib_tp_t *tp, int src, int dst, const uint8_t nonce[16],
                             uint32_t src_qpn, uint8_t out[IB_HELLO_MAC])
{
    uint8_t msg[9 + 8 + 4 + 4 + 16 + 4];
    unsigned out_len = 0;
    size_t k = 0;

    memcpy(msg, "chorus-ib", 9);
    k = 9;
    for (int i = 0; i < 8; i++)
        msg[k++] = (uint8_t)(tp->params.comm_id >> (8 * i));
    for (int i = 0; i < 4; i++)
        msg[k++] = (uint8_t)((uint32_t)src >> (8 * i));
    for (int i = 0; i < 4; i++)
        msg[k++] = (uint8_t)((uint32_t)dst >> (8 * i));
    memcpy(msg + k, nonce, 16);
    k += 16;
    for (int i = 0; i < 4; i++)
        msg[k++] = (uint8_t)(src_qpn >> (8 * i));
    if (HMAC(EVP_sha256(), tp->secret, CHORUS_SECRET_BYTES, msg, k, out, &out_len) == NULL ||
        out_len != IB_HELLO_MAC) {
        return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: ib: HMAC-SHA256 failed", tp->rank);
    }
    return CHORUS_SUCCESS;
}

/* ---- Registration (reg_mem / dereg_mem; the calls are in ib_tp_zc.c) ---- */

/* ibv_reg_mr is a macro and ibv_dereg_mr may be one: functions for the pointers. */
static struct ibv_mr *reg_host_verbs(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return ibv_reg_mr(pd, addr, len, access);
}

static int dereg_verbs(struct ibv_mr *mr)
{
    return ibv_dereg_mr(mr);
}

/* The cache a buffer's registration lives in: device memory has its own, so that a host
 * range and a device range never alias. */
static chorus_regcache_t *cache_of(ib_tp_t *tp, const void *buf)
{
    return ib_is_device(tp, buf) ? tp->regcache_dev : tp->regcache;
}

static chorus_status_t ib_reg_mem(chorus_tp_t *tp_, void *buf, size_t bytes, void **handle_p)
{
    ib_tp_t *tp = (ib_tp_t *)tp_;
    chorus_regcache_t *rc = cache_of(tp, buf);
    chorus_reg_t *reg;
    chorus_status_t status;

    if (rc == NULL) {
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: ib: reg_mem of device memory at %p: GPUDirect RDMA "
                             "unavailable (no device memory calls)",
                             tp->rank, buf);
    }
    tp->reg_why[0] = '\0';
    status = chorus__regcache_get(rc, buf, bytes, &reg);
    if (status != CHORUS_SUCCESS && tp->reg_why[0] != '\0') {
        return chorus__error(tp->reg_status,
                             "rank %d: ib: reg_mem of %zu bytes of device memory at %p: GPUDirect "
                             "RDMA unavailable: %s",
                             tp->rank, bytes, buf, tp->reg_why);
    }
    if (status != CHORUS_SUCCESS) return chorus__error_context(status, "rank %d", tp->rank);
    *handle_p = reg;
    return CHORUS_SUCCESS;
}

static chorus_status_t ib_dereg_mem(chorus_tp_t *tp_, void *handle)
{
    ib_tp_t *tp = (ib_tp_t *)tp_;
    chorus_reg_t *reg = handle;
    chorus_regcache_t *rc = cache_of(tp, (void *)reg->start);

    /* Nothing tells us when the memory is freed, and a registration of freed-then-reused
     * pages would send stale data: the last dereg drops the entry rather than caching it. */
    if (reg->refs == 1) chorus__regcache_invalidate(rc, (void *)reg->start, reg->end - reg->start);
    chorus__regcache_put(rc, reg);
    return CHORUS_SUCCESS;
}

/* ---- init ---- */

static chorus_status_t make_qp(ib_tp_t *tp, ib_peer_t *p)
{
    struct ibv_qp_init_attr qia;
    struct ibv_qp_attr qa;

    memset(&qia, 0, sizeof(qia));
    qia.send_cq = tp->cq;
    qia.recv_cq = tp->cq;
    qia.qp_type = IBV_QPT_RC;
    qia.cap.max_send_wr = IB_SQ_DEPTH;
    qia.cap.max_recv_wr = IB_RQ_DEPTH;
    qia.cap.max_send_sge = 1;
    qia.cap.max_recv_sge = 1;
    p->qp = ibv_create_qp(tp->pd, &qia);
    if (p->qp == NULL) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: ib: create QP for peer %d",
                                   tp->rank, p->rank);
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_INIT;
    qa.pkey_index = 0;
    qa.port_num = (uint8_t)tp->dev.port;
    qa.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(p->qp, &qa,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: ib: QP for peer %d to INIT",
                                   tp->rank, p->rank);
    }
    return CHORUS_SUCCESS;
}

/* Registered, page-aligned, zeroed memory of n bytes. */
static chorus_status_t make_region(ib_tp_t *tp, size_t n, int access, uint8_t **buf_p,
                                   struct ibv_mr **mr_p)
{
    void *buf = NULL;
    struct ibv_mr *mr;

    if (posix_memalign(&buf, 4096, n) != 0) {
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ib: %zu-byte slot region", tp->rank,
                             n);
    }
    memset(buf, 0, n);
    mr = ibv_reg_mr(tp->pd, buf, n, access);
    if (mr == NULL) {
        int err = errno;

        free(buf);
        return chorus__error_errno(CHORUS_ERR_SYSTEM, err,
                                   "rank %d: ib: registering %zu bytes of slots (memlock limit?)",
                                   tp->rank, n);
    }
    *buf_p = buf;
    *mr_p = mr;
    return CHORUS_SUCCESS;
}

/* Whether the device registers dma-bufs, asked without one: a provider that cannot says
 * EOPNOTSUPP whatever the arguments; one that can refuses fd -1 for another reason. */
static int probe_dmabuf(ib_tp_t *tp)
{
    struct ibv_mr *mr;

    errno = 0;
    mr = ibv_reg_dmabuf_mr(tp->pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE);
    if (mr != NULL) {
        ibv_dereg_mr(mr);
        return 1;
    }
    if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EPROTONOSUPPORT) {
        CHORUS_INFO("ib", "rank %d: %s cannot register dma-bufs: GPUDirect RDMA unavailable",
                    tp->rank, tp->dev.dev);
        return 0;
    }
    return 1;
}

/* The port's largest message, which bounds one RDMA WRITE (1 GiB at most, the usual). */
static uint64_t port_max_msg(ib_tp_t *tp)
{
    struct ibv_port_attr pa;
    uint64_t max = (uint64_t)1 << 30;

    memset(&pa, 0, sizeof(pa));
    if (ibv_query_port(tp->dev.ctx, (uint8_t)tp->dev.port, &pa) == 0 && pa.max_msg_sz > 0 &&
        pa.max_msg_sz < max) {
        max = pa.max_msg_sz;
    }
    return max;
}

static chorus_status_t make_caches(ib_tp_t *tp)
{
    chorus_regcache_ops_t host = {ib_reg_host_cb, ib_dereg_cb, tp, "ib"};
    chorus_regcache_ops_t dev = {ib_reg_dev_cb, ib_dereg_cb, tp, "ib (device memory)"};
    const chorus_tp_mem_ops_t *mem = tp->params.mem;
    chorus_status_t status;

    tp->reg_host = reg_host_verbs;
    tp->reg_dmabuf = ibv_reg_dmabuf_mr;
    tp->dereg = dereg_verbs;
    /* The default (1 MiB) is unmeasured: there was no NIC where this was written. Below it
     * the two copies through the slots (a few GB/s of memcpy on each side, pipelined with
     * the wire) cost about what the rendezvous does: a round trip, and a registration of
     * the user buffer (pinning: tens of microseconds per MiB) made and dropped per message,
     * because nothing tells this transport when user memory is freed. */
    tp->zcopy_min = chorus__config_size("CHORUS_IB_ZCOPY_MIN", (uint64_t)1 << 20);
    tp->max_msg = port_max_msg(tp);
    status = chorus__regcache_create(&host, (size_t)1 << 30, &tp->regcache);
    if (status != CHORUS_SUCCESS || mem == NULL || mem->is_device == NULL || mem->dmabuf == NULL)
        return status;
    tp->dmabuf_ok = probe_dmabuf(tp);
    return chorus__regcache_create(&dev, (size_t)1 << 30, &tp->regcache_dev);
}

static chorus_status_t make_verbs(ib_tp_t *tp)
{
    chorus_status_t status;
    int flags;

    tp->pd = ibv_alloc_pd(tp->dev.ctx);
    if (tp->pd == NULL) return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: ib: alloc PD", tp->rank);
    tp->channel = ibv_create_comp_channel(tp->dev.ctx);
    if (tp->channel == NULL) {
        return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: ib: completion channel", tp->rank);
    }
    /* wait() polls the fd; the events themselves are read without blocking. */
    flags = fcntl(tp->channel->fd, F_GETFL);
    if (flags < 0 || fcntl(tp->channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: ib: channel fd", tp->rank);
    }
    tp->cq_size = (tp->nranks > 1 ? tp->nranks - 1 : 1) * (IB_SQ_DEPTH + IB_RQ_DEPTH);
    tp->cq = ibv_create_cq(tp->dev.ctx, tp->cq_size, NULL, tp->channel, 0);
    if (tp->cq == NULL) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: ib: create CQ of %d",
                                   tp->rank, tp->cq_size);
    }
    tp->region_bytes = (size_t)tp->nranks * IB_NSLOTS * IB_SLOT_BYTES;
    status = make_region(tp, tp->region_bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                         &tp->rx_buf, &tp->rx_mr);
    if (status != CHORUS_SUCCESS) return status;
    status = make_region(tp, tp->region_bytes, IBV_ACCESS_LOCAL_WRITE, &tp->tx_buf, &tp->tx_mr);
    if (status != CHORUS_SUCCESS) return status;
    return make_caches(tp);
}

static void ib_fini(chorus_tp_t *tp_);

static chorus_status_t ib_init(const chorus_tp_params_t *params, chorus_tp_t **tp_p)
{
    chorus_status_t status;
    ib_tp_t *tp;

    if (params == NULL || params->nranks <= 0 || params->rank < 0 ||
        params->rank >= params->nranks || params->secret == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "ib: init: bad parameters");
    }
    if (params->nranks > IB_MAX_RANKS) {
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: ib: %d ranks; this version reaches at most %d (every QP "
                             "number travels in the address blob)",
                             params->rank, params->nranks, IB_MAX_RANKS);
    }
    tp = calloc(1, sizeof(*tp));
    if (tp == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ib: init", params->rank);
    tp->rank = params->rank;
    tp->nranks = params->nranks;
    memcpy(tp->secret, params->secret, CHORUS_SECRET_BYTES);
    tp->params = *params;
    tp->params.secret = tp->secret;
    tp->peers = calloc((size_t)tp->nranks, sizeof(*tp->peers));
    if (tp->peers == NULL) {
        free(tp);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ib: init", params->rank);
    }
    for (int r = 0; r < tp->nranks; r++)
        tp->peers[r].rank = -1;
    CHORUS_CHECK_GOTO(ib_dev_open(params, &tp->dev), err);
    CHORUS_CHECK_GOTO(chorus__random_bytes(tp->nonce, sizeof(tp->nonce)), err);
    CHORUS_CHECK_GOTO(chorus__random_bytes(&tp->psn, sizeof(tp->psn)), err);
    tp->psn &= 0xffffff;
    CHORUS_CHECK_GOTO(make_verbs(tp), err);
    for (int r = 0; r < tp->nranks; r++) {
        if (r == tp->rank) continue;
        tp->peers[r].rank = r;
        CHORUS_CHECK_GOTO(make_qp(tp, &tp->peers[r]), err);
        tp->peers[r].rank = -1; /* a peer only once connect_all's mask says so */
    }
    *tp_p = (chorus_tp_t *)tp;
    return CHORUS_SUCCESS;

err:
    ib_fini((chorus_tp_t *)tp);
    return status;
}

static chorus_status_t ib_get_addr(chorus_tp_t *tp_, void *blob, size_t *len_p)
{
    ib_tp_t *tp = (ib_tp_t *)tp_;
    ib_blob_t b;

    memset(&b, 0, sizeof(b));
    b.magic = IB_BLOB_MAGIC;
    b.version = IB_BLOB_VERSION;
    b.rank = tp->rank;
    b.nranks = tp->nranks;
    b.comm_id = tp->params.comm_id;
    b.rx_addr = (uint64_t)(uintptr_t)tp->rx_buf;
    b.rx_rkey = tp->rx_mr->rkey;
    b.psn = tp->psn;
    b.lid = tp->dev.lid;
    b.port = (uint8_t)tp->dev.port;
    b.roce = (uint8_t)tp->dev.roce;
    b.mtu = (uint8_t)tp->dev.mtu;
    b.slot_bytes = IB_SLOT_BYTES;
    memcpy(b.gid, tp->dev.gid, 16);
    memcpy(b.nonce, tp->nonce, 16);
    for (int r = 0; r < tp->nranks; r++) {
        uint32_t qpn = r == tp->rank ? 0 : tp->peers[r].qp->qp_num;

        b.qpn[r][0] = (uint8_t)qpn;
        b.qpn[r][1] = (uint8_t)(qpn >> 8);
        b.qpn[r][2] = (uint8_t)(qpn >> 16);
    }
    memcpy(blob, &b, sizeof(b));
    *len_p = sizeof(b);
    return CHORUS_SUCCESS;
}

/* ---- connect_all ---- */

static chorus_status_t blob_check(const ib_tp_t *tp, const ib_blob_t *b, int peer)
{
    if (b->magic != IB_BLOB_MAGIC || b->version != IB_BLOB_VERSION || b->rank != peer ||
        b->nranks != tp->nranks || b->comm_id != tp->params.comm_id ||
        b->slot_bytes != IB_SLOT_BYTES || b->roce != (uint8_t)tp->dev.roce) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: the address blob of peer %d does not match (rank %d, "
                             "%d ranks, slots of %u bytes, %s)",
                             tp->rank, peer, b->rank, b->nranks, b->slot_bytes,
                             b->roce ? "RoCE" : "InfiniBand");
    }
    return CHORUS_SUCCESS;
}

/* Moves the QP for p to RTR and RTS against its blob. */
static chorus_status_t connect_peer(ib_tp_t *tp, ib_peer_t *p, const ib_blob_t *b)
{
    uint32_t qpn = b->qpn[tp->rank][0] | (uint32_t)b->qpn[tp->rank][1] << 8 |
                   (uint32_t)b->qpn[tp->rank][2] << 16;
    struct ibv_qp_attr qa;

    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTR;
    qa.path_mtu = b->mtu < tp->dev.mtu ? (enum ibv_mtu)b->mtu : tp->dev.mtu;
    qa.dest_qp_num = qpn;
    qa.rq_psn = b->psn;
    qa.max_dest_rd_atomic = 1;
    qa.min_rnr_timer = 12; /* 0.64 ms */
    qa.ah_attr.dlid = b->lid;
    qa.ah_attr.port_num = (uint8_t)tp->dev.port;
    if (tp->dev.roce) {
        qa.ah_attr.is_global = 1;
        memcpy(qa.ah_attr.grh.dgid.raw, b->gid, 16);
        qa.ah_attr.grh.sgid_index = (uint8_t)tp->dev.gid_index;
        qa.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(p->qp, &qa,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno,
                                   "rank %d: ib: QP to peer %d (QPN %u) to RTR", tp->rank, p->rank,
                                   qpn);
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTS;
    /* 4.1 us * 2^18 = 1.07 s per try, 7 tries: a peer still on its way to RTR (ranks enter
     * connect_all a little apart) is waited for, and a dead one is noticed in ~8 s. */
    qa.timeout = 18;
    qa.retry_cnt = 7;
    qa.rnr_retry = 7; /* infinite: a receive queue briefly empty is no failure */
    qa.sq_psn = tp->psn;
    qa.max_rd_atomic = 1;
    if (ibv_modify_qp(p->qp, &qa,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: ib: QP to peer %d to RTS",
                                   tp->rank, p->rank);
    }
    p->remote_addr = b->rx_addr + (uint64_t)tp->rank * IB_NSLOTS * IB_SLOT_BYTES;
    p->rkey = b->rx_rkey;
    p->remote_qpn = qpn;
    memcpy(p->nonce, b->nonce, 16);
    /* Fragment counters start at 0 both ways: the hello is fragment 0. */
    ib_credit_init(&p->cr, IB_NSLOTS, IB_CREDIT_BATCH, 0);
    for (int i = 0; i < (int)IB_RQ_DEPTH; i++) {
        chorus_status_t status = ib_post_recv(tp, p);

        if (status != CHORUS_SUCCESS) return status;
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t setup_wait(ib_tp_t *tp, uint64_t deadline_ns)
{
    long sleep_ns = 20000;

    for (;;) {
        int left = 0;
        chorus_status_t status = ib_poll(tp);

        if (status != CHORUS_SUCCESS) return status;
        for (int r = 0; r < tp->nranks; r++) {
            ib_peer_t *p = &tp->peers[r];

            if (p->rank < 0) continue;
            if (p->failed != CHORUS_SUCCESS) {
                return chorus__error(p->failed, "rank %d: ib: connect: %s", tp->rank, p->why);
            }
            left += !p->verified;
        }
        if (left == 0) return CHORUS_SUCCESS;
        if (tp->params.abort_flag != NULL &&
            atomic_load_explicit(tp->params.abort_flag, memory_order_relaxed)) {
            return chorus__error(CHORUS_ERR_ABORTED, "rank %d: ib: connect aborted", tp->rank);
        }
        if (chorus__deadline_passed(deadline_ns)) {
            for (int r = 0; r < tp->nranks; r++) {
                if (tp->peers[r].rank >= 0 && !tp->peers[r].verified) {
                    return chorus__error(CHORUS_ERR_TIMEOUT,
                                         "rank %d: ib: peer %d sent no hello before the deadline",
                                         tp->rank, r);
                }
            }
        }
        nanosleep(&(struct timespec){0, sleep_ns}, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
}

static chorus_status_t ib_connect_all(chorus_tp_t *tp_, const uint8_t *peer_mask, const void *blobs,
                                      uint64_t deadline_ns)
{
    ib_tp_t *tp = (ib_tp_t *)tp_;
    chorus_status_t status;

    if (tp->connected) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: ib: connect_all called twice",
                             tp->rank);
    }
    for (int r = 0; r < tp->nranks; r++) {
        ib_blob_t b;

        if (!peer_mask[r] || r == tp->rank) continue;
        memcpy(&b, (const uint8_t *)blobs + (size_t)r * CHORUS_TP_BLOB_MAX, sizeof(b));
        CHORUS_CHECK_GOTO(blob_check(tp, &b, r), err);
        tp->peers[r].rank = r;
        tp->npeers++;
        CHORUS_CHECK_GOTO(connect_peer(tp, &tp->peers[r], &b), err);
    }
    for (int r = 0; r < tp->nranks; r++) {
        if (tp->peers[r].rank >= 0) CHORUS_CHECK_GOTO(ib_send_hello(tp, &tp->peers[r]), err);
    }
    CHORUS_CHECK_GOTO(setup_wait(tp, deadline_ns), err);
    tp->connected = 1;
    CHORUS_INFO("ib", "rank %d: connected to %d peers over %s:%d", tp->rank, tp->npeers,
                tp->dev.dev, tp->dev.port);
    return CHORUS_SUCCESS;

err:
    return status;
}

/* ---- fini ---- */

static void ib_fini(chorus_tp_t *tp_)
{
    ib_tp_t *tp = (ib_tp_t *)tp_;

    if (tp == NULL) return;
    ib_fail_all(tp, CHORUS_ERR_REMOTE, "the transport was closed");
    for (int r = 0; r < tp->nranks; r++) {
        if (tp->peers[r].qp != NULL) ibv_destroy_qp(tp->peers[r].qp);
    }
    chorus__regcache_destroy(tp->regcache);
    chorus__regcache_destroy(tp->regcache_dev);
    if (tp->rx_mr != NULL) ibv_dereg_mr(tp->rx_mr);
    if (tp->tx_mr != NULL) ibv_dereg_mr(tp->tx_mr);
    free(tp->rx_buf);
    free(tp->tx_buf);
    if (tp->cq != NULL) ibv_destroy_cq(tp->cq);
    if (tp->channel != NULL) ibv_destroy_comp_channel(tp->channel);
    if (tp->pd != NULL) ibv_dealloc_pd(tp->pd);
    if (tp->dev.ctx != NULL) ibv_close_device(tp->dev.ctx);
    free(tp->peers);
    free(tp);
}

/* Device buffers only where the core gave device memory calls and the NIC did not refuse
 * dma-buf registration. */
static uint32_t ib_instance_caps(chorus_tp_t *tp_)
{
    ib_tp_t *tp = (ib_tp_t *)tp_;
    uint32_t caps = CHORUS_TP_CAP_HOST_MEM;

    if (tp != NULL && tp->regcache_dev != NULL && tp->dmabuf_ok) caps |= CHORUS_TP_CAP_DEVICE_MEM;
    return caps;
}

const chorus_tp_ops_t chorus__tp_ib_ops = {
    .size = sizeof(chorus_tp_ops_t),
    .name = "ib",
    .caps = CHORUS_TP_CAP_HOST_MEM,
    .init = ib_init,
    .get_addr = ib_get_addr,
    .connect_all = ib_connect_all,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .progress = ib_progress,
    .wait = ib_wait,
    .reg_mem = ib_reg_mem,
    .dereg_mem = ib_dereg_mem,
    .fini = ib_fini,
    .instance_caps = ib_instance_caps,
};

#endif /* CHORUS_HAVE_IBV */
