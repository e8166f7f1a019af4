/*
 * The link graph of a described fabric, and routes through it (fabric.h says what the
 * model is). Nodes are numbered: ranks, then host hubs, then NIC endpoints, then switches.
 * Every physical link is two directed links, 2k (up, or a to b) and 2k + 1, and has one
 * name for both, which reports and overrides use.
 */
#include "sim/fabric.h"

#include "util/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAB_LINK_NAME_MAX (2 * CHORUS_FAB_NAME_MAX + 2)

/* A cached route: key (a, b), its links at off .. off + n in the pool. */
typedef struct {
    int32_t a, b; /* a == -1: empty slot */
    uint32_t off;
    int32_t n;
    double lat_s;
} fab_route_t;

struct chorus_fabric {
    chorus_fab_desc_t desc; /* shallow copy: the owned arrays are not used after build */
    int nranks, nhosts, rph, nics;
    int nnodes, nswitches;
    int node_hub0, node_nic0, node_sw0;
    char (*sw_names)[CHORUS_FAB_NAME_MAX];
    chorus_fab_link_t *links;
    char (*names)[FAB_LINK_NAME_MAX]; /* per physical link (nlinks / 2) */
    int nlinks, caplinks;
    /* Per rank: its port's up link (rank -> hub); down is up + 1. Per host: the bus link
     * (-1: none). Per NIC endpoint (host * nics + k): its up link (nic -> switch). */
    int32_t *port_up, *bus, *nic_up;
    /* With intra_pairs, per host and ordered pair of local ranks (h * rph + la) * rph + lb:
     * the directed link la -> lb. */
    int32_t *pair;
    /* The network graph for routing: outgoing links per node (CSR) over NIC endpoints
     * and switches, and incoming (reverse) for the distances. */
    int32_t *out_begin, *out_link, *in_begin, *in_link;
    int32_t *dist, *queue; /* per node, scratch of one search */
    /* Routes. */
    fab_route_t *routes;
    uint32_t caproutes, nroutes;
    int32_t *pool;
    uint32_t npool, cappool;
};

void chorus__fab_desc_default(chorus_fab_desc_t *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "unnamed");
    d->hosts = 1;
    d->ranks_per_host = 1;
    snprintf(d->intra_kind, sizeof d->intra_kind, "shm");
    d->intra_gbps = 100;
    d->intra_lat_us = 0.5;
    d->nics = 1;
    d->nic_gbps = 100;
    d->nic_lat_us = 1;
    d->nic_sendbuf = 0;
    d->net = CHORUS_FAB_NET_SWITCH;
    d->levels = 2;
    d->hosts_per_leaf = 16;
    d->leaves_per_pod = 8;
    d->oversub[0] = d->oversub[1] = d->oversub[2] = 1;
    d->switch_lat_us = 0.5;
    d->msg_us = 2;
    d->reduce_GBps = 10;
    d->copy_GBps = 10;
}

void chorus__fab_desc_free(chorus_fab_desc_t *d)
{
    free(d->switches);
    free(d->xlinks);
    free(d->overrides);
    d->switches = NULL;
    d->xlinks = NULL;
    d->overrides = NULL;
    d->nswitches = d->nxlinks = d->noverrides = 0;
}

/* ---- Building ---- */

static chorus_status_t fab_bad(const char *what)
{
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "fabric: %s", what);
}

/* Adds the two directed links of one physical link a <-> b; returns the up link's id. */
static int fab_link(chorus_fabric_t *f, int a, int b, double gbps, double lat_us,
                    const char *name)
{
    if (f->nlinks + 2 > f->caplinks) {
        int cap = f->caplinks ? 2 * f->caplinks : 256;
        chorus_fab_link_t *l = realloc(f->links, (size_t)cap * sizeof *l);
        char (*n)[FAB_LINK_NAME_MAX] = l ? realloc(f->names, (size_t)cap / 2 * sizeof *n) : NULL;
        if (l != NULL) f->links = l;
        if (n == NULL) return -1;
        f->names = n;
        f->caplinks = cap;
    }
    int id = f->nlinks;
    f->links[id].bw = gbps * 1e9 / 8;
    f->links[id].burst = 0;
    f->links[id].peak = 0;
    f->links[id].lat_s = lat_us * 1e-6;
    f->links[id].from = a;
    f->links[id].to = b;
    f->links[id + 1] = f->links[id];
    f->links[id + 1].from = b;
    f->links[id + 1].to = a;
    snprintf(f->names[id / 2], FAB_LINK_NAME_MAX, "%s", name);
    f->nlinks += 2;
    return id;
}

static int fab_switch(chorus_fabric_t *f, const char *fmt, int x, int y)
{
    int id = f->nswitches++;
    snprintf(f->sw_names[id], CHORUS_FAB_NAME_MAX, fmt, x, y);
    return f->node_sw0 + id;
}

/* How many switches the network needs, for the node count. */
static int fab_count_switches(const chorus_fab_desc_t *d)
{
    int leaves, pods;

    switch (d->net) {
    case CHORUS_FAB_NET_SWITCH: return 1;
    case CHORUS_FAB_NET_EXPLICIT: return d->nswitches;
    case CHORUS_FAB_NET_FAT_TREE:
        leaves = (d->hosts + d->hosts_per_leaf - 1) / d->hosts_per_leaf;
        if (d->levels == 2)
            return d->nics * leaves + (int)ceil(d->hosts_per_leaf / d->oversub[0]);
        pods = (leaves + d->leaves_per_pod - 1) / d->leaves_per_pod;
        return d->nics * leaves + pods * (int)ceil(d->hosts_per_leaf / d->oversub[0]) +
               (int)ceil(d->nics * d->leaves_per_pod / d->oversub[1]);
    }
    return 0;
}

static chorus_status_t fab_check(const chorus_fab_desc_t *d)
{
    if (d->hosts < 1) return fab_bad("hosts must be 1 or more");
    if (d->ranks_per_host < 1) return fab_bad("ranks_per_host must be 1 or more");
    if ((double)d->hosts * d->ranks_per_host > (1 << 24)) return fab_bad("too many ranks");
    if (d->nics < 1 || d->nics > 64) return fab_bad("nics must be 1 to 64");
    if (!(d->intra_gbps > 0) || !(d->nic_gbps > 0)) return fab_bad("a bandwidth must be > 0");
    if (d->bus_gbps < 0) return fab_bad("intra.bus_gbps must be >= 0");
    if (!(d->nic_sendbuf >= 0) || d->nic_sendbuf > 1e12)
        return fab_bad("nic.send_buffer_bytes must be 0 to 1e12");
    if (!(d->nic_burst >= 0) || d->nic_burst > 1e12)
        return fab_bad("nic.burst_bytes must be 0 to 1e12");
    if (d->nic_burst > 0 && !(d->nic_peak_gbps > d->nic_gbps && d->nic_peak_gbps < 1e9))
        return fab_bad("nic.peak_gbps must be above nic.gbps when nic.burst_bytes is set");
    if (!(d->intra_sendbuf >= 0) || d->intra_sendbuf > 1e12)
        return fab_bad("intra.send_buffer_bytes must be 0 to 1e12");
    if (d->intra_pairs && (d->ranks_per_host > 256 || (double)d->hosts * d->ranks_per_host *
                                                          d->ranks_per_host > (1 << 24)))
        return fab_bad("intra.pairs: at most 256 ranks per host and 16M pairs in all");
    if (!(d->intra_send_ns >= 0) || !(d->intra_recv_ns >= 0) || !(d->net_send_ns >= 0) ||
        !(d->net_recv_ns >= 0))
        return fab_bad("send_ns and recv_ns must be >= 0");
    if (!(d->step_us >= 0) || !(d->wait_us >= 0) || !(d->llc_mb >= 0) ||
        !(d->dram_factor >= 0))
        return fab_bad("cpu.step_us, wait_us, llc_mb and dram_factor must be >= 0");
    if (d->cores_per_host < 0) return fab_bad("cpu.cores_per_host must be >= 0");
    if (!(d->reduce_GBps > 0) || !(d->copy_GBps > 0))
        return fab_bad("cpu.reduce_GBps and cpu.copy_GBps must be > 0");
    if (d->intra_lat_us < 0 || d->nic_lat_us < 0 || d->switch_lat_us < 0 || d->msg_us < 0)
        return fab_bad("latencies must be >= 0");
    if (d->net == CHORUS_FAB_NET_FAT_TREE) {
        if (d->levels != 2 && d->levels != 3) return fab_bad("network.levels must be 2 or 3");
        if (d->hosts_per_leaf < 1) return fab_bad("network.hosts_per_leaf must be 1 or more");
        if (d->levels == 3 && d->leaves_per_pod < 1)
            return fab_bad("network.leaves_per_pod must be 1 or more");
        for (int l = 0; l < d->levels - 1; l++)
            if (!(d->oversub[l] >= 1)) return fab_bad("network.oversubscription must be >= 1");
    }
    if (d->net == CHORUS_FAB_NET_EXPLICIT && (d->nswitches < 1 || d->nxlinks < 1))
        return fab_bad("an explicit network needs switches and links");
    return CHORUS_SUCCESS;
}

static int fab_nic_node(const chorus_fabric_t *f, int host, int k)
{
    return f->node_nic0 + host * f->nics + k;
}

/* Connects NIC k of host h to switch sw: the NIC's two links. */
static int fab_nic_link(chorus_fabric_t *f, int h, int k, int sw)
{
    char name[FAB_LINK_NAME_MAX];
    snprintf(name, sizeof name, "h%d.nic%d", h, k);
    int id = fab_link(f, fab_nic_node(f, h, k), sw, f->desc.nic_gbps, f->desc.nic_lat_us, name);
    if (id >= 0) {
        f->nic_up[h * f->nics + k] = id;
        for (int dir = 0; dir < 2; dir++) {
            f->links[id + dir].burst = f->desc.nic_burst;
            f->links[id + dir].peak = f->desc.nic_peak_gbps * 1e9 / 8;
        }
    }
    return id;
}

static int fab_sw_link(chorus_fabric_t *f, int lo, int hi, double gbps)
{
    char name[FAB_LINK_NAME_MAX];
    snprintf(name, sizeof name, "%s-%s", f->sw_names[lo - f->node_sw0], f->sw_names[hi - f->node_sw0]);
    return fab_link(f, lo, hi, gbps, f->desc.switch_lat_us, name);
}

static chorus_status_t fab_build_fat_tree(chorus_fabric_t *f)
{
    const chorus_fab_desc_t *d = &f->desc;
    const int hpl = d->hosts_per_leaf, leaves = (f->nhosts + hpl - 1) / hpl;
    const int nup = (int)ceil(hpl / d->oversub[0]); /* spines, or aggs per pod */
    const double up_gbps = hpl * d->nic_gbps / d->oversub[0] / nup;
    int *leaf = malloc((size_t)d->nics * leaves * sizeof *leaf);

    if (leaf == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: %d leaves", leaves);
    for (int k = 0; k < d->nics; k++)
        for (int l = 0; l < leaves; l++)
            leaf[k * leaves + l] = d->nics > 1 ? fab_switch(f, "rail%d.leaf%d", k, l)
                                               : fab_switch(f, "leaf%d", l, 0);
    for (int h = 0; h < f->nhosts; h++)
        for (int k = 0; k < d->nics; k++)
            if (fab_nic_link(f, h, k, leaf[k * leaves + h / hpl]) < 0) goto nomem;
    if (d->levels == 2) {
        /* One leaf (per rail) needs no spine, but rails need one to meet. */
        if (leaves > 1 || d->nics > 1) {
            int spine0 = f->node_sw0 + f->nswitches;
            for (int s = 0; s < nup; s++) fab_switch(f, "spine%d", s, 0);
            for (int x = 0; x < d->nics * leaves; x++)
                for (int s = 0; s < nup; s++)
                    if (fab_sw_link(f, leaf[x], spine0 + s, up_gbps) < 0) goto nomem;
        }
    } else {
        const int lpp = d->leaves_per_pod, pods = (leaves + lpp - 1) / lpp;
        const int ncore = (int)ceil(d->nics * lpp / d->oversub[1]);
        /* An aggregation switch has a link to every leaf of its pod (all rails). */
        const double agg_down_gbps = d->nics * lpp * up_gbps;
        const double core_gbps = agg_down_gbps / d->oversub[1] / ncore;
        int agg0 = f->node_sw0 + f->nswitches, core0;
        for (int p = 0; p < pods; p++)
            for (int a = 0; a < nup; a++) fab_switch(f, "pod%d.agg%d", p, a);
        core0 = f->node_sw0 + f->nswitches;
        for (int c = 0; c < ncore; c++) fab_switch(f, "core%d", c, 0);
        for (int k = 0; k < d->nics; k++)
            for (int l = 0; l < leaves; l++)
                for (int a = 0; a < nup; a++)
                    if (fab_sw_link(f, leaf[k * leaves + l], agg0 + (l / lpp) * nup + a,
                                    up_gbps) < 0)
                        goto nomem;
        if (pods > 1)
            for (int x = 0; x < pods * nup; x++)
                for (int c = 0; c < ncore; c++)
                    if (fab_sw_link(f, agg0 + x, core0 + c, core_gbps) < 0) goto nomem;
    }
    free(leaf);
    return CHORUS_SUCCESS;
nomem:
    free(leaf);
    return chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: no memory for the links");
}

/* The node an explicit link's endpoint names: a switch, or "hN.nicK". */
static int fab_endpoint(const chorus_fabric_t *f, const char *name)
{
    int h, k, len = 0;

    if (sscanf(name, "h%d.nic%d%n", &h, &k, &len) == 2 && name[len] == '\0') {
        if (h < 0 || h >= f->nhosts || k < 0 || k >= f->nics) return -1;
        return fab_nic_node(f, h, k);
    }
    for (int s = 0; s < f->nswitches; s++)
        if (strcmp(f->sw_names[s], name) == 0) return f->node_sw0 + s;
    return -1;
}

static chorus_status_t fab_build_explicit(chorus_fabric_t *f, const chorus_fab_desc_t *d)
{
    char why[256];

    for (int s = 0; s < d->nswitches; s++) {
        for (int t = 0; t < s; t++)
            if (strcmp(d->switches[t], d->switches[s]) == 0) {
                snprintf(why, sizeof why, "network.switches: \"%s\" twice", d->switches[s]);
                return fab_bad(why);
            }
        snprintf(f->sw_names[f->nswitches++], CHORUS_FAB_NAME_MAX, "%s", d->switches[s]);
    }
    for (int i = 0; i < d->nxlinks; i++) {
        const chorus_fab_xlink_t *x = &d->xlinks[i];
        int a = fab_endpoint(f, x->a), b = fab_endpoint(f, x->b), id;
        char name[FAB_LINK_NAME_MAX];
        if (a < 0 || b < 0 || a == b || !(x->gbps > 0) || x->lat_us < 0) {
            snprintf(why, sizeof why, "network.links[%d] (%s - %s): %s", i, x->a, x->b,
                     a < 0 || b < 0 ? "an endpoint is neither a switch nor hN.nicK of a host"
                     : a == b       ? "both ends are the same"
                                    : "gbps must be > 0 and lat_us >= 0");
            return fab_bad(why);
        }
        snprintf(name, sizeof name, "%s-%s", x->a, x->b);
        id = fab_link(f, a, b, x->gbps, x->lat_us, name);
        if (id < 0) return chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: no memory for the links");
        if (a < f->node_sw0) f->nic_up[a - f->node_nic0] = id;
        else if (b < f->node_sw0) f->nic_up[b - f->node_nic0] = id + 1;
    }
    for (int e = 0; e < f->nhosts * f->nics; e++)
        if (f->nic_up[e] < 0) {
            snprintf(why, sizeof why, "network.links: h%d.nic%d is linked to nothing",
                     e / f->nics, e % f->nics);
            return fab_bad(why);
        }
    return CHORUS_SUCCESS;
}

static chorus_status_t fab_apply_overrides(chorus_fabric_t *f, const chorus_fab_desc_t *d)
{
    for (int i = 0; i < d->noverrides; i++) {
        const chorus_fab_override_t *o = &d->overrides[i];
        int hit = 0;
        if (!o->down && !(o->factor > 0)) {
            char why[160];
            snprintf(why, sizeof why, "overrides[%d] (%s): factor must be > 0", i, o->link);
            return fab_bad(why);
        }
        for (int p = 0; p < f->nlinks / 2; p++) {
            if (strcmp(f->names[p], o->link) != 0) continue;
            for (int dir = 0; dir < 2; dir++)
                f->links[2 * p + dir].bw = o->down ? 0 : f->links[2 * p + dir].bw * o->factor;
            hit = 1;
        }
        if (!hit) {
            char why[200];
            snprintf(why, sizeof why, "overrides[%d]: no link is named \"%s\"", i, o->link);
            return fab_bad(why);
        }
    }
    return CHORUS_SUCCESS;
}

/* The CSR lists of the network graph (NIC endpoints and switches). */
static chorus_status_t fab_index(chorus_fabric_t *f)
{
    const int n = f->nnodes;

    f->out_begin = calloc((size_t)n + 1, sizeof *f->out_begin);
    f->in_begin = calloc((size_t)n + 1, sizeof *f->in_begin);
    f->out_link = malloc((size_t)f->nlinks * sizeof *f->out_link);
    f->in_link = malloc((size_t)f->nlinks * sizeof *f->in_link);
    f->dist = malloc((size_t)n * sizeof *f->dist);
    f->queue = malloc((size_t)n * sizeof *f->queue);
    if (!f->out_begin || !f->in_begin || !f->out_link || !f->in_link || !f->dist || !f->queue)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: no memory for %d nodes", n);
    for (int l = 0; l < f->nlinks; l++) {
        f->out_begin[f->links[l].from + 1]++;
        f->in_begin[f->links[l].to + 1]++;
    }
    for (int v = 0; v < n; v++) {
        f->out_begin[v + 1] += f->out_begin[v];
        f->in_begin[v + 1] += f->in_begin[v];
    }
    {
        int32_t *o = calloc((size_t)n, sizeof *o), *i = calloc((size_t)n, sizeof *i);
        if (o == NULL || i == NULL) {
            free(o);
            free(i);
            return chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: no memory for %d nodes", n);
        }
        for (int l = 0; l < f->nlinks; l++) {
            int a = f->links[l].from, b = f->links[l].to;
            f->out_link[f->out_begin[a] + o[a]++] = l;
            f->in_link[f->in_begin[b] + i[b]++] = l;
        }
        free(o);
        free(i);
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__fabric_build(const chorus_fab_desc_t *d, chorus_fabric_t **fab_p)
{
    chorus_fabric_t *f;
    chorus_status_t st = fab_check(d);
    int nsw;

    if (st != CHORUS_SUCCESS) return st;
    f = calloc(1, sizeof *f);
    if (f == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: no memory");
    f->desc = *d;
    /* The copy keeps the numbers; the lists stay with the caller's description. */
    f->desc.switches = NULL;
    f->desc.xlinks = NULL;
    f->desc.overrides = NULL;
    f->desc.nswitches = f->desc.nxlinks = f->desc.noverrides = 0;
    f->nhosts = d->hosts;
    f->rph = d->ranks_per_host;
    f->nranks = d->hosts * d->ranks_per_host;
    f->nics = d->nics;
    nsw = fab_count_switches(d);
    f->node_hub0 = f->nranks;
    f->node_nic0 = f->node_hub0 + f->nhosts;
    f->node_sw0 = f->node_nic0 + f->nhosts * f->nics;
    f->nnodes = f->node_sw0 + nsw;
    f->sw_names = calloc((size_t)nsw + 1, sizeof *f->sw_names);
    f->port_up = malloc((size_t)f->nranks * sizeof *f->port_up);
    f->bus = malloc((size_t)f->nhosts * sizeof *f->bus);
    f->nic_up = malloc((size_t)f->nhosts * f->nics * sizeof *f->nic_up);
    if (!f->sw_names || !f->port_up || !f->bus || !f->nic_up) {
        st = chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: no memory for %d ranks", f->nranks);
        goto err;
    }
    for (int e = 0; e < f->nhosts * f->nics; e++) f->nic_up[e] = -1;
    /* Intra-host: ports and buses. */
    for (int r = 0; r < f->nranks; r++) {
        char name[FAB_LINK_NAME_MAX];
        snprintf(name, sizeof name, "h%d.r%d", r / f->rph, r % f->rph);
        f->port_up[r] = fab_link(f, r, f->node_hub0 + r / f->rph, d->intra_gbps, d->intra_lat_us,
                                 name);
        if (f->port_up[r] < 0) goto nomem;
    }
    if (d->intra_pairs) {
        const int rph = f->rph;
        f->pair = malloc((size_t)f->nhosts * rph * rph * sizeof *f->pair + 1);
        if (f->pair == NULL) goto nomem;
        for (int h = 0; h < f->nhosts; h++)
            for (int a = 0; a < rph; a++)
                for (int b = a + 1; b < rph; b++) {
                    char name[FAB_LINK_NAME_MAX];
                    int id;
                    snprintf(name, sizeof name, "h%d.r%d-r%d", h, a, b);
                    id = fab_link(f, h * rph + a, h * rph + b, d->intra_gbps,
                                  2 * d->intra_lat_us, name);
                    if (id < 0) goto nomem;
                    f->pair[((size_t)h * rph + a) * rph + b] = id;
                    f->pair[((size_t)h * rph + b) * rph + a] = id + 1;
                }
    }
    for (int h = 0; h < f->nhosts; h++) {
        char name[FAB_LINK_NAME_MAX];
        f->bus[h] = -1;
        if (d->bus_gbps <= 0) continue;
        snprintf(name, sizeof name, "h%d.bus", h);
        f->bus[h] = fab_link(f, f->node_hub0 + h, f->node_hub0 + h, d->bus_gbps, 0, name);
        if (f->bus[h] < 0) goto nomem;
    }
    /* The network. */
    if (d->net == CHORUS_FAB_NET_SWITCH) {
        int sw = fab_switch(f, "switch", 0, 0);
        for (int h = 0; h < f->nhosts; h++)
            for (int k = 0; k < f->nics; k++)
                if (fab_nic_link(f, h, k, sw) < 0) goto nomem;
    } else if (d->net == CHORUS_FAB_NET_FAT_TREE) {
        st = fab_build_fat_tree(f);
    } else {
        st = fab_build_explicit(f, d);
    }
    if (st == CHORUS_SUCCESS) st = fab_apply_overrides(f, d);
    if (st == CHORUS_SUCCESS) st = fab_index(f);
    if (st != CHORUS_SUCCESS) goto err;
    *fab_p = f;
    return CHORUS_SUCCESS;
nomem:
    st = chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: no memory for the links");
err:
    chorus__fabric_free(f);
    return st;
}

void chorus__fabric_free(chorus_fabric_t *f)
{
    if (f == NULL) return;
    free(f->sw_names);
    free(f->links);
    free(f->names);
    free(f->port_up);
    free(f->bus);
    free(f->nic_up);
    free(f->pair);
    free(f->out_begin);
    free(f->out_link);
    free(f->in_begin);
    free(f->in_link);
    free(f->dist);
    free(f->queue);
    free(f->routes);
    free(f->pool);
    free(f);
}

int chorus__fabric_nranks(const chorus_fabric_t *f) { return f->nranks; }
int chorus__fabric_host_of(const chorus_fabric_t *f, int rank) { return rank / f->rph; }
const chorus_fab_desc_t *chorus__fabric_desc(const chorus_fabric_t *f) { return &f->desc; }
int chorus__fabric_nlinks(const chorus_fabric_t *f) { return f->nlinks; }
const chorus_fab_link_t *chorus__fabric_link(const chorus_fabric_t *f, int id)
{
    return &f->links[id];
}

void chorus__fabric_link_name(const chorus_fabric_t *f, int id, char *buf, size_t len)
{
    const chorus_fab_link_t *l = &f->links[id];
    const char *dir;

    if (l->from == l->to) dir = "";
    else if (l->from < f->node_hub0 && l->to < f->node_hub0)
        dir = id % 2 == 0 ? " (forth)" : " (back)"; /* a pair's link: first rank to second */
    else if (l->from < f->node_hub0) dir = " (out)";   /* rank -> hub */
    else if (l->to < f->node_hub0) dir = " (in)";      /* hub -> rank */
    else if (l->from < f->node_sw0 && l->from >= f->node_nic0) dir = " (out)";
    else if (l->to < f->node_sw0 && l->to >= f->node_nic0) dir = " (in)";
    else dir = id % 2 == 0 ? " (up)" : " (down)";
    snprintf(buf, len, "%s%s", f->names[id / 2], dir);
}

/* ---- Routes ---- */

static uint32_t fab_hash(uint32_t a, uint32_t b, uint32_t c)
{
    uint64_t x = ((uint64_t)a * 0x9E3779B1u) ^ ((uint64_t)b * 0x85EBCA77u) ^ ((uint64_t)c * 0xC2B2AE3Du);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint32_t)x;
}

static int fab_pool_push(chorus_fabric_t *f, int32_t link)
{
    if (f->npool == f->cappool) {
        uint32_t cap = f->cappool ? 2 * f->cappool : 1024;
        int32_t *p = realloc(f->pool, (size_t)cap * sizeof *p);
        if (p == NULL) return -1;
        f->pool = p;
        f->cappool = cap;
    }
    f->pool[f->npool++] = link;
    return 0;
}

/* Appends the network path from NIC endpoint node src to dst to the pool: distances to
 * dst over usable links, then a walk from src along them, ECMP by hash. */
static chorus_status_t fab_net_path(chorus_fabric_t *f, int src, int dst, double *lat_s)
{
    int head = 0, tail = 0, v = src, hop = 0;

    for (int i = 0; i < f->nnodes; i++) f->dist[i] = -1;
    f->dist[dst] = 0;
    f->queue[tail++] = dst;
    while (head < tail) {
        int u = f->queue[head++];
        for (int k = f->in_begin[u]; k < f->in_begin[u + 1]; k++) {
            const chorus_fab_link_t *l = &f->links[f->in_link[k]];
            /* Only switches relay: a path never passes through another host. */
            if (l->bw <= 0 || f->dist[l->from] >= 0) continue;
            if (l->from != src && l->from < f->node_sw0) continue;
            f->dist[l->from] = f->dist[u] + 1;
            f->queue[tail++] = l->from;
        }
    }
    if (f->dist[src] < 0) return CHORUS_ERR_REMOTE;
    while (v != dst) {
        int nbest = 0, pick, link = -1;
        for (int k = f->out_begin[v]; k < f->out_begin[v + 1]; k++) {
            const chorus_fab_link_t *l = &f->links[f->out_link[k]];
            if (l->bw > 0 && f->dist[l->to] == f->dist[v] - 1) nbest++;
        }
        pick = (int)(fab_hash((uint32_t)src, (uint32_t)dst, (uint32_t)hop) % (uint32_t)nbest);
        for (int k = f->out_begin[v]; k < f->out_begin[v + 1]; k++) {
            const chorus_fab_link_t *l = &f->links[f->out_link[k]];
            if (l->bw > 0 && f->dist[l->to] == f->dist[v] - 1 && pick-- == 0) {
                link = f->out_link[k];
                break;
            }
        }
        if (fab_pool_push(f, link)) return CHORUS_ERR_NO_MEMORY;
        *lat_s += f->links[link].lat_s;
        v = f->links[link].to;
        hop++;
    }
    return CHORUS_SUCCESS;
}

/* The slot of (a, b) in the open-addressed route table (grown by the caller). */
static fab_route_t *fab_slot(chorus_fabric_t *f, int a, int b)
{
    uint32_t i = fab_hash((uint32_t)a, (uint32_t)b, 7) & (f->caproutes - 1);
    while (f->routes[i].a != -1 && (f->routes[i].a != a || f->routes[i].b != b))
        i = (i + 1) & (f->caproutes - 1);
    return &f->routes[i];
}

static int fab_routes_grow(chorus_fabric_t *f)
{
    uint32_t old = f->caproutes, cap = old ? 2 * old : 1024;
    fab_route_t *prev = f->routes;

    f->routes = malloc((size_t)cap * sizeof *f->routes);
    if (f->routes == NULL) {
        f->routes = prev;
        return -1;
    }
    for (uint32_t i = 0; i < cap; i++) f->routes[i].a = -1;
    f->caproutes = cap;
    for (uint32_t i = 0; i < old; i++)
        if (prev[i].a != -1) *fab_slot(f, prev[i].a, prev[i].b) = prev[i];
    free(prev);
    return 0;
}

chorus_status_t chorus__fabric_route(chorus_fabric_t *f, int a, int b, const int32_t **links_p,
                                     int *n_p, double *lat_s_p)
{
    fab_route_t *r;
    uint32_t off;
    double lat = 0;
    chorus_status_t st = CHORUS_SUCCESS;
    const int ha = a / f->rph, hb = b / f->rph;

    if (a < 0 || b < 0 || a >= f->nranks || b >= f->nranks)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "fabric: route %d -> %d: no such rank",
                             a, b);
    if (2 * (f->nroutes + 1) > f->caproutes && fab_routes_grow(f))
        return chorus__error(CHORUS_ERR_NO_MEMORY, "fabric: no memory for routes");
    r = fab_slot(f, a, b);
    if (r->a == -1) {
        off = f->npool;
        if (a == b) {
            /* a copy to self: no link */
        } else if (ha == hb && f->pair != NULL) {
            int l = f->pair[((size_t)ha * f->rph + a % f->rph) * f->rph + b % f->rph];
            if (fab_pool_push(f, l)) st = CHORUS_ERR_NO_MEMORY;
            lat = f->links[l].lat_s;
            if (f->links[l].bw <= 0) st = CHORUS_ERR_REMOTE;
        } else if (ha == hb) {
            int up = f->port_up[a], down = f->port_up[b] + 1;
            if (fab_pool_push(f, up) || (f->bus[ha] >= 0 && fab_pool_push(f, f->bus[ha])) ||
                fab_pool_push(f, down))
                st = CHORUS_ERR_NO_MEMORY;
            lat = f->links[up].lat_s + f->links[down].lat_s;
            if (f->links[up].bw <= 0 || f->links[down].bw <= 0 ||
                (f->bus[ha] >= 0 && f->links[f->bus[ha]].bw <= 0))
                st = CHORUS_ERR_REMOTE;
        } else {
            int ka = (a % f->rph) % f->nics, kb = (b % f->rph) % f->nics;
            st = fab_net_path(f, fab_nic_node(f, ha, ka), fab_nic_node(f, hb, kb), &lat);
        }
        if (st == CHORUS_ERR_NO_MEMORY)
            return chorus__error(st, "fabric: no memory for routes");
        if (st != CHORUS_SUCCESS) {
            f->npool = off;
            return chorus__error(CHORUS_ERR_REMOTE,
                                 "fabric: no path from rank %d (host %d) to rank %d (host %d): "
                                 "links are down", a, ha, b, hb);
        }
        r->a = a;
        r->b = b;
        r->off = off;
        r->n = (int32_t)(f->npool - off);
        r->lat_s = lat;
        f->nroutes++;
    }
    *links_p = f->pool + r->off;
    *n_p = r->n;
    *lat_s_p = r->lat_s;
    return CHORUS_SUCCESS;
}
