/*
 * Unit test of chorus-fabric's round schedule (bench/fabric/schedule.c): for every N from 1
 * to 17, N - 1 rounds for even N and N for odd N (none for 1), every pair of endpoints meets
 * in exactly one round, no endpoint is in two pairs of a round, partners are symmetric, and
 * every round is full (N / 2 pairs; one idle endpoint for odd N). Bad arguments are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fabric_int.h"

#include <string.h>

#define NMAX 17

static void test_round_counts(void **state)
{
    (void)state;
    assert_int_equal(fabric_schedule_nrounds(0), 0);
    assert_int_equal(fabric_schedule_nrounds(1), 0);
    assert_int_equal(fabric_schedule_nrounds(2), 1);
    assert_int_equal(fabric_schedule_nrounds(3), 3);
    assert_int_equal(fabric_schedule_nrounds(8), 7);
    assert_int_equal(fabric_schedule_nrounds(17), 17);
}

static void test_every_pair_once(void **state)
{
    (void)state;
    for (int n = 1; n <= NMAX; n++) {
        int met[NMAX][NMAX];
        int partner[NMAX];
        int rounds = fabric_schedule_nrounds(n);

        memset(met, 0, sizeof met);
        assert_int_equal(rounds, n <= 1 ? 0 : n % 2 == 0 ? n - 1 : n);
        for (int r = 0; r < rounds; r++) {
            int npairs = fabric_schedule_round(n, r, partner), seen = 0, idle = 0;

            assert_int_equal(npairs, n / 2);
            for (int i = 0; i < n; i++) {
                int p = partner[i];
                if (p < 0) {
                    idle++;
                    continue;
                }
                /* Disjoint: i's partner names i back, and nobody pairs with itself. */
                assert_true(p < n);
                assert_int_not_equal(p, i);
                assert_int_equal(partner[p], i);
                if (i < p) {
                    met[i][p]++;
                    seen++;
                }
            }
            assert_int_equal(seen, npairs);
            assert_int_equal(idle, n % 2);
        }
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) {
                if (met[a][b] != 1)
                    fail_msg("n=%d: pair (%d, %d) met %d times", n, a, b, met[a][b]);
            }
    }
}

static void test_bad_arguments(void **state)
{
    int partner[4];

    (void)state;
    assert_int_equal(fabric_schedule_round(4, -1, partner), -1);
    assert_int_equal(fabric_schedule_round(4, 3, partner), -1);
    assert_int_equal(fabric_schedule_round(1, 0, partner), -1);
    assert_int_equal(fabric_schedule_round(0, 0, partner), -1);
    assert_int_equal(fabric_schedule_round(4, 0, NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_counts),
        cmocka_unit_test(test_every_pair_once),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
