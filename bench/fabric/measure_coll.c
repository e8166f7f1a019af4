/*
 * Phase 6: allreduce with ring and with tree, over the whole job and then over each host
 * with two ranks or more (hosts at once). Each algorithm has its own communicators, split
 * from the job's with CHORUS_ALGO set, as chorus-bench --algo all does, so that the
 * library cannot pick another. A warm-up call, timed, tells how many calls fit the slot
 * (the slowest rank's time decides, so that every rank runs the same count); each timed
 * call starts after a barrier, and the figure is the slowest rank's median.
 */
#include "fabric_int.h"
#include "util/config.h"

#include <stdlib.h>
#include <string.h>

static const char *const algo_env[FABRIC_NALGOS] = {"ring", "tree"};

/* comm[a] for each algorithm: split of the world by color (CHORUS_SPLIT_NOCOLOR: none). */
static chorus_status_t split_algos(fabric_ctx_t *ctx, int color, chorus_comm_t comm[])
{
    const char *v = getenv("CHORUS_ALGO");
    char *saved = v != NULL ? strdup(v) : NULL;
    chorus_status_t status = CHORUS_SUCCESS;

    for (int a = 0; a < FABRIC_NALGOS && status == CHORUS_SUCCESS; a++) {
        setenv("CHORUS_ALGO", algo_env[a], 1);
        chorus__config_reload();
        status = chorus_comm_split(ctx->world, color, ctx->rank, &comm[a]);
        if (status == CHORUS_SUCCESS && comm[a] != NULL)
            status = chorus_comm_set_timeout(comm[a], ctx->timeout_s);
        if (status != CHORUS_SUCCESS) fabric_fail(ctx, status, "chorus_comm_split", -1);
    }
    if (saved != NULL)
        setenv("CHORUS_ALGO", saved, 1);
    else
        unsetenv("CHORUS_ALGO");
    chorus__config_reload();
    free(saved);
    return status;
}

/* Times allreduces of bytes on comm within slot_s; every rank of comm gets *us_p. */
static chorus_status_t time_allreduce(fabric_ctx_t *ctx, chorus_comm_t comm, uint64_t bytes,
                                      double slot_s, double *us_p, int *reps_p)
{
    size_t count = bytes / sizeof(float);
    float *buf = calloc(count ? count : 1, sizeof(float));
    double warm, med, *t = NULL;
    chorus_status_t status;
    int reps = 0;

    if (buf == NULL) return fabric_fail(ctx, CHORUS_ERR_NO_MEMORY, "malloc", -1);
    status = chorus_barrier(comm);
    warm = fabric_now();
    if (status == CHORUS_SUCCESS)
        status = chorus_allreduce(buf, buf, count, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    warm = fabric_now() - warm;
    if (status == CHORUS_SUCCESS)
        status = chorus_allreduce(&warm, &warm, 1, CHORUS_FLOAT64, CHORUS_MAX, comm, NULL);
    if (status == CHORUS_SUCCESS) {
        reps = fabric_budget_coll_reps(slot_s, warm);
        t = malloc((size_t)reps * sizeof *t);
        if (t == NULL) status = CHORUS_ERR_NO_MEMORY;
    }
    for (int i = 0; i < reps && status == CHORUS_SUCCESS; i++) {
        status = chorus_barrier(comm);
        t[i] = fabric_now();
        if (status == CHORUS_SUCCESS)
            status = chorus_allreduce(buf, buf, count, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
        t[i] = fabric_now() - t[i];
    }
    if (status == CHORUS_SUCCESS) {
        med = fabric_median(t, reps);
        status = chorus_allreduce(&med, &med, 1, CHORUS_FLOAT64, CHORUS_MAX, comm, NULL);
    }
    free(t);
    free(buf);
    if (status != CHORUS_SUCCESS) return fabric_fail(ctx, status, "chorus_allreduce", -1);
    *us_p = med * 1e6;
    *reps_p = reps;
    return CHORUS_SUCCESS;
}

static chorus_status_t run_algos(fabric_ctx_t *ctx, chorus_comm_t comm[], int host, int keeper,
                                 uint64_t bytes, double slot_s, fabric_recs_t *out)
{
    for (int a = 0; a < FABRIC_NALGOS; a++) {
        fabric_rec_t rec = {.kind = FABRIC_REC_COLL, .a = -1, .b = -1, .host = host,
                            .algo = a, .bytes = bytes};
        chorus_status_t status;
        double us = -1;
        int n = 0, reps = 0;

        chorus_comm_size(comm[a], &n);
        fabric_progress(ctx, "allreduce %s over %s: %llu bytes", algo_env[a],
                        host < 0 ? "the whole job" : "each host", (unsigned long long)bytes);
        status = time_allreduce(ctx, comm[a], bytes, slot_s, &us, &reps);
        if (status != CHORUS_SUCCESS) return status;
        if (ctx->rank != keeper) continue;
        rec.nranks = n;
        rec.reps = reps;
        rec.time_us = us;
        rec.gbps[0] = rec.gbps[1] = rec.bidir_gbps = rec.lat_us = -1;
        status = fabric_recs_add(out, &rec);
        if (status != CHORUS_SUCCESS) return fabric_fail(ctx, status, "malloc", -1);
    }
    return CHORUS_SUCCESS;
}

chorus_status_t fabric_measure_coll(fabric_ctx_t *ctx, const fabric_plan_t *plan,
                                    fabric_recs_t *out)
{
    chorus_comm_t whole[FABRIC_NALGOS] = {NULL}, host[FABRIC_NALGOS] = {NULL};
    int per_host = plan->coll_host_slot_s > 0;
    int mine = per_host && ctx->host_nranks[ctx->my_host] >= 2;
    chorus_status_t status;

    ctx->phase = "allreduce";
    if (plan->coll_slot_s <= 0) return CHORUS_SUCCESS;
    status = split_algos(ctx, 0, whole);
    if (status == CHORUS_SUCCESS && per_host)
        status = split_algos(ctx, mine ? ctx->my_host : CHORUS_SPLIT_NOCOLOR, host);
    if (status == CHORUS_SUCCESS)
        status = run_algos(ctx, whole, -1, 0, plan->coll_bytes, plan->coll_slot_s, out);
    if (status == CHORUS_SUCCESS && mine)
        status = run_algos(ctx, host, ctx->my_host, ctx->host_leader[ctx->my_host],
                           plan->coll_host_bytes, plan->coll_host_slot_s, out);
    for (int a = 0; a < FABRIC_NALGOS; a++) {
        chorus_comm_destroy(whole[a]);
        chorus_comm_destroy(host[a]);
    }
    return status;
}
