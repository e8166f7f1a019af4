/*
 * The tuner of a communicator: where its parameters come from, and the per-(collective,
 * size class) cache of decisions that makes a call cost no model evaluation after the first
 * of its class.
 *
 * Every rank must pick the same algorithm, or the collective hangs. So the parameters are
 * agreed at creation (every rank adopts rank 0's, and the smallest core count), and the
 * prediction depends only on what all ranks share (tune_sim.c simulates all of them).
 */
#include "tune/tune.h"

#include "arena/arena.h"
#include "core/comm.h"
#include "core/gpu_coll.h"

#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the quick measurement gives on the development machine, so that another machine's
 * copy and reduce rates scale the built-in defaults instead of replacing fitted values. */
#define TUNE_REF_COPY_NS 0.024
#define TUNE_REF_REDUCE_NS 0.065

typedef struct {
    int valid;
    uint64_t chunk_arg; /* the chunk_bytes the decision was made for (0: tuned) */
    chorus_tune_choice_t choice;
} tune_entry_t;

struct chorus_tune {
    chorus_tune_params_t params;
    chorus_tune_topo_t topo;
    int *host_of; /* the topology's copy */
    chorus_fabric_t *fab; /* a described fabric to predict on instead (not owned), or NULL */
    int corr_row; /* 1 when any pair of ranks talks over tcp */
    unsigned evaluations;
    tune_entry_t cache[CHORUS_NUM_COLLS][CHORUS_TUNE_NCLASSES];
};

static const uint64_t tune_chunks[] = {64u << 10, 256u << 10, 1u << 20, 4u << 20};
#define TUNE_NCHUNKS (sizeof tune_chunks / sizeof tune_chunks[0])

chorus_status_t chorus__tune_create_topo(const chorus_tune_topo_t *topo,
                                         const chorus_tune_params_t *params,
                                         chorus_tune_t **tune_p)
{
    chorus_tune_t *t;
    int nh = topo->nhosts > 0 ? topo->nhosts : 1;

    if (topo->nranks < 1 || topo->rank < 0 || topo->rank >= topo->nranks)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: rank %d of %d", topo->rank,
                             topo->nranks);
    t = calloc(1, sizeof *t);
    if (t == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory");
    t->params = *params;
    t->topo = *topo;
    t->topo.nhosts = nh;
    if (t->topo.cores < 1) t->topo.cores = params->cores > 0 ? params->cores : 1;
    if (t->topo.nlocal < 1) t->topo.nlocal = 1;
    if (topo->host_of != NULL) {
        t->host_of = malloc((size_t)topo->nranks * sizeof *t->host_of);
        if (t->host_of == NULL) {
            free(t);
            return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory");
        }
        memcpy(t->host_of, topo->host_of, (size_t)topo->nranks * sizeof *t->host_of);
    }
    t->topo.host_of = t->host_of;
    t->corr_row = nh > 1 || t->topo.local_kind == CHORUS_TUNE_TCP;
    *tune_p = t;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__tune_create_fabric(chorus_fabric_t *fab, int nranks,
                                           const chorus_tune_params_t *params,
                                           chorus_tune_t **tune_p)
{
    chorus_tune_topo_t topo;
    const chorus_fab_desc_t *d = chorus__fabric_desc(fab);
    int *host;
    chorus_status_t st;

    if (nranks < 1 || nranks > chorus__fabric_nranks(fab))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: %d ranks on a fabric of %d",
                             nranks, chorus__fabric_nranks(fab));
    host = malloc((size_t)nranks * sizeof *host);
    if (host == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory");
    memset(&topo, 0, sizeof topo);
    topo.nranks = nranks;
    for (int r = 0; r < nranks; r++) {
        host[r] = chorus__fabric_host_of(fab, r);
        if (host[r] + 1 > topo.nhosts) topo.nhosts = host[r] + 1;
    }
    topo.host_of = host;
    topo.local_kind = CHORUS_TUNE_SHM;
    topo.nlocal = nranks < d->ranks_per_host ? nranks : d->ranks_per_host;
    topo.cores = d->cores_per_host > 0 ? d->cores_per_host : topo.nlocal;
    st = chorus__tune_create_topo(&topo, params, tune_p);
    free(host);
    if (st == CHORUS_SUCCESS) (*tune_p)->fab = fab;
    return st;
}

void chorus__tune_destroy(chorus_tune_t *tune)
{
    if (tune == NULL) return;
    free(tune->host_of);
    free(tune);
}

unsigned chorus__tune_evaluations(const chorus_tune_t *tune)
{
    return tune->evaluations;
}

const chorus_tune_params_t *chorus__tune_params(const chorus_tune_t *tune)
{
    return &tune->params;
}

/* Cores this process may run on. */
static int tune_cores(void)
{
    cpu_set_t set;
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    return n > 0 ? (int)n : 1;
}

/* This rank's parameters: the calibration file (its numbers, and its rules for this
 * communicator's shape), else defaults scaled by a quick measurement of this machine's
 * copy and reduce rates. */
static void tune_local_params(int rank, const char *scope, chorus_tune_params_t *p)
{
    char path[512];
    chorus_tune_params_t m;
    double s;

    chorus__tune_params_default(p);
    snprintf(p->rule_scope, sizeof p->rule_scope, "%s", scope);
    chorus__tune_file_path(path, sizeof path);
    if (access(path, R_OK) == 0) {
        if (chorus__tune_params_load(path, p) == CHORUS_SUCCESS) {
            CHORUS_INFO("tune", "rank %d: parameters and %s rules from %s", rank, scope, path);
            if (p->from_file) return;
        } else {
            CHORUS_WARN("tune", "rank %d: ignoring %s: %s", rank, path, chorus_last_error());
            chorus__tune_params_default(p);
        }
    }
    if (chorus__config_int("CHORUS_TUNE_MEASURE", 1) == 0) return;
    m = *p;
    chorus__tune_params_measure(&m);
    /* Scale, do not replace: the defaults are fitted effective values, the measurement a
     * cache-resident rate. The clamp keeps a preempted measurement from distorting it. */
    s = m.copy_ns / TUNE_REF_COPY_NS;
    s = s < 0.5 ? 0.5 : s > 2.0 ? 2.0 : s;
    p->copy_ns *= s;
    p->send_ns[CHORUS_TUNE_SHM] *= s;
    p->recv_ns[CHORUS_TUNE_SHM] *= s;
    s = m.reduce_ns / TUNE_REF_REDUCE_NS;
    p->reduce_ns *= s < 0.5 ? 0.5 : s > 2.0 ? 2.0 : s;
    p->raw_copy_ns = m.copy_ns;
    p->raw_reduce_ns = m.reduce_ns;
    CHORUS_INFO("tune", "rank %d: measured copy %.3f ns/B, reduce %.3f ns/B", rank, m.copy_ns,
                m.reduce_ns);
}

/* Every rank adopts rank 0's parameters and the smallest core count, so that all make
 * the same choices. Collective over the comm's bootstrap. */
static chorus_status_t tune_agree(chorus_comm_t comm, chorus_tune_params_t *p, int *cores_p)
{
    typedef struct {
        chorus_tune_params_t params;
        int32_t cores;
    } rec_t;
    rec_t *all = calloc((size_t)comm->nranks, sizeof *all);
    chorus_status_t status;
    int cores = *cores_p;

    if (all == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: tune: no memory",
                                          comm->rank);
    all[comm->rank].params = *p;
    all[comm->rank].cores = *cores_p;
    status = chorus__bootstrap_allgather(comm->bs, all, sizeof *all);
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "rank %d: tune: agreeing on the model", comm->rank);
        goto out;
    }
    for (int r = 0; r < comm->nranks; r++)
        if (all[r].cores < cores) cores = all[r].cores;
    *p = all[0].params;
    *cores_p = cores;
out:
    free(all);
    return status;
}

/* What same-host peers use (every rank of a single-rank comm: self). */
static int tune_local_kind(const struct chorus_comm *comm)
{
    int kind = comm->nranks > 1 ? CHORUS_TUNE_SHM : CHORUS_TUNE_SELF;

    for (int q = 0; q < comm->nranks; q++)
        if (q != comm->rank && comm->host_of[q] == comm->host_of[comm->rank])
            /* ucx and ib forced between same-host ranks cost like a network transport,
             * not like shared memory: tcp is the nearest model the tuner has. */
            kind = comm->peer_kind[q] == CHORUS_PEER_SHM ? CHORUS_TUNE_SHM : CHORUS_TUNE_TCP;
    return kind;
}

chorus_status_t chorus__tune_create(struct chorus_comm *comm, chorus_tune_t **tune_p)
{
    char scope[32];
    chorus_tune_params_t p;
    chorus_tune_topo_t topo;
    chorus_status_t status;
    int *count, cores;

    /* Every rank reads the same environment, so all or none take part in the agreement. */
    if (chorus__config_int("CHORUS_TUNE", 1) == 0) {
        *tune_p = NULL;
        return CHORUS_SUCCESS;
    }
    /* The built-in parameters were fitted on one host; across hosts they know nothing of
     * the network (measured: on 4 emulated hosts with 200 Mbit links the model's pick
     * reached 0.72 of the link where the ring reaches 0.92). Until a calibration file
     * describes the network, multi-host comms keep the size thresholds. nhosts and the
     * environment are the same on every rank, so all ranks decide alike. */
    if (comm->nhosts > 1 && !chorus__config_is_set("CHORUS_TUNE_FILE")) {
        CHORUS_INFO("tune", "rank %d: %d hosts and no CHORUS_TUNE_FILE: size thresholds",
                    comm->rank, comm->nhosts);
        *tune_p = NULL;
        return CHORUS_SUCCESS;
    }
    memset(&topo, 0, sizeof topo);
    topo.rank = comm->rank;
    topo.nranks = comm->nranks;
    topo.nhosts = comm->nhosts;
    topo.host_of = comm->host_of;
    topo.local_kind = tune_local_kind(comm);
    /* The busiest host sets the pace. */
    count = calloc((size_t)(comm->nhosts > 0 ? comm->nhosts : 1), sizeof *count);
    if (count == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: tune: no memory", comm->rank);
    for (int q = 0; q < comm->nranks; q++)
        if (++count[comm->host_of[q]] > topo.nlocal) topo.nlocal = count[comm->host_of[q]];
    free(count);
    chorus__tune_scope_format(scope, sizeof scope, topo.local_kind, comm->nranks,
                              comm->nhosts > 0 ? comm->nhosts : 1);
    tune_local_params(comm->rank, scope, &p);
    cores = p.cores > 0 ? p.cores : tune_cores();
    if (comm->nranks > 1) {
        status = tune_agree(comm, &p, &cores);
        if (status != CHORUS_SUCCESS) return status;
    }
    topo.cores = cores;
    if (comm->arena != NULL && chorus__arena_supports(comm->arena, CHORUS_COLL_ALLREDUCE)) {
        topo.has_arena = 1;
        topo.arena_flat_max = chorus__arena_flat_max(comm->arena);
        topo.arena_chunk_bytes = chorus__arena_chunk_bytes(comm->arena);
    }
    return chorus__tune_create_topo(&topo, &p, tune_p);
}

chorus_status_t chorus__tune_predict(chorus_tune_t *tune, chorus_coll_t coll, chorus_algo_t algo,
                                     uint64_t count, chorus_dtype_t dtype, uint64_t chunk_bytes,
                                     double *us_p)
{
    return chorus__tune_predict_buffers(tune, coll, algo, count, dtype, chunk_bytes, 0, us_p);
}

chorus_status_t chorus__tune_predict_buffers(chorus_tune_t *tune, chorus_coll_t coll,
                                             chorus_algo_t algo, uint64_t count,
                                             chorus_dtype_t dtype, uint64_t chunk_bytes,
                                             unsigned how, double *us_p)
{
    double us;
    chorus_status_t status;

    if ((int)algo <= CHORUS_ALGO_AUTO || algo >= CHORUS_NUM_ALGOS)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: no algorithm %d", (int)algo);
    if (tune->fab != NULL)
        status = algo == CHORUS_ALGO_ARENA
                     ? CHORUS_ERR_UNSUPPORTED
                     : chorus__tune_simulate_fabric(tune->fab, NULL, tune->topo.nranks, coll,
                                                    algo, count, dtype, chunk_bytes, &us);
    else
        status = chorus__tune_simulate(&tune->params, &tune->topo, coll, algo, count, dtype,
                                       chunk_bytes, how, &us);
    if (status != CHORUS_SUCCESS) return status;
    *us_p = us * tune->params.corr[tune->corr_row][algo];
    return CHORUS_SUCCESS;
}

/* The choice of old, when the model has nothing to say. */
static chorus_algo_t tune_fallback(chorus_coll_t coll, uint64_t bytes)
{
    int small = bytes <= ((uint64_t)64 << 10);

    switch (coll) {
    case CHORUS_COLL_ALLREDUCE: return small ? CHORUS_ALGO_RD : CHORUS_ALGO_RING;
    case CHORUS_COLL_BROADCAST:
    case CHORUS_COLL_REDUCE: return small ? CHORUS_ALGO_TREE : CHORUS_ALGO_RING;
    case CHORUS_COLL_ALLTOALL: return CHORUS_ALGO_PAIRWISE;
    case CHORUS_COLL_BARRIER: return CHORUS_ALGO_DISSEMINATION;
    default: return CHORUS_ALGO_RING;
    }
}

/* Evaluates every candidate of a class; logs them with CHORUS_DEBUG=info. */
static chorus_tune_choice_t tune_evaluate(chorus_tune_t *tune, chorus_coll_t coll,
                                          uint64_t bytes, uint64_t chunk_arg)
{
    chorus_tune_choice_t best = {tune_fallback(coll, bytes), chunk_arg, -1.0};
    char line[1024];
    size_t len = 0;
    int info = CHORUS_LOG_ENABLED(CHORUS_LOG_INFO);
    /* The selector knows bytes, not the dtype: float32 elements when they fit (the common
     * case, and the reduce rate of the other types differs little), else bytes. */
    chorus_dtype_t dtype = bytes % 4 == 0 ? CHORUS_FLOAT32 : CHORUS_UINT8;
    uint64_t count = bytes / chorus_dtype_size(dtype);

    line[0] = '\0';
    for (int a = CHORUS_ALGO_AUTO + 1; a < CHORUS_NUM_ALGOS; a++) {
        double a_best = -1.0;
        /* The order-fixed schedule serves reproducible calls, which do not ask the tuner. */
        if (a == CHORUS_ALGO_DIRECT) continue;
        uint64_t a_chunk = 0;
        for (size_t c = 0; c < (chunk_arg ? 1 : TUNE_NCHUNKS); c++) {
            uint64_t chunk = chunk_arg ? chunk_arg : tune_chunks[c];
            double us;
            /* A chunk at least as large as the message gives the same schedule as the
             * next larger one: evaluate the first such candidate only. */
            if (!chunk_arg && c > 0 && tune_chunks[c - 1] >= bytes) break;
            if (chorus__tune_predict(tune, coll, (chorus_algo_t)a, count, dtype, chunk, &us) !=
                CHORUS_SUCCESS) {
                chorus__error_clear();
                break;
            }
            if (a_best < 0.0 || us < a_best) {
                a_best = us;
                a_chunk = chunk;
            }
        }
        if (a_best < 0.0) continue;
        if (best.us < 0.0 || a_best < best.us) {
            best.algo = (chorus_algo_t)a;
            best.chunk_bytes = a_chunk;
            best.us = a_best;
        }
        if (info && len < sizeof line - 64)
            len += (size_t)snprintf(line + len, sizeof line - len, " %s %.1f us (chunk %lluK);",
                                    chorus__algo_name((chorus_algo_t)a), a_best,
                                    (unsigned long long)(a_chunk >> 10));
    }
    if (info)
        CHORUS_INFO("tune", "%s of %llu bytes on %d ranks: %s predicted%s",
                    chorus__coll_name(coll), (unsigned long long)bytes, tune->topo.nranks,
                    best.us >= 0.0 ? chorus__algo_name(best.algo) : "no model,", line);
    if (best.chunk_bytes == 0) best.chunk_bytes = tune_chunks[TUNE_NCHUNKS / 2];
    return best;
}

/* The calibration file's rule for this class, if there is one this comm can run. */
static int tune_rule(chorus_tune_t *tune, chorus_coll_t coll, uint64_t bytes,
                     uint64_t chunk_arg, chorus_tune_choice_t *choice_p)
{
    chorus_dtype_t dtype = bytes % 4 == 0 ? CHORUS_FLOAT32 : CHORUS_UINT8;
    chorus_algo_t algo;
    uint64_t chunk;
    double us;

    if (!chorus__tune_rule_find(&tune->params, coll, bytes, &algo, &chunk)) return 0;
    if (chunk_arg != 0) chunk = chunk_arg;
    if (chorus__tune_predict(tune, coll, algo, bytes / chorus_dtype_size(dtype), dtype, chunk,
                             &us) != CHORUS_SUCCESS) {
        CHORUS_WARN("tune", "%s of %llu bytes: the calibrated %s does not run here; using "
                    "the model", chorus__coll_name(coll), (unsigned long long)bytes,
                    chorus__algo_name(algo));
        chorus__error_clear();
        return 0;
    }
    CHORUS_INFO("tune", "%s of %llu bytes on %d ranks: %s (chunk %lluK), calibrated "
                "(%s rule); the model predicts %.1f us", chorus__coll_name(coll),
                (unsigned long long)bytes, tune->topo.nranks, chorus__algo_name(algo),
                (unsigned long long)(chunk >> 10), tune->params.rule_scope, us);
    choice_p->algo = algo;
    choice_p->chunk_bytes = chunk;
    choice_p->us = us;
    return 1;
}

chorus_tune_choice_t chorus__tune_choose(chorus_tune_t *tune, chorus_coll_t coll, uint64_t bytes,
                                         uint64_t chunk_bytes)
{
    tune_entry_t *e;

    if ((int)coll < 0 || coll >= CHORUS_NUM_COLLS) coll = CHORUS_COLL_ALLREDUCE;
    e = &tune->cache[coll][chorus__tune_class(bytes)];
    if (!e->valid || e->chunk_arg != chunk_bytes) {
        if (!tune_rule(tune, coll, bytes, chunk_bytes, &e->choice))
            e->choice = tune_evaluate(tune, coll, bytes, chunk_bytes);
        tune->evaluations++;
        e->chunk_arg = chunk_bytes;
        e->valid = 1;
    }
    return e->choice;
}

chorus_status_t chorus_tune_record(chorus_comm_t comm, const char *collective, size_t bytes,
                                   const char *algorithm, size_t chunk_bytes)
{
    static const char fn[] = "chorus_tune_record";
    char path[512], scope[32], key[128], value[64];
    int coll = -1, algo;
    chorus_status_t status;

    chorus__error_clear();
    if (comm == NULL) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: comm is NULL", fn);
    chorus__log_set_rank(comm->rank);
    chorus__comm_quiesce(comm); /* the comm's device proxy and progress thread read the rules */
    if (collective == NULL || algorithm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: %s is NULL",
                             comm->rank, fn, collective == NULL ? "collective" : "algorithm");
    for (int c = 0; c < CHORUS_NUM_COLLS; c++)
        if (c != CHORUS_COLL_SENDRECV && strcmp(collective, chorus__coll_name((chorus_coll_t)c)) == 0)
            coll = c;
    if (coll < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown collective "
                             "\"%.64s\"", comm->rank, fn, collective);
    algo = chorus__algo_parse(algorithm);
    if (algo <= CHORUS_ALGO_AUTO)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: \"%.64s\" is not an "
                             "algorithm", comm->rank, fn, algorithm);
    /* The arena is not a schedule: chorus__algo_supports does not know it. */
    if (algo == CHORUS_ALGO_ARENA ? coll == CHORUS_COLL_SENDRECV
                                  : !chorus__algo_supports((chorus_algo_t)algo,
                                                           (chorus_coll_t)coll))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: %s does not implement "
                             "%s", comm->rank, fn, algorithm, collective);
    if (bytes == 0 || chunk_bytes == 0 || (uint64_t)bytes > ((uint64_t)1 << 40) ||
        (uint64_t)chunk_bytes > ((uint64_t)1 << 40))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: %s of %zu bytes with "
                             "chunk %zu: sizes must be 1 B to 1 TiB", comm->rank, fn, collective,
                             bytes, chunk_bytes);
    chorus__tune_scope_format(scope, sizeof scope, tune_local_kind(comm), comm->nranks,
                              comm->nhosts > 0 ? comm->nhosts : 1);
    snprintf(key, sizeof key, "rule.%s.%s.%zu", collective, scope, bytes);
    snprintf(value, sizeof value, "%s %zu", chorus__algo_name((chorus_algo_t)algo), chunk_bytes);
    chorus__tune_file_path(path, sizeof path);
    status = chorus__tune_file_set(path, key, value);
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "rank %d: %s: %s", comm->rank, fn, key);
    CHORUS_INFO("tune", "rank %d: %s = %s in %s", comm->rank, key, value, path);
    return CHORUS_SUCCESS;
}
