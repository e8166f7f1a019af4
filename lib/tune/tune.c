/* Placeholder until the cost model lands: no model, selection stays with lib/core. */
#include "tune/tune.h"

#include <stddef.h>

chorus_status_t chorus__tune_create(struct chorus_comm *comm, chorus_tune_t **tune_p)
{
    (void)comm;
    *tune_p = NULL;
    return CHORUS_SUCCESS;
}

void chorus__tune_destroy(chorus_tune_t *tune)
{
    (void)tune;
}
