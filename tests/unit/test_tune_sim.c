/*
 * The tuner predicts with lib/sim, the engine of chorus-sim: its prediction is the replay
 * of the schedules on its description of the communicator, to the last bit; its fast paths
 * (the line through two sizes for large ones, the lockstep pass for many ranks) stay close
 * to the full replay; a streaming receive's critical path still adds up to the call's time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sim/sim.h"
#include "tune/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Measured when written: within 0.4%. */
static const double lockstep_tol = 0.02;

typedef struct {
    int n, nhosts, kind;
} shape_t;

static const shape_t shapes[] = {
    {2, 1, CHORUS_TUNE_SHM}, {4, 1, CHORUS_TUNE_SHM}, {8, 1, CHORUS_TUNE_SHM},
    {4, 1, CHORUS_TUNE_TCP}, {4, 2, CHORUS_TUNE_TCP}, {8, 4, CHORUS_TUNE_TCP},
};

/* A tuner of shape s (ranks fill hosts in order, 2 cores) and its fabric. */
static void make(const shape_t *s, chorus_tune_params_t *p, chorus_tune_topo_t *t, int *host,
                 int *place, chorus_fabric_t **fab)
{
    chorus_fab_desc_t d;

    chorus__tune_params_default(p);
    memset(t, 0, sizeof *t);
    for (int r = 0; r < s->n; r++) host[r] = r / (s->n / s->nhosts);
    t->nranks = s->n;
    t->nhosts = s->nhosts;
    t->host_of = host;
    t->local_kind = s->kind;
    t->nlocal = s->n / s->nhosts;
    t->cores = 2;
    assert_int_equal(chorus__tune_fabric_desc(p, t, &d, place), CHORUS_SUCCESS);
    assert_int_equal(chorus__fabric_build(&d, fab), CHORUS_SUCCESS);
    chorus__fab_desc_free(&d);
}

static double replay(chorus_fabric_t *fab, const int *place, int n, chorus_coll_t coll,
                     chorus_algo_t algo, uint64_t count, uint64_t chunk, int record,
                     chorus_sim_result_t *r)
{
    chorus_sim_args_t a;
    int per_rank = coll == CHORUS_COLL_ALLGATHER || coll == CHORUS_COLL_REDUCE_SCATTER ||
                   coll == CHORUS_COLL_ALLTOALL;

    memset(&a, 0, sizeof a);
    a.coll = coll;
    a.algo = algo;
    a.bytes = count * 4 * (per_rank ? (uint64_t)n : 1);
    a.dtype = CHORUS_FLOAT32;
    a.chunk_bytes = chunk;
    a.nranks = n;
    a.place = place;
    a.record = record;
    assert_int_equal(chorus__sim_run(fab, &a, r), CHORUS_SUCCESS);
    free(r->links);
    return r->time_s * 1e6;
}

/* Every prediction below the extrapolated sizes is chorus-sim's replay, exactly. */
static void test_prediction_is_the_replay(void **state)
{
    static const chorus_coll_t colls[] = {CHORUS_COLL_ALLREDUCE, CHORUS_COLL_ALLGATHER,
                                          CHORUS_COLL_REDUCE_SCATTER, CHORUS_COLL_BROADCAST};
    (void)state;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape_t *s = &shapes[si];
        chorus_tune_params_t p;
        chorus_tune_topo_t t;
        chorus_fabric_t *fab;
        chorus_tune_t *tune;
        int host[8], place[8], checked = 0;

        make(s, &p, &t, host, place, &fab);
        assert_int_equal(chorus__tune_create_topo(&t, &p, &tune), CHORUS_SUCCESS);
        for (size_t ci = 0; ci < sizeof colls / sizeof colls[0]; ci++)
            for (int k = 1; k < CHORUS_NUM_ALGOS; k++) {
                double us, sim;
                chorus_sim_result_t r;
                if (k == CHORUS_ALGO_ARENA || !chorus__algo_supports((chorus_algo_t)k, colls[ci]))
                    continue;
                assert_int_equal(chorus__tune_predict(tune, colls[ci], (chorus_algo_t)k, 4096,
                                                      CHORUS_FLOAT32, 65536, &us),
                                 CHORUS_SUCCESS);
                sim = replay(fab, place, s->n, colls[ci], (chorus_algo_t)k, 4096, 65536, 0, &r);
                if (us != sim)
                    fail_msg("%d ranks on %d hosts, %s %s: tuner %.17g us, replay %.17g us", s->n,
                             s->nhosts, chorus__coll_name(colls[ci]),
                             chorus__algo_name((chorus_algo_t)k), us, sim);
                checked++;
            }
        assert_true(checked >= 12);
        chorus__tune_destroy(tune);
        chorus__fabric_free(fab);
    }
}

/* Large sizes: the line through two smaller replays lands near the full replay. */
static void test_extrapolation_near_the_replay(void **state)
{
    static const chorus_algo_t algos[] = {CHORUS_ALGO_RING, CHORUS_ALGO_TREE, CHORUS_ALGO_RD};
    (void)state;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape_t *s = &shapes[si];
        chorus_tune_params_t p;
        chorus_tune_topo_t t;
        chorus_fabric_t *fab;
        chorus_tune_t *tune;
        int host[8], place[8];

        make(s, &p, &t, host, place, &fab);
        assert_int_equal(chorus__tune_create_topo(&t, &p, &tune), CHORUS_SUCCESS);
        for (size_t k = 0; k < sizeof algos / sizeof algos[0]; k++) {
            const uint64_t count = 16u << 20; /* 64 MiB */
            double us, sim;
            chorus_sim_result_t r;
            assert_int_equal(chorus__tune_predict(tune, CHORUS_COLL_ALLREDUCE, algos[k], count,
                                                  CHORUS_FLOAT32, 262144, &us),
                             CHORUS_SUCCESS);
            sim = replay(fab, place, s->n, CHORUS_COLL_ALLREDUCE, algos[k], count, 262144, 0, &r);
            /* Measured when written: ring and rd exact, tree 7.5% off at worst. */
            if (fabs(us - sim) > 0.10 * sim)
                fail_msg("%d ranks on %d hosts, %s: line %.1f us, replay %.1f us", s->n, s->nhosts,
                         chorus__algo_name(algos[k]), us, sim);
        }
        chorus__tune_destroy(tune);
        chorus__fabric_free(fab);
    }
}

/* Many ranks: rank 0 alone in lockstep, against the replay of all of them, for schedules
 * whose ranks are alike (a ring, halving-doubling) on one rank per host. */
static void test_lockstep_near_the_replay(void **state)
{
    static const chorus_algo_t algos[] = {CHORUS_ALGO_RING, CHORUS_ALGO_RD};
    const shape_t s = {64, 64, CHORUS_TUNE_TCP};
    chorus_tune_params_t p;
    chorus_tune_topo_t t;
    chorus_fabric_t *fab;
    int host[64], place[64];

    (void)state;
    make(&s, &p, &t, host, place, &fab);
    for (size_t k = 0; k < sizeof algos / sizeof algos[0]; k++)
        for (uint64_t count = 256; count <= (1u << 20); count *= 64) {
            chorus_sim_args_t a;
            chorus_sim_result_t r;
            double lock, sim = replay(fab, place, s.n, CHORUS_COLL_ALLREDUCE, algos[k], count,
                                      262144, 0, &r);
            memset(&a, 0, sizeof a);
            a.coll = CHORUS_COLL_ALLREDUCE;
            a.algo = algos[k];
            a.bytes = count * 4;
            a.dtype = CHORUS_FLOAT32;
            a.chunk_bytes = 262144;
            a.nranks = s.n;
            a.place = place;
            assert_int_equal(chorus__sim_lockstep(fab, &a, &r), CHORUS_SUCCESS);
            lock = r.time_s * 1e6;
            if (fabs(lock - sim) > lockstep_tol * sim)
                fail_msg("%s %llu floats on 64 ranks: lockstep %.1f us, replay %.1f us",
                         chorus__algo_name(algos[k]), (unsigned long long)count, lock, sim);
        }
    chorus__fabric_free(fab);
}

/* Streaming receives on the tuner's fabrics: the critical path's parts still add up. */
static void test_streaming_critical_path(void **state)
{
    (void)state;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape_t *s = &shapes[si];
        chorus_tune_params_t p;
        chorus_tune_topo_t t;
        chorus_fabric_t *fab;
        int host[8], place[8];

        make(s, &p, &t, host, place, &fab);
        for (int k = 1; k < CHORUS_NUM_ALGOS; k++)
            for (uint64_t count = 16; count <= (1u << 20); count *= 256) {
                chorus_sim_result_t r;
                double sum;
                if (k == CHORUS_ALGO_ARENA || !chorus__algo_supports((chorus_algo_t)k, CHORUS_COLL_ALLREDUCE))
                    continue;
                replay(fab, place, s->n, CHORUS_COLL_ALLREDUCE, (chorus_algo_t)k, count, 65536, 1, &r);
                sum = r.path.network_s + r.path.latency_s + r.path.message_s + r.path.reduce_s +
                      r.path.copy_s;
                if (fabs(sum - r.time_s) > 1e-9 * r.time_s)
                    fail_msg("%d ranks, %s, %llu floats: path %.9g s, call %.9g s", s->n,
                             chorus__algo_name((chorus_algo_t)k), (unsigned long long)count, sum,
                             r.time_s);
            }
        chorus__fabric_free(fab);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prediction_is_the_replay),
        cmocka_unit_test(test_extrapolation_near_the_replay),
        cmocka_unit_test(test_lockstep_near_the_replay),
        cmocka_unit_test(test_streaming_critical_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
