/*
 * The staging path of device collectives: for communicators without CUDA IPC (ranks on
 * several hosts, or CHORUS_GPU_PATH=staging), each op is cut into segments that go
 * device -> pinned host memory -> the ordinary host collective -> pinned memory -> device.
 *
 * Segments: elementwise collectives take element ranges; allgather, reduce_scatter and
 * alltoall take the same element range of every rank's block, so the strided side is one
 * memcpy2d and the host collective sees an ordinary call of `len` elements per rank. A
 * segment holds at most CHORUS_GPU_STAGING_CHUNK bytes on either side (at least one
 * element per block).
 *
 * Pipeline: CHORUS_GPU_NSLOTS sets of pinned buffers. While the host runs segment k, the
 * device->host copy of segment k+1 runs on one stream and the host->device copy of segment
 * k-1 on another, so both copy directions overlap the network. Segments touch disjoint
 * element ranges, so the in-place layouts of chorus.h stay correct: a segment is read
 * from device memory before its result is written back, and other segments' copies never
 * touch its range.
 *
 * Every rank cuts the same way (the same chunk, the same block count), so the host
 * collectives of a segment match across ranks and carry the call's signature: a mismatch
 * between ranks is CHORUS_ERR_MISMATCH here as on host memory.
 *
 * Sends and receives on device memory take this file's other path (at the end), on every
 * comm, CUDA IPC or not: whole messages through one pinned buffer.
 */
#include "core/gpu_coll.h"

#include "util/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const chorus_coll_call_t *call;
    const char *send; /* device memory read; NULL when this rank reads none */
    char *recv;       /* device memory written; NULL when this rank writes none */
    size_t esize;
    size_t count;     /* elements per block */
    size_t nin, nout; /* blocks read from send / written to recv (0, 1 or nranks) */
    size_t seglen;    /* elements per block and segment */
} stg_plan_t;

static void stg_plan_coll(const chorus_gpu_comm_t *g, const chorus_coll_call_t *call,
                          stg_plan_t *p)
{
    size_t n = (size_t)g->comm->nranks, nblk = 1;
    int rank = g->comm->rank;

    memset(p, 0, sizeof *p);
    p->call = call;
    p->send = call->sendbuf;
    p->recv = call->recvbuf;
    p->esize = chorus_dtype_size(call->dtype);
    p->count = call->count;
    p->nin = p->nout = 1;
    switch (call->coll) {
    case CHORUS_COLL_ALLGATHER: p->nout = nblk = n; break;
    case CHORUS_COLL_REDUCE_SCATTER: p->nin = nblk = n; break;
    case CHORUS_COLL_ALLTOALL: p->nin = p->nout = nblk = n; break;
    case CHORUS_COLL_BROADCAST: p->nin = rank == call->root; break;
    case CHORUS_COLL_REDUCE: p->nout = rank == call->root; break;
    default: break;
    }
    if (p->nin == 0) p->send = NULL;
    if (p->nout == 0) p->recv = NULL;
    /* nblk, not nin / nout: every rank must cut alike, roots and non-roots included. */
    p->seglen = g->chunk / (p->esize * nblk);
    if (p->seglen == 0) p->seglen = 1;
}

static void stg_slots_free(chorus_gpu_comm_t *g)
{
    const chorus_gpu_ops_t *ops = g->ops;

    for (int i = 0; i < CHORUS_GPU_NSLOTS; i++) {
        chorus_gpu_slot_t *s = &g->slots[i];
        if (s->in != NULL) ops->free_host(s->in);
        if (s->out != NULL) ops->free_host(s->out);
        if (s->ev_in != NULL) ops->event_destroy(s->ev_in);
        if (s->ev_out != NULL) ops->event_destroy(s->ev_out);
        memset(s, 0, sizeof *s);
    }
    g->slot_bytes = 0;
}

/* Makes every slot hold bytes in each direction. */
static chorus_status_t stg_reserve(chorus_gpu_comm_t *g, size_t bytes, const char *what)
{
    const chorus_gpu_ops_t *ops = g->ops;
    chorus_status_t status = CHORUS_SUCCESS;

    if (bytes <= g->slot_bytes) return CHORUS_SUCCESS;
    stg_slots_free(g);
    for (int i = 0; i < CHORUS_GPU_NSLOTS && status == CHORUS_SUCCESS; i++) {
        chorus_gpu_slot_t *s = &g->slots[i];
        status = ops->malloc_host(&s->in, bytes);
        if (status == CHORUS_SUCCESS) status = ops->malloc_host(&s->out, bytes);
        if (status == CHORUS_SUCCESS) status = ops->event_create(&s->ev_in);
        if (status == CHORUS_SUCCESS) status = ops->event_create(&s->ev_out);
    }
    if (status != CHORUS_SUCCESS) {
        chorus__gpu_error(status, "rank %d: %s: %d x 2 pinned staging buffers of %zu bytes",
                          g->comm->rank, what, CHORUS_GPU_NSLOTS, bytes);
        stg_slots_free(g);
        return status;
    }
    g->slot_bytes = bytes;
    return CHORUS_SUCCESS;
}

void chorus__gpu_staging_free(chorus_gpu_comm_t *g)
{
    const chorus_gpu_ops_t *ops = g->ops;

    stg_slots_free(g);
    if (g->p2p_host != NULL) ops->free_host(g->p2p_host);
    if (g->p2p_ev_in != NULL) ops->event_destroy(g->p2p_ev_in);
    if (g->p2p_ev_out != NULL) ops->event_destroy(g->p2p_ev_out);
    free(g->p2p_ops);
    g->p2p_host = g->p2p_ev_in = g->p2p_ev_out = NULL;
    g->p2p_ops = NULL;
    g->p2p_bytes = g->p2p_ops_cap = 0;
}

/* Copies one side of segment [a, a + len) between device memory and a slot: a plain copy
 * for one block, a 2D copy for one block per rank. to_host picks the direction. */
static chorus_status_t stg_copy(chorus_gpu_comm_t *g, const stg_plan_t *p, int to_host,
                                size_t a, size_t len, chorus_gpu_slot_t *s)
{
    size_t es = p->esize, nblk = to_host ? p->nin : p->nout;
    void *stream = to_host ? g->stream_in : g->stream_out;
    void *ev = to_host ? s->ev_in : s->ev_out;
    chorus_status_t status = CHORUS_SUCCESS;

    if (nblk == 1 && to_host)
        status = g->ops->memcpy_async(s->in, p->send + a * es, len * es, stream);
    else if (nblk == 1)
        status = g->ops->memcpy_async(p->recv + a * es, s->out, len * es, stream);
    else if (nblk > 1 && to_host)
        status = g->ops->memcpy2d_async(s->in, len * es, p->send + a * es, p->count * es,
                                        len * es, nblk, stream);
    else if (nblk > 1)
        status = g->ops->memcpy2d_async(p->recv + a * es, p->count * es, s->out, len * es,
                                        len * es, nblk, stream);
    /* Recorded even when nothing was copied, so every wait below has an event. */
    if (status == CHORUS_SUCCESS) status = g->ops->event_record(ev, stream);
    return status;
}

/* The host op of one segment on the slot's pinned buffers. */
static chorus_status_t stg_host_op(chorus_gpu_comm_t *g, const stg_plan_t *p, size_t len,
                                   chorus_gpu_slot_t *s, const char *what)
{
    chorus_coll_call_t seg;

    seg = *p->call;
    seg.count = len;
    seg.sendbuf = p->nin > 0 ? s->in : NULL;
    seg.recvbuf = p->nout > 0 ? s->out : NULL;
    seg.stream = NULL;
    seg.device = CHORUS_CALL_STAGED;
    return chorus__coll_run(g->comm, &seg, what);
}

/* The pipeline over every segment of p. */
static chorus_status_t stg_run(chorus_gpu_comm_t *g, const stg_plan_t *p, const char *what)
{
    size_t nseg = (p->count + p->seglen - 1) / p->seglen, k, blocks;
    chorus_status_t status;
    const char *step = "copying to host memory";

    blocks = p->nin > p->nout ? p->nin : p->nout;
    status = stg_reserve(g, p->seglen * p->esize * (blocks > 0 ? blocks : 1), what);
    if (status != CHORUS_SUCCESS) return status;
    status = stg_copy(g, p, 1, 0, p->seglen < p->count ? p->seglen : p->count, &g->slots[0]);
    for (k = 0; k < nseg && status == CHORUS_SUCCESS; k++) {
        chorus_gpu_slot_t *s = &g->slots[k % CHORUS_GPU_NSLOTS];
        size_t a = k * p->seglen, len = p->count - a < p->seglen ? p->count - a : p->seglen;
        if (k + 1 < nseg) {
            size_t b = a + p->seglen, blen = p->count - b < p->seglen ? p->count - b : p->seglen;
            chorus_gpu_slot_t *next = &g->slots[(k + 1) % CHORUS_GPU_NSLOTS];
            /* The next slot was last used by segment k + 1 - NSLOTS: its copy back must be
             * over before its buffers are refilled. */
            if (k + 1 >= CHORUS_GPU_NSLOTS) {
                status = chorus__gpu_wait_event(g, next->ev_out, what, "a staging copy to the "
                                                                       "device");
                if (status != CHORUS_SUCCESS) return status;
            }
            status = stg_copy(g, p, 1, b, blen, next);
            if (status != CHORUS_SUCCESS) break;
        }
        status = chorus__gpu_wait_event(g, s->ev_in, what, "a staging copy to host memory");
        if (status != CHORUS_SUCCESS) return status;
        status = stg_host_op(g, p, len, s, what);
        if (status != CHORUS_SUCCESS) return status;
        step = "copying to device memory";
        status = stg_copy(g, p, 0, a, len, s);
        step = "copying to host memory";
    }
    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "rank %d: %s: staging: %s", g->comm->rank, what, step);
    /* Copies back run in order on one stream: the last one done means all are. */
    return chorus__gpu_wait_event(g, g->slots[(nseg - 1) % CHORUS_GPU_NSLOTS].ev_out, what,
                                  "the staging copies to the device");
}

chorus_status_t chorus__gpu_staging_coll(chorus_gpu_comm_t *g, const chorus_coll_call_t *call,
                                         const char *what)
{
    stg_plan_t p;

    stg_plan_coll(g, call, &p);
    return stg_run(g, &p, what);
}

/* ---- Send and receive ----
 *
 * Framing: a send is one message of its whole size, staged whole, as on host memory, so
 * a device send meets a host or device receive of the same size, in a group or not. The
 * copies therefore do not overlap the network within a message (the collectives'
 * segments do); a group's copies overlap each other, as they run back to back on one
 * stream. The pinned buffer holds the group's total (each op at a 64-byte boundary) and
 * is kept for the next group. */

#define STG_P2P_ALIGN 64

/* Makes the pinned buffer hold bytes, and the op array n ops. */
static chorus_status_t stg_p2p_reserve(chorus_gpu_comm_t *g, size_t bytes, size_t n,
                                       const char *what)
{
    const chorus_gpu_ops_t *ops = g->ops;
    chorus_status_t status = CHORUS_SUCCESS;
    void *mem = NULL;

    if (g->p2p_ev_in == NULL) status = ops->event_create(&g->p2p_ev_in);
    if (status == CHORUS_SUCCESS && g->p2p_ev_out == NULL)
        status = ops->event_create(&g->p2p_ev_out);
    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "rank %d: %s: creating the staging events",
                                 g->comm->rank, what);
    status = chorus__gpu_p2p_ops_reserve(g, n, what);
    if (status != CHORUS_SUCCESS) return status;
    if (bytes <= g->p2p_bytes) return CHORUS_SUCCESS;
    if (g->p2p_host != NULL) ops->free_host(g->p2p_host);
    g->p2p_host = NULL;
    g->p2p_bytes = 0;
    status = ops->malloc_host(&mem, bytes);
    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "rank %d: %s: a pinned staging buffer of %zu bytes",
                                 g->comm->rank, what, bytes);
    g->p2p_host = mem;
    g->p2p_bytes = bytes;
    return CHORUS_SUCCESS;
}

/* Queues the copies of one direction (sends to host memory, or receives to the device) on
 * its stream and waits for them. */
static chorus_status_t stg_p2p_copy(chorus_gpu_comm_t *g, const chorus_p2p_op_t *dev,
                                    size_t n, int sends, const char *what)
{
    const chorus_gpu_ops_t *ops = g->ops;
    void *stream = sends ? g->stream_in : g->stream_out;
    void *ev = sends ? g->p2p_ev_in : g->p2p_ev_out;
    chorus_status_t status = CHORUS_SUCCESS;
    size_t i, copies = 0;

    for (i = 0; i < n && status == CHORUS_SUCCESS; i++) {
        void *host = (void *)g->p2p_ops[i].addr, *buf = (void *)dev[i].addr;
        if (dev[i].is_send != sends) continue;
        status = sends ? ops->memcpy_async(host, buf, dev[i].bytes, stream)
                       : ops->memcpy_async(buf, host, dev[i].bytes, stream);
        copies++;
    }
    if (status == CHORUS_SUCCESS && copies > 0) status = ops->event_record(ev, stream);
    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "rank %d: %s: staging: copying to %s memory",
                                 g->comm->rank, what, sends ? "host" : "device");
    if (copies == 0) return CHORUS_SUCCESS;
    return chorus__gpu_wait_event(g, ev, what, sends ? "the staging copies to host memory"
                                                     : "the staging copies to the device");
}

chorus_status_t chorus__gpu_staging_p2p(chorus_gpu_comm_t *g, const chorus_p2p_op_t *ops,
                                        size_t n, const char *what)
{
    size_t total = 0, i;
    chorus_status_t status;

    for (i = 0; i < n; i++) {
        size_t room = ops[i].bytes + STG_P2P_ALIGN - 1;
        if (room < ops[i].bytes || total + room < total)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: the group's "
                                 "messages exceed the address space", g->comm->rank, what);
        total += room - room % STG_P2P_ALIGN;
    }
    status = stg_p2p_reserve(g, total, n, what);
    if (status != CHORUS_SUCCESS) return status;
    total = 0;
    for (i = 0; i < n; i++) {
        size_t room = ops[i].bytes + STG_P2P_ALIGN - 1;
        g->p2p_ops[i] = ops[i];
        g->p2p_ops[i].addr = (uintptr_t)g->p2p_host + total;
        total += room - room % STG_P2P_ALIGN;
    }
    status = stg_p2p_copy(g, ops, n, 1, what);
    if (status == CHORUS_SUCCESS) status = chorus__p2p_run_host(g->comm, g->p2p_ops, n, what);
    if (status == CHORUS_SUCCESS) status = stg_p2p_copy(g, ops, n, 0, what);
    return status;
}
