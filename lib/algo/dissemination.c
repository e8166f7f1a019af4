/*
 * Dissemination barrier: in round k = 0..ceil(log2 n)-1 rank r signals r + 2^k and waits
 * for r - 2^k. After the last round every rank has heard, directly or through others,
 * from every rank, so none leaves before all have entered.
 *
 * The messages are empty. Round k + 1's send must wait for the receives of all rounds up
 * to k (waiting for round k's alone would only cover one chain of ranks). The builder
 * orders an empty message like one element at its offset: round k receives at
 * SCRATCH[k + 1], and a one-element COPY SCRATCH[k + 1] = SCRATCH[k] after it joins that
 * receive to the chain of earlier rounds; round k + 1 sends from SCRATCH[k + 1]. No
 * receive waits on a send, and no message carries data.
 */
#include "algo/algo.h"

#include "util/status.h"

chorus_status_t chorus__algo_dissemination(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, r = a->rank, d, k = 0;

    if (a->coll != CHORUS_COLL_BARRIER)
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "rank %d: dissemination does not implement %s", a->rank,
                             chorus__coll_name(a->coll));
    for (d = 1; d < n; d <<= 1, k++) {
        chorus__sched_send(s, (r + d) % n, SCRATCH_AT((uint64_t)k), 0);
        chorus__sched_recv(s, ((r - d) % n + n) % n, SCRATCH_AT((uint64_t)k + 1), 0);
        if (k > 0) chorus__sched_copy(s, SCRATCH_AT((uint64_t)k + 1), SCRATCH_AT((uint64_t)k), 1);
    }
    /* Offsets name the ordering points; reserve them so that the engine's base pointer
     * plus offset stays inside a real allocation. */
    if (k) chorus__sched_scratch(s, (uint64_t)k + 1);
    return chorus__sched_finalize(s);
}
