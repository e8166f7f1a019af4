/*
 * Device collectives: telling device buffers from host ones, the per-comm queue and proxy
 * thread that make calls on device buffers stream-ordered, and the CUDA IPC path. The
 * staging path is in gpu_staging.c; gpu_coll.h says why a proxy thread.
 *
 * Ordering: a call records a start event on the caller's stream, then makes the stream wait
 * until the comm's done counter (pinned memory) reaches the call's ticket. The proxy runs
 * the queue in call order, waits for each op's start event, runs it and raises the counter
 * to its ticket. Tickets grow in call order and the counter only grows, so a stream waiting
 * for ticket t is released once every op up to t is over, on whichever streams they were.
 *
 * Sequence numbers: a device op is counted (comm->exec.coll_seq, and "#N" of messages)
 * when the proxy runs it, not when it is called; host-side calls drain the queue before
 * counting theirs, so the numbers follow call order either way and signatures compare
 * like calls across ranks, whichever kind of memory each rank passed.
 */
#include "core/gpu_coll.h"

#include "core/async.h"
#include "core/flight.h"
#include "core/hang.h"
#include "gpu/ipc_arena.h"

#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Telling host from device memory ---- */

static const char *gpu_kind_name(int is_device)
{
    return is_device ? "device" : "host";
}

chorus_status_t chorus__gpu_classify(chorus_comm_t comm, const char *opname, const void *sendbuf,
                                     int send_used, const void *recvbuf, int recv_used,
                                     void *stream, int *device_p)
{
    const char *sname = recv_used || recvbuf != NULL ? "sendbuf" : "buf";
    int s_dev = 0, r_dev = 0, s_ord = -1, r_ord = -1;
    int s_known = send_used && sendbuf != NULL, r_known = recv_used && recvbuf != NULL;
    chorus_status_t status;

    if (s_known) {
        status = chorus__gpu_pointer_kind(sendbuf, sname, &s_dev, &s_ord);
        if (status != CHORUS_SUCCESS)
            return chorus__error_context(status, "rank %d: %s", comm->rank, opname);
    }
    if (r_known) {
        status = chorus__gpu_pointer_kind(recvbuf, "recvbuf", &r_dev, &r_ord);
        if (status != CHORUS_SUCCESS)
            return chorus__error_context(status, "rank %d: %s", comm->rank, opname);
    }
    if (s_known && r_known && s_dev != r_dev)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: sendbuf is %s memory but recvbuf is %s memory: both "
                             "buffers of a call must be host memory or both device memory",
                             comm->rank, opname, gpu_kind_name(s_dev), gpu_kind_name(r_dev));
    if (s_known && r_known && s_dev && s_ord != r_ord)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: sendbuf is on device %d but recvbuf on device %d",
                             comm->rank, opname, s_ord, r_ord);
    *device_p = s_dev ? s_ord : r_dev ? r_ord : -1;
    if (*device_p < 0 && stream != NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: stream is not NULL but the buffers are host memory "
                             "(calls on host memory block and take no stream)",
                             comm->rank, opname);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__gpu_p2p_ops_reserve(chorus_gpu_comm_t *g, size_t n, const char *what)
{
    chorus_p2p_op_t *list;

    if (n <= g->p2p_ops_cap) return CHORUS_SUCCESS;
    list = malloc(n * sizeof *list);
    if (list == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s: no memory for %zu operations",
                             g->comm->rank, what, n);
    free(g->p2p_ops);
    g->p2p_ops = list;
    g->p2p_ops_cap = n;
    return CHORUS_SUCCESS;
}

/* ---- Waiting on the proxy ---- */

chorus_status_t chorus__gpu_wait_event(chorus_gpu_comm_t *g, void *ev, const char *what,
                                       const char *waiting_for)
{
    chorus_comm_t comm = g->comm;
    uint64_t start = chorus__now_ns(), deadline = chorus__deadline_after(comm->timeout_s);
    struct timespec nap = {0, 50000};
    chorus_status_t status;
    int done = 0;

    for (;;) {
        status = g->ops->event_query(ev, &done);
        if (status != CHORUS_SUCCESS)
            return chorus__gpu_error(status, "rank %d: %s: waiting for %s", comm->rank, what,
                                     waiting_for);
        if (done) return CHORUS_SUCCESS;
        if (atomic_load_explicit(&comm->abort_flag, memory_order_relaxed))
            return chorus__error(CHORUS_ERR_ABORTED,
                                 "rank %d: %s: aborted while waiting for %s", comm->rank, what,
                                 waiting_for);
        if (chorus__deadline_passed(deadline))
            return chorus__error(CHORUS_ERR_TIMEOUT, "rank %d: %s: waited %g s for %s",
                                 comm->rank, what, comm->timeout_s, waiting_for);
        /* Spin, then yield, then sleep, as the engine does: copies of a few MB take
         * hundreds of microseconds, and a rank on an oversubscribed host must not keep
         * the core its peers (or the copy engine's fake threads) need. */
        uint64_t idle = chorus__now_ns() - start;
        if (idle < comm->wait.spin_ns) continue;
        if (idle < comm->wait.spin_ns + comm->wait.yield_ns) sched_yield();
        else nanosleep(&nap, NULL);
    }
}

/* ---- The proxy ---- */

/* Chooses ipc or staging at the comm's first device collective. Every rank's first device
 * collective is the same call, so the collective ipc_arena_create lines up on all ranks,
 * and it fails on all if it fails on one. That is checked first: the ranks meet in one
 * step of the host arena that carries the call's device signature, so a rank that made a
 * host call (or another device call) instead is CHORUS_ERR_MISMATCH on every rank at
 * once, where the setup's bootstrap exchange would have waited for it until the
 * deadline. */
static chorus_status_t gpu_choose_path(chorus_gpu_comm_t *g, const chorus_coll_call_t *call,
                                       const char *name)
{
    chorus_comm_t comm = g->comm;
    chorus_ipc_arena_params_t params;
    chorus_status_t status;
    char what[64];

    g->path_chosen = 1;
    /* The "#N" gpu_run_op will give the call (the queue has drained). */
    snprintf(what, sizeof what, "%s #%llu", name, (unsigned long long)comm->seq + 1);
    /* CHORUS_GPU_PATH=direct is for send/recv: a collective's schedule reduces with the CPU
     * kernels, which cannot read device memory (gpu_direct.c), so collectives choose as
     * under auto. */
    if (g->path == GPU_PATH_DIRECT) g->path = GPU_PATH_AUTO;
    if (g->path == GPU_PATH_STAGING) return CHORUS_SUCCESS;
    if (comm->nhosts != 1 || comm->arena == NULL) {
        if (g->path == GPU_PATH_AUTO) {
            g->path = GPU_PATH_STAGING;
            return CHORUS_SUCCESS;
        }
        g->path = GPU_PATH_STAGING;
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: %s: CHORUS_GPU_PATH=ipc needs every rank on one host "
                             "with the shared arena",
                             comm->rank, what);
    }
    if (comm->check_calls) {
        status = chorus__arena_step(comm->arena, call->coll, call->count, call->dtype, call->op,
                                    comm->exec.coll_seq + 1, what);
        if (status != CHORUS_SUCCESS) {
            g->path = GPU_PATH_STAGING;
            return chorus__error_context(status, "rank %d: %s: before setting up CUDA IPC",
                                         comm->rank, what);
        }
    }
    memset(&params, 0, sizeof params);
    params.rank = comm->rank;
    params.nlocal = comm->nlocal;
    params.local_index = comm->local_index;
    params.gpu = g->ops;
    params.device = g->device;
    params.stream = g->stream_in;
    params.slot_bytes = chorus__config_size("CHORUS_GPU_IPC_CHUNK", 8u << 20);
    params.host_arena = comm->arena;
    params.bs = comm->bs;
    status = chorus__ipc_arena_create(&params, &g->ipc);
    if (status == CHORUS_SUCCESS) {
        g->path = GPU_PATH_IPC;
        CHORUS_INFO("gpu", "rank %d: device collectives through CUDA IPC", comm->rank);
        return CHORUS_SUCCESS;
    }
    if (g->path == GPU_PATH_IPC)
        return chorus__error_context(status, "rank %d: %s: CHORUS_GPU_PATH=ipc", comm->rank,
                                     what);
    CHORUS_INFO("gpu", "rank %d: no CUDA IPC (%s): device collectives staged through host memory",
                comm->rank, chorus_last_error());
    chorus__error_clear();
    g->path = GPU_PATH_STAGING;
    return CHORUS_SUCCESS;
}

static chorus_status_t gpu_run_coll(chorus_gpu_comm_t *g, const chorus_coll_call_t *call,
                                    const char *what)
{
    chorus_comm_t comm = g->comm;
    chorus_status_t status;

    if (!g->path_chosen)
        return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: %s: no device path was chosen",
                             comm->rank, what);
    /* An exact sum (reproducible level 2) is the host kernel's: the staged path runs it.
     * Level 1 stays on CUDA IPC, whose kernel folds the ranks' buffers in rank order as the
     * host does (ipc_arena.c). */
    if (g->path == GPU_PATH_STAGING || chorus__coll_exact_divisor(comm, call) > 0)
        return chorus__gpu_staging_coll(g, call, what);
    status = chorus__ipc_arena_run(g->ipc, call->coll, call->sendbuf, call->recvbuf, call->count,
                                   call->dtype, call->op, call->root, comm->exec.coll_seq,
                                   comm->dev_wins, what);
    if (status != CHORUS_SUCCESS) return chorus__error_context(status, "rank %d", comm->rank);
    return CHORUS_SUCCESS;
}

/* Waits until the proxy's own streams are idle. An op that failed half-way (abort,
 * timeout, a peer's failure) leaves copies and kernels queued there: they must end before
 * the done counter lets the caller's stream use the buffers again, and before the pinned
 * staging buffers and the IPC slots are freed. They wait on nothing outside the device,
 * so this returns; their errors are the failed op's, already recorded. */
static void gpu_quiesce(chorus_gpu_comm_t *g)
{
    if (g->stream_in != NULL) (void)g->ops->stream_synchronize(g->stream_in);
    if (g->stream_out != NULL) (void)g->ops->stream_synchronize(g->stream_out);
}

/* Runs one op on the proxy; an error becomes the comm's async error. */
static void gpu_run_op(chorus_gpu_comm_t *g, const chorus_gpu_op_t *op)
{
    chorus_comm_t comm = g->comm;
    const chorus_p2p_op_t *ops = op->nops > 1 ? op->list : &op->one;
    const char *name = op->kind == GPU_OP_COLL ? chorus__core_coll_name(op->call.coll)
                       : op->nops > 1 ? "group" : ops[0].is_send ? "send" : "recv";
    chorus_status_t status;
    char what[64], peer_what[96];

    /* Collectives count even when they do not run, so that the numbers stay in step with
     * the other ranks' for the messages of the error that follows. */
    if (op->kind != GPU_OP_P2P) comm->exec.coll_seq++;
    if (op->kind == GPU_OP_NOP) return;
    /* A failed comm runs nothing more: its peers' streams are out of step. */
    if (atomic_load_explicit(&comm->async_error, memory_order_acquire) != 0) return;
    chorus__comm_what(comm, name, what, sizeof what);
    status = chorus__gpu_wait_event(g, op->start, what, "the work queued on the stream before "
                                                        "the call");
    if (status == CHORUS_SUCCESS) {
        if (op->kind == GPU_OP_COLL) {
            status = gpu_run_coll(g, &op->call, what);
        } else {
            const char *w = what;
            if (op->nops == 1) {
                snprintf(peer_what, sizeof peer_what, "%s (peer %d)", what, ops[0].peer);
                w = peer_what;
            }
            status = op->path == GPU_PATH_DIRECT ? chorus__gpu_direct_p2p(g, ops, op->nops, w)
                                                 : chorus__gpu_staging_p2p(g, ops, op->nops, w);
        }
    }
    if (status != CHORUS_SUCCESS) {
        gpu_quiesce(g);
        CHORUS_WARN("gpu", "%s", chorus_last_error());
        chorus__comm_record_error(comm, status);
        return;
    }
    chorus__hang_end(comm);
    chorus__fr_end(comm->flight, CHORUS_SUCCESS);
}

/* Raises the done counter to ticket: every stream waiting for it or less goes on. */
static void gpu_raise(chorus_gpu_comm_t *g, uint64_t ticket)
{
    if (ticket == 0) return;
    /* Everything the op wrote (device memory through its streams, which it waited for)
     * is complete before the stream can see the counter move. */
    atomic_store_explicit((_Atomic uint64_t *)(uintptr_t)g->done, ticket, memory_order_release);
}

static chorus_status_t gpu_proxy_setup(chorus_gpu_comm_t *g)
{
    chorus_status_t status = g->ops->set_device(g->device);

    if (status != CHORUS_SUCCESS)
        return chorus__gpu_error(status, "rank %d: device %d: starting the device proxy",
                                 g->comm->rank, g->device);
    return CHORUS_SUCCESS;
}

static void *gpu_proxy_main(void *arg)
{
    chorus_gpu_comm_t *g = arg;
    chorus_status_t setup;
    chorus_gpu_op_t op;

    chorus__log_set_rank(g->comm->rank);
    setup = gpu_proxy_setup(g);
    if (setup != CHORUS_SUCCESS) chorus__comm_record_error(g->comm, setup);
    for (;;) {
        pthread_mutex_lock(&g->lock);
        while (g->qlen == 0 && !g->stop) pthread_cond_wait(&g->wake, &g->lock);
        if (g->qlen == 0) {
            pthread_mutex_unlock(&g->lock);
            break;
        }
        op = g->q[g->qhead];
        pthread_mutex_unlock(&g->lock);

        gpu_run_op(g, &op);
        gpu_raise(g, op.ticket);
        free(op.list);

        pthread_mutex_lock(&g->lock);
        if (op.start != NULL && g->nevents < g->events_cap) g->events[g->nevents++] = op.start;
        else if (op.start != NULL) g->ops->event_destroy(op.start);
        g->qhead = (g->qhead + 1) % g->qcap;
        if (--g->qlen == 0) pthread_cond_broadcast(&g->idle);
        pthread_mutex_unlock(&g->lock);
    }
    gpu_quiesce(g);
    if (g->ipc != NULL) chorus__ipc_arena_destroy(g->ipc);
    g->ipc = NULL;
    chorus__gpu_staging_free(g);
    if (g->stream_in != NULL) g->ops->stream_destroy(g->stream_in);
    if (g->stream_out != NULL) g->ops->stream_destroy(g->stream_out);
    return NULL;
}

/* ---- Done counters ----
 *
 * A user stream may evaluate its wait on a comm's done counter after the comm is gone
 * (the wait was queued behind slow work), so a counter must outlive its comm. Counters are
 * therefore never freed: a destroyed comm's counter goes back to a process-wide pool, and
 * the next comm takes it and continues its numbering from its current value. A counter
 * only grows, so a late wait, whose ticket is at most that value, is released, and the
 * pinned memory held is bounded by the most comms ever alive at once. */

typedef struct gpu_counter {
    volatile uint64_t *value; /* pinned (malloc_host) */
    struct gpu_counter *next;
} gpu_counter_t;

static pthread_mutex_t gpu_counter_lock = PTHREAD_MUTEX_INITIALIZER;
static gpu_counter_t *gpu_counter_pool;

static chorus_status_t gpu_counter_get(chorus_gpu_comm_t *g)
{
    gpu_counter_t *c;
    void *mem = NULL;
    chorus_status_t status;

    pthread_mutex_lock(&gpu_counter_lock);
    c = gpu_counter_pool;
    if (c != NULL) gpu_counter_pool = c->next;
    pthread_mutex_unlock(&gpu_counter_lock);
    if (c == NULL) {
        c = calloc(1, sizeof *c);
        if (c == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: no memory for a done counter",
                                 g->comm->rank);
        status = g->ops->malloc_host(&mem, sizeof(uint64_t));
        if (status != CHORUS_SUCCESS) {
            free(c);
            return chorus__gpu_error(status, "rank %d: pinned memory for the done counter",
                                     g->comm->rank);
        }
        c->value = mem;
        *c->value = 0;
    }
    g->counter = c;
    g->done = c->value;
    g->tickets = *c->value;
    return CHORUS_SUCCESS;
}

static void gpu_counter_put(chorus_gpu_comm_t *g)
{
    gpu_counter_t *c = g->counter;

    pthread_mutex_lock(&gpu_counter_lock);
    c->next = gpu_counter_pool;
    gpu_counter_pool = c;
    pthread_mutex_unlock(&gpu_counter_lock);
    g->counter = NULL;
    g->done = NULL;
}

/* ---- The comm's device state ---- */

/* How each peer is reached, for the send/recv path: the capabilities of the transport
 * instance that serves it, which do not change once the comm is connected. */
static chorus_status_t gpu_peers_init(chorus_gpu_comm_t *g)
{
    chorus_comm_t comm = g->comm;

    g->peers = calloc((size_t)comm->nranks, sizeof *g->peers);
    if (g->peers == NULL) return CHORUS_ERR_NO_MEMORY;
    for (int p = 0; p < comm->nranks; p++) {
        const chorus_peer_tp_t *pt = &comm->peers[p];
        if (p == comm->rank || pt->ops == NULL) continue;
        g->peers[p].caps = chorus__tp_instance_caps(pt->ops, pt->tp);
        g->peers[p].tp_name = pt->ops->name;
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t gpu_comm_create(chorus_comm_t comm, int device)
{
    chorus_gpu_comm_t *g;
    chorus_status_t status;

    g = calloc(1, sizeof *g);
    if (g == NULL) goto err_nomem;
    g->comm = comm;
    g->ops = comm->gpu_ops;
    g->device = device;
    g->chunk = chorus__config_size("CHORUS_GPU_STAGING_CHUNK", 4u << 20);
    if (g->chunk == 0) g->chunk = 4u << 20;
    CHORUS_CHECK_GOTO(chorus__gpu_path_parse(chorus__config_str("CHORUS_GPU_PATH"), comm->rank,
                                             &g->setting), err_free);
    g->path = g->setting;
    g->qcap = 64;
    g->events_cap = 64;
    g->q = calloc(g->qcap, sizeof *g->q);
    g->events = calloc(g->events_cap, sizeof *g->events);
    if (g->q == NULL || g->events == NULL || gpu_peers_init(g) != CHORUS_SUCCESS)
        goto err_nomem_free;
    CHORUS_CHECK_GOTO(gpu_counter_get(g), err_free);
    /* The proxy's streams are made here, on the caller's thread with the device current,
     * so that the first collective can set up CUDA IPC before anything waits (below). */
    status = g->ops->stream_create(&g->stream_in);
    if (status == CHORUS_SUCCESS) status = g->ops->stream_create(&g->stream_out);
    if (status != CHORUS_SUCCESS) {
        chorus__gpu_error(status, "rank %d: device %d: creating the proxy's streams", comm->rank,
                          device);
        goto err_streams;
    }
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->wake, NULL);
    pthread_cond_init(&g->idle, NULL);
    if (pthread_create(&g->thread, NULL, gpu_proxy_main, g) != 0) {
        status = chorus__error(CHORUS_ERR_SYSTEM, "rank %d: cannot start the device proxy thread",
                               comm->rank);
        goto err_sync;
    }
    comm->gpu = g;
    return CHORUS_SUCCESS;

err_sync:
    pthread_cond_destroy(&g->idle);
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
err_streams:
    if (g->stream_in != NULL) g->ops->stream_destroy(g->stream_in);
    if (g->stream_out != NULL) g->ops->stream_destroy(g->stream_out);
    gpu_counter_put(g);
err_free:
    free(g->peers);
    free(g->events);
    free(g->q);
    free(g);
    return status;
err_nomem_free:
    free(g->peers);
    free(g->events);
    free(g->q);
    free(g);
err_nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: no memory for device collectives",
                         comm->rank);
}

void chorus__gpu_drain(chorus_comm_t comm)
{
    chorus_gpu_comm_t *g = comm->gpu;

    if (g == NULL) return;
    pthread_mutex_lock(&g->lock);
    while (g->qlen > 0) pthread_cond_wait(&g->idle, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

void chorus__gpu_comm_destroy(chorus_comm_t comm)
{
    chorus_gpu_comm_t *g = comm->gpu;

    if (g == NULL) return;
    /* The proxy finishes the queue before it stops; after an abort (or any error) each op
     * left is skipped at once, its counter still raised. */
    pthread_mutex_lock(&g->lock);
    g->stop = 1;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    for (size_t i = 0; i < g->nevents; i++) g->ops->event_destroy(g->events[i]);
    gpu_counter_put(g);
    pthread_cond_destroy(&g->idle);
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g->peers);
    free(g->events);
    free(g->q);
    free(g);
    comm->gpu = NULL;
}

/* ---- Queueing ---- */

/* Appends op (lock held), growing the ring. */
/* Makes room for one more op (lock held). Only the caller's thread pushes, so room made
 * before an op is ordered on its stream is still there when it is pushed. */
static chorus_status_t gpu_make_room(chorus_gpu_comm_t *g)
{
    if (g->qlen == g->qcap) {
        size_t cap = 2 * g->qcap;
        chorus_gpu_op_t *q = malloc(cap * sizeof *q);
        if (q == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: no memory for the device queue",
                                 g->comm->rank);
        for (size_t i = 0; i < g->qlen; i++) q[i] = g->q[(g->qhead + i) % g->qcap];
        free(g->q);
        g->q = q;
        g->qcap = cap;
        g->qhead = 0;
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t gpu_push(chorus_gpu_comm_t *g, const chorus_gpu_op_t *op)
{
    chorus_status_t status = gpu_make_room(g);

    if (status != CHORUS_SUCCESS) return status;
    g->q[(g->qhead + g->qlen) % g->qcap] = *op;
    g->qlen++;
    pthread_cond_signal(&g->wake);
    return CHORUS_SUCCESS;
}

/* Orders op on stream (start event, wait for the done counter) and queues it. Runs with
 * the op's device current, as the event and the stream belong to it. */
static chorus_status_t gpu_enqueue_on(chorus_gpu_comm_t *g, chorus_gpu_op_t *op, void *stream,
                                      const char *opname)
{
    const chorus_gpu_ops_t *ops = g->ops;
    chorus_status_t status;
    void *ev = NULL;

    pthread_mutex_lock(&g->lock);
    status = gpu_make_room(g);
    if (status == CHORUS_SUCCESS && g->nevents > 0) ev = g->events[--g->nevents];
    pthread_mutex_unlock(&g->lock);
    if (status != CHORUS_SUCCESS) return status;
    if (ev == NULL) {
        status = ops->event_create(&ev);
        if (status != CHORUS_SUCCESS)
            return chorus__gpu_error(status, "rank %d: %s: creating an event", g->comm->rank,
                                     opname);
    }
    status = ops->event_record(ev, stream);
    if (status != CHORUS_SUCCESS) {
        chorus__gpu_error(status, "rank %d: %s: recording the start event on the stream",
                          g->comm->rank, opname);
        goto err_event;
    }
    status = ops->stream_wait_flag(stream, g->done, g->tickets + 1);
    if (status != CHORUS_SUCCESS) {
        chorus__gpu_error(status, "rank %d: %s: making the stream wait for the collective",
                          g->comm->rank, opname);
        goto err_event;
    }
    op->start = ev;
    op->ticket = ++g->tickets;
    pthread_mutex_lock(&g->lock);
    status = gpu_push(g, op); /* cannot fail: room was made above */
    pthread_mutex_unlock(&g->lock);
    return status;

err_event:
    ops->event_destroy(ev);
    return status;
}

static chorus_status_t gpu_p2p_choose(chorus_gpu_comm_t *g, chorus_gpu_op_t *op,
                                      const char *opname)
{
    chorus_comm_t comm = g->comm;
    const chorus_p2p_op_t *ops = op->nops > 1 ? op->list : &op->one;
    chorus_status_t status;
    char what[96];

    /* No "#N" yet: a device op is numbered when the proxy runs it. */
    if (op->nops == 1)
        snprintf(what, sizeof what, "%s %s peer %d", opname, ops[0].is_send ? "to" : "from",
                 ops[0].peer);
    else
        snprintf(what, sizeof what, "%s", opname);
    status = chorus__gpu_p2p_path(g->setting, 1, comm->rank, comm->nranks, g->peers, ops,
                                  op->nops, what, &op->path);
    if (status == CHORUS_SUCCESS && op->path == GPU_PATH_DIRECT && !g->logged_direct) {
        g->logged_direct = 1;
        CHORUS_INFO("gpu", "rank %d: %s: device memory handed to the transport (direct)",
                    comm->rank, what);
    }
    return status;
}

/* The common part of every submit: the comm's state, the device, then the queue. A call
 * that was accepted but could not be queued leaves the ranks out of step, so its error
 * becomes the comm's. */
static chorus_status_t gpu_submit(chorus_comm_t comm, chorus_gpu_op_t *op, int device,
                                  void *stream, const char *opname)
{
    const chorus_gpu_ops_t *ops = comm->gpu_ops;
    chorus_status_t status;
    int cur = -1;

    /* Nonblocking host operations in flight use the comm on their own thread: they end
     * first, so that every operation keeps its place in call order. */
    if (comm->async != NULL) chorus__async_drain(comm);
    if (comm->gpu != NULL && device != comm->gpu->device)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: the buffers are on device %d, but this "
                             "communicator's device work runs on device %d",
                             comm->rank, opname, device, comm->gpu->device);
    status = ops->get_device(&cur);
    if (status == CHORUS_SUCCESS && cur != device) status = ops->set_device(device);
    if (status != CHORUS_SUCCESS) {
        chorus__gpu_error(status, "rank %d: %s: selecting device %d", comm->rank, opname, device);
        return chorus__comm_record_error(comm, status);
    }
    if (comm->gpu == NULL) status = gpu_comm_create(comm, device);
    /* The path is chosen at the first device collective, which is the same call on every
     * rank (point-to-point calls before it need not be), on this thread and before its
     * stream is made to wait: setting up CUDA IPC allocates, opens handles and may free
     * device memory, and a free waits for every stream, including one held by our wait. */
    if (status == CHORUS_SUCCESS && op->kind == GPU_OP_COLL && !comm->gpu->path_chosen) {
        chorus__gpu_drain(comm);
        status = gpu_choose_path(comm->gpu, &op->call, opname);
    }
    /* Send/recv choose per op, from the transports of their peers, here so that a forced
     * path that cannot run fails the call that asked for it. */
    if (status == CHORUS_SUCCESS && op->kind == GPU_OP_P2P)
        status = gpu_p2p_choose(comm->gpu, op, opname);
    if (status != CHORUS_SUCCESS) {
        if (cur >= 0 && cur != device) ops->set_device(cur);
        return chorus__comm_record_error(comm, status);
    }
    if (op->kind == GPU_OP_NOP) {
        pthread_mutex_lock(&comm->gpu->lock);
        status = gpu_push(comm->gpu, op);
        pthread_mutex_unlock(&comm->gpu->lock);
    } else {
        status = gpu_enqueue_on(comm->gpu, op, stream, opname);
    }
    if (cur >= 0 && cur != device) ops->set_device(cur);
    if (status != CHORUS_SUCCESS) chorus__comm_record_error(comm, status);
    return status;
}

/* One rank: every collective is a copy of sendbuf to recvbuf (or nothing in place), on
 * the caller's stream, with no proxy. */
static chorus_status_t gpu_single_rank(chorus_comm_t comm, const chorus_coll_call_t *call)
{
    size_t bytes = call->count * chorus_dtype_size(call->dtype);
    chorus_status_t status;

    comm->exec.coll_seq++;
    comm->seq++;
    if (bytes == 0 || call->sendbuf == call->recvbuf) return CHORUS_SUCCESS;
    status = comm->gpu_ops->memcpy_async(call->recvbuf, call->sendbuf, bytes, call->stream);
    if (status != CHORUS_SUCCESS) {
        chorus__gpu_error(status, "rank %d: %s #%llu: copy on the stream", comm->rank,
                          chorus__core_coll_name(call->coll), (unsigned long long)comm->seq);
        return chorus__comm_record_error(comm, status);
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__gpu_coll_submit(chorus_comm_t comm, const chorus_coll_call_t *call)
{
    const char *name = chorus__core_coll_name(call->coll);
    chorus_gpu_op_t op;
    chorus_status_t status;

    status = chorus__comm_check_failed_async(comm, name);
    if (status != CHORUS_SUCCESS) return status;
    if (comm->nranks == 1) return gpu_single_rank(comm, call);
    if (call->count == 0 && comm->gpu == NULL) {
        /* No device work was ever queued: nothing to keep in order with. */
        comm->exec.coll_seq++;
        return CHORUS_SUCCESS;
    }
    memset(&op, 0, sizeof op);
    op.kind = call->count == 0 ? GPU_OP_NOP : GPU_OP_COLL;
    op.call = *call;
    return gpu_submit(comm, &op, call->device, call->stream, name);
}

chorus_status_t chorus__gpu_p2p_submit(chorus_comm_t comm, const chorus_p2p_op_t *ops, size_t n,
                                       int device, void *stream)
{
    const char *opname = n > 1 ? "group_end" : ops[0].is_send ? "send" : "recv";
    chorus_gpu_op_t op;
    chorus_status_t status;

    memset(&op, 0, sizeof op);
    op.kind = GPU_OP_P2P;
    op.nops = n;
    if (n == 1) {
        op.one = ops[0];
    } else {
        op.list = malloc(n * sizeof *op.list);
        if (op.list == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s: no memory for %zu device "
                                 "operations", comm->rank, opname, n);
        memcpy(op.list, ops, n * sizeof *op.list);
    }
    status = gpu_submit(comm, &op, device, stream, opname);
    /* The proxy frees the list of an op it got; this one never reached it. */
    if (status != CHORUS_SUCCESS) free(op.list);
    return status;
}
