/*
 * The direct path of device send/recv and what it rests on: the choice between it and
 * staging (a pure function, unit-tested in tests/unit/test_gpu_path.c), the device-memory
 * calls the core gives the transports (chorus_tp_params_t.mem), and the run itself.
 *
 * Direct: a transport instance that reports CHORUS_TP_CAP_DEVICE_MEM (ib with GPUDirect
 * RDMA through a dma-buf) reads and writes device memory itself, so the proxy hands it the
 * caller's device pointers: no copy to pinned memory and back, no second pass over the
 * bytes, and the message is the same one message of its size a staged or host send is,
 * so any send still meets any receive. The proxy keeps the stream order as for staging
 * (it waits for the op's start event before posting, and raises the done counter after
 * the transfers complete).
 *
 * Collectives do not take this path: their schedules reduce received data with the CPU
 * kernels, which cannot touch device memory, and a device reduction would need the GPU
 * kernels between the engine's steps. They stay on ipc or staging (gpu_coll.c).
 */
#include "core/gpu_coll.h"

#include "util/log.h"
#include "util/status.h"

#include <stdlib.h>
#include <string.h>

/* ---- The choice ---- */

static const char *const gpu_path_names[] = {"auto", "ipc", "staging", "direct", "host"};

const char *chorus__gpu_path_name(chorus_gpu_path_t path)
{
    return (unsigned)path < sizeof gpu_path_names / sizeof gpu_path_names[0]
               ? gpu_path_names[path]
               : "?";
}

chorus_status_t chorus__gpu_path_parse(const char *text, int rank, chorus_gpu_path_t *path_p)
{
    chorus_gpu_path_t path;

    if (text == NULL || strcmp(text, "auto") == 0) path = GPU_PATH_AUTO;
    else if (strcmp(text, "ipc") == 0) path = GPU_PATH_IPC;
    else if (strcmp(text, "staging") == 0) path = GPU_PATH_STAGING;
    else if (strcmp(text, "direct") == 0) path = GPU_PATH_DIRECT;
    else
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: CHORUS_GPU_PATH=%s is not auto, ipc, staging or direct",
                             rank, text);
    *path_p = path;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__gpu_p2p_path(chorus_gpu_path_t setting, int is_device, int rank,
                                     int nranks, const chorus_gpu_peer_t *peers,
                                     const chorus_p2p_op_t *ops, size_t n, const char *what,
                                     chorus_gpu_path_t *path_p)
{
    chorus_gpu_path_t path = GPU_PATH_DIRECT;
    size_t i;

    for (i = 0; i < n; i++) {
        if (ops[i].peer < 0 || ops[i].peer >= nranks)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: peer %d is not a "
                                 "rank of the %d", rank, what, ops[i].peer, nranks);
    }
    if (!is_device) {
        *path_p = GPU_PATH_HOST;
        return CHORUS_SUCCESS;
    }
    if (setting != GPU_PATH_AUTO && setting != GPU_PATH_DIRECT) {
        *path_p = GPU_PATH_STAGING;
        return CHORUS_SUCCESS;
    }
    /* One path for the whole group: its operations are posted together so that exchanges
     * cannot deadlock, and two paths would run one after the other. */
    for (i = 0; i < n && path == GPU_PATH_DIRECT; i++) {
        const chorus_gpu_peer_t *pr = &peers[ops[i].peer];
        if (ops[i].peer == rank || (pr->caps & CHORUS_TP_CAP_DEVICE_MEM) != 0) continue;
        if (setting == GPU_PATH_DIRECT)
            return chorus__error(CHORUS_ERR_UNSUPPORTED,
                                 "rank %d: %s: CHORUS_GPU_PATH=direct, but peer %d is reached "
                                 "through %s, which cannot move device memory (no GPUDirect: "
                                 "CHORUS_GPU_PATH=auto stages through host memory)",
                                 rank, what, ops[i].peer,
                                 pr->tp_name != NULL ? pr->tp_name : "no transport");
        path = GPU_PATH_STAGING;
    }
    *path_p = path;
    return CHORUS_SUCCESS;
}

/* ---- What the transports get ---- */

static int gpu_tp_is_device(const void *p)
{
    const chorus_gpu_ops_t *ops = chorus__gpu();
    int is_device = 0, device = -1;

    if (p == NULL || ops == NULL || ops->pointer_kind(p, &is_device, &device) != CHORUS_SUCCESS)
        return 0;
    return is_device;
}

static chorus_status_t gpu_tp_dmabuf(const void *p, size_t bytes, int *fd_p, uint64_t *offset_p)
{
    const chorus_gpu_ops_t *ops = chorus__gpu();
    chorus_status_t status;

    if (ops == NULL) return chorus__gpu_unavailable("dma-buf of device memory at %p", p);
    if (ops->dmabuf_export == NULL)
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "dma-buf of device memory at %p: the GPU plugin cannot export one",
                             p);
    status = ops->dmabuf_export(p, bytes, fd_p, offset_p);
    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "dma-buf of %zu bytes of device memory at %p", bytes, p);
    return CHORUS_SUCCESS;
}

/* Static: a transport may keep the pointer for its whole life, which may outlast any one
 * communicator's creation call. */
static const chorus_tp_mem_ops_t gpu_tp_mem = {
    .is_device = gpu_tp_is_device,
    .dmabuf = gpu_tp_dmabuf,
};

const chorus_tp_mem_ops_t *chorus__gpu_tp_mem(chorus_comm_t comm)
{
    return comm->gpu_ops != NULL ? &gpu_tp_mem : NULL;
}

/* ---- The run ---- */

/* Queues a device copy for every pair of a send to self and a receive from self (the k-th
 * send feeds the k-th receive, as on the host path); *copies_p counts them. */
static chorus_status_t direct_self_copies(chorus_gpu_comm_t *g, const chorus_p2p_op_t *ops,
                                          size_t n, const char *what, size_t *copies_p)
{
    int rank = g->comm->rank;
    size_t si = 0, ri = 0, copies = 0;
    chorus_status_t status;

    for (;;) {
        while (si < n && !(ops[si].is_send && ops[si].peer == rank)) si++;
        while (ri < n && !(!ops[ri].is_send && ops[ri].peer == rank)) ri++;
        if (si == n && ri == n) break;
        if (si == n || ri == n)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "rank %d: %s: a %s to self has no matching %s from self", rank,
                                 what, si < n ? "send" : "recv", si < n ? "recv" : "send");
        if (ops[si].bytes != ops[ri].bytes)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "rank %d: %s: a send to self of %zu bytes meets a recv from "
                                 "self of %zu bytes", rank, what, ops[si].bytes, ops[ri].bytes);
        status = g->ops->memcpy_async((void *)ops[ri].addr, (const void *)ops[si].addr,
                                      ops[si].bytes, g->stream_in);
        if (status != CHORUS_SUCCESS)
            return chorus__gpu_error(status, "rank %d: %s: copy to self", rank, what);
        copies++;
        si++;
        ri++;
    }
    *copies_p = copies;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__gpu_direct_p2p(chorus_gpu_comm_t *g, const chorus_p2p_op_t *ops,
                                       size_t n, const char *what)
{
    const chorus_gpu_ops_t *gops = g->ops;
    chorus_status_t status = CHORUS_SUCCESS;
    size_t i, m = 0, copies = 0;

    if (g->p2p_ev_in == NULL) status = gops->event_create(&g->p2p_ev_in);
    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "rank %d: %s: creating an event", g->comm->rank, what);
    status = chorus__gpu_p2p_ops_reserve(g, n, what);
    if (status != CHORUS_SUCCESS) return status;
    status = direct_self_copies(g, ops, n, what, &copies);
    if (status == CHORUS_SUCCESS && copies > 0) {
        status = gops->event_record(g->p2p_ev_in, g->stream_in);
        if (status != CHORUS_SUCCESS)
            chorus__gpu_error(status, "rank %d: %s: recording the copies to self", g->comm->rank,
                              what);
    }
    if (status != CHORUS_SUCCESS) return status;
    /* The transfers to peers run while the copies to self do. */
    for (i = 0; i < n; i++) {
        if (ops[i].peer != g->comm->rank) g->p2p_ops[m++] = ops[i];
    }
    if (m > 0) status = chorus__p2p_run_host(g->comm, g->p2p_ops, m, what);
    if (copies > 0) {
        chorus_status_t st = chorus__gpu_wait_event(g, g->p2p_ev_in, what, "the copies to self");
        if (status == CHORUS_SUCCESS) status = st;
    }
    return status;
}
