/*
 * The order-fixed reductions of reproducible communicators (chorus.h,
 * chorus_comm_set_reproducible; lib/core/coll.c sends their floating-point allreduce,
 * reduce_scatter and reduce here whatever algorithm was chosen, unless the shared arena
 * runs them). Every element is reduced once, on the rank that owns its block, from all n
 * contributions at once, in rank order 0..n-1 (one REDUCE_N step a chunk; summed exactly
 * at level 2). Where an element's contributions travel and in what pieces changes nothing
 * in its arithmetic, so the result's bytes depend on the rank count alone: not on the chunk
 * size, the transport, the timing, or which rank computes it. They are also the bytes of
 * the shared arena, which folds the same sources in the same order (lib/arena).
 *
 * Phase 1, reduce-scatter by direct exchange: in round k = 1..n-1 a rank sends to me + k
 * the part of its input that rank owns and receives its own part from me - k, chunk by
 * chunk, into scratch where a chunk's n sources lie side by side (its own input copied
 * in). Each rank sends and receives (n - 1)/n of the vector, the ring's volume, as n - 1
 * concurrent streams rather than n - 1 dependent steps; the price is n - 1 receive
 * buffers of scratch and no reduction overlapped with later transfers of the same chunk.
 * Phase 2: allreduce sends its reduced block to every rank the same way; reduce sends it
 * to the root.
 *
 * Blocks: allreduce and reduce split count as evenly as whole elements allow; the blocks
 * of reduce_scatter are its recvcount each. Senders cut a block into chunks exactly as its
 * owner does (the same chunk size), so the k-th send to a peer is its k-th receive.
 */
#include "algo/algo.h"

/* Elements per chunk when the caller leaves it to the algorithm. */
#define DIRECT_CHUNK (1u << 16)

typedef struct {
    const chorus_coll_args_t *a;
    int n, me;
    uint64_t chunk;
    chorus_ref_t result; /* where my reduced block goes */
} direct_t;

/* Where block b starts in the vector (for reduce_scatter: in the send buffer). */
static uint64_t block_lo(const direct_t *d, int b)
{
    const uint64_t n = (uint64_t)d->n, q = d->a->count / n, r = d->a->count % n;

    if (d->a->coll == CHORUS_COLL_REDUCE_SCATTER) return d->a->count * (uint64_t)b;
    return q * (uint64_t)b + r * (uint64_t)b / n; /* count * b / n without overflow */
}

static uint64_t block_len(const direct_t *d, int b)
{
    if (d->a->coll == CHORUS_COLL_REDUCE_SCATTER) return d->a->count;
    return block_lo(d, b + 1) - block_lo(d, b);
}

static uint64_t nchunks(const direct_t *d, int b)
{
    return (block_len(d, b) + d->chunk - 1) / d->chunk;
}

/* Elements of chunk j of block b. */
static uint64_t chunk_len(const direct_t *d, int b, uint64_t j)
{
    uint64_t left = block_len(d, b) - j * d->chunk;
    return left < d->chunk ? left : d->chunk;
}

/* Where my reduced block goes: RECV (reduce_scatter: all of it), or fresh scratch on a
 * reduce's non-root, whose RECV is not the caller's to write. */
static chorus_ref_t result_of(const direct_t *d, chorus_sched_t *s)
{
    if (d->a->coll == CHORUS_COLL_REDUCE_SCATTER) return RECV_AT(0);
    if (d->a->coll == CHORUS_COLL_REDUCE && d->me != d->a->root)
        return SCRATCH_AT(chorus__sched_scratch(s, block_len(d, d->me)));
    return RECV_AT(block_lo(d, d->me));
}

static chorus_ref_t at(chorus_ref_t r, uint64_t off)
{
    return chorus_ref((chorus_buf_id_t)r.buf, r.off + off);
}

/* Phase 1: my block reduced into RECV from every rank's input. */
static void reduce_scatter(const direct_t *d, chorus_sched_t *s, uint64_t maxj)
{
    const int n = d->n, me = d->me;
    const uint64_t mine = block_len(d, me);
    /* A chunk's sources lie stride apart; a block smaller than a chunk needs less. */
    const uint64_t stride = mine < d->chunk ? mine : d->chunk;
    const uint64_t nmine = nchunks(d, me);
    uint64_t base;

    if (n == 1) {
        for (uint64_t j = 0; j < nmine; j++)
            chorus__sched_reduce_n(s, at(d->result, j * d->chunk),
                                   SEND_AT(block_lo(d, me) + j * d->chunk), 1, d->chunk,
                                   chunk_len(d, me, j));
        return;
    }
    base = chorus__sched_scratch(s, nmine * (uint64_t)n * stride);
    for (uint64_t j = 0; j < maxj; j++) {
        for (int k = 1; k < n; k++) {
            const int to = (me + k) % n, from = (me - k + n) % n;
            if (j < nchunks(d, to))
                chorus__sched_send(s, to, SEND_AT(block_lo(d, to) + j * d->chunk),
                                   chunk_len(d, to, j));
            if (j < nmine)
                chorus__sched_recv(s, from, SCRATCH_AT(base + (j * n + (uint64_t)from) * stride),
                                   chunk_len(d, me, j));
        }
        if (j >= nmine) continue;
        chorus__sched_copy(s, SCRATCH_AT(base + (j * n + (uint64_t)me) * stride),
                           SEND_AT(block_lo(d, me) + j * d->chunk), chunk_len(d, me, j));
        chorus__sched_reduce_n(s, at(d->result, j * d->chunk), SCRATCH_AT(base + j * n * stride),
                               (uint32_t)n, stride, chunk_len(d, me, j));
    }
}

/* Phase 2 of allreduce: every block to every rank. */
static void allgather(const direct_t *d, chorus_sched_t *s, uint64_t maxj)
{
    const int n = d->n, me = d->me;

    for (uint64_t j = 0; j < maxj; j++)
        for (int k = 1; k < n; k++) {
            const int to = (me + k) % n, from = (me - k + n) % n;
            if (j < nchunks(d, me))
                chorus__sched_send(s, to, RECV_AT(block_lo(d, me) + j * d->chunk),
                                   chunk_len(d, me, j));
            if (j < nchunks(d, from))
                chorus__sched_recv(s, from, RECV_AT(block_lo(d, from) + j * d->chunk),
                                   chunk_len(d, from, j));
        }
}

/* Phase 2 of reduce: every block to the root. */
static void gather(const direct_t *d, chorus_sched_t *s)
{
    const int root = d->a->root;

    if (d->me != root) {
        for (uint64_t j = 0; j < nchunks(d, d->me); j++)
            chorus__sched_send(s, root, at(d->result, j * d->chunk), chunk_len(d, d->me, j));
        return;
    }
    for (int p = 0; p < d->n; p++)
        for (uint64_t j = 0; p != root && j < nchunks(d, p); j++)
            chorus__sched_recv(s, p, RECV_AT(block_lo(d, p) + j * d->chunk),
                               chunk_len(d, p, j));
}

chorus_status_t chorus__algo_direct(const chorus_coll_args_t *args, chorus_sched_t *s)
{
    direct_t d = {args, args->nranks, args->rank,
                  args->chunk_count ? args->chunk_count : DIRECT_CHUNK, RECV_AT(0)};
    uint64_t maxj = 0;

    if (args->coll == CHORUS_COLL_GATHER || args->coll == CHORUS_COLL_SCATTER)
        return chorus__algo_direct_move(args, s);
    d.result = result_of(&d, s);
    for (int b = 0; b < d.n; b++)
        if (nchunks(&d, b) > maxj) maxj = nchunks(&d, b);
    reduce_scatter(&d, s, maxj);
    if (args->coll == CHORUS_COLL_ALLREDUCE) allgather(&d, s, maxj);
    if (args->coll == CHORUS_COLL_REDUCE) gather(&d, s);
    return chorus__sched_finalize(s);
}
