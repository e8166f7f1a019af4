/*
 * The communicator (internal view) and the helpers the public entry points of lib/core
 * share: argument checks, the failed-communicator rule, algorithm choice, the schedule
 * cache and running a schedule on the engine.
 *
 * Failure rule: the first error seen by a call on a communicator (or an abort) is recorded
 * as its async error; every later call on it fails at once with the same status and a
 * message that says the communicator failed earlier, because a collective that stopped
 * half way leaves the peers' message streams out of step.
 */
#ifndef CHORUS_CORE_COMM_H
#define CHORUS_CORE_COMM_H

#include "chorus.h"
#include "algo/algo.h"
#include "bootstrap/bootstrap.h"
#include "core/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define CHORUS_SCHED_CACHE_SIZE 16
#define CHORUS_COMM_ERRMSG_MAX 512

/* How this rank reaches a peer. */
typedef enum {
    CHORUS_PEER_SELF = 0,
    CHORUS_PEER_SHM = 1,
    CHORUS_PEER_TCP = 2,
    CHORUS_PEER_UCX = 3, /* CHORUS_TRANSPORT=ucx: every other rank, same host or not */
    CHORUS_PEER_IB = 4,  /* CHORUS_TRANSPORT=ib: every other rank, same host or not */
} chorus_peer_kind_t;

/* One cached schedule, keyed by everything the builder's output depends on. */
typedef struct {
    int valid;
    chorus_coll_t coll;
    chorus_algo_t algo;
    uint64_t count;
    int root;
    uint64_t chunk_count;
    uint64_t last_use;
    chorus_sched_t sched;
} chorus_sched_entry_t;

struct chorus_comm {
    int rank;
    int nranks;
    int nhosts;
    uint64_t comm_id;
    double timeout_s;
    chorus_wait_policy_t wait; /* CHORUS_SPIN_US / CHORUS_YIELD_US, adapted to the host */
    chorus_algo_t forced_algo; /* CHORUS_ALGO, read once at creation (AUTO: none) */
    uint64_t chunk_bytes;      /* CHORUS_CHUNK_SIZE, read once at creation */
    int chunk_forced;          /* CHORUS_CHUNK_SIZE was set: the tuner does not choose it */
    int check_calls;           /* CHORUS_CHECK_CALLS: schedules exchange call signatures */
    int repro;                 /* reproducible floating-point reductions: 0, 1 order-fixed,
                                * 2 exact (chorus_comm_set_reproducible, CHORUS_REPRODUCIBLE) */
    chorus_bootstrap_t *bs;

    /* Topology: host index of every rank (numbered by first appearance), and this host's
     * ranks in rank order (local_ranks[local_index] == rank). */
    int *host_of;    /* nranks entries */
    int *local_ranks; /* nlocal entries */
    /* nranks: lib/topo's ring over host_of and the NUMA nodes the ranks exchanged at
     * creation (hosts contiguous, NIC-near ranks at a host's ends); the same everywhere. */
    int *ring_order;
    int nlocal;
    int local_index;
    /* Single-host collectives through a shared arena (lib/arena); NULL when the comm
     * spans hosts or the arena is switched off. */
    struct chorus_arena *arena;
    /* chorus_mem_alloc's buffers on a comm without an arena (lib/core/mem.c): private
     * memory, kept so that chorus_mem_free can check its argument. */
    struct chorus_mem_block *mem_blocks;
    int nmem_blocks, mem_blocks_cap;
    /* chorus_mem_alloc_device's windows (lib/gpu/dev_win.c), made at the first call. */
    struct chorus_dev_wins *dev_wins;
    /* chorus_comm_register's live handles, newest first (lib/core/mem.c). */
    struct chorus_comm_reg *regs;
    /* The cost model of lib/tune (opaque here). */
    struct chorus_tune *tune;

    chorus_peer_tp_t *peers; /* nranks entries; {NULL, NULL} for self */
    uint8_t *peer_kind;      /* nranks entries of chorus_peer_kind_t */
    chorus_peer_tp_t tps[2]; /* the distinct transports in use */
    int ntps;

    /* Set by chorus_comm_abort from any thread; the engine, bootstrap and transports poll
     * it with relaxed loads: it publishes no other data, only "give up". */
    atomic_int abort_flag;
    /* The first error (0: none). Written with release under err_lock, so a thread that
     * reads it nonzero with acquire also sees first_error complete; read without the lock
     * by chorus_comm_get_async_error and the fast path of chorus__comm_check_failed. */
    atomic_int async_error;
    pthread_mutex_t err_lock; /* guards first_error */
    char first_error[CHORUS_COMM_ERRMSG_MAX];

    chorus_exec_t exec; /* reused by every execution, so its arrays are allocated once */
    struct chorus_trace *trace; /* CHORUS_TRACE's recorder, or NULL (lib/trace) */
    const char *trace_algo;     /* of the traced call running now */
    char trace_what[64];
    void *scratch;      /* SCRATCH of the schedules, grown as needed */
    size_t scratch_bytes;
    void *sink;         /* stands in for a NULL recvbuf of reduce on non-roots */
    size_t sink_bytes;
    chorus_sched_entry_t cache[CHORUS_SCHED_CACHE_SIZE];
    /* The schedule of the last v-form call (coll_v.c), built afresh at every call: its
     * shape depends on count arrays the cache's key does not hold. */
    chorus_sched_t vsched;
    int vsched_valid;
    /* alltoallv's per-peer call signatures, nranks of them, allocated at the first. */
    chorus_exec_sig_t *vsigs;
    uint64_t cache_clock;
    uint64_t seq;                      /* numbers operations in messages: "allreduce #12" */
    uint64_t seq_text_of;              /* the number seq_text spells (0: none yet) */
    char seq_text[24];                 /* its decimal digits, right-aligned, NUL-terminated */
    uint8_t seq_text_at;               /* where the digits start in seq_text */
    int hang_slot;                     /* the comm's slot of the hang report (hang.c), or -1 */
    struct chorus_flight *flight;      /* the flight recorder (flight.c), NULL when off */
    uint64_t ring_gone_ns;             /* when a stalled wait first saw a ring neighbour gone */
    uint64_t logged[CHORUS_NUM_COLLS]; /* size classes whose algorithm choice was logged */

    /* The CUDA plugin's table (lib/gpu/gpu.h) when one loaded and found a device, else NULL:
     * then every buffer is host memory and the host path pays one NULL check. */
    const struct chorus_gpu_ops *gpu_ops;
    /* Device collectives (gpu_coll.c): the proxy thread and its queue, made at the first
     * call on device buffers; NULL before. */
    struct chorus_gpu_comm *gpu;
    /* Nonblocking host operations (async.c): the queue and its progress thread, made at the
     * first chorus_i* call; NULL before. */
    struct chorus_async *async;

    /* Recovery (shrink.c): nranks bytes, nonzero for the ranks a chorus_comm_shrink agreed
     * were lost; NULL before one. */
    uint8_t *lost;
    /* Point-to-point call signatures, one per rank (p2p.c), allocated at the first. */
    chorus_exec_sig_t *p2p_sigs;
    /* Tagged point to point (tagged.c), made at the first tagged call; NULL before. The
     * comm then carries nothing else. */
    struct chorus_tagged *tagged;
};

/* A handle that stops a communicator's creation from another thread (shrink.c watches the
 * survivors' connections while a new communicator forms): chorus__stop_request makes the
 * creation's waits end with CHORUS_ERR_ABORTED, whether it comes before or during them. */
typedef struct {
    pthread_mutex_t lock;
    atomic_int *flag; /* the forming comm's abort_flag, while it exists */
    int requested;
} chorus_stop_t;

void chorus__stop_init(chorus_stop_t *stop);
void chorus__stop_request(chorus_stop_t *stop);
void chorus__stop_fini(chorus_stop_t *stop);

/* chorus_comm_init, stoppable through stop (may be NULL). */
/* Frees chorus_mem_alloc's private buffers (mem.c; the arena frees its windows). */
void chorus__mem_release(chorus_comm_t comm);

chorus_status_t chorus__comm_init_stoppable(chorus_comm_t *comm_p, int nranks,
                                            const chorus_unique_id_t *id, int rank,
                                            chorus_stop_t *stop);

/* Largest message one call may move, in bytes: far beyond any real buffer, and it keeps
 * every offset computation of the schedules well inside 64 bits. */
#define CHORUS_CORE_MAX_MESSAGE_BYTES ((uint64_t)1 << 40)

/* One collective call, as validated and run. */
typedef struct {
    chorus_coll_t coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* the count argument of the public call */
    chorus_dtype_t dtype;
    chorus_op_t op; /* allreduce, reduce_scatter, reduce */
    int root;       /* broadcast, reduce */
    void *stream;
    int device; /* set by chorus__validate_coll: the buffers' device, or -1 (host memory);
                 * CHORUS_CALL_STAGED: a segment of a device call on pinned host memory */
    /* The v-forms' arrays as the caller passed them (nranks each; NULL when the collective
     * has none): allgatherv recvcounts and rdispls (its displs), reduce_scatterv
     * recvcounts, alltoallv all four. count is then this rank's own block: allgatherv
     * sendcount, reduce_scatterv recvcounts[rank], alltoallv sendcounts[rank]. A queued
     * nonblocking call holds copies (async.c). */
    const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
} chorus_coll_call_t;

/* The device of a staging segment (gpu_staging.c): host memory, but signed as a device
 * call, so that a host call and a device call never pass for each other. */
#define CHORUS_CALL_STAGED (-2)

/* ---- validate.c ---- */

/* The public name of a collective ("allreduce", "reduce_scatter", ...). */
const char *chorus__core_coll_name(chorus_coll_t coll);

/* CHORUS_ERR_INVALID_ARGUMENT "<opname>: comm is NULL" when comm is NULL. */
chorus_status_t chorus__check_comm(chorus_comm_t comm, const char *opname);

/* Every argument of a collective call, as documented in chorus.h; sets call->device. */
chorus_status_t chorus__validate_coll(chorus_comm_t comm, chorus_coll_call_t *call);

/* The arguments of a send or receive (opname "send" or "recv"); *device_p as
 * call->device. */
chorus_status_t chorus__validate_p2p(chorus_comm_t comm, const char *opname, const void *buf,
                                     size_t count, chorus_dtype_t dtype, int peer, void *stream,
                                     int *device_p);

/* ---- comm.c ---- */

/* Records status (and this thread's detail message) as the comm's first error, unless it
 * already has one. Returns status. */
chorus_status_t chorus__comm_record_error(chorus_comm_t comm, chorus_status_t status);

/* After a failure recorded by the thread that drives the comm's transports (a schedule's
 * or the arena's error): if it was a mismatch, tells every peer now that this rank left
 * because of one (transport op leave), so that their waits end at once with a mismatch
 * too. Other failures are left to the peers' own detection and deadlines. */
void chorus__comm_leave(chorus_comm_t comm, chorus_status_t status);

/* CHORUS_SUCCESS, or the comm's first error with a message saying that it failed earlier.
 * Host-side calls use it: it first waits for the comm's device work in flight. */
chorus_status_t chorus__comm_check_failed(chorus_comm_t comm, const char *opname);

/* The same without waiting for device work (calls that queue device work themselves,
 * and the progress thread of nonblocking operations). Both refuse a tagged comm (one that
 * carries chorus_tagged_isend/irecv only). */
chorus_status_t chorus__comm_check_failed_async(chorus_comm_t comm, const char *opname);

/* The comm's first error, as chorus__comm_check_failed_async, without its refusal of
 * tagged comms: for tagged.c. */
chorus_status_t chorus__comm_check_errors(chorus_comm_t comm, const char *opname);

/* Tagged point to point (tagged.c): ends its requests and service (close, before the
 * progress thread stops), then frees its memory (free, after the transports are closed). */
void chorus__tagged_close(chorus_comm_t comm);
void chorus__tagged_free(chorus_comm_t comm);

/* Waits until neither the device proxy nor the progress thread of nonblocking operations
 * has work of comm in flight: the calling thread then has the comm's internals alone.
 * Never from those threads. */
void chorus__comm_quiesce(chorus_comm_t comm);

/* Writes "<name> #<seq>" into buf (at least 64 bytes) with the comm's next sequence
 * number: the name of one operation in messages. Cheaper than snprintf on every call. */
void chorus__comm_what(chorus_comm_t comm, const char *name, char *buf, size_t len);

/* Runs sched to completion on the comm's transports; on error the message is prefixed
 * with the rank and the error becomes the comm's async error. */
chorus_status_t chorus__comm_exec(chorus_comm_t comm, const chorus_sched_t *sched,
                                  void *const bufs[CHORUS_NUM_BUFS], chorus_dtype_t dtype,
                                  chorus_op_t op, const char *what);

/* ---- select.c ---- */

/* Reads the selection settings (CHORUS_ALGO, CHORUS_CHUNK_SIZE) into comm, once, so that
 * the per-call choice costs no environment lookups. */
void chorus__select_init(chorus_comm_t comm);

/* The algorithm for coll at this message size (bytes of one rank's vector). */
chorus_algo_t chorus__select_algo(chorus_comm_t comm, chorus_coll_t coll, uint64_t bytes);

/* The pipeline chunk, in elements, for algo at this size: CHORUS_CHUNK_SIZE when set, else
 * the tuner's choice when algo is its pick, else the default. */
uint64_t chorus__select_chunk_count(chorus_comm_t comm, chorus_coll_t coll, chorus_algo_t algo,
                                    uint64_t bytes, size_t elem_size);

/* ---- coll.c ---- */

/* Frees the cached schedules and buffers of the comm (destroy). */
void chorus__coll_release(chorus_comm_t comm);

/* Runs a validated host-memory call with count > 0 as coll_entry does, without counting it
 * (the caller did): what names it in messages ("allreduce #12"), or NULL to number it
 * here. The staging path of device collectives runs each segment through it. */
/* The reproducibility level that governs a call (chorus.h): the comm's for a floating-point
 * allreduce, reduce_scatter or reduce, 0 for anything else. */
int chorus__coll_repro(chorus_comm_t comm, const chorus_coll_call_t *call);
/* Nonzero when the call's reduction is an exact sum (level 2, SUM or AVG): then the divisor
 * applied to it, the rank count for AVG, else 1. */
uint64_t chorus__coll_exact_divisor(chorus_comm_t comm, const chorus_coll_call_t *call);

chorus_status_t chorus__coll_run(chorus_comm_t comm, const chorus_coll_call_t *call,
                                 const char *what);

/* The blocking and nonblocking entry points' common paths (checks, counting, running), for
 * the entry points of coll_v.c. */
chorus_status_t chorus__coll_entry(chorus_comm_t comm, chorus_coll_call_t *call);
chorus_status_t chorus__icoll_entry(chorus_comm_t comm, chorus_coll_call_t *call,
                                    chorus_request_t *req_p);

/* Nonzero when a validated call moves nothing on any rank of a matching call, so that it
 * returns at once (counted, not run): a count of 0, or v-form counts that are all 0. */
int chorus__coll_is_empty(chorus_comm_t comm, const chorus_coll_call_t *call);

/* ---- coll_v.c ---- */

/* Nonzero for the collectives with count arrays (allgatherv, reduce_scatterv, alltoallv). */
int chorus__coll_is_v(chorus_coll_t coll);

/* The checks of the count arrays of a v-form call (validate.c calls it after the common
 * ones): NULL arrays, blocks that overflow or overlap, counts that contradict each other on
 * this rank, the buffers (NULL where data is needed, overlap but for allgatherv's and
 * reduce_scatterv's in-place layouts). Sets call->count to this rank's own block. */
chorus_status_t chorus__validate_v(chorus_comm_t comm, chorus_coll_call_t *call, size_t esize);

/* Fills the v-form parts of a signature (the counts' total and hash), or arms the engine
 * with alltoallv's per-peer signatures; sig is the one coll.c made. */
chorus_status_t chorus__coll_v_sign(chorus_comm_t comm, const chorus_coll_call_t *call,
                                    chorus_exec_sig_t *sig);

/* A 64-bit hash of n counts: equal arrays hash alike on every rank, and a change in any
 * count changes it (the signatures of allgatherv and reduce_scatterv). */
uint64_t chorus__coll_v_hash(const size_t *v, int n);

/* Builds the v-form call's schedule into comm->vsched. */
chorus_status_t chorus__coll_v_sched(chorus_comm_t comm, chorus_algo_t algo,
                                     const chorus_coll_args_t *args,
                                     const chorus_sched_t **sched_p);

/* ---- p2p.c ---- */

/* Drops what this thread's open group recorded for comm (destroy); chorus_group_end then
 * fails, since those operations never run. */
void chorus__p2p_forget(chorus_comm_t comm);

/* Nonzero while this thread is inside chorus_group_start/end. */
int chorus__p2p_in_group(void);

#endif
