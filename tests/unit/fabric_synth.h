/*
 * Synthetic chorus-fabric results for the unit tests of the analysis and the reports: a
 * fabric of H hosts whose figures are known, with a reproducible noise. Include after
 * cmocka.h and fabric.h.
 */
#ifndef CHORUS_TESTS_FABRIC_SYNTH_H
#define CHORUS_TESTS_FABRIC_SYNTH_H

#include <stdio.h>
#include <stdlib.h>

/* A reproducible noise in [-amp, +amp] (a 64-bit LCG; rand() is not the same everywhere). */
static double noise(uint64_t *state, double amp)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return amp * (2.0 * (double)(*state >> 11) / (double)(1ull << 53) - 1.0);
}

/*
 * H hosts of rph ranks each; every host link runs at rate Gbit/s times factor[h] (NULL: all
 * 1), a pair at the slower end's rate; intra-host pairs at 10 x rate; +-amp relative noise.
 */
static fabric_result_t *synth(int H, int rph, double rate, const double *factor, double amp)
{
    fabric_result_t *r = calloc(1, sizeof(*r));
    uint64_t st = 12345;
    int k = 0;

    assert_non_null(r);
    r->nhosts = H;
    r->nranks = H * rph;
    r->hosts = calloc((size_t)H, sizeof(*r->hosts));
    r->host_of = calloc((size_t)r->nranks, sizeof(int));
    r->ninter = H * (H - 1) / 2;
    r->inter = calloc((size_t)r->ninter + 1, sizeof(*r->inter));
    r->nintra = H * rph * (rph - 1) / 2;
    r->intra = calloc((size_t)r->nintra + 1, sizeof(*r->intra));
    assert_true(r->hosts && r->host_of && r->inter && r->intra);
    for (int h = 0; h < H; h++) {
        snprintf(r->hosts[h].name, FABRIC_NAME_MAX, "host%d", h);
        r->hosts[h].nranks = rph;
        r->hosts[h].leader = h * rph;
        r->hosts[h].cpu_busy = r->hosts[h].cpu_softirq = -1; /* not sampled */
        for (int i = 0; i < rph; i++)
            r->host_of[h * rph + i] = h;
    }
    for (int a = 0; a < H; a++) {
        for (int b = a + 1; b < H; b++, k++) {
            double f = factor ? (factor[a] < factor[b] ? factor[a] : factor[b]) : 1;
            fabric_pair_t *p = &r->inter[k];
            *p = (fabric_pair_t){a, b, -1, {0, 0}, 0, 5, 1 << 20, 10, 0, {-1, -1}, 0};
            p->gbps[0] = rate * f * (1 + noise(&st, amp));
            p->gbps[1] = rate * f * (1 + noise(&st, amp));
            p->bidir_gbps = 2 * rate * f * (1 + noise(&st, amp));
        }
    }
    k = 0;
    for (int h = 0; h < H; h++) {
        for (int a = 0; a < rph; a++) {
            for (int b = a + 1; b < rph; b++, k++) {
                fabric_pair_t *p = &r->intra[k];
                *p = (fabric_pair_t){h * rph + a, h * rph + b, h, {0, 0}, 0, 1, 1 << 20, 10, 0,
                                         {-1, -1}, 0};
                p->gbps[0] = 10 * rate * (1 + noise(&st, amp));
                p->gbps[1] = 10 * rate * (1 + noise(&st, amp));
                p->bidir_gbps = 20 * rate * (1 + noise(&st, amp));
            }
        }
    }
    if (H >= 3) {
        double minf = 1;
        r->conc.gbps = calloc((size_t)(H * H), sizeof(double));
        r->conc.host_tx_gbps = calloc((size_t)H, sizeof(double));
        assert_true(r->conc.gbps && r->conc.host_tx_gbps);
        for (int s = 0; s < H; s++) {
            double fs = factor ? factor[s] : 1;
            minf = fs < minf ? fs : minf;
            for (int d = 0; d < H; d++) {
                double fd = factor ? factor[d] : 1;
                r->conc.gbps[s * H + d] = s == d ? -1 : rate * (fs < fd ? fs : fd);
            }
            r->conc.host_tx_gbps[s] = rate * fs * (1 + noise(&st, amp));
        }
        (void)minf;
    }
    r->ncoll = 2 + (rph >= 2 ? 2 * H : 0);
    r->coll = calloc((size_t)r->ncoll, sizeof(*r->coll));
    assert_non_null(r->coll);
    {
        double minf = 1;
        for (int h = 0; h < H && factor; h++)
            minf = factor[h] < minf ? factor[h] : minf;
        r->coll[0] = (fabric_coll_t){FABRIC_ALGO_RING, -1, r->nranks, 1 << 22, 100,
                                     0.95 * rate * minf};
        r->coll[1] = (fabric_coll_t){FABRIC_ALGO_TREE, -1, r->nranks, 1 << 22, 200,
                                     0.4 * rate * minf};
    }
    for (int h = 0; h < H && rph >= 2; h++) {
        r->coll[2 + 2 * h] = (fabric_coll_t){FABRIC_ALGO_RING, h, rph, 1 << 22, 10,
                                             8 * rate * (1 + noise(&st, amp))};
        r->coll[3 + 2 * h] = (fabric_coll_t){FABRIC_ALGO_TREE, h, rph, 1 << 22, 10,
                                             6 * rate * (1 + noise(&st, amp))};
    }
    r->budget_s = 120;
    r->elapsed_s = 42;
    snprintf(r->transport, sizeof(r->transport), "tcp");
    return r;
}

/* Marks pair p as retested by a second test that gave the same figures, which is what the
 * analysis needs before it calls a link or an intra pair faulty. */
static inline void synth_retested(fabric_pair_t *p)
{
    p->retested = 1;
    p->first_gbps[0] = p->gbps[0];
    p->first_gbps[1] = p->gbps[1];
}

/* Frees a result made by synth. */
static void synth_free(fabric_result_t *r)
{
    fabric_result_free(r);
    free(r);
}

#endif
