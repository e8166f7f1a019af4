/*
 * A collective is a schedule: for one rank, the ordered list of steps it performs.
 *
 * Meaning: a schedule means exactly what it would mean if its steps ran one after the
 * other in the order they were added, with every SEND/RECV pair completing as a matched
 * message (per peer pair, the k-th SEND from A to B is the k-th RECV on B from A).
 * The builder derives the dependencies itself from the buffer regions each step reads
 * and writes (read-after-write, write-after-read, write-after-write), so an algorithm is
 * written like the textbook, step by step, and the engine is free to run any steps whose
 * dependencies are done: several chunks in flight, transfers overlapping reductions.
 *
 * Buffers are symbolic (SEND, RECV, SCRATCH) and offsets and counts are in elements, so
 * one schedule serves any pointers and any datatype of the collective's shape.
 * SEND is read-only. In-place calls make SEND and RECV alias (see chorus.h for the
 * layouts); algorithms must stay correct then: never read SEND[x] after writing the RECV
 * region that aliases it. SCRATCH is engine-owned memory of scratch_count elements.
 *
 * Deadlock rule for algorithm writers: the engine posts sends to a peer in schedule order
 * and receives from a peer in schedule order, and a transport may not complete a send
 * until its receive is posted. So a RECV must not depend (through a buffer hazard) on a
 * SEND whose matching receive on the peer waits on this RECV. Receiving into fresh
 * scratch instead of reusing a region still being sent avoids this.
 */
#ifndef CHORUS_ALGO_SCHEDULE_H
#define CHORUS_ALGO_SCHEDULE_H

#include "chorus.h"

#include <stdint.h>

typedef enum {
    CHORUS_BUF_SEND = 0,
    CHORUS_BUF_RECV = 1,
    CHORUS_BUF_SCRATCH = 2,
    CHORUS_NUM_BUFS
} chorus_buf_id_t;

/* A position in a symbolic buffer, in elements. */
typedef struct {
    uint8_t buf; /* chorus_buf_id_t */
    uint64_t off;
} chorus_ref_t;

static inline chorus_ref_t chorus_ref(chorus_buf_id_t buf, uint64_t off)
{
    chorus_ref_t r = {(uint8_t)buf, off};
    return r;
}
#define SEND_AT(off) chorus_ref(CHORUS_BUF_SEND, (off))
#define RECV_AT(off) chorus_ref(CHORUS_BUF_RECV, (off))
#define SCRATCH_AT(off) chorus_ref(CHORUS_BUF_SCRATCH, (off))

typedef enum {
    CHORUS_STEP_SEND = 0,   /* send count elements at src to peer */
    CHORUS_STEP_RECV = 1,   /* receive count elements from peer into dst */
    CHORUS_STEP_REDUCE = 2, /* dst = src op src2, elementwise (op: the collective's) */
    CHORUS_STEP_COPY = 3,   /* dst = src */
    /* dst = the nsrc sources src, src + stride, ..., reduced elementwise in that order
     * (the collective's op, folded left to right as chorus_kernel_reduce_multi does), or
     * summed exactly when the execution asks for it (chorus_exec_t.exact_divisor): the
     * one reduction of reproducible communicators (direct.c). */
    CHORUS_STEP_REDUCE_N = 4,
} chorus_step_kind_t;

typedef struct {
    uint8_t kind; /* chorus_step_kind_t */
    int32_t peer; /* SEND/RECV */
    uint64_t count;
    chorus_ref_t dst; /* RECV, REDUCE, COPY */
    chorus_ref_t src; /* SEND, REDUCE, COPY */
    chorus_ref_t src2; /* REDUCE */
    uint32_t nsrc;     /* REDUCE_N: sources, stride elements apart from src */
    uint64_t stride;
    uint32_t ndeps;      /* how many earlier steps must complete first */
    uint32_t succ_begin; /* successors: sched->succ[succ_begin .. succ_begin + nsucc) */
    uint32_t nsucc;
} chorus_step_t;

typedef enum {
    CHORUS_COLL_ALLREDUCE = 0,
    CHORUS_COLL_ALLGATHER,
    CHORUS_COLL_REDUCE_SCATTER,
    CHORUS_COLL_BROADCAST,
    CHORUS_COLL_REDUCE,
    CHORUS_COLL_ALLTOALL,
    CHORUS_COLL_BARRIER,
    CHORUS_COLL_SENDRECV, /* a group of point-to-point operations */
    /* Added after SENDRECV (issue 41) so that the numbers above, which calibration files
     * and loops over "the collectives before SENDRECV" use, stay as they were. None of
     * them is costed by the tuner; on one host they run on the arena (lib/core/select.c). */
    CHORUS_COLL_GATHER,
    CHORUS_COLL_SCATTER,
    CHORUS_COLL_ALLGATHERV,      /* per-rank counts: chorus_coll_args_t.recvcounts */
    CHORUS_COLL_REDUCE_SCATTERV, /* per-rank counts: recvcounts */
    CHORUS_COLL_ALLTOALLV,       /* per-pair counts: sendcounts, recvcounts */
    CHORUS_NUM_COLLS
} chorus_coll_t;

const char *chorus__coll_name(chorus_coll_t coll);

typedef struct chorus_sched {
    int rank;
    int nranks;
    chorus_step_t *steps;
    uint32_t nsteps;
    uint32_t cap;
    uint32_t *succ; /* successor lists, filled by finalize */
    uint64_t scratch_count; /* elements of SCRATCH needed */
    chorus_status_t status; /* first builder error (no memory); finalize returns it */
    int finalized;
} chorus_sched_t;

/* Builder. The add functions record the first failure in s->status and then do
 * nothing, so algorithms need not check each call; finalize returns it. */
void chorus__sched_init(chorus_sched_t *s, int rank, int nranks);
void chorus__sched_fini(chorus_sched_t *s);
void chorus__sched_send(chorus_sched_t *s, int peer, chorus_ref_t src, uint64_t count);
void chorus__sched_recv(chorus_sched_t *s, int peer, chorus_ref_t dst, uint64_t count);
void chorus__sched_reduce(chorus_sched_t *s, chorus_ref_t dst, chorus_ref_t src,
                          chorus_ref_t src2, uint64_t count);
void chorus__sched_copy(chorus_sched_t *s, chorus_ref_t dst, chorus_ref_t src, uint64_t count);
/* dst = the nsrc (>= 1) regions of count elements at src, src + stride, ... reduced in that
 * order. The sources must not overlap dst. */
void chorus__sched_reduce_n(chorus_sched_t *s, chorus_ref_t dst, chorus_ref_t src,
                            uint32_t nsrc, uint64_t stride, uint64_t count);
/* Reserves count elements of fresh scratch; returns the offset. */
uint64_t chorus__sched_scratch(chorus_sched_t *s, uint64_t count);
/* Computes dependencies and successor lists. Returns s->status. */
chorus_status_t chorus__sched_finalize(chorus_sched_t *s);

/* Writes a readable listing (for CHORUS_DEBUG=trace and test failures). */
void chorus__sched_dump(const chorus_sched_t *s, void *file /* FILE * */);

#endif
