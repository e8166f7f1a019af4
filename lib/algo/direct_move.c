/*
 * Gather and scatter by direct exchange: the root receives every rank's block straight into
 * its place in RECV (gather), or sends every rank its block straight from SEND (scatter).
 * Each non-root rank has one message, with the root; the root has n - 1, all independent,
 * so the engine keeps them in flight together and the root's link, which must carry all
 * (n - 1) blocks whatever the algorithm, is busy from the start. A binomial tree would cut
 * the root's message count to log2 n at the price of forwarding every block through
 * intermediate ranks (and scratch to hold them); the blocks of these collectives are the
 * sizes a training job gathers (activations, parameter shards), where the bytes, not the
 * message count, dominate, so the direct form is kept until a measurement says otherwise.
 *
 * The root posts its messages starting with rank root + 1, so that when several
 * communicators gather to different roots the ranks are not all served in the same order.
 * In place (chorus.h): the root's block is copied onto itself, which the engine skips.
 */
#include "algo/algo.h"

#include "util/status.h"

static void direct_gather(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, me = a->rank, root = a->root;
    uint64_t cnt = a->count;

    if (me != root) {
        chorus__sched_send(s, root, SEND_AT(0), cnt);
        return;
    }
    chorus__sched_copy(s, RECV_AT((uint64_t)root * cnt), SEND_AT(0), cnt);
    for (int k = 1; k < n; k++) {
        int p = (root + k) % n;
        chorus__sched_recv(s, p, RECV_AT((uint64_t)p * cnt), cnt);
    }
}

static void direct_scatter(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, me = a->rank, root = a->root;
    uint64_t cnt = a->count;

    if (me != root) {
        chorus__sched_recv(s, root, RECV_AT(0), cnt);
        return;
    }
    for (int k = 1; k < n; k++) {
        int p = (root + k) % n;
        chorus__sched_send(s, p, SEND_AT((uint64_t)p * cnt), cnt);
    }
    chorus__sched_copy(s, RECV_AT(0), SEND_AT((uint64_t)root * cnt), cnt);
}

chorus_status_t chorus__algo_direct_move(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    if (a->count != 0) {
        if (a->coll == CHORUS_COLL_GATHER) direct_gather(a, s);
        else if (a->coll == CHORUS_COLL_SCATTER) direct_scatter(a, s);
        else
            return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: direct does not move %s",
                                 a->rank, chorus__coll_name(a->coll));
    }
    return chorus__sched_finalize(s);
}
