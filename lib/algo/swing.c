/*
 * Swing allreduce (De Sensi et al., NSDI 2024), the bandwidth-optimal variant: a
 * reduce-scatter then an allgather, log2(p) steps each, over the swing peers. At step s
 * rank r pairs with r + rho(s) if r is even and r - rho(s) if odd (mod p), where
 * rho(s) = sum_{i<=s} (-2)^i = 1, -1, 3, -5, 11, ...: the distances stay shorter than
 * recursive doubling's 2^s, which matters on rings and tori.
 *
 * At each reduce-scatter step a rank keeps the blocks of the ranks it still reaches in the
 * later steps and sends its partner those the partner reaches. These reach sets nest like
 * a binary tree, so numbering the blocks in the tree's order makes every set a contiguous,
 * aligned range of positions, and Swing becomes recursive halving over positions with a
 * different pairing: the machinery of halving.h, one message per step, no gathering of
 * scattered blocks. Position bit L-1-s says in which half of its step-s set a rank lies,
 * the half with the smaller least rank being 0, which every rank computes alike.
 *
 * Ranks that are not a power of two are folded first (halving.h).
 */
#include "algo/halving.h"

#include "util/status.h"

static int swing_peer(int r, int st, int p)
{
    int64_t rho = 0, t = 1, x;
    int i;

    for (i = 0; i <= st; i++) {
        rho += t;
        t *= -2;
    }
    x = r % 2 == 0 ? r + rho : r - rho;
    return (int)(((x % p) + p) % p);
}

/* The least rank that x reaches through steps st .. L-1 (itself included). The
 * recursion visits 2^(L - st) ranks, so a rank's whole plan costs about 2p. */
static int swing_least(int x, int st, int L, int p)
{
    int a, b;

    if (st == L) return x;
    a = swing_least(x, st + 1, L, p);
    b = swing_least(swing_peer(x, st, p), st + 1, L, p);
    return a < b ? a : b;
}

static void swing_plan(int p, int v, chorus_hd_plan_t *plan)
{
    int L = 0, st;

    while ((1 << L) < p) L++;
    plan->pos = 0;
    for (st = 0; st < L; st++) {
        int q = swing_peer(v, st, p);

        plan->peer[st] = q;
        if (swing_least(v, st + 1, L, p) > swing_least(q, st + 1, L, p))
            plan->pos |= 1 << (L - 1 - st);
    }
}

chorus_status_t chorus__algo_swing(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    if (a->coll != CHORUS_COLL_ALLREDUCE)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: swing does not implement %s",
                             a->rank, chorus__coll_name(a->coll));
    if (a->count == 0) return chorus__sched_finalize(s);
    if (a->nranks == 1)
        chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
    else
        chorus__hd_allreduce(a, s, swing_plan);
    return chorus__sched_finalize(s);
}
