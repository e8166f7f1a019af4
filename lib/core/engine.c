/*
 * The schedule engine: a dataflow executor over one rank's schedule.
 *
 * A step becomes ready when its dependency counter reaches zero. Reductions and copies
 * run at once on the calling thread. Sends and receives are posted to the peer's
 * transport, but only in schedule order per (peer, direction), because transports match
 * messages by position: a ready SEND waits until every earlier SEND to the same peer was
 * posted. Completed requests release their successors. Nothing here blocks.
 */
#include "core/engine.h"

#include "kernels.h"
#include "util/clock.h"
#include "util/log.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { DIR_SEND = 0, DIR_RECV = 1 };

static int step_is_comm(const chorus_step_t *st)
{
    return st->kind == CHORUS_STEP_SEND || st->kind == CHORUS_STEP_RECV;
}

static int step_dir(const chorus_step_t *st)
{
    return st->kind == CHORUS_STEP_SEND ? DIR_SEND : DIR_RECV;
}

static void *grow(void *p, size_t n, size_t elem, chorus_status_t *status)
{
    void *q = realloc(p, (n ? n : 1) * elem);
    if (q == NULL) *status = CHORUS_ERR_NO_MEMORY;
    return q == NULL ? p : q;
}

static chorus_status_t reserve(chorus_exec_t *x, uint32_t nsteps, int nranks)
{
    chorus_status_t st = CHORUS_SUCCESS;
    if (nsteps > x->cap_steps) {
        x->deps_left = grow(x->deps_left, nsteps, sizeof(*x->deps_left), &st);
        x->ready = grow(x->ready, nsteps, sizeof(*x->ready), &st);
        x->inflight = grow(x->inflight, nsteps, sizeof(*x->inflight), &st);
        x->finished = grow(x->finished, nsteps, sizeof(*x->finished), &st);
        x->peer_order = grow(x->peer_order, nsteps, sizeof(*x->peer_order), &st);
        x->posted_ok = grow(x->posted_ok, nsteps, sizeof(*x->posted_ok), &st);
        x->reqs = grow(x->reqs, nsteps, sizeof(*x->reqs), &st);
        if (st != CHORUS_SUCCESS) return chorus__error(st, "engine: no memory for %u steps", nsteps);
        x->cap_steps = nsteps;
    }
    if (nranks > x->cap_ranks) {
        x->peer_begin = grow(x->peer_begin, 2 * (size_t)nranks + 1, sizeof(uint32_t), &st);
        x->peer_next = grow(x->peer_next, 2 * (size_t)nranks, sizeof(uint32_t), &st);
        if (st != CHORUS_SUCCESS) return chorus__error(st, "engine: no memory for %d ranks", nranks);
        x->cap_ranks = nranks;
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__exec_start(chorus_exec_t *x, const chorus_sched_t *sched,
                                   void *const bufs[CHORUS_NUM_BUFS], chorus_dtype_t dtype,
                                   chorus_op_t op, const chorus_peer_tp_t *peers,
                                   const chorus_peer_tp_t *tps, int ntps, const char *what)
{
    chorus_status_t status;
    const int nranks = sched->nranks;

    if (!sched->finalized) {
        return chorus__error(CHORUS_ERR_INTERNAL, "%s: engine given an unfinalized schedule", what);
    }
    status = reserve(x, sched->nsteps, nranks);
    if (status != CHORUS_SUCCESS) return status;

    x->sched = sched;
    memcpy(x->bufs, bufs, sizeof(x->bufs));
    x->elem_size = chorus_dtype_size(dtype);
    x->dtype = dtype;
    x->op = op;
    x->peers = peers;
    x->tps = tps;
    x->ntps = ntps;
    x->what = what;
    x->nready = 0;
    x->ninflight = 0;
    x->ndone = 0;
    x->started = 0;
    x->status = CHORUS_SUCCESS;

    /* Bucket the SEND/RECV steps by (peer, direction), keeping schedule order. */
    uint32_t *begin = x->peer_begin;
    memset(begin, 0, (2 * (size_t)nranks + 1) * sizeof(*begin));
    for (uint32_t i = 0; i < sched->nsteps; i++) {
        const chorus_step_t *st = &sched->steps[i];
        x->deps_left[i] = st->ndeps;
        x->posted_ok[i] = 0;
        if (!step_is_comm(st)) continue;
        if (st->peer < 0 || st->peer >= nranks || peers[st->peer].ops == NULL) {
            return chorus__error(CHORUS_ERR_INTERNAL, "%s: step %u names peer %d with no transport",
                                 what, i, st->peer);
        }
        begin[2 * st->peer + step_dir(st) + 1]++;
    }
    for (int k = 0; k < 2 * nranks; k++) begin[k + 1] += begin[k];
    for (int k = 0; k < 2 * nranks; k++) x->peer_next[k] = begin[k];
    for (uint32_t i = 0; i < sched->nsteps; i++) {
        const chorus_step_t *st = &sched->steps[i];
        if (step_is_comm(st)) x->peer_order[x->peer_next[2 * st->peer + step_dir(st)]++] = i;
    }
    for (int k = 0; k < 2 * nranks; k++) x->peer_next[k] = begin[k];
    return CHORUS_SUCCESS;
}

static char *ref_ptr(const chorus_exec_t *x, chorus_ref_t ref)
{
    return (char *)x->bufs[ref.buf] + ref.off * x->elem_size;
}

static chorus_status_t fail(chorus_exec_t *x, chorus_status_t status, uint32_t i)
{
    const chorus_step_t *st = &x->sched->steps[i];
    static const char *kinds[] = {"send to", "recv from", "reduce", "copy"};
    if (step_is_comm(st)) {
        chorus__error_context(status, "%s: step %u (%s peer %d, %llu elements)", x->what, i,
                              kinds[st->kind], st->peer, (unsigned long long)st->count);
    } else {
        chorus__error_context(status, "%s: step %u (%s)", x->what, i, kinds[st->kind]);
    }
    x->status = status;
    return status;
}

/* Posts, in order, the ready SEND/RECV steps at the head of one (peer, direction) queue. */
static chorus_status_t post_queue(chorus_exec_t *x, int peer, int dir)
{
    uint32_t *next = &x->peer_next[2 * peer + dir];
    const uint32_t end = x->peer_begin[2 * peer + dir + 1];
    const chorus_peer_tp_t *p = &x->peers[peer];

    while (*next < end && x->posted_ok[x->peer_order[*next]]) {
        uint32_t i = x->peer_order[*next];
        const chorus_step_t *st = &x->sched->steps[i];
        chorus_tp_req_t *req = &x->reqs[i];
        size_t bytes = st->count * x->elem_size;
        chorus_status_t status;

        memset(req, 0, sizeof(*req));
        if (dir == DIR_SEND) {
            status = p->ops->isend(p->tp, peer, bytes ? ref_ptr(x, st->src) : NULL, bytes, req);
        } else {
            status = p->ops->irecv(p->tp, peer, bytes ? ref_ptr(x, st->dst) : NULL, bytes, req);
        }
        if (status != CHORUS_SUCCESS) return fail(x, status, i);
        x->inflight[x->ninflight++] = i;
        (*next)++;
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t make_ready(chorus_exec_t *x, uint32_t i)
{
    const chorus_step_t *st = &x->sched->steps[i];
    if (!step_is_comm(st)) {
        x->ready[x->nready++] = i;
        return CHORUS_SUCCESS;
    }
    x->posted_ok[i] = 1;
    return post_queue(x, st->peer, step_dir(st));
}

static chorus_status_t complete(chorus_exec_t *x, uint32_t i)
{
    const chorus_step_t *st = &x->sched->steps[i];
    const uint32_t *succ = x->sched->succ + st->succ_begin;
    x->ndone++;
    for (uint32_t k = 0; k < st->nsucc; k++) {
        if (--x->deps_left[succ[k]] == 0) {
            chorus_status_t status = make_ready(x, succ[k]);
            if (status != CHORUS_SUCCESS) return status;
        }
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t run_local(chorus_exec_t *x, uint32_t i)
{
    const chorus_step_t *st = &x->sched->steps[i];
    if (st->count == 0) return CHORUS_SUCCESS;
    if (st->kind == CHORUS_STEP_COPY) {
        chorus_kernel_copy(ref_ptr(x, st->dst), ref_ptr(x, st->src), st->count * x->elem_size);
        return CHORUS_SUCCESS;
    }
    chorus_status_t status = chorus_kernel_reduce(ref_ptr(x, st->dst), ref_ptr(x, st->src),
                                                  ref_ptr(x, st->src2), st->count, x->dtype, x->op);
    return status == CHORUS_SUCCESS ? status : fail(x, status, i);
}

chorus_status_t chorus__exec_progress(chorus_exec_t *x, int *done_p, int *progressed_p)
{
    const chorus_sched_t *s = x->sched;
    chorus_status_t status = x->status;
    int progressed = 0;

    if (status != CHORUS_SUCCESS) goto out;
    if (!x->started) {
        x->started = 1;
        progressed = 1;
        for (uint32_t i = 0; i < s->nsteps && status == CHORUS_SUCCESS; i++) {
            if (s->steps[i].ndeps == 0) status = make_ready(x, i);
        }
        if (status != CHORUS_SUCCESS) goto out;
    }

    for (;;) {
        int moved = 0;
        for (int t = 0; t < x->ntps; t++) {
            status = x->tps[t].ops->progress(x->tps[t].tp);
            if (status != CHORUS_SUCCESS) {
                x->status = chorus__error_context(status, "%s", x->what);
                goto out;
            }
        }
        /* Collect completed transfers first: completing them may post new requests, which
         * append to the in-flight list. */
        uint32_t keep = 0, nfinished = 0;
        for (uint32_t k = 0; k < x->ninflight; k++) {
            uint32_t i = x->inflight[k];
            if (!x->reqs[i].done) {
                x->inflight[keep++] = i;
            } else if (x->reqs[i].status != CHORUS_SUCCESS) {
                status = fail(x, x->reqs[i].status, i);
                goto out;
            } else {
                x->finished[nfinished++] = i;
            }
        }
        x->ninflight = keep;
        for (uint32_t k = 0; k < nfinished; k++) {
            status = complete(x, x->finished[k]);
            if (status != CHORUS_SUCCESS) goto out;
            moved = 1;
        }
        while (x->nready > 0) {
            uint32_t i = x->ready[--x->nready];
            status = run_local(x, i);
            if (status != CHORUS_SUCCESS) goto out;
            status = complete(x, i);
            if (status != CHORUS_SUCCESS) goto out;
            moved = 1;
        }
        if (!moved) break;
        progressed = 1;
    }

out:
    *done_p = status == CHORUS_SUCCESS && x->ndone == s->nsteps;
    if (progressed_p != NULL) *progressed_p = progressed;
    return status;
}

chorus_status_t chorus__exec_wait(chorus_exec_t *x, const chorus_wait_policy_t *policy,
                                  uint64_t deadline_ns, const atomic_int *abort_flag)
{
    const uint64_t spin_ns = policy->spin_ns;
    const uint64_t yield_ns = policy->yield_ns;
    uint64_t idle_since = chorus__now_ns();

    for (;;) {
        int done = 0, progressed = 0;
        chorus_status_t status = chorus__exec_progress(x, &done, &progressed);
        if (status != CHORUS_SUCCESS || done) return status;

        uint64_t now = chorus__now_ns();
        if (progressed) idle_since = now;
        if (abort_flag != NULL && atomic_load_explicit(abort_flag, memory_order_relaxed)) {
            x->status = chorus__error(CHORUS_ERR_ABORTED, "%s: communicator aborted", x->what);
            return x->status;
        }
        if (deadline_ns != UINT64_MAX && now >= deadline_ns) {
            x->status = chorus__error(CHORUS_ERR_TIMEOUT,
                                      "%s: no progress before the deadline (%u of %u steps done, "
                                      "%u transfers pending)",
                                      x->what, x->ndone, x->sched->nsteps, x->ninflight);
            return x->status;
        }
        uint64_t idle = now - idle_since;
        if (idle < spin_ns) continue;
        if (idle < spin_ns + yield_ns || x->ntps == 0) {
            sched_yield();
            continue;
        }
        /* Sleep in each transport in turn, briefly, so that none starves the others. */
        for (int t = 0; t < x->ntps; t++) {
            const chorus_peer_tp_t *p = &x->tps[t];
            status = p->ops->wait(p->tp, x->ntps == 1 ? 1000 : 200);
            if (status != CHORUS_SUCCESS) {
                x->status = chorus__error_context(status, "%s", x->what);
                return x->status;
            }
        }
    }
}

void chorus__exec_fini(chorus_exec_t *x)
{
    free(x->deps_left);
    free(x->ready);
    free(x->inflight);
    free(x->finished);
    free(x->peer_order);
    free(x->peer_begin);
    free(x->peer_next);
    free(x->posted_ok);
    free(x->reqs);
    memset(x, 0, sizeof(*x));
}
