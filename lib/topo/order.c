/*
 * Ring orders from a host map. Pure: no topology object, no allocation beyond scratch.
 *
 * Why hosts stay contiguous: a ring in rank order over an interleaved placement (ranks
 * 0, 2, 4, 6 on host A and 1, 3, 5, 7 on host B) crosses the network on every edge, so
 * every byte of an allreduce goes over the NIC n times instead of twice per host. Grouping
 * the ranks of a host makes the ring leave each host once.
 *
 * Why the NIC's NUMA node goes to both ends: the two ranks at the ends of a host's stretch
 * are the ones that talk to other hosts (the last sends out, the first receives in); on a
 * two-socket machine with one NIC those should be ranks on the NIC's socket, so that the
 * network traffic does not cross the inter-socket link on top of the wire.
 */
#include "topo/topo.h"

#include "util/status.h"

#include <stdlib.h>

/* The sort key of a rank within its host: NIC-near ranks of the first half first (key 0),
 * the other NUMA nodes in increasing id (keys 1 + id, unknown -1 after them), the NIC-near
 * ranks of the second half last. */
static int64_t order_key(int numa, int nicn, int is_second)
{
    if (nicn >= 0 && numa == nicn) return is_second ? (int64_t)1 << 40 : 0;
    return numa >= 0 ? 1 + (int64_t)numa : (int64_t)1 << 32;
}

/* Places the ranks of host h at order[*pos_p ..]. */
static void order_host(int n, const int *host_of, const int *numa_of, int nicn, int h,
                       int *order, int *pos_p)
{
    int start = *pos_p, cnt = 0, near = 0, seen_near = 0, r, i, j;
    int64_t *key = NULL;

    for (r = 0; r < n; r++) {
        if (host_of[r] != h) continue;
        order[start + cnt++] = r;
        if (numa_of != NULL && nicn >= 0 && numa_of[r] == nicn) near++;
    }
    key = malloc((size_t)cnt * sizeof *key);
    if (key == NULL) {
        /* Host-contiguous in rank order is still correct; only the NUMA refinement is
         * lost. */
        *pos_p = start + cnt;
        return;
    }
    for (i = 0; i < cnt; i++) {
        int rr = order[start + i], numa = numa_of != NULL ? numa_of[rr] : -1;
        int second = 0;

        if (nicn >= 0 && numa == nicn) second = seen_near++ >= (near + 1) / 2;
        key[i] = order_key(numa, nicn, second);
    }
    /* Insertion sort: stable, and hosts have few ranks. */
    for (i = 1; i < cnt; i++) {
        int64_t k = key[i];
        int v = order[start + i];

        for (j = i - 1; j >= 0 && key[j] > k; j--) {
            key[j + 1] = key[j];
            order[start + j + 1] = order[start + j];
        }
        key[j + 1] = k;
        order[start + j + 1] = v;
    }
    free(key);
    *pos_p = start + cnt;
}

chorus_status_t chorus__topo_ring_order(int n, const int *host_of, int nhosts,
                                        const int *numa_of, const int *nic_numa, int *order)
{
    int r, h, pos = 0;

    if (n < 0 || order == NULL || (n > 0 && host_of == NULL))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: ring order: bad arguments");
    for (r = 0; r < n; r++)
        if (host_of[r] < 0 || host_of[r] >= nhosts)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "topo: ring order: rank %d is on host %d of %d", r, host_of[r],
                                 nhosts);
    for (h = 0; h < nhosts; h++)
        order_host(n, host_of, numa_of, nic_numa != NULL ? nic_numa[h] : -1, h, order, &pos);
    return CHORUS_SUCCESS;
}

int chorus__topo_ring_crossings(int n, const int *host_of, const int *order)
{
    int i, crossings = 0;

    for (i = 0; i < n; i++)
        crossings += host_of[order[i]] != host_of[order[(i + 1) % n]];
    return crossings;
}

chorus_status_t chorus__topo_order_invert(int n, const int *order, int *pos)
{
    int i;

    for (i = 0; i < n; i++) pos[i] = -1;
    for (i = 0; i < n; i++) {
        int r = order[i];

        if (r < 0 || r >= n || pos[r] >= 0)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "topo: order[%d] = %d is not a permutation of 0..%d", i, r,
                                 n - 1);
        pos[r] = i;
    }
    return CHORUS_SUCCESS;
}
