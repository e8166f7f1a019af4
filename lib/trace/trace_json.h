/*
 * Timelines in Chrome trace / Perfetto JSON, one format for real runs (trace.c, written by
 * every rank under CHORUS_TRACE) and for chorus-sim --trace, so that the two open side by
 * side in ui.perfetto.dev or chrome://tracing.
 *
 * A file is {"traceEvents": [ one event per line ]}. Each rank is a process (pid): its
 * calls on thread 0, its reduces and copies on thread 1 ("cpu"), its waits on thread 2;
 * sends and receives are async slices (several are in flight at once) named "send to P"
 * and "recv from P". Times are microseconds.
 *
 * Parts and merging: a writer's file is valid JSON on its own, and its layout is fixed
 * (first line the header, last line "]}", every event on a line of its own) so that
 * chorus__tjson_merge joins the parts of a job by lines, without a JSON parser, and moves
 * the time origin to the job's first event.
 */
#ifndef CHORUS_TRACE_TRACE_JSON_H
#define CHORUS_TRACE_TRACE_JSON_H

#include "chorus.h"

#include <stdint.h>
#include <stdio.h>

typedef enum {
    CHORUS_TEV_SEND = 0,
    CHORUS_TEV_RECV,
    CHORUS_TEV_REDUCE,
    CHORUS_TEV_COPY,
    CHORUS_TEV_WAIT,
    CHORUS_TEV_CALL,
    CHORUS_TEV_NKINDS
} chorus_tev_kind_t;

typedef struct {
    double t0_us, t1_us;
    uint64_t bytes;
    int32_t peer;     /* SEND, RECV */
    uint8_t kind;     /* chorus_tev_kind_t */
    const char *name; /* CALL: "allreduce #3"; NULL otherwise */
    const char *algo; /* CALL: the algorithm, or NULL */
} chorus_tev_t;

/* A writer over an open file; counts events so that separators land right. */
typedef struct {
    FILE *f;
    uint64_t nevents;
    uint64_t next_id;   /* of async slices */
    uint64_t origin_us; /* added to every time, in integers: a double holds wall-clock
                         * microseconds only to a quarter of one */
} chorus_tjson_t;

/* Writes the header line; times of events are origin_us + their t0_us, t1_us. */
void chorus__tjson_begin(chorus_tjson_t *w, FILE *f, uint64_t origin_us);
/* Names process pid ("rank 3 of 8 on host1") and its threads. */
void chorus__tjson_process(chorus_tjson_t *w, int pid, const char *label);
void chorus__tjson_event(chorus_tjson_t *w, int pid, const chorus_tev_t *e);
/* Closes the event list with a metadata event holding `source` ("run" or "sim") and
 * free-form details (a JSON object's members, e.g. "\"dropped\": 0", or NULL). Returns 0,
 * or -1 when the file saw a write error. */
int chorus__tjson_end(chorus_tjson_t *w, const char *source, const char *details);

/* Joins trace files written by chorus__tjson_* into out: their events, the time origin
 * moved to the earliest event. CHORUS_ERR_INVALID_ARGUMENT names a part that is not one
 * (its first or last line is not where the layout puts it). */
chorus_status_t chorus__tjson_merge(const char *out, const char *const *parts, int nparts);

#endif
