/*
 * Recursive doubling allreduce and allgather. With p the largest power of two <= nranks, the ranks
 * p..n-1 first fold their vector into partner r - p and receive the result from it at
 * the end; the p others exchange whole vectors with r ^ mask for mask = 1, 2, ..., p/2.
 *
 * Both partners of an exchange must compute bitwise the same value, so the reduction
 * always takes the lower rank's partial as the first operand and the higher's as the
 * second: by induction every rank of an aligned block of 2^k ranks holds the same bits.
 *
 * Rounds run outside and chunks inside, so chunk c of round k + 1 starts as soon as chunk
 * c of round k is reduced. Received chunks land in one count-sized scratch vector; its
 * chunk c is refilled in the next round only after the reduction that read it.
 *
 * Allgather by recursive doubling: for a power of two, rank r exchanges the aligned group
 * of blocks it holds with r ^ mask, doubling the group each round, log2(n) messages. For
 * other sizes the groups of the partners would overlap or leave holes, so rd hands
 * allgather to Bruck's algorithm, which takes the same ceil(log2 n) rounds for any n;
 * that keeps CHORUS_ALGO_RD usable for allgather on every communicator.
 */
#include "algo/algo.h"

#include "util/status.h"

#define RD_DEFAULT_CHUNK (128u * 1024u)

static void rd_allreduce(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, r = a->rank, p = 1, mask;
    uint64_t cnt = a->count, chunk = a->chunk_count ? a->chunk_count : RD_DEFAULT_CHUNK;
    uint64_t tmp, off;

    while (p * 2 <= n) p *= 2;
    if (chunk > cnt) chunk = cnt;
    if (r >= p) {
        for (off = 0; off < cnt; off += chunk)
            chorus__sched_send(s, r - p, SEND_AT(off), cnt - off < chunk ? cnt - off : chunk);
        for (off = 0; off < cnt; off += chunk)
            chorus__sched_recv(s, r - p, RECV_AT(off), cnt - off < chunk ? cnt - off : chunk);
        return;
    }
    tmp = chorus__sched_scratch(s, cnt);
    if (r + p < n) {
        for (off = 0; off < cnt; off += chunk) {
            uint64_t len = cnt - off < chunk ? cnt - off : chunk;

            chorus__sched_recv(s, r + p, SCRATCH_AT(tmp + off), len);
            chorus__sched_reduce(s, RECV_AT(off), SEND_AT(off), SCRATCH_AT(tmp + off), len);
        }
    } else {
        /* The exchanges send from RECV, whose writes the builder orders; sending from SEND
         * could race, in place, with the first reduction into the aliased RECV. */
        chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), cnt);
    }
    for (mask = 1; mask < p; mask <<= 1) {
        int q = r ^ mask;

        for (off = 0; off < cnt; off += chunk) {
            uint64_t len = cnt - off < chunk ? cnt - off : chunk;
            chorus_ref_t mine = RECV_AT(off), theirs = SCRATCH_AT(tmp + off);

            chorus__sched_send(s, q, mine, len);
            chorus__sched_recv(s, q, theirs, len);
            if (r < q)
                chorus__sched_reduce(s, mine, mine, theirs, len);
            else
                chorus__sched_reduce(s, mine, theirs, mine, len);
        }
    }
    if (r + p < n)
        for (off = 0; off < cnt; off += chunk)
            chorus__sched_send(s, r + p, RECV_AT(off), cnt - off < chunk ? cnt - off : chunk);
}

/* In place the first copy is onto itself; the first round sends from SEND so that it need
 * not wait for the copy, and later rounds send from RECV, ordered after it. Each round
 * receives a region nobody has sent yet, so no receive waits on a send. */
static void rd_allgather(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, r = a->rank, mask;
    uint64_t c = a->count, chunk = a->chunk_count ? a->chunk_count : RD_DEFAULT_CHUNK, off;

    if (chunk > c * (uint64_t)n / 2) chunk = c * (uint64_t)n / 2;
    if (chunk == 0) chunk = 1;
    chorus__sched_copy(s, RECV_AT((uint64_t)r * c), SEND_AT(0), c);
    for (mask = 1; mask < n; mask <<= 1) {
        int q = r ^ mask;
        uint64_t len = (uint64_t)mask * c, mine = (uint64_t)(r & ~(mask - 1)) * c;
        uint64_t theirs = (uint64_t)(q & ~(mask - 1)) * c;

        for (off = 0; off < len; off += chunk) {
            uint64_t k = len - off < chunk ? len - off : chunk;

            chorus__sched_send(s, q, mask == 1 ? SEND_AT(off) : RECV_AT(mine + off), k);
            chorus__sched_recv(s, q, RECV_AT(theirs + off), k);
        }
    }
}

chorus_status_t chorus__algo_rd(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    if (a->coll == CHORUS_COLL_ALLGATHER) {
        if (a->nranks & (a->nranks - 1)) return chorus__algo_bruck(a, s);
        if (a->count == 0) return chorus__sched_finalize(s);
        rd_allgather(a, s);
        return chorus__sched_finalize(s);
    }
    if (a->coll != CHORUS_COLL_ALLREDUCE)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: rd does not implement %s",
                             a->rank, chorus__coll_name(a->coll));
    if (a->count == 0) return chorus__sched_finalize(s);
    if (a->nranks == 1)
        chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
    else
        rd_allreduce(a, s);
    return chorus__sched_finalize(s);
}
