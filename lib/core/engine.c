/*
 * The schedule engine: a dataflow executor over one rank's schedule.
 *
 * A step becomes ready when its dependency counter reaches zero. Reductions and copies
 * run at once on the calling thread. Sends and receives are posted to the peer's
 * transport, but only in schedule order per (peer, direction), because transports match
 * messages by position: a ready SEND waits until every earlier SEND to the same peer was
 * posted. Completed requests release their successors. Nothing here blocks.
 *
 * A signed execution (chorus__exec_sign) first sends its call signature to every peer it
 * exchanges data with and posts a receive for theirs. The channels are ordered, so a
 * peer's signature completes before any of its data; a data receive from a peer is not
 * released to its successors until that peer's signature matched, so nothing a mismatched
 * peer sent is ever used, and any error seen once a mismatched signature is in is reported
 * as the mismatch it is (a data length error is its typical consequence).
 */
#include "core/engine.h"

#include "algo/algo.h"
#include "kernels.h"
#include "trace/trace.h"
#include "util/clock.h"
#include "util/log.h"

#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DIR_SEND = 0, DIR_RECV = 1 };

/* How long a wait idles before it looks at what peers outside the schedule sent (sig_peek),
 * and how often after that: a mismatch that no schedule exchange can see shows within this. */
#define EXEC_PEEK_NS (20 * 1000 * 1000ull)
#define EXEC_TRACE_WAIT_NS (10 * 1000ull)

/* Per peer of a signed execution. */
enum { SIG_SEND_OPEN = 1, SIG_RECV_OPEN = 2, SIG_OK = 4, SIG_SEND_LATER = 8 };

_Static_assert(sizeof(chorus_exec_sig_t) == 56, "the signature is 56 bytes without padding");

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
    if (x->trace != NULL && nsteps > x->cap_trace) {
        x->trace_t0 = grow(x->trace_t0, nsteps, sizeof(*x->trace_t0), &st);
        if (st != CHORUS_SUCCESS) return chorus__error(st, "engine: no memory for %u steps", nsteps);
        x->cap_trace = nsteps;
    }
    if (nranks > x->cap_ranks) {
        x->peer_begin = grow(x->peer_begin, 2 * (size_t)nranks + 1, sizeof(uint32_t), &st);
        x->peer_next = grow(x->peer_next, 2 * (size_t)nranks, sizeof(uint32_t), &st);
        if (st != CHORUS_SUCCESS) return chorus__error(st, "engine: no memory for %d ranks", nranks);
        x->cap_ranks = nranks;
    }
    return CHORUS_SUCCESS;
}

/* ---- Call signatures ---- */

void chorus__exec_sign(chorus_exec_t *x, const chorus_exec_sig_t *sig)
{
    x->sig_next = *sig;
    x->sig_next.magic = CHORUS_EXEC_SIG_MAGIC;
    x->sig_peer_next = NULL;
    x->sig_armed = 1;
}

void chorus__exec_sign_p2p(chorus_exec_t *x, const chorus_exec_sig_t *sigs)
{
    memset(&x->sig_next, 0, sizeof x->sig_next);
    x->sig_next.magic = CHORUS_EXEC_SIG_MAGIC;
    x->sig_next.coll = CHORUS_EXEC_SIG_P2P;
    x->sig_peer_next = sigs;
    x->sig_armed = 1;
}

void chorus__exec_sign_peers(chorus_exec_t *x, const chorus_exec_sig_t *sig,
                             const chorus_exec_sig_t *sigs)
{
    chorus__exec_sign(x, sig);
    x->sig_peer_next = sigs;
}

int chorus__exec_waits_for_sig(const chorus_exec_t *x, int p)
{
    return x->sig_on && p >= 0 && p < x->sched->nranks && x->sig_state != NULL &&
           (x->sig_state[p] & SIG_RECV_OPEN) && !(x->sig_state[p] & SIG_OK);
}

/* Our signature for peer p. */
static const chorus_exec_sig_t *sig_ours(const chorus_exec_t *x, int p)
{
    return x->sig_peer != NULL ? &x->sig_peer[p] : &x->sig;
}

/* Lists the peers the schedule exchanges data with (either direction, so that a rank that
 * only sends, like a broadcast's root, learns of a mismatch too). */
static chorus_status_t sig_setup(chorus_exec_t *x, int nranks)
{
    chorus_status_t st = CHORUS_SUCCESS;

    if (nranks > x->cap_sig_ranks) {
        x->sig_rx = grow(x->sig_rx, (size_t)nranks, sizeof(*x->sig_rx), &st);
        x->sig_reqs = grow(x->sig_reqs, 2 * (size_t)nranks, sizeof(*x->sig_reqs), &st);
        x->sig_state = grow(x->sig_state, (size_t)nranks, sizeof(*x->sig_state), &st);
        x->sig_peers = grow(x->sig_peers, (size_t)nranks, sizeof(*x->sig_peers), &st);
        if (st != CHORUS_SUCCESS) {
            x->sig_on = 0;
            return chorus__error(st, "%s: no memory for the signatures of %d ranks", x->what,
                                 nranks);
        }
        x->cap_sig_ranks = nranks;
    }
    x->sig_later = 0;
    for (int p = 0; p < nranks; p++) {
        x->sig_state[p] = 0;
        if (x->peer_begin[2 * p + 2] > x->peer_begin[2 * p]) x->sig_peers[x->nsig_peers++] = p;
    }
    return CHORUS_SUCCESS;
}

/* Appends to buf (at *len_p of cap) like snprintf, never past the end. */
static void sig_append(char *buf, size_t cap, size_t *len_p, const char *fmt, ...)
    CHORUS_PRINTF(4, 5);
static void sig_append(char *buf, size_t cap, size_t *len_p, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*len_p + 1 >= cap) return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *len_p, cap - *len_p, fmt, ap);
    va_end(ap);
    if (n > 0) *len_p = *len_p + (size_t)n < cap ? *len_p + (size_t)n : cap - 1;
}

/* One side of a point-to-point signature, as "send #4 (1000 x float32) and recv (999 x
 * int32)", for the first operation of each direction and how many there are. */
static void sig_describe_p2p(const chorus_exec_sig_t *s, char *buf, size_t cap)
{
    size_t len = 0;
    const char *and = "";

    if (s->root > 0) {
        const char *dt = chorus_dtype_name((chorus_dtype_t)s->dtype);
        sig_append(buf, cap, &len, "send #%llu (%llu x %s%s)", (unsigned long long)s->opnum,
                   (unsigned long long)s->count, dt != NULL ? dt : "?",
                   s->root > 1 ? ", then more" : "");
        and = " and ";
    }
    if (s->nranks > 0) {
        const char *dt = chorus_dtype_name((chorus_dtype_t)s->op);
        if (and[0] == '\0')
            sig_append(buf, cap, &len, "recv #%llu ", (unsigned long long)s->opnum);
        else
            sig_append(buf, cap, &len, "%srecv ", and);
        sig_append(buf, cap, &len, "(%llu x %s%s)", (unsigned long long)s->chunk_count,
                   dt != NULL ? dt : "?", s->nranks > 1 ? ", then more" : "");
    }
    if (s->root <= 0 && s->nranks <= 0) sig_append(buf, cap, &len, "nothing");
}

/* "allreduce #17 (count 1000, float32, sum)": what s says. The fields that only shape the
 * schedule (algorithm, chunk, ranks) are shown when they differ from o's in calls of the
 * same collective, since they are noise otherwise. */
static void sig_describe(const chorus_exec_sig_t *s, const chorus_exec_sig_t *o, char *buf,
                         size_t cap)
{
    const char *dt = chorus_dtype_name((chorus_dtype_t)s->dtype);
    const char *op = chorus_op_name((chorus_op_t)s->op);
    const char *algo = chorus__algo_name((chorus_algo_t)(s->algo & ~CHORUS_EXEC_SIG_DEVICE));
    const int same = s->coll == o->coll;
    const char *sep = " (";
    size_t len = 0;

    if (s->coll == CHORUS_EXEC_SIG_P2P) {
        sig_describe_p2p(s, buf, cap);
        return;
    }
    sig_append(buf, cap, &len, "%s%s #%llu", (s->algo & CHORUS_EXEC_SIG_DEVICE) ? "device " : "",
               chorus__coll_name((chorus_coll_t)s->coll), (unsigned long long)s->opnum);
    if (s->coll == CHORUS_COLL_ALLTOALLV) {
        /* The pair's counts: sig_report words them from both ends when they differ. */
        sig_append(buf, cap, &len, "%s%llu elements up and %llu down, ", sep,
                   (unsigned long long)s->count, (unsigned long long)s->p2p_hash);
        if (dt != NULL) sig_append(buf, cap, &len, "%s", dt);
        else sig_append(buf, cap, &len, "dtype %u", s->dtype);
        sep = ", ";
    } else if (s->coll == CHORUS_COLL_ALLGATHERV || s->coll == CHORUS_COLL_REDUCE_SCATTERV) {
        sig_append(buf, cap, &len, "%s%llu elements in all, counts hash %08llx, ", sep,
                   (unsigned long long)s->count, (unsigned long long)(s->p2p_hash >> 32));
        if (dt != NULL) sig_append(buf, cap, &len, "%s", dt);
        else sig_append(buf, cap, &len, "dtype %u", s->dtype);
        sep = ", ";
    } else if (s->coll != CHORUS_COLL_BARRIER) {
        sig_append(buf, cap, &len, "%scount %llu, ", sep, (unsigned long long)s->count);
        if (dt != NULL) sig_append(buf, cap, &len, "%s", dt);
        else sig_append(buf, cap, &len, "dtype %u", s->dtype);
        sep = ", ";
    }
    if (s->coll == CHORUS_COLL_ALLREDUCE || s->coll == CHORUS_COLL_REDUCE_SCATTER ||
        s->coll == CHORUS_COLL_REDUCE || s->coll == CHORUS_COLL_REDUCE_SCATTERV) {
        if (op != NULL) sig_append(buf, cap, &len, "%s%s", sep, op);
        else sig_append(buf, cap, &len, "%sop %u", sep, s->op);
        sep = ", ";
    }
    if (s->coll == CHORUS_COLL_BROADCAST || s->coll == CHORUS_COLL_REDUCE ||
        s->coll == CHORUS_COLL_GATHER || s->coll == CHORUS_COLL_SCATTER ||
        (same && s->root != o->root)) {
        sig_append(buf, cap, &len, "%sroot %d", sep, (int)s->root);
        sep = ", ";
    }
    if (same && (s->algo != o->algo || s->chunk_count != o->chunk_count)) {
        if (algo != NULL) sig_append(buf, cap, &len, "%s%s", sep, algo);
        else sig_append(buf, cap, &len, "%salgorithm %u", sep, s->algo);
        sig_append(buf, cap, &len, " chunk %llu", (unsigned long long)s->chunk_count);
        sep = ", ";
    }
    if (same && s->nranks != o->nranks) {
        sig_append(buf, cap, &len, "%s%d ranks", sep, (int)s->nranks);
        sep = ", ";
    }
    if (sep[0] == ',') sig_append(buf, cap, &len, ")");
}

/* Nonzero when peer p's signature differs from ours in anything but opnum (for
 * point-to-point: when its sends are not our receives, or its receives not our sends). */
static int sig_differs(const chorus_exec_t *x, int p)
{
    const chorus_exec_sig_t *a = sig_ours(x, p), *b = &x->sig_rx[p];

    if (a->coll == CHORUS_EXEC_SIG_P2P || b->coll == CHORUS_EXEC_SIG_P2P)
        return a->magic != b->magic || a->coll != b->coll || a->root != b->nranks ||
               a->nranks != b->root || a->dtype != b->op || a->op != b->dtype ||
               a->count != b->chunk_count || a->chunk_count != b->count ||
               (a->p2p_hash >> 32) != (b->p2p_hash & 0xffffffffu) ||
               (a->p2p_hash & 0xffffffffu) != (b->p2p_hash >> 32);
    return a->magic != b->magic || a->coll != b->coll || a->dtype != b->dtype ||
           a->op != b->op || a->algo != b->algo || a->root != b->root ||
           a->nranks != b->nranks || a->count != b->count || a->chunk_count != b->chunk_count ||
           a->seq != b->seq || a->p2p_hash != b->p2p_hash;
}

/* Fails x with CHORUS_ERR_MISMATCH naming both signatures. */
static chorus_status_t sig_report(chorus_exec_t *x, int p)
{
    const chorus_exec_sig_t *ours = sig_ours(x, p), *theirs = &x->sig_rx[p];
    char a[160], b[160];

    if (theirs->magic != CHORUS_EXEC_SIG_MAGIC) {
        x->status = chorus__error(CHORUS_ERR_MISMATCH,
                                  "%s: rank %d sent something else where its call signature "
                                  "was due: it is not running a collective with this rank",
                                  x->what, p);
        return x->status;
    }
    sig_describe(ours, theirs, a, sizeof a);
    sig_describe(theirs, ours, b, sizeof b);
    if (ours->coll == CHORUS_EXEC_SIG_P2P || theirs->coll == CHORUS_EXEC_SIG_P2P) {
        x->status = chorus__error(CHORUS_ERR_MISMATCH, "%s with rank %d, but rank %d called %s",
                                  a, p, p, b);
    } else if (ours->coll == CHORUS_COLL_ALLTOALLV && theirs->coll == CHORUS_COLL_ALLTOALLV &&
               ours->seq == theirs->seq && (ours->count != theirs->count ||
                                            ours->p2p_hash != theirs->p2p_hash)) {
        /* count goes from the lower rank of the pair to the higher, p2p_hash back. */
        const int up = x->sched->rank < p;
        const unsigned long long my_send = up ? ours->count : ours->p2p_hash;
        const unsigned long long my_recv = up ? ours->p2p_hash : ours->count;
        const unsigned long long its_send = up ? theirs->p2p_hash : theirs->count;
        const unsigned long long its_recv = up ? theirs->count : theirs->p2p_hash;
        x->status = chorus__error(CHORUS_ERR_MISMATCH,
                                  "%s: the counts with rank %d differ: this rank sends it %llu "
                                  "and expects %llu from it, but rank %d sends %llu and "
                                  "expects %llu", x->what, p, my_send, my_recv, p, its_send,
                                  its_recv);
    } else if (ours->seq != theirs->seq) {
        x->status = chorus__error(CHORUS_ERR_MISMATCH,
                                  "%s but rank %d called %s as its collective call %llu, this "
                                  "rank's call %llu (a rank skipped or added a call)",
                                  a, p, b, (unsigned long long)theirs->seq,
                                  (unsigned long long)ours->seq);
    } else {
        x->status = chorus__error(CHORUS_ERR_MISMATCH, "%s but rank %d called %s", a, p, b);
    }
    return x->status;
}

/* Posts our signature to peer p (dir DIR_SEND) or the receive of its signature (DIR_RECV). */
static chorus_status_t sig_post_one(chorus_exec_t *x, int p, int dir)
{
    const chorus_peer_tp_t *t = &x->peers[p];
    chorus_tp_req_t *req = &x->sig_reqs[2 * p + dir];
    chorus_status_t status;

    memset(req, 0, sizeof(*req));
    /* Queued: it leaves with the first data to p in one write (tcp), so that a small call
     * costs no extra wake-up of the peer. */
    if (dir == DIR_SEND)
        status = chorus__tp_isend_queued(t->ops, t->tp, p, sig_ours(x, p), sizeof x->sig, req);
    else
        status = t->ops->irecv(t->tp, p, &x->sig_rx[p], sizeof x->sig_rx[p], req);
    if (status != CHORUS_SUCCESS) {
        x->status = chorus__error_context(status, "%s: exchanging call signatures with rank %d",
                                          x->what, p);
        return status;
    }
    x->sig_state[p] |= dir == DIR_SEND ? SIG_SEND_OPEN : SIG_RECV_OPEN;
    x->sig_open++;
    return CHORUS_SUCCESS;
}

/* Sends our signature to, and posts the receive of theirs from, every peer; before any
 * data, so each is the first message of its channel in this execution. To a peer that the
 * schedule sends data to, the signature goes just before the first data (post_queue), so
 * that the two leave in one write (isend_queued) even when local steps come first. */
static chorus_status_t sig_post(chorus_exec_t *x)
{
    for (int k = 0; k < x->nsig_peers; k++) {
        const int p = x->sig_peers[k];
        chorus_status_t status = CHORUS_SUCCESS;
        if (x->peer_begin[2 * p + DIR_SEND + 1] > x->peer_begin[2 * p + DIR_SEND]) {
            x->sig_state[p] |= SIG_SEND_LATER;
            x->sig_later++;
        } else
            status = sig_post_one(x, p, DIR_SEND);
        if (status != CHORUS_SUCCESS) return status;
        status = sig_post_one(x, p, DIR_RECV);
        if (status != CHORUS_SUCCESS) return status;
    }
    return CHORUS_SUCCESS;
}

/* On an error: a mismatched signature that already arrived explains it (a length error
 * on data is what a mismatch typically causes), so it is reported instead: x->status is
 * then CHORUS_ERR_MISMATCH with both calls in the message, and so is the result. Else
 * returns status with the message untouched (which may be a mismatch too: a transport's
 * length error, or a peer that left because of one). */
static chorus_status_t sig_blame(chorus_exec_t *x, chorus_status_t status)
{
    if (!x->sig_on) return status;
    for (int k = 0; k < x->nsig_peers; k++) {
        const int p = x->sig_peers[k];
        const chorus_tp_req_t *r = &x->sig_reqs[2 * p + 1];
        if ((x->sig_state[p] & SIG_RECV_OPEN) && r->done && r->status == CHORUS_SUCCESS &&
            sig_differs(x, p))
            return sig_report(x, p);
    }
    return status;
}

/* Nonzero when sig_blame just reported a signature mismatch (its message stands). */
static int sig_reported(const chorus_exec_t *x, chorus_status_t blamed)
{
    return blamed == CHORUS_ERR_MISMATCH && x->status == CHORUS_ERR_MISMATCH;
}

/* Collects completed signature transfers and checks what arrived. */
static chorus_status_t sig_poll(chorus_exec_t *x)
{
    for (int k = 0; k < x->nsig_peers; k++) {
        const int p = x->sig_peers[k];
        chorus_tp_req_t *reqs = &x->sig_reqs[2 * p];
        uint8_t *state = &x->sig_state[p];

        if ((*state & SIG_RECV_OPEN) && reqs[1].done) {
            if (reqs[1].status != CHORUS_SUCCESS) {
                chorus_status_t status = sig_blame(x, reqs[1].status);
                if (sig_reported(x, status)) return status;
                x->status = chorus__error_context(status, "%s: receiving the call signature of "
                                                  "rank %d", x->what, p);
                return x->status;
            }
            if (sig_differs(x, p)) return sig_report(x, p);
            *state = (uint8_t)((*state & ~SIG_RECV_OPEN) | SIG_OK);
            x->sig_open--;
        }
        if ((*state & SIG_SEND_OPEN) && reqs[0].done) {
            if (reqs[0].status != CHORUS_SUCCESS) {
                chorus_status_t status = sig_blame(x, reqs[0].status);
                if (sig_reported(x, status)) return status;
                x->status = chorus__error_context(status, "%s: sending our call signature to "
                                                  "rank %d", x->what, p);
                return x->status;
            }
            *state &= (uint8_t)~SIG_SEND_OPEN;
            x->sig_open--;
        }
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

    /* An armed signature belongs to this execution only, even if it fails to start. */
    x->sig_on = x->sig_armed;
    x->sig_armed = 0;
    x->sig_peer = x->sig_on ? x->sig_peer_next : NULL;
    if (x->sig_on) x->sig = x->sig_next;
    x->nsig_peers = 0;
    x->sig_open = 0;
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
    return x->sig_on ? sig_setup(x, nranks) : CHORUS_SUCCESS;
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
        chorus_status_t blamed = sig_blame(x, status);
        if (sig_reported(x, blamed)) return x->status;
    }
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
        if (dir == DIR_SEND && x->sig_on && (x->sig_state[peer] & SIG_SEND_LATER)) {
            x->sig_state[peer] &= (uint8_t)~SIG_SEND_LATER;
            x->sig_later--;
            status = sig_post_one(x, peer, DIR_SEND);
            if (status != CHORUS_SUCCESS) return status;
        }
        if (dir == DIR_SEND) {
            status = p->ops->isend(p->tp, peer, bytes ? ref_ptr(x, st->src) : NULL, bytes, req);
        } else {
            status = p->ops->irecv(p->tp, peer, bytes ? ref_ptr(x, st->dst) : NULL, bytes, req);
        }
        if (status != CHORUS_SUCCESS) return fail(x, status, i);
        if (x->trace != NULL) x->trace_t0[i] = chorus__now_ns();
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

/* A REDUCE_N step: its sources, stride apart, folded or summed exactly (exact_divisor). */
static chorus_status_t engine_reduce_n(chorus_exec_t *x, const chorus_step_t *st)
{
    const char *base = ref_ptr(x, st->src);
    const void **src;

    if (st->nsrc > x->cap_srcs) {
        const void **v = realloc((void *)x->srcs, st->nsrc * sizeof *v);
        if (v == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "%s: no memory for %u sources", x->what,
                                 st->nsrc);
        x->srcs = v;
        x->cap_srcs = st->nsrc;
    }
    src = x->srcs;
    for (uint32_t k = 0; k < st->nsrc; k++) src[k] = base + k * st->stride * x->elem_size;
    if (x->exact_divisor > 0)
        return chorus_kernel_reduce_exact(ref_ptr(x, st->dst), src, (int)st->nsrc, st->count,
                                          x->dtype, x->exact_divisor);
    return chorus_kernel_reduce_multi(ref_ptr(x, st->dst), src, (int)st->nsrc, st->count,
                                      x->dtype, x->op);
}

static chorus_status_t run_local(chorus_exec_t *x, uint32_t i)
{
    const chorus_step_t *st = &x->sched->steps[i];
    const size_t bytes = st->count * x->elem_size;
    chorus_status_t status = CHORUS_SUCCESS;
    uint64_t t0 = 0;

    if (st->count == 0) return CHORUS_SUCCESS;
    if (x->trace != NULL) t0 = chorus__now_ns();
    if (st->kind == CHORUS_STEP_COPY) {
        chorus_kernel_copy(ref_ptr(x, st->dst), ref_ptr(x, st->src), bytes);
    } else if (st->kind == CHORUS_STEP_REDUCE_N) {
        status = engine_reduce_n(x, st);
    } else {
        status = chorus_kernel_reduce(ref_ptr(x, st->dst), ref_ptr(x, st->src),
                                      ref_ptr(x, st->src2), st->count, x->dtype, x->op);
    }
    if (x->trace != NULL)
        chorus__trace_add(x->trace, st->kind == CHORUS_STEP_COPY ? CHORUS_TEV_COPY
                                                                 : CHORUS_TEV_REDUCE,
                          -1, bytes, t0, chorus__now_ns());
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
        if (x->sig_on) {
            status = sig_post(x);
            if (status != CHORUS_SUCCESS) goto out;
        }
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
                status = sig_blame(x, status);
                if (!sig_reported(x, status))
                    x->status = chorus__error_context(status, "%s", x->what);
                goto out;
            }
        }
        if (x->sig_open > 0) {
            int open = x->sig_open;
            status = sig_poll(x);
            if (status != CHORUS_SUCCESS) goto out;
            moved = x->sig_open != open;
        }
        /* Collect completed transfers first: completing them may post new requests, which
         * append to the in-flight list. A receive from a peer whose signature has not
         * matched yet stays in the list: its data must not be used before. */
        uint32_t keep = 0, nfinished = 0;
        for (uint32_t k = 0; k < x->ninflight; k++) {
            uint32_t i = x->inflight[k];
            const chorus_step_t *st = &s->steps[i];
            if (!x->reqs[i].done ||
                (x->sig_on && x->reqs[i].status == CHORUS_SUCCESS &&
                 st->kind == CHORUS_STEP_RECV && !(x->sig_state[st->peer] & SIG_OK))) {
                x->inflight[keep++] = i;
            } else if (x->reqs[i].status != CHORUS_SUCCESS) {
                status = fail(x, x->reqs[i].status, i);
                goto out;
            } else {
                x->finished[nfinished++] = i;
                if (x->trace != NULL)
                    chorus__trace_add(x->trace,
                                      st->kind == CHORUS_STEP_SEND ? CHORUS_TEV_SEND
                                                                   : CHORUS_TEV_RECV,
                                      st->peer, st->count * x->elem_size, x->trace_t0[i],
                                      chorus__now_ns());
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
    /* Data that waits on other ranks does not hold its signature back: a peer whose call
     * differs may be waiting for it (and not for the data) before anything can move. */
    for (int k = 0; x->sig_later > 0 && k < x->nsig_peers && status == CHORUS_SUCCESS; k++) {
        const int p = x->sig_peers[k];
        if (!(x->sig_state[p] & SIG_SEND_LATER)) continue;
        x->sig_state[p] &= (uint8_t)~SIG_SEND_LATER;
        x->sig_later--;
        status = sig_post_one(x, p, DIR_SEND);
    }

out:
    *done_p = status == CHORUS_SUCCESS && x->ndone == s->nsteps && x->sig_open == 0;
    if (progressed_p != NULL) *progressed_p = progressed;
    return status;
}

int chorus__coll_needs_peer(chorus_coll_t coll, int root, int me, int p)
{
    switch (coll) {
    case CHORUS_COLL_ALLREDUCE:
    case CHORUS_COLL_ALLGATHER:
    case CHORUS_COLL_REDUCE_SCATTER:
    case CHORUS_COLL_ALLTOALL:
    case CHORUS_COLL_ALLGATHERV:
    case CHORUS_COLL_REDUCE_SCATTERV:
    case CHORUS_COLL_ALLTOALLV:
    case CHORUS_COLL_BARRIER: return 1;
    case CHORUS_COLL_REDUCE: return root == me;
    /* The root waits for every rank; a non-root's one message waits for the root. */
    case CHORUS_COLL_GATHER:
    case CHORUS_COLL_SCATTER: return root == me || root == p;
    case CHORUS_COLL_BROADCAST: return root == p;
    default: return 0;
    }
}

/* A rank that has waited a while looks at what the peers outside its schedule sent: a
 * peer whose call differs may have sent its signature to a rank that is not waiting for it
 * (three ranks can each wait for the next that way). A collective signature there with our
 * collective number that does not match ours is the mismatch. So is a point-to-point
 * signature from a peer that had not made this collective yet, when this rank's part needs
 * the peer: the peer waits in that send or receive for this rank's match, which comes only
 * after this collective, which waits for the peer (a send waits for the receiver's
 * signature, so the peer cannot have gone past it). */
static chorus_status_t sig_peek(chorus_exec_t *x)
{
    const int nranks = x->sched->nranks, me = x->sched->rank;

    if (!x->sig_on) return CHORUS_SUCCESS;
    if (x->stall_check != NULL) {
        chorus_status_t status = x->stall_check(x->stall_arg, x->what);
        if (status != CHORUS_SUCCESS) {
            x->status = status;
            return status;
        }
    }
    if (x->sig.coll == CHORUS_EXEC_SIG_P2P) return CHORUS_SUCCESS;
    for (int p = 0; p < nranks; p++) {
        const chorus_peer_tp_t *t = &x->peers[p];
        chorus_exec_sig_t *rx = &x->sig_rx[p];

        if (p == me || t->ops == NULL || (x->sig_state[p] & SIG_RECV_OPEN)) continue;
        if (!chorus__tp_peek(t->ops, t->tp, p, rx, sizeof *rx)) continue;
        if (rx->magic != CHORUS_EXEC_SIG_MAGIC) continue;
        if (rx->coll != CHORUS_EXEC_SIG_P2P && rx->seq == x->sig.seq && sig_differs(x, p))
            return sig_report(x, p);
        if (rx->coll == CHORUS_EXEC_SIG_P2P && rx->seq < x->sig.seq &&
            chorus__coll_needs_peer((chorus_coll_t)x->sig.coll, x->sig.root, me, p))
            return sig_report(x, p);
    }
    return CHORUS_SUCCESS;
}

/* ---- Timeout message ---- */

/* One kind of pending transfer, for the timeout message. */
typedef struct {
    uint8_t send; /* else a receive */
    uint8_t sig;  /* a call signature, else data */
    int32_t peer;
} pending_t;

/* Adds (send, sig, peer) to list (n used of cap) unless there; returns the new n, or -1
 * when it did not fit. */
static int note_pending(pending_t *list, int n, int cap, int send, int sig, int peer)
{
    for (int k = 0; k < n; k++)
        if (list[k].send == send && list[k].sig == sig && list[k].peer == peer) return n;
    if (n == cap) return -1;
    list[n].send = (uint8_t)send;
    list[n].sig = (uint8_t)sig;
    list[n].peer = peer;
    return n + 1;
}

/* Fails x with CHORUS_ERR_TIMEOUT naming what it waited for: the ranks of the pending
 * receives (else of the sends), the earliest step in flight, and the pending transfers. */
static chorus_status_t exec_timeout(chorus_exec_t *x, double waited_s)
{
    enum { CAP = 6 };
    pending_t list[CAP];
    int n = 0, more = 0, total = (int)x->ninflight, nwho = 0;
    uint32_t first = UINT32_MAX;
    char who[96] = "", detail[256] = "";
    size_t wl = 0, dl = 0;

    for (int k = 0; k < x->nsig_peers; k++) {
        const int p = x->sig_peers[k];
        for (int send = 0; send < 2; send++) {
            if (!(x->sig_state[p] & (send ? SIG_SEND_OPEN : SIG_RECV_OPEN))) continue;
            int m = note_pending(list, n, CAP, send, 1, p);
            more |= m < 0;
            n = m < 0 ? n : m;
            total++;
        }
    }
    /* The step named is the earliest receive in flight (else the earliest send): what it
     * waits for is what holds the others up. */
    for (uint32_t k = 0; k < x->ninflight; k++) {
        const uint32_t i = x->inflight[k];
        const chorus_step_t *st = &x->sched->steps[i];
        const int send = st->kind == CHORUS_STEP_SEND;
        int m = note_pending(list, n, CAP, send, 0, st->peer);
        more |= m < 0;
        n = m < 0 ? n : m;
        if (first == UINT32_MAX ||
            (send ? x->sched->steps[first].kind == CHORUS_STEP_SEND && i < first
                  : x->sched->steps[first].kind == CHORUS_STEP_SEND || i < first))
            first = i;
    }
    /* Receives name whom we wait for; with none pending, the peers of the sends. */
    for (int send = 0; send < 2 && nwho == 0; send++) {
        for (int k = 0; k < n; k++) {
            int dup = 0;
            for (int j = 0; j < k; j++) dup |= list[j].send == send && list[j].peer == list[k].peer;
            if (list[k].send != send || dup) continue;
            sig_append(who, sizeof who, &wl, "%s%d", nwho++ ? ", " : "", (int)list[k].peer);
        }
    }
    if (nwho == 0) {
        x->status = chorus__error(CHORUS_ERR_TIMEOUT,
                                  "%s: timed out after %.3g s with no transfer pending (%u of %u "
                                  "steps done)", x->what, waited_s, x->ndone, x->sched->nsteps);
        return x->status;
    }
    if (first != UINT32_MAX)
        sig_append(detail, sizeof detail, &dl, "%s step %u of %u; ",
                   x->sched->steps[first].kind == CHORUS_STEP_SEND ? "send" : "recv", first,
                   x->sched->nsteps);
    else
        sig_append(detail, sizeof detail, &dl, "call signatures, before step 0 of %u; ",
                   x->sched->nsteps);
    sig_append(detail, sizeof detail, &dl, "%d transfer%s pending", total, total == 1 ? "" : "s");
    for (int k = 0; k < n; k++)
        sig_append(detail, sizeof detail, &dl, "%s%s %d%s", k ? ", " : ": ",
                   list[k].send ? "send to" : "recv from", (int)list[k].peer,
                   list[k].sig ? " (signature)" : "");
    if (more) sig_append(detail, sizeof detail, &dl, ", ...");
    x->status = chorus__error(CHORUS_ERR_TIMEOUT,
                              "%s: timed out after %.3g s waiting for rank%s %s (%s)", x->what,
                              waited_s, nwho > 1 ? "s" : "", who, detail);
    return x->status;
}

chorus_status_t chorus__exec_wait(chorus_exec_t *x, const chorus_wait_policy_t *policy,
                                  uint64_t deadline_ns, const atomic_int *abort_flag)
{
    const uint64_t spin_ns = policy->spin_ns;
    const uint64_t yield_ns = policy->yield_ns;
    const uint64_t t0 = chorus__now_ns();
    uint64_t idle_since = t0, idle_last = t0, next_peek = t0 + EXEC_PEEK_NS;

    for (;;) {
        int done = 0, progressed = 0;
        chorus_status_t status = chorus__exec_progress(x, &done, &progressed);
        /* A traced wait: from the first pass that found nothing to do to the last one,
         * when that spell lasted at least EXEC_TRACE_WAIT_NS. */
        if (x->trace != NULL && (progressed || done) &&
            idle_last - idle_since >= EXEC_TRACE_WAIT_NS)
            chorus__trace_add(x->trace, CHORUS_TEV_WAIT, -1, 0, idle_since, idle_last);
        if (status != CHORUS_SUCCESS || done) return status;

        uint64_t now = chorus__now_ns();
        if (progressed) idle_since = idle_last = now;
        else idle_last = now;
        if (abort_flag != NULL && atomic_load_explicit(abort_flag, memory_order_relaxed)) {
            x->status = chorus__error(CHORUS_ERR_ABORTED, "%s: communicator aborted", x->what);
            return x->status;
        }
        if (deadline_ns != UINT64_MAX && now >= deadline_ns)
            return exec_timeout(x, (double)(now - t0) * 1e-9);
        uint64_t idle = now - idle_since;
        if (idle < spin_ns) continue;
        if (idle >= EXEC_PEEK_NS && now >= next_peek) {
            next_peek = now + EXEC_PEEK_NS;
            status = sig_peek(x);
            if (status != CHORUS_SUCCESS) return status;
        }
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
    free((void *)x->srcs);
    free(x->sig_rx);
    free(x->sig_reqs);
    free(x->sig_state);
    free(x->sig_peers);
    free(x->trace_t0);
    memset(x, 0, sizeof(*x));
}
