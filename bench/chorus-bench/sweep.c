/*
 * `chorus-bench sweep`: the same benchmark at several rank counts (and, with --algos,
 * several algorithms), each as its own job under the launcher, then a scaling table.
 *
 *   chorus-bench sweep --ranks 2,4,8 allreduce -b 1K -e 16M -f 4 --plot out/ar
 *
 * Each job is `LAUNCHER -n N [-q --] chorus-bench ARGS --json DIR/run-K.json`, with its
 * output in DIR/run-K.log; the sweep reads the JSON files back and prints, for each
 * collective, datatype and op, the out-of-place busbw of every size at every rank count,
 * and the scaling efficiency busbw(n) / busbw(reference n) at the largest sizes. The
 * reference is, per size and algorithm, the smallest rank count whose busbw is above 0: the
 * nccl-tests bus factors ((n-1)/n, 2(n-1)/n) make busbw 0 at n=1 by definition, so with
 * `--ranks 1,2,4` the reference is n=2, and the table header says which n it is. The sweep
 * itself is one process: it joins no communicator.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RUNS 32
#define MAX_WORDS 64
#define EFFICIENCY_SIZES 3

typedef struct {
    int ranks[MAX_RUNS], nranks;
    char *algos[MAX_RUNS];
    int nalgos;
    char *launcher[MAX_WORDS];
    int nlauncher;
    const char *keep, *plot, *csv;
    char **pass; /* the arguments every job gets */
    int npass;
} sweep_t;

typedef struct {
    int ranks;
    const char *algo; /* NULL: as the arguments say */
    char label[48];
    char json[PATH_MAX], log[PATH_MAX];
    int status;
    results_t res;
} run_t;

static void sweep_usage(FILE *out)
{
    fprintf(out,
            "usage: chorus-bench sweep --ranks N,N,... [--launcher CMD] [--algos A,A,...]\n"
            "                          [--keep DIR] [--plot PREFIX] [--csv FILE]\n"
            "                          COLLECTIVE [chorus-bench options]\n"
            "Runs chorus-bench once per rank count (and algorithm) under the launcher and\n"
            "prints the out-of-place busbw of each size at each rank count, then the scaling\n"
            "efficiency busbw(n) / busbw(reference n) at the %d largest sizes. The reference\n"
            "is the smallest rank count whose busbw is above 0 (busbw is 0 at n=1 by\n"
            "definition, so --ranks 1,2,4 compares with n=2); the table header names it.\n"
            "  --ranks N,N,...   rank counts (required; run in increasing order)\n"
            "  --launcher CMD    command taking -n N before the program (words split at\n"
            "                    spaces; default: chorusrun next to chorus-bench, with -q)\n"
            "  --algos A,A,...   run each rank count with each algorithm (ring tree rd auto)\n"
            "  --keep DIR        keep each job's JSON and output in DIR (default: a temporary\n"
            "                    folder, removed)\n"
            "  --plot PREFIX     PNG plots with one line per rank count (and algorithm)\n"
            "  --csv FILE        every row of every job in one CSV file\n"
            "The other options go to every job (chorus-bench -h); --json is per job: use\n"
            "--keep DIR.\n",
            EFFICIENCY_SIZES);
}

static int split_list(char *text, char **out, int max)
{
    int n = 0;

    for (char *save = NULL, *tok = strtok_r(text, ", ", &save); tok != NULL;
         tok = strtok_r(NULL, ", ", &save)) {
        if (n == max) return -1;
        out[n++] = tok;
    }
    return n;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static int parse_ranks(char *text, sweep_t *s)
{
    char *words[MAX_RUNS];
    int n = split_list(text, words, MAX_RUNS);

    if (n <= 0) return -1;
    for (int i = 0; i < n; i++) {
        char *end;
        long v = strtol(words[i], &end, 10);
        if (*end != '\0' || v < 1 || v > 4096) return -1;
        s->ranks[i] = (int)v;
    }
    s->nranks = n;
    qsort(s->ranks, (size_t)n, sizeof(int), cmp_int);
    return 0;
}

/* The value of a sweep option: "--opt=value" or "--opt value". */
static char *option_value(int argc, char **argv, int *i, const char *name)
{
    size_t len = strlen(name);

    if (strncmp(argv[*i], name, len) != 0) return NULL;
    if (argv[*i][len] == '=') return argv[*i] + len + 1;
    if (argv[*i][len] != '\0' || *i + 1 >= argc) return NULL;
    return argv[++*i];
}

/* The jobs' arguments are parsed here first, so that a typo fails before any job starts. */
static int check_job_args(const sweep_t *s)
{
    char **copy = calloc((size_t)s->npass + 2, sizeof(char *));
    options_t opt;
    int rc;

    if (copy == NULL) return -1;
    copy[0] = "chorus-bench";
    memcpy(copy + 1, s->pass, (size_t)s->npass * sizeof(char *));
    rc = bench_parse_args(s->npass + 1, copy, &opt);
    free(copy);
    return rc == 0 ? 0 : -1;
}

static int parse_sweep(int argc, char **argv, const char *self, sweep_t *s)
{
    static char default_launcher[PATH_MAX];
    char dir[PATH_MAX], *v;

    memset(s, 0, sizeof(*s));
    s->pass = calloc((size_t)argc + 1, sizeof(char *));
    if (s->pass == NULL) return -1;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            sweep_usage(stdout);
            return 1;
        } else if ((v = option_value(argc, argv, &i, "--ranks")) != NULL) {
            if (parse_ranks(v, s) != 0) goto err_value;
        } else if ((v = option_value(argc, argv, &i, "--algos")) != NULL ||
                   (v = option_value(argc, argv, &i, "--algo")) != NULL) {
            if ((s->nalgos = split_list(v, s->algos, MAX_RUNS)) <= 0) goto err_value;
        } else if ((v = option_value(argc, argv, &i, "--launcher")) != NULL) {
            if ((s->nlauncher = split_list(v, s->launcher, MAX_WORDS - 8)) <= 0) goto err_value;
        } else if ((v = option_value(argc, argv, &i, "--keep")) != NULL) {
            s->keep = v;
        } else if ((v = option_value(argc, argv, &i, "--plot")) != NULL) {
            s->plot = v;
        } else if ((v = option_value(argc, argv, &i, "--csv")) != NULL) {
            s->csv = v;
        } else if (strncmp(a, "--json", 6) == 0) {
            fprintf(stderr, "chorus-bench sweep: --json is per job: use --keep DIR\n");
            return -1;
        } else {
            s->pass[s->npass++] = a;
        }
        continue;
    err_value:
        fprintf(stderr, "chorus-bench sweep: invalid value for %s\n", a);
        return -1;
    }
    if (check_job_args(s) != 0) return -1;
    if (s->nranks == 0) {
        fprintf(stderr, "chorus-bench sweep: --ranks is required\n");
        sweep_usage(stderr);
        return -1;
    }
    if (s->nalgos * s->nranks > MAX_RUNS) {
        fprintf(stderr, "chorus-bench sweep: at most %d jobs\n", MAX_RUNS);
        return -1;
    }
    if (s->nlauncher == 0) {
        snprintf(dir, sizeof(dir), "%s", self);
        snprintf(default_launcher, sizeof(default_launcher), "%s/chorusrun", dirname(dir));
        s->launcher[0] = access(default_launcher, X_OK) == 0 ? default_launcher : "chorusrun";
        s->nlauncher = 1;
    }
    return 0;
}

/* Starts one job with its output in run->log and waits for it. */
static int run_job(const sweep_t *s, const char *self, run_t *run)
{
    char *argv[MAX_WORDS + 512], nbuf[16];
    int argc = 0, fd, status;
    const char *base = strrchr(s->launcher[0], '/');
    pid_t pid;

    if (s->npass > 500) return -1;
    base = base != NULL ? base + 1 : s->launcher[0];
    for (int i = 0; i < s->nlauncher; i++)
        argv[argc++] = s->launcher[i];
    snprintf(nbuf, sizeof(nbuf), "%d", run->ranks);
    argv[argc++] = "-n";
    argv[argc++] = nbuf;
    /* chorusrun would prefix every line with the rank, and takes `--` before the program. */
    if (strcmp(base, "chorusrun") == 0) {
        argv[argc++] = "-q";
        argv[argc++] = "--";
    }
    argv[argc++] = (char *)self;
    for (int i = 0; i < s->npass; i++)
        argv[argc++] = s->pass[i];
    argv[argc++] = "--json";
    argv[argc++] = run->json;
    if (run->algo != NULL) {
        argv[argc++] = "--algo";
        argv[argc++] = (char *)run->algo;
    }
    argv[argc] = NULL;
    fflush(stdout);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        fd = open(run->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
        execvp(argv[0], argv);
        fprintf(stderr, "chorus-bench sweep: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void show_log_tail(const char *path)
{
    char line[1024];
    long lines = 0, skip;
    FILE *f = fopen(path, "r");

    if (f == NULL) return;
    while (fgets(line, sizeof(line), f) != NULL)
        lines++;
    skip = lines > 15 ? lines - 15 : 0;
    rewind(f);
    for (long i = 0; fgets(line, sizeof(line), f) != NULL; i++)
        if (i >= skip) fprintf(stderr, "    %s", line);
    fclose(f);
}

static int same_series(const row_t *a, const row_t *b)
{
    return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
           a->in_place == b->in_place;
}

/* The k-th row of a series in a run, or NULL. */
static const row_t *series_row(const results_t *r, const row_t *key, size_t k)
{
    for (size_t i = 0; i < r->nrows; i++)
        if (same_series(&r->rows[i], key) && k-- == 0) return &r->rows[i];
    return NULL;
}

static int same_algo(const run_t *a, const run_t *b)
{
    return (a->algo == NULL) == (b->algo == NULL) &&
           (a->algo == NULL || strcmp(a->algo, b->algo) == 0);
}

/* The busbw of the k-th row of a series in a run, or 0 when the run has no such row. */
static double row_busbw(const run_t *run, const row_t *key, size_t k)
{
    const row_t *w = series_row(&run->res, key, k);
    return w != NULL && w->busbw > 0.0 ? w->busbw : 0.0;
}

/* The reference run of run j at the k-th size: the smallest rank count with the same
 * algorithm whose busbw at that size is above 0 (runs are in increasing rank order within
 * an algorithm). The smallest rank count alone would be n=1 in `--ranks 1,2,4`, whose busbw
 * is 0 by definition, and every efficiency would be a division by 0. -1 when no run has a
 * busbw there. */
static int reference_of(const run_t *runs, int nruns, int j, const row_t *key, size_t k)
{
    for (int i = 0; i < nruns; i++)
        if (same_algo(&runs[i], &runs[j]) && row_busbw(&runs[i], key, k) > 0.0) return i;
    return -1;
}

/* Adds i to the set list (n entries) unless it is there already. */
static void add_once(int *list, int *n, int i)
{
    for (int x = 0; x < *n; x++)
        if (list[x] == i) return;
    list[(*n)++] = i;
}

/* The header of the efficiency table: which runs are the reference over the sizes shown,
 * and which smaller rank counts were passed over because their busbw is 0. */
static void print_reference_line(const run_t *runs, int nruns, const row_t *key, size_t k0,
                                 size_t nsizes)
{
    int refs[MAX_RUNS], nrefs = 0, skipped[MAX_RUNS], nskipped = 0;

    for (size_t k = k0; k < nsizes; k++)
        for (int j = 0; j < nruns; j++) {
            int ref = reference_of(runs, nruns, j, key, k);
            if (ref < 0) continue;
            add_once(refs, &nrefs, ref);
            for (int i = 0; i < ref; i++)
                if (same_algo(&runs[i], &runs[ref])) add_once(skipped, &nskipped, i);
        }
    printf("# scaling efficiency: busbw(n) / busbw(reference n) at the largest sizes; ");
    if (nrefs == 0) {
        printf("no reference: no rank count has a busbw above 0\n");
        return;
    }
    printf("reference");
    for (int x = 0; x < nrefs; x++)
        printf("%s %s", x > 0 ? "," : "", runs[refs[x]].label);
    for (int x = 0; x < nskipped; x++)
        printf("%s%s %s", x == 0 ? " (" : "; ", runs[skipped[x]].label,
               runs[skipped[x]].ranks == 1 ? "has busbw 0 by definition" : "measured busbw 0");
    printf("%s\n", nskipped > 0 ? ")" : "");
}

static void print_efficiency(const run_t *runs, int nruns, const row_t *key, size_t nsizes)
{
    size_t k0 = nsizes > EFFICIENCY_SIZES ? nsizes - EFFICIENCY_SIZES : 0;

    print_reference_line(runs, nruns, key, k0, nsizes);
    printf("# %10s", "size (B)");
    for (int j = 0; j < nruns; j++)
        printf("  %10s", runs[j].label);
    printf("\n");
    for (size_t k = k0; k < nsizes; k++) {
        printf("  %10llu", (unsigned long long)series_row(&runs[0].res, key, k)->size);
        for (int j = 0; j < nruns; j++) {
            int ref = reference_of(runs, nruns, j, key, k);
            double bw = row_busbw(&runs[j], key, k);
            /* A run below its reference has busbw 0: "-", not an efficiency of 0. */
            if (ref < 0 || !(bw > 0.0))
                printf("  %10s", "-");
            else
                printf("  %10.3f", bw / row_busbw(&runs[ref], key, k));
        }
        printf("\n");
    }
}

static void print_series(const run_t *runs, int nruns, const row_t *key)
{
    size_t nsizes = 0;
    int latency = key->coll == COLL_BARRIER;

    while (series_row(&runs[0].res, key, nsizes) != NULL)
        nsizes++;
    printf("#\n# %s", bench_coll_name(key->coll));
    if (key->has_dtype) printf(" %s", chorus_dtype_name(key->dtype));
    if (key->has_op) printf(" %s", chorus_op_name(key->op));
    printf(": out-of-place %s\n# %10s", latency ? "time per call (us)" : "busbw (GB/s)",
           "size (B)");
    for (int j = 0; j < nruns; j++)
        printf("  %10s", runs[j].label);
    printf("\n");
    for (size_t k = 0; k < nsizes; k++) {
        printf("  %10llu", (unsigned long long)series_row(&runs[0].res, key, k)->size);
        for (int j = 0; j < nruns; j++) {
            const row_t *w = series_row(&runs[j].res, key, k);
            if (w == NULL)
                printf("  %10s", "-");
            else
                printf("  %10.3f", latency ? w->time_us : w->busbw);
        }
        printf("\n");
    }
    if (latency || nsizes == 0) return;
    print_efficiency(runs, nruns, key, nsizes);
}

static void print_scaling(const run_t *runs, int nruns)
{
    const results_t *first = &runs[0].res;

    for (size_t i = 0; i < first->nrows; i++) {
        const row_t *w = &first->rows[i];
        if (w->in_place || series_row(first, w, 0) != w) continue;
        print_series(runs, nruns, w);
    }
    fflush(stdout);
}

static int write_outputs(const sweep_t *s, run_t *runs, int nruns)
{
    int rc = 0;

    if (s->csv != NULL) {
        FILE *out = fopen(s->csv, "w");
        for (int j = 0; j < nruns && out != NULL; j++)
            if (bench_write_csv(out, &runs[j].res, j == 0) != 0) rc = 1;
        if (out == NULL || fclose(out) != 0) {
            fprintf(stderr, "chorus-bench sweep: cannot write %s\n", s->csv);
            rc = 1;
        }
    }
    if (s->plot != NULL) {
        results_t res[MAX_RUNS];
        const char *labels[MAX_RUNS];
        for (int j = 0; j < nruns; j++) {
            res[j] = runs[j].res;
            labels[j] = runs[j].label;
        }
        if (bench_plot(s->plot, res, labels, nruns, 0) == -2) rc = 1;
    }
    return rc;
}

/* Runs every job; returns 0 when all passed their checks, 1 otherwise, 2 if one failed
 * to produce results. */
static int run_all(const sweep_t *s, const char *self, const char *dir, run_t *runs, int *nruns_p)
{
    int nruns = 0, rc = 0, nalgos = s->nalgos > 0 ? s->nalgos : 1;

    for (int a = 0; a < nalgos; a++) {
        for (int i = 0; i < s->nranks; i++, nruns++) {
            run_t *run = &runs[nruns];
            memset(run, 0, sizeof(*run));
            run->ranks = s->ranks[i];
            run->algo = s->nalgos > 0 ? s->algos[a] : NULL;
            snprintf(run->label, sizeof(run->label), "n=%d%s%s", run->ranks,
                     s->nalgos > 1 ? " " : "", s->nalgos > 1 ? run->algo : "");
            if (snprintf(run->json, sizeof(run->json), "%s/run-%d.json", dir, nruns) >=
                    (int)sizeof(run->json) ||
                snprintf(run->log, sizeof(run->log), "%s/run-%d.log", dir, nruns) >=
                    (int)sizeof(run->log)) {
                fprintf(stderr, "chorus-bench sweep: path too long: %s\n", dir);
                *nruns_p = nruns;
                return 2;
            }
            printf("# sweep: %s: running%s%s\n", run->label, s->keep != NULL ? ", output in " : "",
                   s->keep != NULL ? run->log : "");
            run->status = run_job(s, self, run);
            if (run->status != 0 && run->status != 1) {
                fprintf(stderr, "chorus-bench sweep: %s: the job failed (status %d):\n", run->label,
                        run->status);
                show_log_tail(run->log);
                *nruns_p = nruns;
                return 2;
            }
            if (bench_read_json(run->json, &run->res) != 0) {
                fprintf(stderr, "chorus-bench sweep: %s: no results from the job (status %d):\n",
                        run->label, run->status);
                show_log_tail(run->log);
                *nruns_p = nruns;
                return 2;
            }
            if (run->res.wrong_total != 0) {
                fprintf(stderr, "chorus-bench sweep: %s: %llu wrong values\n", run->label,
                        (unsigned long long)run->res.wrong_total);
                rc = 1;
            }
        }
    }
    *nruns_p = nruns;
    return rc;
}

int bench_sweep(int argc, char **argv, const char *self)
{
    static run_t runs[MAX_RUNS];
    sweep_t s;
    char dir[PATH_MAX];
    int rc, nruns = 0;

    rc = parse_sweep(argc, argv, self, &s);
    if (rc != 0) {
        free(s.pass);
        return rc < 0 ? 2 : 0;
    }
    if (s.keep != NULL) {
        snprintf(dir, sizeof(dir), "%s", s.keep);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "chorus-bench sweep: mkdir %s: %s\n", dir, strerror(errno));
            free(s.pass);
            return 2;
        }
    } else {
        snprintf(dir, sizeof(dir), "%s/chorus-sweep.XXXXXX",
                 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
        if (mkdtemp(dir) == NULL) {
            fprintf(stderr, "chorus-bench sweep: mkdtemp: %s\n", strerror(errno));
            free(s.pass);
            return 2;
        }
    }
    rc = run_all(&s, self, dir, runs, &nruns);
    if (rc != 2) {
        print_scaling(runs, nruns);
        if (write_outputs(&s, runs, nruns) != 0) rc = 1;
    }
    for (int j = 0; j < nruns + (rc == 2); j++) {
        if (s.keep == NULL) {
            unlink(runs[j].json);
            unlink(runs[j].log);
        }
        bench_results_free(&runs[j].res);
    }
    if (s.keep == NULL) rmdir(dir);
    free(s.pass);
    return rc;
}
