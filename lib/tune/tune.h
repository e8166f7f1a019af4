/*
 * The tuner: an alpha-beta-gamma cost model of this communicator's transports and CPU,
 * and the choice of algorithm and chunk size it predicts fastest.
 */
#ifndef CHORUS_TUNE_TUNE_H
#define CHORUS_TUNE_TUNE_H

#include "chorus.h"

typedef struct chorus_tune chorus_tune_t;
struct chorus_comm;

/* Called once by chorus_comm_init after the transports (and the arena) are up; collective
 * over the comm only if the implementation says so in its contract. */
chorus_status_t chorus__tune_create(struct chorus_comm *comm, chorus_tune_t **tune_p);
void chorus__tune_destroy(chorus_tune_t *tune);

#endif
