/*
 * chorus-fabric's verdict (bench/fabric/analyze.c) on synthetic results: which findings a
 * fabric gives, and above all which host or link they name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fabric.h"

#include <stdlib.h>
#include <string.h>

#include "fabric_synth.h"

static fabric_opts_t opts(double expect)
{
    fabric_opts_t o;
    memset(&o, 0, sizeof(o));
    o.threshold = 0.8;
    o.expect_gbps = expect;
    o.time_budget_s = 120;
    return o;
}

static int count_kind(const fabric_verdict_t *v, fabric_find_kind_t kind)
{
    int n = 0;
    for (int i = 0; i < v->nfind; i++)
        n += v->find[i].kind == kind;
    return n;
}

static void test_equal_with_noise_passes(void **state)
{
    (void)state;
    for (int H = 2; H <= 8; H++) {
        fabric_result_t *r = synth(H, 2, 0.2, NULL, 0.1);
        fabric_opts_t o = opts(0);
        fabric_verdict_t v;
        assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
        for (int i = 0; i < v.nfind; i++)
            print_message("unexpected finding: %s\n", v.find[i].text);
        assert_int_equal(v.nfind, 0);
        assert_int_equal(v.pass, 1);
        assert_false(v.expect_given);
        /* The median of rates within +-10% of 0.2 is within the same bounds. */
        assert_true(v.expect_gbps > 0.18 && v.expect_gbps < 0.22);
        fabric_verdict_free(&v);
        synth_free(r);
    }
}

/* The acceptance case: 8 hosts, host5 at half. Only host5 is named; the ring allreduce is
 * a COLL finding naming no host. Its ratio (0.475) is below host5's (about 0.5), yet the
 * cause comes first and the allreduce says it is likely a consequence. */
static void test_half_host_named(void **state)
{
    double factor[8] = {1, 1, 1, 1, 1, 0.5, 1, 1};
    fabric_result_t *r = synth(8, 2, 0.2, factor, 0.1);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;

    (void)state;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.pass, 0);
    assert_int_equal(count_kind(&v, FABRIC_FIND_HOST), 1);
    assert_int_equal(count_kind(&v, FABRIC_FIND_LINK), 0);
    assert_int_equal(count_kind(&v, FABRIC_FIND_INTRA), 0);
    assert_int_equal(count_kind(&v, FABRIC_FIND_OVERSUB), 0);
    for (int i = 0; i < v.nfind; i++) {
        if (v.find[i].kind == FABRIC_FIND_HOST) {
            assert_int_equal(v.find[i].host, 5);
            assert_non_null(strstr(v.find[i].text, "host5"));
            assert_true(v.find[i].ratio > 0.4 && v.find[i].ratio < 0.6);
        }
        if (v.find[i].kind == FABRIC_FIND_COLL) {
            assert_int_equal(v.find[i].host, -1);
            assert_string_equal(v.find[i].metric, "ring_busbw_gbps");
            assert_non_null(strstr(v.find[i].text, "limited by the slow host(s) above"));
            assert_true(v.find[i].ratio < v.find[0].ratio);
        }
        /* Kinds in the order of causes, then the most severe first within a kind. */
        if (i > 0) assert_true(v.find[i - 1].kind <= v.find[i].kind);
        if (i > 0 && v.find[i - 1].kind == v.find[i].kind)
            assert_true(v.find[i - 1].ratio <= v.find[i].ratio);
    }
    assert_int_equal(v.nfind, 2);
    assert_int_equal(v.find[0].kind, FABRIC_FIND_HOST);
    assert_int_equal(v.find[1].kind, FABRIC_FIND_COLL);
    assert_int_equal(count_kind(&v, FABRIC_FIND_COLL), 1);
    fabric_verdict_free(&v);
    synth_free(r);
}

/* One slow link between two otherwise healthy hosts, both directions, slow in its retest
 * too: a link finding that says what both tests gave. */
static void test_one_slow_link(void **state)
{
    fabric_result_t *r = synth(6, 1, 1.0, NULL, 0.05);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;

    (void)state;
    for (int i = 0; i < r->ninter; i++) {
        if (r->inter[i].a == 1 && r->inter[i].b == 4) {
            r->inter[i].gbps[0] *= 0.3;
            r->inter[i].bidir_gbps *= 0.6;
            synth_retested(&r->inter[i]);
        }
    }
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.nfind, 1);
    assert_int_equal(v.find[0].kind, FABRIC_FIND_LINK);
    assert_int_equal(v.find[0].host, 1);
    assert_int_equal(v.find[0].peer, 4);
    assert_string_equal(v.find[0].metric, "pair_gbps");
    assert_true(v.find[0].ratio > 0.25 && v.find[0].ratio < 0.35);
    assert_non_null(strstr(v.find[0].text, "host1-host4"));
    {
        char want[96];
        snprintf(want, sizeof(want), "retested, still below: first test %.3g and",
                 v.find[0].measured);
        assert_non_null(strstr(v.find[0].text, want));
    }
    assert_int_equal(v.nnote, 0);
    fabric_verdict_free(&v);
    synth_free(r);
}

/* Two hosts: a slow pair cannot say which end is slow, so the link is named. */
static void test_two_hosts_slow_pair_is_link(void **state)
{
    fabric_result_t *r = synth(2, 1, 1.0, NULL, 0);
    fabric_opts_t o = opts(2.0);
    fabric_verdict_t v;

    (void)state;
    synth_retested(&r->inter[0]);
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.pass, 0);
    assert_int_equal(count_kind(&v, FABRIC_FIND_HOST), 0);
    assert_int_equal(count_kind(&v, FABRIC_FIND_LINK), 1);
    for (int i = 0; i < v.nfind; i++) {
        /* The whole-job ring (0.95 of 1.0 against 2.0) follows the slow link. */
        if (v.find[i].kind == FABRIC_FIND_COLL) {
            assert_int_equal(i, v.nfind - 1);
            assert_non_null(strstr(v.find[i].text, "limited by the slow link(s) above"));
        }
        if (v.find[i].kind != FABRIC_FIND_LINK) continue;
        assert_int_equal(i, 0);
        assert_int_equal(v.find[i].host, 0);
        assert_int_equal(v.find[i].peer, 1);
    }
    assert_int_equal(count_kind(&v, FABRIC_FIND_COLL), 1);
    assert_true(v.expect_given);
    fabric_verdict_free(&v);
    synth_free(r);
}

/* Everything at half of the given rate: every host is slow, no link stands alone. */
static void test_expect_given_all_slow(void **state)
{
    fabric_result_t *r = synth(8, 1, 0.5, NULL, 0.05);
    fabric_opts_t o = opts(1.0);
    fabric_verdict_t v;
    int seen[8] = {0};

    (void)state;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.pass, 0);
    assert_int_equal(count_kind(&v, FABRIC_FIND_HOST), 8);
    assert_int_equal(count_kind(&v, FABRIC_FIND_LINK), 0);
    for (int i = 0; i < v.nfind; i++) {
        if (v.find[i].kind == FABRIC_FIND_HOST) seen[v.find[i].host]++;
    }
    for (int h = 0; h < 8; h++)
        assert_int_equal(seen[h], 1);
    assert_true(v.expect_gbps == 1.0);
    fabric_verdict_free(&v);
    synth_free(r);
}

/* A slow pair of ranks inside a host is INTRA, and names no slow host. */
static void test_intra_slow(void **state)
{
    fabric_result_t *r = synth(4, 3, 1.0, NULL, 0.05);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;
    int idx = 4; /* host 1: ranks 3, 4, 5; pairs (3,4) (3,5) (4,5); this is (3,5) */

    (void)state;
    assert_int_equal(r->intra[idx].host, 1);
    r->intra[idx].gbps[1] *= 0.5;
    synth_retested(&r->intra[idx]);
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.nfind, 1);
    assert_int_equal(v.find[0].kind, FABRIC_FIND_INTRA);
    assert_int_equal(v.find[0].host, 1);
    assert_int_equal(v.find[0].rank, 3);
    assert_int_equal(v.find[0].peer, 5);
    fabric_verdict_free(&v);
    synth_free(r);
}

/* A host slow only when all send at once (its concurrent tx) is named; every host slow at
 * once is oversubscription, not a host. */
static void test_concurrent(void **state)
{
    fabric_result_t *r = synth(5, 1, 1.0, NULL, 0.02);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;

    (void)state;
    r->conc.host_tx_gbps[2] *= 0.4;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.nfind, 1);
    assert_int_equal(v.find[0].kind, FABRIC_FIND_HOST);
    assert_int_equal(v.find[0].host, 2);
    assert_string_equal(v.find[0].metric, "concurrent_tx_gbps");
    fabric_verdict_free(&v);
    for (int h = 0; h < 5; h++)
        r->conc.host_tx_gbps[h] = 0.3;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.nfind, 1);
    assert_int_equal(v.find[0].kind, FABRIC_FIND_OVERSUB);
    fabric_verdict_free(&v);
    synth_free(r);
}

static int count_note(const fabric_verdict_t *v, fabric_find_kind_t kind)
{
    int n = 0;
    for (int i = 0; i < v->nnote; i++)
        n += v->note[i].kind == kind;
    return n;
}

/*
 * Issue 21: a link at 0.78 of the expectation that was never measured again is not called
 * faulty. Case 1, the one a shared machine gives: 8 hosts, pair host2-host6 at 0.82 of the
 * first test's median, so not flagged then; the pairs that were flagged kept better
 * figures in their retest and the median rose, leaving host2-host6 at 0.78 of it. Case 2:
 * the same pair flagged, but the retest's slice had no room for it. Either way it is a
 * "not retested" note with its reason, the run passes, and no link is named; once retested
 * and still slow, it is the link finding.
 */
static void test_not_retested_is_not_faulty(void **state)
{
    fabric_result_t *r = synth(8, 1, 1.0, NULL, 0);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;
    fabric_pair_t *p = NULL;
    char line[1024];

    (void)state;
    for (int i = 0; i < r->ninter; i++)
        if (r->inter[i].a == 2 && r->inter[i].b == 6) p = &r->inter[i];
    assert_non_null(p);
    p->gbps[0] = p->gbps[1] = 0.78;
    p->bidir_gbps = 2 * 0.78;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.nfind, 0);
    assert_int_equal(v.pass, 1);
    assert_int_equal(v.nnote, 1);
    assert_int_equal(v.note[0].kind, FABRIC_FIND_NOT_RETESTED);
    assert_int_equal(v.note[0].host, 2);
    assert_int_equal(v.note[0].peer, 6);
    assert_true(v.note[0].ratio > 0.77 && v.note[0].ratio < 0.79);
    assert_non_null(strstr(v.note[0].text, "not retested: link host2-host6"));
    assert_non_null(strstr(v.note[0].text, "class median, which rose"));
    assert_non_null(strstr(v.note[0].text, "not called faulty"));
    fabric_verdict_line(r, &v, line, sizeof(line));
    assert_string_equal(line, "chorus-fabric: PASS");
    fabric_verdict_free(&v);

    p->retest_skipped = 1;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.nfind, 0);
    assert_int_equal(count_note(&v, FABRIC_FIND_NOT_RETESTED), 1);
    assert_non_null(strstr(v.note[0].text, "retest's slice of the time budget had no room"));
    fabric_verdict_free(&v);

    p->retest_skipped = 0;
    synth_retested(p);
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.nnote, 0);
    assert_int_equal(count_kind(&v, FABRIC_FIND_LINK), 1);
    assert_int_equal(v.pass, 0);
    fabric_verdict_free(&v);
    synth_free(r);
}

/* The same for a pair of ranks inside a host: not retested, it is a note naming the ranks. */
static void test_intra_not_retested(void **state)
{
    fabric_result_t *r = synth(4, 3, 1.0, NULL, 0.05);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;

    (void)state;
    r->intra[4].gbps[1] *= 0.5;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.nfind, 0);
    assert_int_equal(v.nnote, 1);
    assert_int_equal(v.note[0].kind, FABRIC_FIND_NOT_RETESTED);
    assert_int_equal(v.note[0].intra, 1);
    assert_int_equal(v.note[0].rank, 3);
    assert_int_equal(v.note[0].peer, 5);
    assert_non_null(strstr(v.note[0].text, "not retested: ranks 3-5 on host1"));
    fabric_verdict_free(&v);
    synth_free(r);
}

/*
 * Issue 21: 8 hosts whose CPU the kernel's networking saturates. The whole-job ring is slow
 * and host3's CPU was 97% busy, 41% in softirq: the verdict names host3's CPU as the likely
 * cause, in a CPU note, in the allreduce finding and on the verdict line. A host just below
 * both thresholds is not named; every host saturated reads "all 8 hosts"; with nothing slow
 * the note still stands, and the run passes.
 */
static void test_saturated_cpu_named(void **state)
{
    fabric_result_t *r = synth(8, 1, 1.0, NULL, 0.02);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;
    char line[1024];

    (void)state;
    for (int h = 0; h < 8; h++) {
        r->hosts[h].cpu_busy = 0.5;
        r->hosts[h].cpu_softirq = 0.05;
    }
    r->hosts[3].cpu_busy = 0.97;
    r->hosts[3].cpu_softirq = 0.41;
    r->hosts[5].cpu_busy = 0.89; /* just below both */
    r->hosts[5].cpu_softirq = 0.29;
    r->coll[0].busbw_gbps = 0.5; /* ring over the whole job at half the pair rate */
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.pass, 0);
    assert_int_equal(v.nfind, 1);
    assert_int_equal(v.find[0].kind, FABRIC_FIND_COLL);
    assert_non_null(strstr(v.find[0].text, "the CPU of host3 was saturated"));
    assert_int_equal(v.nsaturated, 1);
    assert_int_equal(v.nnote, 1);
    assert_int_equal(v.note[0].kind, FABRIC_FIND_CPU);
    assert_int_equal(v.note[0].host, 3);
    assert_string_equal(v.note[0].metric, "cpu_busy");
    assert_string_equal(v.note[0].text, "host3: CPU 97% busy, 41% softirq during the rounds: "
                                        "a likely cause of the low rates, not the links");
    fabric_verdict_line(r, &v, line, sizeof(line));
    assert_string_equal(line, "chorus-fabric: FAIL: slow allreduce: ring (whole job); likely "
                              "cause: saturated CPU on host3");
    fabric_verdict_free(&v);

    /* Softirq alone saturates; every host saturated is said once. */
    for (int h = 0; h < 8; h++) {
        r->hosts[h].cpu_busy = 0.6;
        r->hosts[h].cpu_softirq = 0.35;
    }
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(count_note(&v, FABRIC_FIND_CPU), 8);
    assert_string_equal(v.note[0].metric, "cpu_softirq");
    fabric_verdict_line(r, &v, line, sizeof(line));
    assert_string_equal(line, "chorus-fabric: FAIL: slow allreduce: ring (whole job); likely "
                              "cause: saturated CPU on all 8 hosts");
    fabric_verdict_free(&v);

    /* Nothing slow: the note says the host was saturated, and the run passes. */
    r->coll[0].busbw_gbps = 0.95;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.pass, 1);
    assert_int_equal(count_note(&v, FABRIC_FIND_CPU), 8);
    assert_non_null(strstr(v.note[0].text, "the rates held up"));
    fabric_verdict_line(r, &v, line, sizeof(line));
    assert_string_equal(line, "chorus-fabric: PASS");
    fabric_verdict_free(&v);
    synth_free(r);
}

/* A slow link whose end is saturated says that CPU is a likely cause of it. */
static void test_saturated_end_of_link(void **state)
{
    fabric_result_t *r = synth(6, 1, 1.0, NULL, 0.05);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;

    (void)state;
    r->inter[0].gbps[0] *= 0.3; /* host0-host1 */
    synth_retested(&r->inter[0]);
    r->hosts[1].cpu_busy = 0.95;
    r->hosts[1].cpu_softirq = 0.1;
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(count_kind(&v, FABRIC_FIND_LINK), 1);
    assert_non_null(strstr(v.find[0].text, "the CPU of host1 was saturated"));
    fabric_verdict_free(&v);
    synth_free(r);
}

/* Setup warnings are collected with the host name in front, and never fail the run. */
static void test_warnings(void **state)
{
    fabric_result_t *r = synth(3, 1, 1.0, NULL, 0);
    fabric_opts_t o = opts(0);
    fabric_verdict_t v;

    (void)state;
    r->hosts[1].setup_json = strdup("{\"warnings\": [\"NIC eth1 is down\", \"x\"]}");
    r->hosts[2].setup_json = strdup("{\"warnings\": []}");
    assert_int_equal(fabric_analyze(r, &o, &v), CHORUS_SUCCESS);
    assert_int_equal(v.pass, 1);
    assert_int_equal(v.nwarn, 2);
    assert_string_equal(v.warn[0], "host1: NIC eth1 is down");
    assert_string_equal(v.warn[1], "host1: x");
    fabric_verdict_free(&v);
    synth_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_with_noise_passes),
        cmocka_unit_test(test_half_host_named),
        cmocka_unit_test(test_one_slow_link),
        cmocka_unit_test(test_two_hosts_slow_pair_is_link),
        cmocka_unit_test(test_expect_given_all_slow),
        cmocka_unit_test(test_intra_slow),
        cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_warnings),
        cmocka_unit_test(test_not_retested_is_not_faulty),
        cmocka_unit_test(test_intra_not_retested),
        cmocka_unit_test(test_saturated_cpu_named),
        cmocka_unit_test(test_saturated_end_of_link),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
