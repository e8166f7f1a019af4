/*
 * The ib transport over a real RDMA device: the transport contract suite
 * (transport_contract.h). It needs a NIC, so where ibv_get_device_list finds none, or where
 * Chorus was built without libibverbs, it prints "skipped: <reason>" and reports one
 * skipped cmocka test (exit 0: tests/run_tests.sh counts a nonzero unit exit as a failure);
 * tests/hw/ib.sh runs it on machines that have one. The parts of the transport that need
 * no NIC are tested by test_ib_{gid,credit,regcache,dev}.
 */
#include "unit/transport_contract.h"

#include "transport/ib/ib.h"

#ifdef CHORUS_HAVE_IBV
#include <infiniband/verbs.h>
#endif

static tpc_config_t ib_cfg = {&chorus__tp_ib_ops, 0};

/* Nonzero if the host lists an RDMA device; else says why not on stdout. */
static int have_device(void)
{
#ifdef CHORUS_HAVE_IBV
    int n = 0;
    struct ibv_device **devs = ibv_get_device_list(&n);

    if (devs != NULL) ibv_free_device_list(devs);
    if (n > 0) return 1;
    printf("skipped: no RDMA device\n");
    return 0;
#else
    printf("skipped: no RDMA device support (built without libibverbs-dev)\n");
    return 0;
#endif
}

/* Without a device (or without libibverbs) init refuses cleanly and says why. */
static void test_init_refuses(void **state)
{
    uint8_t secret[CHORUS_SECRET_BYTES] = {7};
    chorus_tp_params_t params;
    chorus_tp_t *tp = (chorus_tp_t *)&params; /* must stay untouched */
    (void)state;
    memset(&params, 0, sizeof(params));
    params.rank = 0;
    params.nranks = 2;
    params.secret = secret;
    assert_int_equal(chorus__tp_ib_ops.init(&params, &tp), CHORUS_ERR_UNSUPPORTED);
    assert_ptr_equal(tp, (chorus_tp_t *)&params);
#ifdef CHORUS_HAVE_IBV
    assert_non_null(strstr(chorus_last_error(), "no RDMA device"));
#else
    assert_non_null(strstr(chorus_last_error(), "libibverbs-dev"));
#endif
    assert_non_null(strstr(chorus_last_error(), "rank 0"));
}

static void test_no_device(void **state)
{
    (void)state;
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {TPC_CONTRACT_TESTS(&ib_cfg)};
    const struct CMUnitTest none[] = {cmocka_unit_test(test_init_refuses),
                                      cmocka_unit_test(test_no_device)};

    if (!have_device()) return cmocka_run_group_tests(none, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
