/*
 * chorus-bench internals shared by main.c (options, timing, report) and data.c (buffer
 * contents and result checks). Only the public API (chorus.h) is used.
 */
#ifndef CHORUS_BENCH_H
#define CHORUS_BENCH_H

#include "chorus.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    COLL_ALLREDUCE,
    COLL_ALLGATHER,
    COLL_REDUCE_SCATTER,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLTOALL,
    COLL_COUNT
} coll_t;

/* One test: a collective with one datatype and op, as seen by one rank. */
typedef struct {
    coll_t coll;
    chorus_dtype_t dtype;
    chorus_op_t op; /* ignored by collectives that do not reduce */
    int root;       /* used by broadcast and reduce */
    int rank;
    int nranks;
} test_t;

/* Element counts of one size, with the nccl-tests conventions (see bench/README.md).
 * In place, the send buffer is base + send_inplace_offset * rank and the receive buffer
 * base + recv_inplace_offset * rank (elements). */
typedef struct {
    size_t send_count;
    size_t recv_count;
    size_t param_count; /* the count argument of the call */
    size_t send_inplace_offset;
    size_t recv_inplace_offset;
} counts_t;

/* Counts for a buffer of count elements (size / element size). */
counts_t bench_counts(coll_t coll, size_t count, int nranks);

/* 1 if the collective takes a reduction op, 0 if it only moves data. */
int bench_coll_reduces(coll_t coll);

/* Fills the buffers for a checked run and returns the send and receive pointers to pass
 * to the call: the send data are exact values that depend on rank and index, the
 * receive buffer (or, in place, the rest of the common buffer) holds a pattern that no
 * correct result contains. base_recv is the receive buffer out of place and the common
 * buffer in place. */
void bench_prepare(const test_t *t, const counts_t *c, int in_place, void *sendbuf, void *base_recv,
                   void **send_p, void **recv_p);

/* Number of result elements on this rank that differ from the expected ones. */
size_t bench_count_wrong(const test_t *t, const counts_t *c, const void *recv);

#endif
