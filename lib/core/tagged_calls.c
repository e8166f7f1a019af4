/*
 * Tagged point to point: the public calls (include/chorus.h). They check their arguments on
 * the caller's thread, make the comm tagged at its first call (its progress thread then
 * serves it: tagged.c), and hand each operation to the service through the inbox.
 */
#include "core/tagged.h"
#include "core/async.h"

#include "util/clock.h"
#include "util/status.h"

#include <stdio.h>
#include <stdlib.h>

/* The comm's tagged state, made (and the service started) at its first tagged call. */
static chorus_status_t tg_get(chorus_comm_t comm, const char *name)
{
    struct chorus_tagged *t;
    chorus_status_t status;

    if (comm->tagged != NULL) return CHORUS_SUCCESS;
    /* Whatever the comm was doing ends first: it carries nothing else from now on. */
    status = chorus__comm_check_failed(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    if (chorus__p2p_in_group())
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: inside chorus_group_start/end (tagged calls are "
                             "not grouped)",
                             comm->rank, name);
    t = calloc(1, sizeof *t);
    if (t != NULL) t->peers = calloc((size_t)comm->nranks, sizeof *t->peers);
    if (t == NULL || t->peers == NULL) {
        free(t);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s: no memory", comm->rank, name);
    }
    pthread_mutex_init(&t->lock, NULL);
    atomic_init(&t->closing, 0);
    for (int p = 0; p < comm->nranks; p++) {
        t->peers[p].inreq.done = 0;
        t->peers[p].preq.done = 0;
    }
    comm->tagged = t;
    status = chorus__async_serve(comm, chorus__tagged_serve);
    if (status != CHORUS_SUCCESS) {
        comm->tagged = NULL;
        pthread_mutex_destroy(&t->lock);
        free(t->peers);
        free(t);
    }
    return status;
}

static chorus_status_t tg_post(chorus_comm_t comm, int is_send, void *buf, size_t count,
                               chorus_dtype_t dtype, int peer, int tag, int *source_p,
                               chorus_request_t *req_p)
{
    const char *name = is_send ? "tagged_isend" : "tagged_irecv";
    chorus_status_t status;
    int device = -1;
    tg_op_t *op;

    chorus__error_clear();
    if (req_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_%s: req_p is NULL", name);
    *req_p = NULL;
    /* validate_p2p knows real ranks: any-source receives are checked with peer 0. */
    status = chorus__validate_p2p(comm, name, buf, count, dtype,
                                  !is_send && peer == CHORUS_ANY_SOURCE ? 0 : peer, NULL,
                                  &device);
    if (status != CHORUS_SUCCESS) return status;
    if (is_send && peer == CHORUS_ANY_SOURCE)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: CHORUS_ANY_SOURCE is for receives", comm->rank, name);
    if (tag < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s %s rank %d: tag %d is negative", comm->rank, name,
                             is_send ? "to" : "from", peer, tag);
    if (device >= 0)
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: %s: device memory (tagged calls take host memory)",
                             comm->rank, name);
    status = tg_get(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    status = chorus__comm_check_errors(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    op = calloc(1, sizeof *op);
    if (op == NULL || chorus__async_request(comm, &op->req) != CHORUS_SUCCESS) {
        free(op);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s: no memory", comm->rank, name);
    }
    struct chorus_tagged *t = comm->tagged;
    op->is_send = is_send;
    op->peer = peer;
    op->tag = tag;
    op->dtype = dtype;
    op->count = count;
    op->bytes = (uint64_t)count * chorus_dtype_size(dtype);
    op->buf = buf;
    op->source_p = source_p;
    op->seq = ++t->calls;
    op->deadline_ns = chorus__deadline_after(comm->timeout_s);
    op->timeout_s = comm->timeout_s;
    chorus_request_t req = op->req;
    pthread_mutex_lock(&t->lock);
    if (t->dead) {
        pthread_mutex_unlock(&t->lock);
        status = chorus__comm_check_errors(comm, name);
        if (status == CHORUS_SUCCESS)
            status = chorus__error(CHORUS_ERR_ABORTED, "rank %d: %s: the communicator's tagged "
                                   "service has ended (aborted)", comm->rank, name);
        char msg[CHORUS_COMM_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", chorus_last_error());
        chorus__async_complete(req, status, msg);
        free(op);
        chorus_request_free(&req);
        return chorus__error(status, "%s", msg);
    }
    op->next = NULL;
    if (t->inbox_tail != NULL) t->inbox_tail->next = op;
    else t->inbox = op;
    t->inbox_tail = op;
    pthread_mutex_unlock(&t->lock);
    *req_p = req;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_tagged_isend(const void *buf, size_t count, chorus_dtype_t dtype,
                                    int peer, int tag, chorus_comm_t comm,
                                    chorus_request_t *req_p)
{
    return tg_post(comm, 1, (void *)buf, count, dtype, peer, tag, NULL, req_p);
}

chorus_status_t chorus_tagged_irecv(void *buf, size_t count, chorus_dtype_t dtype, int peer,
                                    int tag, chorus_comm_t comm, int *source_p,
                                    chorus_request_t *req_p)
{
    return tg_post(comm, 0, buf, count, dtype, peer, tag, source_p, req_p);
}
