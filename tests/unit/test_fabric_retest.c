/*
 * The retest of flagged pairs, its pure part (bench/fabric/retest.c and
 * fabric_budget_retest in budget.c):
 *  - selection: exactly the pairs that analyze.c would flag (a one-way rate below threshold
 *    x expected, the both-ways rate below threshold x 2 expected; expected given or the
 *    class median), most severe first, ties in pair order; unmeasured figures never;
 *  - rounds: no two pairs of a round share an endpoint, each pair is in the first round
 *    where it fits, and pairs past max_rounds are left out (-1) while later, less severe
 *    pairs may still fill earlier rounds;
 *  - the slice: the acceptance case (8 hosts, 200 Mbit/s, --time-budget 60) retests all 7
 *    pairs of a slow host; a retest that cannot all fit gets the rounds that do, each no
 *    shorter than FABRIC_RETEST_MIN_SLOT of a first-test round and no longer than one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fabric_int.h"

#include <limits.h>
#include <string.h>

#define H 8
#define NP (H * (H - 1) / 2)

/* Index of the pair (a, b), a < b, of H hosts in row order. */
static int pidx(int a, int b)
{
    return a * H - a * (a + 1) / 2 + (b - a - 1);
}

/* Every pair at rate each way and 2 x rate both ways; host slow_host's at half. */
static void fabric8(fabric_pair_t *p, double rate, int slow_host)
{
    int k = 0;

    for (int a = 0; a < H; a++)
        for (int b = a + 1; b < H; b++, k++) {
            double f = a == slow_host || b == slow_host ? 0.5 : 1;
            p[k] = (fabric_pair_t){.a = a, .b = b, .host = -1, .gbps = {rate * f, rate * f},
                                   .bidir_gbps = 2 * rate * f, .lat_us = 50,
                                   .first_gbps = {-1, -1}};
        }
}

static void test_select_slow_host_and_burst(void **state)
{
    fabric_pair_t p[NP];
    int sel[NP];
    double ratio[NP];
    int n;

    (void)state;
    fabric8(p, 0.2, 5);
    /* One direction of a healthy pair caught in a CPU burst, at 0.78 of the median. */
    p[pidx(0, 1)].gbps[1] = 0.156;
    /* Just above the threshold is not below it. */
    p[pidx(2, 3)].gbps[0] = 0.161;
    n = fabric_retest_select(p, NP, 0, 0.8, sel, ratio);
    assert_int_equal(n, 8);
    /* host5's seven pairs (ratio 0.5), in pair order, then the burst (0.78). */
    assert_int_equal(sel[0], pidx(0, 5));
    assert_int_equal(sel[1], pidx(1, 5));
    assert_int_equal(sel[2], pidx(2, 5));
    assert_int_equal(sel[3], pidx(3, 5));
    assert_int_equal(sel[4], pidx(4, 5));
    assert_int_equal(sel[5], pidx(5, 6));
    assert_int_equal(sel[6], pidx(5, 7));
    assert_int_equal(sel[7], pidx(0, 1));
    for (int i = 0; i < 7; i++) assert_true(ratio[i] > 0.5 - 1e-9 && ratio[i] < 0.5 + 1e-9);
    assert_true(ratio[7] > 0.78 - 1e-9 && ratio[7] < 0.78 + 1e-9);

    /* A worse pair goes first; a bidir-only dip is flagged too; unmeasured never is. */
    p[pidx(3, 4)].gbps[0] = 0.06;
    p[pidx(6, 7)].bidir_gbps = 0.2;
    p[pidx(1, 2)].gbps[0] = -1;
    p[pidx(1, 2)].bidir_gbps = -1;
    n = fabric_retest_select(p, NP, 0, 0.8, sel, NULL);
    assert_int_equal(n, 10);
    assert_int_equal(sel[0], pidx(3, 4));
    assert_int_equal(sel[8], pidx(6, 7));
    assert_int_equal(sel[9], pidx(0, 1));
}

static void test_select_expect_given(void **state)
{
    fabric_pair_t p[NP];
    int sel[NP];

    (void)state;
    fabric8(p, 0.2, -1);
    /* Nothing below the median of equal rates; everything below a promise of 1 Gbit/s. */
    assert_int_equal(fabric_retest_select(p, NP, 0, 0.8, sel, NULL), 0);
    assert_int_equal(fabric_retest_select(p, NP, 1.0, 0.8, sel, NULL), NP);
    for (int i = 0; i < NP; i++) assert_int_equal(sel[i], i);
    /* And none against a promise they keep. */
    assert_int_equal(fabric_retest_select(p, NP, 0.2, 0.8, sel, NULL), 0);
    assert_int_equal(fabric_retest_select(p, 0, 0, 0.8, sel, NULL), 0);
}

static void check_disjoint(const fabric_pair_t *p, const int *sel, const int *round, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const fabric_pair_t *x = &p[sel[i]], *y = &p[sel[j]];
            if (round[i] < 0 || round[i] != round[j]) continue;
            assert_false(x->a == y->a || x->a == y->b || x->b == y->a || x->b == y->b);
        }
}

static void test_rounds(void **state)
{
    fabric_pair_t p[NP];
    int sel[NP], round[NP], n;

    (void)state;
    fabric8(p, 0.2, 5);
    p[pidx(0, 1)].gbps[1] = 0.156;
    n = fabric_retest_select(p, NP, 0, 0.8, sel, NULL);
    assert_int_equal(n, 8);
    /* host5 is in all seven of its pairs: one round each; (0, 1) joins (2, 5)'s round, the
     * first without host 0 or host 1. */
    assert_int_equal(fabric_retest_rounds(p, sel, n, INT_MAX, round), 7);
    for (int i = 0; i < 7; i++) assert_int_equal(round[i], i);
    assert_int_equal(round[7], 2);
    check_disjoint(p, sel, round, n);
    /* Four rounds fit: host5's last three pairs are left out; (0, 1) still runs. */
    assert_int_equal(fabric_retest_rounds(p, sel, n, 4, round), 4);
    for (int i = 0; i < 4; i++) assert_int_equal(round[i], i);
    for (int i = 4; i < 7; i++) assert_int_equal(round[i], -1);
    assert_int_equal(round[7], 2);
    assert_int_equal(fabric_retest_rounds(p, sel, n, 0, round), 0);
    for (int i = 0; i < n; i++) assert_int_equal(round[i], -1);

    /* Every pair flagged: a full schedule, disjoint, within 2 H rounds (greedy edge
     * colouring uses at most 2 x degree - 1), every pair placed. */
    for (int i = 0; i < NP; i++) sel[i] = NP - 1 - i;
    n = fabric_retest_rounds(p, sel, NP, INT_MAX, round);
    assert_true(n >= H - 1 && n <= 2 * (H - 1) - 1);
    for (int i = 0; i < NP; i++) assert_true(round[i] >= 0 && round[i] < n);
    check_disjoint(p, sel, round, NP);
}

/* The acceptance run's plan: 8 hosts of one rank at 200 Mbit/s, --time-budget 60. */
static void plan_8x1(double budget, fabric_plan_t *p)
{
    fabric_budget_in_t in = {.budget_s = budget, .spent_s = 2.0, .nhosts = 8, .nranks = 8,
                             .max_host_ranks = 1, .inter_Bps = 0.2e9 / 8,
                             .inter_lat_s = 200e-6};
    fabric_budget_plan(&in, p);
}

static void test_slice(void **state)
{
    fabric_plan_t p;
    fabric_test_plan_t t;
    int fit;

    (void)state;
    plan_8x1(60, &p);
    assert_true(p.retest_s[0] > 0 && p.retest_s[1] == 0);
    /* A slow host's seven pairs all fit, in tests shorter than the first ones. */
    assert_int_equal(fabric_budget_retest(&p, 0, 7, &t), 7);
    assert_true(t.test_s > 0 && t.test_s < p.inter.test_s);
    assert_true(t.bytes >= FABRIC_MIN_BYTES && t.reps >= FABRIC_MIN_REPS);
    assert_true(p.retest_s[0] / 7 >= FABRIC_RETEST_MIN_SLOT * p.slot_s[0]);
    /* One round gets at most a first-test round. */
    assert_int_equal(fabric_budget_retest(&p, 0, 1, &t), 1);
    assert_true(t.test_s <= p.inter.test_s * (1 + 1e-9));
    /* Too many rounds: those that fit at the shortest round, which fill the slice. */
    fit = fabric_budget_retest(&p, 0, 1000, &t);
    assert_true(fit >= 1 && fit < 1000);
    assert_true(fit * FABRIC_RETEST_MIN_SLOT * p.slot_s[0] <= p.retest_s[0] * (1 + 1e-9));
    assert_true((fit + 1) * FABRIC_RETEST_MIN_SLOT * p.slot_s[0] > p.retest_s[0]);
    /* Nothing to retest, or no intra-host class: no rounds. */
    assert_int_equal(fabric_budget_retest(&p, 0, 0, &t), 0);
    assert_int_equal(fabric_budget_retest(&p, 1, 3, &t), 0);
    /* A larger budget never fits fewer rounds. */
    for (double b = 30, prev = 0; b <= 600; b *= 1.5) {
        plan_8x1(b, &p);
        fit = fabric_budget_retest(&p, 0, 1000, &t);
        assert_true(fit >= prev);
        prev = fit;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_slow_host_and_burst),
        cmocka_unit_test(test_select_expect_given),
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_slice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
