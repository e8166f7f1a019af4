/*
 * Shareable device memory for registered device buffers (chorus_mem_alloc_device, issue
 * 38), through the CUDA virtual memory API, as NCCL's cuMem allocator does:
 *
 *   cuMemCreate         physical memory on the current device, exportable as a POSIX fd
 *   cuMemAddressReserve a virtual range, aligned to the allocation granularity
 *   cuMemMap            the memory into the range; cuMemSetAccess read-write for the device
 *   cuMemExportToShareableHandle / cuMemImportFromShareableHandle
 *                       the fd a peer process imports and maps the same way
 *
 * The allocation handle is released as soon as the range maps it: the mapping holds the
 * memory, so it lives until the last process that maps it unmaps it (or exits). That is
 * what lets a rank die while its peers read its buffer without their reads faulting.
 *
 * Multicast objects (cuMulticastCreate, NVSwitch) would let a reduce happen in the switch;
 * multicast_supported() tells whether a device could join one. Nothing binds them yet.
 *
 * The driver is reached through the runtime's entry points (cuda_plugin.c says why). Not
 * run on a GPU yet: it compiles here and its logic is the fake plugin's (tests/gpu/fake),
 * which the tests run.
 */
#include "gpu/plugin/cuda_int.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
    PFN_cuMemCreate_v10020 create;
    PFN_cuMemRelease_v10020 release;
    PFN_cuMemGetAllocationGranularity_v10020 granularity;
    PFN_cuMemAddressReserve_v10020 reserve;
    PFN_cuMemAddressFree_v10020 address_free;
    PFN_cuMemMap_v10020 map;
    PFN_cuMemUnmap_v10020 unmap;
    PFN_cuMemSetAccess_v10020 set_access;
    PFN_cuMemExportToShareableHandle_v10020 export_handle;
    PFN_cuMemImportFromShareableHandle_v10020 import_handle;
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDeviceGetAttribute_v2000 device_attr;
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_ok;

static void vmm_load(void)
{
#define VMM_SYM(field, type, name, version)                                                        \
    drv.field = (type)chorus__cu_drv_symbol(name, version)
    VMM_SYM(create, PFN_cuMemCreate_v10020, "cuMemCreate", 10020);
    VMM_SYM(release, PFN_cuMemRelease_v10020, "cuMemRelease", 10020);
    VMM_SYM(granularity, PFN_cuMemGetAllocationGranularity_v10020,
            "cuMemGetAllocationGranularity", 10020);
    VMM_SYM(reserve, PFN_cuMemAddressReserve_v10020, "cuMemAddressReserve", 10020);
    VMM_SYM(address_free, PFN_cuMemAddressFree_v10020, "cuMemAddressFree", 10020);
    VMM_SYM(map, PFN_cuMemMap_v10020, "cuMemMap", 10020);
    VMM_SYM(unmap, PFN_cuMemUnmap_v10020, "cuMemUnmap", 10020);
    VMM_SYM(set_access, PFN_cuMemSetAccess_v10020, "cuMemSetAccess", 10020);
    VMM_SYM(export_handle, PFN_cuMemExportToShareableHandle_v10020,
            "cuMemExportToShareableHandle", 10020);
    VMM_SYM(import_handle, PFN_cuMemImportFromShareableHandle_v10020,
            "cuMemImportFromShareableHandle", 10020);
    VMM_SYM(device_get, PFN_cuDeviceGet_v2000, "cuDeviceGet", 2000);
    VMM_SYM(device_attr, PFN_cuDeviceGetAttribute_v2000, "cuDeviceGetAttribute", 2000);
#undef VMM_SYM
    drv_ok = drv.create && drv.release && drv.granularity && drv.reserve && drv.address_free &&
             drv.map && drv.unmap && drv.set_access && drv.export_handle && drv.import_handle &&
             drv.device_get && drv.device_attr;
}

/* The ranges mapped here, for vmm_free, which must unmap and free exactly what was mapped. */
typedef struct {
    CUdeviceptr va;
    size_t bytes;
} vmm_map_t;
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static vmm_map_t *maps;
static size_t nmaps, maps_cap;

/* The current device, with the driver loaded and able to share memory as POSIX fds. */
static chorus_status_t vmm_device(const char *what, int *dev_p)
{
    cudaError_t e;
    CUdevice cudev;
    int dev = -1, can = 0;
    CUresult r;

    pthread_once(&drv_once, vmm_load);
    if (!drv_ok)
        return chorus__cu_set_error(CHORUS_ERR_UNSUPPORTED, "%s: the driver lacks the cuMem "
                                    "virtual memory calls (CUDA 10.2 or later needed)", what);
    e = cudaGetDevice(&dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return chorus__cu_set_error(CHORUS_ERR_SYSTEM, "%s: cudaGetDevice: %s", what,
                                    cudaGetErrorName(e));
    }
    r = drv.device_get(&cudev, dev);
    if (r == CUDA_SUCCESS)
        r = drv.device_attr(&can, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            cudev);
    if (r != CUDA_SUCCESS) return chorus__cu_drv_fail("cuDeviceGetAttribute", r);
    if (!can)
        return chorus__cu_set_error(CHORUS_ERR_UNSUPPORTED, "%s: device %d cannot export memory "
                                    "as POSIX file descriptors", what, dev);
    *dev_p = dev;
    return CHORUS_SUCCESS;
}

static void vmm_prop(int dev, CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = dev;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

/* Maps h (bytes, a multiple of align) at a fresh range, read-write for dev, and records it.
 * h stays the caller's to release. */
static chorus_status_t vmm_map(CUmemGenericAllocationHandle h, size_t bytes, size_t align,
                               int dev, void **p)
{
    CUmemAccessDesc access;
    CUdeviceptr va = 0;
    CUresult r;
    vmm_map_t *grown;

    r = drv.reserve(&va, bytes, align, 0, 0);
    if (r != CUDA_SUCCESS) return chorus__cu_drv_fail("cuMemAddressReserve", r);
    r = drv.map(va, bytes, 0, h, 0);
    if (r != CUDA_SUCCESS) {
        (void)drv.address_free(va, bytes);
        return chorus__cu_drv_fail("cuMemMap", r);
    }
    memset(&access, 0, sizeof access);
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = drv.set_access(va, bytes, &access, 1);
    pthread_mutex_lock(&maps_lock);
    grown = r != CUDA_SUCCESS || nmaps < maps_cap
                ? maps
                : realloc(maps, (maps_cap ? 2 * maps_cap : 16) * sizeof *maps);
    if (r == CUDA_SUCCESS && grown != NULL) {
        if (grown != maps) maps_cap = maps_cap ? 2 * maps_cap : 16;
        maps = grown;
        maps[nmaps++] = (vmm_map_t){va, bytes};
    }
    pthread_mutex_unlock(&maps_lock);
    if (r != CUDA_SUCCESS || grown == NULL) {
        (void)drv.unmap(va, bytes);
        (void)drv.address_free(va, bytes);
        return r != CUDA_SUCCESS ? chorus__cu_drv_fail("cuMemSetAccess", r)
                                 : chorus__cu_set_error(CHORUS_ERR_NO_MEMORY,
                                                        "vmm: no memory for the mapping table");
    }
    *p = (void *)(uintptr_t)va;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__cu_vmm_alloc(size_t bytes, void **p, size_t *granted_p, int *fd_p)
{
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h;
    size_t gran = 0, granted;
    chorus_status_t status;
    CUresult r;
    int dev = -1, fd = -1;

    if (p == NULL || granted_p == NULL || bytes == 0)
        return chorus__cu_set_error(CHORUS_ERR_INVALID_ARGUMENT,
                                    "vmm_alloc: NULL argument or 0 bytes");
    status = vmm_device("vmm_alloc", &dev);
    if (status != CHORUS_SUCCESS) return status;
    vmm_prop(dev, &prop);
    r = drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (r != CUDA_SUCCESS) return chorus__cu_drv_fail("cuMemGetAllocationGranularity", r);
    if (gran == 0 || bytes > SIZE_MAX - gran)
        return chorus__cu_set_error(CHORUS_ERR_INVALID_ARGUMENT, "vmm_alloc: %zu bytes", bytes);
    granted = (bytes + gran - 1) / gran * gran;
    r = drv.create(&h, granted, &prop, 0);
    if (r != CUDA_SUCCESS) return chorus__cu_drv_fail("cuMemCreate", r);
    if (fd_p != NULL) {
        r = drv.export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r != CUDA_SUCCESS) {
            (void)drv.release(h);
            return chorus__cu_drv_fail("cuMemExportToShareableHandle", r);
        }
    }
    status = vmm_map(h, granted, gran, dev, p);
    (void)drv.release(h); /* the mapping (and the fd) keep the memory */
    if (status != CHORUS_SUCCESS) {
        if (fd >= 0) close(fd);
        return status;
    }
    *granted_p = granted;
    if (fd_p != NULL) *fd_p = fd;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__cu_vmm_import(int fd, size_t bytes, void **p)
{
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h;
    size_t gran = 0;
    chorus_status_t status;
    CUresult r;
    int dev = -1;

    if (p == NULL || fd < 0 || bytes == 0)
        return chorus__cu_set_error(CHORUS_ERR_INVALID_ARGUMENT,
                                    "vmm_import: bad descriptor %d or 0 bytes", fd);
    status = vmm_device("vmm_import", &dev);
    if (status != CHORUS_SUCCESS) return status;
    vmm_prop(dev, &prop);
    r = drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (r != CUDA_SUCCESS) return chorus__cu_drv_fail("cuMemGetAllocationGranularity", r);
    if (gran == 0 || bytes % gran != 0)
        return chorus__cu_set_error(CHORUS_ERR_INVALID_ARGUMENT, "vmm_import: %zu bytes is not "
                                    "a multiple of the granularity %zu", bytes, gran);
    r = drv.import_handle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) return chorus__cu_drv_fail("cuMemImportFromShareableHandle", r);
    status = vmm_map(h, bytes, gran, dev, p);
    (void)drv.release(h);
    return status;
}

chorus_status_t chorus__cu_vmm_free(void *p)
{
    CUdeviceptr va = (CUdeviceptr)(uintptr_t)p;
    size_t bytes = 0;
    int found = 0;
    CUresult r;

    pthread_mutex_lock(&maps_lock);
    for (size_t i = 0; i < nmaps; i++) {
        if (maps[i].va != va) continue;
        bytes = maps[i].bytes;
        maps[i] = maps[--nmaps];
        found = 1;
        break;
    }
    pthread_mutex_unlock(&maps_lock);
    if (!found)
        return chorus__cu_set_error(CHORUS_ERR_INVALID_ARGUMENT, "vmm_free: %p is not a pointer "
                                    "from vmm_alloc or vmm_import", p);
    r = drv.unmap(va, bytes);
    if (r == CUDA_SUCCESS) r = drv.address_free(va, bytes);
    return r == CUDA_SUCCESS ? CHORUS_SUCCESS : chorus__cu_drv_fail("cuMemUnmap", r);
}

chorus_status_t chorus__cu_multicast_supported(int device, int *yes_p)
{
    CUdevice cudev;
    CUresult r;
    int can = 0;

    if (yes_p == NULL)
        return chorus__cu_set_error(CHORUS_ERR_INVALID_ARGUMENT, "multicast_supported: NULL");
    *yes_p = 0;
    pthread_once(&drv_once, vmm_load);
    if (drv.device_get == NULL || drv.device_attr == NULL) return CHORUS_SUCCESS;
    r = drv.device_get(&cudev, device);
    if (r == CUDA_SUCCESS)
        r = drv.device_attr(&can, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, cudev);
    if (r != CUDA_SUCCESS) return chorus__cu_drv_fail("cuDeviceGetAttribute", r);
    *yes_p = can != 0;
    return CHORUS_SUCCESS;
}
