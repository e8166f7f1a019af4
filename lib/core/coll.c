/*
 * The collective entry points: check the arguments, pick an algorithm, fetch its schedule
 * from the communicator's cache (building one costs more than running a small message),
 * and run it on the engine. AVG runs as SUM and divides the result once at the end.
 */
#include "core/comm.h"
#include "core/async.h"
#include "core/flight.h"
#include "core/gpu_coll.h"
#include "core/hang.h"

#include "arena/arena.h"

#include "kernels.h"
#include "trace/trace.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The cached schedule for args under algo, building it on a miss. The least recently
 * used entry makes room. */
static chorus_status_t coll_sched_get(chorus_comm_t comm, chorus_algo_t algo,
                                      const chorus_coll_args_t *args,
                                      const chorus_sched_t **sched_p)
{
    chorus_sched_entry_t *e, *victim = &comm->cache[0];
    chorus_status_t status;

    for (int i = 0; i < CHORUS_SCHED_CACHE_SIZE; i++) {
        e = &comm->cache[i];
        if (e->valid && e->coll == args->coll && e->algo == algo && e->count == args->count &&
            e->root == args->root && e->chunk_count == args->chunk_count) {
            e->last_use = ++comm->cache_clock;
            *sched_p = &e->sched;
            return CHORUS_SUCCESS;
        }
        if (victim->valid && (!e->valid || e->last_use < victim->last_use)) victim = e;
    }
    if (victim->valid) {
        chorus__sched_fini(&victim->sched);
        victim->valid = 0;
    }
    chorus__sched_init(&victim->sched, comm->rank, comm->nranks);
    status = chorus__algo_build(algo, args, &victim->sched);
    if (status != CHORUS_SUCCESS) {
        chorus__sched_fini(&victim->sched);
        return chorus__error_context(status, "rank %d: %s: building the %s schedule",
                                     comm->rank, chorus__core_coll_name(args->coll),
                                     chorus__algo_name(algo));
    }
    victim->valid = 1;
    victim->coll = args->coll;
    victim->algo = algo;
    victim->count = args->count;
    victim->root = args->root;
    victim->chunk_count = args->chunk_count;
    victim->last_use = ++comm->cache_clock;
    *sched_p = &victim->sched;
    return CHORUS_SUCCESS;
}

/* Makes *buf_p hold at least bytes. */
static chorus_status_t coll_grow(chorus_comm_t comm, void **buf_p, size_t *cap_p, size_t bytes)
{
    void *p;

    if (bytes <= *cap_p) return CHORUS_SUCCESS;
    p = realloc(*buf_p, bytes);
    if (p == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: no memory for %zu bytes of scratch",
                             comm->rank, bytes);
    *buf_p = p;
    *cap_p = bytes;
    return CHORUS_SUCCESS;
}

/* Nonzero if some step of s writes buffer b. */
static int coll_sched_writes(const chorus_sched_t *s, chorus_buf_id_t b)
{
    for (uint32_t i = 0; i < s->nsteps; i++) {
        const chorus_step_t *st = &s->steps[i];
        if (st->kind != CHORUS_STEP_SEND && st->dst.buf == b) return 1;
    }
    return 0;
}

/* Binds the symbolic buffers of sched to the call's memory. */
static chorus_status_t coll_bind(chorus_comm_t comm, const chorus_coll_call_t *call,
                                 const chorus_sched_t *sched, size_t esize,
                                 void *bufs[CHORUS_NUM_BUFS])
{
    chorus_status_t status;

    bufs[CHORUS_BUF_SEND] = (void *)call->sendbuf;
    bufs[CHORUS_BUF_RECV] = call->recvbuf;
    bufs[CHORUS_BUF_SCRATCH] = NULL;
    /* Non-roots of a broadcast may pass no (or any) sendbuf; what a schedule might read
     * there is never used, so their own recvbuf stands in. */
    if (call->coll == CHORUS_COLL_BROADCAST && comm->rank != call->root)
        bufs[CHORUS_BUF_SEND] = call->recvbuf;
    /* Non-roots of a reduce may pass no (or any) recvbuf, and must not see it written; an
     * algorithm that stages partial results in RECV there gets a private sink. */
    if (call->coll == CHORUS_COLL_REDUCE && comm->rank != call->root) {
        bufs[CHORUS_BUF_RECV] = NULL;
        if (coll_sched_writes(sched, CHORUS_BUF_RECV)) {
            status = coll_grow(comm, &comm->sink, &comm->sink_bytes, call->count * esize);
            if (status != CHORUS_SUCCESS) return status;
            bufs[CHORUS_BUF_RECV] = comm->sink;
        }
    }
    if (sched->scratch_count > 0) {
        if (sched->scratch_count > SIZE_MAX / esize)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: scratch too large", comm->rank);
        status = coll_grow(comm, &comm->scratch, &comm->scratch_bytes,
                           (size_t)sched->scratch_count * esize);
        if (status != CHORUS_SUCCESS) return status;
        bufs[CHORUS_BUF_SCRATCH] = comm->scratch;
    }
    return CHORUS_SUCCESS;
}

int chorus__coll_repro(chorus_comm_t comm, const chorus_coll_call_t *call)
{
    if (comm->repro == CHORUS_REPRO_NONE) return 0;
    if (call->coll != CHORUS_COLL_ALLREDUCE && call->coll != CHORUS_COLL_REDUCE_SCATTER &&
        call->coll != CHORUS_COLL_REDUCE)
        return 0;
    /* Integer reductions wrap or select: exact in any order. */
    switch (call->dtype) {
    case CHORUS_FLOAT16:
    case CHORUS_BFLOAT16:
    case CHORUS_FLOAT32:
    case CHORUS_FLOAT64: return comm->repro;
    default: return 0;
    }
}

uint64_t chorus__coll_exact_divisor(chorus_comm_t comm, const chorus_coll_call_t *call)
{
    if (chorus__coll_repro(comm, call) != CHORUS_REPRO_EXACT) return 0;
    if (call->op == CHORUS_AVG) return (uint64_t)comm->nranks;
    return call->op == CHORUS_SUM ? 1 : 0;
}

/* AVG's division at the end of a reduction (nothing to do for other ops, nor for an exact
 * average, whose reduction divided before rounding). */
static chorus_status_t coll_finish_avg(chorus_comm_t comm, const chorus_coll_call_t *call,
                                       const char *what)
{
    chorus_status_t status;

    if (call->op != CHORUS_AVG || chorus__coll_exact_divisor(comm, call) > 0)
        return CHORUS_SUCCESS;
    if (call->coll == CHORUS_COLL_REDUCE && comm->rank != call->root) return CHORUS_SUCCESS;
    status = chorus_kernel_divide(call->recvbuf, call->count, call->dtype,
                                  (uint64_t)comm->nranks);
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "rank %d: %s", comm->rank, what);
        return chorus__comm_record_error(comm, status);
    }
    return CHORUS_SUCCESS;
}

/* Runs a call on the shared arena (lib/arena) instead of a schedule. */
static chorus_status_t coll_run_arena(chorus_comm_t comm, const chorus_coll_call_t *call,
                                      chorus_op_t op, const char *what)
{
    chorus_arena_t *arena = comm->arena;
    chorus_status_t status;

    chorus__arena_set_exact(arena, chorus__coll_exact_divisor(comm, call));
    switch (call->coll) {
    case CHORUS_COLL_ALLREDUCE:
        status = chorus__arena_allreduce(arena, call->sendbuf, call->recvbuf, call->count,
                                         call->dtype, op, what);
        break;
    case CHORUS_COLL_REDUCE:
        status = chorus__arena_reduce(arena, call->sendbuf, call->recvbuf, call->count,
                                      call->dtype, op, call->root, what);
        break;
    case CHORUS_COLL_REDUCE_SCATTER:
        status = chorus__arena_reduce_scatter(arena, call->sendbuf, call->recvbuf, call->count,
                                              call->dtype, op, what);
        break;
    case CHORUS_COLL_ALLGATHER:
        status = chorus__arena_allgather(arena, call->sendbuf, call->recvbuf, call->count,
                                         call->dtype, what);
        break;
    case CHORUS_COLL_BROADCAST:
        status = chorus__arena_broadcast(arena, call->sendbuf, call->recvbuf, call->count,
                                         call->dtype, call->root, what);
        break;
    case CHORUS_COLL_ALLTOALL:
        status = chorus__arena_alltoall(arena, call->sendbuf, call->recvbuf, call->count,
                                        call->dtype, what);
        break;
    case CHORUS_COLL_BARRIER: status = chorus__arena_barrier(arena, what); break;
    case CHORUS_COLL_GATHER:
    case CHORUS_COLL_SCATTER:
    case CHORUS_COLL_ALLGATHERV:
    case CHORUS_COLL_REDUCE_SCATTERV:
    case CHORUS_COLL_ALLTOALLV: {
        chorus_arena_v_args_t v = {call->coll, call->sendbuf, call->recvbuf, call->count,
                                   call->sendcounts, call->sdispls, call->recvcounts,
                                   call->rdispls, call->dtype, op, call->root, 0, what};
        if (call->coll == CHORUS_COLL_ALLGATHERV || call->coll == CHORUS_COLL_REDUCE_SCATTERV)
            v.counts_hash = chorus__coll_v_hash(call->recvcounts, comm->nranks);
        status = chorus__arena_v(arena, &v);
        break;
    }
    default:
        status = chorus__error(CHORUS_ERR_INTERNAL, "rank %d: %s: the arena does not run it",
                               comm->rank, what);
        break;
    }
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "rank %d", comm->rank);
        chorus__comm_record_error(comm, status);
        chorus__comm_leave(comm, status);
        return status;
    }
    chorus__hang_end(comm);
    chorus__fr_end(comm->flight, CHORUS_SUCCESS);
    return coll_finish_avg(comm, call, what);
}

/* Arms the engine's mismatch check for the call about to run: every rank of it must
 * agree on all of this, and ranks that do not are told apart before any data is used. */
static chorus_status_t coll_sign(chorus_comm_t comm, const chorus_coll_call_t *call,
                                 chorus_algo_t algo, uint64_t chunk_count)
{
    chorus_exec_sig_t sig;

    memset(&sig, 0, sizeof sig);
    sig.coll = (uint8_t)call->coll;
    sig.dtype = (uint8_t)call->dtype;
    sig.op = (uint8_t)call->op;
    sig.algo = (uint8_t)((unsigned)algo | (call->device == CHORUS_CALL_STAGED ? CHORUS_EXEC_SIG_DEVICE : 0));
    sig.root = call->root;
    sig.nranks = comm->nranks;
    sig.count = call->count;
    sig.chunk_count = chunk_count;
    sig.seq = comm->exec.coll_seq;
    sig.opnum = comm->seq;
    /* The v-forms agree on count arrays, not on one count (coll_v.c). */
    if (chorus__coll_is_v(call->coll)) return chorus__coll_v_sign(comm, call, &sig);
    chorus__exec_sign(&comm->exec, &sig);
    return CHORUS_SUCCESS;
}

static chorus_status_t coll_run_body(chorus_comm_t comm, const chorus_coll_call_t *call,
                                       const char *what_in);

/* Runs a validated call with count > 0 (or a barrier); under CHORUS_TRACE it records the
 * call's span. */
chorus_status_t chorus__coll_run(chorus_comm_t comm, const chorus_coll_call_t *call,
                                 const char *what_in)
{
    uint64_t t0;
    chorus_status_t status;

    if (comm->trace == NULL) return coll_run_body(comm, call, what_in);
    t0 = chorus__now_ns();
    comm->trace_algo = NULL;
    comm->trace_what[0] = '\0';
    status = coll_run_body(comm, call, what_in);
    chorus__trace_call(comm->trace, comm->trace_what, comm->trace_algo,
                       (uint64_t)call->count * chorus_dtype_size(call->dtype), t0,
                       chorus__now_ns());
    return status;
}

static chorus_status_t coll_run_body(chorus_comm_t comm, const chorus_coll_call_t *call,
                                       const char *what_in)
{
    const char *name = chorus__core_coll_name(call->coll);
    size_t esize = chorus_dtype_size(call->dtype);
    const chorus_sched_t *sched = NULL;
    void *bufs[CHORUS_NUM_BUFS];
    chorus_coll_args_t args;
    chorus_algo_t algo;
    chorus_op_t op = call->op == CHORUS_AVG ? CHORUS_SUM : call->op;
    chorus_status_t status;
    char what[64];

    if (what_in != NULL) snprintf(what, sizeof what, "%s", what_in);
    else chorus__comm_what(comm, name, what, sizeof what);
    memset(&args, 0, sizeof args);
    args.coll = call->coll;
    args.rank = comm->rank;
    args.nranks = comm->nranks;
    args.count = call->count;
    args.root = call->root;
    args.host_of = comm->host_of;
    args.nhosts = comm->nhosts;
    /* The topology's order for every algorithm that uses one: the ring crosses each host
     * boundary once, trees keep a host's ranks in subtrees, hier leads with NIC-near ranks.
     * One host too: there the order groups NUMA nodes, so the ring crosses sockets twice. */
    args.ring_order = comm->ring_order;
    args.sendcounts = call->sendcounts;
    args.sdispls = call->sdispls;
    args.recvcounts = call->recvcounts;
    args.rdispls = call->rdispls;
    algo = chorus__select_algo(comm, call->coll, (uint64_t)call->count * esize);
    /* A reproducible reduction runs in the one order the arena and the direct schedule
     * share (direct.c), whatever was chosen. */
    if (chorus__coll_repro(comm, call) > 0 && algo != CHORUS_ALGO_ARENA)
        algo = CHORUS_ALGO_DIRECT;
    comm->exec.exact_divisor = chorus__coll_exact_divisor(comm, call);
    chorus__fr_note(comm->flight, call->count, call->dtype, call->op,
                    call->coll == CHORUS_COLL_BROADCAST || call->coll == CHORUS_COLL_REDUCE ||
                            call->coll == CHORUS_COLL_GATHER || call->coll == CHORUS_COLL_SCATTER
                        ? call->root
                        : -1,
                    chorus__algo_name(algo));
    if (comm->trace != NULL) {
        comm->trace_algo = chorus__algo_name(algo);
        snprintf(comm->trace_what, sizeof comm->trace_what, "%s", what);
    }
    if (comm->arena != NULL && comm->check_calls)
        chorus__arena_note_call(comm->arena, comm->exec.coll_seq, algo == CHORUS_ALGO_ARENA,
                                call->coll, call->count, call->dtype, call->op, call->root);
    if (comm->arena != NULL && call->device == CHORUS_CALL_STAGED)
        chorus__arena_next_is_device(comm->arena);
    if (algo == CHORUS_ALGO_ARENA) return coll_run_arena(comm, call, op, what);
    args.chunk_count = chorus__select_chunk_count(comm, call->coll, algo,
                                                  (uint64_t)call->count * esize, esize);

    if (chorus__coll_is_v(call->coll)) status = chorus__coll_v_sched(comm, algo, &args, &sched);
    else status = coll_sched_get(comm, algo, &args, &sched);
    if (status == CHORUS_SUCCESS) status = coll_bind(comm, call, sched, esize, bufs);
    if (status == CHORUS_SUCCESS && comm->check_calls)
        status = coll_sign(comm, call, algo, args.chunk_count);
    if (status != CHORUS_SUCCESS) return chorus__comm_record_error(comm, status);

    CHORUS_TRACE("core", "%s: %zu x %s, %s, %u steps", what, call->count,
                 chorus_dtype_name(call->dtype), chorus__algo_name(algo), sched->nsteps);
    status = chorus__comm_exec(comm, sched, bufs, call->dtype, op, what);
    if (status != CHORUS_SUCCESS) return status;
    return coll_finish_avg(comm, call, what);
}

/* What every collective entry point checks first: the arguments, and not in a group. */
static chorus_status_t coll_check(chorus_comm_t comm, chorus_coll_call_t *call)
{
    chorus_status_t status;

    chorus__error_clear();
    if (comm != NULL) chorus__log_set_rank(comm->rank);
    status = chorus__validate_coll(comm, call);
    if (status != CHORUS_SUCCESS) return status;
    if (chorus__p2p_in_group())
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: %s: collectives inside chorus_group_start/end are not "
                             "supported",
                             comm->rank, chorus__core_coll_name(call->coll));
    return CHORUS_SUCCESS;
}

int chorus__coll_is_empty(chorus_comm_t comm, const chorus_coll_call_t *call)
{
    switch (call->coll) {
    case CHORUS_COLL_BARRIER: return 0;
    /* Every rank has the same recvcounts (else the call is a mismatch). */
    case CHORUS_COLL_ALLGATHERV:
    case CHORUS_COLL_REDUCE_SCATTERV:
        for (int p = 0; p < comm->nranks; p++)
            if (call->recvcounts[p] != 0) return 0;
        return 1;
    /* This rank's counts say nothing of the other pairs' (unless it is alone). */
    case CHORUS_COLL_ALLTOALLV: return comm->nranks == 1 && call->count == 0;
    default: return call->count == 0;
    }
}

/* The common path of every blocking collective entry point. */
chorus_status_t chorus__coll_entry(chorus_comm_t comm, chorus_coll_call_t *call)
{
    const char *name = chorus__core_coll_name(call->coll);
    chorus_status_t status;

    status = coll_check(comm, call);
    if (status != CHORUS_SUCCESS) return status;
    if (call->device >= 0) return chorus__gpu_coll_submit(comm, call);
    status = chorus__comm_check_failed(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    /* Every accepted call counts, even one with nothing to move, so that a rank that
     * skipped or added one is caught at its next call by the signature's number. */
    comm->exec.coll_seq++;
    if (chorus__coll_is_empty(comm, call)) return CHORUS_SUCCESS;
    return chorus__coll_run(comm, call, NULL);
}

void chorus__coll_release(chorus_comm_t comm)
{
    for (int i = 0; i < CHORUS_SCHED_CACHE_SIZE; i++) {
        if (comm->cache[i].valid) chorus__sched_fini(&comm->cache[i].sched);
        comm->cache[i].valid = 0;
    }
    free(comm->scratch);
    comm->scratch = NULL;
    comm->scratch_bytes = 0;
    free(comm->sink);
    comm->sink = NULL;
    comm->sink_bytes = 0;
    if (comm->vsched_valid) chorus__sched_fini(&comm->vsched);
    comm->vsched_valid = 0;
    free(comm->vsigs);
    comm->vsigs = NULL;
}

chorus_status_t chorus_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                 void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0,
                               stream, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                 chorus_dtype_t dtype, chorus_comm_t comm, void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype,
                               CHORUS_SUM, 0, stream, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                      void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                               op, 0, stream, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, int root, chorus_comm_t comm, void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_BROADCAST, sendbuf, recvbuf, count, dtype,
                               CHORUS_SUM, root, stream, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_reduce(const void *sendbuf, void *recvbuf, size_t count,
                              chorus_dtype_t dtype, chorus_op_t op, int root, chorus_comm_t comm,
                              void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root,
                               stream, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_alltoall(const void *sendbuf, void *recvbuf, size_t count_per_peer,
                                chorus_dtype_t dtype, chorus_comm_t comm, void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLTOALL, sendbuf, recvbuf, count_per_peer, dtype,
                               CHORUS_SUM, 0, stream, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_barrier(chorus_comm_t comm)
{
    chorus_coll_call_t call = {CHORUS_COLL_BARRIER, NULL, NULL, 0, CHORUS_UINT8, CHORUS_SUM, 0,
                               NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

/* ---- Nonblocking (async.c runs them) ---- */

/* The common path of every nonblocking collective: checked here, on the caller's thread,
 * so that a bad argument is an error of the call and no request is made. */
chorus_status_t chorus__icoll_entry(chorus_comm_t comm, chorus_coll_call_t *call,
                                    chorus_request_t *req_p)
{
    const char *name = chorus__core_coll_name(call->coll);
    chorus_status_t status;

    if (req_p == NULL) {
        chorus__error_clear();
        if (comm == NULL)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "i%s: req_p is NULL", name);
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: i%s: req_p is NULL",
                             comm->rank, name);
    }
    *req_p = NULL;
    status = coll_check(comm, call);
    if (status != CHORUS_SUCCESS) return status;
    if (call->device >= 0)
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: i%s: the buffers are device memory: use %s with a "
                             "stream, which is asynchronous already",
                             comm->rank, name, name);
    status = chorus__comm_check_failed_async(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    return chorus__async_coll(comm, call, req_p);
}

chorus_status_t chorus_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                  chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                  chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0,
                               NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  chorus_dtype_t dtype, chorus_comm_t comm,
                                  chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype,
                               CHORUS_SUM, 0, NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                       chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                       chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                               op, 0, NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                  chorus_dtype_t dtype, int root, chorus_comm_t comm,
                                  chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_BROADCAST, sendbuf, recvbuf, count, dtype,
                               CHORUS_SUM, root, NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                               chorus_dtype_t dtype, chorus_op_t op, int root, chorus_comm_t comm,
                               chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root,
                               NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_ialltoall(const void *sendbuf, void *recvbuf, size_t count_per_peer,
                                 chorus_dtype_t dtype, chorus_comm_t comm,
                                 chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLTOALL, sendbuf, recvbuf, count_per_peer, dtype,
                               CHORUS_SUM, 0, NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_ibarrier(chorus_comm_t comm, chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_BARRIER, NULL, NULL, 0, CHORUS_UINT8, CHORUS_SUM, 0,
                               NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}
