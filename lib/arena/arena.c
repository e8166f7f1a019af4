/*
 * Allreduce through the shared arena (see arena.h and arena_int.h for the segment).
 *
 * Flat path (bytes <= flat_max): each rank copies its vector into its flat slot of this
 * operation's parity and publishes one step; once every rank has published it, every rank
 * reduces all n vectors in rank order straight into its recvbuf, so all compute identical
 * bytes with a single synchronisation. Reuse by parity is safe: a rank writes the slot of
 * operation k + 2 only after it saw every rank publish operation k + 1, which each did
 * after it finished reading operation k.
 *
 * Staged path (larger): the vector goes in chunks of `chunk` bytes, each chunk cut into n
 * cache-line-aligned slices, slice r owned by rank r. Per chunk i (slots by the parity of
 * a chunk counter that runs across operations):
 *   A(i) copy my chunk into my slot, except my own slice (I read that one from sendbuf),
 *        publish;
 *   B(i) wait for every A(i); reduce my slice reading every rank's slot in one pass (my
 *        own part from sendbuf) into the shared result area, publish;
 *   C(i) wait for every B(i); copy the whole reduced chunk into recvbuf.
 * and a rank runs A(i + 1) before C(i), so it has useful work while the slowest rank
 * finishes its slice. Memory traffic per byte of the vector is about 4 (copy in: read +
 * write, reduce: read, copy out: read + write, less the own slice), against ~9 for a ring
 * over the shm byte rings, and there are two synchronisations per chunk instead of one
 * per message and step. Safety of the slots: A(i + 1) overwrites the slot of chunk i - 1,
 * and every rank finished reducing i - 1 before it published A(i), which B(i) waited for;
 * B(i) overwrites the result of chunk i - 2, which every rank copied out before A(i).
 * In place (sendbuf == recvbuf) works because C(i) only writes chunk i of recvbuf, after
 * this rank's A(i) and B(i) read it.
 *
 * Each operation's signature (coll, count, dtype, op, number) is published with its first
 * step and checked by every rank before it reads anyone's data: ranks that called
 * different things get CHORUS_ERR_MISMATCH naming the peer, never an overrun.
 */
#include "arena/arena_int.h"

#include "kernels.h"
#include "util/status.h"

#include <stdio.h>
#include <string.h>

chorus_status_t arena__reduce(const chorus_arena_t *a, void *dst, size_t count,
                              chorus_dtype_t dtype, chorus_op_t op)
{
    if (a->exact_divisor > 0)
        return chorus_kernel_reduce_exact(dst, a->srcs, a->n, count, dtype, a->exact_divisor);
    return chorus_kernel_reduce_multi(dst, a->srcs, a->n, count, dtype, op);
}

/* What one staged allreduce works on. */
typedef struct {
    const uint8_t *send;
    uint8_t *recv;
    size_t count;
    size_t esize;
    size_t chunk_elems; /* elements per chunk */
    size_t unit;        /* elements per cache line: slice boundaries fall on lines */
    chorus_dtype_t dtype;
    chorus_op_t op;
    uint64_t s0; /* my step before the operation */
    uint64_t g0; /* the chunk counter before the operation */
    const char *what;
} arena_job_t;

void arena__sig_set(chorus_arena_t *a, chorus_coll_t coll, size_t count, chorus_dtype_t dtype,
                    chorus_op_t op, int root)
{
    arena_sig_t *s = &a->ctl[a->me].sig[a->opno & 1];

    s->count = count;
    s->opno = (uint16_t)a->opno;
    s->root = (uint16_t)root;
    s->coll = (uint8_t)coll;
    s->dtype = (uint8_t)dtype;
    s->op = (uint8_t)op;
    s->valid = 1;
    if (a->next_device) s->coll |= ARENA_SIG_DEVICE;
    a->next_device = 0;
}

void chorus__arena_next_is_device(chorus_arena_t *a)
{
    a->next_device = 1;
}

/* "allreduce #3 of 16 x float32 sum", "broadcast #4 of 2 x int8 root 1", "device allreduce
 * #12 ..." for a device collective (arena_barrier.c), or "no operation" (the peer's fields
 * are only printed, never trusted). */
void arena__sig_text(const arena_sig_t *s, char *buf, size_t len)
{
    chorus_coll_t c = (chorus_coll_t)(s->coll & ~ARENA_SIG_DEVICE);
    const char *coll = chorus__coll_name(c);
    const char *dt = chorus_dtype_name((chorus_dtype_t)s->dtype);
    const char *op = chorus_op_name((chorus_op_t)s->op);
    int reduces = c == CHORUS_COLL_ALLREDUCE || c == CHORUS_COLL_REDUCE ||
                  c == CHORUS_COLL_REDUCE_SCATTER || c == CHORUS_COLL_REDUCE_SCATTERV;
    char tail[48] = "";
    int k;

    if (!s->valid) {
        snprintf(buf, len, "no operation");
        return;
    }
    k = snprintf(buf, len, "%s%s #%u", (s->coll & ARENA_SIG_DEVICE) ? "device " : "",
                 coll != NULL ? coll : "?", (unsigned)s->opno);
    if (c == CHORUS_COLL_BARRIER || k < 0 || (size_t)k >= len) return;
    if (c == CHORUS_COLL_BROADCAST || c == CHORUS_COLL_REDUCE || c == CHORUS_COLL_GATHER ||
        c == CHORUS_COLL_SCATTER)
        snprintf(tail, sizeof tail, " root %u", (unsigned)s->root);
    /* The v-forms' signatures carry a hash of recvcounts (alltoallv: nothing; its counts
     * are compared pair by pair). */
    if (c == CHORUS_COLL_ALLGATHERV || c == CHORUS_COLL_REDUCE_SCATTERV) {
        snprintf(buf + k, len - (size_t)k, " of %s%s%s, recvcounts hash %016llx",
                 dt != NULL ? dt : "?", c == CHORUS_COLL_REDUCE_SCATTERV ? " " : "",
                 c == CHORUS_COLL_REDUCE_SCATTERV ? (op != NULL ? op : "?") : "",
                 (unsigned long long)s->count);
        return;
    }
    if (c == CHORUS_COLL_ALLTOALLV) {
        snprintf(buf + k, len - (size_t)k, " of %s", dt != NULL ? dt : "?");
        return;
    }
    snprintf(buf + k, len - (size_t)k, " of %llu x %s%s%s%s", (unsigned long long)s->count,
             dt != NULL ? dt : "?", reduces ? " " : "", reduces ? (op != NULL ? op : "?") : "",
             tail);
}

chorus_status_t arena__check_sigs(chorus_arena_t *a, int par, const char *what)
{
    return arena__check_sigs_range(a, par, 0, a->n, what);
}

chorus_status_t arena__sig_mismatch(chorus_arena_t *a, int r, const arena_sig_t *theirs,
                                    const arena_sig_t *mine, const char *what)
{
    char t[128], m[128];

    arena__sig_text(theirs, t, sizeof t);
    arena__sig_text(mine, m, sizeof m);
    return arena__fail(a, chorus__error(CHORUS_ERR_MISMATCH, "rank %d: arena: %s: rank %d "
                                        "called %s, this rank %s", a->rank, what, a->ranks[r],
                                        t, m));
}

chorus_status_t arena__check_sigs_range(chorus_arena_t *a, int par, int first, int end,
                                        const char *what)
{
    const arena_sig_t *m = &a->ctl[a->me].sig[par];

    for (int r = first; r < end; r++) {
        const arena_sig_t *s = &a->ctl[r].sig[par];

        if (r == a->me || arena__sig_same(s, m)) continue;
        /* A peer in an eager call (arena_eager.c) signed its entry, not this line. */
        if (arena__eager_sig(a, r, a->opno) != NULL) s = arena__eager_sig(a, r, a->opno);
        return arena__sig_mismatch(a, r, s, m, what);
    }
    return CHORUS_SUCCESS;
}

chorus_status_t arena__enter(chorus_arena_t *a, const char *what)
{
    chorus_status_t status = arena__wait_all(a, a->step, what);
    char late[96];

    a->first_step[(a->opno + 1) % a->eager_depth] = a->step + 1;
    if (status == CHORUS_SUCCESS && a->eager_unchecked) status = arena__eager_check(a, what);
    if (status != CHORUS_SUCCESS || !a->unchecked) return status;
    a->unchecked = 0;
    snprintf(late, sizeof late, "%s (checking the previous call)", what);
    /* A peer that gave up on the previous call (its deadline passed while this rank was
     * late) may still have published its step first: its failure mark says so. */
    for (int r = 0; r < a->n; r++) {
        int32_t failed = atomic_load_explicit(&a->ctl[r].failed, memory_order_acquire);
        if (failed != 0 && r != a->me)
            return arena__fail(a, arena__peer_failed(a, r, failed, late));
    }
    return arena__check_sigs(a, (int)(a->opno & 1), late);
}

static chorus_status_t arena_flat(chorus_arena_t *a, const void *sendbuf, void *recvbuf,
                                  size_t count, chorus_dtype_t dtype, chorus_op_t op,
                                  size_t bytes, const char *what)
{
    int par = (int)(a->opno & 1);
    uint64_t step = a->step + 1;
    chorus_status_t status;
    int inl = bytes <= ARENA_INLINE;

    if (inl) memcpy(a->ctl[a->me].inl[par], sendbuf, bytes);
    else memcpy(a->flat + ((size_t)a->me * 2 + (size_t)par) * a->flat_slot, sendbuf, bytes);
    arena__sig_set(a, CHORUS_COLL_ALLREDUCE, count, dtype, op, 0);
    arena__publish(a, step);
    status = arena__wait_all(a, step, what);
    if (status != CHORUS_SUCCESS) return status;
    status = arena__check_sigs(a, par, what);
    if (status != CHORUS_SUCCESS) return status;
    for (int r = 0; r < a->n; r++)
        a->srcs[r] = inl ? (const void *)a->ctl[r].inl[par]
                         : a->flat + ((size_t)r * 2 + (size_t)par) * a->flat_slot;
    /* My own vector from sendbuf (already in my cache), unless recvbuf is sendbuf and not
     * the first source: the kernel lets dst alias only src[0]. */
    if (sendbuf != recvbuf || a->me == 0) a->srcs[a->me] = sendbuf;
    status = arena__reduce(a, recvbuf, count, dtype, op);
    if (status != CHORUS_SUCCESS)
        return arena__fail(a, chorus__error(status, "rank %d: arena: %s: reduce failed",
                                            a->rank, what));
    return CHORUS_SUCCESS;
}

/* Rank r's slice of a chunk of ce elements: [*off_p, *off_p + *len_p). */
static void arena_slice(const chorus_arena_t *a, const arena_job_t *j, size_t ce, int r,
                        size_t *off_p, size_t *len_p)
{
    size_t units = (ce + j->unit - 1) / j->unit;
    size_t b = units * (size_t)r / (size_t)a->n * j->unit;
    size_t e = units * (size_t)(r + 1) / (size_t)a->n * j->unit;

    if (b > ce) b = ce;
    if (e > ce) e = ce;
    *off_p = b;
    *len_p = e - b;
}

static uint8_t *arena_slot(const chorus_arena_t *a, int r, uint64_t g)
{
    return a->stage + ((size_t)r * 2 + (size_t)(g & 1)) * a->chunk;
}

/* A(i): my chunk, less my own slice, into my slot. */
static void arena_stage_in(chorus_arena_t *a, const arena_job_t *j, size_t i)
{
    size_t co = i * j->chunk_elems, ce = j->count - co < j->chunk_elems ? j->count - co
                                                                        : j->chunk_elems;
    uint8_t *slot = arena_slot(a, a->me, j->g0 + i);
    const uint8_t *src = j->send + co * j->esize;
    size_t off, len;

    arena_slice(a, j, ce, a->me, &off, &len);
    memcpy(slot, src, off * j->esize);
    memcpy(slot + (off + len) * j->esize, src + (off + len) * j->esize,
           (ce - off - len) * j->esize);
    arena__publish(a, j->s0 + 2 * i + 1);
}

/* B(i): reduce my slice of chunk i into the result area. */
static chorus_status_t arena_stage_reduce(chorus_arena_t *a, const arena_job_t *j, size_t i)
{
    size_t co = i * j->chunk_elems, ce = j->count - co < j->chunk_elems ? j->count - co
                                                                        : j->chunk_elems;
    uint64_t g = j->g0 + i;
    size_t off, len;
    chorus_status_t status;

    status = arena__wait_all(a, j->s0 + 2 * i + 1, j->what);
    if (status != CHORUS_SUCCESS) return status;
    if (i == 0) {
        status = arena__check_sigs(a, (int)(a->opno & 1), j->what);
        if (status != CHORUS_SUCCESS) return status;
    }
    arena_slice(a, j, ce, a->me, &off, &len);
    if (len > 0) {
        for (int r = 0; r < a->n; r++) a->srcs[r] = arena_slot(a, r, g) + off * j->esize;
        a->srcs[a->me] = j->send + (co + off) * j->esize;
        status = arena__reduce(a, a->res + (size_t)(g & 1) * a->chunk + off * j->esize, len,
                               j->dtype, j->op);
        if (status != CHORUS_SUCCESS)
            return arena__fail(a, chorus__error(status, "rank %d: arena: %s: reduce failed",
                                                a->rank, j->what));
    }
    arena__publish(a, j->s0 + 2 * i + 2);
    return CHORUS_SUCCESS;
}

/* C(i): the reduced chunk i into recvbuf, slice by slice as their owners finish, starting
 * with mine (still in my cache), so a rank copies while the slowest one still reduces. */
static chorus_status_t arena_stage_out(chorus_arena_t *a, const arena_job_t *j, size_t i)
{
    size_t co = i * j->chunk_elems, ce = j->count - co < j->chunk_elems ? j->count - co
                                                                        : j->chunk_elems;
    const uint8_t *res = a->res + (size_t)((j->g0 + i) & 1) * a->chunk;
    chorus_status_t status;
    size_t off, len;

    for (int k = 0; k < a->n; k++) {
        int r = a->me + k < a->n ? a->me + k : a->me + k - a->n;

        status = arena__wait_range(a, j->s0 + 2 * i + 2, r, r + 1, j->what);
        if (status != CHORUS_SUCCESS) return status;
        arena_slice(a, j, ce, r, &off, &len);
        chorus_kernel_copy_stream(j->recv + (co + off) * j->esize, res + off * j->esize,
                                  len * j->esize, 3 * j->count * j->esize);
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t arena_staged(chorus_arena_t *a, const void *sendbuf, void *recvbuf,
                                    size_t count, chorus_dtype_t dtype, chorus_op_t op,
                                    size_t esize, const char *what)
{
    arena_job_t j = {sendbuf, recvbuf, count, esize, a->chunk / esize, ARENA_LINE / esize,
                     dtype, op, a->step, a->gchunk, what};
    size_t nchunks = (count + j.chunk_elems - 1) / j.chunk_elems;
    chorus_status_t status;

    arena__sig_set(a, CHORUS_COLL_ALLREDUCE, count, dtype, op, 0);
    arena_stage_in(a, &j, 0);
    for (size_t i = 0; i < nchunks; i++) {
        status = arena_stage_reduce(a, &j, i);
        if (status != CHORUS_SUCCESS) return status;
        if (i + 1 < nchunks) arena_stage_in(a, &j, i + 1);
        status = arena_stage_out(a, &j, i);
        if (status != CHORUS_SUCCESS) return status;
    }
    a->gchunk += nchunks;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__arena_allreduce(chorus_arena_t *arena, const void *sendbuf,
                                        void *recvbuf, size_t count, chorus_dtype_t dtype,
                                        chorus_op_t op, const char *what)
{
    size_t esize = chorus_dtype_size(dtype), bytes = count * esize;
    chorus_status_t status;

    if (esize == 0 || ARENA_LINE % esize != 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: arena: %s: bad dtype %d",
                             arena->rank, what, (int)dtype);
    status = arena__enter(arena, what);
    if (status != CHORUS_SUCCESS) return status;
    arena->opno++;
    if (bytes <= arena->flat_slot)
        return arena_flat(arena, sendbuf, recvbuf, count, dtype, op, bytes, what);
    if (arena->nwins > 0 &&
        arena__direct_allreduce(arena, sendbuf, recvbuf, count, dtype, op, what, &status))
        return status;
    return arena_staged(arena, sendbuf, recvbuf, count, dtype, op, esize, what);
}

int chorus__arena_supports(const chorus_arena_t *arena, chorus_coll_t coll)
{
    if (arena == NULL) return 0;
    /* alltoallv starts by publishing every rank's two count arrays in a flat slot. */
    if (coll == CHORUS_COLL_ALLTOALLV)
        return ((size_t)arena->n * 2 + 1) * sizeof(uint64_t) <= arena->flat_slot;
    return coll != CHORUS_COLL_SENDRECV && (unsigned)coll < CHORUS_NUM_COLLS;
}

void chorus__arena_win_stats(const chorus_arena_t *arena, uint64_t *calls_p, uint64_t *bytes_p)
{
    *calls_p = arena != NULL ? arena->win_calls : 0;
    *bytes_p = arena != NULL ? arena->win_bytes : 0;
}

size_t chorus__arena_flat_max(const chorus_arena_t *arena)
{
    return arena != NULL ? arena->flat_slot : 0;
}

size_t chorus__arena_chunk_bytes(const chorus_arena_t *arena)
{
    return arena != NULL ? arena->chunk : 0;
}
