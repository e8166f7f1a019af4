/*
 * chorus-sim's engine, and the tuner's (lib/tune/tune_sim.c): replays the real schedules of
 * every rank (lib/algo, the ones the engine executes) on a described fabric (fabric.h),
 * with messages as flows of a max-min fair network (flow.h).
 *
 * The model of one rank is the engine's: a step starts when the steps it depends on are
 * done; the rank's CPU does one thing at a time (a message's software cost on each end,
 * a reduce, a copy), stretched when a host has more ranks than cores; a SEND's data
 * leaves as a flow once its software cost is paid and is at the receiver the path's
 * latency after the flow ends; a RECV completes when its data is there and it is posted
 * (with recv_streams, its copy may start on the first bytes; fabric.h).
 *
 * Memory: ranks whose schedules are the same up to where their peers are (a ring's ranks
 * all are, with equal shares) share one copy of the schedule, so 4,096 ranks keep a few
 * bytes per step each for what changes during the run.
 */
#ifndef CHORUS_SIM_SIM_H
#define CHORUS_SIM_SIM_H

#include "algo/algo.h"
#include "sim/fabric.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    chorus_coll_t coll;
    chorus_algo_t algo;
    uint64_t bytes;      /* nccl-tests' size: allreduce, broadcast, reduce: the vector;
                          * allgather, reduce_scatter, alltoall: the whole buffer of all
                          * ranks (each rank's part is bytes / ranks) */
    chorus_dtype_t dtype;
    int root;
    uint64_t chunk_bytes; /* 0: the algorithm's own */
    int nranks;           /* the first nranks ranks of the fabric (hosts filled in order) */
    const int *place;     /* or: rank r is the fabric's rank place[r] (distinct ranks) */
    uint64_t mem_bytes;   /* a rank's vector whose working set sets the cache factor
                           * (fabric.h, llc_mb; 0: this call's): the tuner runs smaller
                           * sizes to extrapolate a large one */
    int top_links;        /* how many of the busiest links to report (0: none) */
    int record;           /* keep every step's times: the critical path (and a trace) */
    const char *trace;    /* with record: write the run here as a trace (trace_json.h) */
    int build_threads;    /* threads that build the schedules (0: one a core from 256 ranks
                           * on); the run is the same whatever the number */
} chorus_sim_args_t;

/* The critical path: the chain of steps, back from the last to finish, each held back by
 * the one before it (a dependency, the rank's CPU, or a message's data), and where its
 * time went. The parts add up to the call's time. */
typedef struct {
    double network_s; /* flows on the wire, at the rates they got */
    double latency_s; /* paths' latency, from a flow's end to its data's arrival */
    double message_s; /* the software cost of sends and receives */
    double reduce_s, copy_s;
    uint64_t steps;   /* on the path */
    int ranks;        /* distinct ranks it passes through */
} chorus_sim_path_t;

typedef struct {
    char name[96];
    double util;   /* bytes carried / (bandwidth x time) */
    double bytes;
} chorus_sim_link_use_t;

typedef struct {
    double time_s;
    double algbw_GBps, busbw_GBps;
    uint64_t steps;    /* over all ranks */
    uint64_t messages;
    uint64_t events;
    uint64_t solves;   /* flow-rate computations */
    int classes;       /* distinct schedules kept */
    size_t mem_bytes;  /* the simulator's own arrays at their largest */
    double build_s, run_s;
    int nlinks_used;              /* links that carried anything */
    int nlinks_top;               /* entries of links */
    chorus_sim_link_use_t *links; /* the busiest links, busiest first; free() it */
    int have_path;                /* args->record was set */
    chorus_sim_path_t path;
} chorus_sim_result_t;

/* The bus bandwidth factor of nccl-tests for coll on n ranks (allreduce 2(n-1)/n, ...). */
double chorus__sim_bus_factor(chorus_coll_t coll, int n);

/* The factor of per-byte CPU work for a rank's vector of bytes on a host of nlocal ranks
 * (fabric.h, llc_mb and dram_factor). */
double chorus__sim_cache_factor(const chorus_fab_desc_t *d, double bytes, int nlocal);

/* Simulates one call. CHORUS_ERR_UNSUPPORTED when algo does not implement coll,
 * CHORUS_ERR_INVALID_ARGUMENT for a size that does not split over the ranks or more
 * ranks than the fabric has. */
chorus_status_t chorus__sim_run(chorus_fabric_t *fab, const chorus_sim_args_t *args,
                                chorus_sim_result_t *res);

/* The fast pass of the same model, for decisions at scale: rank 0's schedule alone, every
 * rank assumed to run it mirrored, in lockstep (the k-th message from peer p left p when
 * rank 0 began its k-th send to the mirror peer -p, or, without one, when the receive was
 * posted), at the route's bottleneck rate, with the same CPU costs and streaming; links
 * are not shared. For schedules whose ranks are alike (ring, halving-doubling) it lands
 * within 0.4% of chorus__sim_run (test_tune_sim). Fills time_s, algbw, busbw, steps (rank
 * 0's) and build_s; the rest stays 0. */
chorus_status_t chorus__sim_lockstep(chorus_fabric_t *fab, const chorus_sim_args_t *args,
                                     chorus_sim_result_t *res);

/* How large a joint replay of args would be: rank 0's steps times the ranks (UINT64_MAX
 * when the call cannot be built). */
uint64_t chorus__sim_joint_steps(chorus_fabric_t *fab, const chorus_sim_args_t *args);

#endif
