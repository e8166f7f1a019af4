/*
 * Max-min fair flows (flow.h), solved only where something changed.
 *
 * Bundles: flows over the same path always get the same rate, so they are kept together
 * (a ring's pipelined chunks between two ranks are one bundle of several flows), and the
 * solver works on bundles of m flows.
 *
 * Components: max-min rates of flows that share no link, even through other flows, do not
 * depend on each other. A start or an end marks the links of its path; the next solve
 * gathers the bundles reachable from the marked links (link -> bundles on it -> their
 * links -> ...) and recomputes only those, by progressive filling: every link of the
 * component gets its capacity and its count of unfixed flows; a heap orders the links by
 * fair share (lazily: an entry whose share has changed is pushed again); the link on top
 * fixes its unfixed bundles at its share, which is taken out of every link they cross.
 * Shares only grow as flows are fixed, so the first valid entry on top is always the next
 * bottleneck. On a fat tree whose paths spread over many links a component stays small,
 * which is what makes thousands of ranks affordable.
 *
 * Ends: flows of a bundle move at one rate, so a bundle counts the bytes each of its flows
 * has been served since it was made ("served", brought up to date at every rate change); a
 * flow that joins when served is s ends when served reaches s + its bytes, its "level".
 * A bundle keeps its flows in a heap by level and has one next end, now + (lowest level -
 * served) / rate; an indexed heap orders the bundles by it. A rate change is then O(log
 * bundles) whatever the flows in the bundle (a tree's pipeline keeps hundreds of chunks
 * on one path).
 *
 * Token buckets (a few links, the emulated cluster's tbf): a bucketed link's capacity is
 * its peak or its rate by the bucket's state; its tokens move at rate - load between
 * solves (load: what its flows carry, known after each solve), so when it empties or
 * refills is exact too, and the next event is the earliest of the flows' ends and the
 * buckets' turns. A turn marks the link dirty like a start or an end.
 */
#include "sim/flow.h"

#include "util/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double level; /* its bundle's served count at which it ends */
    double bytes;
    uint64_t tag;
    int32_t bundle; /* -1: a free slot */
    int32_t next_free;
} flow_t;

typedef struct {
    int32_t links[CHORUS_FLOW_PATH_MAX];
    int nlinks;
    int32_t m;        /* flows in flight */
    double rate;      /* per flow */
    double served;    /* per flow, at t_mark */
    double t_mark;
    double t_next;    /* when its next flow ends */
    int32_t *flows;   /* its flows in flight: a heap by level */
    int32_t capflows;
    int32_t hpos;     /* in the heap of bundles by t_next; -1: not there */
    uint64_t hash;
    int32_t hnext;    /* hash chain */
    int32_t mark;     /* solve: in the component of solve number mark */
    int fixed;
} bundle_t;

typedef struct {
    double share;
    int32_t link;
} lheap_t;

typedef struct {
    int32_t *b; /* bundles with flows on this link */
    int32_t n, cap;
} lbundles_t;

typedef struct {
    int32_t link;
    double bucket, peak, rate; /* bytes, bytes/s, bytes/s */
    double refill;             /* tokens an empty bucket needs to burst again */
    double tokens, load, t_upd;
    int burst;                 /* the link runs at peak */
} tbucket_t;

struct chorus_flownet {
    int nlinks;
    double *cap;
    double *carried;
    lbundles_t *on;   /* per link */
    uint8_t *dirty_l; /* per link: in the dirty list */
    int32_t *dirty;
    int ndirty;
    int32_t *lmark;   /* per link: the solve that last gathered it */
    double *rem;
    int64_t *nun;
    flow_t *flows;
    int32_t capflows, free_head, nactive;
    bundle_t *bundles;
    int32_t nbundles, capbundles;
    int32_t *htab; /* bundle hash heads */
    int32_t caphtab;
    int32_t *ends; /* bundles with flows, by t_next: an indexed heap */
    size_t nends, capends;
    lheap_t *lheap;
    size_t nlheap, caplheap;
    int32_t *comp_b, *comp_l; /* solve scratch */
    size_t capcomp_b, capcomp_l;
    int32_t solve_no;
    double now;
    uint64_t solves;
    tbucket_t *bk;   /* token buckets */
    int nbk;
    int32_t *bk_of;  /* per link: its bucket, -1 none (NULL until the first) */
};

chorus_status_t chorus__flownet_create(const double *cap, int nlinks, chorus_flownet_t **net_p)
{
    chorus_flownet_t *n = calloc(1, sizeof *n);

    if (n == NULL || nlinks < 0) goto nomem;
    n->nlinks = nlinks;
    n->cap = malloc(((size_t)nlinks + 1) * sizeof *n->cap);
    n->carried = calloc((size_t)nlinks + 1, sizeof *n->carried);
    n->on = calloc((size_t)nlinks + 1, sizeof *n->on);
    n->dirty_l = calloc((size_t)nlinks + 1, 1);
    n->dirty = malloc(((size_t)nlinks + 1) * sizeof *n->dirty);
    n->lmark = calloc((size_t)nlinks + 1, sizeof *n->lmark);
    n->rem = malloc(((size_t)nlinks + 1) * sizeof *n->rem);
    n->nun = malloc(((size_t)nlinks + 1) * sizeof *n->nun);
    n->caphtab = 1024;
    n->htab = malloc((size_t)n->caphtab * sizeof *n->htab);
    if (!n->cap || !n->carried || !n->on || !n->dirty_l || !n->dirty || !n->lmark || !n->rem ||
        !n->nun || !n->htab)
        goto nomem;
    memcpy(n->cap, cap, (size_t)nlinks * sizeof *cap);
    for (int i = 0; i < n->caphtab; i++) n->htab[i] = -1;
    n->free_head = -1;
    *net_p = n;
    return CHORUS_SUCCESS;
nomem:
    chorus__flownet_free(n);
    return chorus__error(CHORUS_ERR_NO_MEMORY, "flow network: no memory for %d links", nlinks);
}

void chorus__flownet_free(chorus_flownet_t *n)
{
    if (n == NULL) return;
    for (int l = 0; n->on != NULL && l < n->nlinks; l++) free(n->on[l].b);
    for (int b = 0; b < n->nbundles; b++) free(n->bundles[b].flows);
    free(n->cap);
    free(n->carried);
    free(n->on);
    free(n->dirty_l);
    free(n->dirty);
    free(n->lmark);
    free(n->rem);
    free(n->nun);
    free(n->flows);
    free(n->bundles);
    free(n->htab);
    free(n->ends);
    free(n->lheap);
    free(n->comp_b);
    free(n->comp_l);
    free(n->bk);
    free(n->bk_of);
    free(n);
}

static int grow(void **v, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 256;
    void *p;
    if (need <= *cap) return 0;
    while (c < need) c *= 2;
    p = realloc(*v, c * elem);
    if (p == NULL) return -1;
    *v = p;
    *cap = c;
    return 0;
}

static uint64_t path_hash(const int32_t *links, int n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)links[i]) * 1099511628211ull;
    /* FNV's low bits depend only on the inputs' low bits, and the table is indexed by its
     * low bits: paths that differ in high link numbers would share a chain. Mix them down. */
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 33);
}

static void mark_link_dirty(chorus_flownet_t *n, int32_t l)
{
    if (!n->dirty_l[l]) {
        n->dirty_l[l] = 1;
        n->dirty[n->ndirty++] = l;
    }
}

static void mark_dirty(chorus_flownet_t *n, const bundle_t *b)
{
    for (int i = 0; i < b->nlinks; i++) mark_link_dirty(n, b->links[i]);
}

/* The bundle of this path, made when new. -1 when out of memory. */
static int32_t bundle_of(chorus_flownet_t *n, const int32_t *links, int nlinks)
{
    uint64_t h = path_hash(links, nlinks);
    int32_t *head = &n->htab[h & (uint64_t)(n->caphtab - 1)];
    bundle_t *b;

    for (int32_t k = *head; k >= 0; k = n->bundles[k].hnext)
        if (n->bundles[k].hash == h && n->bundles[k].nlinks == nlinks &&
            memcmp(n->bundles[k].links, links, (size_t)nlinks * sizeof *links) == 0)
            return k;
    if (n->nbundles == n->capbundles) {
        size_t cap = (size_t)n->capbundles;
        if (grow((void **)&n->bundles, &cap, (size_t)n->nbundles + 1, sizeof *n->bundles))
            return -1;
        n->capbundles = (int32_t)cap;
    }
    if (2 * (n->nbundles + 1) > n->caphtab) {
        int32_t cap = 2 * n->caphtab, *t = malloc((size_t)cap * sizeof *t);
        if (t == NULL) return -1;
        free(n->htab);
        n->htab = t;
        n->caphtab = cap;
        for (int i = 0; i < cap; i++) t[i] = -1;
        for (int32_t k = 0; k < n->nbundles; k++) {
            int32_t *hh = &t[n->bundles[k].hash & (uint64_t)(cap - 1)];
            n->bundles[k].hnext = *hh;
            *hh = k;
        }
        head = &n->htab[h & (uint64_t)(n->caphtab - 1)];
    }
    b = &n->bundles[n->nbundles];
    memset(b, 0, sizeof *b);
    memcpy(b->links, links, (size_t)nlinks * sizeof *links);
    b->nlinks = nlinks;
    b->hpos = -1;
    b->hash = h;
    b->hnext = *head;
    *head = n->nbundles;
    return n->nbundles++;
}

/* Adds or removes bundle k from the lists of its links (when its count goes 0 <-> 1). */
static int bundle_link(chorus_flownet_t *n, int32_t k, int add)
{
    bundle_t *b = &n->bundles[k];
    for (int i = 0; i < b->nlinks; i++) {
        lbundles_t *o = &n->on[b->links[i]];
        if (add) {
            size_t cap = (size_t)o->cap;
            if (grow((void **)&o->b, &cap, (size_t)o->n + 1, sizeof *o->b)) return -1;
            o->cap = (int32_t)cap;
            o->b[o->n++] = k;
        } else {
            for (int32_t j = 0; j < o->n; j++)
                if (o->b[j] == k) {
                    o->b[j] = o->b[--o->n];
                    break;
                }
        }
    }
    return 0;
}

static void end_place(chorus_flownet_t *n, size_t i, int32_t b)
{
    n->ends[i] = b;
    n->bundles[b].hpos = (int32_t)i;
}

static void end_sift(chorus_flownet_t *n, size_t i)
{
    int32_t x = n->ends[i];
    double t = n->bundles[x].t_next;

    while (i > 0 && n->bundles[n->ends[(i - 1) / 2]].t_next > t) {
        end_place(n, i, n->ends[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n->nends) break;
        if (c + 1 < n->nends && n->bundles[n->ends[c + 1]].t_next < n->bundles[n->ends[c]].t_next)
            c++;
        if (n->bundles[n->ends[c]].t_next >= t) break;
        end_place(n, i, n->ends[c]);
        i = c;
    }
    end_place(n, i, x);
}

/* Brings b's served count up to now. */
static void bundle_serve(chorus_flownet_t *n, bundle_t *b)
{
    if (n->now > b->t_mark && b->rate > 0 && !isinf(b->rate))
        b->served += b->rate * (n->now - b->t_mark);
    b->t_mark = n->now;
}

/* Recomputes b's next end and its place among the bundles (out when it has no flows). */
static int bundle_key(chorus_flownet_t *n, int32_t k)
{
    bundle_t *b = &n->bundles[k];

    if (b->m == 0) {
        if (b->hpos >= 0) {
            size_t i = (size_t)b->hpos;
            int32_t last = n->ends[--n->nends];
            b->hpos = -1;
            if (i < n->nends) {
                end_place(n, i, last);
                end_sift(n, i);
            }
        }
        return 0;
    }
    if (isinf(b->rate)) b->t_next = n->now;
    else if (b->rate > 0) {
        double gap = n->flows[b->flows[0]].level - b->served;
        b->t_next = b->t_mark + (gap > 0 ? gap / b->rate : 0);
    } else b->t_next = INFINITY;
    if (b->hpos < 0) {
        if (grow((void **)&n->ends, &n->capends, n->nends + 1, sizeof *n->ends)) return -1;
        b->hpos = (int32_t)n->nends++;
        n->ends[b->hpos] = k;
    }
    end_sift(n, (size_t)b->hpos);
    return 0;
}

/* The bundle's flows by level: push and pop-min. */
static void bflows_push(chorus_flownet_t *n, bundle_t *b, int32_t id)
{
    int32_t i = b->m++;
    double lv = n->flows[id].level;
    while (i > 0 && n->flows[b->flows[(i - 1) / 2]].level > lv) {
        b->flows[i] = b->flows[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    b->flows[i] = id;
}

static void bflows_pop(chorus_flownet_t *n, bundle_t *b)
{
    int32_t last = b->flows[--b->m], i = 0;
    double lv = n->flows[last].level;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= b->m) break;
        if (c + 1 < b->m && n->flows[b->flows[c + 1]].level < n->flows[b->flows[c]].level) c++;
        if (n->flows[b->flows[c]].level >= lv) break;
        b->flows[i] = b->flows[c];
        i = c;
    }
    if (b->m > 0) b->flows[i] = last;
}

chorus_status_t chorus__flownet_set_bucket(chorus_flownet_t *n, int link, double bucket,
                                           double peak)
{
    tbucket_t *b;

    if (link < 0 || link >= n->nlinks || !(n->cap[link] > 0) || !(bucket > 0) ||
        !(peak > n->cap[link]) || isinf(bucket) || isinf(peak))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "flow network: a bucket of %g bytes at %g B/s on link %d", bucket,
                             peak, link);
    if (n->bk_of == NULL) {
        n->bk_of = malloc((size_t)n->nlinks * sizeof *n->bk_of);
        if (n->bk_of == NULL) goto nomem;
        for (int l = 0; l < n->nlinks; l++) n->bk_of[l] = -1;
    }
    if (n->bk_of[link] < 0) {
        tbucket_t *v = realloc(n->bk, ((size_t)n->nbk + 1) * sizeof *v);
        if (v == NULL) goto nomem;
        n->bk = v;
        n->bk_of[link] = n->nbk++;
        n->bk[n->bk_of[link]].rate = n->cap[link];
    }
    b = &n->bk[n->bk_of[link]];
    b->link = link;
    b->bucket = bucket;
    b->peak = peak;
    b->refill = bucket < CHORUS_FLOW_BURST_PACKET ? bucket : CHORUS_FLOW_BURST_PACKET;
    b->tokens = 0;
    b->load = 0;
    b->t_upd = n->now;
    b->burst = 0;
    mark_link_dirty(n, link);
    return CHORUS_SUCCESS;
nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "flow network: no memory for a bucket");
}

/* The bucket's tokens at t, its load unchanged since t_upd. */
static void bk_sync(tbucket_t *b, double t)
{
    if (t <= b->t_upd) return;
    b->tokens += (b->rate - b->load) * (t - b->t_upd);
    if (b->tokens > b->bucket) b->tokens = b->bucket;
    if (b->tokens < 0) b->tokens = 0;
    b->t_upd = t;
}

/* When the bucket next turns: empties while bursting above its rate, or holds enough to
 * burst again while paced below it. */
static double bk_turn(const tbucket_t *b)
{
    if (b->burst && b->load > b->rate * (1 + 1e-12)) return b->t_upd + b->tokens / (b->load - b->rate);
    if (!b->burst && b->load < b->rate * (1 - 1e-12)) {
        double need = b->refill - b->tokens;
        return b->t_upd + (need > 0 ? need / (b->rate - b->load) : 0);
    }
    return INFINITY;
}

chorus_status_t chorus__flownet_add(chorus_flownet_t *n, double now, const int32_t *links,
                                    int nlinks, double bytes, uint64_t tag)
{
    int32_t id, k;
    flow_t *f;
    bundle_t *b;

    if (nlinks < 0 || nlinks > CHORUS_FLOW_PATH_MAX || !(bytes >= 0))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "flow network: a path of %d links, %g bytes", nlinks, bytes);
    for (int i = 0; i < nlinks; i++)
        if (links[i] < 0 || links[i] >= n->nlinks || !(n->cap[links[i]] > 0))
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "flow network: link %d of a path is down or unknown", links[i]);
    if (now > n->now) n->now = now;
    if (n->free_head < 0) {
        size_t cap = (size_t)n->capflows, old = cap;
        if (grow((void **)&n->flows, &cap, old + 1, sizeof *n->flows)) goto nomem;
        for (size_t i = cap; i-- > old;) {
            n->flows[i].next_free = n->free_head;
            n->flows[i].bundle = -1;
            n->free_head = (int32_t)i;
        }
        n->capflows = (int32_t)cap;
    }
    k = bundle_of(n, links, nlinks);
    if (k < 0) goto nomem;
    b = &n->bundles[k];
    {
        size_t cap = (size_t)b->capflows;
        if (grow((void **)&b->flows, &cap, (size_t)b->m + 1, sizeof *b->flows)) goto nomem;
        b->capflows = (int32_t)cap;
    }
    if (b->m == 0 && bundle_link(n, k, 1)) goto nomem;
    bundle_serve(n, b);
    id = n->free_head;
    f = &n->flows[id];
    n->free_head = f->next_free;
    f->bytes = bytes;
    f->level = b->served + bytes;
    f->tag = tag;
    f->bundle = k;
    bflows_push(n, b, id);
    n->nactive++;
    mark_dirty(n, b);
    /* Its rate comes with the next solve; until then its end is what the bundle's is. */
    if (bundle_key(n, k)) goto nomem;
    return CHORUS_SUCCESS;
nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "flow network: no memory for flows");
}

static int lheap_push(chorus_flownet_t *n, double share, int32_t link)
{
    size_t i;
    if (grow((void **)&n->lheap, &n->caplheap, n->nlheap + 1, sizeof *n->lheap)) return -1;
    i = n->nlheap++;
    while (i > 0 && n->lheap[(i - 1) / 2].share > share) {
        n->lheap[i] = n->lheap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    n->lheap[i].share = share;
    n->lheap[i].link = link;
    return 0;
}

static lheap_t lheap_pop(chorus_flownet_t *n)
{
    lheap_t top = n->lheap[0], last = n->lheap[--n->nlheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n->nlheap) break;
        if (c + 1 < n->nlheap && n->lheap[c + 1].share < n->lheap[c].share) c++;
        if (n->lheap[c].share >= last.share) break;
        n->lheap[i] = n->lheap[c];
        i = c;
    }
    if (n->nlheap > 0) n->lheap[i] = last;
    return top;
}

/* A bundle's new rate, from now on. */
static int bundle_set_rate(chorus_flownet_t *n, int32_t k, double rate)
{
    bundle_t *b = &n->bundles[k];
    bundle_serve(n, b);
    b->rate = rate;
    return bundle_key(n, k);
}

/* Max-min rates of the component of the dirty links. -1 when out of memory. */
static int flow_solve(chorus_flownet_t *n)
{
    size_t nb = 0, nl = 0;
    int32_t mark = ++n->solve_no;

    n->solves++;
    /* Gather: links from the dirty ones, bundles on them, their links, and so on. */
    for (int i = 0; i < n->ndirty; i++) {
        int32_t l = n->dirty[i];
        n->dirty_l[l] = 0;
        if (n->lmark[l] == mark) continue;
        n->lmark[l] = mark;
        if (grow((void **)&n->comp_l, &n->capcomp_l, nl + 1, sizeof *n->comp_l)) return -1;
        n->comp_l[nl++] = l;
    }
    n->ndirty = 0;
    for (size_t li = 0; li < nl; li++) {
        lbundles_t *o = &n->on[n->comp_l[li]];
        for (int32_t j = 0; j < o->n; j++) {
            bundle_t *b = &n->bundles[o->b[j]];
            if (b->mark == mark) continue;
            b->mark = mark;
            b->fixed = 0;
            if (grow((void **)&n->comp_b, &n->capcomp_b, nb + 1, sizeof *n->comp_b)) return -1;
            n->comp_b[nb++] = o->b[j];
            for (int i = 0; i < b->nlinks; i++) {
                int32_t m = b->links[i];
                if (n->lmark[m] == mark) continue;
                n->lmark[m] = mark;
                if (grow((void **)&n->comp_l, &n->capcomp_l, nl + 1, sizeof *n->comp_l)) return -1;
                n->comp_l[nl++] = m;
            }
        }
    }
    /* Progressive filling over the component. */
    n->nlheap = 0;
    for (size_t li = 0; li < nl; li++) {
        int32_t l = n->comp_l[li];
        lbundles_t *o = &n->on[l];
        if (n->bk_of != NULL && n->bk_of[l] >= 0) bk_sync(&n->bk[n->bk_of[l]], n->now);
        n->rem[l] = n->cap[l];
        n->nun[l] = 0;
        for (int32_t j = 0; j < o->n; j++) n->nun[l] += n->bundles[o->b[j]].m;
        if (n->nun[l] > 0 && lheap_push(n, n->rem[l] / (double)n->nun[l], l)) return -1;
    }
    for (size_t bi = 0; bi < nb; bi++) {
        bundle_t *b = &n->bundles[n->comp_b[bi]];
        if (b->nlinks == 0) {
            b->fixed = 1;
            if (bundle_set_rate(n, n->comp_b[bi], INFINITY)) return -1;
        }
    }
    while (n->nlheap > 0) {
        lheap_t e = lheap_pop(n);
        int32_t l = e.link;
        lbundles_t *o = &n->on[l];
        double share;
        if (n->nun[l] <= 0) continue;
        share = n->rem[l] / (double)n->nun[l];
        if (share != e.share) {
            if (lheap_push(n, share, l)) return -1;
            continue;
        }
        if (share < 0) share = 0;
        for (int32_t j = 0; j < o->n; j++) {
            bundle_t *b = &n->bundles[o->b[j]];
            if (b->fixed || b->m == 0) continue;
            b->fixed = 1;
            for (int i = 0; i < b->nlinks; i++) {
                int32_t m = b->links[i];
                n->rem[m] -= share * b->m;
                n->nun[m] -= b->m;
                if (m != l && n->nun[m] > 0 && lheap_push(n, n->rem[m] / (double)n->nun[m], m))
                    return -1;
            }
            if (bundle_set_rate(n, o->b[j], share)) return -1;
        }
    }
    /* What the bucketed links now carry: their capacity less what is left of it. */
    for (size_t li = 0; n->bk_of != NULL && li < nl; li++) {
        int32_t l = n->comp_l[li];
        if (n->bk_of[l] < 0) continue;
        tbucket_t *b = &n->bk[n->bk_of[l]];
        b->load = n->cap[l] - n->rem[l] > 0 ? n->cap[l] - n->rem[l] : 0;
    }
    return 0;
}

double chorus__flownet_next(chorus_flownet_t *n)
{
    double t;
    if (n->ndirty > 0 && flow_solve(n)) return NAN;
    t = n->nends > 0 ? n->bundles[n->ends[0]].t_next : INFINITY;
    for (int k = 0; k < n->nbk; k++) {
        double turn = bk_turn(&n->bk[k]);
        if (turn < t) t = turn < n->now ? n->now : turn;
    }
    return t;
}

int chorus__flownet_advance(chorus_flownet_t *n, double t, uint64_t *tags, int max)
{
    const double slack = 1e-9 * (t > 1e-6 ? t : 1e-6);
    int got = 0;

    if (t > n->now) n->now = t;
    /* Buckets that empty or refill by now turn: their link's capacity changes. */
    for (int k = 0; k < n->nbk; k++) {
        tbucket_t *b = &n->bk[k];
        double turn = bk_turn(b);
        bk_sync(b, n->now);
        if (turn > n->now + slack) continue;
        b->burst = !b->burst;
        if (!b->burst) b->tokens = 0;
        n->cap[b->link] = b->burst ? b->peak : b->rate;
        mark_link_dirty(n, b->link);
    }
    /* Ended: due by now, or within a part in 1e9 of it (the rounding of flows that end
     * together). */
    while (got < max && n->nends > 0) {
        const int32_t k = n->ends[0];
        bundle_t *b = &n->bundles[k];
        if (b->t_next > n->now + slack) break;
        bundle_serve(n, b);
        while (got < max && b->m > 0) {
            const int32_t id = b->flows[0];
            flow_t *f = &n->flows[id];
            if (!isinf(b->rate) && f->level > b->served + 1e-9 * f->level &&
                b->t_mark + (f->level - b->served) / b->rate > n->now + slack)
                break;
            bflows_pop(n, b);
            for (int i = 0; i < b->nlinks; i++) n->carried[b->links[i]] += f->bytes;
            tags[got++] = f->tag;
            f->bundle = -1;
            f->next_free = n->free_head;
            n->free_head = id;
            n->nactive--;
        }
        if (b->m == 0) bundle_link(n, k, 0);
        mark_dirty(n, b);
        if (bundle_key(n, k)) return -1;
    }
    return got;
}

double chorus__flownet_now(const chorus_flownet_t *n)
{
    return n->now;
}

int chorus__flownet_active(const chorus_flownet_t *n)
{
    return n->nactive;
}

const double *chorus__flownet_link_bytes(const chorus_flownet_t *n)
{
    return n->carried;
}

uint64_t chorus__flownet_solves(const chorus_flownet_t *n)
{
    return n->solves;
}
