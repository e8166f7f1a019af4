/*
 * chorus-bench -G: the buffers in device memory, every call on one stream of this rank's
 * device, the data of the checks made and read on the host.
 *
 * The GPU is reached through the same plugin table as the library's (lib/gpu/gpu.h), so
 * that the bench needs no CUDA header either, and so that the fake plugin of the tests
 * (CHORUS_CUDA_PLUGIN=.../libchorus-cuda-fake.so) runs -G for real on a machine without a
 * GPU. The host never touches a device buffer: the checked data are written into host
 * mirrors of the two buffers (same layout, so bench_prepare's pointers translate by
 * offset), copied in on the stream, and the result is copied back into the mirror before
 * bench_count_wrong reads it. Without -G the buffers are ordinary host memory and these
 * functions reduce to what chorus-bench always did.
 */
#include "bench.h"
#include "gpu/gpu.h"
#include "util/config.h"

#include <stdlib.h>
#include <string.h>

static void gpu_fail(bench_t *b, chorus_status_t status, const char *what, size_t bytes)
{
    bench_fail_text(b, status, what, bytes, b->gpu->last_error());
}

int bench_gpu_preinit(bench_t *b, char *reason, size_t size)
{
    const chorus_gpu_ops_t *gpu;
    const char *desc = NULL;
    int ndevices = 0;
    int64_t local;

    if (!b->opt.device) return 0;
    gpu = chorus__gpu();
    if (gpu == NULL && chorus__gpu_state() == CHORUS_GPU_BROKEN) {
        /* A plugin that is there but broken is a failure, not a machine without a GPU. */
        snprintf(reason, size, "%s", chorus__gpu_describe());
        return -2;
    }
    if (gpu == NULL) {
        /* The loader's own words when they already say it ("no CUDA device (...)"). */
        const char *why = chorus__gpu_describe();
        if (strncmp(why, "no CUDA device", 14) == 0)
            snprintf(reason, size, "%s", why);
        else
            snprintf(reason, size, "no CUDA device (%s)", why);
        return -1;
    }
    /* NCCL drives a CUDA device itself: the fake plugin's host memory is not one. */
    if (b->opt.backend == BACKEND_NCCL && strcmp(gpu->name, "cuda") != 0) {
        snprintf(reason, size,
                 "--backend nccl needs a CUDA device, and the GPU plugin is '%s' (%s)", gpu->name,
                 chorus__gpu_describe());
        return -1;
    }
    if (b->opt.backend == BACKEND_NCCL && bench_nccl_load(reason, size) != 0) return -1;
    /* The loader has started the plugin; starting it again is how the count is learnt
     * (cudaGetDeviceCount behind it, which may be called any number of times). */
    if (gpu->init(&ndevices, &desc) != CHORUS_SUCCESS || ndevices <= 0) {
        snprintf(reason, size, "no CUDA device (%s plugin: %s)", gpu->name,
                 ndevices <= 0 && desc != NULL ? desc : gpu->last_error());
        return -1;
    }
    /* Ranks of one host take the devices in turn, as the launchers number them. */
    local = chorus__config_int("CHORUS_LOCAL_RANK", 0);
    b->gpu_device = (int)((local < 0 ? 0 : local) % ndevices);
    if (gpu->set_device(b->gpu_device) != CHORUS_SUCCESS) {
        snprintf(reason, size, "set_device(%d) failed: %s", b->gpu_device, gpu->last_error());
        return -2;
    }
    b->gpu = gpu;
    return 0;
}

static void *host_buffer(bench_t *b, size_t bytes)
{
    void *p = NULL;

    /* Page-aligned and touched, so that page faults stay out of the timings. */
    if (posix_memalign(&p, 4096, bytes) != 0)
        bench_fail(b, CHORUS_ERR_NO_MEMORY, "allocation", bytes);
    memset(p, 0, bytes);
    return p;
}

static void copy(bench_t *b, void *dst, const void *src, size_t bytes)
{
    chorus_status_t status;

    if (bytes == 0) return;
    status = b->gpu->memcpy_async(dst, src, bytes, b->stream);
    if (status != CHORUS_SUCCESS) gpu_fail(b, status, "memcpy_async", bytes);
}

/* -R 1: both buffers in one registered window of bytes each, from alloc (chorus_mem_alloc,
 * or chorus_mem_alloc_device with -G; collective); returns the window's size.
 * chorus_mem_free of sendbuf frees both. */
static size_t registered_pair(bench_t *b,
                              chorus_status_t (*alloc)(chorus_comm_t, size_t, void **),
                              const char *what, size_t bytes)
{
    size_t half = (bytes + 4095) / 4096 * 4096;
    void *win = NULL;
    chorus_status_t status = alloc(b->comm, 2 * half, &win);

    if (status != CHORUS_SUCCESS) bench_fail(b, status, what, 2 * half);
    b->sendbuf = win;
    b->recvbuf = (char *)win + half;
    return 2 * half;
}

void bench_gpu_setup(bench_t *b)
{
    /* Both buffers hold the largest size; sizes are rounded down to whole elements. */
    size_t bytes = b->opt.max_bytes + 64;
    chorus_status_t status;

    if (b->gpu == NULL && b->opt.registered) {
        size_t total = registered_pair(b, chorus_mem_alloc, "chorus_mem_alloc", bytes);
        memset(b->sendbuf, 0, total);
        return;
    }
    if (b->gpu == NULL) {
        b->sendbuf = host_buffer(b, bytes);
        b->recvbuf = host_buffer(b, bytes);
        return;
    }
    status = b->gpu->stream_create(&b->stream);
    if (status != CHORUS_SUCCESS) gpu_fail(b, status, "stream_create", 0);
    if (b->opt.registered) {
        (void)registered_pair(b, chorus_mem_alloc_device, "chorus_mem_alloc_device", bytes);
    } else {
        status = b->gpu->malloc_device(&b->sendbuf, bytes);
        if (status == CHORUS_SUCCESS) status = b->gpu->malloc_device(&b->recvbuf, bytes);
        if (status != CHORUS_SUCCESS) gpu_fail(b, status, "malloc_device", bytes);
    }
    /* Pinned, so that the copies of the checks are truly asynchronous on a real GPU. */
    status = b->gpu->malloc_host(&b->host_send, bytes);
    if (status == CHORUS_SUCCESS) status = b->gpu->malloc_host(&b->host_recv, bytes);
    if (status != CHORUS_SUCCESS) gpu_fail(b, status, "malloc_host", bytes);
    memset(b->host_send, 0, bytes);
    memset(b->host_recv, 0, bytes);
    /* Defined contents (zeros) for the timed calls, which do not check. */
    copy(b, b->sendbuf, b->host_send, bytes);
    copy(b, b->recvbuf, b->host_recv, bytes);
    bench_gpu_sync(b, bytes);
    if (b->opt.backend == BACKEND_NCCL) {
        status = bench_nccl_init(b);
        if (status != CHORUS_SUCCESS) bench_fail(b, status, "NCCL communicator", 0);
    }
}

void bench_gpu_teardown(bench_t *b)
{
    if (b->opt.backend == BACKEND_NCCL) bench_nccl_destroy(b);
    /* Nothing is pending (every loop ends with a synchronisation): frees cannot race. */
    if (b->opt.registered) {
        chorus_status_t status = chorus_mem_free(b->comm, b->sendbuf);
        if (status != CHORUS_SUCCESS) bench_fail(b, status, "chorus_mem_free", 0);
    }
    if (b->gpu == NULL) {
        if (b->opt.registered) return;
        free(b->sendbuf);
        free(b->recvbuf);
        return;
    }
    if (!b->opt.registered) {
        (void)b->gpu->free_device(b->sendbuf);
        (void)b->gpu->free_device(b->recvbuf);
    }
    (void)b->gpu->free_host(b->host_send);
    (void)b->gpu->free_host(b->host_recv);
    (void)b->gpu->stream_destroy(b->stream);
}

void bench_gpu_sync(bench_t *b, size_t bytes)
{
    chorus_status_t status, async_status = CHORUS_SUCCESS;

    if (b->gpu == NULL) return;
    status = b->gpu->stream_synchronize(b->stream);
    if (status != CHORUS_SUCCESS) gpu_fail(b, status, "stream_synchronize", bytes);
    /* A stream-ordered Chorus collective that failed after its call returned says so
     * here, not on the stream. */
    if (b->opt.backend == BACKEND_CHORUS &&
        chorus_comm_get_async_error(b->comm, &async_status) == CHORUS_SUCCESS &&
        async_status != CHORUS_SUCCESS)
        bench_fail(b, async_status, "stream-ordered collective", bytes);
}

void bench_gpu_prepare(bench_t *b, const test_t *t, const counts_t *c, int in_place, void **send_p,
                       void **recv_p)
{
    size_t es = chorus_dtype_size(t->dtype);
    size_t base = (c->send_count > c->recv_count ? c->send_count : c->recv_count) * es;
    void *send, *recv;

    if (b->gpu == NULL) {
        bench_prepare(t, c, in_place, b->sendbuf, b->recvbuf, send_p, recv_p);
        return;
    }
    bench_prepare(t, c, in_place, b->host_send, b->host_recv, &send, &recv);
    if (in_place) {
        copy(b, b->recvbuf, b->host_recv, base);
        send = (char *)b->recvbuf + ((char *)send - (char *)b->host_recv);
    } else {
        copy(b, b->sendbuf, b->host_send, c->send_count * es);
        copy(b, b->recvbuf, b->host_recv, c->recv_count * es);
        send = b->sendbuf;
    }
    recv = (char *)b->recvbuf + ((char *)recv - (char *)b->host_recv);
    bench_gpu_sync(b, base);
    *send_p = send;
    *recv_p = recv;
}

const void *bench_gpu_result(bench_t *b, const test_t *t, const counts_t *c, void *recv)
{
    size_t es = chorus_dtype_size(t->dtype);
    char *host;

    if (b->gpu == NULL) return recv;
    /* The result is always inside recvbuf, at the same offset as in the mirror. */
    host = (char *)b->host_recv + ((char *)recv - (char *)b->recvbuf);
    copy(b, host, recv, c->recv_count * es);
    bench_gpu_sync(b, c->recv_count * es);
    return host;
}
