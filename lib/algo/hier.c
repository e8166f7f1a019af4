/*
 * Hierarchical allreduce: (1) a ring reduce-scatter among the ranks of each host, so that
 * local rank i holds the host's partial result of its segment; (2) for every slice, an
 * allreduce among the ranks that hold it, one per host (a ring, or recursive doubling for
 * small slices); (3) a ring allgather of the segments within each host. Intra-host
 * messages stay on shared memory; between hosts each host's link carries the 2 (H-1)/H of
 * the vector that any allreduce must, split among all the ranks of the host instead of
 * funnelled through one, whatever the placement of ranks.
 *
 * Slicing: with M the largest number of ranks on one host, the vector is cut into M
 * slices (the first count % M one element longer). A host with m ranks gives local rank i
 * the contiguous block of slices [i M / m, (i + 1) M / m), its segment; so hosts with fewer
 * ranks let some ranks hold several slices, and every host cuts at the same boundaries,
 * which the per-slice inter-host rings need. Ranks of a host are ordered by their position
 * in args->ring_order when given (lib/topo's order: NUMA nodes grouped, the ranks near the
 * NIC first and last, so local rank 0, which holds the first slices, is NIC-near and the
 * intra-host ring crosses between sockets twice), else by rank number; they need not be
 * contiguous. Hosts are ordered by index, which gives the inter-host ring.
 *
 * Bitwise identical results: an element's intra-host partial is reduced along a fixed
 * ring path (fixed by its segment, not by who computes it), its inter-host reduction is
 * done once by one rank of one host (the ring reduce-scatter), and everything else is
 * copies. So every rank ends with the same bytes. Small slices (HIER_RD_MAX) use recursive
 * doubling between hosts instead, whose fixed operand order gives both partners of every
 * exchange the same bits.
 *
 * Messages of phases 1 and 3 go only to ranks of the same host and those of phase 2 only
 * to ranks of other hosts, so the phases never share a peer's message order. Within phase
 * 2 every rank enumerates slices in increasing order, so two ranks that share several
 * slice rings see their messages in the same order. Received partials land in scratch
 * slots that are only reused after the reduction that read them (never after a send), as
 * the deadlock rule in schedule.h asks.
 *
 * In place (SEND aliases RECV): a rank reads SEND[x] only in the reduction that writes
 * RECV[x], or in the first send of phase 1 (segment me - 1), which is never written before
 * the final value of that segment arrives, causally after this rank's contribution left.
 */
#include "algo/algo.h"

#include "topo/topo.h"
#include "util/status.h"

#include <stdlib.h>

#define HIER_DEFAULT_CHUNK (128u * 1024u)
#define HIER_SLOTS 4 /* receive slots in flight per ring */
/* Slices of at most this many elements, and no longer than one pipeline chunk (so the
 * ring's pipelining would gain nothing), take recursive doubling between hosts (log2 H
 * rounds) instead of the ring (2 (H - 1) rounds): latency matters more than bytes there. */
#define HIER_RD_MAX 4096u

typedef struct {
    uint64_t off;
    uint64_t len;
} hier_span_t;

/* The host map seen from one rank. */
typedef struct {
    const chorus_coll_args_t *a;
    int nhosts;
    int host;     /* this rank's host */
    int m;        /* ranks on this host */
    int me;       /* this rank's index among them */
    int maxm;     /* M: ranks on the most populated host, the number of slices */
    int *first;   /* host h's ranks are byhost[first[h] .. first[h + 1]) */
    int *byhost;  /* every rank, grouped by host, in ring order within one */
    uint64_t chunk;
} hier_t;

static int hier_mod(int x, int n)
{
    return ((x % n) + n) % n;
}

static uint64_t hier_min(uint64_t x, uint64_t y)
{
    return x < y ? x : y;
}

static uint64_t hier_max(uint64_t x, uint64_t y)
{
    return x > y ? x : y;
}

/* Part i of span s cut into n nearly equal parts. */
static hier_span_t hier_part(hier_span_t s, int n, int i)
{
    uint64_t q = s.len / (uint64_t)n, rem = s.len % (uint64_t)n;
    hier_span_t p;

    p.off = s.off + (uint64_t)i * q + hier_min((uint64_t)i, rem);
    p.len = q + ((uint64_t)i < rem ? 1 : 0);
    return p;
}

static hier_span_t hier_slice(const hier_t *h, int j)
{
    hier_span_t all = {0, h->a->count};

    return hier_part(all, h->maxm, j);
}

/* The slices [*lo_p, *hi_p) of local rank i on a host of m ranks. */
static void hier_block(const hier_t *h, int m, int i, int *lo_p, int *hi_p)
{
    *lo_p = (int)((int64_t)i * h->maxm / m);
    *hi_p = (int)((int64_t)(i + 1) * h->maxm / m);
}

/* Local rank i's segment on this host: its block of slices as one span. */
static hier_span_t hier_segment(const hier_t *h, int i)
{
    hier_span_t s, e;
    int lo, hi;

    hier_block(h, h->m, i, &lo, &hi);
    s = hier_slice(h, lo);
    e = hier_slice(h, hi - 1);
    s.len = e.off + e.len - s.off;
    return s;
}

/* The rank of host g that holds slice j. */
static int hier_owner(const hier_t *h, int g, int j)
{
    int m = h->first[g + 1] - h->first[g], i, lo, hi;

    for (i = 0; i < m; i++) {
        hier_block(h, m, i, &lo, &hi);
        if (j >= lo && j < hi) break;
    }
    return h->byhost[h->first[g] + i];
}

static int hier_local(const hier_t *h, int i)
{
    return h->byhost[h->first[h->host] + hier_mod(i, h->m)];
}

/* Chunk c of a span (empty past its end). */
static hier_span_t hier_chunk(hier_span_t s, uint64_t chunk, uint64_t c)
{
    hier_span_t r;
    uint64_t start = c * chunk;

    r.off = s.off + start;
    r.len = start >= s.len ? 0 : hier_min(s.len - start, chunk);
    return r;
}

static uint64_t hier_chunk_len(const hier_t *h, uint64_t maxlen)
{
    uint64_t chunk = hier_min(h->chunk, maxlen);

    return chunk ? chunk : 1;
}

static uint64_t hier_nchunks(uint64_t len, uint64_t chunk)
{
    return (len + chunk - 1) / chunk;
}

/* Phase 1: ring reduce-scatter of the segments among this host's ranks. */
static void hier_intra_rs(const hier_t *h, chorus_sched_t *s)
{
    int m = h->m, me = h->me, next = hier_local(h, me + 1), prev = hier_local(h, me - 1), k, i;
    uint64_t maxlen = 0, chunk, nch, c, nslots, slots, n = 0;

    for (i = 0; i < m; i++) maxlen = hier_max(maxlen, hier_segment(h, i).len);
    chunk = hier_chunk_len(h, maxlen);
    nch = hier_nchunks(maxlen, chunk);
    nslots = hier_min(nch * (uint64_t)(m - 1), HIER_SLOTS);
    slots = chorus__sched_scratch(s, nslots * chunk);
    for (k = 0; k < m - 1; k++) {
        hier_span_t sb = hier_segment(h, hier_mod(me - k - 1, m));
        hier_span_t rb = hier_segment(h, hier_mod(me - k - 2, m));

        for (c = 0; c < nch; c++) {
            hier_span_t sc = hier_chunk(sb, chunk, c), rc = hier_chunk(rb, chunk, c);
            uint64_t slot = slots + (n % nslots) * chunk;

            if (sc.len)
                chorus__sched_send(s, next, k == 0 ? SEND_AT(sc.off) : RECV_AT(sc.off), sc.len);
            if (rc.len == 0) continue;
            n++;
            chorus__sched_recv(s, prev, SCRATCH_AT(slot), rc.len);
            chorus__sched_reduce(s, RECV_AT(rc.off), SEND_AT(rc.off), SCRATCH_AT(slot), rc.len);
        }
    }
}

/* Phase 2 for slice j: ring allreduce among its holders, host order. The input is the
 * host's partial in RECV (or this rank's own vector in SEND when it is alone on its
 * host); the result is left in RECV. */
static void hier_inter_ar(const hier_t *h, int j, chorus_sched_t *s)
{
    int n = h->nhosts, r = h->host, k;
    int next = hier_owner(h, hier_mod(r + 1, n), j), prev = hier_owner(h, hier_mod(r - 1, n), j);
    chorus_buf_id_t in = h->m > 1 ? CHORUS_BUF_RECV : CHORUS_BUF_SEND;
    hier_span_t sl = hier_slice(h, j);
    uint64_t maxlen = hier_part(sl, n, 0).len, chunk = hier_chunk_len(h, maxlen);
    uint64_t nch = hier_nchunks(maxlen, chunk), c, m = 0, slots;
    uint64_t nslots = hier_min(nch * (uint64_t)(n - 1), HIER_SLOTS);

    if (sl.len == 0) return;
    slots = chorus__sched_scratch(s, nslots * chunk);
    for (k = 0; k < n - 1; k++) {
        hier_span_t sb = hier_part(sl, n, hier_mod(r - k - 1, n));
        hier_span_t rb = hier_part(sl, n, hier_mod(r - k - 2, n));

        for (c = 0; c < nch; c++) {
            hier_span_t sc = hier_chunk(sb, chunk, c), rc = hier_chunk(rb, chunk, c);
            uint64_t slot = slots + (m % nslots) * chunk;

            if (sc.len)
                chorus__sched_send(s, next, k == 0 ? chorus_ref(in, sc.off) : RECV_AT(sc.off),
                                   sc.len);
            if (rc.len == 0) continue;
            m++;
            chorus__sched_recv(s, prev, SCRATCH_AT(slot), rc.len);
            chorus__sched_reduce(s, RECV_AT(rc.off), chorus_ref(in, rc.off), SCRATCH_AT(slot),
                                 rc.len);
        }
    }
    for (k = 0; k < n - 1; k++) {
        hier_span_t sb = hier_part(sl, n, hier_mod(r - k, n));
        hier_span_t rb = hier_part(sl, n, hier_mod(r - k - 1, n));

        for (c = 0; c < nch; c++) {
            hier_span_t sc = hier_chunk(sb, chunk, c), rc = hier_chunk(rb, chunk, c);

            if (sc.len) chorus__sched_send(s, next, RECV_AT(sc.off), sc.len);
            if (rc.len) chorus__sched_recv(s, prev, RECV_AT(rc.off), rc.len);
        }
    }
}

/* Phase 2 for a small slice j: recursive doubling among its holders, as lib/algo/rd.c
 * does it, with host indices as the positions. With p the largest power of two <= H, the
 * holders on hosts p.. fold into host g - p first and get the result back at the end. The
 * lower host's partial is always the first operand, so both partners of an exchange
 * compute the same bits. The slice is small, so it moves unchunked. */
static void hier_inter_rd(const hier_t *h, int j, chorus_sched_t *s)
{
    int n = h->nhosts, g = h->host, p = 1, mask;
    chorus_buf_id_t in = h->m > 1 ? CHORUS_BUF_RECV : CHORUS_BUF_SEND;
    hier_span_t sl = hier_slice(h, j);
    chorus_ref_t mine = RECV_AT(sl.off), theirs;

    if (sl.len == 0) return;
    while (p * 2 <= n) p *= 2;
    if (g >= p) {
        chorus__sched_send(s, hier_owner(h, g - p, j), chorus_ref(in, sl.off), sl.len);
        chorus__sched_recv(s, hier_owner(h, g - p, j), mine, sl.len);
        return;
    }
    theirs = SCRATCH_AT(chorus__sched_scratch(s, sl.len));
    if (g + p < n) {
        chorus__sched_recv(s, hier_owner(h, g + p, j), theirs, sl.len);
        chorus__sched_reduce(s, mine, chorus_ref(in, sl.off), theirs, sl.len);
    } else if (in == CHORUS_BUF_SEND) {
        chorus__sched_copy(s, mine, SEND_AT(sl.off), sl.len);
    }
    for (mask = 1; mask < p; mask <<= 1) {
        int q = hier_owner(h, g ^ mask, j);

        chorus__sched_send(s, q, mine, sl.len);
        chorus__sched_recv(s, q, theirs, sl.len);
        if (g < (g ^ mask))
            chorus__sched_reduce(s, mine, mine, theirs, sl.len);
        else
            chorus__sched_reduce(s, mine, theirs, mine, sl.len);
    }
    if (g + p < n) chorus__sched_send(s, hier_owner(h, g + p, j), mine, sl.len);
}

/* Phase 3: ring allgather of the finished segments among this host's ranks. */
static void hier_intra_ag(const hier_t *h, chorus_sched_t *s)
{
    int m = h->m, me = h->me, next = hier_local(h, me + 1), prev = hier_local(h, me - 1), k, i;
    uint64_t maxlen = 0, chunk, nch, c;

    for (i = 0; i < m; i++) maxlen = hier_max(maxlen, hier_segment(h, i).len);
    chunk = hier_chunk_len(h, maxlen);
    nch = hier_nchunks(maxlen, chunk);
    for (k = 0; k < m - 1; k++) {
        hier_span_t sb = hier_segment(h, hier_mod(me - k, m));
        hier_span_t rb = hier_segment(h, hier_mod(me - k - 1, m));

        for (c = 0; c < nch; c++) {
            hier_span_t sc = hier_chunk(sb, chunk, c), rc = hier_chunk(rb, chunk, c);

            if (sc.len) chorus__sched_send(s, next, RECV_AT(sc.off), sc.len);
            if (rc.len) chorus__sched_recv(s, prev, RECV_AT(rc.off), rc.len);
        }
    }
}

/* Groups the ranks by host into *h_p. A NULL map or one host means every rank is local. */
static chorus_status_t hier_map(const chorus_coll_args_t *a, hier_t *h_p)
{
    int n = a->nranks, nh = a->host_of != NULL && a->nhosts > 1 ? a->nhosts : 1;
    int *first = calloc((size_t)nh + 2, sizeof(*first)), *byhost = malloc((size_t)n * sizeof(int));
    int i, r, g, host = 0, pos = 0, maxm = 0;
    chorus_status_t status;

    if (first == NULL || byhost == NULL) {
        status = chorus__error(CHORUS_ERR_NO_MEMORY,
                               "rank %d: hier: no memory for the host map of %d ranks", a->rank, n);
        goto err_free;
    }
    /* A bad order would make ranks disagree on who talks to whom, a hang. byhost serves as
     * the inverse's scratch until it is filled below. */
    if (a->ring_order != NULL) {
        status = chorus__topo_order_invert(n, a->ring_order, byhost);
        if (status != CHORUS_SUCCESS) {
            chorus__error_context(status, "rank %d: hier", a->rank);
            goto err_free;
        }
    }
    for (r = 0; r < n; r++) {
        g = nh > 1 ? a->host_of[r] : 0;
        if (g < 0 || g >= nh) {
            status = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                   "rank %d: hier: rank %d is on host %d, outside 0..%d", a->rank,
                                   r, g, nh - 1);
            goto err_free;
        }
        first[g + 2]++;
    }
    /* Counting sort, stable in ring order: after the prefix sums first[g + 1] is host g's
     * start; placing a rank advances it, so that afterwards first[g] is host g's start and
     * first[g + 1] its end. */
    for (g = 0; g < nh; g++) first[g + 2] += first[g + 1];
    for (i = 0; i < n; i++) {
        r = a->ring_order != NULL ? a->ring_order[i] : i;
        g = nh > 1 ? a->host_of[r] : 0;
        if (r == a->rank) {
            host = g;
            pos = first[g + 1];
        }
        byhost[first[g + 1]++] = r;
    }
    for (g = 0; g < nh; g++) {
        int m = first[g + 1] - first[g];

        if (m == 0) {
            status = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                   "rank %d: hier: host %d of %d has no ranks", a->rank, g, nh);
            goto err_free;
        }
        if (m > maxm) maxm = m;
    }
    h_p->a = a;
    h_p->nhosts = nh;
    h_p->host = host;
    h_p->m = first[host + 1] - first[host];
    h_p->me = pos - first[host];
    h_p->maxm = maxm;
    h_p->first = first;
    h_p->byhost = byhost;
    h_p->chunk = a->chunk_count ? a->chunk_count : HIER_DEFAULT_CHUNK;
    return CHORUS_SUCCESS;

err_free:
    free(first);
    free(byhost);
    return status;
}

chorus_status_t chorus__algo_hier(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    chorus_status_t status;
    hier_t h = {NULL, 0, 0, 0, 0, 0, NULL, NULL, 0};
    int lo, hi, j;

    if (a->coll != CHORUS_COLL_ALLREDUCE)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: hier does not implement %s",
                             a->rank, chorus__coll_name(a->coll));
    if (a->count == 0) return chorus__sched_finalize(s);
    if (a->nranks == 1) {
        chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
        return chorus__sched_finalize(s);
    }
    status = hier_map(a, &h);
    if (status != CHORUS_SUCCESS) return status;
    if (h.m > 1) hier_intra_rs(&h, s);
    if (h.nhosts > 1) {
        hier_block(&h, h.m, h.me, &lo, &hi);
        for (j = lo; j < hi; j++) {
            if (hier_slice(&h, j).len <= hier_min(HIER_RD_MAX, h.chunk))
                hier_inter_rd(&h, j, s);
            else
                hier_inter_ar(&h, j, s);
        }
    }
    if (h.m > 1) hier_intra_ag(&h, s);
    free(h.first);
    free(h.byhost);
    return chorus__sched_finalize(s);
}
