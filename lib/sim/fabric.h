/*
 * A described fabric, for chorus-sim and the tuner (lib/tune): hosts holding ranks, each
 * rank's port into its host's interconnect (NVLink, PCIe or shared memory), the host's
 * NICs (rails) and a network of switches, all as directed links with a bandwidth and a
 * latency, and the route of a message between any two ranks.
 *
 * Where links come from. A description (docs/fabric.md; JSON, fabric_json.c) names the
 * hosts, ranks per host, the intra-host interconnect, the NICs, and the network: one
 * switch, a fat tree of 2 or 3 levels with oversubscription per level, a rail-optimised
 * fat tree, or an explicit list of switches and links; overrides then slow or cut single
 * links. chorus__fabric_build turns it into the link graph below.
 *
 * Routes. Between ranks of one host: the sender's port up, the receiver's port down (the
 * host's interconnect is a non-blocking switch; with a bus, every such message also
 * crosses the host's one shared bus link, as copies through shared memory share memory
 * bandwidth). Between hosts: rank r leaves by NIC (local index % nics) and reaches the
 * peer's NIC of the same rule, over a shortest path of the network graph; among equal
 * next hops one is picked by a hash of the two endpoints (ECMP), the same every run.
 */
#ifndef CHORUS_SIM_FABRIC_H
#define CHORUS_SIM_FABRIC_H

#include "chorus.h"

#include <stdint.h>

#define CHORUS_FAB_NAME_MAX 48

typedef enum {
    CHORUS_FAB_NET_SWITCH = 0, /* every NIC on one non-blocking switch */
    CHORUS_FAB_NET_FAT_TREE,   /* 2 or 3 levels; with nics > 1 each rail its own leaves */
    CHORUS_FAB_NET_EXPLICIT,   /* switches and links as listed */
} chorus_fab_net_kind_t;

/* One link of an explicit network: endpoints are switch names or "hN.nicK". */
typedef struct {
    char a[CHORUS_FAB_NAME_MAX], b[CHORUS_FAB_NAME_MAX];
    double gbps;  /* each direction */
    double lat_us;
} chorus_fab_xlink_t;

/* A change to one link (both directions) after the build: "h3.nic0", "h3.r1" (rank 1 of
 * host 3's port), "h3.bus", "leaf0-spine1", or any explicit link's "a-b". */
typedef struct {
    char link[2 * CHORUS_FAB_NAME_MAX + 2];
    double factor; /* bandwidth times this (0 < factor); ignored when down */
    int down;      /* no traffic: a route that needs it fails */
} chorus_fab_override_t;

/* What a description says, before it is built. */
typedef struct {
    char name[64];
    int hosts;
    int ranks_per_host;
    /* Intra-host: each rank's port (both directions) and an optional shared bus. */
    char intra_kind[16]; /* "nvlink", "pcie", "shm": shown only */
    double intra_gbps;   /* per rank port, each direction; Gbit/s */
    double intra_lat_us;
    double bus_gbps;     /* 0: no bus */
    int intra_pairs;     /* 1: each ordered pair of a host's ranks has a link of its own, of
                          * intra_gbps and twice intra_lat_us, instead of crossing the two
                          * ranks' ports: shared-memory rings, one per pair, whose limit is
                          * the copies at each end rather than a port */
    double intra_sendbuf;/* as nic_sendbuf, for messages inside a host */
    /* NICs: per host; rank r uses NIC (r's local index) % nics. */
    int nics;
    double nic_gbps;
    double nic_lat_us;
    double nic_sendbuf;  /* bytes a rank may have in flight to one peer on another host
                          * before a send waits for the wire (TCP's socket buffer); 0: a
                          * send is done when its data has left (RDMA, rendezvous) */
    double nic_burst;    /* > 0: each NIC link, both ways, is a token bucket of this many
                          * bytes (a shaper such as tbf): it runs at nic_peak_gbps while
                          * the bucket holds tokens, at its rate once it is empty */
    double nic_peak_gbps;
    /* The network. */
    chorus_fab_net_kind_t net;
    int levels;          /* fat tree: 2 or 3 */
    int hosts_per_leaf;  /* fat tree: hosts under one leaf (per rail) */
    int leaves_per_pod;  /* 3 levels: leaves under one aggregation block */
    double oversub[3];   /* fat tree, per level from the leaves up: down/up capacity (>= 1) */
    double switch_lat_us;/* per switch crossed */
    int nswitches;       /* explicit */
    char (*switches)[CHORUS_FAB_NAME_MAX];
    int nxlinks;
    chorus_fab_xlink_t *xlinks;
    /* Software and CPU: per message on each end, and the local reduce and copy rates. */
    double msg_us;       /* per message, sender and receiver each */
    double reduce_GBps;  /* float32 sum: GB/s of one input (other types scaled by size;
                          * float16 and bfloat16 cost 3 times their bytes: each element is
                          * converted both ways) */
    double copy_GBps;    /* memcpy, GB/s */
    int cores_per_host;  /* CPU work of a host's ranks shares these (0: one per rank) */
    /* CPU time per byte of a message at each end, inside a host (intra_) and across hosts
     * (net_): the copies into and out of a shared-memory ring or a socket, which the link's
     * rate alone does not charge to the ranks' CPUs. ns per byte; 0: none. */
    double intra_send_ns, intra_recv_ns, net_send_ns, net_recv_ns;
    double step_us;      /* the engine's overhead per reduce or copy step */
    double wait_us;      /* a receive on a host with more ranks than cores: its rank has
                          * yielded the core and is switched back in */
    /* Per-byte CPU work runs at cache speed while the host's working set (every local
     * rank's send and receive buffer) fits in llc_mb, dram_factor times slower once it is
     * 4 times larger, log-linear between; llc_mb 0: always cache speed. */
    double llc_mb, dram_factor;
    int recv_streams;    /* 1: a receive copies out while its data streams in: it may begin
                          * once the first bytes are there (the send's software cost and the
                          * path's latency after the send began) and ends no sooner than its
                          * last bytes plus msg_us; 0: it begins when the last bytes are there */
    int noverrides;
    chorus_fab_override_t *overrides;
} chorus_fab_desc_t;

/* A directed link. */
typedef struct {
    double bw;     /* bytes per second; 0: down */
    double burst;  /* > 0: a token bucket of this many bytes (nic.burst_bytes) */
    double peak;   /* its rate while the bucket holds tokens, bytes per second */
    double lat_s;
    int from, to;  /* nodes */
} chorus_fab_link_t;

typedef struct chorus_fabric chorus_fabric_t;

/* Fills d with a description's defaults: 1 host of 1 rank, shm 100 Gbit/s, one NIC of
 * 100 Gbit/s on one switch. Owned arrays stay NULL. */
void chorus__fab_desc_default(chorus_fab_desc_t *d);
/* Frees what d owns (switches, xlinks, overrides). */
void chorus__fab_desc_free(chorus_fab_desc_t *d);

/* Builds the link graph of d. CHORUS_ERR_INVALID_ARGUMENT naming the field for a
 * description that does not make sense (no hosts, a rate of 0, an unknown switch in an
 * explicit link, an override of a link that does not exist). */
chorus_status_t chorus__fabric_build(const chorus_fab_desc_t *d, chorus_fabric_t **fab_p);
void chorus__fabric_free(chorus_fabric_t *fab);

int chorus__fabric_nranks(const chorus_fabric_t *fab);
int chorus__fabric_host_of(const chorus_fabric_t *fab, int rank);
const chorus_fab_desc_t *chorus__fabric_desc(const chorus_fabric_t *fab);
int chorus__fabric_nlinks(const chorus_fabric_t *fab);
const chorus_fab_link_t *chorus__fabric_link(const chorus_fabric_t *fab, int id);
/* "h3.nic0 up", "leaf2->spine0", ...: for reports. */
void chorus__fabric_link_name(const chorus_fabric_t *fab, int id, char *buf, size_t len);

/* The links a message from rank a to rank b crosses, in order, into *links_p (owned by
 * the fabric, valid until it is freed; routes are computed once and kept), their number
 * into *n_p and the sum of their latencies into *lat_s_p. CHORUS_ERR_REMOTE when no path
 * exists (a link down with no other way round). */
chorus_status_t chorus__fabric_route(chorus_fabric_t *fab, int a, int b, const int32_t **links_p,
                                     int *n_p, double *lat_s_p);

/* ---- fabric_json.c ---- */

/* Parses a JSON description (docs/fabric.md) into d (defaults first). name names the text
 * in messages. CHORUS_ERR_INVALID_ARGUMENT with the field's path for a bad one. */
chorus_status_t chorus__fab_desc_parse(const char *text, const char *name, chorus_fab_desc_t *d);
chorus_status_t chorus__fab_desc_load(const char *path, chorus_fab_desc_t *d);
/* Writes d as JSON; returns 0, -1 on a write error. */
int chorus__fab_desc_write(const chorus_fab_desc_t *d, void *file /* FILE * */);

/* ---- fabric_presets.c ---- */

/* A description made from a preset, "netns:hosts=16,ranks=2,mbit=100" and the like. */
chorus_status_t chorus__fab_desc_preset(const char *spec, chorus_fab_desc_t *d);

/* A description from a chorus-fabric --json report (fabric_import.c says what is taken from
 * it); CHORUS_ERR_INVALID_ARGUMENT, naming the file, for anything else. */
chorus_status_t chorus__fab_desc_from_fabric(const char *path, chorus_fab_desc_t *d);
/* The presets and their keys, for usage messages. */
const char *chorus__fab_preset_help(void);

#endif
