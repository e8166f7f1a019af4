/*
 * PNG plots through gnuplot: for each collective, bus bandwidth against size and time per
 * call against size, both on log axes, one line per series. A series is one run (one rank
 * count or algorithm in a sweep) and, within a run, one datatype, op and placement. The
 * data and the gnuplot script stay next to the images (PREFIX-COLL.dat, PREFIX-COLL.gp), so
 * that a plot can be restyled without rerunning. gnuplot runs without a shell; when it is
 * missing, the plots are skipped with a message and the benchmark result stands.
 */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SERIES 256

typedef struct {
    int run;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int in_place;
    char label[128];
} series_t;

static int same_key(const series_t *s, int run, const row_t *w)
{
    return s->run == run && s->dtype == w->dtype && s->op == w->op && s->in_place == w->in_place;
}

/* Series of one collective, in the order they appear; returns how many. */
static int find_series(const results_t *runs, const char *const *labels, int nruns, coll_t coll,
                       int in_place_too, series_t *out)
{
    int n = 0;

    for (int run = 0; run < nruns; run++) {
        int first = n;
        for (size_t i = 0; i < runs[run].nrows; i++) {
            const row_t *w = &runs[run].rows[i];
            int k = first;
            if (w->coll != coll || (w->in_place && !in_place_too)) continue;
            while (k < n && !same_key(&out[k], run, w))
                k++;
            if (k < n || n == MAX_SERIES) continue;
            out[n] = (series_t){run, w->dtype, w->op, w->in_place, ""};
            n++;
        }
        /* Name the parts of the key that vary within the run, after the run's own label. */
        int dtypes = 0, ops = 0, reduces = bench_coll_reduces(coll);
        for (int k = first + 1; k < n; k++) {
            dtypes |= out[k].dtype != out[first].dtype;
            ops |= out[k].op != out[first].op;
        }
        for (int k = first; k < n; k++) {
            snprintf(out[k].label, sizeof(out[k].label), "%s%s%s%s%s%s%s", labels[run],
                     *labels[run] != '\0' ? " " : "", dtypes ? chorus_dtype_name(out[k].dtype) : "",
                     dtypes ? " " : "", ops && reduces ? chorus_op_name(out[k].op) : "",
                     ops && reduces ? " " : "",
                     in_place_too ? (out[k].in_place ? "in-place" : "out-of-place") : "");
            size_t len = strlen(out[k].label);
            while (len > 0 && out[k].label[len - 1] == ' ')
                out[k].label[--len] = '\0';
            if (len == 0) snprintf(out[k].label, sizeof(out[k].label), "%s", bench_coll_name(coll));
        }
    }
    return n;
}

/* A gnuplot single-quoted string: a quote inside is doubled. */
static void put_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s != '\0'; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static int write_data(const char *path, const results_t *runs, coll_t coll, const series_t *series,
                      int nseries)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        fprintf(stderr, "chorus-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (int k = 0; k < nseries; k++) {
        const results_t *r = &runs[series[k].run];
        fprintf(f, "# %s\n# size busbw time_us\n", series[k].label);
        for (size_t i = 0; i < r->nrows; i++) {
            const row_t *w = &r->rows[i];
            if (w->coll != coll || !same_key(&series[k], series[k].run, w) || w->size == 0)
                continue;
            fprintf(f, "%llu %.9g %.9g\n", (unsigned long long)w->size, w->busbw, w->time_us);
        }
        fprintf(f, "\n\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

static void write_plot(FILE *f, const char *png, const char *data, const char *title,
                       const char *ylabel, const char *column, const series_t *series, int nseries)
{
    fprintf(f, "set output ");
    put_quoted(f, png);
    fprintf(f, "\nset title ");
    put_quoted(f, title);
    fprintf(f, "\nset ylabel '%s'\nplot ", ylabel);
    for (int k = 0; k < nseries; k++) {
        fprintf(f, "%s", k > 0 ? ", \\\n     " : "");
        put_quoted(f, data);
        fprintf(f, " index %d using 1:(%s > 0 ? %s : 1/0) with linespoints title ", k, column,
                column);
        put_quoted(f, series[k].label);
    }
    fprintf(f, "\n");
}

/* The sizes on the x axis of a collective, over every run. */
static void size_range(const results_t *runs, int nruns, coll_t coll, uint64_t *lo_p,
                       uint64_t *hi_p)
{
    uint64_t lo = UINT64_MAX, hi = 0;

    for (int j = 0; j < nruns; j++) {
        for (size_t i = 0; i < runs[j].nrows; i++) {
            const row_t *w = &runs[j].rows[i];
            if (w->coll != coll || w->size == 0) continue;
            lo = w->size < lo ? w->size : lo;
            hi = w->size > hi ? w->size : hi;
        }
    }
    *lo_p = lo;
    *hi_p = hi;
}

/* x tics at powers of two, at most about 8 of them, labelled 4K, 16M: gnuplot's own
 * binary-prefix format rounds 1 MiB - 1 ulp to "1023kiB". */
static void write_xtics(FILE *f, uint64_t lo, uint64_t hi)
{
    int bits = 0, step;
    uint64_t v = 1;

    while ((hi >> bits) > lo)
        bits++;
    step = bits <= 8 ? 1 : (bits + 7) / 8;
    while (v * 2 <= lo)
        v *= 2;
    fprintf(f, "set xrange [%g:%g]\nset xtics (", (double)lo / 1.5, (double)hi * 1.5);
    for (int first = 1; v <= hi * 2 && v != 0; v <<= step, first = 0) {
        const char *unit = "";
        uint64_t shown = v;
        if (v % (1u << 30) == 0) {
            shown = v >> 30;
            unit = "G";
        } else if (v % (1u << 20) == 0) {
            shown = v >> 20;
            unit = "M";
        } else if (v % (1u << 10) == 0) {
            shown = v >> 10;
            unit = "K";
        }
        fprintf(f, "%s'%llu%s' %llu", first ? "" : ", ", (unsigned long long)shown, unit,
                (unsigned long long)v);
    }
    fprintf(f, ")\n");
}

static int write_script(const char *path, const char *prefix, const char *data, coll_t coll,
                        const char *context, uint64_t lo, uint64_t hi, const series_t *series,
                        int nseries)
{
    FILE *f = fopen(path, "w");
    char png[4096], title[512];
    const char *name = bench_coll_name(coll);

    if (f == NULL) {
        fprintf(stderr, "chorus-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f,
            "# Made by chorus-bench --plot; run `gnuplot %s` to redraw.\n"
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "    set terminal pngcairo size 960,600 font ',11'\n"
            "} else {\n"
            "    set terminal png size 960,600\n"
            "}\n"
            "set logscale x 2\nset logscale y 10\n"
            "set grid xtics ytics mytics\nset key top left reverse Left box opaque\n"
            "set xlabel 'size (bytes)'\n",
            path);
    write_xtics(f, lo, hi);
    snprintf(png, sizeof(png), "%s-%s-busbw.png", prefix, name);
    snprintf(title, sizeof(title), "chorus-bench %s: bus bandwidth%s", name, context);
    write_plot(f, png, data, title, "busbw (GB/s)", "$2", series, nseries);
    snprintf(png, sizeof(png), "%s-%s-latency.png", prefix, name);
    snprintf(title, sizeof(title), "chorus-bench %s: time per call%s", name, context);
    write_plot(f, png, data, title, "time (us)", "$3", series, nseries);
    return fclose(f) == 0 ? 0 : -1;
}

/* Runs gnuplot on a script; returns 0, 1 when gnuplot is missing, -1 when it failed. */
static int run_gnuplot(const char *script)
{
    int status;
    pid_t pid;

    fflush(stdout);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    if (WEXITSTATUS(status) == 127) return 1;
    return WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The run facts that every series shares, for the titles. */
static void context_of(const results_t *runs, int nruns, char *out, size_t size)
{
    const meta_t *m = &runs[0].meta;
    int same_ranks = 1, same_algo = 1;

    for (int i = 1; i < nruns; i++) {
        same_ranks &= runs[i].meta.ranks == m->ranks;
        same_algo &= strcmp(runs[i].meta.algo_requested, m->algo_requested) == 0;
    }
    if (same_ranks)
        snprintf(out, size, " (%d ranks, transport %s%s%s)", m->ranks, m->transport,
                 same_algo ? ", algo " : "", same_algo ? m->algo_requested : "");
    else
        snprintf(out, size, " (transport %s%s%s)", m->transport, same_algo ? ", algo " : "",
                 same_algo ? m->algo_requested : "");
}

/* Creates the directories of a --plot prefix ("out/ar": out/), as a user who names a new
 * folder expects. 0, or -1 (printed). */
static int make_prefix_dirs(const char *prefix)
{
    char dir[4096];

    snprintf(dir, sizeof(dir), "%s", prefix);
    for (char *p = dir + 1; *p != '\0'; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "chorus-bench: --plot %s: mkdir %s: %s\n", prefix, dir,
                    strerror(errno));
            return -1;
        }
        *p = '/';
    }
    return 0;
}

int bench_plot(const char *prefix, const results_t *runs, const char *const *labels, int nruns,
               int in_place_too)
{
    static series_t series[MAX_SERIES];
    char data[4096], script[4096], context[256];
    int drawn = 0;

    if (make_prefix_dirs(prefix) != 0) return -2;
    context_of(runs, nruns, context, sizeof(context));
    for (int c = 0; c < COLL_COUNT; c++) {
        int n = find_series(runs, labels, nruns, (coll_t)c, in_place_too, series), rc;
        uint64_t lo, hi;
        /* A barrier has no size axis: its latency is in the tables and the files. */
        size_range(runs, nruns, (coll_t)c, &lo, &hi);
        if (n == 0 || c == COLL_BARRIER || hi == 0) continue;
        snprintf(data, sizeof(data), "%s-%s.dat", prefix, bench_coll_name((coll_t)c));
        snprintf(script, sizeof(script), "%s-%s.gp", prefix, bench_coll_name((coll_t)c));
        if (write_data(data, runs, (coll_t)c, series, n) != 0 ||
            write_script(script, prefix, data, (coll_t)c, context, lo, hi, series, n) != 0)
            return -2;
        rc = run_gnuplot(script);
        if (rc == 1) {
            fprintf(stderr,
                    "chorus-bench: gnuplot not found (apt install gnuplot-nox): "
                    "skipping the plots; the data is in %s\n",
                    data);
            return -1;
        }
        if (rc != 0) {
            fprintf(stderr, "chorus-bench: gnuplot failed on %s\n", script);
            return -1;
        }
        printf("# plots: %s-%s-busbw.png %s-%s-latency.png\n", prefix, bench_coll_name((coll_t)c),
               prefix, bench_coll_name((coll_t)c));
        drawn++;
    }
    if (drawn == 0) printf("# plots: nothing to draw (no sized rows)\n");
    fflush(stdout);
    return 0;
}
