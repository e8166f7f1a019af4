/*
 * --html DIR: DIR/index.html with the verdict, the tables, the findings and the warnings,
 * and DIR/pairs.png, a heat map of the one-way pair bandwidth (sender rows, receiver
 * columns; with one host, its rank pairs) drawn by gnuplot. pairs.dat and pairs.gp stay next
 * to it (with pairs.log, gnuplot's messages) and name each other relatively, so
 * `cd DIR && gnuplot pairs.gp` redraws it.
 * gnuplot runs without a shell (as chorus-bench's plots do); when it is missing the page
 * says so and the report still stands.
 */
#include "fabric.h"

#include "util/status.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The heat map's matrix: n x n (NAN where nothing was measured), and its tick labels. */
typedef struct {
    int n;
    double *v;
    char (*label)[FABRIC_NAME_MAX];
    const char *title;
} heat_t;

static void put_html(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A gnuplot single-quoted string: a quote inside is doubled. */
static void put_gp(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s != '\0'; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* Inter-host one-way matrix, or with one host the rank pairs of that host. */
static int heat_fill(const fabric_result_t *r, heat_t *m)
{
    int one = r->nhosts < 2, n = one ? r->nranks : r->nhosts;
    const fabric_pair_t *p = one ? r->intra : r->inter;
    int np = one ? r->nintra : r->ninter;

    m->n = n;
    m->v = malloc((size_t)(n * n + 1) * sizeof(double));
    m->label = calloc((size_t)n + 1, sizeof(*m->label));
    if (m->v == NULL || m->label == NULL) return -1;
    for (int i = 0; i < n * n; i++)
        m->v[i] = NAN;
    for (int i = 0; i < n; i++) {
        if (one) snprintf(m->label[i], FABRIC_NAME_MAX, "rank %d", i);
        else snprintf(m->label[i], FABRIC_NAME_MAX, "%s", r->hosts[i].name);
    }
    for (int k = 0; k < np; k++) {
        if (p[k].a < 0 || p[k].a >= n || p[k].b < 0 || p[k].b >= n) continue;
        if (p[k].gbps[0] >= 0) m->v[p[k].a * n + p[k].b] = p[k].gbps[0];
        if (p[k].gbps[1] >= 0) m->v[p[k].b * n + p[k].a] = p[k].gbps[1];
    }
    m->title = one ? "chorus-fabric: rank pairs inside the host, one way (Gbit/s)"
                   : "chorus-fabric: host pairs, one way (Gbit/s)";
    return 0;
}

static int write_dat(const char *dir, const heat_t *m)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/pairs.dat", dir);
    f = fopen(path, "w");
    if (f == NULL) return -1;
    fprintf(f, "# %s; sender rows, receiver columns; NaN: not measured\n", m->title);
    for (int i = 0; i < m->n; i++) {
        fprintf(f, "# %d %s\n", i, m->label[i]);
    }
    for (int i = 0; i < m->n; i++) {
        for (int j = 0; j < m->n; j++) {
            double x = m->v[i * m->n + j];
            if (isnan(x)) fprintf(f, "%sNaN", j ? " " : "");
            else fprintf(f, "%s%.6g", j ? " " : "", x);
        }
        fprintf(f, "\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

static void write_tics(FILE *f, const char *axis, const heat_t *m)
{
    fprintf(f, "set %stics (", axis);
    for (int i = 0; i < m->n; i++) {
        fprintf(f, "%s", i ? ", " : "");
        put_gp(f, m->label[i]);
        fprintf(f, " %d", i);
    }
    fprintf(f, ")%s\n", axis[0] == 'x' ? " rotate by 45 right" : "");
}

static int write_gp(const char *dir, const heat_t *m)
{
    char path[4096];
    int px = 240 + 70 * m->n;
    double hi = 0;
    FILE *f;

    for (int i = 0; i < m->n * m->n; i++)
        hi = !isnan(m->v[i]) && m->v[i] > hi ? m->v[i] : hi;
    snprintf(path, sizeof(path), "%s/pairs.gp", dir);
    f = fopen(path, "w");
    if (f == NULL) return -1;
    px = px < 640 ? 640 : px > 2400 ? 2400 : px;
    fprintf(f,
            "# Made by chorus-fabric --html; run `gnuplot pairs.gp` in this folder to redraw.\n"
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "    set terminal pngcairo size %d,%d font ',10'\n"
            "} else {\n"
            "    set terminal png size %d,%d\n"
            "}\n"
            "set output 'pairs.png'\nset title ",
            px, px - 80, px, px - 80);
    put_gp(f, m->title);
    /* Low rates red, the best green: the eye goes to what is slow. */
    fprintf(f, "\nset xlabel 'receiver'\nset ylabel 'sender'\nset cblabel 'Gbit/s'\n"
            "set palette defined (0 '#c0392b', 0.5 '#f1c40f', 1 '#27ae60')\n"
            "set cbrange [0:%g]\nset xrange [-0.5:%g]\nset yrange [%g:-0.5]\n"
            "set tics nomirror\nset size ratio -1\n",
            hi > 0 ? hi : 1, m->n - 0.5, m->n - 0.5);
    write_tics(f, "x", m);
    write_tics(f, "y", m);
    fprintf(f, "plot 'pairs.dat' matrix with image notitle, \\\n"
            "     '' matrix using 1:2:($3 == $3 ? sprintf('%%.3g', $3) : '') "
            "with labels font ',9' notitle\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* Runs gnuplot pairs.gp inside dir; 0, 1 when gnuplot is missing, -1 when it failed. */
static int run_gnuplot(const char *dir)
{
    int status;
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* gnuplot warns on every NaN cell (the diagonal); its words go to pairs.log, which
         * the page names when it fails. */
        int fd;
        if (chdir(dir) != 0) _exit(126);
        fd = open("pairs.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 2);
        execlp("gnuplot", "gnuplot", "pairs.gp", (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    if (WEXITSTATUS(status) == 127) return 1;
    return WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void cell(FILE *f, double x, double expected, double thr, int prec)
{
    if (x < 0 || isnan(x)) {
        fprintf(f, "<td>-</td>");
        return;
    }
    fprintf(f, "<td%s>%.*f</td>", expected > 0 && x < thr * expected ? " class=\"slow\"" : "",
            prec, x);
}

static void matrix_table(FILE *f, const fabric_result_t *r, const heat_t *m,
                         const fabric_verdict_t *v)
{
    double e = r->nhosts < 2 ? v->expect_intra_gbps : v->expect_gbps;

    fprintf(f, "<table><tr><th>sender \\ receiver</th>");
    for (int j = 0; j < m->n; j++) {
        fprintf(f, "<th>");
        put_html(f, m->label[j]);
        fprintf(f, "</th>");
    }
    fprintf(f, "</tr>\n");
    for (int i = 0; i < m->n; i++) {
        fprintf(f, "<tr><th>");
        put_html(f, m->label[i]);
        fprintf(f, "</th>");
        for (int j = 0; j < m->n; j++)
            cell(f, m->v[i * m->n + j], e, v->threshold, 3);
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n");
}

static void pair_table(FILE *f, const fabric_result_t *r, const fabric_pair_t *p, int n,
                       int intra, const fabric_verdict_t *v)
{
    double e = intra ? v->expect_intra_gbps : v->expect_gbps;

    fprintf(f, "<table><tr><th>%s</th><th>a &rarr; b</th><th>b &rarr; a</th><th>both ways</th>"
            "<th>latency (us)</th><th>bytes</th><th>reps</th><th>retested (first a &rarr; b, "
            "b &rarr; a)</th></tr>\n", intra ? "ranks" : "hosts");
    for (int i = 0; i < n; i++) {
        fprintf(f, "<tr><td>");
        if (intra) {
            put_html(f, p[i].host >= 0 && p[i].host < r->nhosts ? r->hosts[p[i].host].name : "?");
            fprintf(f, " %d-%d", p[i].a, p[i].b);
        } else {
            put_html(f, r->hosts[p[i].a].name);
            fprintf(f, " - ");
            put_html(f, r->hosts[p[i].b].name);
        }
        fprintf(f, "</td>");
        cell(f, p[i].gbps[0], e, v->threshold, 3);
        cell(f, p[i].gbps[1], e, v->threshold, 3);
        cell(f, p[i].bidir_gbps, -1, v->threshold, 3);
        cell(f, p[i].lat_us, -1, v->threshold, 1);
        fprintf(f, "<td>%llu</td><td>%d</td>", (unsigned long long)p[i].bytes, p[i].reps);
        if (p[i].retested)
            fprintf(f, "<td>yes (%.3f, %.3f)</td></tr>\n", p[i].first_gbps[0], p[i].first_gbps[1]);
        else
            fprintf(f, "<td></td></tr>\n");
    }
    fprintf(f, "</table>\n");
}

/* Each host's CPU over the rounds; a saturated host's row is shaded. */
static void cpu_table(FILE *f, const fabric_result_t *r)
{
    int any = 0;

    for (int h = 0; h < r->nhosts; h++)
        any |= r->hosts[h].cpu_busy >= 0;
    if (!any) return;
    fprintf(f, "<h2>Host CPU during the rounds</h2><p>Shaded: saturated (busy &ge; %.0f%% or "
            "softirq &ge; %.0f%%).</p>\n<table><tr><th>host</th><th>busy (%%)</th>"
            "<th>softirq (%%)</th></tr>\n", 100 * FABRIC_CPU_BUSY_SATURATED,
            100 * FABRIC_CPU_SOFTIRQ_SATURATED);
    for (int h = 0; h < r->nhosts; h++) {
        const fabric_host_t *x = &r->hosts[h];
        fprintf(f, "<tr%s><td>", fabric_cpu_saturated(x->cpu_busy, x->cpu_softirq)
                                     ? " class=\"slow\"" : "");
        put_html(f, x->name);
        fprintf(f, "</td>");
        cell(f, x->cpu_busy >= 0 ? 100 * x->cpu_busy : -1, -1, 1, 1);
        cell(f, x->cpu_softirq >= 0 ? 100 * x->cpu_softirq : -1, -1, 1, 1);
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n");
}

static void other_tables(FILE *f, const fabric_result_t *r)
{
    cpu_table(f, r);
    if (r->conc.host_tx_gbps != NULL) {
        fprintf(f, "<h2>Concurrent round</h2><p>Every host sending and receiving at once; "
                "the median of each host's send rate over its shifts (Gbit/s).</p>\n"
                "<table><tr><th>host</th><th>tx</th></tr>\n");
        for (int h = 0; h < r->nhosts; h++) {
            fprintf(f, "<tr><td>");
            put_html(f, r->hosts[h].name);
            fprintf(f, "</td>");
            cell(f, r->conc.host_tx_gbps[h], -1, 1, 3);
            fprintf(f, "</tr>\n");
        }
        fprintf(f, "</table>\n");
    }
    if (r->ncoll == 0) return;
    fprintf(f, "<h2>Allreduce</h2><table><tr><th>algo</th><th>scope</th><th>ranks</th>"
            "<th>bytes</th><th>time (us)</th><th>busbw (Gbit/s)</th></tr>\n");
    for (int i = 0; i < r->ncoll; i++) {
        const fabric_coll_t *c = &r->coll[i];
        fprintf(f, "<tr><td>%s</td><td>", c->algo == FABRIC_ALGO_RING ? "ring" : "tree");
        put_html(f, c->host >= 0 && c->host < r->nhosts ? r->hosts[c->host].name : "whole job");
        fprintf(f, "</td><td>%d</td><td>%llu</td>", c->nranks, (unsigned long long)c->bytes);
        cell(f, c->time_us, -1, 1, 1);
        cell(f, c->busbw_gbps, -1, 1, 3);
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n");
}

static int write_index(const char *dir, const fabric_result_t *r, const fabric_verdict_t *v,
                       const heat_t *m, const char *plot_note)
{
    char path[4096], line[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/index.html", dir);
    f = fopen(path, "w");
    if (f == NULL) return -1;
    fabric_verdict_line(r, v, line, sizeof(line));
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>chorus-fabric</title>"
            "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
            "td,th{border:1px solid #999;padding:2px 6px;text-align:right}"
            ".slow{background:#f5b7b1}.pass{color:#1e8449}.fail{color:#c0392b}</style>"
            "</head><body>\n<h1 class=\"%s\">", v->pass ? "pass" : "fail");
    put_html(f, line);
    fprintf(f, "</h1>\n<p>%d hosts, %d ranks, transport ", r->nhosts, r->nranks);
    put_html(f, r->transport);
    fprintf(f, ", %.1f s of a %.0f s budget. Expected: inter-host %.3f Gbit/s (%s), intra-host "
            "%.3f Gbit/s; shaded cells are below %.0f%% of it.</p>\n", r->elapsed_s, r->budget_s,
            v->expect_gbps, v->expect_given ? "given" : "median", v->expect_intra_gbps,
            v->threshold * 100);
    fprintf(f, "<h2>Findings</h2>\n<ol>\n");
    for (int i = 0; i < v->nfind; i++) {
        fprintf(f, "<li>%s: ", fabric_find_kind_name(v->find[i].kind));
        put_html(f, v->find[i].text);
        fprintf(f, "</li>\n");
    }
    fprintf(f, "</ol>%s\n", v->nfind == 0 ? "<p>None.</p>" : "");
    if (v->nnote > 0) fprintf(f, "<h2>Notes</h2>\n<p>They do not fail the run.</p>\n<ul>\n");
    for (int i = 0; i < v->nnote; i++) {
        fprintf(f, "<li>%s: ", fabric_find_kind_name(v->note[i].kind));
        put_html(f, v->note[i].text);
        fprintf(f, "</li>\n");
    }
    fprintf(f, "%s<h2>Warnings</h2>\n<ul>\n", v->nnote > 0 ? "</ul>\n" : "");
    for (int i = 0; i < v->nwarn; i++) {
        fprintf(f, "<li>");
        put_html(f, v->warn[i]);
        fprintf(f, "</li>\n");
    }
    fprintf(f, "</ul>%s\n<h2>", v->nwarn == 0 ? "<p>None.</p>" : "");
    put_html(f, m->title);
    fprintf(f, "</h2>\n");
    if (plot_note == NULL) fprintf(f, "<p><img src=\"pairs.png\" alt=\"pair heat map\"></p>\n");
    else fprintf(f, "<p>%s</p>\n", plot_note);
    matrix_table(f, r, m, v);
    if (r->ninter > 0) fprintf(f, "<h2>Host pairs</h2>\n");
    pair_table(f, r, r->inter, r->ninter, 0, v);
    if (r->nintra > 0) fprintf(f, "<h2>Rank pairs inside hosts</h2>\n");
    pair_table(f, r, r->intra, r->nintra, 1, v);
    other_tables(f, r);
    fprintf(f, "</body></html>\n");
    return fclose(f) == 0 ? 0 : -1;
}

chorus_status_t fabric_report_html(const fabric_result_t *r, const fabric_verdict_t *v,
                                   const char *dir)
{
    heat_t m = {0};
    const char *note = NULL;
    chorus_status_t st = CHORUS_SUCCESS;
    int rc;

    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "chorus-fabric: --html %s", dir);
    if (heat_fill(r, &m) != 0) {
        st = chorus__error(CHORUS_ERR_NO_MEMORY, "chorus-fabric: --html %s: out of memory", dir);
        goto err_free;
    }
    if (write_dat(dir, &m) != 0 || write_gp(dir, &m) != 0) {
        st = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "chorus-fabric: cannot write %s", dir);
        goto err_free;
    }
    rc = m.n < 2 ? 2 : run_gnuplot(dir);
    if (rc == 1)
        note = "gnuplot not found (apt-get install gnuplot-nox): no heat map; the matrix is in "
               "pairs.dat and pairs.gp draws it.";
    else if (rc == 2)
        note = "Nothing to draw: fewer than two endpoints.";
    else if (rc != 0)
        note = "gnuplot failed on pairs.gp (see pairs.log): no heat map; the matrix is in "
               "pairs.dat.";
    if (write_index(dir, r, v, &m, note) != 0)
        st = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "chorus-fabric: cannot write "
                                 "%s/index.html", dir);
err_free:
    free(m.label);
    free(m.v);
    return st;
}
