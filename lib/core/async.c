/*
 * Nonblocking host operations: requests, the open send/recv batch, the queue and the
 * progress thread (async.h says why a thread and why batches).
 *
 * Lifetimes. A request is a small heap object shared by its owner (the caller, until it
 * waits, tests to completion or frees it) and the progress thread (until the operation is
 * over). Its state says who frees it: the thread moves PENDING -> DONE, and frees it if the
 * owner had moved it to ORPHANED (chorus_request_free on a pending request); the owner frees
 * a DONE one. A DONE request never touches its communicator again, so requests may outlive
 * it.
 *
 * Waiting: a waiter spins, yields, then sleeps on the queue's `done` condition, as the
 * engine's waits do (on these machines waking a sleeper costs tens of microseconds, a
 * yield one or two). The progress thread does the same while it has nothing to run.
 */
#include "core/async.h"

#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REQ_PENDING = 0, REQ_DONE = 1, REQ_ORPHANED = 2 };

struct chorus_request {
    atomic_int state;
    chorus_status_t status;        /* the operation's, once DONE */
    struct chorus_async *as;       /* used only while PENDING */
    char msg[CHORUS_COMM_ERRMSG_MAX]; /* the failure's message, once DONE */
};

/* One entry of the queue: a collective, or a batch of sends and receives run as a group. */
typedef struct async_op {
    struct async_op *next;
    int is_p2p;
    chorus_coll_call_t call;  /* !is_p2p */
    size_t *vcopy;            /* a v-form's count arrays, copied: call points into it */
    chorus_p2p_op_t *ops;     /* is_p2p: n operations in call order */
    chorus_request_t *reqs;   /* n requests (&one for a collective) */
    chorus_request_t one;
    size_t n, cap;
    void (*serve)(chorus_comm_t comm); /* a long-running entry (chorus__async_serve) */
} async_op_t;

typedef struct chorus_async {
    chorus_comm_t comm;
    chorus_wait_policy_t wait; /* the comm's, copied: waiters may not touch the comm */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the progress thread: work was queued, or stop */
    pthread_cond_t done; /* waiters: an operation completed */
    async_op_t *head, *tail; /* queued, not yet taken by the thread */
    atomic_int nqueued;      /* entries in head..tail (read without the lock to spin) */
    atomic_int inflight;     /* queued + running entries */
    async_op_t *batch;       /* the open send/recv batch, not yet queued */
    int sleeping;            /* the thread waits on `wake` */
    atomic_int stop;         /* set under the lock; read without it to stop spinning */
    pthread_t thread;
} chorus_async_t;

/* ---- Requests ---- */

static chorus_request_t request_new(chorus_comm_t comm, chorus_async_t *as)
{
    chorus_request_t req = malloc(sizeof *req);

    if (req == NULL) {
        chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: no memory for a request", comm->rank);
        return NULL;
    }
    atomic_init(&req->state, REQ_PENDING);
    req->status = CHORUS_SUCCESS;
    req->as = as;
    req->msg[0] = '\0';
    return req;
}

/* The thread's side of the end of an operation. */
static void request_finish(chorus_request_t req, chorus_status_t status, const char *msg)
{
    req->status = status;
    if (status != CHORUS_SUCCESS) snprintf(req->msg, sizeof req->msg, "%s", msg);
    if (atomic_exchange_explicit(&req->state, REQ_DONE, memory_order_acq_rel) == REQ_ORPHANED)
        free(req);
}

/* The owner's side: the status of a DONE request, its message made this thread's. */
static chorus_status_t request_collect(chorus_request_t *req_p)
{
    chorus_request_t req = *req_p;
    chorus_status_t status = req->status;

    if (status != CHORUS_SUCCESS) chorus__error(status, "%s", req->msg);
    free(req);
    *req_p = NULL;
    return status;
}

static int request_done(chorus_request_t req)
{
    return atomic_load_explicit(&req->state, memory_order_acquire) == REQ_DONE;
}

chorus_status_t chorus__async_done_request(chorus_comm_t comm, chorus_request_t *req_p)
{
    chorus_request_t req = request_new(comm, NULL);

    if (req == NULL) return CHORUS_ERR_NO_MEMORY;
    atomic_store_explicit(&req->state, REQ_DONE, memory_order_relaxed);
    *req_p = req;
    return CHORUS_SUCCESS;
}

/* ---- The queue ---- */

static void op_free(async_op_t *op)
{
    if (op->is_p2p) {
        free(op->ops);
        free(op->reqs);
    }
    free(op->vcopy);
    free(op);
}

/* Points op->call's count arrays at copies of the caller's, so that the caller may reuse
 * its arrays as soon as the chorus_i* call returns (MPI asks them to be left alone until
 * completion; a copy of a few words per rank is cheaper than a trap). */
static int op_copy_counts(async_op_t *op, int nranks)
{
    const size_t **arrays[4] = {&op->call.sendcounts, &op->call.sdispls, &op->call.recvcounts,
                                &op->call.rdispls};
    size_t n = (size_t)nranks, used = 0;

    for (int i = 0; i < 4; i++) used += *arrays[i] != NULL;
    if (used == 0) return 0;
    op->vcopy = malloc(used * n * sizeof *op->vcopy);
    if (op->vcopy == NULL) return -1;
    used = 0;
    for (int i = 0; i < 4; i++) {
        if (*arrays[i] == NULL) continue;
        memcpy(op->vcopy + used * n, *arrays[i], n * sizeof *op->vcopy);
        *arrays[i] = op->vcopy + used * n;
        used++;
    }
    return 0;
}

/* Appends op to the queue (lock held) and wakes the thread if it sleeps. */
static void queue_push(chorus_async_t *as, async_op_t *op)
{
    op->next = NULL;
    if (as->tail != NULL) as->tail->next = op;
    else as->head = op;
    as->tail = op;
    atomic_fetch_add_explicit(&as->inflight, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&as->nqueued, 1, memory_order_release);
    if (as->sleeping) pthread_cond_signal(&as->wake);
}

/* Queues the open send/recv batch, if any (lock held). */
static void batch_flush(chorus_async_t *as)
{
    if (as->batch == NULL) return;
    queue_push(as, as->batch);
    as->batch = NULL;
}

/* One idle round of a wait that began at start, as the comm's policy says: spins, then
 * yields; 1 once the spell is long enough to sleep instead. */
static int idle_round(uint64_t start, const chorus_wait_policy_t *w)
{
    uint64_t idle = chorus__now_ns() - start;

    if (idle < w->spin_ns) return 0;
    if (idle < w->spin_ns + w->yield_ns) {
        sched_yield();
        return 0;
    }
    return 1;
}

/* Waits for work: spins, yields, then sleeps. Returns the next entry, or NULL once stop
 * is set and the queue is empty. */
static async_op_t *queue_take(chorus_async_t *as)
{
    uint64_t start = chorus__now_ns();
    async_op_t *op;

    for (;;) {
        if (atomic_load_explicit(&as->nqueued, memory_order_acquire) > 0 ||
            atomic_load_explicit(&as->stop, memory_order_relaxed)) {
            pthread_mutex_lock(&as->lock);
            op = as->head;
            if (op != NULL) {
                as->head = op->next;
                if (as->head == NULL) as->tail = NULL;
                atomic_fetch_sub_explicit(&as->nqueued, 1, memory_order_relaxed);
                pthread_mutex_unlock(&as->lock);
                return op;
            }
            if (as->stop) {
                pthread_mutex_unlock(&as->lock);
                return NULL;
            }
            pthread_mutex_unlock(&as->lock);
        }
        if (!idle_round(start, &as->wait)) continue;
        pthread_mutex_lock(&as->lock);
        as->sleeping = 1;
        while (as->head == NULL && !as->stop) pthread_cond_wait(&as->wake, &as->lock);
        as->sleeping = 0;
        pthread_mutex_unlock(&as->lock);
        start = chorus__now_ns();
    }
}

/* Runs one entry on the progress thread, exactly as the blocking call would. */
static chorus_status_t async_run(chorus_comm_t comm, async_op_t *op)
{
    const char *name = op->is_p2p ? (op->n > 1 ? "group" : op->ops[0].is_send ? "send" : "recv")
                                  : chorus__core_coll_name(op->call.coll);
    chorus_status_t status;

    chorus__error_clear();
    if (op->serve != NULL) {
        op->serve(comm);
        return CHORUS_SUCCESS;
    }
    /* After a failure or an abort every later entry fails at once, naming the first error. */
    status = chorus__comm_check_failed_async(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    if (op->is_p2p) return chorus__p2p_run_batch(comm, op->ops, op->n);
    comm->exec.coll_seq++; /* counted when run, in call order: see coll_entry */
    if (chorus__coll_is_empty(comm, &op->call)) return CHORUS_SUCCESS;
    return chorus__coll_run(comm, &op->call, NULL);
}

static void *async_main(void *arg)
{
    chorus_async_t *as = arg;
    async_op_t *op;

    chorus__log_set_rank(as->comm->rank);
    while ((op = queue_take(as)) != NULL) {
        chorus_status_t status = async_run(as->comm, op);
        const char *msg = chorus_last_error();
        for (size_t i = 0; i < op->n; i++) request_finish(op->reqs[i], status, msg);
        op_free(op);
        pthread_mutex_lock(&as->lock);
        atomic_fetch_sub_explicit(&as->inflight, 1, memory_order_release);
        pthread_cond_broadcast(&as->done);
        pthread_mutex_unlock(&as->lock);
    }
    return NULL;
}

/* The comm's queue, made (and its thread started) at the first nonblocking call. */
static chorus_status_t async_get(chorus_comm_t comm, chorus_async_t **as_p)
{
    chorus_async_t *as = comm->async;
    int rc;

    if (as != NULL) {
        *as_p = as;
        return CHORUS_SUCCESS;
    }
    as = calloc(1, sizeof *as);
    if (as == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: no memory for the progress queue",
                             comm->rank);
    as->comm = comm;
    as->wait = comm->wait;
    atomic_init(&as->nqueued, 0);
    atomic_init(&as->stop, 0);
    atomic_init(&as->inflight, 0);
    pthread_mutex_init(&as->lock, NULL);
    pthread_cond_init(&as->wake, NULL);
    pthread_cond_init(&as->done, NULL);
    rc = pthread_create(&as->thread, NULL, async_main, as);
    if (rc != 0) {
        pthread_cond_destroy(&as->done);
        pthread_cond_destroy(&as->wake);
        pthread_mutex_destroy(&as->lock);
        free(as);
        return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: cannot start the progress thread: %s",
                             comm->rank, strerror(rc));
    }
    comm->async = as;
    *as_p = as;
    return CHORUS_SUCCESS;
}

/* ---- Submission (the comm's thread) ---- */

chorus_status_t chorus__async_coll(chorus_comm_t comm, const chorus_coll_call_t *call,
                                   chorus_request_t *req_p)
{
    chorus_async_t *as;
    async_op_t *op;
    chorus_status_t status;

    /* Device work in flight runs on the comm's other thread: it ends first. */
    if (comm->gpu != NULL) chorus__gpu_drain(comm);
    status = async_get(comm, &as);
    if (status != CHORUS_SUCCESS) return status;
    op = calloc(1, sizeof *op);
    if (op != NULL) op->call = *call;
    chorus_request_t req = op != NULL && op_copy_counts(op, comm->nranks) == 0
                               ? request_new(comm, as) : NULL;
    if (req == NULL) {
        if (op != NULL) free(op->vcopy);
        free(op);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s: no memory to queue it",
                             comm->rank, chorus__core_coll_name(call->coll));
    }
    op->one = req;
    op->reqs = &op->one;
    op->n = 1;
    op->is_p2p = 0;
    pthread_mutex_lock(&as->lock);
    batch_flush(as); /* the sends and receives issued before it come first */
    queue_push(as, op);
    pthread_mutex_unlock(&as->lock);
    *req_p = req;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__async_p2p(chorus_comm_t comm, const chorus_p2p_op_t *p2p,
                                  chorus_request_t *req_p)
{
    const char *name = p2p->is_send ? "isend" : "irecv";
    chorus_async_t *as;
    async_op_t *b;
    chorus_status_t status;
    chorus_request_t req;

    if (comm->gpu != NULL) chorus__gpu_drain(comm);
    status = async_get(comm, &as);
    if (status != CHORUS_SUCCESS) return status;
    req = request_new(comm, as);
    if (req == NULL) return CHORUS_ERR_NO_MEMORY;
    pthread_mutex_lock(&as->lock);
    b = as->batch;
    if (b == NULL && (b = calloc(1, sizeof *b)) != NULL) {
        b->is_p2p = 1;
        as->batch = b;
    }
    if (b != NULL && b->n == b->cap) {
        size_t cap = b->cap > 0 ? 2 * b->cap : 8;
        chorus_p2p_op_t *ops = realloc(b->ops, cap * sizeof *ops);
        if (ops != NULL) b->ops = ops;
        chorus_request_t *reqs = ops != NULL ? realloc(b->reqs, cap * sizeof *reqs) : NULL;
        if (reqs != NULL) {
            b->reqs = reqs;
            b->cap = cap;
        }
    }
    if (b == NULL || b->n == b->cap) {
        pthread_mutex_unlock(&as->lock);
        free(req);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s to peer %d: no memory to queue it",
                             comm->rank, name, p2p->peer);
    }
    b->ops[b->n] = *p2p;
    b->reqs[b->n] = req;
    b->n++;
    pthread_mutex_unlock(&as->lock);
    *req_p = req;
    return CHORUS_SUCCESS;
}

/* ---- Long-running entries (tagged.c) ---- */

chorus_status_t chorus__async_serve(chorus_comm_t comm, void (*serve)(chorus_comm_t comm))
{
    chorus_async_t *as;
    async_op_t *op;
    chorus_status_t status = async_get(comm, &as);

    if (status != CHORUS_SUCCESS) return status;
    op = calloc(1, sizeof *op);
    if (op == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: no memory to start a service",
                             comm->rank);
    op->serve = serve;
    pthread_mutex_lock(&as->lock);
    batch_flush(as);
    queue_push(as, op);
    pthread_mutex_unlock(&as->lock);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__async_request(chorus_comm_t comm, chorus_request_t *req_p)
{
    chorus_async_t *as;
    chorus_status_t status = async_get(comm, &as);

    if (status != CHORUS_SUCCESS) return status;
    *req_p = request_new(comm, as);
    return *req_p != NULL ? CHORUS_SUCCESS : CHORUS_ERR_NO_MEMORY;
}

void chorus__async_complete(chorus_request_t req, chorus_status_t status, const char *msg)
{
    chorus_async_t *as = req->as;

    request_finish(req, status, msg);
    /* req may be gone now (orphaned): only as is used below. */
    pthread_mutex_lock(&as->lock);
    pthread_cond_broadcast(&as->done);
    pthread_mutex_unlock(&as->lock);
}

/* ---- Waiting (any thread) ---- */

/* Starts the open batch if req may be in it. */
static void async_kick(chorus_request_t req)
{
    chorus_async_t *as = req->as;

    if (as == NULL) return;
    pthread_mutex_lock(&as->lock);
    batch_flush(as);
    pthread_mutex_unlock(&as->lock);
}

chorus_status_t chorus_wait(chorus_request_t *req_p)
{
    chorus_request_t req;

    chorus__error_clear();
    if (req_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_wait: req_p is NULL");
    req = *req_p;
    if (req == NULL) return CHORUS_SUCCESS;
    if (!request_done(req)) {
        chorus_async_t *as = req->as;
        uint64_t start = chorus__now_ns();
        async_kick(req);
        while (!request_done(req)) {
            if (!idle_round(start, &as->wait)) continue;
            pthread_mutex_lock(&as->lock);
            while (!request_done(req)) pthread_cond_wait(&as->done, &as->lock);
            pthread_mutex_unlock(&as->lock);
        }
    }
    return request_collect(req_p);
}

chorus_status_t chorus_test(chorus_request_t *req_p, int *done_p)
{
    chorus__error_clear();
    if (req_p == NULL || done_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_test: %s is NULL",
                             req_p == NULL ? "req_p" : "done_p");
    *done_p = 1;
    if (*req_p == NULL) return CHORUS_SUCCESS;
    if (!request_done(*req_p)) {
        async_kick(*req_p);
        if (!request_done(*req_p)) {
            *done_p = 0;
            return CHORUS_SUCCESS;
        }
    }
    return request_collect(req_p);
}

chorus_status_t chorus_wait_all(size_t n, chorus_request_t *reqs)
{
    chorus_status_t first = CHORUS_SUCCESS, status;
    char msg[CHORUS_COMM_ERRMSG_MAX] = "";

    chorus__error_clear();
    if (reqs == NULL && n > 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_wait_all: reqs is NULL");
    for (size_t i = 0; i < n; i++) {
        status = chorus_wait(&reqs[i]);
        if (status != CHORUS_SUCCESS && first == CHORUS_SUCCESS) {
            first = status;
            snprintf(msg, sizeof msg, "%s", chorus_last_error());
        }
    }
    if (first != CHORUS_SUCCESS) return chorus__error(first, "%s", msg);
    chorus__error_clear();
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_request_free(chorus_request_t *req_p)
{
    chorus_request_t req;
    int expected = REQ_PENDING;

    chorus__error_clear();
    if (req_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_request_free: req_p is NULL");
    req = *req_p;
    *req_p = NULL;
    if (req == NULL) return CHORUS_SUCCESS;
    async_kick(req); /* it still runs, so it must start */
    if (!atomic_compare_exchange_strong_explicit(&req->state, &expected, REQ_ORPHANED,
                                                 memory_order_acq_rel, memory_order_acquire))
        free(req); /* already DONE: the thread is finished with it */
    return CHORUS_SUCCESS;
}

/* ---- Draining and the end ---- */

int chorus__async_inflight(chorus_comm_t comm)
{
    chorus_async_t *as = comm->async;

    return as == NULL ? 0 : atomic_load_explicit(&as->inflight, memory_order_acquire);
}

void chorus__async_drain(chorus_comm_t comm)
{
    chorus_async_t *as = comm->async;

    /* A tagged comm's thread serves until the comm ends: there is nothing to wait for. */
    if (as == NULL || comm->tagged != NULL) return;
    pthread_mutex_lock(&as->lock);
    batch_flush(as);
    while (atomic_load_explicit(&as->inflight, memory_order_acquire) > 0)
        pthread_cond_wait(&as->done, &as->lock);
    pthread_mutex_unlock(&as->lock);
}

void chorus__async_destroy(chorus_comm_t comm)
{
    chorus_async_t *as = comm->async;

    if (as == NULL) return;
    pthread_mutex_lock(&as->lock);
    batch_flush(as);
    /* Destroy is local: what is still in flight ends now, with CHORUS_ERR_ABORTED. (A tagged
     * comm's service ends by itself, once chorus__tagged_close asked it to.) */
    if (atomic_load_explicit(&as->inflight, memory_order_acquire) > 0 && comm->tagged == NULL) {
        pthread_mutex_unlock(&as->lock);
        chorus_comm_abort(comm);
        pthread_mutex_lock(&as->lock);
    }
    atomic_store(&as->stop, 1);
    pthread_cond_signal(&as->wake);
    pthread_mutex_unlock(&as->lock);
    pthread_join(as->thread, NULL);
    pthread_cond_destroy(&as->done);
    pthread_cond_destroy(&as->wake);
    pthread_mutex_destroy(&as->lock);
    free(as);
    comm->async = NULL;
}
