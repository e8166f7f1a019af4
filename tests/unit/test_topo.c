/*
 * Unit test of lib/topo: ring orders from host maps (the ring must leave each host once),
 * the NUMA refinement inside a host, distances between devices, and the JSON schema
 * (load(dump(t)) == t, strict loading, CHORUS_TOPO_FILE). Whether the ring algorithms
 * still compute the right results in such an order is tested in test_algo.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "topo/topo.h"
#include "util/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- Orders ---- */

/* order is a permutation and the ranks of every host are contiguous in it. */
static void check_order(int n, const int *host_of, int nhosts, const int *order)
{
    int *seen = calloc((size_t)n + 1, sizeof *seen);
    int *closed = calloc((size_t)nhosts, sizeof *closed);
    int i;

    assert_non_null(seen);
    assert_non_null(closed);
    for (i = 0; i < n; i++) {
        assert_true(order[i] >= 0 && order[i] < n);
        assert_int_equal(seen[order[i]], 0);
        seen[order[i]] = 1;
        /* A host whose stretch ended must not appear again. */
        assert_int_equal(closed[host_of[order[i]]], 0);
        if (i + 1 < n && host_of[order[i + 1]] != host_of[order[i]]) closed[host_of[order[i]]] = 1;
    }
    free(seen);
    free(closed);
}

/* The acceptance case of issue 7: 2 hosts x 4 ranks, interleaved. */
static void test_ring_2x4_interleaved(void **state)
{
    const int host_of[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    const int identity[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int want[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    int order[8];

    (void)state;
    /* The rank-order ring crosses on every edge: what this order is for. */
    assert_int_equal(chorus__topo_ring_crossings(8, host_of, identity), 8);
    assert_int_equal(chorus__topo_ring_order(8, host_of, 2, NULL, NULL, order), CHORUS_SUCCESS);
    assert_memory_equal(order, want, sizeof want);
    assert_int_equal(chorus__topo_ring_crossings(8, host_of, order), 2);
    check_order(8, host_of, 2, order);
}

static void test_ring_maps(void **state)
{
    static const struct {
        int n, nhosts;
        int host_of[24];
    } maps[] = {
        {1, 1, {0}},
        {5, 1, {0, 0, 0, 0, 0}},
        {2, 2, {0, 1}},
        {8, 2, {0, 0, 0, 0, 1, 1, 1, 1}},
        {8, 4, {0, 1, 2, 3, 0, 1, 2, 3}},
        {6, 3, {0, 1, 2, 0, 2, 0}},
        {10, 4, {0, 1, 1, 2, 3, 1, 3, 2, 3, 1}},
        {21, 7, {0, 1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5}},
    };
    size_t m;

    (void)state;
    for (m = 0; m < sizeof maps / sizeof maps[0]; m++) {
        int order[24];

        assert_int_equal(chorus__topo_ring_order(maps[m].n, maps[m].host_of, maps[m].nhosts,
                                                 NULL, NULL, order),
                         CHORUS_SUCCESS);
        check_order(maps[m].n, maps[m].host_of, maps[m].nhosts, order);
        assert_int_equal(chorus__topo_ring_crossings(maps[m].n, maps[m].host_of, order),
                         maps[m].nhosts == 1 ? 0 : maps[m].nhosts);
    }
}

/* Within a host, ranks group by NUMA node, and the NIC's node takes both ends. */
static void test_ring_numa(void **state)
{
    /* 2 hosts x 4 interleaved; ranks alternate NUMA nodes 1, 1, 0, 0, ... */
    const int host_of[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    const int numa_of[8] = {1, 1, 0, 0, 1, 1, 0, 0};
    const int nic_numa[2] = {0, 1};
    /* Host 0: ranks 0, 2, 4, 6 on nodes 1, 0, 1, 0, NIC on 0: 2 first, 6 last.
     * Host 1: ranks 1, 3, 5, 7 on nodes 1, 0, 1, 0, NIC on 1: 1 first, 5 last. */
    const int want[8] = {2, 0, 4, 6, 1, 3, 7, 5};
    const int want_no_nic[8] = {2, 6, 0, 4, 3, 7, 1, 5};
    int order[8];

    (void)state;
    assert_int_equal(chorus__topo_ring_order(8, host_of, 2, numa_of, nic_numa, order),
                     CHORUS_SUCCESS);
    assert_memory_equal(order, want, sizeof want);
    assert_int_equal(chorus__topo_ring_crossings(8, host_of, order), 2);
    assert_int_equal(chorus__topo_ring_order(8, host_of, 2, numa_of, NULL, order),
                     CHORUS_SUCCESS);
    assert_memory_equal(order, want_no_nic, sizeof want_no_nic);
}

static void test_ring_bad_host(void **state)
{
    const int host_of[3] = {0, 2, 1};
    int order[3];

    (void)state;
    assert_int_equal(chorus__topo_ring_order(3, host_of, 2, NULL, NULL, order),
                     CHORUS_ERR_INVALID_ARGUMENT);
}

/* ---- The model ---- */

static void set_dev(chorus_topo_dev_t *d, const char *name, const char *bus, const char *sw,
                    int numa, uint64_t speed)
{
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->bus_id, sizeof d->bus_id, "%s", bus);
    snprintf(d->pci_switch, sizeof d->pci_switch, "%s", sw);
    d->numa = numa;
    d->vendor_id = 0x15b3;
    d->device_id = 0x101b;
    d->speed_mbps = speed;
}

/* Two hosts: a 2-socket one with 4 GPUs and 2 NICs behind switches, and a bare one. */
static chorus_topo_t *make_topo(void)
{
    chorus_topo_t *t = NULL;
    chorus_topo_host_t *h;
    int i;

    assert_int_equal(chorus__topo_alloc(2, &t), CHORUS_SUCCESS);
    h = &t->hosts[0];
    snprintf(h->hostname, sizeof h->hostname, "node-a");
    h->cores = 64;
    h->pus = 128;
    assert_int_equal(chorus__topo_host_resize(h, 2, 4, 2), CHORUS_SUCCESS);
    for (i = 0; i < 2; i++) {
        h->numa[i].id = i;
        h->numa[i].cores = 32;
        h->numa[i].pus = 64;
        h->numa[i].memory_mb = 515000 + (uint64_t)i;
    }
    set_dev(&h->gpus[0], "gpu0", "0000:17:00.0", "0000:15:00.0", 0, 0);
    set_dev(&h->gpus[1], "gpu1", "0000:3a:00.0", "0000:38:00.0", 0, 0);
    set_dev(&h->gpus[2], "gpu2", "0000:86:00.0", "0000:84:00.0", 1, 0);
    set_dev(&h->gpus[3], "gpu3", "0000:af:00.0", "", 1, 0);
    for (i = 0; i < 4; i++) h->gpus[i].vendor_id = 0x10de;
    set_dev(&h->nics[0], "mlx5_0", "0000:18:00.0", "0000:15:00.0", 0, 200000);
    set_dev(&h->nics[1], "mlx5_1", "0000:87:00.0", "0000:84:00.0", 1, 200000);
    h = &t->hosts[1];
    snprintf(h->hostname, sizeof h->hostname, "node-b \"quoted\"");
    h->cores = h->pus = 2;
    assert_int_equal(chorus__topo_host_resize(h, 1, 0, 0), CHORUS_SUCCESS);
    h->numa[0].id = 0;
    h->numa[0].cores = h->numa[0].pus = 2;
    return t;
}

static void test_distances(void **state)
{
    chorus_topo_t *t = make_topo();
    const chorus_topo_host_t *h = &t->hosts[0];

    (void)state;
    assert_int_equal(chorus__topo_dev_distance(&h->gpus[0], &h->nics[0]), CHORUS_TOPO_DIST_SWITCH);
    assert_int_equal(chorus__topo_dev_distance(&h->gpus[1], &h->nics[0]), CHORUS_TOPO_DIST_NUMA);
    assert_int_equal(chorus__topo_dev_distance(&h->gpus[1], &h->nics[1]), CHORUS_TOPO_DIST_SYS);
    assert_int_equal(chorus__topo_nearest_nic(h, 0), 0);
    assert_int_equal(chorus__topo_nearest_nic(h, 1), 0);
    assert_int_equal(chorus__topo_nearest_nic(h, 2), 1);
    assert_int_equal(chorus__topo_nearest_nic(h, 3), 1);
    assert_int_equal(chorus__topo_nearest_nic(h, 4), -1);
    assert_int_equal(chorus__topo_nearest_nic(&t->hosts[1], 0), -1);
    assert_int_equal(chorus__topo_gpu_numa(h, 2), 1);
    assert_int_equal(chorus__topo_nic_numa(h), 0);
    assert_int_equal(chorus__topo_nic_numa(&t->hosts[1]), -1);
    assert_ptr_equal(chorus__topo_find_host(t, "node-a"), &t->hosts[0]);
    assert_null(chorus__topo_find_host(t, "elsewhere"));
    chorus__topo_free(t);
}

/* ---- JSON ---- */

static void roundtrip(const chorus_topo_t *t)
{
    chorus_topo_t *back = NULL;
    char *text = NULL, *again = NULL;

    assert_int_equal(chorus__topo_dump_string(t, &text), CHORUS_SUCCESS);
    assert_int_equal(chorus__topo_load_string(text, &back), CHORUS_SUCCESS);
    assert_true(chorus__topo_equal(t, back));
    assert_int_equal(chorus__topo_dump_string(back, &again), CHORUS_SUCCESS);
    assert_string_equal(text, again);
    chorus__topo_free(back);
    free(text);
    free(again);
}

static void test_json_roundtrip(void **state)
{
    chorus_topo_t *t = make_topo(), *u = make_topo();

    (void)state;
    roundtrip(t);
    /* equal() must see a change in any device field, or the round trip proves nothing. */
    assert_true(chorus__topo_equal(t, u));
    u->hosts[0].nics[1].numa = 0;
    assert_false(chorus__topo_equal(t, u));
    chorus__topo_free(u);
    chorus__topo_free(t);
}

static void test_json_discovered(void **state)
{
    chorus_topo_t *t = NULL;

    (void)state;
    assert_int_equal(chorus__topo_discover(&t), CHORUS_SUCCESS);
    assert_int_equal(t->nhosts, 1);
    assert_true(t->hosts[0].pus >= 1);
    assert_true(t->hosts[0].nnuma >= 1);
    roundtrip(t);
    chorus__topo_free(t);
}

static void test_json_strict(void **state)
{
    static const char *const bad[] = {
        "[]",
        "{\"hosts\": []}",
        "{\"hosts\": [{\"cores\": 4}]}",
        "{\"hosts\": [{\"hostname\": \"a\", \"numa_node\": 1}]}",
        "{\"hosts\": [{\"hostname\": \"a\", \"nics\": [{\"name\": \"x\", \"numa\": \"0\"}]}]}",
        "{\"hosts\": [{\"hostname\": \"a\", \"nics\": [{\"name\": \"x\", \"vendor_id\": 65536}]}]}",
        "{\"version\": 2, \"hosts\": [{\"hostname\": \"a\"}]}",
        "{\"schema\": \"other\", \"hosts\": [{\"hostname\": \"a\"}]}",
        "{\"hosts\": [{\"hostname\": \"a\"}], \"extra\": 1}",
        "{\"hosts\": [{\"hostname\": \"a\", \"numa\": [{\"cores\": 1}]}]}",
        "{\"hosts\": ",
    };
    const char *minimal = "{\"hosts\": [{\"hostname\": \"vm\", \"nics\": [{\"name\": \"eth0\"}]}]}";
    chorus_topo_t *t = NULL;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = NULL;
        if (chorus__topo_load_string(bad[i], &t) != CHORUS_ERR_INVALID_ARGUMENT)
            fail_msg("accepted: %s", bad[i]);
        assert_null(t);
    }
    /* Absent optional fields take the model's "unknown". */
    assert_int_equal(chorus__topo_load_string(minimal, &t), CHORUS_SUCCESS);
    assert_int_equal(t->hosts[0].nnics, 1);
    assert_int_equal(t->hosts[0].nics[0].numa, -1);
    assert_string_equal(t->hosts[0].nics[0].bus_id, "");
    assert_int_equal(t->hosts[0].nnuma, 0);
    chorus__topo_free(t);
}

/* CHORUS_TOPO_FILE replaces discovery, and what --topo-dump writes loads back equal. */
static void test_topo_file(void **state)
{
    char path[] = "/tmp/chorus-topo-XXXXXX";
    chorus_topo_t *t = make_topo(), *back = NULL;
    int fd = mkstemp(path);

    (void)state;
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(chorus__topo_dump(t, path), CHORUS_SUCCESS);
    setenv("CHORUS_TOPO_FILE", path, 1);
    chorus__config_reload();
    assert_int_equal(chorus__topo_local(&back), CHORUS_SUCCESS);
    assert_true(chorus__topo_equal(t, back));
    assert_string_equal(back->source, path);
    chorus__topo_free(back);
    unsetenv("CHORUS_TOPO_FILE");
    chorus__config_reload();
    back = NULL;
    assert_int_equal(chorus__topo_load("/nonexistent/topo.json", &back),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_null(back);
    unlink(path);
    chorus__topo_free(t);
}

/* The NIC preference the core hands to the ib transport: on a host of two sockets, each
 * GPU's list starts with the NIC under its own switch; then the tie rules and the edges. */
static void test_nic_preference(void **state)
{
    chorus_topo_t *t = NULL;
    chorus_topo_host_t *h;
    char buf[128], small[20];

    (void)state;
    assert_int_equal(chorus__topo_alloc(1, &t), CHORUS_SUCCESS);
    h = &t->hosts[0];
    assert_int_equal(chorus__topo_host_resize(h, 2, 2, 2), CHORUS_SUCCESS);
    set_dev(&h->gpus[0], "gpu0", "0000:17:00.0", "0000:15:00.0", 0, 0);
    set_dev(&h->gpus[1], "gpu1", "0000:97:00.0", "0000:95:00.0", 1, 0);
    set_dev(&h->nics[0], "mlx5_0", "0000:1a:00.0", "0000:15:00.0", 0, 200000);
    set_dev(&h->nics[1], "mlx5_1", "0000:9A:00.0", "0000:95:00.0", 1, 200000);
    assert_int_equal(chorus__topo_nic_preference(h, "0000:17:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:1a:00.0,0000:9a:00.0");
    assert_int_equal(chorus__topo_nic_preference(h, "0000:97:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:9a:00.0,0000:1a:00.0");
    /* CUDA's spelling of the GPU finds it too. */
    assert_int_equal(chorus__topo_nic_preference(h, "00000000:97:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:9a:00.0,0000:1a:00.0");
    /* A GPU the host does not list, a malformed address, no host: an empty list. */
    assert_int_equal(chorus__topo_nic_preference(h, "0000:42:00.0", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(chorus__topo_nic_preference(h, "gpu0", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(chorus__topo_nic_preference(NULL, "0000:17:00.0", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    /* Without a shared switch the same NUMA node still comes first. */
    h->gpus[1].pci_switch[0] = '\0';
    assert_int_equal(chorus__topo_nic_preference(h, "0000:97:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:9a:00.0,0000:1a:00.0");
    /* At equal distance and speed the GPUs spread: GPU i starts at the i-th of the NICs
     * it reaches equally well (GPU 1 here at mlx5_1; GPU 0, made as far from both, at
     * mlx5_0), and the faster NIC goes first whatever the GPU. */
    h->gpus[1].numa = -1;
    assert_int_equal(chorus__topo_nic_preference(h, "0000:97:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:9a:00.0,0000:1a:00.0");
    h->gpus[0].pci_switch[0] = '\0';
    h->gpus[0].numa = -1;
    assert_int_equal(chorus__topo_nic_preference(h, "0000:17:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:1a:00.0,0000:9a:00.0");
    snprintf(h->gpus[0].pci_switch, sizeof h->gpus[0].pci_switch, "0000:15:00.0");
    h->gpus[0].numa = 0;
    h->nics[0].speed_mbps = 400000;
    assert_int_equal(chorus__topo_nic_preference(h, "0000:97:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:1a:00.0,0000:9a:00.0");
    h->nics[0].speed_mbps = 200000;
    h->nics[1].speed_mbps = 400000;
    assert_int_equal(chorus__topo_nic_preference(h, "0000:97:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:9a:00.0,0000:1a:00.0");
    /* Nearness beats speed. */
    assert_int_equal(chorus__topo_nic_preference(h, "0000:17:00.0", buf, sizeof buf), 2);
    assert_string_equal(buf, "0000:1a:00.0,0000:9a:00.0");
    /* A NIC of unknown address cannot be named: left out. */
    h->nics[0].bus_id[0] = '\0';
    assert_int_equal(chorus__topo_nic_preference(h, "0000:17:00.0", buf, sizeof buf), 1);
    assert_string_equal(buf, "0000:9a:00.0");
    /* Too small a buffer: -1 and an empty string, never a cut list. */
    snprintf(h->nics[0].bus_id, sizeof h->nics[0].bus_id, "0000:1a:00.0");
    assert_int_equal(chorus__topo_nic_preference(h, "0000:17:00.0", small, sizeof small), -1);
    assert_string_equal(small, "");
    chorus__topo_free(t);
}

static void test_order_invert(void **state)
{
    static const int order[5] = {3, 0, 4, 1, 2}, dup[3] = {0, 2, 2}, out[3] = {0, 3, 1};
    int pos[5], i;

    (void)state;
    assert_int_equal(chorus__topo_order_invert(5, order, pos), CHORUS_SUCCESS);
    for (i = 0; i < 5; i++) assert_int_equal(pos[order[i]], i);
    assert_int_equal(chorus__topo_order_invert(3, dup, pos), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "order[2] = 2"));
    assert_int_equal(chorus__topo_order_invert(3, out, pos), CHORUS_ERR_INVALID_ARGUMENT);
}

/* What communicator creation reads of the local machine: the CPU's node is a node the
 * kernel lists (or unknown), loopback has none, and CHORUS_TOPO_FILE's NIC of the
 * interface's name, else its best NIC, gives the NIC's node. */
static void test_local_numa(void **state)
{
    char path[] = "/tmp/chorus-topo-XXXXXX", dir[64], ifname[64];
    chorus_topo_t *t = NULL;
    chorus_topo_host_t *h;
    int fd = mkstemp(path), numa = -2, nic = -2;

    (void)state;
    assert_true(fd >= 0);
    close(fd);
    numa = chorus__topo_cpu_numa();
    assert_true(numa >= -1);
    if (numa >= 0) {
        snprintf(dir, sizeof dir, "/sys/devices/system/node/node%d", numa);
        assert_int_equal(access(dir, F_OK), 0);
    }
    assert_int_equal(chorus__topo_if_numa("lo"), -1);
    assert_int_equal(chorus__topo_if_numa("no-such-interface"), -1);
    assert_int_equal(chorus__topo_pci_numa("not/a/bus"), -1);

    assert_int_equal(chorus__topo_alloc(1, &t), CHORUS_SUCCESS);
    h = &t->hosts[0];
    snprintf(h->hostname, sizeof h->hostname, "only-host");
    h->cores = h->pus = 4;
    assert_int_equal(chorus__topo_host_resize(h, 2, 0, 2), CHORUS_SUCCESS);
    h->numa[0].id = 0;
    h->numa[1].id = 1;
    set_dev(&h->nics[0], "mlx5_0", "0000:18:00.0", "", 0, 200000);
    set_dev(&h->nics[1], "ens9", "0000:87:00.0", "", 1, 100000);
    assert_int_equal(chorus__topo_dump(t, path), CHORUS_SUCCESS);
    setenv("CHORUS_TOPO_FILE", path, 1);
    setenv("CHORUS_SOCKET_IFNAME", "ens9", 1);
    chorus__config_reload();
    assert_int_equal(chorus__topo_net_ifname(ifname, sizeof ifname), 0);
    assert_string_equal(ifname, "ens9");
    chorus__topo_local_numa(&numa, &nic);
    assert_int_equal(nic, 1);
    assert_true(numa >= -1);
    /* An interface the file does not list: the host's fastest NIC. */
    setenv("CHORUS_SOCKET_IFNAME", "lo", 1);
    chorus__config_reload();
    chorus__topo_local_numa(&numa, &nic);
    assert_int_equal(nic, 0);
    /* Without the file, loopback is virtual: unknown. */
    unsetenv("CHORUS_TOPO_FILE");
    chorus__config_reload();
    chorus__topo_local_numa(&numa, &nic);
    assert_int_equal(nic, -1);
    unsetenv("CHORUS_SOCKET_IFNAME");
    chorus__config_reload();
    unlink(path);
    chorus__topo_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_2x4_interleaved),
        cmocka_unit_test(test_ring_maps),
        cmocka_unit_test(test_ring_numa),
        cmocka_unit_test(test_ring_bad_host),
        cmocka_unit_test(test_distances),
        cmocka_unit_test(test_json_roundtrip),
        cmocka_unit_test(test_json_discovered),
        cmocka_unit_test(test_json_strict),
        cmocka_unit_test(test_topo_file),
        cmocka_unit_test(test_nic_preference),
        cmocka_unit_test(test_order_invert),
        cmocka_unit_test(test_local_numa),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
