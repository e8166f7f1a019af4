/*
 * Algorithm names, capabilities and dispatch.
 */
#include "algo/algo.h"

#include "util/status.h"

#include <stddef.h>
#include <strings.h>

static const char *const algo_names[CHORUS_NUM_ALGOS] = {
    [CHORUS_ALGO_AUTO] = "auto",
    [CHORUS_ALGO_RING] = "ring",
    [CHORUS_ALGO_TREE] = "tree",
    [CHORUS_ALGO_RD] = "rd",
    [CHORUS_ALGO_PAIRWISE] = "pairwise",
    [CHORUS_ALGO_DISSEMINATION] = "dissemination",
    [CHORUS_ALGO_RABENSEIFNER] = "rabenseifner",
    [CHORUS_ALGO_BRUCK] = "bruck",
    [CHORUS_ALGO_SWING] = "swing",
    [CHORUS_ALGO_HIER] = "hier",
    [CHORUS_ALGO_ARENA] = "arena",
    [CHORUS_ALGO_DIRECT] = "direct",
};

static const char *const coll_names[CHORUS_NUM_COLLS] = {
    [CHORUS_COLL_ALLREDUCE] = "allreduce",
    [CHORUS_COLL_ALLGATHER] = "allgather",
    [CHORUS_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [CHORUS_COLL_BROADCAST] = "broadcast",
    [CHORUS_COLL_REDUCE] = "reduce",
    [CHORUS_COLL_ALLTOALL] = "alltoall",
    [CHORUS_COLL_BARRIER] = "barrier",
    [CHORUS_COLL_SENDRECV] = "sendrecv",
    [CHORUS_COLL_GATHER] = "gather",
    [CHORUS_COLL_SCATTER] = "scatter",
    [CHORUS_COLL_ALLGATHERV] = "allgatherv",
    [CHORUS_COLL_REDUCE_SCATTERV] = "reduce_scatterv",
    [CHORUS_COLL_ALLTOALLV] = "alltoallv",
};

const char *chorus__coll_name(chorus_coll_t coll)
{
    if ((int)coll < 0 || coll >= CHORUS_NUM_COLLS) return "unknown collective";
    return coll_names[coll];
}

const char *chorus__algo_name(chorus_algo_t algo)
{
    if ((int)algo < 0 || algo >= CHORUS_NUM_ALGOS) return NULL;
    return algo_names[algo];
}

int chorus__algo_parse(const char *name)
{
    int a;

    if (name == NULL) return -1;
    for (a = 0; a < CHORUS_NUM_ALGOS; a++)
        if (strcasecmp(name, algo_names[a]) == 0) return a;
    /* The long name is what people type after reading the literature. */
    if (strcasecmp(name, "recursive_doubling") == 0) return CHORUS_ALGO_RD;
    return -1;
}

int chorus__algo_supports(chorus_algo_t algo, chorus_coll_t coll)
{
    switch (algo) {
    case CHORUS_ALGO_RING:
        return coll == CHORUS_COLL_ALLREDUCE || coll == CHORUS_COLL_ALLGATHER ||
               coll == CHORUS_COLL_REDUCE_SCATTER || coll == CHORUS_COLL_BROADCAST ||
               coll == CHORUS_COLL_REDUCE || coll == CHORUS_COLL_ALLGATHERV ||
               coll == CHORUS_COLL_REDUCE_SCATTERV;
    case CHORUS_ALGO_TREE:
        return coll == CHORUS_COLL_ALLREDUCE || coll == CHORUS_COLL_BROADCAST ||
               coll == CHORUS_COLL_REDUCE;
    case CHORUS_ALGO_RD: /* allgather: Bruck for non-powers of two (rd.c) */
        return coll == CHORUS_COLL_ALLREDUCE || coll == CHORUS_COLL_ALLGATHER;
    case CHORUS_ALGO_PAIRWISE:
        return coll == CHORUS_COLL_ALLTOALL || coll == CHORUS_COLL_ALLTOALLV;
    case CHORUS_ALGO_DISSEMINATION:
        return coll == CHORUS_COLL_BARRIER;
    /* Each new builder widens its line when it implements more (and its tests cover it). */
    case CHORUS_ALGO_RABENSEIFNER:
        return coll == CHORUS_COLL_ALLREDUCE || coll == CHORUS_COLL_REDUCE_SCATTER;
    case CHORUS_ALGO_BRUCK:
        return coll == CHORUS_COLL_ALLGATHER;
    case CHORUS_ALGO_SWING:
        return coll == CHORUS_COLL_ALLREDUCE;
    case CHORUS_ALGO_HIER:
        return coll == CHORUS_COLL_ALLREDUCE;
    case CHORUS_ALGO_DIRECT:
        return coll == CHORUS_COLL_ALLREDUCE || coll == CHORUS_COLL_REDUCE_SCATTER ||
               coll == CHORUS_COLL_REDUCE || coll == CHORUS_COLL_GATHER ||
               coll == CHORUS_COLL_SCATTER;
    /* The arena is not a schedule builder; lib/arena says what it runs. */
    case CHORUS_ALGO_ARENA:
        return 0;
    default:
        return 0;
    }
}

/* AUTO here is a plain fallback (the first algorithm that implements the collective);
 * the real choice by size and topology belongs to lib/tune. */
static chorus_algo_t algo_default(chorus_coll_t coll)
{
    int a;

    for (a = CHORUS_ALGO_AUTO + 1; a < CHORUS_NUM_ALGOS; a++)
        if (chorus__algo_supports((chorus_algo_t)a, coll)) return (chorus_algo_t)a;
    return CHORUS_ALGO_AUTO;
}

chorus_status_t chorus__algo_build(chorus_algo_t algo, const chorus_coll_args_t *args,
                                   chorus_sched_t *s)
{
    if (args->nranks < 1 || args->rank < 0 || args->rank >= args->nranks)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: bad rank or size (%d)",
                             args->rank, chorus__coll_name(args->coll), args->nranks);
    if ((args->coll == CHORUS_COLL_BROADCAST || args->coll == CHORUS_COLL_REDUCE ||
         args->coll == CHORUS_COLL_GATHER || args->coll == CHORUS_COLL_SCATTER) &&
        (args->root < 0 || args->root >= args->nranks))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: root %d out of range",
                             args->rank, chorus__coll_name(args->coll), args->root);
    if (algo == CHORUS_ALGO_AUTO) algo = algo_default(args->coll);
    if (!chorus__algo_supports(algo, args->coll))
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: algorithm %s does not implement %s",
                             args->rank, chorus__algo_name(algo) ? chorus__algo_name(algo) : "?",
                             chorus__coll_name(args->coll));
    switch (algo) {
    case CHORUS_ALGO_RING:
        return chorus__algo_ring(args, s);
    case CHORUS_ALGO_TREE:
        return chorus__algo_tree(args, s);
    case CHORUS_ALGO_RD:
        return chorus__algo_rd(args, s);
    case CHORUS_ALGO_PAIRWISE:
        return chorus__algo_pairwise(args, s);
    case CHORUS_ALGO_DISSEMINATION:
        return chorus__algo_dissemination(args, s);
    case CHORUS_ALGO_RABENSEIFNER:
        return chorus__algo_rabenseifner(args, s);
    case CHORUS_ALGO_BRUCK:
        return chorus__algo_bruck(args, s);
    case CHORUS_ALGO_SWING:
        return chorus__algo_swing(args, s);
    case CHORUS_ALGO_HIER:
        return chorus__algo_hier(args, s);
    case CHORUS_ALGO_DIRECT:
        return chorus__algo_direct(args, s);
    default:
        return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: no builder for algorithm %d",
                             args->rank, (int)algo);
    }
}
