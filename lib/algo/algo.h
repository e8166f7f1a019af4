/*
 * Algorithms: pure functions from a collective's shape to a schedule for one rank. They
 * never touch a socket, a queue pair or a stream, so they are tested exhaustively in one
 * process through the virtual transport.
 */
#ifndef CHORUS_ALGO_ALGO_H
#define CHORUS_ALGO_ALGO_H

#include "algo/schedule.h"

typedef enum {
    CHORUS_ALGO_AUTO = 0,
    CHORUS_ALGO_RING,          /* all collectives but alltoall and barrier */
    CHORUS_ALGO_TREE,          /* double binary tree: allreduce, broadcast, reduce */
    CHORUS_ALGO_RD,            /* recursive doubling allreduce (non-power-of-two folding) */
    CHORUS_ALGO_PAIRWISE,      /* pairwise exchange alltoall */
    CHORUS_ALGO_DISSEMINATION, /* barrier */
    CHORUS_ALGO_RABENSEIFNER,  /* allreduce: recursive halving RS + recursive doubling AG */
    CHORUS_ALGO_BRUCK,         /* allgather for small sizes: ceil(log2 n) rounds, any n */
    CHORUS_ALGO_SWING,         /* allreduce: Swing (NSDI'24), log rounds, bandwidth-optimal */
    CHORUS_ALGO_HIER,          /* allreduce: intra-host RS, inter-host AR per slice, intra AG */
    CHORUS_ALGO_ARENA,         /* single-host collectives through a shared arena (lib/arena);
                                * not a schedule: lib/core runs it directly */
    CHORUS_NUM_ALGOS
} chorus_algo_t;

/* "ring", "tree", ...; NULL if unknown. */
const char *chorus__algo_name(chorus_algo_t algo);
/* Parses a name; CHORUS_ALGO_AUTO for "auto", -1 if unknown. */
int chorus__algo_parse(const char *name);

typedef struct {
    chorus_coll_t coll;
    int rank;
    int nranks;
    /* allreduce, broadcast, reduce: the vector length; allgather: sendcount;
     * reduce_scatter: recvcount; alltoall: count per peer; barrier: 0. */
    uint64_t count;
    int root;             /* broadcast, reduce */
    uint64_t chunk_count; /* pipeline chunk in elements (0: algorithm's choice) */
    /* Topology, for the algorithms that use it (hier); NULL/1 means one host. host_of[r]
     * is the host index (0 .. nhosts-1, numbered by first appearance) of rank r. */
    const int *host_of;
    int nhosts;
    /* The ring's order (ring algorithms): ring_order[i] is the rank at position i, a
     * permutation of 0 .. nranks-1, the same on every rank (lib/topo makes one that keeps
     * hosts contiguous). NULL: rank order, r -> r + 1. */
    const int *ring_order;
} chorus_coll_args_t;

/* Nonzero if algo implements coll. */
int chorus__algo_supports(chorus_algo_t algo, chorus_coll_t coll);

/* Builds and finalizes the schedule of args->rank into s (initialised by the caller with
 * chorus__sched_init). CHORUS_ERR_UNSUPPORTED if algo does not implement the collective. */
chorus_status_t chorus__algo_build(chorus_algo_t algo, const chorus_coll_args_t *args,
                                   chorus_sched_t *s);

/* Per-algorithm builders (one file each). Same contract as chorus__algo_build. */
chorus_status_t chorus__algo_ring(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_tree(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_rd(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_pairwise(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_dissemination(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_rabenseifner(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_bruck(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_swing(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_hier(const chorus_coll_args_t *args, chorus_sched_t *s);

#endif
