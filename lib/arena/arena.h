/*
 * Single-host collectives through a shared arena.
 *
 * When every rank of a communicator is on one host, point-to-point messages over the shm
 * rings copy each byte twice per hop (into the ring, out of it) and synchronise once per
 * message. The arena instead gives each local rank slots in one shared segment: a rank
 * writes what its peers need once, and they read (or reduce) it straight from there, with
 * one synchronisation per chunk. arena.c: allreduce (a flat path where every rank reduces
 * every vector in rank order, and a staged path where each rank reduces its slice);
 * arena_coll.c: allgather, reduce_scatter, broadcast, reduce, alltoall, barrier;
 * arena_v.c: gather, scatter, allgatherv, reduce_scatterv, alltoallv;
 * arena_eager.c: small broadcasts and reduces whose writers run ahead of the readers;
 * arena_cma.c: optional single copy between processes (process_vm_readv).
 *
 * The segment is created by local rank 0, mode 0600, authenticated like the shm transport
 * (HMAC of the comm's secret), attached by the others, and unlinked once all have mapped
 * it. Waits spin, yield, then block on a futex, with the comm's deadline and abort flag.
 */
#ifndef CHORUS_ARENA_ARENA_H
#define CHORUS_ARENA_ARENA_H

#include "chorus.h"
#include "algo/schedule.h"
#include "core/engine.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct chorus_arena chorus_arena_t;

typedef struct {
    int rank;             /* rank in the comm (for messages) */
    int nlocal;           /* ranks on this host == ranks of the comm */
    int local_index;      /* this rank's index among them */
    uint64_t comm_id;
    const uint8_t *secret; /* CHORUS_SECRET_BYTES: the comm's secret (authentication) */
    double timeout_s;
    const atomic_int *abort_flag;
    chorus_wait_policy_t wait;
    struct chorus_bootstrap *bs; /* to exchange the segment name (collective on the comm) */
} chorus_arena_params_t;

/* Collective over the comm: every rank calls it. Returns CHORUS_SUCCESS with *arena_p NULL
 * when the arena does not apply (CHORUS_ARENA=0, or fewer than 2 ranks). */
chorus_status_t chorus__arena_create(const chorus_arena_params_t *params,
                                     chorus_arena_t **arena_p);
void chorus__arena_destroy(chorus_arena_t *arena);

/* The deadline of later waits (chorus_comm_set_timeout); 0: none. */
void chorus__arena_set_timeout(chorus_arena_t *arena, double timeout_s);

/* How the next reductions combine their sources: 0 folds them with the call's op in rank
 * order (chorus_kernel_reduce_multi), d >= 1 sums them exactly and divides by d
 * (chorus_kernel_reduce_exact; reproducible level 2). Set before every reducing call. */
void chorus__arena_set_exact(chorus_arena_t *arena, uint64_t divisor);

/* Nonzero if the arena implements coll. */
int chorus__arena_supports(const chorus_arena_t *arena, chorus_coll_t coll);

/* The collectives, with the argument conventions of chorus.h (already validated; count
 * > 0; op is never AVG: the caller divides; roots are comm ranks). what names the operation for messages
 * ("allreduce #12"). */
chorus_status_t chorus__arena_allreduce(chorus_arena_t *arena, const void *sendbuf,
                                        void *recvbuf, size_t count, chorus_dtype_t dtype,
                                        chorus_op_t op, const char *what);

/* ---- arena_coll.c: the collectives that read straight from the others' slots ---- */
/* Reduce to root (a comm rank; recvbuf is only written there and may be NULL elsewhere). */
chorus_status_t chorus__arena_reduce(chorus_arena_t *arena, const void *sendbuf, void *recvbuf,
                                     size_t count, chorus_dtype_t dtype, chorus_op_t op,
                                     int root, const char *what);
chorus_status_t chorus__arena_allgather(chorus_arena_t *arena, const void *sendbuf,
                                        void *recvbuf, size_t sendcount, chorus_dtype_t dtype,
                                        const char *what);
chorus_status_t chorus__arena_reduce_scatter(chorus_arena_t *arena, const void *sendbuf,
                                             void *recvbuf, size_t recvcount,
                                             chorus_dtype_t dtype, chorus_op_t op,
                                             const char *what);
chorus_status_t chorus__arena_broadcast(chorus_arena_t *arena, const void *sendbuf,
                                        void *recvbuf, size_t count, chorus_dtype_t dtype,
                                        int root, const char *what);
chorus_status_t chorus__arena_alltoall(chorus_arena_t *arena, const void *sendbuf,
                                       void *recvbuf, size_t count_per_peer,
                                       chorus_dtype_t dtype, const char *what);
chorus_status_t chorus__arena_barrier(chorus_arena_t *arena, const char *what);

/* ---- arena_v.c: gather, scatter and the v-forms (issue 41) ---- */
typedef struct {
    chorus_coll_t coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;              /* gather, scatter: elements per rank */
    const size_t *sendcounts;  /* the call's arrays, by comm rank (NULL where unused) */
    const size_t *sdispls;
    const size_t *recvcounts;
    const size_t *rdispls;
    chorus_dtype_t dtype;
    chorus_op_t op;            /* reduce_scatterv (never AVG: the caller divides) */
    int root;                  /* gather, scatter: a comm rank */
    uint64_t counts_hash;      /* allgatherv, reduce_scatterv: of recvcounts, for the
                                * signature */
    const char *what;
} chorus_arena_v_args_t;

/* Runs one of them (validated, not empty on this rank). Ranks that disagree about counts,
 * root or datatype all fail with CHORUS_ERR_MISMATCH. */
chorus_status_t chorus__arena_v(chorus_arena_t *arena, const chorus_arena_v_args_t *args);

/* ---- arena_win.c: registered windows (issue 38) ---- */
struct chorus_bootstrap;
/* Collective over the comm: a window of bytes on every rank, mapped by every local peer;
 * *ptr_p is this rank's. Ranks asking different sizes get CHORUS_ERR_MISMATCH. */
chorus_status_t chorus__arena_win_alloc(chorus_arena_t *arena, struct chorus_bootstrap *bs,
                                        const uint8_t *secret, uint64_t comm_id, size_t bytes,
                                        void **ptr_p);
/* Collective: every rank frees its own pointer of the same window. */
chorus_status_t chorus__arena_win_free(chorus_arena_t *arena, struct chorus_bootstrap *bs,
                                       void *ptr);
/* Collectives that read every peer's data straight from its window, and the bytes read
 * from windows, since the arena was made (0, 0 without an arena). */
void chorus__arena_win_stats(const chorus_arena_t *arena, uint64_t *calls_p, uint64_t *bytes_p);

/* The path of a collective when every local rank's buffers lie in registered windows: the
 * rule arena_direct.c and arena_coll.c follow, and what the tuner's model costs. */
typedef enum {
    CHORUS_ARENA_WIN_NONE = 0, /* the path of plain buffers (staged, flat or eager) */
    CHORUS_ARENA_WIN_READ,     /* allgather, broadcast, alltoall, reduce_scatter: every rank
                                * reads (or reduces) its peers' parts in their windows */
    CHORUS_ARENA_WIN_ONE_SHOT, /* allreduce: every rank reduces all n vectors */
    CHORUS_ARENA_WIN_TWO_SHOT  /* allreduce: each reduces its slice, then copies the rest */
} chorus_arena_win_path_t;

/* That path for coll on n local ranks, bytes being the call's count in bytes (allreduce:
 * the vector; the others: one part, as in arena_coll.c), in_place when every rank calls in
 * place, flat_max as chorus__arena_flat_max. CHORUS_WIN_ONESHOT_MAX moves the allreduce
 * limit between one-shot and two-shot. */
chorus_arena_win_path_t chorus__arena_win_path(chorus_coll_t coll, int n, size_t bytes,
                                               int in_place, size_t flat_max);

/* Bytes below which allreduce takes the flat path (for the tuner's model). */
size_t chorus__arena_flat_max(const chorus_arena_t *arena);
/* Bytes of one pipeline chunk of the staged path (for the tuner's model). */
size_t chorus__arena_chunk_bytes(const chorus_arena_t *arena);

/* ---- arena_barrier.c: the arena's control lines as a step barrier for device collectives
 * (lib/gpu/ipc_arena.c), which keep their data in device memory and only synchronise here.
 * Each call is one operation of the arena's step sequence, like a host collective, so host
 * and device collectives may interleave on one comm (they never run concurrently). ---- */

/* Publishes this rank's next step with the signature (coll, count, dtype, op, opno; marked
 * as a device operation) and returns once every local rank has published it, with the
 * arena's deadline, abort flag and dead-peer checks. CHORUS_ERR_MISMATCH naming both calls
 * when a peer's signature differs (including a host collective against a device one). Any
 * error marks this rank failed in the arena, so peers stop waiting for it. */
chorus_status_t chorus__arena_step(chorus_arena_t *arena, chorus_coll_t coll, uint64_t count,
                                   chorus_dtype_t dtype, chorus_op_t op, uint64_t opno,
                                   const char *what);

/* chorus__arena_step that also publishes a 64-bit offer with the step (registered device
 * windows: where this rank's buffer lies, 0 for none) and returns every local rank's in
 * offers[0..n) once all have published. */
chorus_status_t chorus__arena_step_offer(chorus_arena_t *arena, chorus_coll_t coll,
                                         uint64_t count, chorus_dtype_t dtype, chorus_op_t op,
                                         uint64_t opno, uint64_t offer, uint64_t *offers,
                                         const char *what);

/* Publishes the collective this rank is about to run: its number on the comm (every rank's
 * k-th collective has the same), what it is, and whether it runs on the arena (on_arena) or
 * on a schedule over the transports. A rank on one path never sees the other path's
 * signatures; this lets a stalled peer see that the same-numbered call went the other way. */
void chorus__arena_note_call(chorus_arena_t *arena, uint64_t coll_seq, int on_arena,
                             chorus_coll_t coll, uint64_t count, chorus_dtype_t dtype,
                             chorus_op_t op, int root);

/* The next arena collective is a segment of a device call staged through host memory: its
 * signature says device, so that it never passes for a host call of the same shape. */
void chorus__arena_next_is_device(chorus_arena_t *arena);

/* CHORUS_ERR_MISMATCH naming both calls when a local peer is in the collective numbered like
 * this rank's but on the other path (arena vs schedule: the calls, or the ranks' settings,
 * differ); else CHORUS_SUCCESS. For waits that have stalled a while. */
chorus_status_t chorus__arena_cross_check(chorus_arena_t *arena, const char *what);

/* What the local peer of comm rank `rank` published with chorus__arena_note_call: returns 1
 * with the comm's number of its collective in *coll_seq_p, the collective and its root
 * (low 16 bits) and a description in text (at least 96 bytes), 0 when it is not a local
 * peer or has published nothing. */
int chorus__arena_peer_call(const chorus_arena_t *arena, int rank, uint64_t *coll_seq_p,
                            chorus_coll_t *coll_p, int *root_p, char *text, size_t len);

/* Marks this rank failed in the arena (peers' waits end with an error naming it) and
 * returns status: for a caller outside lib/arena that failed between steps. */
chorus_status_t chorus__arena_fail(chorus_arena_t *arena, chorus_status_t status);

/* The arena's wait settings, for callers that wait on something else between steps (a
 * device event): deadline of one wait in seconds (0: none), abort flag (may be NULL), and
 * the comm's spin / yield policy. */
void chorus__arena_wait_settings(const chorus_arena_t *arena, double *timeout_s_p,
                                 const atomic_int **abort_flag_p, chorus_wait_policy_t *wait_p);

#endif
