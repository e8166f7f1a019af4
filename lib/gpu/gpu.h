/*
 * The GPU as Chorus sees it: one table of functions (chorus_gpu_ops_t) that a plugin
 * provides, loaded with dlopen when the process creates its first communicator.
 *
 * Why a plugin and not a link against libcudart: one libchorus.so then runs on machines
 * with and without CUDA (no CUDA library is needed to load it), the CUDA kernels and every
 * CUDA call live in one separately built object (libchorus-cuda.so, from the .cu files of
 * kernels/ and from lib/gpu/plugin/, built only where nvcc is found), and the tests can
 * load a second implementation of the same table (libchorus-cuda-fake.so, tests/gpu/fake)
 * that runs the whole device path on host memory, with device pointers that fault when
 * the host touches them. The rest of the library never includes a CUDA header.
 * A host-only program pays one dlopen (and, where CUDA is installed, the runtime's start)
 * once per process.
 *
 * Which plugin: CHORUS_CUDA_PLUGIN (a path; "none" disables the GPU), else
 * libchorus-cuda.so next to the object that holds libchorus, then in ../lib from there,
 * then on the loader's path. The outcome is one of three (chorus__gpu_state): a plugin
 * with a device; no GPU here (no plugin file, as in a build without nvcc, or a plugin that
 * finds no driver or no device), which leaves the library host-only; or a plugin that is
 * there but broken (it will not load, lacks its entry, speaks another ABI, or its start
 * fails for another reason; or CHORUS_CUDA_PLUGIN names a file that is not there). Broken
 * also leaves host calls working, but every device call then fails with the loader's
 * reason, and the GPU tests fail instead of skipping: on the first real GPU a broken
 * install must not pass for a machine without one. CHORUS_DEBUG=info says what was loaded,
 * CHORUS_DEBUG=warn why a plugin is broken.
 *
 * Conventions of the table: every function returns CHORUS_SUCCESS or an error status and
 * never prints; the plugin's last_error() then describes the failure (the CUDA error name
 * and message). Streams and events are opaque pointers (cudaStream_t, cudaEvent_t); a NULL
 * stream is CUDA's legacy default stream. All functions are thread-safe. Every function
 * acts on the device current on the calling thread (set_device), as CUDA does.
 */
#ifndef CHORUS_GPU_GPU_H
#define CHORUS_GPU_GPU_H

#include "chorus.h"
#include "util/status.h"

#include <stddef.h>
#include <stdint.h>

/* 2: pci_bus_id and dmabuf_export appended; 3: the vmm_* calls and multicast_supported.
 * A plugin answers only the version it was built for, so a table never has fewer fields
 * than the library reads. */
#define CHORUS_GPU_ABI_VERSION 3
#define CHORUS_GPU_IPC_HANDLE_BYTES 64 /* == sizeof(cudaIpcMemHandle_t) */

/* The symbol every plugin exports: `const chorus_gpu_ops_t *chorus_gpu_plugin(int abi)`,
 * returning NULL when it does not speak that ABI version. */
#define CHORUS_GPU_PLUGIN_SYMBOL "chorus_gpu_plugin"

typedef struct chorus_gpu_ops {
    int abi_version; /* CHORUS_GPU_ABI_VERSION */
    const char *name; /* "cuda", "fake" */

    /* Starts the runtime; *ndevices_p is 0 when there is no usable device (not an error).
     * *desc_p (static) says what was found, e.g. "cuda 13.0, driver 13.0, 1 device". */
    chorus_status_t (*init)(int *ndevices_p, const char **desc_p);
    /* The message of the last failure on the calling thread; never NULL. */
    const char *(*last_error)(void);

    /* *is_device_p = 1 and *device_p = its ordinal when p is device memory (cudaMalloc,
     * or a peer's memory opened with ipc_open); 0 for host memory, including pinned
     * and managed memory. */
    chorus_status_t (*pointer_kind)(const void *p, int *is_device_p, int *device_p);
    chorus_status_t (*get_device)(int *device_p);
    chorus_status_t (*set_device)(int device);

    chorus_status_t (*malloc_device)(void **p, size_t bytes);
    chorus_status_t (*free_device)(void *p);
    /* Page-locked host memory the device can copy to and from asynchronously. */
    chorus_status_t (*malloc_host)(void **p, size_t bytes);
    chorus_status_t (*free_host)(void *p);

    /* Non-blocking streams (they do not synchronise with the legacy default stream). */
    chorus_status_t (*stream_create)(void **stream_p);
    chorus_status_t (*stream_destroy)(void *stream);
    chorus_status_t (*stream_synchronize)(void *stream);
    chorus_status_t (*event_create)(void **event_p); /* with timing */
    chorus_status_t (*event_destroy)(void *event);
    chorus_status_t (*event_record)(void *event, void *stream);
    /* *done_p = 1 when everything before the event's record has finished; never blocks. */
    chorus_status_t (*event_query)(void *event, int *done_p);
    chorus_status_t (*event_elapsed_ms)(void *start, void *end, float *ms_p);
    /* Later work on stream waits for event (cudaStreamWaitEvent). */
    chorus_status_t (*stream_wait_event)(void *stream, void *event);
    /* Later work on stream waits until *flag >= value, where flag is in memory from
     * malloc_host (a 64-bit counter the host raises). This is how a stream-ordered
     * collective holds the caller's stream until the proxy thread has finished it. */
    chorus_status_t (*stream_wait_flag)(void *stream, volatile uint64_t *flag, uint64_t value);

    /* Copies between any two of host, pinned and device memory (unified addressing);
     * src and dst must not overlap. */
    chorus_status_t (*memcpy_async)(void *dst, const void *src, size_t bytes, void *stream);
    /* height rows of width bytes, rows dpitch / spitch bytes apart (cudaMemcpy2DAsync). */
    chorus_status_t (*memcpy2d_async)(void *dst, size_t dpitch, const void *src, size_t spitch,
                                      size_t width, size_t height, void *stream);

    /* dst[i] = src[0][i] op src[1][i] op ... op src[nsrc-1][i] left to right, the
     * semantics of chorus_kernel_reduce_multi (kernels/kernels.h): same bytes as the CPU
     * kernels for integers and for fp16/bf16 rounding after every op. 1 <= nsrc <= 16;
     * dst may alias src[0] exactly; sources may be peer memory opened with ipc_open.
     * op is never AVG. nsrc == 1 is a copy. */
    chorus_status_t (*reduce_async)(void *dst, const void *const *src, int nsrc, size_t count,
                                    chorus_dtype_t dtype, chorus_op_t op, void *stream);
    /* buf[i] /= divisor, as chorus_kernel_divide (the end of AVG). */
    chorus_status_t (*divide_async)(void *buf, size_t count, chorus_dtype_t dtype,
                                    uint64_t divisor, void *stream);

    /* CUDA IPC: a handle for device memory from malloc_device (its base), opened in
     * another process of the same host as a device pointer to the same memory. */
    chorus_status_t (*ipc_get_handle)(void *base, void *handle /* IPC_HANDLE_BYTES */);
    chorus_status_t (*ipc_open)(const void *handle, void **p);
    chorus_status_t (*ipc_close)(void *p);

    /* The PCI address of device ("0000:17:00.0", as cudaDeviceGetPCIBusId writes it) into
     * buf of len bytes. May be NULL (a plugin that cannot tell): callers that pair a GPU
     * with its nearest NIC then do without. */
    chorus_status_t (*pci_bus_id)(int device, char *buf, size_t len);

    /* A dma-buf fd for the device range [p, p + bytes) (cuMemGetHandleForAddressRange)
     * and the offset of p in it, for GPUDirect RDMA (ibv_reg_dmabuf_mr); the caller closes
     * the fd. CHORUS_ERR_UNSUPPORTED where the driver or the memory cannot export one. May
     * be NULL. */
    chorus_status_t (*dmabuf_export)(const void *p, size_t bytes, int *fd_p,
                                     uint64_t *offset_p);

    /* Shareable device memory (the CUDA virtual memory API, cuMem*: registered device
     * memory, chorus_mem_alloc_device). vmm_alloc: bytes of physical memory on the current
     * device (cuMemCreate, rounded up to the allocation granularity: *granted_p), mapped at
     * *p with read-write access for that device, and a POSIX file descriptor that stands
     * for it (cuMemExportToShareableHandle), which the caller passes to its peers (over a
     * Unix socket: SCM_RIGHTS) and closes. fd_p may be NULL: the memory is then not
     * exported. vmm_import: maps such a descriptor, received from another process of the
     * host, for the current device (cuMemImportFromShareableHandle); bytes must be the
     * granted size; the caller still closes fd. vmm_free: unmaps a pointer from either
     * (the memory goes when the last process unmaps it, so a peer that dies leaves its
     * readers valid memory). CHORUS_ERR_UNSUPPORTED where the device or driver cannot
     * export POSIX descriptors. May be NULL (a plugin without them). */
    chorus_status_t (*vmm_alloc)(size_t bytes, void **p, size_t *granted_p, int *fd_p);
    chorus_status_t (*vmm_import)(int fd, size_t bytes, void **p);
    chorus_status_t (*vmm_free)(void *p);
    /* *yes_p = 1 when device can join a multicast object (NVSwitch multicast and in-switch
     * reduction: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED), for collectives on registered
     * device memory that reduce in the switch. May be NULL. */
    chorus_status_t (*multicast_supported)(int device, int *yes_p);
} chorus_gpu_ops_t;

typedef const chorus_gpu_ops_t *(*chorus_gpu_plugin_fn)(int abi_version);

/* ---- lib/gpu/gpu.c: the loader ---- */

/* The outcome of loading the plugin. */
typedef enum chorus_gpu_state {
    CHORUS_GPU_READY = 0,  /* a plugin loaded and found a device: chorus__gpu() != NULL */
    CHORUS_GPU_ABSENT = 1, /* no GPU: CHORUS_CUDA_PLUGIN=none, no plugin file where it is
                            * looked for, or a plugin that finds no driver or no device */
    CHORUS_GPU_BROKEN = 2, /* a plugin is there but cannot be used (gpu.h's head says how) */
} chorus_gpu_state_t;

/* Which of the three the loader met (loading on first use, as chorus__gpu does); for
 * ABSENT and BROKEN, chorus__gpu_describe() says why. Thread-safe. */
chorus_gpu_state_t chorus__gpu_state(void);

/* The loaded table when a plugin loaded and found at least one device, else NULL (and then
 * every buffer is host memory). Loads on first use, once per process; thread-safe. */
const chorus_gpu_ops_t *chorus__gpu(void);

/* What was loaded ("cuda plugin: cuda runtime 13.0, driver 13.0, 1 device: ..."), or why
 * chorus__gpu() is NULL: when ABSENT ("CHORUS_CUDA_PLUGIN=none", "no CUDA plugin: ...",
 * "cuda plugin: ..., 0 devices (no driver: cudaErrorInsufficientDriver)"), to follow "no
 * CUDA device" in a message; when BROKEN, "broken CUDA plugin <path>: <dlerror or the
 * plugin's error>". Static; never NULL. */
const char *chorus__gpu_describe(void);

/* The error of a call that needs the GPU (a CUDA stream, device memory) made while
 * chorus__gpu() is NULL: "<fmt...>: " followed, when the GPU is ABSENT, by "no CUDA device
 * (<describe>)" with CHORUS_ERR_UNSUPPORTED, and when it is BROKEN by "<describe>" with
 * CHORUS_ERR_SYSTEM. Returns that status; chorus_last_error() has the message. */
chorus_status_t chorus__gpu_unavailable(const char *fmt, ...) CHORUS_PRINTF(1, 2);

/* *is_device_p for p (0 when there is no GPU, or p is NULL). On a plugin error, an error
 * naming what (e.g. "sendbuf") with the plugin's message. */
chorus_status_t chorus__gpu_pointer_kind(const void *p, const char *what, int *is_device_p,
                                         int *device_p);

/* chorus__error() with the plugin's last message: "rank 2: allreduce #4: memcpy: <msg>";
 * without a plugin, chorus__gpu_unavailable's words in place of it. */
chorus_status_t chorus__gpu_error(chorus_status_t status, const char *fmt, ...)
    CHORUS_PRINTF(2, 3);

#endif
