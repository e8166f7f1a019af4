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
 * check: both sides name both calls ("device allreduce" against "allreduce"). The operation
 * number in a device signature is the caller's (the comm's sequence number), since the
 * host arena's own counter means nothing to the caller.
 */
#include "arena/arena_int.h"

#include "util/status.h"

#include <stdio.h>

/* Marks the collective byte of a device operation's signature. */
#define ARENA_SIG_DEVICE 0x80

/* "device allreduce #3 of 16 x float32 sum", or "host allreduce #7 ..." for a host arena
 * operation (whose number is the arena's own count). A peer's fields are only printed. */
static void barrier_sig_text(const arena_sig_t *s, char *buf, size_t len)
{
    int device = (s->coll & ARENA_SIG_DEVICE) != 0;
    const char *coll = chorus__coll_name((chorus_coll_t)(s->coll & ~ARENA_SIG_DEVICE));
    const char *dt = chorus_dtype_name((chorus_dtype_t)s->dtype);
    const char *op = chorus_op_name((chorus_op_t)s->op);

    if (!s->valid) {
        snprintf(buf, len, "no operation");
        return;
    }
    snprintf(buf, len, "%s %s #%u of %llu x %s %s", device ? "device" : "host",
             coll != NULL ? coll : "?", (unsigned)s->opno, (unsigned long long)s->count,
             dt != NULL ? dt : "?", op != NULL ? op : "?");
}

static chorus_status_t barrier_check_sigs(chorus_arena_t *a, int par, const char *what)
{
    const arena_sig_t *m = &a->ctl[a->me].sig[par];
    char theirs[128], mine[128];

    for (int r = 0; r < a->n; r++) {
        const arena_sig_t *s = &a->ctl[r].sig[par];

        if (r == a->me || (s->count == m->count && s->opno == m->opno && s->coll == m->coll &&
                           s->dtype == m->dtype && s->op == m->op && s->valid == m->valid))
            continue;
        barrier_sig_text(s, theirs, sizeof theirs);
        barrier_sig_text(m, mine, sizeof mine);
        return arena__fail(a, chorus__error(CHORUS_ERR_MISMATCH, "rank %d: arena: %s: rank %d "
                                            "called %s, this rank %s", a->rank, what,
                                            a->ranks[r], theirs, mine));
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__arena_step(chorus_arena_t *arena, chorus_coll_t coll, uint64_t count,
                                   chorus_dtype_t dtype, chorus_op_t op, uint64_t opno,
                                   const char *what)
{
    arena_sig_t *s;
    chorus_status_t status;
    int par;

    if (arena == NULL || (unsigned)coll >= CHORUS_NUM_COLLS)
        return chorus__error(CHORUS_ERR_INTERNAL, "arena: %s: bad step barrier call", what);
    arena->opno++;
    par = (int)(arena->opno & 1);
    s = &arena->ctl[arena->me].sig[par];
    s->count = count;
    s->opno = (uint32_t)opno;
    s->coll = (uint8_t)((unsigned)coll | ARENA_SIG_DEVICE);
    s->dtype = (uint8_t)dtype;
    s->op = (uint8_t)op;
    s->valid = 1;
    /* The publication (store-release) makes the signature visible with the step. */
    arena__publish(arena, arena->step + 1);
    status = arena__wait_all(arena, arena->step, what);
    if (status != CHORUS_SUCCESS) return status;
    return barrier_check_sigs(arena, par, what);
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
