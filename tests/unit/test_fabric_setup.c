/*
 * chorus-fabric's setup report (bench/fabric/setup.c) on a fake sysfs tree in a temporary
 * folder, with the GPUs and NICs of the topology from a CHORUS_TOPO_FILE: what each field
 * says, and that the warnings that matter appear (a NIC down, a link-local RoCE GID, a GPU
 * across sockets from its NIC, GPUDirect off) and only those.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fabric.h"
#include "util/config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[256];

/* Writes text to root/rel, making the folders on the way. */
static void put(const char *rel, const char *text)
{
    char path[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", g_root, rel);
    for (char *s = strchr(path + strlen(g_root) + 1, '/'); s != NULL; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    if (text == NULL) {
        mkdir(path, 0755);
        return;
    }
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", text);
    fclose(f);
}

static int setup_tree(void **state)
{
    const char *zero = "0000:0000:0000:0000:0000:0000:0000:0000";
    (void)state;
    snprintf(g_root, sizeof(g_root), "%s/fabric-sysfs.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(g_root));
    put("class/net/lo/operstate", "unknown");
    put("class/net/eth0/operstate", "up");
    put("class/net/eth0/speed", "100000");
    put("class/net/eth0/mtu", "9000");
    put("class/net/eth0/device/numa_node", "1");
    put("class/net/eth1/operstate", "down");
    put("class/net/eth1/speed", "-1");
    put("class/net/eth1/mtu", "1500");
    put("class/net/eth1/device", NULL);
    put("class/net/veth0/operstate", "up");
    put("class/net/veth0/mtu", "1500");
    put("class/net/ifb0/operstate", "down"); /* virtual: down by design, no warning */
    put("class/net/ifb0/mtu", "1500");
    /* mlx5_0: RoCE with only link-local GIDs. */
    put("class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE");
    put("class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet");
    put("class/infiniband/mlx5_0/ports/1/rate", "100 Gb/sec (4X EDR)");
    put("class/infiniband/mlx5_0/ports/1/gids/0", "fe80:0000:0000:0000:0202:c9ff:fe00:0001");
    put("class/infiniband/mlx5_0/ports/1/gids/1", "fe80:0000:0000:0000:0202:c9ff:fe00:0001");
    put("class/infiniband/mlx5_0/ports/1/gids/2", zero);
    put("class/infiniband/mlx5_0/ports/1/gid_attrs/types/0", "IB/RoCE v1");
    put("class/infiniband/mlx5_0/ports/1/gid_attrs/types/1", "RoCE v2");
    /* mlx5_1: RoCE with an IPv4-mapped v2 GID at index 3; port 2 down. */
    put("class/infiniband/mlx5_1/ports/1/state", "4: ACTIVE");
    put("class/infiniband/mlx5_1/ports/1/link_layer", "Ethernet");
    put("class/infiniband/mlx5_1/ports/1/rate", "200 Gb/sec (4X HDR)");
    put("class/infiniband/mlx5_1/ports/1/gids/0", "fe80:0000:0000:0000:0202:c9ff:fe00:0002");
    put("class/infiniband/mlx5_1/ports/1/gids/1", "fe80:0000:0000:0000:0202:c9ff:fe00:0002");
    put("class/infiniband/mlx5_1/ports/1/gids/2", "0000:0000:0000:0000:0000:ffff:0a00:0001");
    put("class/infiniband/mlx5_1/ports/1/gids/3", "0000:0000:0000:0000:0000:ffff:0a00:0001");
    put("class/infiniband/mlx5_1/ports/1/gid_attrs/types/0", "IB/RoCE v1");
    put("class/infiniband/mlx5_1/ports/1/gid_attrs/types/1", "RoCE v2");
    put("class/infiniband/mlx5_1/ports/1/gid_attrs/types/2", "IB/RoCE v1");
    put("class/infiniband/mlx5_1/ports/1/gid_attrs/types/3", "RoCE v2");
    put("class/infiniband/mlx5_1/ports/2/state", "1: DOWN");
    put("class/infiniband/mlx5_1/ports/2/link_layer", "Ethernet");
    put("class/infiniband/mlx5_1/ports/2/gids/0", zero);
    /* One GPU on NUMA node 0, the only NIC on node 1. */
    put("topo.json", "{\"hosts\": [{\"hostname\": \"fake\", \"numa\": [{\"id\": 0}, {\"id\": 1}],"
                     " \"gpus\": [{\"name\": \"gpu0\", \"bus_id\": \"0000:17:00.0\", \"numa\": 0}],"
                     " \"nics\": [{\"name\": \"mlx5_1\", \"bus_id\": \"0000:b1:00.0\","
                     " \"numa\": 1, \"speed_mbps\": 200000}]}]}");
    return 0;
}

static int teardown_tree(void **state)
{
    char cmd[512];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_root);
    return system(cmd) == 0 ? 0 : -1;
}

/* Collects with the given CHORUS_IB_GID_INDEX (NULL: unset) and the fake topology. */
static json_t *collect(const char *gid_index)
{
    char topo[512], *text = NULL;
    json_t *j;

    snprintf(topo, sizeof(topo), "%s/topo.json", g_root);
    setenv("CHORUS_TOPO_FILE", topo, 1);
    if (gid_index) setenv("CHORUS_IB_GID_INDEX", gid_index, 1);
    else unsetenv("CHORUS_IB_GID_INDEX");
    chorus__config_reload();
    assert_int_equal(fabric_setup_collect_at(g_root, &text), CHORUS_SUCCESS);
    unsetenv("CHORUS_TOPO_FILE");
    unsetenv("CHORUS_IB_GID_INDEX");
    chorus__config_reload();
    j = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(j);
    return j;
}

static int has_warning(json_t *j, const char *a, const char *b)
{
    json_t *w = json_object_get(j, "warnings");
    int n = 0;
    for (size_t i = 0; i < json_array_size(w); i++) {
        const char *s = json_string_value(json_array_get(w, i));
        n += strstr(s, a) != NULL && (b == NULL || strstr(s, b) != NULL);
    }
    return n;
}

static void test_nics(void **state)
{
    json_t *j = collect(NULL), *nics = json_object_get(j, "nics"), *n;

    (void)state;
    /* Sorted by name, lo skipped. */
    assert_int_equal(json_array_size(nics), 4);
    n = json_array_get(nics, 0);
    assert_string_equal(json_string_value(json_object_get(n, "name")), "eth0");
    assert_string_equal(json_string_value(json_object_get(n, "operstate")), "up");
    assert_int_equal(json_integer_value(json_object_get(n, "speed_mbps")), 100000);
    assert_int_equal(json_integer_value(json_object_get(n, "mtu")), 9000);
    assert_int_equal(json_integer_value(json_object_get(n, "numa")), 1);
    n = json_array_get(nics, 1);
    assert_string_equal(json_string_value(json_object_get(n, "name")), "eth1");
    assert_true(json_is_null(json_object_get(n, "speed_mbps")));
    n = json_array_get(nics, 3);
    assert_string_equal(json_string_value(json_object_get(n, "name")), "veth0");
    assert_true(json_is_null(json_object_get(n, "speed_mbps")));
    assert_true(json_is_null(json_object_get(n, "numa")));
    assert_int_equal(has_warning(j, "NIC eth1 link is down", NULL), 1);
    assert_int_equal(has_warning(j, "ifb0", NULL), 0);
    assert_int_equal(has_warning(j, "veth0", NULL), 0);
    json_decref(j);
}

static json_t *port(json_t *j, const char *dev, int portno)
{
    json_t *rdma = json_object_get(j, "rdma");
    for (size_t i = 0; i < json_array_size(rdma); i++) {
        json_t *p = json_array_get(rdma, i);
        if (strcmp(json_string_value(json_object_get(p, "device")), dev) == 0 &&
            json_integer_value(json_object_get(p, "port")) == portno)
            return p;
    }
    fail_msg("no %s port %d", dev, portno);
    return NULL;
}

static void test_rdma_gids(void **state)
{
    json_t *j = collect(NULL), *p;

    (void)state;
    assert_int_equal(json_array_size(json_object_get(j, "rdma")), 3);
    p = port(j, "mlx5_1", 1);
    assert_string_equal(json_string_value(json_object_get(p, "state")), "ACTIVE");
    assert_string_equal(json_string_value(json_object_get(p, "link_layer")), "Ethernet");
    assert_string_equal(json_string_value(json_object_get(p, "rate")), "200 Gb/sec (4X HDR)");
    assert_int_equal(json_integer_value(json_object_get(p, "gid_index")), 3);
    assert_string_equal(json_string_value(json_object_get(p, "gid")), "::ffff:10.0.0.1");
    assert_string_equal(json_string_value(json_object_get(p, "gid_kind")), "ipv4-mapped");
    assert_int_equal(has_warning(j, "mlx5_1 port 1", NULL), 0);
    /* Only link-local GIDs on RoCE: refused by the transport, warned about. */
    p = port(j, "mlx5_0", 1);
    assert_string_equal(json_string_value(json_object_get(p, "gid_kind")), "link-local");
    assert_int_equal(has_warning(j, "mlx5_0 port 1", "link-local"), 1);
    /* A port down, with no GID at all. */
    p = port(j, "mlx5_1", 2);
    assert_string_equal(json_string_value(json_object_get(p, "state")), "DOWN");
    assert_true(json_is_null(json_object_get(p, "gid")));
    assert_int_equal(has_warning(j, "RDMA mlx5_1 port 2 is DOWN", NULL), 1);
    json_decref(j);

    /* CHORUS_IB_GID_INDEX forcing a link-local GID: selected, and warned about. */
    j = collect("1");
    p = port(j, "mlx5_1", 1);
    assert_int_equal(json_integer_value(json_object_get(p, "gid_index")), 1);
    assert_string_equal(json_string_value(json_object_get(p, "gid")), "fe80::202:c9ff:fe00:2");
    assert_string_equal(json_string_value(json_object_get(p, "gid_kind")), "link-local");
    assert_int_equal(has_warning(j, "mlx5_1 port 1: link-local GID", "selected"), 1);
    json_decref(j);
}

static void test_gpus_and_gpudirect(void **state)
{
    json_t *j = collect(NULL), *g;
    char path[512];

    (void)state;
    assert_int_equal(json_array_size(json_object_get(j, "gpus")), 1);
    g = json_array_get(json_object_get(j, "gpus"), 0);
    assert_string_equal(json_string_value(json_object_get(g, "bus_id")), "0000:17:00.0");
    assert_string_equal(json_string_value(json_object_get(g, "nearest_nic")), "mlx5_1");
    assert_string_equal(json_string_value(json_object_get(g, "distance")), "sys");
    assert_int_equal(has_warning(j, "GPU 0 (0000:17:00.0) is across sockets", "mlx5_1"), 1);
    assert_string_equal(json_string_value(json_object_get(j, "gpudirect")), "off");
    assert_int_equal(has_warning(j, "GPUDirect RDMA is off", NULL), 1);
    json_decref(j);

    put("module/nvidia_peermem", NULL);
    j = collect(NULL);
    assert_string_equal(json_string_value(json_object_get(j, "gpudirect")), "nvidia-peermem");
    assert_int_equal(has_warning(j, "GPUDirect", NULL), 0);
    json_decref(j);
    snprintf(path, sizeof(path), "%s/module/nvidia_peermem", g_root);
    rmdir(path);
}

/* This machine's own /sys: whatever is there, the object has every key. */
static void test_real_sysfs(void **state)
{
    char *text = NULL;
    json_t *j;
    const char *keys[] = {"hostname", "nics", "rdma", "gpus", "gpudirect", "warnings"};

    (void)state;
    assert_int_equal(fabric_setup_collect(&text), CHORUS_SUCCESS);
    j = json_loads(text, 0, NULL);
    assert_non_null(j);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_non_null(json_object_get(j, keys[i]));
    json_decref(j);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nics),
        cmocka_unit_test(test_rdma_gids),
        cmocka_unit_test(test_gpus_and_gpudirect),
        cmocka_unit_test(test_real_sysfs),
    };
    return cmocka_run_group_tests(tests, setup_tree, teardown_tree);
}
