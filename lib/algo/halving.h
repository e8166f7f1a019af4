/*
 * Recursive halving and doubling allreduce, shared by Rabenseifner (rabenseifner.c) and
 * Swing (swing.c): private to lib/algo.
 *
 * Ranks are first folded to p, the largest power of two <= nranks (MPICH's scheme: of
 * the first 2 * (nranks - p) ranks each even one hands its vector to the next odd one and
 * gets the result back at the end), giving virtual ranks 0..p-1. The vector is cut into p
 * nearly equal blocks by position. At halving step s = 0..L-1 (p = 2^L) virtual rank v and
 * its partner peer[s] split the aligned range of 2m positions (m = p >> (s + 1)) that
 * holds both their positions: each keeps the m-position half holding its own position,
 * sends the other half and reduces what it receives into the half it keeps. Then the
 * doubling steps run in reverse order and send the reduced halves back.
 *
 * A plan only says who the partner is at each step and which position a rank ends with;
 * it must pair ranks symmetrically, and pos(v) ^ pos(peer[s]) must have bit L-1-s as its
 * highest set bit, so that every range split is between the two partners.
 */
#ifndef CHORUS_ALGO_HALVING_H
#define CHORUS_ALGO_HALVING_H

#include "algo/algo.h"

#define CHORUS_HD_MAX_STEPS 31

typedef struct {
    int pos;                       /* the block position this rank owns after halving */
    int peer[CHORUS_HD_MAX_STEPS]; /* virtual partner at halving step s */
} chorus_hd_plan_t;

/* Fills the plan of virtual rank v among p (a power of two, at least 2). */
typedef void (*chorus_hd_plan_fn)(int p, int v, chorus_hd_plan_t *plan);

/* Adds the steps of an allreduce (args->count > 0, args->nranks > 1) to s, without
 * finalizing it. */
void chorus__hd_allreduce(const chorus_coll_args_t *args, chorus_sched_t *s,
                          chorus_hd_plan_fn plan_fn);

#endif
