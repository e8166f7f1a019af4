/*
 * The simulation behind the tuner's predictions.
 *
 * Up to TUNE_JOINT_MAX ranks, the schedules of all ranks are built and run against each
 * other in a discrete-event simulation: the k-th SEND from a to b completes the k-th RECV
 * on b from a, as in the engine; a step starts when its dependencies are done, when its
 * rank's engine is free (one thread per rank). CPU work on a host with more ranks than
 * cores is stretched by their ratio: that is what makes 8 ranks on 2 cores slow, the copies
 * and reductions of all local ranks share the same two cores. A receive that has to wait
 * on an oversubscribed host also pays a context switch, because its rank yields the core.
 * The prediction is the time the last rank finishes, so every rank computes the same
 * number and therefore the same choice.
 *
 * Above TUNE_JOINT_MAX ranks only rank 0's schedule is run, with every message assumed to
 * leave its peer when the receive is posted (peers in lockstep): cheaper, and still the
 * same answer on every rank.
 */
#include "tune/tune.h"

#include "util/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TUNE_JOINT_MAX 32
#define TUNE_MAX_CORES 256
/* A large collective is in its pipelined regime, where time grows linearly with size, once
 * each rank's share of it spans a few chunks. Beyond twice that size the simulation runs at
 * that size and at twice it, and extrapolates along the line through the two: simulating
 * every chunk of a 128 MiB allreduce on 8 ranks took 0.6 s per decision (8 s on 64 ranks),
 * all of it spent by the first call of the size class. */
#define TUNE_SIM_CHUNKS_PER_SHARE 2
#define TUNE_SIM_MIN_BYTES ((uint64_t)1 << 20)

/* One SEND or RECV, for matching messages across ranks by sorting. */
typedef struct {
    int src, dst;
    uint32_t k; /* the k-th message from src to dst */
    uint8_t is_recv;
    int rank;
    uint32_t step;
} tune_msg_t;

typedef struct {
    double t;
    int rank;
    uint32_t step;
    int recv_done; /* 1: the data of a posted RECV has arrived */
} tune_ev_t;

typedef struct {
    const chorus_tune_params_t *p;
    const chorus_tune_topo_t *topo;
    int n;
    size_t esize;
    double gamma_scale; /* dtype's reduce cost relative to float32 */
    chorus_sched_t *s;  /* n schedules */
    uint32_t *base;     /* index of rank r's first step in the flat arrays */
    uint32_t *deps_left;
    double *ready;
    double *arrival; /* RECV: when the first bytes are there (-1: not sent yet) */
    double *last;    /* RECV: when the last bytes are there */
    double mem;      /* per-byte CPU cost factor for the working set (cache or DRAM) */
    uint32_t *match; /* flat index of the matching step on the peer */
    uint8_t *posted;
    double *engine_free; /* per rank */
    double *link_free;   /* per ordered pair, the wire */
    int *nlocal;         /* per host */
    tune_ev_t *heap;
    size_t nheap, capheap;
    uint32_t ndone; /* steps completed */
} tune_sim_t;

static int tune_host(const chorus_tune_topo_t *t, int r)
{
    return t->host_of != NULL ? t->host_of[r] : 0;
}

static int tune_kind(const chorus_tune_topo_t *t, int a, int b)
{
    if (a == b) return CHORUS_TUNE_SELF;
    return tune_host(t, a) == tune_host(t, b) ? t->local_kind : CHORUS_TUNE_TCP;
}

static int tune_heap_push(tune_sim_t *sim, tune_ev_t ev)
{
    size_t i;

    if (sim->nheap == sim->capheap) {
        size_t cap = sim->capheap ? 2 * sim->capheap : 1024;
        tune_ev_t *h = realloc(sim->heap, cap * sizeof *h);
        if (h == NULL) return -1;
        sim->heap = h;
        sim->capheap = cap;
    }
    for (i = sim->nheap++; i > 0 && sim->heap[(i - 1) / 2].t > ev.t; i = (i - 1) / 2)
        sim->heap[i] = sim->heap[(i - 1) / 2];
    sim->heap[i] = ev;
    return 0;
}

static tune_ev_t tune_heap_pop(tune_sim_t *sim)
{
    tune_ev_t top = sim->heap[0], last = sim->heap[--sim->nheap];
    size_t i = 0, c;

    while ((c = 2 * i + 1) < sim->nheap) {
        if (c + 1 < sim->nheap && sim->heap[c + 1].t < sim->heap[c].t) c++;
        if (sim->heap[c].t >= last.t) break;
        sim->heap[i] = sim->heap[c];
        i = c;
    }
    sim->heap[i] = last;
    return top;
}

static int tune_msg_cmp(const void *a, const void *b)
{
    const tune_msg_t *x = a, *y = b;

    if (x->src != y->src) return x->src < y->src ? -1 : 1;
    if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    return (int)x->is_recv - (int)y->is_recv;
}

/* Pairs every SEND with its RECV. CHORUS_ERR_INTERNAL if the schedules do not match
 * (a builder bug: the real run would hang). */
static chorus_status_t tune_match(tune_sim_t *sim, uint32_t total)
{
    int n = sim->n;
    uint32_t *cnt = calloc((size_t)n * (size_t)n * 2, sizeof *cnt), m = 0;
    tune_msg_t *msgs = malloc((total + 1) * sizeof *msgs);
    chorus_status_t status = CHORUS_SUCCESS;

    if (cnt == NULL || msgs == NULL) {
        status = chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory to match messages");
        goto out;
    }
    for (int r = 0; r < n; r++) {
        for (uint32_t i = 0; i < sim->s[r].nsteps; i++) {
            const chorus_step_t *st = &sim->s[r].steps[i];
            int is_recv = st->kind == CHORUS_STEP_RECV;
            if (st->kind != CHORUS_STEP_SEND && !is_recv) continue;
            int src = is_recv ? st->peer : r, dst = is_recv ? r : st->peer;
            tune_msg_t *msg = &msgs[m++];
            msg->src = src;
            msg->dst = dst;
            msg->k = cnt[((size_t)src * (size_t)n + (size_t)dst) * 2 + (size_t)is_recv]++;
            msg->is_recv = (uint8_t)is_recv;
            msg->rank = r;
            msg->step = i;
        }
    }
    qsort(msgs, m, sizeof *msgs, tune_msg_cmp);
    for (uint32_t i = 0; i < m; i += 2) {
        if (i + 1 >= m || msgs[i].is_recv || !msgs[i + 1].is_recv || msgs[i].src != msgs[i + 1].src ||
            msgs[i].dst != msgs[i + 1].dst || msgs[i].k != msgs[i + 1].k) {
            status = chorus__error(CHORUS_ERR_INTERNAL,
                                   "tune: rank %d: unmatched message to rank %d in the schedules",
                                   msgs[i].src, msgs[i].dst);
            goto out;
        }
        uint32_t a = sim->base[msgs[i].rank] + msgs[i].step;
        uint32_t b = sim->base[msgs[i + 1].rank] + msgs[i + 1].step;
        sim->match[a] = b;
        sim->match[b] = a;
    }
out:
    free(cnt);
    free(msgs);
    return status;
}

/* Runs cost microseconds of CPU work of rank r, ready at t; returns the finish time. On an
 * oversubscribed host the scheduler shares the cores among the local ranks, so each runs
 * at cores/nlocal of a core (a fluid model: it matches the throughput of busy ranks, and
 * the switch costs of the waits account for the idle ones). */
static double tune_cpu(tune_sim_t *sim, int r, double t, double cost)
{
    int h = tune_host(sim->topo, r), cores = sim->topo->cores;
    double start = t > sim->engine_free[r] ? t : sim->engine_free[r];

    if (sim->nlocal[h] > cores) cost *= (double)sim->nlocal[h] / cores;
    return sim->engine_free[r] = start + cost;
}

static int tune_complete(tune_sim_t *sim, int r, uint32_t i, double fin)
{
    const chorus_step_t *st = &sim->s[r].steps[i];

    sim->ndone++;
    for (uint32_t k = 0; k < st->nsucc; k++) {
        uint32_t j = sim->s[r].succ[st->succ_begin + k], g = sim->base[r] + j;
        if (sim->ready[g] < fin) sim->ready[g] = fin;
        if (--sim->deps_left[g] == 0) {
            tune_ev_t ev = {sim->ready[g], r, j, 0};
            if (tune_heap_push(sim, ev) != 0) return -1;
        }
    }
    return 0;
}

/* Handles one event; -1 on no memory. */
static int tune_step(tune_sim_t *sim, tune_ev_t ev, double *end_p)
{
    const chorus_tune_params_t *p = sim->p;
    const chorus_step_t *st = &sim->s[ev.rank].steps[ev.step];
    uint32_t g = sim->base[ev.rank] + ev.step;
    double bytes = (double)st->count * (double)sim->esize, fin, cost;
    int over = sim->nlocal[tune_host(sim->topo, ev.rank)] > sim->topo->cores;

    switch (st->kind) {
    case CHORUS_STEP_REDUCE:
    case CHORUS_STEP_COPY:
        cost = p->step_us + bytes * 1e-3 * sim->mem *
                   (st->kind == CHORUS_STEP_REDUCE ? p->reduce_ns * sim->gamma_scale : p->copy_ns);
        fin = tune_cpu(sim, ev.rank, ev.t, cost);
        break;
    case CHORUS_STEP_SEND: {
        int k = tune_kind(sim->topo, ev.rank, st->peer);
        size_t link = (size_t)ev.rank * (size_t)sim->n + (size_t)st->peer;
        uint32_t m = sim->match[g];
        double w;
        double start = ev.t > sim->engine_free[ev.rank] ? ev.t : sim->engine_free[ev.rank];
        cost = p->step_us + bytes * 1e-3 * p->send_ns[k] * sim->mem;
        fin = tune_cpu(sim, ev.rank, ev.t, cost);
        w = fin > sim->link_free[link] ? fin : sim->link_free[link];
        sim->link_free[link] = w + bytes * 1e-3 * p->wire_ns[k];
        /* The ring (or the socket buffer) pipelines a large message: the receiver copies
         * out while the sender copies in, so the first bytes are there once the sender
         * started, and the last once it is done. */
        sim->arrival[m] = start + p->step_us + p->alpha_us[k];
        sim->last[m] = sim->link_free[link] + p->alpha_us[k];
        if (sim->posted[m]) {
            tune_ev_t rev = {sim->arrival[m] > sim->ready[m] ? sim->arrival[m] : sim->ready[m],
                             st->peer, m - sim->base[st->peer], 1};
            if (tune_heap_push(sim, rev) != 0) return -1;
        }
        break;
    }
    default: /* RECV */
        if (!ev.recv_done) {
            sim->posted[g] = 1;
            if (sim->arrival[g] < 0.0) return 0; /* the SEND will wake it */
            ev.t = sim->arrival[g] > ev.t ? sim->arrival[g] : ev.t;
        }
        cost = p->step_us +
               bytes * 1e-3 * sim->mem * p->recv_ns[tune_kind(sim->topo, ev.rank, st->peer)];
        /* On a shared core a receiving rank has almost always yielded it (its peer needs the
         * core to send) and must be switched back in. Charged to every receive, not only to
         * those the simulation sees wait, so that the prediction does not jump with timing
         * details as the size grows. */
        if (over) cost += p->switch_us;
        fin = tune_cpu(sim, ev.rank, ev.t, cost);
        /* The engine is free to run other steps while the tail of the message comes in. */
        if (fin < sim->last[g] + p->step_us) fin = sim->last[g] + p->step_us;
        break;
    }
    if (fin > *end_p) *end_p = fin;
    return tune_complete(sim, ev.rank, ev.step, fin);
}

static void tune_sim_free(tune_sim_t *sim)
{
    if (sim->s != NULL)
        for (int r = 0; r < sim->n; r++) chorus__sched_fini(&sim->s[r]);
    free(sim->s);
    free(sim->base);
    free(sim->deps_left);
    free(sim->ready);
    free(sim->arrival);
    free(sim->last);
    free(sim->match);
    free(sim->posted);
    free(sim->engine_free);
    free(sim->link_free);
    free(sim->nlocal);
    free(sim->heap);
}

/* Builds every rank's schedule and the simulation's arrays. */
static chorus_status_t tune_sim_alloc(tune_sim_t *sim, chorus_algo_t algo,
                                      const chorus_coll_args_t *proto)
{
    const chorus_tune_topo_t *t = sim->topo;
    int n = sim->n, nh = t->nhosts > 0 ? t->nhosts : 1;
    uint32_t total = 0;
    chorus_status_t status;

    sim->s = calloc((size_t)n, sizeof *sim->s);
    sim->base = calloc((size_t)n + 1, sizeof *sim->base);
    sim->engine_free = calloc((size_t)n, sizeof *sim->engine_free);
    sim->link_free = calloc((size_t)n * (size_t)n, sizeof *sim->link_free);
    sim->nlocal = calloc((size_t)nh, sizeof *sim->nlocal);
    if (sim->s == NULL || sim->base == NULL || sim->engine_free == NULL ||
        sim->link_free == NULL || sim->nlocal == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory for the simulation");
    for (int r = 0; r < n; r++) chorus__sched_init(&sim->s[r], r, n);
    for (int r = 0; r < n; r++) {
        chorus_coll_args_t args = *proto;
        int h = tune_host(t, r);
        if (h < 0 || h >= nh)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: rank %d: host %d of %d",
                                 r, h, nh);
        sim->nlocal[h]++;
        args.rank = r;
        status = chorus__algo_build(algo, &args, &sim->s[r]);
        if (status != CHORUS_SUCCESS) return status;
        sim->base[r] = total;
        if (sim->s[r].nsteps > UINT32_MAX / 2 - total)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: schedules too long to simulate");
        total += sim->s[r].nsteps;
    }
    sim->base[n] = total;
    sim->deps_left = malloc(((size_t)total + 1) * sizeof *sim->deps_left);
    sim->ready = calloc((size_t)total + 1, sizeof *sim->ready);
    sim->arrival = malloc(((size_t)total + 1) * sizeof *sim->arrival);
    sim->last = calloc((size_t)total + 1, sizeof *sim->last);
    sim->match = calloc((size_t)total + 1, sizeof *sim->match);
    sim->posted = calloc((size_t)total + 1, 1);
    if (sim->deps_left == NULL || sim->ready == NULL || sim->arrival == NULL || sim->last == NULL ||
        sim->match == NULL || sim->posted == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory for the simulation");
    for (int r = 0; r < n; r++)
        for (uint32_t i = 0; i < sim->s[r].nsteps; i++) {
            sim->deps_left[sim->base[r] + i] = sim->s[r].steps[i].ndeps;
            sim->arrival[sim->base[r] + i] = -1.0;
        }
    return tune_match(sim, total);
}

/* The joint simulation of all ranks: the time the last one finishes. */
static chorus_status_t tune_sim_joint(tune_sim_t *sim, chorus_algo_t algo,
                                      const chorus_coll_args_t *proto, double *us_p)
{
    chorus_status_t status = tune_sim_alloc(sim, algo, proto);
    double end = 0.0;

    if (status != CHORUS_SUCCESS) return status;
    for (int r = 0; r < sim->n; r++)
        for (uint32_t i = 0; i < sim->s[r].nsteps; i++)
            if (sim->s[r].steps[i].ndeps == 0) {
                tune_ev_t ev = {0.0, r, i, 0};
                if (tune_heap_push(sim, ev) != 0) goto err_nomem;
            }
    while (sim->nheap > 0) {
        if (tune_step(sim, tune_heap_pop(sim), &end) != 0) goto err_nomem;
    }
    if (sim->ndone != sim->base[sim->n])
        return chorus__error(CHORUS_ERR_INTERNAL, "tune: %s: the simulated schedules stall "
                             "(%u of %u steps ran)", chorus__algo_name(algo), sim->ndone,
                             sim->base[sim->n]);
    *us_p = end;
    return CHORUS_SUCCESS;
err_nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory for the simulation");
}

/* Rank 0's schedule alone, peers in lockstep: a message leaves its peer when the receive
 * is posted. For large communicators, where the joint simulation costs too much. */
static chorus_status_t tune_sim_lockstep(const tune_sim_t *sim, chorus_algo_t algo,
                                         const chorus_coll_args_t *proto, double *us_p)
{
    const chorus_tune_params_t *p = sim->p;
    chorus_coll_args_t args = *proto;
    chorus_sched_t s;
    chorus_status_t status;
    double *ready, cpu = 0.0, end = 0.0;
    int over = sim->topo->nlocal > sim->topo->cores;
    double stretch = over ? (double)sim->topo->nlocal / sim->topo->cores : 1.0;

    args.rank = 0;
    chorus__sched_init(&s, 0, proto->nranks);
    status = chorus__algo_build(algo, &args, &s);
    if (status != CHORUS_SUCCESS) goto out;
    ready = calloc((size_t)s.nsteps + 1, sizeof *ready);
    if (ready == NULL) {
        status = chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory for the simulation");
        goto out;
    }
    for (uint32_t i = 0; i < s.nsteps; i++) {
        const chorus_step_t *st = &s.steps[i];
        double bytes = (double)st->count * (double)sim->esize, cost = p->step_us, t;
        int k = st->kind <= CHORUS_STEP_RECV ? tune_kind(sim->topo, 0, st->peer) : 0;
        bytes *= sim->mem;
        if (st->kind == CHORUS_STEP_REDUCE) cost += bytes * 1e-3 * p->reduce_ns * sim->gamma_scale;
        if (st->kind == CHORUS_STEP_COPY) cost += bytes * 1e-3 * p->copy_ns;
        if (st->kind == CHORUS_STEP_SEND) cost += bytes * 1e-3 * p->send_ns[k];
        t = ready[i] > cpu ? ready[i] : cpu;
        if (st->kind == CHORUS_STEP_RECV) {
            t += p->alpha_us[k] + bytes * 1e-3 * (p->send_ns[k] * stretch + p->wire_ns[k]);
            cost += bytes * 1e-3 * p->recv_ns[k] + (over ? p->switch_us : 0.0);
        }
        cpu = t + cost * stretch;
        if (cpu > end) end = cpu;
        for (uint32_t j = 0; j < st->nsucc; j++) {
            uint32_t q = s.succ[st->succ_begin + j];
            if (ready[q] < cpu) ready[q] = cpu;
        }
    }
    free(ready);
    *us_p = end;
out:
    chorus__sched_fini(&s);
    return status;
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
                         chorus_coll_t coll, double bytes, double gamma_scale, double mem)
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

/* Per-byte CPU work runs at cache speed while the host's working set (every local rank's
 * send and receive buffers) fits in the last-level cache, and dram_factor times slower
 * once it is four times larger; log-linear in between. */
static double tune_mem_factor(const chorus_tune_params_t *p, const chorus_tune_topo_t *t,
                              double bytes)
{
    double ws = 2.0 * bytes * (t->nlocal > 0 ? t->nlocal : 1), llc = p->llc_mb * 1048576.0;

    if (llc <= 0.0 || p->dram_factor <= 1.0 || ws <= llc) return 1.0;
    if (ws >= 4.0 * llc) return p->dram_factor;
    return 1.0 + (p->dram_factor - 1.0) * log2(ws / llc) / 2.0;
}

/* One simulation of count elements, with the memory factor of the real size. */
static chorus_status_t tune_simulate_at(const chorus_tune_params_t *p,
                                        const chorus_tune_topo_t *topo, chorus_coll_t coll,
                                        chorus_algo_t algo, uint64_t count, size_t esize,
                                        double gamma_scale, double mem, uint64_t chunk_bytes,
                                        double *us_p)
{
    tune_sim_t sim;
    chorus_coll_args_t args;
    chorus_status_t status;
    double us = 0.0;

    memset(&sim, 0, sizeof sim);
    sim.p = p;
    sim.topo = topo;
    sim.n = topo->nranks;
    sim.esize = esize;
    sim.gamma_scale = gamma_scale;
    sim.mem = mem;
    memset(&args, 0, sizeof args);
    args.coll = coll;
    args.nranks = topo->nranks;
    args.count = count;
    args.chunk_count = chunk_bytes / esize ? chunk_bytes / esize : 1;
    args.host_of = topo->host_of;
    args.nhosts = topo->nhosts > 0 ? topo->nhosts : 1;
    if (topo->nranks <= TUNE_JOINT_MAX)
        status = tune_sim_joint(&sim, algo, &args, &us);
    else
        status = tune_sim_lockstep(&sim, algo, &args, &us);
    tune_sim_free(&sim);
    if (status == CHORUS_SUCCESS) *us_p = us;
    return status;
}

chorus_status_t chorus__tune_simulate(const chorus_tune_params_t *p, const chorus_tune_topo_t *topo,
                                      chorus_coll_t coll, chorus_algo_t algo, uint64_t count,
                                      chorus_dtype_t dtype, uint64_t chunk_bytes, double *us_p)
{
    chorus_status_t status;
    double gamma_scale, mem, t1, t2;
    size_t esize = chorus_dtype_size(dtype);
    uint64_t line_count;

    if (esize == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: unknown dtype %d", (int)dtype);
    if (topo->cores < 1 || topo->cores > TUNE_MAX_CORES || topo->nranks < 1)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: bad topology");
    /* Half-precision sums convert each element both ways. */
    gamma_scale = dtype == CHORUS_FLOAT16 || dtype == CHORUS_BFLOAT16 ? 3.0 : 1.0;
    mem = tune_mem_factor(p, topo, (double)count * (double)esize);
    if (algo == CHORUS_ALGO_ARENA) {
        double us = topo->has_arena ? tune_arena(p, topo, coll, (double)count * (double)esize,
                                                 gamma_scale, mem) : -1.0;
        if (us < 0.0) return CHORUS_ERR_UNSUPPORTED;
        *us_p = us;
        return CHORUS_SUCCESS;
    }
    if (!chorus__algo_supports(algo, coll)) return CHORUS_ERR_UNSUPPORTED;
    /* The size from which the line is used, in elements: a few chunks per rank's share. */
    line_count = (chunk_bytes > 0 ? chunk_bytes : 1) * TUNE_SIM_CHUNKS_PER_SHARE *
                 (uint64_t)topo->nranks / esize;
    if (line_count < TUNE_SIM_MIN_BYTES / esize) line_count = TUNE_SIM_MIN_BYTES / esize;
    if (count <= 2 * line_count)
        return tune_simulate_at(p, topo, coll, algo, count, esize, gamma_scale, mem, chunk_bytes,
                                us_p);
    status = tune_simulate_at(p, topo, coll, algo, line_count, esize, gamma_scale, mem,
                              chunk_bytes, &t1);
    if (status == CHORUS_SUCCESS)
        status = tune_simulate_at(p, topo, coll, algo, 2 * line_count, esize, gamma_scale, mem,
                                  chunk_bytes, &t2);
    if (status != CHORUS_SUCCESS) return status;
    /* A slope below zero would be the simulation's noise at the two points: keep t2. */
    *us_p = t2 + (t2 > t1 ? t2 - t1 : 0.0) * ((double)count - 2.0 * (double)line_count) /
                     (double)line_count;
    return CHORUS_SUCCESS;
}
