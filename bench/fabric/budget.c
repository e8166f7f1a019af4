/*
 * The time plan: from the probe's rates, the job's shape and --time-budget, how large and
 * how many messages each phase sends. Pure, so that every rank computes the same plan from
 * the same figures and the unit test can check it.
 *
 * What is left of the budget after the start (init, setup, probe) and an end reserve
 * (analysis, gnuplot) loses a margin against noise and links slower than the probed one;
 * the rest is shared between the phases that run, by fixed weights. Inside a phase, the
 * slot of one round holds a latency test (a tenth of it) and three bandwidth tests (a -> b,
 * b -> a, both at once, counted twice since a half-duplex path takes twice as long). A test
 * of `t` seconds at rate r moves r t bytes in about 16 messages; sizes and counts are
 * clamped to minimums below which a figure means little, so a tiny budget gets a run longer
 * than asked rather than meaningless numbers.
 *
 * Each pair phase gives FABRIC_RETEST_SHARE of its time to the retest of its flagged pairs.
 * How many rounds that retest needs is known only after the first test (a slow host's pairs
 * all share that host, so they need one round each); fabric_budget_retest then shares the
 * slice between them, with shorter tests than the first down to a floor, and says how many
 * rounds fit. A run with nothing flagged leaves the slice unused and ends earlier.
 */
#include "fabric_int.h"

#include <math.h>

static const double phase_weight[4] = {0.45, 0.15, 0.15, 0.25};
static const char *const phase_name[4] = {"inter-host pairs", "intra-host pairs",
                                          "concurrent shifts", "allreduce ring+tree"};

/* Fixed cost of one round: the barrier that starts it and the exchange of figures. */
#define ROUND_OVERHEAD_S 0.005
#define TARGET_MSGS 16.0

static double clampd(double x, double lo, double hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

void fabric_budget_size(double rate_Bps, double seconds, uint64_t min_bytes, uint64_t max_bytes,
                        int min_reps, int max_reps, uint64_t *bytes_p, int *reps_p)
{
    double total = rate_Bps > 0 && seconds > 0 ? rate_Bps * seconds : 0;
    double bytes = clampd(total / TARGET_MSGS, (double)min_bytes, (double)max_bytes);
    uint64_t b = ((uint64_t)bytes) & ~(uint64_t)4095;
    double reps;

    if (b < min_bytes) b = min_bytes;
    reps = clampd(floor(total / (double)b), min_reps, max_reps);
    *bytes_p = b;
    *reps_p = (int)reps;
}

/* One round of pair tests at rate/lat in a slot of slot_s seconds. */
static void plan_pairs(double rate, double lat, double slot_s, fabric_test_plan_t *t)
{
    double lat_s = lat > 0 ? lat : 50e-6;
    double avail;

    t->lat_reps = (int)clampd(floor(slot_s * 0.1 / (2 * lat_s)), FABRIC_MIN_LAT_REPS,
                              FABRIC_MAX_LAT_REPS);
    avail = slot_s - ROUND_OVERHEAD_S - t->lat_reps * 2 * lat_s;
    t->test_s = avail > 0 ? avail / 4 : 0;
    fabric_budget_size(rate, t->test_s, FABRIC_MIN_BYTES, FABRIC_MAX_BYTES, FABRIC_MIN_REPS,
                       FABRIC_MAX_REPS, &t->bytes, &t->reps);
    /* Past 1.5 times its planned time a one-way test stops: the link is slow, and the
     * messages already sent tell how slow. */
    t->cap_s = 1.5 * t->test_s > 0.05 ? 1.5 * t->test_s : 0.05;
}

/* The modelled time of one allreduce of bytes over n ranks: every scheme here moves about
 * 2 (n - 1) / n of the vector over each link; tree moves up to 3, hence 3 for both. */
static double coll_call_s(uint64_t bytes, int n, double rate, double lat)
{
    if (rate <= 0) return 0;
    return 3.0 * (double)bytes / rate + 2.0 * n * (lat > 0 ? lat : 50e-6);
}

static uint64_t plan_coll_bytes(double rate, double lat, int n, double slot_s)
{
    double per_call = slot_s / 11.0 - 2.0 * n * (lat > 0 ? lat : 50e-6);
    double bytes = rate > 0 && per_call > 0 ? rate * per_call / 3.0 : 0;

    bytes = clampd(bytes, FABRIC_MIN_COLL_BYTES, FABRIC_MAX_COLL_BYTES);
    return ((uint64_t)bytes) & ~(uint64_t)4095;
}

int fabric_budget_coll_reps(double slot_s, double call_s)
{
    if (call_s <= 0) return FABRIC_MAX_COLL_REPS;
    return (int)clampd(floor(slot_s / call_s) - 1, FABRIC_MIN_COLL_REPS, FABRIC_MAX_COLL_REPS);
}

void fabric_budget_plan(const fabric_budget_in_t *in, fabric_plan_t *p)
{
    int run[4];
    double wsum = 0, left;
    double inter_rate = in->inter_Bps > 0 ? in->inter_Bps : in->intra_Bps;
    double inter_lat = in->inter_Bps > 0 ? in->inter_lat_s : in->intra_lat_s;

    *p = (fabric_plan_t){0};
    p->budget_s = in->budget_s;
    left = in->budget_s - in->spent_s - FABRIC_END_RESERVE_S;
    p->usable_s = left > 0 ? left * (1 - FABRIC_MARGIN) : 0;
    run[FABRIC_PHASE_INTER] = in->nhosts >= 2;
    run[FABRIC_PHASE_INTRA] = in->max_host_ranks >= 2;
    run[FABRIC_PHASE_CONC] = in->nhosts >= 3;
    run[FABRIC_PHASE_COLL] = !in->no_coll && in->nranks >= 2;
    for (int i = 0; i < 4; i++) wsum += run[i] ? phase_weight[i] : 0;
    for (int i = 0; i < 4; i++)
        p->phase_s[i] = run[i] && wsum > 0 ? p->usable_s * phase_weight[i] / wsum : 0;

    for (int c = 0; c < 2; c++) {
        int ph = c == 0 ? FABRIC_PHASE_INTER : FABRIC_PHASE_INTRA;
        p->retest_s[c] = p->phase_s[ph] * FABRIC_RETEST_SHARE;
        p->phase_s[ph] -= p->retest_s[c];
    }
    p->rate_Bps[0] = in->inter_Bps;
    p->lat_s[0] = in->inter_lat_s;
    p->rate_Bps[1] = in->intra_Bps;
    p->lat_s[1] = in->intra_lat_s;
    p->inter_rounds = fabric_schedule_nrounds(in->nhosts);
    if (p->inter_rounds > 0) {
        p->slot_s[0] = p->phase_s[FABRIC_PHASE_INTER] / p->inter_rounds;
        plan_pairs(in->inter_Bps, in->inter_lat_s, p->slot_s[0], &p->inter);
    }
    p->intra_rounds = fabric_schedule_nrounds(in->max_host_ranks);
    if (p->intra_rounds > 0) {
        p->slot_s[1] = p->phase_s[FABRIC_PHASE_INTRA] / p->intra_rounds;
        plan_pairs(in->intra_Bps, in->intra_lat_s, p->slot_s[1], &p->intra);
    }
    if (run[FABRIC_PHASE_CONC]) {
        p->conc.test_s = p->phase_s[FABRIC_PHASE_CONC] / (in->nhosts - 1) * 0.8;
        fabric_budget_size(in->inter_Bps, p->conc.test_s, FABRIC_MIN_BYTES, FABRIC_MAX_BYTES,
                           FABRIC_MIN_REPS, FABRIC_MAX_REPS, &p->conc.bytes, &p->conc.reps);
        p->conc.cap_s = 2 * p->conc.test_s;
    }
    if (run[FABRIC_PHASE_COLL]) {
        int host_coll = in->max_host_ranks >= 2 && in->nhosts >= 2;
        double whole = p->phase_s[FABRIC_PHASE_COLL] * (host_coll ? 0.7 : 1.0);
        p->coll_slot_s = whole / 2;
        p->coll_bytes = plan_coll_bytes(inter_rate, inter_lat, in->nranks, p->coll_slot_s);
        if (host_coll) {
            p->coll_host_slot_s = (p->phase_s[FABRIC_PHASE_COLL] - whole) / 2;
            p->coll_host_bytes = plan_coll_bytes(in->intra_Bps, in->intra_lat_s,
                                                 in->max_host_ranks, p->coll_host_slot_s);
        }
    }
}

int fabric_budget_retest(const fabric_plan_t *p, int intra, int rounds, fabric_test_plan_t *t)
{
    int c = intra ? 1 : 0, fit;
    double full = p->slot_s[c], slot;

    *t = (fabric_test_plan_t){0};
    if (rounds <= 0 || p->retest_s[c] <= 0 || full <= 0) return 0;
    slot = clampd(p->retest_s[c] / rounds, FABRIC_RETEST_MIN_SLOT * full, full);
    fit = (int)floor(p->retest_s[c] / slot + 1e-9);
    plan_pairs(p->rate_Bps[c], p->lat_s[c], slot, t);
    return fit < rounds ? fit : rounds;
}

static double pairs_predict(const fabric_test_plan_t *t, double rate, double lat, int rounds)
{
    double bw, one;

    if (rounds <= 0 || rate <= 0) return 0;
    bw = (double)t->bytes * t->reps / rate;
    one = ROUND_OVERHEAD_S + t->lat_reps * 2 * (lat > 0 ? lat : 50e-6) + 4 * bw;
    return rounds * one;
}

double fabric_budget_predict(const fabric_budget_in_t *in, const fabric_plan_t *p)
{
    double t = 0;
    double inter_rate = in->inter_Bps > 0 ? in->inter_Bps : in->intra_Bps;
    double inter_lat = in->inter_Bps > 0 ? in->inter_lat_s : in->intra_lat_s;

    t += pairs_predict(&p->inter, in->inter_Bps, in->inter_lat_s, p->inter_rounds);
    t += pairs_predict(&p->intra, in->intra_Bps, in->intra_lat_s, p->intra_rounds);
    /* The retests take at most their slices (none when nothing is flagged). */
    t += p->retest_s[0] + p->retest_s[1];
    if (p->phase_s[FABRIC_PHASE_CONC] > 0 && in->inter_Bps > 0)
        t += (in->nhosts - 1) * (ROUND_OVERHEAD_S +
                                 (double)p->conc.bytes * p->conc.reps / in->inter_Bps);
    if (p->coll_slot_s > 0) {
        double c = coll_call_s(p->coll_bytes, in->nranks, inter_rate, inter_lat);
        t += 2 * (1 + fabric_budget_coll_reps(p->coll_slot_s, c)) * c;
    }
    if (p->coll_host_slot_s > 0) {
        double c = coll_call_s(p->coll_host_bytes, in->max_host_ranks, in->intra_Bps,
                               in->intra_lat_s);
        t += 2 * (1 + fabric_budget_coll_reps(p->coll_host_slot_s, c)) * c;
    }
    return t;
}

static void print_pairs(FILE *out, const char *name, int rounds, const fabric_test_plan_t *t)
{
    fprintf(out, "chorus-fabric: plan: %s: %d rounds; per pair %d ping-pongs, 3 tests of %d x "
            "%llu bytes (%.2f s each, a one-way test stops after %.2f s)\n", name, rounds,
            t->lat_reps, t->reps, (unsigned long long)t->bytes, t->test_s, t->cap_s);
}

void fabric_budget_print(const fabric_budget_in_t *in, const fabric_plan_t *p, FILE *out)
{
    fprintf(out, "chorus-fabric: plan: budget %.1f s, %.1f s spent, %.1f s usable; probe: "
            "inter %.3f Gbit/s %.1f us, intra %.3f Gbit/s %.1f us\n", p->budget_s, in->spent_s,
            p->usable_s, in->inter_Bps * 8e-9, in->inter_lat_s * 1e6, in->intra_Bps * 8e-9,
            in->intra_lat_s * 1e6);
    for (int i = 0; i < 4; i++)
        fprintf(out, "chorus-fabric: plan: %-20s %6.2f s%s\n", phase_name[i], p->phase_s[i],
                p->phase_s[i] > 0 ? "" : " (skipped)");
    if (p->inter_rounds > 0) print_pairs(out, "inter-host", p->inter_rounds, &p->inter);
    if (p->intra_rounds > 0) print_pairs(out, "intra-host", p->intra_rounds, &p->intra);
    if (p->retest_s[0] + p->retest_s[1] > 0)
        fprintf(out, "chorus-fabric: plan: retest of flagged pairs: up to %.2f s inter-host, "
                "%.2f s intra-host\n", p->retest_s[0], p->retest_s[1]);
    if (p->phase_s[FABRIC_PHASE_CONC] > 0)
        fprintf(out, "chorus-fabric: plan: concurrent: %d shifts of %d x %llu bytes (resized "
                "to the slowest pair)\n", in->nhosts - 1, p->conc.reps,
                (unsigned long long)p->conc.bytes);
    if (p->coll_slot_s > 0)
        fprintf(out, "chorus-fabric: plan: allreduce whole job: %llu bytes, %.2f s per "
                "algorithm\n", (unsigned long long)p->coll_bytes, p->coll_slot_s);
    if (p->coll_host_slot_s > 0)
        fprintf(out, "chorus-fabric: plan: allreduce per host: %llu bytes, %.2f s per "
                "algorithm\n", (unsigned long long)p->coll_host_bytes, p->coll_host_slot_s);
    fprintf(out, "chorus-fabric: plan: predicted %.1f s of measurement\n",
            fabric_budget_predict(in, p));
}
