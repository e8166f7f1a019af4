/*
 * The topology model: allocation, comparison, distances, printing, and discovery of the
 * local host (hwloc in topo_hwloc.c; here the sysconf fallback and CHORUS_TOPO_FILE).
 */
#include "topo/topo.h"

#include "util/config.h"
#include "util/log.h"
#include "util/pci.h"
#include "util/status.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

chorus_status_t chorus__topo_alloc(int nhosts, chorus_topo_t **topo_p)
{
    chorus_topo_t *t;

    if (nhosts < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %d hosts", nhosts);
    t = calloc(1, sizeof *t);
    if (t == NULL) goto err_nomem;
    if (nhosts > 0) {
        t->hosts = calloc((size_t)nhosts, sizeof *t->hosts);
        if (t->hosts == NULL) goto err_free;
    }
    t->nhosts = nhosts;
    *topo_p = t;
    return CHORUS_SUCCESS;

err_free:
    free(t);
err_nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "topo: no memory for %d hosts", nhosts);
}

static void topo_host_clear(chorus_topo_host_t *h)
{
    free(h->numa);
    free(h->gpus);
    free(h->nics);
    h->numa = NULL;
    h->gpus = h->nics = NULL;
    h->nnuma = h->ngpus = h->nnics = 0;
}

void chorus__topo_free(chorus_topo_t *t)
{
    int i;

    if (t == NULL) return;
    for (i = 0; i < t->nhosts; i++) topo_host_clear(&t->hosts[i]);
    free(t->hosts);
    free(t);
}

chorus_status_t chorus__topo_host_resize(chorus_topo_host_t *h, int nnuma, int ngpus, int nnics)
{
    chorus_topo_numa_t *numa = NULL;
    chorus_topo_dev_t *gpus = NULL, *nics = NULL;

    if (nnuma < 0 || ngpus < 0 || nnics < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: negative device count");
    if (nnuma > 0 && (numa = calloc((size_t)nnuma, sizeof *numa)) == NULL) goto err_nomem;
    if (ngpus > 0 && (gpus = calloc((size_t)ngpus, sizeof *gpus)) == NULL) goto err_numa;
    if (nnics > 0 && (nics = calloc((size_t)nnics, sizeof *nics)) == NULL) goto err_gpus;
    topo_host_clear(h);
    h->numa = numa;
    h->nnuma = nnuma;
    h->gpus = gpus;
    h->ngpus = ngpus;
    h->nics = nics;
    h->nnics = nnics;
    return CHORUS_SUCCESS;

err_gpus:
    free(gpus);
err_numa:
    free(numa);
err_nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "topo: no memory for a host's devices");
}

static int topo_dev_equal(const chorus_topo_dev_t *a, const chorus_topo_dev_t *b)
{
    return strcmp(a->name, b->name) == 0 && strcmp(a->bus_id, b->bus_id) == 0 &&
           strcmp(a->pci_switch, b->pci_switch) == 0 && a->numa == b->numa &&
           a->vendor_id == b->vendor_id && a->device_id == b->device_id &&
           a->speed_mbps == b->speed_mbps;
}

static int topo_host_equal(const chorus_topo_host_t *a, const chorus_topo_host_t *b)
{
    int i;

    if (strcmp(a->hostname, b->hostname) != 0 || a->cores != b->cores || a->pus != b->pus ||
        a->nnuma != b->nnuma || a->ngpus != b->ngpus || a->nnics != b->nnics)
        return 0;
    for (i = 0; i < a->nnuma; i++)
        if (a->numa[i].id != b->numa[i].id || a->numa[i].cores != b->numa[i].cores ||
            a->numa[i].pus != b->numa[i].pus || a->numa[i].memory_mb != b->numa[i].memory_mb)
            return 0;
    for (i = 0; i < a->ngpus; i++)
        if (!topo_dev_equal(&a->gpus[i], &b->gpus[i])) return 0;
    for (i = 0; i < a->nnics; i++)
        if (!topo_dev_equal(&a->nics[i], &b->nics[i])) return 0;
    return 1;
}

int chorus__topo_equal(const chorus_topo_t *a, const chorus_topo_t *b)
{
    int i;

    if (a->nhosts != b->nhosts) return 0;
    for (i = 0; i < a->nhosts; i++)
        if (!topo_host_equal(&a->hosts[i], &b->hosts[i])) return 0;
    return 1;
}

const chorus_topo_host_t *chorus__topo_find_host(const chorus_topo_t *t, const char *hostname)
{
    int i;

    for (i = 0; i < t->nhosts; i++)
        if (hostname != NULL && strcmp(t->hosts[i].hostname, hostname) == 0) return &t->hosts[i];
    return t->nhosts == 1 ? &t->hosts[0] : NULL;
}

int chorus__topo_dev_distance(const chorus_topo_dev_t *a, const chorus_topo_dev_t *b)
{
    if (a->pci_switch[0] != '\0' && strcmp(a->pci_switch, b->pci_switch) == 0)
        return CHORUS_TOPO_DIST_SWITCH;
    if (a->numa >= 0 && a->numa == b->numa) return CHORUS_TOPO_DIST_NUMA;
    return CHORUS_TOPO_DIST_SYS;
}

int chorus__topo_nearest_nic(const chorus_topo_host_t *h, int gpu)
{
    int i, best = -1, best_d = 0;

    if (gpu < 0 || gpu >= h->ngpus) return -1;
    for (i = 0; i < h->nnics; i++) {
        int d = chorus__topo_dev_distance(&h->gpus[gpu], &h->nics[i]);

        if (best < 0 || d < best_d ||
            (d == best_d && h->nics[i].speed_mbps > h->nics[best].speed_mbps)) {
            best = i;
            best_d = d;
        }
    }
    return best;
}

/* Where NIC a stands among the NICs that tie with it for the GPU g (same distance, same
 * speed): *pos_p its place among them in h's order, *n_p how many they are. */
static void topo_nic_tie(const chorus_topo_host_t *h, const chorus_topo_dev_t *g, int a,
                         int *pos_p, int *n_p)
{
    int da = chorus__topo_dev_distance(g, &h->nics[a]), pos = 0, n = 0;

    for (int j = 0; j < h->nnics; j++) {
        if (chorus__topo_dev_distance(g, &h->nics[j]) != da ||
            h->nics[j].speed_mbps != h->nics[a].speed_mbps)
            continue;
        pos += j < a;
        n++;
    }
    *pos_p = pos;
    *n_p = n;
}

/* Nonzero if NIC a of h goes before NIC b for the GPU g: nearer, else faster, else the
 * GPU's turn among equals. Equals are taken in h's order rotated by the GPU's index, so
 * that GPUs with the same choice of NICs (a dual-port card, two NICs on the host bridge)
 * spread over them instead of all taking the first, as NCCL does. */
static int topo_nic_before(const chorus_topo_host_t *h, const chorus_topo_dev_t *g, int a, int b)
{
    int da = chorus__topo_dev_distance(g, &h->nics[a]);
    int db = chorus__topo_dev_distance(g, &h->nics[b]);
    int gi = (int)(g - h->gpus), pa, pb, n;

    if (da != db) return da < db;
    if (h->nics[a].speed_mbps != h->nics[b].speed_mbps)
        return h->nics[a].speed_mbps > h->nics[b].speed_mbps;
    topo_nic_tie(h, g, a, &pa, &n);
    topo_nic_tie(h, g, b, &pb, &n);
    return (pa - gi % n + n) % n < (pb - gi % n + n) % n;
}

int chorus__topo_nic_preference(const chorus_topo_host_t *h, const char *gpu_bus, char *buf,
                                size_t len)
{
    const chorus_topo_dev_t *g = NULL;
    size_t used = 0;
    int i, listed = 0;

    if (len > 0) buf[0] = '\0';
    for (i = 0; h != NULL && g == NULL && i < h->ngpus; i++)
        if (chorus__pci_bus_id_equal(h->gpus[i].bus_id, gpu_bus)) g = &h->gpus[i];
    if (g == NULL) return 0;
    /* A selection pass per place: hosts have a handful of NICs, and nothing is allocated. */
    for (int prev = -1;; listed++) {
        char canon[CHORUS_PCI_BUSID_MAX];
        int next = -1;
        size_t need;

        for (i = 0; i < h->nnics; i++) {
            if (chorus__pci_bus_id_canon(h->nics[i].bus_id, canon) != 0) continue;
            if (prev >= 0 && !topo_nic_before(h, g, prev, i)) continue;
            if (next < 0 || topo_nic_before(h, g, i, next)) next = i;
        }
        if (next < 0) break;
        chorus__pci_bus_id_canon(h->nics[next].bus_id, canon);
        need = strlen(canon) + (listed > 0);
        if (used + need >= len) {
            if (len > 0) buf[0] = '\0';
            return -1;
        }
        snprintf(buf + used, len - used, "%s%s", listed > 0 ? "," : "", canon);
        used += need;
        prev = next;
    }
    return listed;
}

int chorus__topo_gpu_numa(const chorus_topo_host_t *h, int gpu)
{
    return gpu >= 0 && gpu < h->ngpus ? h->gpus[gpu].numa : -1;
}

int chorus__topo_nic_numa(const chorus_topo_host_t *h)
{
    int i, best = -1;

    for (i = 0; i < h->nnics; i++)
        if (best < 0 || h->nics[i].speed_mbps > h->nics[best].speed_mbps) best = i;
    return best < 0 ? -1 : h->nics[best].numa;
}

static void topo_print_dev(const chorus_topo_dev_t *d, const char *kind, FILE *out)
{
    fprintf(out, "    %s %-10s pci %-12s switch %-12s numa %2d  %04x:%04x", kind, d->name,
            d->bus_id[0] ? d->bus_id : "-", d->pci_switch[0] ? d->pci_switch : "-", d->numa,
            d->vendor_id, d->device_id);
    if (d->speed_mbps) fprintf(out, "  %llu Mbit/s", (unsigned long long)d->speed_mbps);
    fputc('\n', out);
}

static const char *topo_dist_name(int d)
{
    if (d == CHORUS_TOPO_DIST_SWITCH) return "same PCI switch";
    if (d == CHORUS_TOPO_DIST_NUMA) return "same NUMA node";
    return "across NUMA nodes";
}

void chorus__topo_print(const chorus_topo_t *t, FILE *out)
{
    int i, j;

    fprintf(out, "topology (%s): %d host%s\n", t->source[0] ? t->source : "?", t->nhosts,
            t->nhosts == 1 ? "" : "s");
    for (i = 0; i < t->nhosts; i++) {
        const chorus_topo_host_t *h = &t->hosts[i];

        fprintf(out, "  host %s: %d cores, %d hardware threads, %d NUMA node%s\n", h->hostname,
                h->cores, h->pus, h->nnuma, h->nnuma == 1 ? "" : "s");
        for (j = 0; j < h->nnuma; j++)
            fprintf(out, "    numa %d: %d cores, %d threads, %llu MiB\n", h->numa[j].id,
                    h->numa[j].cores, h->numa[j].pus, (unsigned long long)h->numa[j].memory_mb);
        for (j = 0; j < h->ngpus; j++) {
            int nic = chorus__topo_nearest_nic(h, j);

            topo_print_dev(&h->gpus[j], "gpu", out);
            if (nic >= 0)
                fprintf(out, "      nearest nic: %s (%s)\n", h->nics[nic].name,
                        topo_dist_name(chorus__topo_dev_distance(&h->gpus[j], &h->nics[nic])));
        }
        for (j = 0; j < h->nnics; j++) topo_print_dev(&h->nics[j], "nic", out);
    }
}

/* Without hwloc: what sysconf knows, one NUMA node holding every CPU, no devices. */
static chorus_status_t topo_discover_sysconf(chorus_topo_host_t *h)
{
    long ncpus = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES);
    long psize = sysconf(_SC_PAGESIZE);
    chorus_status_t status;

    status = chorus__topo_host_resize(h, 1, 0, 0);
    if (status != CHORUS_SUCCESS) return status;
    h->cores = h->pus = ncpus > 0 ? (int)ncpus : 1;
    h->numa[0].id = 0;
    h->numa[0].cores = h->numa[0].pus = h->pus;
    h->numa[0].memory_mb =
        pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize / (1024 * 1024) : 0;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__topo_discover(chorus_topo_t **topo_p)
{
    chorus_topo_t *t = NULL;
    chorus_topo_host_t *h;
    chorus_status_t status;

    status = chorus__topo_alloc(1, &t);
    if (status != CHORUS_SUCCESS) return status;
    h = &t->hosts[0];
    if (gethostname(h->hostname, sizeof h->hostname) != 0) strcpy(h->hostname, "localhost");
    h->hostname[sizeof h->hostname - 1] = '\0';
#ifdef CHORUS_HAVE_HWLOC
    status = chorus__topo_discover_hwloc(h);
#else
    status = CHORUS_ERR_UNSUPPORTED; /* said once by the Makefile; not worth a warning here */
#endif
    if (status == CHORUS_SUCCESS) {
        snprintf(t->source, sizeof t->source, "hwloc");
    } else {
        if (status != CHORUS_ERR_UNSUPPORTED)
            CHORUS_INFO("topo", "hwloc discovery failed (%s); using sysconf",
                        chorus_last_error());
        status = topo_discover_sysconf(h);
        if (status != CHORUS_SUCCESS) goto err_free;
        snprintf(t->source, sizeof t->source, "sysconf");
    }
    *topo_p = t;
    return CHORUS_SUCCESS;

err_free:
    chorus__topo_free(t);
    return status;
}

chorus_status_t chorus__topo_local(chorus_topo_t **topo_p)
{
    const char *path = chorus__config_str("CHORUS_TOPO_FILE");

    if (path != NULL && path[0] != '\0') return chorus__topo_load(path, topo_p);
    return chorus__topo_discover(topo_p);
}
