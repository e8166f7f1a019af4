/*
 * The GPU plugin's two calls for GPUDirect RDMA and NIC pairing, on whatever plugin loads
 * (the CUDA one on a GPU machine, the fake one with CHORUS_CUDA_PLUGIN):
 *
 *   gpu_plugin_extras --pci      pci_bus_id of every device: "dddd:bb:dd.f" (CUDA writes an
 *                                8-digit domain), distinct per device, and with the CUDA
 *                                plugin present in /sys/bus/pci/devices
 *   gpu_plugin_extras --dmabuf   dmabuf_export of a device buffer: a valid descriptor, the
 *                                offset of an unaligned pointer in its page, refusals of a
 *                                host pointer and of 0 bytes; with the fake plugin the
 *                                descriptor maps to the device bytes. Where the driver has no
 *                                dma-buf: "skipped: <why>" (exit 77)
 *
 * Exits 0 when every check holds, 1 when one fails or the plugin is broken, 77
 * ("skipped: ...") without a GPU (gpu_gate.h).
 */
#include "gpu/gpu.h"
#include "gpu_gate.h"
#include "util/pci.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define BYTES (4u << 20)

static int failures;

static void check(int ok, const char *what)
{
    printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

/* Every device's PCI address, well formed and distinct; on a real GPU, present in sysfs. */
static int run_pci(const chorus_gpu_ops_t *g, int ndev)
{
    char ids[16][64], path[128];
    int dev, other;

    if (g->pci_bus_id == NULL) {
        check(0, "the plugin has pci_bus_id (ABI 2)");
        return 1;
    }
    for (dev = 0; dev < ndev && dev < 16; dev++) {
        char canon[CHORUS_PCI_BUSID_MAX];

        if (g->pci_bus_id(dev, ids[dev], sizeof ids[dev]) != CHORUS_SUCCESS) {
            printf("device %d: pci_bus_id: %s\n", dev, g->last_error());
            check(0, "pci_bus_id succeeds");
            continue;
        }
        printf("device %d: %s\n", dev, ids[dev]);
        check(chorus__pci_bus_id_canon(ids[dev], canon) == 0,
              "the address parses as domain:bus:device.function");
        for (other = 0; other < dev; other++)
            check(!chorus__pci_bus_id_equal(ids[dev], ids[other]), "devices have distinct "
                                                                   "addresses");
        if (strcmp(g->name, "cuda") == 0 && access("/sys/bus/pci/devices", F_OK) == 0) {
            snprintf(path, sizeof path, "/sys/bus/pci/devices/%s", canon);
            check(access(path, F_OK) == 0, "the address is a PCI device in sysfs");
        }
    }
    check(g->pci_bus_id(ndev, ids[0], sizeof ids[0]) != CHORUS_SUCCESS,
          "a device past the last is refused");
    check(g->pci_bus_id(0, ids[0], 2) != CHORUS_SUCCESS, "a buffer too small is refused");
    return failures != 0;
}

static int run_dmabuf(const chorus_gpu_ops_t *g)
{
    void *d = NULL;
    char host[64];
    uint64_t offset = 1;
    struct stat st;
    int fd = -1;
    long page = sysconf(_SC_PAGESIZE);
    chorus_status_t status;

    if (g->dmabuf_export == NULL) {
        check(0, "the plugin has dmabuf_export (ABI 2)");
        return 1;
    }
    if (g->malloc_device(&d, BYTES) != CHORUS_SUCCESS) {
        printf("malloc_device: %s\n", g->last_error());
        return 1;
    }
    status = g->dmabuf_export(d, BYTES, &fd, &offset);
    if (status == CHORUS_ERR_UNSUPPORTED) {
        printf("skipped: dma-buf export unsupported here: %s\n", g->last_error());
        g->free_device(d);
        return 77;
    }
    check(status == CHORUS_SUCCESS, "dmabuf_export of a whole allocation succeeds");
    if (status != CHORUS_SUCCESS) printf("  %s\n", g->last_error());
    check(fd >= 0 && fstat(fd, &st) == 0, "it returns an open descriptor");
    check(offset == (uint64_t)((uintptr_t)d % (uintptr_t)page), "the offset is the pointer's "
                                                                "offset in its page");
    if (fd >= 0 && strcmp(g->name, "fake") == 0) {
        /* The fake's descriptor is the allocation's segment: its bytes are the device's. */
        unsigned char *m = mmap(NULL, BYTES, PROT_READ, MAP_SHARED, fd, 0);
        unsigned char v = 0x5a, back = 0;
        void *stream = NULL;

        check(m != MAP_FAILED, "the fake's descriptor maps");
        if (m != MAP_FAILED && g->stream_create(&stream) == CHORUS_SUCCESS) {
            check(g->memcpy_async((unsigned char *)d + 12345, &v, 1, stream) == CHORUS_SUCCESS &&
                      g->stream_synchronize(stream) == CHORUS_SUCCESS,
                  "a byte is copied to the device");
            g->stream_destroy(stream);
            back = m[offset + 12345];
            check(back == v, "a byte copied to the device reads back through the mapping");
            munmap(m, BYTES);
        }
    }
    if (fd >= 0) close(fd);
    fd = -1;
    /* Where the descriptor starts is the plugin's choice (the CUDA plugin exports the pages
     * around the range, the fake its whole allocation), but it starts on a page: the
     * offset keeps the pointer's place in its page. */
    status = g->dmabuf_export((unsigned char *)d + page + 100, 1000, &fd, &offset);
    check(status == CHORUS_SUCCESS &&
              offset % (uint64_t)page == ((uintptr_t)d + 100) % (uintptr_t)page,
          "an unaligned range exports, with the pointer's offset in its page");
    if (fd >= 0) close(fd);
    fd = -1;
    check(g->dmabuf_export(host, sizeof host, &fd, &offset) != CHORUS_SUCCESS && fd == -1,
          "a host pointer is refused");
    check(g->dmabuf_export(d, 0, &fd, &offset) != CHORUS_SUCCESS, "0 bytes are refused");
    g->free_device(d);
    return failures != 0;
}

int main(int argc, char **argv)
{
    const chorus_gpu_ops_t *g;
    int ndev = 0, dev = -1, gate;
    const char *desc = NULL;

    if (argc != 2 || (strcmp(argv[1], "--pci") != 0 && strcmp(argv[1], "--dmabuf") != 0)) {
        fprintf(stderr, "usage: gpu_plugin_extras --pci|--dmabuf\n");
        return 2;
    }
    if ((gate = gpu_gate(1)) != 0) return gate;
    g = chorus__gpu();
    if (g->init(&ndev, &desc) != CHORUS_SUCCESS || ndev < 1 ||
        g->get_device(&dev) != CHORUS_SUCCESS) {
        printf("init: %s\n", g->last_error());
        return 1;
    }
    printf("%s\n", chorus__gpu_describe());
    return strcmp(argv[1], "--pci") == 0 ? run_pci(g, ndev) : run_dmabuf(g);
}
