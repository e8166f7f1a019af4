/*
 * A fake verbs fabric for the ib transport's data path (lib/transport/ib/ib_tp_data.c and
 * the rendezvous in ib_tp_zc.c) without a NIC: two instances in one process (side[0] and
 * side[1]) whose queue pairs and completion queue are fakes behind the verbs ops table
 * (ibv_post_send, ibv_post_recv and ibv_poll_cq are inline calls through it). The fake
 * fabric does what RC does for RDMA WRITE with immediate: it copies the bytes into the
 * peer's memory after checking the rkey and bounds, consumes one posted receive there (or
 * holds the write back, as an RNR retry would), keeps each QP's writes in order but
 * delivers them late, and completes both sides. Plain RDMA WRITEs (the rendezvous's data)
 * land without a receive, after their rkey and lkey are checked against the fake
 * registrations made through the transport's registration pointers; device memory is a
 * page-aligned block that fake memory calls claim is on a GPU, exported as a dma-buf (an
 * fd of /dev/null whose closing is checked). Setup (device, QP states) needs the real
 * library and is left to tests/hw/ib.sh.
 *
 * Used by tests/unit/test_ib_data.c (eager messages, credit, failures) and
 * tests/unit/test_ib_zcopy.c (the zero-copy rendezvous and GPUDirect): include it only
 * where CHORUS_HAVE_IBV is defined, and run each case with setup and teardown, which
 * rebuild both sides and check that every registration and dma-buf fd was released.
 */
#ifndef CHORUS_TESTS_IB_FAKE_FABRIC_H
#define CHORUS_TESTS_IB_FAKE_FABRIC_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transport/ib/ib_verbs.h"
#include "util/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* Everything here is static in a header: a test file that uses only part of it must not
 * trip -Wunused-function, which C compilers do not raise for unused static inline
 * functions. */
#define IBF_FN static inline

#define WIRE_MAX 4096
#define CQE_MAX 4096

typedef struct fake_qp fake_qp_t;

typedef struct {
    struct ibv_cq cq;
    struct ibv_wc wc[CQE_MAX];
    int n;
} fake_cq_t;

struct fake_qp {
    struct ibv_qp qp; /* first: the transport sees &fake->qp */
    fake_cq_t *cq;
    fake_qp_t *peer;
    ib_tp_t *owner;
    uint64_t recv_ids[256];
    int nrecv;
    int dead; /* its process "died": writes to it fail */
};

typedef struct {
    fake_qp_t *src;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
} wire_item_t;

static wire_item_t wire[WIRE_MAX];
static int nwire;

/* Registrations made through the fakes (keys unique across both sides). */
typedef struct {
    uintptr_t start, end;
    uint32_t key;
    int device, live;
} fake_reg_t;

#define REG_MAX 4096
static fake_reg_t regs[REG_MAX];
static int nregs;
static uint64_t zwritten; /* bytes that landed by plain RDMA WRITE */
static uint8_t *dev_base; /* "device memory" */
static size_t dev_size;
static int dmabuf_fail, dmabuf_reg_fail;
static int dmabuf_fds[REG_MAX];
static int ndmabuf_fds;

IBF_FN const fake_reg_t *reg_of(uint32_t key, uint64_t addr, uint64_t len)
{
    for (int i = 0; i < nregs; i++) {
        if (regs[i].key == key && regs[i].live && addr >= regs[i].start &&
            addr + len <= regs[i].end) {
            return &regs[i];
        }
    }
    return NULL;
}

IBF_FN struct ibv_mr *fake_reg(void *addr, size_t len, int access, int device)
{
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    assert_non_null(mr);
    assert_true(access & IBV_ACCESS_REMOTE_WRITE);
    assert_true(nregs < REG_MAX);
    regs[nregs] = (fake_reg_t){(uintptr_t)addr, (uintptr_t)addr + len, 0x5000u + (uint32_t)nregs,
                               device, 1};
    mr->addr = addr;
    mr->length = len;
    mr->lkey = mr->rkey = regs[nregs++].key;
    return mr;
}

IBF_FN struct ibv_mr *fake_reg_host(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    (void)pd;
    /* Device memory never goes through ibv_reg_mr. */
    assert_false(dev_base != NULL && (uint8_t *)addr >= dev_base &&
                 (uint8_t *)addr < dev_base + dev_size);
    return fake_reg(addr, len, access, 0);
}

IBF_FN struct ibv_mr *fake_reg_dmabuf(struct ibv_pd *pd, uint64_t offset, size_t len,
                                      uint64_t iova, int fd, int access)
{
    (void)pd;
    assert_int_not_equal(fcntl(fd, F_GETFD), -1); /* open while it registers */
    assert_int_equal(iova, (uint64_t)(uintptr_t)dev_base + offset);
    assert_true(offset + len <= dev_size);
    if (dmabuf_reg_fail) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return fake_reg((void *)(uintptr_t)iova, len, access, 1);
}

IBF_FN int fake_dereg(struct ibv_mr *mr)
{
    for (int i = 0; i < nregs; i++) {
        if (regs[i].key == mr->lkey) {
            assert_true(regs[i].live);
            regs[i].live = 0;
        }
    }
    free(mr);
    return 0;
}

IBF_FN int fake_is_device(const void *p)
{
    return dev_base != NULL && (const uint8_t *)p >= dev_base &&
           (const uint8_t *)p < dev_base + dev_size;
}

IBF_FN chorus_status_t fake_dmabuf(const void *p, size_t bytes, int *fd_p, uint64_t *offset_p)
{
    assert_true(fake_is_device(p));
    assert_true((const uint8_t *)p + bytes <= dev_base + dev_size);
    if (dmabuf_fail) return chorus__error(CHORUS_ERR_UNSUPPORTED, "fake GPU: no dma-buf support");
    *fd_p = open("/dev/null", O_RDONLY);
    assert_true(*fd_p >= 0);
    dmabuf_fds[ndmabuf_fds++] = *fd_p;
    *offset_p = (uint64_t)((const uint8_t *)p - dev_base);
    return CHORUS_SUCCESS;
}

static const chorus_tp_mem_ops_t fake_mem = {fake_is_device, fake_dmabuf};

/* Completions of writes that landed but whose ACK is still on its way. Until then the NIC
 * may read the source again (a retransmission), so it must not have changed. */
typedef struct {
    fake_qp_t *src;
    uint64_t wr_id;
    const uint8_t *addr;
    uint8_t *copy;
    uint32_t len;
} ack_t;

static ack_t acks[WIRE_MAX];
static int nacks;
static uint64_t rng = 88172645463325252ull;

IBF_FN uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

IBF_FN void push_cqe(fake_cq_t *cq, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op,
                     uint32_t imm)
{
    struct ibv_wc *wc;
    assert_true(cq->n < CQE_MAX);
    wc = &cq->wc[cq->n++];
    memset(wc, 0, sizeof(*wc));
    wc->wr_id = wr_id;
    wc->status = st;
    wc->opcode = op;
    wc->imm_data = htonl(imm);
}

IBF_FN int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    (void)bad;
    for (; wr != NULL; wr = wr->next) {
        wire_item_t *w;
        assert_true(wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE);
        assert_true(wr->send_flags & IBV_SEND_SIGNALED);
        assert_true(nwire < WIRE_MAX);
        w = &wire[nwire++];
        w->src = (fake_qp_t *)qp;
        w->wr = *wr;
        w->wr.sg_list = NULL;
        w->sge.length = 0;
        if (wr->num_sge > 0) w->sge = wr->sg_list[0];
    }
    return 0;
}

IBF_FN int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    fake_qp_t *f = (fake_qp_t *)qp;
    (void)bad;
    for (; wr != NULL; wr = wr->next) {
        assert_true(f->nrecv < 256);
        f->recv_ids[f->nrecv++] = wr->wr_id;
    }
    return 0;
}

/* Lands wire item i if its destination has a receive posted; 1 if it went. */
IBF_FN int land(int i)
{
    wire_item_t *w = &wire[i];
    fake_qp_t *dst = w->src->peer;
    uint32_t imm = ntohl(w->wr.imm_data);
    if (dst->dead) {
        push_cqe(w->src->cq, w->wr.wr_id, IBV_WC_RETRY_EXC_ERR, IBV_WC_RDMA_WRITE, 0);
    } else if (w->wr.opcode == IBV_WR_RDMA_WRITE) {
        /* Rendezvous data: both keys must name live registrations covering the bytes. */
        if (reg_of(w->wr.wr.rdma.rkey, w->wr.wr.rdma.remote_addr, w->sge.length) == NULL)
            fail_msg("an RDMA WRITE outside the receiver's registration");
        if (reg_of(w->sge.lkey, w->sge.addr, w->sge.length) == NULL)
            fail_msg("an RDMA WRITE from outside the sender's registration");
        memcpy((void *)(uintptr_t)w->wr.wr.rdma.remote_addr, (void *)(uintptr_t)w->sge.addr,
               w->sge.length);
        zwritten += w->sge.length;
        assert_true(nacks < WIRE_MAX);
        ack_t *a = &acks[nacks++];
        a->src = w->src;
        a->wr_id = w->wr.wr_id;
        a->addr = (const uint8_t *)(uintptr_t)w->sge.addr;
        a->len = w->sge.length;
        a->copy = malloc(a->len + 1);
        assert_non_null(a->copy);
        memcpy(a->copy, a->addr, a->len);
    } else {
        ib_tp_t *peer = dst->owner;
        uintptr_t base = (uintptr_t)peer->rx_buf;
        if (dst->nrecv == 0) return 0; /* RNR: retried later */
        assert_int_equal(w->wr.wr.rdma.rkey, peer->rx_mr->rkey);
        /* The source is read only now, as a NIC may: a staging slot reused before its
         * write completed would send the wrong bytes. */
        if (w->sge.length > 0) {
            assert_int_equal(w->sge.lkey, w->src->owner->tx_mr->lkey);
            assert_true(w->wr.wr.rdma.remote_addr >= base);
            assert_true(w->wr.wr.rdma.remote_addr + w->sge.length <= base + peer->region_bytes);
            memcpy((void *)(uintptr_t)w->wr.wr.rdma.remote_addr, (void *)(uintptr_t)w->sge.addr,
                   w->sge.length);
        }
        uint64_t rid = dst->recv_ids[0];
        memmove(dst->recv_ids, dst->recv_ids + 1, (size_t)--dst->nrecv * sizeof(uint64_t));
        push_cqe(dst->cq, rid, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, imm);
        assert_true(nacks < WIRE_MAX);
        ack_t *a = &acks[nacks++];
        a->src = w->src;
        a->wr_id = w->wr.wr_id;
        a->addr = (const uint8_t *)(uintptr_t)w->sge.addr;
        a->len = w->sge.length;
        a->copy = malloc(a->len + 1);
        assert_non_null(a->copy);
        memcpy(a->copy, a->addr, a->len);
    }
    memmove(&wire[i], &wire[i + 1], (size_t)(nwire - i - 1) * sizeof(wire[0]));
    nwire--;
    return 1;
}

IBF_FN void ack(int i)
{
    ack_t *a = &acks[i];
    if (memcmp(a->copy, a->addr, a->len) != 0) fail_msg("a source changed before its completion");
    push_cqe(a->src->cq, a->wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0);
    free(a->copy);
    memmove(&acks[i], &acks[i + 1], (size_t)(nacks - i - 1) * sizeof(acks[0]));
    nacks--;
}

/* Delivers a random number of writes, each the oldest of its QP (RC keeps QP order), and
 * a random number of ACKs (completions may come late, but in order per QP). */
IBF_FN void fabric_step(void)
{
    int m = (int)rnd(4);
    while (m-- > 0 && nacks > 0) {
        fake_qp_t *src = acks[rnd((uint32_t)nacks)].src;
        for (int i = 0; i < nacks; i++) {
            if (acks[i].src == src) {
                ack(i);
                break;
            }
        }
    }
    int n = (int)rnd(6);
    while (n-- > 0 && nwire > 0) {
        fake_qp_t *src = wire[rnd((uint32_t)nwire)].src;
        for (int i = 0; i < nwire; i++) {
            if (wire[i].src == src) {
                land(i);
                break;
            }
        }
    }
}

IBF_FN int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    fake_cq_t *f = (fake_cq_t *)cq;
    int n;
    fabric_step();
    n = f->n < num ? f->n : num;
    memcpy(wc, f->wc, (size_t)n * sizeof(*wc));
    memmove(f->wc, f->wc + n, (size_t)(f->n - n) * sizeof(*wc));
    f->n -= n;
    return n;
}

IBF_FN int fake_req_notify(struct ibv_cq *cq, int solicited)
{
    (void)cq, (void)solicited;
    return 0;
}

static struct ibv_context fake_ctx;

typedef struct {
    ib_tp_t tp;
    fake_cq_t cq;
    fake_qp_t qp;
    struct ibv_mr rx_mr, tx_mr;
} side_t;

static side_t side[2];
static uint8_t secrets[2][CHORUS_SECRET_BYTES];

IBF_FN void make_side(int r, uint64_t comm_id)
{
    side_t *s = &side[r];
    ib_tp_t *tp = &s->tp;
    memset(s, 0, sizeof(*s));
    tp->rank = r;
    tp->nranks = 2;
    memcpy(tp->secret, secrets[r], CHORUS_SECRET_BYTES);
    tp->params.rank = r;
    tp->params.nranks = 2;
    tp->params.secret = tp->secret;
    tp->params.comm_id = comm_id;
    assert_int_equal(chorus__random_bytes(tp->nonce, 16), CHORUS_SUCCESS);
    tp->region_bytes = 2 * IB_NSLOTS * IB_SLOT_BYTES;
    tp->rx_buf = calloc(1, tp->region_bytes);
    tp->tx_buf = calloc(1, tp->region_bytes);
    assert_non_null(tp->rx_buf);
    assert_non_null(tp->tx_buf);
    s->rx_mr.rkey = 0x1000u + (uint32_t)r;
    s->tx_mr.lkey = 0x2000u + (uint32_t)r;
    tp->rx_mr = &s->rx_mr;
    tp->tx_mr = &s->tx_mr;
    s->cq.cq.context = &fake_ctx;
    tp->cq = &s->cq.cq;
    tp->peers = calloc(2, sizeof(*tp->peers));
    assert_non_null(tp->peers);
    tp->peers[0].rank = tp->peers[1].rank = -1;
    s->qp.qp.context = &fake_ctx;
    s->qp.qp.qp_num = 0x100u + (uint32_t)r;
    s->qp.cq = &s->cq;
    s->qp.owner = tp;
    /* The rendezvous: registrations through the fakes, writes of at most 100000 bytes. */
    tp->reg_host = fake_reg_host;
    tp->reg_dmabuf = fake_reg_dmabuf;
    tp->dereg = fake_dereg;
    tp->max_msg = 100000;
    chorus_regcache_ops_t host = {ib_reg_host_cb, ib_dereg_cb, tp, "ib"};
    assert_int_equal(chorus__regcache_create(&host, 1u << 30, &tp->regcache), CHORUS_SUCCESS);
}

/* Gives side r the device memory calls, as the core does on a GPU node. */
IBF_FN void give_mem(int r)
{
    ib_tp_t *tp = &side[r].tp;
    chorus_regcache_ops_t dev = {ib_reg_dev_cb, ib_dereg_cb, tp, "ib (device memory)"};
    tp->params.mem = &fake_mem;
    tp->dmabuf_ok = 1;
    assert_int_equal(chorus__regcache_create(&dev, 1u << 30, &tp->regcache_dev), CHORUS_SUCCESS);
}

/* What connect_all does after the QP state changes, then the hello exchange. */
IBF_FN void connect_sides(void)
{
    for (int r = 0; r < 2; r++) {
        ib_tp_t *tp = &side[r].tp, *peer = &side[r ^ 1].tp;
        ib_peer_t *p = &tp->peers[r ^ 1];
        side[r].qp.peer = &side[r ^ 1].qp;
        p->rank = r ^ 1;
        p->qp = &side[r].qp.qp;
        p->remote_addr =
            (uint64_t)(uintptr_t)peer->rx_buf + (uint64_t)r * IB_NSLOTS * IB_SLOT_BYTES;
        p->rkey = peer->rx_mr->rkey;
        p->remote_qpn = side[r ^ 1].qp.qp.qp_num;
        memcpy(p->nonce, peer->nonce, 16);
        ib_credit_init(&p->cr, IB_NSLOTS, IB_CREDIT_BATCH, 0);
        for (int i = 0; i < (int)IB_RQ_DEPTH; i++)
            assert_int_equal(ib_post_recv(tp, p), CHORUS_SUCCESS);
        tp->npeers = 1;
    }
    for (int r = 0; r < 2; r++)
        assert_int_equal(ib_send_hello(&side[r].tp, &side[r].tp.peers[r ^ 1]), CHORUS_SUCCESS);
}

IBF_FN int setup(void **state)
{
    (void)state;
    fake_ctx.ops.poll_cq = fake_poll_cq;
    fake_ctx.ops.req_notify_cq = fake_req_notify;
    fake_ctx.ops.post_send = fake_post_send;
    fake_ctx.ops.post_recv = fake_post_recv;
    nwire = nacks = nregs = ndmabuf_fds = 0;
    zwritten = 0;
    dmabuf_fail = dmabuf_reg_fail = 0;
    dev_base = NULL;
    assert_int_equal(chorus__random_bytes(secrets[0], CHORUS_SECRET_BYTES), CHORUS_SUCCESS);
    memcpy(secrets[1], secrets[0], CHORUS_SECRET_BYTES);
    make_side(0, 77);
    make_side(1, 77);
    return 0;
}

IBF_FN int teardown(void **state)
{
    (void)state;
    while (nacks > 0) {
        free(acks[nacks - 1].copy);
        nacks--;
    }
    for (int r = 0; r < 2; r++) {
        ib_fail_all(&side[r].tp, CHORUS_ERR_REMOTE, "closed");
        chorus__regcache_destroy(side[r].tp.regcache);
        chorus__regcache_destroy(side[r].tp.regcache_dev);
        free(side[r].tp.rx_buf);
        free(side[r].tp.tx_buf);
        free(side[r].tp.peers);
    }
    nwire = 0;
    /* Every registration was dropped and every dma-buf fd closed. */
    for (int i = 0; i < nregs; i++)
        assert_int_equal(regs[i].live, 0);
    for (int i = 0; i < ndmabuf_fds; i++)
        assert_int_equal(fcntl(dmabuf_fds[i], F_GETFD), -1);
    free(dev_base);
    dev_base = NULL;
    return 0;
}

/* Runs both sides until every request is done (or 10 s pass); returns the first error
 * progress() reported on side r_err (or success). */
IBF_FN chorus_status_t drive(chorus_tp_req_t *reqs, int n, int r_err)
{
    uint64_t deadline = chorus__deadline_after(10.0);
    chorus_status_t first = CHORUS_SUCCESS;
    for (;;) {
        int left = 0;
        for (int r = 0; r < 2; r++) {
            chorus_status_t st = ib_progress((chorus_tp_t *)&side[r].tp);
            if (r == r_err && first == CHORUS_SUCCESS) first = st;
        }
        for (int i = 0; i < n; i++)
            left += !reqs[i].done;
        if (left == 0) return first;
        assert_false(chorus__deadline_passed(deadline));
    }
}

IBF_FN void connect_ok(void)
{
    connect_sides();
    uint64_t deadline = chorus__deadline_after(10.0);
    while (!side[0].tp.peers[1].verified || !side[1].tp.peers[0].verified) {
        assert_int_equal(ib_poll(&side[0].tp), CHORUS_SUCCESS);
        assert_int_equal(ib_poll(&side[1].tp), CHORUS_SUCCESS);
        assert_false(chorus__deadline_passed(deadline));
    }
    side[0].tp.connected = side[1].tp.connected = 1;
}

IBF_FN uint8_t byte_of(int src, int seq, size_t i)
{
    return (uint8_t)(i * 131u + (size_t)seq * 7u + (size_t)src * 29u + (i >> 8));
}

#define NMSG 60

IBF_FN size_t msg_size(int seq)
{
    static const size_t sizes[] = {0, 1, 7, IB_FRAG_PAYLOAD - 1, IB_FRAG_PAYLOAD,
                                   IB_FRAG_PAYLOAD + 1, 3 * IB_FRAG_PAYLOAD, 1u << 20};
    return sizes[seq % 8] + (seq % 8 == 7 ? (size_t)seq : 0);
}

/* Both sides send NMSG messages of mixed sizes to each other, all posted at once, with
 * the receives posted before, after or between the sends; from zcopy_min bytes (0: never)
 * by rendezvous. */
IBF_FN void fifo_both_ways(uint64_t zcopy_min)
{
    static chorus_tp_req_t reqs[4 * NMSG];
    static uint8_t *bufs[4 * NMSG];
    int k = 0;
    side[0].tp.zcopy_min = side[1].tp.zcopy_min = zcopy_min;
    connect_ok();
    for (int seq = 0; seq < NMSG; seq++) {
        for (int r = 0; r < 2; r++) {
            size_t n = msg_size(seq);
            bufs[k] = malloc(n + 1);
            for (size_t i = 0; i < n; i++)
                bufs[k][i] = byte_of(r, seq, i);
            assert_int_equal(ib_isend((chorus_tp_t *)&side[r].tp, r ^ 1, bufs[k], n, &reqs[k]),
                             CHORUS_SUCCESS);
            k++;
            if (seq % 3 == 0) ib_progress((chorus_tp_t *)&side[r].tp);
        }
    }
    for (int seq = 0; seq < NMSG; seq++) {
        for (int r = 0; r < 2; r++) {
            size_t n = msg_size(seq);
            bufs[k] = malloc(n + 1);
            memset(bufs[k], 0xEE, n + 1);
            assert_int_equal(ib_irecv((chorus_tp_t *)&side[r].tp, r ^ 1, bufs[k], n, &reqs[k]),
                             CHORUS_SUCCESS);
            k++;
        }
    }
    assert_int_equal(drive(reqs, k, 0), CHORUS_SUCCESS);
    k = 2 * NMSG;
    for (int seq = 0; seq < NMSG; seq++) {
        for (int r = 0; r < 2; r++) {
            size_t n = msg_size(seq);
            assert_int_equal(reqs[k].status, CHORUS_SUCCESS);
            for (size_t i = 0; i < n; i++) {
                if (bufs[k][i] != byte_of(r ^ 1, seq, i)) {
                    fail_msg("message %d to rank %d: byte %zu is wrong", seq, r, i);
                }
            }
            assert_int_equal(bufs[k][n], 0xEE);
            k++;
        }
    }
    for (int i = 0; i < 4 * NMSG; i++) {
        assert_int_equal(reqs[i].status, CHORUS_SUCCESS);
        free(bufs[i]);
    }
    /* Every fragment was consumed, and credit came back but for less than a batch. */
    for (int r = 0; r < 2; r++) {
        const ib_credit_t *tx = &side[r].tp.peers[r ^ 1].cr, *rx = &side[r ^ 1].tp.peers[r].cr;
        assert_int_equal(rx->rx_next, tx->tx_seq);
        assert_true(tx->tx_seq - tx->tx_limit < IB_CREDIT_BATCH);
        /* Eager: the large ones took several fragments. */
        if (zcopy_min == 0) assert_true(tx->tx_seq > 2 * NMSG);
    }
}

#endif /* CHORUS_TESTS_IB_FAKE_FABRIC_H */
