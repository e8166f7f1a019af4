/* CHORUS_IB_HCA parsing and the port choice, with the core's NIC preference (nearest to the
 * rank's GPU first), and PCI bus id spellings (lib/transport/ib/ib_dev.c, lib/util/pci.c),
 * without a NIC. */
#include "transport/ib/ib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static void test_parse_forms(void **state)
{
    ib_hca_list_t l;
    (void)state;
    assert_int_equal(ib_hca_parse(NULL, &l), CHORUS_SUCCESS);
    assert_int_equal(l.n, 0);
    assert_int_equal(ib_hca_parse("mlx5_0:1", &l), CHORUS_SUCCESS);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.e[0].name, "mlx5_0");
    assert_int_equal(l.e[0].port, 1);
    assert_int_equal(ib_hca_parse("mlx5_0", &l), CHORUS_SUCCESS);
    assert_int_equal(l.e[0].port, 0);
    assert_int_equal(ib_hca_parse("^=mlx5_0:1,mlx5_3:2,bnxt_re0", &l), CHORUS_SUCCESS);
    assert_int_equal(l.exclude, 1);
    assert_int_equal(l.exact, 1);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.e[1].name, "mlx5_3");
    assert_int_equal(l.e[1].port, 2);
    assert_string_equal(l.e[2].name, "bnxt_re0");
}

static void test_parse_errors(void **state)
{
    static const char *bad[] = {"mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", ":1",
                                "mlx5_0,", "mlx5_0,,mlx5_1", "^", "=", "mlx5_0:1:2"};
    ib_hca_list_t l;
    char many[512] = "";
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        l.n = 99;
        assert_int_equal(ib_hca_parse(bad[i], &l), CHORUS_ERR_INVALID_ARGUMENT);
        assert_int_equal(l.n, 99);
        assert_non_null(strstr(chorus_last_error(), "CHORUS_IB_HCA"));
    }
    for (int i = 0; i <= IB_HCA_MAX; i++)
        strcat(many, i == 0 ? "d" : ",d");
    assert_int_equal(ib_hca_parse(many, &l), CHORUS_ERR_INVALID_ARGUMENT);
}

static void test_match(void **state)
{
    ib_hca_list_t l;
    (void)state;
    assert_int_equal(ib_hca_parse("", &l), CHORUS_SUCCESS);
    assert_true(ib_hca_match(&l, "anything", 3));
    assert_int_equal(ib_hca_parse("mlx5", &l), CHORUS_SUCCESS); /* prefix */
    assert_true(ib_hca_match(&l, "mlx5_0", 1));
    assert_true(ib_hca_match(&l, "mlx5_1", 2));
    assert_false(ib_hca_match(&l, "mlx4_0", 1));
    assert_int_equal(ib_hca_parse("=mlx5", &l), CHORUS_SUCCESS); /* exact */
    assert_false(ib_hca_match(&l, "mlx5_0", 1));
    assert_int_equal(ib_hca_parse("mlx5_0:1,mlx5_1", &l), CHORUS_SUCCESS);
    assert_true(ib_hca_match(&l, "mlx5_0", 1));
    assert_false(ib_hca_match(&l, "mlx5_0", 2));
    assert_true(ib_hca_match(&l, "mlx5_1", 2));
    assert_int_equal(ib_hca_parse("^mlx5_0:1", &l), CHORUS_SUCCESS);
    assert_false(ib_hca_match(&l, "mlx5_0", 1));
    assert_true(ib_hca_match(&l, "mlx5_0", 2));
    assert_true(ib_hca_match(&l, "mlx5_1", 1));
}

static void test_port_pick(void **state)
{
    ib_port_cand_t c[4] = {
        {"mlx5_0", 1, 0, 1, ""}, /* down */
        {"mlx5_1", 1, 1, 1, ""},
        {"mlx5_2", 1, 1, 0, ""},
        {"mlx5_2", 2, 1, 0, ""},
    };
    ib_hca_list_t l;
    int pos = -1;
    (void)state;
    assert_int_equal(ib_hca_parse(NULL, &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick(c, 4, &l, &pos), 0);
    assert_int_equal(pos, 1);
    assert_int_equal(ib_hca_parse("mlx5_2:2", &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick(c, 4, &l, &pos), 0);
    assert_int_equal(pos, 3);
    assert_int_equal(ib_hca_parse("mlx5_0", &l), CHORUS_SUCCESS);
    pos = 7;
    assert_int_equal(ib_port_pick(c, 4, &l, &pos), -1); /* only a down port */
    assert_int_equal(pos, 7);
    assert_int_equal(ib_hca_parse("^mlx5_1", &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick(c, 4, &l, &pos), 0);
    assert_int_equal(pos, 2);
}

/* The preference pick: each device in the order the core prefers, whatever the spelling
 * of either side's bus ids; then the fallbacks. */
static void test_port_pick_pref(void **state)
{
    ib_port_cand_t c[4] = {
        {"mlx5_0", 1, 1, 0, "0000:1a:00.0"},
        {"mlx5_1", 1, 1, 0, "0000:9a:00.0"},
        {"mlx5_1", 2, 1, 0, "0000:9a:00.0"},
        {"mlx5_2", 1, 1, 0, ""}, /* no PCI address known */
    };
    ib_port_cand_t rev[2] = {c[1], c[0]};
    ib_hca_list_t l;
    int pos = -1;
    (void)state;
    assert_int_equal(ib_hca_parse(NULL, &l), CHORUS_SUCCESS);
    /* GPU 0's list names mlx5_0 first, GPU 1's mlx5_1 (its first port). */
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "0000:1a:00.0,0000:9a:00.0", &pos), 0);
    assert_int_equal(pos, 0);
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "0000:9a:00.0,0000:1a:00.0", &pos), 0);
    assert_int_equal(pos, 1);
    /* Candidate order does not matter, the preference's does. */
    assert_int_equal(ib_port_pick_pref(rev, 2, &l, "0000:1a:00.0,0000:9a:00.0", &pos), 0);
    assert_int_equal(pos, 1);
    /* CUDA's spelling (8-digit domain, upper case), lspci's (no domain), malformed items
     * and an item too long for a bus id keep their place but name nothing. */
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "00000000:9A:00.0,0000:1a:00.0", &pos), 0);
    assert_int_equal(pos, 1);
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "9a:00.0", &pos), 0);
    assert_int_equal(pos, 1);
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "junk,,0x9a:00.0,0000:0000:9a:00.0:ff:00.0,"
                                                 "0000:1a:00.0", &pos), 0);
    assert_int_equal(pos, 0);
    /* The preferred device's ports are down: the next preferred, not the first active. */
    c[1].active = c[2].active = 0;
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "0000:9a:00.0,0000:1a:00.0", &pos), 0);
    assert_int_equal(pos, 0);
    c[1].active = 0;
    c[2].active = 1;
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "0000:9a:00.0,0000:1a:00.0", &pos), 0);
    assert_int_equal(pos, 2);
    c[1].active = 1;
    /* CHORUS_IB_HCA's exclusions hold against the preference, by device and by port. */
    assert_int_equal(ib_hca_parse("^mlx5_1", &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "0000:9a:00.0,0000:1a:00.0", &pos), 0);
    assert_int_equal(pos, 0);
    assert_int_equal(ib_hca_parse("^mlx5_1:1", &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "0000:9a:00.0,0000:1a:00.0", &pos), 0);
    assert_int_equal(pos, 2);
    /* Nothing the preference names is usable: ib_port_pick's answer. */
    assert_int_equal(ib_hca_parse("^mlx5_0", &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "0000:1a:00.0", &pos), 0);
    assert_int_equal(pos, 1);
    assert_int_equal(ib_hca_parse(NULL, &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick_pref(rev, 2, &l, "0000:42:00.0", &pos), 0);
    assert_int_equal(pos, 0);
    /* No preference at all: ib_port_pick, which takes the first active port. */
    c[0].active = 0;
    assert_int_equal(ib_port_pick_pref(c, 4, &l, NULL, &pos), 0);
    assert_int_equal(pos, 1);
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "", &pos), 0);
    assert_int_equal(pos, 1);
    /* Nothing active: -1, pos untouched. */
    c[1].active = c[2].active = c[3].active = 0;
    pos = 7;
    assert_int_equal(ib_port_pick_pref(c, 4, &l, "0000:1a:00.0", &pos), -1);
    assert_int_equal(pos, 7);
}

/* Bus ids compare as PCI functions, whatever their spelling; anything malformed matches
 * nothing. */
static void test_bus_id_spellings(void **state)
{
    static const char *bad[] = {"0000:3b:00.0x", "0000.3b:00:0",      "0000:3b:00.0.0",
                                "0x3b:00.0",     " 3b:00.0",          "0000:3b:20.0",
                                "0000:3b:00.8",  "000000000:3b:00.0", "0000:03b:00.0",
                                "-1:3b:00.0",    "0000:3b:00",        "0000::3b:00.0"};
    char out[CHORUS_PCI_BUSID_MAX] = "untouched";
    (void)state;
    assert_int_equal(chorus__pci_bus_id_canon("00000000:3B:00.0", out), 0);
    assert_string_equal(out, "0000:3b:00.0");
    assert_int_equal(chorus__pci_bus_id_canon("3b:1f.7", out), 0);
    assert_string_equal(out, "0000:3b:1f.7");
    assert_int_equal(chorus__pci_bus_id_canon("10000:03:00.1", out), 0);
    assert_string_equal(out, "10000:03:00.1");
    assert_true(chorus__pci_bus_id_equal("0000:17:00.0", "0000:17:00.0"));
    assert_true(chorus__pci_bus_id_equal("00000000:3B:00.0", "0000:3b:00.0"));
    assert_true(chorus__pci_bus_id_equal("3b:00.0", "0000:3b:00.0"));
    assert_false(chorus__pci_bus_id_equal("0000:3b:00.0", "0000:3b:00.1"));
    assert_false(chorus__pci_bus_id_equal("0001:3b:00.0", "0000:3b:00.0"));
    assert_false(chorus__pci_bus_id_equal("", ""));
    assert_false(chorus__pci_bus_id_equal(NULL, "0000:3b:00.0"));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(chorus__pci_bus_id_canon(bad[i], out), -1);
        assert_false(chorus__pci_bus_id_equal(bad[i], bad[i]));
    }
    assert_string_equal(out, "10000:03:00.1"); /* untouched by the failures */
}

/* The sysfs read of an RDMA device's PCI address refuses what cannot be a device name and
 * fails cleanly for a device this machine does not have. */
static void test_dev_bus_id(void **state)
{
    char buf[CHORUS_PCI_BUSID_MAX] = "untouched";
    (void)state;
    assert_int_equal(ib_dev_bus_id("no_such_rdma_dev", buf, sizeof buf), -1);
    assert_int_equal(ib_dev_bus_id("../../devices", buf, sizeof buf), -1);
    assert_int_equal(ib_dev_bus_id("..", buf, sizeof buf), -1);
    assert_int_equal(ib_dev_bus_id("", buf, sizeof buf), -1);
    assert_int_equal(ib_dev_bus_id(NULL, buf, sizeof buf), -1);
    assert_string_equal(buf, "untouched");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_forms),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_port_pick),
        cmocka_unit_test(test_port_pick_pref),
        cmocka_unit_test(test_bus_id_spellings),
        cmocka_unit_test(test_dev_bus_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
