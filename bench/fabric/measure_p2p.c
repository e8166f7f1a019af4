/*
 * Point-to-point measurement: the probe, the pairs between host leaders, the pairs inside
 * each host and the concurrent shifts; and the helpers every measuring file shares.
 *
 * A pair test between endpoints a < b, both running it at once:
 *  - latency: ping-pongs of 8 bytes started by a, half the median round trip;
 *  - a -> b, then b -> a: the sender sends messages of S bytes, one by one, and the
 *    receiver answers the last with a 1-byte ack; the rate is from the sender's clock, from
 *    its first send to the ack. The first byte of each message says whether it is the last,
 *    so that a sender on a link much slower than planned stops after cap_s without the
 *    receiver having to know in advance how many come;
 *  - both at once: a group of K sends and K receives on each side, K from the slower of the
 *    two one-way rates so that a slow pair cannot overrun its slot; each side's figure is
 *    its own send rate over the group's time, and the pair's is their sum.
 * Every figure ends on a (the lower endpoint), which keeps the record.
 *
 * The concurrent shifts: each leader runs one group of K sends to its destination and K
 * receives from its source; its send rate is over the shorter of its own group time and its
 * destination's (see shift_time).
 */
#include "fabric_int.h"

#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Shared helpers ---- */

double fabric_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

chorus_status_t fabric_fail(fabric_ctx_t *ctx, chorus_status_t status, const char *what,
                            int peer)
{
    if (status == CHORUS_SUCCESS || ctx->err[0] != '\0') return status;
    /* Before the hosts are known (init, options), ranks have no host name yet. */
    if (ctx->host_name == NULL)
        snprintf(ctx->err, sizeof ctx->err, "rank %d: %s: %s failed: %s", ctx->rank, ctx->phase,
                 what, chorus_last_error());
    else if (peer >= 0 && peer < ctx->nranks)
        snprintf(ctx->err, sizeof ctx->err, "rank %d (%s): %s: %s with rank %d (%s) failed: %s",
                 ctx->rank, ctx->host_name[ctx->my_host], ctx->phase, what, peer,
                 ctx->host_name[ctx->host_of[peer]], chorus_last_error());
    else
        snprintf(ctx->err, sizeof ctx->err, "rank %d (%s): %s: %s failed: %s", ctx->rank,
                 ctx->host_name[ctx->my_host], ctx->phase, what, chorus_last_error());
    return status;
}

void fabric_progress(const fabric_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;

    if (ctx->rank != 0 || !ctx->opts->verbose) return;
    fprintf(stderr, "chorus-fabric: %6.1f s: ", fabric_now() - ctx->t0);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

double fabric_median(double *v, int n)
{
    if (n <= 0) return -1;
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

chorus_status_t fabric_recs_add(fabric_recs_t *r, const fabric_rec_t *rec)
{
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        fabric_rec_t *v = realloc(r->v, (size_t)cap * sizeof *v);
        if (v == NULL) return CHORUS_ERR_NO_MEMORY;
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = *rec;
    return CHORUS_SUCCESS;
}

void fabric_result_free(fabric_result_t *r)
{
    if (r == NULL) return;
    for (int h = 0; h < r->nhosts && r->hosts != NULL; h++) free(r->hosts[h].setup_json);
    free(r->hosts);
    free(r->host_of);
    free(r->inter);
    free(r->intra);
    free(r->conc.gbps);
    free(r->conc.host_tx_gbps);
    free(r->coll);
    memset(r, 0, sizeof *r);
}

/* ---- Building blocks ---- */

static chorus_status_t xsend(fabric_ctx_t *ctx, const void *buf, size_t bytes, int peer)
{
    return fabric_fail(ctx, chorus_send(buf, bytes, CHORUS_UINT8, peer, ctx->world, NULL),
                       "chorus_send", peer);
}

static chorus_status_t xrecv(fabric_ctx_t *ctx, void *buf, size_t bytes, int peer)
{
    return fabric_fail(ctx, chorus_recv(buf, bytes, CHORUS_UINT8, peer, ctx->world, NULL),
                       "chorus_recv", peer);
}

/* Both endpoints exchange one double. */
static chorus_status_t swap_double(fabric_ctx_t *ctx, int peer, double mine, double *theirs_p)
{
    chorus_status_t status;
    double theirs = 0;

    chorus_group_start();
    chorus_send(&mine, 1, CHORUS_FLOAT64, peer, ctx->world, NULL);
    chorus_recv(&theirs, 1, CHORUS_FLOAT64, peer, ctx->world, NULL);
    status = fabric_fail(ctx, chorus_group_end(), "exchange of figures", peer);
    if (status == CHORUS_SUCCESS) *theirs_p = theirs;
    return status;
}

/* Ping-pongs of 8 bytes (two untimed first); the pinger gets half the median round trip
 * in microseconds. */
static chorus_status_t pingpong(fabric_ctx_t *ctx, int pinger, int peer, int reps,
                                double *lat_us_p)
{
    uint64_t word = 0;
    double *rtt = malloc((size_t)(reps + 2) * sizeof *rtt);
    chorus_status_t status = CHORUS_SUCCESS;

    if (rtt == NULL) return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    for (int i = 0; i < reps + 2 && status == CHORUS_SUCCESS; i++) {
        double t = fabric_now();
        if (pinger) {
            status = xsend(ctx, &word, sizeof word, peer);
            if (status == CHORUS_SUCCESS) status = xrecv(ctx, &word, sizeof word, peer);
        } else {
            status = xrecv(ctx, &word, sizeof word, peer);
            if (status == CHORUS_SUCCESS) status = xsend(ctx, &word, sizeof word, peer);
        }
        rtt[i] = fabric_now() - t;
    }
    if (status == CHORUS_SUCCESS && pinger) *lat_us_p = fabric_median(rtt + 2, reps) / 2 * 1e6;
    free(rtt);
    return status;
}

/* One way: the sender gets its rate in Gbit/s and the number of messages sent. */
static chorus_status_t one_way(fabric_ctx_t *ctx, int sender, int peer,
                               const fabric_test_plan_t *t, unsigned char *sbuf,
                               unsigned char *rbuf, double *gbps_p, int *reps_p)
{
    chorus_status_t status = CHORUS_SUCCESS;
    unsigned char ack = 0;
    int i = 0;
    double t0 = fabric_now();

    if (sender) {
        for (i = 0; i < t->reps; i++) {
            int last = i == t->reps - 1 || fabric_now() - t0 > t->cap_s;
            sbuf[0] = (unsigned char)last;
            status = xsend(ctx, sbuf, t->bytes, peer);
            if (status != CHORUS_SUCCESS || last) break;
        }
        if (status == CHORUS_SUCCESS) status = xrecv(ctx, &ack, 1, peer);
        if (status == CHORUS_SUCCESS) {
            *gbps_p = (double)t->bytes * (i + 1) * 8e-9 / (fabric_now() - t0);
            *reps_p = i + 1;
        }
        return status;
    }
    for (i = 0; i < t->reps; i++) {
        status = xrecv(ctx, rbuf, t->bytes, peer);
        if (status != CHORUS_SUCCESS || rbuf[0]) break;
    }
    if (status == CHORUS_SUCCESS) status = xsend(ctx, &ack, 1, peer);
    return status;
}

/* k sends to dst and k receives from src in one group; the seconds it took. */
static chorus_status_t group_burst(fabric_ctx_t *ctx, int dst, int src, int k, uint64_t bytes,
                                   unsigned char *sbuf, unsigned char *rbuf, double *secs_p)
{
    double t0 = fabric_now();
    chorus_status_t status;

    chorus_group_start();
    for (int i = 0; i < k; i++) {
        chorus_send(sbuf, bytes, CHORUS_UINT8, dst, ctx->world, NULL);
        chorus_recv(rbuf, bytes, CHORUS_UINT8, src, ctx->world, NULL);
    }
    status = fabric_fail(ctx, chorus_group_end(), "group of sends and receives", dst);
    if (status == CHORUS_SUCCESS) *secs_p = fabric_now() - t0;
    return status;
}

/* The whole pair test; rec (kept by a) gets every figure. */
static chorus_status_t pair_test(fabric_ctx_t *ctx, int is_a, int peer,
                                 const fabric_test_plan_t *t, unsigned char *sbuf,
                                 unsigned char *rbuf, fabric_rec_t *rec)
{
    chorus_status_t status;
    double mine = -1, theirs = -1, secs = 0, min_Bps;
    int reps = 0, k;

    status = pingpong(ctx, is_a, peer, t->lat_reps, &rec->lat_us);
    if (status == CHORUS_SUCCESS)
        status = one_way(ctx, is_a, peer, t, sbuf, rbuf, &mine, &reps);
    if (status == CHORUS_SUCCESS)
        status = one_way(ctx, !is_a, peer, t, sbuf, rbuf, &mine, &reps);
    if (status == CHORUS_SUCCESS) status = swap_double(ctx, peer, mine, &theirs);
    if (status != CHORUS_SUCCESS) return status;
    /* Both sides now hold both rates, so both choose the same k. */
    min_Bps = (mine < theirs ? mine : theirs) * 1e9 / 8;
    k = (int)(min_Bps * t->test_s / (double)t->bytes);
    k = k < 1 ? 1 : k > t->reps ? t->reps : k;
    status = group_burst(ctx, peer, peer, k, t->bytes, sbuf, rbuf, &secs);
    if (status != CHORUS_SUCCESS) return status;
    rec->gbps[0] = is_a ? mine : theirs;
    rec->gbps[1] = is_a ? theirs : mine;
    rec->bytes = t->bytes;
    rec->reps = reps;
    mine = (double)t->bytes * k * 8e-9 / secs;
    status = swap_double(ctx, peer, mine, &theirs);
    rec->bidir_gbps = mine + theirs;
    return status;
}

static chorus_status_t alloc_bufs(fabric_ctx_t *ctx, uint64_t bytes, unsigned char **s_p,
                                  unsigned char **r_p)
{
    unsigned char *s = calloc(1, bytes), *r = calloc(1, bytes);
    if (s == NULL || r == NULL) {
        free(s);
        free(r);
        return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "allocation of the test buffers", -1);
    }
    *s_p = s;
    *r_p = r;
    return CHORUS_SUCCESS;
}

/* ---- Phase 2: the probe ---- */

/* A quick pair test between ranks x < y: latency and a rate of 256 KiB messages for at
 * most 0.3 s; x gets the figures. */
static chorus_status_t probe_pair(fabric_ctx_t *ctx, int x, int y, double *Bps_p, double *lat_p)
{
    fabric_test_plan_t t = {.bytes = 256u << 10, .reps = 4000, .lat_reps = 10, .cap_s = 0.3};
    unsigned char *sbuf, *rbuf;
    double gbps = 0, lat_us = 0;
    int reps = 0, is_x = ctx->rank == x, peer = is_x ? y : x;
    chorus_status_t status = alloc_bufs(ctx, t.bytes, &sbuf, &rbuf);

    if (status != CHORUS_SUCCESS) return status;
    status = pingpong(ctx, is_x, peer, t.lat_reps, &lat_us);
    if (status == CHORUS_SUCCESS) status = one_way(ctx, is_x, peer, &t, sbuf, rbuf, &gbps, &reps);
    if (status == CHORUS_SUCCESS && is_x) {
        *Bps_p = gbps * 1e9 / 8;
        *lat_p = lat_us * 1e-6;
    }
    free(sbuf);
    free(rbuf);
    return status;
}

chorus_status_t fabric_probe(fabric_ctx_t *ctx, fabric_budget_in_t *in)
{
    double fig[5] = {0, 0, 0, 0, 0};
    chorus_status_t status = CHORUS_SUCCESS;
    int x = -1, y = -1;

    ctx->phase = "probe";
    if (ctx->nhosts >= 2 && (ctx->rank == 0 || ctx->rank == ctx->host_leader[1]))
        status = probe_pair(ctx, 0, ctx->host_leader[1], &fig[0], &fig[1]);
    /* The first host with two ranks: its leader and its next rank. */
    for (int h = 0; h < ctx->nhosts && x < 0; h++) {
        if (ctx->host_nranks[h] < 2) continue;
        x = ctx->host_leader[h];
        for (int r = x + 1; r < ctx->nranks && y < 0; r++)
            if (ctx->host_of[r] == h) y = r;
    }
    if (status == CHORUS_SUCCESS && x >= 0 && (ctx->rank == x || ctx->rank == y))
        status = probe_pair(ctx, x, y, &fig[2], &fig[3]);
    if (status != CHORUS_SUCCESS) return status;
    if (ctx->rank == 0) fig[4] = fabric_now() - ctx->t0;
    status = chorus_allreduce(fig, fig, 5, CHORUS_FLOAT64, CHORUS_MAX, ctx->world, NULL);
    if (status != CHORUS_SUCCESS) return fabric_fail(ctx, status, "chorus_allreduce", -1);
    in->inter_Bps = fig[0];
    in->inter_lat_s = fig[1];
    in->intra_Bps = fig[2];
    in->intra_lat_s = fig[3];
    in->spent_s = fig[4];
    return CHORUS_SUCCESS;
}

/* ---- Phases 3 and 4: pairs in rounds ---- */

/* Rounds of pair tests among n endpoints, endpoint e being rank ranks[e]; me is this
 * rank's endpoint; barrier_comm starts every round together. */
static chorus_status_t pair_rounds(fabric_ctx_t *ctx, const fabric_test_plan_t *t, int n,
                                   const int *ranks, int me, chorus_comm_t barrier_comm,
                                   int host, int kind, fabric_recs_t *out, double *min_gbps)
{
    int *partner = malloc((size_t)n * sizeof *partner);
    unsigned char *sbuf = NULL, *rbuf = NULL;
    chorus_status_t status = alloc_bufs(ctx, t->bytes, &sbuf, &rbuf);
    int nrounds = fabric_schedule_nrounds(n);

    if (partner == NULL && status == CHORUS_SUCCESS)
        status = fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    for (int round = 0; round < nrounds && status == CHORUS_SUCCESS; round++) {
        fabric_rec_t rec = {.kind = kind, .host = host, .algo = -1, .first_gbps = {-1, -1}};
        int p;

        fabric_progress(ctx, "%s: round %d of %d", ctx->phase, round + 1, nrounds);
        status = fabric_fail(ctx, chorus_barrier(barrier_comm), "chorus_barrier", -1);
        if (status != CHORUS_SUCCESS) break;
        fabric_schedule_round(n, round, partner);
        p = partner[me];
        if (p < 0) continue;
        status = pair_test(ctx, me < p, ranks[p], t, sbuf, rbuf, &rec);
        if (status != CHORUS_SUCCESS) break;
        if (me < p) {
            /* Inter-host records name hosts (the endpoints), intra-host ones ranks. */
            rec.a = kind == FABRIC_REC_INTER ? me : ranks[me];
            rec.b = kind == FABRIC_REC_INTER ? p : ranks[p];
            status = fabric_recs_add(out, &rec);
            if (status != CHORUS_SUCCESS) status = fabric_fail(ctx, status, "malloc", -1);
            for (int d = 0; d < 2; d++)
                if (rec.gbps[d] < *min_gbps) *min_gbps = rec.gbps[d];
        }
    }
    free(partner);
    free(sbuf);
    free(rbuf);
    return status;
}

/* ---- The retest of flagged pairs (after phases 3 and 4; retest.c chooses them) ---- */

/* Every pair of a class in the result's order, unmeasured: inter-host pairs of hosts by
 * (a, b), intra-host pairs of ranks by (host, a, b). NULL with *n_p 0 when there is none. */
static fabric_pair_t *class_pairs(const fabric_ctx_t *ctx, int intra, int *n_p)
{
    int n = 0, k = 0, H = ctx->nhosts, N = ctx->nranks;
    fabric_pair_t *p;

    for (int h = 0; h < H; h++) n += intra ? ctx->host_nranks[h] * (ctx->host_nranks[h] - 1) / 2
                                           : H - 1 - h;
    *n_p = 0;
    if (n == 0 || (p = calloc((size_t)n, sizeof *p)) == NULL) return NULL;
    for (int a = 0; a < (intra ? N : H); a++)
        for (int b = a + 1; b < (intra ? N : H); b++) {
            if (intra && ctx->host_of[a] != ctx->host_of[b]) continue;
            p[k++] = (fabric_pair_t){.a = a, .b = b, .host = intra ? ctx->host_of[a] : -1,
                                     .gbps = {-1, -1}, .bidir_gbps = -1, .lat_us = -1};
        }
    *n_p = k;
    return p;
}

static fabric_rec_t *find_rec(fabric_recs_t *out, int kind, int a, int b)
{
    for (int i = 0; i < out->n; i++)
        if (out->v[i].kind == kind && out->v[i].a == a && out->v[i].b == b) return &out->v[i];
    return NULL;
}

/* The better of two measurements of a pair, figure by figure, in *old. */
static void keep_better(fabric_rec_t *old, const fabric_rec_t *again)
{
    if (!old->retested) {
        old->first_gbps[0] = old->gbps[0];
        old->first_gbps[1] = old->gbps[1];
    }
    for (int d = 0; d < 2; d++)
        if (again->gbps[d] > old->gbps[d]) old->gbps[d] = again->gbps[d];
    if (again->bidir_gbps > old->bidir_gbps) old->bidir_gbps = again->bidir_gbps;
    if (again->lat_us > 0 && (old->lat_us <= 0 || again->lat_us < old->lat_us))
        old->lat_us = again->lat_us;
    old->retested = 1;
}

/* Every participant of the class learns every pair's figures (the lower endpoint of each
 * has them): -1 where unknown, so a maximum over the participants fills them in. */
static chorus_status_t share_figures(fabric_ctx_t *ctx, chorus_comm_t comm, int kind,
                                     const fabric_recs_t *out, fabric_pair_t *p, int n)
{
    double *fig = malloc((size_t)n * 3 * sizeof *fig);
    chorus_status_t status;

    if (fig == NULL) return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    for (int i = 0; i < 3 * n; i++) fig[i] = -1;
    for (int j = 0; j < out->n; j++) {
        const fabric_rec_t *r = &out->v[j];
        for (int i = 0; i < n && r->kind == kind; i++)
            if (p[i].a == r->a && p[i].b == r->b) {
                fig[3 * i] = r->gbps[0];
                fig[3 * i + 1] = r->gbps[1];
                fig[3 * i + 2] = r->bidir_gbps;
            }
    }
    status = chorus_allreduce(fig, fig, (size_t)n * 3, CHORUS_FLOAT64, CHORUS_MAX, comm, NULL);
    for (int i = 0; i < n && status == CHORUS_SUCCESS; i++) {
        p[i].gbps[0] = fig[3 * i];
        p[i].gbps[1] = fig[3 * i + 1];
        p[i].bidir_gbps = fig[3 * i + 2];
    }
    free(fig);
    return fabric_fail(ctx, status, "chorus_allreduce of the pair figures", -1);
}

/* The rounds of the retest that fit its slice; in each, this rank's pair (if any) runs the
 * whole pair test again and its lower endpoint keeps the better figures. */
static chorus_status_t retest_rounds(fabric_ctx_t *ctx, const fabric_test_plan_t *t, int intra,
                                     const fabric_pair_t *p, const int *sel, const int *round,
                                     int nsel, int nrounds, fabric_recs_t *out)
{
    int kind = intra ? FABRIC_REC_INTRA : FABRIC_REC_INTER;
    int me = intra ? ctx->rank : ctx->my_host;
    unsigned char *sbuf = NULL, *rbuf = NULL;
    chorus_status_t status = alloc_bufs(ctx, t->bytes, &sbuf, &rbuf);

    for (int r = 0; r < nrounds && status == CHORUS_SUCCESS; r++) {
        fabric_rec_t again = {.kind = kind};
        const fabric_pair_t *x = NULL;
        int is_a, other;
        status = fabric_fail(ctx, chorus_barrier(intra ? ctx->host : ctx->leaders),
                             "chorus_barrier", -1);
        for (int i = 0; i < nsel && x == NULL; i++)
            if (round[i] == r && (p[sel[i]].a == me || p[sel[i]].b == me)) x = &p[sel[i]];
        if (status != CHORUS_SUCCESS || x == NULL) continue;
        is_a = x->a == me;
        other = is_a ? x->b : x->a;
        status = pair_test(ctx, is_a, intra ? other : ctx->host_leader[other], t, sbuf, rbuf,
                           &again);
        if (status == CHORUS_SUCCESS && is_a) {
            fabric_rec_t *old = find_rec(out, kind, x->a, x->b);
            if (old != NULL) keep_better(old, &again);
        }
    }
    free(sbuf);
    free(rbuf);
    return status;
}

/* The flagged pairs that the slice has no round for keep a mark on their record (on the
 * lower endpoint), so that the analysis says they were not retested and why, rather than
 * blaming a link on one measurement. */
static void mark_skipped(fabric_ctx_t *ctx, int intra, const fabric_pair_t *p, const int *sel,
                         const int *round, int nsel, fabric_recs_t *out)
{
    int kind = intra ? FABRIC_REC_INTRA : FABRIC_REC_INTER;
    int me = intra ? ctx->rank : ctx->my_host;

    for (int i = 0; i < nsel; i++) {
        fabric_rec_t *rec;
        if (round[i] >= 0 || p[sel[i]].a != me) continue;
        rec = find_rec(out, kind, p[sel[i]].a, p[sel[i]].b);
        if (rec != NULL) rec->retest_skipped = 1;
    }
}

/* The retest of one class, called by all its participants (the leaders for inter-host
 * pairs, every rank for intra-host ones): every pair that the analysis would flag, most
 * severe first, in rounds of disjoint pairs, as many rounds as fit the plan's slice. */
static chorus_status_t retest(fabric_ctx_t *ctx, const fabric_plan_t *plan, int intra,
                              fabric_recs_t *out)
{
    int n = 0, nsel, need, fit, done = 0;
    fabric_pair_t *p = class_pairs(ctx, intra, &n);
    int *sel = NULL, *round = NULL;
    fabric_test_plan_t t;
    chorus_status_t status;

    ctx->phase = intra ? "retest of intra-host pairs" : "retest of inter-host pairs";
    if (n == 0) return CHORUS_SUCCESS;
    sel = malloc((size_t)n * sizeof *sel);
    round = malloc((size_t)n * sizeof *round);
    if (p == NULL || sel == NULL || round == NULL) {
        status = fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
        goto out_free;
    }
    status = share_figures(ctx, intra ? ctx->world : ctx->leaders,
                           intra ? FABRIC_REC_INTRA : FABRIC_REC_INTER, out, p, n);
    if (status != CHORUS_SUCCESS) goto out_free;
    nsel = fabric_retest_select(p, n, intra ? ctx->opts->expect_intra_gbps
                                            : ctx->opts->expect_gbps,
                                ctx->opts->threshold, sel, NULL);
    need = fabric_retest_rounds(p, sel, nsel, INT_MAX, round);
    fit = fabric_budget_retest(plan, intra, need, &t);
    fabric_retest_rounds(p, sel, nsel, fit, round);
    for (int i = 0; i < nsel; i++) done += round[i] >= 0;
    if (nsel == 0)
        fabric_progress(ctx, "%s: no pair flagged", ctx->phase);
    else
        fabric_progress(ctx, "%s: %d pairs flagged, %d retested in %d of %d rounds (tests of "
                        "%d x %llu bytes)", ctx->phase, nsel, done, fit, need, t.reps,
                        (unsigned long long)t.bytes);
    mark_skipped(ctx, intra, p, sel, round, nsel, out);
    if (fit > 0)
        status = retest_rounds(ctx, &t, intra, p, sel, round, nsel, fit, out);

out_free:
    free(p);
    free(sel);
    free(round);
    return status;
}

chorus_status_t fabric_measure_inter(fabric_ctx_t *ctx, const fabric_plan_t *plan,
                                     fabric_recs_t *out, double *min_Bps_p)
{
    double min_gbps = DBL_MAX;
    chorus_status_t status = CHORUS_SUCCESS;

    ctx->phase = "inter-host pairs";
    if (ctx->nhosts >= 2 && ctx->leaders != NULL) {
        status = pair_rounds(ctx, &plan->inter, ctx->nhosts, ctx->host_leader, ctx->my_host,
                             ctx->leaders, -1, FABRIC_REC_INTER, out, &min_gbps);
        if (status == CHORUS_SUCCESS) status = retest(ctx, plan, 0, out);
    }
    if (status != CHORUS_SUCCESS) return status;
    /* The slowest one-way rate after the retest sizes the concurrent round. */
    min_gbps = DBL_MAX;
    for (int i = 0; i < out->n; i++)
        for (int d = 0; d < 2 && out->v[i].kind == FABRIC_REC_INTER; d++)
            if (out->v[i].gbps[d] >= 0 && out->v[i].gbps[d] < min_gbps)
                min_gbps = out->v[i].gbps[d];
    status = chorus_allreduce(&min_gbps, &min_gbps, 1, CHORUS_FLOAT64, CHORUS_MIN, ctx->world,
                              NULL);
    if (status != CHORUS_SUCCESS) return fabric_fail(ctx, status, "chorus_allreduce", -1);
    *min_Bps_p = min_gbps < DBL_MAX ? min_gbps * 1e9 / 8 : 0;
    return CHORUS_SUCCESS;
}

chorus_status_t fabric_measure_intra(fabric_ctx_t *ctx, const fabric_plan_t *plan,
                                     fabric_recs_t *out)
{
    double min_gbps = DBL_MAX;
    int n = ctx->host_nranks[ctx->my_host];

    chorus_status_t status = CHORUS_SUCCESS;

    ctx->phase = "intra-host pairs";
    if (n >= 2)
        status = pair_rounds(ctx, &plan->intra, n, ctx->host_ranks, ctx->local, ctx->host,
                             ctx->my_host, FABRIC_REC_INTRA, out, &min_gbps);
    /* Every rank takes part, with pairs or not: the figures travel over the whole job. */
    if (status == CHORUS_SUCCESS) status = retest(ctx, plan, 1, out);
    return status;
}

/* ---- Phase 5: the concurrent shifts ---- */

/* A group ends when its receives end too, so a host receiving from a slow host would
 * seem to send slowly. Its destination's group also ended after the data arrived: the
 * shorter of the two times is the closer bound on the send alone. Each leader sends its
 * time to its source and gets its destination's. */
static chorus_status_t shift_time(fabric_ctx_t *ctx, int dst, int src, double *secs_p)
{
    double mine = *secs_p, theirs = 0;
    chorus_status_t status;

    chorus_group_start();
    chorus_send(&mine, 1, CHORUS_FLOAT64, src, ctx->world, NULL);
    chorus_recv(&theirs, 1, CHORUS_FLOAT64, dst, ctx->world, NULL);
    status = fabric_fail(ctx, chorus_group_end(), "exchange of shift times", dst);
    if (status == CHORUS_SUCCESS && theirs > 0 && theirs < mine) *secs_p = theirs;
    return status;
}

chorus_status_t fabric_measure_conc(fabric_ctx_t *ctx, const fabric_plan_t *plan,
                                    double min_Bps, fabric_recs_t *out)
{
    int H = ctx->nhosts, h = ctx->my_host, reps;
    uint64_t bytes;
    unsigned char *sbuf = NULL, *rbuf = NULL;
    chorus_status_t status;

    ctx->phase = "concurrent shifts";
    if (H < 3 || ctx->leaders == NULL) return CHORUS_SUCCESS;
    /* Sized for the slowest pair, so that every shift fits its slot; every leader computes
     * the same from the same figure. */
    fabric_budget_size(min_Bps > 0 ? min_Bps : 1e6, plan->conc.test_s, FABRIC_MIN_BYTES,
                       FABRIC_MAX_BYTES, FABRIC_MIN_REPS, FABRIC_MAX_REPS, &bytes, &reps);
    status = alloc_bufs(ctx, bytes, &sbuf, &rbuf);
    for (int s = 1; s < H && status == CHORUS_SUCCESS; s++) {
        int dst = ctx->host_leader[(h + s) % H], src = ctx->host_leader[(h - s + H) % H];
        fabric_rec_t rec = {.kind = FABRIC_REC_CONC, .a = h, .b = (h + s) % H, .host = -1,
                            .algo = -1, .bytes = bytes, .reps = reps};
        double secs = 0;

        fabric_progress(ctx, "concurrent shift %d of %d", s, H - 1);
        status = fabric_fail(ctx, chorus_barrier(ctx->leaders), "chorus_barrier", -1);
        if (status == CHORUS_SUCCESS)
            status = group_burst(ctx, dst, src, reps, bytes, sbuf, rbuf, &secs);
        if (status == CHORUS_SUCCESS) status = shift_time(ctx, dst, src, &secs);
        if (status != CHORUS_SUCCESS) break;
        rec.gbps[0] = (double)bytes * reps * 8e-9 / secs;
        rec.gbps[1] = rec.bidir_gbps = rec.lat_us = -1;
        status = fabric_recs_add(out, &rec);
        if (status != CHORUS_SUCCESS) status = fabric_fail(ctx, status, "malloc", -1);
    }
    free(sbuf);
    free(rbuf);
    return status;
}
