/*
 * --json FILE: every measurement, each host's setup object and CPU figures, the findings,
 * the notes, the warnings and the verdict, in bench/schema/chorus-fabric.schema.json. A figure that was not
 * measured (< 0 in the result) is null, so that no reader takes it for a zero rate.
 */
#include "fabric.h"

#include "util/status.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

static json_t *num(double x)
{
    return x >= 0 ? json_real(x) : json_null();
}

static json_t *idx(int i)
{
    return i >= 0 ? json_integer(i) : json_null();
}

static json_t *str_or_null(const char *s)
{
    return s != NULL ? json_string(s) : json_null();
}

static json_t *pairs_json(const fabric_pair_t *p, int n)
{
    json_t *a = json_array();

    for (int i = 0; i < n; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "a", json_integer(p[i].a));
        json_object_set_new(o, "b", json_integer(p[i].b));
        json_object_set_new(o, "host", idx(p[i].host));
        json_object_set_new(o, "gbps_ab", num(p[i].gbps[0]));
        json_object_set_new(o, "gbps_ba", num(p[i].gbps[1]));
        json_object_set_new(o, "bidir_gbps", num(p[i].bidir_gbps));
        json_object_set_new(o, "lat_us", num(p[i].lat_us));
        json_object_set_new(o, "bytes", json_integer((json_int_t)p[i].bytes));
        json_object_set_new(o, "reps", json_integer(p[i].reps));
        json_object_set_new(o, "retested", json_boolean(p[i].retested));
        json_object_set_new(o, "first_gbps_ab", p[i].retested ? num(p[i].first_gbps[0])
                                                              : json_null());
        json_object_set_new(o, "first_gbps_ba", p[i].retested ? num(p[i].first_gbps[1])
                                                              : json_null());
        json_object_set_new(o, "retest_skipped", json_boolean(p[i].retest_skipped));
        json_array_append_new(a, o);
    }
    return a;
}

/* A host's CPU over the rounds, or null when none of its ranks could sample it. */
static json_t *cpu_json(const fabric_host_t *h)
{
    json_t *o;

    if (h->cpu_busy < 0) return json_null();
    o = json_object();
    json_object_set_new(o, "busy", json_real(h->cpu_busy));
    json_object_set_new(o, "softirq", num(h->cpu_softirq));
    json_object_set_new(o, "saturated", json_boolean(fabric_cpu_saturated(h->cpu_busy,
                                                                          h->cpu_softirq)));
    return o;
}

static json_t *hosts_json(const fabric_result_t *r)
{
    json_t *a = json_array();

    for (int h = 0; h < r->nhosts; h++) {
        json_t *o = json_object(), *setup = NULL;
        if (r->hosts[h].setup_json != NULL) setup = json_loads(r->hosts[h].setup_json, 0, NULL);
        json_object_set_new(o, "index", json_integer(h));
        json_object_set_new(o, "name", json_string(r->hosts[h].name));
        json_object_set_new(o, "nranks", json_integer(r->hosts[h].nranks));
        json_object_set_new(o, "leader", json_integer(r->hosts[h].leader));
        json_object_set_new(o, "setup", setup != NULL ? setup : json_null());
        json_object_set_new(o, "cpu", cpu_json(&r->hosts[h]));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *concurrent_json(const fabric_result_t *r)
{
    json_t *o, *m, *tx;

    if (r->conc.gbps == NULL || r->conc.host_tx_gbps == NULL) return json_null();
    o = json_object();
    m = json_array();
    tx = json_array();
    for (int s = 0; s < r->nhosts; s++) {
        json_t *row = json_array();
        for (int d = 0; d < r->nhosts; d++)
            json_array_append_new(row, s == d ? json_null() : num(r->conc.gbps[s * r->nhosts + d]));
        json_array_append_new(m, row);
        json_array_append_new(tx, num(r->conc.host_tx_gbps[s]));
    }
    json_object_set_new(o, "gbps", m);
    json_object_set_new(o, "host_tx_gbps", tx);
    return o;
}

static json_t *coll_json(const fabric_result_t *r)
{
    json_t *a = json_array();

    for (int i = 0; i < r->ncoll; i++) {
        const fabric_coll_t *c = &r->coll[i];
        json_t *o = json_object();
        json_object_set_new(o, "algo", json_string(c->algo == FABRIC_ALGO_RING ? "ring" : "tree"));
        json_object_set_new(o, "host", idx(c->host));
        json_object_set_new(o, "nranks", json_integer(c->nranks));
        json_object_set_new(o, "bytes", json_integer((json_int_t)c->bytes));
        json_object_set_new(o, "time_us", num(c->time_us));
        json_object_set_new(o, "busbw_gbps", num(c->busbw_gbps));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *findings_json(const fabric_result_t *r, const fabric_finding_t *find, int n)
{
    json_t *a = json_array();

    for (int i = 0; i < n; i++) {
        const fabric_finding_t *f = &find[i];
        json_t *o = json_object();
        json_object_set_new(o, "kind", json_string(fabric_find_kind_name(f->kind)));
        json_object_set_new(o, "host", idx(f->host));
        if (f->host >= 0 && f->host < r->nhosts)
            json_object_set_new(o, "host_name", json_string(r->hosts[f->host].name));
        json_object_set_new(o, "peer", idx(f->peer));
        if ((f->kind == FABRIC_FIND_LINK || (f->kind == FABRIC_FIND_NOT_RETESTED && !f->intra)) &&
            f->peer >= 0 && f->peer < r->nhosts)
            json_object_set_new(o, "peer_name", json_string(r->hosts[f->peer].name));
        json_object_set_new(o, "rank", idx(f->rank));
        json_object_set_new(o, "metric", json_string(f->metric));
        json_object_set_new(o, "measured", json_real(f->measured));
        json_object_set_new(o, "expected", json_real(f->expected));
        json_object_set_new(o, "ratio", json_real(f->ratio));
        json_object_set_new(o, "text", json_string(f->text));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *verdict_json(const fabric_result_t *r, const fabric_verdict_t *v)
{
    json_t *o = json_object();
    char line[4096];

    fabric_verdict_line(r, v, line, sizeof(line));
    json_object_set_new(o, "pass", json_boolean(v->pass));
    json_object_set_new(o, "exit_code",
                        json_integer(v->pass ? FABRIC_EXIT_PASS : FABRIC_EXIT_FAIL));
    json_object_set_new(o, "line", json_string(line));
    json_object_set_new(o, "threshold", json_real(v->threshold));
    json_object_set_new(o, "expect_gbps", json_real(v->expect_gbps));
    json_object_set_new(o, "expect_intra_gbps", json_real(v->expect_intra_gbps));
    json_object_set_new(o, "expect_given", json_boolean(v->expect_given));
    json_object_set_new(o, "cpu_busy_saturated", json_real(FABRIC_CPU_BUSY_SATURATED));
    json_object_set_new(o, "cpu_softirq_saturated", json_real(FABRIC_CPU_SOFTIRQ_SATURATED));
    return o;
}

static json_t *options_json(const fabric_opts_t *o)
{
    json_t *j = json_object();

    json_object_set_new(j, "expect_gbps", json_real(o->expect_gbps));
    json_object_set_new(j, "expect_intra_gbps", json_real(o->expect_intra_gbps));
    json_object_set_new(j, "threshold", json_real(o->threshold));
    json_object_set_new(j, "time_budget_s", json_real(o->time_budget_s));
    json_object_set_new(j, "json", str_or_null(o->json_path));
    json_object_set_new(j, "html", str_or_null(o->html_dir));
    json_object_set_new(j, "no_coll", json_boolean(o->no_coll));
    json_object_set_new(j, "verbose", json_boolean(o->verbose));
    return j;
}

chorus_status_t fabric_report_json(const fabric_result_t *r, const fabric_verdict_t *v,
                                   const fabric_opts_t *o, const char *path)
{
    json_t *root = json_object(), *run = json_object(), *host_of = json_array();
    chorus_status_t st = CHORUS_SUCCESS;

    if (root == NULL || run == NULL || host_of == NULL) {
        json_decref(host_of);
        json_decref(run);
        json_decref(root);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "chorus-fabric: --json %s: out of memory",
                             path);
    }
    json_object_set_new(run, "nranks", json_integer(r->nranks));
    json_object_set_new(run, "nhosts", json_integer(r->nhosts));
    json_object_set_new(run, "transport", json_string(r->transport));
    json_object_set_new(run, "budget_s", json_real(r->budget_s));
    json_object_set_new(run, "elapsed_s", json_real(r->elapsed_s));
    for (int i = 0; i < r->nranks && r->host_of != NULL; i++)
        json_array_append_new(host_of, json_integer(r->host_of[i]));
    json_object_set_new(root, "tool", json_string("chorus-fabric"));
    json_object_set_new(root, "schema_version", json_integer(1));
    json_object_set_new(root, "verdict", verdict_json(r, v));
    json_object_set_new(root, "options", options_json(o));
    json_object_set_new(root, "run", run);
    json_object_set_new(root, "hosts", hosts_json(r));
    json_object_set_new(root, "host_of", host_of);
    json_object_set_new(root, "inter", pairs_json(r->inter, r->ninter));
    json_object_set_new(root, "intra", pairs_json(r->intra, r->nintra));
    json_object_set_new(root, "concurrent", concurrent_json(r));
    json_object_set_new(root, "coll", coll_json(r));
    json_object_set_new(root, "findings", findings_json(r, v->find, v->nfind));
    json_object_set_new(root, "notes", findings_json(r, v->note, v->nnote));
    json_object_set_new(root, "warnings", json_array());
    for (int i = 0; i < v->nwarn; i++)
        json_array_append_new(json_object_get(root, "warnings"), json_string(v->warn[i]));
    errno = 0;
    if (json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(6)) != 0)
        st = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "chorus-fabric: cannot write --json %s",
                                 path);
    json_decref(root);
    return st;
}
