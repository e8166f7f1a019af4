/*
 * The zero-copy rendezvous of the ib transport without verbs (ib.h says how it goes): which
 * path a message takes, the RTS / RTR / FIN formats, the length check, and the per-peer
 * state that keeps rendezvous and eager messages in their posted order. ib_tp_zc.c does the
 * verbs side. Formats are packed little-endian by hand, so a peer's bytes are never read
 * through a struct whose layout the compiler chose; every decoder checks the size first.
 */
#include "transport/ib/ib.h"

#include <string.h>

#define RTS_MAGIC 0x53545243u /* "CRTS" */
#define RTR_MAGIC 0x52545243u /* "CRTR" */
#define FIN_MAGIC 0x4e494643u /* "CFIN" */

ib_path_t ib_rndv_path(uint64_t bytes, int buf_is_device, int peer_may_be_device,
                       uint64_t zcopy_min)
{
    if (bytes == 0) return IB_PATH_EAGER;
    if (buf_is_device || peer_may_be_device) return IB_PATH_RNDV;
    return zcopy_min > 0 && bytes >= zcopy_min ? IB_PATH_RNDV : IB_PATH_EAGER;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

void ib_rts_encode(const ib_rts_t *m, uint8_t out[IB_RTS_BYTES])
{
    put32(out, RTS_MAGIC);
    put32(out + 4, m->device);
    put64(out + 8, m->len);
}

void ib_rtr_encode(const ib_rtr_t *m, uint8_t out[IB_RTR_BYTES])
{
    put32(out, RTR_MAGIC);
    put32(out + 4, m->rts_seq);
    put32(out + 8, m->status);
    put32(out + 12, m->rkey);
    put64(out + 16, m->addr);
    put64(out + 24, m->len);
    put64(out + 32, 0);
}

void ib_fin_encode(const ib_fin_t *m, uint8_t out[IB_FIN_BYTES])
{
    put32(out, FIN_MAGIC);
    put32(out + 4, m->rts_seq);
    put32(out + 8, m->status);
    put32(out + 12, 0);
    put64(out + 16, m->len);
}

/* The checks common to the three formats: size and magic. */
static chorus_status_t check_frame(const uint8_t *in, size_t n, size_t want, uint32_t magic,
                                   int rank, int peer, const char *what)
{
    if (in == NULL || n != want) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d sent a %s of %zu bytes (a %s has %zu): "
                             "truncated or forged",
                             rank, peer, what, in == NULL ? (size_t)0 : n, what, want);
    }
    if (get32(in) != magic) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d sent a %s with a bad magic (0x%08x)", rank, peer,
                             what, get32(in));
    }
    return CHORUS_SUCCESS;
}

chorus_status_t ib_rts_decode(const uint8_t *in, size_t n, int rank, int peer, ib_rts_t *m_p)
{
    chorus_status_t status = check_frame(in, n, IB_RTS_BYTES, RTS_MAGIC, rank, peer, "RTS");

    if (status != CHORUS_SUCCESS) return status;
    if (get32(in + 4) > 1 || get64(in + 8) == 0) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d sent an RTS for %llu bytes (flags %u): forged",
                             rank, peer, (unsigned long long)get64(in + 8), get32(in + 4));
    }
    m_p->device = get32(in + 4);
    m_p->len = get64(in + 8);
    return CHORUS_SUCCESS;
}

chorus_status_t ib_rtr_decode(const uint8_t *in, size_t n, int rank, int peer, ib_rtr_t *m_p)
{
    chorus_status_t status = check_frame(in, n, IB_RTR_BYTES, RTR_MAGIC, rank, peer, "RTR");
    ib_rtr_t m;

    if (status != CHORUS_SUCCESS) return status;
    m.rts_seq = get32(in + 4);
    m.status = get32(in + 8);
    m.rkey = get32(in + 12);
    m.addr = get64(in + 16);
    m.len = get64(in + 24);
    if (m.status > IB_RNDV_REG || get64(in + 32) != 0 ||
        (m.status == IB_RNDV_OK && (m.addr == 0 || m.addr + m.len < m.addr))) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d sent an RTR with status %u for %llu bytes at "
                             "0x%llx: forged",
                             rank, peer, m.status, (unsigned long long)m.len,
                             (unsigned long long)m.addr);
    }
    *m_p = m;
    return CHORUS_SUCCESS;
}

chorus_status_t ib_fin_decode(const uint8_t *in, size_t n, int rank, int peer, ib_fin_t *m_p)
{
    chorus_status_t status = check_frame(in, n, IB_FIN_BYTES, FIN_MAGIC, rank, peer, "FIN");

    if (status != CHORUS_SUCCESS) return status;
    if (get32(in + 8) > IB_RNDV_REG || get32(in + 12) != 0) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d sent a FIN with status %u: forged", rank, peer,
                             get32(in + 8));
    }
    m_p->rts_seq = get32(in + 4);
    m_p->status = get32(in + 8);
    m_p->len = get64(in + 16);
    return CHORUS_SUCCESS;
}

chorus_status_t ib_rndv_check_len(int rank, int peer, uint64_t send_len, uint64_t recv_len)
{
    if (send_len == recv_len) return CHORUS_SUCCESS;
    return chorus__error(CHORUS_ERR_MISMATCH,
                         "rank %d: ib: peer %d: rendezvous message of %llu bytes, the receive "
                         "has %llu",
                         rank, peer, (unsigned long long)send_len, (unsigned long long)recv_len);
}

void ib_rndv_init(ib_rndv_t *z, int rank, int peer)
{
    memset(z, 0, sizeof(*z));
    z->rank = rank;
    z->peer = peer;
}

void ib_rndv_tx_rts(ib_rndv_t *z, uint32_t seq, uint64_t len)
{
    z->tx_state = IB_ZTX_WAIT_RTR;
    z->tx_seq = seq;
    z->tx_len = len;
}

chorus_status_t ib_rndv_tx_rtr(ib_rndv_t *z, const ib_rtr_t *rtr, int *fin_p)
{
    *fin_p = 0;
    if (z->tx_state != IB_ZTX_WAIT_RTR || rtr->rts_seq != z->tx_seq) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d sent an RTR for fragment %u, %s %u: out of "
                             "place",
                             z->rank, z->peer, rtr->rts_seq,
                             z->tx_state == IB_ZTX_WAIT_RTR ? "the RTS waiting is" : "no RTS waits; last",
                             z->tx_seq);
    }
    z->tx_state = IB_ZTX_IDLE;
    if (rtr->status == IB_RNDV_LEN) return ib_rndv_check_len(z->rank, z->peer, z->tx_len, rtr->len);
    if (rtr->status == IB_RNDV_REG) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d could not register its %llu-byte receive for "
                             "the rendezvous (its log says why)",
                             z->rank, z->peer, (unsigned long long)rtr->len);
    }
    if (rtr->len != z->tx_len) {
        /* The receiver accepted: it waits for a FIN, which must say we gave up. */
        *fin_p = 1;
        return ib_rndv_check_len(z->rank, z->peer, z->tx_len, rtr->len);
    }
    z->rtr = *rtr;
    z->tx_state = IB_ZTX_WRITE;
    return CHORUS_SUCCESS;
}

void ib_rndv_tx_done(ib_rndv_t *z)
{
    z->tx_state = IB_ZTX_IDLE;
}

ib_rx_action_t ib_rndv_rx_classify(const ib_rndv_t *z, uint32_t flags, int have_recv,
                                   int recv_started)
{
    uint32_t kinds = flags & (IB_FRAG_RTS | IB_FRAG_RTR | IB_FRAG_FIN);

    if (kinds == IB_FRAG_RTR) return IB_RX_CONTROL;
    if (kinds != 0 && kinds != IB_FRAG_RTS && kinds != IB_FRAG_FIN) return IB_RX_BAD;
    /* The sender holds later messages back until its FIN: nothing else may come between. */
    if (z->rx_state == IB_ZRX_WAIT_FIN) return kinds == IB_FRAG_FIN ? IB_RX_FIN : IB_RX_BAD;
    if (kinds == IB_FRAG_FIN) return IB_RX_BAD;
    if (!have_recv) return IB_RX_WAIT;
    if (kinds == IB_FRAG_RTS) return recv_started ? IB_RX_BAD : IB_RX_RTS;
    return IB_RX_EAGER;
}

chorus_status_t ib_rndv_rx_rts(ib_rndv_t *z, uint32_t seq, const ib_rts_t *rts, uint64_t recv_len)
{
    chorus_status_t status = ib_rndv_check_len(z->rank, z->peer, rts->len, recv_len);

    z->rx_seq = seq;
    z->rx_len = recv_len;
    if (status != CHORUS_SUCCESS) return status;
    z->rx_state = IB_ZRX_WAIT_FIN;
    return CHORUS_SUCCESS;
}

void ib_rndv_rx_abort(ib_rndv_t *z)
{
    z->rx_state = IB_ZRX_IDLE;
}

chorus_status_t ib_rndv_rx_fin(ib_rndv_t *z, const ib_fin_t *fin)
{
    int waiting = z->rx_state == IB_ZRX_WAIT_FIN;

    z->rx_state = IB_ZRX_IDLE;
    if (!waiting || fin->rts_seq != z->rx_seq) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d sent a FIN for fragment %u, the receive waits "
                             "for %u: out of place",
                             z->rank, z->peer, fin->rts_seq, z->rx_seq);
    }
    if (fin->status == IB_RNDV_LEN) return ib_rndv_check_len(z->rank, z->peer, fin->len, z->rx_len);
    if (fin->status != IB_RNDV_OK) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d gave up its rendezvous send of %llu bytes "
                             "(could not register its buffer: its log says why)",
                             z->rank, z->peer, (unsigned long long)z->rx_len);
    }
    if (fin->len != z->rx_len) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: ib: peer %d sent a FIN for %llu bytes, the receive has "
                             "%llu: forged",
                             z->rank, z->peer, (unsigned long long)fin->len,
                             (unsigned long long)z->rx_len);
    }
    return CHORUS_SUCCESS;
}
