/*
 * A step barrier over the arena's control lines, for device collectives (lib/gpu/ipc_arena.c)
 * whose data never passes through the segment.
 *
 * Each barrier is one operation of the arena's sequence, exactly like a flat allreduce
 * without data: it bumps the arena's operation counter, writes the signature into the
 * control line of that operation's parity, publishes the next step and waits for every
 * rank at it, then compares signatures. So the counters of host and device collectives
 * are one sequence, and the parity argument of arena.c (a rank writes the signature of
 * operation k + 2 only after every rank published operation k + 1, which each did after
 * checking operation k) holds across both kinds.
 *
 * Device signatures carry ARENA_SIG_DEVICE in the collective byte, so a rank in a host
 * collective and a rank in a device collective of the same shape never pass each other's
 * check (arena__check_sigs), which names both calls ("device allreduce" against
 * "allreduce"). The operation
 * number in a device signature is the caller's (the comm's sequence number), since the
 * host arena's own counter means nothing to the caller.
 */
#include "arena/arena_int.h"

#include "util/status.h"

#include <stdio.h>

static chorus_status_t arena_step(chorus_arena_t *arena, chorus_coll_t coll, uint64_t count,
                                  chorus_dtype_t dtype, chorus_op_t op, uint64_t opno,
                                  uint64_t offer, uint64_t *offers, const char *what)
{
    arena_sig_t *s;
    chorus_status_t status;
    int par;

    if (arena == NULL || (unsigned)coll >= CHORUS_NUM_COLLS)
        return chorus__error(CHORUS_ERR_INTERNAL, "arena: %s: bad step barrier call", what);
    status = arena__enter(arena, what);
    if (status != CHORUS_SUCCESS) return status;
    arena->opno++;
    par = (int)(arena->opno & 1);
    s = &arena->ctl[arena->me].sig[par];
    s->count = count;
    s->opno = (uint16_t)opno;
    s->root = 0;
    s->coll = (uint8_t)((unsigned)coll | ARENA_SIG_DEVICE);
    s->dtype = (uint8_t)dtype;
    s->op = (uint8_t)op;
    s->valid = 1;
    /* The offer line follows the signature's parity rule: written for operation k + 2 only
     * after every rank published k + 1, which each did after reading operation k's. */
    arena->ctl[arena->me].offer[par][0] = offer;
    /* The publication (store-release) makes the signature visible with the step. */
    arena__publish(arena, arena->step + 1);
    status = arena__wait_all(arena, arena->step, what);
    if (status == CHORUS_SUCCESS) status = arena__check_sigs(arena, par, what);
    if (status == CHORUS_SUCCESS && offers != NULL)
        for (int r = 0; r < arena->n; r++) offers[r] = arena->ctl[r].offer[par][0];
    return status;
}

chorus_status_t chorus__arena_step(chorus_arena_t *arena, chorus_coll_t coll, uint64_t count,
                                   chorus_dtype_t dtype, chorus_op_t op, uint64_t opno,
                                   const char *what)
{
    return arena_step(arena, coll, count, dtype, op, opno, 0, NULL, what);
}

chorus_status_t chorus__arena_step_offer(chorus_arena_t *arena, chorus_coll_t coll,
                                         uint64_t count, chorus_dtype_t dtype, chorus_op_t op,
                                         uint64_t opno, uint64_t offer, uint64_t *offers,
                                         const char *what)
{
    return arena_step(arena, coll, count, dtype, op, opno, offer, offers, what);
}

chorus_status_t chorus__arena_fail(chorus_arena_t *arena, chorus_status_t status)
{
    return arena != NULL ? arena__fail(arena, status) : status;
}

void chorus__arena_wait_settings(const chorus_arena_t *arena, double *timeout_s_p,
                                 const atomic_int **abort_flag_p, chorus_wait_policy_t *wait_p)
{
    *timeout_s_p = arena->timeout_s;
    *abort_flag_p = arena->abort_flag;
    *wait_p = arena->wait;
}
