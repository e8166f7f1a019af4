/*
 * Every rank's schedule for a run, built with lib/algo exactly as a communicator builds it
 * and kept in the compact form sim.c replays (sim_int.h): ranks whose compact schedules are
 * equal share one ("classes").
 *
 * Thousands of ranks take seconds to build, so ranges of ranks are built on threads, one a
 * core (a run of fewer than BUILD_THREADED_MIN ranks, the tuner's among them, stays on the
 * caller's thread; chorus_sim_args_t.build_threads overrides). The ranges' classes are
 * merged in rank order; the run does not depend on how many threads built it.
 */
#include "sim/sim_int.h"

#include "chorus.h"
#include "util/hugemem.h"
#include "util/status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUILD_THREADED_MIN 256
#define BUILD_THREADS_MAX 8
/* How many of the newest classes a new one is compared with: neighbours tend to share. */
#define CLASS_WINDOW 64

void chorus__sim_class_free(sim_class_t *c)
{
    if (c == NULL) return;
    free(c->kind);
    free(c->relpeer);
    free(c->bytes);
    free(c->ndeps);
    free(c->succ_begin);
    free(c->succ);
    free(c->ordinal);
    for (int d = 0; d < 2; d++) {
        free(c->msg_step[d]);
        free(c->slot_peer[d]);
        free(c->slot_begin[d]);
    }
    free(c);
}

static size_t class_bytes(const sim_class_t *c, uint64_t nsucc)
{
    return c->nsteps * (sizeof *c->kind + sizeof *c->relpeer + sizeof *c->bytes + sizeof *c->ndeps +
                        sizeof *c->succ_begin + sizeof *c->ordinal) +
           nsucc * sizeof *c->succ +
           (c->nmsg[0] + c->nmsg[1]) * (sizeof(uint32_t) + sizeof(int32_t) + sizeof(uint32_t)) +
           sizeof *c;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

static int class_equal(const sim_class_t *x, const sim_class_t *y)
{
    uint32_t n = x->nsteps;
    if (x->hash != y->hash || n != y->nsteps) return 0;
    return memcmp(x->kind, y->kind, n * sizeof *x->kind) == 0 &&
           memcmp(x->relpeer, y->relpeer, n * sizeof *x->relpeer) == 0 &&
           memcmp(x->bytes, y->bytes, n * sizeof *x->bytes) == 0 &&
           memcmp(x->ndeps, y->ndeps, n * sizeof *x->ndeps) == 0 &&
           memcmp(x->succ_begin, y->succ_begin, (n + 1) * sizeof *x->succ_begin) == 0 &&
           memcmp(x->succ, y->succ, x->succ_begin[n] * sizeof *x->succ) == 0;
}

static int cmp_msg(const void *p, const void *q, void *arg);

/* The compact form of rank r's schedule s. */
static sim_class_t *class_make(const chorus_sched_t *s, int r, int n, size_t esize,
                               uint32_t *counter /* 2n zeros, left zeroed */)
{
    sim_class_t *c = calloc(1, sizeof *c);
    uint32_t ns = s->nsteps, nsucc = 0;
    uint64_t h = ns;

    if (c == NULL) return NULL;
    for (uint32_t i = 0; i < ns; i++)
        nsucc += s->steps[i].nsucc;
    c->nsteps = ns;
    c->kind = malloc(ns + 1);
    c->relpeer = malloc((ns + 1) * sizeof *c->relpeer);
    c->bytes = malloc((ns + 1) * sizeof *c->bytes);
    c->ndeps = malloc((ns + 1) * sizeof *c->ndeps);
    c->succ_begin = malloc((ns + 1) * sizeof *c->succ_begin);
    c->succ = malloc(((size_t)nsucc + 1) * sizeof *c->succ);
    c->ordinal = malloc((ns + 1) * sizeof *c->ordinal);
    if (!c->kind || !c->relpeer || !c->bytes || !c->ndeps || !c->succ_begin || !c->succ ||
        !c->ordinal)
        goto fail;
    nsucc = 0;
    for (uint32_t i = 0; i < ns; i++) {
        const chorus_step_t *st = &s->steps[i];
        int msg = st->kind == CHORUS_STEP_SEND || st->kind == CHORUS_STEP_RECV;
        c->kind[i] = st->kind;
        c->relpeer[i] = msg ? (st->peer - r + n) % n : 0;
        /* A reduce of n sources costs n - 1 pairwise ones. */
        c->bytes[i] = st->count * esize *
                      (st->kind == CHORUS_STEP_REDUCE_N && st->nsrc > 2 ? st->nsrc - 1 : 1);
        c->ndeps[i] = st->ndeps;
        c->succ_begin[i] = nsucc;
        for (uint32_t k = 0; k < st->nsucc; k++)
            c->succ[nsucc++] = s->succ[st->succ_begin + k];
        c->ordinal[i] = 0;
        if (msg) {
            /* Sends and receives counted apart, per relative peer. */
            c->ordinal[i] = counter[2 * c->relpeer[i] + (st->kind == CHORUS_STEP_RECV)]++;
            c->nmsg[st->kind == CHORUS_STEP_RECV]++;
        }
        h = mix(h, st->kind);
        h = mix(h, (uint64_t)c->relpeer[i]);
        h = mix(h, c->bytes[i]);
        h = mix(h, st->ndeps);
        h = mix(h, st->nsucc);
    }
    c->succ_begin[ns] = nsucc;
    for (uint32_t i = 0; i < nsucc; i++)
        h = mix(h, c->succ[i]);
    c->hash = h;
    for (uint32_t i = 0; i < ns; i++)
        if (c->kind[i] == CHORUS_STEP_SEND || c->kind[i] == CHORUS_STEP_RECV)
            counter[2 * c->relpeer[i]] = counter[2 * c->relpeer[i] + 1] = 0;
    /* The message index, per direction. */
    for (int d = 0; d < 2; d++) {
        const uint8_t kind = d ? CHORUS_STEP_RECV : CHORUS_STEP_SEND;
        uint32_t k = 0;
        c->msg_step[d] = malloc(((size_t)c->nmsg[d] + 1) * sizeof *c->msg_step[d]);
        c->slot_peer[d] = malloc(((size_t)c->nmsg[d] + 1) * sizeof *c->slot_peer[d]);
        c->slot_begin[d] = malloc(((size_t)c->nmsg[d] + 2) * sizeof *c->slot_begin[d]);
        if (!c->msg_step[d] || !c->slot_peer[d] || !c->slot_begin[d]) goto fail;
        for (uint32_t i = 0; i < ns; i++)
            if (c->kind[i] == kind) c->msg_step[d][k++] = i;
        qsort_r(c->msg_step[d], c->nmsg[d], sizeof *c->msg_step[d], cmp_msg, c);
        for (uint32_t j = 0; j < c->nmsg[d]; j++) {
            int32_t rp = c->relpeer[c->msg_step[d][j]];
            if (c->nslots[d] == 0 || c->slot_peer[d][c->nslots[d] - 1] != rp) {
                c->slot_peer[d][c->nslots[d]] = rp;
                c->slot_begin[d][c->nslots[d]++] = j;
            }
        }
        c->slot_begin[d][c->nslots[d]] = c->nmsg[d];
    }
    return c;
fail:
    chorus__sim_class_free(c);
    return NULL;
}

static int cmp_msg(const void *p, const void *q, void *arg)
{
    const sim_class_t *c = arg;
    uint32_t a = *(const uint32_t *)p, b = *(const uint32_t *)q;
    if (c->relpeer[a] != c->relpeer[b]) return c->relpeer[a] < c->relpeer[b] ? -1 : 1;
    return c->ordinal[a] < c->ordinal[b] ? -1 : c->ordinal[a] > c->ordinal[b];
}

uint32_t chorus__sim_class_slot(const sim_class_t *c, int d, int32_t rp)
{
    uint32_t lo = 0, hi = c->nslots[d];
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (c->slot_peer[d][mid] < rp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nslots[d] && c->slot_peer[d][lo] == rp ? lo : UINT32_MAX;
}

uint32_t chorus__sim_class_msg(const sim_class_t *c, int d, int32_t rp, uint32_t k)
{
    uint32_t slot = chorus__sim_class_slot(c, d, rp);
    if (slot == UINT32_MAX || c->slot_begin[d][slot] + k >= c->slot_begin[d][slot + 1])
        return UINT32_MAX;
    return c->msg_step[d][c->slot_begin[d][slot] + k];
}

/* The arguments a communicator would build every rank's schedule from (rank 0's here). */
void chorus__sim_coll_args(const sim_t *s, uint64_t count, chorus_coll_args_t *ca)
{
    int nhosts = 0;

    for (int r = 0; r < s->n; r++)
        if (s->host[r] + 1 > nhosts) nhosts = s->host[r] + 1;
    memset(ca, 0, sizeof *ca);
    ca->coll = s->a->coll;
    ca->nranks = s->n;
    ca->count = count;
    ca->root = s->a->root;
    ca->chunk_count = s->a->chunk_bytes / s->esize;
    ca->host_of = s->host;
    ca->nhosts = nhosts;
}

typedef struct {
    sim_class_t **v;
    int n, cap;
} class_list_t;

/* The index of a class in l equal to c among its newest CLASS_WINDOW, or -1. */
static int class_find(const class_list_t *l, const sim_class_t *c)
{
    for (int k = l->n - 1; k >= 0 && k >= l->n - CLASS_WINDOW; k--)
        if (class_equal(l->v[k], c)) return k;
    return -1;
}

static int class_append(class_list_t *l, sim_class_t *c)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        sim_class_t **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (v == NULL) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = c;
    return 0;
}

/* One thread's share: the schedules of ranks [lo, hi). */
typedef struct {
    const sim_t *s;
    chorus_coll_args_t ca;
    int lo, hi;
    class_list_t classes;
    int *cls; /* per rank of the range: its index in classes */
    chorus_status_t st;
    char err[256];
} build_part_t;

static chorus_status_t part_build(build_part_t *p)
{
    const sim_t *s = p->s;
    uint32_t *counter = calloc(2 * (size_t)s->n, sizeof *counter);

    if (counter == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for %d ranks", s->n);
    for (int r = p->lo; r < p->hi; r++) {
        chorus_sched_t sched;
        chorus_status_t st;
        sim_class_t *c;
        int found;

        p->ca.rank = r;
        chorus__sched_init(&sched, r, s->n);
        st = chorus__algo_build(s->a->algo, &p->ca, &sched);
        c = st == CHORUS_SUCCESS ? class_make(&sched, r, s->n, s->esize, counter) : NULL;
        chorus__sched_fini(&sched);
        if (st == CHORUS_SUCCESS && c == NULL)
            st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for rank %d's schedule", r);
        if (st != CHORUS_SUCCESS) {
            free(counter);
            return st;
        }
        found = class_find(&p->classes, c);
        if (found >= 0) {
            chorus__sim_class_free(c);
        } else if (class_append(&p->classes, c)) {
            chorus__sim_class_free(c);
            free(counter);
            return chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for schedules");
        } else {
            found = p->classes.n - 1;
        }
        p->cls[r - p->lo] = found;
    }
    free(counter);
    return CHORUS_SUCCESS;
}

static void *part_thread(void *arg)
{
    build_part_t *p = arg;
    p->st = part_build(p);
    /* The message lives in this thread's chorus_last_error; the caller raises it again. */
    if (p->st != CHORUS_SUCCESS) snprintf(p->err, sizeof p->err, "%s", chorus_last_error());
    return NULL;
}

/* Moves part p's classes into s (sharing with the newest there) and sets its ranks' cls. */
static chorus_status_t part_merge(sim_t *s, build_part_t *p)
{
    int *map = malloc(((size_t)p->classes.n + 1) * sizeof *map);
    class_list_t all = {s->classes, s->nclasses, s->capclasses};
    chorus_status_t st = CHORUS_SUCCESS;

    if (map == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for schedules");
    for (int k = 0; k < p->classes.n; k++) {
        sim_class_t *c = p->classes.v[k];
        map[k] = class_find(&all, c);
        if (map[k] >= 0) {
            chorus__sim_class_free(c);
        } else if (class_append(&all, c)) {
            st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for schedules");
            break; /* classes from k on stay p's, freed by the caller */
        } else {
            sim_mem(s, (long)class_bytes(c, c->succ_begin[c->nsteps]));
            map[k] = all.n - 1;
        }
        p->classes.v[k] = NULL;
    }
    s->classes = all.v;
    s->nclasses = all.n;
    s->capclasses = all.cap;
    if (st == CHORUS_SUCCESS) {
        for (int r = p->lo; r < p->hi; r++) {
            const sim_class_t *c = s->classes[s->cls[r] = map[p->cls[r - p->lo]]];
            s->steps += c->nsteps;
            if (c->nsteps > s->maxsteps) s->maxsteps = c->nsteps;
        }
    }
    free(map);
    return st;
}

/* How many threads build the schedules. */
static int build_threads(const sim_t *s)
{
    long t = s->a->build_threads > 0     ? s->a->build_threads
             : s->n < BUILD_THREADED_MIN ? 1
                                         : sysconf(_SC_NPROCESSORS_ONLN);
    return t > BUILD_THREADS_MAX ? BUILD_THREADS_MAX : t < 1 ? 1 : t > s->n ? s->n : (int)t;
}

/* Builds every rank's schedule into classes (s->classes, s->cls, s->steps, s->maxsteps). */
static chorus_status_t build_classes(sim_t *s, uint64_t count)
{
    const int nt = build_threads(s);
    build_part_t *part = calloc((size_t)nt, sizeof *part);
    pthread_t *tid = calloc((size_t)nt, sizeof *tid);
    int *cls = malloc((size_t)s->n * sizeof *cls);
    int started = 0;
    chorus_status_t st = CHORUS_SUCCESS;

    if (part == NULL || tid == NULL || cls == NULL) {
        st = chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for %d ranks", s->n);
        goto out;
    }
    for (int t = 0; t < nt; t++) {
        part[t].s = s;
        chorus__sim_coll_args(s, count, &part[t].ca);
        part[t].lo = (int)((long)s->n * t / nt);
        part[t].hi = (int)((long)s->n * (t + 1) / nt);
        part[t].cls = cls + part[t].lo;
    }
    /* Part 0 on this thread; a thread that cannot start leaves its part to this one too. */
    for (int t = 1; t < nt; t++, started++)
        if (pthread_create(&tid[t], NULL, part_thread, &part[t]) != 0) break;
    part[0].st = part_build(&part[0]);
    if (part[0].st != CHORUS_SUCCESS)
        snprintf(part[0].err, sizeof part[0].err, "%s", chorus_last_error());
    for (int t = 1; t < nt; t++) {
        if (t <= started)
            pthread_join(tid[t], NULL);
        else
            part_thread(&part[t]);
    }
    for (int t = 0; t < nt && st == CHORUS_SUCCESS; t++)
        st = part[t].st != CHORUS_SUCCESS ? chorus__error(part[t].st, "%s", part[t].err)
                                          : part_merge(s, &part[t]);
out:
    if (part != NULL)
        for (int t = 0; t < nt; t++) {
            for (int k = 0; k < part[t].classes.n; k++)
                chorus__sim_class_free(part[t].classes.v[k]);
            free(part[t].classes.v);
        }
    free(part);
    free(tid);
    free(cls);
    return st;
}

chorus_status_t chorus__sim_build(sim_t *s, uint64_t count)
{
    chorus_status_t st = build_classes(s, count);
    uint64_t nslots = 0;

    if (st != CHORUS_SUCCESS) return st;
    s->slots = (uint64_t)s->maxsteps * (uint64_t)s->n;
    for (int r = 0; r < s->n; r++) {
        const sim_class_t *c = s->classes[s->cls[r]];
        s->pbase[r] = nslots;
        nslots += c->nslots[0] + c->nslots[1];
    }
    s->post_next = calloc(nslots + 1, sizeof *s->post_next);
    if (s->post_next == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for %llu peers",
                             (unsigned long long)nslots);
    sim_mem(s, (long)(nslots * sizeof *s->post_next));
    s->deps_left = chorus__huge_calloc((s->slots + 1) * sizeof *s->deps_left);
    s->flags = chorus__huge_calloc(s->slots + 1);
    if (s->deps_left == NULL || s->flags == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for %llu steps",
                             (unsigned long long)s->steps);
    sim_mem(s, (long)(s->slots * (sizeof *s->deps_left + 1)));
    for (int r = 0; r < s->n; r++) {
        const sim_class_t *c = s->classes[s->cls[r]];
        for (uint32_t i = 0; i < c->nsteps; i++)
            s->deps_left[sim_g(s, (uint32_t)r, i)] = c->ndeps[i];
    }
    return CHORUS_SUCCESS;
}
