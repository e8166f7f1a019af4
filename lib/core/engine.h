/*
 * The engine runs one rank's schedule over the transports of its peers. It is a dataflow
 * executor: a step starts when the steps it depends on are done (and, for SEND/RECV,
 * when the earlier messages of the same peer and direction were posted), so several
 * chunks are in flight at once and transfers overlap reductions.
 *
 * It never blocks: chorus__exec_progress() does what can be done now and returns. The
 * caller decides how to wait (chorus__exec_wait spins, yields, then sleeps), which is what
 * lets the tests drive all ranks of a virtual transport from one thread.
 */
#ifndef CHORUS_CORE_ENGINE_H
#define CHORUS_CORE_ENGINE_H

#include "algo/schedule.h"
#include "transport/transport.h"

#include <stdatomic.h>
#include <stdint.h>

/* The transport serving one peer. */
typedef struct {
    const chorus_tp_ops_t *ops;
    chorus_tp_t *tp;
} chorus_peer_tp_t;

/* A collective call's identity, on which every rank of the call must agree. A signed
 * execution sends it to each peer its schedule exchanges data with, ahead of any data on
 * that ordered channel, and checks the peer's before using anything the peer sent.
 * 56 bytes of fixed-width fields without padding, in host byte order (all ranks of a job
 * share one). */
typedef struct {
    uint32_t magic;       /* CHORUS_EXEC_SIG_MAGIC: tells a signature from stray data */
    uint8_t coll;         /* chorus_coll_t */
    uint8_t dtype;        /* chorus_dtype_t */
    uint8_t op;           /* chorus_op_t as called (AVG, not the SUM it runs as) */
    uint8_t algo;         /* chorus_algo_t: ranks must build matching schedules; with
                           * CHORUS_EXEC_SIG_DEVICE for a device call (staged) */
    int32_t root;         /* broadcast, reduce; 0 otherwise */
    int32_t nranks;
    uint64_t count;       /* the count argument of the call */
    uint64_t chunk_count; /* the pipeline chunk, which shapes the schedule too */
    uint64_t seq;         /* collective calls made on the communicator, this one included
                           * (point-to-point: the ones made before it) */
    uint64_t opnum;       /* the "#N" of messages; shown, not compared (p2p advances it) */
    uint64_t p2p_hash;    /* point-to-point: see CHORUS_EXEC_SIG_P2P; allgatherv and
                           * reduce_scatterv: a hash of recvcounts (count: their sum);
                           * alltoallv: see chorus__exec_sign_peers; else 0 */
} chorus_exec_sig_t;

#define CHORUS_EXEC_SIG_MAGIC 0x31475343u /* "CSG1" */
#define CHORUS_EXEC_SIG_DEVICE 0x80       /* in algo: the call is on device buffers */

/* The coll of a point-to-point execution's signatures (chorus__exec_sign_p2p). There is one
 * per peer: dtype and count describe the first send to that peer, op (a dtype) and
 * chunk_count the first receive from it, root and nranks count the sends and receives, and
 * p2p_hash holds a 32-bit hash of every send's (dtype, count) above one of every receive's.
 * A peer's signature matches ours when its sends are our receives and its receives our
 * sends. seq, the collectives the sender had made, is not compared between the two sides:
 * it tells a rank in a collective that a peer waiting on it has not come to that collective
 * yet (engine.c, sig_peek). */
#define CHORUS_EXEC_SIG_P2P 0xfe
#define CHORUS_EXEC_SIG_NONE 0xff /* dtype / op of a signature with no send / receive */

/* Reusable state of one execution; keep it (e.g. in the communicator) so that its
 * arrays are allocated once and grown, not allocated per call. Zero-initialise it. */
typedef struct chorus_exec {
    /* Inputs, set by chorus__exec_start. */
    const chorus_sched_t *sched;
    void *bufs[CHORUS_NUM_BUFS]; /* base pointers of SEND, RECV, SCRATCH */
    size_t elem_size;
    chorus_dtype_t dtype;
    chorus_op_t op; /* never AVG here: the caller passes SUM and divides afterwards */
    const chorus_peer_tp_t *peers; /* indexed by rank */
    const chorus_peer_tp_t *tps;   /* distinct transports to progress */
    int ntps;
    const char *what; /* "allreduce #12", for messages */
    /* REDUCE_N steps: 0 folds the sources with op (chorus_kernel_reduce_multi); d >= 1 sums
     * them exactly and divides by d, rounding once (chorus_kernel_reduce_exact: level 2 of
     * reproducible communicators). Set by the caller, kept across executions. */
    uint64_t exact_divisor;

    /* State (private to engine.c). */
    uint32_t *deps_left;
    uint32_t *ready;       /* stack of steps whose deps are done, not yet started */
    uint32_t nready;
    uint32_t *inflight;    /* send/recv steps posted, not complete */
    uint32_t ninflight;
    uint32_t *finished;    /* completed transfers collected in one progress pass */
    uint32_t *peer_order;  /* per peer and direction, the SEND/RECV steps in order */
    uint32_t *peer_begin;  /* 2 * nranks + 1 offsets into peer_order */
    uint32_t *peer_next;   /* 2 * nranks cursors: next position to post */
    uint8_t *posted_ok;    /* per step: deps done, waiting for its turn on the peer */
    chorus_tp_req_t *reqs; /* per step */
    const void **srcs;     /* a REDUCE_N step's sources */
    uint32_t cap_srcs;
    uint32_t cap_steps;
    int cap_ranks;
    uint32_t ndone;
    int started;
    chorus_status_t status;

    /* Mismatch detection (chorus__exec_sign; private to engine.c but for coll_seq). */
    uint64_t coll_seq;           /* the caller's count of collective calls (x lives as long
                                  * as its communicator, so the counter lives here) */
    chorus_exec_sig_t sig_next;  /* armed for the next chorus__exec_start */
    int sig_armed;
    const chorus_exec_sig_t *sig_peer_next; /* chorus__exec_sign_p2p: one per rank */
    const chorus_exec_sig_t *sig_peer;      /* of this execution, or NULL (one for all) */
    /* Called with stall_arg by a wait that has idled a while, next to sig_peek: the core
     * looks there for a peer in the same call on the shared arena. NULL: none. */
    chorus_status_t (*stall_check)(void *stall_arg, const char *what);
    void *stall_arg;
    int sig_on;                  /* this execution exchanges signatures */
    chorus_exec_sig_t sig;       /* ours, the source of every signature send */
    chorus_exec_sig_t *sig_rx;   /* per rank: the peer's signature */
    chorus_tp_req_t *sig_reqs;   /* per rank: send, recv */
    uint8_t *sig_state;          /* per rank: SIG_* bits */
    int32_t *sig_peers;          /* the ranks the schedule exchanges data with */
    int nsig_peers;
    int sig_open;                /* signature transfers not yet collected */
    int sig_later;               /* signatures held for the first data to their peer */
    int cap_sig_ranks;

    /* CHORUS_TRACE: the comm's recorder or NULL; per step, when it was posted. */
    struct chorus_trace *trace;
    uint64_t *trace_t0;
    uint32_t cap_trace;
} chorus_exec_t;

/* Nonzero when rank me's part of collective coll (root for broadcast and reduce) cannot
 * end before rank p has taken part: the result at me depends on p's input, or p is the
 * broadcast's root. A send or receive between the two that waits for me while I am in
 * such a call is a deadlock (sends are not buffered). */
int chorus__coll_needs_peer(chorus_coll_t coll, int root, int me, int p);

/* Prepares x to run sched with the given buffers. Does not communicate yet. */
chorus_status_t chorus__exec_start(chorus_exec_t *x, const chorus_sched_t *sched,
                                   void *const bufs[CHORUS_NUM_BUFS], chorus_dtype_t dtype,
                                   chorus_op_t op, const chorus_peer_tp_t *peers,
                                   const chorus_peer_tp_t *tps, int ntps, const char *what);

/* Arms signature checking for the next chorus__exec_start on x, and for that execution
 * only: it sends *sig to every peer its schedule exchanges data with before any data, and
 * receives theirs before any data from them, so that a peer that made a different call is
 * reported as CHORUS_ERR_MISMATCH with both signatures before anything it sent is used. The
 * execution is done only when every peer's signature arrived and matched. Both sides of a
 * pair must sign (or not). */
void chorus__exec_sign(chorus_exec_t *x, const chorus_exec_sig_t *sig);

/* The same for a point-to-point execution: sigs holds one signature per rank (see
 * CHORUS_EXEC_SIG_P2P), of which those of the schedule's peers are sent; the caller keeps
 * the array until the execution ends. */
void chorus__exec_sign_p2p(chorus_exec_t *x, const chorus_exec_sig_t *sigs);

/* The same for a collective whose ranks agree on something different with each peer:
 * alltoallv, whose signature to peer p has in count the elements the lower rank of the
 * pair sends the higher and in p2p_hash those the higher sends the lower, so that the two
 * sides' signatures are equal exactly when each one's send count is the other's receive
 * count. sig is the call's common signature (what sig_peek compares with peers outside
 * the schedule); sigs holds one per rank, kept by the caller until the execution ends. */
void chorus__exec_sign_peers(chorus_exec_t *x, const chorus_exec_sig_t *sig,
                             const chorus_exec_sig_t *sigs);

/* Nonzero if the signed execution x still waits for peer p's signature (a stall check). */
int chorus__exec_waits_for_sig(const chorus_exec_t *x, int p);

/* Advances the execution without blocking. *done_p becomes 1 when every step is done.
 * *progressed_p (may be NULL) says whether anything moved, for the caller's backoff.
 * On error the execution is over; the error names the step and the peer. */
chorus_status_t chorus__exec_progress(chorus_exec_t *x, int *done_p, int *progressed_p);

/* How a wait spends an idle spell: it spins for spin_ns (a peer on another core answers
 * within microseconds), then yields for yield_ns (cheap, and lets oversubscribed ranks
 * run), then sleeps in the transports (waking a sleeper costs tens of microseconds). */
typedef struct {
    uint64_t spin_ns;
    uint64_t yield_ns;
} chorus_wait_policy_t;

/* Runs x to completion: progress, spinning then yielding then sleeping in the
 * transports' wait() as policy says. Gives up at deadline_ns (CHORUS_ERR_TIMEOUT) or when
 * *abort_flag (may be NULL) is set by any thread (CHORUS_ERR_ABORTED). After an error the
 * transports may still hold requests of x: the caller must not reuse x before finalizing
 * them. */
chorus_status_t chorus__exec_wait(chorus_exec_t *x, const chorus_wait_policy_t *policy,
                                  uint64_t deadline_ns, const atomic_int *abort_flag);

/* Frees the arrays. */
void chorus__exec_fini(chorus_exec_t *x);

#endif
