/*
 * Pairwise exchange alltoall (and alltoallv, at the end). At step k = 0..n-1 rank r trades blocks with j = (k - r)
 * mod n, which at the same step trades with (k - j) mod n = r; the one step where j == r
 * copies the rank's own block. Pairing partners (rather than sending to r + k while
 * receiving from r - k) keeps the life of a block within one step, which is what lets
 * in-place calls work with a few scratch slots.
 *
 * In place, RECV[j] aliases SEND[j], and the builder does not order RECV writes after
 * SEND reads (they are different symbolic buffers). So the outgoing block is first copied
 * to a slot T, the incoming block lands in a slot R, and R is moved to T once the send
 * from T is done (a write-after-read the builder sees) and from T to RECV[j]: that last
 * copy is ordered after the copy that read SEND[j]. No receive waits on a send.
 */
#include "algo/algo.h"

#include "util/status.h"

#define PAIRWISE_SLOTS 4

static void pairwise_alltoall(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, r = a->rank, k;
    uint64_t cnt = a->count, nslots = n - 1 < PAIRWISE_SLOTS ? (uint64_t)(n - 1) : PAIRWISE_SLOTS;
    uint64_t tbase = 0, rbase = 0, i = 0;

    if (nslots) {
        tbase = chorus__sched_scratch(s, nslots * cnt);
        rbase = chorus__sched_scratch(s, nslots * cnt);
    }
    for (k = 0; k < n; k++) {
        int j = ((k - r) % n + n) % n;
        uint64_t blk = (uint64_t)j * cnt, t, rs;

        if (j == r) {
            chorus__sched_copy(s, RECV_AT(blk), SEND_AT(blk), cnt);
            continue;
        }
        t = tbase + (i % nslots) * cnt;
        rs = rbase + (i % nslots) * cnt;
        i++;
        chorus__sched_copy(s, SCRATCH_AT(t), SEND_AT(blk), cnt);
        chorus__sched_send(s, j, SCRATCH_AT(t), cnt);
        chorus__sched_recv(s, j, SCRATCH_AT(rs), cnt);
        chorus__sched_copy(s, SCRATCH_AT(t), SCRATCH_AT(rs), cnt);
        chorus__sched_copy(s, RECV_AT(blk), SCRATCH_AT(t), cnt);
    }
}

/* alltoallv: the same pairing, but straight from SEND to RECV, because alltoallv has no
 * in-place form (chorus.h) and its receive blocks are disjoint (checked by lib/core), so no
 * step of the schedule depends on another and every exchange is in flight at once. The
 * messages of a pair are sent even when empty: both ranks then exchange call signatures,
 * which carry the pair's counts (lib/core/coll_v.c), so a rank that expects data its peer
 * does not mean to send is told of the mismatch instead of waiting for it. */
static void pairwise_alltoallv(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, r = a->rank;
    uint64_t cnt = a->count;

    for (int k = 0; k < n; k++) {
        int j = ((k - r) % n + n) % n;
        uint64_t scount = chorus__algo_vcount(a->sendcounts, cnt, j);
        uint64_t soff = chorus__algo_vdispl(a->sdispls, cnt, j);
        uint64_t rcount = chorus__algo_vcount(a->recvcounts, cnt, j);
        uint64_t roff = chorus__algo_vdispl(a->rdispls, cnt, j);

        if (j == r) {
            chorus__sched_copy(s, RECV_AT(roff), SEND_AT(soff), rcount);
            continue;
        }
        chorus__sched_send(s, j, SEND_AT(soff), scount);
        chorus__sched_recv(s, j, RECV_AT(roff), rcount);
    }
}

chorus_status_t chorus__algo_pairwise(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    if (a->coll == CHORUS_COLL_ALLTOALLV) {
        if (a->count != 0 || a->sendcounts != NULL) pairwise_alltoallv(a, s);
        return chorus__sched_finalize(s);
    }
    if (a->coll != CHORUS_COLL_ALLTOALL)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: pairwise does not implement %s",
                             a->rank, chorus__coll_name(a->coll));
    if (a->count != 0) pairwise_alltoall(a, s);
    return chorus__sched_finalize(s);
}
