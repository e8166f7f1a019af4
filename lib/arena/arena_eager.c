/*
 * Small broadcasts and reduces through per-rank rings of eager entries.
 *
 * In a broadcast only the root writes and in a reduce only the root reads. Open MPI's
 * eager protocol lets the writers of such small calls run many calls ahead of the readers
 * (their messages wait in the readers' queues), so a loop of them costs about one write
 * per call; on the arena's one-step path every call needs every rank scheduled once, which
 * on oversubscribed cores was 10-40 us per call. Here each rank owns a ring of
 * D = arena__eager_depth(nlocal) entries (signature and data; 128 up to 64 local ranks). A
 * writer fills the entry of this call, stamps it with the call's step and publishes the step;
 * a reader waits only for the writers it reads, polling their entries rather than their
 * control lines (so a writer's publication does not stall on a line its readers keep
 * pulling away: 2 ranks, broadcast of 8 B, 0.45 -> 0.25 us a call), compares their entry's
 * signature with its own call, and reads. So a
 * writer may run up to D - 1 calls ahead: before it overwrites the entry of call k - D it
 * waits until every rank has published the first step of call k - D + 1, by which time
 * every reader of call k - D had finished (a rank reads a call's data before it publishes
 * anything for the next). Any call that is not eager starts by waiting for every rank (arena__enter), which
 * also covers what eager calls leave behind.
 *
 * Checks: a reader compares the signatures of the entries it reads; a writer compares
 * nothing at the time. Every rank folds the signature of each eager call into a hash that it
 * stores in its entry of that call, and at its next call that waits for everyone a rank that
 * made eager calls compares, for its last one, every rank's entry of that call (its step and
 * hash) with its own, so a mismatch among writers (or between a writer and a rank that
 * called something else) is reported there, naming the peer, as an eager send's error would
 * be. The hash is read from the entry of that call, not from where the peer is now: the root
 * of a larger broadcast returns without waiting for its readers and may already be making
 * the next eager calls (a hash taken from its control block had them in: a false mismatch
 * on 3 ranks for broadcasts of 256 B, 16 KiB, 256 B, 2 KiB from rank 0, as DDP's start-up
 * makes). The entry stays until the writer is D calls further, which it cannot be before
 * this rank has gone on.
 */
#include "arena/arena_int.h"

#include "kernels.h"
#include "util/status.h"

#include <string.h>

static arena_eager_t *eager_entry(const chorus_arena_t *a, int r, uint64_t opno)
{
    size_t i = (size_t)r * a->eager_depth + (size_t)(opno % a->eager_depth);
    return (arena_eager_t *)(void *)(a->eager + i * sizeof(arena_eager_t));
}

/* One step of a 64-bit mix (splitmix64's finaliser) folding v into h. */
static uint64_t eager_mix(uint64_t h, uint64_t v)
{
    uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

const arena_sig_t *arena__eager_sig(const chorus_arena_t *a, int r, uint64_t opno)
{
    const arena_sig_t *s = a->eager != NULL ? &eager_entry(a, r, opno)->sig : NULL;

    return s != NULL && s->valid && s->opno == (uint16_t)opno ? s : NULL;
}

int arena__eager_applies(const chorus_arena_t *a, chorus_coll_t coll, size_t bytes)
{
    return a->eager != NULL && (coll == CHORUS_COLL_BROADCAST || coll == CHORUS_COLL_REDUCE) &&
           bytes <= ARENA_EAGER_MAX;
}

chorus_status_t arena__eager_check(chorus_arena_t *a, const char *what)
{
    a->eager_unchecked = 0;
    for (int r = 0; r < a->n; r++) {
        const arena_eager_t *e = eager_entry(a, r, a->last_eager_opno);
        uint64_t step, chain;
        if (r == a->me) continue;
        /* Every rank has published this rank's last step, so a peer that made the same calls
         * has filled its entry of that call; read twice around the hash, so that a peer
         * that has moved on and refilled it is never compared half-written. */
        step = atomic_load_explicit(&e->step, memory_order_acquire);
        chain = e->chain;
        atomic_thread_fence(memory_order_acquire);
        if (step == a->last_eager_step && chain == a->chain &&
            atomic_load_explicit(&e->step, memory_order_relaxed) == step)
            continue;
        return arena__fail(a, chorus__error(CHORUS_ERR_MISMATCH, "rank %d: arena: %s: rank %d "
                                            "called other small broadcasts or reduces than "
                                            "this rank since the last call that waited for "
                                            "every rank", a->rank, what, a->ranks[r]));
    }
    return CHORUS_SUCCESS;
}

/* CHORUS_ERR_MISMATCH naming peer r unless its entry of this call carries sig. */
static chorus_status_t eager_compare(chorus_arena_t *a, int r, const arena_sig_t *sig,
                                     const char *what)
{
    const arena_sig_t *theirs = &eager_entry(a, r, a->opno)->sig;

    if (arena__sig_same(theirs, sig)) return CHORUS_SUCCESS;
    /* A peer that made another kind of call signed its control line instead. */
    if (!theirs->valid || theirs->opno != sig->opno) theirs = &a->ctl[r].sig[a->opno & 1];
    return arena__sig_mismatch(a, r, theirs, sig, what);
}

/* Waits until writer r has filled its entry of the call of this step: a short spin on the
 * entry itself, then the common wait on r's control line (deadline, dead peers, sleep). */
static chorus_status_t eager_wait(chorus_arena_t *a, uint64_t step, int r, const char *what)
{
    const arena_eager_t *e = eager_entry(a, r, a->opno);

    for (int i = 0; i < 256; i++)
        if (atomic_load_explicit(&e->step, memory_order_acquire) == step) return CHORUS_SUCCESS;
    return arena__wait_range(a, step, r, r + 1, what);
}

chorus_status_t arena__eager(chorus_arena_t *a, chorus_coll_t coll, const void *sendbuf,
                             void *recvbuf, size_t count, chorus_dtype_t dtype, chorus_op_t op,
                             int root, const char *what)
{
    size_t bytes = count * chorus_dtype_size(dtype);
    uint64_t opno = a->opno + 1, step = a->step + 1;
    int writes = coll == CHORUS_COLL_BROADCAST ? a->me == root : a->me != root;
    uint8_t own[ARENA_EAGER_MAX];
    arena_sig_t sig;
    chorus_status_t status = CHORUS_SUCCESS;

    if (writes) {
        /* The first step of call opno - DEPTH + 1 (0 before there was one). */
        status = arena__wait_all(a, a->first_step[(opno + 1) % a->eager_depth], what);
        if (status != CHORUS_SUCCESS) return status;
    }
    a->opno = opno;
    a->first_step[opno % a->eager_depth] = step;
    memset(&sig, 0, sizeof sig);
    sig.count = count;
    sig.opno = (uint16_t)opno;
    sig.root = (uint16_t)root;
    sig.coll = (uint8_t)((unsigned)coll | (a->next_device ? ARENA_SIG_DEVICE : 0));
    sig.dtype = (uint8_t)dtype;
    sig.op = (uint8_t)(coll == CHORUS_COLL_REDUCE ? op : CHORUS_SUM);
    sig.valid = 1;
    a->next_device = 0;
    a->chain = eager_mix(eager_mix(a->chain, sig.count),
                         (uint64_t)sig.opno | (uint64_t)sig.root << 16 |
                             (uint64_t)sig.coll << 32 | (uint64_t)sig.dtype << 40 |
                             (uint64_t)sig.op << 48);
    a->last_eager_opno = opno;
    a->last_eager_step = step;
    a->eager_unchecked = 1;
    /* Readers sign their entry too, for the messages of peers that find a mismatch and for
     * the check of the hashes; only writers put data there. The entry's step (release)
     * makes signature, hash and data visible, as the publication makes the step. */
    eager_entry(a, a->me, opno)->sig = sig;
    eager_entry(a, a->me, opno)->chain = a->chain;
    if (writes) memcpy(eager_entry(a, a->me, opno)->data, sendbuf, bytes);
    atomic_store_explicit(&eager_entry(a, a->me, opno)->step, step, memory_order_release);
    arena__publish(a, step);
    if (coll == CHORUS_COLL_BROADCAST) {
        if (a->me == root) {
            if (sendbuf != recvbuf) memcpy(recvbuf, sendbuf, bytes);
            return CHORUS_SUCCESS;
        }
        status = eager_wait(a, step, root, what);
        if (status == CHORUS_SUCCESS) status = eager_compare(a, root, &sig, what);
        if (status != CHORUS_SUCCESS) return status;
        memcpy(recvbuf, eager_entry(a, root, opno)->data, bytes);
        return CHORUS_SUCCESS;
    }
    if (a->me != root) return CHORUS_SUCCESS;
    for (int r = 0; r < a->n && status == CHORUS_SUCCESS; r++)
        if (r != root) status = eager_wait(a, step, r, what);
    for (int r = 0; r < a->n && status == CHORUS_SUCCESS; r++)
        if (r != root) status = eager_compare(a, r, &sig, what);
    if (status != CHORUS_SUCCESS) return status;
    for (int r = 0; r < a->n; r++) a->srcs[r] = eager_entry(a, r, opno)->data;
    /* My own vector from sendbuf; in place, the kernel lets recvbuf alias only the first
     * source, so another root reads a copy. */
    a->srcs[root] = sendbuf;
    if (sendbuf == recvbuf && root != 0) {
        memcpy(own, sendbuf, bytes);
        a->srcs[root] = own;
    }
    status = arena__reduce(a, recvbuf, count, dtype, op);
    if (status != CHORUS_SUCCESS)
        return arena__fail(a, chorus__error(status, "rank %d: arena: %s: reduce failed", a->rank,
                                            what));
    return CHORUS_SUCCESS;
}
