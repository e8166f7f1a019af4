/*
 * The verdict: every figure against its expected rate, and the names to blame.
 *
 * Expected rates are those given (--expect-gbps, --expect-intra-gbps) or else the median of
 * the class, so that on a fabric with no promise written down the outliers still stand out:
 * a median is not moved by one slow host among eight, where a mean would be.
 *
 * Naming is the point of the tool: a slow host makes every one of its pairs slow, so seven
 * pair findings for host5 would hide the one fact that matters. A host is slow when at least
 * half of its pairs are flagged and it has more flagged pairs than a typical host (the
 * other hosts each share one slow pair with it), or when its own concurrent send rate is
 * flagged. Only a flagged pair whose two ends are healthy is a link finding. With two hosts
 * there is one pair and nothing to tell which end is slow, so it is always the link.
 *
 * Never blame on one measurement: a pair (link or ranks inside a host) is a finding only if
 * it was retested (retest.c) and stayed below, and its text says what both tests gave. A
 * flagged pair that was not retested is a note, "not retested: <why>", that does not fail
 * the run: the retest had no room for it in its slice, or the pair was not below the
 * threshold when the retest chose its pairs and fell below only because the class median it
 * is judged against rose once the retested pairs kept their better figures. A host finding
 * rests on most of its pairs, or on its concurrent rate, which one burst cannot make.
 *
 * A host whose CPU was saturated during the rounds (fabric_cpu_saturated) is a note too, and
 * the findings it may explain (those of that host, and the whole job's) name it as a likely
 * cause, as does the verdict line: slow rates on a host without a free core say more about
 * the host than about its links.
 */
#include "fabric_int.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    fabric_finding_t *find;
    int n, cap;
} findings_t;

/* The median of the values >= 0 among n (values < 0 are "not measured"); -1 if none. */
static double median_of(const double *v, int n)
{
    double *tmp = malloc(((size_t)n + 1) * sizeof(*tmp)), med;
    int m = 0;

    if (tmp == NULL) return -1;
    for (int i = 0; i < n; i++) {
        if (v[i] >= 0) tmp[m++] = v[i];
    }
    if (m == 0) {
        free(tmp);
        return -1;
    }
    med = fabric_median(tmp, m);
    free(tmp);
    return med;
}

/* One-way rates (both directions) or bidir rates of a pair list; the retest (retest.c)
 * takes its expectations from here so that it flags exactly what this file flags. */
double fabric_pairs_median(const fabric_pair_t *p, int n, int bidir)
{
    double *v = malloc(((size_t)n * 2 + 1) * sizeof(*v)), med;
    int m = 0;

    if (v == NULL) return -1;
    for (int i = 0; i < n; i++) {
        if (bidir) {
            v[m++] = p[i].bidir_gbps;
        } else {
            v[m++] = p[i].gbps[0];
            v[m++] = p[i].gbps[1];
        }
    }
    med = median_of(v, m);
    free(v);
    return med;
}

static int below(double measured, double expected, double threshold)
{
    return measured >= 0 && expected > 0 && measured < threshold * expected;
}

static fabric_finding_t *add_finding(findings_t *f, fabric_find_kind_t kind, const char *metric,
                                     double measured, double expected)
{
    fabric_finding_t *x;

    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 16;
        fabric_finding_t *grown = realloc(f->find, (size_t)cap * sizeof(*grown));
        if (grown == NULL) return NULL;
        f->find = grown;
        f->cap = cap;
    }
    x = &f->find[f->n++];
    memset(x, 0, sizeof(*x));
    x->kind = kind;
    x->host = x->peer = x->rank = -1;
    snprintf(x->metric, sizeof(x->metric), "%s", metric);
    x->measured = measured;
    x->expected = expected;
    x->ratio = expected > 0 ? measured / expected : 0;
    return x;
}

/* The worst figure of a pair against its expectations: the lowest ratio among its
 * directions and its bidir rate; 0 when nothing is below threshold. */
static int pair_worst(const fabric_pair_t *p, double e, double eb, double thr,
                      const char **metric_p,
                      double *measured_p, double *expected_p)
{
    double best = INFINITY;
    int flagged = 0;

    for (int d = 0; d < 2; d++) {
        if (below(p->gbps[d], e, thr) && p->gbps[d] / e < best) {
            best = p->gbps[d] / e;
            *metric_p = "pair_gbps";
            *measured_p = p->gbps[d];
            *expected_p = e;
            flagged = 1;
        }
    }
    if (below(p->bidir_gbps, eb, thr) && p->bidir_gbps / eb < best) {
        *metric_p = "bidir_gbps";
        *measured_p = p->bidir_gbps;
        *expected_p = eb;
        flagged = 1;
    }
    return flagged;
}

static const char *host_name(const fabric_result_t *r, int h)
{
    return h >= 0 && h < r->nhosts ? r->hosts[h].name : "?";
}

/* Marks slow hosts in slow[] (nhosts entries); see the comment at the top. */
static chorus_status_t find_slow_hosts(const fabric_result_t *r, const fabric_verdict_t *v,
                                       double eb, double conc_e, int *slow)
{
    int H = r->nhosts, *nflag = calloc((size_t)H + 1, sizeof(int));
    int *npairs = calloc((size_t)H + 1, sizeof(int));
    double *tmp = calloc((size_t)H + 1, sizeof(double)), typical;
    const char *m;
    double x, y;

    if (nflag == NULL || npairs == NULL || tmp == NULL) goto err_free;
    for (int i = 0; i < r->ninter; i++) {
        const fabric_pair_t *p = &r->inter[i];
        int flagged = pair_worst(p, v->expect_gbps, eb, v->threshold, &m, &x, &y);
        if (p->a < 0 || p->a >= H || p->b < 0 || p->b >= H) continue;
        npairs[p->a]++;
        npairs[p->b]++;
        nflag[p->a] += flagged;
        nflag[p->b] += flagged;
    }
    for (int h = 0; h < H; h++)
        tmp[h] = nflag[h];
    typical = median_of(tmp, H);
    for (int h = 0; h < H && H > 2; h++) {
        /* When the typical host itself has most of its pairs flagged the whole fabric is
         * below the promise, and every host with most pairs flagged is named. */
        int most = 2 * nflag[h] > npairs[h];
        int half = npairs[h] > 0 && 2 * nflag[h] >= npairs[h];
        slow[h] = (half && nflag[h] > typical) || (most && 2 * typical > npairs[h]);
        if (r->conc.host_tx_gbps != NULL && below(r->conc.host_tx_gbps[h], conc_e, v->threshold))
            slow[h] = 1;
    }
    free(tmp);
    free(npairs);
    free(nflag);
    return CHORUS_SUCCESS;

err_free:
    free(tmp);
    free(npairs);
    free(nflag);
    return CHORUS_ERR_NO_MEMORY;
}

/* The median of host h's one-way rates over all its inter-host pairs. */
static double host_pair_median(const fabric_result_t *r, int h)
{
    double *v = malloc(((size_t)r->ninter * 2 + 1) * sizeof(*v)), med;
    int m = 0;

    if (v == NULL) return -1;
    for (int i = 0; i < r->ninter; i++) {
        if (r->inter[i].a != h && r->inter[i].b != h) continue;
        v[m++] = r->inter[i].gbps[0];
        v[m++] = r->inter[i].gbps[1];
    }
    med = median_of(v, m);
    free(v);
    return med;
}

/* What a pair that stays a finding says of its retest: both tests were below. */
static const char *retest_words(const fabric_pair_t *p, char *buf, size_t size)
{
    snprintf(buf, size, "retested, still below: first test %.3g and %.3g Gbit/s a->b and b->a, "
             "the better of both tests kept", p->first_gbps[0], p->first_gbps[1]);
    return buf;
}

/* A flagged pair that was not measured again: a note saying why, never a finding. */
static int add_not_retested(const fabric_result_t *r, const fabric_verdict_t *v,
                            const fabric_pair_t *p, int intra, const char *m, double x_m,
                            double x_e, findings_t *notes)
{
    int given = intra ? v->expect_intra_given : v->expect_given;
    const char *why;
    char what[192];
    fabric_finding_t *x = add_finding(notes, FABRIC_FIND_NOT_RETESTED, m, x_m, x_e);

    if (x == NULL) return -1;
    x->intra = intra;
    x->host = intra ? p->host : p->a;
    x->peer = p->b;
    x->rank = intra ? p->a : -1;
    if (p->retest_skipped)
        why = "flagged by the first test, but the retest's slice of the time budget had no "
              "room for it";
    else if (!given)
        why = "not below the threshold when the retest chose its pairs; below only against "
              "the class median, which rose once the retested pairs kept their better figures";
    else
        why = "not flagged when the retest chose its pairs";
    if (intra)
        snprintf(what, sizeof(what), "ranks %d-%d on %s", p->a, p->b, host_name(r, p->host));
    else
        snprintf(what, sizeof(what), "link %s-%s", host_name(r, p->a), host_name(r, p->b));
    snprintf(x->text, sizeof(x->text),
             "not retested: %s: %s %.3g Gbit/s, expected %.3g (%.2f of expected), from one "
             "test: %s; not called faulty", what, m, x_m, x_e, x->ratio, why);
    return 0;
}

static int add_hosts_and_links(const fabric_result_t *r, const fabric_verdict_t *v, double eb,
                               double conc_e, const int *slow, findings_t *f, findings_t *notes)
{
    char words[160];

    for (int h = 0; h < r->nhosts; h++) {
        double pm = host_pair_median(r, h), ratio_p = pm >= 0 ? pm / v->expect_gbps : INFINITY;
        double tx = r->conc.host_tx_gbps != NULL ? r->conc.host_tx_gbps[h] : -1;
        double ratio_c = below(tx, conc_e, v->threshold) ? tx / conc_e : INFINITY;
        fabric_finding_t *x;
        if (!slow[h]) continue;
        /* The pairs are the plainer evidence; the concurrent rate names a host only when
         * its pairs alone do not. */
        if (ratio_p >= v->threshold && ratio_c < ratio_p)
            x = add_finding(f, FABRIC_FIND_HOST, "concurrent_tx_gbps", tx, conc_e);
        else
            x = add_finding(f, FABRIC_FIND_HOST, "pair_gbps", pm, v->expect_gbps);
        if (x == NULL) return -1;
        x->host = h;
        snprintf(x->text, sizeof(x->text),
                 "slow host %s: %s %.3g Gbit/s (median), expected %.3g (%.2f of expected)",
                 host_name(r, h), x->metric, x->measured, x->expected, x->ratio);
    }
    for (int i = 0; i < r->ninter; i++) {
        const fabric_pair_t *p = &r->inter[i];
        const char *m = "";
        double x_m = 0, x_e = 0;
        fabric_finding_t *x;
        if (!pair_worst(p, v->expect_gbps, eb, v->threshold, &m, &x_m, &x_e)) continue;
        if (p->a >= 0 && p->a < r->nhosts && slow[p->a]) continue;
        if (p->b >= 0 && p->b < r->nhosts && slow[p->b]) continue;
        if (!p->retested) {
            if (add_not_retested(r, v, p, 0, m, x_m, x_e, notes) != 0) return -1;
            continue;
        }
        x = add_finding(f, FABRIC_FIND_LINK, m, x_m, x_e);
        if (x == NULL) return -1;
        x->host = p->a;
        x->peer = p->b;
        snprintf(x->text, sizeof(x->text),
                 "link %s-%s is slow: %s %.3g Gbit/s, expected %.3g (%.2f of expected); %s",
                 host_name(r, p->a), host_name(r, p->b), m, x_m, x_e, x->ratio,
                 retest_words(p, words, sizeof(words)));
    }
    return 0;
}

static int add_intra(const fabric_result_t *r, const fabric_verdict_t *v, double eb,
                     findings_t *f, findings_t *notes)
{
    char words[160];

    for (int i = 0; i < r->nintra; i++) {
        const fabric_pair_t *p = &r->intra[i];
        const char *m = "";
        double x_m = 0, x_e = 0;
        fabric_finding_t *x;
        if (!pair_worst(p, v->expect_intra_gbps, eb, v->threshold, &m, &x_m, &x_e)) continue;
        if (!p->retested) {
            if (add_not_retested(r, v, p, 1, m, x_m, x_e, notes) != 0) return -1;
            continue;
        }
        x = add_finding(f, FABRIC_FIND_INTRA, m, x_m, x_e);
        if (x == NULL) return -1;
        x->host = p->host;
        x->rank = p->a;
        x->peer = p->b;
        snprintf(x->text, sizeof(x->text),
                 "ranks %d-%d on %s are slow: %s %.3g Gbit/s, expected %.3g (%.2f of expected); "
                 "%s", p->a, p->b, host_name(r, p->host), m, x_m, x_e, x->ratio,
                 retest_words(p, words, sizeof(words)));
    }
    return 0;
}

/* Concurrent rates far below the isolated ones: the fabric cannot carry every host at once.
 * The median over hosts is compared with the median isolated one-way rate as measured (not
 * the given expectation: a fabric uniformly below its promise is not oversubscribed). */
static int add_oversub(const fabric_result_t *r, const fabric_verdict_t *v, findings_t *f)
{
    double conc, iso;
    fabric_finding_t *x;

    if (r->conc.host_tx_gbps == NULL) return 0;
    conc = median_of(r->conc.host_tx_gbps, r->nhosts);
    iso = fabric_pairs_median(r->inter, r->ninter, 0);
    if (!below(conc, iso, v->threshold)) return 0;
    x = add_finding(f, FABRIC_FIND_OVERSUB, "concurrent_tx_gbps", conc, iso);
    if (x == NULL) return -1;
    snprintf(x->text, sizeof(x->text),
             "oversubscribed: hosts send %.3g Gbit/s each when all send at once, %.3g alone "
             "(%.2f)", conc, iso, x->ratio);
    return 0;
}

/*
 * Allreduce. The whole-job ring crosses every host link once per step and, on a healthy
 * fabric, its bus bandwidth approaches the link rate, so it is judged against the inter-host
 * expectation. The tree is reported but not judged: its bus bandwidth depends on the fan-out
 * and the pipelining of the tree (an inner node sends to two children and its parent), so
 * there is no rate it should reach that follows from the link rate alone. Per-host runs of
 * either algorithm are compared with the same algorithm on the other hosts.
 */
static int add_coll(const fabric_result_t *r, const fabric_verdict_t *v, findings_t *f)
{
    double *tmp = malloc(((size_t)r->ncoll + 1) * sizeof(*tmp));

    if (tmp == NULL) return -1;
    for (int i = 0; i < r->ncoll; i++) {
        const fabric_coll_t *c = &r->coll[i];
        const char *an = c->algo == FABRIC_ALGO_RING ? "ring" : "tree";
        double e;
        fabric_finding_t *x;
        char metric[40];
        if (c->host < 0) {
            if (c->algo != FABRIC_ALGO_RING || r->nhosts < 2) continue;
            e = v->expect_gbps;
        } else {
            int m = 0;
            for (int j = 0; j < r->ncoll; j++) {
                if (r->coll[j].host >= 0 && r->coll[j].algo == c->algo)
                    tmp[m++] = r->coll[j].busbw_gbps;
            }
            e = median_of(tmp, m);
        }
        if (!below(c->busbw_gbps, e, v->threshold)) continue;
        snprintf(metric, sizeof(metric), "%s_busbw_gbps", an);
        x = add_finding(f, FABRIC_FIND_COLL, metric, c->busbw_gbps, e);
        if (x == NULL) goto err_free;
        x->host = c->host;
        snprintf(x->text, sizeof(x->text),
                 "%s allreduce over %d ranks%s%s: busbw %.3g Gbit/s, expected %.3g (%.2f of "
                 "expected)", an, c->nranks, c->host >= 0 ? " on " : " (whole job)",
                 c->host >= 0 ? host_name(r, c->host) : "", c->busbw_gbps, e, x->ratio);
    }
    free(tmp);
    return 0;

err_free:
    free(tmp);
    return -1;
}

/* A note for every host whose CPU was saturated during the rounds; the text depends on
 * whether anything measured low (findings or notes of pairs not retested). */
static int add_cpu_notes(const fabric_result_t *r, int anything_low, findings_t *notes,
                         int *nsaturated_p)
{
    int n = 0;

    for (int h = 0; h < r->nhosts; h++) {
        const fabric_host_t *host = &r->hosts[h];
        int by_busy = host->cpu_busy >= FABRIC_CPU_BUSY_SATURATED;
        fabric_finding_t *x;
        if (!fabric_cpu_saturated(host->cpu_busy, host->cpu_softirq)) continue;
        x = add_finding(notes, FABRIC_FIND_CPU, by_busy ? "cpu_busy" : "cpu_softirq",
                        by_busy ? host->cpu_busy : host->cpu_softirq,
                        by_busy ? FABRIC_CPU_BUSY_SATURATED : FABRIC_CPU_SOFTIRQ_SATURATED);
        if (x == NULL) return -1;
        x->host = h;
        snprintf(x->text, sizeof(x->text), "%s: CPU %.0f%% busy, %.0f%% softirq during the "
                 "rounds: %s", host->name, 100 * host->cpu_busy,
                 100 * (host->cpu_softirq > 0 ? host->cpu_softirq : 0),
                 anything_low ? "a likely cause of the low rates, not the links"
                              : "saturated (>= 90% busy or >= 30% softirq); the rates held "
                                "up, but may understate the fabric");
        n++;
    }
    *nsaturated_p = n;
    return 0;
}

int fabric_cpu_saturated_hosts(const fabric_result_t *r, const fabric_verdict_t *v,
                               char *buf, size_t size)
{
    size_t len = 0;

    if (size == 0) return 0;
    buf[0] = '\0';
    if (v->nsaturated == 0) return 0;
    if (v->nsaturated == r->nhosts && r->nhosts > 1) {
        snprintf(buf, size, "all %d hosts", r->nhosts);
        return v->nsaturated;
    }
    for (int i = 0; i < v->nnote && len + 1 < size; i++) {
        if (v->note[i].kind != FABRIC_FIND_CPU) continue;
        snprintf(buf + len, size - len, "%s%s", len > 0 ? ", " : "",
                 host_name(r, v->note[i].host));
        len = strlen(buf);
    }
    return v->nsaturated;
}

/* Findings that a saturated CPU may explain say so: those of a saturated host (either end
 * of a link), and those of the whole job when any host was saturated. */
static void mark_cpu_causes(const fabric_result_t *r, fabric_verdict_t *v)
{
    char all[256];

    if (fabric_cpu_saturated_hosts(r, v, all, sizeof(all)) == 0) return;
    for (int i = 0; i < v->nfind; i++) {
        fabric_finding_t *f = &v->find[i];
        const char *who = NULL;
        size_t len = strlen(f->text);
        if (f->host < 0)
            who = all;
        else if (f->host >= r->nhosts)
            continue;
        else if (fabric_cpu_saturated(r->hosts[f->host].cpu_busy, r->hosts[f->host].cpu_softirq))
            who = r->hosts[f->host].name;
        else if (f->kind == FABRIC_FIND_LINK && f->peer >= 0 && f->peer < r->nhosts &&
                 fabric_cpu_saturated(r->hosts[f->peer].cpu_busy, r->hosts[f->peer].cpu_softirq))
            who = r->hosts[f->peer].name;
        if (who != NULL)
            snprintf(f->text + len, sizeof(f->text) - len,
                     "; the CPU of %s was saturated during the rounds: a likely cause", who);
    }
}

/* Setup warnings of every host, prefixed by its name. Malformed JSON is itself a warning. */
static int collect_warnings(const fabric_result_t *r, fabric_verdict_t *v)
{
    for (int h = 0; h < r->nhosts; h++) {
        json_t *root, *arr;
        size_t i;
        if (r->hosts[h].setup_json == NULL) continue;
        root = json_loads(r->hosts[h].setup_json, 0, NULL);
        arr = root != NULL ? json_object_get(root, "warnings") : NULL;
        for (i = 0; json_is_array(arr) && i < json_array_size(arr); i++) {
            const char *s = json_string_value(json_array_get(arr, i));
            char **grown = realloc(v->warn, ((size_t)v->nwarn + 1) * sizeof(*grown));
            size_t len;
            if (grown == NULL) goto err_root;
            v->warn = grown;
            len = strlen(r->hosts[h].name) + (s ? strlen(s) : 0) + 3;
            v->warn[v->nwarn] = malloc(len);
            if (v->warn[v->nwarn] == NULL) goto err_root;
            snprintf(v->warn[v->nwarn++], len, "%s: %s", r->hosts[h].name, s ? s : "?");
        }
        json_decref(root);
        continue;
err_root:
        json_decref(root);
        return -1;
    }
    return 0;
}

/*
 * Causes before consequences: a slow host or link makes the whole-job allreduce slow, and
 * its finding, often with a lower ratio than the host's (the ring runs at its slowest link),
 * must not be read first. So the kinds come in the order of the enum (host, link, intra,
 * oversub, coll), and within a kind the most severe first.
 */
static int cmp_finding(const void *a, const void *b)
{
    const fabric_finding_t *x = a, *y = b;

    if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
    if (x->kind == FABRIC_FIND_CPU) return x->host - y->host;
    if (x->ratio != y->ratio) return x->ratio < y->ratio ? -1 : 1;
    if (x->host != y->host) return x->host - y->host;
    return x->peer - y->peer;
}

/* An allreduce finding that the causes above may explain says so: the whole job's with slow
 * hosts or links, a host's with slow pairs of ranks on that host. */
static void mark_consequences(fabric_finding_t *find, int n)
{
    int nhost = 0, nlink = 0;

    for (int i = 0; i < n; i++) {
        nhost += find[i].kind == FABRIC_FIND_HOST;
        nlink += find[i].kind == FABRIC_FIND_LINK;
    }
    for (int i = 0; i < n; i++) {
        fabric_finding_t *c = &find[i];
        const char *cause = NULL;
        size_t len = strlen(c->text);
        if (c->kind != FABRIC_FIND_COLL) continue;
        if (c->host < 0 && (nhost > 0 || nlink > 0)) {
            cause = nhost > 0 && nlink > 0 ? "host(s) and link(s)" : nhost > 0 ? "host(s)"
                                                                            : "link(s)";
        }
        for (int j = 0; j < n && c->host >= 0 && cause == NULL; j++)
            if (find[j].kind == FABRIC_FIND_INTRA && find[j].host == c->host)
                cause = "intra-host pairs";
        if (cause != NULL)
            snprintf(c->text + len, sizeof(c->text) - len,
                     ", likely a consequence: limited by the slow %s above", cause);
    }
}

chorus_status_t fabric_analyze(const fabric_result_t *r, const fabric_opts_t *o,
                               fabric_verdict_t *v)
{
    fabric_verdict_t out = {0};
    findings_t f = {0}, notes = {0};
    double eb, ebi, conc_e = -1;
    int *slow = NULL;

    if (r == NULL || o == NULL || v == NULL) return CHORUS_ERR_INVALID_ARGUMENT;
    out.threshold = o->threshold > 0 ? o->threshold : 0.8;
    out.expect_given = o->expect_gbps > 0;
    out.expect_intra_given = o->expect_intra_gbps > 0;
    out.expect_gbps = o->expect_gbps > 0 ? o->expect_gbps
                                         : fabric_pairs_median(r->inter, r->ninter, 0);
    out.expect_intra_gbps = o->expect_intra_gbps > 0
                                ? o->expect_intra_gbps
                                : fabric_pairs_median(r->intra, r->nintra, 0);
    eb = o->expect_gbps > 0 ? 2 * o->expect_gbps : fabric_pairs_median(r->inter, r->ninter, 1);
    ebi = o->expect_intra_gbps > 0 ? 2 * o->expect_intra_gbps
                                   : fabric_pairs_median(r->intra, r->nintra, 1);
    if (r->conc.host_tx_gbps != NULL) conc_e = median_of(r->conc.host_tx_gbps, r->nhosts);
    out.expect_gbps = out.expect_gbps > 0 ? out.expect_gbps : 0;
    out.expect_intra_gbps = out.expect_intra_gbps > 0 ? out.expect_intra_gbps : 0;
    slow = calloc((size_t)r->nhosts + 1, sizeof(*slow));
    if (slow == NULL) goto err_free;
    if (find_slow_hosts(r, &out, eb, conc_e, slow) != CHORUS_SUCCESS) goto err_free;
    if (add_hosts_and_links(r, &out, eb, conc_e, slow, &f, &notes) != 0 ||
        add_intra(r, &out, ebi, &f, &notes) != 0 || add_oversub(r, &out, &f) != 0 ||
        add_coll(r, &out, &f) != 0 ||
        add_cpu_notes(r, f.n > 0 || notes.n > 0, &notes, &out.nsaturated) != 0 ||
        collect_warnings(r, &out) != 0)
        goto err_free;
    if (f.n > 1) qsort(f.find, (size_t)f.n, sizeof(*f.find), cmp_finding);
    if (notes.n > 1) qsort(notes.find, (size_t)notes.n, sizeof(*notes.find), cmp_finding);
    mark_consequences(f.find, f.n);
    out.find = f.find;
    out.nfind = f.n;
    out.note = notes.find;
    out.nnote = notes.n;
    mark_cpu_causes(r, &out);
    out.pass = f.n == 0;
    free(slow);
    *v = out;
    return CHORUS_SUCCESS;

err_free:
    free(slow);
    free(f.find);
    free(notes.find);
    fabric_verdict_free(&out);
    return CHORUS_ERR_NO_MEMORY;
}

void fabric_verdict_free(fabric_verdict_t *v)
{
    if (v == NULL) return;
    for (int i = 0; i < v->nwarn; i++)
        free(v->warn[i]);
    free(v->warn);
    free(v->find);
    free(v->note);
    memset(v, 0, sizeof(*v));
}
