/*
 * Unit test of the engine's mismatch detection and timeout messages, over the virtual
 * transport: every rank of a call lives in this process, each with its own arguments and
 * signature, and all are advanced round robin until each has finished, failed, or stopped
 * moving (the virtual transport has no timers: a rank that stops moving is one that would
 * time out).
 *
 * Each mismatch case makes one rank (the odd one) call something else and checks that
 * - the odd rank and every rank that exchanges data with it in both schedules fail with
 *   CHORUS_ERR_MISMATCH, naming both signatures;
 * - no rank succeeds, and no rank fails with anything but MISMATCH or REMOTE (the others
 *   are left waiting, which in a real job is a timeout naming the peer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "algo/algo.h"
#include "core/engine.h"
#include "transport/virtual/virtual.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 9

/* One rank's call. */
typedef struct {
    chorus_coll_t coll;
    chorus_algo_t algo;
    uint64_t count;
    int root;
    chorus_dtype_t dtype;
    chorus_op_t op;
    uint64_t seq;
} call_t;

typedef struct {
    call_t call;
    chorus_sched_t sched;
    chorus_exec_t exec;
    chorus_exec_sig_t sig;
    char *send, *recv, *scratch;
    int state; /* 0 running, 1 done, 2 failed */
    chorus_status_t status;
    char msg[512];
    char what[64];
} rank_t;

typedef struct {
    int n;
    rank_t r[MAXN];
    chorus_peer_tp_t peers[MAXN * MAXN];
    chorus_vworld_t *world;
} job_t;

/* Elements of the largest buffer any collective of count elements may touch. */
static size_t buf_elems(const call_t *c, int n)
{
    return (size_t)c->count * (size_t)n + 16;
}

/* Builds and starts every rank's call; sign: whether the executions exchange signatures. */
static void job_start(job_t *j, int n, const call_t *calls, int sign)
{
    memset(j, 0, sizeof(*j));
    j->n = n;
    assert_int_equal(chorus__vworld_create(n, &j->world), CHORUS_SUCCESS);
    for (int r = 0; r < n; r++) {
        rank_t *t = &j->r[r];
        const call_t *c = &calls[r];
        chorus_coll_args_t a = {.coll = c->coll, .rank = r, .nranks = n, .count = c->count,
                                 .root = c->root, .chunk_count = 0};
        size_t es = chorus_dtype_size(c->dtype), elems = buf_elems(c, n);
        void *bufs[CHORUS_NUM_BUFS];

        t->call = *c;
        chorus__sched_init(&t->sched, r, n);
        assert_int_equal(chorus__algo_build(c->algo, &a, &t->sched), CHORUS_SUCCESS);
        t->send = calloc(elems, es);
        t->recv = calloc(elems, es);
        t->scratch = calloc(t->sched.scratch_count + 1, es);
        assert_non_null(t->send);
        assert_non_null(t->recv);
        assert_non_null(t->scratch);
        /* Small integers: every dtype and op reduces them exactly. */
        for (size_t i = 0; i < elems * es; i++) t->send[i] = (char)(es == 1 ? 1 : 0);
        if (es > 1)
            for (size_t i = 0; i < elems; i++) t->send[i * es] = (char)(1 + r);
        for (int p = 0; p < n; p++) {
            j->peers[r * n + p].ops = &chorus__tp_virtual_ops;
            j->peers[r * n + p].tp = chorus__vworld_tp(j->world, r);
        }
        snprintf(t->what, sizeof t->what, "%s #%llu", chorus__coll_name(c->coll),
                 (unsigned long long)c->seq);
        if (sign) {
            memset(&t->sig, 0, sizeof t->sig);
            t->sig.coll = (uint8_t)c->coll;
            t->sig.dtype = (uint8_t)c->dtype;
            t->sig.op = (uint8_t)c->op;
            t->sig.algo = (uint8_t)c->algo;
            t->sig.root = c->root;
            t->sig.nranks = n;
            t->sig.count = c->count;
            t->sig.seq = c->seq;
            t->sig.opnum = c->seq;
            chorus__exec_sign(&t->exec, &t->sig);
        }
        bufs[CHORUS_BUF_SEND] = t->send;
        bufs[CHORUS_BUF_RECV] = t->recv;
        bufs[CHORUS_BUF_SCRATCH] = t->scratch;
        assert_int_equal(chorus__exec_start(&t->exec, &t->sched, bufs, c->dtype, c->op,
                                            &j->peers[r * n], &j->peers[r * n + r], 1, t->what),
                         CHORUS_SUCCESS);
    }
}

/* Advances every running rank until none moves. */
static void job_run(job_t *j)
{
    for (int idle = 0; idle < 3;) {
        int moved = 0;
        for (int r = 0; r < j->n; r++) {
            rank_t *t = &j->r[r];
            int done = 0, progressed = 0;
            if (t->state != 0) continue;
            t->status = chorus__exec_progress(&t->exec, &done, &progressed);
            if (t->status != CHORUS_SUCCESS) {
                t->state = 2;
                snprintf(t->msg, sizeof t->msg, "%s", chorus_last_error());
                moved = 1;
            } else if (done) {
                t->state = 1;
                moved = 1;
            }
            moved |= progressed;
        }
        idle = moved ? 0 : idle + 1;
    }
}

/* The ranks keep their buffers until the world is gone: a failed rank's receives are
 * still queued there, and the others' progress may still match them. */
static void job_free(job_t *j)
{
    chorus__vworld_destroy(j->world);
    for (int r = 0; r < j->n; r++) {
        rank_t *t = &j->r[r];
        chorus__exec_fini(&t->exec);
        chorus__sched_fini(&t->sched);
        free(t->send);
        free(t->recv);
        free(t->scratch);
    }
}

/* Nonzero if rank r's schedule sends to or receives from p. */
static int talks_to(const rank_t *t, int p)
{
    for (uint32_t i = 0; i < t->sched.nsteps; i++) {
        const chorus_step_t *st = &t->sched.steps[i];
        if ((st->kind == CHORUS_STEP_SEND || st->kind == CHORUS_STEP_RECV) && st->peer == p)
            return 1;
    }
    return 0;
}

/* Runs n ranks where rank odd calls `other` and the rest `base`, and checks the outcome;
 * want_odd / want_peer: substrings that the odd rank's and its peers' messages must hold. */
static void check_mismatch(const char *name, int n, int odd, const call_t *base,
                           const call_t *other, const char *want_odd, const char *want_peer)
{
    call_t calls[MAXN];
    job_t *j = calloc(1, sizeof(*j));
    int nmismatch = 0;

    assert_non_null(j);
    for (int r = 0; r < n; r++) calls[r] = r == odd ? *other : *base;
    job_start(j, n, calls, 1);
    job_run(j);
    for (int r = 0; r < n; r++) {
        const rank_t *t = &j->r[r];
        int involved = r == odd || (talks_to(t, odd) && talks_to(&j->r[odd], r));
        const char *want = r == odd ? want_odd : want_peer;

        if (t->state == 1) fail_msg("%s n=%d: rank %d succeeded", name, n, r);
        if (t->state == 2 && t->status != CHORUS_ERR_MISMATCH && t->status != CHORUS_ERR_REMOTE)
            fail_msg("%s n=%d: rank %d failed with %s: %s", name, n, r,
                     chorus_status_string(t->status), t->msg);
        print_message("%s n=%d rank %d: %s: %s\n", name, n, r,
                      t->state == 0 ? "waiting" : t->state == 1 ? "success"
                                                                : chorus_status_string(t->status),
                      t->msg);
        if (!involved) continue;
        if (t->state != 2 || t->status != CHORUS_ERR_MISMATCH)
            fail_msg("%s n=%d: rank %d (involved) %s: %s", name, n, r,
                     t->state == 0 ? "is stuck" : chorus_status_string(t->status), t->msg);
        nmismatch++;
        /* The odd rank names whichever peer's signature it checked first. */
        if (want != NULL && strstr(t->msg, want) == NULL)
            fail_msg("%s n=%d: rank %d: message lacks \"%s\": %s", name, n, r, want, t->msg);
    }
    assert_true(nmismatch >= 2);
    job_free(j);
    free(j);
}

static const call_t AR_RING = {CHORUS_COLL_ALLREDUCE, CHORUS_ALGO_RING, 1000, 0, CHORUS_FLOAT32,
                               CHORUS_SUM, 17};

static void test_count(void **state)
{
    call_t other = AR_RING;

    (void)state;
    other.count = 250;
    for (int n = 2; n <= 5; n++)
        check_mismatch("count", n, n - 1, &AR_RING, &other,
                       "allreduce #17 (count 250, float32, sum) but rank ",
                       "allreduce #17 (count 1000, float32, sum) but rank ");
    /* The same as a large message against a small one, in the opposite order. */
    check_mismatch("count", 4, 0, &other, &AR_RING, "(count 1000, float32, sum) but rank",
                   "(count 250, float32, sum) but rank 0 called allreduce #17 (count 1000, "
                   "float32, sum)");
}

static void test_dtype(void **state)
{
    call_t other = AR_RING;

    (void)state;
    other.dtype = CHORUS_INT32; /* the same bytes: only the signature can tell */
    for (int n = 2; n <= 4; n++)
        check_mismatch("dtype", n, 1, &AR_RING, &other,
                       "allreduce #17 (count 1000, int32, sum) but rank",
                       "called allreduce #17 (count 1000, int32, sum)");
}

static void test_op(void **state)
{
    call_t other = AR_RING;

    (void)state;
    other.op = CHORUS_MAX;
    check_mismatch("op", 3, 2, &AR_RING, &other, "(count 1000, float32, max) but rank",
                   "but rank 2 called allreduce #17 (count 1000, float32, max)");
    other.op = CHORUS_AVG; /* runs as SUM, but means something else */
    check_mismatch("op avg", 2, 0, &AR_RING, &other, "float32, avg) but rank 1",
                   "but rank 0 called allreduce #17 (count 1000, float32, avg)");
}

static void test_root(void **state)
{
    const call_t bc = {CHORUS_COLL_BROADCAST, CHORUS_ALGO_RING, 64, 0, CHORUS_INT32, CHORUS_SUM,
                       3};
    const call_t rd = {CHORUS_COLL_REDUCE, CHORUS_ALGO_RING, 64, 0, CHORUS_INT32, CHORUS_SUM, 3};
    call_t other = bc;

    (void)state;
    other.root = 1;
    /* Two ranks: each thinks it is the root and only sends; the signature it receives is
     * the only thing that can stop it from returning success. */
    check_mismatch("broadcast root", 2, 1, &bc, &other, "(count 64, int32, root 1) but rank 0",
                   "(count 64, int32, root 0) but rank 1 called broadcast #3 (count 64, int32, "
                   "root 1)");
    check_mismatch("broadcast root", 3, 1, &bc, &other, "root 1) but rank", "root 1)");
    other = rd;
    other.root = 1;
    check_mismatch("reduce root", 2, 1, &rd, &other, "root 1) but rank 0", "root 1)");
}

static void test_coll(void **state)
{
    const call_t ag = {CHORUS_COLL_ALLGATHER, CHORUS_ALGO_RING, 250, 0, CHORUS_FLOAT32, CHORUS_SUM,
                       17};

    (void)state;
    for (int n = 2; n <= 4; n++)
        check_mismatch("collective", n, n / 2, &AR_RING, &ag,
                       "allgather #17 (count 250, float32) but rank",
                       "(count 1000, float32, sum) but rank");
    check_mismatch("collective", 4, 3, &AR_RING, &ag,
                   NULL, "allreduce #17 (count 1000, float32, sum) but rank 3 called allgather "
                   "#17 (count 250, float32)");
}

static void test_seq(void **state)
{
    call_t other = AR_RING;

    (void)state;
    other.seq = 18; /* a rank that made one more call before this one */
    for (int n = 2; n <= 4; n++)
        check_mismatch("seq", n, 0, &AR_RING, &other, "a rank skipped or added a call",
                       "as its collective call 18, this rank's call 17");
}

static void test_algo(void **state)
{
    call_t other = AR_RING;

    (void)state;
    other.algo = CHORUS_ALGO_RD; /* CHORUS_ALGO set differently on one rank */
    check_mismatch("algorithm", 4, 2, &AR_RING, &other, ", rd chunk 0) but rank",
                   ", ring chunk 0) but rank 2 called allreduce #17 (count 1000, float32, sum, "
                   "rd chunk 0)");
}

/* Agreeing signed ranks run to the right result, for several shapes of schedule. */
static void test_match(void **state)
{
    static const call_t cases[] = {
        {CHORUS_COLL_ALLREDUCE, CHORUS_ALGO_RING, 1000, 0, CHORUS_INT32, CHORUS_SUM, 1},
        {CHORUS_COLL_ALLREDUCE, CHORUS_ALGO_RD, 7, 0, CHORUS_INT32, CHORUS_SUM, 2},
        {CHORUS_COLL_ALLREDUCE, CHORUS_ALGO_TREE, 33, 0, CHORUS_INT32, CHORUS_SUM, 3},
        {CHORUS_COLL_BROADCAST, CHORUS_ALGO_TREE, 33, 2, CHORUS_INT32, CHORUS_SUM, 4},
        {CHORUS_COLL_BARRIER, CHORUS_ALGO_DISSEMINATION, 0, 0, CHORUS_UINT8, CHORUS_SUM, 5},
    };

    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int n = 1; n <= 6; n++) {
            call_t calls[MAXN];
            const call_t *k = &cases[c];
            job_t *j;

            if (k->root >= n) continue;
            j = calloc(1, sizeof(*j));
            assert_non_null(j);
            for (int r = 0; r < n; r++) calls[r] = *k;
            job_start(j, n, calls, 1);
            job_run(j);
            for (int r = 0; r < n; r++) {
                const rank_t *t = &j->r[r];
                if (t->state != 1)
                    fail_msg("case %zu n=%d: rank %d %s: %s", c, n, r,
                             t->state == 0 ? "is stuck" : "failed", t->msg);
                for (uint64_t i = 0; i < k->count; i++) {
                    int32_t v;
                    int32_t want = k->coll == CHORUS_COLL_BROADCAST ? 1 + k->root
                                                                    : n * (n + 1) / 2;
                    memcpy(&v, t->recv + 4 * i, 4);
                    if (v != want)
                        fail_msg("case %zu n=%d: rank %d [%llu] = %d, want %d", c, n, r,
                                 (unsigned long long)i, v, want);
                }
            }
            job_free(j);
            free(j);
        }
    }
}

/* Signing never deadlocks a schedule: every algorithm and collective it implements, on 1
 * to 9 ranks, small and large, over the strict virtual transport (no buffering: a send
 * completes only when its receive is posted). */
static void test_every_algo(void **state)
{
    (void)state;
    for (int a = CHORUS_ALGO_RING; a < CHORUS_ALGO_HIER; a++) {
        for (int c = 0; c < CHORUS_NUM_COLLS; c++) {
            if (c == CHORUS_COLL_SENDRECV || !chorus__algo_supports((chorus_algo_t)a, c))
                continue;
            for (int n = 1; n <= 9; n++) {
                for (int big = 0; big < 2; big++) {
                    call_t calls[MAXN];
                    job_t *j = calloc(1, sizeof(*j));
                    call_t k = {(chorus_coll_t)c, (chorus_algo_t)a, big ? 3000 : 5, n / 2,
                                CHORUS_INT32, CHORUS_SUM, 1};

                    assert_non_null(j);
                    for (int r = 0; r < n; r++) calls[r] = k;
                    job_start(j, n, calls, 1);
                    job_run(j);
                    for (int r = 0; r < n; r++)
                        if (j->r[r].state != 1)
                            fail_msg("%s %s n=%d count %llu: rank %d %s: %s",
                                     chorus__algo_name((chorus_algo_t)a),
                                     chorus__coll_name((chorus_coll_t)c), n,
                                     (unsigned long long)k.count, r,
                                     j->r[r].state == 0 ? "is stuck" : "failed", j->r[r].msg);
                    job_free(j);
                    free(j);
                }
            }
        }
    }
}

/* An execution that is not signed sends nothing extra: an unsigned rank and a signed one
 * cannot meet (the lengths differ), but two unsigned ones work as before, and signing is
 * for one execution only. */
static void test_sign_once(void **state)
{
    call_t calls[2] = {AR_RING, AR_RING};
    job_t *j = calloc(1, sizeof(*j));

    (void)state;
    assert_non_null(j);
    job_start(j, 2, calls, 1);
    job_run(j);
    assert_int_equal(j->r[0].state, 1);
    assert_int_equal(j->r[1].state, 1);
    assert_int_equal(j->r[0].exec.sig_armed, 0);
    job_free(j);
    job_start(j, 2, calls, 0);
    job_run(j);
    assert_int_equal(j->r[0].state, 1);
    assert_int_equal(j->r[1].state, 1);
    assert_int_equal(j->r[0].exec.nsig_peers, 0);
    job_free(j);
    free(j);
}

/* A peer whose first message is not a signature (it runs something else, unsigned): the
 * signed rank must not take it for one. */
static void test_stray(void **state)
{
    job_t *j = calloc(1, sizeof(*j));
    chorus_exec_sig_t junk;
    chorus_tp_req_t req;
    chorus_tp_t *tp1;

    (void)state;
    assert_non_null(j);
    call_t calls[2] = {AR_RING, AR_RING};
    job_start(j, 2, calls, 1);
    /* Rank 1 never runs its schedule; instead a bare 48-byte message reaches rank 0. */
    memset(&junk, 0x5a, sizeof junk);
    tp1 = chorus__vworld_tp(j->world, 1);
    memset(&req, 0, sizeof req);
    assert_int_equal(chorus__tp_virtual_ops.isend(tp1, 0, &junk, sizeof junk, &req),
                     CHORUS_SUCCESS);
    j->r[1].state = 1; /* not advanced */
    job_run(j);
    assert_int_equal(j->r[0].state, 2);
    assert_int_equal(j->r[0].status, CHORUS_ERR_MISMATCH);
    assert_non_null(strstr(j->r[0].msg, "rank 1 sent something else where its call signature"));
    job_free(j);
    free(j);
}

/* The timeout names the collective, the peers it waits for, the step and the transfers. */
static void test_timeout_message(void **state)
{
    chorus_wait_policy_t policy = {0, 0};
    call_t calls[4];
    job_t *j = calloc(1, sizeof(*j));
    chorus_status_t st;
    const char *msg;

    (void)state;
    assert_non_null(j);
    for (int r = 0; r < 4; r++) calls[r] = AR_RING;
    /* Unsigned: rank 0 of a ring waits for data from rank 3 while ranks 1..3 never run. */
    job_start(j, 4, calls, 0);
    st = chorus__exec_wait(&j->r[0].exec, &policy, chorus__now_ns() + 20000000, NULL);
    msg = chorus_last_error();
    assert_int_equal(st, CHORUS_ERR_TIMEOUT);
    if (strstr(msg, "allreduce #17: timed out after ") != msg ||
        strstr(msg, " s waiting for rank 3 (recv step ") == NULL ||
        strstr(msg, "transfers pending: ") == NULL || strstr(msg, "recv from 3") == NULL ||
        strstr(msg, "send to 1") == NULL)
        fail_msg("unexpected timeout message: %s", msg);
    job_free(j);

    /* Signed: the signatures are the first thing waited for. */
    job_start(j, 4, calls, 1);
    st = chorus__exec_wait(&j->r[0].exec, &policy, chorus__now_ns() + 20000000, NULL);
    msg = chorus_last_error();
    assert_int_equal(st, CHORUS_ERR_TIMEOUT);
    if (strstr(msg, "waiting for ranks 1, 3 (") == NULL &&
        strstr(msg, "waiting for ranks 3, 1 (") == NULL)
        fail_msg("unexpected timeout message: %s", msg);
    if (strstr(msg, "recv from 1 (signature)") == NULL)
        fail_msg("unexpected timeout message: %s", msg);
    job_free(j);

    /* Rank 3 got through a while, then stopped: rank 0 still names whom it waits for. */
    job_start(j, 4, calls, 1);
    j->r[3].state = 1;
    job_run(j);
    for (int r = 0; r < 3; r++) assert_int_equal(j->r[r].state, 0);
    st = chorus__exec_wait(&j->r[0].exec, &policy, chorus__now_ns() + 20000000, NULL);
    msg = chorus_last_error();
    assert_int_equal(st, CHORUS_ERR_TIMEOUT);
    if (strstr(msg, "waiting for rank 3 (") == NULL)
        fail_msg("unexpected timeout message: %s", msg);
    job_free(j);
    free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),     cmocka_unit_test(test_every_algo),
        cmocka_unit_test(test_sign_once),
        cmocka_unit_test(test_count),     cmocka_unit_test(test_dtype),
        cmocka_unit_test(test_op),        cmocka_unit_test(test_root),
        cmocka_unit_test(test_coll),      cmocka_unit_test(test_seq),
        cmocka_unit_test(test_algo),      cmocka_unit_test(test_stray),
        cmocka_unit_test(test_timeout_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
