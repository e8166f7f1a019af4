/*
 * lib/sim: the max-min flow network on cases solved by hand, fabric descriptions and their
 * errors, routes, and the replay of real schedules against closed forms (a ring
 * allreduce moves 2(n-1)/n of the vector over its slowest link); messages between two
 * ranks as one ordered stream, sends done early into socket buffers, the critical path and
 * the trace a recorded run writes; a receive that streams, a link per pair of ranks, the CPU
 * keys of a description and where ranks are placed; token buckets (tbf) on links.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sim/fabric.h"
#include "sim/flow.h"
#include "sim/sim.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NEAR(a, b, rel) assert_true(fabs((double)(a) - (double)(b)) <= (rel) * fabs((double)(b)))

/* f1 crosses links 0 (10 B/s) and 1 (2 B/s), f2 only link 0: link 1 holds f1 to 2, and
 * f2 gets the 8 left on link 0; once f1 ends, f2 has all 10. */
static void test_flow_maxmin(void **state)
{
    const double cap[] = {10, 2};
    const int32_t p1[] = {0, 1}, p2[] = {0};
    chorus_flownet_t *n;
    uint64_t tags[4];

    (void)state;
    assert_int_equal(chorus__flownet_create(cap, 2, &n), CHORUS_SUCCESS);
    assert_int_equal(chorus__flownet_add(n, 0, p1, 2, 2, 1), CHORUS_SUCCESS);
    assert_int_equal(chorus__flownet_add(n, 0, p2, 1, 16, 2), CHORUS_SUCCESS);
    NEAR(chorus__flownet_next(n), 1.0, 1e-12);
    assert_int_equal(chorus__flownet_advance(n, 1.0, tags, 4), 1);
    assert_int_equal(tags[0], 1);
    /* f2 moved 8 in the first second; 8 left at 10 B/s. */
    NEAR(chorus__flownet_next(n), 1.8, 1e-12);
    assert_int_equal(chorus__flownet_advance(n, 1.8, tags, 4), 1);
    assert_int_equal(tags[0], 2);
    assert_true(isinf(chorus__flownet_next(n)));
    NEAR(chorus__flownet_link_bytes(n)[0], 18, 1e-12);
    NEAR(chorus__flownet_link_bytes(n)[1], 2, 1e-12);
    chorus__flownet_free(n);
}

/* Flows on one path share it equally, whenever they start; a path through a link that is
 * down is refused. */
static void test_flow_bundle(void **state)
{
    const double cap[] = {4, 0};
    const int32_t p[] = {0}, down[] = {1};
    chorus_flownet_t *n;
    uint64_t tags[4];

    (void)state;
    assert_int_equal(chorus__flownet_create(cap, 2, &n), CHORUS_SUCCESS);
    assert_int_equal(chorus__flownet_add(n, 0, p, 1, 8, 1), CHORUS_SUCCESS);
    NEAR(chorus__flownet_next(n), 2.0, 1e-12);
    /* At t=1 (4 bytes left) a second flow of 2 bytes joins: each gets 2 B/s. */
    assert_int_equal(chorus__flownet_advance(n, 1.0, tags, 4), 0);
    assert_int_equal(chorus__flownet_add(n, 1.0, p, 1, 2, 2), CHORUS_SUCCESS);
    NEAR(chorus__flownet_next(n), 2.0, 1e-12);
    assert_int_equal(chorus__flownet_advance(n, 2.0, tags, 4), 1);
    assert_int_equal(tags[0], 2);
    /* Flow 1 had 4 - 2 = 2 left, now alone at 4 B/s. */
    NEAR(chorus__flownet_next(n), 2.5, 1e-12);
    assert_int_not_equal(chorus__flownet_add(n, 2.0, down, 1, 1, 3), CHORUS_SUCCESS);
    chorus__flownet_free(n);
}

/* A token bucket of 20 bytes on a 10 B/s link that peaks at 50 B/s (its refill threshold is
 * the whole bucket, being under CHORUS_FLOW_BURST_PACKET). It starts empty: 30 bytes take
 * 3 s at the rate. Idle, it refills and turns at t = 3 + 20/10 = 5. 60 bytes from t = 10
 * drain the 20 tokens at 50 - 10 B/s, empty at 10.5 after 25 bytes, and the other 35 take
 * 3.5 s at the rate: B + r T = 60 bytes in T = 4 s. */
static void test_flow_bucket(void **state)
{
    const double cap[] = {10};
    const int32_t p[] = {0};
    uint64_t tags[4];
    chorus_flownet_t *n;

    (void)state;
    assert_int_equal(chorus__flownet_create(cap, 1, &n), CHORUS_SUCCESS);
    assert_int_equal(chorus__flownet_set_bucket(n, 0, 20, 10), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__flownet_set_bucket(n, 0, 0, 50), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__flownet_set_bucket(n, 1, 20, 50), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__flownet_set_bucket(n, 0, 20, 50), CHORUS_SUCCESS);
    assert_int_equal(chorus__flownet_add(n, 0, p, 1, 30, 1), CHORUS_SUCCESS);
    NEAR(chorus__flownet_next(n), 3.0, 1e-12);
    assert_int_equal(chorus__flownet_advance(n, 3.0, tags, 4), 1);
    NEAR(chorus__flownet_next(n), 5.0, 1e-12);
    assert_int_equal(chorus__flownet_advance(n, 5.0, tags, 4), 0);
    assert_true(isinf(chorus__flownet_next(n)));
    assert_int_equal(chorus__flownet_advance(n, 10.0, tags, 4), 0);
    assert_int_equal(chorus__flownet_add(n, 10.0, p, 1, 60, 2), CHORUS_SUCCESS);
    NEAR(chorus__flownet_next(n), 10.5, 1e-12);
    assert_int_equal(chorus__flownet_advance(n, 10.5, tags, 4), 0);
    NEAR(chorus__flownet_next(n), 14.0, 1e-12);
    assert_int_equal(chorus__flownet_advance(n, 14.0, tags, 4), 1);
    assert_true(tags[0] == 2);
    NEAR(chorus__flownet_link_bytes(n)[0], 90, 1e-12);
    chorus__flownet_free(n);
}

static chorus_fabric_t *build(const char *json)
{
    chorus_fab_desc_t d;
    chorus_fabric_t *f = NULL;
    assert_int_equal(chorus__fab_desc_parse(json, "test", &d), CHORUS_SUCCESS);
    assert_int_equal(chorus__fabric_build(&d, &f), CHORUS_SUCCESS);
    chorus__fab_desc_free(&d);
    return f;
}

static void expect_bad(const char *json, const char *words)
{
    chorus_fab_desc_t d;
    chorus_fabric_t *f = NULL;
    chorus_status_t st = chorus__fab_desc_parse(json, "test", &d);
    if (st == CHORUS_SUCCESS) {
        st = chorus__fabric_build(&d, &f);
        chorus__fab_desc_free(&d);
        chorus__fabric_free(f);
    }
    assert_int_equal(st, CHORUS_ERR_INVALID_ARGUMENT);
    if (strstr(chorus_last_error(), words) == NULL) fail_msg("\"%s\" lacks \"%s\"", chorus_last_error(), words);
}

static void test_fabric_errors(void **state)
{
    (void)state;
    expect_bad("{\"hosts\": 2, \"nic\": {\"gbit\": 10}}", "nic.gbit: unknown key");
    expect_bad("{\"hosts\": 0}", "hosts must be 1 or more");
    expect_bad("{\"hosts\": 2, \"network\": {\"type\": \"torus\"}}", "network.type");
    expect_bad("{\"hosts\": 2, \"overrides\": [{\"link\": \"h9.nic0\", \"factor\": 0.5}]}",
               "no link is named \"h9.nic0\"");
    expect_bad("{\"hosts\": 2, \"network\": {\"type\": \"explicit\", \"switches\": [\"s0\"], "
               "\"links\": [{\"a\": \"h0.nic0\", \"b\": \"s1\"}]}}",
               "neither a switch nor hN.nicK");
    expect_bad("{\"hosts\": 2, \"network\": {\"type\": \"explicit\", \"switches\": [\"s0\"], "
               "\"links\": [{\"a\": \"h0.nic0\", \"b\": \"s0\"}]}}",
               "h1.nic0 is linked to nothing");
    expect_bad("{\"hosts\": 2,", "line");
}

/* Routes: one host through its ports; two hosts under one leaf; across leaves and rails
 * over a spine; a link down with no other way round. */
static void test_fabric_routes(void **state)
{
    chorus_fabric_t *f;
    const int32_t *links;
    int n;
    double lat;
    char name[96];

    (void)state;
    f = build("{\"hosts\": 4, \"ranks_per_host\": 2, \"intra\": {\"gbps\": 80, \"lat_us\": 1},"
              " \"nic\": {\"count\": 2, \"gbps\": 100, \"lat_us\": 2}, \"network\": {\"type\":"
              " \"fat_tree\", \"hosts_per_leaf\": 2, \"switch_lat_us\": 0.5}}");
    assert_int_equal(chorus__fabric_nranks(f), 8);
    assert_int_equal(chorus__fabric_route(f, 0, 1, &links, &n, &lat), CHORUS_SUCCESS);
    assert_int_equal(n, 2);
    NEAR(lat, 2e-6, 1e-9);
    chorus__fabric_link_name(f, links[0], name, sizeof name);
    assert_string_equal(name, "h0.r0 (out)");
    /* Rank 0 (host 0, NIC 0) to rank 2 (host 1, NIC 0): the same rail-0 leaf. */
    assert_int_equal(chorus__fabric_route(f, 0, 2, &links, &n, &lat), CHORUS_SUCCESS);
    assert_int_equal(n, 2);
    NEAR(lat, 4e-6, 1e-9);
    chorus__fabric_link_name(f, links[0], name, sizeof name);
    assert_string_equal(name, "h0.nic0 (out)");
    /* Rank 0 to rank 4 (host 2): another leaf, through a spine; rank 1 (NIC 1) to rank 4
     * (NIC 0): another rail, also through a spine. */
    assert_int_equal(chorus__fabric_route(f, 0, 4, &links, &n, &lat), CHORUS_SUCCESS);
    assert_int_equal(n, 4);
    NEAR(lat, 5e-6, 1e-9);
    assert_int_equal(chorus__fabric_route(f, 1, 2, &links, &n, &lat), CHORUS_SUCCESS);
    assert_int_equal(n, 4);
    chorus__fabric_free(f);
    f = build("{\"hosts\": 2, \"overrides\": [{\"link\": \"h1.nic0\", \"down\": true}]}");
    assert_int_equal(chorus__fabric_route(f, 0, 1, &links, &n, &lat), CHORUS_ERR_REMOTE);
    chorus__fabric_free(f);
}

/* A ring allreduce of S bytes on n hosts of one rank, one switch, no latency or software
 * cost: each of its 2(n-1) steps moves S/n over every host's link at once, so it takes
 * 2(n-1)/n * S / B, and busbw is the link's B. With one host's link at half rate the same
 * bytes cross it at B/2: at least twice as long, that link the busiest. (Not exactly
 * twice: that host receives at half rate too, and what it forwards waits for what it
 * received: 1.23x the bound here.) */
static void test_sim_ring_closed_form(void **state)
{
    const char *json = "{\"hosts\": 8, \"nic\": {\"gbps\": 8, \"lat_us\": 0}, \"network\": "
                       "{\"switch_lat_us\": 0}, \"cpu\": {\"msg_us\": 0, \"reduce_GBps\": 1e9, "
                       "\"copy_GBps\": 1e9}%s}";
    const double S = 8 << 20, B = 1e9; /* 8 Gbit/s is 1e9 bytes per second */
    char text[512];
    chorus_fabric_t *f;
    chorus_sim_args_t a;
    chorus_sim_result_t r;

    (void)state;
    snprintf(text, sizeof text, json, "");
    f = build(text);
    memset(&a, 0, sizeof a);
    a.coll = CHORUS_COLL_ALLREDUCE;
    a.algo = CHORUS_ALGO_RING;
    a.bytes = (uint64_t)S;
    a.dtype = CHORUS_FLOAT32;
    a.nranks = 8;
    a.top_links = 2;
    assert_int_equal(chorus__sim_run(f, &a, &r), CHORUS_SUCCESS);
    NEAR(r.time_s, 2.0 * 7 / 8 * S / B, 1e-6);
    NEAR(r.busbw_GBps, 1.0, 1e-6);
    assert_int_equal(r.classes, 1);
    assert_int_equal(r.nlinks_used, 16);
    NEAR(r.links[0].util, 1.0, 1e-6);
    free(r.links);
    chorus__fabric_free(f);
    snprintf(text, sizeof text, json, ", \"overrides\": [{\"link\": \"h3.nic0\", \"factor\": 0.5}]");
    f = build(text);
    assert_int_equal(chorus__sim_run(f, &a, &r), CHORUS_SUCCESS);
    assert_true(r.time_s >= 2 * 2.0 * 7 / 8 * S / B * (1 - 1e-9));
    assert_true(r.time_s <= 2.5 * 2.0 * 7 / 8 * S / B);
    assert_true(strncmp(r.links[0].name, "h3.nic0", 7) == 0);
    free(r.links);
    /* Every algorithm of allreduce runs to the end, and none beats the ring's bound. */
    for (int k = 1; k < CHORUS_NUM_ALGOS; k++) {
        if (k == CHORUS_ALGO_ARENA || !chorus__algo_supports((chorus_algo_t)k, a.coll)) continue;
        a.algo = (chorus_algo_t)k;
        assert_int_equal(chorus__sim_run(f, &a, &r), CHORUS_SUCCESS);
        assert_true(r.time_s >= 2 * 2.0 * 7 / 8 * S / B * (1 - 1e-9));
        free(r.links);
    }
    a.algo = CHORUS_ALGO_PAIRWISE;
    assert_int_equal(chorus__sim_run(f, &a, &r), CHORUS_ERR_UNSUPPORTED);
    a.algo = CHORUS_ALGO_RING;
    a.nranks = 9;
    assert_int_equal(chorus__sim_run(f, &a, &r), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__fabric_free(f);
}


/* Two hosts of one rank, 1e9 B/s, no latency or software cost; a ring allreduce of 8 MiB
 * in 1 MiB chunks: rank 0 sends its 4 chunks of the first step at once. */
static const char *two_hosts = "{\"hosts\": 2, \"nic\": {\"gbps\": 8, \"lat_us\": 0, "
                               "\"send_buffer_bytes\": %s}, \"network\": {\"switch_lat_us\": 0}, "
                               "\"cpu\": {\"msg_us\": 0, \"reduce_GBps\": 1e9, \"copy_GBps\": 1e9}}";

/* The end times (us) of rank `pid`'s slices of category cat ("send", "recv") from the
 * trace at path, in order; returns how many. */
static int slice_ends(const char *path, int pid, const char *cat, double *ends, int max)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err), *e;
    json_t *events = json_object_get(root, "traceEvents");
    size_t k;
    int n = 0;

    assert_non_null(root);
    assert_true(json_is_array(events));
    json_array_foreach(events, k, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *c = json_string_value(json_object_get(e, "cat"));
        if (ph == NULL || strcmp(ph, "e") != 0 || c == NULL || strcmp(c, cat) != 0) continue;
        if (json_integer_value(json_object_get(e, "pid")) != pid || n == max) continue;
        ends[n++] = json_number_value(json_object_get(e, "ts"));
    }
    json_decref(root);
    for (int i = 1; i < n; i++) /* insertion sort: a handful */
        for (int j = i; j > 0 && ends[j] < ends[j - 1]; j--) {
            double t = ends[j];
            ends[j] = ends[j - 1];
            ends[j - 1] = t;
        }
    return n;
}

/* Runs it with its trace in trace (a mkstemp template, filled in), and checks the call's
 * time: reduce-scatter then allgather, 4 + 4 chunks each way, back to back. */
static void run_two_hosts(const char *sendbuf, char *trace, chorus_sim_result_t *r)
{
    char text[512];
    chorus_fabric_t *f;
    chorus_sim_args_t a;
    int fd = mkstemp(trace);

    assert_true(fd >= 0);
    close(fd);

    snprintf(text, sizeof text, two_hosts, sendbuf);
    f = build(text);
    memset(&a, 0, sizeof a);
    a.coll = CHORUS_COLL_ALLREDUCE;
    a.algo = CHORUS_ALGO_RING;
    a.bytes = 8 << 20;
    a.dtype = CHORUS_FLOAT32;
    a.chunk_bytes = 1 << 20;
    a.nranks = 2;
    a.record = 1;
    a.trace = trace;
    assert_int_equal(chorus__sim_run(f, &a, r), CHORUS_SUCCESS);
    chorus__fabric_free(f);
    NEAR(r->time_s, 8 * (double)(1 << 20) / 1e9, 1e-6);
}

/* Messages from one rank to another are one stream, in schedule order: the four chunks
 * arrive one after the other, at 1, 2, 3 and 4 chunk times, not all together at the end
 * (as four flows sharing the link max-min fairly would). */
static void test_sim_stream_order(void **state)
{
    char path[] = "/tmp/chorus-test-sim-XXXXXX";
    const double chunk_us = (double)(1 << 20) / 1e9 * 1e6;
    double ends[64];
    chorus_sim_result_t r;
    int n;

    (void)state;
    run_two_hosts("0", path, &r);
    n = slice_ends(path, 1, "recv", ends, 64);
    assert_int_equal(n, 8);
    for (int k = 0; k < 8; k++) NEAR(ends[k], (k + 1) * chunk_us, 1e-6);
    /* Without socket buffers a send is done when its flow ends: with its receive. */
    n = slice_ends(path, 0, "send", ends, 64);
    assert_int_equal(n, 8);
    for (int k = 0; k < 8; k++) NEAR(ends[k], (k + 1) * chunk_us, 1e-6);
    free(r.links);
    unlink(path);
}

/* With socket buffers of 64 MiB the sends of the first step are done at once (time 0),
 * while their data still takes 1-4 chunk times to arrive; the call takes as long. */
static void test_sim_eager_sends(void **state)
{
    char path[] = "/tmp/chorus-test-sim-XXXXXX";
    const double chunk_us = (double)(1 << 20) / 1e9 * 1e6;
    double ends[64];
    chorus_sim_result_t r;
    int n;

    (void)state;
    run_two_hosts("67108864", path, &r);
    n = slice_ends(path, 0, "send", ends, 64);
    assert_int_equal(n, 8);
    for (int k = 0; k < 4; k++) assert_true(ends[k] == 0);
    n = slice_ends(path, 1, "recv", ends, 64);
    for (int k = 0; k < 4; k++) NEAR(ends[k], (k + 1) * chunk_us, 1e-6);
    free(r.links);
    unlink(path);
}

/* The critical path's parts add up to the call's time, for every algorithm, on hosts of
 * two ranks with software costs, a finite reduce rate and latencies. */
static void test_sim_critical_path(void **state)
{
    const char *json = "{\"hosts\": 4, \"ranks_per_host\": 2, \"intra\": {\"gbps\": 80, "
                       "\"lat_us\": 1}, \"nic\": {\"gbps\": 8, \"lat_us\": 3, "
                       "\"send_buffer_bytes\": %s}, \"cpu\": {\"msg_us\": 4, \"reduce_GBps\": 2, "
                       "\"copy_GBps\": 5, \"cores_per_host\": 1}}";
    const char *bufs[] = {"0", "1048576"};
    char text[512];

    (void)state;
    for (int b = 0; b < 2; b++) {
        chorus_fabric_t *f;
        snprintf(text, sizeof text, json, bufs[b]);
        f = build(text);
        for (int k = 1; k < CHORUS_NUM_ALGOS; k++) {
            chorus_sim_args_t a;
            chorus_sim_result_t r;
            double sum;
            if (k == CHORUS_ALGO_ARENA || !chorus__algo_supports((chorus_algo_t)k, CHORUS_COLL_ALLREDUCE))
                continue;
            memset(&a, 0, sizeof a);
            a.coll = CHORUS_COLL_ALLREDUCE;
            a.algo = (chorus_algo_t)k;
            a.bytes = 3 << 20;
            a.dtype = CHORUS_FLOAT32;
            a.nranks = 8;
            a.record = 1;
            assert_int_equal(chorus__sim_run(f, &a, &r), CHORUS_SUCCESS);
            assert_true(r.have_path);
            sum = r.path.network_s + r.path.latency_s + r.path.message_s + r.path.reduce_s +
                  r.path.copy_s;
            if (fabs(sum - r.time_s) > 1e-9 * r.time_s)
                fail_msg("%s: critical path %.9g s, call %.9g s", chorus__algo_name(a.algo), sum,
                         r.time_s);
            assert_true(r.path.steps > 0 && r.path.ranks >= 1 && r.path.ranks <= 8);
            free(r.links);
        }
        chorus__fabric_free(f);
    }
}

/* The schedules of 512 ranks built on 1, 2 or 3 threads give the same run, to the bit,
 * for an algorithm whose ranks share one schedule (ring) and one with many (tree). */
static void test_sim_build_threads(void **state)
{
    chorus_fabric_t *f = build("{\"hosts\": 64, \"ranks_per_host\": 8, \"intra\": {\"gbps\": "
                               "800, \"lat_us\": 1}, \"nic\": {\"gbps\": 100, \"lat_us\": 3}}");
    const chorus_algo_t algos[] = {CHORUS_ALGO_RING, CHORUS_ALGO_TREE};

    (void)state;
    for (int k = 0; k < 2; k++) {
        chorus_sim_result_t one;
        for (int t = 1; t <= 3; t++) {
            chorus_sim_args_t a;
            chorus_sim_result_t r;
            memset(&a, 0, sizeof a);
            a.coll = CHORUS_COLL_ALLREDUCE;
            a.algo = algos[k];
            a.bytes = 4 << 20;
            a.dtype = CHORUS_FLOAT32;
            a.nranks = 512;
            a.build_threads = t;
            assert_int_equal(chorus__sim_run(f, &a, &r), CHORUS_SUCCESS);
            free(r.links);
            if (t == 1) {
                one = r;
                assert_true(r.time_s > 0 && r.steps > 0);
                continue;
            }
            if (r.time_s != one.time_s || r.steps != one.steps || r.events != one.events ||
                r.messages != one.messages)
                fail_msg("%s on %d threads: %.17g s, %llu events; on one: %.17g s, %llu events",
                         chorus__algo_name(a.algo), t, r.time_s, (unsigned long long)r.events,
                         one.time_s, (unsigned long long)one.events);
        }
    }
    chorus__fabric_free(f);
}

/* A description from a chorus-fabric report: the NIC rate is the median of the hosts' rates
 * in the concurrent round, a host under 90% of it gets an override with its ratio, the
 * latency goes to two NIC links after the software cost, tcp brings socket buffers; a report
 * of another tool, or of hosts with unequal rank counts, is refused by name. */
static void test_fabric_from_report(void **state)
{
    static const char *report =
        "{\"tool\": \"chorus-fabric\", \"schema_version\": 1, \"run\": {\"nranks\": 8, \"nhosts\": "
        "4, \"transport\": \"%s\"}, \"host_of\": %s, \"inter\": [{\"a\": 0, \"b\": 1, \"gbps_ab\": "
        "0.09, \"gbps_ba\": 0.09, \"lat_us\": 40}, {\"a\": 2, \"b\": 3, \"gbps_ab\": 0.04, "
        "\"gbps_ba\": 0.09, \"lat_us\": 60}], \"intra\": [{\"a\": 0, \"b\": 1, \"gbps_ab\": 30, "
        "\"gbps_ba\": 34, \"lat_us\": 10}], \"concurrent\": {\"host_tx_gbps\": [0.09, 0.092, 0.045, "
        "0.088]}}";
    char path[] = "/tmp/chorus-test-report-XXXXXX";
    chorus_fab_desc_t d;
    FILE *f;
    int fd = mkstemp(path);

    (void)state;
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    fprintf(f, report, "tcp", "[0, 0, 1, 1, 2, 2, 3, 3]");
    fclose(f);
    assert_int_equal(chorus__fab_desc_from_fabric(path, &d), CHORUS_SUCCESS);
    assert_int_equal(d.hosts, 4);
    assert_int_equal(d.ranks_per_host, 2);
    NEAR(d.nic_gbps, 0.089, 1e-9); /* median of 0.045, 0.088, 0.09, 0.092 */
    NEAR(d.nic_lat_us, (50 - 2 * d.msg_us) / 2, 1e-9);
    NEAR(d.intra_gbps, 32, 1e-9);
    NEAR(d.nic_sendbuf, 4 << 20, 1e-9);
    assert_int_equal(d.noverrides, 1);
    assert_string_equal(d.overrides[0].link, "h2.nic0");
    NEAR(d.overrides[0].factor, 0.045 / 0.089, 1e-9);
    chorus__fab_desc_free(&d);

    f = fopen(path, "w");
    fprintf(f, report, "tcp", "[0, 0, 1, 1, 2, 2, 3]");
    fclose(f);
    assert_int_equal(chorus__fab_desc_from_fabric(path, &d), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "different numbers of ranks"));
    f = fopen(path, "w");
    fputs("{\"tool\": \"chorus-bench\", \"host_of\": [0], \"inter\": []}", f);
    fclose(f);
    assert_int_equal(chorus__fab_desc_from_fabric(path, &d), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), path));
    unlink(path);
}

/* One message of 1e6 bytes between two ranks of a host with a link of their own (1e9 B/s,
 * 2 us both ways), 3 us of software per message, 0.5 ns/B to send and recv_ns to receive.
 * Send CPU 0..503 us; flow 503..1503, there at 1505. Streaming, the receive copies from the
 * first bytes (3 + 2 = 5 us) and ends at the later of its copy and the last bytes plus 3 us;
 * otherwise it begins at 1505. */
static double one_message(const char *recv_ns, const char *streams)
{
    const char *json = "{\"ranks_per_host\": 2, \"intra\": {\"gbps\": 8, \"lat_us\": 1, "
                       "\"pairs\": true, \"send_buffer_bytes\": 1e12, \"send_ns\": 0.5, "
                       "\"recv_ns\": %s}, \"cpu\": {\"msg_us\": 3, \"reduce_GBps\": 1, "
                       "\"copy_GBps\": 1, \"recv_streams\": %s}}";
    char text[512];
    chorus_fabric_t *f;
    chorus_sim_args_t a;
    chorus_sim_result_t r;

    snprintf(text, sizeof text, json, recv_ns, streams);
    f = build(text);
    memset(&a, 0, sizeof a);
    a.coll = CHORUS_COLL_BROADCAST;
    a.algo = CHORUS_ALGO_RING;
    a.bytes = 1000000;
    a.chunk_bytes = 1000000;
    a.dtype = CHORUS_FLOAT32;
    a.nranks = 2;
    a.top_links = 1;
    assert_int_equal(chorus__sim_run(f, &a, &r), CHORUS_SUCCESS);
    assert_int_equal(r.messages, 1);
    assert_string_equal(r.links[0].name, "h0.r0-r1 (forth)");
    free(r.links);
    chorus__fabric_free(f);
    return r.time_s * 1e6;
}

static void test_sim_streaming_receive(void **state)
{
    (void)state;
    NEAR(one_message("2", "true"), 5 + 3 + 2000, 1e-9);     /* its copy ends last */
    NEAR(one_message("0.2", "true"), 1505 + 3, 1e-9);       /* the last bytes end it */
    NEAR(one_message("2", "false"), 1505 + 3 + 2000, 1e-9); /* after the data */
}

/* The new keys survive a write and a parse; a rank placed twice is refused. */
/* A description parsed (into d), written and parsed again (into e). */
static void round_trip(const char *json, chorus_fab_desc_t *d, chorus_fab_desc_t *e)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem;

    assert_int_equal(chorus__fab_desc_parse(json, "test", d), CHORUS_SUCCESS);
    mem = open_memstream(&buf, &len);
    assert_int_equal(chorus__fab_desc_write(d, mem), 0);
    fclose(mem);
    assert_int_equal(chorus__fab_desc_parse(buf, "written", e), CHORUS_SUCCESS);
    free(buf);
}

static void test_fabric_cpu_keys_and_placement(void **state)
{
    const char *json = "{\"hosts\": 2, \"ranks_per_host\": 2, \"intra\": {\"pairs\": true, "
                       "\"send_buffer_bytes\": 65536, \"send_ns\": 0.1, \"recv_ns\": 0.2}, "
                       "\"nic\": {\"send_ns\": 0.3, \"recv_ns\": 0.4}, \"cpu\": {\"step_us\": 0.5, "
                       "\"wait_us\": 0.6, \"llc_mb\": 32, \"dram_factor\": 2, \"recv_streams\": true, "
                       "\"cores_per_host\": 1}}";
    chorus_fab_desc_t d, e;
    chorus_fabric_t *f;
    chorus_sim_args_t a;
    chorus_sim_result_t r1, r2;
    const int swap[] = {2, 3, 0, 1}, twice[] = {0, 1, 1, 2};

    (void)state;
    round_trip(json, &d, &e);
    assert_int_equal(e.intra_pairs, 1);
    assert_int_equal(e.recv_streams, 1);
    assert_true(e.intra_sendbuf == 65536 && e.intra_send_ns == 0.1 && e.intra_recv_ns == 0.2);
    assert_true(e.net_send_ns == 0.3 && e.net_recv_ns == 0.4 && e.step_us == 0.5);
    assert_true(e.wait_us == 0.6 && e.llc_mb == 32 && e.dram_factor == 2);
    expect_bad("{\"intra\": {\"pairs\": 1}}", "intra.pairs");
    expect_bad("{\"nic\": {\"gbps\": 10, \"burst_bytes\": 1000, \"peak_gbps\": 10}}",
               "nic.peak_gbps");
    expect_bad("{\"cpu\": {\"wait_us\": -1}}", "wait_us");
    /* Hosts swapped by placement: the same time, the ranks being alike. */
    assert_int_equal(chorus__fabric_build(&e, &f), CHORUS_SUCCESS);
    memset(&a, 0, sizeof a);
    a.coll = CHORUS_COLL_ALLREDUCE;
    a.algo = CHORUS_ALGO_RING;
    a.bytes = 1 << 20;
    a.dtype = CHORUS_FLOAT32;
    a.nranks = 4;
    assert_int_equal(chorus__sim_run(f, &a, &r1), CHORUS_SUCCESS);
    a.place = swap;
    assert_int_equal(chorus__sim_run(f, &a, &r2), CHORUS_SUCCESS);
    NEAR(r2.time_s, r1.time_s, 1e-12);
    a.place = twice;
    assert_int_equal(chorus__sim_run(f, &a, &r2), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "rank 2"));
    free(r1.links);
    chorus__fabric_free(f);
    chorus__fab_desc_free(&d);
    chorus__fab_desc_free(&e);
}

/* nic.burst_bytes and nic.peak_gbps: written and read back, on both directions of every
 * NIC link and on no other. A 2-rank ring keeps its links busy from start to end, so buckets
 * that start empty never fill: the same time as without (to a part in 1e3: the gaps of the
 * reduce steps refill a little). A tree's leaves idle while the root works, so its calls
 * gain. */
static void test_fabric_bucket(void **state)
{
    const char *plain = "{\"hosts\": 4, \"nic\": {\"gbps\": 0.1, \"lat_us\": 25}}";
    const char *tbf = "{\"hosts\": 4, \"nic\": {\"gbps\": 0.1, \"lat_us\": 25, "
                      "\"burst_bytes\": 81920, \"peak_gbps\": 10}}";
    chorus_fab_desc_t d, e;
    chorus_fabric_t *f, *g;
    chorus_sim_args_t a;
    chorus_sim_result_t r1, r2;
    int nb = 0;

    (void)state;
    round_trip(tbf, &d, &e);
    assert_true(e.nic_burst == 81920 && e.nic_peak_gbps == 10);
    assert_int_equal(chorus__fabric_build(&e, &g), CHORUS_SUCCESS);
    for (int l = 0; l < chorus__fabric_nlinks(g); l++) {
        const chorus_fab_link_t *k = chorus__fabric_link(g, l);
        if (k->burst > 0) {
            nb++;
            assert_true(k->burst == 81920 && k->peak == 10e9 / 8);
        }
    }
    assert_int_equal(nb, 8); /* 4 NICs, both ways */
    f = build(plain);
    memset(&a, 0, sizeof a);
    a.coll = CHORUS_COLL_ALLREDUCE;
    a.algo = CHORUS_ALGO_RING;
    a.bytes = 4 << 20;
    a.dtype = CHORUS_FLOAT32;
    a.nranks = 2;
    assert_int_equal(chorus__sim_run(f, &a, &r1), CHORUS_SUCCESS);
    assert_int_equal(chorus__sim_run(g, &a, &r2), CHORUS_SUCCESS);
    NEAR(r2.time_s, r1.time_s, 1e-3);
    free(r1.links);
    free(r2.links);
    a.algo = CHORUS_ALGO_TREE;
    a.bytes = 64 << 10;
    a.nranks = 4;
    assert_int_equal(chorus__sim_run(f, &a, &r1), CHORUS_SUCCESS);
    assert_int_equal(chorus__sim_run(g, &a, &r2), CHORUS_SUCCESS);
    assert_true(r2.time_s < 0.95 * r1.time_s);
    free(r1.links);
    free(r2.links);
    chorus__fabric_free(f);
    chorus__fabric_free(g);
    chorus__fab_desc_free(&d);
    chorus__fab_desc_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flow_maxmin),
        cmocka_unit_test(test_flow_bundle),
        cmocka_unit_test(test_flow_bucket),
        cmocka_unit_test(test_fabric_errors),
        cmocka_unit_test(test_fabric_routes),
        cmocka_unit_test(test_fabric_from_report),
        cmocka_unit_test(test_sim_ring_closed_form),
        cmocka_unit_test(test_sim_stream_order),
        cmocka_unit_test(test_sim_eager_sends),
        cmocka_unit_test(test_sim_critical_path),
        cmocka_unit_test(test_sim_build_threads),
        cmocka_unit_test(test_sim_streaming_receive),
        cmocka_unit_test(test_fabric_cpu_keys_and_placement),
        cmocka_unit_test(test_fabric_bucket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
