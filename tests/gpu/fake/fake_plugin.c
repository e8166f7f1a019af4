/*
 * libchorus-cuda-fake.so: chorus_gpu_ops_t (lib/gpu/gpu.h) on host memory, so the whole
 * device path of Chorus runs and is tested on machines without a GPU (fake.h says how).
 * It is meant to be stricter than CUDA, never looser: what CUDA would reject is rejected
 * with a message naming the call, and some misuse CUDA lets pass silently is rejected too
 * (a kernel reading pageable host memory, an IPC handle for an inner pointer, a wait flag
 * outside pinned memory, overlapping copies).
 *
 * Environment (read once, by the plugin; libchorus never sees these):
 *   CHORUS_FAKE_GPU_DEVICES=N   devices reported, 0..8 (default 1; 0 tests the no-GPU path)
 *   CHORUS_FAKE_GPU_DELAY_US=N  every stream task sleeps N us first, to expose missing waits
 *   CHORUS_FAKE_GPU_DMABUF=1    dmabuf_export works (a descriptor of the allocation's shm
 *                               segment, which a test can mmap); unset or 0: it answers
 *                               CHORUS_ERR_UNSUPPORTED, as a driver without dma-buf does
 */
#include "fake.h"
#include "gpu/gpu.h"
#include "kernels.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_MAX_DEVICES 8

atomic_int fake_shutting_down;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static chorus_status_t init_status;
static char init_msg[FAKE_MSG_BYTES];
static int ndevices = 1;
static unsigned delay_us;
static int dmabuf_ok;
static int initialized;
static volatile int forked_child;
static char desc[96];
static _Thread_local int current_device;
static _Thread_local char last_msg[FAKE_MSG_BYTES];

chorus_status_t fake_error(chorus_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    return status;
}

/* The kernel objects linked in (kernels/, C) report errors through libchorus's
 * chorus__error, which a program linked statically against libchorus does not export to
 * the plugin; this one (bound inside the plugin by -Bsymbolic) keeps the plugin
 * self-contained and puts their messages where last_error() finds them. */
chorus_status_t chorus__error(chorus_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    return status;
}

chorus_status_t fake_error_set(chorus_status_t status, const char *msg)
{
    snprintf(last_msg, sizeof last_msg, "%s", msg);
    return status;
}

const char *fake_last_error(void)
{
    return last_msg[0] ? last_msg : "no error";
}

int fake_ndevices(void)
{
    return ndevices;
}

int fake_current_device(void)
{
    return current_device;
}

unsigned fake_delay_us(void)
{
    return delay_us;
}

/* CUDA cannot be used in a child forked after the parent initialised it; neither can the
 * fake (its worker threads and locks did not survive the fork). */
static void after_fork_child(void)
{
    forked_child = 1;
}

static int env_uint(const char *name, unsigned long max, unsigned long dflt, unsigned long *v_p)
{
    const char *s = getenv(name);
    char *end;
    unsigned long v;
    if (!s || !*s) {
        *v_p = dflt;
        return 0;
    }
    v = strtoul(s, &end, 10);
    if (*end || s[0] < '0' || s[0] > '9' || v > max) return -1;
    *v_p = v;
    return 0;
}

static void do_init(void)
{
    Dl_info info;
    unsigned long v;
    if (env_uint("CHORUS_FAKE_GPU_DEVICES", FAKE_MAX_DEVICES, 1, &v) != 0) {
        init_status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "fake GPU: CHORUS_FAKE_GPU_DEVICES=%s: want 0..%d",
                                 getenv("CHORUS_FAKE_GPU_DEVICES"), FAKE_MAX_DEVICES);
        snprintf(init_msg, sizeof init_msg, "%s", fake_last_error());
        ndevices = 0;
        return;
    }
    ndevices = (int)v;
    if (env_uint("CHORUS_FAKE_GPU_DELAY_US", 10000000ul, 0, &v) != 0) {
        init_status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "fake GPU: CHORUS_FAKE_GPU_DELAY_US=%s: want 0..10000000",
                                 getenv("CHORUS_FAKE_GPU_DELAY_US"));
        snprintf(init_msg, sizeof init_msg, "%s", fake_last_error());
        ndevices = 0;
        return;
    }
    delay_us = (unsigned)v;
    if (env_uint("CHORUS_FAKE_GPU_DMABUF", 1, 0, &v) != 0) {
        init_status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "fake GPU: CHORUS_FAKE_GPU_DMABUF=%s: want 0 or 1",
                                 getenv("CHORUS_FAKE_GPU_DMABUF"));
        snprintf(init_msg, sizeof init_msg, "%s", fake_last_error());
        ndevices = 0;
        return;
    }
    dmabuf_ok = (int)v;
    snprintf(desc, sizeof desc, "fake GPU (host memory, for tests): %d device(s)", ndevices);
    /* Worker threads run this library's code until the process exits, so it must never be
     * unloaded: pin it (RTLD_NODELETE). */
    if (dladdr(&init_once, &info) && info.dli_fname)
        dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    pthread_atfork(NULL, NULL, after_fork_child);
    initialized = 1;
}

chorus_status_t fake_enter(void)
{
    pthread_once(&init_once, do_init);
    if (forked_child)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake GPU: used in a child forked after its parent initialised it "
                          "(CUDA forbids this: cudaErrorInitializationError); exec, or fork "
                          "before the first GPU call");
    if (init_status != CHORUS_SUCCESS) return fake_error_set(init_status, init_msg);
    return CHORUS_SUCCESS;
}

__attribute__((destructor)) static void fake_fini(void)
{
    if (!initialized || forked_child) return;
    fake_shutting_down = 1;
    fake_stream_shutdown();
    fake_mem_atexit();
}

static chorus_status_t op_init(int *ndevices_p, const char **desc_p)
{
    chorus_status_t status;
    status = fake_enter();
    if (status != CHORUS_SUCCESS) return status;
    if (!ndevices_p) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaInit: NULL");
    *ndevices_p = ndevices;
    if (desc_p) *desc_p = desc;
    return CHORUS_SUCCESS;
}

static const char *op_last_error(void)
{
    return fake_last_error();
}

static chorus_status_t op_pointer_kind(const void *p, int *is_device_p, int *device_p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_mem_pointer_kind(p, is_device_p, device_p);
}

static chorus_status_t op_get_device(int *device_p)
{
    chorus_status_t status;
    status = fake_enter();
    if (status != CHORUS_SUCCESS) return status;
    if (!device_p) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaGetDevice: NULL");
    if (ndevices == 0)
        return fake_error(CHORUS_ERR_UNSUPPORTED, "fake cudaGetDevice: no CUDA device");
    *device_p = current_device;
    return CHORUS_SUCCESS;
}

static chorus_status_t op_set_device(int device)
{
    chorus_status_t status;
    status = fake_enter();
    if (status != CHORUS_SUCCESS) return status;
    if (device < 0 || device >= ndevices)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaSetDevice(%d): cudaErrorInvalidDevice (%d device(s))", device,
                          ndevices);
    current_device = device;
    return CHORUS_SUCCESS;
}

static chorus_status_t op_malloc_device(void **p, size_t bytes)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_mem_malloc_device(p, bytes);
}

static chorus_status_t op_free_device(void *p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_mem_free_device(p);
}

static chorus_status_t op_malloc_host(void **p, size_t bytes)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_mem_malloc_host(p, bytes);
}

static chorus_status_t op_free_host(void *p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_mem_free_host(p);
}

static chorus_status_t op_stream_create(void **stream_p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_stream_create(stream_p);
}

static chorus_status_t op_stream_destroy(void *stream)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_stream_destroy(stream);
}

static chorus_status_t op_stream_synchronize(void *stream)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_stream_synchronize(stream);
}

static chorus_status_t op_event_create(void **event_p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_event_create(event_p);
}

static chorus_status_t op_event_destroy(void *event)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_event_destroy(event);
}

static chorus_status_t op_event_record(void *event, void *stream)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_event_record(event, stream);
}

static chorus_status_t op_event_query(void *event, int *done_p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_event_query(event, done_p);
}

static chorus_status_t op_event_elapsed_ms(void *start, void *end, float *ms_p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_event_elapsed_ms(start, end, ms_p);
}

static chorus_status_t op_stream_wait_event(void *stream, void *event)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_stream_wait_event(stream, event);
}

static chorus_status_t op_stream_wait_flag(void *stream, volatile uint64_t *flag, uint64_t value)
{
    fake_ptr_kind_t kind;
    fake_task_t *t;
    chorus_status_t status;
    status = fake_enter();
    if (status != CHORUS_SUCCESS) return status;
    status = fake_mem_check((const void *)flag, sizeof *flag, "fake cuStreamWaitValue64: flag",
                            &kind);
    if (status != CHORUS_SUCCESS) return status;
    if (kind != FAKE_PTR_PINNED || ((uintptr_t)flag & 7) != 0)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cuStreamWaitValue64: flag %p must be 8-byte aligned memory "
                          "from malloc_host (the device polls it)", (const void *)flag);
    t = fake_task_new(FAKE_TASK_WAIT_FLAG);
    if (!t) return CHORUS_ERR_NO_MEMORY;
    t->flag = flag;
    t->value = value;
    return fake_stream_enqueue(stream, t, "fake cuStreamWaitValue64");
}

/* Two byte ranges overlap (device and host addresses never do: distinct ranges). */
static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

static chorus_status_t op_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    fake_ptr_kind_t kd, ks;
    fake_task_t *t;
    chorus_status_t status;
    status = fake_enter();
    if (status != CHORUS_SUCCESS) return status;
    if (bytes == 0) return CHORUS_SUCCESS;
    status = fake_mem_check(dst, bytes, "fake cudaMemcpyAsync: dst", &kd);
    if (status == CHORUS_SUCCESS)
        status = fake_mem_check(src, bytes, "fake cudaMemcpyAsync: src", &ks);
    if (status != CHORUS_SUCCESS) return status;
    if (overlap(dst, bytes, src, bytes))
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaMemcpyAsync: dst %p and src %p overlap (%zu bytes)", dst,
                          src, bytes);
    t = fake_task_new(FAKE_TASK_COPY);
    if (!t) return CHORUS_ERR_NO_MEMORY;
    t->dst = dst;
    t->src[0] = src;
    t->bytes = bytes;
    return fake_stream_enqueue(stream, t, "fake cudaMemcpyAsync");
}

/* The bytes a 2D copy spans from its first byte. */
static size_t span2d(size_t pitch, size_t width, size_t height)
{
    return (height - 1) * pitch + width;
}

static chorus_status_t op_memcpy2d_async(void *dst, size_t dpitch, const void *src,
                                         size_t spitch, size_t width, size_t height,
                                         void *stream)
{
    fake_ptr_kind_t kd, ks;
    fake_task_t *t;
    chorus_status_t status;
    size_t dspan, sspan;
    status = fake_enter();
    if (status != CHORUS_SUCCESS) return status;
    if (width == 0 || height == 0) return CHORUS_SUCCESS;
    if (width > dpitch || width > spitch)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaMemcpy2DAsync: width %zu exceeds dpitch %zu or spitch %zu "
                          "(cudaErrorInvalidPitchValue)", width, dpitch, spitch);
    if ((height - 1) > (SIZE_MAX - width) / dpitch || (height - 1) > (SIZE_MAX - width) / spitch)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaMemcpy2DAsync: size overflow");
    dspan = span2d(dpitch, width, height);
    sspan = span2d(spitch, width, height);
    status = fake_mem_check(dst, dspan, "fake cudaMemcpy2DAsync: dst", &kd);
    if (status == CHORUS_SUCCESS)
        status = fake_mem_check(src, sspan, "fake cudaMemcpy2DAsync: src", &ks);
    if (status != CHORUS_SUCCESS) return status;
    if (overlap(dst, dspan, src, sspan))
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaMemcpy2DAsync: dst %p and src %p overlap", dst, src);
    t = fake_task_new(FAKE_TASK_COPY2D);
    if (!t) return CHORUS_ERR_NO_MEMORY;
    t->dst = dst;
    t->src[0] = src;
    t->bytes = width;
    t->dpitch = dpitch;
    t->spitch = spitch;
    t->height = height;
    return fake_stream_enqueue(stream, t, "fake cudaMemcpy2DAsync");
}

/* A kernel operand: device or pinned memory. A kernel cannot read pageable host memory
 * (without HMM it is cudaErrorIllegalAddress), so the fake refuses it at launch. */
static chorus_status_t kernel_operand(const void *p, size_t bytes, const char *what)
{
    fake_ptr_kind_t kind;
    chorus_status_t status = fake_mem_check(p, bytes, what, &kind);
    if (status != CHORUS_SUCCESS) return status;
    if (kind == FAKE_PTR_HOST)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "%s: %p is pageable host memory, which a kernel cannot access "
                          "(cudaErrorIllegalAddress)", what, p);
    return CHORUS_SUCCESS;
}

static chorus_status_t kernel_args(chorus_dtype_t dtype, size_t count, const char *what,
                                   size_t *bytes_p)
{
    size_t size;
    if ((int)dtype < 0 || dtype >= CHORUS_NUM_DTYPES)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", what, (int)dtype);
    size = chorus_dtype_size(dtype);
    if (count > SIZE_MAX / size)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "%s: count %zu overflows", what, count);
    *bytes_p = count * size;
    return CHORUS_SUCCESS;
}

static chorus_status_t op_reduce_async(void *dst, const void *const *src, int nsrc,
                                       size_t count, chorus_dtype_t dtype, chorus_op_t op,
                                       void *stream)
{
    static const char *what = "fake reduce kernel";
    char name[64];
    size_t bytes;
    fake_task_t *t;
    chorus_status_t status;
    status = fake_enter();
    if (status != CHORUS_SUCCESS) return status;
    if (!src || nsrc < 1 || nsrc > FAKE_MAX_SRCS)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "%s: nsrc %d not in 1..%d", what, nsrc,
                          FAKE_MAX_SRCS);
    if ((int)op < 0 || op > CHORUS_MAX)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "%s: op %d (AVG is SUM then divide)",
                          what, (int)op);
    status = kernel_args(dtype, count, what, &bytes);
    if (status != CHORUS_SUCCESS || count == 0) return status;
    status = kernel_operand(dst, bytes, "fake reduce kernel: dst");
    for (int i = 0; i < nsrc && status == CHORUS_SUCCESS; i++) {
        snprintf(name, sizeof name, "fake reduce kernel: src[%d]", i);
        status = kernel_operand(src[i], bytes, name);
        if (status == CHORUS_SUCCESS && overlap(dst, bytes, src[i], bytes) &&
            (i > 0 || dst != src[0]))
            status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                                "%s: dst %p overlaps src[%d] %p (only dst == src[0] may alias)",
                                what, dst, i, src[i]);
    }
    if (status != CHORUS_SUCCESS) return status;
    t = fake_task_new(FAKE_TASK_REDUCE);
    if (!t) return CHORUS_ERR_NO_MEMORY;
    t->dst = dst;
    for (int i = 0; i < nsrc; i++) t->src[i] = src[i];
    t->nsrc = nsrc;
    t->bytes = count;
    t->dtype = dtype;
    t->op = op;
    return fake_stream_enqueue(stream, t, what);
}

static chorus_status_t op_divide_async(void *buf, size_t count, chorus_dtype_t dtype,
                                       uint64_t divisor, void *stream)
{
    static const char *what = "fake divide kernel";
    size_t bytes;
    fake_task_t *t;
    chorus_status_t status;
    status = fake_enter();
    if (status != CHORUS_SUCCESS) return status;
    if (divisor == 0) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "%s: divisor 0", what);
    status = kernel_args(dtype, count, what, &bytes);
    if (status != CHORUS_SUCCESS || count == 0) return status;
    status = kernel_operand(buf, bytes, "fake divide kernel: buf");
    if (status != CHORUS_SUCCESS) return status;
    t = fake_task_new(FAKE_TASK_DIVIDE);
    if (!t) return CHORUS_ERR_NO_MEMORY;
    t->dst = buf;
    t->bytes = count;
    t->dtype = dtype;
    t->value = divisor;
    return fake_stream_enqueue(stream, t, what);
}

/* On a worker, with the memory table locked: translate every operand again (it may have
 * been freed since the enqueue) and do the work on the backing bytes. */
static chorus_status_t run_locked(const fake_task_t *t)
{
    void *d, *s[FAKE_MAX_SRCS];
    size_t bytes;
    chorus_status_t status;
    switch (t->kind) {
    case FAKE_TASK_COPY:
        status = fake_mem_resolve(t->dst, t->bytes, "fake cudaMemcpyAsync: dst", &d);
        if (status == CHORUS_SUCCESS)
            status = fake_mem_resolve(t->src[0], t->bytes, "fake cudaMemcpyAsync: src", &s[0]);
        if (status == CHORUS_SUCCESS) memcpy(d, s[0], t->bytes);
        return status;
    case FAKE_TASK_COPY2D:
        status = fake_mem_resolve(t->dst, span2d(t->dpitch, t->bytes, t->height),
                                  "fake cudaMemcpy2DAsync: dst", &d);
        if (status == CHORUS_SUCCESS)
            status = fake_mem_resolve(t->src[0], span2d(t->spitch, t->bytes, t->height),
                                      "fake cudaMemcpy2DAsync: src", &s[0]);
        for (size_t r = 0; status == CHORUS_SUCCESS && r < t->height; r++)
            memcpy((char *)d + r * t->dpitch, (const char *)s[0] + r * t->spitch, t->bytes);
        return status;
    case FAKE_TASK_REDUCE:
        bytes = t->bytes * chorus_dtype_size(t->dtype);
        status = fake_mem_resolve(t->dst, bytes, "fake reduce kernel: dst", &d);
        for (int i = 0; i < t->nsrc && status == CHORUS_SUCCESS; i++)
            status = fake_mem_resolve(t->src[i], bytes, "fake reduce kernel: src", &s[i]);
        if (status == CHORUS_SUCCESS)
            status = chorus_kernel_reduce_multi(d, (const void *const *)s, t->nsrc, t->bytes,
                                                t->dtype, t->op);
        return status;
    case FAKE_TASK_DIVIDE:
        bytes = t->bytes * chorus_dtype_size(t->dtype);
        status = fake_mem_resolve(t->dst, bytes, "fake divide kernel: buf", &d);
        if (status == CHORUS_SUCCESS)
            status = chorus_kernel_divide(d, t->bytes, t->dtype, t->value);
        return status;
    default:
        return fake_error(CHORUS_ERR_INTERNAL, "fake GPU: task kind %d is not data", t->kind);
    }
}

chorus_status_t fake_task_run_data(const fake_task_t *t)
{
    chorus_status_t status;
    fake_mem_lock();
    status = run_locked(t);
    fake_mem_unlock();
    return status;
}

static chorus_status_t op_ipc_get_handle(void *base, void *handle)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_mem_ipc_get_handle(base, handle);
}

static chorus_status_t op_ipc_open(const void *handle, void **p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_mem_ipc_open(handle, p);
}

static chorus_status_t op_ipc_close(void *p)
{
    chorus_status_t status = fake_enter();
    return status != CHORUS_SUCCESS ? status : fake_mem_ipc_close(p);
}

/* Fake devices sit on buses 0x17, 0x18, ...: addresses that no test topology confuses
 * with a NIC's. */
static chorus_status_t op_pci_bus_id(int device, char *buf, size_t len)
{
    chorus_status_t status = fake_enter();

    if (status != CHORUS_SUCCESS) return status;
    if (buf == NULL || len == 0)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaDeviceGetPCIBusId: bad buffer");
    if (device < 0 || device >= ndevices)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaDeviceGetPCIBusId(%d): cudaErrorInvalidDevice (%d device(s))",
                          device, ndevices);
    if ((size_t)snprintf(buf, len, "0000:%02x:00.0", 0x17 + device) >= len)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaDeviceGetPCIBusId: %zu bytes are too few", len);
    return CHORUS_SUCCESS;
}

/* As the CUDA plugin: UNSUPPORTED unless the "driver" has dma-buf (CHORUS_FAKE_GPU_DMABUF=1),
 * so the path without GPUDirect is the default one tests see. */
static chorus_status_t op_dmabuf_export(const void *p, size_t bytes, int *fd_p,
                                        uint64_t *offset_p)
{
    chorus_status_t status = fake_enter();

    if (status != CHORUS_SUCCESS) return status;
    if (!dmabuf_ok)
        return fake_error(CHORUS_ERR_UNSUPPORTED,
                          "fake cuMemGetHandleForAddressRange: the device does not support "
                          "dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0; "
                          "CHORUS_FAKE_GPU_DMABUF=1 turns it on)");
    return fake_mem_dmabuf_export(p, bytes, fd_p, offset_p);
}

/* Shareable memory (cuMem): on unless CHORUS_FAKE_GPU_VMM=0, which plays a device that
 * cannot export POSIX descriptors. */
static int vmm_ok(void)
{
    const char *v = getenv("CHORUS_FAKE_GPU_VMM");
    return v == NULL || strcmp(v, "0") != 0;
}

static chorus_status_t op_vmm_alloc(size_t bytes, void **p, size_t *granted_p, int *fd_p)
{
    chorus_status_t status = fake_enter();

    if (status != CHORUS_SUCCESS) return status;
    if (!vmm_ok())
        return fake_error(CHORUS_ERR_UNSUPPORTED, "fake vmm_alloc: device %d cannot export "
                          "memory as POSIX file descriptors (CHORUS_FAKE_GPU_VMM=0)",
                          fake_current_device());
    return fake_mem_vmm_alloc(bytes, p, granted_p, fd_p);
}

static chorus_status_t op_vmm_import(int fd, size_t bytes, void **p)
{
    chorus_status_t status = fake_enter();

    if (status != CHORUS_SUCCESS) return status;
    if (!vmm_ok())
        return fake_error(CHORUS_ERR_UNSUPPORTED, "fake vmm_import: CHORUS_FAKE_GPU_VMM=0");
    return fake_mem_vmm_import(fd, bytes, p);
}

static chorus_status_t op_vmm_free(void *p)
{
    chorus_status_t status = fake_enter();

    return status != CHORUS_SUCCESS ? status : fake_mem_vmm_free(p);
}

/* No NVSwitch behind the fake devices. */
static chorus_status_t op_multicast_supported(int device, int *yes_p)
{
    chorus_status_t status = fake_enter();

    if (status != CHORUS_SUCCESS) return status;
    if (yes_p == NULL || device < 0 || device >= ndevices)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake multicast_supported(%d): bad "
                          "argument", device);
    *yes_p = 0;
    return CHORUS_SUCCESS;
}

static const chorus_gpu_ops_t fake_ops = {
    .abi_version = CHORUS_GPU_ABI_VERSION,
    .name = "fake",
    .init = op_init,
    .last_error = op_last_error,
    .pointer_kind = op_pointer_kind,
    .get_device = op_get_device,
    .set_device = op_set_device,
    .malloc_device = op_malloc_device,
    .free_device = op_free_device,
    .malloc_host = op_malloc_host,
    .free_host = op_free_host,
    .stream_create = op_stream_create,
    .stream_destroy = op_stream_destroy,
    .stream_synchronize = op_stream_synchronize,
    .event_create = op_event_create,
    .event_destroy = op_event_destroy,
    .event_record = op_event_record,
    .event_query = op_event_query,
    .event_elapsed_ms = op_event_elapsed_ms,
    .stream_wait_event = op_stream_wait_event,
    .stream_wait_flag = op_stream_wait_flag,
    .memcpy_async = op_memcpy_async,
    .memcpy2d_async = op_memcpy2d_async,
    .reduce_async = op_reduce_async,
    .divide_async = op_divide_async,
    .ipc_get_handle = op_ipc_get_handle,
    .ipc_open = op_ipc_open,
    .ipc_close = op_ipc_close,
    .pci_bus_id = op_pci_bus_id,
    .dmabuf_export = op_dmabuf_export,
    .vmm_alloc = op_vmm_alloc,
    .vmm_import = op_vmm_import,
    .vmm_free = op_vmm_free,
    .multicast_supported = op_multicast_supported,
};

const chorus_gpu_ops_t *chorus_gpu_plugin(int abi);
const chorus_gpu_ops_t *chorus_gpu_plugin(int abi)
{
    return abi == CHORUS_GPU_ABI_VERSION ? &fake_ops : NULL;
}
