/*
 * The real GPU plugin (lib/gpu/gpu.h): chorus_gpu_ops_t over the CUDA runtime, linked
 * statically into libchorus-cuda.so with the kernels of kernels/reduce_cuda.cu.
 *
 * Only chorus_gpu_plugin() is exported; everything else is static, and the launchers of
 * reduce_cuda.cu are hidden (nvcc compiles them with -fvisibility=hidden).
 *
 * The driver API (cuStreamWaitValue64 for stream_wait_flag, cuMemGetHandleForAddressRange
 * for dmabuf_export) is reached through
 * cudaGetDriverEntryPointByVersion rather than by linking libcuda: then the plugin has no
 * link-time dependency on the driver, loads on a machine without one, and init() reports
 * zero devices there instead of the loader failing on a missing libcuda.so.1.
 *
 * Errors: every function checks its arguments, and a failure leaves "<call>: <CUDA error
 * name>: <message>" in a thread-local buffer (last_error) and returns
 * CHORUS_ERR_INVALID_ARGUMENT or CHORUS_ERR_SYSTEM. Nothing here prints.
 */
#include "gpu/gpu.h"
#include "gpu/plugin/cuda_int.h"

#include "reduce_cuda_ops.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(cudaIpcMemHandle_t) == CHORUS_GPU_IPC_HANDLE_BYTES,
               "CHORUS_GPU_IPC_HANDLE_BYTES must be sizeof(cudaIpcMemHandle_t)");

#define CU_MAX_DEVICES 64
#define CU_ERR_LEN 256

static _Thread_local char cu_err[CU_ERR_LEN] = "no error";

/* ---- Errors ---- */

static chorus_status_t cu_invalid(const char *fmt, ...) CHORUS_PRINTF(1, 2);

static chorus_status_t cu_invalid(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cu_err, sizeof cu_err, fmt, ap);
    va_end(ap);
    return CHORUS_ERR_INVALID_ARGUMENT;
}

/* A failed runtime call. The runtime also keeps the error as the thread's "last error";
 * reading it clears it (unless it is sticky), so that a later kernel launch does not
 * report this one. */
static chorus_status_t cu_fail(const char *call, cudaError_t e)
{
    snprintf(cu_err, sizeof cu_err, "%s: %s: %s", call, cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError();
    return e == cudaErrorInvalidValue ? CHORUS_ERR_INVALID_ARGUMENT : CHORUS_ERR_SYSTEM;
}

#define CU_CHECK(call, expr)                                                                       \
    do {                                                                                           \
        cudaError_t cu_e_ = (expr);                                                                \
        if (cu_e_ != cudaSuccess) return cu_fail(call, cu_e_);                                     \
    } while (0)

static const char *cu_last_error(void)
{
    return cu_err;
}

chorus_status_t chorus__cu_set_error(chorus_status_t status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cu_err, sizeof cu_err, fmt, ap);
    va_end(ap);
    return status;
}

/* ---- Driver entry points (stream_wait_flag) ---- */

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static PFN_cuStreamWaitValue64_v11070 drv_wait_value64;
static PFN_cuDeviceGet_v2000 drv_device_get;
static PFN_cuDeviceGetAttribute_v2000 drv_device_attr;
static PFN_cuGetErrorName_v6000 drv_error_name;
static PFN_cuMemGetHandleForAddressRange_v11070 drv_get_handle_range;

void *chorus__cu_drv_symbol(const char *name, unsigned version)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    void *fn = NULL;

    if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return fn;
}

static void drv_load(void)
{
    drv_wait_value64 =
        (PFN_cuStreamWaitValue64_v11070)chorus__cu_drv_symbol("cuStreamWaitValue64", 11070);
    drv_device_get = (PFN_cuDeviceGet_v2000)chorus__cu_drv_symbol("cuDeviceGet", 2000);
    drv_device_attr =
        (PFN_cuDeviceGetAttribute_v2000)chorus__cu_drv_symbol("cuDeviceGetAttribute", 2000);
    drv_error_name = (PFN_cuGetErrorName_v6000)chorus__cu_drv_symbol("cuGetErrorName", 6000);
    drv_get_handle_range = (PFN_cuMemGetHandleForAddressRange_v11070)chorus__cu_drv_symbol(
        "cuMemGetHandleForAddressRange", 11070);
}

/* Per device: 0 not asked yet, 1 cuStreamWaitValue64, 2 the spin kernel. */
static _Atomic int wait_mode[CU_MAX_DEVICES];
/* Per device: whether chorus__cu_preload has run on it. */
static _Atomic int kernels_loaded[CU_MAX_DEVICES];

static int cu_wait_mode(int dev)
{
    int mode = dev >= 0 && dev < CU_MAX_DEVICES ? atomic_load(&wait_mode[dev]) : 0;
    CUdevice cudev;
    int can = 0;

    if (mode != 0) return mode;
    pthread_once(&drv_once, drv_load);
    mode = 2;
    if (drv_wait_value64 != NULL && drv_device_get != NULL && drv_device_attr != NULL &&
        drv_device_get(&cudev, dev) == CUDA_SUCCESS &&
        drv_device_attr(&can, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, cudev) ==
            CUDA_SUCCESS &&
        can != 0)
        mode = 1;
    if (dev >= 0 && dev < CU_MAX_DEVICES) atomic_store(&wait_mode[dev], mode);
    return mode;
}

/* ---- Devices ---- */

static pthread_mutex_t desc_lock = PTHREAD_MUTEX_INITIALIZER;
static char desc_buf[256];

static void cu_version(char *out, size_t len, int v)
{
    if (v <= 0)
        snprintf(out, len, "none");
    else
        snprintf(out, len, "%d.%d", v / 1000, v % 1000 / 10);
}

/* "cuda runtime 13.0, driver 13.0, 2 devices: NVIDIA H200, NVIDIA H200". */
static void cu_describe(int n, const char *why)
{
    char rt[16], drv[16];
    int rtv = 0, drvv = 0;
    size_t used;

    (void)cudaRuntimeGetVersion(&rtv);
    (void)cudaDriverGetVersion(&drvv);
    (void)cudaGetLastError();
    cu_version(rt, sizeof rt, rtv);
    cu_version(drv, sizeof drv, drvv);
    snprintf(desc_buf, sizeof desc_buf, "cuda runtime %s, driver %s, %d device%s%s%s", rt, drv, n,
             n == 1 ? "" : "s", why != NULL ? " " : ":", why != NULL ? why : "");
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp prop;
        used = strlen(desc_buf);
        if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
            (void)cudaGetLastError();
            snprintf(prop.name, sizeof prop.name, "device %d", d);
        }
        snprintf(desc_buf + used, sizeof desc_buf - used, "%s %.64s", d > 0 ? "," : "", prop.name);
    }
}

/* Why cudaGetDeviceCount's error e means a machine without a usable GPU, which is not an
 * error (gpu.h): no device, no driver, or only the driver's stub library; NULL when e is a
 * real failure, to report. cudaErrorInsufficientDriver is said both where there is no
 * driver at all and where the driver is older than this runtime; the second is a broken
 * install on a machine with a GPU, so it is told apart by whether the driver's library
 * loads. */
static const char *cu_absent_why(cudaError_t e)
{
    void *drv;

    if (e == cudaErrorNoDevice) return "no device";
    if (e == cudaErrorStubLibrary) return "no driver, only its stub library";
    if (e != cudaErrorInsufficientDriver) return NULL;
    drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (drv == NULL) return "no driver";
    dlclose(drv);
    return NULL;
}

static chorus_status_t cu_init(int *ndevices_p, const char **desc_p)
{
    const char *absent;
    cudaError_t e;
    int n = 0;

    if (ndevices_p == NULL || desc_p == NULL) return cu_invalid("init: NULL output pointer");
    e = cudaGetDeviceCount(&n);
    absent = e != cudaSuccess ? cu_absent_why(e) : NULL;
    if (e != cudaSuccess && absent == NULL)
        return cu_fail(e == cudaErrorInsufficientDriver
                           ? "cudaGetDeviceCount (libcuda.so.1 loads: a driver older than "
                             "this runtime?)"
                           : "cudaGetDeviceCount",
                       e);
    pthread_mutex_lock(&desc_lock);
    if (absent != NULL) {
        char why[128];
        snprintf(why, sizeof why, "(%s: %s)", absent, cudaGetErrorName(e));
        (void)cudaGetLastError();
        n = 0;
        cu_describe(0, why);
    } else {
        cu_describe(n, NULL);
    }
    pthread_mutex_unlock(&desc_lock);
    *desc_p = desc_buf;
    *ndevices_p = n;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_pointer_kind(const void *p, int *is_device_p, int *device_p)
{
    struct cudaPointerAttributes attr;
    cudaError_t e;

    if (is_device_p == NULL || device_p == NULL)
        return cu_invalid("pointer_kind: NULL output pointer");
    if (p == NULL) {
        *device_p = -1;
        *is_device_p = 0;
        return CHORUS_SUCCESS;
    }
    memset(&attr, 0, sizeof attr);
    e = cudaPointerGetAttributes(&attr, p);
    /* Runtimes before 11.0 answered cudaErrorInvalidValue for memory CUDA does not know
     * (plain host memory) and left it as the thread's last error. */
    if (e == cudaErrorInvalidValue) {
        (void)cudaGetLastError();
        attr.type = cudaMemoryTypeUnregistered;
    } else if (e != cudaSuccess) {
        return cu_fail("cudaPointerGetAttributes", e);
    }
    if (attr.type == cudaMemoryTypeDevice) {
        *device_p = attr.device;
        *is_device_p = 1;
    } else {
        *device_p = -1;
        *is_device_p = 0;
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_get_device(int *device_p)
{
    int dev;

    if (device_p == NULL) return cu_invalid("get_device: NULL output pointer");
    CU_CHECK("cudaGetDevice", cudaGetDevice(&dev));
    *device_p = dev;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_set_device(int device)
{
    CU_CHECK("cudaSetDevice", cudaSetDevice(device));
    return CHORUS_SUCCESS;
}

/* ---- Memory ---- */

static chorus_status_t cu_malloc_device(void **p, size_t bytes)
{
    void *m = NULL;

    if (p == NULL) return cu_invalid("malloc_device: NULL output pointer");
    CU_CHECK("cudaMalloc", cudaMalloc(&m, bytes));
    *p = m;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_free_device(void *p)
{
    CU_CHECK("cudaFree", cudaFree(p));
    return CHORUS_SUCCESS;
}

/* ---- Pinned host memory ----
 *
 * cudaFreeHost waits for the whole device to go idle (as cudaFree does: NVIDIA/nccl#48 is
 * a hang of exactly this kind). A proxy thread that grows its staging buffers frees the old
 * ones while the caller's stream is held by stream_wait_flag until that same proxy raises
 * the counter: the free would wait for the stream, the stream for the proxy, for ever.
 * So free_host never calls cudaFreeHost: a freed block goes back to a process-wide cache,
 * and malloc_host takes the smallest cached block that fits (at most twice the size asked,
 * so that a small request does not pin a large block). The cache holds at most what was
 * in use at the busiest moment, plus blocks outgrown; the process's exit frees it. A
 * block must have no copy pending when it is freed, as with cudaFreeHost. */

typedef struct {
    void *p;
    size_t bytes;
    int in_use;
} cu_host_block_t;

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static cu_host_block_t *host_blocks;
static size_t host_nblocks, host_cap;

/* A cached block for bytes, marked in use, or NULL (lock held). */
static void *cu_host_take(size_t bytes)
{
    cu_host_block_t *best = NULL;

    for (size_t i = 0; i < host_nblocks; i++) {
        cu_host_block_t *b = &host_blocks[i];
        if (b->in_use || b->bytes < bytes || b->bytes / 2 > bytes) continue;
        if (best == NULL || b->bytes < best->bytes) best = b;
    }
    if (best == NULL) return NULL;
    best->in_use = 1;
    return best->p;
}

/* Records a new block in use (lock held); 0 when the table cannot grow, and then the block
 * is simply not cached: free_host releases it with cudaFreeHost. */
static int cu_host_record(void *p, size_t bytes)
{
    if (host_nblocks == host_cap) {
        size_t cap = host_cap == 0 ? 64 : 2 * host_cap;
        cu_host_block_t *t = realloc(host_blocks, cap * sizeof *t);
        if (t == NULL) return 0;
        host_blocks = t;
        host_cap = cap;
    }
    host_blocks[host_nblocks].p = p;
    host_blocks[host_nblocks].bytes = bytes;
    host_blocks[host_nblocks].in_use = 1;
    host_nblocks++;
    return 1;
}

/* Portable: pinned for every device, since the proxy thread may use another one. Mapped:
 * a stream_wait_flag flag must have a device address. */
static chorus_status_t cu_malloc_host(void **p, size_t bytes)
{
    void *m;

    if (p == NULL) return cu_invalid("malloc_host: NULL output pointer");
    if (bytes == 0) bytes = 1;
    pthread_mutex_lock(&host_lock);
    m = cu_host_take(bytes);
    pthread_mutex_unlock(&host_lock);
    if (m == NULL) {
        CU_CHECK("cudaHostAlloc",
                 cudaHostAlloc(&m, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
        pthread_mutex_lock(&host_lock);
        (void)cu_host_record(m, bytes);
        pthread_mutex_unlock(&host_lock);
    }
    *p = m;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_free_host(void *p)
{
    int cached = 0;

    if (p == NULL) return CHORUS_SUCCESS;
    pthread_mutex_lock(&host_lock);
    for (size_t i = 0; i < host_nblocks && !cached; i++) {
        if (host_blocks[i].p != p) continue;
        if (!host_blocks[i].in_use) {
            pthread_mutex_unlock(&host_lock);
            return cu_invalid("free_host: %p was already freed", p);
        }
        host_blocks[i].in_use = 0;
        cached = 1;
    }
    pthread_mutex_unlock(&host_lock);
    if (!cached) CU_CHECK("cudaFreeHost", cudaFreeHost(p));
    return CHORUS_SUCCESS;
}

/* ---- Streams and events ---- */

static chorus_status_t cu_stream_create(void **stream_p)
{
    cudaStream_t s;

    if (stream_p == NULL) return cu_invalid("stream_create: NULL output pointer");
    CU_CHECK("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream_p = s;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_stream_destroy(void *stream)
{
    if (stream == NULL) return cu_invalid("stream_destroy: NULL stream");
    CU_CHECK("cudaStreamDestroy", cudaStreamDestroy((cudaStream_t)stream));
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_stream_synchronize(void *stream)
{
    CU_CHECK("cudaStreamSynchronize", cudaStreamSynchronize((cudaStream_t)stream));
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_event_create(void **event_p)
{
    cudaEvent_t e;

    if (event_p == NULL) return cu_invalid("event_create: NULL output pointer");
    CU_CHECK("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&e, cudaEventDefault));
    *event_p = e;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_event_destroy(void *event)
{
    if (event == NULL) return cu_invalid("event_destroy: NULL event");
    CU_CHECK("cudaEventDestroy", cudaEventDestroy((cudaEvent_t)event));
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_event_record(void *event, void *stream)
{
    if (event == NULL) return cu_invalid("event_record: NULL event");
    CU_CHECK("cudaEventRecord", cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_event_query(void *event, int *done_p)
{
    cudaError_t e;

    if (event == NULL || done_p == NULL) return cu_invalid("event_query: NULL argument");
    e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaErrorNotReady) {
        /* Not an error; some runtimes still record it as the thread's last error. */
        (void)cudaGetLastError();
        *done_p = 0;
        return CHORUS_SUCCESS;
    }
    if (e != cudaSuccess) return cu_fail("cudaEventQuery", e);
    *done_p = 1;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_event_elapsed_ms(void *start, void *end, float *ms_p)
{
    float ms;

    if (start == NULL || end == NULL || ms_p == NULL)
        return cu_invalid("event_elapsed_ms: NULL argument");
    CU_CHECK("cudaEventElapsedTime",
             cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end));
    *ms_p = ms;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_stream_wait_event(void *stream, void *event)
{
    if (event == NULL) return cu_invalid("stream_wait_event: NULL event");
    CU_CHECK("cudaStreamWaitEvent",
             cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return CHORUS_SUCCESS;
}

/* The wait runs on the device's front end where the device supports 64-bit stream memory
 * operations (every recent GPU and driver), else as a one-thread kernel that polls the
 * flag through its mapped device address. CU_STREAM_WAIT_VALUE_GEQ is the cyclic test
 * (int64_t)(*flag - value) >= 0 (cuda.h), the spin kernel's too. The flag is host memory
 * from cudaHostAlloc(cudaHostAllocMapped), so the address the device polls is the one
 * cudaHostGetDevicePointer gives (the same as the host's under unified addressing). A
 * driver that refuses the operation at run time (CUDA_ERROR_NOT_SUPPORTED) turns the
 * device over to the spin kernel rather than failing the collective. */
static chorus_status_t cu_stream_wait_flag(void *stream, volatile uint64_t *flag, uint64_t value)
{
    void *dflag = NULL;
    int dev;
    CUresult r;

    if (flag == NULL) return cu_invalid("stream_wait_flag: NULL flag");
    CU_CHECK("cudaGetDevice", cudaGetDevice(&dev));
    /* Before the first wait on this device: the kernels the proxy launches while streams
     * wait for it must not need loading then (chorus__cu_preload says why). */
    if (dev < 0 || dev >= CU_MAX_DEVICES || !atomic_load(&kernels_loaded[dev])) {
        CU_CHECK("loading the reduction kernels (cudaFuncGetAttributes)",
                 (cudaError_t)chorus__cu_preload());
        if (dev >= 0 && dev < CU_MAX_DEVICES) atomic_store(&kernels_loaded[dev], 1);
    }
    CU_CHECK("cudaHostGetDevicePointer", cudaHostGetDevicePointer(&dflag, (void *)flag, 0));
    if (cu_wait_mode(dev) == 1) {
        r = drv_wait_value64((CUstream)stream, (CUdeviceptr)(uintptr_t)dflag, value,
                             CU_STREAM_WAIT_VALUE_GEQ);
        if (r == CUDA_SUCCESS) return CHORUS_SUCCESS;
        if (r != CUDA_ERROR_NOT_SUPPORTED) {
            const char *name = NULL;
            if (drv_error_name == NULL || drv_error_name(r, &name) != CUDA_SUCCESS) name = NULL;
            snprintf(cu_err, sizeof cu_err, "cuStreamWaitValue64: %s (CUresult %d)",
                     name != NULL ? name : "unknown error", (int)r);
            return CHORUS_ERR_SYSTEM;
        }
        if (dev >= 0 && dev < CU_MAX_DEVICES) atomic_store(&wait_mode[dev], 2);
    }
    CU_CHECK("stream_wait_flag kernel launch",
             (cudaError_t)chorus__cu_spin_wait((volatile uint64_t *)dflag, value, stream));
    return CHORUS_SUCCESS;
}

/* ---- Copies and kernels ---- */

static chorus_status_t cu_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    if (bytes == 0) return CHORUS_SUCCESS;
    if (dst == NULL || src == NULL) {
        return cu_invalid("memcpy_async: dst %p, src %p for %zu bytes", dst, (const void *)src,
                          bytes);
    }
    CU_CHECK("cudaMemcpyAsync",
             cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
    return CHORUS_SUCCESS;
}

/* cudaMemcpy2DAsync refuses a pitch above the device's cudaDevAttrMaxPitch (2^31 - 1 bytes
 * on current GPUs): such copies, and any the call rejects as invalid, go row by row. */
#define CU_MAX_PITCH ((size_t)0x7fffffff)

static chorus_status_t cu_memcpy2d_async(void *dst, size_t dpitch, const void *src, size_t spitch,
                                         size_t width, size_t height, void *stream)
{
    if (width == 0 || height == 0) return CHORUS_SUCCESS;
    if (dst == NULL || src == NULL || width > dpitch || width > spitch) {
        return cu_invalid("memcpy2d_async: dst %p (pitch %zu), src %p (pitch %zu), "
                          "%zu x %zu bytes",
                          dst, dpitch, (const void *)src, spitch, width, height);
    }
    if (height == 1) return cu_memcpy_async(dst, src, width, stream);
    if (dpitch <= CU_MAX_PITCH && spitch <= CU_MAX_PITCH) {
        cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                          cudaMemcpyDefault, (cudaStream_t)stream);
        if (e == cudaSuccess) return CHORUS_SUCCESS;
        if (e != cudaErrorInvalidPitchValue && e != cudaErrorInvalidValue)
            return cu_fail("cudaMemcpy2DAsync", e);
        (void)cudaGetLastError();
    }
    for (size_t r = 0; r < height; r++) {
        CU_CHECK("cudaMemcpyAsync (row of a 2D copy)",
                 cudaMemcpyAsync((char *)dst + r * dpitch, (const char *)src + r * spitch, width,
                                 cudaMemcpyDefault, (cudaStream_t)stream));
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_reduce_async(void *dst, const void *const *src, int nsrc, size_t count,
                                       chorus_dtype_t dtype, chorus_op_t op, void *stream)
{
    if ((unsigned)dtype >= CHORUS_NUM_DTYPES)
        return cu_invalid("reduce_async: unknown dtype %d", (int)dtype);
    if ((unsigned)op >= CHORUS_AVG) {
        return cu_invalid("reduce_async: %s", op == CHORUS_AVG
                                                  ? "avg is not a kernel op (sum, then divide)"
                                                  : "unknown op");
    }
    if (nsrc < 1 || nsrc > CHORUS_CU_MAX_SRC)
        return cu_invalid("reduce_async: %d sources (1 to %d)", nsrc, CHORUS_CU_MAX_SRC);
    if (count == 0) return CHORUS_SUCCESS;
    if (dst == NULL || src == NULL)
        return cu_invalid("reduce_async: dst %p, src %p", dst, (const void *)src);
    for (int s = 0; s < nsrc; s++) {
        if (src[s] == NULL) return cu_invalid("reduce_async: source %d of %d is NULL", s, nsrc);
    }
    CU_CHECK("reduce kernel launch",
             (cudaError_t)chorus__cu_reduce(dst, src, nsrc, count, (int)dtype, (int)op, stream));
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_divide_async(void *buf, size_t count, chorus_dtype_t dtype,
                                       uint64_t divisor, void *stream)
{
    if ((unsigned)dtype >= CHORUS_NUM_DTYPES)
        return cu_invalid("divide_async: unknown dtype %d", (int)dtype);
    if (divisor == 0) return cu_invalid("divide_async: divisor 0");
    if (count == 0) return CHORUS_SUCCESS;
    if (buf == NULL) return cu_invalid("divide_async: NULL buffer for %zu elements", count);
    CU_CHECK("divide kernel launch",
             (cudaError_t)chorus__cu_divide(buf, count, (int)dtype, divisor, stream));
    return CHORUS_SUCCESS;
}

/* ---- CUDA IPC ---- */

static chorus_status_t cu_ipc_get_handle(void *base, void *handle)
{
    cudaIpcMemHandle_t h;

    if (base == NULL || handle == NULL) return cu_invalid("ipc_get_handle: NULL argument");
    CU_CHECK("cudaIpcGetMemHandle", cudaIpcGetMemHandle(&h, base));
    memcpy(handle, &h, sizeof h);
    return CHORUS_SUCCESS;
}

/* Lazy peer access: the mapping enables access from the current device to the owner's
 * only when the two differ and the first kernel touches it. */
static chorus_status_t cu_ipc_open(const void *handle, void **p)
{
    cudaIpcMemHandle_t h;
    void *m = NULL;

    if (handle == NULL || p == NULL) return cu_invalid("ipc_open: NULL argument");
    memcpy(&h, handle, sizeof h);
    CU_CHECK("cudaIpcOpenMemHandle", cudaIpcOpenMemHandle(&m, h, cudaIpcMemLazyEnablePeerAccess));
    *p = m;
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_ipc_close(void *p)
{
    if (p == NULL) return cu_invalid("ipc_close: NULL pointer");
    CU_CHECK("cudaIpcCloseMemHandle", cudaIpcCloseMemHandle(p));
    return CHORUS_SUCCESS;
}

static chorus_status_t cu_pci_bus_id(int device, char *buf, size_t len)
{
    if (buf == NULL || len == 0 || len > INT_MAX) return cu_invalid("pci_bus_id: bad buffer");
    CU_CHECK("cudaDeviceGetPCIBusId", cudaDeviceGetPCIBusId(buf, (int)len, device));
    return CHORUS_SUCCESS;
}

/* ---- dma-buf (GPUDirect RDMA) ---- */

/* Per device: 0 not asked yet, 1 CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 2 not. */
static _Atomic int dmabuf_mode[CU_MAX_DEVICES];

static int cu_dmabuf_supported(int dev)
{
    int mode = dev >= 0 && dev < CU_MAX_DEVICES ? atomic_load(&dmabuf_mode[dev]) : 0;
    CUdevice cudev;
    int can = 0;

    if (mode != 0) return mode == 1;
    pthread_once(&drv_once, drv_load);
    mode = 2;
    if (drv_get_handle_range != NULL && drv_device_get != NULL && drv_device_attr != NULL &&
        drv_device_get(&cudev, dev) == CUDA_SUCCESS &&
        drv_device_attr(&can, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, cudev) == CUDA_SUCCESS &&
        can != 0)
        mode = 1;
    if (dev >= 0 && dev < CU_MAX_DEVICES) atomic_store(&dmabuf_mode[dev], mode);
    return mode == 1;
}

/* The driver exports whole host pages (dptr and size aligned to the host page size), so
 * the range is widened to the pages around [p, p + bytes) and p's offset in it returned.
 * Those pages must belong to p's allocation (cudaMalloc of large buffers is page aligned);
 * where they do not, the driver answers CUDA_ERROR_INVALID_VALUE, reported as such. */
static chorus_status_t cu_dmabuf_export(const void *p, size_t bytes, int *fd_p,
                                        uint64_t *offset_p)
{
    struct cudaPointerAttributes attr;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), start, end;
    const char *name = NULL;
    CUresult r;
    int fd = -1;

    if (p == NULL || fd_p == NULL || offset_p == NULL || bytes == 0)
        return cu_invalid("dmabuf_export: NULL argument or 0 bytes");
    if (bytes > UINTPTR_MAX - 2 * page || (uintptr_t)p > UINTPTR_MAX - 2 * page - bytes)
        return cu_invalid("dmabuf_export: [%p, +%zu) wraps around", p, bytes);
    memset(&attr, 0, sizeof attr);
    CU_CHECK("cudaPointerGetAttributes", cudaPointerGetAttributes(&attr, p));
    if (attr.type != cudaMemoryTypeDevice)
        return cu_invalid("dmabuf_export: %p is not device memory", p);
    if (!cu_dmabuf_supported(attr.device)) {
        snprintf(cu_err, sizeof cu_err, "dmabuf_export: device %d cannot export dma-buf "
                 "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0, or the driver lacks "
                 "cuMemGetHandleForAddressRange): no GPUDirect RDMA", attr.device);
        return CHORUS_ERR_UNSUPPORTED;
    }
    start = (uintptr_t)p & ~(page - 1);
    end = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    r = drv_get_handle_range(&fd, (CUdeviceptr)start, (size_t)(end - start),
                             CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS) {
        if (drv_error_name == NULL || drv_error_name(r, &name) != CUDA_SUCCESS) name = NULL;
        snprintf(cu_err, sizeof cu_err, "cuMemGetHandleForAddressRange(%p, %zu bytes): %s "
                 "(CUresult %d)", (void *)start, (size_t)(end - start),
                 name != NULL ? name : "?", (int)r);
        return r == CUDA_ERROR_NOT_SUPPORTED ? CHORUS_ERR_UNSUPPORTED
               : r == CUDA_ERROR_INVALID_VALUE ? CHORUS_ERR_INVALID_ARGUMENT
                                               : CHORUS_ERR_SYSTEM;
    }
    *offset_p = (uint64_t)((uintptr_t)p - start);
    *fd_p = fd;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__cu_drv_fail(const char *call, CUresult r)
{
    const char *name = NULL;

    pthread_once(&drv_once, drv_load);
    if (drv_error_name == NULL || drv_error_name(r, &name) != CUDA_SUCCESS) name = NULL;
    snprintf(cu_err, sizeof cu_err, "%s: %s (CUresult %d)", call, name != NULL ? name : "?",
             (int)r);
    return r == CUDA_ERROR_NOT_SUPPORTED ? CHORUS_ERR_UNSUPPORTED
           : r == CUDA_ERROR_INVALID_VALUE ? CHORUS_ERR_INVALID_ARGUMENT
                                           : CHORUS_ERR_SYSTEM;
}

/* ---- The table ---- */

static const chorus_gpu_ops_t cu_ops = {
    .abi_version = CHORUS_GPU_ABI_VERSION,
    .name = "cuda",
    .init = cu_init,
    .last_error = cu_last_error,
    .pointer_kind = cu_pointer_kind,
    .get_device = cu_get_device,
    .set_device = cu_set_device,
    .malloc_device = cu_malloc_device,
    .free_device = cu_free_device,
    .malloc_host = cu_malloc_host,
    .free_host = cu_free_host,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_synchronize = cu_stream_synchronize,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_elapsed_ms = cu_event_elapsed_ms,
    .stream_wait_event = cu_stream_wait_event,
    .stream_wait_flag = cu_stream_wait_flag,
    .memcpy_async = cu_memcpy_async,
    .memcpy2d_async = cu_memcpy2d_async,
    .reduce_async = cu_reduce_async,
    .divide_async = cu_divide_async,
    .ipc_get_handle = cu_ipc_get_handle,
    .ipc_open = cu_ipc_open,
    .ipc_close = cu_ipc_close,
    .pci_bus_id = cu_pci_bus_id,
    .dmabuf_export = cu_dmabuf_export,
    .vmm_alloc = chorus__cu_vmm_alloc,
    .vmm_import = chorus__cu_vmm_import,
    .vmm_free = chorus__cu_vmm_free,
    .multicast_supported = chorus__cu_multicast_supported,
};

const chorus_gpu_ops_t *chorus_gpu_plugin(int abi) __attribute__((visibility("default")));

const chorus_gpu_ops_t *chorus_gpu_plugin(int abi)
{
    return abi == CHORUS_GPU_ABI_VERSION ? &cu_ops : NULL;
}
