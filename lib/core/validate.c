/*
 * Argument checks of the public entry points. Every message names the rank, the
 * operation and the bad argument ("rank 2: allreduce: unknown dtype 42"), because the
 * caller is often one of hundreds of processes and reads only its own log.
 */
#include "core/comm.h"
#include "core/gpu_coll.h"

#include "kernels.h"
#include "util/status.h"

#include <stdint.h>

#define CORE_MAX_MESSAGE_BYTES CHORUS_CORE_MAX_MESSAGE_BYTES

const char *chorus__core_coll_name(chorus_coll_t coll)
{
    static const char *const names[CHORUS_NUM_COLLS] = {
        [CHORUS_COLL_ALLREDUCE] = "allreduce",   [CHORUS_COLL_ALLGATHER] = "allgather",
        [CHORUS_COLL_REDUCE_SCATTER] = "reduce_scatter",
        [CHORUS_COLL_BROADCAST] = "broadcast",   [CHORUS_COLL_REDUCE] = "reduce",
        [CHORUS_COLL_ALLTOALL] = "alltoall",     [CHORUS_COLL_BARRIER] = "barrier",
        [CHORUS_COLL_SENDRECV] = "sendrecv",   [CHORUS_COLL_GATHER] = "gather",
        [CHORUS_COLL_SCATTER] = "scatter",     [CHORUS_COLL_ALLGATHERV] = "allgatherv",
        [CHORUS_COLL_REDUCE_SCATTERV] = "reduce_scatterv",
        [CHORUS_COLL_ALLTOALLV] = "alltoallv",
    };
    if ((int)coll < 0 || coll >= CHORUS_NUM_COLLS) return "unknown";
    return names[coll];
}

chorus_status_t chorus__check_comm(chorus_comm_t comm, const char *opname)
{
    if (comm == NULL) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: comm is NULL", opname);
    return CHORUS_SUCCESS;
}

static int coll_has_op(chorus_coll_t coll)
{
    return coll == CHORUS_COLL_ALLREDUCE || coll == CHORUS_COLL_REDUCE_SCATTER ||
           coll == CHORUS_COLL_REDUCE || coll == CHORUS_COLL_REDUCE_SCATTERV;
}

static int coll_has_root(chorus_coll_t coll)
{
    return coll == CHORUS_COLL_BROADCAST || coll == CHORUS_COLL_REDUCE ||
           coll == CHORUS_COLL_GATHER || coll == CHORUS_COLL_SCATTER;
}

/* The collectives of issue 41 run on host memory only so far: the device paths (gpu_coll.c,
 * the IPC arena, staging) know the older ones' shapes alone. */
static int coll_host_only(chorus_coll_t coll)
{
    return coll == CHORUS_COLL_GATHER || coll == CHORUS_COLL_SCATTER || chorus__coll_is_v(coll);
}

/* Byte sizes of the send and receive buffers of a call on this rank; 0 when the buffer is
 * not used here. Fails when the sizes do not fit. */
static chorus_status_t coll_sizes(chorus_comm_t comm, const chorus_coll_call_t *call,
                                  size_t esize, size_t *send_bytes_p, size_t *recv_bytes_p)
{
    const char *name = chorus__core_coll_name(call->coll);
    uint64_t n = (uint64_t)comm->nranks;
    uint64_t bytes, total;

    if (call->count > CORE_MAX_MESSAGE_BYTES / esize) goto err_too_big;
    bytes = (uint64_t)call->count * esize;
    if (bytes > UINT64_MAX / n || bytes * n > SIZE_MAX) goto err_too_big;
    total = bytes * n;

    switch (call->coll) {
    case CHORUS_COLL_ALLGATHER: *send_bytes_p = bytes; *recv_bytes_p = total; break;
    case CHORUS_COLL_REDUCE_SCATTER: *send_bytes_p = total; *recv_bytes_p = bytes; break;
    case CHORUS_COLL_ALLTOALL: *send_bytes_p = total; *recv_bytes_p = total; break;
    case CHORUS_COLL_BROADCAST:
        *send_bytes_p = comm->rank == call->root ? bytes : 0;
        *recv_bytes_p = bytes;
        break;
    case CHORUS_COLL_REDUCE:
        *send_bytes_p = bytes;
        *recv_bytes_p = comm->rank == call->root ? bytes : 0;
        break;
    case CHORUS_COLL_GATHER:
        *send_bytes_p = bytes;
        *recv_bytes_p = comm->rank == call->root ? total : 0;
        break;
    case CHORUS_COLL_SCATTER:
        *send_bytes_p = comm->rank == call->root ? total : 0;
        *recv_bytes_p = bytes;
        break;
    default: *send_bytes_p = bytes; *recv_bytes_p = bytes; break;
    }
    return CHORUS_SUCCESS;

err_too_big:
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "rank %d: %s: count %zu of %zu-byte elements is too large "
                         "(at most 2^40 bytes per message)",
                         comm->rank, name, call->count, esize);
}

/* Send and receive buffers may be the same (in place, at the offset chorus.h allows) or
 * disjoint; anything else would be read after it was overwritten. */
static chorus_status_t coll_check_overlap(chorus_comm_t comm, const chorus_coll_call_t *call,
                                          size_t send_bytes, size_t recv_bytes)
{
    uintptr_t s = (uintptr_t)call->sendbuf, r = (uintptr_t)call->recvbuf;
    int in_place;

    if (send_bytes == 0 || recv_bytes == 0) return CHORUS_SUCCESS;
    if (s + send_bytes <= r || r + recv_bytes <= s) return CHORUS_SUCCESS;
    if (call->coll == CHORUS_COLL_ALLGATHER)
        in_place = s == r + (uintptr_t)comm->rank * send_bytes;
    else if (call->coll == CHORUS_COLL_REDUCE_SCATTER)
        in_place = r == s + (uintptr_t)comm->rank * recv_bytes;
    else if (call->coll == CHORUS_COLL_GATHER) /* only the root has both buffers */
        in_place = s == r + (uintptr_t)call->root * send_bytes;
    else if (call->coll == CHORUS_COLL_SCATTER)
        in_place = r == s + (uintptr_t)call->root * recv_bytes;
    else
        in_place = s == r;
    if (in_place) return CHORUS_SUCCESS;
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "rank %d: %s: sendbuf and recvbuf overlap but are not the in-place "
                         "layout",
                         comm->rank, chorus__core_coll_name(call->coll));
}

/* The stream of a call on host buffers must be NULL. */
static chorus_status_t check_host_stream(chorus_comm_t comm, const char *name, void *stream)
{
    if (stream == NULL) return CHORUS_SUCCESS;
    /* No GPU here: UNSUPPORTED; a plugin that is there but broken: its reason. */
    return chorus__gpu_unavailable("rank %d: %s: stream is not NULL", comm->rank, name);
}

chorus_status_t chorus__validate_coll(chorus_comm_t comm, chorus_coll_call_t *call)
{
    const char *name = chorus__core_coll_name(call->coll);
    chorus_status_t status;
    size_t esize, send_bytes = 0, recv_bytes = 0;

    status = chorus__check_comm(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    if ((int)call->dtype < 0 || call->dtype >= CHORUS_NUM_DTYPES ||
        (esize = chorus_dtype_size(call->dtype)) == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown dtype %d",
                             comm->rank, name, (int)call->dtype);
    if (coll_has_op(call->coll) && ((int)call->op < 0 || call->op >= CHORUS_NUM_OPS))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown op %d",
                             comm->rank, name, (int)call->op);
    if (coll_has_root(call->coll) && (call->root < 0 || call->root >= comm->nranks))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: root %d out of range for %d ranks", comm->rank, name,
                             call->root, comm->nranks);
    if (chorus__coll_is_v(call->coll)) {
        /* The count arrays, the NULL buffers and the overlaps, all at once. */
        status = chorus__validate_v(comm, call, esize);
        if (status != CHORUS_SUCCESS) return status;
    } else {
        status = coll_sizes(comm, call, esize, &send_bytes, &recv_bytes);
        if (status != CHORUS_SUCCESS) return status;
        if (send_bytes > 0 && call->sendbuf == NULL)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: sendbuf is NULL",
                                 comm->rank, name);
        if (recv_bytes > 0 && call->recvbuf == NULL)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: recvbuf is NULL",
                                 comm->rank, name);
    }
    call->device = -1;
    if (comm->gpu_ops == NULL) {
        status = check_host_stream(comm, name, call->stream);
    } else if (coll_host_only(call->coll)) {
        /* A NULL buffer (nothing to move here) is neither kind. */
        status = chorus__gpu_classify(comm, name, call->sendbuf, call->sendbuf != NULL,
                                      call->recvbuf, call->recvbuf != NULL, call->stream,
                                      &call->device);
        if (status == CHORUS_SUCCESS && call->device >= 0)
            return chorus__error(CHORUS_ERR_UNSUPPORTED,
                                 "rank %d: %s: device buffers are not supported by this "
                                 "collective yet (host memory only)", comm->rank, name);
    } else {
        /* Which buffers this rank uses does not depend on count, so that a count-0 call
         * on device buffers is told apart too (it still counts, in stream order). */
        int send_used = !(call->coll == CHORUS_COLL_BROADCAST && comm->rank != call->root);
        int recv_used = !(call->coll == CHORUS_COLL_REDUCE && comm->rank != call->root);
        status = chorus__gpu_classify(comm, name, call->sendbuf, send_used, call->recvbuf,
                                      recv_used, call->stream, &call->device);
    }
    if (status != CHORUS_SUCCESS) return status;
    if (coll_host_only(call->coll) && call->stream != NULL)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: %s: stream is not NULL, but "
                             "this collective runs on host memory only", comm->rank, name);
    return coll_check_overlap(comm, call, send_bytes, recv_bytes);
}

chorus_status_t chorus__validate_p2p(chorus_comm_t comm, const char *opname, const void *buf,
                                     size_t count, chorus_dtype_t dtype, int peer, void *stream,
                                     int *device_p)
{
    chorus_status_t status;
    size_t esize;

    status = chorus__check_comm(comm, opname);
    if (status != CHORUS_SUCCESS) return status;
    if ((int)dtype < 0 || dtype >= CHORUS_NUM_DTYPES || (esize = chorus_dtype_size(dtype)) == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown dtype %d",
                             comm->rank, opname, (int)dtype);
    if (peer < 0 || peer >= comm->nranks)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: peer %d out of range for %d ranks", comm->rank, opname,
                             peer, comm->nranks);
    if (count > CORE_MAX_MESSAGE_BYTES / esize)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: count %zu of %zu-byte elements is too large "
                             "(at most 2^40 bytes per message)",
                             comm->rank, opname, count, esize);
    if (count > 0 && buf == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: buf is NULL", comm->rank,
                             opname);
    *device_p = -1;
    if (comm->gpu_ops == NULL) return check_host_stream(comm, opname, stream);
    /* An empty message with no buffer (alltoallv with zero counts) is neither host nor
     * device memory: it takes any stream, and still matches its peer's. */
    if (buf == NULL) return CHORUS_SUCCESS;
    return chorus__gpu_classify(comm, opname, buf, 1, NULL, 0, stream, device_p);
}
