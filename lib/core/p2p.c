/*
 * Point to point. A send or receive becomes a SENDRECV schedule run by the same engine as
 * the collectives. Outside a group it is one step, run at once. Inside
 * chorus_group_start/end the operations are recorded in call order, and the outermost
 * chorus_group_end turns them all into one schedule: the engine posts every send and
 * receive together, so exchanges cannot deadlock.
 *
 * Each operation has its own buffer and datatype, while a schedule has symbolic buffers
 * and one element size. So the schedule counts bytes (UINT8) from the lowest address the
 * group touches: SEND and RECV both start there, and each step's offset is its buffer's
 * distance from it. A send to self and a receive from self are paired in order and become
 * a COPY.
 *
 * Device memory: a group is all host or all device buffers (one device, one stream). A
 * device group is queued at chorus_group_end as one op of the comm's proxy (gpu_coll.c),
 * which copies every send to one pinned buffer, runs the same host group on it and
 * copies the receives back; a device send or receive outside a group is such an op of one.
 * Every send is one message of its size on every path, so any send meets any receive of
 * the same size, host or device, in a group or not.
 */
#include "core/comm.h"
#include "core/async.h"
#include "core/flight.h"
#include "core/gpu_coll.h"

#include "kernels.h"
#include "trace/trace.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef chorus_p2p_op_t p2p_op_t;

/* What memory a group's operations are on: all host or all device (one device, one
 * stream); the first operation with bytes decides. */
enum { P2P_MEM_NONE = 0, P2P_MEM_HOST, P2P_MEM_DEVICE };

/* This thread's open group. Groups are per thread, like the calls on a communicator. */
static _Thread_local struct {
    int depth;
    chorus_comm_t comm; /* the one communicator the group's operations belong to */
    int mem;            /* P2P_MEM_* */
    int device;         /* P2P_MEM_DEVICE: the buffers' device and the ops' stream */
    void *stream;
    p2p_op_t *ops;
    size_t nops;
    size_t cap;
    chorus_status_t error; /* first failed call inside the group: group_end reports it */
    char error_msg[256];
} p2p_group;

int chorus__p2p_in_group(void)
{
    return p2p_group.depth > 0;
}

static void p2p_group_clear(void)
{
    p2p_group.comm = NULL;
    p2p_group.mem = P2P_MEM_NONE;
    p2p_group.nops = 0;
    p2p_group.error = CHORUS_SUCCESS;
    p2p_group.error_msg[0] = '\0';
    if (p2p_group.depth == 0) {
        free(p2p_group.ops);
        p2p_group.ops = NULL;
        p2p_group.cap = 0;
    }
}

void chorus__p2p_forget(chorus_comm_t comm)
{
    if (p2p_group.comm != comm || comm == NULL) return;
    /* The recorded operations can no longer run. Dropping them quietly would let
     * chorus_group_end report success for transfers that never happened, so the group
     * fails, like a group with a bad call. */
    if (p2p_group.error == CHORUS_SUCCESS) {
        p2p_group.error = CHORUS_ERR_INVALID_ARGUMENT;
        snprintf(p2p_group.error_msg, sizeof p2p_group.error_msg,
                 "rank %d: the group's communicator was destroyed before chorus_group_end; "
                 "its %zu operation(s) were dropped",
                 comm->rank, p2p_group.nops);
    }
    p2p_group.comm = NULL;
    p2p_group.mem = P2P_MEM_NONE;
    p2p_group.nops = 0;
}

/* Adds the self-pairs of ops as COPY steps: the k-th send to self feeds the k-th receive
 * from self, and they must have the same size. */
static chorus_status_t p2p_add_self_copies(chorus_comm_t comm, chorus_sched_t *s,
                                           const p2p_op_t *ops, size_t n, uintptr_t base)
{
    size_t si = 0, ri = 0;

    for (;;) {
        while (si < n && !(ops[si].is_send && ops[si].peer == comm->rank)) si++;
        while (ri < n && !(!ops[ri].is_send && ops[ri].peer == comm->rank)) ri++;
        if (si == n && ri == n) return CHORUS_SUCCESS;
        if (si == n || ri == n)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "rank %d: group: a %s to self has no matching %s from self",
                                 comm->rank, si < n ? "send" : "recv", si < n ? "recv" : "send");
        if (ops[si].bytes != ops[ri].bytes)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "rank %d: group: a send to self of %zu bytes meets a recv from "
                                 "self of %zu bytes",
                                 comm->rank, ops[si].bytes, ops[ri].bytes);
        chorus__sched_copy(s, RECV_AT(ops[ri].addr - base), SEND_AT(ops[si].addr - base),
                           ops[si].bytes);
        si++;
        ri++;
    }
}

static uint32_t p2p_hash(uint32_t h, int dtype, uint64_t count)
{
    /* FNV-1a over the dtype byte and the count's 8 bytes. */
    h = (h ^ (uint32_t)(dtype & 0xff)) * 16777619u;
    for (int i = 0; i < 8; i++) h = (h ^ (uint32_t)((count >> (8 * i)) & 0xff)) * 16777619u;
    return h;
}

/* Arms the engine's check of the ops against the peers' (CHORUS_EXEC_SIG_P2P): for every
 * peer, what this rank sends it and receives from it, in call order. */
static chorus_status_t p2p_sign(chorus_comm_t comm, const p2p_op_t *ops, size_t n)
{
    chorus_exec_sig_t *sigs = comm->p2p_sigs;

    if (sigs == NULL) {
        sigs = calloc((size_t)comm->nranks, sizeof *sigs);
        if (sigs == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: p2p: signatures of %d ranks",
                                 comm->rank, comm->nranks);
        comm->p2p_sigs = sigs;
    }
    for (size_t i = 0; i < n; i++) {
        chorus_exec_sig_t *s = &sigs[ops[i].peer];
        memset(s, 0, sizeof *s);
        s->coll = CHORUS_EXEC_SIG_P2P;
        s->dtype = s->op = CHORUS_EXEC_SIG_NONE;
        s->opnum = comm->seq;
        s->seq = comm->exec.coll_seq;
        s->p2p_hash = (uint64_t)2166136261u << 32 | 2166136261u;
    }
    for (size_t i = 0; i < n; i++) {
        chorus_exec_sig_t *s = &sigs[ops[i].peer];
        size_t esize = chorus_dtype_size((chorus_dtype_t)ops[i].dtype);
        uint64_t count = esize ? ops[i].bytes / esize : ops[i].bytes;
        uint32_t hi = (uint32_t)(s->p2p_hash >> 32), lo = (uint32_t)s->p2p_hash;

        s->magic = CHORUS_EXEC_SIG_MAGIC;
        if (ops[i].is_send) {
            if (s->root++ == 0) {
                s->dtype = (uint8_t)ops[i].dtype;
                s->count = count;
            }
            hi = p2p_hash(hi, ops[i].dtype, count);
        } else {
            if (s->nranks++ == 0) {
                s->op = (uint8_t)ops[i].dtype;
                s->chunk_count = count;
            }
            lo = p2p_hash(lo, ops[i].dtype, count);
        }
        s->p2p_hash = (uint64_t)hi << 32 | lo;
    }
    chorus__exec_sign_p2p(&comm->exec, sigs);
    return CHORUS_SUCCESS;
}

/* Runs ops (call order) as one schedule. */
static chorus_status_t p2p_run(chorus_comm_t comm, const p2p_op_t *ops, size_t n,
                               const char *name, const char *what_in)
{
    chorus_sched_t s;
    chorus_status_t status;
    uintptr_t base = UINTPTR_MAX;
    void *bufs[CHORUS_NUM_BUFS];
    char what[64];
    size_t i;

    for (i = 0; i < n; i++) {
        if (ops[i].addr < base) base = ops[i].addr;
    }
    if (n == 0) return CHORUS_SUCCESS;
    chorus__sched_init(&s, comm->rank, comm->nranks);
    for (i = 0; i < n; i++) {
        if (ops[i].peer == comm->rank) continue;
        if (ops[i].is_send)
            chorus__sched_send(&s, ops[i].peer, SEND_AT(ops[i].addr - base), ops[i].bytes);
        else
            chorus__sched_recv(&s, ops[i].peer, RECV_AT(ops[i].addr - base), ops[i].bytes);
    }
    CHORUS_CHECK_GOTO(p2p_add_self_copies(comm, &s, ops, n, base), err_sched);
    status = chorus__sched_finalize(&s);
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "rank %d: %s", comm->rank, name);
        goto err_sched;
    }
    bufs[CHORUS_BUF_SEND] = (void *)base;
    bufs[CHORUS_BUF_RECV] = (void *)base;
    bufs[CHORUS_BUF_SCRATCH] = NULL;
    if (what_in != NULL) snprintf(what, sizeof what, "%s", what_in);
    else chorus__comm_what(comm, name, what, sizeof what);
    {
        /* Point to point in the flight record: the bytes, and the peer of the first op. */
        uint64_t total = 0;
        for (size_t k = 0; k < n; k++) total += ops[k].bytes;
        chorus__fr_note(comm->flight, total, CHORUS_UINT8, (chorus_op_t)-1,
                        n > 0 ? ops[0].peer : -1, NULL);
    }
    if (comm->check_calls) CHORUS_CHECK_GOTO(p2p_sign(comm, ops, n), err_sched);
    {
        uint64_t t0 = comm->trace != NULL ? chorus__now_ns() : 0;
        status = chorus__comm_exec(comm, &s, bufs, CHORUS_UINT8, CHORUS_SUM, what);
        if (comm->trace != NULL) {
            uint64_t bytes = 0;
            for (size_t k = 0; k < n; k++) bytes += ops[k].bytes;
            chorus__trace_call(comm->trace, what, "p2p", bytes, t0, chorus__now_ns());
        }
    }
    chorus__sched_fini(&s);
    return status;

err_sched:
    chorus__sched_fini(&s);
    return status;
}

/* Records a failed call of an open group: chorus_group_end reports the first. */
static chorus_status_t p2p_group_fail(chorus_status_t status)
{
    if (p2p_group.depth > 0 && p2p_group.error == CHORUS_SUCCESS) {
        p2p_group.error = status;
        snprintf(p2p_group.error_msg, sizeof p2p_group.error_msg, "%s", chorus_last_error());
    }
    return status;
}

/* A group is all host memory or all device memory of one device, on one stream: its
 * device operations become one op of one stream at chorus_group_end. */
static chorus_status_t p2p_group_check_mem(chorus_comm_t comm, const char *name, int peer,
                                           int device, void *stream)
{
    int mem = device >= 0 ? P2P_MEM_DEVICE : P2P_MEM_HOST;

    if (p2p_group.mem == P2P_MEM_NONE) {
        p2p_group.mem = mem;
        p2p_group.device = device;
        p2p_group.stream = stream;
        return CHORUS_SUCCESS;
    }
    if (mem != p2p_group.mem)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: peer %d: buf is %s memory but the group's earlier "
                             "operations are on %s memory: a group must be all host or all "
                             "device buffers",
                             comm->rank, name, peer, mem == P2P_MEM_DEVICE ? "device" : "host",
                             mem == P2P_MEM_DEVICE ? "host" : "device");
    if (mem == P2P_MEM_DEVICE && device != p2p_group.device)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: peer %d: buf is on device %d but the group's earlier "
                             "operations on device %d",
                             comm->rank, name, peer, device, p2p_group.device);
    if (mem == P2P_MEM_DEVICE && stream != p2p_group.stream)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: peer %d: stream %p differs from stream %p of the "
                             "group's earlier operations: the device operations of a group "
                             "must use one stream",
                             comm->rank, name, peer, stream, p2p_group.stream);
    return CHORUS_SUCCESS;
}

/* Appends op to the open group. */
static chorus_status_t p2p_group_add(chorus_comm_t comm, const char *name, const p2p_op_t *op)
{
    if (p2p_group.nops == p2p_group.cap) {
        size_t cap = p2p_group.cap ? 2 * p2p_group.cap : 16;
        p2p_op_t *ops = realloc(p2p_group.ops, cap * sizeof *ops);
        if (ops == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s: no memory", comm->rank,
                                 name);
        p2p_group.ops = ops;
        p2p_group.cap = cap;
    }
    p2p_group.ops[p2p_group.nops++] = *op;
    p2p_group.comm = comm;
    return CHORUS_SUCCESS;
}

/* The common path of chorus_send and chorus_recv. */
static chorus_status_t p2p_entry(int is_send, const void *buf, size_t count,
                                 chorus_dtype_t dtype, int peer, chorus_comm_t comm, void *stream)
{
    const char *name = is_send ? "send" : "recv";
    p2p_op_t op;
    chorus_status_t status;
    int device = -1;

    chorus__error_clear();
    if (comm != NULL) chorus__log_set_rank(comm->rank);
    status = chorus__validate_p2p(comm, name, buf, count, dtype, peer, stream, &device);
    if (status == CHORUS_SUCCESS && p2p_group.depth > 0 && p2p_group.comm != NULL &&
        p2p_group.comm != comm)
        status = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                               "rank %d: %s: a group may hold operations of one communicator",
                               comm->rank, name);
    /* Zero-byte operations communicate nothing, so they do not decide the group's memory. */
    if (status == CHORUS_SUCCESS && p2p_group.depth > 0 && count > 0)
        status = p2p_group_check_mem(comm, name, peer, device, stream);
    /* Device work is only queued: the comm's queue need not be drained for it. */
    if (status == CHORUS_SUCCESS)
        status = device >= 0 || p2p_group.depth > 0 ? chorus__comm_check_failed_async(comm, name)
                                                     : chorus__comm_check_failed(comm, name);
    if (status != CHORUS_SUCCESS) return p2p_group_fail(status);
    op.is_send = is_send;
    op.peer = peer;
    op.addr = (uintptr_t)buf;
    op.bytes = count * chorus_dtype_size(dtype);
    op.dtype = (int)dtype;
    /* Zero-byte operations are skipped on both sides, like any count-0 call. */
    if (op.bytes == 0) return CHORUS_SUCCESS;

    if (p2p_group.depth > 0) return p2p_group_fail(p2p_group_add(comm, name, &op));
    if (peer == comm->rank)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: a %s self outside a group can never complete; "
                             "put it in a group with its matching %s",
                             comm->rank, name, is_send ? "send to" : "recv from",
                             is_send ? "recv" : "send");
    if (device >= 0) return chorus__gpu_p2p_submit(comm, &op, 1, device, stream);
    return p2p_run(comm, &op, 1, name, NULL);
}

chorus_status_t chorus__p2p_run_host(chorus_comm_t comm, const chorus_p2p_op_t *ops, size_t n,
                                     const char *what)
{
    return p2p_run(comm, ops, n, "group", what);
}

chorus_status_t chorus__p2p_run_batch(chorus_comm_t comm, const chorus_p2p_op_t *ops, size_t n)
{
    const char *name = n > 1 ? "group" : ops[0].is_send ? "send" : "recv";
    return p2p_run(comm, ops, n, name, NULL);
}

/* The common path of chorus_isend and chorus_irecv: checked on the caller's thread, then
 * added to the comm's open batch (async.h). */
static chorus_status_t ip2p_entry(int is_send, const void *buf, size_t count,
                                  chorus_dtype_t dtype, int peer, chorus_comm_t comm,
                                  chorus_request_t *req_p)
{
    const char *name = is_send ? "isend" : "irecv";
    chorus_status_t status;
    p2p_op_t op;
    int device = -1;

    chorus__error_clear();
    if (req_p == NULL)
        return comm == NULL
                   ? chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: req_p is NULL", name)
                   : chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: req_p is NULL",
                                   comm->rank, name);
    *req_p = NULL;
    if (comm != NULL) chorus__log_set_rank(comm->rank);
    status = chorus__validate_p2p(comm, name, buf, count, dtype, peer, NULL, &device);
    if (status != CHORUS_SUCCESS) return status;
    if (device >= 0)
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: %s to peer %d: the buffer is device memory: use %s with "
                             "a stream, which is asynchronous already",
                             comm->rank, name, peer, is_send ? "chorus_send" : "chorus_recv");
    if (p2p_group.depth > 0)
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: %s to peer %d: nonblocking calls inside "
                             "chorus_group_start/end are not supported (consecutive ones form "
                             "a group already)",
                             comm->rank, name, peer);
    status = chorus__comm_check_failed_async(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    op.is_send = is_send;
    op.peer = peer;
    op.addr = (uintptr_t)buf;
    op.bytes = count * chorus_dtype_size(dtype);
    op.dtype = (int)dtype;
    if (op.bytes == 0) return chorus__async_done_request(comm, req_p);
    return chorus__async_p2p(comm, &op, req_p);
}

chorus_status_t chorus_isend(const void *buf, size_t count, chorus_dtype_t dtype, int peer,
                             chorus_comm_t comm, chorus_request_t *req_p)
{
    return ip2p_entry(1, buf, count, dtype, peer, comm, req_p);
}

chorus_status_t chorus_irecv(void *buf, size_t count, chorus_dtype_t dtype, int peer,
                             chorus_comm_t comm, chorus_request_t *req_p)
{
    return ip2p_entry(0, buf, count, dtype, peer, comm, req_p);
}

chorus_status_t chorus_send(const void *buf, size_t count, chorus_dtype_t dtype, int peer,
                            chorus_comm_t comm, void *stream)
{
    return p2p_entry(1, buf, count, dtype, peer, comm, stream);
}

chorus_status_t chorus_recv(void *buf, size_t count, chorus_dtype_t dtype, int peer,
                            chorus_comm_t comm, void *stream)
{
    return p2p_entry(0, buf, count, dtype, peer, comm, stream);
}

chorus_status_t chorus_group_start(void)
{
    chorus__error_clear();
    p2p_group.depth++;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_group_end(void)
{
    chorus_comm_t comm = p2p_group.comm;
    chorus_status_t status;

    chorus__error_clear();
    if (p2p_group.depth == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "group_end: no matching chorus_group_start");
    if (--p2p_group.depth > 0) return CHORUS_SUCCESS;
    /* A group with a failed call is not run at all: running the rest would leave this
     * rank's message streams out of step with its peers'. */
    if (p2p_group.error != CHORUS_SUCCESS) {
        status = chorus__error(p2p_group.error, "group_end: an operation of the group failed: %s",
                               p2p_group.error_msg);
        p2p_group_clear();
        return status;
    }
    if (comm == NULL || p2p_group.nops == 0) {
        p2p_group_clear();
        return CHORUS_SUCCESS;
    }
    chorus__log_set_rank(comm->rank);
    if (p2p_group.mem == P2P_MEM_DEVICE) {
        /* Queued on the group's stream as one op of the proxy, which stages it. */
        status = chorus__comm_check_failed_async(comm, "group_end");
        if (status == CHORUS_SUCCESS)
            status = chorus__gpu_p2p_submit(comm, p2p_group.ops, p2p_group.nops,
                                            p2p_group.device, p2p_group.stream);
    } else {
        status = chorus__comm_check_failed(comm, "group_end");
        if (status == CHORUS_SUCCESS)
            status = p2p_run(comm, p2p_group.ops, p2p_group.nops, "group", NULL);
    }
    p2p_group_clear();
    return status;
}
