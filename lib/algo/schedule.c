/*
 * The schedule builder and its dependency analysis.
 *
 * Steps are recorded in program order. finalize() replays them against a map of each
 * symbolic buffer that says, for every region, which step last wrote it and which steps
 * have read it since. A read depends on the last writer (RAW); a write depends on the last
 * writer (WAW) and on every reader since (WAR), and then becomes the only live access of
 * its region: older accesses it covers can no longer add an ordering that the chain
 * through this write does not already imply.
 *
 * The map is a sorted array of disjoint segments. Reader lists are immutable linked
 * lists in a pool, shared between the halves of a split segment, so splitting copies a
 * pointer and appending a reader to a segment is one new node.
 */
#include "algo/schedule.h"

#include "util/status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHED_NONE UINT32_MAX

void chorus__sched_init(chorus_sched_t *s, int rank, int nranks)
{
    memset(s, 0, sizeof(*s));
    s->rank = rank;
    s->nranks = nranks;
    s->status = CHORUS_SUCCESS;
}

void chorus__sched_fini(chorus_sched_t *s)
{
    free(s->steps);
    free(s->succ);
    s->steps = NULL;
    s->succ = NULL;
    s->nsteps = 0;
    s->cap = 0;
}

/* Appends a zeroed step, or returns NULL after recording the failure in s->status. */
static chorus_step_t *sched_add(chorus_sched_t *s, chorus_step_kind_t kind)
{
    chorus_step_t *step;

    if (s->status != CHORUS_SUCCESS) return NULL;
    if (s->finalized) {
        s->status = chorus__error(CHORUS_ERR_INTERNAL,
                                  "rank %d: schedule step added after finalize", s->rank);
        return NULL;
    }
    if (s->nsteps == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 64;
        chorus_step_t *steps;

        if (cap <= s->cap || cap > UINT32_MAX / 2) {
            s->status = chorus__error(CHORUS_ERR_NO_MEMORY,
                                      "rank %d: schedule has too many steps", s->rank);
            return NULL;
        }
        steps = realloc(s->steps, (size_t)cap * sizeof(*steps));
        if (steps == NULL) {
            s->status = chorus__error(CHORUS_ERR_NO_MEMORY,
                                      "rank %d: no memory for %u schedule steps", s->rank, cap);
            return NULL;
        }
        s->steps = steps;
        s->cap = cap;
    }
    step = &s->steps[s->nsteps++];
    memset(step, 0, sizeof(*step));
    step->kind = (uint8_t)kind;
    step->peer = -1;
    return step;
}

void chorus__sched_send(chorus_sched_t *s, int peer, chorus_ref_t src, uint64_t count)
{
    chorus_step_t *step = sched_add(s, CHORUS_STEP_SEND);

    if (step == NULL) return;
    step->peer = peer;
    step->src = src;
    step->count = count;
}

void chorus__sched_recv(chorus_sched_t *s, int peer, chorus_ref_t dst, uint64_t count)
{
    chorus_step_t *step = sched_add(s, CHORUS_STEP_RECV);

    if (step == NULL) return;
    step->peer = peer;
    step->dst = dst;
    step->count = count;
}

void chorus__sched_reduce(chorus_sched_t *s, chorus_ref_t dst, chorus_ref_t src,
                          chorus_ref_t src2, uint64_t count)
{
    chorus_step_t *step;

    /* An empty local step does nothing and orders nothing, unlike an empty message. */
    if (count == 0) return;
    step = sched_add(s, CHORUS_STEP_REDUCE);
    if (step == NULL) return;
    step->dst = dst;
    step->src = src;
    step->src2 = src2;
    step->count = count;
}

void chorus__sched_copy(chorus_sched_t *s, chorus_ref_t dst, chorus_ref_t src, uint64_t count)
{
    chorus_step_t *step;

    if (count == 0) return;
    step = sched_add(s, CHORUS_STEP_COPY);
    if (step == NULL) return;
    step->dst = dst;
    step->src = src;
    step->count = count;
}

void chorus__sched_reduce_n(chorus_sched_t *s, chorus_ref_t dst, chorus_ref_t src,
                            uint32_t nsrc, uint64_t stride, uint64_t count)
{
    chorus_step_t *step;

    if (count == 0) return;
    if (nsrc == 0 || (nsrc > 1 && stride < count)) {
        if (s->status == CHORUS_SUCCESS)
            s->status = chorus__error(CHORUS_ERR_INTERNAL, "rank %d: a reduce of %u sources "
                                      "%llu apart, %llu elements each", s->rank, nsrc,
                                      (unsigned long long)stride, (unsigned long long)count);
        return;
    }
    step = sched_add(s, CHORUS_STEP_REDUCE_N);
    if (step == NULL) return;
    step->dst = dst;
    step->src = src;
    step->nsrc = nsrc;
    step->stride = stride;
    step->count = count;
}

uint64_t chorus__sched_scratch(chorus_sched_t *s, uint64_t count)
{
    uint64_t off = s->scratch_count;

    s->scratch_count += count;
    return off;
}

/* ---- Dependency analysis ---- */

typedef struct {
    uint64_t start;
    uint64_t end;
    uint32_t writer;  /* step, or SCHED_NONE */
    uint32_t readers; /* head of a reader list in the pool, or SCHED_NONE */
} seg_t;

/* A gap buffer: segments 0 .. gap-1 at the front of v, gap .. n-1 at its back, the free
 * cap - n in between, at the place of the last edit. Algorithms edit near where they
 * edited last (a ring moves one chunk per step), so moving the gap costs little, where a
 * plain array moved the whole tail on every edit: a 4,096-rank ring allreduce's schedule
 * spent 3/4 of its 16 ms in memmove. */
typedef struct {
    seg_t *v;
    uint32_t n;
    uint32_t cap;
    uint32_t gap;
} segmap_t;

static inline seg_t *seg_at(const segmap_t *m, uint32_t i)
{
    return &m->v[i < m->gap ? i : i + (m->cap - m->n)];
}

typedef struct {
    uint32_t step;
    uint32_t next;
} rnode_t;

typedef struct {
    segmap_t maps[CHORUS_NUM_BUFS];
    rnode_t *pool;
    uint32_t npool, cap_pool;
    seg_t *tmp; /* the replacement segments of one read */
    uint32_t cap_tmp;
    uint32_t *edges; /* (pred, succ) pairs */
    uint64_t nedges, cap_edges;
    uint32_t *mark; /* mark[pred] == cur: edge pred -> cur already recorded */
    chorus_status_t status;
} dep_ctx_t;

/* Grows *v (of elem bytes each) to hold at least need elements. */
static int dep_grow(dep_ctx_t *c, void **v, uint64_t *cap, uint64_t need, size_t elem)
{
    uint64_t ncap;
    void *nv;

    if (need <= *cap) return 0;
    ncap = *cap ? *cap : 64;
    while (ncap < need) ncap *= 2;
    nv = realloc(*v, (size_t)(ncap * elem));
    if (nv == NULL) {
        c->status = chorus__error(CHORUS_ERR_NO_MEMORY,
                                  "schedule finalize: no memory for %" PRIu64 " entries", ncap);
        return -1;
    }
    *v = nv;
    *cap = ncap;
    return 0;
}

static int dep_grow32(dep_ctx_t *c, void **v, uint32_t *cap, uint64_t need, size_t elem)
{
    uint64_t cap64 = *cap;
    int rc;

    if (need > UINT32_MAX - 1) {
        c->status = chorus__error(CHORUS_ERR_NO_MEMORY, "schedule finalize: map too large");
        return -1;
    }
    rc = dep_grow(c, v, &cap64, need, elem);
    *cap = (uint32_t)cap64;
    return rc;
}

static void dep_edge(dep_ctx_t *c, uint32_t pred, uint32_t cur)
{
    if (pred == SCHED_NONE || pred == cur || c->mark[pred] == cur) return;
    if (dep_grow(c, (void **)&c->edges, &c->cap_edges, 2 * (c->nedges + 1), sizeof(uint32_t)))
        return;
    c->mark[pred] = cur;
    c->edges[2 * c->nedges] = pred;
    c->edges[2 * c->nedges + 1] = cur;
    c->nedges++;
}

static uint32_t dep_node(dep_ctx_t *c, uint32_t step, uint32_t next)
{
    if (dep_grow32(c, (void **)&c->pool, &c->cap_pool, (uint64_t)c->npool + 1, sizeof(rnode_t)))
        return next;
    c->pool[c->npool].step = step;
    c->pool[c->npool].next = next;
    return c->npool++;
}

/* First segment whose end is beyond off. */
static uint32_t seg_find(const segmap_t *m, uint64_t off)
{
    uint32_t lo = 0, hi = m->n;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (seg_at(m, mid)->end <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Replaces segments [i0, i1) of m with the nrep segments rep (not inside m). */
static void seg_splice(dep_ctx_t *c, segmap_t *m, uint32_t i0, uint32_t i1, const seg_t *rep,
                       uint32_t nrep)
{
    const size_t sz = sizeof(seg_t);
    uint32_t free_n = m->cap - m->n;

    /* The gap moves to i0... */
    if (m->gap > i0)
        memmove(&m->v[i0 + free_n], &m->v[i0], (size_t)(m->gap - i0) * sz);
    else if (m->gap < i0)
        memmove(&m->v[m->gap], &m->v[m->gap + free_n], (size_t)(i0 - m->gap) * sz);
    m->gap = i0;
    /* ...swallows [i0, i1)... */
    m->n -= i1 - i0;
    /* ...grows, the back half moving to the new end, when rep does not fit... */
    if (m->cap - m->n < nrep) {
        uint32_t old_cap = m->cap, tail = m->n - m->gap;
        if (dep_grow32(c, (void **)&m->v, &m->cap, (uint64_t)m->n + nrep, sz)) {
            m->n += i1 - i0; /* as it was, gap moved: the map still reads the same */
            return;
        }
        memmove(&m->v[m->cap - tail], &m->v[old_cap - tail], (size_t)tail * sz);
    }
    /* ...and rep fills its front. */
    memcpy(&m->v[m->gap], rep, (size_t)nrep * sz);
    m->gap += nrep;
    m->n += nrep;
}

/* Makes off a segment boundary (splits the segment that strictly contains it). */
static void seg_split(dep_ctx_t *c, segmap_t *m, uint64_t off)
{
    uint32_t i = seg_find(m, off);
    seg_t two[2];

    if (i == m->n || seg_at(m, i)->start >= off) return;
    two[0] = *seg_at(m, i);
    two[1] = two[0];
    two[0].end = off;
    two[1].start = off;
    seg_splice(c, m, i, i + 1, two, 2);
}

static void dep_write(dep_ctx_t *c, segmap_t *m, uint64_t lo, uint64_t hi, uint32_t cur)
{
    uint32_t i0, i1, i;
    seg_t w = {lo, hi, cur, SCHED_NONE};

    seg_split(c, m, lo);
    seg_split(c, m, hi);
    if (c->status != CHORUS_SUCCESS) return;
    i0 = seg_find(m, lo);
    for (i1 = i0; i1 < m->n && seg_at(m, i1)->start < hi; i1++) {
        dep_edge(c, seg_at(m, i1)->writer, cur);
        for (i = seg_at(m, i1)->readers; i != SCHED_NONE; i = c->pool[i].next)
            dep_edge(c, c->pool[i].step, cur);
    }
    seg_splice(c, m, i0, i1, &w, 1);
}

static void dep_read(dep_ctx_t *c, segmap_t *m, uint64_t lo, uint64_t hi, uint32_t cur)
{
    uint32_t i0, i1, n = 0;
    uint64_t pos = lo;

    seg_split(c, m, lo);
    seg_split(c, m, hi);
    if (c->status != CHORUS_SUCCESS) return;
    i0 = seg_find(m, lo);
    for (i1 = i0; i1 < m->n && seg_at(m, i1)->start < hi; i1++) {
        const seg_t *g = seg_at(m, i1);
        if (dep_grow32(c, (void **)&c->tmp, &c->cap_tmp, (uint64_t)n + 2, sizeof(seg_t))) return;
        if (g->start > pos) {
            seg_t gap = {pos, g->start, SCHED_NONE, dep_node(c, cur, SCHED_NONE)};
            c->tmp[n++] = gap;
        }
        dep_edge(c, g->writer, cur);
        c->tmp[n] = *g;
        c->tmp[n].readers = dep_node(c, cur, g->readers);
        pos = c->tmp[n++].end;
    }
    if (pos < hi) {
        seg_t gap = {pos, hi, SCHED_NONE, SCHED_NONE};
        if (dep_grow32(c, (void **)&c->tmp, &c->cap_tmp, (uint64_t)n + 1, sizeof(seg_t))) return;
        gap.readers = dep_node(c, cur, SCHED_NONE);
        c->tmp[n++] = gap;
    }
    if (c->status != CHORUS_SUCCESS) return;
    seg_splice(c, m, i0, i1, c->tmp, n);
}

static void dep_access(dep_ctx_t *c, chorus_ref_t ref, uint64_t count, int write, uint32_t cur)
{
    if (count == 0 || ref.buf >= CHORUS_NUM_BUFS || c->status != CHORUS_SUCCESS) return;
    if (write)
        dep_write(c, &c->maps[ref.buf], ref.off, ref.off + count, cur);
    else
        dep_read(c, &c->maps[ref.buf], ref.off, ref.off + count, cur);
}

/* Records every step's predecessors as (pred, succ) edges, in order of succ.
 * An empty message orders like one element at its offset: it carries no data, but a
 * chain of them (a barrier: receive round j, then send round j + 1) needs dependencies. */
static void dep_analyse(dep_ctx_t *c, const chorus_sched_t *s)
{
    uint32_t i;

    for (i = 0; i < s->nsteps && c->status == CHORUS_SUCCESS; i++) {
        const chorus_step_t *st = &s->steps[i];
        uint64_t msg_count = st->count ? st->count : 1;

        switch (st->kind) {
        case CHORUS_STEP_SEND:
            dep_access(c, st->src, msg_count, 0, i);
            break;
        case CHORUS_STEP_RECV:
            dep_access(c, st->dst, msg_count, 1, i);
            break;
        case CHORUS_STEP_REDUCE:
            dep_access(c, st->src, st->count, 0, i);
            dep_access(c, st->src2, st->count, 0, i);
            dep_access(c, st->dst, st->count, 1, i);
            break;
        case CHORUS_STEP_COPY:
            dep_access(c, st->src, st->count, 0, i);
            dep_access(c, st->dst, st->count, 1, i);
            break;
        case CHORUS_STEP_REDUCE_N:
            /* The sources' span, gaps included: direct.c keeps a chunk's sources
             * together, so the gaps hold nothing else. */
            dep_access(c, st->src, (uint64_t)(st->nsrc - 1) * st->stride + st->count, 0, i);
            dep_access(c, st->dst, st->count, 1, i);
            break;
        default:
            break;
        }
    }
}

/* Fills ndeps and the successor lists (CSR) from the edges. */
static chorus_status_t dep_build_csr(dep_ctx_t *c, chorus_sched_t *s)
{
    uint64_t e;
    uint32_t i, pos = 0;

    free(s->succ);
    s->succ = malloc((size_t)(c->nedges ? c->nedges : 1) * sizeof(uint32_t));
    if (s->succ == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: no memory for %" PRIu64
                             " schedule edges", s->rank, c->nedges);
    for (i = 0; i < s->nsteps; i++) {
        s->steps[i].ndeps = 0;
        s->steps[i].nsucc = 0;
    }
    for (e = 0; e < c->nedges; e++) {
        s->steps[c->edges[2 * e]].nsucc++;
        s->steps[c->edges[2 * e + 1]].ndeps++;
    }
    for (i = 0; i < s->nsteps; i++) {
        s->steps[i].succ_begin = pos;
        pos += s->steps[i].nsucc;
        s->steps[i].nsucc = 0;
    }
    for (e = 0; e < c->nedges; e++) {
        chorus_step_t *p = &s->steps[c->edges[2 * e]];
        s->succ[p->succ_begin + p->nsucc++] = c->edges[2 * e + 1];
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__sched_finalize(chorus_sched_t *s)
{
    dep_ctx_t c;
    int b;

    if (s->status != CHORUS_SUCCESS || s->finalized) return s->status;
    memset(&c, 0, sizeof(c));
    c.status = CHORUS_SUCCESS;
    c.mark = malloc((size_t)(s->nsteps ? s->nsteps : 1) * sizeof(uint32_t));
    if (c.mark == NULL) {
        s->status = chorus__error(CHORUS_ERR_NO_MEMORY,
                                  "rank %d: no memory to finalize a schedule", s->rank);
        return s->status;
    }
    memset(c.mark, 0xff, (size_t)s->nsteps * sizeof(uint32_t));
    dep_analyse(&c, s);
    if (c.status == CHORUS_SUCCESS) c.status = dep_build_csr(&c, s);
    for (b = 0; b < CHORUS_NUM_BUFS; b++) free(c.maps[b].v);
    free(c.pool);
    free(c.tmp);
    free(c.edges);
    free(c.mark);
    s->status = c.status;
    if (s->status == CHORUS_SUCCESS) s->finalized = 1;
    return s->status;
}

/* ---- Listing ---- */

static const char *const buf_names[CHORUS_NUM_BUFS] = {"SEND", "RECV", "SCRATCH"};

static void dump_ref(FILE *f, chorus_ref_t r, uint64_t count)
{
    const char *name = r.buf < CHORUS_NUM_BUFS ? buf_names[r.buf] : "?";

    fprintf(f, "%s[%" PRIu64 "..%" PRIu64 ")", name, r.off, r.off + count);
}

void chorus__sched_dump(const chorus_sched_t *s, void *file)
{
    FILE *f = file ? (FILE *)file : stderr;
    uint32_t i, k;

    fprintf(f, "schedule of rank %d/%d: %u steps, scratch %" PRIu64 " elements%s\n", s->rank,
            s->nranks, s->nsteps, s->scratch_count, s->finalized ? "" : " (not finalized)");
    for (i = 0; i < s->nsteps; i++) {
        const chorus_step_t *st = &s->steps[i];

        fprintf(f, "  %4u: ", i);
        switch (st->kind) {
        case CHORUS_STEP_SEND:
            fprintf(f, "SEND   to %-3d ", st->peer);
            dump_ref(f, st->src, st->count);
            break;
        case CHORUS_STEP_RECV:
            fprintf(f, "RECV from %-3d ", st->peer);
            dump_ref(f, st->dst, st->count);
            break;
        case CHORUS_STEP_REDUCE:
            fprintf(f, "REDUCE ");
            dump_ref(f, st->dst, st->count);
            fprintf(f, " = ");
            dump_ref(f, st->src, st->count);
            fprintf(f, " op ");
            dump_ref(f, st->src2, st->count);
            break;
        case CHORUS_STEP_REDUCE_N:
            fprintf(f, "REDUCE ");
            dump_ref(f, st->dst, st->count);
            fprintf(f, " = %u sources ", st->nsrc);
            dump_ref(f, st->src, st->count);
            fprintf(f, " every %" PRIu64, st->stride);
            break;
        case CHORUS_STEP_COPY:
            fprintf(f, "COPY   ");
            dump_ref(f, st->dst, st->count);
            fprintf(f, " = ");
            dump_ref(f, st->src, st->count);
            break;
        default:
            fprintf(f, "kind %d?", st->kind);
            break;
        }
        if (s->finalized) {
            fprintf(f, "  deps %u", st->ndeps);
            if (st->nsucc) fprintf(f, " ->");
            for (k = 0; k < st->nsucc; k++) fprintf(f, " %u", s->succ[st->succ_begin + k]);
        }
        fprintf(f, "\n");
    }
}
