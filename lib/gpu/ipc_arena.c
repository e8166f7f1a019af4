/*
 * Single-host device collectives through CUDA IPC (ipc_arena.h says why).
 *
 * Each rank's slot is one device allocation, opened by every peer, in two halves used by
 * the parity of a chunk counter that runs across operations (g). Every collective runs in
 * chunks, and per chunk: the rank copies its input into half g & 1 of its own slot, waits
 * for its stream (an event), crosses a host-arena step barrier (which also compares the
 * operation's signature), then reads the peers' halves directly (a copy, or the fused
 * n-source reduce) into its output. Allreduce of larger chunks takes a second step: each
 * rank reduces its 1/n slice of the chunk into the result area of its own half, crosses
 * the barrier again, and copies every rank's slice out, so the reduce reads each byte once
 * in all instead of once per rank, and every rank gets identical bytes (each element is
 * reduced by one rank, in rank order).
 *
 * Why two halves and one barrier per chunk suffice: a rank finishes reading chunk g (its
 * event completes) before it publishes any step of chunk g + 1, and writes chunk g + 2 into
 * the same half only after it passed the steps of chunk g + 1, which every peer published
 * after it finished reading chunk g. Inside the two-step allreduce, the result area of a
 * half is written after the chunk's first step (every peer finished copying out chunk
 * g - 2) and read after its second. Because g runs across operations, nothing needs a
 * barrier at the end of an operation: a rank returns as soon as its own stream is done.
 */
#include "gpu/ipc_arena.h"

#include "gpu/dev_win.h"

#include "bootstrap/bootstrap.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Slices and areas start on this many bytes (a multiple of every element size). */
#define IPC_ALIGN 256
/* Allreduce of up to this many bytes per chunk: every rank reduces the whole chunk itself
 * (one barrier per chunk instead of two). */
#define IPC_FLAT_MAX ((size_t)64 << 10)
/* The smallest half of a slot, whatever slot_bytes says. */
#define IPC_MIN_HALF ((size_t)4096)
/* The most sources of one reduce_async call (gpu.h). */
#define IPC_MAX_SRC 16
/* Longest sleep while polling an event, so the abort flag and deadline are seen. */
#define IPC_SLEEP_MAX_NS 1000000ULL

struct chorus_ipc_arena {
    const chorus_gpu_ops_t *gpu;
    chorus_arena_t *host;
    void *stream;
    void *event;
    int rank;
    int n;
    int me;
    int device;
    uint8_t *slot;     /* mine, from malloc_device */
    uint8_t **peer;    /* every rank's slot as seen here; peer[me] == slot */
    const void **srcs; /* n source pointers for the reduce (no allocation per call) */
    uint64_t *offers;  /* n: the peers' window offers of one call (ipc_win) */
    size_t half;       /* bytes of one half of a slot */
    size_t ar_in;      /* allreduce: input bytes of a half; the result area follows */
    uint64_t g;        /* chunks run, all operations together: the half in use */
    /* The host arena's wait settings, refreshed by every run. */
    double timeout_s;
    const atomic_int *abort_flag;
    chorus_wait_policy_t wait;
};

/* One collective call. */
typedef struct {
    chorus_coll_t coll;
    const uint8_t *send;
    uint8_t *recv;
    size_t count;
    chorus_dtype_t dtype;
    chorus_op_t op;     /* as called (the signature) */
    chorus_op_t red_op; /* what the kernel runs: SUM for AVG */
    int root;
    size_t esize;
    uint64_t opno;
    const char *what;
} ipc_job_t;

static size_t ipc_min(size_t a, size_t b)
{
    return a < b ? a : b;
}

static uint8_t *ipc_half(const chorus_ipc_arena_t *a, int r, uint64_t g)
{
    return a->peer[r] + (size_t)(g & 1) * a->half;
}

/* A failed plugin call: the error names rank, operation and call, and marks this rank failed
 * in the host arena so that the peers stop waiting for it. */
static chorus_status_t ipc_gpu_fail(chorus_ipc_arena_t *a, const ipc_job_t *j,
                                    chorus_status_t status, const char *call)
{
    status = chorus__gpu_error(status, "rank %d: ipc arena: %s: %s", a->rank, j->what, call);
    return chorus__arena_fail(a->host, status);
}

static chorus_status_t ipc_step(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    return chorus__arena_step(a->host, j->coll, j->count, j->dtype, j->op, j->opno, j->what);
}

/* Sleeps ns nanoseconds. */
static void ipc_nap(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    nanosleep(&ts, NULL);
}

/* Returns once everything enqueued on the stream so far has finished: an event polled with
 * the comm's policy (spin, yield, then sleeps growing to IPC_SLEEP_MAX_NS), the arena's
 * deadline and the abort flag. */
static chorus_status_t ipc_sync(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    uint64_t start, now, spin_end, yield_end, deadline, nap = 2000;
    chorus_status_t status;
    int done = 0;

    status = a->gpu->event_record(a->event, a->stream);
    if (status != CHORUS_SUCCESS) return ipc_gpu_fail(a, j, status, "event_record");
    start = now = chorus__now_ns();
    spin_end = start + a->wait.spin_ns;
    yield_end = spin_end + a->wait.yield_ns;
    deadline = a->timeout_s > 0 ? start + (uint64_t)(a->timeout_s * 1e9) : UINT64_MAX;
    for (;;) {
        status = a->gpu->event_query(a->event, &done);
        if (status != CHORUS_SUCCESS) return ipc_gpu_fail(a, j, status, "event_query");
        if (done) return CHORUS_SUCCESS;
        if (a->abort_flag != NULL && atomic_load_explicit(a->abort_flag, memory_order_relaxed))
            return chorus__arena_fail(a->host, chorus__error(CHORUS_ERR_ABORTED, "rank %d: ipc "
                                      "arena: %s: aborted", a->rank, j->what));
        if (now >= deadline)
            return chorus__arena_fail(a->host, chorus__error(CHORUS_ERR_TIMEOUT, "rank %d: ipc "
                                      "arena: %s timed out after %.1f s waiting for this "
                                      "rank's stream", a->rank, j->what, a->timeout_s));
        if (now >= yield_end) {
            ipc_nap(nap);
            if (nap < IPC_SLEEP_MAX_NS) nap *= 2;
        } else if (now >= spin_end) {
            sched_yield();
        }
        now = chorus__now_ns();
    }
}

static chorus_status_t ipc_copy(chorus_ipc_arena_t *a, const ipc_job_t *j, void *dst,
                                const void *src, size_t bytes)
{
    chorus_status_t status;

    if (bytes == 0) return CHORUS_SUCCESS;
    status = a->gpu->memcpy_async(dst, src, bytes, a->stream);
    return status != CHORUS_SUCCESS ? ipc_gpu_fail(a, j, status, "memcpy") : CHORUS_SUCCESS;
}

/* nblocks blocks of bytes each, src_pitch apart, packed into dst. */
static chorus_status_t ipc_copy_blocks(chorus_ipc_arena_t *a, const ipc_job_t *j, void *dst,
                                       const void *src, size_t src_pitch, size_t bytes,
                                       size_t nblocks)
{
    chorus_status_t status;

    status = a->gpu->memcpy2d_async(dst, bytes, src, src_pitch, bytes, nblocks, a->stream);
    return status != CHORUS_SUCCESS ? ipc_gpu_fail(a, j, status, "memcpy2d") : CHORUS_SUCCESS;
}

/* dst = srcs[0] op ... op srcs[n - 1] over count elements, left to right, in batches of
 * IPC_MAX_SRC sources (each later batch starts from dst, which the kernel may alias). */
static chorus_status_t ipc_reduce(chorus_ipc_arena_t *a, const ipc_job_t *j, void *dst,
                                  const void *const *srcs, int n, size_t count)
{
    const void *batch[IPC_MAX_SRC];
    chorus_status_t status;
    int k = n < IPC_MAX_SRC ? n : IPC_MAX_SRC;

    if (count == 0) return CHORUS_SUCCESS;
    status = a->gpu->reduce_async(dst, srcs, k, count, j->dtype, j->red_op, a->stream);
    while (status == CHORUS_SUCCESS && k < n) {
        int m = n - k < IPC_MAX_SRC - 1 ? n - k : IPC_MAX_SRC - 1;

        batch[0] = dst;
        memcpy(batch + 1, srcs + k, (size_t)m * sizeof *batch);
        status = a->gpu->reduce_async(dst, batch, m + 1, count, j->dtype, j->red_op, a->stream);
        k += m;
    }
    return status != CHORUS_SUCCESS ? ipc_gpu_fail(a, j, status, "reduce") : CHORUS_SUCCESS;
}

/* The end of AVG: buf[i] /= n on the stream. */
static chorus_status_t ipc_divide(chorus_ipc_arena_t *a, const ipc_job_t *j, void *buf,
                                  size_t count)
{
    chorus_status_t status;

    if (j->op != CHORUS_AVG || count == 0) return CHORUS_SUCCESS;
    status = a->gpu->divide_async(buf, count, j->dtype, (uint64_t)a->n, a->stream);
    return status != CHORUS_SUCCESS ? ipc_gpu_fail(a, j, status, "divide") : CHORUS_SUCCESS;
}

/* Copy-in already enqueued: wait for the stream, then the barrier of the chunk. */
static chorus_status_t ipc_arrive(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    chorus_status_t status = ipc_sync(a, j);
    return status != CHORUS_SUCCESS ? status : ipc_step(a, j);
}

/* ---- Allreduce ---- */

/* Rank r's slice of a chunk of ce elements, on IPC_ALIGN boundaries: [*off_p, + *len_p). */
static void ipc_slice(const chorus_ipc_arena_t *a, const ipc_job_t *j, size_t ce, int r,
                      size_t *off_p, size_t *len_p)
{
    size_t unit = IPC_ALIGN / j->esize, units = (ce + unit - 1) / unit;
    size_t b = ipc_min(units * (size_t)r / (size_t)a->n * unit, ce);
    size_t e = ipc_min(units * (size_t)(r + 1) / (size_t)a->n * unit, ce);

    *off_p = b;
    *len_p = e - b;
}

/* Small chunks: every rank reduces the whole chunk from every slot, in rank order. */
static chorus_status_t ipc_allreduce_flat(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    chorus_status_t status;

    status = ipc_copy(a, j, ipc_half(a, a->me, a->g), j->send, j->count * j->esize);
    if (status == CHORUS_SUCCESS) status = ipc_arrive(a, j);
    if (status != CHORUS_SUCCESS) return status;
    for (int r = 0; r < a->n; r++) a->srcs[r] = ipc_half(a, r, a->g);
    status = ipc_reduce(a, j, j->recv, a->srcs, a->n, j->count);
    if (status == CHORUS_SUCCESS) status = ipc_divide(a, j, j->recv, j->count);
    if (status == CHORUS_SUCCESS) status = ipc_sync(a, j);
    a->g++;
    return status;
}

/* Enqueues the copy-out of chunk g (every rank's reduced slice into recvbuf). */
static chorus_status_t ipc_allreduce_out(chorus_ipc_arena_t *a, const ipc_job_t *j,
                                         uint64_t g, size_t co, size_t ce)
{
    chorus_status_t status = CHORUS_SUCCESS;
    size_t off, len;

    for (int r = 0; r < a->n && status == CHORUS_SUCCESS; r++) {
        ipc_slice(a, j, ce, r, &off, &len);
        status = ipc_copy(a, j, j->recv + (co + off) * j->esize, ipc_half(a, r, g) + a->ar_in,
                          len * j->esize);
    }
    return status;
}

/* Per chunk: copy in (with the previous chunk's copy-out), step, reduce my slice into my
 * result area, step; the last chunk's copy-out then AVG's division, and a final wait. */
static chorus_status_t ipc_allreduce(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    size_t chunk = a->ar_in / j->esize, co, ce, off, len;
    chorus_status_t status = CHORUS_SUCCESS;

    if (j->count * j->esize <= ipc_min(IPC_FLAT_MAX, a->half)) return ipc_allreduce_flat(a, j);
    for (co = 0; co < j->count; co += ce, a->g++) {
        ce = ipc_min(chunk, j->count - co);
        if (co > 0) status = ipc_allreduce_out(a, j, a->g - 1, co - chunk, chunk);
        if (status == CHORUS_SUCCESS)
            status = ipc_copy(a, j, ipc_half(a, a->me, a->g), j->send + co * j->esize,
                              ce * j->esize);
        if (status == CHORUS_SUCCESS) status = ipc_arrive(a, j);
        if (status != CHORUS_SUCCESS) return status;
        ipc_slice(a, j, ce, a->me, &off, &len);
        for (int r = 0; r < a->n; r++) a->srcs[r] = ipc_half(a, r, a->g) + off * j->esize;
        status = ipc_reduce(a, j, ipc_half(a, a->me, a->g) + a->ar_in, a->srcs, a->n, len);
        if (status == CHORUS_SUCCESS) status = ipc_arrive(a, j);
        if (status != CHORUS_SUCCESS) return status;
    }
    co = (j->count - 1) / chunk * chunk;
    status = ipc_allreduce_out(a, j, a->g - 1, co, j->count - co);
    if (status == CHORUS_SUCCESS) status = ipc_divide(a, j, j->recv, j->count);
    return status == CHORUS_SUCCESS ? ipc_sync(a, j) : status;
}

/* ---- The one-step collectives: copy in, step, read the peers' halves ---- */

/* Elements per chunk when a half holds `blocks` blocks of one chunk each. */
static size_t ipc_chunk_elems(const chorus_ipc_arena_t *a, const ipc_job_t *j, int blocks)
{
    return a->half / ((size_t)blocks * j->esize);
}

/* recvbuf[r * count + co ..] = rank r's chunk, for every r. */
static chorus_status_t ipc_allgather(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    size_t chunk = ipc_chunk_elems(a, j, 1), es = j->esize, ce;
    chorus_status_t status = CHORUS_SUCCESS;

    for (size_t co = 0; co < j->count; co += ce, a->g++) {
        ce = ipc_min(chunk, j->count - co);
        status = ipc_copy(a, j, ipc_half(a, a->me, a->g), j->send + co * es, ce * es);
        if (status == CHORUS_SUCCESS) status = ipc_arrive(a, j);
        for (int r = 0; r < a->n && status == CHORUS_SUCCESS; r++)
            status = ipc_copy(a, j, j->recv + ((size_t)r * j->count + co) * es,
                              ipc_half(a, r, a->g), ce * es);
        if (status != CHORUS_SUCCESS) return status;
    }
    return ipc_sync(a, j);
}

/* Chunk [co, co + ce) of each of the n blocks of sendbuf, packed block after block. */
static chorus_status_t ipc_copy_in_blocks(chorus_ipc_arena_t *a, const ipc_job_t *j,
                                          size_t co, size_t ce)
{
    return ipc_copy_blocks(a, j, ipc_half(a, a->me, a->g), j->send + co * j->esize,
                           j->count * j->esize, ce * j->esize, (size_t)a->n);
}

/* recvbuf[co ..] = op over r of rank r's block me, chunk by chunk. */
static chorus_status_t ipc_reduce_scatter(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    size_t chunk = ipc_chunk_elems(a, j, a->n), es = j->esize, ce;
    chorus_status_t status = CHORUS_SUCCESS;

    for (size_t co = 0; co < j->count; co += ce, a->g++) {
        ce = ipc_min(chunk, j->count - co);
        status = ipc_copy_in_blocks(a, j, co, ce);
        if (status == CHORUS_SUCCESS) status = ipc_arrive(a, j);
        if (status != CHORUS_SUCCESS) return status;
        for (int r = 0; r < a->n; r++)
            a->srcs[r] = ipc_half(a, r, a->g) + (size_t)a->me * ce * es;
        status = ipc_reduce(a, j, j->recv + co * es, a->srcs, a->n, ce);
        if (status != CHORUS_SUCCESS) return status;
    }
    status = ipc_divide(a, j, j->recv, j->count);
    return status == CHORUS_SUCCESS ? ipc_sync(a, j) : status;
}

/* recvbuf[r * count + co ..] = rank r's block me, chunk by chunk. */
static chorus_status_t ipc_alltoall(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    size_t chunk = ipc_chunk_elems(a, j, a->n), es = j->esize, ce;
    chorus_status_t status = CHORUS_SUCCESS;

    for (size_t co = 0; co < j->count; co += ce, a->g++) {
        ce = ipc_min(chunk, j->count - co);
        status = ipc_copy_in_blocks(a, j, co, ce);
        if (status == CHORUS_SUCCESS) status = ipc_arrive(a, j);
        for (int r = 0; r < a->n && status == CHORUS_SUCCESS; r++)
            status = ipc_copy(a, j, j->recv + ((size_t)r * j->count + co) * es,
                              ipc_half(a, r, a->g) + (size_t)a->me * ce * es, ce * es);
        if (status != CHORUS_SUCCESS) return status;
    }
    return ipc_sync(a, j);
}

/* The root copies in; every other rank copies the root's half out. */
static chorus_status_t ipc_broadcast(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    size_t chunk = ipc_chunk_elems(a, j, 1), es = j->esize, ce;
    chorus_status_t status = CHORUS_SUCCESS;
    int root = j->root == a->me;

    for (size_t co = 0; co < j->count; co += ce, a->g++) {
        ce = ipc_min(chunk, j->count - co);
        if (root) status = ipc_copy(a, j, ipc_half(a, a->me, a->g), j->send + co * es, ce * es);
        if (status == CHORUS_SUCCESS) status = ipc_arrive(a, j);
        if (status == CHORUS_SUCCESS && !root)
            status = ipc_copy(a, j, j->recv + co * es, ipc_half(a, j->root, a->g), ce * es);
        if (status != CHORUS_SUCCESS) return status;
    }
    /* The root's own result straight from sendbuf (none in place). */
    if (root && j->recv != j->send) status = ipc_copy(a, j, j->recv, j->send, j->count * es);
    return status == CHORUS_SUCCESS ? ipc_sync(a, j) : status;
}

/* Everyone copies in; the root reduces every slot into recvbuf. */
static chorus_status_t ipc_reduce_root(chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    size_t chunk = ipc_chunk_elems(a, j, 1), es = j->esize, ce;
    chorus_status_t status = CHORUS_SUCCESS;
    int root = j->root == a->me;

    for (size_t co = 0; co < j->count; co += ce, a->g++) {
        ce = ipc_min(chunk, j->count - co);
        status = ipc_copy(a, j, ipc_half(a, a->me, a->g), j->send + co * es, ce * es);
        if (status == CHORUS_SUCCESS) status = ipc_arrive(a, j);
        if (status != CHORUS_SUCCESS) return status;
        if (!root) continue;
        for (int r = 0; r < a->n; r++) a->srcs[r] = ipc_half(a, r, a->g);
        status = ipc_reduce(a, j, j->recv + co * es, a->srcs, a->n, ce);
        if (status != CHORUS_SUCCESS) return status;
    }
    if (root) status = ipc_divide(a, j, j->recv, j->count);
    return status == CHORUS_SUCCESS ? ipc_sync(a, j) : status;
}

/* ---- Registered device windows (chorus_mem_alloc_device, lib/gpu/dev_win.c) ---- */

/* One-shot allreduce from the peers' windows up to this many bytes: every rank reads all n
 * vectors, which beyond it costs more than the slot path's reduce of a 1/n slice. */
#define IPC_WIN_ONESHOT_MAX ((size_t)1 << 20)
/* An offer: the window number + 1 in the top 24 bits, the offset below. */
#define IPC_OFFER(id, off) ((((uint64_t)(id) + 1) << 40) | (uint64_t)(off))
#define IPC_OFFER_OFF_MAX (((uint64_t)1 << 40) - 1)

/* Whether the call may read its peers' windows: from the signature alone, so every rank
 * takes the same steps (in place, a rank offers nothing where its own writes would land in
 * what its peers read). */
static int ipc_win_applies(const ipc_job_t *j)
{
    switch (j->coll) {
    case CHORUS_COLL_ALLGATHER:
    case CHORUS_COLL_BROADCAST:
    case CHORUS_COLL_ALLTOALL: return 1;
    case CHORUS_COLL_ALLREDUCE: return j->count * j->esize <= IPC_WIN_ONESHOT_MAX;
    default: return 0;
    }
}

/* The bytes of this rank's send buffer that peers read. */
static size_t ipc_win_send_bytes(const chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    size_t b = j->count * j->esize;
    return j->coll == CHORUS_COLL_ALLTOALL ? b * (size_t)a->n : b;
}

static uint64_t ipc_win_offer(const chorus_ipc_arena_t *a, const ipc_job_t *j,
                              const chorus_dev_wins_t *wins)
{
    uint32_t id;
    uint64_t off;
    int in_place = j->send == j->recv;

    if (j->coll == CHORUS_COLL_BROADCAST && j->root != a->me) return 0;
    if (in_place && (j->coll == CHORUS_COLL_ALLTOALL || j->coll == CHORUS_COLL_ALLREDUCE))
        return 0;
    if (!chorus__dev_win_find(wins, j->send, ipc_win_send_bytes(a, j), &id, &off) ||
        off > IPC_OFFER_OFF_MAX)
        return 0;
    return IPC_OFFER(id, off);
}

/* Where local rank r's offer v of bytes is mapped here, or NULL. */
static const uint8_t *ipc_win_src(const chorus_dev_wins_t *wins, int r, uint64_t v, size_t bytes)
{
    if (v == 0) return NULL;
    return chorus__dev_win_at(wins, (uint32_t)((v >> 40) - 1), r, v & IPC_OFFER_OFF_MAX, bytes);
}

/* The copies (or the one-shot reduce) of a call whose peers all offered their buffers. */
static chorus_status_t ipc_win_move(chorus_ipc_arena_t *a, const ipc_job_t *j, uint64_t *read_p)
{
    size_t b = j->count * j->esize;
    chorus_status_t status = CHORUS_SUCCESS;

    switch (j->coll) {
    case CHORUS_COLL_ALLGATHER:
    case CHORUS_COLL_ALLTOALL:
        for (int r = 0; r < a->n && status == CHORUS_SUCCESS; r++) {
            const uint8_t *src = (const uint8_t *)a->srcs[r];
            if (j->coll == CHORUS_COLL_ALLTOALL) src += (size_t)a->me * b;
            if (j->coll == CHORUS_COLL_ALLGATHER && j->send == j->recv + (size_t)r * b) continue;
            status = ipc_copy(a, j, j->recv + (size_t)r * b, src, b);
            if (r != a->me) *read_p += b;
        }
        return status;
    case CHORUS_COLL_BROADCAST:
        if (j->root != a->me) {
            *read_p += b;
            return ipc_copy(a, j, j->recv, a->srcs[j->root], b);
        }
        return j->recv != j->send ? ipc_copy(a, j, j->recv, j->send, b) : CHORUS_SUCCESS;
    case CHORUS_COLL_ALLREDUCE:
        *read_p += (uint64_t)(a->n - 1) * b;
        status = ipc_reduce(a, j, j->recv, a->srcs, a->n, j->count);
        return status == CHORUS_SUCCESS ? ipc_divide(a, j, j->recv, j->count) : status;
    default: return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: ipc arena: %s: no window path",
                                  a->rank, j->what);
    }
}

/* The call straight from the peers' windows when every rank it reads offered its send
 * buffer: a first step publishes the offers; then each rank copies or reduces from the
 * peers' windows into its receive buffer, and a last step, once its stream has finished
 * reading, lets every owner's caller reuse its buffer. Returns 1 with *status_p when it ran the call (or
 * failed), 0 when the slot path must run it: every rank reaches the same answer from the
 * same offers. */
static int ipc_win(chorus_ipc_arena_t *a, const ipc_job_t *j, chorus_dev_wins_t *wins,
                   chorus_status_t *status_p)
{
    size_t peer_bytes = ipc_win_send_bytes(a, j);
    uint64_t offer, read = 0;
    chorus_status_t status;
    int all = 1;

    if (chorus__dev_win_count(wins) == 0 || !ipc_win_applies(j)) return 0;
    offer = ipc_win_offer(a, j, wins);
    /* The send buffer is complete: the proxy waited for the caller's stream before the call
     * (gpu_coll.c), and nothing of this call has written it. */
    status = chorus__arena_step_offer(a->host, j->coll, j->count, j->dtype, j->op, j->opno,
                                      offer, a->offers, j->what);
    if (status != CHORUS_SUCCESS) {
        *status_p = status;
        return 1;
    }
    for (int r = 0; r < a->n; r++) {
        if (j->coll == CHORUS_COLL_BROADCAST && r != j->root) continue;
        if (a->offers[r] == 0) all = 0;
    }
    if (!all) return 0;
    for (int r = 0; r < a->n; r++) {
        a->srcs[r] = NULL;
        if (j->coll == CHORUS_COLL_BROADCAST && r != j->root) continue;
        a->srcs[r] = r == a->me ? j->send : ipc_win_src(wins, r, a->offers[r], peer_bytes);
        if (a->srcs[r] == NULL) {
            *status_p = chorus__arena_fail(a->host, chorus__error(CHORUS_ERR_REMOTE, "rank %d: "
                                           "ipc arena: %s: rank %d names a device window this "
                                           "rank does not have", a->rank, j->what, r));
            return 1;
        }
    }
    status = ipc_win_move(a, j, &read);
    if (status == CHORUS_SUCCESS) status = ipc_sync(a, j);
    if (status == CHORUS_SUCCESS)
        status = chorus__arena_step(a->host, j->coll, j->count, j->dtype, j->op, j->opno, j->what);
    if (status == CHORUS_SUCCESS) chorus__dev_win_note(wins, read);
    *status_p = status;
    return 1;
}

/* ---- Entry points ---- */

static chorus_status_t ipc_check_call(const chorus_ipc_arena_t *a, const ipc_job_t *j)
{
    int reduces = j->coll == CHORUS_COLL_ALLREDUCE || j->coll == CHORUS_COLL_REDUCE_SCATTER ||
                  j->coll == CHORUS_COLL_REDUCE;
    int rooted = j->coll == CHORUS_COLL_BROADCAST || j->coll == CHORUS_COLL_REDUCE;
    int root = rooted && j->root == a->me;

    if (j->esize == 0 || IPC_ALIGN % j->esize != 0 || j->count == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: ipc arena: %s: bad count "
                             "%zu or dtype %d", a->rank, j->what, j->count, (int)j->dtype);
    if (reduces && ((unsigned)j->op >= CHORUS_NUM_OPS))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: ipc arena: %s: bad op %d",
                             a->rank, j->what, (int)j->op);
    if (rooted && (j->root < 0 || j->root >= a->n))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: ipc arena: %s: root %d out "
                             "of range", a->rank, j->what, j->root);
    if ((j->send == NULL && (j->coll != CHORUS_COLL_BROADCAST || root)) ||
        (j->recv == NULL && (j->coll != CHORUS_COLL_REDUCE || root)))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: ipc arena: %s: NULL buffer",
                             a->rank, j->what);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__ipc_arena_run(chorus_ipc_arena_t *arena, chorus_coll_t coll,
                                      const void *sendbuf, void *recvbuf, size_t count,
                                      chorus_dtype_t dtype, chorus_op_t op, int root,
                                      uint64_t opno, chorus_dev_wins_t *wins, const char *what)
{
    int reduces = coll == CHORUS_COLL_ALLREDUCE || coll == CHORUS_COLL_REDUCE_SCATTER ||
                  coll == CHORUS_COLL_REDUCE;
    ipc_job_t j = {coll, sendbuf, recvbuf, count, dtype, op, op == CHORUS_AVG ? CHORUS_SUM : op,
                   root, chorus_dtype_size(dtype), opno, what};
    chorus_status_t status;

    /* The op of a collective that does not reduce is whatever the caller had at hand: keep
     * it out of the signature. */
    if (!reduces) j.op = j.red_op = CHORUS_SUM;

    /* A rank that cannot take part must still release the peers waiting at its barrier. */
    status = ipc_check_call(arena, &j);
    if (status != CHORUS_SUCCESS) return chorus__arena_fail(arena->host, status);
    chorus__arena_wait_settings(arena->host, &arena->timeout_s, &arena->abort_flag, &arena->wait);
    if (ipc_win(arena, &j, wins, &status)) return status;
    switch (coll) {
    case CHORUS_COLL_ALLREDUCE: return ipc_allreduce(arena, &j);
    case CHORUS_COLL_ALLGATHER: return ipc_allgather(arena, &j);
    case CHORUS_COLL_REDUCE_SCATTER: return ipc_reduce_scatter(arena, &j);
    case CHORUS_COLL_BROADCAST: return ipc_broadcast(arena, &j);
    case CHORUS_COLL_REDUCE: return ipc_reduce_root(arena, &j);
    case CHORUS_COLL_ALLTOALL: return ipc_alltoall(arena, &j);
    default:
        return chorus__arena_fail(arena->host, chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: "
                                  "ipc arena: %s: collective not supported", arena->rank, what));
    }
}

/* ---- Creation ---- */

/* What each rank tells the others, twice: its handle, then whether it opened every peer's. */
typedef struct {
    uint8_t handle[CHORUS_GPU_IPC_HANDLE_BYTES];
    int32_t status;
    int32_t rank;
} ipc_block_t;

/* The halves: at least IPC_MIN_HALF, and room for a chunk of one IPC_ALIGN unit per rank. */
static void ipc_sizes(chorus_ipc_arena_t *a, size_t slot_bytes)
{
    size_t half = slot_bytes / 2 / IPC_ALIGN * IPC_ALIGN;
    size_t least = (size_t)a->n * IPC_ALIGN > IPC_MIN_HALF ? (size_t)a->n * IPC_ALIGN
                                                          : IPC_MIN_HALF;

    a->half = half > least ? half : least;
    /* The allreduce result area holds the largest slice: at most ar_in / 2 + IPC_ALIGN
     * bytes for 2 or more ranks, so ar_in takes two thirds of what is left of that unit.
     * One rank's slice is the whole chunk: then input and result take half each. */
    if (a->n == 1)
        a->ar_in = a->half / 2 / IPC_ALIGN * IPC_ALIGN;
    else
        a->ar_in = (a->half - IPC_ALIGN) * 2 / 3 / IPC_ALIGN * IPC_ALIGN;
}

/* This rank's part: slot, handle, event, arrays. */
static chorus_status_t ipc_setup_local(chorus_ipc_arena_t *a, const chorus_ipc_arena_params_t *p,
                                       ipc_block_t *mine)
{
    chorus_status_t status;

    a->peer = calloc((size_t)a->n, sizeof *a->peer);
    a->srcs = calloc((size_t)a->n, sizeof *a->srcs);
    a->offers = calloc((size_t)a->n, sizeof *a->offers);
    if (a->peer == NULL || a->srcs == NULL || a->offers == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ipc arena: no memory", a->rank);
    status = a->gpu->set_device(p->device);
    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "rank %d: ipc arena: set_device(%d)", a->rank,
                                 p->device);
    status = a->gpu->malloc_device((void **)&a->slot, 2 * a->half);
    if (status != CHORUS_SUCCESS) {
        a->slot = NULL;
        return chorus__gpu_error(status, "rank %d: ipc arena: malloc_device(%zu)", a->rank,
                                 2 * a->half);
    }
    a->peer[a->me] = a->slot;
    status = a->gpu->event_create(&a->event);
    if (status != CHORUS_SUCCESS) {
        a->event = NULL;
        return chorus__gpu_error(status, "rank %d: ipc arena: event_create", a->rank);
    }
    status = a->gpu->ipc_get_handle(a->slot, mine->handle);
    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "rank %d: ipc arena: ipc_get_handle", a->rank);
    return CHORUS_SUCCESS;
}

/* Opens every peer's handle (blocks holds every rank's). */
static chorus_status_t ipc_open_peers(chorus_ipc_arena_t *a, const ipc_block_t *blocks)
{
    chorus_status_t status;

    for (int r = 0; r < a->n; r++) {
        void *p = NULL;

        if (r == a->me) continue;
        status = a->gpu->ipc_open(blocks[r].handle, &p);
        if (status != CHORUS_SUCCESS)
            return chorus__gpu_error(status, "rank %d: ipc arena: cannot open the slot of rank "
                                     "%d (ipc_open)", a->rank, blocks[r].rank);
        a->peer[r] = p;
    }
    return CHORUS_SUCCESS;
}

/* Every rank's outcome: CHORUS_SUCCESS when all succeeded, else an error naming the first
 * rank that failed (this rank's own message when it is this one). */
static chorus_status_t ipc_agree(chorus_ipc_arena_t *a, struct chorus_bootstrap *bs,
                                 ipc_block_t *blocks, chorus_status_t mine, const char *stage)
{
    chorus_status_t status;

    blocks[a->me].status = (int32_t)mine;
    blocks[a->me].rank = a->rank;
    status = chorus__bootstrap_allgather(bs, blocks, sizeof *blocks);
    if (status != CHORUS_SUCCESS) return status;
    if (mine != CHORUS_SUCCESS) return mine;
    for (int r = 0; r < a->n; r++) {
        if (blocks[r].status != CHORUS_SUCCESS)
            return chorus__error(CHORUS_ERR_REMOTE, "rank %d: ipc arena: rank %d failed to %s "
                                 "(%s)", a->rank, blocks[r].rank, stage,
                                 chorus_status_string((chorus_status_t)blocks[r].status));
    }
    return CHORUS_SUCCESS;
}

static void ipc_release(chorus_ipc_arena_t *arena, struct chorus_bootstrap *bs);

chorus_status_t chorus__ipc_arena_create(const chorus_ipc_arena_params_t *params,
                                         chorus_ipc_arena_t **arena_p)
{
    chorus_ipc_arena_t *a;
    ipc_block_t *blocks;
    chorus_status_t status;

    if (params == NULL || params->gpu == NULL || params->host_arena == NULL ||
        params->bs == NULL || params->nlocal < 1 || params->local_index < 0 ||
        params->local_index >= params->nlocal)
        return chorus__error(CHORUS_ERR_INTERNAL, "ipc arena: bad parameters");
    a = calloc(1, sizeof *a);
    blocks = calloc((size_t)params->nlocal, sizeof *blocks);
    if (a == NULL || blocks == NULL) {
        free(a);
        free(blocks);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ipc arena: no memory",
                             params->rank);
    }
    a->gpu = params->gpu;
    a->host = params->host_arena;
    a->stream = params->stream;
    a->rank = params->rank;
    a->n = params->nlocal;
    a->me = params->local_index;
    a->device = params->device;
    ipc_sizes(a, params->slot_bytes);
    /* Two rounds, so every rank reaches the same verdict and all fall back together. */
    status = ipc_agree(a, params->bs, blocks, ipc_setup_local(a, params, &blocks[a->me]),
                       "allocate and export its slot");
    if (status == CHORUS_SUCCESS)
        status = ipc_agree(a, params->bs, blocks, ipc_open_peers(a, blocks),
                           "open the peers' slots");
    free(blocks);
    if (status != CHORUS_SUCCESS) {
        /* Every rank got the same verdict and is here: meet on the bootstrap. */
        ipc_release(a, params->bs);
        return status;
    }
    CHORUS_INFO("gpu", "rank %d: ipc arena: %d ranks, slots of 2 x %zu bytes on device %d",
                a->rank, a->n, a->half, a->device);
    *arena_p = a;
    return CHORUS_SUCCESS;
}

/* Seconds destroy waits for the other local ranks to close this rank's slot. */
#define IPC_RELEASE_WAIT_S 10.0

/* Ends the arena. Freeing an exported allocation before every importer has closed it is
 * undefined (cudaIpcOpenMemHandle), so every rank closes the peers' slots, then the ranks
 * meet (sync: the bootstrap during a failed create, the host arena at destroy), and only
 * then does each free its own. A rank that cannot meet the others (a peer died, the comm
 * failed or was aborted, a peer never destroys) leaves its slot allocated, with a warning:
 * a leak until the process ends instead of memory freed under a peer. */
static void ipc_release(chorus_ipc_arena_t *arena, struct chorus_bootstrap *bs)
{
    chorus_status_t met;

    /* An operation that failed half-way (abort, timeout, a peer's failure) returns with its
     * copies and kernels still queued on the stream, reading and writing the slots: they
     * must end before the slots are closed and freed. They wait on nothing outside the
     * device, so this returns; their errors are the failed operation's. */
    if (arena->stream != NULL && arena->event != NULL)
        (void)arena->gpu->stream_synchronize(arena->stream);
    for (int r = 0; arena->peer != NULL && r < arena->n; r++) {
        if (r != arena->me && arena->peer[r] != NULL) arena->gpu->ipc_close(arena->peer[r]);
    }
    if (arena->event != NULL) arena->gpu->event_destroy(arena->event);
    if (arena->slot != NULL) {
        if (bs != NULL) {
            met = chorus__bootstrap_barrier(bs);
        } else {
            double t;
            const atomic_int *abort_flag;
            chorus_wait_policy_t wait;
            chorus__arena_wait_settings(arena->host, &t, &abort_flag, &wait);
            chorus__arena_set_timeout(arena->host, t > 0 && t < IPC_RELEASE_WAIT_S
                                                       ? t : IPC_RELEASE_WAIT_S);
            met = chorus__arena_step(arena->host, CHORUS_COLL_BARRIER, 0, CHORUS_UINT8,
                                     CHORUS_SUM, UINT64_MAX, "ipc arena: release");
        }
        if (met == CHORUS_SUCCESS) {
            arena->gpu->free_device(arena->slot);
        } else {
            CHORUS_WARN("gpu", "rank %d: ipc arena: the other ranks of this host did not all "
                        "close this rank's slot (%s); its %zu bytes of device memory stay "
                        "allocated until the process ends", arena->rank, chorus_last_error(),
                        2 * arena->half);
        }
    }
    free(arena->peer);
    free(arena->srcs);
    free(arena->offers);
    free(arena);
}

void chorus__ipc_arena_destroy(chorus_ipc_arena_t *arena)
{
    if (arena != NULL) ipc_release(arena, NULL);
}
