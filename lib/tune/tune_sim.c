/*
 * The simulation behind the tuner's predictions: lib/sim, the engine of chorus-sim, on the
 * tuner's description of the communicator (chorus__tune_fabric_desc), so that every
 * prediction the tuner makes can be replayed, and explained, with `chorus-sim --comm`.
 *
 * The description: each pair of ranks on a host has a link of its own (a shared-memory
 * ring, or a loopback socket, per pair) of the fitted wire rate and latency; hosts meet on
 * one switch through one NIC each, of the tcp rate; a message costs the fitted software
 * time on each end plus per-byte CPU time (the copies into and out of the ring or socket),
 * and a receive streams: it copies out while the data comes in. CPU work on a host with
 * more ranks than cores is stretched by their ratio (8 ranks on 2 cores share the two
 * cores' copies and reductions), and a receive there pays a context switch, because its
 * rank has yielded the core. The prediction is the time the last rank finishes, so every
 * rank computes the same number and therefore the same choice.
 *
 * Up to TUNE_JOINT_MAX ranks, and above while the replay stays small (TUNE_JOINT_STEPS),
 * every rank's schedule runs against the others (chorus__sim_run); beyond, lib/sim's
 * lockstep pass runs rank 0's alone (chorus__sim_lockstep): the same costs, without the
 * contention between ranks, and cheap enough for a first-call decision.
 */
#include "tune/tune.h"

#include "arena/arena.h"

#include "sim/sim.h"
#include "util/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TUNE_JOINT_MAX 32
/* Above TUNE_JOINT_MAX ranks the joint replay still runs while it stays small: rank 0's
 * steps times the ranks at most this (about 0.1 s of replay here). The lockstep pass
 * assumes every rank runs rank 0's schedule mirrored, which holds for a ring or
 * halving-doubling and not for a tree or hier, whose ranks differ: on the fattree preset at
 * 64 ranks it put a tree at 193 us where the replay says 1,469 us. */
#define TUNE_JOINT_STEPS ((uint64_t)1 << 19)
#define TUNE_MAX_CORES 256
/* Past this many ranks on a host, its ranks share ports instead of a link per pair. */
#define TUNE_PAIRS_MAX 64
/* A large collective is in its pipelined regime, where time grows linearly with size, once
 * each rank's share of it spans a few chunks. Beyond twice that size the simulation runs at
 * that size and at twice it, and extrapolates along the line through the two: simulating
 * every chunk of a 128 MiB allreduce on 8 ranks took 0.6 s per decision (8 s on 64 ranks),
 * all of it spent by the first call of the size class. With 2 chunks per share the line
 * missed the full replay of a tree by up to 15% (the tree's pipeline had not filled); with
 * 4, by 7.5% (test_tune_sim), for a first decision of about 0.4 s at 32 ranks. */
#define TUNE_SIM_CHUNKS_PER_SHARE 4
#define TUNE_SIM_MIN_BYTES ((uint64_t)1 << 20)

static int tune_host(const chorus_tune_topo_t *t, int r)
{
    return t->host_of != NULL ? t->host_of[r] : 0;
}

/* A rate in Gbit/s from a time per byte in ns (0: as good as free). */
static double tune_gbps(double ns_per_byte)
{
    return ns_per_byte > 0 ? 8.0 / ns_per_byte : 1e6;
}

chorus_status_t chorus__tune_fabric_desc(const chorus_tune_params_t *p,
                                         const chorus_tune_topo_t *t, chorus_fab_desc_t *d,
                                         int *place)
{
    const int n = t->nranks, nh = t->nhosts > 0 ? t->nhosts : 1, k = t->local_kind;
    int *local = calloc((size_t)nh, sizeof *local), rph = 1;

    if (local == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory");
    for (int r = 0; r < n; r++) {
        int h = tune_host(t, r);
        if (h < 0 || h >= nh) {
            free(local);
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: rank %d: host %d of %d",
                                 r, h, nh);
        }
        if (++local[h] > rph) rph = local[h];
    }
    memset(local, 0, (size_t)nh * sizeof *local);
    for (int r = 0; r < n; r++) {
        int h = tune_host(t, r);
        place[r] = h * rph + local[h]++;
    }
    free(local);
    chorus__fab_desc_default(d);
    snprintf(d->name, sizeof d->name, "tuner: %d ranks on %d host(s), %s", n, nh,
             k == CHORUS_TUNE_TCP ? "tcp" : "shm");
    d->hosts = nh;
    d->ranks_per_host = rph;
    snprintf(d->intra_kind, sizeof d->intra_kind, "%s", k == CHORUS_TUNE_TCP ? "tcp" : "shm");
    d->intra_pairs = rph <= TUNE_PAIRS_MAX;
    d->intra_gbps = tune_gbps(p->wire_ns[k]);
    d->intra_lat_us = p->alpha_us[k] / 2; /* a pair's link counts it twice, like two ports */
    d->intra_sendbuf = 1e12;             /* a send is done once its CPU part is */
    d->intra_send_ns = p->send_ns[k];
    d->intra_recv_ns = p->recv_ns[k];
    d->nics = 1;
    d->nic_gbps = tune_gbps(p->wire_ns[CHORUS_TUNE_TCP]);
    d->nic_lat_us = p->alpha_us[CHORUS_TUNE_TCP] / 2;
    d->nic_sendbuf = 1e12;
    d->net_send_ns = p->send_ns[CHORUS_TUNE_TCP];
    d->net_recv_ns = p->recv_ns[CHORUS_TUNE_TCP];
    d->net = CHORUS_FAB_NET_SWITCH;
    d->switch_lat_us = 0;
    d->msg_us = p->step_us;
    d->step_us = p->step_us;
    d->reduce_GBps = p->reduce_ns > 0 ? 1.0 / p->reduce_ns : 1e6;
    d->copy_GBps = p->copy_ns > 0 ? 1.0 / p->copy_ns : 1e6;
    d->cores_per_host = t->cores;
    d->wait_us = p->switch_us;
    d->llc_mb = p->llc_mb;
    d->dram_factor = p->dram_factor;
    d->recv_streams = 1;
    return CHORUS_SUCCESS;
}

/* The work (microseconds of all ranks' copies and reductions together) of a collective
 * whose buffers lie in registered windows on every rank, or -1 where it takes the plain
 * buffers' path (chorus__arena_win_path). Nothing goes through the slots: each rank reads
 * its peers' parts where they lie, in one pass, with two synchronisations (the offers and
 * the end, arena_coll.c) and three for two-shot (arena_direct.c):
 *   allgather       copy n B                 broadcast        each copies B
 *   alltoall        copy n B                 reduce_scatter   reduce n sources of B
 *   allreduce       one-shot: reduce n vectors of B; two-shot: reduce n sources of B / n
 *                   and copy the other (n - 1) B / n; in place on 2 ranks, one-shot in
 *                   chunks that are copied back
 * (per rank; B as in tune_arena). cpy and red are the kernel rates (raw_*) even on an
 * oversubscribed host, since a rank reads its peers in one pass between those few
 * synchronisations; nothing is fitted to the window paths, which
 * bench/sim/validate_registered.sh judges against measurement. */
static double tune_arena_windows(const chorus_tune_topo_t *t, chorus_coll_t coll, double bytes,
                                 double cpy, double red, unsigned how, int *nsync_p)
{
    double n = t->nlocal;
    int in_place = (how & CHORUS_TUNE_IN_PLACE) != 0;

    *nsync_p = 2;
    switch (chorus__arena_win_path(coll, t->nlocal, (size_t)bytes, in_place, t->arena_flat_max)) {
    case CHORUS_ARENA_WIN_ONE_SHOT:
        return n * ((n - 1) * bytes * red + (in_place ? bytes * cpy : 0.0));
    case CHORUS_ARENA_WIN_TWO_SHOT:
        *nsync_p = 3;
        return (n - 1) * bytes * (red + cpy);
    case CHORUS_ARENA_WIN_READ: break;
    default: return -1.0;
    }
    switch (coll) {
    case CHORUS_COLL_ALLGATHER:
    case CHORUS_COLL_ALLTOALL: return n * n * bytes * cpy;
    case CHORUS_COLL_BROADCAST: return n * bytes * cpy;
    case CHORUS_COLL_REDUCE_SCATTER: return n * (n - 1) * bytes * red;
    default: return -1.0;
    }
}

/* The arena, from its structure (lib/arena/arena.h). Allreduce: the flat path publishes
 * each vector and every rank reduces all of them; the staged path copies in, reduces its
 * own slice reading every slot and copies out, with three synchronisations per chunk. The
 * others (arena_coll.c) write what peers need into their slot once and read what they need
 * straight out of the others' slots, one synchronisation per chunk:
 *   allgather       write B, copy n B out          reduce_scatter  write (n - 1) B, reduce n B
 *   broadcast       the root writes B, each copies  alltoall        write (n - 1) B, copy n B
 *   reduce          n - 1 write B, the root reduces barrier         a synchronisation alone
 * (B: the call's count in bytes per part.) With a core per rank its copies run at the plain
 * kernel rates (raw_*), slowed by memory once the callers' buffers leave the last-level
 * cache (mem). With more ranks than cores, every synchronisation is a context switch and
 * the ranks evict each other's caches on each one; the effective rates fitted to shm
 * point-to-point runs describe that, and the arena's own working set (a chunk per rank)
 * stays small, so mem does not apply. The allreduce terms were fitted against chorus-bench
 * --algo all at 2 and 4 ranks on the 2-core development machine (within 20% from 8 KiB to
 * 32 MiB); the others reuse those rates with their own byte counts. */
static double tune_arena(const chorus_tune_params_t *p, const chorus_tune_topo_t *t,
                         chorus_coll_t coll, double bytes, double gamma_scale, double mem,
                         unsigned how)
{
    double n = t->nlocal, share = n < t->cores ? n : t->cores, work, sync, chunks, red, cpy;
    double parts = coll == CHORUS_COLL_ALLTOALL || coll == CHORUS_COLL_REDUCE_SCATTER ? n : 1;
    int over = n > t->cores;

    if (over) {
        red = p->reduce_ns * gamma_scale * 1e-3;
        cpy = p->copy_ns * 1e-3;
        sync = p->switch_us;
    } else {
        red = p->raw_reduce_ns * gamma_scale * mem * 1e-3;
        cpy = p->raw_copy_ns * mem * 1e-3;
        sync = p->sync_us;
    }
    if (how & CHORUS_TUNE_REGISTERED) {
        /* A rank reads its peers' windows in one pass between two or three
         * synchronisations, so even oversubscribed its copies run at the kernel rates:
         * only the synchronisations are context switches. */
        int nsync;
        double w = tune_arena_windows(t, coll, bytes, p->raw_copy_ns * mem * 1e-3,
                                      p->raw_reduce_ns * gamma_scale * mem * 1e-3, how, &nsync);
        if (w >= 0.0) return (w + n * p->step_us) / share + nsync * sync;
    }
    chunks = t->arena_chunk_bytes > 0 ? parts * bytes / (double)t->arena_chunk_bytes : 1.0;
    if (chunks < 1.0 || parts * bytes <= (double)t->arena_flat_max) chunks = 1.0;
    switch (coll) {
    case CHORUS_COLL_ALLREDUCE:
        if (bytes <= (double)t->arena_flat_max) {
            work = n * (bytes * cpy + (n - 1) * bytes * red + p->step_us);
            return work / share + 2 * sync;
        }
        work = n * (2 * bytes * cpy + (n - 1) / n * bytes * red + chunks * p->step_us);
        return work / share + 3 * chunks * sync;
    case CHORUS_COLL_REDUCE: work = (n - 1) * bytes * (cpy + red); break;
    case CHORUS_COLL_ALLGATHER: work = n * (n + 1) * bytes * cpy; break;
    case CHORUS_COLL_BROADCAST: work = n * bytes * cpy; break;
    case CHORUS_COLL_ALLTOALL: work = n * (2 * n - 1) * bytes * cpy; break;
    case CHORUS_COLL_REDUCE_SCATTER: work = n * ((n - 1) * bytes * (cpy + red)); break;
    case CHORUS_COLL_BARRIER: work = 0.0; break;
    default: return -1.0;
    }
    work += n * chunks * p->step_us;
    return work / share + 2 * chunks * sync;
}

/* One simulation of count elements, with the cache factor of mem_count elements. */
static chorus_status_t tune_simulate_at(chorus_fabric_t *fab, const int *place, int n,
                                        chorus_coll_t coll, chorus_algo_t algo, uint64_t count,
                                        chorus_dtype_t dtype, uint64_t mem_count,
                                        uint64_t chunk_bytes, double *us_p)
{
    const size_t esize = chorus_dtype_size(dtype);
    chorus_sim_args_t a;
    chorus_sim_result_t res;
    chorus_status_t status;
    int per_rank = coll == CHORUS_COLL_ALLGATHER || coll == CHORUS_COLL_REDUCE_SCATTER ||
                   coll == CHORUS_COLL_ALLTOALL;

    memset(&a, 0, sizeof a);
    a.coll = coll;
    a.algo = algo;
    a.bytes = count * esize * (per_rank ? (uint64_t)n : 1);
    a.dtype = dtype;
    a.chunk_bytes = chunk_bytes / esize ? chunk_bytes / esize * esize : esize;
    a.nranks = n;
    a.place = place;
    a.mem_bytes = mem_count * esize;
    if (n <= TUNE_JOINT_MAX || chorus__sim_joint_steps(fab, &a) <= TUNE_JOINT_STEPS)
        status = chorus__sim_run(fab, &a, &res);
    else
        status = chorus__sim_lockstep(fab, &a, &res);
    free(res.links);
    if (status == CHORUS_SUCCESS) *us_p = res.time_s * 1e6;
    return status;
}

chorus_status_t chorus__tune_simulate_fabric(chorus_fabric_t *fab, const int *place, int n,
                                             chorus_coll_t coll, chorus_algo_t algo,
                                             uint64_t count, chorus_dtype_t dtype,
                                             uint64_t chunk_bytes, double *us_p)
{
    chorus_status_t status;
    double t1, t2;
    size_t esize = chorus_dtype_size(dtype);
    uint64_t line_count;

    if (esize == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: unknown dtype %d", (int)dtype);
    if (!chorus__algo_supports(algo, coll)) return CHORUS_ERR_UNSUPPORTED;
    /* The size from which the line is used, in elements: a few chunks per rank's share. */
    line_count = (chunk_bytes > 0 ? chunk_bytes : 1) * TUNE_SIM_CHUNKS_PER_SHARE * (uint64_t)n /
                 esize;
    if (line_count < TUNE_SIM_MIN_BYTES / esize) line_count = TUNE_SIM_MIN_BYTES / esize;
    if (count <= 2 * line_count)
        return tune_simulate_at(fab, place, n, coll, algo, count, dtype, count, chunk_bytes, us_p);
    status = tune_simulate_at(fab, place, n, coll, algo, line_count, dtype, count, chunk_bytes,
                              &t1);
    if (status == CHORUS_SUCCESS)
        status = tune_simulate_at(fab, place, n, coll, algo, 2 * line_count, dtype, count,
                                  chunk_bytes, &t2);
    if (status != CHORUS_SUCCESS) return status;
    /* A slope below zero would be the simulation's noise at the two points: keep t2. */
    *us_p = t2 + (t2 > t1 ? t2 - t1 : 0.0) * ((double)count - 2.0 * (double)line_count) /
                     (double)line_count;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__tune_simulate(const chorus_tune_params_t *p, const chorus_tune_topo_t *topo,
                                      chorus_coll_t coll, chorus_algo_t algo, uint64_t count,
                                      chorus_dtype_t dtype, uint64_t chunk_bytes, unsigned how,
                                      double *us_p)
{
    chorus_fab_desc_t d;
    chorus_fabric_t *fab = NULL;
    chorus_status_t status;
    size_t esize = chorus_dtype_size(dtype);
    int *place;

    if (esize == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: unknown dtype %d", (int)dtype);
    if (topo->cores < 1 || topo->cores > TUNE_MAX_CORES || topo->nranks < 1)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: bad topology");
    place = malloc((size_t)topo->nranks * sizeof *place);
    if (place == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory");
    status = chorus__tune_fabric_desc(p, topo, &d, place);
    if (status == CHORUS_SUCCESS && algo == CHORUS_ALGO_ARENA) {
        /* Half-precision sums convert each element both ways. */
        double gamma_scale = dtype == CHORUS_FLOAT16 || dtype == CHORUS_BFLOAT16 ? 3.0 : 1.0;
        double bytes = (double)count * (double)esize;
        double mem = chorus__sim_cache_factor(&d, bytes, topo->nlocal);
        double us =
            topo->has_arena ? tune_arena(p, topo, coll, bytes, gamma_scale, mem, how) : -1.0;
        free(place);
        if (us < 0.0) return CHORUS_ERR_UNSUPPORTED;
        *us_p = us;
        return CHORUS_SUCCESS;
    }
    if (status == CHORUS_SUCCESS && !chorus__algo_supports(algo, coll))
        status = CHORUS_ERR_UNSUPPORTED;
    if (status == CHORUS_SUCCESS) status = chorus__fabric_build(&d, &fab);
    if (status == CHORUS_SUCCESS)
        status = chorus__tune_simulate_fabric(fab, place, topo->nranks, coll, algo, count, dtype,
                                              chunk_bytes, us_p);
    chorus__fabric_free(fab);
    free(place);
    return status;
}
