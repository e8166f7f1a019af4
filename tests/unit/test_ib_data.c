/*
 * The ib transport's eager data path (lib/transport/ib/ib_tp_data.c) over the fake verbs
 * fabric of ib_fake_fabric.h: messages of mixed sizes both ways through the slots, credit
 * returned when traffic flows one way only, a receive of the wrong length that keeps the
 * stream in step, a peer without the secret, and a peer that dies. The zero-copy
 * rendezvous and GPUDirect are in test_ib_zcopy.c.
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

#include "unit/ib_fake_fabric.h"

static void test_fifo_both_ways(void **state)
{
    (void)state;
    fifo_both_ways(0);
    assert_int_equal(zwritten, 0);
}

/* A receive of another length fails with CHORUS_ERR_MISMATCH, the message's fragments are
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
    assert_int_equal(reqs[2].status, CHORUS_ERR_MISMATCH);
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
