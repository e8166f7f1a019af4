/*
 * Credit-based flow control for RDMA WRITE with immediate into pre-registered slots. A
 * write needs no receive buffer posted by the application, so the only thing stopping a
 * sender from overwriting a slot the receiver has not read yet is this bookkeeping: the
 * sender may write sequence s (into slot s % nslots) only while s - consumed < nslots,
 * where `consumed` is the receiver's cumulative credit. All counters are 32-bit and
 * compared by signed difference, so they wrap freely; the immediate carries 31 bits and
 * the full value is rebuilt from the one expected, which is exact because every valid
 * value lies within nslots (<= 1024) of it.
 */
#include "transport/ib/ib.h"

#include <string.h>

static int32_t diff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}

void ib_credit_init(ib_credit_t *c, uint32_t nslots, uint32_t batch, uint32_t start)
{
    uint32_t max_batch;

    memset(c, 0, sizeof(*c));
    if (nslots < 1) nslots = 1;
    if (nslots > IB_CREDIT_MAX_SLOTS) nslots = IB_CREDIT_MAX_SLOTS;
    /* A power of two, so that seq % nslots stays continuous when seq wraps at 2^32. */
    while ((nslots & (nslots - 1)) != 0) nslots &= nslots - 1;
    max_batch = nslots / 2 > 0 ? nslots / 2 : 1;
    c->nslots = nslots;
    c->batch = batch < 1 ? 1 : (batch > max_batch ? max_batch : batch);
    c->tx_seq = c->tx_limit = start;
    c->rx_next = c->rx_returned = start;
}

int ib_credit_tx_reserve(ib_credit_t *c, uint32_t *seq_p, uint32_t *slot_p)
{
    if ((uint32_t)diff(c->tx_seq, c->tx_limit) >= c->nslots) return 0;
    *seq_p = c->tx_seq;
    *slot_p = c->tx_seq % c->nslots;
    c->tx_seq++;
    return 1;
}

int ib_credit_tx_update(ib_credit_t *c, uint32_t consumed)
{
    if (diff(consumed, c->tx_seq) > 0) return -1;
    if (diff(consumed, c->tx_limit) <= 0) return 0;
    c->tx_limit = consumed;
    return 1;
}

int ib_credit_tx_update_imm(ib_credit_t *c, uint32_t imm)
{
    /* Credits are never behind tx_limit by more than they can be ahead of it, so rebuild
     * around tx_limit, then let tx_update judge the value. */
    uint32_t delta = (imm - c->tx_limit) & IB_IMM_MASK;
    uint32_t full = c->tx_limit + delta;

    if (delta > IB_IMM_MASK / 2) full = c->tx_limit - ((c->tx_limit - imm) & IB_IMM_MASK);
    return ib_credit_tx_update(c, full);
}

int ib_credit_rx_arrive(ib_credit_t *c, uint32_t imm_seq, uint32_t *seq_p, uint32_t *slot_p)
{
    uint32_t delta = (imm_seq - c->rx_next) & IB_IMM_MASK;
    uint32_t seq = c->rx_next + delta, slot;

    /* Valid sequences lie in [rx_next, rx_next + nslots): the sender held credit for
     * exactly those. Anything else overwrote a slot we still own. */
    if (delta >= c->nslots) return -1;
    slot = seq % c->nslots;
    if (c->arrived[slot]) return -1;
    c->arrived[slot] = 1;
    *seq_p = seq;
    *slot_p = slot;
    return 0;
}

int ib_credit_rx_peek(const ib_credit_t *c, uint32_t *slot_p)
{
    uint32_t slot = c->rx_next % c->nslots;

    if (!c->arrived[slot]) return 0;
    *slot_p = slot;
    return 1;
}

void ib_credit_rx_consume(ib_credit_t *c)
{
    c->arrived[c->rx_next % c->nslots] = 0;
    c->rx_next++;
}

int ib_credit_rx_owed(const ib_credit_t *c)
{
    return (uint32_t)diff(c->rx_next, c->rx_returned) >= c->batch;
}

uint32_t ib_credit_rx_take(ib_credit_t *c)
{
    c->rx_returned = c->rx_next;
    return c->rx_next;
}
