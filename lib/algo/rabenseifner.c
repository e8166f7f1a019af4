/*
 * Rabenseifner's allreduce (recursive-halving reduce-scatter, then recursive-doubling
 * allgather) and the recursive-halving reduce-scatter on its own; the halving and doubling
 * machinery is shared with Swing (see halving.h for the folding and the step structure).
 *
 * Each message is cut into chunks of at most chunk elements, and a step sends chunk c of
 * the half it gives away, then receives and reduces chunk c of the half it keeps, so
 * transfers overlap reductions and chunk c of the next step can leave as soon as the
 * chunks it covers are reduced. Both partners compute the same ranges and skip empty
 * ones alike, which keeps the per-peer message order matched.
 *
 * Every element of the allreduce result is reduced by exactly one rank (the owner of its
 * block) and copied by the others, so floats are bitwise identical on every rank. The
 * operands of every reduction are ordered by virtual rank (the lower rank's partial first;
 * a folded even rank before its odd partner), so the result does not depend on which rank
 * computes it either.
 *
 * In place, SEND is read only by the first step (or the fold), at positions the step
 * writes only through the same reduction, and RECV regions that alias what the first step
 * sent are refilled only by the doubling steps, causally after the partner received them.
 */
#include "algo/halving.h"

#include "util/status.h"

#define HD_DEFAULT_CHUNK (128u * 1024u)

/* Element x of a symbolic buffer view lives at buf[x + delta] (modulo 2^64, so a view
 * can start anywhere in element space). */
typedef struct {
    chorus_buf_id_t buf;
    uint64_t delta;
} hd_view_t;

typedef struct {
    uint64_t lo;
    uint64_t hi;
} hd_range_t;

/* Where reduced results go: elements below split through lo, the others through hi. */
typedef struct {
    hd_view_t lo;
    hd_view_t hi;
    uint64_t split;
} hd_out_t;

static hd_view_t hd_view(chorus_buf_id_t buf, uint64_t buf_off, uint64_t x)
{
    hd_view_t w = {buf, buf_off - x};

    return w;
}

static chorus_ref_t hd_at(hd_view_t w, uint64_t x)
{
    return chorus_ref(w.buf, x + w.delta);
}

static int hd_pof2(int n)
{
    int p = 1;

    while (p * 2 <= n) p *= 2;
    return p;
}

/* The virtual rank of r, or -1 for a folded even rank (partner r + 1). */
static int hd_virtual(int n, int r)
{
    int rem = n - hd_pof2(n);

    if (r < 2 * rem) return r % 2 == 0 ? -1 : r / 2;
    return r - rem;
}

static int hd_real(int n, int v)
{
    int rem = n - hd_pof2(n);

    return v < rem ? 2 * v + 1 : v + rem;
}

static uint64_t hd_chunk_len(const chorus_coll_args_t *a, uint64_t maxlen)
{
    uint64_t chunk = a->chunk_count ? a->chunk_count : HD_DEFAULT_CHUNK;

    if (chunk > maxlen) chunk = maxlen;
    return chunk ? chunk : 1;
}

/* Chunk c of g (empty past its end). */
static hd_range_t hd_chunk(hd_range_t g, uint64_t chunk, uint64_t c)
{
    hd_range_t r;

    r.lo = g.lo + c * chunk;
    if (r.lo >= g.hi) r.lo = g.hi;
    r.hi = g.hi - r.lo < chunk ? g.hi : r.lo + chunk;
    return r;
}

static uint64_t hd_nchunks(hd_range_t g, uint64_t chunk)
{
    return (g.hi - g.lo + chunk - 1) / chunk;
}

static void hd_send_range(chorus_sched_t *s, int peer, hd_view_t from, hd_range_t g,
                          uint64_t chunk)
{
    uint64_t c, nch = hd_nchunks(g, chunk);

    for (c = 0; c < nch; c++) {
        hd_range_t k = hd_chunk(g, chunk, c);

        chorus__sched_send(s, peer, hd_at(from, k.lo), k.hi - k.lo);
    }
}

static void hd_recv_range(chorus_sched_t *s, int peer, hd_view_t into, hd_range_t g,
                          uint64_t chunk)
{
    uint64_t c, nch = hd_nchunks(g, chunk);

    for (c = 0; c < nch; c++) {
        hd_range_t k = hd_chunk(g, chunk, c);

        chorus__sched_recv(s, peer, hd_at(into, k.lo), k.hi - k.lo);
    }
}

/* out[k] = in[k] op tmp[k] (or tmp op in), split at out->split. */
static void hd_reduce(chorus_sched_t *s, const hd_out_t *out, hd_view_t in, hd_view_t tmp,
                      hd_range_t k, int in_first)
{
    while (k.lo < k.hi) {
        int below = k.lo < out->split;
        uint64_t end = below && out->split < k.hi ? out->split : k.hi;
        hd_view_t dst = below ? out->lo : out->hi;

        if (in_first)
            chorus__sched_reduce(s, hd_at(dst, k.lo), hd_at(in, k.lo), hd_at(tmp, k.lo),
                                 end - k.lo);
        else
            chorus__sched_reduce(s, hd_at(dst, k.lo), hd_at(tmp, k.lo), hd_at(in, k.lo),
                                 end - k.lo);
        k.lo = end;
    }
}

/* One halving step with peer: give away `give` (read from in), receive the peer's
 * partial of `keep` into tmp and reduce it with ours into out. */
static void hd_halve(chorus_sched_t *s, int peer, hd_view_t in, hd_range_t keep,
                     hd_range_t give, hd_view_t tmp, const hd_out_t *out, int in_first,
                     uint64_t chunk)
{
    uint64_t c, nk = hd_nchunks(keep, chunk), ng = hd_nchunks(give, chunk);

    for (c = 0; c < (nk > ng ? nk : ng); c++) {
        hd_range_t g = hd_chunk(give, chunk, c), k = hd_chunk(keep, chunk, c);

        if (g.hi > g.lo) chorus__sched_send(s, peer, hd_at(in, g.lo), g.hi - g.lo);
        if (k.hi == k.lo) continue;
        chorus__sched_recv(s, peer, hd_at(tmp, k.lo), k.hi - k.lo);
        hd_reduce(s, out, in, tmp, k, in_first);
    }
}

/* One doubling step: send mine, receive theirs, both in RECV. */
static void hd_double(chorus_sched_t *s, int peer, hd_range_t mine, hd_range_t theirs,
                      uint64_t chunk)
{
    hd_view_t rv = hd_view(CHORUS_BUF_RECV, 0, 0);
    uint64_t c, nm = hd_nchunks(mine, chunk), nt = hd_nchunks(theirs, chunk);

    for (c = 0; c < (nm > nt ? nm : nt); c++) {
        hd_range_t g = hd_chunk(mine, chunk, c), k = hd_chunk(theirs, chunk, c);

        if (g.hi > g.lo) chorus__sched_send(s, peer, hd_at(rv, g.lo), g.hi - g.lo);
        if (k.hi > k.lo) chorus__sched_recv(s, peer, hd_at(rv, k.lo), k.hi - k.lo);
    }
}

/* Elements of positions lo .. lo + m - 1 of count cut into p nearly equal blocks (the
 * first count % p one element longer). */
static hd_range_t hd_blocks(uint64_t count, int p, int lo, int m)
{
    uint64_t q = count / (uint64_t)p, rem = count % (uint64_t)p;
    uint64_t a = (uint64_t)lo, b = (uint64_t)(lo + m);
    hd_range_t g;

    g.lo = a * q + (a < rem ? a : rem);
    g.hi = b * q + (b < rem ? b : rem);
    return g;
}

static int hd_log2(int p)
{
    int l = 0;

    while ((1 << l) < p) l++;
    return l;
}

void chorus__hd_allreduce(const chorus_coll_args_t *a, chorus_sched_t *s,
                          chorus_hd_plan_fn plan_fn)
{
    int n = a->nranks, r = a->rank, p = hd_pof2(n), v = hd_virtual(n, r), L = hd_log2(p), st;
    int folded = r < 2 * (n - p);
    uint64_t cnt = a->count, chunk = hd_chunk_len(a, cnt), tmp;
    hd_range_t all = {0, cnt}, base;
    hd_view_t in = hd_view(CHORUS_BUF_SEND, 0, 0), rv = hd_view(CHORUS_BUF_RECV, 0, 0), scr;
    hd_out_t out = {rv, rv, 0};
    chorus_hd_plan_t plan;

    if (v < 0) {
        hd_send_range(s, r + 1, in, all, chunk);
        hd_recv_range(s, r + 1, rv, all, chunk);
        return;
    }
    plan_fn(p, v, &plan);
    /* Received partials only land in the half kept at the first step (or, folded, in
     * the whole vector), so scratch covers just that. */
    base = folded ? all : hd_blocks(cnt, p, plan.pos & ~(p / 2 - 1), p / 2);
    tmp = chorus__sched_scratch(s, base.hi - base.lo);
    scr = hd_view(CHORUS_BUF_SCRATCH, tmp, base.lo);
    if (folded) {
        uint64_t c, nch = hd_nchunks(all, chunk);

        for (c = 0; c < nch; c++) {
            hd_range_t k = hd_chunk(all, chunk, c);

            chorus__sched_recv(s, r - 1, hd_at(scr, k.lo), k.hi - k.lo);
            hd_reduce(s, &out, in, scr, k, 0);
        }
        in = rv;
    }
    for (st = 0; st < L; st++) {
        int m = p >> (st + 1), lo = plan.pos & ~(m - 1), q = plan.peer[st];

        hd_halve(s, hd_real(n, q), in, hd_blocks(cnt, p, lo, m), hd_blocks(cnt, p, lo ^ m, m),
                 scr, &out, v < q, chunk);
        in = rv;
    }
    for (st = L - 1; st >= 0; st--) {
        int m = p >> (st + 1), lo = plan.pos & ~(m - 1);

        hd_double(s, hd_real(n, plan.peer[st]), hd_blocks(cnt, p, lo, m),
                  hd_blocks(cnt, p, lo ^ m, m), chunk);
    }
    if (folded) hd_send_range(s, r - 1, rv, all, chunk);
}

/* Recursive halving: virtual rank v partners v ^ m and ends owning block position v. */
static void rab_plan(int p, int v, chorus_hd_plan_t *plan)
{
    int st;

    plan->pos = v;
    for (st = 0; (p >> (st + 1)) > 0; st++) plan->peer[st] = v ^ (p >> (st + 1));
}

/* First element of the blocks of virtual rank v (v = p: the end). With the folding of
 * halving.h, virtual rank v < rem stands for ranks 2v and 2v + 1 and the others for
 * v + rem, so each virtual rank's blocks are contiguous and in rank order. */
static uint64_t rab_rs_start(int n, int v, uint64_t c)
{
    int rem = n - hd_pof2(n);

    return (uint64_t)(v < rem ? 2 * v : v + rem) * c;
}

static hd_range_t rab_rs_range(int n, int lo, int m, uint64_t c)
{
    hd_range_t g = {rab_rs_start(n, lo, c), rab_rs_start(n, lo + m, c)};

    return g;
}

/* Reduce-scatter by recursive halving over virtual ranks. Partials live in scratch (RECV
 * holds one block); the last step reduces this rank's block into RECV and, folded, the
 * even partner's block into scratch to send it over. */
static void rab_reduce_scatter(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, r = a->rank, p = hd_pof2(n), v = hd_virtual(n, r), L = hd_log2(p), st;
    int folded = r < 2 * (n - p);
    uint64_t c = a->count, chunk = hd_chunk_len(a, (uint64_t)n * c), tmp, acc;
    hd_range_t all = {0, (uint64_t)n * c}, base;
    hd_view_t in = hd_view(CHORUS_BUF_SEND, 0, 0), accv, scr;
    hd_out_t out;

    if (v < 0) {
        hd_range_t mine = {0, c};

        hd_send_range(s, r + 1, in, all, chunk);
        hd_recv_range(s, r + 1, hd_view(CHORUS_BUF_RECV, 0, 0), mine, chunk);
        return;
    }
    base = folded ? all : rab_rs_range(n, v & ~(p / 2 - 1), p / 2, c);
    tmp = chorus__sched_scratch(s, base.hi - base.lo);
    acc = chorus__sched_scratch(s, base.hi - base.lo);
    scr = hd_view(CHORUS_BUF_SCRATCH, tmp, base.lo);
    accv = hd_view(CHORUS_BUF_SCRATCH, acc, base.lo);
    out.lo = out.hi = accv;
    out.split = 0;
    if (folded) {
        uint64_t k, nch = hd_nchunks(all, chunk);

        for (k = 0; k < nch; k++) {
            hd_range_t g = hd_chunk(all, chunk, k);

            chorus__sched_recv(s, r - 1, hd_at(scr, g.lo), g.hi - g.lo);
            hd_reduce(s, &out, in, scr, g, 0);
        }
        in = accv;
    }
    for (st = 0; st < L; st++) {
        int m = p >> (st + 1), lo = v & ~(m - 1), q = v ^ m;

        if (st == L - 1) {
            out.hi = hd_view(CHORUS_BUF_RECV, 0, (uint64_t)r * c);
            out.split = (uint64_t)r * c;
        }
        hd_halve(s, hd_real(n, q), in, rab_rs_range(n, lo, m, c), rab_rs_range(n, lo ^ m, m, c),
                 scr, &out, v < q, chunk);
        in = accv;
    }
    if (folded) {
        hd_range_t theirs = {(uint64_t)(r - 1) * c, (uint64_t)r * c};

        hd_send_range(s, r - 1, accv, theirs, chunk);
    }
}

chorus_status_t chorus__algo_rabenseifner(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    if (a->coll != CHORUS_COLL_ALLREDUCE && a->coll != CHORUS_COLL_REDUCE_SCATTER)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: rabenseifner does not implement %s",
                             a->rank, chorus__coll_name(a->coll));
    if (a->count == 0) return chorus__sched_finalize(s);
    if (a->nranks == 1)
        chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
    else if (a->coll == CHORUS_COLL_ALLREDUCE)
        chorus__hd_allreduce(a, s, rab_plan);
    else
        rab_reduce_scatter(a, s);
    return chorus__sched_finalize(s);
}
