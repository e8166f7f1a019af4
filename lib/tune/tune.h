/*
 * The tuner: an alpha-beta-gamma cost model of this communicator's transports and CPU,
 * and the choice of algorithm and chunk size it predicts fastest.
 *
 * The model: a message between two ranks costs alpha (latency) plus bytes times the time
 * the sender's CPU spends on it, the time the receiver's CPU spends on it and the time on
 * the wire (shm: two copies through the ring; tcp: the kernel's copies and the link). A
 * reduce or copy costs bytes times gamma. Every CPU term is stretched by the host's
 * oversubscription (local ranks per core, at least 1), and a receive that has to wait on
 * an oversubscribed host pays a context switch, because the waiting rank yields its core.
 * The time of a collective is found by running the schedules of all ranks against each
 * other in a small discrete-event simulation (tune_sim.c); the arena, which is not a
 * schedule, is modelled from its structure.
 *
 * Parameters come from the calibration file (CHORUS_TUNE_FILE, default
 * $XDG_CACHE_HOME/chorus/tune-<hostid>.conf or ~/.cache/chorus/...), else from a quick
 * measurement of the copy and reduce rates at creation (about a millisecond), else from
 * built-in defaults measured on the development machine.
 */
#ifndef CHORUS_TUNE_TUNE_H
#define CHORUS_TUNE_TUNE_H

#include "chorus.h"
#include "algo/algo.h"
#include "sim/fabric.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct chorus_tune chorus_tune_t;
struct chorus_comm;

/* Size classes of decisions: floor(log2(bytes)), 0..63. */
#define CHORUS_TUNE_NCLASSES 64

/* Transport kinds of the model (the values of chorus_peer_kind_t). */
enum { CHORUS_TUNE_SELF = 0, CHORUS_TUNE_SHM = 1, CHORUS_TUNE_TCP = 2, CHORUS_TUNE_NKINDS = 3 };

typedef struct {
    double alpha_us[CHORUS_TUNE_NKINDS]; /* per message, send start to data available */
    double send_ns[CHORUS_TUNE_NKINDS];  /* sender CPU per byte */
    double recv_ns[CHORUS_TUNE_NKINDS];  /* receiver CPU per byte */
    double wire_ns[CHORUS_TUNE_NKINDS];  /* link time per byte (serialised per direction) */
    double copy_ns;   /* memcpy per byte */
    double reduce_ns; /* float32 sum per byte of one input (other dtypes scaled) */
    /* The same two as plain kernel rates on cache-resident data (memcpy, float32 sum), for
     * the arena, whose copies are exactly that when every rank has a core of its own. The
     * two above are effective rates fitted to shm point-to-point runs. */
    double raw_copy_ns;
    double raw_reduce_ns;
    double step_us;   /* engine overhead per step */
    double switch_us; /* a wait on an oversubscribed host: the context switch */
    double sync_us;   /* one arena synchronisation, host not oversubscribed */
    double llc_mb;    /* last-level cache: per-byte costs above are at cache speed... */
    double dram_factor; /* ...and this many times slower once the working set is 4x it */
    int cores;        /* 0: ask the system */
    /* Per-algorithm correction factors fitted from measurements (1: none), applied to the
     * whole prediction; [0] of each row is unused. Row 0: shm/self comms, row 1: tcp. */
    double corr[2][CHORUS_NUM_ALGOS];
    /* 1 when the calibration file set any of the numbers above: the quick measurement at
     * creation then leaves them alone. */
    int from_file;
    /* Measured decisions (tune_rules.c) for communicators of one shape, rule_scope
     * ("<transport>.<ranks>x<hosts>", set before the file is read; rules of other shapes
     * are skipped): per collective and size class, the algorithm (0: no rule) and the
     * log2 of its pipeline chunk. */
    char rule_scope[32];
    uint8_t rule_algo[CHORUS_NUM_COLLS][CHORUS_TUNE_NCLASSES];
    uint8_t rule_chunk_log2[CHORUS_NUM_COLLS][CHORUS_TUNE_NCLASSES];
} chorus_tune_params_t;

/* The communicator as the model sees it. */
typedef struct {
    int rank;
    int nranks;
    int nhosts;
    const int *host_of; /* NULL: one host */
    int local_kind;     /* what same-host peers use: CHORUS_TUNE_SHM or CHORUS_TUNE_TCP */
    int nlocal;         /* ranks on this host */
    int cores;          /* cores available to this host's ranks */
    int has_arena;      /* the arena runs allreduce */
    size_t arena_flat_max;
    size_t arena_chunk_bytes;
} chorus_tune_topo_t;

/* Built-in defaults, measured on the development machine (2 cores). */
void chorus__tune_params_default(chorus_tune_params_t *p);

/* Parses "key = value" lines (# comments, blank lines) into p, on top of what p holds:
 * missing keys keep their value. CHORUS_ERR_INVALID_ARGUMENT, with the line number in the
 * message, for an unknown key, a line without '=' or a value that is not a number;
 * p is then unchanged. name names the text in messages. */
chorus_status_t chorus__tune_params_parse(const char *text, const char *name,
                                          chorus_tune_params_t *p);
/* Reads and parses a file; CHORUS_ERR_SYSTEM, naming the path, when it cannot be read. */
chorus_status_t chorus__tune_params_load(const char *path, chorus_tune_params_t *p);
/* Writes p in the format parse reads. Returns 0, -1 on a write error. */
int chorus__tune_params_write(const chorus_tune_params_t *p, FILE *out);
/* The calibration file's path (CHORUS_TUNE_FILE, else the per-host cache path) into buf. */
void chorus__tune_file_path(char *buf, size_t len);
/* Measures copy_ns and reduce_ns on a local buffer (a millisecond or two). */
void chorus__tune_params_measure(chorus_tune_params_t *p);

/* A tuner on a described topology, without a communicator (tests, tools). */
chorus_status_t chorus__tune_create_topo(const chorus_tune_topo_t *topo,
                                         const chorus_tune_params_t *params,
                                         chorus_tune_t **tune_p);

/* A tuner that predicts on a described fabric (lib/sim) for its first nranks ranks, with
 * params' correction factors: chorus-sim -a tuner. fab must outlive it. */
chorus_status_t chorus__tune_create_fabric(chorus_fabric_t *fab, int nranks,
                                           const chorus_tune_params_t *params,
                                           chorus_tune_t **tune_p);

/* Called once by chorus_comm_init after the transports (and the arena) are up. Collective
 * over the comm: one bootstrap allgather, so that every rank adopts the same parameters
 * (rank 0's) and therefore makes the same choices. */
chorus_status_t chorus__tune_create(struct chorus_comm *comm, chorus_tune_t **tune_p);
void chorus__tune_destroy(chorus_tune_t *tune);

/* The model's time in microseconds of algo running coll of count elements of dtype with
 * the given pipeline chunk (bytes). CHORUS_ERR_UNSUPPORTED if algo does not implement coll
 * here (no builder, or the arena is absent). */
chorus_status_t chorus__tune_predict(chorus_tune_t *tune, chorus_coll_t coll, chorus_algo_t algo,
                                     uint64_t count, chorus_dtype_t dtype, uint64_t chunk_bytes,
                                     double *us_p);

/* What a prediction assumes of the call's buffers (0: plain buffers, out of place). Only
 * the arena's model reads them: a schedule moves the same bytes either way. */
enum {
    CHORUS_TUNE_REGISTERED = 1, /* every rank's buffers lie in registered windows (issue 38) */
    CHORUS_TUNE_IN_PLACE = 2    /* every rank calls in place */
};

/* As chorus__tune_predict, for buffers as how says. */
chorus_status_t chorus__tune_predict_buffers(chorus_tune_t *tune, chorus_coll_t coll,
                                             chorus_algo_t algo, uint64_t count,
                                             chorus_dtype_t dtype, uint64_t chunk_bytes,
                                             unsigned how, double *us_p);

/* One decision of the tuner: the algorithm and chunk predicted fastest for a size class. */
typedef struct {
    chorus_algo_t algo;
    uint64_t chunk_bytes;
    double us;
} chorus_tune_choice_t;

/* The fastest supported algorithm (and chunk: chunk_bytes if nonzero, else the best of a
 * few candidates) for coll at this size, from the per-(collective, size class) cache; the
 * first call of a class evaluates the model for every candidate and, with CHORUS_DEBUG=info,
 * logs each candidate's predicted time. Never fails: without a usable model the answer is
 * the size threshold of old (ring for large, rd/tree for small). */
chorus_tune_choice_t chorus__tune_choose(chorus_tune_t *tune, chorus_coll_t coll, uint64_t bytes,
                                         uint64_t chunk_bytes);

/* How many times the model was evaluated for a decision (a cache miss): tests. */
unsigned chorus__tune_evaluations(const chorus_tune_t *tune);

/* The parameters in use (tools). */
const chorus_tune_params_t *chorus__tune_params(const chorus_tune_t *tune);

/* ---- tune_rules.c: measured decisions in the calibration file ---- */

/* floor(log2(bytes)), 0 for 0 and 1: the size class. */
int chorus__tune_class(uint64_t bytes);
/* The shape of a communicator as rules name it: "<transport>.<ranks>x<hosts>". */
void chorus__tune_scope_format(char *buf, size_t len, int local_kind, int nranks, int nhosts);
/* Parses the value of one "rule.<coll>.<scope>.<bytes>" key into p when its scope is
 * p->rule_scope (and only checks it otherwise). CHORUS_ERR_INVALID_ARGUMENT with
 * name:lineno in the message for a malformed key or value. */
chorus_status_t chorus__tune_rule_parse(chorus_tune_params_t *p, const char *key, const char *val,
                                        const char *name, int lineno);
/* The rule for coll nearest to bytes' size class, at most two classes away (the
 * calibration steps by 4x): 1 and the algorithm and chunk, else 0. */
int chorus__tune_rule_find(const chorus_tune_params_t *p, chorus_coll_t coll, uint64_t bytes,
                           chorus_algo_t *algo_p, uint64_t *chunk_p);
/* Writes "key = value" into the file at path, replacing a line of the same key and keeping
 * every other line; creates the file (and a missing last directory, 0700) when needed.
 * The new file replaces the old one by rename, so a reader never sees half of it.
 * CHORUS_ERR_SYSTEM naming the path on failure. */
chorus_status_t chorus__tune_file_set(const char *path, const char *key, const char *value);

/* ---- tune_sim.c: the simulation behind predict ---- */

/* The tuner's description of a communicator for lib/sim (tune_sim.c says what it is), and
 * where its ranks sit on it: place[r] for each of topo->nranks ranks. */
chorus_status_t chorus__tune_fabric_desc(const chorus_tune_params_t *p,
                                         const chorus_tune_topo_t *topo, chorus_fab_desc_t *d,
                                         int *place);
/* The tuner's prediction (microseconds, before correction factors) on a built fabric, for n
 * ranks placed by place (NULL: the fabric's first n): the joint replay up to 32 ranks, the
 * lockstep pass above, and sizes past the pipelined regime extrapolated from two runs. */
chorus_status_t chorus__tune_simulate_fabric(chorus_fabric_t *fab, const int *place, int n,
                                             chorus_coll_t coll, chorus_algo_t algo,
                                             uint64_t count, chorus_dtype_t dtype,
                                             uint64_t chunk_bytes, double *us_p);
/* Time in microseconds of algo for coll on topo, before correction factors, for buffers as
 * how says (CHORUS_TUNE_REGISTERED, CHORUS_TUNE_IN_PLACE). */
chorus_status_t chorus__tune_simulate(const chorus_tune_params_t *p, const chorus_tune_topo_t *topo,
                                      chorus_coll_t coll, chorus_algo_t algo, uint64_t count,
                                      chorus_dtype_t dtype, uint64_t chunk_bytes, unsigned how,
                                      double *us_p);

#endif
