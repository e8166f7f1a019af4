/*
 * The hang report: what each communicator of this process is doing, written out when a
 * collective times out (CHORUS_HANG_REPORT=1, the default) and, with CHORUS_HANG_REPORT=2,
 * whenever the process gets SIGUSR1. One line per communicator, for people and for
 * chorusrun, which gathers the lines of all ranks into one summary naming the ranks that
 * never arrived:
 *
 *   chorus-hang: rank=2 nranks=4 comm=1f2e3d4c5b6a7988 state=timeout op=allreduce seq=17
 *       last_done=16 since_ms=60012 waiting=recv:3,send:1 :: <the error message>
 *
 * state is timeout (this call gave up), inflight (a call is running: SIGUSR1) or idle (no
 * call is running: SIGUSR1); waiting lists the transfers still pending, "-" when unknown.
 * The fields are updated with relaxed atomics on every call (a few stores), so that the
 * signal handler reads a consistent enough picture without locks.
 */
#ifndef CHORUS_CORE_HANG_H
#define CHORUS_CORE_HANG_H

#include "chorus.h"

#include <stdint.h>

struct chorus_comm;
struct chorus_exec;

/* A slot in the process's table; comm->hang_slot is -1 when the table was full. */
void chorus__hang_register(struct chorus_comm *comm);
void chorus__hang_unregister(struct chorus_comm *comm);

/* A call named name (a static string) with sequence number seq starts at now (coarse
 * clock, chorus__now_coarse_ns) / ended. */
void chorus__hang_begin(struct chorus_comm *comm, const char *name, uint64_t seq, uint64_t now);
void chorus__hang_end(struct chorus_comm *comm);

/* A call failed with status; on CHORUS_ERR_TIMEOUT (and CHORUS_HANG_REPORT >= 1) this
 * writes the comm's line with state=timeout and detail, the error message. */
void chorus__hang_on_error(struct chorus_comm *comm, chorus_status_t status, const char *detail);
/* The same for a failed execution of a schedule, whose pending transfers x names. */
void chorus__hang_report_exec(struct chorus_comm *comm, chorus_status_t status,
                              const char *detail, const struct chorus_exec *x);

#endif
