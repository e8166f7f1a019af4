/*
 * What sim.c, sim_build.c and sim_record.c share: the compact schedules, the run's state
 * and, when a run records (chorus_sim_args_t.record), every step's times and what held it back.
 */
#ifndef CHORUS_SIM_SIM_INT_H
#define CHORUS_SIM_SIM_INT_H

#include "algo/algo.h"
#include "sim/flow.h"
#include "sim/sim.h"

#include <stddef.h>
#include <stdint.h>

#define SIM_NONE UINT64_MAX

enum { EV_READY = 0, EV_FLOW, EV_ARRIVE, EV_DONE, EV_FIRST, EV_RCPU, EV_TAIL };
enum {
    F_POSTED = 1,  /* a RECV posted */
    F_ARRIVED = 2, /* a RECV's data there */
    F_EAGER = 4,   /* a SEND done before its flow ended (into socket buffers) */
    F_QUEUED = 8,  /* a SEND that waited for its pair's earlier flow */
    F_READY = 16,  /* a SEND or RECV whose dependencies are done */
    /* With recv_streams, a RECV's three conditions: */
    F_FIRST = 32,  /* its first bytes are there */
    F_RCPU = 64,   /* its CPU part is done */
    F_TAIL = 128   /* its last bytes are there, and the software cost after them paid */
};

/* What a (sender, receiver) pair has in flight. Its messages are one stream, as over a
 * TCP connection or a shared-memory ring: one flow at a time, the others queued in order.
 * key is sender << 32 | receiver, plus 1 (0: an empty slot of the table). */
typedef struct {
    uint64_t key;
    double inflight; /* bytes of sends done early whose flows have not ended */
    uint64_t active; /* the step whose flow is on the wire, or SIM_NONE */
    uint64_t *q;     /* queued SEND steps, a ring of qcap */
    uint32_t qhead, qlen, qcap;
} sim_pair_t;

typedef struct {
    sim_pair_t *slot; /* open addressing, cap a power of two */
    size_t cap, used;
} sim_pairs_t;

typedef struct {
    uint64_t hash;
    uint32_t nsteps;
    uint8_t *kind;
    int32_t *relpeer;
    uint64_t *bytes;
    uint32_t *ndeps;
    uint32_t *succ_begin; /* nsteps + 1 */
    uint32_t *succ;
    uint32_t *ordinal;
    /* Per direction (0: SEND, 1: RECV): its steps sorted by (relpeer, ordinal), and per
     * distinct relpeer (a "slot") its first index in that order. */
    uint32_t nmsg[2];
    uint32_t *msg_step[2];
    int32_t *slot_peer[2];
    uint32_t *slot_begin[2]; /* nslots + 1 */
    uint32_t nslots[2];
} sim_class_t;

typedef struct {
    double t;
    uint64_t seq;
    uint32_t rank, step;
    uint8_t type;
} sim_ev_t;

typedef struct {
    chorus_fabric_t *fab;
    const chorus_sim_args_t *a;
    int n;
    size_t esize;
    double msg_s, reduce_Bps, copy_Bps;
    double step_s, wait_s;
    /* Per-byte CPU time of a message, [0] inside a host, [1] across hosts, with the cache
     * factor applied; cache also scales reduces and copies. */
    double send_s[2], recv_s[2], cache;
    double sendbuf[2]; /* the fabric's intra_sendbuf and nic_sendbuf */
    int streams;       /* recv_streams */
    int *frank, *host; /* per rank: its rank on the fabric, and its host */
    sim_pairs_t pairs;
    double *stretch; /* per rank */
    sim_class_t **classes;
    int nclasses, capclasses;
    int *cls; /* per rank */
    /* Per-step arrays hold every rank's step i side by side (index i * n + r, sim_g): ranks
     * that move in lockstep, as a ring's do, touch neighbouring memory. */
    uint32_t maxsteps; /* the longest schedule */
    uint64_t slots;    /* maxsteps * n */
    uint64_t steps;    /* over all ranks */
    /* Per rank and slot (SEND slots, then RECV slots): how many of its messages have been
     * posted. The engine posts a peer's sends (and receives) in schedule order, so a
     * message whose dependencies are done still waits for the ones before it. */
    uint64_t *pbase; /* per rank: its first slot in post_next */
    uint32_t *post_next;
    uint32_t *deps_left;
    uint8_t *flags;
    double *cpu_free;
    sim_ev_t *heap;
    size_t nheap, capheap;
    /* Events due at the current time (now), in the order made: most are (a step's end makes
     * its successors ready at once), and a queue costs less than the heap. */
    sim_ev_t *fifo;
    size_t fhead, flen, fcap;
    double now;
    uint64_t seq;
    size_t mem, mem_peak;
    chorus_flownet_t *net;
    uint64_t events, messages;
    double finish;
    /* Recording (NULL unless args->record), per step over all ranks (index sim_g). */
    double *r_ready; /* ready: its dependencies done (a message: and posted) */
    double *r_cpu;   /* its CPU part began (a SEND's comes before its flow, a RECV's
                      * after its data) */
    double *r_end;
    double *r_flow;      /* a SEND: its flow ended */
    uint64_t *r_rcause;  /* what made it ready last (SIM_READY_*), or SIM_NONE */
    uint64_t *r_scause;  /* what delayed its CPU part: the CPU's step, or a RECV's SEND */
    uint8_t *r_why;      /* SIM_READY_* | SIM_START_* */
    uint64_t *cpu_owner; /* per rank: the step its CPU did last */
} sim_t;

/* Why a step became ready when it did (r_why & 3), and why its CPU part began after that
 * (r_why & 12). */
enum {
    SIM_READY_START = 0, /* at time 0 */
    SIM_READY_DEP = 1,   /* a dependency, r_rcause, finished last */
    SIM_READY_ORDER = 2, /* a message behind an earlier one to the same peer: r_rcause,
                          * which became ready then */
    SIM_START_READY = 0, /* at once */
    SIM_START_CPU = 4,   /* the rank's CPU was busy with r_scause */
    SIM_START_DATA = 8,  /* a RECV whose data, from the SEND r_scause, came later */
    SIM_START_FIRST = 12 /* a streaming RECV whose first bytes, from the SEND r_scause, came
                          * later */
};
#define SIM_START_MASK 12

/* The SEND that RECV step i of rank r receives (its step on the sender), as g. */
uint64_t chorus__sim_recv_source(const sim_t *s, uint32_t r, uint32_t i);

static inline uint64_t sim_g(const sim_t *s, uint32_t r, uint32_t i)
{
    return (uint64_t)i * (uint64_t)s->n + r;
}

static inline uint32_t sim_g_rank(const sim_t *s, uint64_t g)
{
    return (uint32_t)(g % (uint64_t)s->n);
}

static inline uint32_t sim_g_step(const sim_t *s, uint64_t g)
{
    return (uint32_t)(g / (uint64_t)s->n);
}

static inline void sim_mem(sim_t *s, long delta)
{
    s->mem = (size_t)((long)s->mem + delta);
    if (s->mem > s->mem_peak) s->mem_peak = s->mem;
}

/* sim_build.c: every rank's schedule into classes, and the run's per-step arrays. */
chorus_status_t chorus__sim_build(sim_t *s, uint64_t count);
/* The arguments a communicator would build every rank's schedule from (rank 0's). */
void chorus__sim_coll_args(const sim_t *s, uint64_t count, chorus_coll_args_t *ca);
void chorus__sim_class_free(sim_class_t *c);
/* The slot of relative peer rp in direction d of class c, or UINT32_MAX. */
uint32_t chorus__sim_class_slot(const sim_class_t *c, int d, int32_t rp);
/* The message of class c in direction d with relative peer rp and ordinal k, or UINT32_MAX. */
uint32_t chorus__sim_class_msg(const sim_class_t *c, int d, int32_t rp, uint32_t k);

/* CPU time of step i of rank r's class c. */
double chorus__sim_cpu(const sim_t *s, const sim_class_t *c, int r, uint32_t i);

/* Allocates the recording arrays (CHORUS_ERR_NO_MEMORY; CHORUS_ERR_UNSUPPORTED past
 * SIM_RECORD_MAX_STEPS steps). */
#define SIM_RECORD_MAX_STEPS (16ull << 20)
chorus_status_t chorus__sim_record_alloc(sim_t *s);
void chorus__sim_record_free(sim_t *s);

/* The critical path of a recorded run, walked back from the last step to finish. */
void chorus__sim_critical_path(const sim_t *s, chorus_sim_path_t *path);

/* Writes the recorded run to path as a trace (lib/trace/trace_json.h). */
chorus_status_t chorus__sim_write_trace(const sim_t *s, const char *path);

#endif
