/*
 * chorus_comm_grow (issue 39): a live communicator takes in new ranks, as NCCL's
 * ncclCommGrow does. The new communicator is an ordinary one, made by chorus_comm_init on
 * an id whose rendezvous rank 0 serves: the comm's ranks keep their ranks, the newcomers
 * take the ones after them. So a newcomer needs nothing but the id (and its rank), and the
 * id's secret keeps strangers out as at any init. The comm's own connections carry the id
 * from rank 0 to its peers and check that every rank asks for the same growth before
 * anyone starts the rendezvous.
 */
#include "core/comm.h"

#include "bootstrap/bootstrap.h"
#include "util/status.h"

#include <stdint.h>
#include <string.h>

chorus_status_t chorus_comm_grow(chorus_comm_t comm, int nnew, const chorus_unique_id_t *id,
                                 chorus_comm_t *newcomm_p)
{
    chorus_unique_id_t shared;
    int64_t ask[2], lo[2];
    chorus_comm_t grown = NULL;
    chorus_status_t status;
    double timeout;

    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_grow: comm is NULL");
    if (newcomm_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: chorus_comm_grow: newcomm_p is NULL", comm->rank);
    if (nnew < 1 || (int64_t)nnew + comm->nranks > (int64_t)CHORUS_BS_MAX_RANKS)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: chorus_comm_grow: %d new ranks: 1 to %d more than the "
                             "comm's %d", comm->rank, nnew,
                             CHORUS_BS_MAX_RANKS - comm->nranks, comm->nranks);
    if (comm->rank == 0 && id == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank 0: chorus_comm_grow: id is NULL (rank 0 gives the id)");
    /* Every rank must ask for the same growth: min and max of the count agree. */
    ask[0] = nnew;
    ask[1] = -(int64_t)nnew;
    status = chorus_allreduce(ask, lo, 2, CHORUS_INT64, CHORUS_MIN, comm, NULL);
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "rank %d: chorus_comm_grow", comm->rank);
    if (lo[0] != nnew || -lo[1] != nnew)
        return chorus__error(CHORUS_ERR_MISMATCH,
                             "rank %d: chorus_comm_grow: ranks ask for %lld to %lld new ranks, "
                             "this one %d", comm->rank, (long long)lo[0], (long long)-lo[1], nnew);
    memset(&shared, 0, sizeof shared);
    if (comm->rank == 0) shared = *id;
    status = chorus_broadcast(&shared, &shared, sizeof shared, CHORUS_UINT8, 0, comm, NULL);
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "rank %d: chorus_comm_grow: the id", comm->rank);
    timeout = comm->timeout_s;
    status = chorus_comm_init(&grown, comm->nranks + nnew, &shared, comm->rank);
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "rank %d: chorus_comm_grow to %d ranks", comm->rank,
                                     comm->nranks + nnew);
    /* The grown comm keeps this comm's deadline (chorus_comm_set_timeout). */
    (void)chorus_comm_set_timeout(grown, timeout);
    *newcomm_p = grown;
    return CHORUS_SUCCESS;
}
