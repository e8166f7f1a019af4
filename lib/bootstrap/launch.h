/*
 * What chorus_comm_init_env learns from the launcher that started the process: the
 * sources of rank, size and rendezvous (lib/bootstrap/env.c decides among them), Slurm's
 * host lists (hostlist.c) and root (slurm.c), and PMIx (pmix.c).
 */
#ifndef CHORUS_BOOTSTRAP_LAUNCH_H
#define CHORUS_BOOTSTRAP_LAUNCH_H

#include "bootstrap/bootstrap.h"

#include <stddef.h>

/* The number of hosts of a Slurm host list ("node[01-04,07],login1"), and its n-th host
 * (0-based) in Slurm's order. CHORUS_ERR_INVALID_ARGUMENT for a malformed list, a host
 * outside it, or a name longer than len - 1. */
chorus_status_t chorus__hostlist_count(const char *list, long *count_p);
chorus_status_t chorus__hostlist_nth(const char *list, long n, char *host, size_t len);

/* The rendezvous port of a Slurm step with no PMIx: a function of the job and step ids
 * alone, so that every task computes the same one, in CHORUS_SLURM_PORT_BASE ..
 * CHORUS_SLURM_PORT_BASE + CHORUS_SLURM_PORT_SPAN - 1 (below Linux's ephemeral ports). */
#define CHORUS_SLURM_PORT_BASE 12000
#define CHORUS_SLURM_PORT_SPAN 16000
int chorus__slurm_port(unsigned long job_id, unsigned long step_id);

/* The root of a Slurm step, "host:port": the first host of SLURM_STEP_NODELIST (else
 * SLURM_JOB_NODELIST), where task 0 runs, and chorus__slurm_port. rank is this task's;
 * task 0 checks that it runs on that host (SLURM_NODEID 0). */
chorus_status_t chorus__slurm_root(int rank, char *text, size_t len);

/* PMIx: 1 when a PMIx server started this process (PMIX_NAMESPACE and PMIX_RANK set), even
 * in a build without PMIx; 1 from chorus__pmix_built when this build has it. */
int chorus__pmix_launched(void);
int chorus__pmix_built(void);

/* Connects to the PMIx server (once per process; disconnects at exit) and reads this
 * process's rank, the job's size, the local rank (-1 when unknown) and the number of
 * hosts of the job. */
chorus_status_t chorus__pmix_rank_size(int *rank_p, int *nranks_p, int *local_rank_p,
                                       int *nnodes_p);

/* Rank 0 makes a fresh id (its root service starts here) and publishes it; every rank
 * fences with the others (at most timeout_s seconds) and reads it. Collective over the
 * job; call k of a process pairs with call k of every other. */
chorus_status_t chorus__pmix_share_id(int rank, int nnodes, double timeout_s,
                                      chorus_unique_id_t *id_p);

#endif
