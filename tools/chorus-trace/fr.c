/*
 * chorus-trace fr DIR: the ranks' flight records (CHORUS_FR_DIR, chorus-fr.<comm>.<rank>.json,
 * written by lib/core/flight.c) read together. For each communicator it finds the first
 * operation that not every rank completed, the signature most ranks gave it, and then names
 * the ranks that stand out there: those that left no record (killed), that never reached
 * it (stuck before, or outside the library), or that called something else as that
 * operation (a mismatch). Those lines start with "culprit:".
 */
#include "fr.h"

#include <glob.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t seq, count, begin_ns, end_ns;
    long long root;
    char op[32], dtype[24], redop[16], algo[24], state[16], status[48];
} fr_rec_t;

typedef struct {
    int present;
    char reason[32], host[64], file[512];
    uint64_t newest, dumped_mono_ns;
    fr_rec_t *e;
    size_t ne;
} fr_rank_t;

typedef struct {
    char id[20];
    int nranks;
    fr_rank_t *ranks;
} fr_comm_t;

static void copy_str(char *dst, size_t cap, json_t *v)
{
    snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "-");
}

static uint64_t get_u64(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

/* One file into its comm (found or added to comms); 0, or -1 with a message on stderr. */
static int fr_load(const char *path, fr_comm_t **comms, size_t *ncomms)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err), *entries;
    fr_comm_t *c = NULL;
    fr_rank_t *r;
    long long rank, nranks;
    const char *id;
    size_t i;

    if (root == NULL) {
        fprintf(stderr, "chorus-trace fr: %s: line %d: %s\n", path, err.line, err.text);
        return -1;
    }
    rank = json_integer_value(json_object_get(root, "rank"));
    nranks = json_integer_value(json_object_get(root, "nranks"));
    id = json_string_value(json_object_get(root, "comm"));
    entries = json_object_get(root, "entries");
    if (json_integer_value(json_object_get(root, "chorus_flight_record")) != 1 || id == NULL ||
        nranks < 1 || nranks > (1 << 24) || rank < 0 || rank >= nranks ||
        !json_is_array(entries)) {
        fprintf(stderr, "chorus-trace fr: %s: not a flight record of this version\n", path);
        json_decref(root);
        return -1;
    }
    for (i = 0; i < *ncomms; i++)
        if (strcmp((*comms)[i].id, id) == 0) c = &(*comms)[i];
    if (c == NULL) {
        fr_comm_t *grown = realloc(*comms, (*ncomms + 1) * sizeof **comms);
        if (grown == NULL) goto no_memory;
        *comms = grown;
        c = &grown[(*ncomms)++];
        memset(c, 0, sizeof *c);
        snprintf(c->id, sizeof c->id, "%s", id);
        c->nranks = (int)nranks;
        c->ranks = calloc((size_t)nranks, sizeof *c->ranks);
        if (c->ranks == NULL) goto no_memory;
    }
    if (c->nranks != nranks) {
        fprintf(stderr, "chorus-trace fr: %s: comm %s has %lld ranks here, %d elsewhere\n", path,
                id, nranks, c->nranks);
        json_decref(root);
        return -1;
    }
    r = &c->ranks[rank];
    if (r->present) {
        fprintf(stderr, "chorus-trace fr: %s: a second record of rank %lld (first: %s)\n", path,
                rank, r->file);
        json_decref(root);
        return -1;
    }
    r->present = 1;
    snprintf(r->file, sizeof r->file, "%s", path);
    copy_str(r->reason, sizeof r->reason, json_object_get(root, "reason"));
    copy_str(r->host, sizeof r->host, json_object_get(root, "host"));
    r->newest = get_u64(root, "newest");
    r->dumped_mono_ns = get_u64(root, "dumped_mono_ns");
    r->e = calloc(json_array_size(entries) + 1, sizeof *r->e);
    if (r->e == NULL) goto no_memory;
    for (i = 0; i < json_array_size(entries); i++) {
        json_t *o = json_array_get(entries, i);
        fr_rec_t *e = &r->e[r->ne];
        e->seq = get_u64(o, "seq");
        if (e->seq == 0 || (r->ne > 0 && e->seq <= r->e[r->ne - 1].seq)) continue;
        e->count = get_u64(o, "count");
        e->begin_ns = get_u64(o, "begin_ns");
        e->end_ns = get_u64(o, "end_ns");
        e->root = json_integer_value(json_object_get(o, "root"));
        copy_str(e->op, sizeof e->op, json_object_get(o, "op"));
        copy_str(e->dtype, sizeof e->dtype, json_object_get(o, "dtype"));
        copy_str(e->redop, sizeof e->redop, json_object_get(o, "redop"));
        copy_str(e->algo, sizeof e->algo, json_object_get(o, "algo"));
        copy_str(e->state, sizeof e->state, json_object_get(o, "state"));
        copy_str(e->status, sizeof e->status, json_object_get(o, "status"));
        r->ne++;
    }
    json_decref(root);
    return 0;

no_memory:
    fprintf(stderr, "chorus-trace fr: %s: out of memory\n", path);
    json_decref(root);
    return -1;
}

static const fr_rec_t *fr_at(const fr_rank_t *r, uint64_t seq)
{
    for (size_t i = 0; i < r->ne; i++)
        if (r->e[i].seq == seq) return &r->e[i];
    return NULL;
}

/* The first operation this rank did not complete: the oldest kept entry not done, else the
 * one after its newest. */
static uint64_t fr_first_open(const fr_rank_t *r)
{
    for (size_t i = 0; i < r->ne; i++)
        if (strcmp(r->e[i].state, "done") != 0) return r->e[i].seq;
    return r->newest + 1;
}

static int fr_same_call(const fr_rec_t *a, const fr_rec_t *b)
{
    return strcmp(a->op, b->op) == 0 && a->count == b->count && strcmp(a->dtype, b->dtype) == 0 &&
           strcmp(a->redop, b->redop) == 0 && a->root == b->root;
}

static void fr_call_text(const fr_rec_t *e, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s #%llu (count %llu %s%s%s", e->op, (unsigned long long)e->seq,
             (unsigned long long)e->count, e->dtype, strcmp(e->redop, "-") != 0 ? " " : "",
             strcmp(e->redop, "-") != 0 ? e->redop : "");
    if (e->root >= 0) snprintf(buf + strlen(buf), cap - strlen(buf), ", root/peer %lld", e->root);
    snprintf(buf + strlen(buf), cap - strlen(buf), ")");
}

/* What most ranks that recorded seq called there (ties: the lowest rank's). */
static const fr_rec_t *fr_majority(const fr_comm_t *c, uint64_t seq)
{
    const fr_rec_t *best = NULL;
    int best_votes = 0;

    for (int r = 0; r < c->nranks; r++) {
        const fr_rec_t *e = c->ranks[r].present ? fr_at(&c->ranks[r], seq) : NULL;
        int votes = 0;
        if (e == NULL) continue;
        for (int q = 0; q < c->nranks; q++) {
            const fr_rec_t *o = c->ranks[q].present ? fr_at(&c->ranks[q], seq) : NULL;
            votes += o != NULL && fr_same_call(e, o);
        }
        if (votes > best_votes) {
            best = e;
            best_votes = votes;
        }
    }
    return best;
}

static int fr_report(const fr_comm_t *c)
{
    uint64_t first = UINT64_MAX;
    const fr_rec_t *ref;
    char text[160], mine[160];
    int present = 0, culprits = 0;

    for (int r = 0; r < c->nranks; r++) {
        if (!c->ranks[r].present) continue;
        present++;
        uint64_t f = fr_first_open(&c->ranks[r]);
        if (f < first) first = f;
    }
    printf("comm %s: %d ranks, records from %d\n", c->id, c->nranks, present);
    ref = fr_majority(c, first);
    if (ref != NULL) fr_call_text(ref, text, sizeof text);
    else snprintf(text, sizeof text, "#%llu", (unsigned long long)first);
    printf("  first operation not completed by every rank: %s\n", text);
    for (int r = 0; r < c->nranks; r++) {
        const fr_rank_t *k = &c->ranks[r];
        const fr_rec_t *e = k->present ? fr_at(k, first) : NULL;
        const fr_rec_t *last = k->present && k->ne > 0 ? &k->e[k->ne - 1] : NULL;
        if (!k->present) {
            printf("  rank %d: no record (killed, or it never wrote one)\n", r);
            printf("culprit: rank %d at #%llu: left no record\n", r, (unsigned long long)first);
            culprits++;
        } else if (e == NULL && k->newest < first) {
            if (last != NULL) fr_call_text(last, mine, sizeof mine);
            else snprintf(mine, sizeof mine, "none");
            printf("  rank %d (%s, record on %s): never reached it; its last call: %s, %s\n", r,
                   k->host, k->reason, mine, last != NULL ? last->state : "-");
            printf("culprit: rank %d at #%llu: never reached it\n", r, (unsigned long long)first);
            culprits++;
        } else if (e == NULL) {
            printf("  rank %d (%s): its record no longer holds #%llu (CHORUS_FR_ENTRIES)\n", r,
                   k->host, (unsigned long long)first);
        } else if (ref != NULL && !fr_same_call(e, ref)) {
            fr_call_text(e, mine, sizeof mine);
            printf("  rank %d (%s): called %s there, %s\n", r, k->host, mine, e->state);
            printf("culprit: rank %d at #%llu: called %s instead\n", r, (unsigned long long)first,
                   e->op);
            culprits++;
        } else {
            double secs = e->end_ns > e->begin_ns ? (double)(e->end_ns - e->begin_ns) / 1e9
                          : k->dumped_mono_ns > e->begin_ns
                              ? (double)(k->dumped_mono_ns - e->begin_ns) / 1e9
                              : 0.0;
            printf("  rank %d (%s, record on %s): %s after %.3f s (%s), algorithm %s\n", r,
                   k->host, k->reason, e->state, secs, e->status, e->algo);
        }
    }
    if (culprits == 0) printf("  no rank stands out: every rank reached it (see their status)\n");
    return culprits;
}

int chorus_trace_fr(const char *dir)
{
    char pattern[1024];
    fr_comm_t *comms = NULL;
    size_t ncomms = 0;
    glob_t g;
    int bad = 0;

    snprintf(pattern, sizeof pattern, "%s/chorus-fr.*.json", dir);
    if (glob(pattern, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        fprintf(stderr, "chorus-trace fr: no flight records (chorus-fr.*.json) in %s\n", dir);
        return 1;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) bad |= fr_load(g.gl_pathv[i], &comms, &ncomms) != 0;
    printf("chorus-trace fr: %zu records of %zu communicator%s in %s\n", g.gl_pathc, ncomms,
           ncomms == 1 ? "" : "s", dir);
    globfree(&g);
    for (size_t i = 0; i < ncomms; i++) {
        (void)fr_report(&comms[i]);
        for (int r = 0; r < comms[i].nranks; r++) free(comms[i].ranks[r].e);
        free(comms[i].ranks);
    }
    free(comms);
    return bad ? 1 : 0;
}
