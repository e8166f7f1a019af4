/*
 * The ib transport's zero-copy rendezvous (RTS, RTR with address and rkey, RDMA WRITEs,
 * FIN) and GPUDirect RDMA (device memory registered through a dma-buf) over the fake verbs
 * fabric of ib_fake_fabric.h: rendezvous and eager messages interleaved both ways, a
 * rendezvous into a receive too short, sends between device and host buffers, dma-buf
 * export or registration refused, and an eager message into device memory refused. The
 * eager path, credit and peer failures are in test_ib_data.c.
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

/* The mixed messages of fifo_both_ways (test_fifo_both_ways in test_ib_data.c sends them
 * all eager) with every message from 3 * IB_FRAG_PAYLOAD bytes zero-copy (1 MiB ones in
 * several writes of max_msg): eager and rendezvous messages interleave in posted order. */
static void test_rndv_fifo_both_ways(void **state)
{
    (void)state;
    fifo_both_ways(3 * IB_FRAG_PAYLOAD);
    assert_true(zwritten > 2 * (NMSG / 8) * (1u << 20));
    chorus_regcache_stats_t st;
    chorus__regcache_stats(side[0].tp.regcache, &st);
    assert_int_equal(st.entries, 0); /* registrations made per message were dropped */
    assert_true(st.misses > 0);
}

/* A rendezvous message into a receive one byte short: both sides fail with
 * CHORUS_ERR_MISMATCH naming both lengths, nothing is written, the next message arrives. */
static void test_rndv_mismatch(void **state)
{
    chorus_tp_req_t reqs[4];
    size_t big = 4 * IB_FRAG_PAYLOAD;
    uint8_t *out = malloc(big), *in = malloc(big);
    (void)state;
    side[0].tp.zcopy_min = side[1].tp.zcopy_min = IB_FRAG_PAYLOAD;
    connect_ok();
    memset(out, 0x5A, big);
    memset(in, 0xEE, big);
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, out, big, &reqs[0]), CHORUS_SUCCESS);
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, out, 9, &reqs[1]), CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, in, big - 1, &reqs[2]),
                     CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, in + 100, 9, &reqs[3]),
                     CHORUS_SUCCESS);
    drive(reqs, 4, 1);
    assert_int_equal(reqs[0].status, CHORUS_ERR_MISMATCH);
    assert_int_equal(reqs[2].status, CHORUS_ERR_MISMATCH);
    assert_int_equal(reqs[1].status, CHORUS_SUCCESS);
    assert_int_equal(reqs[3].status, CHORUS_SUCCESS);
    assert_int_equal(zwritten, 0);
    assert_int_equal(in[0], 0xEE);
    assert_int_equal(in[100], 0x5A);
    assert_int_equal(in[108], 0x5A);
    assert_int_equal(in[109], 0xEE);
    free(out);
    free(in);
}

/* Sends between device and host buffers with both sides given device memory calls: every
 * byte into or out of "device memory" moves by RDMA WRITE, registered through a dma-buf. */
static void test_rndv_device(void **state)
{
    enum { N = 6 };
    static const size_t sizes[N] = {1, 4096, 3 * IB_FRAG_PAYLOAD + 17, 250000, 0, 5};
    chorus_tp_req_t reqs[2 * N];
    uint8_t *host = malloc(1u << 20);
    (void)state;
    dev_size = 4u << 20;
    assert_int_equal(posix_memalign((void **)&dev_base, 4096, dev_size), 0);
    memset(dev_base, 0xEE, dev_size);
    give_mem(0);
    give_mem(1);
    side[0].tp.zcopy_min = side[1].tp.zcopy_min = 1u << 20;
    connect_ok();
    /* Message i: from device at i MiB / 4 + 1 (odd i: from host) into device memory in the
     * upper half (i % 3 == 2: into host memory). */
    for (int i = 0; i < N; i++) {
        uint8_t *src = i % 2 ? host : dev_base + (size_t)i * 300000 + 1;
        uint8_t *dst = i % 3 == 2 ? host + 512 * 1024 : dev_base + (2u << 20) + (size_t)i * 300000;
        if (i % 2) memset(host, 0, 512 * 1024);
        for (size_t j = 0; j < sizes[i]; j++)
            src[j] = byte_of(0, i, j);
        assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, src, sizes[i], &reqs[i]),
                         CHORUS_SUCCESS);
        assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, dst, sizes[i], &reqs[N + i]),
                         CHORUS_SUCCESS);
        assert_int_equal(drive(&reqs[i], 1, 1), CHORUS_SUCCESS);
        assert_int_equal(drive(&reqs[N + i], 1, 1), CHORUS_SUCCESS);
        assert_int_equal(reqs[i].status, CHORUS_SUCCESS);
        assert_int_equal(reqs[N + i].status, CHORUS_SUCCESS);
        for (size_t j = 0; j < sizes[i]; j++) {
            if (dst[j] != byte_of(0, i, j)) fail_msg("message %d: byte %zu is wrong", i, j);
        }
    }
    /* Everything but the empty message went by RDMA WRITE, through dma-bufs where the
     * memory was on the "GPU", and both instances say they take device buffers. */
    size_t total = 0;
    for (int i = 0; i < N; i++)
        total += sizes[i];
    assert_int_equal(zwritten, total);
    assert_true(ndmabuf_fds >= 5);
    int ndev = 0;
    for (int i = 0; i < nregs; i++)
        ndev += regs[i].device;
    assert_int_equal(ndev, ndmabuf_fds);
    free(host);
}

/* GPUDirect unavailable: the receiver's driver exports no dma-buf, then the sender's NIC
 * refuses one. Each time the side that failed says why, naming rank and peer, the other
 * side fails too, and the pair goes on. */
static void test_rndv_device_unavailable(void **state)
{
    chorus_tp_req_t reqs[4];
    uint8_t host[64];
    (void)state;
    dev_size = 1u << 20;
    assert_int_equal(posix_memalign((void **)&dev_base, 4096, dev_size), 0);
    memset(dev_base, 3, dev_size);
    give_mem(0);
    give_mem(1);
    connect_ok();
    dmabuf_fail = 1;
    memset(host, 7, sizeof(host));
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, host, 64, &reqs[0]), CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, dev_base, 64, &reqs[1]),
                     CHORUS_SUCCESS);
    drive(reqs, 2, 1);
    assert_int_equal(reqs[1].status, CHORUS_ERR_UNSUPPORTED);
    assert_int_equal(reqs[0].status, CHORUS_ERR_REMOTE);
    dmabuf_fail = 0;
    dmabuf_reg_fail = 1;
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, dev_base, 64, &reqs[2]),
                     CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, host, 64, &reqs[3]), CHORUS_SUCCESS);
    /* Only side 0 registers here (the receive is host memory, registered by ibv_reg_mr). */
    uint64_t deadline = chorus__deadline_after(10.0);
    while (!reqs[2].done) {
        ib_progress((chorus_tp_t *)&side[1].tp);
        ib_progress((chorus_tp_t *)&side[0].tp);
        assert_false(chorus__deadline_passed(deadline));
    }
    assert_int_equal(reqs[2].status, CHORUS_ERR_UNSUPPORTED); /* errno EOPNOTSUPP */
    const char *e = chorus_last_error();
    assert_non_null(strstr(e, "GPUDirect RDMA unavailable"));
    assert_non_null(strstr(e, "ibv_reg_dmabuf_mr"));
    assert_non_null(strstr(e, "rank 0"));
    assert_non_null(strstr(e, "peer 1"));
    drive(&reqs[3], 1, 1);
    assert_int_equal(reqs[3].status, CHORUS_ERR_REMOTE);
    assert_non_null(strstr(chorus_last_error(), "gave up"));
    /* The pair goes on. */
    dmabuf_reg_fail = 0;
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, dev_base, 64, &reqs[0]),
                     CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, host, 64, &reqs[1]), CHORUS_SUCCESS);
    assert_int_equal(drive(reqs, 2, 1), CHORUS_SUCCESS);
    assert_int_equal(reqs[1].status, CHORUS_SUCCESS);
    assert_memory_equal(host, dev_base, 64);
}

/* The receiver's own message when the driver exports no dma-buf. */
static void test_rndv_device_no_export(void **state)
{
    chorus_tp_req_t reqs[2];
    uint8_t host[64] = {0};
    (void)state;
    dev_size = 1u << 20;
    assert_int_equal(posix_memalign((void **)&dev_base, 4096, dev_size), 0);
    give_mem(0);
    give_mem(1);
    connect_ok();
    dmabuf_fail = 1;
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, host, 64, &reqs[0]), CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, dev_base, 64, &reqs[1]),
                     CHORUS_SUCCESS);
    uint64_t deadline = chorus__deadline_after(10.0);
    while (!reqs[1].done) {
        ib_progress((chorus_tp_t *)&side[0].tp);
        ib_progress((chorus_tp_t *)&side[1].tp);
        assert_false(chorus__deadline_passed(deadline));
    }
    assert_int_equal(reqs[1].status, CHORUS_ERR_UNSUPPORTED);
    const char *e = chorus_last_error();
    assert_non_null(strstr(e, "rank 1"));
    assert_non_null(strstr(e, "peer 0"));
    assert_non_null(strstr(e, "GPUDirect RDMA unavailable"));
    assert_non_null(strstr(e, "dma-buf export unsupported"));
    drive(reqs, 1, 0);
    assert_int_equal(reqs[0].status, CHORUS_ERR_REMOTE);
}

/* A peer without device memory calls sends into a device receive through the slots: the
 * receive fails saying why, instead of the CPU writing into GPU memory. */
static void test_eager_into_device_refused(void **state)
{
    chorus_tp_req_t reqs[2];
    uint8_t host[64] = {1};
    (void)state;
    dev_size = 1u << 20;
    assert_int_equal(posix_memalign((void **)&dev_base, 4096, dev_size), 0);
    memset(dev_base, 0xEE, 64);
    give_mem(1);
    connect_ok();
    assert_int_equal(ib_isend((chorus_tp_t *)&side[0].tp, 1, host, 64, &reqs[0]), CHORUS_SUCCESS);
    assert_int_equal(ib_irecv((chorus_tp_t *)&side[1].tp, 0, dev_base, 64, &reqs[1]),
                     CHORUS_SUCCESS);
    drive(reqs, 2, 1);
    assert_int_equal(reqs[1].status, CHORUS_ERR_UNSUPPORTED);
    assert_int_equal(dev_base[0], 0xEE);
    assert_int_equal(chorus__tp_instance_caps(&chorus__tp_ib_ops, (chorus_tp_t *)&side[0].tp),
                     CHORUS_TP_CAP_HOST_MEM);
    assert_int_equal(chorus__tp_instance_caps(&chorus__tp_ib_ops, (chorus_tp_t *)&side[1].tp),
                     CHORUS_TP_CAP_HOST_MEM | CHORUS_TP_CAP_DEVICE_MEM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rndv_fifo_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rndv_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rndv_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rndv_device_unavailable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rndv_device_no_export, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eager_into_device_refused, setup, teardown),
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
