/* Placeholder until the builder lands: reports the algorithm as not implemented. */
#include "algo/algo.h"

#include "util/status.h"

chorus_status_t chorus__algo_swing(const chorus_coll_args_t *args, chorus_sched_t *s)
{
    (void)s;
    return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: swing: not implemented yet", args->rank);
}
