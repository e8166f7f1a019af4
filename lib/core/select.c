/*
 * Algorithm and chunk choice. lib/tune's cost model predicts the time of every algorithm
 * that implements the collective and the fastest wins; the decision is cached per
 * (collective, size class) in the tuner, so only the first call of a class pays for the
 * model. Without a tuner (CHORUS_TUNE=0) it is a size threshold: latency-bound messages
 * take the algorithm with the fewest rounds (recursive doubling, trees), bandwidth-bound
 * ones the ring. CHORUS_ALGO forces one algorithm where it applies. The settings are read
 * when a communicator is created. chorus_algorithm_name() reports the same choice to tools,
 * so that a benchmark row can say which algorithm it measured, and
 * chorus_algorithm_predict() the model's time.
 */
#include "core/comm.h"
#include "core/gpu_coll.h"

#include "arena/arena.h"
#include "tune/tune.h"

#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#include <string.h>

/* Below this many bytes per rank a collective is latency-bound. */
#define SELECT_SMALL_BYTES ((uint64_t)64 << 10)
/* Default pipeline chunk: large enough to amortise a message's overhead, small enough that
 * a few chunks in flight overlap transfers with reductions. */
#define SELECT_DEFAULT_CHUNK_BYTES ((uint64_t)512 << 10)

static chorus_algo_t select_default(chorus_comm_t comm, chorus_coll_t coll, uint64_t bytes)
{
    /* The pipeline chunk is the one the call will run with (CHORUS_CHUNK_SIZE), so that the
     * model costs the schedule the engine will run. */
    if (comm->tune != NULL)
        return chorus__tune_choose(comm->tune, coll, bytes,
                                   comm->chunk_forced ? comm->chunk_bytes : 0).algo;
    switch (coll) {
    case CHORUS_COLL_ALLREDUCE:
        return bytes <= SELECT_SMALL_BYTES ? CHORUS_ALGO_RD : CHORUS_ALGO_RING;
    case CHORUS_COLL_BROADCAST:
    case CHORUS_COLL_REDUCE:
        return bytes <= SELECT_SMALL_BYTES ? CHORUS_ALGO_TREE : CHORUS_ALGO_RING;
    case CHORUS_COLL_ALLTOALL: return CHORUS_ALGO_PAIRWISE;
    case CHORUS_COLL_BARRIER: return CHORUS_ALGO_DISSEMINATION;
    default: return CHORUS_ALGO_RING; /* allgather, reduce_scatter */
    }
}

void chorus__select_init(chorus_comm_t comm)
{
    const char *name = chorus__config_str("CHORUS_ALGO");
    int algo = name != NULL ? chorus__algo_parse(name) : CHORUS_ALGO_AUTO;

    if (algo < 0) {
        CHORUS_WARN("core", "CHORUS_ALGO=%s is not an algorithm; choosing automatically", name);
        algo = CHORUS_ALGO_AUTO;
    }
    comm->forced_algo = (chorus_algo_t)algo;
    comm->chunk_forced = chorus__config_is_set("CHORUS_CHUNK_SIZE");
    comm->chunk_bytes = chorus__config_size("CHORUS_CHUNK_SIZE", SELECT_DEFAULT_CHUNK_BYTES);
    if (comm->chunk_bytes == 0) comm->chunk_bytes = SELECT_DEFAULT_CHUNK_BYTES;
    comm->check_calls = chorus__config_int("CHORUS_CHECK_CALLS", 1) != 0;
}

/* floor(log2(bytes)), 0 for 0: the size class of the once-per-class log line. */
static int select_size_class(uint64_t bytes)
{
    int c = 0;
    while (bytes > 1) {
        bytes >>= 1;
        c++;
    }
    return c;
}

/* The one schedule of a collective that has one (issue 41: gather and scatter direct,
 * allgatherv and reduce_scatterv on the ring, alltoallv pairwise), else AUTO. The cost
 * model is not asked: on one host these run on the arena, which copies each byte into the
 * segment and out once with one synchronisation per chunk (at 64 B on 2 ranks the
 * schedules took 3-4x the regular forms), and elsewhere the schedule is the only choice.
 * CHORUS_ALGO naming the schedule keeps it on one host too, and so does CHORUS_TUNE=0,
 * whose fixed size rules put no collective on the arena. */
static chorus_algo_t select_only(chorus_coll_t coll)
{
    switch (coll) {
    case CHORUS_COLL_GATHER:
    case CHORUS_COLL_SCATTER: return CHORUS_ALGO_DIRECT;
    case CHORUS_COLL_ALLGATHERV:
    case CHORUS_COLL_REDUCE_SCATTERV: return CHORUS_ALGO_RING;
    case CHORUS_COLL_ALLTOALLV: return CHORUS_ALGO_PAIRWISE;
    default: return CHORUS_ALGO_AUTO;
    }
}

/* The choice itself, without the log line, so that chorus_algorithm_name() does not use up
 * the line that the first real call of a size class would print. */
static chorus_algo_t select_choose(chorus_comm_t comm, chorus_coll_t coll, uint64_t bytes)
{
    chorus_algo_t forced = comm->forced_algo;

    if (select_only(coll) != CHORUS_ALGO_AUTO) {
        if (comm->arena != NULL && comm->tune != NULL &&
            chorus__arena_supports(comm->arena, coll) && forced != select_only(coll))
            return CHORUS_ALGO_ARENA;
        return select_only(coll);
    }
    if (forced == CHORUS_ALGO_ARENA)
        return comm->arena != NULL && chorus__arena_supports(comm->arena, coll)
                   ? forced : select_default(comm, coll, bytes);
    if (forced != CHORUS_ALGO_AUTO && chorus__algo_supports(forced, coll)) return forced;
    return select_default(comm, coll, bytes);
}

chorus_algo_t chorus__select_algo(chorus_comm_t comm, chorus_coll_t coll, uint64_t bytes)
{
    chorus_algo_t forced = comm->forced_algo, algo = select_choose(comm, coll, bytes);
    int cls = select_size_class(bytes), fell_back = forced != CHORUS_ALGO_AUTO && algo != forced;

    if (CHORUS_LOG_ENABLED(CHORUS_LOG_INFO) && !(comm->logged[coll] & ((uint64_t)1 << cls))) {
        comm->logged[coll] |= (uint64_t)1 << cls;
        if (fell_back)
            CHORUS_INFO("core", "%s of %llu bytes: CHORUS_ALGO=%s does not implement it; "
                        "using %s", chorus__core_coll_name(coll), (unsigned long long)bytes,
                        chorus__algo_name(forced), chorus__algo_name(algo));
        else
            CHORUS_INFO("core", "%s of %llu bytes (class 2^%d) on %d ranks: %s%s",
                        chorus__core_coll_name(coll), (unsigned long long)bytes, cls,
                        comm->nranks, chorus__algo_name(algo),
                        forced != CHORUS_ALGO_AUTO ? " (CHORUS_ALGO)" : "");
    }
    return algo;
}

uint64_t chorus__select_chunk_count(chorus_comm_t comm, chorus_coll_t coll, chorus_algo_t algo,
                                    uint64_t bytes, size_t elem_size)
{
    uint64_t chunk = comm->chunk_bytes, count;

    /* The model chose the chunk together with the algorithm; a forced algorithm other than
     * its choice, or a forced chunk, keeps CHORUS_CHUNK_SIZE (or its default). */
    if (comm->tune != NULL && !comm->chunk_forced && select_only(coll) == CHORUS_ALGO_AUTO) {
        chorus_tune_choice_t choice = chorus__tune_choose(comm->tune, coll, bytes, 0);
        if (choice.algo == algo && choice.chunk_bytes > 0) chunk = choice.chunk_bytes;
    }
    count = chunk / (elem_size ? elem_size : 1);
    return count ? count : 1;
}

/* Maps a public collective name to its enum. sendrecv has no algorithm to choose, so it is
 * not a collective here. Returns -1 if unknown. */
static int select_parse_coll(const char *name)
{
    for (int c = 0; c < CHORUS_NUM_COLLS; c++)
        if (c != CHORUS_COLL_SENDRECV &&
            strcmp(name, chorus__core_coll_name((chorus_coll_t)c)) == 0)
            return c;
    return -1;
}

/* The checks and the byte count shared by the introspection calls. */
static chorus_status_t select_query_args(chorus_comm_t comm, const char *fn, const char *collective,
                                         size_t count, chorus_dtype_t dtype, const void *out_p,
                                         const char *out_name, int *coll_p, uint64_t *bytes_p)
{
    size_t esize;
    int coll;

    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: comm is NULL", fn);
    chorus__log_set_rank(comm->rank);
    /* The comm's device proxy and progress thread consult the tuner too: let them finish. */
    chorus__comm_quiesce(comm);
    if (collective == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: collective is NULL",
                             comm->rank, fn);
    if (out_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: %s is NULL", comm->rank,
                             fn, out_name);
    coll = select_parse_coll(collective);
    if (coll < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: unknown collective \"%.64s\"", comm->rank, fn,
                             collective);
    if ((int)dtype < 0 || dtype >= CHORUS_NUM_DTYPES || (esize = chorus_dtype_size(dtype)) == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown dtype %d",
                             comm->rank, fn, (int)dtype);
    /* The same byte count the collective passes to the selector; a count no call would
     * accept saturates instead of wrapping into a small message. */
    if (coll == CHORUS_COLL_BARRIER)
        *bytes_p = 0;
    else
        *bytes_p = (uint64_t)count > UINT64_MAX / esize ? UINT64_MAX : (uint64_t)count * esize;
    *coll_p = coll;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_algorithm_name(chorus_comm_t comm, const char *collective, size_t count,
                                      chorus_dtype_t dtype, const char **name_p)
{
    chorus_status_t status;
    uint64_t bytes;
    int coll;

    status = select_query_args(comm, "chorus_algorithm_name", collective, count, dtype, name_p,
                               "name_p", &coll, &bytes);
    if (status != CHORUS_SUCCESS) return status;
    *name_p = chorus__algo_name(select_choose(comm, (chorus_coll_t)coll, bytes));
    return CHORUS_SUCCESS;
}

static chorus_status_t select_predict(chorus_comm_t comm, const char *fn, const char *collective,
                                      const char *algorithm, size_t count, chorus_dtype_t dtype,
                                      unsigned flags, double *us_p)
{
    chorus_status_t status;
    uint64_t bytes;
    int coll, algo;
    unsigned how = 0;
    double us;

    status = select_query_args(comm, fn, collective, count, dtype, us_p, "us_p", &coll, &bytes);
    if (status != CHORUS_SUCCESS) return status;
    if (flags & ~(CHORUS_PREDICT_REGISTERED | CHORUS_PREDICT_IN_PLACE))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown flags 0x%x",
                             comm->rank, fn, flags);
    if (flags & CHORUS_PREDICT_REGISTERED) how |= CHORUS_TUNE_REGISTERED;
    if (flags & CHORUS_PREDICT_IN_PLACE) how |= CHORUS_TUNE_IN_PLACE;
    algo = algorithm != NULL ? chorus__algo_parse(algorithm) : CHORUS_ALGO_AUTO;
    if (algo < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown algorithm "
                             "\"%.64s\"", comm->rank, fn, algorithm);
    if (algo == CHORUS_ALGO_AUTO) algo = select_choose(comm, (chorus_coll_t)coll, bytes);
    if (select_only((chorus_coll_t)coll) != CHORUS_ALGO_AUTO)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: %s: the cost model does not "
                             "cover %s (it has one algorithm, %s)", comm->rank, fn, collective,
                             chorus__algo_name(select_only((chorus_coll_t)coll)));
    if (comm->tune == NULL)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: %s: the cost model is off "
                             "(CHORUS_TUNE=0)", comm->rank, fn);
    if (coll == CHORUS_COLL_BARRIER) count = 0;
    /* The chunk the call would run with: the tuner's for its own pick. */
    status = chorus__tune_predict_buffers(
        comm->tune, (chorus_coll_t)coll, (chorus_algo_t)algo, count, dtype,
        chorus__select_chunk_count(comm, (chorus_coll_t)coll, (chorus_algo_t)algo, bytes,
                                   chorus_dtype_size(dtype)) *
            chorus_dtype_size(dtype),
        how, &us);
    if (status == CHORUS_ERR_UNSUPPORTED)
        return chorus__error(status, "rank %d: %s: %s does not implement %s here", comm->rank,
                             fn, chorus__algo_name((chorus_algo_t)algo), collective);
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "rank %d: %s", comm->rank, fn);
    *us_p = us;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_algorithm_predict(chorus_comm_t comm, const char *collective,
                                         const char *algorithm, size_t count,
                                         chorus_dtype_t dtype, double *us_p)
{
    return select_predict(comm, "chorus_algorithm_predict", collective, algorithm, count, dtype,
                          0, us_p);
}

chorus_status_t chorus_algorithm_predict_buffers(chorus_comm_t comm, const char *collective,
                                                 const char *algorithm, size_t count,
                                                 chorus_dtype_t dtype, unsigned flags,
                                                 double *us_p)
{
    return select_predict(comm, "chorus_algorithm_predict_buffers", collective, algorithm, count,
                          dtype, flags, us_p);
}
