/*
 * The retest of flagged pairs, its pure part: which pairs, in which rounds. A validator
 * that names a link on one measurement blames the fabric for every burst of a shared CPU;
 * so every pair that analyze.c would flag is measured again and keeps its better figures
 * (measure_p2p.c runs it). Only a pair slow twice is still flagged.
 *
 * The selection mirrors analyze.c: the same expectations (--expect-gbps, else the class
 * medians of fabric_pairs_median), the same threshold and the same figures (each one-way
 * rate, and the both-ways rate against twice the one-way expectation). The most severe
 * pairs go first, so that a slice too short for every retest spends itself on the pairs
 * most likely to become findings.
 */
#include "fabric_int.h"

#include <stdlib.h>

static int below(double measured, double expected, double threshold)
{
    return measured >= 0 && expected > 0 && measured < threshold * expected;
}

/* The lowest ratio among the flagged figures of p, or 0 when none is flagged (ratios of
 * flagged figures are > 0 only when measured > 0; a measured 0 gives ratio 0, also first). */
static int worst_ratio(const fabric_pair_t *p, double e, double eb, double thr, double *ratio_p)
{
    double worst = 2;
    int flagged = 0;

    for (int d = 0; d < 2; d++)
        if (below(p->gbps[d], e, thr)) {
            flagged = 1;
            if (p->gbps[d] / e < worst) worst = p->gbps[d] / e;
        }
    if (below(p->bidir_gbps, eb, thr)) {
        flagged = 1;
        if (p->bidir_gbps / eb < worst) worst = p->bidir_gbps / eb;
    }
    *ratio_p = worst;
    return flagged;
}

int fabric_retest_select(const fabric_pair_t *p, int n, double expect_gbps, double threshold,
                         int *sel, double *ratio)
{
    double e = expect_gbps > 0 ? expect_gbps : fabric_pairs_median(p, n, 0);
    double eb = expect_gbps > 0 ? 2 * expect_gbps : fabric_pairs_median(p, n, 1);
    double thr = threshold > 0 ? threshold : 0.8;
    double *r = malloc(((size_t)n + 1) * sizeof(*r));
    int m = 0;

    if (r == NULL) return 0;
    /* Insertion by ratio, stable: equal ratios keep the pairs' order, the same on every
     * rank that computes this from the same figures. */
    for (int i = 0; i < n; i++) {
        double x;
        int k;
        if (!worst_ratio(&p[i], e, eb, thr, &x)) continue;
        for (k = m; k > 0 && r[k - 1] > x; k--) {
            r[k] = r[k - 1];
            sel[k] = sel[k - 1];
        }
        r[k] = x;
        sel[k] = i;
        m++;
    }
    for (int i = 0; i < m && ratio != NULL; i++) ratio[i] = r[i];
    free(r);
    return m;
}

int fabric_retest_rounds(const fabric_pair_t *p, const int *sel, int nsel, int max_rounds,
                         int *round)
{
    int used = 0;

    for (int i = 0; i < nsel; i++) {
        const fabric_pair_t *x = &p[sel[i]];
        int r = 0;
        /* The first round in which no earlier pair shares an endpoint with this one. */
        for (;; r++) {
            int busy = 0;
            for (int j = 0; j < i && !busy; j++) {
                const fabric_pair_t *y = &p[sel[j]];
                busy = round[j] == r && (y->a == x->a || y->a == x->b || y->b == x->a ||
                                         y->b == x->b);
            }
            if (!busy) break;
        }
        round[i] = r < max_rounds ? r : -1;
        if (round[i] >= 0 && r + 1 > used) used = r + 1;
    }
    return used;
}
