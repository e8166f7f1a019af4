/*
 * The flight recorder (issue 39): every communicator keeps its last CHORUS_FR_ENTRIES
 * operations (default 256; 0 turns it off) in a fixed ring: sequence number, call, count,
 * datatype, reduction, root or peer, algorithm, state (started, done, failed), status and
 * times. With CHORUS_FR_DIR set, each rank writes its ring as JSON to
 * DIR/chorus-fr.<comm id>.<rank>.json when a call fails (a timeout, a dead peer, a
 * mismatch), when the comm is aborted, on a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGABRT), on SIGUSR1, and when chorus_comm_dump_flight_record asks. `chorus-trace fr DIR`
 * reads the ranks' files and names where they diverge.
 *
 * Recording costs a few plain stores and one coarse clock read per call: the ring has one
 * writer at a time (the thread that runs the comm's calls), and readers (a dump, a signal
 * handler) take a consistent-enough picture: an entry's seq is written last, with release.
 * The dump formats by hand (util/sigfmt.h) so that a signal handler can write it.
 */
#ifndef CHORUS_CORE_FLIGHT_H
#define CHORUS_CORE_FLIGHT_H

#include "chorus.h"

#include <stdint.h>

struct chorus_comm;
typedef struct chorus_flight chorus_flight_t;

/* The ring of a new comm (NULL when CHORUS_FR_ENTRIES is 0 or memory is short: the comm
 * then records nothing) and its end. Registered in the process's table for the signals. */
chorus_flight_t *chorus__fr_open(uint64_t comm_id, int rank, int nranks);
void chorus__fr_close(chorus_flight_t *fr);

/* A call named name (a static string) with sequence number seq starts at now (coarse
 * clock, read once for this and the hang report): a new entry, state started. A call before it still started is taken as done (as the hang report
 * does: it returned without reporting, e.g. on an error before it ran). */
void chorus__fr_begin(chorus_flight_t *fr, const char *name, uint64_t seq, uint64_t now);

/* What the call in flight is: count elements (or bytes, for point to point), dtype, op,
 * root or peer (-1: none), algorithm (a static string, NULL: none). */
void chorus__fr_note(chorus_flight_t *fr, uint64_t count, chorus_dtype_t dtype, chorus_op_t op,
                     int root, const char *algo);

/* The call in flight ended: done, or failed with status (then, with CHORUS_FR_DIR set, the
 * ring is written out, once per failed call). */
void chorus__fr_end(chorus_flight_t *fr, chorus_status_t status);

/* Writes the ring to dir (NULL: CHORUS_FR_DIR) with reason (a static string). */
chorus_status_t chorus__fr_dump(chorus_flight_t *fr, const char *dir, const char *reason);

#endif
