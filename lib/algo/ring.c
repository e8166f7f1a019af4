/*
 * Ring algorithms: reduce-scatter, allgather, allreduce (the two in sequence), the
 * pipelined chain for broadcast and reduce, and allgatherv and reduce_scatterv.
 *
 * Ranks form the ring r -> r + 1, or the order args->ring_order gives (lib/topo makes one
 * that keeps the ranks of a host adjacent). The algorithms below work on positions in the
 * ring; only the blocks that belong to a rank (reduce_scatter's result, allgather's
 * input) and the root are mapped between ranks and positions. The vector is cut into
 * nranks slices (the first count % nranks one element longer), and each slice into chunks
 * of at most chunk elements. Loops run ring steps outside and chunks inside, so that while
 * chunk c of a step is being reduced, chunk c + 1 is on the wire, and chunk c of the next
 * step can leave as soon as its reduction is done. Both ends of every message compute the same
 * lengths and skip empty chunks alike, which keeps the per-peer message order matched.
 *
 * Every element of an allreduce result is reduced by exactly one rank and copied by the
 * others, so floating-point results are bitwise identical on all ranks.
 *
 * In place (SEND aliases RECV), a rank writes RECV[x] of a slice it reads from SEND only
 * in the step that reads it (a REDUCE whose dst and src coincide) or when the final value
 * arrives, which is causally after this rank's own contribution was received.
 */
#include "algo/algo.h"
#include "topo/topo.h"

#include "util/status.h"

#include <stdlib.h>

#define RING_DEFAULT_CHUNK (128u * 1024u)
#define RING_SLOTS 4 /* receive slots in flight for allreduce and reduce */

typedef struct {
    uint64_t off;
    uint64_t len;
} ring_span_t;

/* This rank's place in the ring. */
typedef struct {
    int n;
    int pos;          /* position of this rank */
    int root_pos;     /* position of the root (broadcast, reduce) */
    int next, prev;   /* the ranks after and before it */
    const int *order; /* position -> rank; NULL: identity */
} ring_t;

static int ring_mod(int x, int n)
{
    return ((x % n) + n) % n;
}

static int ring_rank_at(const ring_t *g, int pos)
{
    pos = ring_mod(pos, g->n);
    return g->order != NULL ? g->order[pos] : pos;
}

/* Finds this rank's and the root's positions, after checking that the order is a
 * permutation: a bad order would make ranks disagree on who talks to whom, a hang. */
static chorus_status_t ring_setup(const chorus_coll_args_t *a, ring_t *g)
{
    chorus_status_t status;
    int *pos;

    g->n = a->nranks;
    g->order = a->ring_order;
    g->pos = a->rank;
    g->root_pos = a->root;
    if (a->ring_order != NULL) {
        pos = malloc((size_t)a->nranks * sizeof *pos);
        if (pos == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ring: no memory for the order",
                                 a->rank);
        status = chorus__topo_order_invert(a->nranks, a->ring_order, pos);
        if (status == CHORUS_SUCCESS) {
            g->pos = pos[a->rank];
            if (a->root >= 0 && a->root < a->nranks) g->root_pos = pos[a->root];
        }
        free(pos);
        if (status != CHORUS_SUCCESS)
            return chorus__error_context(status, "rank %d: ring", a->rank);
    }
    g->next = ring_rank_at(g, g->pos + 1);
    g->prev = ring_rank_at(g, g->pos - 1);
    return CHORUS_SUCCESS;
}

/* Slice i of count elements cut into n nearly equal parts. */
static ring_span_t ring_slice(uint64_t count, int n, int i)
{
    uint64_t q = count / (uint64_t)n, rem = count % (uint64_t)n;
    ring_span_t s;

    s.off = (uint64_t)i * q + ((uint64_t)i < rem ? (uint64_t)i : rem);
    s.len = q + ((uint64_t)i < rem ? 1 : 0);
    return s;
}

/* Chunk c of a span (empty past its end). */
static ring_span_t ring_chunk(ring_span_t s, uint64_t chunk, uint64_t c)
{
    ring_span_t r;
    uint64_t start = c * chunk;

    r.off = s.off + start;
    r.len = start >= s.len ? 0 : (s.len - start < chunk ? s.len - start : chunk);
    return r;
}

/* The chunk length to use for spans of at most maxlen elements (never 0). */
static uint64_t ring_chunk_len(const chorus_coll_args_t *a, uint64_t maxlen)
{
    uint64_t chunk = a->chunk_count ? a->chunk_count : RING_DEFAULT_CHUNK;

    if (chunk > maxlen) chunk = maxlen;
    return chunk ? chunk : 1;
}

static uint64_t ring_nchunks(uint64_t len, uint64_t chunk)
{
    return (len + chunk - 1) / chunk;
}

/* Slices are numbered by position: which rank owns which slice does not matter to an
 * allreduce, as long as all ranks agree. */
static void ring_allreduce(const chorus_coll_args_t *a, const ring_t *g, chorus_sched_t *s)
{
    int n = a->nranks, r = g->pos, next = g->next, prev = g->prev, k;
    uint64_t maxlen = ring_slice(a->count, n, 0).len;
    uint64_t chunk = ring_chunk_len(a, maxlen), nch = ring_nchunks(maxlen, chunk), c, m = 0;
    uint64_t slots, nslots = nch * (uint64_t)(n - 1) < RING_SLOTS ? nch * (n - 1) : RING_SLOTS;

    /* Received chunks only live until they are reduced into RECV, so a few slots used
     * round robin suffice: a slot is refilled once the reduction that read it is done. */
    slots = chorus__sched_scratch(s, nslots * chunk);
    for (k = 0; k < n - 1; k++) {
        ring_span_t sb = ring_slice(a->count, n, ring_mod(r - k - 1, n));
        ring_span_t rb = ring_slice(a->count, n, ring_mod(r - k - 2, n));

        for (c = 0; c < nch; c++) {
            ring_span_t sc = ring_chunk(sb, chunk, c), rc = ring_chunk(rb, chunk, c);
            uint64_t slot = slots + (m % nslots) * chunk;

            if (sc.len)
                chorus__sched_send(s, next, k == 0 ? SEND_AT(sc.off) : RECV_AT(sc.off), sc.len);
            if (rc.len == 0) continue;
            m++;
            chorus__sched_recv(s, prev, SCRATCH_AT(slot), rc.len);
            chorus__sched_reduce(s, RECV_AT(rc.off), SEND_AT(rc.off), SCRATCH_AT(slot), rc.len);
        }
    }
    /* Position r now holds slice r reduced; circulate the reduced slices. */
    for (k = 0; k < n - 1; k++) {
        ring_span_t sb = ring_slice(a->count, n, ring_mod(r - k, n));
        ring_span_t rb = ring_slice(a->count, n, ring_mod(r - k - 1, n));

        for (c = 0; c < nch; c++) {
            ring_span_t sc = ring_chunk(sb, chunk, c), rc = ring_chunk(rb, chunk, c);

            if (sc.len) chorus__sched_send(s, next, RECV_AT(sc.off), sc.len);
            if (rc.len) chorus__sched_recv(s, prev, RECV_AT(rc.off), rc.len);
        }
    }
}

/* Partial sums of other ranks' blocks live in scratch (RECV holds only recvcount). A
 * partial received at step k is forwarded at step k + 1, one step of chunks later, so
 * nch + 1 slots used round robin are never refilled before their partial has left. */
static void ring_reduce_scatter(const chorus_coll_args_t *a, const ring_t *g, chorus_sched_t *s)
{
    int n = a->nranks, r = g->pos, next = g->next, prev = g->prev, k;
    uint64_t cnt = a->count, chunk = ring_chunk_len(a, cnt), nch = ring_nchunks(cnt, chunk), c;
    uint64_t nslots = nch + 1, slots = chorus__sched_scratch(s, nslots * chunk);
    ring_span_t all = {0, cnt};

    for (k = 0; k < n - 1; k++) {
        uint64_t sblk = (uint64_t)ring_rank_at(g, r - k - 1) * cnt;
        uint64_t rblk = (uint64_t)ring_rank_at(g, r - k - 2) * cnt;

        for (c = 0; c < nch; c++) {
            ring_span_t ch = ring_chunk(all, chunk, c);
            uint64_t prev_slot = slots + (((uint64_t)k - 1) * nch + c) % nslots * chunk;
            uint64_t slot = slots + ((uint64_t)k * nch + c) % nslots * chunk;

            chorus__sched_send(s, next, k == 0 ? SEND_AT(sblk + ch.off) : SCRATCH_AT(prev_slot),
                               ch.len);
            chorus__sched_recv(s, prev, SCRATCH_AT(slot), ch.len);
            if (k < n - 2)
                chorus__sched_reduce(s, SCRATCH_AT(slot), SEND_AT(rblk + ch.off),
                                     SCRATCH_AT(slot), ch.len);
            else
                chorus__sched_reduce(s, RECV_AT(ch.off), SEND_AT(rblk + ch.off), SCRATCH_AT(slot),
                                     ch.len);
        }
    }
}

static void ring_allgather(const chorus_coll_args_t *a, const ring_t *g, chorus_sched_t *s)
{
    int n = a->nranks, r = g->pos, next = g->next, prev = g->prev, k;
    uint64_t cnt = a->count, chunk = ring_chunk_len(a, cnt), nch = ring_nchunks(cnt, chunk), c;
    ring_span_t all = {0, cnt};

    /* In place this copy is onto itself; the first step sends from SEND so that it need
     * not wait for the copy. */
    chorus__sched_copy(s, RECV_AT((uint64_t)a->rank * cnt), SEND_AT(0), cnt);
    for (k = 0; k < n - 1; k++) {
        uint64_t sblk = (uint64_t)ring_rank_at(g, r - k) * cnt;
        uint64_t rblk = (uint64_t)ring_rank_at(g, r - k - 1) * cnt;

        for (c = 0; c < nch; c++) {
            ring_span_t ch = ring_chunk(all, chunk, c);

            chorus__sched_send(s, next, k == 0 ? SEND_AT(ch.off) : RECV_AT(sblk + ch.off), ch.len);
            chorus__sched_recv(s, prev, RECV_AT(rblk + ch.off), ch.len);
        }
    }
}

/* ---- The v-forms: blocks of per-rank lengths (args->recvcounts; NULL: count each) ----
 * The same rings as allgather and reduce_scatter, with block q of length counts[q]: both
 * ends of a message know the block's length, so they cut it into the same chunks. Chunks
 * are sized for the longest block, and every ring step still sends its first chunk when the
 * block is empty (an empty message): each rank then exchanges with both neighbours at every
 * call, so the call signatures, which carry a hash of the counts, are compared on every edge
 * of the ring, and ranks that disagree about the counts are told so rather than left waiting
 * for a message that their neighbour does not think it owes. */

/* Block q's length and its offset in the buffer that holds all blocks (allgatherv: RECV at
 * rdispls[q]; reduce_scatterv: SEND, blocks back to back, which needs the prefix sums). */
typedef struct {
    const chorus_coll_args_t *a;
    uint64_t *prefix; /* reduce_scatterv: n + 1 prefix sums; NULL for allgatherv */
    uint64_t maxlen;
} ring_v_t;

static uint64_t ring_v_len(const ring_v_t *v, int q)
{
    return chorus__algo_vcount(v->a->recvcounts, v->a->count, q);
}

static uint64_t ring_v_off(const ring_v_t *v, int q)
{
    return v->prefix != NULL ? v->prefix[q] : chorus__algo_vdispl(v->a->rdispls, v->a->count, q);
}

static chorus_status_t ring_v_setup(const chorus_coll_args_t *a, int with_prefix, ring_v_t *v)
{
    v->a = a;
    v->prefix = NULL;
    v->maxlen = 0;
    for (int q = 0; q < a->nranks; q++)
        if (ring_v_len(v, q) > v->maxlen) v->maxlen = ring_v_len(v, q);
    if (!with_prefix) return CHORUS_SUCCESS;
    v->prefix = malloc(((size_t)a->nranks + 1) * sizeof *v->prefix);
    if (v->prefix == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ring: no memory for %d offsets",
                             a->rank, a->nranks + 1);
    v->prefix[0] = 0;
    for (int q = 0; q < a->nranks; q++) v->prefix[q + 1] = v->prefix[q] + ring_v_len(v, q);
    return CHORUS_SUCCESS;
}

static void ring_allgatherv(const ring_v_t *v, const ring_t *g, chorus_sched_t *s)
{
    const chorus_coll_args_t *a = v->a;
    int n = a->nranks, r = g->pos, next = g->next, prev = g->prev, k;
    uint64_t chunk = ring_chunk_len(a, v->maxlen), nch = ring_nchunks(v->maxlen, chunk), c;

    chorus__sched_copy(s, RECV_AT(ring_v_off(v, a->rank)), SEND_AT(0), ring_v_len(v, a->rank));
    for (k = 0; k < n - 1; k++) {
        int sq = ring_rank_at(g, r - k), rq = ring_rank_at(g, r - k - 1);
        ring_span_t sb = {ring_v_off(v, sq), ring_v_len(v, sq)};
        ring_span_t rb = {ring_v_off(v, rq), ring_v_len(v, rq)};

        for (c = 0; c < nch; c++) {
            ring_span_t sc = ring_chunk(sb, chunk, c), rc = ring_chunk(rb, chunk, c);

            /* k == 0 sends this rank's own block, from SEND (no wait for the copy). */
            if (sc.len || c == 0)
                chorus__sched_send(s, next, k == 0 ? SEND_AT(sc.off - sb.off) : RECV_AT(sc.off),
                                   sc.len);
            if (rc.len || c == 0) chorus__sched_recv(s, prev, RECV_AT(rc.off), rc.len);
        }
    }
}

/* As ring_reduce_scatter: partials in nch + 1 scratch slots of one chunk each, a partial
 * received at step k forwarded at step k + 1. */
static void ring_reduce_scatterv(const ring_v_t *v, const ring_t *g, chorus_sched_t *s)
{
    const chorus_coll_args_t *a = v->a;
    int n = a->nranks, r = g->pos, next = g->next, prev = g->prev, k;
    uint64_t chunk = ring_chunk_len(a, v->maxlen), nch = ring_nchunks(v->maxlen, chunk), c;
    uint64_t nslots = nch + 1, slots = chorus__sched_scratch(s, nslots * chunk);

    for (k = 0; k < n - 1; k++) {
        int sq = ring_rank_at(g, r - k - 1), rq = ring_rank_at(g, r - k - 2);
        ring_span_t sb = {0, ring_v_len(v, sq)}, rb = {0, ring_v_len(v, rq)};
        uint64_t soff = ring_v_off(v, sq), roff = ring_v_off(v, rq);

        for (c = 0; c < nch; c++) {
            ring_span_t sc = ring_chunk(sb, chunk, c), rc = ring_chunk(rb, chunk, c);
            uint64_t prev_slot = slots + (((uint64_t)k - 1) * nch + c) % nslots * chunk;
            uint64_t slot = slots + ((uint64_t)k * nch + c) % nslots * chunk;

            if (sc.len || c == 0)
                chorus__sched_send(s, next,
                                   k == 0 ? SEND_AT(soff + sc.off) : SCRATCH_AT(prev_slot),
                                   sc.len);
            if (rc.len == 0 && c > 0) continue;
            chorus__sched_recv(s, prev, SCRATCH_AT(slot), rc.len);
            if (k < n - 2)
                chorus__sched_reduce(s, SCRATCH_AT(slot), SEND_AT(roff + rc.off),
                                     SCRATCH_AT(slot), rc.len);
            else
                chorus__sched_reduce(s, RECV_AT(rc.off), SEND_AT(roff + rc.off),
                                     SCRATCH_AT(slot), rc.len);
        }
    }
}

static chorus_status_t ring_v(const chorus_coll_args_t *a, const ring_t *g, chorus_sched_t *s)
{
    ring_v_t v;
    chorus_status_t status;
    int rs = a->coll == CHORUS_COLL_REDUCE_SCATTERV;

    status = ring_v_setup(a, rs, &v);
    if (status != CHORUS_SUCCESS) return status;
    if (v.maxlen == 0) {
        /* Nothing to move (lib/core returns before; the simulator may ask). */
    } else if (a->nranks == 1) {
        chorus__sched_copy(s, RECV_AT(rs ? 0 : ring_v_off(&v, 0)), SEND_AT(0), ring_v_len(&v, 0));
    } else if (rs) {
        ring_reduce_scatterv(&v, g, s);
    } else {
        ring_allgatherv(&v, g, s);
    }
    free(v.prefix);
    return CHORUS_SUCCESS;
}

/* A chain from the root: each rank forwards chunk c as soon as it has arrived. */
static void ring_broadcast(const chorus_coll_args_t *a, const ring_t *g, chorus_sched_t *s)
{
    int n = a->nranks, v = ring_mod(g->pos - g->root_pos, n), next = g->next, prev = g->prev;
    uint64_t chunk = ring_chunk_len(a, a->count), nch = ring_nchunks(a->count, chunk), c;
    ring_span_t all = {0, a->count};

    for (c = 0; c < nch; c++) {
        ring_span_t ch = ring_chunk(all, chunk, c);

        if (v == 0) {
            if (n > 1) chorus__sched_send(s, next, SEND_AT(ch.off), ch.len);
            continue;
        }
        chorus__sched_recv(s, prev, RECV_AT(ch.off), ch.len);
        if (v < n - 1) chorus__sched_send(s, next, RECV_AT(ch.off), ch.len);
    }
    if (v == 0) chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
}

/* A chain that starts after the root and ends at it. Only the root touches RECV. */
static void ring_reduce(const chorus_coll_args_t *a, const ring_t *g, chorus_sched_t *s)
{
    int n = a->nranks, p = ring_mod(g->pos - g->root_pos - 1, n), next = g->next, prev = g->prev;
    uint64_t chunk = ring_chunk_len(a, a->count), nch = ring_nchunks(a->count, chunk), c;
    uint64_t nslots = nch < RING_SLOTS ? nch : RING_SLOTS, slots;
    ring_span_t all = {0, a->count};

    if (n == 1) {
        chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
        return;
    }
    slots = p == 0 ? 0 : chorus__sched_scratch(s, nslots * chunk);
    for (c = 0; c < nch; c++) {
        ring_span_t ch = ring_chunk(all, chunk, c);
        uint64_t slot = slots + (c % nslots) * chunk;

        if (p == 0) {
            chorus__sched_send(s, next, SEND_AT(ch.off), ch.len);
            continue;
        }
        chorus__sched_recv(s, prev, SCRATCH_AT(slot), ch.len);
        if (p == n - 1) {
            chorus__sched_reduce(s, RECV_AT(ch.off), SEND_AT(ch.off), SCRATCH_AT(slot), ch.len);
            continue;
        }
        chorus__sched_reduce(s, SCRATCH_AT(slot), SEND_AT(ch.off), SCRATCH_AT(slot), ch.len);
        chorus__sched_send(s, next, SCRATCH_AT(slot), ch.len);
    }
}

chorus_status_t chorus__algo_ring(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    chorus_status_t status;
    ring_t g = {0, 0, 0, 0, 0, NULL};

    if (a->count == 0 && a->coll != CHORUS_COLL_BARRIER && a->recvcounts == NULL)
        return chorus__sched_finalize(s);
    status = ring_setup(a, &g);
    if (status != CHORUS_SUCCESS) return status;
    switch (a->coll) {
    case CHORUS_COLL_ALLGATHERV:
    case CHORUS_COLL_REDUCE_SCATTERV:
        status = ring_v(a, &g, s);
        if (status != CHORUS_SUCCESS) return status;
        break;
    case CHORUS_COLL_ALLREDUCE:
        if (a->nranks == 1)
            chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
        else
            ring_allreduce(a, &g, s);
        break;
    case CHORUS_COLL_REDUCE_SCATTER:
        if (a->nranks == 1)
            chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
        else
            ring_reduce_scatter(a, &g, s);
        break;
    case CHORUS_COLL_ALLGATHER:
        ring_allgather(a, &g, s);
        break;
    case CHORUS_COLL_BROADCAST:
        ring_broadcast(a, &g, s);
        break;
    case CHORUS_COLL_REDUCE:
        ring_reduce(a, &g, s);
        break;
    default:
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: ring does not implement %s",
                             a->rank, chorus__coll_name(a->coll));
    }
    return chorus__sched_finalize(s);
}
