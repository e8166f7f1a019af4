/*
 * Tagged point to point: chorus_tagged_isend/irecv (the semantics are in include/chorus.h).
 *
 * Why a protocol of its own: the transports, like the engine, match a peer's messages to
 * receives in the order they were sent. Matching by tag, or from any source, needs to see a
 * message's envelope before choosing where its bytes land. So every message here is an
 * envelope of fixed size (tg_env_t) followed, on the same ordered channel, by its payload.
 * A tagged comm carries nothing else, so an envelope receive is always posted for every
 * peer, and the service (tg_serve, on the comm's progress thread) decides where each
 * payload goes: into the receive it matches, or into memory of its own (a held message)
 * until a receive matches it. The receiver answers every message once it is matched: ACK,
 * or NACK when datatype or count disagree. A send completes on its answer, so a send that
 * nothing receives ends at its deadline instead of vanishing, and a receive completes once
 * its answer has left (a comm destroyed right after cannot lose it).
 *
 * Threads: the caller's thread validates an operation and hands it over through `inbox`
 * (under `lock`); everything else, the transports included, belongs to the progress thread.
 * The service starts at the first tagged call: until then a peer's messages wait in its
 * transport.
 */
#include "core/tagged.h"
#include "core/async.h"

#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tg_peer_text(int peer, char *buf, size_t len)
{
    if (peer == CHORUS_ANY_SOURCE) snprintf(buf, len, "any rank");
    else snprintf(buf, len, "rank %d", peer);
    return buf;
}

/* "tagged recv #4 from rank 1, tag 7, 10 x float32" */
static void tg_op_text(const tg_op_t *op, char *buf, size_t len)
{
    char peer[24];

    snprintf(buf, len, "tagged %s #%llu %s %s, tag %d, %llu x %s", op->is_send ? "send" : "recv",
             (unsigned long long)op->seq, op->is_send ? "to" : "from",
             tg_peer_text(op->peer, peer, sizeof peer), op->tag, (unsigned long long)op->count,
             chorus_dtype_name(op->dtype));
}

/* Ends op's request; op stays where it is (the caller unlinks and frees it). */
static void tg_end(tg_op_t *op, chorus_status_t status, const char *msg)
{
    if (op->ended) return;
    op->ended = 1;
    chorus__async_complete(op->req, status, msg);
}

static void tg_end_fmt(chorus_comm_t comm, tg_op_t *op, chorus_status_t status, const char *why)
{
    char what[160], msg[CHORUS_COMM_ERRMSG_MAX];

    tg_op_text(op, what, sizeof what);
    snprintf(msg, sizeof msg, "rank %d: %s: %.300s", comm->rank, what, why);
    tg_end(op, status, msg);
}

/* ---- Sending envelopes ---- */

static chorus_status_t tg_answer(chorus_comm_t comm, int peer, int kind, uint64_t id,
                                 const tg_op_t *recv, tg_op_t *then)
{
    tg_peer_t *pp = &comm->tagged->peers[peer];
    tg_ctl_t *c = calloc(1, sizeof *c);

    if (c == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: tagged: no memory to answer rank %d",
                             comm->rank, peer);
    c->env.magic = TG_MAGIC;
    c->env.kind = (uint32_t)kind;
    c->env.id = id;
    if (kind == TG_NACK) {
        c->env.dtype = (int32_t)recv->dtype;
        c->env.count = recv->count;
    }
    c->then = then;
    c->next = pp->ctls;
    pp->ctls = c;
    return comm->peers[peer].ops->isend(comm->peers[peer].tp, peer, &c->env, sizeof c->env,
                                        &c->req);
}

/* A receive matched a message of peer's: it takes the message's source, and ends once the
 * answer (ACK, or NACK with status MISMATCH already set) has left. From this rank itself,
 * the send ends at once instead. */
static chorus_status_t tg_matched(chorus_comm_t comm, tg_op_t *r, int peer, uint64_t id,
                                  tg_op_t *self_send)
{
    int ok = r->status == CHORUS_SUCCESS;

    if (ok && r->source_p != NULL) *r->source_p = peer;
    if (self_send != NULL) {
        if (ok) tg_end(self_send, CHORUS_SUCCESS, "");
        else tg_end_fmt(comm, self_send, CHORUS_ERR_MISMATCH, "this rank's receive differs");
        tg_end(r, r->status, r->msg);
        free(self_send);
        free(r);
        return CHORUS_SUCCESS;
    }
    return tg_answer(comm, peer, ok ? TG_ACK : TG_NACK, id, r, r);
}

/* Sets r->status to MISMATCH when the message (dtype, count) does not fit r. */
static void tg_check_fit(chorus_comm_t comm, tg_op_t *r, int peer, chorus_dtype_t dtype,
                         uint64_t count)
{
    char what[160];

    if (dtype == r->dtype && count == r->count) return;
    tg_op_text(r, what, sizeof what);
    r->status = CHORUS_ERR_MISMATCH;
    snprintf(r->msg, sizeof r->msg, "rank %d: %s: rank %d sent %llu x %s with that tag",
             comm->rank, what, peer, (unsigned long long)count, chorus_dtype_name(dtype));
}

static int tg_fits(const tg_op_t *r, int peer, int tag)
{
    return (r->peer == peer || r->peer == CHORUS_ANY_SOURCE) && r->tag == tag;
}

/* ---- Receives ---- */

static void tg_unlink_held(struct chorus_tagged *t, tg_msg_t *m)
{
    tg_msg_t **pp = &t->held, *prev = NULL;

    while (*pp != m) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    *pp = m->next;
    if (t->held_tail == m) t->held_tail = prev;
    m->next = NULL;
}

static void tg_free_msg(tg_msg_t *m)
{
    if (m->self_send == NULL) free(m->data);
    free(m);
}

static chorus_status_t tg_recv_intake(chorus_comm_t comm, tg_op_t *r)
{
    struct chorus_tagged *t = comm->tagged;
    tg_msg_t *m;

    for (m = t->held; m != NULL; m = m->next)
        if (tg_fits(r, m->peer, m->tag)) break;
    if (m == NULL) {
        r->next = NULL;
        if (t->posted_tail != NULL) t->posted_tail->next = r;
        else t->posted = r;
        t->posted_tail = r;
        return CHORUS_SUCCESS;
    }
    tg_unlink_held(t, m);
    tg_check_fit(comm, r, m->peer, m->dtype, m->count);
    if (!m->arrived) {
        /* Its payload is still arriving: the receive takes it then (or drops it). */
        if (r->status == CHORUS_SUCCESS) m->claimed = r;
        else m->discard = 1;
        if (r->status != CHORUS_SUCCESS) return tg_matched(comm, r, m->peer, m->id, NULL);
        return CHORUS_SUCCESS;
    }
    if (r->status == CHORUS_SUCCESS && m->bytes > 0) memcpy(r->buf, m->data, m->bytes);
    chorus_status_t status = tg_matched(comm, r, m->peer, m->id, m->self_send);
    tg_free_msg(m);
    return status;
}

static tg_msg_t *tg_hold(int peer, const tg_env_t *e)
{
    tg_msg_t *m = calloc(1, sizeof *m);

    if (m == NULL) return NULL;
    m->peer = peer;
    m->tag = e->tag;
    m->dtype = (chorus_dtype_t)e->dtype;
    m->count = e->count;
    m->bytes = e->count * chorus_dtype_size(m->dtype);
    m->id = e->id;
    return m;
}

static void tg_append_held(struct chorus_tagged *t, tg_msg_t *m)
{
    m->next = NULL;
    if (t->held_tail != NULL) t->held_tail->next = m;
    else t->held = m;
    t->held_tail = m;
}

static void tg_unlink_posted(struct chorus_tagged *t, tg_op_t *r, tg_op_t *prev)
{
    if (prev != NULL) prev->next = r->next;
    else t->posted = r->next;
    if (t->posted_tail == r) t->posted_tail = prev;
    r->next = NULL;
}

/* A DATA envelope from peer: where does its payload go? */
static chorus_status_t tg_on_data(chorus_comm_t comm, int peer, const tg_env_t *e)
{
    struct chorus_tagged *t = comm->tagged;
    tg_peer_t *pp = &t->peers[peer];
    const chorus_peer_tp_t *tp = &comm->peers[peer];
    tg_op_t *r, *prev = NULL;
    size_t esize = (e->dtype >= 0 && e->dtype < CHORUS_NUM_DTYPES)
                       ? chorus_dtype_size((chorus_dtype_t)e->dtype) : 0;

    if (esize == 0 || e->tag < 0 || e->count > CHORUS_CORE_MAX_MESSAGE_BYTES / esize ||
        e->id != pp->in_ids + 1)
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: tagged: rank %d sent a bad envelope (dtype %d, tag %d, "
                             "count %llu, message %llu after %llu)",
                             comm->rank, peer, (int)e->dtype, (int)e->tag,
                             (unsigned long long)e->count, (unsigned long long)e->id,
                             (unsigned long long)pp->in_ids);
    pp->in_ids++;
    for (r = t->posted; r != NULL; prev = r, r = r->next)
        if (tg_fits(r, peer, e->tag)) break;
    if (r != NULL) {
        tg_unlink_posted(t, r, prev);
        tg_check_fit(comm, r, peer, (chorus_dtype_t)e->dtype, e->count);
        if (r->status == CHORUS_SUCCESS) {
            if (r->bytes == 0) return tg_matched(comm, r, peer, e->id, NULL);
            r->landing = 1;
            pp->in_payload = 1;
            pp->into = r;
            return tp->ops->irecv(tp->tp, peer, r->buf, r->bytes, &pp->preq);
        }
        /* Disagreeing: answered now, the payload drained and dropped. */
        chorus_status_t status = tg_matched(comm, r, peer, e->id, NULL);
        if (status != CHORUS_SUCCESS) return status;
    }
    tg_msg_t *m = tg_hold(peer, e);
    if (m == NULL || (m->bytes > 0 && (m->data = malloc(m->bytes)) == NULL)) {
        free(m);
        return chorus__error(CHORUS_ERR_NO_MEMORY,
                             "rank %d: tagged: no memory to hold a message of %llu bytes from "
                             "rank %d",
                             comm->rank, (unsigned long long)e->count * esize, peer);
    }
    if (r != NULL) m->discard = 1;
    else tg_append_held(t, m);
    if (m->bytes == 0) {
        m->arrived = 1;
        if (m->discard) tg_free_msg(m);
        return CHORUS_SUCCESS;
    }
    pp->in_payload = 1;
    pp->held = m;
    return tp->ops->irecv(tp->tp, peer, m->data, m->bytes, &pp->preq);
}

/* The payload of peer's current message has arrived. */
static chorus_status_t tg_on_payload(chorus_comm_t comm, int peer)
{
    struct chorus_tagged *t = comm->tagged;
    tg_peer_t *pp = &t->peers[peer];
    tg_op_t *r = pp->into;
    tg_msg_t *m = pp->held;

    pp->in_payload = 0;
    pp->into = NULL;
    pp->held = NULL;
    if (r != NULL) {
        r->landing = 0;
        return tg_matched(comm, r, peer, pp->in.id, NULL);
    }
    m->arrived = 1;
    if (m->discard) {
        tg_free_msg(m);
        return CHORUS_SUCCESS;
    }
    if (m->claimed == NULL) return CHORUS_SUCCESS; /* still held, waiting for its receive */
    r = m->claimed;
    memcpy(r->buf, m->data, m->bytes);
    chorus_status_t status = tg_matched(comm, r, peer, m->id, NULL);
    tg_free_msg(m);
    return status;
}

/* An ACK or NACK envelope from peer for one of our sends. */
static chorus_status_t tg_on_answer(chorus_comm_t comm, int peer, const tg_env_t *e)
{
    tg_op_t *s;

    for (s = comm->tagged->peers[peer].sends; s != NULL; s = s->next)
        if (s->env.id == e->id) break;
    if (s == NULL || s->answer != 0)
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: tagged: rank %d answered message %llu, which is not "
                             "waiting for an answer",
                             comm->rank, peer, (unsigned long long)e->id);
    s->answer = (int)e->kind;
    s->nack_dtype = e->dtype;
    s->nack_count = e->count;
    return CHORUS_SUCCESS;
}

/* Moves peer's incoming channel along; *progressed_p set when something happened. */
static chorus_status_t tg_poll_in(chorus_comm_t comm, int peer, int *progressed_p)
{
    tg_peer_t *pp = &comm->tagged->peers[peer];
    const chorus_peer_tp_t *tp = &comm->peers[peer];
    chorus_status_t status = CHORUS_SUCCESS;

    for (;;) {
        if (pp->in_payload) {
            if (!pp->preq.done) return CHORUS_SUCCESS;
            if (pp->preq.status != CHORUS_SUCCESS) return pp->preq.status;
            status = tg_on_payload(comm, peer);
        } else {
            if (!pp->inreq.done) return CHORUS_SUCCESS;
            if (pp->inreq.status != CHORUS_SUCCESS) return pp->inreq.status;
            tg_env_t e = pp->in;
            if (e.magic != TG_MAGIC)
                return chorus__error(CHORUS_ERR_REMOTE,
                                     "rank %d: tagged: rank %d sent something that is not an "
                                     "envelope (magic %#x)",
                                     comm->rank, peer, e.magic);
            if (e.kind == TG_DATA) status = tg_on_data(comm, peer, &e);
            else if (e.kind == TG_ACK || e.kind == TG_NACK) status = tg_on_answer(comm, peer, &e);
            else
                status = chorus__error(CHORUS_ERR_REMOTE,
                                       "rank %d: tagged: rank %d sent an envelope of kind %u",
                                       comm->rank, peer, e.kind);
        }
        *progressed_p = 1;
        if (status != CHORUS_SUCCESS) return status;
        if (!pp->in_payload) {
            status = tp->ops->irecv(tp->tp, peer, &pp->in, sizeof pp->in, &pp->inreq);
            if (status != CHORUS_SUCCESS) return status;
        }
    }
}

/* ---- Sends ---- */

static chorus_status_t tg_send_intake(chorus_comm_t comm, tg_op_t *s)
{
    struct chorus_tagged *t = comm->tagged;
    chorus_status_t status;

    if (s->peer == comm->rank) {
        /* To itself: a message held (or matched at once) without a copy; the send ends
         * when a receive takes it. */
        tg_env_t e = {TG_MAGIC, TG_DATA, s->tag, (int32_t)s->dtype, s->count, 0};
        tg_msg_t *m = tg_hold(s->peer, &e);
        tg_op_t *r, *prev = NULL;

        if (m == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: tagged: no memory for a send",
                                 comm->rank);
        m->data = s->buf;
        m->arrived = 1;
        m->self_send = s;
        for (r = t->posted; r != NULL; prev = r, r = r->next)
            if (tg_fits(r, s->peer, s->tag)) break;
        if (r == NULL) {
            tg_append_held(t, m);
            return CHORUS_SUCCESS;
        }
        tg_unlink_posted(t, r, prev);
        tg_check_fit(comm, r, s->peer, s->dtype, s->count);
        if (r->status == CHORUS_SUCCESS && s->bytes > 0) memcpy(r->buf, s->buf, s->bytes);
        free(m);
        return tg_matched(comm, r, s->peer, 0, s);
    }
    tg_peer_t *pp = &t->peers[s->peer];
    const chorus_peer_tp_t *tp = &comm->peers[s->peer];
    s->env = (tg_env_t){TG_MAGIC, TG_DATA, s->tag, (int32_t)s->dtype, s->count, ++pp->out_ids};
    s->dreq.done = 1;
    /* The envelope waits for the payload, so both leave in one write where they can. */
    status = s->bytes > 0
                 ? chorus__tp_isend_queued(tp->ops, tp->tp, s->peer, &s->env, sizeof s->env,
                                           &s->ereq)
                 : tp->ops->isend(tp->tp, s->peer, &s->env, sizeof s->env, &s->ereq);
    if (status == CHORUS_SUCCESS && s->bytes > 0)
        status = tp->ops->isend(tp->tp, s->peer, s->buf, s->bytes, &s->dreq);
    /* Listed even on failure: the transport may hold its envelope request. */
    tg_op_t **end = &pp->sends;
    while (*end != NULL) end = &(*end)->next;
    s->next = NULL;
    *end = s;
    return status;
}

/* Ends the sends to peer that have left and been answered; frees those done with. */
static chorus_status_t tg_poll_sends(chorus_comm_t comm, int peer, int *progressed_p)
{
    tg_op_t **sp = &comm->tagged->peers[peer].sends;

    while (*sp != NULL) {
        tg_op_t *s = *sp;
        if (!s->ereq.done || !s->dreq.done) {
            sp = &s->next;
            continue;
        }
        if (s->ereq.status != CHORUS_SUCCESS) return s->ereq.status;
        if (s->dreq.status != CHORUS_SUCCESS) return s->dreq.status;
        if (s->answer == 0) {
            sp = &s->next;
            continue;
        }
        if (s->answer == TG_ACK) {
            tg_end(s, CHORUS_SUCCESS, "");
        } else {
            char why[160];
            snprintf(why, sizeof why, "rank %d's matching receive was %llu x %s", peer,
                     (unsigned long long)s->nack_count,
                     s->nack_dtype >= 0 && s->nack_dtype < CHORUS_NUM_DTYPES
                         ? chorus_dtype_name((chorus_dtype_t)s->nack_dtype) : "?");
            tg_end_fmt(comm, s, CHORUS_ERR_MISMATCH, why);
        }
        *sp = s->next;
        free(s);
        *progressed_p = 1;
    }
    return CHORUS_SUCCESS;
}

/* Frees the answers to peer that have left, ending the receives waiting on them. */
static chorus_status_t tg_poll_ctls(chorus_comm_t comm, int peer, int *progressed_p)
{
    tg_ctl_t **cp = &comm->tagged->peers[peer].ctls;

    while (*cp != NULL) {
        tg_ctl_t *c = *cp;
        if (!c->req.done) {
            cp = &c->next;
            continue;
        }
        if (c->req.status != CHORUS_SUCCESS) return c->req.status;
        if (c->then != NULL) {
            tg_end(c->then, c->then->status, c->then->msg);
            free(c->then);
        }
        *cp = c->next;
        free(c);
        *progressed_p = 1;
    }
    return CHORUS_SUCCESS;
}

/* ---- Deadlines ---- */

static void tg_held_text(struct chorus_tagged *t, const tg_op_t *r, char *buf, size_t len)
{
    size_t at = 0;
    int n = 0;

    buf[0] = '\0';
    for (tg_msg_t *m = t->held; m != NULL && at < len; m = m->next) {
        if (r->peer != CHORUS_ANY_SOURCE && m->peer != r->peer) continue;
        if (n++ == 4) {
            snprintf(buf + at, len - at, ", ...");
            return;
        }
        at += (size_t)snprintf(buf + at, len - at, "%stag %d (%llu x %s) from rank %d",
                               n > 1 ? ", " : "", m->tag, (unsigned long long)m->count,
                               chorus_dtype_name(m->dtype), m->peer);
    }
}

static chorus_status_t tg_check_deadlines(chorus_comm_t comm, uint64_t now)
{
    struct chorus_tagged *t = comm->tagged;
    tg_op_t *r = t->posted, *prev = NULL;
    char why[CHORUS_COMM_ERRMSG_MAX], held[200];

    while (r != NULL) {
        tg_op_t *next = r->next;
        if (now >= r->deadline_ns) {
            tg_held_text(t, r, held, sizeof held);
            snprintf(why, sizeof why, "no message matched it within %g s (held here: %s)",
                     r->timeout_s, held[0] != '\0' ? held : "none");
            tg_unlink_posted(t, r, prev);
            tg_end_fmt(comm, r, CHORUS_ERR_TIMEOUT, why);
            free(r);
        } else {
            prev = r;
        }
        r = next;
    }
    for (int p = 0; p < comm->nranks; p++) {
        for (tg_op_t *s = t->peers[p].sends; s != NULL; s = s->next) {
            if (s->ended || now < s->deadline_ns) continue;
            if (!s->ereq.done || !s->dreq.done) {
                /* The transport still reads the caller's buffer: only failing the comm
                 * (which ends every transport request) can give it back. */
                char what[160];
                tg_op_text(s, what, sizeof what);
                return chorus__error(CHORUS_ERR_TIMEOUT,
                                     "rank %d: %s: its data did not leave within %g s",
                                     comm->rank, what, s->timeout_s);
            }
            snprintf(why, sizeof why, "rank %d posted no receive that matched it within %g s",
                     p, s->timeout_s);
            tg_end_fmt(comm, s, CHORUS_ERR_TIMEOUT, why); /* listed until its answer */
        }
    }
    /* Sends to this rank itself wait among the held messages, pointing at the caller's
     * buffer: one that ends goes, so that no later receive reads the buffer. */
    for (tg_msg_t *m = t->held, *next; m != NULL; m = next) {
        tg_op_t *s = m->self_send;
        next = m->next;
        if (s == NULL || now < s->deadline_ns) continue;
        tg_unlink_held(t, m);
        tg_end_fmt(comm, s, CHORUS_ERR_TIMEOUT, "no receive of this rank matched it in time");
        free(s);
        tg_free_msg(m);
    }
    return CHORUS_SUCCESS;
}

/* ---- The service ---- */

/* Ends every pending request with status and msg. */
static void tg_end_all(chorus_comm_t comm, chorus_status_t status, const char *msg)
{
    struct chorus_tagged *t = comm->tagged;

    pthread_mutex_lock(&t->lock);
    t->dead = 1;
    tg_op_t *in = t->inbox;
    t->inbox = t->inbox_tail = NULL;
    pthread_mutex_unlock(&t->lock);
    for (tg_op_t *op = in, *next; op != NULL; op = next) {
        next = op->next;
        tg_end(op, status, msg);
        free(op);
    }
    for (tg_op_t *r = t->posted, *next; r != NULL; r = next) {
        next = r->next;
        tg_end(r, status, msg);
        free(r);
    }
    t->posted = t->posted_tail = NULL;
    for (tg_msg_t *m = t->held; m != NULL; m = m->next)
        if (m->self_send != NULL) tg_end(m->self_send, status, msg);
    for (int p = 0; p < comm->nranks; p++) {
        tg_peer_t *pp = &t->peers[p];
        for (tg_op_t *s = pp->sends; s != NULL; s = s->next) tg_end(s, status, msg);
        for (tg_ctl_t *c = pp->ctls; c != NULL; c = c->next)
            if (c->then != NULL) tg_end(c->then, status, msg);
        if (pp->into != NULL) tg_end(pp->into, status, msg);
        if (pp->held != NULL && pp->held->claimed != NULL) tg_end(pp->held->claimed, status, msg);
    }
    /* Claimed receives of messages still arriving are reachable only from their peer. */
}

/* Takes what the caller's thread handed over. */
static chorus_status_t tg_take_inbox(chorus_comm_t comm, int *progressed_p)
{
    struct chorus_tagged *t = comm->tagged;
    chorus_status_t status = CHORUS_SUCCESS;
    tg_op_t *op;

    pthread_mutex_lock(&t->lock);
    op = t->inbox;
    t->inbox = t->inbox_tail = NULL;
    pthread_mutex_unlock(&t->lock);
    while (op != NULL) {
        tg_op_t *next = op->next;
        *progressed_p = 1;
        if (status == CHORUS_SUCCESS)
            status = op->is_send ? tg_send_intake(comm, op) : tg_recv_intake(comm, op);
        else {
            tg_end(op, status, chorus_last_error());
            free(op);
        }
        op = next;
    }
    return status;
}

static chorus_status_t tg_round(chorus_comm_t comm, int *progressed_p)
{
    chorus_status_t status = tg_take_inbox(comm, progressed_p);

    for (int i = 0; i < comm->ntps && status == CHORUS_SUCCESS; i++)
        status = comm->tps[i].ops->progress(comm->tps[i].tp);
    for (int p = 0; p < comm->nranks && status == CHORUS_SUCCESS; p++) {
        if (p == comm->rank) continue;
        status = tg_poll_in(comm, p, progressed_p);
        if (status == CHORUS_SUCCESS) status = tg_poll_sends(comm, p, progressed_p);
        if (status == CHORUS_SUCCESS) status = tg_poll_ctls(comm, p, progressed_p);
    }
    return status;
}

static int tg_ctls_pending(chorus_comm_t comm)
{
    for (int p = 0; p < comm->nranks; p++)
        if (comm->tagged->peers[p].ctls != NULL) return 1;
    return 0;
}

/* The service's idle spell: spin, yield, then sleep in a transport for a moment. */
static void tg_idle(chorus_comm_t comm, uint64_t idle_ns, int *turn)
{
    if (idle_ns < comm->wait.spin_ns) return;
    if (idle_ns < comm->wait.spin_ns + comm->wait.yield_ns || comm->ntps == 0) {
        if (comm->ntps == 0 && idle_ns >= comm->wait.spin_ns + comm->wait.yield_ns) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        } else {
            sched_yield();
        }
        return;
    }
    const chorus_peer_tp_t *p = &comm->tps[(*turn)++ % comm->ntps];
    (void)p->ops->wait(p->tp, comm->ntps == 1 ? 500 : 200);
}

void chorus__tagged_serve(chorus_comm_t comm)
{
    struct chorus_tagged *t = comm->tagged;
    chorus_status_t status = CHORUS_SUCCESS;
    uint64_t idle_since = chorus__now_ns(), next_deadlines = 0;
    int turn = 0;

    for (int p = 0; p < comm->nranks && status == CHORUS_SUCCESS; p++) {
        if (p == comm->rank) continue;
        status = comm->peers[p].ops->irecv(comm->peers[p].tp, p, &t->peers[p].in,
                                           sizeof t->peers[p].in, &t->peers[p].inreq);
    }
    while (status == CHORUS_SUCCESS) {
        if (atomic_load_explicit(&t->closing, memory_order_acquire)) {
            /* Answers already given must reach their senders: a little time to leave. */
            uint64_t until = chorus__now_ns() + 1000000000ull;
            int ignored = 0;
            while (status == CHORUS_SUCCESS && tg_ctls_pending(comm) && chorus__now_ns() < until) {
                status = tg_round(comm, &ignored);
                sched_yield();
            }
            status = chorus__error(CHORUS_ERR_ABORTED,
                                   "rank %d: tagged: the communicator was destroyed", comm->rank);
            tg_end_all(comm, status, chorus_last_error());
            return;
        }
        if (atomic_load_explicit(&comm->abort_flag, memory_order_relaxed)) {
            status = chorus__error(CHORUS_ERR_ABORTED, "rank %d: tagged: the communicator was "
                                   "aborted", comm->rank);
            break;
        }
        int progressed = 0;
        status = tg_round(comm, &progressed);
        uint64_t now = chorus__now_ns();
        if (status == CHORUS_SUCCESS && now >= next_deadlines) {
            status = tg_check_deadlines(comm, now);
            next_deadlines = now + 1000000; /* every millisecond is plenty for deadlines */
        }
        if (progressed) idle_since = now;
        else if (status == CHORUS_SUCCESS) tg_idle(comm, now - idle_since, &turn);
    }
    /* A lost peer, garbage on the wire, no memory, an abort: the comm fails. */
    char msg[CHORUS_COMM_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", chorus_last_error());
    if (status != CHORUS_ERR_ABORTED) {
        chorus__comm_record_error(comm, status);
        for (int i = 0; i < comm->ntps; i++)
            chorus__tp_leave(comm->tps[i].ops, comm->tps[i].tp, status);
    }
    tg_end_all(comm, status, msg);
}

void chorus__tagged_close(chorus_comm_t comm)
{
    if (comm->tagged != NULL) atomic_store_explicit(&comm->tagged->closing, 1, memory_order_release);
}

void chorus__tagged_free(chorus_comm_t comm)
{
    struct chorus_tagged *t = comm->tagged;

    if (t == NULL) return;
    /* Every request was ended by the service; the transports are closed: free the rest. */
    for (tg_op_t *r = t->posted, *next; r != NULL; r = next) {
        next = r->next;
        free(r);
    }
    for (int p = 0; p < comm->nranks; p++) {
        tg_peer_t *pp = &t->peers[p];
        for (tg_op_t *s = pp->sends, *next; s != NULL; s = next) {
            next = s->next;
            free(s);
        }
        for (tg_ctl_t *c = pp->ctls, *next; c != NULL; c = next) {
            next = c->next;
            free(c->then);
            free(c);
        }
        free(pp->into);
        /* A message still arriving that no receive claimed is in the held list (freed
         * below); a claimed or discarded one is only here. */
        if (pp->held != NULL && (pp->held->claimed != NULL || pp->held->discard)) {
            free(pp->held->claimed);
            tg_free_msg(pp->held);
        }
    }
    for (tg_msg_t *m = t->held, *next; m != NULL; m = next) {
        next = m->next;
        free(m->self_send);
        tg_free_msg(m);
    }
    pthread_mutex_destroy(&t->lock);
    free(t->peers);
    free(t);
    comm->tagged = NULL;
}
