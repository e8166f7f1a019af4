/*
 * CHORUS_TRACE=FILE: every rank of a communicator records its calls and the steps of their
 * schedules (sends, receives, reduces, copies, waits: bytes, peer, start, end) in memory,
 * and writes them at chorus_comm_destroy as a part of FILE; the last rank of the job to
 * write its part merges all parts into FILE (trace_json.h has the format). Parts are
 * FILE.<comm id>.<rank>; ranks that do not share a file system leave theirs for
 * `chorus-trace merge`.
 *
 * The first traced communicator of a process writes FILE, later ones (comm_split, shrink)
 * FILE.<comm id>. Off by default: then the communicator's recorder is NULL and every hook
 * is one untaken branch.
 */
#ifndef CHORUS_TRACE_TRACE_H
#define CHORUS_TRACE_TRACE_H

#include "trace/trace_json.h"

#include <stdint.h>

typedef struct chorus_trace chorus_trace_t;

/* A recorder for rank `rank` of the communicator comm_id, or NULL when CHORUS_TRACE is
 * unset (or when there is no memory: tracing is then off, with a warning). */
chorus_trace_t *chorus__trace_open(uint64_t comm_id, int rank, int nranks);

/* Writes this rank's part, merges the job's parts when it is the last, frees t. */
void chorus__trace_close(chorus_trace_t *t);

/* Records one step or wait (kind: chorus_tev_kind_t but CALL), times of chorus__now_ns. */
void chorus__trace_add(chorus_trace_t *t, int kind, int peer, uint64_t bytes, uint64_t t0_ns,
                       uint64_t t1_ns);

/* Records one call: what ("allreduce #3"), its algorithm and its bytes. */
void chorus__trace_call(chorus_trace_t *t, const char *what, const char *algo, uint64_t bytes,
                        uint64_t t0_ns, uint64_t t1_ns);

#endif
