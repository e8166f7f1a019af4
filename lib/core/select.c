/*
 * Algorithm and chunk choice. Until lib/tune's cost model exists this is a size
 * threshold: latency-bound messages take the algorithm with the fewest rounds (recursive
 * doubling, trees), bandwidth-bound ones the ring, which moves the fewest bytes per rank.
 * CHORUS_ALGO forces one algorithm where it applies. Both settings are read when a
 * communicator is created.
 */
#include "core/comm.h"

#include "util/config.h"
#include "util/log.h"

/* Below this many bytes per rank a collective is latency-bound. */
#define SELECT_SMALL_BYTES ((uint64_t)64 << 10)
/* Default pipeline chunk: large enough to amortise a message's overhead, small enough that
 * a few chunks in flight overlap transfers with reductions. */
#define SELECT_DEFAULT_CHUNK_BYTES ((uint64_t)512 << 10)

static chorus_algo_t select_default(chorus_comm_t comm, chorus_coll_t coll, uint64_t bytes)
{
    (void)comm;
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
    comm->chunk_bytes = chorus__config_size("CHORUS_CHUNK_SIZE", SELECT_DEFAULT_CHUNK_BYTES);
    if (comm->chunk_bytes == 0) comm->chunk_bytes = SELECT_DEFAULT_CHUNK_BYTES;
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

chorus_algo_t chorus__select_algo(chorus_comm_t comm, chorus_coll_t coll, uint64_t bytes)
{
    chorus_algo_t forced = comm->forced_algo, algo;
    int cls = select_size_class(bytes), fell_back = 0;

    if (forced != CHORUS_ALGO_AUTO && chorus__algo_supports(forced, coll)) {
        algo = forced;
    } else {
        algo = select_default(comm, coll, bytes);
        fell_back = forced != CHORUS_ALGO_AUTO;
    }
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

uint64_t chorus__select_chunk_count(chorus_comm_t comm, size_t elem_size)
{
    uint64_t count = comm->chunk_bytes / (elem_size ? elem_size : 1);
    return count ? count : 1;
}
