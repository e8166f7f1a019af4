/*
 * The virtual transport: all ranks in one process, for tests. It is strict on purpose:
 * a send completes only when the matching receive has been posted and the data copied
 * (no buffering), so a schedule that passes here cannot depend on a transport's buffers.
 */
#ifndef CHORUS_TRANSPORT_VIRTUAL_H
#define CHORUS_TRANSPORT_VIRTUAL_H

#include "transport/transport.h"

typedef struct chorus_vworld chorus_vworld_t;

extern const chorus_tp_ops_t chorus__tp_virtual_ops;

/* A world of nranks virtual endpoints. */
chorus_status_t chorus__vworld_create(int nranks, chorus_vworld_t **world_p);
/* The endpoint of rank r, to use with chorus__tp_virtual_ops. Owned by the world. */
chorus_tp_t *chorus__vworld_tp(chorus_vworld_t *world, int rank);
void chorus__vworld_destroy(chorus_vworld_t *world);

#endif
