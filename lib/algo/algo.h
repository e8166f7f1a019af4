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
    CHORUS_ALGO_RING,          /* all collectives but alltoall(v), barrier, gather, scatter */
    CHORUS_ALGO_TREE,          /* double binary tree: allreduce, broadcast, reduce */
    CHORUS_ALGO_RD,            /* recursive doubling allreduce (non-power-of-two folding) */
    CHORUS_ALGO_PAIRWISE,      /* pairwise exchange alltoall and alltoallv */
    CHORUS_ALGO_DISSEMINATION, /* barrier */
    CHORUS_ALGO_RABENSEIFNER,  /* allreduce: recursive halving RS + recursive doubling AG */
    CHORUS_ALGO_BRUCK,         /* allgather for small sizes: ceil(log2 n) rounds, any n */
    CHORUS_ALGO_SWING,         /* allreduce: Swing (NSDI'24), log rounds, bandwidth-optimal */
    CHORUS_ALGO_HIER,          /* allreduce: intra-host RS, inter-host AR per slice, intra AG */
    CHORUS_ALGO_ARENA,         /* single-host collectives through a shared arena (lib/arena);
                                * not a schedule: lib/core runs it directly */
    CHORUS_ALGO_DIRECT,        /* allreduce, reduce_scatter, reduce reduced in one fixed order
                                * (direct exchange): reproducible communicators; gather and
                                * scatter (the root and each rank directly); never tuned */
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
    /* allreduce, broadcast, reduce: the vector length; allgather, gather: sendcount;
     * reduce_scatter, scatter: recvcount; alltoall: count per peer; barrier: 0; the
     * v-forms: the uniform block when their count arrays below are NULL. */
    uint64_t count;
    int root;             /* broadcast, reduce, gather, scatter */
    uint64_t chunk_count; /* pipeline chunk in elements (0: algorithm's choice) */
    /* Topology, for the algorithms that use it (hier); NULL/1 means one host. host_of[r]
     * is the host index (0 .. nhosts-1, numbered by first appearance) of rank r. */
    const int *host_of;
    int nhosts;
    /* The ring's order (ring algorithms): ring_order[i] is the rank at position i, a
     * permutation of 0 .. nranks-1, the same on every rank (lib/topo makes one that keeps
     * hosts contiguous). NULL: rank order, r -> r + 1. */
    const int *ring_order;
    /* The v-forms' counts and displacements, in elements, nranks each, as in the public
     * call: allgatherv recvcounts and rdispls (its displs); reduce_scatterv recvcounts;
     * alltoallv all four. NULL: every block is count elements, block p at p * count, so
     * that code which builds any collective's schedule from a count (the simulator, the
     * engine's tests) builds these too. Not part of the schedule cache's key: lib/core
     * builds a v-form's schedule afresh at every call. */
    const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
} chorus_coll_args_t;

/* Element counts and offsets of block p of a v-form's count array v (NULL: uniform). */
static inline uint64_t chorus__algo_vcount(const size_t *v, uint64_t uniform, int p)
{
    return v != NULL ? (uint64_t)v[p] : uniform;
}

static inline uint64_t chorus__algo_vdispl(const size_t *v, uint64_t uniform, int p)
{
    return v != NULL ? (uint64_t)v[p] : (uint64_t)p * uniform;
}

/* One rank's place in a binary tree of lib/algo/tree.c. */
typedef struct {
    int parent;   /* rank, -1 at the root */
    int child[2]; /* ranks, -1 when absent */
} chorus_tree_node_t;

/* The node of rank in a tree of the tree algorithms over n ranks. tree 0 and 1: the two
 * trees of the double binary tree allreduce (root is ignored); tree 2: the tree of
 * broadcast and reduce, rooted at root. With ring_order (a permutation, checked by the
 * caller) the trees are built over positions in it instead of ranks, so that a host's
 * ranks, contiguous there, form subtrees and few tree edges cross hosts; host_of (may be
 * NULL) then lets tree 2 start its labels at the boundary of the root's host rather than
 * at the root. NULL ring_order: rank order, as without a topology. Pure. */
chorus_tree_node_t chorus__algo_tree_node(int n, const int *ring_order, const int *host_of,
                                          int tree, int root, int rank);

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
chorus_status_t chorus__algo_direct(const chorus_coll_args_t *args, chorus_sched_t *s);
/* gather and scatter, called by chorus__algo_direct (direct_move.c). */
chorus_status_t chorus__algo_direct_move(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_rabenseifner(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_bruck(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_swing(const chorus_coll_args_t *args, chorus_sched_t *s);
chorus_status_t chorus__algo_hier(const chorus_coll_args_t *args, chorus_sched_t *s);

#endif
