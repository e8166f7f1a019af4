/*
 * Discovery of the local host with hwloc: NUMA nodes and their cores, and the PCI devices
 * that move data (GPUs: 3D controllers, and VGA controllers of NVIDIA and AMD; NICs: every
 * network controller), each with its NUMA node and the switch above it.
 *
 * GPUs are found by PCI class rather than through hwloc's CUDA or NVML plugins, so that a
 * build without CUDA still sees them, numbered in bus id order as CUDA numbers them with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID.
 */
#include "topo/topo.h"

#include "util/status.h"

#ifdef CHORUS_HAVE_HWLOC

#include <errno.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_VENDOR_AMD 0x1002

static int hw_is_gpu(const struct hwloc_pcidev_attr_s *p)
{
    if (p->class_id == 0x0302) return 1;
    return p->class_id == 0x0300 &&
           (p->vendor_id == PCI_VENDOR_NVIDIA || p->vendor_id == PCI_VENDOR_AMD);
}

static int hw_is_nic(const struct hwloc_pcidev_attr_s *p)
{
    return (p->class_id >> 8) == 0x02;
}

/* The NUMA node of a device: the only node of its nearest CPU-side ancestor; -1 when that
 * spans several nodes (a device on the machine as a whole) or none. */
static int hw_numa(hwloc_topology_t topo, hwloc_obj_t obj)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);

    if (anc == NULL || anc->nodeset == NULL || hwloc_bitmap_weight(anc->nodeset) != 1) return -1;
    return hwloc_bitmap_first(anc->nodeset);
}

/* The topmost PCI-to-PCI bridge above obj: the switch (or root port) it hangs from. */
static void hw_switch(hwloc_obj_t obj, char *out, size_t len)
{
    hwloc_obj_t p, top = NULL;

    for (p = obj->parent; p != NULL && p->type == HWLOC_OBJ_BRIDGE; p = p->parent)
        if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) top = p;
    out[0] = '\0';
    if (top != NULL)
        snprintf(out, len, "%04x:%02x:%02x.%01x", top->attr->bridge.upstream.pci.domain,
                 top->attr->bridge.upstream.pci.bus, top->attr->bridge.upstream.pci.dev,
                 top->attr->bridge.upstream.pci.func);
}

/* The device's name: its RDMA device (mlx5_0) before its network interface (eth0). */
static void hw_name(hwloc_obj_t obj, const char *fallback, char *out, size_t len)
{
    hwloc_obj_t c, net = NULL, rdma = NULL;

    for (c = obj->io_first_child; c != NULL; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == NULL) continue;
        if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && rdma == NULL) rdma = c;
        if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && net == NULL) net = c;
    }
    snprintf(out, len, "%s", rdma != NULL ? rdma->name : net != NULL ? net->name : fallback);
}

/* Link speed from sysfs (/sys/class/net/<if>/speed, Mbit/s); 0 when unknown. */
static uint64_t hw_speed(hwloc_obj_t obj)
{
    hwloc_obj_t c;
    char path[256];
    long v = 0;
    FILE *f;

    for (c = obj->io_first_child; c != NULL; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || c->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK ||
            c->name == NULL)
            continue;
        snprintf(path, sizeof path, "/sys/class/net/%s/speed", c->name);
        f = fopen(path, "r");
        if (f == NULL) continue;
        if (fscanf(f, "%ld", &v) != 1) v = 0;
        fclose(f);
        if (v > 0) return (uint64_t)v;
    }
    return 0;
}

static void hw_fill_dev(hwloc_topology_t topo, hwloc_obj_t obj, chorus_topo_dev_t *d,
                        const char *fallback)
{
    const struct hwloc_pcidev_attr_s *p = &obj->attr->pcidev;

    snprintf(d->bus_id, sizeof d->bus_id, "%04x:%02x:%02x.%01x", p->domain, p->bus, p->dev,
             p->func);
    hw_switch(obj, d->pci_switch, sizeof d->pci_switch);
    hw_name(obj, fallback, d->name, sizeof d->name);
    d->numa = hw_numa(topo, obj);
    d->vendor_id = p->vendor_id;
    d->device_id = p->device_id;
    d->speed_mbps = 0;
}

static int hw_dev_cmp(const void *a, const void *b)
{
    return strcmp(((const chorus_topo_dev_t *)a)->bus_id, ((const chorus_topo_dev_t *)b)->bus_id);
}

static chorus_status_t hw_fill(hwloc_topology_t topo, chorus_topo_host_t *h)
{
    int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE), ngpus = 0, nnics = 0, i;
    chorus_status_t status;
    hwloc_obj_t obj = NULL;

    while ((obj = hwloc_get_next_pcidev(topo, obj)) != NULL) {
        ngpus += hw_is_gpu(&obj->attr->pcidev);
        nnics += hw_is_nic(&obj->attr->pcidev);
    }
    status = chorus__topo_host_resize(h, nnuma > 0 ? nnuma : 0, ngpus, nnics);
    if (status != CHORUS_SUCCESS) return status;
    h->cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    h->pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    for (i = 0; i < h->nnuma; i++) {
        hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);

        h->numa[i].id = (int)n->os_index;
        h->numa[i].cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, n->cpuset, HWLOC_OBJ_CORE);
        h->numa[i].pus = hwloc_get_nbobjs_inside_cpuset_by_type(topo, n->cpuset, HWLOC_OBJ_PU);
        h->numa[i].memory_mb = n->attr->numanode.local_memory / (1024 * 1024);
    }
    ngpus = nnics = 0;
    while ((obj = hwloc_get_next_pcidev(topo, obj)) != NULL) {
        if (hw_is_gpu(&obj->attr->pcidev)) hw_fill_dev(topo, obj, &h->gpus[ngpus++], "gpu");
        if (hw_is_nic(&obj->attr->pcidev)) {
            hw_fill_dev(topo, obj, &h->nics[nnics], "nic");
            h->nics[nnics++].speed_mbps = hw_speed(obj);
        }
    }
    /* qsort may not be given NULL, which an empty array is. */
    if (h->ngpus > 0) qsort(h->gpus, (size_t)h->ngpus, sizeof *h->gpus, hw_dev_cmp);
    if (h->nnics > 0) qsort(h->nics, (size_t)h->nnics, sizeof *h->nics, hw_dev_cmp);
    /* GPUs are named by their index in bus order, as CUDA numbers them. */
    for (i = 0; i < h->ngpus; i++) snprintf(h->gpus[i].name, sizeof h->gpus[i].name, "gpu%d", i);
    return CHORUS_SUCCESS;
}

/* The Linux backend reads PCI devices from sysfs by itself. The components that would add
 * to that cost more than they give: libpciaccess (the pci component) leaks on every load,
 * and the GPU components (OpenCL, CUDA, NVML, ...) would start a GPU runtime inside
 * communicator creation only to name devices that the PCI class already tells apart.
 * Unknown names are ignored, so the list may name components this hwloc lacks. */
static void topo_blacklist(hwloc_topology_t topo)
{
    static const char *const names[] = {"pci", "opencl", "gl", "cuda", "nvml", "rsmi",
                                        "levelzero"};
    size_t i;

    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                            names[i]);
}

chorus_status_t chorus__topo_discover_hwloc(chorus_topo_host_t *h)
{
    hwloc_topology_t topo;
    chorus_status_t status;

    if (hwloc_topology_init(&topo) != 0)
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "topo: hwloc_topology_init");
    topo_blacklist(topo);
    if (hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
        hwloc_topology_load(topo) != 0) {
        status = chorus__error(CHORUS_ERR_SYSTEM, "topo: hwloc could not load the topology");
        goto err_destroy;
    }
    status = hw_fill(topo, h);
err_destroy:
    hwloc_topology_destroy(topo);
    return status;
}

#else

chorus_status_t chorus__topo_discover_hwloc(chorus_topo_host_t *h)
{
    (void)h;
    return chorus__error(CHORUS_ERR_UNSUPPORTED,
                         "topo: built without hwloc (apt-get install libhwloc-dev)");
}

#endif
