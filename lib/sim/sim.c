/*
 * The replay of every rank's schedule on a fabric (sim.h says what is modelled).
 *
 * Schedules are built with lib/algo exactly as a communicator builds them (sim_build.c),
 * then kept in a compact form: per step its kind, its peer relative to the rank
 * ((peer - rank) mod n), its bytes, its successors, how many steps it waits for, and, for a SEND or RECV, its
 * ordinal among the rank's messages to or from that relative peer. Ranks whose compact
 * schedules are equal share one ("classes"); what a run changes (dependencies left, a
 * RECV posted or its data arrived) lives in per-rank arrays of 5 bytes per step.
 *
 * Matching: the k-th SEND from a to b is the k-th RECV on b from a, as in the engine; b's
 * class keeps its RECV steps sorted by relative peer and ordinal, so the match is a lookup.
 *
 * Events are kept in a binary heap ordered by time, then by the order they were made, so
 * a run is deterministic. Flows are the network's (flow.h); between two events the rates
 * do not change.
 */
#include "sim/sim.h"

#include "sim/flow.h"
#include "sim/sim_int.h"
#include "util/clock.h"
#include "util/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double chorus__sim_bus_factor(chorus_coll_t coll, int n)
{
    switch (coll) {
    case CHORUS_COLL_ALLREDUCE: return n > 1 ? 2.0 * (n - 1) / n : 0;
    case CHORUS_COLL_ALLGATHER:
    case CHORUS_COLL_REDUCE_SCATTER:
    case CHORUS_COLL_ALLTOALL: return n > 1 ? (double)(n - 1) / n : 0;
    case CHORUS_COLL_BROADCAST:
    case CHORUS_COLL_REDUCE: return 1;
    default: return 0;
    }
}

/* ---- Events ---- */

static int ev_before(const sim_ev_t *x, const sim_ev_t *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static int fifo_push(sim_t *s, const sim_ev_t *e)
{
    if (s->flen == s->fcap) {
        size_t cap = s->fcap ? 2 * s->fcap : 64;
        sim_ev_t *v = malloc(cap * sizeof *v);
        if (v == NULL) return -1;
        for (size_t k = 0; k < s->flen; k++) v[k] = s->fifo[(s->fhead + k) % s->fcap];
        sim_mem(s, (long)((cap - s->fcap) * sizeof *v));
        free(s->fifo);
        s->fifo = v;
        s->fcap = cap;
        s->fhead = 0;
    }
    s->fifo[(s->fhead + s->flen++) % s->fcap] = *e;
    return 0;
}

static int ev_push(sim_t *s, double t, int type, uint32_t rank, uint32_t step)
{
    size_t i;
    sim_ev_t e = {t, s->seq++, rank, step, (uint8_t)type};

    /* Due now: after everything pending (all of it is due now or later, and what is due now
     * was made before), so the queue keeps the heap's order. */
    if (t == s->now) return fifo_push(s, &e);
    if (s->nheap == s->capheap) {
        size_t cap = s->capheap ? 2 * s->capheap : 64;
        sim_ev_t *h = realloc(s->heap, cap * sizeof *h);
        if (h == NULL) return -1;
        sim_mem(s, (long)((cap - s->capheap) * sizeof *h));
        s->heap = h;
        s->capheap = cap;
    }
    i = s->nheap++;
    while (i > 0 && ev_before(&e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = e;
    return 0;
}

static sim_ev_t ev_pop(sim_t *s)
{
    sim_ev_t top = s->heap[0], last = s->heap[--s->nheap];
    size_t i = 0;

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->nheap) break;
        if (c + 1 < s->nheap && ev_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!ev_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->nheap > 0) s->heap[i] = last;
    return top;
}

/* The time of the next event (INFINITY: none). */
static double ev_next_t(const sim_t *s)
{
    double t = s->flen > 0 ? s->fifo[s->fhead].t : INFINITY;
    return s->nheap > 0 && s->heap[0].t < t ? s->heap[0].t : t;
}

/* The next event, from the queue or the heap, by time and then by the order made. */
static sim_ev_t ev_next(sim_t *s)
{
    sim_ev_t e;
    if (s->flen > 0 && (s->nheap == 0 || ev_before(&s->fifo[s->fhead], &s->heap[0]))) {
        e = s->fifo[s->fhead];
        s->fhead = (s->fhead + 1) % s->fcap;
        s->flen--;
    } else {
        e = ev_pop(s);
    }
    s->now = e.t;
    return e;
}

/* ---- The run ---- */

static chorus_status_t sim_counts(const chorus_sim_args_t *a, int n, size_t esize,
                                  uint64_t *count_p)
{
    uint64_t elems = a->bytes / esize;

    if (a->bytes % esize != 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sim: %llu bytes are not whole %zu-byte "
                             "elements", (unsigned long long)a->bytes, esize);
    switch (a->coll) {
    case CHORUS_COLL_ALLGATHER:
    case CHORUS_COLL_REDUCE_SCATTER:
    case CHORUS_COLL_ALLTOALL:
        if (elems % (uint64_t)n != 0)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "sim: %s of %llu bytes does not split over %d ranks",
                                 chorus__coll_name(a->coll), (unsigned long long)a->bytes, n);
        *count_p = elems / (uint64_t)n;
        return CHORUS_SUCCESS;
    case CHORUS_COLL_BARRIER: *count_p = 0; return CHORUS_SUCCESS;
    default: *count_p = elems; return CHORUS_SUCCESS;
    }
}

/* 1 when rank r's message step i goes to or comes from another host. */
static int sim_inter(const sim_t *s, const sim_class_t *c, int r, uint32_t i)
{
    return s->host[r] != s->host[(r + c->relpeer[i]) % s->n];
}

/* The reduce cost of a dtype relative to its bytes at the float32 rate: half-precision
 * sums convert each element both ways. */
static double sim_reduce_scale(chorus_dtype_t dt)
{
    return dt == CHORUS_FLOAT16 || dt == CHORUS_BFLOAT16 ? 3.0 : 1.0;
}

double chorus__sim_cpu(const sim_t *s, const sim_class_t *c, int r, uint32_t i)
{
    const double b = (double)c->bytes[i];
    double t = 0;
    switch (c->kind[i]) {
    case CHORUS_STEP_SEND: t = s->msg_s + b * s->send_s[sim_inter(s, c, r, i)]; break;
    case CHORUS_STEP_RECV:
        t = s->msg_s + b * s->recv_s[sim_inter(s, c, r, i)];
        if (s->stretch[r] > 1) t += s->wait_s;
        break;
    case CHORUS_STEP_REDUCE:
    case CHORUS_STEP_REDUCE_N: /* its bytes count every source but one (sim_build.c) */
        t = s->step_s + b * s->cache * sim_reduce_scale(s->a->dtype) / s->reduce_Bps;
        break;
    case CHORUS_STEP_COPY: t = s->step_s + b * s->cache / s->copy_Bps; break;
    }
    return t * s->stretch[r];
}

uint64_t chorus__sim_recv_source(const sim_t *s, uint32_t r, uint32_t i)
{
    const sim_class_t *c = s->classes[s->cls[r]];
    uint32_t a = (uint32_t)((r + (uint32_t)c->relpeer[i]) % (uint32_t)s->n);
    uint32_t k = chorus__sim_class_msg(s->classes[s->cls[a]], 0,
                                       (int32_t)((r + s->n - a) % (uint32_t)s->n), c->ordinal[i]);
    return k == UINT32_MAX ? SIM_NONE : sim_g(s, a, k);
}

static chorus_status_t sim_done(sim_t *s, uint32_t r, uint32_t i, double t)
{
    const sim_class_t *c = s->classes[s->cls[r]];
    if (t > s->finish) s->finish = t;
    if (s->r_end != NULL) s->r_end[sim_g(s, r, i)] = t;
    for (uint32_t k = c->succ_begin[i]; k < c->succ_begin[i + 1]; k++) {
        uint32_t j = c->succ[k];
        if (--s->deps_left[sim_g(s, r, j)] == 0) {
            if (s->r_rcause != NULL) s->r_rcause[sim_g(s, r, j)] = sim_g(s, r, i);
            if (ev_push(s, t, EV_READY, r, j)) return CHORUS_ERR_NO_MEMORY;
        }
    }
    return CHORUS_SUCCESS;
}

/* A recording's note that step g became ready at t, held back last by trigger (or by its
 * own last dependency when trigger is g). */
static void sim_note_ready(sim_t *s, uint64_t g, double t, uint64_t trigger)
{
    if (s->r_ready == NULL) return;
    s->r_ready[g] = t;
    if (trigger != g) {
        s->r_rcause[g] = trigger;
        s->r_why[g] = SIM_READY_ORDER;
    } else {
        s->r_why[g] = s->r_rcause[g] == SIM_NONE ? SIM_READY_START : SIM_READY_DEP;
    }
}

/* Gives rank r's CPU to its step i from t on, for its CPU time; a recording notes what held
 * its start back (start_why: SIM_START_READY, or SIM_START_DATA for a RECV whose data came
 * last, when the CPU was free). */
static void sim_cpu_take(sim_t *s, const sim_class_t *c, uint32_t r, uint32_t i, double t,
                         int start_why)
{
    double start = t > s->cpu_free[r] ? t : s->cpu_free[r];
    uint64_t g = sim_g(s, r, i);

    if (s->r_cpu != NULL) {
        s->r_cpu[g] = start;
        if (start > t) {
            s->r_why[g] |= SIM_START_CPU;
            s->r_scause[g] = s->cpu_owner[r];
        } else {
            s->r_why[g] |= (uint8_t)start_why;
        }
        s->cpu_owner[r] = g;
    }
    s->cpu_free[r] = start + chorus__sim_cpu(s, c, (int)r, i);
}

static size_t pairs_hash(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

/* The pair a -> b, made on first use (NULL: no memory). */
static sim_pair_t *pairs_get(sim_t *s, uint32_t a, uint32_t b)
{
    sim_pairs_t *p = &s->pairs;
    const uint64_t key = ((uint64_t)a << 32 | b) + 1;
    size_t i;

    if (2 * (p->used + 1) > p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        sim_pair_t *v = calloc(cap, sizeof *v);
        if (v == NULL) return NULL;
        for (size_t k = 0; k < p->cap; k++) {
            if (p->slot[k].key == 0) continue;
            for (i = pairs_hash(p->slot[k].key, cap); v[i].key != 0; i = (i + 1) & (cap - 1)) {
            }
            v[i] = p->slot[k];
        }
        sim_mem(s, (long)((cap - p->cap) * sizeof *v));
        free(p->slot);
        p->slot = v;
        p->cap = cap;
    }
    for (i = pairs_hash(key, p->cap); p->slot[i].key != 0; i = (i + 1) & (p->cap - 1))
        if (p->slot[i].key == key) return &p->slot[i];
    p->slot[i].key = key;
    p->slot[i].active = SIM_NONE;
    p->used++;
    return &p->slot[i];
}

static int pair_push(sim_t *s, sim_pair_t *q, uint64_t g)
{
    if (q->qlen == q->qcap) {
        uint32_t cap = q->qcap ? 2 * q->qcap : 4;
        uint64_t *v = malloc(cap * sizeof *v);
        if (v == NULL) return -1;
        for (uint32_t k = 0; k < q->qlen; k++) v[k] = q->q[(q->qhead + k) % q->qcap];
        sim_mem(s, (long)((cap - q->qcap) * sizeof *v));
        free(q->q);
        q->q = v;
        q->qcap = cap;
        q->qhead = 0;
    }
    q->q[(q->qhead + q->qlen++) % q->qcap] = g;
    return 0;
}

static uint64_t pair_pop(sim_pair_t *q)
{
    uint64_t g;
    if (q->qlen == 0) return SIM_NONE;
    g = q->q[q->qhead];
    q->qhead = (q->qhead + 1) % q->qcap;
    q->qlen--;
    return g;
}

/* The RECV on rank b that the SEND i of rank a (class ca) meets. */
static chorus_status_t sim_match(const sim_t *s, uint32_t a, const sim_class_t *ca, uint32_t i,
                                 uint32_t *b_p, uint32_t *j_p)
{
    uint32_t b = (uint32_t)((a + (uint32_t)ca->relpeer[i]) % (uint32_t)s->n);
    const sim_class_t *cb = s->classes[s->cls[b]];
    uint32_t j = chorus__sim_class_msg(cb, 1, (int32_t)((a + s->n - b) % (uint32_t)s->n),
                                       ca->ordinal[i]);

    if (j == UINT32_MAX || cb->bytes[j] != ca->bytes[i])
        return chorus__error(CHORUS_ERR_INTERNAL, "sim: rank %u's send #%u to rank %u has no "
                             "receive of its size", a, ca->ordinal[i], b);
    *b_p = b;
    *j_p = j;
    return CHORUS_SUCCESS;
}

/* A RECV posted and with its data (the later of the two at t; start_why: which): the
 * receiver's software cost, then done. Streaming, the data is its first bytes, and it is
 * done once its CPU part is and its last bytes are there (EV_RCPU, EV_TAIL). */
static chorus_status_t sim_recv_done(sim_t *s, const sim_class_t *c, uint32_t r, uint32_t i,
                                     double t, int start_why)
{
    sim_cpu_take(s, c, r, i, t, start_why);
    return ev_push(s, s->cpu_free[r], s->streams ? EV_RCPU : EV_DONE, r, i)
               ? CHORUS_ERR_NO_MEMORY
               : CHORUS_SUCCESS;
}

/* Streaming: the first bytes of rank r's SEND i, whose CPU part starts at start, reach
 * the receiver the send's software cost and the path's latency later. */
static chorus_status_t sim_first_bytes(sim_t *s, const sim_class_t *c, uint32_t r, uint32_t i,
                                       double start)
{
    uint32_t b, j;
    const int32_t *links;
    int nl;
    double lat;
    chorus_status_t st = sim_match(s, r, c, i, &b, &j);

    if (st == CHORUS_SUCCESS)
        st = chorus__fabric_route(s->fab, s->frank[r], s->frank[b], &links, &nl, &lat);
    if (st != CHORUS_SUCCESS) return st;
    if (s->r_scause != NULL) s->r_scause[sim_g(s, b, j)] = sim_g(s, r, i);
    return ev_push(s, start + s->msg_s + lat, EV_FIRST, b, j) ? CHORUS_ERR_NO_MEMORY
                                                             : CHORUS_SUCCESS;
}

/* Posts message j of rank r at t: a SEND pays its CPU part and then leaves as a flow; a
 * RECV waits for its data, or takes it. */
static chorus_status_t sim_post_one(sim_t *s, const sim_class_t *c, uint32_t r, uint32_t j,
                                    double t, uint64_t trigger)
{
    uint8_t *fl = &s->flags[sim_g(s, r, j)];

    sim_note_ready(s, sim_g(s, r, j), t, trigger);
    if (c->kind[j] == CHORUS_STEP_SEND) {
        const double start = t > s->cpu_free[r] ? t : s->cpu_free[r];
        sim_cpu_take(s, c, r, j, t, SIM_START_READY);
        if (s->streams) {
            chorus_status_t st = sim_first_bytes(s, c, r, j, start);
            if (st != CHORUS_SUCCESS) return st;
        }
        return ev_push(s, s->cpu_free[r], EV_FLOW, r, j) ? CHORUS_ERR_NO_MEMORY : CHORUS_SUCCESS;
    }
    *fl |= F_POSTED;
    return (*fl & (s->streams ? F_FIRST : F_ARRIVED)) ? sim_recv_done(s, c, r, j, t, SIM_START_READY)
                                                      : CHORUS_SUCCESS;
}

/* Message i of rank r is ready at t: it, and the ready ones behind it to the same peer and
 * in the same direction, are posted, in schedule order as the engine does. */
static chorus_status_t sim_post(sim_t *s, const sim_class_t *c, uint32_t r, uint32_t i, double t)
{
    const int d = c->kind[i] == CHORUS_STEP_RECV;
    const uint32_t slot = chorus__sim_class_slot(c, d, c->relpeer[i]);
    const uint32_t *order = c->msg_step[d] + c->slot_begin[d][slot];
    const uint32_t count = c->slot_begin[d][slot + 1] - c->slot_begin[d][slot];
    uint32_t *next = &s->post_next[s->pbase[r] + (d ? c->nslots[0] : 0) + slot];

    s->flags[sim_g(s, r, i)] |= F_READY;
    while (*next < count && (s->flags[sim_g(s, r, order[*next])] & F_READY)) {
        chorus_status_t st = sim_post_one(s, c, r, order[(*next)++], t, sim_g(s, r, i));
        if (st != CHORUS_SUCCESS) return st;
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t sim_event(sim_t *s, const sim_ev_t *e)
{
    const uint32_t r = e->rank, i = e->step;
    const sim_class_t *c = s->classes[s->cls[r]];
    uint8_t *fl = &s->flags[sim_g(s, r, i)];
    chorus_status_t st;

    s->events++;
    switch (e->type) {
    case EV_READY:
        if (c->kind[i] == CHORUS_STEP_SEND || c->kind[i] == CHORUS_STEP_RECV)
            return sim_post(s, c, r, i, e->t);
        sim_note_ready(s, sim_g(s, r, i), e->t, sim_g(s, r, i));
        sim_cpu_take(s, c, r, i, e->t, SIM_START_READY);
        return ev_push(s, s->cpu_free[r], EV_DONE, r, i) ? CHORUS_ERR_NO_MEMORY : CHORUS_SUCCESS;
    case EV_ARRIVE:
        *fl |= F_ARRIVED;
        if (s->streams)
            return ev_push(s, e->t + s->msg_s, EV_TAIL, r, i) ? CHORUS_ERR_NO_MEMORY
                                                                : CHORUS_SUCCESS;
        return (*fl & F_POSTED) ? sim_recv_done(s, c, r, i, e->t, SIM_START_DATA) : CHORUS_SUCCESS;
    case EV_FIRST:
        *fl |= F_FIRST;
        return (*fl & F_POSTED) ? sim_recv_done(s, c, r, i, e->t, SIM_START_FIRST)
                                : CHORUS_SUCCESS;
    case EV_RCPU:
    case EV_TAIL:
        *fl |= e->type == EV_RCPU ? F_RCPU : F_TAIL;
        return (*fl & F_RCPU) && (*fl & F_TAIL) ? sim_done(s, r, i, e->t) : CHORUS_SUCCESS;
    case EV_FLOW: {
        uint32_t b, j;
        const int32_t *links;
        int nl;
        double lat;
        st = sim_match(s, r, c, i, &b, &j);
        if (st == CHORUS_SUCCESS)
            st = chorus__fabric_route(s->fab, s->frank[r], s->frank[b], &links, &nl, &lat);
        if (st != CHORUS_SUCCESS) return st;
        sim_pair_t *pair = pairs_get(s, r, b);
        if (pair == NULL) return CHORUS_ERR_NO_MEMORY;
        if (!(*fl & F_QUEUED)) {
            /* The send's CPU part is done. Through socket buffers (or a ring) with room,
             * the send is done now, while its bytes still wait for the wire (the tcp
             * transport's isend). */
            s->messages++;
            const double buf = s->sendbuf[s->host[r] != s->host[b]];
            if (buf > 0 && pair->inflight + (double)c->bytes[i] <= buf) {
                pair->inflight += (double)c->bytes[i];
                *fl |= F_EAGER;
                if (ev_push(s, e->t, EV_DONE, r, i)) return CHORUS_ERR_NO_MEMORY;
            }
            if (pair->active != SIM_NONE) {
                *fl |= F_QUEUED;
                return pair_push(s, pair, sim_g(s, r, i)) ? CHORUS_ERR_NO_MEMORY : CHORUS_SUCCESS;
            }
            pair->active = sim_g(s, r, i);
        }
        if (chorus__flownet_advance(s->net, e->t, NULL, 0) < 0) return CHORUS_ERR_NO_MEMORY;
        return chorus__flownet_add(s->net, e->t, links, nl, (double)c->bytes[i],
                                   (uint64_t)r << 32 | i);
    }
    case EV_DONE: return sim_done(s, r, i, e->t);
    }
    return CHORUS_ERR_INTERNAL;
}

/* Flows that ended at t: their SEND is done, their data arrives a path's latency later. */
static chorus_status_t sim_flows_end(sim_t *s, double t)
{
    uint64_t tags[256];
    int got;

    while ((got = chorus__flownet_advance(s->net, t, tags, 256)) > 0) {
        for (int k = 0; k < got; k++) {
            uint32_t a = (uint32_t)(tags[k] >> 32), i = (uint32_t)tags[k], b, j;
            const int32_t *links;
            int nl;
            double lat;
            chorus_status_t st = sim_match(s, a, s->classes[s->cls[a]], i, &b, &j);
            if (st == CHORUS_SUCCESS)
                st = chorus__fabric_route(s->fab, s->frank[a], s->frank[b], &links, &nl, &lat);
            if (st != CHORUS_SUCCESS) return st;
            if (s->r_flow != NULL) {
                /* Streaming, the receive's cause was set by its first bytes. */
                if (!s->streams) s->r_scause[sim_g(s, b, j)] = sim_g(s, a, i);
                s->r_flow[sim_g(s, a, i)] = t;
            }
            sim_pair_t *pair = pairs_get(s, a, b);
            uint64_t next;
            if (pair == NULL) return CHORUS_ERR_NO_MEMORY;
            if (s->flags[sim_g(s, a, i)] & F_EAGER) {
                pair->inflight -= (double)s->classes[s->cls[a]]->bytes[i];
            } else if (ev_push(s, t, EV_DONE, a, i)) {
                return CHORUS_ERR_NO_MEMORY;
            }
            if (ev_push(s, t + lat, EV_ARRIVE, b, j)) return CHORUS_ERR_NO_MEMORY;
            /* The pair's next message takes the wire now: it is the pair's active one at
             * once, so that no send of the same pair that is due at t goes before it. */
            next = pair_pop(pair);
            pair->active = next;
            if (next != SIM_NONE && ev_push(s, t, EV_FLOW, a, sim_g_step(s, next)))
                return CHORUS_ERR_NO_MEMORY;
        }
    }
    return got < 0 ? CHORUS_ERR_NO_MEMORY : CHORUS_SUCCESS;
}

static int cmp_use(const void *p, const void *q)
{
    const chorus_sim_link_use_t *x = p, *y = q;
    return x->util < y->util ? 1 : x->util > y->util ? -1 : 0;
}

static chorus_status_t sim_links(sim_t *s, chorus_sim_result_t *res)
{
    const int nl = chorus__fabric_nlinks(s->fab);
    const double *carried = chorus__flownet_link_bytes(s->net);
    chorus_sim_link_use_t *all;
    int used = 0;

    res->links = NULL;
    for (int l = 0; l < nl; l++) used += carried[l] > 0;
    res->nlinks_used = used;
    if (s->a->top_links <= 0 || used == 0) return CHORUS_SUCCESS;
    all = malloc((size_t)used * sizeof *all);
    if (all == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for links");
    used = 0;
    for (int l = 0; l < nl; l++) {
        const chorus_fab_link_t *lk = chorus__fabric_link(s->fab, l);
        if (carried[l] <= 0) continue;
        chorus__fabric_link_name(s->fab, l, all[used].name, sizeof all[used].name);
        all[used].bytes = carried[l];
        all[used].util = s->finish > 0 ? carried[l] / (lk->bw * s->finish) : 0;
        used++;
    }
    qsort(all, (size_t)used, sizeof *all, cmp_use);
    res->links = all;
    res->nlinks_top = used < s->a->top_links ? used : s->a->top_links;
    return CHORUS_SUCCESS;
}

static void sim_free(sim_t *s)
{
    for (int k = 0; k < s->nclasses; k++) chorus__sim_class_free(s->classes[k]);
    free(s->classes);
    free(s->cls);
    free(s->deps_left);
    free(s->flags);
    free(s->pbase);
    free(s->post_next);
    free(s->cpu_free);
    free(s->stretch);
    free(s->frank);
    free(s->host);
    free(s->heap);
    free(s->fifo);
    for (size_t k = 0; k < s->pairs.cap; k++) free(s->pairs.slot[k].q);
    free(s->pairs.slot);
    chorus__flownet_free(s->net);
    chorus__sim_record_free(s);
}

double chorus__sim_cache_factor(const chorus_fab_desc_t *d, double bytes, int nlocal)
{
    double ws = 2.0 * bytes * (nlocal > 0 ? nlocal : 1), llc = d->llc_mb * 1048576.0;

    if (llc <= 0.0 || d->dram_factor <= 1.0 || ws <= llc) return 1.0;
    if (ws >= 4.0 * llc) return d->dram_factor;
    return 1.0 + (d->dram_factor - 1.0) * log2(ws / llc) / 2.0;
}

/* Where the ranks sit and what their CPU work costs: what a run and the lockstep pass
 * share. */
static chorus_status_t sim_setup(sim_t *s, uint64_t count)
{
    const chorus_fab_desc_t *d = chorus__fabric_desc(s->fab);
    const int nf = chorus__fabric_nranks(s->fab), nh = d->hosts;
    const chorus_sim_args_t *a = s->a;
    int *local = calloc((size_t)nh + 1, sizeof *local), maxlocal = 0;
    uint8_t *used = calloc((size_t)nf + 1, 1);
    chorus_status_t st = CHORUS_SUCCESS;

    s->frank = malloc((size_t)s->n * sizeof *s->frank);
    s->host = malloc((size_t)s->n * sizeof *s->host);
    s->stretch = malloc((size_t)s->n * sizeof *s->stretch);
    if (!local || !used || !s->frank || !s->host || !s->stretch) {
        st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for %d ranks", s->n);
        goto out;
    }
    sim_mem(s, (long)((size_t)s->n * (sizeof *s->frank + sizeof *s->host + sizeof *s->stretch)));
    for (int r = 0; r < s->n; r++) {
        int f = a->place != NULL ? a->place[r] : r;
        if (f < 0 || f >= nf || used[f]) {
            st = chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sim: rank %d placed on the "
                               "fabric's rank %d (of %d, or taken)", r, f, nf);
            goto out;
        }
        used[f] = 1;
        s->frank[r] = f;
        s->host[r] = chorus__fabric_host_of(s->fab, f);
        if (++local[s->host[r]] > maxlocal) maxlocal = local[s->host[r]];
    }
    for (int r = 0; r < s->n; r++) {
        int l = local[s->host[r]];
        s->stretch[r] = d->cores_per_host > 0 && l > d->cores_per_host
                            ? (double)l / d->cores_per_host
                            : 1;
    }
    s->msg_s = d->msg_us * 1e-6;
    s->step_s = d->step_us * 1e-6;
    s->wait_s = d->wait_us * 1e-6;
    s->reduce_Bps = d->reduce_GBps * 1e9;
    s->copy_Bps = d->copy_GBps * 1e9;
    s->cache = chorus__sim_cache_factor(d, (double)(a->mem_bytes ? a->mem_bytes : count * s->esize),
                            maxlocal);
    s->send_s[0] = d->intra_send_ns * 1e-9 * s->cache;
    s->recv_s[0] = d->intra_recv_ns * 1e-9 * s->cache;
    s->send_s[1] = d->net_send_ns * 1e-9 * s->cache;
    s->recv_s[1] = d->net_recv_ns * 1e-9 * s->cache;
    s->sendbuf[0] = d->intra_sendbuf;
    s->sendbuf[1] = d->nic_sendbuf;
    s->streams = d->recv_streams;
out:
    free(local);
    free(used);
    return st;
}

chorus_status_t chorus__sim_run(chorus_fabric_t *fab, const chorus_sim_args_t *a,
                                chorus_sim_result_t *res)
{
    sim_t s;
    chorus_status_t st;
    uint64_t count = 0, t0 = chorus__now_ns(), t1;
    double *caps = NULL;
    int nl;

    memset(res, 0, sizeof *res);
    memset(&s, 0, sizeof s);
    if (a->nranks < 1 || a->nranks > chorus__fabric_nranks(fab))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sim: %d ranks on a fabric of %d",
                             a->nranks, chorus__fabric_nranks(fab));
    if (!chorus__algo_supports(a->algo, a->coll))
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "sim: %s does not implement %s",
                             chorus__algo_name(a->algo) ? chorus__algo_name(a->algo) : "?",
                             chorus__coll_name(a->coll));
    s.fab = fab;
    s.a = a;
    s.n = a->nranks;
    s.esize = chorus_dtype_size(a->dtype);
    if (s.esize == 0) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sim: bad datatype");
    st = sim_counts(a, s.n, s.esize, &count);
    if (st != CHORUS_SUCCESS) return st;
    st = sim_setup(&s, count);
    if (st != CHORUS_SUCCESS) goto out;
    s.cls = malloc((size_t)s.n * sizeof *s.cls);
    s.pbase = malloc(((size_t)s.n + 1) * sizeof *s.pbase);
    s.cpu_free = calloc((size_t)s.n, sizeof *s.cpu_free);
    if (!s.cls || !s.pbase || !s.cpu_free) {
        st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for %d ranks", s.n);
        goto out;
    }
    sim_mem(&s, (long)((size_t)s.n * (sizeof *s.cls + sizeof *s.pbase + sizeof *s.cpu_free)));
    st = chorus__sim_build(&s, count);
    if (st == CHORUS_SUCCESS && a->record) st = chorus__sim_record_alloc(&s);
    if (st != CHORUS_SUCCESS) goto out;
    t1 = chorus__now_ns();
    res->build_s = (double)(t1 - t0) * 1e-9;
    nl = chorus__fabric_nlinks(fab);
    caps = malloc(((size_t)nl + 1) * sizeof *caps);
    if (caps == NULL) {
        st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for %d links", nl);
        goto out;
    }
    for (int l = 0; l < nl; l++) caps[l] = chorus__fabric_link(fab, l)->bw;
    st = chorus__flownet_create(caps, nl, &s.net);
    free(caps);
    /* Token buckets; a link an override made as fast as its peak (or down) has none. */
    for (int l = 0; st == CHORUS_SUCCESS && l < nl; l++) {
        const chorus_fab_link_t *fl = chorus__fabric_link(fab, l);
        if (fl->burst > 0 && fl->bw > 0 && fl->peak > fl->bw)
            st = chorus__flownet_set_bucket(s.net, l, fl->burst, fl->peak);
    }
    if (st != CHORUS_SUCCESS) goto out;
    for (int r = 0; r < s.n; r++) {
        const sim_class_t *c = s.classes[s.cls[r]];
        for (uint32_t i = 0; i < c->nsteps; i++)
            if (c->ndeps[i] == 0 && ev_push(&s, 0, EV_READY, (uint32_t)r, i)) {
                st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for events");
                goto out;
            }
    }
    for (;;) {
        double th = ev_next_t(&s), tf;
        /* Everything due now first, so that the flows it starts and ends cost one solve of
         * the rates (a ring's ranks all move at the same instants). */
        if (th <= chorus__flownet_now(s.net)) {
            sim_ev_t e = ev_next(&s);
            st = sim_event(&s, &e);
        } else {
            tf = chorus__flownet_next(s.net);
            if (isnan(tf)) {
                st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for the flow rates");
                goto out;
            }
            if (isinf(tf) && isinf(th)) break;
            if (tf <= th) {
                s.now = tf;
                st = sim_flows_end(&s, tf);
            } else {
                sim_ev_t e = ev_next(&s);
                st = sim_event(&s, &e);
            }
        }
        if (st != CHORUS_SUCCESS) {
            if (st == CHORUS_ERR_NO_MEMORY)
                st = chorus__error(st, "sim: no memory for events and flows");
            goto out;
        }
    }
    /* Every step must have run: a schedule that waits for ever is a bug worth knowing. */
    for (int r = 0; r < s.n; r++) {
        const sim_class_t *c = s.classes[s.cls[r]];
        for (uint32_t i = 0; i < c->nsteps; i++)
            if (s.deps_left[sim_g(&s, (uint32_t)r, i)] != 0) {
                st = chorus__error(CHORUS_ERR_INTERNAL,
                                   "sim: rank %d's step %u never ran (the schedules deadlock)",
                                   r, i);
                goto out;
            }
    }
    res->time_s = s.finish;
    res->algbw_GBps = s.finish > 0 ? (double)a->bytes / s.finish * 1e-9 : 0;
    res->busbw_GBps = res->algbw_GBps * chorus__sim_bus_factor(a->coll, s.n);
    res->steps = s.steps;
    res->messages = s.messages;
    res->events = s.events;
    res->solves = chorus__flownet_solves(s.net);
    res->classes = s.nclasses;
    res->run_s = (double)(chorus__now_ns() - t1) * 1e-9;
    st = sim_links(&s, res);
    if (st == CHORUS_SUCCESS && a->record) {
        chorus__sim_critical_path(&s, &res->path);
        res->have_path = 1;
        if (a->trace != NULL) st = chorus__sim_write_trace(&s, a->trace);
    }
    res->mem_bytes = s.mem_peak;
out:
    sim_free(&s);
    return st;
}

/* Rank 0's schedule of a call, with s set up for it (sim_free(s) after, whatever the
 * status); sched is initialised by the caller. What the lockstep pass and the size of a
 * joint replay start from. */
static chorus_status_t sim_rank0(chorus_fabric_t *fab, const chorus_sim_args_t *a, sim_t *s,
                                 uint64_t *count_p, chorus_sched_t *sched)
{
    chorus_coll_args_t ca;
    chorus_status_t st;

    memset(s, 0, sizeof *s);
    if (a->nranks < 1 || a->nranks > chorus__fabric_nranks(fab))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sim: %d ranks on a fabric of %d",
                             a->nranks, chorus__fabric_nranks(fab));
    if (!chorus__algo_supports(a->algo, a->coll)) return CHORUS_ERR_UNSUPPORTED;
    s->fab = fab;
    s->a = a;
    s->n = a->nranks;
    s->esize = chorus_dtype_size(a->dtype);
    if (s->esize == 0) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sim: bad datatype");
    st = sim_counts(a, s->n, s->esize, count_p);
    if (st == CHORUS_SUCCESS) st = sim_setup(s, *count_p);
    if (st != CHORUS_SUCCESS) return st;
    chorus__sim_coll_args(s, *count_p, &ca);
    ca.rank = 0;
    return chorus__algo_build(a->algo, &ca, sched);
}

uint64_t chorus__sim_joint_steps(chorus_fabric_t *fab, const chorus_sim_args_t *a)
{
    sim_t s;
    chorus_sched_t sched;
    uint64_t count = 0, steps = UINT64_MAX;

    chorus__sched_init(&sched, 0, a->nranks > 0 ? a->nranks : 1);
    if (sim_rank0(fab, a, &s, &count, &sched) == CHORUS_SUCCESS)
        steps = (uint64_t)sched.nsteps * (uint64_t)a->nranks;
    else
        chorus__error_clear();
    chorus__sched_fini(&sched);
    sim_free(&s);
    return steps;
}

chorus_status_t chorus__sim_lockstep(chorus_fabric_t *fab, const chorus_sim_args_t *a,
                                     chorus_sim_result_t *res)
{
    sim_t s;
    chorus_sched_t sched;
    chorus_status_t st;
    uint64_t count = 0, t0 = chorus__now_ns();
    double *ready = NULL, *start = NULL, cpu = 0, end = 0;
    uint32_t *ord = NULL, *sbegin = NULL, *sstep = NULL;

    memset(res, 0, sizeof *res);
    chorus__sched_init(&sched, 0, a->nranks > 0 ? a->nranks : 1);
    st = sim_rank0(fab, a, &s, &count, &sched);
    if (st != CHORUS_SUCCESS) goto out;
    /* Rank 0's sends per peer in order (sbegin/sstep, a CSR by peer), and each message's
     * ordinal among those to or from its peer. */
    ready = calloc((size_t)sched.nsteps + 1, sizeof *ready);
    start = malloc(((size_t)sched.nsteps + 1) * sizeof *start);
    ord = calloc((size_t)sched.nsteps + 1, sizeof *ord);
    sbegin = calloc(2 * (size_t)s.n + 2, sizeof *sbegin);
    sstep = malloc(((size_t)sched.nsteps + 1) * sizeof *sstep);
    if (!ready || !start || !ord || !sbegin || !sstep) {
        st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for %u steps", sched.nsteps);
        goto out;
    }
    {
        uint32_t *cnt = sbegin + s.n + 1; /* per peer: sends, then receives seen */
        for (uint32_t i = 0; i < sched.nsteps; i++) {
            const chorus_step_t *sp = &sched.steps[i];
            start[i] = -1;
            if (sp->kind == CHORUS_STEP_SEND) {
                ord[i] = sbegin[sp->peer + 1]++;
            }
        }
        for (int q = 0; q < s.n; q++) sbegin[q + 1] += sbegin[q];
        memset(cnt, 0, ((size_t)s.n + 1) * sizeof *cnt);
        for (uint32_t i = 0; i < sched.nsteps; i++) {
            const chorus_step_t *sp = &sched.steps[i];
            if (sp->kind == CHORUS_STEP_SEND) sstep[sbegin[sp->peer] + ord[i]] = i;
            if (sp->kind == CHORUS_STEP_RECV) ord[i] = cnt[sp->peer]++;
        }
    }
    for (uint32_t i = 0; i < sched.nsteps; i++) {
        const chorus_step_t *sp = &sched.steps[i];
        const double stretch = s.stretch[0];
        double b = (double)sp->count * (double)s.esize;
        const int msg = sp->kind == CHORUS_STEP_SEND || sp->kind == CHORUS_STEP_RECV;
        const int inter = msg && s.host[0] != s.host[sp->peer];
        double cost = 0, t = ready[i] > cpu ? ready[i] : cpu, fin;
        const int32_t *links;
        int nl;
        double lat = 0, bw = INFINITY;

        if (msg) {
            st = sp->kind == CHORUS_STEP_SEND
                     ? chorus__fabric_route(fab, s.frank[0], s.frank[sp->peer], &links, &nl, &lat)
                     : chorus__fabric_route(fab, s.frank[sp->peer], s.frank[0], &links, &nl, &lat);
            if (st != CHORUS_SUCCESS) goto out;
            for (int k = 0; k < nl; k++) {
                double lbw = chorus__fabric_link(fab, links[k])->bw;
                if (lbw < bw) bw = lbw;
            }
        }
        switch (sp->kind) {
        case CHORUS_STEP_SEND:
            cost = s.msg_s + b * s.send_s[inter];
            start[i] = t;
            cpu = t + cost * stretch;
            fin = s.sendbuf[inter] >= b ? cpu : cpu + (isinf(bw) ? 0 : b / bw) + lat;
            break;
        case CHORUS_STEP_RECV: {
            /* Every rank runs this schedule mirrored: the peer sent this message when rank 0
             * sent its message of the same ordinal to the mirror peer, or, without one,
             * when the receive was posted. */
            const int mirror = (2 * s.n - sp->peer) % s.n;
            const uint32_t k = sbegin[mirror] + ord[i];
            const double sent = k < sbegin[mirror + 1] && start[sstep[k]] >= 0 ? start[sstep[k]]
                                                                              : ready[i];
            const double last = sent + (s.msg_s + b * s.send_s[inter]) * stretch +
                                (isinf(bw) ? 0 : b / bw) + lat;
            const double first = s.streams ? sent + s.msg_s + lat : last;
            cost = s.msg_s + b * s.recv_s[inter] + (stretch > 1 ? s.wait_s : 0);
            if (first > t) t = first;
            cpu = t + cost * stretch;
            fin = s.streams && last + s.msg_s > cpu ? last + s.msg_s : cpu;
            break;
        }
        case CHORUS_STEP_REDUCE:
        case CHORUS_STEP_REDUCE_N:
            if (sp->kind == CHORUS_STEP_REDUCE_N && sp->nsrc > 2) b *= sp->nsrc - 1;
            cost = s.step_s + b * s.cache * sim_reduce_scale(a->dtype) / s.reduce_Bps;
            fin = cpu = t + cost * stretch;
            break;
        default:
            cost = s.step_s + b * s.cache / s.copy_Bps;
            fin = cpu = t + cost * stretch;
            break;
        }
        if (fin > end) end = fin;
        for (uint32_t k = 0; k < sp->nsucc; k++) {
            uint32_t q = sched.succ[sp->succ_begin + k];
            if (ready[q] < fin) ready[q] = fin;
        }
    }
    res->time_s = end;
    res->algbw_GBps = end > 0 ? (double)a->bytes / end * 1e-9 : 0;
    res->busbw_GBps = res->algbw_GBps * chorus__sim_bus_factor(a->coll, s.n);
    res->steps = sched.nsteps;
    res->build_s = (double)(chorus__now_ns() - t0) * 1e-9;
out:
    free(ready);
    free(start);
    free(ord);
    free(sbegin);
    free(sstep);
    chorus__sched_fini(&sched);
    sim_free(&s);
    return st;
}
