/*
 * chorus-sim: what a collective costs on a described fabric, from the schedules Chorus
 * really runs (lib/sim). Prints nccl-tests' columns (time, algbw, busbw) per size and
 * algorithm, a scaling table over rank counts, the busiest links, and the simulator's own
 * cost; --json for machines.
 *
 *   chorus-sim (--fabric FILE | --preset SPEC) [options]
 *
 * Run with --help for the options.
 */
#include "sim/sim.h"
#include "tune/tune.h"

#include "util/status.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ALGOS CHORUS_NUM_ALGOS
#define MAX_SCALE 64

typedef struct {
    const char *fabric_path, *preset, *from_fabric, *comm, *tune_file;
    chorus_coll_t coll;
    int algos[MAX_ALGOS], nalgos, all, best, tuner;
    uint64_t minb, maxb;
    double factor;
    int nranks;
    int scale[MAX_SCALE], nscale;
    chorus_dtype_t dtype;
    uint64_t chunk;
    int links, json, describe, stats, path, lockstep;
    const char *trace, *plot;
    chorus_fab_override_t over[16];
    int nover;
} opts_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chorus-sim (--fabric FILE | --preset SPEC | --from-fabric REPORT |\n"
            "                   --comm SPEC) [options]\n"
            "      --from-fabric R   describe the cluster chorus-fabric --json measured (R)\n"
            "      --comm SPEC       the tuner's description of a communicator,\n"
            "                        ranks=N,hosts=H,transport=shm|tcp,cores=C (defaults 2, 1,\n"
            "                        shm, 2): replays what the tuner predicts for it\n"
            "      --tune-file F     the tuner's parameters (a CHORUS_TUNE_FILE) for --comm and\n"
            "                        -a tuner; default: the built-in ones\n"
            "  -c, --coll NAME       allreduce (default), allgather, reduce_scatter, broadcast,\n"
            "                        reduce, alltoall, barrier\n"
            "  -a, --algo LIST       ring (default), tree, rd, rabenseifner, swing, hier, ...;\n"
            "                        comma-separated, or all, or best (the fastest per size),\n"
            "                        or tuner (the tuner's pick and chunk, then simulated)\n"
            "  -b, --minbytes N      smallest size (nccl-tests' meaning; K, M, G suffixes); 8M\n"
            "  -e, --maxbytes N      largest size; the smallest\n"
            "  -f, --stepfactor F    size multiplier; 2\n"
            "  -n, --ranks N         ranks (the first N of the fabric, hosts filled in order)\n"
            "      --scale LIST      scaling table over these rank counts (e.g. 8,64,512,4096)\n"
            "  -d, --dtype NAME      float32 (default), ...\n"
            "      --chunk BYTES     pipeline chunk (default: the algorithm's)\n"
            "      --links K         the K busiest links of the last run\n"
            "      --override L=F    link L's rate times F (or L=down); repeatable, after the\n"
            "                        description's own overrides\n"
            "      --stats           the simulator's cost: steps, events, memory, seconds\n"
            "      --lockstep        the tuner's fast pass (above 32 ranks): rank 0's schedule\n"
            "                        alone, every rank running it mirrored, links not shared\n"
            "      --path            the critical path of each run: where its time went\n"
            "      --trace FILE      the last run's timeline, every rank's steps, as Chrome\n"
            "                        trace / Perfetto JSON (the format of CHORUS_TRACE)\n"
            "      --plot PREFIX     busbw against ranks per algorithm and size (with --scale):\n"
            "                        PREFIX.dat, PREFIX.gp and, with gnuplot, PREFIX.png\n"
            "      --json            JSON on stdout instead of the tables\n"
            "      --describe        print the fabric's JSON description and exit\n"
            "presets:\n%s",
            chorus__fab_preset_help());
}

static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k') v *= 1024;
    else if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
    else if (*end != '\0') return 0;
    return v > 0 ? (uint64_t)v : 0;
}

static int parse_coll(const char *s, chorus_coll_t *c)
{
    for (int k = 0; k < CHORUS_COLL_SENDRECV; k++)
        if (strcmp(chorus__coll_name((chorus_coll_t)k), s) == 0) {
            *c = (chorus_coll_t)k;
            return 0;
        }
    return -1;
}

static int parse_dtype(const char *s, chorus_dtype_t *d)
{
    for (int k = 0; k < 32; k++) {
        const char *n = chorus_dtype_name((chorus_dtype_t)k);
        if (n != NULL && strcmp(n, s) == 0) {
            *d = (chorus_dtype_t)k;
            return 0;
        }
    }
    return -1;
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        {"fabric", required_argument, NULL, 'F'}, {"preset", required_argument, NULL, 'P'},
        {"coll", required_argument, NULL, 'c'},   {"algo", required_argument, NULL, 'a'},
        {"minbytes", required_argument, NULL, 'b'}, {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'}, {"ranks", required_argument, NULL, 'n'},
        {"scale", required_argument, NULL, 'S'},  {"dtype", required_argument, NULL, 'd'},
        {"chunk", required_argument, NULL, 'C'},  {"links", required_argument, NULL, 'L'},
        {"json", no_argument, NULL, 'J'},         {"describe", no_argument, NULL, 'D'},
        {"stats", no_argument, NULL, 'T'},        {"help", no_argument, NULL, 'h'},
        {"path", no_argument, NULL, 'Q'},         {"trace", required_argument, NULL, 'R'},
        {"plot", required_argument, NULL, 'G'},   {"from-fabric", required_argument, NULL, 'M'},
        {"override", required_argument, NULL, 'O'}, {"comm", required_argument, NULL, 'X'},
        {"tune-file", required_argument, NULL, 'U'}, {"lockstep", no_argument, NULL, 'K'},
        {0, 0, 0, 0}};
    const char *algo = "ring";
    int c;

    memset(o, 0, sizeof *o);
    o->coll = CHORUS_COLL_ALLREDUCE;
    o->minb = 8u << 20;
    o->factor = 2;
    o->dtype = CHORUS_FLOAT32;
    while ((c = getopt_long(argc, argv, "c:a:b:e:f:n:d:h", lo, NULL)) != -1) {
        switch (c) {
        case 'F': o->fabric_path = optarg; break;
        case 'P': o->preset = optarg; break;
        case 'c':
            if (parse_coll(optarg, &o->coll)) {
                fprintf(stderr, "chorus-sim: unknown collective %s\n", optarg);
                return 2;
            }
            break;
        case 'a': algo = optarg; break;
        case 'b': o->minb = parse_size(optarg); break;
        case 'e': o->maxb = parse_size(optarg); break;
        case 'f': o->factor = atof(optarg); break;
        case 'n': o->nranks = atoi(optarg); break;
        case 'S':
            for (char *p = optarg; p != NULL && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
                if (o->nscale == MAX_SCALE) break;
                o->scale[o->nscale++] = atoi(p);
            }
            break;
        case 'd':
            if (parse_dtype(optarg, &o->dtype)) {
                fprintf(stderr, "chorus-sim: unknown datatype %s\n", optarg);
                return 2;
            }
            break;
        case 'C': o->chunk = parse_size(optarg); break;
        case 'L': o->links = atoi(optarg); break;
        case 'J': o->json = 1; break;
        case 'D': o->describe = 1; break;
        case 'T': o->stats = 1; break;
        case 'Q': o->path = 1; break;
        case 'R': o->trace = optarg; break;
        case 'G': o->plot = optarg; break;
        case 'M': o->from_fabric = optarg; break;
        case 'X': o->comm = optarg; break;
        case 'U': o->tune_file = optarg; break;
        case 'K': o->lockstep = 1; break;
        case 'O': {
            const char *eq = strrchr(optarg, '=');
            chorus_fab_override_t *ov = &o->over[o->nover];
            if (eq == NULL || o->nover == 16 || (size_t)(eq - optarg) >= sizeof ov->link) {
                fprintf(stderr, "chorus-sim: --override LINK=FACTOR or LINK=down (16 at most)\n");
                return 2;
            }
            memset(ov, 0, sizeof *ov);
            memcpy(ov->link, optarg, (size_t)(eq - optarg));
            if (strcmp(eq + 1, "down") == 0) ov->down = 1;
            else ov->factor = atof(eq + 1);
            o->nover++;
            break;
        }
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if ((o->fabric_path != NULL) + (o->preset != NULL) + (o->from_fabric != NULL) +
            (o->comm != NULL) != 1) {
        fprintf(stderr, "chorus-sim: give one of --fabric FILE, --preset SPEC, --from-fabric "
                        "REPORT and --comm SPEC\n");
        usage(stderr);
        return 2;
    }
    if (o->minb == 0 || (o->maxb == 0 && o->maxb != 0) || !(o->factor > 1)) {
        fprintf(stderr, "chorus-sim: bad sizes or step factor\n");
        return 2;
    }
    if (o->maxb < o->minb) o->maxb = o->minb;
    o->all = strcmp(algo, "all") == 0;
    o->best = strcmp(algo, "best") == 0;
    o->tuner = strcmp(algo, "tuner") == 0;
    if (o->tuner) {
        o->algos[o->nalgos++] = CHORUS_ALGO_AUTO;
    } else if (o->all || o->best) {
        for (int k = 1; k < CHORUS_NUM_ALGOS; k++)
            if (k != CHORUS_ALGO_ARENA && chorus__algo_supports((chorus_algo_t)k, o->coll))
                o->algos[o->nalgos++] = k;
    } else {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", algo);
        for (char *t = strtok(buf, ","); t != NULL && o->nalgos < MAX_ALGOS; t = strtok(NULL, ",")) {
            int a = chorus__algo_parse(t);
            if (a <= 0 || a == CHORUS_ALGO_ARENA) {
                fprintf(stderr, "chorus-sim: unknown algorithm %s (the arena is not a schedule)\n", t);
                return 2;
            }
            o->algos[o->nalgos++] = a;
        }
    }
    return 0;
}

/* Sizes are rounded down to what splits over n ranks of esize elements. */
static uint64_t fit_size(uint64_t bytes, chorus_coll_t coll, int n, size_t esize)
{
    uint64_t unit = esize;
    if (coll == CHORUS_COLL_ALLGATHER || coll == CHORUS_COLL_REDUCE_SCATTER ||
        coll == CHORUS_COLL_ALLTOALL)
        unit *= (uint64_t)n;
    bytes -= bytes % unit;
    return bytes ? bytes : unit;
}

typedef struct {
    uint64_t bytes;
    int n, algo;
    int tuner;          /* the tuner picked algo (and chunk) */
    uint64_t chunk;     /* the tuner's chunk */
    double tuner_us;    /* what the tuner predicted (with its correction factor) */
    chorus_sim_result_t r;
} row_t;

/* The algorithm column: "ring", or "tuner=ring" for the tuner's pick. */
static const char *algo_label(const row_t *r, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s", r->tuner ? "tuner=" : "", chorus__algo_name((chorus_algo_t)r->algo));
    return buf;
}

/* The tuner's description of a communicator, "ranks=8,hosts=2,transport=tcp,cores=2": the
 * fabric its predictions run on (lib/tune/tune_sim.c). */
static chorus_status_t comm_desc(const char *spec, const chorus_tune_params_t *p,
                                 chorus_fab_desc_t *d)
{
    chorus_tune_topo_t t;
    char buf[256];
    int *host, *place;
    chorus_status_t st;

    memset(&t, 0, sizeof t);
    t.nranks = 2;
    t.nhosts = 1;
    t.local_kind = CHORUS_TUNE_SHM;
    t.cores = 2;
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *kv = strtok(buf, ","); kv != NULL; kv = strtok(NULL, ",")) {
        char *eq = strchr(kv, '=');
        if (eq == NULL) goto bad;
        *eq++ = '\0';
        if (strcmp(kv, "ranks") == 0) t.nranks = atoi(eq);
        else if (strcmp(kv, "hosts") == 0) t.nhosts = atoi(eq);
        else if (strcmp(kv, "cores") == 0) t.cores = atoi(eq);
        else if (strcmp(kv, "transport") == 0 && strcmp(eq, "shm") == 0) t.local_kind = CHORUS_TUNE_SHM;
        else if (strcmp(kv, "transport") == 0 && strcmp(eq, "tcp") == 0) t.local_kind = CHORUS_TUNE_TCP;
        else goto bad;
    }
    if (t.nranks < 1 || t.nhosts < 1 || t.nhosts > t.nranks || t.nranks % t.nhosts != 0 ||
        t.cores < 1)
        goto bad;
    host = malloc((size_t)t.nranks * sizeof *host);
    place = malloc((size_t)t.nranks * sizeof *place);
    if (host == NULL || place == NULL) {
        free(host);
        free(place);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "no memory");
    }
    /* The launcher's placement: ranks fill hosts in order. */
    for (int r = 0; r < t.nranks; r++) host[r] = r / (t.nranks / t.nhosts);
    t.host_of = host;
    t.nlocal = t.nranks / t.nhosts;
    st = chorus__tune_fabric_desc(p, &t, d, place);
    free(host);
    free(place);
    return st;
bad:
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "--comm %s: ranks=N,hosts=H (dividing N),transport=shm|tcp,cores=C", spec);
}

static void print_links(const row_t *row, int k)
{
    printf("# busiest links (%d of %d that carried data):\n", k < row->r.nlinks_top ? k : row->r.nlinks_top,
           row->r.nlinks_used);
    for (int i = 0; i < row->r.nlinks_top && i < k; i++)
        printf("#   %-40s %6.1f%% busy, %.3g MB\n", row->r.links[i].name,
               100 * row->r.links[i].util, row->r.links[i].bytes / 1e6);
}

static void print_path(const row_t *row)
{
    const chorus_sim_path_t *p = &row->r.path;
    const double t = row->r.time_s > 0 ? row->r.time_s : 1;

    printf("# critical path of %s, %llu B on %d ranks: %llu steps through %d ranks; "
           "network %.1f%%, latency %.1f%%, message software %.1f%%, reduce %.1f%%, copy "
           "%.1f%%\n",
           chorus__algo_name((chorus_algo_t)row->algo), (unsigned long long)row->bytes, row->n,
           (unsigned long long)p->steps, p->ranks, 100 * p->network_s / t,
           100 * p->latency_s / t, 100 * p->message_s / t, 100 * p->reduce_s / t,
           100 * p->copy_s / t);
}

static void print_stats(const row_t *row)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("# cost: %d ranks, %llu steps (%d distinct schedules), %llu messages, %llu events, "
           "%llu rate solves; arrays %.1f MB, peak RSS %.1f MB; build %.2f s, run %.2f s\n",
           row->n, (unsigned long long)row->r.steps, row->r.classes,
           (unsigned long long)row->r.messages, (unsigned long long)row->r.events,
           (unsigned long long)row->r.solves, row->r.mem_bytes / 1e6, ru.ru_maxrss / 1024.0,
           row->r.build_s, row->r.run_s);
}

/* A gnuplot single-quoted string: a quote inside is doubled. */
static void gp_str(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* busbw against ranks, one line per algorithm and size: PREFIX.dat (one gnuplot data
 * block per line), PREFIX.gp, and PREFIX.png when gnuplot runs. */
static int write_plot(const char *prefix, const row_t *rows, int nrows, chorus_fabric_t *fab)
{
    char dat[4096], gp[4096], png[4096];
    FILE *f;
    int nblocks = 0, status;
    pid_t pid;

    snprintf(dat, sizeof dat, "%s.dat", prefix);
    snprintf(gp, sizeof gp, "%s.gp", prefix);
    snprintf(png, sizeof png, "%s.png", prefix);
    f = fopen(dat, "w");
    if (f == NULL) {
        fprintf(stderr, "chorus-sim: %s: %s\n", dat, strerror(errno));
        return -1;
    }
    /* Blocks: every (algo, size) pair in order of appearance, rows by rank count. */
    for (int i = 0; i < nrows; i++) {
        int first = 1;
        for (int j = 0; j < i; j++)
            if (rows[j].algo == rows[i].algo && rows[j].bytes == rows[i].bytes) first = 0;
        if (!first) continue;
        fprintf(f, "%s# %s %llu B\n", nblocks++ ? "\n\n" : "",
                chorus__algo_name((chorus_algo_t)rows[i].algo), (unsigned long long)rows[i].bytes);
        for (int j = i; j < nrows; j++)
            if (rows[j].algo == rows[i].algo && rows[j].bytes == rows[i].bytes)
                fprintf(f, "%d %.6f\n", rows[j].n, rows[j].r.busbw_GBps);
    }
    fclose(f);
    f = fopen(gp, "w");
    if (f == NULL) {
        fprintf(stderr, "chorus-sim: %s: %s\n", gp, strerror(errno));
        return -1;
    }
    fprintf(f, "# Made by chorus-sim --plot; run `gnuplot %s` to redraw.\n"
               "set terminal pngcairo size 960,600\nset output ", gp);
    gp_str(f, png);
    fprintf(f, "\nset title ");
    gp_str(f, chorus__fabric_desc(fab)->name);
    fprintf(f, "\nset logscale x 2\nset xlabel 'ranks'\nset ylabel 'busbw (GB/s)'\n"
               "set key outside right\nset grid\nplot ");
    for (int b = 0, i = 0; i < nrows; i++) {
        int first = 1;
        char title[96];
        for (int j = 0; j < i; j++)
            if (rows[j].algo == rows[i].algo && rows[j].bytes == rows[i].bytes) first = 0;
        if (!first) continue;
        snprintf(title, sizeof title, "%s %llu B", chorus__algo_name((chorus_algo_t)rows[i].algo),
                 (unsigned long long)rows[i].bytes);
        fprintf(f, "%s", b ? ", \\\n     " : "");
        gp_str(f, dat);
        fprintf(f, " index %d using 1:2 with linespoints title ", b++);
        gp_str(f, title);
    }
    fprintf(f, "\n");
    fclose(f);
    pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, STDERR_FILENO);
        execlp("gnuplot", "gnuplot", gp, (char *)NULL);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        fprintf(stderr, "chorus-sim: skipped the plot image: gnuplot not found (data in %s, "
                        "script in %s)\n", dat, gp);
        return 0;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "chorus-sim: gnuplot failed on %s\n", gp);
        return -1;
    }
    fprintf(stderr, "chorus-sim: plot in %s\n", png);
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    chorus_tune_params_t tp;
    chorus_fab_desc_t d;
    chorus_fabric_t *fab = NULL;
    chorus_status_t st;
    int rc = parse_args(argc, argv, &o), counts[MAX_SCALE], ncounts;
    size_t esize;
    row_t *rows = NULL;
    int nrows = 0, caprows = 0;

    if (rc) return rc;
    chorus__tune_params_default(&tp);
    if (o.tune_file != NULL && chorus__tune_params_load(o.tune_file, &tp) != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-sim: %s\n", chorus_last_error());
        return 2;
    }
    st = o.preset        ? chorus__fab_desc_preset(o.preset, &d)
         : o.from_fabric ? chorus__fab_desc_from_fabric(o.from_fabric, &d)
         : o.comm        ? comm_desc(o.comm, &tp, &d)
                         : chorus__fab_desc_load(o.fabric_path, &d);
    if (st != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-sim: %s\n", chorus_last_error());
        return 2;
    }
    if (o.nover > 0) {
        chorus_fab_override_t *all = realloc(d.overrides, (size_t)(d.noverrides + o.nover) * sizeof *all);
        if (all == NULL) {
            fprintf(stderr, "chorus-sim: no memory\n");
            return 2;
        }
        memcpy(all + d.noverrides, o.over, (size_t)o.nover * sizeof *all);
        d.overrides = all;
        d.noverrides += o.nover;
    }
    if (o.describe) {
        rc = chorus__fab_desc_write(&d, stdout);
        chorus__fab_desc_free(&d);
        return rc ? 1 : 0;
    }
    st = chorus__fabric_build(&d, &fab);
    chorus__fab_desc_free(&d);
    if (st != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-sim: %s\n", chorus_last_error());
        return 2;
    }
    esize = chorus_dtype_size(o.dtype);
    if (o.nscale > 0) {
        ncounts = o.nscale;
        memcpy(counts, o.scale, sizeof(int) * (size_t)o.nscale);
    } else {
        ncounts = 1;
        counts[0] = o.nranks > 0 ? o.nranks : chorus__fabric_nranks(fab);
    }
    for (int ci = 0; ci < ncounts; ci++) {
        int n = counts[ci];
        for (uint64_t b = o.minb; b <= o.maxb; b = (uint64_t)ceil((double)b * o.factor)) {
            int best = -1;
            for (int ai = 0; ai < o.nalgos; ai++) {
                chorus_sim_args_t a;
                row_t row;
                memset(&a, 0, sizeof a);
                a.coll = o.coll;
                a.algo = (chorus_algo_t)o.algos[ai];
                a.bytes = fit_size(b, o.coll, n, esize);
                a.dtype = o.dtype;
                a.chunk_bytes = o.chunk;
                a.nranks = n;
                a.top_links = o.links;
                a.record = o.path || o.trace != NULL;
                a.trace = o.trace;
                memset(&row, 0, sizeof row);
                if (o.tuner) {
                    /* The tuner's choice for this size, then that algorithm and chunk run
                     * in full. */
                    chorus_tune_t *tune = NULL;
                    chorus_tune_choice_t ch;
                    st = chorus__tune_create_fabric(fab, n, &tp, &tune);
                    if (st != CHORUS_SUCCESS) {
                        fprintf(stderr, "chorus-sim: %s\n", chorus_last_error());
                        rc = 1;
                        continue;
                    }
                    ch = chorus__tune_choose(tune, o.coll, a.bytes, o.chunk);
                    chorus__tune_destroy(tune);
                    a.algo = ch.algo;
                    a.chunk_bytes = ch.chunk_bytes;
                    row.tuner = 1;
                    row.chunk = ch.chunk_bytes;
                    row.tuner_us = ch.us;
                }
                st = o.lockstep ? chorus__sim_lockstep(fab, &a, &row.r) : chorus__sim_run(fab, &a, &row.r);
                if (st == CHORUS_ERR_UNSUPPORTED) continue;
                if (st != CHORUS_SUCCESS) {
                    fprintf(stderr, "chorus-sim: %s: %s\n", chorus__algo_name(a.algo),
                            chorus_last_error());
                    rc = 1;
                    continue;
                }
                row.bytes = a.bytes;
                row.n = n;
                row.algo = a.algo;
                if (o.best) {
                    if (best >= 0 && rows[best].r.time_s <= row.r.time_s) {
                        free(row.r.links);
                        continue;
                    }
                    if (best >= 0) {
                        free(rows[best].r.links);
                        rows[best] = row;
                        continue;
                    }
                }
                if (nrows == caprows) {
                    caprows = caprows ? 2 * caprows : 64;
                    rows = realloc(rows, (size_t)caprows * sizeof *rows);
                    if (rows == NULL) {
                        fprintf(stderr, "chorus-sim: no memory\n");
                        return 1;
                    }
                }
                if (o.best) best = nrows;
                rows[nrows++] = row;
            }
            if (b > UINT64_MAX / 2) break;
        }
    }
    if (o.json) {
        printf("{\"fabric\": \"%s\", \"collective\": \"%s\", \"dtype\": \"%s\", \"results\": [",
               chorus__fabric_desc(fab)->name, chorus__coll_name(o.coll), chorus_dtype_name(o.dtype));
        for (int i = 0; i < nrows; i++) {
            const row_t *r = &rows[i];
            printf("%s\n  {\"bytes\": %llu, \"ranks\": %d, \"algo\": \"%s\", \"time_us\": %.4f, "
                   "\"algbw_GBps\": %.6f, \"busbw_GBps\": %.6f, \"steps\": %llu, \"events\": %llu, "
                   "\"classes\": %d, \"mem_bytes\": %zu, \"build_s\": %.4f, \"run_s\": %.4f",
                   i ? "," : "", (unsigned long long)r->bytes, r->n, chorus__algo_name((chorus_algo_t)r->algo),
                   r->r.time_s * 1e6, r->r.algbw_GBps, r->r.busbw_GBps,
                   (unsigned long long)r->r.steps, (unsigned long long)r->r.events, r->r.classes,
                   r->r.mem_bytes, r->r.build_s, r->r.run_s);
            if (r->tuner)
                printf(", \"tuner\": {\"chunk\": %llu, \"predicted_us\": %.4f}",
                       (unsigned long long)r->chunk, r->tuner_us);
            if (r->r.have_path)
                printf(", \"path\": {\"steps\": %llu, \"ranks\": %d, \"network_us\": %.4f, "
                       "\"latency_us\": %.4f, \"message_us\": %.4f, \"reduce_us\": %.4f, "
                       "\"copy_us\": %.4f}",
                       (unsigned long long)r->r.path.steps, r->r.path.ranks,
                       r->r.path.network_s * 1e6, r->r.path.latency_s * 1e6,
                       r->r.path.message_s * 1e6, r->r.path.reduce_s * 1e6,
                       r->r.path.copy_s * 1e6);
            printf("}");
        }
        printf("\n]}\n");
    } else {
        const chorus_fab_desc_t *fd = chorus__fabric_desc(fab);
        printf("# chorus-sim: %s on %s: %d hosts x %d ranks, %d NIC(s) of %g Gbit/s, %s %g Gbit/s "
               "per rank\n", chorus__coll_name(o.coll), fd->name, fd->hosts, fd->ranks_per_host,
               fd->nics, fd->nic_gbps, fd->intra_kind, fd->intra_gbps);
        printf("# %12s %6s %-13s %12s %12s %12s", "size(B)", "ranks", "algo", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)");
        if (o.nscale > 0) printf(" %10s", "efficiency");
        printf("\n");
        for (int i = 0; i < nrows; i++) {
            const row_t *r = &rows[i];
            char label[48];
            printf("  %12llu %6d %-13s %12.2f %12.3f %12.3f", (unsigned long long)r->bytes, r->n,
                   algo_label(r, label, sizeof label), r->r.time_s * 1e6, r->r.algbw_GBps,
                   r->r.busbw_GBps);
            if (o.nscale > 0) {
                /* Against the same algorithm and size at the first rank count. */
                double base = 0;
                for (int j = 0; j < nrows; j++)
                    if (rows[j].n == counts[0] && rows[j].algo == r->algo && rows[j].bytes == r->bytes)
                        base = rows[j].r.busbw_GBps;
                if (base > 0) printf(" %9.1f%%", 100 * r->r.busbw_GBps / base);
                else printf(" %10s", "-");
            }
            printf("\n");
        }
        if (nrows > 0 && o.links > 0) print_links(&rows[nrows - 1], o.links);
        if (nrows > 0 && o.stats) print_stats(&rows[nrows - 1]);
        for (int i = 0; o.path && i < nrows; i++) print_path(&rows[i]);
    }
    if (o.trace != NULL && nrows > 0)
        fprintf(stderr, "chorus-sim: trace of the last run (%s, %llu B, %d ranks) in %s\n",
                chorus__algo_name((chorus_algo_t)rows[nrows - 1].algo),
                (unsigned long long)rows[nrows - 1].bytes, rows[nrows - 1].n, o.trace);
    if (o.plot != NULL && write_plot(o.plot, rows, nrows, fab) != 0) rc = 1;
    for (int i = 0; i < nrows; i++) free(rows[i].r.links);
    free(rows);
    chorus__fabric_free(fab);
    return rc;
}
