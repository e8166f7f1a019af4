/*
 * The ib transport's zero-copy rendezvous without a NIC (lib/transport/ib/ib_rndv.c): the
 * path each message takes, the RTS / RTR / FIN formats and their checks against truncated
 * or forged input, the length check on both sides, and a model of one peer pair that
 * interleaves eager and rendezvous messages through the state machine and checks that every
 * receive gets the message posted in its place. The verbs side is tested through fakes by
 * test_ib_data.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "transport/ib/ib.h"

static void test_paths(void **state)
{
    (void)state;
    /* Empty messages synchronise through one fragment, wherever the buffer is. */
    assert_int_equal(ib_rndv_path(0, 1, 1, 1), IB_PATH_EAGER);
    assert_int_equal(ib_rndv_path(1, 1, 0, 0), IB_PATH_RNDV);
    /* A peer may receive into device memory: the sender cannot copy for it. */
    assert_int_equal(ib_rndv_path(1, 0, 1, 0), IB_PATH_RNDV);
    assert_int_equal(ib_rndv_path(1u << 30, 0, 0, 0), IB_PATH_EAGER);
    assert_int_equal(ib_rndv_path((1u << 20) - 1, 0, 0, 1u << 20), IB_PATH_EAGER);
    assert_int_equal(ib_rndv_path(1u << 20, 0, 0, 1u << 20), IB_PATH_RNDV);
    assert_int_equal(ib_rndv_path(5, 0, 0, 1), IB_PATH_RNDV);
}

static void test_round_trips(void **state)
{
    uint8_t b[64];
    ib_rts_t rts = {0x123456789aull, 1}, rts2;
    ib_rtr_t rtr = {0xfffffff0u, IB_RNDV_OK, 0x7f0012345000ull, 1u << 20, 0xabcdef01u}, rtr2;
    ib_fin_t fin = {17, IB_RNDV_LEN, 99}, fin2;
    (void)state;
    ib_rts_encode(&rts, b);
    assert_int_equal(ib_rts_decode(b, IB_RTS_BYTES, 0, 1, &rts2), CHORUS_SUCCESS);
    assert_int_equal(rts2.len, rts.len);
    assert_int_equal(rts2.device, 1);
    ib_rtr_encode(&rtr, b);
    assert_int_equal(ib_rtr_decode(b, IB_RTR_BYTES, 0, 1, &rtr2), CHORUS_SUCCESS);
    assert_int_equal(rtr2.rts_seq, rtr.rts_seq);
    assert_int_equal(rtr2.status, rtr.status);
    assert_int_equal(rtr2.addr, rtr.addr);
    assert_int_equal(rtr2.len, rtr.len);
    assert_int_equal(rtr2.rkey, rtr.rkey);
    ib_fin_encode(&fin, b);
    assert_int_equal(ib_fin_decode(b, IB_FIN_BYTES, 0, 1, &fin2), CHORUS_SUCCESS);
    assert_int_equal(fin2.rts_seq, 17);
    assert_int_equal(fin2.status, IB_RNDV_LEN);
    assert_int_equal(fin2.len, 99);
    /* Little-endian on the wire, whatever the host. */
    assert_int_equal(b[16], 99);
}

static void assert_names(const char *what)
{
    const char *e = chorus_last_error();
    assert_non_null(strstr(e, "rank 3"));
    assert_non_null(strstr(e, "peer 5"));
    assert_non_null(strstr(e, what));
}

static void test_forged_rejected(void **state)
{
    uint8_t b[IB_RTR_BYTES];
    ib_rtr_t rtr = {4, IB_RNDV_OK, 0x1000, 4096, 7}, out;
    ib_rts_t rts = {0, 0}, rts_out;
    ib_fin_t fin = {4, IB_RNDV_OK, 4096}, fin_out;
    (void)state;
    memset(&out, 0x5a, sizeof(out));
    ib_rtr_encode(&rtr, b);
    /* Truncated. */
    assert_int_equal(ib_rtr_decode(b, IB_RTR_BYTES - 1, 3, 5, &out), CHORUS_ERR_REMOTE);
    assert_names("RTR");
    assert_non_null(strstr(chorus_last_error(), "truncated"));
    assert_int_equal(out.rkey, 0x5a5a5a5au); /* untouched */
    assert_int_equal(ib_rtr_decode(NULL, 0, 3, 5, &out), CHORUS_ERR_REMOTE);
    /* Bad magic; an unknown status; an address range that wraps; a null target. */
    b[0] ^= 1;
    assert_int_equal(ib_rtr_decode(b, IB_RTR_BYTES, 3, 5, &out), CHORUS_ERR_REMOTE);
    assert_names("magic");
    rtr.status = 9;
    ib_rtr_encode(&rtr, b);
    assert_int_equal(ib_rtr_decode(b, IB_RTR_BYTES, 3, 5, &out), CHORUS_ERR_REMOTE);
    assert_names("forged");
    rtr.status = IB_RNDV_OK;
    rtr.addr = UINT64_MAX - 100;
    ib_rtr_encode(&rtr, b);
    assert_int_equal(ib_rtr_decode(b, IB_RTR_BYTES, 3, 5, &out), CHORUS_ERR_REMOTE);
    rtr.addr = 0;
    ib_rtr_encode(&rtr, b);
    assert_int_equal(ib_rtr_decode(b, IB_RTR_BYTES, 3, 5, &out), CHORUS_ERR_REMOTE);
    /* A refusal carries no address. */
    rtr.status = IB_RNDV_LEN;
    ib_rtr_encode(&rtr, b);
    assert_int_equal(ib_rtr_decode(b, IB_RTR_BYTES, 3, 5, &out), CHORUS_SUCCESS);
    /* RTS of zero bytes (those are eager), a FIN cut short, a FIN with a strange status. */
    ib_rts_encode(&rts, b);
    assert_int_equal(ib_rts_decode(b, IB_RTS_BYTES, 3, 5, &rts_out), CHORUS_ERR_REMOTE);
    assert_names("RTS");
    ib_fin_encode(&fin, b);
    assert_int_equal(ib_fin_decode(b, IB_FIN_BYTES - 8, 3, 5, &fin_out), CHORUS_ERR_REMOTE);
    assert_names("FIN");
    b[8] = 3;
    assert_int_equal(ib_fin_decode(b, IB_FIN_BYTES, 3, 5, &fin_out), CHORUS_ERR_REMOTE);
}

static void test_lengths(void **state)
{
    ib_rndv_t tx, rx;
    ib_rts_t rts = {1000, 0};
    ib_rtr_t rtr = {42, IB_RNDV_OK, 0x1000, 999, 1};
    ib_fin_t fin = {42, IB_RNDV_LEN, 1000};
    int need_fin = -1;
    (void)state;
    assert_int_equal(ib_rndv_check_len(3, 5, 8, 8), CHORUS_SUCCESS);
    assert_int_equal(ib_rndv_check_len(3, 5, 1000, 999), CHORUS_ERR_MISMATCH);
    assert_names("1000");
    assert_non_null(strstr(chorus_last_error(), "999"));

    /* The receiver sees the lengths differ: it refuses, and so does the sender. */
    ib_rndv_init(&rx, 3, 5);
    assert_int_equal(ib_rndv_rx_rts(&rx, 42, &rts, 999), CHORUS_ERR_MISMATCH);
    assert_int_equal(rx.rx_state, IB_ZRX_IDLE);
    ib_rndv_init(&tx, 3, 5);
    ib_rndv_tx_rts(&tx, 42, 1000);
    rtr.status = IB_RNDV_LEN;
    assert_int_equal(ib_rndv_tx_rtr(&tx, &rtr, &need_fin), CHORUS_ERR_MISMATCH);
    assert_int_equal(need_fin, 0);
    assert_int_equal(tx.tx_state, IB_ZTX_IDLE);

    /* An RTR that accepts a shorter receive (a forged or buggy one): never written past,
     * and the receiver, which waits, hears so through the FIN. */
    ib_rndv_tx_rts(&tx, 42, 1000);
    rtr.status = IB_RNDV_OK;
    assert_int_equal(ib_rndv_tx_rtr(&tx, &rtr, &need_fin), CHORUS_ERR_MISMATCH);
    assert_int_equal(need_fin, 1);
    assert_int_equal(tx.tx_state, IB_ZTX_IDLE);
    rts.len = 999;
    assert_int_equal(ib_rndv_rx_rts(&rx, 42, &rts, 999), CHORUS_SUCCESS);
    assert_int_equal(ib_rndv_rx_fin(&rx, &fin), CHORUS_ERR_MISMATCH);
    assert_names("1000");

    /* Out of place: an RTR for another RTS, with nothing waiting, a FIN for another one. */
    ib_rndv_tx_rts(&tx, 43, 999);
    assert_int_equal(ib_rndv_tx_rtr(&tx, &rtr, &need_fin), CHORUS_ERR_REMOTE);
    assert_names("out of place");
    assert_int_equal(ib_rndv_tx_rtr(&tx, &rtr, &need_fin), CHORUS_ERR_REMOTE);
    assert_int_equal(ib_rndv_rx_rts(&rx, 50, &rts, 999), CHORUS_SUCCESS);
    assert_int_equal(ib_rndv_rx_fin(&rx, &fin), CHORUS_ERR_REMOTE);
    assert_int_equal(rx.rx_state, IB_ZRX_IDLE);
    fin.rts_seq = 50;
    fin.status = IB_RNDV_REG;
    assert_int_equal(ib_rndv_rx_fin(&rx, &fin), CHORUS_ERR_REMOTE); /* not waiting now */
    assert_int_equal(ib_rndv_rx_rts(&rx, 50, &rts, 999), CHORUS_SUCCESS);
    assert_int_equal(ib_rndv_rx_fin(&rx, &fin), CHORUS_ERR_REMOTE);
    assert_names("gave up");
}

static void test_classify(void **state)
{
    ib_rndv_t z;
    (void)state;
    ib_rndv_init(&z, 0, 1);
    /* Control fragments go whatever the receives. */
    assert_int_equal(ib_rndv_rx_classify(&z, IB_FRAG_RTR, 0, 0), IB_RX_CONTROL);
    assert_int_equal(ib_rndv_rx_classify(&z, 1u, 0, 0), IB_RX_WAIT);
    assert_int_equal(ib_rndv_rx_classify(&z, 1u, 1, 0), IB_RX_EAGER);
    assert_int_equal(ib_rndv_rx_classify(&z, 1u | IB_FRAG_RTS, 1, 0), IB_RX_RTS);
    assert_int_equal(ib_rndv_rx_classify(&z, 1u | IB_FRAG_RTS, 1, 1), IB_RX_BAD);
    assert_int_equal(ib_rndv_rx_classify(&z, IB_FRAG_FIN, 1, 0), IB_RX_BAD);
    assert_int_equal(ib_rndv_rx_classify(&z, IB_FRAG_RTS | IB_FRAG_FIN, 1, 0), IB_RX_BAD);
    z.rx_state = IB_ZRX_WAIT_FIN;
    assert_int_equal(ib_rndv_rx_classify(&z, IB_FRAG_FIN, 1, 1), IB_RX_FIN);
    assert_int_equal(ib_rndv_rx_classify(&z, 0, 1, 1), IB_RX_BAD);
    assert_int_equal(ib_rndv_rx_classify(&z, IB_FRAG_RTR, 1, 1), IB_RX_CONTROL);
}

/* ---- A model of one direction of a peer pair ---- */

#define NMSG 200
#define FRAG 10 /* payload bytes of an eager fragment in the model */

typedef struct {
    uint32_t flags, seq;
    uint64_t total;
    int msg; /* which message it belongs to */
    uint8_t body[IB_RTR_BYTES];
    uint32_t len;
} mfrag_t;

static mfrag_t fwd[4 * NMSG * 8], back[NMSG];
static int nfwd, hfwd, nback, hback;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Senders of the model post these; message 55 (54 bytes, rendezvous) is received into a buffer
 * one byte short (both sides must fail it and go on). */
static uint64_t send_len(int m)
{
    return (uint64_t)(m % 7) * 4 + (m % 5 == 0 ? 30 : 0);
}

static uint64_t recv_len(int m)
{
    return send_len(m) - (m == 55 ? 1 : 0);
}

static void test_fifo_interleaved(void **state)
{
    ib_rndv_t tx, rx;
    int sent = 0, tx_off = 0, posted = 0, rdone = 0, sdone = 0;
    int got[NMSG], sres[NMSG];
    uint64_t roff = 0;
    uint32_t seq = 0;
    (void)state;
    ib_rndv_init(&tx, 0, 1);
    ib_rndv_init(&rx, 1, 0);
    for (int i = 0; i < NMSG; i++)
        got[i] = sres[i] = 1;
    for (int step = 0; step < 100000 && (rdone < NMSG || sdone < NMSG); step++) {
        int who = (int)rnd(3);
        if (who == 0 && sent < NMSG) {
            /* Sender: a rendezvous message holds later ones back until its FIN went. */
            uint64_t n = send_len(sent);
            int rndv = ib_rndv_path(n, 0, 0, 12) == IB_PATH_RNDV;
            mfrag_t *f = &fwd[nfwd];
            memset(f, 0, sizeof(*f));
            f->msg = sent;
            f->total = n;
            f->seq = seq;
            if (!rndv) {
                uint64_t left = n - (uint64_t)tx_off;
                f->len = left < FRAG ? (uint32_t)left : FRAG;
                f->flags = tx_off == 0 ? 1u : 0u;
                tx_off += (int)f->len;
                nfwd++, seq++;
                if ((uint64_t)tx_off == n) sres[sent++] = 0, sdone++, tx_off = 0;
            } else if (tx_off == 0) {
                ib_rts_t rts = {n, 0};
                ib_rts_encode(&rts, f->body);
                f->len = IB_RTS_BYTES;
                f->flags = 1u | IB_FRAG_RTS;
                ib_rndv_tx_rts(&tx, seq, n);
                nfwd++, seq++;
                tx_off = 1; /* waiting for the RTR */
            } else if (hback < nback) {
                ib_rtr_t rtr;
                ib_fin_t fin;
                int need_fin;
                assert_int_equal(ib_rtr_decode(back[hback].body, back[hback].len, 0, 1, &rtr),
                                 CHORUS_SUCCESS);
                hback++;
                chorus_status_t st = ib_rndv_tx_rtr(&tx, &rtr, &need_fin);
                sres[sent] = st;
                if (st == CHORUS_SUCCESS || need_fin) {
                    fin.rts_seq = tx.tx_seq;
                    fin.status = st == CHORUS_SUCCESS ? IB_RNDV_OK : IB_RNDV_LEN;
                    fin.len = n;
                    ib_fin_encode(&fin, f->body);
                    f->len = IB_FIN_BYTES;
                    f->flags = IB_FRAG_FIN;
                    nfwd++, seq++;
                }
                ib_rndv_tx_done(&tx);
                sent++, sdone++, tx_off = 0;
            }
        } else if (who == 1 && posted < NMSG) {
            posted += 1 + (int)rnd(3);
            if (posted > NMSG) posted = NMSG;
        } else if (hfwd < nfwd) {
            /* Receiver: the head of the stream, in order. */
            mfrag_t *f = &fwd[hfwd];
            int have = rdone < posted;
            ib_rx_action_t a = ib_rndv_rx_classify(&rx, f->flags, have, roff > 0);
            assert_int_not_equal(a, IB_RX_BAD);
            assert_int_not_equal(a, IB_RX_CONTROL);
            if (a == IB_RX_WAIT) continue;
            assert_int_equal(f->msg, rdone); /* the receive in its place gets it */
            if (a == IB_RX_EAGER) {
                assert_int_equal(f->total, recv_len(rdone));
                roff += f->len;
                if (roff == f->total) got[rdone++] = 0, roff = 0;
            } else if (a == IB_RX_RTS) {
                ib_rts_t rts;
                ib_rtr_t rtr = {f->seq, IB_RNDV_OK, 0x1000, recv_len(rdone), 9};
                assert_int_equal(ib_rts_decode(f->body, f->len, 1, 0, &rts), CHORUS_SUCCESS);
                chorus_status_t st = ib_rndv_rx_rts(&rx, f->seq, &rts, recv_len(rdone));
                if (st != CHORUS_SUCCESS) {
                    rtr.status = IB_RNDV_LEN;
                    got[rdone++] = st;
                }
                memset(&back[nback], 0, sizeof(back[0]));
                ib_rtr_encode(&rtr, back[nback].body);
                back[nback++].len = IB_RTR_BYTES;
            } else {
                ib_fin_t fin;
                assert_int_equal(ib_fin_decode(f->body, f->len, 1, 0, &fin), CHORUS_SUCCESS);
                got[rdone++] = ib_rndv_rx_fin(&rx, &fin);
            }
            hfwd++;
        }
    }
    assert_int_equal(rdone, NMSG);
    assert_int_equal(sdone, NMSG);
    assert_int_equal(hfwd, nfwd);
    for (int m = 0; m < NMSG; m++) {
        int want = m == 55 ? CHORUS_ERR_MISMATCH : CHORUS_SUCCESS;
        assert_int_equal(got[m], want);
        assert_int_equal(sres[m], want);
    }
    /* Both paths were taken, many times. */
    assert_true(nback > NMSG / 4);
    assert_true(nfwd > nback * 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),          cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_forged_rejected), cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_classify),       cmocka_unit_test(test_fifo_interleaved),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
