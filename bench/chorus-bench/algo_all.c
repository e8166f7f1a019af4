/*
 * --algo all and `chorus-bench calibrate`: every algorithm side by side.
 *
 * Each algorithm (calibrate: each algorithm and pipeline chunk) gets its own communicator,
 * split from the launcher's with CHORUS_ALGO (and CHORUS_CHUNK_SIZE) set, plus one that
 * chooses for itself ("auto"). For each size, every variant is warmed up, then timed in
 * --rounds interleaved rounds, each round in a rotated order, and a variant's time is the
 * median of its rounds. Interleaving matters on a shared machine: a neighbour's burst
 * lasting a second slows whichever variant runs then, and timing one algorithm's whole
 * size range before the next (the first version of this mode) turned such bursts into
 * 1.3-2x differences between algorithms that were equally fast.
 *
 * The table per size shows each variant's median, busbw and the model's prediction; at the
 * end, the tuner's pick against the fastest forced variant (bench_print_picks). calibrate
 * then records each size's fastest forced variant with chorus_tune_record, which later
 * communicators of the same shape follow.
 *
 * --reproducible uses the same rounds with other variants: the default ("auto") and one
 * communicator per requested reproducibility level (chorus_comm_set_reproducible), each
 * level's median shown with its ratio to the default's.
 */
#include "bench.h"
#include "util/config.h"

#include <stdlib.h>
#include <string.h>

/* Chunk sizes calibrate tries for each pipelined algorithm. */
static const size_t calibrate_chunks[] = {128u << 10, 512u << 10, 2u << 20};
#define NCHUNKS (sizeof calibrate_chunks / sizeof calibrate_chunks[0])
#define MAX_VARIANTS (BENCH_NALGOS * NCHUNKS)
#define MAX_ROUNDS 15
#define MAX_SIZES 64

typedef struct {
    const char *algo;  /* bench_algo_names entry; "auto": the library chooses */
    size_t chunk;      /* CHORUS_CHUNK_SIZE of the comm; 0: left as it was */
    int level;         /* --reproducible: the comm's level (0: the default) */
    chorus_comm_t comm;
    int active;        /* this size: the algorithm runs it (no fallback to another) */
    row_t rounds[MAX_ROUNDS];
} variant_t;

/* What calibrate records for one size. */
typedef struct {
    size_t bytes;
    const char *algo;
    size_t chunk;
    double us;
} best_t;

typedef struct {
    variant_t v[MAX_VARIANTS];
    int n;
    best_t best[MAX_SIZES];
    int nbest;
} algo_all_t;

/* Sets (value non-NULL) or unsets an environment variable. */
static void set_env(const char *name, const char *value)
{
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

static char *dup_env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL ? strdup(v) : NULL;
}

/* --reproducible: the default and each requested level, on split communicators. */
static void make_levels(bench_t *b, algo_all_t *a)
{
    a->n = 0;
    for (int level = 0; level <= CHORUS_REPRO_EXACT; level++) {
        variant_t *v = &a->v[a->n];
        chorus_status_t status;
        if (level > 0 && !(b->opt.repro_levels & (1 << level))) continue;
        memset(v, 0, sizeof *v);
        v->algo = "auto";
        v->level = level;
        status = chorus_comm_split(b->world, 0, b->rank, &v->comm);
        if (status == CHORUS_SUCCESS) status = chorus_comm_set_reproducible(v->comm, level);
        if (status != CHORUS_SUCCESS) bench_fail(b, status, "chorus_comm_split", 0);
        a->n++;
    }
}

/* One communicator per variant, split from b->world with the variant's settings; the
 * environment is restored afterwards. */
static void make_variants(bench_t *b, algo_all_t *a)
{
    char *saved_algo = dup_env("CHORUS_ALGO"), *saved_chunk = dup_env("CHORUS_CHUNK_SIZE");
    char chunk_text[32];

    a->n = 0;
    for (int i = 0; i < BENCH_NALGOS; i++) {
        const char *name = bench_algo_names[i];
        /* auto chooses its own chunk, and the arena has its own (CHORUS_ARENA_CHUNK). */
        int chunked = b->opt.calibrate && i != 0 && strcmp(name, "arena") != 0;
        for (size_t k = 0; k < (chunked ? NCHUNKS : 1); k++) {
            variant_t *v = &a->v[a->n];
            chorus_status_t status;
            memset(v, 0, sizeof *v);
            v->algo = name;
            v->chunk = chunked ? calibrate_chunks[k] : 0;
            setenv("CHORUS_ALGO", name, 1);
            if (chunked) {
                snprintf(chunk_text, sizeof chunk_text, "%zu", v->chunk);
                setenv("CHORUS_CHUNK_SIZE", chunk_text, 1);
            } else {
                set_env("CHORUS_CHUNK_SIZE", saved_chunk);
            }
            chorus__config_reload();
            status = chorus_comm_split(b->world, 0, b->rank, &v->comm);
            if (status != CHORUS_SUCCESS) bench_fail(b, status, "chorus_comm_split", 0);
            a->n++;
        }
    }
    set_env("CHORUS_ALGO", saved_algo);
    set_env("CHORUS_CHUNK_SIZE", saved_chunk);
    chorus__config_reload();
    free(saved_algo);
    free(saved_chunk);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return a < c ? -1 : a > c;
}

/* The round whose time is the median (the lower middle one for an even count). */
static const row_t *median_round(const variant_t *v, int rounds)
{
    double t[MAX_ROUNDS];

    for (int r = 0; r < rounds; r++) t[r] = v->rounds[r].time_us;
    qsort(t, (size_t)rounds, sizeof t[0], cmp_double);
    for (int r = 0; r < rounds; r++)
        if (v->rounds[r].time_us == t[(rounds - 1) / 2]) return &v->rounds[r];
    return &v->rounds[0];
}

/* Iterations per measurement: one call's slowest-rank time (the same number on every
 * rank) against the share of --time-per-size of one round. */
static int measure_iters(bench_t *b, const test_t *t, const counts_t *c, variant_t *probe,
                         uint64_t shown)
{
    row_t row;
    double budget_us = b->opt.time_per_size * 1e6 / b->opt.rounds;
    int iters;

    if (b->opt.iters > 0) return b->opt.iters;
    b->comm = probe->comm;
    bench_row_init(b, t, c, 0, shown, 1, &row);
    bench_row_time(b, t, c, &row);
    if (row.time_us <= 0.0 || budget_us / row.time_us >= BENCH_ITERS_MAX) return BENCH_ITERS_MAX;
    iters = (int)(budget_us / row.time_us);
    return iters < 1 ? 1 : iters;
}

static void print_size(const bench_t *b, const algo_all_t *a, const test_t *t, const counts_t *c,
                       uint64_t shown, int iters)
{
    if (b->rank != 0) return;
    printf("#\n# %s %llu B (%zu x %s%s%s), out of place: median of %d interleaved rounds "
           "of %d call%s\n", bench_coll_name(t->coll), (unsigned long long)shown,
           c->param_count, chorus_dtype_name(t->dtype), bench_coll_reduces(t->coll) ? ", " : "",
           bench_coll_reduces(t->coll) ? chorus_op_name(t->op) : "", b->opt.rounds, iters,
           iters == 1 ? "" : "s");
    printf("#   %-20s %8s  %10s  %7s  %10s  %6s  %s\n", "algorithm", "chunk", "time(us)",
           "busbw", "pred(us)", "#wrong", "rounds (us)");
    for (int i = 0; i < a->n; i++) {
        const variant_t *v = &a->v[i];
        const row_t *m;
        char name[48], chunk[24];
        if (!v->active) continue;
        m = median_round(v, b->opt.rounds);
        if (v->level > 0)
            snprintf(name, sizeof name, "level %d (%.2fx)", v->level,
                     m->time_us / median_round(&a->v[0], b->opt.rounds)->time_us);
        else if (strcmp(v->algo, "auto") == 0)
            snprintf(name, sizeof name, "auto = %s", m->algo);
        else
            snprintf(name, sizeof name, "%s", v->algo);
        if (v->chunk != 0)
            snprintf(chunk, sizeof chunk, "%zuK", v->chunk >> 10);
        else
            snprintf(chunk, sizeof chunk, "%s", "default");
        printf("    %-20s %8s  %10.1f  %7.3f  %10.1f  %6lld ", name, chunk, m->time_us, m->busbw,
               m->predicted_us, (long long)m->wrong);
        for (int r = 0; r < b->opt.rounds; r++) printf(" %.1f", v->rounds[r].time_us);
        printf("\n");
    }
    fflush(stdout);
}

/* Every variant at one size: warm-up, interleaved rounds, checks, rows. */
static void time_size(bench_t *b, algo_all_t *a, const test_t *t, size_t size)
{
    size_t es = chorus_dtype_size(t->dtype);
    counts_t c = bench_counts(t->coll, size / es, t->nranks);
    uint64_t shown = (c.send_count > c.recv_count ? c.send_count : c.recv_count) * es;
    int probe = -1, iters, rounds = b->opt.rounds;
    best_t best = {c.param_count * es, NULL, 0, 0.0};
    row_t row;

    /* A forced algorithm that falls back to another for this call is not timed: the other
     * has its own variant. */
    for (int i = 0; i < a->n; i++) {
        variant_t *v = &a->v[i];
        b->comm = v->comm;
        b->pass_algo = v->algo;
        bench_row_init(b, t, &c, 0, shown, 1, &row);
        v->active = strcmp(v->algo, "auto") == 0 || strcmp(row.algo, v->algo) == 0;
        if (!v->active) continue;
        if (probe < 0) probe = i;
        bench_row_time(b, t, &c, &row); /* warm-up: connections, buffers, schedules */
    }
    iters = measure_iters(b, t, &c, &a->v[probe], shown);
    for (int r = 0; r < rounds; r++) {
        /* Each round starts further along the list, so that no variant always runs
         * right after the same neighbour or first after the warm-up. */
        for (int j = 0; j < a->n; j++) {
            variant_t *v = &a->v[(j + r * a->n / rounds) % a->n];
            if (!v->active) continue;
            b->comm = v->comm;
            b->pass_algo = v->algo;
            bench_row_init(b, t, &c, 0, shown, iters, &v->rounds[r]);
            bench_row_time(b, t, &c, &v->rounds[r]);
        }
    }
    for (int i = 0; i < a->n; i++) {
        variant_t *v = &a->v[i];
        row_t m;
        if (!v->active) continue;
        m = *median_round(v, rounds);
        b->comm = v->comm;
        b->pass_algo = v->algo;
        bench_row_check(b, t, &c, &m);
        for (int r = 0; r < rounds; r++) v->rounds[r].wrong = m.wrong;
        b->res.busbw_sum += m.busbw;
        b->res.busbw_count++;
        if (b->rank == 0 && bench_results_add(&b->res, &m) != 0)
            bench_fail(b, CHORUS_ERR_NO_MEMORY, "allocation", 0);
        if (m.pass != 0 && (best.algo == NULL || m.time_us < best.us)) {
            best.algo = v->algo;
            best.chunk = v->chunk;
            best.us = m.time_us;
        }
    }
    b->comm = b->world;
    b->pass_algo = NULL;
    print_size(b, a, t, &c, shown, iters);
    if (best.algo != NULL && a->nbest < MAX_SIZES) a->best[a->nbest++] = best;
}

/* calibrate, rank 0: the fastest forced variant of each size into the calibration file. */
static void record_best(bench_t *b, const algo_all_t *a, const test_t *t)
{
    int recorded = 0;

    if (b->rank != 0) return;
    printf("#\n# calibrate: the fastest of each size, recorded for %d-rank communicators of "
           "this shape\n", b->nranks);
    for (int i = 0; i < a->nbest; i++) {
        const best_t *x = &a->best[i];
        /* The arena has no pipeline chunk of the algorithms; record the default. */
        size_t chunk = x->chunk != 0 ? x->chunk : (size_t)512 << 10;
        chorus_status_t status =
            chorus_tune_record(b->world, bench_coll_name(t->coll), x->bytes, x->algo, chunk);
        if (status != CHORUS_SUCCESS) {
            fprintf(stderr, "chorus-bench: calibrate: %s\n", chorus_last_error());
            continue;
        }
        printf("  %12zu B  %-13s chunk %5zuK  %10.1f us\n", x->bytes, x->algo, chunk >> 10, x->us);
        recorded++;
    }
    printf("# %d rule%s written to CHORUS_TUNE_FILE or ~/.cache/chorus/tune-<hostname>.conf\n",
           recorded, recorded == 1 ? "" : "s");
    fflush(stdout);
}

void bench_run_algo_all(bench_t *b)
{
    algo_all_t *a = calloc(1, sizeof *a);
    int first = b->opt.all_colls ? 0 : (int)b->opt.coll;
    int last = b->opt.all_colls ? COLL_COUNT - 1 : (int)b->opt.coll;

    if (a == NULL) bench_fail(b, CHORUS_ERR_NO_MEMORY, "allocation", 0);
    if (b->opt.rounds > MAX_ROUNDS) b->opt.rounds = MAX_ROUNDS;
    snprintf(b->res.meta.algo_requested, sizeof(b->res.meta.algo_requested), "%s",
             b->opt.calibrate ? "calibrate" : b->opt.repro_levels ? "reproducible" : "all");
    if (b->opt.repro_levels) make_levels(b, a);
    else make_variants(b, a);
    for (int coll = first; coll <= last; coll++) {
        test_t t = {(coll_t)coll, b->opt.dtype, b->opt.op, b->opt.root, b->rank, b->nranks};
        /* Point-to-point exchanges, and the rooted and irregular collectives (one
         * algorithm each), have no algorithm to choose. */
        if (!bench_coll_has_algos(t.coll)) {
            if (!b->opt.all_colls && b->rank == 0)
                printf("#\n# %s: one algorithm, nothing to compare: skipped\n",
                       bench_coll_name(t.coll));
            continue;
        }
        a->nbest = 0;
        for (size_t size = b->opt.min_bytes; size <= b->opt.max_bytes;) {
            size_t next = b->opt.factor > 1 ? size * b->opt.factor : size + b->opt.step_bytes;
            time_size(b, a, &t, size);
            if (t.coll == COLL_BARRIER || next <= size) break;
            size = next;
        }
        if (b->opt.calibrate) record_best(b, a, &t);
    }
    if (!b->opt.repro_levels) bench_print_picks(b); /* the tuner's pick: not compared here */
    for (int i = 0; i < a->n; i++) chorus_comm_destroy(a->v[i].comm);
    free(a);
}
