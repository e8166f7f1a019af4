/*
 * Credit-based flow control (lib/transport/ib/ib_credit.c): the unit rules, then a
 * simulation of two ranks exchanging many fragments both ways over a "network" that
 * delivers writes and credits in random order and late, checking that no slot is written
 * while it holds an unconsumed fragment and that fragments are consumed in FIFO order.
 */
#include "transport/ib/ib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_window(void **state)
{
    ib_credit_t c;
    uint32_t seq, slot;
    (void)state;
    ib_credit_init(&c, 4, 2, 100);
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(ib_credit_tx_reserve(&c, &seq, &slot), 1);
        assert_int_equal(seq, 100 + i);
        assert_int_equal(slot, (100 + i) % 4);
    }
    assert_int_equal(ib_credit_tx_reserve(&c, &seq, &slot), 0); /* out of credit */
    assert_int_equal(ib_credit_tx_update(&c, 102), 1);
    assert_int_equal(ib_credit_tx_update(&c, 101), 0); /* stale */
    assert_int_equal(ib_credit_tx_update(&c, 105), -1); /* credits what was never sent */
    assert_int_equal(ib_credit_tx_reserve(&c, &seq, &slot), 1);
    assert_int_equal(seq, 104);
    assert_int_equal(ib_credit_tx_reserve(&c, &seq, &slot), 1);
    assert_int_equal(ib_credit_tx_reserve(&c, &seq, &slot), 0);
}

static void test_clamps(void **state)
{
    ib_credit_t c;
    (void)state;
    ib_credit_init(&c, 6, 100, 0); /* 6 -> 4 slots, batch <= 2 */
    assert_int_equal(c.nslots, 4);
    assert_int_equal(c.batch, 2);
    ib_credit_init(&c, 0, 0, 0);
    assert_int_equal(c.nslots, 1);
    assert_int_equal(c.batch, 1);
    ib_credit_init(&c, 100000, 8, 0);
    assert_int_equal(c.nslots, IB_CREDIT_MAX_SLOTS);
}

static void test_receiver_rules(void **state)
{
    ib_credit_t c;
    uint32_t seq, slot;
    (void)state;
    ib_credit_init(&c, 4, 2, 0xfffffffeu);
    assert_int_equal(ib_credit_rx_peek(&c, &slot), 0);
    /* Out of order inside the window is fine; consumption stays in order. */
    assert_int_equal(ib_credit_rx_arrive(&c, 0xffffffffu & IB_IMM_MASK, &seq, &slot), 0);
    assert_int_equal(seq, 0xffffffffu);
    assert_int_equal(ib_credit_rx_peek(&c, &slot), 0);
    assert_int_equal(ib_credit_rx_arrive(&c, 0xfffffffeu & IB_IMM_MASK, &seq, &slot), 0);
    assert_int_equal(seq, 0xfffffffeu);
    assert_int_equal(ib_credit_rx_arrive(&c, 0xfffffffeu & IB_IMM_MASK, &seq, &slot), -1);
    assert_int_equal(ib_credit_rx_peek(&c, &slot), 1);
    assert_int_equal(slot, 0xfffffffeu % 4);
    ib_credit_rx_consume(&c);
    assert_int_equal(ib_credit_rx_owed(&c), 0);
    assert_int_equal(ib_credit_rx_peek(&c, &slot), 1);
    ib_credit_rx_consume(&c);
    assert_int_equal(ib_credit_rx_owed(&c), 1);
    assert_int_equal(ib_credit_rx_take(&c), 0u); /* wrapped */
    assert_int_equal(ib_credit_rx_owed(&c), 0);
    /* Sequence 4 is beyond the window [0, 4): the sender had no credit for it. */
    assert_int_equal(ib_credit_rx_arrive(&c, 4, &seq, &slot), -1);
    assert_int_equal(ib_credit_rx_arrive(&c, 3, &seq, &slot), 0);
    assert_int_equal(seq, 3);
}

static void test_imm_credit_wrap(void **state)
{
    ib_credit_t c;
    uint32_t seq, slot;
    (void)state;
    ib_credit_init(&c, 8, 4, 0x7ffffffcu); /* the 31-bit immediate wraps here */
    for (int i = 0; i < 8; i++)
        assert_int_equal(ib_credit_tx_reserve(&c, &seq, &slot), 1);
    assert_int_equal(ib_credit_tx_update_imm(&c, (0x7ffffffcu + 6) & IB_IMM_MASK), 1);
    assert_int_equal(c.tx_limit, 0x80000002u);
    assert_int_equal(ib_credit_tx_update_imm(&c, (0x7ffffffcu + 3) & IB_IMM_MASK), 0);
    assert_int_equal(c.tx_limit, 0x80000002u);
    assert_int_equal(ib_credit_tx_update_imm(&c, (0x7ffffffcu + 9) & IB_IMM_MASK), -1);
}

/* ---- The simulation ---- */

#define SIM_SLOTS 8
#define SIM_MSGS 200000
#define SIM_INFLIGHT 64

typedef struct {
    int credit_only;
    uint32_t imm;    /* what the immediate carries */
    uint32_t credit; /* data: the piggy-backed cumulative credit (full 32 bits) */
    uint32_t payload;
} sim_pkt_t;

typedef struct {
    ib_credit_t c;
    /* What the peer wrote into our slots, as the memory would hold it. */
    uint32_t slot_payload[SIM_SLOTS];
    int slot_full[SIM_SLOTS]; /* written and not consumed yet */
    uint32_t sent, consumed;  /* payload counters: the payload is the message number */
    sim_pkt_t net[SIM_INFLIGHT]; /* in flight towards the peer */
    int nnet;
} sim_side_t;

static uint64_t rng_state = 0x1234567887654321ull;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Side s sends one fragment if it holds credit (and the network has room). */
static void sim_send(sim_side_t *s, sim_side_t *peer)
{
    uint32_t seq, slot;
    if (s->sent == SIM_MSGS || s->nnet == SIM_INFLIGHT) return;
    if (!ib_credit_tx_reserve(&s->c, &seq, &slot)) return;
    /* The write lands in the peer's memory when delivered; check the slot then. */
    sim_pkt_t *p = &s->net[s->nnet++];
    p->credit_only = 0;
    p->imm = seq & IB_IMM_MASK;
    p->credit = ib_credit_rx_take(&s->c); /* piggy-backed */
    p->payload = s->sent++;
    assert_int_equal(slot, seq % SIM_SLOTS);
    (void)peer;
}

static void sim_send_credit(sim_side_t *s)
{
    if (!ib_credit_rx_owed(&s->c) || s->nnet == SIM_INFLIGHT) return;
    sim_pkt_t *p = &s->net[s->nnet++];
    p->credit_only = 1;
    p->imm = IB_IMM_CREDIT | (ib_credit_rx_take(&s->c) & IB_IMM_MASK);
}

/* Delivers a random packet of s's network queue to peer. */
static void sim_deliver(sim_side_t *s, sim_side_t *peer)
{
    if (s->nnet == 0) return;
    uint32_t k = rnd((uint32_t)s->nnet);
    sim_pkt_t p = s->net[k];
    s->net[k] = s->net[--s->nnet];
    if (p.credit_only) {
        assert_true(p.imm & IB_IMM_CREDIT);
        assert_true(ib_credit_tx_update_imm(&peer->c, p.imm & IB_IMM_MASK) >= 0);
        return;
    }
    uint32_t seq, slot;
    assert_int_equal(ib_credit_rx_arrive(&peer->c, p.imm, &seq, &slot), 0);
    /* The heart of it: the slot must not hold a fragment not yet consumed. */
    assert_false(peer->slot_full[slot]);
    peer->slot_full[slot] = 1;
    peer->slot_payload[slot] = p.payload;
    assert_true(ib_credit_tx_update(&peer->c, p.credit) >= 0);
}

/* Consumes what has arrived, in order, checking FIFO. */
static void sim_consume(sim_side_t *s)
{
    uint32_t slot;
    int n = (int)rnd(4);
    while (n-- > 0 && ib_credit_rx_peek(&s->c, &slot)) {
        assert_true(s->slot_full[slot]);
        assert_int_equal(s->slot_payload[slot], s->consumed);
        s->slot_full[slot] = 0;
        s->consumed++;
        ib_credit_rx_consume(&s->c);
    }
}

static void run_sim(uint32_t start, uint32_t batch)
{
    static sim_side_t side[2];
    uint64_t steps = 0;
    memset(side, 0, sizeof(side));
    ib_credit_init(&side[0].c, SIM_SLOTS, batch, start);
    ib_credit_init(&side[1].c, SIM_SLOTS, batch, start);
    while (side[0].consumed < SIM_MSGS || side[1].consumed < SIM_MSGS) {
        int a = (int)rnd(2);
        sim_side_t *s = &side[a], *peer = &side[a ^ 1];
        switch (rnd(5)) {
        case 0: sim_send(s, peer); break;
        case 1: sim_send_credit(s); break;
        case 2: case 3: sim_deliver(s, peer); break;
        default: sim_consume(s); break;
        }
        assert_true(++steps < 100ull * SIM_MSGS); /* no deadlock */
    }
    assert_int_equal(side[0].sent, SIM_MSGS);
    assert_int_equal(side[1].sent, SIM_MSGS);
}

static void test_sim(void **state)
{
    (void)state;
    run_sim(0, 2);
    run_sim(0xffffff00u, 4);     /* 32-bit wrap */
    run_sim(0x7fffff80u, 1);     /* 31-bit immediate wrap */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_clamps),
        cmocka_unit_test(test_receiver_rules),
        cmocka_unit_test(test_imm_credit_wrap),
        cmocka_unit_test(test_sim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
