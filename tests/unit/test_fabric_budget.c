/*
 * Unit test of chorus-fabric's time plan (bench/fabric/budget.c), over shapes from 2 hosts
 * to 64 x 8 ranks and rates from 10 Mbit/s to 400 Gbit/s:
 *  - the plan fits: its own estimate of the measurement, plus what was spent and the end
 *    reserve, stays within the budget whenever the budget is large enough for the
 *    minimums (checked as budgets of 30 s and up on links of 100 Mbit/s and up), and uses
 *    at least a fifth of what is usable where the maximums do not bind;
 *  - it is monotone: a larger budget never plans fewer bytes, fewer repetitions or less time;
 *  - minimums hold: even a budget already spent gets messages of at least FABRIC_MIN_BYTES,
 *    FABRIC_MIN_REPS of them and FABRIC_MIN_LAT_REPS ping-pongs, and nothing above the
 *    maximums;
 *  - phases that cannot run get no time (one host: no inter-host pairs; --no-coll).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fabric_int.h"

typedef struct {
    int nhosts, ranks_per_host;
} shape_t;

static const shape_t shapes[] = {{2, 1}, {3, 1}, {8, 1}, {8, 4}, {1, 4}, {16, 8}, {64, 8}};
static const double gbit[] = {0.01, 0.1, 0.2, 1, 10, 100, 400};
#define NSHAPES (sizeof shapes / sizeof shapes[0])
#define NRATES (sizeof gbit / sizeof gbit[0])

static fabric_budget_in_t input(shape_t s, double inter_gbit, double budget)
{
    fabric_budget_in_t in = {.budget_s = budget, .spent_s = 2.0, .nhosts = s.nhosts,
                             .nranks = s.nhosts * s.ranks_per_host,
                             .max_host_ranks = s.ranks_per_host};
    if (s.nhosts >= 2) {
        in.inter_Bps = inter_gbit * 1e9 / 8;
        in.inter_lat_s = 20e-6;
    }
    if (s.ranks_per_host >= 2) {
        in.intra_Bps = 40e9 / 8;
        in.intra_lat_s = 2e-6;
    }
    return in;
}

static void check_test(const fabric_test_plan_t *t)
{
    assert_true(t->bytes >= FABRIC_MIN_BYTES && t->bytes <= FABRIC_MAX_BYTES);
    assert_int_equal(t->bytes % 4096, 0);
    assert_true(t->reps >= FABRIC_MIN_REPS && t->reps <= FABRIC_MAX_REPS);
    assert_true(t->lat_reps >= FABRIC_MIN_LAT_REPS && t->lat_reps <= FABRIC_MAX_LAT_REPS);
    assert_true(t->cap_s > 0);
}

static void test_plans_fit(void **state)
{
    static const double budgets[] = {30, 60, 120, 600, 3600};

    (void)state;
    for (size_t s = 0; s < NSHAPES; s++)
        for (size_t r = 1; r < NRATES; r++)
            for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
                fabric_budget_in_t in = input(shapes[s], gbit[r], budgets[b]);
                fabric_plan_t p;
                double t;

                fabric_budget_plan(&in, &p);
                t = fabric_budget_predict(&in, &p);
                if (in.spent_s + t + FABRIC_END_RESERVE_S > in.budget_s)
                    fail_msg("%d hosts x %d at %g Gbit/s, budget %g s: plan takes %.2f s",
                             shapes[s].nhosts, shapes[s].ranks_per_host, gbit[r], budgets[b], t);
                /* And it uses a fair part of it, where the maximum sizes and counts do not
                 * bind (they do for a long budget on a fast link). */
                if (budgets[b] >= 60 && budgets[b] <= 120 && gbit[r] <= 10 &&
                    t < 0.2 * p.usable_s)
                    fail_msg("%d hosts x %d at %g Gbit/s, budget %g s: only %.2f of %.2f s used",
                             shapes[s].nhosts, shapes[s].ranks_per_host, gbit[r], budgets[b], t,
                             p.usable_s);
            }
}

static void test_monotone_in_budget(void **state)
{
    (void)state;
    for (size_t s = 0; s < NSHAPES; s++)
        for (size_t r = 0; r < NRATES; r++) {
            fabric_plan_t prev = {0};
            double prev_t = 0;
            for (double budget = 5; budget <= 5000; budget *= 1.3) {
                fabric_budget_in_t in = input(shapes[s], gbit[r], budget);
                fabric_plan_t p;
                double t;

                fabric_budget_plan(&in, &p);
                t = fabric_budget_predict(&in, &p);
                assert_true(t >= prev_t * (1 - 1e-9));
                assert_true(p.inter.bytes * (uint64_t)p.inter.reps >=
                            prev.inter.bytes * (uint64_t)prev.inter.reps);
                assert_true(p.intra.bytes * (uint64_t)p.intra.reps >=
                            prev.intra.bytes * (uint64_t)prev.intra.reps);
                assert_true(p.inter.lat_reps >= prev.inter.lat_reps);
                assert_true(p.coll_bytes >= prev.coll_bytes);
                assert_true(p.coll_host_bytes >= prev.coll_host_bytes);
                for (int i = 0; i < 4; i++) assert_true(p.phase_s[i] >= prev.phase_s[i]);
                prev = p;
                prev_t = t;
            }
        }
}

static void test_minimums(void **state)
{
    (void)state;
    for (size_t s = 0; s < NSHAPES; s++)
        for (size_t r = 0; r < NRATES; r++) {
            /* Spent already: nothing usable, so everything falls to its minimum. */
            fabric_budget_in_t in = input(shapes[s], gbit[r], 5);
            fabric_plan_t p;

            in.spent_s = 10;
            fabric_budget_plan(&in, &p);
            assert_true(p.usable_s == 0);
            if (p.inter_rounds > 0) check_test(&p.inter);
            if (p.intra_rounds > 0) check_test(&p.intra);
            if (shapes[s].nhosts >= 3) check_test(&(fabric_test_plan_t){
                .bytes = p.conc.bytes, .reps = p.conc.reps, .lat_reps = FABRIC_MIN_LAT_REPS,
                .cap_s = 1});
            assert_true(p.coll_bytes >= FABRIC_MIN_COLL_BYTES);
            assert_true(p.coll_bytes <= FABRIC_MAX_COLL_BYTES);
            /* A huge budget stays under the maximums. */
            in = input(shapes[s], gbit[r], 1e6);
            fabric_budget_plan(&in, &p);
            if (p.inter_rounds > 0) check_test(&p.inter);
            if (p.intra_rounds > 0) check_test(&p.intra);
            assert_true(p.coll_bytes <= FABRIC_MAX_COLL_BYTES);
        }
    assert_int_equal(fabric_budget_coll_reps(10, 100), FABRIC_MIN_COLL_REPS);
    assert_int_equal(fabric_budget_coll_reps(10, 1e-6), FABRIC_MAX_COLL_REPS);
    assert_int_equal(fabric_budget_coll_reps(10, 1), 9);
}

static void test_phases_that_cannot_run(void **state)
{
    fabric_budget_in_t in = input((shape_t){1, 4}, 0, 60);
    fabric_plan_t p;

    (void)state;
    fabric_budget_plan(&in, &p);
    assert_true(p.phase_s[FABRIC_PHASE_INTER] == 0 && p.phase_s[FABRIC_PHASE_CONC] == 0);
    assert_int_equal(p.inter_rounds, 0);
    assert_int_equal(p.intra_rounds, 3);
    assert_true(p.phase_s[FABRIC_PHASE_INTRA] > 0 && p.phase_s[FABRIC_PHASE_COLL] > 0);
    assert_true(p.coll_host_slot_s == 0); /* one host: the whole job is the host */
    in = input((shape_t){2, 1}, 1, 60);
    in.no_coll = 1;
    fabric_budget_plan(&in, &p);
    assert_true(p.phase_s[FABRIC_PHASE_COLL] == 0 && p.coll_slot_s == 0);
    assert_true(p.phase_s[FABRIC_PHASE_INTRA] == 0 && p.phase_s[FABRIC_PHASE_CONC] == 0);
    /* The one phase left gets all that is usable, its retest slice included. */
    assert_true(p.phase_s[FABRIC_PHASE_INTER] + p.retest_s[0] > 0.999 * p.usable_s);
    assert_true(p.retest_s[0] > 0.999 * FABRIC_RETEST_SHARE * p.usable_s &&
                p.retest_s[0] < 1.001 * FABRIC_RETEST_SHARE * p.usable_s);
    assert_true(p.retest_s[1] == 0);
}

static void test_size(void **state)
{
    uint64_t bytes;
    int reps;

    (void)state;
    /* 25 MB/s for 1 s: 16 messages of about 1.5 MB. */
    fabric_budget_size(25e6, 1.0, FABRIC_MIN_BYTES, FABRIC_MAX_BYTES, 3, 1000, &bytes, &reps);
    assert_true(bytes >= 1500000 && bytes <= 1562500);
    assert_int_equal(reps, 16);
    /* Zero rate or time: the minimums. */
    fabric_budget_size(0, 1.0, FABRIC_MIN_BYTES, FABRIC_MAX_BYTES, 3, 1000, &bytes, &reps);
    assert_true(bytes == FABRIC_MIN_BYTES && reps == 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plans_fit),
        cmocka_unit_test(test_monotone_in_budget),
        cmocka_unit_test(test_minimums),
        cmocka_unit_test(test_phases_that_cannot_run),
        cmocka_unit_test(test_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
