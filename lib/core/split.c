/*
 * chorus_comm_split: ranks exchange (color, key) over the parent's bootstrap ring; the
 * first rank of each color (lowest key, then rank) makes a fresh unique id and serves its
 * rendezvous, the ids travel through a second exchange, and each member joins its new
 * communicator with chorus_comm_init.
 */
#include "core/comm.h"

#include "util/log.h"
#include "util/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t color;
    int32_t key;
    int32_t rank;
    int32_t valid; /* 0: this rank passed bad arguments; everyone fails */
} split_entry_t;

typedef struct {
    int32_t status; /* the leader's chorus_get_unique_id status */
    int32_t pad;
    chorus_unique_id_t id;
} split_id_rec_t;

/* Nonzero if a sorts before b in the new communicator. */
static int split_before(const split_entry_t *a, const split_entry_t *b)
{
    return a->key < b->key || (a->key == b->key && a->rank < b->rank);
}

/* The leader, new rank and size of this rank's color. */
static void split_place(const split_entry_t *all, int nranks, int me, int *leader_p,
                        int *newrank_p, int *newsize_p)
{
    int leader = me, newrank = 0, newsize = 0;

    for (int p = 0; p < nranks; p++) {
        if (all[p].color != all[me].color) continue;
        newsize++;
        if (split_before(&all[p], &all[me])) newrank++;
        if (split_before(&all[p], &all[leader])) leader = p;
    }
    *leader_p = leader;
    *newrank_p = newrank;
    *newsize_p = newsize;
}

/* Exchanges colors and keys; fails on every rank if any rank passed bad arguments. */
static chorus_status_t split_exchange(chorus_comm_t comm, int color, int key, int valid,
                                      split_entry_t *all)
{
    chorus_status_t status;

    memset(&all[comm->rank], 0, sizeof all[0]);
    all[comm->rank].color = color;
    all[comm->rank].key = key;
    all[comm->rank].rank = comm->rank;
    all[comm->rank].valid = valid;
    status = chorus__bootstrap_allgather(comm->bs, all, sizeof all[0]);
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "rank %d: comm_split: exchanging colors", comm->rank);
        return chorus__comm_record_error(comm, status);
    }
    for (int p = 0; p < comm->nranks; p++) {
        if (!all[p].valid)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "rank %d: comm_split: peer %d passed invalid arguments",
                                 comm->rank, p);
    }
    return CHORUS_SUCCESS;
}

/* Leaders make ids; everyone learns its leader's. */
static chorus_status_t split_ids(chorus_comm_t comm, int leader, int is_member,
                                 split_id_rec_t *recs, chorus_unique_id_t *id_p)
{
    split_id_rec_t *mine = &recs[comm->rank];
    chorus_status_t status, local = CHORUS_SUCCESS;

    memset(mine, 0, sizeof *mine);
    if (is_member && leader == comm->rank) {
        local = chorus__bootstrap_new_id(chorus__bootstrap_local_addr(comm->bs), &mine->id);
        if (local != CHORUS_SUCCESS)
            chorus__error_context(local, "rank %d: comm_split: making the new id", comm->rank);
        mine->status = local;
    }
    status = chorus__bootstrap_allgather(comm->bs, recs, sizeof *recs);
    if (local != CHORUS_SUCCESS) return local;
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "rank %d: comm_split: exchanging ids", comm->rank);
        return chorus__comm_record_error(comm, status);
    }
    if (!is_member) return CHORUS_SUCCESS;
    if (recs[leader].status != CHORUS_SUCCESS)
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: comm_split: leader %d failed to make the new id (%s)",
                             comm->rank, leader,
                             chorus_status_string((chorus_status_t)recs[leader].status));
    *id_p = recs[leader].id;
    return CHORUS_SUCCESS;
}

static chorus_status_t split_bad_args(chorus_comm_t comm, int color, chorus_comm_t *newcomm_p)
{
    if (newcomm_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: comm_split: newcomm_p is NULL",
                             comm->rank);
    if (color < 0 && color != CHORUS_SPLIT_NOCOLOR)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: comm_split: color %d is negative and not "
                             "CHORUS_SPLIT_NOCOLOR",
                             comm->rank, color);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_split(chorus_comm_t comm, int color, int key, chorus_comm_t *newcomm_p)
{
    split_entry_t *all = NULL;
    split_id_rec_t *recs = NULL;
    chorus_unique_id_t id;
    chorus_comm_t newcomm = NULL;
    chorus_status_t status;
    int leader, newrank, newsize, valid, is_member = color != CHORUS_SPLIT_NOCOLOR;

    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "comm_split: comm is NULL");
    chorus__log_set_rank(comm->rank);
    status = chorus__comm_check_failed(comm, "comm_split");
    if (status != CHORUS_SUCCESS) return status;
    /* Bad arguments on one rank still take part in the exchange, so that the others fail
     * at once instead of waiting for it until the timeout. */
    valid = newcomm_p != NULL && (color >= 0 || color == CHORUS_SPLIT_NOCOLOR);

    all = calloc((size_t)comm->nranks, sizeof *all);
    recs = calloc((size_t)comm->nranks, sizeof *recs);
    if (all == NULL || recs == NULL) {
        status = chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: comm_split: no memory",
                               comm->rank);
        goto out;
    }
    status = split_exchange(comm, color, key, valid, all);
    if (!valid) {
        status = split_bad_args(comm, color, newcomm_p); /* our own cause, not the echo */
        goto out;
    }
    if (status != CHORUS_SUCCESS) goto out;
    split_place(all, comm->nranks, comm->rank, &leader, &newrank, &newsize);
    CHORUS_CHECK_GOTO(split_ids(comm, leader, is_member, recs, &id), out);
    if (is_member) {
        /* The new communicator is independent of the parent: if it fails to form, the
         * parent's streams are still in step, so the parent is not marked failed. */
        status = chorus_comm_init(&newcomm, newsize, &id, newrank);
        chorus__log_set_rank(comm->rank);
        if (status != CHORUS_SUCCESS) {
            chorus__error_context(status, "rank %d: comm_split: color %d", comm->rank, color);
            goto out;
        }
        /* A part of a reproducible job stays reproducible. */
        newcomm->repro = comm->repro;
    }
    *newcomm_p = newcomm;
out:
    free(recs);
    free(all);
    return status;
}
