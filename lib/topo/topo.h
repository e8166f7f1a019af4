/*
 * Topology: the machines a job runs on, as far as placement matters to collectives.
 *
 * A topology is a list of hosts; each host has NUMA nodes (with their cores and memory) and
 * the PCI devices that move data: GPUs and NICs, each with its NUMA node and the PCI switch
 * above it. That is enough to answer the two questions the library asks: which GPU is near
 * which NIC (same switch, then same NUMA node, then across the inter-socket link), and in
 * which order ranks should form a ring so that it leaves each host once.
 *
 * Where it comes from: chorus__topo_discover() reads the local host with hwloc (when built
 * with CHORUS_HAVE_HWLOC; otherwise a minimal model from sysconf: one NUMA node, no PCI
 * devices). CHORUS_TOPO_FILE names a JSON file in the schema of docs/topology.schema.json
 * that replaces discovery (for VMs whose PCI view is wrong); chorus__topo_dump() writes that
 * schema, and chorus__topo_load(chorus__topo_dump(t)) equals t field for field.
 *
 * The order functions (chorus__topo_ring_order) are pure and need no topology object: they
 * take per-rank host and NUMA indices, so lib/algo and the tests can use them alone.
 */
#ifndef CHORUS_TOPO_TOPO_H
#define CHORUS_TOPO_TOPO_H

#include "chorus.h"

#include <stdint.h>
#include <stdio.h>

#define CHORUS_TOPO_NAME_MAX 64
#define CHORUS_TOPO_BUSID_MAX 16 /* "dddd:bb:dd.f" */

typedef enum {
    CHORUS_TOPO_GPU = 0,
    CHORUS_TOPO_NIC = 1,
} chorus_topo_dev_kind_t;

/* A PCI device that moves data. */
typedef struct {
    char name[CHORUS_TOPO_NAME_MAX];      /* "mlx5_0", "eth0", "gpu0" */
    char bus_id[CHORUS_TOPO_BUSID_MAX];   /* "0000:17:00.0"; "" if unknown */
    /* The bus id of the topmost PCI bridge under the host bridge (the switch the device
     * hangs from); "" when it sits on the root complex or is unknown. */
    char pci_switch[CHORUS_TOPO_BUSID_MAX];
    int numa; /* NUMA node (os index); -1 if unknown */
    uint16_t vendor_id, device_id;
    /* NICs: link speed in Mbit/s (0: unknown); GPUs: 0. */
    uint64_t speed_mbps;
} chorus_topo_dev_t;

typedef struct {
    int id;              /* os index */
    int cores;           /* physical cores in the node */
    int pus;             /* hardware threads in the node */
    uint64_t memory_mb;  /* local memory; 0 if unknown */
} chorus_topo_numa_t;

typedef struct {
    char hostname[CHORUS_TOPO_NAME_MAX];
    int cores; /* physical cores */
    int pus;   /* hardware threads */
    int nnuma;
    chorus_topo_numa_t *numa;
    int ngpus; /* GPUs in PCI bus id order (CUDA_DEVICE_ORDER=PCI_BUS_ID numbering) */
    chorus_topo_dev_t *gpus;
    int nnics;
    chorus_topo_dev_t *nics;
} chorus_topo_host_t;

typedef struct {
    int nhosts;
    chorus_topo_host_t *hosts;
    /* Where it came from: "hwloc", "sysconf" or the file's path (for --info). */
    char source[256];
} chorus_topo_t;

/* Distances between two PCI devices of one host, NCCL's PIX/NODE/SYS in spirit. */
enum {
    CHORUS_TOPO_DIST_SWITCH = 0, /* under the same PCI switch */
    CHORUS_TOPO_DIST_NUMA = 1,   /* same NUMA node, through the host bridge */
    CHORUS_TOPO_DIST_SYS = 2,    /* across NUMA nodes, or unknown */
};

/* ---- The model (topo.c) ---- */

/* An empty topology of nhosts zeroed hosts. */
chorus_status_t chorus__topo_alloc(int nhosts, chorus_topo_t **topo_p);
/* Frees t and everything it owns; NULL is fine. */
void chorus__topo_free(chorus_topo_t *t);
/* Sizes a host's arrays (zeroed); previous contents are freed. */
chorus_status_t chorus__topo_host_resize(chorus_topo_host_t *h, int nnuma, int ngpus, int nnics);
/* 1 if a and b describe the same machines field for field (source is not compared). */
int chorus__topo_equal(const chorus_topo_t *a, const chorus_topo_t *b);
/* The host named hostname; the only host when there is one and none matches; else NULL. */
const chorus_topo_host_t *chorus__topo_find_host(const chorus_topo_t *t, const char *hostname);
/* One of CHORUS_TOPO_DIST_*. */
int chorus__topo_dev_distance(const chorus_topo_dev_t *a, const chorus_topo_dev_t *b);
/* Index of the NIC nearest to GPU gpu of h (ties: the fastest, then the first); -1 when h
 * has no NIC or gpu is out of range. */
int chorus__topo_nearest_nic(const chorus_topo_host_t *h, int gpu);
/* The PCI addresses of h's NICs, nearest to the GPU at PCI address gpu_bus first, as
 * chorus_tp_params_t.nic_preference wants them: by chorus__topo_dev_distance (same PCI
 * switch, then same NUMA node, then across), ties to the faster NIC, then in h's order
 * rotated by the GPU's index (GPU i of h starts at the i-th of its equally good NICs, so
 * GPUs spread over NICs they reach equally well).
 * Comma-separated in canonical form (util/pci.h) into buf of len bytes; NICs of unknown or
 * malformed address are left out. Pure. Returns how many it listed: 0 (and "") when h is
 * NULL, lists no GPU at gpu_bus (any spelling) or no NIC of known address; -1 (and "")
 * when len is too small, which CHORUS_PCI_BUSID_MAX bytes per NIC never is. */
int chorus__topo_nic_preference(const chorus_topo_host_t *h, const char *gpu_bus, char *buf,
                                size_t len);
/* The NUMA node a rank of host h is near: its GPU's when gpu >= 0 and known, else -1. */
int chorus__topo_gpu_numa(const chorus_topo_host_t *h, int gpu);
/* The NUMA node of h's best NIC (the fastest, then the first); -1 if none or unknown. */
int chorus__topo_nic_numa(const chorus_topo_host_t *h);
/* Human-readable listing (chorus-bench --info). */
void chorus__topo_print(const chorus_topo_t *t, FILE *out);

/* ---- Discovery ---- */

/* The local host: hwloc when built with it, else sysconf. One host in the result. */
chorus_status_t chorus__topo_discover(chorus_topo_t **topo_p);
/* CHORUS_TOPO_FILE when set (loaded, never merged with discovery), else discovery. */
chorus_status_t chorus__topo_local(chorus_topo_t **topo_p);
/* hwloc discovery into h (topo_hwloc.c); CHORUS_ERR_UNSUPPORTED without hwloc. */
chorus_status_t chorus__topo_discover_hwloc(chorus_topo_host_t *h);

/* ---- Local facts (local.c; sysfs and procfs, a few small reads each) ---- */

/* The NUMA node of the CPU the calling thread runs on now; -1 if unknown. */
int chorus__topo_cpu_numa(void);
/* The NUMA node of PCI device bus_id ("0000:17:00.0"); -1 if unknown. */
int chorus__topo_pci_numa(const char *bus_id);
/* The NUMA node of network interface ifname (an exact name, else the first interface it
 * is a prefix of, as CHORUS_SOCKET_IFNAME matches); -1 if virtual or unknown. */
int chorus__topo_if_numa(const char *ifname);
/* The interface that carries this process's traffic: CHORUS_SOCKET_IFNAME as written, else
 * the IPv4 default route's. 0 and the name in buf, or -1. */
int chorus__topo_net_ifname(char *buf, size_t len);
/* What communicator creation exchanges about a rank: *numa_p the node of the CPU it runs
 * on, *nic_numa_p the node of the interface carrying its traffic (chorus__topo_net_ifname).
 * With CHORUS_TOPO_FILE set, the file's NIC of that name (else its best NIC) on this host
 * gives the NIC's node, for VMs whose sysfs is wrong. -1 where unknown; never fails. */
void chorus__topo_local_numa(int *numa_p, int *nic_numa_p);

/* ---- JSON (topo_json.c; schema: docs/topology.schema.json) ---- */

/* Parses a topology from a file / a string. CHORUS_ERR_INVALID_ARGUMENT names the field
 * that is missing or of the wrong type. */
chorus_status_t chorus__topo_load(const char *path, chorus_topo_t **topo_p);
chorus_status_t chorus__topo_load_string(const char *json, chorus_topo_t **topo_p);
/* Writes t in the schema (keys in a fixed order, so equal topologies give equal bytes).
 * The string is malloc'ed; the caller frees it. */
chorus_status_t chorus__topo_dump_string(const chorus_topo_t *t, char **json_p);
chorus_status_t chorus__topo_dump(const chorus_topo_t *t, const char *path);

/* ---- Orders (order.c; pure) ---- */

/*
 * A ring order for n ranks: order[i] is the rank at position i, every rank once. Ranks of
 * one host are adjacent (hosts in index order, host_of[] numbered 0 .. nhosts-1 in any
 * interleaving), so the ring crosses between hosts exactly nhosts times (never for one
 * host). Within a host, ranks are grouped by NUMA node (numa_of[r], -1 unknown; NULL: all
 * unknown), and when nic_numa (per host; NULL or -1: unknown) names the NUMA node of the
 * host's NIC, the ranks of that node are split between both ends of the host's stretch,
 * so the ring enters and leaves the host at ranks near the NIC. Ties keep rank order.
 * CHORUS_ERR_INVALID_ARGUMENT if a host index is out of range.
 */
chorus_status_t chorus__topo_ring_order(int n, const int *host_of, int nhosts,
                                        const int *numa_of, const int *nic_numa, int *order);
/* Checks that order is a permutation of 0..n-1 and writes its inverse: pos[order[i]] = i.
 * CHORUS_ERR_INVALID_ARGUMENT names the first bad entry; pos is then undefined. */
chorus_status_t chorus__topo_order_invert(int n, const int *order, int *pos);
/* How many ring edges order[i] -> order[i + 1 mod n] join ranks of different hosts. */
int chorus__topo_ring_crossings(int n, const int *host_of, const int *order);

#endif
