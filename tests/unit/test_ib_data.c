/*
 * The ib transport's data path (lib/transport/ib/ib_tp_data.c) without a NIC: two
 * instances in one process whose queue pairs and completion queue are fakes behind the
 * verbs ops table (ibv_post_send, ibv_post_recv and ibv_poll_cq are inline calls through
 * it). The fake fabric does what RC does for RDMA WRITE with immediate: it copies the
 * bytes into the peer's memory after checking the rkey and bounds, consumes one posted
 * receive there (or holds the write back, as an RNR retry would), keeps each QP's writes
 * in order but delivers them late, and completes both sides. Setup (device, QP states,
 * registration) needs the real library and is left to tests/hw/ib.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#ifdef CHORUS_HAVE_IBV

#include "transport/ib/ib_verbs.h"
#include "util/clock.h"

#include <arpa/inet.h>

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

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void push_cqe(fake_cq_t *cq, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op,
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

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    (void)bad;
    for (; wr != NULL; wr = wr->next) {
        wire_item_t *w;
        assert_int_equal(wr->opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
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

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
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
static int land(int i)
{
    wire_item_t *w = &wire[i];
    fake_qp_t *dst = w->src->peer;
    uint32_t imm = ntohl(w->wr.imm_data);
    if (dst->dead) {
        push_cqe(w->src->cq, w->wr.wr_id, IBV_WC_RETRY_EXC_ERR, IBV_WC_RDMA_WRITE, 0);
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

static void ack(int i)
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
static void fabric_step(void)
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

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
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

static int fake_req_notify(struct ibv_cq *cq, int solicited)
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

static void make_side(int r, uint64_t comm_id)
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
}

/* What connect_all does after the QP state changes, then the hello exchange. */
static void connect_sides(void)
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

static int setup(void **state)
{
    (void)state;
    fake_ctx.ops.poll_cq = fake_poll_cq;
    fake_ctx.ops.req_notify_cq = fake_req_notify;
    fake_ctx.ops.post_send = fake_post_send;
    fake_ctx.ops.post_recv = fake_post_recv;
    nwire = nacks = 0;
    assert_int_equal(chorus__random_bytes(secrets[0], CHORUS_SECRET_BYTES), CHORUS_SUCCESS);
    memcpy(secrets[1], secrets[0], CHORUS_SECRET_BYTES);
    make_side(0, 77);
    make_side(1, 77);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    while (nacks > 0) {
        free(acks[nacks - 1].copy);
        nacks--;
    }
    for (int r = 0; r < 2; r++) {
        ib_fail_all(&side[r].tp, CHORUS_ERR_REMOTE, "closed");
        free(side[r].tp.rx_buf);
        free(side[r].tp.tx_buf);
        free(side[r].tp.peers);
    }
    nwire = 0;
    return 0;
}

/* Runs both sides until every request is done (or 10 s pass); returns the first error
 * progress() reported on side r_err (or success). */
static chorus_status_t drive(chorus_tp_req_t *reqs, int n, int r_err)
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

static void connect_ok(void)
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

static uint8_t byte_of(int src, int seq, size_t i)
{
    return (uint8_t)(i * 131u + (size_t)seq * 7u + (size_t)src * 29u + (i >> 8));
}

#define NMSG 60

static size_t msg_size(int seq)
{
    static const size_t sizes[] = {0, 1, 7, IB_FRAG_PAYLOAD - 1, IB_FRAG_PAYLOAD,
                                   IB_FRAG_PAYLOAD + 1, 3 * IB_FRAG_PAYLOAD, 1u << 20};
    return sizes[seq % 8] + (seq % 8 == 7 ? (size_t)seq : 0);
}

/* Both sides send NMSG messages of mixed sizes to each other, all posted at once, with
 * the receives posted before, after or between the sends. */
static void test_fifo_both_ways(void **state)
{
    static chorus_tp_req_t reqs[4 * NMSG];
    static uint8_t *bufs[4 * NMSG];
    int k = 0;
    (void)state;
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
        assert_true(tx->tx_seq > 2 * NMSG); /* the large ones took several fragments */
    }
}

/* A receive of another length fails with CHORUS_ERR_REMOTE, the message's fragments are
 * skipped, and the next message arrives intact. */
static void test_mismatch_keeps_step(void **state)
{
    chorus_tp_req_t reqs[4];
    size_t big = 2 * IB_FRAG_PAYLOAD + 5;
    uint8_t *out = malloc(big), *in = malloc(big), small[16];
    (void)state;
    connect_ok();
    memset(out, 0x5A, big);
    memset(small, 0xEE, sizeof(small));
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, out, big, &reqs[0]), CHORUS_SUCCESS);
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, out, 9, &reqs[1]), CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, small, 8, &reqs[2]), CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, in, 9, &reqs[3]), CHORUS_SUCCESS);
    drive(reqs, 4, 1);
    assert_int_equal(reqs[2].status, CHORUS_ERR_REMOTE);
    assert_int_equal(small[8], 0xEE);
    assert_int_equal(reqs[3].status, CHORUS_SUCCESS);
    assert_int_equal(in[0], 0x5A);
    assert_int_equal(in[8], 0x5A);
    free(out);
    free(in);
}

/* Traffic one way only: nothing carries credit back, so explicit credit writes must. */
static void test_one_way_credit(void **state)
{
    const size_t n = 40 * IB_FRAG_PAYLOAD + 3;
    uint8_t *out = malloc(n), *in = malloc(n);
    chorus_tp_req_t reqs[2];
    (void)state;
    connect_ok();
    for (size_t i = 0; i < n; i++)
        out[i] = byte_of(0, 1, i);
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, out, n, &reqs[0]), CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, in, n, &reqs[1]), CHORUS_SUCCESS);
    assert_int_equal(drive(reqs, 2, 1), CHORUS_SUCCESS);
    assert_int_equal(reqs[1].status, CHORUS_SUCCESS);
    assert_memory_equal(in, out, n);
    free(out);
    free(in);
}

/* A peer that does not know the secret: its hello is refused, nothing of it is taken. */
static void test_wrong_secret(void **state)
{
    (void)state;
    side[1].tp.secret[3] ^= 1;
    connect_sides();
    for (int i = 0; i < 200 && side[0].tp.peers[1].failed == CHORUS_SUCCESS; i++) {
        ib_poll(&side[0].tp);
        ib_poll(&side[1].tp);
    }
    assert_int_equal(side[0].tp.peers[1].failed, CHORUS_ERR_AUTH);
    assert_int_equal(side[0].tp.peers[1].verified, 0);
    assert_int_equal(side[1].tp.peers[0].failed, CHORUS_ERR_AUTH);
    assert_non_null(strstr(side[0].tp.peers[1].why, "secret"));
}

/* The peer dies while we wait for it: the liveness write fails, the receive completes
 * with CHORUS_ERR_REMOTE, progress() says so, and later requests fail at once. */
static void test_peer_death(void **state)
{
    chorus_tp_req_t req;
    uint8_t b[4];
    (void)state;
    connect_ok();
    side[1].qp.dead = 1;
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[0].tp, 1, b, 4, &req), CHORUS_SUCCESS);
    uint64_t deadline = chorus__deadline_after(5.0);
    chorus_status_t st = CHORUS_SUCCESS;
    while (!req.done) {
        chorus_status_t s = ib_progress((chorus_tp_t *)&side[0].tp);
        if (st == CHORUS_SUCCESS) st = s;
        assert_false(chorus__deadline_passed(deadline));
    }
    assert_int_equal(req.status, CHORUS_ERR_REMOTE);
    if (st == CHORUS_SUCCESS) st = ib_progress((chorus_tp_t *)&side[0].tp);
    assert_int_equal(st, CHORUS_ERR_REMOTE);
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, b, 4, &req), CHORUS_SUCCESS);
    assert_true(req.done);
    assert_int_equal(req.status, CHORUS_ERR_REMOTE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fifo_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mismatch_keeps_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_way_credit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_secret, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_death, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

static void test_no_verbs(void **state)
{
    (void)state;
    printf("skipped: built without libibverbs-dev (the data path needs its types)\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_verbs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
