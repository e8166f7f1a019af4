/*
 * Bruck's allgather: ceil(log2 n) steps for any n, one message per step, which is what
 * small allgathers need (the ring takes n - 1 steps).
 *
 * Blocks are gathered in a scratch vector W in rotated order, W[k] holding the block of
 * rank r + k. At the step of distance d rank r sends W[0 .. m) to r - d and receives
 * W[d .. d + m) from r + d, m = min(d, n - d): the receiver's W[d + j] is rank
 * (r + d) + j's block, which is the sender's W[j]. A final local rotation puts W[k] at
 * RECV block r + k.
 *
 * SEND is only read by the first copy into W (the first send leaves from W, not SEND);
 * in place the rotation's write of RECV block r, which aliases SEND, reads W[0] and so
 * follows that copy.
 */
#include "algo/algo.h"

#include "util/status.h"

#define BRUCK_DEFAULT_CHUNK (128u * 1024u)

static void bruck_allgather(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, r = a->rank, d;
    uint64_t c = a->count, total = (uint64_t)n * c, w = chorus__sched_scratch(s, total);
    uint64_t chunk = a->chunk_count ? a->chunk_count : BRUCK_DEFAULT_CHUNK, off;

    if (chunk > total) chunk = total;
    chorus__sched_copy(s, SCRATCH_AT(w), SEND_AT(0), c);
    for (d = 1; d < n; d *= 2) {
        uint64_t len = (uint64_t)(d < n - d ? d : n - d) * c;
        uint64_t at = w + (uint64_t)d * c;

        for (off = 0; off < len; off += chunk) {
            uint64_t k = len - off < chunk ? len - off : chunk;

            chorus__sched_send(s, (r - d + n) % n, SCRATCH_AT(w + off), k);
            chorus__sched_recv(s, (r + d) % n, SCRATCH_AT(at + off), k);
        }
    }
    chorus__sched_copy(s, RECV_AT((uint64_t)r * c), SCRATCH_AT(w), (uint64_t)(n - r) * c);
    chorus__sched_copy(s, RECV_AT(0), SCRATCH_AT(w + (uint64_t)(n - r) * c), (uint64_t)r * c);
}

chorus_status_t chorus__algo_bruck(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    if (a->coll != CHORUS_COLL_ALLGATHER)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: bruck does not implement %s",
                             a->rank, chorus__coll_name(a->coll));
    if (a->count == 0) return chorus__sched_finalize(s);
    if (a->nranks == 1)
        chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
    else
        bruck_allgather(a, s);
    return chorus__sched_finalize(s);
}
