/*
 * chorus-fabric: the program (the phases are listed in fabric.h). Every rank runs this;
 * the hosts' leaders and ranks measure (measure_*.c), everything is gathered to rank 0,
 * which analyses, reports and decides the exit status, then tells the others so that
 * every rank exits with the same status whichever the launcher looks at first.
 */
#include "fabric_int.h"
#include "util/config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    fabric_ctx_t ctx;
    fabric_opts_t opts;
    char (*names)[FABRIC_NAME_MAX]; /* nranks hostnames, then the hosts' in host order */
    const char **host_name;
    int *host_of, *host_leader, *host_nranks, *host_ranks;
    fabric_recs_t recs;
} fabric_run_t;

/* The launcher's rank, before the communicator exists: only rank 0 prints usage. */
static int launcher_rank(void)
{
    static const char *const vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                                       "PMI_RANK"};
    if (chorus__config_is_set("CHORUS_RANK")) return (int)chorus__config_int("CHORUS_RANK", 0);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]) != NULL) return atoi(getenv(vars[i]));
    return 0;
}

/* Every rank plans its tests from its own options, so ranks given different ones would
 * send messages that the others do not expect, and hang or mismeasure: rank 0's options
 * are compared with every rank's, and a difference stops the run on every rank (exit 2),
 * naming the rank and the option. */
static chorus_status_t check_same_options(fabric_ctx_t *ctx, const fabric_opts_t *o)
{
    enum { NOPT = 5 };
    static const char *const name[NOPT] = {"--expect-gbps", "--expect-intra-gbps",
                                           "--threshold", "--time-budget", "--no-coll"};
    double mine[NOPT] = {o->expect_gbps, o->expect_intra_gbps, o->threshold, o->time_budget_s,
                         o->no_coll};
    double *all = malloc((size_t)ctx->nranks * NOPT * sizeof *all);
    chorus_status_t status;

    if (all == NULL) return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    status = chorus_allgather(mine, all, NOPT, CHORUS_FLOAT64, ctx->world, NULL);
    if (status != CHORUS_SUCCESS) {
        free(all);
        return fabric_fail(ctx, status, "chorus_allgather of the options", -1);
    }
    for (int r = 1; r < ctx->nranks && status == CHORUS_SUCCESS; r++)
        for (int k = 0; k < NOPT && status == CHORUS_SUCCESS; k++) {
            if (all[r * NOPT + k] == all[k]) continue;
            snprintf(ctx->err, sizeof ctx->err, "rank %d was given %s %g where rank 0 was given "
                     "%g: every rank must be given the same options", r, name[k],
                     all[r * NOPT + k], all[k]);
            status = CHORUS_ERR_INVALID_ARGUMENT;
        }
    free(all);
    return status;
}

/* Hostnames of every rank; hosts numbered in the order of their first rank. */
static chorus_status_t identify_hosts(fabric_run_t *run)
{
    fabric_ctx_t *ctx = &run->ctx;
    int n = ctx->nranks, H = 0;
    char mine[FABRIC_NAME_MAX] = {0};
    const char *id = chorus__config_str("CHORUS_HOSTID");
    chorus_status_t status;

    if (id != NULL)
        snprintf(mine, sizeof mine, "%s", id);
    else if (gethostname(mine, sizeof mine - 1) != 0)
        snprintf(mine, sizeof mine, "unknown");
    run->names = calloc((size_t)n, sizeof *run->names);
    run->host_name = calloc((size_t)n, sizeof *run->host_name);
    run->host_of = calloc((size_t)n, sizeof(int));
    run->host_leader = calloc((size_t)n, sizeof(int));
    run->host_nranks = calloc((size_t)n, sizeof(int));
    run->host_ranks = calloc((size_t)n, sizeof(int));
    if (!run->names || !run->host_name || !run->host_of || !run->host_leader ||
        !run->host_nranks || !run->host_ranks)
        return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    status = chorus_allgather(mine, run->names, FABRIC_NAME_MAX, CHORUS_UINT8, ctx->world, NULL);
    if (status != CHORUS_SUCCESS)
        return fabric_fail(ctx, status, "chorus_allgather of the hostnames", -1);
    for (int r = 0; r < n; r++) {
        int h = 0;
        run->names[r][FABRIC_NAME_MAX - 1] = '\0';
        while (h < H && strcmp(run->host_name[h], run->names[r]) != 0) h++;
        if (h == H) {
            run->host_name[H] = run->names[r];
            run->host_leader[H++] = r;
        }
        run->host_of[r] = h;
        run->host_nranks[h]++;
    }
    ctx->nhosts = H;
    ctx->my_host = run->host_of[ctx->rank];
    for (int r = 0, k = 0; r < n; r++) {
        if (run->host_of[r] != ctx->my_host) continue;
        if (r == ctx->rank) ctx->local = k;
        run->host_ranks[k++] = r;
    }
    ctx->host_of = run->host_of;
    ctx->host_leader = run->host_leader;
    ctx->host_nranks = run->host_nranks;
    ctx->host_ranks = run->host_ranks;
    ctx->host_name = run->host_name;
    return CHORUS_SUCCESS;
}

/* The leaders' communicator and each host's. */
static chorus_status_t make_comms(fabric_ctx_t *ctx)
{
    int leader = ctx->host_leader[ctx->my_host] == ctx->rank;
    chorus_status_t status;

    status = chorus_comm_split(ctx->world, leader ? 0 : CHORUS_SPLIT_NOCOLOR, ctx->rank,
                               &ctx->leaders);
    if (status == CHORUS_SUCCESS)
        status = chorus_comm_split(ctx->world, ctx->my_host, ctx->rank, &ctx->host);
    if (status == CHORUS_SUCCESS && ctx->leaders != NULL)
        status = chorus_comm_set_timeout(ctx->leaders, ctx->timeout_s);
    if (status == CHORUS_SUCCESS) status = chorus_comm_set_timeout(ctx->host, ctx->timeout_s);
    return fabric_fail(ctx, status, "chorus_comm_split", -1);
}

/* Each host leader's setup JSON, sent to rank 0 (length first); a host whose setup cannot
 * be read gets none, with a warning, rather than stopping the measurement. */
static chorus_status_t gather_setup(fabric_ctx_t *ctx, fabric_host_t *hosts)
{
    chorus_status_t status = CHORUS_SUCCESS;

    ctx->phase = "setup";
    if (ctx->host_leader[ctx->my_host] == ctx->rank) {
        char *json = NULL;
        uint64_t len;
        if (fabric_setup_collect(&json) != CHORUS_SUCCESS) {
            fprintf(stderr, "chorus-fabric: rank %d (%s): setup not collected: %s\n", ctx->rank,
                    ctx->host_name[ctx->my_host], chorus_last_error());
            json = NULL;
        }
        if (ctx->rank == 0) {
            hosts[0].setup_json = json;
        } else {
            len = json != NULL ? strlen(json) : 0;
            status = fabric_fail(ctx, chorus_send(&len, 1, CHORUS_UINT64, 0, ctx->world, NULL),
                                 "chorus_send", 0);
            if (status == CHORUS_SUCCESS && len > 0)
                status = fabric_fail(ctx, chorus_send(json, len, CHORUS_UINT8, 0, ctx->world,
                                                      NULL), "chorus_send", 0);
            free(json);
        }
    }
    for (int h = 1; ctx->rank == 0 && h < ctx->nhosts && status == CHORUS_SUCCESS; h++) {
        int from = ctx->host_leader[h];
        uint64_t len = 0;
        status = fabric_fail(ctx, chorus_recv(&len, 1, CHORUS_UINT64, from, ctx->world, NULL),
                             "chorus_recv", from);
        if (status != CHORUS_SUCCESS || len == 0) continue;
        hosts[h].setup_json = malloc(len + 1);
        if (hosts[h].setup_json == NULL)
            return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
        status = fabric_fail(ctx, chorus_recv(hosts[h].setup_json, len, CHORUS_UINT8, from,
                                              ctx->world, NULL), "chorus_recv", from);
        hosts[h].setup_json[len] = '\0';
    }
    return status;
}

/* Every rank's records to rank 0 (*all_p, *nall_p there). */
static chorus_status_t gather_recs(fabric_ctx_t *ctx, const fabric_recs_t *mine,
                                   fabric_rec_t **all_p, int *nall_p)
{
    int n = ctx->nranks, total = 0;
    int32_t count = mine->n, *counts = calloc((size_t)n, sizeof *counts);
    fabric_rec_t *all = NULL;
    chorus_status_t status;

    ctx->phase = "gathering the figures";
    if (counts == NULL) return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    status = chorus_allgather(&count, counts, 1, CHORUS_INT32, ctx->world, NULL);
    if (status != CHORUS_SUCCESS) {
        free(counts);
        return fabric_fail(ctx, status, "chorus_allgather", -1);
    }
    if (ctx->rank != 0) {
        if (count > 0)
            status = fabric_fail(ctx, chorus_send(mine->v, (size_t)count * sizeof *mine->v,
                                                  CHORUS_UINT8, 0, ctx->world, NULL),
                                 "chorus_send", 0);
        free(counts);
        return status;
    }
    for (int r = 0; r < n; r++) total += counts[r];
    all = calloc((size_t)(total ? total : 1), sizeof *all);
    if (all == NULL) {
        free(counts);
        return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    }
    memcpy(all, mine->v, (size_t)count * sizeof *all);
    chorus_group_start();
    for (int r = 1, off = count; r < n; off += counts[r], r++)
        if (counts[r] > 0)
            chorus_recv(all + off, (size_t)counts[r] * sizeof *all, CHORUS_UINT8, r, ctx->world,
                        NULL);
    status = fabric_fail(ctx, chorus_group_end(), "receiving every rank's figures", -1);
    free(counts);
    if (status != CHORUS_SUCCESS) {
        free(all);
        return status;
    }
    *all_p = all;
    *nall_p = total;
    return CHORUS_SUCCESS;
}

static int cmp_coll(const void *x, const void *y)
{
    const fabric_coll_t *a = x, *b = y;
    if (a->host != b->host) return a->host < b->host ? -1 : 1;
    return (a->algo > b->algo) - (a->algo < b->algo);
}

static void set_pair(fabric_pair_t *p, const fabric_rec_t *r)
{
    p->gbps[0] = r->gbps[0];
    p->gbps[1] = r->gbps[1];
    p->bidir_gbps = r->bidir_gbps;
    p->lat_us = r->lat_us;
    p->bytes = r->bytes;
    p->reps = r->reps;
    p->retested = r->retested;
    p->first_gbps[0] = r->retested ? r->first_gbps[0] : -1;
    p->first_gbps[1] = r->retested ? r->first_gbps[1] : -1;
    p->retest_skipped = r->retest_skipped;
}

static void unmeasured_pair(fabric_pair_t *p, int a, int b, int host)
{
    *p = (fabric_pair_t){.a = a, .b = b, .host = host, .gbps = {-1, -1}, .bidir_gbps = -1,
                         .lat_us = -1, .first_gbps = {-1, -1}};
}

/* The pairs of res in their contract order, every one present (-1: not measured). */
static chorus_status_t build_pairs(fabric_run_t *run, const fabric_rec_t *all, int nall,
                                   fabric_result_t *res)
{
    const fabric_ctx_t *ctx = &run->ctx;
    int H = ctx->nhosts, k = 0;

    res->ninter = H * (H - 1) / 2;
    for (int h = 0; h < H; h++) res->nintra += ctx->host_nranks[h] * (ctx->host_nranks[h] - 1) / 2;
    res->inter = calloc((size_t)(res->ninter ? res->ninter : 1), sizeof *res->inter);
    res->intra = calloc((size_t)(res->nintra ? res->nintra : 1), sizeof *res->intra);
    if (res->inter == NULL || res->intra == NULL) return CHORUS_ERR_NO_MEMORY;
    for (int a = 0; a < H; a++)
        for (int b = a + 1; b < H; b++) unmeasured_pair(&res->inter[k++], a, b, -1);
    k = 0;
    for (int h = 0; h < H; h++)
        for (int a = 0; a < ctx->nranks; a++)
            for (int b = a + 1; b < ctx->nranks && ctx->host_of[a] == h; b++)
                if (ctx->host_of[b] == h) unmeasured_pair(&res->intra[k++], a, b, h);
    for (int i = 0; i < nall; i++) {
        const fabric_rec_t *r = &all[i];
        if (r->kind == FABRIC_REC_INTER && r->a >= 0 && r->a < r->b && r->b < H) {
            /* Pairs (a, b) are laid out row by row over a < b. */
            int idx = r->a * H - r->a * (r->a + 1) / 2 + (r->b - r->a - 1);
            set_pair(&res->inter[idx], r);
        } else if (r->kind == FABRIC_REC_INTRA) {
            for (int j = 0; j < res->nintra; j++)
                if (res->intra[j].a == r->a && res->intra[j].b == r->b)
                    set_pair(&res->intra[j], r);
        }
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t build_conc_coll(const fabric_rec_t *all, int nall, fabric_result_t *res)
{
    int H = res->nhosts;

    for (int i = 0; i < nall; i++) res->ncoll += all[i].kind == FABRIC_REC_COLL;
    res->coll = calloc((size_t)(res->ncoll ? res->ncoll : 1), sizeof *res->coll);
    if (res->coll == NULL) return CHORUS_ERR_NO_MEMORY;
    for (int i = 0, k = 0; i < nall; i++) {
        const fabric_rec_t *r = &all[i];
        fabric_coll_t *c = &res->coll[k];
        double n = r->nranks;
        if (r->kind != FABRIC_REC_COLL) continue;
        *c = (fabric_coll_t){.algo = (fabric_algo_t)r->algo, .host = r->host, .nranks = r->nranks,
                             .bytes = r->bytes, .time_us = r->time_us, .busbw_gbps = -1};
        if (r->time_us > 0)
            c->busbw_gbps = (double)r->bytes * 8 * 2 * (n - 1) / n / (r->time_us * 1e-6) * 1e-9;
        k++;
    }
    qsort(res->coll, (size_t)res->ncoll, sizeof *res->coll, cmp_coll);
    if (H < 3) return CHORUS_SUCCESS;
    res->conc.gbps = malloc((size_t)H * H * sizeof(double));
    res->conc.host_tx_gbps = malloc((size_t)H * sizeof(double));
    if (res->conc.gbps == NULL || res->conc.host_tx_gbps == NULL) return CHORUS_ERR_NO_MEMORY;
    for (int i = 0; i < H * H; i++) res->conc.gbps[i] = -1;
    for (int i = 0; i < nall; i++)
        if (all[i].kind == FABRIC_REC_CONC && all[i].a < H && all[i].b < H)
            res->conc.gbps[all[i].a * H + all[i].b] = all[i].gbps[0];
    for (int h = 0; h < H; h++) {
        double *row = malloc((size_t)H * sizeof *row);
        int n = 0;
        if (row == NULL) return CHORUS_ERR_NO_MEMORY;
        for (int d = 0; d < H; d++)
            if (d != h && res->conc.gbps[h * H + d] >= 0) row[n++] = res->conc.gbps[h * H + d];
        res->conc.host_tx_gbps[h] = fabric_median(row, n);
        free(row);
    }
    return CHORUS_SUCCESS;
}

/* Each host's CPU figures: the highest any of its ranks sampled (they read the same
 * counters over nearly the same window; the highest is the one that matters for blame). */
static void build_cpu(const fabric_rec_t *all, int nall, fabric_result_t *res)
{
    for (int h = 0; h < res->nhosts; h++)
        res->hosts[h].cpu_busy = res->hosts[h].cpu_softirq = -1;
    for (int i = 0; i < nall; i++) {
        const fabric_rec_t *r = &all[i];
        fabric_host_t *host;
        if (r->kind != FABRIC_REC_CPU || r->host < 0 || r->host >= res->nhosts) continue;
        host = &res->hosts[r->host];
        if (r->cpu_busy > host->cpu_busy) host->cpu_busy = r->cpu_busy;
        if (r->cpu_softirq > host->cpu_softirq) host->cpu_softirq = r->cpu_softirq;
    }
}

/* Rank 0: the records and the hosts become res. */
static chorus_status_t build_result(fabric_run_t *run, const fabric_plan_t *plan,
                                    const fabric_rec_t *all, int nall, fabric_result_t *res)
{
    fabric_ctx_t *ctx = &run->ctx;
    const char *tp = chorus__config_str("CHORUS_TRANSPORT");
    chorus_status_t status;

    res->nranks = ctx->nranks;
    res->nhosts = ctx->nhosts;
    for (int h = 0; h < ctx->nhosts; h++) {
        snprintf(res->hosts[h].name, sizeof res->hosts[h].name, "%s", ctx->host_name[h]);
        res->hosts[h].nranks = ctx->host_nranks[h];
        res->hosts[h].leader = ctx->host_leader[h];
    }
    res->host_of = malloc((size_t)ctx->nranks * sizeof(int));
    if (res->host_of == NULL) return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    memcpy(res->host_of, ctx->host_of, (size_t)ctx->nranks * sizeof(int));
    status = build_pairs(run, all, nall, res);
    if (status == CHORUS_SUCCESS) status = build_conc_coll(all, nall, res);
    build_cpu(all, nall, res);
    if (status != CHORUS_SUCCESS) return fabric_fail(ctx, status, "building the result", -1);
    res->budget_s = plan->budget_s;
    snprintf(res->transport, sizeof res->transport, "%s", tp != NULL ? tp : "auto");
    return CHORUS_SUCCESS;
}

/* This rank's figures of its host's CPU from `start` to now, as a record for rank 0; a
 * host whose /proc/stat cannot be read gets none (-1), and the run goes on. */
static chorus_status_t record_cpu(fabric_ctx_t *ctx, const fabric_cpu_sample_t *start,
                                  fabric_recs_t *out)
{
    fabric_rec_t rec = {.kind = FABRIC_REC_CPU, .a = ctx->rank, .b = -1, .host = ctx->my_host,
                        .algo = -1};
    fabric_cpu_sample_t end;

    fabric_cpu_sample(1, &end);
    fabric_cpu_fractions(start, &end, &rec.cpu_busy, &rec.cpu_softirq);
    return fabric_fail(ctx, fabric_recs_add(out, &rec), "malloc", -1);
}

static chorus_status_t measure(fabric_run_t *run, fabric_plan_t *plan)
{
    fabric_cpu_sample_t cpu_start;
    fabric_ctx_t *ctx = &run->ctx;
    fabric_budget_in_t in = {.budget_s = run->opts.time_budget_s, .nhosts = ctx->nhosts,
                             .nranks = ctx->nranks, .no_coll = run->opts.no_coll};
    double min_Bps = 0;
    chorus_status_t status;

    for (int h = 0; h < ctx->nhosts; h++)
        if (ctx->host_nranks[h] > in.max_host_ranks) in.max_host_ranks = ctx->host_nranks[h];
    fabric_progress(ctx, "%d ranks on %d hosts; probing", ctx->nranks, ctx->nhosts);
    status = fabric_probe(ctx, &in);
    if (status != CHORUS_SUCCESS) return status;
    fabric_budget_plan(&in, plan);
    if (ctx->rank == 0 && run->opts.verbose) fabric_budget_print(&in, plan, stderr);
    /* The CPU is sampled over the rounds that the verdict judges, from here to the end. */
    fabric_cpu_sample(0, &cpu_start);
    status = fabric_measure_inter(ctx, plan, &run->recs, &min_Bps);
    if (status == CHORUS_SUCCESS) status = fabric_measure_intra(ctx, plan, &run->recs);
    ctx->phase = "between phases";
    if (status == CHORUS_SUCCESS)
        status = fabric_fail(ctx, chorus_barrier(ctx->world), "chorus_barrier", -1);
    if (status == CHORUS_SUCCESS) status = fabric_measure_conc(ctx, plan, min_Bps, &run->recs);
    ctx->phase = "between phases";
    if (status == CHORUS_SUCCESS)
        status = fabric_fail(ctx, chorus_barrier(ctx->world), "chorus_barrier", -1);
    if (status == CHORUS_SUCCESS) status = fabric_measure_coll(ctx, plan, &run->recs);
    if (status == CHORUS_SUCCESS) status = record_cpu(ctx, &cpu_start, &run->recs);
    return status;
}

/* Rank 0: analysis and reports; the exit status. */
static int conclude(fabric_run_t *run, fabric_result_t *res)
{
    fabric_verdict_t v = {0};
    int code;

    if (fabric_analyze(res, &run->opts, &v) != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-fabric: analysis failed: %s\n", chorus_last_error());
        return FABRIC_EXIT_ERROR;
    }
    code = v.pass ? FABRIC_EXIT_PASS : FABRIC_EXIT_FAIL;
    if (run->opts.json_path != NULL &&
        fabric_report_json(res, &v, &run->opts, run->opts.json_path) != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-fabric: --json %s: %s\n", run->opts.json_path,
                chorus_last_error());
        code = FABRIC_EXIT_ERROR;
    }
    if (run->opts.html_dir != NULL &&
        fabric_report_html(res, &v, run->opts.html_dir) != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-fabric: --html %s: %s\n", run->opts.html_dir,
                chorus_last_error());
        code = FABRIC_EXIT_ERROR;
    }
    /* The verdict is the last line of the text report, after any error above. */
    fflush(stderr);
    fabric_report_text(res, &v, stdout);
    fflush(stdout);
    fabric_verdict_free(&v);
    return code;
}

static void run_free(fabric_run_t *run)
{
    chorus_comm_destroy(run->ctx.leaders);
    chorus_comm_destroy(run->ctx.host);
    free(run->names);
    free(run->host_name);
    free(run->host_of);
    free(run->host_leader);
    free(run->host_nranks);
    free(run->host_ranks);
    free(run->recs.v);
}

int main(int argc, char **argv)
{
    fabric_run_t run = {0};
    fabric_ctx_t *ctx = &run.ctx;
    fabric_result_t res = {0};
    fabric_plan_t plan;
    fabric_rec_t *all = NULL;
    int nall = 0, rc;
    int32_t code = FABRIC_EXIT_ERROR;
    chorus_status_t status;

    ctx->t0 = fabric_now();
    fabric_args_quiet(launcher_rank() != 0);
    rc = fabric_parse_args(argc, argv, &run.opts);
    if (rc != 0) return rc < 0 ? FABRIC_EXIT_PASS : FABRIC_EXIT_ERROR;
    ctx->opts = &run.opts;
    ctx->phase = "init";
    ctx->timeout_s = run.opts.time_budget_s + 10;
    status = chorus_comm_init_env(&ctx->world);
    if (status != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-fabric: chorus_comm_init_env failed: %s\n", chorus_last_error());
        fprintf(stderr, "chorus-fabric: ERROR: the test could not run\n");
        return FABRIC_EXIT_ERROR;
    }
    chorus_comm_rank(ctx->world, &ctx->rank);
    chorus_comm_size(ctx->world, &ctx->nranks);
    /* Every wait is bounded: a peer that stops answering ends the run at this deadline. */
    status = chorus_comm_set_timeout(ctx->world, ctx->timeout_s);
    if (status == CHORUS_SUCCESS) status = check_same_options(ctx, &run.opts);
    if (status == CHORUS_SUCCESS) status = identify_hosts(&run);
    if (status == CHORUS_SUCCESS) status = make_comms(ctx);
    if (status == CHORUS_SUCCESS && ctx->rank == 0) {
        res.hosts = calloc((size_t)ctx->nhosts, sizeof *res.hosts);
        if (res.hosts == NULL) status = fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    }
    if (status == CHORUS_SUCCESS) status = gather_setup(ctx, res.hosts);
    if (status == CHORUS_SUCCESS) status = measure(&run, &plan);
    if (status == CHORUS_SUCCESS) status = gather_recs(ctx, &run.recs, &all, &nall);
    if (status == CHORUS_SUCCESS && ctx->rank == 0) {
        status = build_result(&run, &plan, all, nall, &res);
        if (status == CHORUS_SUCCESS) {
            res.elapsed_s = fabric_now() - ctx->t0;
            code = conclude(&run, &res);
        }
    }
    ctx->phase = "sharing the exit status";
    if (status == CHORUS_SUCCESS)
        status = fabric_fail(ctx, chorus_broadcast(&code, &code, 1, CHORUS_INT32, 0, ctx->world,
                                                   NULL), "chorus_broadcast", 0);
    if (status != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-fabric: %s\n", ctx->err[0] ? ctx->err : "failed");
        fprintf(stderr, "chorus-fabric: ERROR: the test could not run\n");
        code = FABRIC_EXIT_ERROR;
    }
    free(all);
    if (ctx->rank == 0) res.nhosts = ctx->nhosts;
    fabric_result_free(&res);
    run_free(&run);
    chorus_comm_destroy(ctx->world);
    return code;
}
