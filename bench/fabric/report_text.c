/*
 * The terminal summary: a short setup line per host, the tables, the findings and
 * warnings, and the verdict as the very last line, so that `tail -n 1` is the answer and a
 * script can grep it. Figures below the threshold carry a '*'.
 */
#include "fabric.h"

#include "util/status.h"

#include <jansson.h>
#include <stdarg.h>
#include <string.h>

const char *fabric_find_kind_name(fabric_find_kind_t kind)
{
    switch (kind) {
    case FABRIC_FIND_HOST: return "host";
    case FABRIC_FIND_LINK: return "link";
    case FABRIC_FIND_INTRA: return "intra";
    case FABRIC_FIND_OVERSUB: return "oversub";
    case FABRIC_FIND_COLL: return "coll";
    case FABRIC_FIND_CPU: return "cpu";
    case FABRIC_FIND_NOT_RETESTED: return "not_retested";
    }
    return "?";
}

static const char *hname(const fabric_result_t *r, int h)
{
    return h >= 0 && h < r->nhosts ? r->hosts[h].name : "?";
}

/* Appends to buf (always terminated); a line too long for buf is cut, never overrun. */
static void append(char *buf, size_t size, const char *fmt, ...) CHORUS_PRINTF(3, 4);
static void append(char *buf, size_t size, const char *fmt, ...)
{
    size_t len = strlen(buf);
    va_list ap;

    if (len + 1 >= size) return;
    va_start(ap, fmt);
    vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

/* One group of the FAIL line: the findings of one kind, most severe first (v->find is). */
static void append_group(const fabric_result_t *r, const fabric_verdict_t *v,
                         fabric_find_kind_t kind, const char *label, char *buf, size_t size)
{
    int n = 0;

    for (int i = 0; i < v->nfind; i++) {
        const fabric_finding_t *f = &v->find[i];
        if (f->kind != kind) continue;
        append(buf, size, "%s", n++ == 0 ? "; " : ", ");
        if (n == 1) append(buf, size, "%s: ", label);
        switch (kind) {
        case FABRIC_FIND_HOST: append(buf, size, "%s", hname(r, f->host)); break;
        case FABRIC_FIND_LINK:
            append(buf, size, "%s-%s", hname(r, f->host), hname(r, f->peer));
            break;
        case FABRIC_FIND_INTRA:
            append(buf, size, "%s ranks %d-%d", hname(r, f->host), f->rank, f->peer);
            break;
        case FABRIC_FIND_OVERSUB:
            append(buf, size, "concurrent at %.2f of isolated", f->ratio);
            break;
        case FABRIC_FIND_COLL:
            append(buf, size, "%.4s%s%s", f->metric, f->host >= 0 ? " on " : " (whole job)",
                   f->host >= 0 ? hname(r, f->host) : "");
            break;
        case FABRIC_FIND_CPU:
        case FABRIC_FIND_NOT_RETESTED: break; /* notes, never in v->find */
        }
    }
}

void fabric_verdict_line(const fabric_result_t *r, const fabric_verdict_t *v, char *buf,
                         size_t size)
{
    char who[256];

    if (size == 0) return;
    buf[0] = '\0';
    if (v->pass) {
        append(buf, size, "chorus-fabric: PASS");
        return;
    }
    append(buf, size, "chorus-fabric: FAIL");
    append_group(r, v, FABRIC_FIND_HOST, "slow hosts", buf, size);
    append_group(r, v, FABRIC_FIND_LINK, "slow links", buf, size);
    append_group(r, v, FABRIC_FIND_INTRA, "slow intra-host pairs", buf, size);
    append_group(r, v, FABRIC_FIND_OVERSUB, "oversubscribed", buf, size);
    append_group(r, v, FABRIC_FIND_COLL, "slow allreduce", buf, size);
    /* The line that says what is slow also says why it may be: a host without a free core. */
    if (fabric_cpu_saturated_hosts(r, v, who, sizeof(who)) > 0)
        append(buf, size, "; likely cause: saturated CPU on %s", who);
    /* The first group was introduced by "; " for uniformity; the line reads "FAIL: ...". */
    if (strncmp(buf + strlen("chorus-fabric: FAIL"), "; ", 2) == 0)
        buf[strlen("chorus-fabric: FAIL")] = ':';
}

/* A string member, or "?": a setup object from an older or broken rank must not crash. */
static const char *js(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : "?";
}

static void print_setup(const fabric_result_t *r, FILE *out)
{
    fprintf(out, "Setup:\n");
    for (int h = 0; h < r->nhosts; h++) {
        json_t *j = r->hosts[h].setup_json ? json_loads(r->hosts[h].setup_json, 0, NULL) : NULL;
        json_t *a, *x;
        size_t i;
        fprintf(out, "  %s (%d ranks, leader %d):", r->hosts[h].name, r->hosts[h].nranks,
                r->hosts[h].leader);
        if (j == NULL) {
            fprintf(out, " no setup\n");
            continue;
        }
        json_array_foreach(json_object_get(j, "nics"), i, x) {
            json_t *sp = json_object_get(x, "speed_mbps");
            fprintf(out, " %s %s", js(x, "name"), js(x, "operstate"));
            if (json_is_integer(sp)) fprintf(out, " %lld Mb/s", (long long)json_integer_value(sp));
            fprintf(out, ",");
        }
        a = json_object_get(j, "rdma");
        json_array_foreach(a, i, x) {
            fprintf(out, " %s/%lld %s", js(x, "device"),
                    (long long)json_integer_value(json_object_get(x, "port")), js(x, "state"));
            if (json_is_string(json_object_get(x, "gid_kind")))
                fprintf(out, " gid %lld %s",
                        (long long)json_integer_value(json_object_get(x, "gid_index")),
                        js(x, "gid_kind"));
            fprintf(out, ",");
        }
        fprintf(out, " %zu GPUs, GPUDirect %s\n", json_array_size(json_object_get(j, "gpus")),
                js(j, "gpudirect"));
        json_decref(j);
    }
}

/* The column width of host names in matrices. */
static int name_width(const fabric_result_t *r)
{
    int w = 7;
    for (int h = 0; h < r->nhosts; h++)
        w = (int)strlen(r->hosts[h].name) + 1 > w ? (int)strlen(r->hosts[h].name) + 1 : w;
    return w > 20 ? 20 : w;
}

static void print_cell(FILE *out, int w, double x, double expected, double thr, int prec)
{
    int flag = x >= 0 && expected > 0 && x < thr * expected;
    if (x < 0) fprintf(out, " %*s ", w, "-");
    else fprintf(out, " %*.*f%c", w, prec, x, flag ? '*' : ' ');
}

/* A host x host matrix; value(i, j) for the cell of row i and column j. */
static void print_matrix(const fabric_result_t *r, FILE *out, const char *title,
                         double (*value)(const fabric_result_t *, int, int), double expected,
                         double thr, int prec)
{
    int w = name_width(r);

    fprintf(out, "%s\n  %-*s", title, w, "");
    for (int j = 0; j < r->nhosts; j++)
        fprintf(out, " %*.*s ", w, w, r->hosts[j].name);
    fprintf(out, "\n");
    for (int i = 0; i < r->nhosts; i++) {
        fprintf(out, "  %-*.*s", w, w, r->hosts[i].name);
        for (int j = 0; j < r->nhosts; j++)
            print_cell(out, w, i == j ? -1 : value(r, i, j), expected, thr, prec);
        fprintf(out, "\n");
    }
}

static const fabric_pair_t *find_inter(const fabric_result_t *r, int i, int j)
{
    int a = i < j ? i : j, b = i < j ? j : i;
    for (int k = 0; k < r->ninter; k++) {
        if (r->inter[k].a == a && r->inter[k].b == b) return &r->inter[k];
    }
    return NULL;
}

static double v_oneway(const fabric_result_t *r, int i, int j)
{
    const fabric_pair_t *p = find_inter(r, i, j);
    return p == NULL ? -1 : p->gbps[i < j ? 0 : 1];
}

static double v_lat(const fabric_result_t *r, int i, int j)
{
    const fabric_pair_t *p = find_inter(r, i, j);
    return p == NULL ? -1 : p->lat_us;
}

static double v_bidir(const fabric_result_t *r, int i, int j)
{
    const fabric_pair_t *p = find_inter(r, i, j);
    return p == NULL ? -1 : p->bidir_gbps;
}

static double v_conc(const fabric_result_t *r, int i, int j)
{
    return r->conc.gbps[i * r->nhosts + j];
}

static void print_tables(const fabric_result_t *r, const fabric_verdict_t *v, FILE *out)
{
    double thr = v->threshold;

    if (r->ninter > 0) {
        print_matrix(r, out, "Inter-host bandwidth, one way (Gbit/s; sender rows, receiver "
                     "columns):", v_oneway, v->expect_gbps, thr, 3);
        print_matrix(r, out, "Inter-host latency, one way (us):", v_lat, -1, thr, 1);
        print_matrix(r, out,
                     "Inter-host bandwidth, both ways at once (Gbit/s, sum; against 2 x expected):",
                     v_bidir,
                     2 * v->expect_gbps, thr, 3);
    }
    if (r->conc.gbps != NULL) {
        int w = name_width(r);
        print_matrix(r, out, "Concurrent round (Gbit/s; every host sending and receiving):",
                     v_conc, -1, thr, 3);
        fprintf(out, "  %-*s", w, "tx median");
        for (int h = 0; h < r->nhosts; h++)
            print_cell(out, w, r->conc.host_tx_gbps[h], -1, thr, 3);
        fprintf(out, "\n");
    }
    if (r->nintra > 0) {
        fprintf(out, "Intra-host pairs (Gbit/s each way, both ways at once; us one way):\n");
        for (int i = 0; i < r->nintra; i++) {
            const fabric_pair_t *p = &r->intra[i];
            fprintf(out, "  %-*s ranks %3d-%-3d", name_width(r), hname(r, p->host), p->a, p->b);
            print_cell(out, 8, p->gbps[0], v->expect_intra_gbps, thr, 3);
            print_cell(out, 8, p->gbps[1], v->expect_intra_gbps, thr, 3);
            print_cell(out, 8, p->bidir_gbps, -1, thr, 3);
            print_cell(out, 8, p->lat_us, -1, thr, 1);
            fprintf(out, "\n");
        }
    }
    if (r->ncoll > 0) {
        fprintf(out, "Allreduce (bus bandwidth, Gbit/s):\n  %-5s %-*s %6s %10s %10s %9s\n",
                "algo", name_width(r), "scope", "ranks", "bytes", "time_us", "busbw");
        for (int i = 0; i < r->ncoll; i++) {
            const fabric_coll_t *c = &r->coll[i];
            fprintf(out, "  %-5s %-*s %6d %10llu %10.1f", c->algo == FABRIC_ALGO_RING ? "ring"
                    : "tree", name_width(r), c->host < 0 ? "job" : hname(r, c->host), c->nranks,
                    (unsigned long long)c->bytes, c->time_us);
            print_cell(out, 8, c->busbw_gbps, -1, thr, 3);
            fprintf(out, "\n");
        }
    }
}

/* Each host's CPU over the rounds; '*' marks a saturated one. */
static void print_cpu(const fabric_result_t *r, FILE *out)
{
    int any = 0;

    for (int h = 0; h < r->nhosts; h++)
        any |= r->hosts[h].cpu_busy >= 0;
    if (!any) return;
    fprintf(out, "Host CPU during the rounds (%%; '*' saturated: busy >= %.0f or softirq >= "
            "%.0f):\n  %-*s %6s %8s\n", 100 * FABRIC_CPU_BUSY_SATURATED,
            100 * FABRIC_CPU_SOFTIRQ_SATURATED, name_width(r), "host", "busy", "softirq");
    for (int h = 0; h < r->nhosts; h++) {
        const fabric_host_t *x = &r->hosts[h];
        fprintf(out, "  %-*s", name_width(r), x->name);
        if (x->cpu_busy < 0) {
            fprintf(out, " %6s %8s\n", "-", "-");
            continue;
        }
        fprintf(out, " %6.1f %8.1f%s\n", 100 * x->cpu_busy, 100 * x->cpu_softirq,
                fabric_cpu_saturated(x->cpu_busy, x->cpu_softirq) ? " *" : "");
    }
}

/* The pairs measured twice, with the first figures and the better ones kept. */
static void print_retested(const fabric_result_t *r, FILE *out)
{
    int n = 0;

    for (int c = 0; c < 2; c++) {
        const fabric_pair_t *p = c == 0 ? r->inter : r->intra;
        for (int i = 0; i < (c == 0 ? r->ninter : r->nintra); i++) {
            if (!p[i].retested) continue;
            if (n++ == 0)
                fprintf(out, "Retested (flagged by the first test; the better figures kept), "
                        "Gbit/s a->b, b->a:\n");
            if (c == 0)
                fprintf(out, "  %s-%s", hname(r, p[i].a), hname(r, p[i].b));
            else
                fprintf(out, "  %s ranks %d-%d", hname(r, p[i].host), p[i].a, p[i].b);
            fprintf(out, ": first %.3f, %.3f; kept %.3f, %.3f\n", p[i].first_gbps[0],
                    p[i].first_gbps[1], p[i].gbps[0], p[i].gbps[1]);
        }
    }
}

void fabric_report_text(const fabric_result_t *r, const fabric_verdict_t *v, FILE *out)
{
    char line[4096];

    fprintf(out, "chorus-fabric: %d hosts, %d ranks, transport %s, %.1f s (budget %.0f s)\n",
            r->nhosts, r->nranks, r->transport[0] ? r->transport : "?", r->elapsed_s,
            r->budget_s);
    print_setup(r, out);
    /* A class with nothing measured (one host; one rank per host) has no expected rate. */
    fprintf(out, "Expected: inter-host ");
    if (r->ninter > 0)
        fprintf(out, "%.3f Gbit/s (%s)", v->expect_gbps, v->expect_given ? "given" : "median");
    else
        fprintf(out, "n/a (one host)");
    fprintf(out, ", intra-host ");
    if (r->nintra > 0)
        fprintf(out, "%.3f Gbit/s", v->expect_intra_gbps);
    else
        fprintf(out, "n/a (one rank per host)");
    fprintf(out, "; '*' is below %.0f%%\n", v->threshold * 100);
    print_tables(r, v, out);
    print_cpu(r, out);
    print_retested(r, out);
    fprintf(out, "Findings (%d; causes first, the most severe first within a kind):\n",
            v->nfind);
    for (int i = 0; i < v->nfind; i++)
        fprintf(out, "  %-7s %s\n", fabric_find_kind_name(v->find[i].kind), v->find[i].text);
    if (v->nnote > 0) fprintf(out, "Notes (%d; they do not fail the run):\n", v->nnote);
    for (int i = 0; i < v->nnote; i++)
        fprintf(out, "  %-7s %s\n", fabric_find_kind_name(v->note[i].kind), v->note[i].text);
    if (v->nwarn > 0) fprintf(out, "Warnings (%d; they do not fail the run):\n", v->nwarn);
    for (int i = 0; i < v->nwarn; i++)
        fprintf(out, "  %s\n", v->warn[i]);
    fabric_verdict_line(r, v, line, sizeof(line));
    fprintf(out, "%s\n", line);
    fflush(out);
}
