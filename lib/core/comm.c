/*
 * Communicators: creation (bootstrap, then one transport per class of peer), the small
 * public accessors, abort, destroy, and the failure rule shared by every entry point.
 */
#include "core/comm.h"
#include "core/async.h"

#include "core/flight.h"
#include "core/gpu_coll.h"
#include "core/hang.h"

#include "arena/arena.h"
#include "gpu/gpu.h"
#include "topo/topo.h"
#include "trace/trace.h"
#include "tune/tune.h"

#include "transport/transport.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/pci.h"
#include "util/status.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CORE_HOST_MAX 192

typedef enum {
    CORE_MODE_AUTO = 0,
    CORE_MODE_SHM = 1,
    CORE_MODE_TCP = 2,
    CORE_MODE_UCX = 3,
    CORE_MODE_IB = 4,
    CORE_MODE_COUNT
} core_mode_t;

/* What each rank tells the others about itself during init. Fixed size, no pointers. */
typedef struct {
    char host[CORE_HOST_MAX]; /* host identity: same string <=> same host */
    int32_t rank;
    int32_t nranks;
    int32_t pid;
    int32_t mode; /* core_mode_t: every rank must ask for the same */
    int32_t numa;     /* NUMA node of the CPU the rank runs on; -1 unknown */
    int32_t nic_numa; /* NUMA node of the NIC carrying its traffic; -1 unknown */
} core_peer_info_t;

/* A transport's address blob as exchanged: a status first, so that a rank whose transport
 * failed to start tells the others instead of leaving them to time out. */
typedef struct {
    int32_t status;
    int32_t pad;
    char blob[CHORUS_TP_BLOB_MAX];
} core_blob_rec_t;

static const char *const core_mode_names[CORE_MODE_COUNT] = {"auto", "shm", "tcp", "ucx", "ib"};

/* ---- failure rule ---- */

chorus_status_t chorus__comm_record_error(chorus_comm_t comm, chorus_status_t status)
{
    if (status == CHORUS_SUCCESS) return status;
    chorus__hang_on_error(comm, status, chorus_last_error());
    chorus__fr_end(comm->flight, status);
    pthread_mutex_lock(&comm->err_lock);
    /* err_lock orders this load against the other writers: relaxed is enough. */
    if (atomic_load_explicit(&comm->async_error, memory_order_relaxed) == 0) {
        snprintf(comm->first_error, sizeof comm->first_error, "%s", chorus_last_error());
        atomic_store_explicit(&comm->async_error, (int)status, memory_order_release);
    }
    pthread_mutex_unlock(&comm->err_lock);
    /* Local peers waiting in the arena for this rank learn at once of a mismatch found on
     * another path (a schedule, a device call), and report one too. (The arena marks its
     * own failures itself; other failures are left to their detection and deadlines.) */
    if (comm->arena != NULL && status == CHORUS_ERR_MISMATCH)
        (void)chorus__arena_fail(comm->arena, status);
    return status;
}

void chorus__comm_leave(chorus_comm_t comm, chorus_status_t status)
{
    /* Only a mismatch: the one failure the other ranks cannot see for themselves (a death
     * they detect, a deadline they have; a rank that left at its own deadline would turn
     * theirs, due the same instant, into a remote failure). */
    if (status != CHORUS_ERR_MISMATCH) return;
    for (int t = 0; t < comm->ntps; t++)
        chorus__tp_leave(comm->tps[t].ops, comm->tps[t].tp, status);
}

void chorus__comm_quiesce(chorus_comm_t comm)
{
    if (comm->gpu != NULL) chorus__gpu_drain(comm);
    /* A tagged comm's progress thread serves until the comm ends: nothing to drain. */
    if (comm->async != NULL && comm->tagged == NULL) chorus__async_drain(comm);
}

chorus_status_t chorus__comm_check_failed(chorus_comm_t comm, const char *opname)
{
    /* Device work and nonblocking operations in flight run on other threads with the comm's
     * internals: a host-side call waits for them, which also makes their errors this
     * call's. */
    chorus__comm_quiesce(comm);
    return chorus__comm_check_failed_async(comm, opname);
}

chorus_status_t chorus__comm_check_failed_async(chorus_comm_t comm, const char *opname)
{
    if (comm->tagged != NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: this communicator carries tagged sends and receives "
                             "only (chorus_tagged_isend/irecv were called on it): use another "
                             "one, e.g. from chorus_comm_split",
                             comm->rank, opname);
    return chorus__comm_check_errors(comm, opname);
}

chorus_status_t chorus__comm_check_errors(chorus_comm_t comm, const char *opname)
{
    char first[CHORUS_COMM_ERRMSG_MAX];
    int status = atomic_load_explicit(&comm->async_error, memory_order_acquire);

    if (status == 0) return CHORUS_SUCCESS;
    pthread_mutex_lock(&comm->err_lock);
    snprintf(first, sizeof first, "%s", comm->first_error);
    pthread_mutex_unlock(&comm->err_lock);
    return chorus__error((chorus_status_t)status,
                         "rank %d: %s: the communicator failed earlier (%s): %s", comm->rank,
                         opname, chorus_status_string((chorus_status_t)status), first);
}

/* Makes comm->seq_text spell seq: one digit's carry in place when seq follows the number it
 * spelled (nearly every call), all digits otherwise. */
static void comm_seq_text(chorus_comm_t comm, uint64_t seq)
{
    char *t = comm->seq_text;
    size_t end = sizeof comm->seq_text - 1, i = end;

    if (seq == comm->seq_text_of + 1 && comm->seq_text_of != 0) {
        while (i > comm->seq_text_at && t[i - 1] == '9') t[--i] = '0';
        if (i > comm->seq_text_at) t[i - 1]++;
        else t[--comm->seq_text_at] = '1';
    } else {
        t[end] = '\0';
        do {
            t[--i] = (char)('0' + seq % 10);
            seq /= 10;
        } while (seq > 0);
        comm->seq_text_at = (uint8_t)i;
    }
}

void chorus__comm_what(chorus_comm_t comm, const char *name, char *buf, size_t len)
{
    uint64_t seq = ++comm->seq, now = chorus__now_coarse_ns();
    size_t nlen = strlen(name), dlen;

    chorus__hang_begin(comm, name, seq, now);
    chorus__fr_begin(comm->flight, name, seq, now);
    comm_seq_text(comm, seq);
    comm->seq_text_of = seq;
    dlen = sizeof comm->seq_text - 1 - comm->seq_text_at;
    if (nlen + 2 + dlen + 1 > len) nlen = len > dlen + 3 ? len - dlen - 3 : 0;
    memcpy(buf, name, nlen);
    buf[nlen] = ' ';
    buf[nlen + 1] = '#';
    memcpy(buf + nlen + 2, comm->seq_text + comm->seq_text_at, dlen + 1);
}

chorus_status_t chorus__comm_exec(chorus_comm_t comm, const chorus_sched_t *sched,
                                  void *const bufs[CHORUS_NUM_BUFS], chorus_dtype_t dtype,
                                  chorus_op_t op, const char *what)
{
    chorus_status_t status;

    status = chorus__exec_start(&comm->exec, sched, bufs, dtype, op, comm->peers, comm->tps,
                                comm->ntps, what);
    if (status == CHORUS_SUCCESS)
        status = chorus__exec_wait(&comm->exec, &comm->wait,
                                   chorus__deadline_after(comm->timeout_s), &comm->abort_flag);
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "rank %d", comm->rank);
        chorus__hang_report_exec(comm, status, chorus_last_error(), &comm->exec);
        chorus__comm_record_error(comm, status);
        chorus__comm_leave(comm, status);
    } else {
        chorus__hang_end(comm);
        chorus__fr_end(comm->flight, CHORUS_SUCCESS);
    }
    return status;
}

/* ---- init ---- */

static void core_host_identity(char *out, size_t len)
{
    const char *hostid = chorus__config_str("CHORUS_HOSTID");
    char host[256] = "";
    char boot[64] = "";
    char netns[64] = "";
    FILE *f;
    ssize_t n;

    if (hostid != NULL) {
        snprintf(out, len, "%s", hostid);
        return;
    }
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    /* Two containers may share a host name; the boot id tells whether they share a kernel
     * (and so /dev/shm and process_vm_readv). */
    f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot, sizeof boot, f) == NULL) boot[0] = '\0';
        boot[strcspn(boot, "\n")] = '\0';
        fclose(f);
    }
    /* Processes in different network namespaces are treated as different hosts: that is
     * what containers and the emulated cluster's hosts are, and their traffic must take
     * the network under test, not shared memory. */
    n = readlink("/proc/self/ns/net", netns, sizeof netns - 1);
    netns[n > 0 ? n : 0] = '\0';
    snprintf(out, len, "%s/%s/%s", host, boot, netns);
}

static chorus_status_t core_parse_mode(core_mode_t *mode_p)
{
    const char *text = chorus__config_str("CHORUS_TRANSPORT");

    if (text == NULL || strcmp(text, "auto") == 0) *mode_p = CORE_MODE_AUTO;
    else if (strcmp(text, "shm") == 0) *mode_p = CORE_MODE_SHM;
    else if (strcmp(text, "tcp") == 0) *mode_p = CORE_MODE_TCP;
    else if (strcmp(text, "ucx") == 0) *mode_p = CORE_MODE_UCX;
    else if (strcmp(text, "ib") == 0) *mode_p = CORE_MODE_IB;
    else
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "chorus_comm_init: CHORUS_TRANSPORT=%s is not auto, shm, tcp, ucx "
                             "or ib", text);
    return CHORUS_SUCCESS;
}

/* The transport class of the pair (a, b); symmetric, so both ends agree. */
static chorus_peer_kind_t core_pair_kind(const core_peer_info_t *infos, int a, int b,
                                         core_mode_t mode)
{
    if (a == b) return CHORUS_PEER_SELF;
    if (mode == CORE_MODE_TCP) return CHORUS_PEER_TCP;
    /* ucx and ib take every pair, same host or not: they bring their own shared-memory
     * paths (UCX's sm transports), and that is what CHORUS_TRANSPORT asks to test. */
    if (mode == CORE_MODE_UCX) return CHORUS_PEER_UCX;
    if (mode == CORE_MODE_IB) return CHORUS_PEER_IB;
    if (strcmp(infos[a].host, infos[b].host) == 0) return CHORUS_PEER_SHM;
    return CHORUS_PEER_TCP;
}

/* Exchanges peer info and decides how to reach every peer. */
static chorus_status_t core_plan_peers(chorus_comm_t comm, core_peer_info_t *infos,
                                       core_mode_t mode)
{
    core_peer_info_t *me = &infos[comm->rank];
    chorus_status_t status;
    int p, q, numa, nic_numa;

    memset(me, 0, sizeof *me);
    core_host_identity(me->host, sizeof me->host);
    me->rank = comm->rank;
    me->nranks = comm->nranks;
    me->pid = (int32_t)getpid();
    me->mode = (int32_t)mode;
    chorus__topo_local_numa(&numa, &nic_numa);
    me->numa = numa;
    me->nic_numa = nic_numa;
    status = chorus__bootstrap_allgather(comm->bs, infos, sizeof *infos);
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "chorus_comm_init: rank %d: exchanging peer info",
                                     comm->rank);

    comm->nhosts = 0;
    comm->nlocal = 0;
    for (p = 0; p < comm->nranks; p++) {
        if (infos[p].rank != p || infos[p].nranks != comm->nranks)
            return chorus__error(CHORUS_ERR_MISMATCH,
                                 "chorus_comm_init: rank %d: peer %d says it is rank %d of %d",
                                 comm->rank, p, (int)infos[p].rank, (int)infos[p].nranks);
        if (infos[p].mode != (int32_t)mode)
            return chorus__error(CHORUS_ERR_MISMATCH,
                                 "chorus_comm_init: rank %d: CHORUS_TRANSPORT is %s here but %s "
                                 "on peer %d",
                                 comm->rank, core_mode_names[mode],
                                 infos[p].mode >= 0 && infos[p].mode < CORE_MODE_COUNT
                                     ? core_mode_names[infos[p].mode] : "?", p);
        infos[p].host[CORE_HOST_MAX - 1] = '\0';
        for (q = 0; q < p && strcmp(infos[q].host, infos[p].host) != 0; q++) {
        }
        comm->host_of[p] = q == p ? comm->nhosts++ : comm->host_of[q];
        if (strcmp(infos[p].host, me->host) == 0) {
            if (p == comm->rank) comm->local_index = comm->nlocal;
            comm->local_ranks[comm->nlocal++] = p;
        }
        comm->peer_kind[p] = (uint8_t)core_pair_kind(infos, comm->rank, p, mode);
        if (mode == CORE_MODE_SHM && strcmp(infos[p].host, me->host) != 0)
            return chorus__error(CHORUS_ERR_UNSUPPORTED,
                                 "chorus_comm_init: rank %d: CHORUS_TRANSPORT=shm but peer %d "
                                 "is on another host (%s, here %s)",
                                 comm->rank, p, infos[p].host, me->host);
    }
    return CHORUS_SUCCESS;
}

/* Spinning only pays when the peer we wait for is running on another core. With more
 * ranks on this host than cores it is usually not running at all, and a spinning rank
 * keeps it off the core it needs (measured here: 4 ranks on 2 cores, 8-byte allreduce
 * 27 us with a 20 us spin, 8 us without). So an oversubscribed host yields at once, unless
 * CHORUS_SPIN_US says otherwise. */
static void core_wait_policy(chorus_comm_t comm, const core_peer_info_t *infos)
{
    long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    int nlocal = 0;

    if (sched_getaffinity(0, sizeof set, &set) == 0) ncpus = CPU_COUNT(&set);
    for (int p = 0; p < comm->nranks; p++)
        nlocal += strcmp(infos[p].host, infos[comm->rank].host) == 0;
    comm->wait.spin_ns = (uint64_t)(chorus__config_seconds("CHORUS_SPIN_US", 20) * 1e3);
    comm->wait.yield_ns = (uint64_t)(chorus__config_seconds("CHORUS_YIELD_US", 2000) * 1e3);
    if (ncpus > 0 && nlocal > ncpus && !chorus__config_is_set("CHORUS_SPIN_US")) comm->wait.spin_ns = 0;
    CHORUS_INFO("core", "rank %d: %d ranks on this host, %ld cores: spin %llu us, yield %llu us",
                comm->rank, nlocal, ncpus, (unsigned long long)comm->wait.spin_ns / 1000,
                (unsigned long long)comm->wait.yield_ns / 1000);
}

/* Nonzero if any pair of ranks uses kind: then every rank takes part in its blob exchange. */
static int core_kind_used(const core_peer_info_t *infos, int nranks, core_mode_t mode,
                          chorus_peer_kind_t kind)
{
    for (int a = 0; a < nranks; a++)
        for (int b = a + 1; b < nranks; b++)
            if (core_pair_kind(infos, a, b, mode) == kind) return 1;
    return 0;
}

/* The NICs nearest to this rank's current GPU, for a transport that picks among several
 * (chorus_tp_params_t.nic_preference), malloc'ed; NULL when there is nothing to prefer:
 * CHORUS_IB_HCA set (the admin chose), no GPU or a plugin that cannot name its PCI address,
 * or a topology that does not place the GPU. Only a refinement of the NIC choice: a failure
 * is said at info level and communicator creation goes on. */
static char *core_nic_preference(chorus_comm_t comm)
{
    const char *hca = chorus__config_str("CHORUS_IB_HCA");
    const chorus_gpu_ops_t *gpu = comm->gpu_ops;
    char bus[64], host[CHORUS_TOPO_NAME_MAX] = "";
    const chorus_topo_host_t *h;
    chorus_topo_t *topo = NULL;
    char *pref = NULL;
    int dev = -1;

    if ((hca != NULL && hca[0] != '\0') || gpu == NULL || gpu->pci_bus_id == NULL) return NULL;
    if (gpu->get_device(&dev) != CHORUS_SUCCESS ||
        gpu->pci_bus_id(dev, bus, sizeof bus) != CHORUS_SUCCESS) {
        CHORUS_INFO("core", "rank %d: no PCI address for the current GPU (%s): no NIC "
                    "preference", comm->rank, gpu->last_error());
        return NULL;
    }
    if (chorus__topo_local(&topo) != CHORUS_SUCCESS) {
        CHORUS_INFO("core", "rank %d: no topology to pair GPU %s with a NIC (%s)", comm->rank,
                    bus, chorus_last_error());
        return NULL;
    }
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    h = chorus__topo_find_host(topo, host);
    if (h != NULL && h->nnics > 0)
        pref = malloc((size_t)h->nnics * CHORUS_PCI_BUSID_MAX);
    if (pref != NULL && chorus__topo_nic_preference(h, bus, pref, (size_t)h->nnics *
                                                    CHORUS_PCI_BUSID_MAX) <= 0) {
        free(pref);
        pref = NULL;
    }
    CHORUS_INFO("core", "rank %d: GPU %s: NIC preference %s", comm->rank, bus,
                pref != NULL ? pref : "none (the topology lists no such GPU or no NIC address)");
    chorus__topo_free(topo);
    return pref;
}

/* Starts the transport, exchanges address blobs and connects to the peers of kind. */
static chorus_status_t core_connect_kind(chorus_comm_t comm, const chorus_tp_ops_t *ops,
                                         chorus_peer_kind_t kind)
{
    const chorus_id_info_t *info = chorus__bootstrap_id_info(comm->bs);
    chorus_tp_params_t params;
    chorus_status_t status, local = CHORUS_SUCCESS;
    core_blob_rec_t *recs = NULL;
    uint8_t *mask = NULL, *blobs = NULL;
    chorus_tp_t *tp = NULL;
    char *pref;
    size_t len = CHORUS_TP_BLOB_MAX;
    int p, npeers = 0;

    recs = calloc((size_t)comm->nranks, sizeof *recs);
    mask = calloc((size_t)comm->nranks, 1);
    blobs = calloc((size_t)comm->nranks, CHORUS_TP_BLOB_MAX);
    if (recs == NULL || mask == NULL || blobs == NULL) {
        status = chorus__error(CHORUS_ERR_NO_MEMORY, "chorus_comm_init: rank %d: no memory",
                               comm->rank);
        goto err_free;
    }
    for (p = 0; p < comm->nranks; p++) {
        mask[p] = comm->peer_kind[p] == kind;
        npeers += mask[p];
    }
    if (npeers > 0) {
        memset(&params, 0, sizeof params);
        params.rank = comm->rank;
        params.nranks = comm->nranks;
        params.secret = info->secret;
        params.comm_id = info->comm_id;
        params.timeout_s = comm->timeout_s;
        params.abort_flag = &comm->abort_flag;
        params.listen_addr = chorus__bootstrap_local_addr(comm->bs);
        pref = kind == CHORUS_PEER_IB ? core_nic_preference(comm) : NULL;
        params.nic_preference = pref;
        /* Every transport gets the GPU's memory calls (static: they outlive the comm); one
         * that can move device memory itself says so in its instance_caps. */
        params.mem = chorus__gpu_tp_mem(comm);
        local = ops->init(&params, &tp);
        free(pref);
        if (local == CHORUS_SUCCESS) local = ops->get_addr(tp, recs[comm->rank].blob, &len);
        if (local != CHORUS_SUCCESS)
            chorus__error_context(local, "chorus_comm_init: rank %d: starting %s", comm->rank,
                                  ops->name);
        recs[comm->rank].status = local;
    }
    status = chorus__bootstrap_allgather(comm->bs, recs, sizeof *recs);
    if (local != CHORUS_SUCCESS) {
        status = local; /* keep our own message: it is the root cause */
        goto err_fini;
    }
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "chorus_comm_init: rank %d: exchanging %s addresses",
                              comm->rank, ops->name);
        goto err_fini;
    }
    for (p = 0; p < comm->nranks; p++) {
        if (recs[p].status != CHORUS_SUCCESS) {
            status = chorus__error(CHORUS_ERR_REMOTE,
                                   "chorus_comm_init: rank %d: peer %d failed to start its %s "
                                   "transport (%s)",
                                   comm->rank, p, ops->name,
                                   chorus_status_string((chorus_status_t)recs[p].status));
            goto err_fini;
        }
        memcpy(blobs + (size_t)p * CHORUS_TP_BLOB_MAX, recs[p].blob, CHORUS_TP_BLOB_MAX);
    }
    if (npeers > 0) {
        status = ops->connect_all(tp, mask, blobs, chorus__deadline_after(comm->timeout_s));
        if (status != CHORUS_SUCCESS) {
            chorus__error_context(status, "chorus_comm_init: rank %d: connecting %s", comm->rank,
                                  ops->name);
            goto err_fini;
        }
        comm->tps[comm->ntps].ops = ops;
        comm->tps[comm->ntps].tp = tp;
        comm->ntps++;
        for (p = 0; p < comm->nranks; p++) {
            if (mask[p]) comm->peers[p] = comm->tps[comm->ntps - 1];
        }
    }
    free(blobs);
    free(mask);
    free(recs);
    return CHORUS_SUCCESS;

err_fini:
    if (tp != NULL) ops->fini(tp);
err_free:
    free(blobs);
    free(mask);
    free(recs);
    return status;
}

static chorus_status_t core_arena_create(chorus_comm_t comm)
{
    chorus_arena_params_t params;

    memset(&params, 0, sizeof params);
    params.rank = comm->rank;
    params.nlocal = comm->nlocal;
    params.local_index = comm->local_index;
    params.comm_id = comm->comm_id;
    params.secret = chorus__bootstrap_id_info(comm->bs)->secret;
    params.timeout_s = comm->timeout_s;
    params.abort_flag = &comm->abort_flag;
    params.wait = comm->wait;
    params.bs = comm->bs;
    return chorus__arena_create(&params, &comm->arena);
}

/* The ring order of lib/topo from the exchanged infos, the same on every rank: hosts
 * contiguous, NUMA nodes grouped within a host, the ranks near the host's NIC at both ends
 * of its stretch. A host's NIC node is its first rank's (ranks of a host normally share
 * one interface; one answer per host keeps the order well defined if they do not). */
static chorus_status_t core_ring_order(chorus_comm_t comm, const core_peer_info_t *infos)
{
    int *numa_of = malloc((size_t)comm->nranks * sizeof *numa_of);
    int *nic_numa = malloc((size_t)comm->nhosts * sizeof *nic_numa);
    chorus_status_t status;
    int p;

    if (numa_of == NULL || nic_numa == NULL) {
        status = chorus__error(CHORUS_ERR_NO_MEMORY, "chorus_comm_init: rank %d: no memory",
                               comm->rank);
        goto out;
    }
    for (p = 0; p < comm->nhosts; p++) nic_numa[p] = -1;
    for (p = comm->nranks - 1; p >= 0; p--) {
        numa_of[p] = infos[p].numa;
        nic_numa[comm->host_of[p]] = infos[p].nic_numa;
    }
    status = chorus__topo_ring_order(comm->nranks, comm->host_of, comm->nhosts, numa_of,
                                     nic_numa, comm->ring_order);
    if (status != CHORUS_SUCCESS)
        chorus__error_context(status, "chorus_comm_init: rank %d: ring order", comm->rank);
out:
    free(nic_numa);
    free(numa_of);
    return status;
}

static chorus_status_t core_connect(chorus_comm_t comm)
{
    core_peer_info_t *infos;
    core_mode_t mode = CORE_MODE_AUTO;
    chorus_status_t status;

    status = core_parse_mode(&mode);
    if (status != CHORUS_SUCCESS) return status;
    infos = calloc((size_t)comm->nranks, sizeof *infos);
    if (infos == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "chorus_comm_init: rank %d: no memory",
                             comm->rank);
    CHORUS_CHECK_GOTO(core_plan_peers(comm, infos, mode), out);
    CHORUS_CHECK_GOTO(core_ring_order(comm, infos), out);
    core_wait_policy(comm, infos);
    /* Every rank connects shm before tcp, so that no rank waits in one transport's setup
     * for a peer that is busy in the other's. */
    if (core_kind_used(infos, comm->nranks, mode, CHORUS_PEER_SHM))
        CHORUS_CHECK_GOTO(core_connect_kind(comm, &chorus__tp_shm_ops, CHORUS_PEER_SHM), out);
    if (core_kind_used(infos, comm->nranks, mode, CHORUS_PEER_TCP))
        CHORUS_CHECK_GOTO(core_connect_kind(comm, &chorus__tp_tcp_ops, CHORUS_PEER_TCP), out);
    if (core_kind_used(infos, comm->nranks, mode, CHORUS_PEER_UCX))
        CHORUS_CHECK_GOTO(core_connect_kind(comm, &chorus__tp_ucx_ops, CHORUS_PEER_UCX), out);
    if (core_kind_used(infos, comm->nranks, mode, CHORUS_PEER_IB))
        CHORUS_CHECK_GOTO(core_connect_kind(comm, &chorus__tp_ib_ops, CHORUS_PEER_IB), out);
    /* The arena serves communicators whose ranks all share one host and reach each other
     * over shm; every rank knows that from the same table, so all or none take part. A
     * forced ucx or ib transport has no arena: every byte takes the transport under test. */
    if (comm->nranks > 1 && !core_kind_used(infos, comm->nranks, mode, CHORUS_PEER_TCP) &&
        mode != CORE_MODE_UCX && mode != CORE_MODE_IB)
        CHORUS_CHECK_GOTO(core_arena_create(comm), out);
out:
    free(infos);
    return status;
}

static void core_log_ready(chorus_comm_t comm)
{
    int nshm = 0, ntcp = 0, nucx = 0, nib = 0;

    if (!CHORUS_LOG_ENABLED(CHORUS_LOG_INFO)) return;
    for (int p = 0; p < comm->nranks; p++) {
        nshm += comm->peer_kind[p] == CHORUS_PEER_SHM;
        ntcp += comm->peer_kind[p] == CHORUS_PEER_TCP;
        nucx += comm->peer_kind[p] == CHORUS_PEER_UCX;
        nib += comm->peer_kind[p] == CHORUS_PEER_IB;
    }
    /* The ucx and ib counts appear only when used, so the usual line keeps its form. */
    char more[48] = "";
    if (nucx > 0 || nib > 0)
        snprintf(more, sizeof more, ", %d %s", nucx > 0 ? nucx : nib, nucx > 0 ? "ucx" : "ib");
    CHORUS_INFO("core", "comm %016llx ready: rank %d of %d on %d host(s); peers: %d shm, %d tcp%s",
                (unsigned long long)comm->comm_id, comm->rank, comm->nranks, comm->nhosts, nshm,
                ntcp, more);
}

/* Frees what a comm holds; works on a half-built one. */
static void core_comm_free(chorus_comm_t comm)
{
    chorus__tagged_close(comm); /* before the progress thread it runs on is stopped */
    chorus__async_destroy(comm);
    if (comm->gpu != NULL) chorus__gpu_comm_destroy(comm);
    chorus__hang_unregister(comm);
    chorus__p2p_forget(comm);
    if (comm->tune != NULL) chorus__tune_destroy(comm->tune);
    if (comm->arena != NULL) chorus__arena_destroy(comm->arena);
    chorus__mem_release(comm);
    for (int i = comm->ntps - 1; i >= 0; i--) comm->tps[i].ops->fini(comm->tps[i].tp);
    chorus__tagged_free(comm); /* after the transports, which may still hold its requests */
    if (comm->bs != NULL) chorus__bootstrap_destroy(comm->bs);
    chorus__trace_close(comm->trace);
    chorus__exec_fini(&comm->exec);
    chorus__coll_release(comm);
    pthread_mutex_destroy(&comm->err_lock);
    free(comm->peer_kind);
    free(comm->peers);
    free(comm->host_of);
    free(comm->local_ranks);
    free(comm->ring_order);
    free(comm->lost);
    free(comm->p2p_sigs);
    chorus__fr_close(comm->flight);
    free(comm);
}

chorus_status_t chorus_get_unique_id(chorus_unique_id_t *id_p)
{
    chorus_unique_id_t id;
    chorus_status_t status;

    chorus__error_clear();
    if (id_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_get_unique_id: id_p is NULL");
    status = chorus__bootstrap_new_id(NULL, &id);
    if (status != CHORUS_SUCCESS) return chorus__error_context(status, "chorus_get_unique_id");
    *id_p = id;
    return CHORUS_SUCCESS;
}

#define CORE_RING_GONE_GRACE_NS (100 * 1000 * 1000ull)

/* A schedule's wait that stalled: a local peer in the same call on the arena means the
 * calls differ (the engine's signatures cannot reach a rank that waits in the arena). */
static chorus_status_t core_stall_check(void *arg, const char *what)
{
    chorus_comm_t comm = arg;
    const chorus_exec_t *x = &comm->exec;
    int gone;

    /* A peer that revoked the comm (to shrink) or left it closes its bootstrap connections:
     * a transport that cannot say so itself (ucx: a forced close reaches a peer only when it
     * sends) still lets the waiting ranks fail instead of waiting out their deadline, and
     * their own revoke passes it on around the ring. Only after 100 ms: a neighbour that
     * left because another rank died is the news second-hand, and the transports name the
     * dead rank themselves within tens of milliseconds (shm, tcp). */
    if (chorus__bootstrap_ring_gone(comm->bs, &gone)) {
        uint64_t now = chorus__now_ns();
        if (comm->ring_gone_ns == 0) comm->ring_gone_ns = now;
        if (now - comm->ring_gone_ns >= CORE_RING_GONE_GRACE_NS)
            return chorus__error(CHORUS_ERR_REMOTE, "rank %d: %s: rank %d left the "
                                 "communicator (revoked, destroyed or dead: its bootstrap "
                                 "connection closed)", comm->rank, what, gone);
    }
    if (comm->arena == NULL) return CHORUS_SUCCESS;
    if (x->sig.coll != CHORUS_EXEC_SIG_P2P) return chorus__arena_cross_check(comm->arena, what);
    /* A send or receive waits on a peer that went on to the next collective: when that
     * collective needs this rank, the peer never posts the match. (One that does not, like
     * a broadcast from the peer itself, ends, and the peer comes back to the match.) */
    for (int k = 0; k < x->nsig_peers; k++) {
        int p = x->sig_peers[k], root;
        uint64_t seq;
        chorus_coll_t coll;
        char text[128];
        if (!chorus__exec_waits_for_sig(x, p) ||
            !chorus__arena_peer_call(comm->arena, p, &seq, &coll, &root, text, sizeof text) ||
            seq != x->coll_seq + 1 || !chorus__coll_needs_peer(coll, root, p, comm->rank))
            continue;
        return chorus__error(CHORUS_ERR_MISMATCH,
                             "rank %d: %s with rank %d, but rank %d called %s (its next "
                             "collective) instead of the matching send/recv",
                             comm->rank, what, p, p, text);
    }
    return CHORUS_SUCCESS;
}

void chorus__stop_init(chorus_stop_t *stop)
{
    pthread_mutex_init(&stop->lock, NULL);
    stop->flag = NULL;
    stop->requested = 0;
}

void chorus__stop_request(chorus_stop_t *stop)
{
    pthread_mutex_lock(&stop->lock);
    stop->requested = 1;
    if (stop->flag != NULL) atomic_store(stop->flag, 1);
    pthread_mutex_unlock(&stop->lock);
}

void chorus__stop_fini(chorus_stop_t *stop)
{
    pthread_mutex_destroy(&stop->lock);
}

/* The forming comm's abort flag is reachable through stop from now on (or until NULL). */
static void stop_attach(chorus_stop_t *stop, atomic_int *flag)
{
    if (stop == NULL) return;
    pthread_mutex_lock(&stop->lock);
    stop->flag = flag;
    if (flag != NULL && stop->requested) atomic_store(flag, 1);
    pthread_mutex_unlock(&stop->lock);
}

chorus_status_t chorus_comm_init(chorus_comm_t *comm_p, int nranks, const chorus_unique_id_t *id,
                                 int rank)
{
    return chorus__comm_init_stoppable(comm_p, nranks, id, rank, NULL);
}

chorus_status_t chorus__comm_init_stoppable(chorus_comm_t *comm_p, int nranks,
                                            const chorus_unique_id_t *id, int rank,
                                            chorus_stop_t *stop)
{
    chorus_comm_t comm;
    chorus_status_t status;
    int64_t repro;

    chorus__error_clear();
    if (comm_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_init: comm_p is NULL");
    if (id == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_init: id is NULL");
    if (nranks < 1 || nranks > CHORUS_BS_MAX_RANKS)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "chorus_comm_init: nranks %d is not in 1..%d", nranks,
                             CHORUS_BS_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "chorus_comm_init: rank %d out of range for %d ranks", rank, nranks);
    chorus__log_set_rank(rank);
    repro = chorus__config_int("CHORUS_REPRODUCIBLE", 0);
    if (repro < 0 || repro > 2)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: chorus_comm_init: CHORUS_REPRODUCIBLE=%lld is not 0, 1 "
                             "or 2", rank, (long long)repro);

    comm = calloc(1, sizeof *comm);
    if (comm == NULL) goto err_nomem;
    comm->repro = (int)repro;
    pthread_mutex_init(&comm->err_lock, NULL);
    atomic_init(&comm->abort_flag, 0);
    atomic_init(&comm->async_error, 0);
    stop_attach(stop, &comm->abort_flag);
    comm->rank = rank;
    comm->nranks = nranks;
    comm->nhosts = 1;
    comm->hang_slot = -1;
    comm->timeout_s = chorus__config_seconds("CHORUS_TIMEOUT", 300.0);
    chorus__select_init(comm);
    /* Loads the CUDA plugin once per process; NULL (no plugin or no device) keeps every
     * buffer host memory. */
    comm->gpu_ops = chorus__gpu();
    comm->peers = calloc((size_t)nranks, sizeof *comm->peers);
    comm->peer_kind = calloc((size_t)nranks, 1);
    comm->host_of = calloc((size_t)nranks, sizeof *comm->host_of);
    comm->local_ranks = calloc((size_t)nranks, sizeof *comm->local_ranks);
    comm->ring_order = calloc((size_t)nranks, sizeof *comm->ring_order);
    if (comm->peers == NULL || comm->peer_kind == NULL || comm->host_of == NULL ||
        comm->local_ranks == NULL || comm->ring_order == NULL)
        goto err_free;

    status = chorus__bootstrap_init(id, rank, nranks, comm->timeout_s, &comm->abort_flag,
                                    &comm->bs);
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "chorus_comm_init: rank %d of %d: bootstrap", rank, nranks);
        goto err_comm;
    }
    comm->comm_id = chorus__bootstrap_id_info(comm->bs)->comm_id;
    CHORUS_CHECK_GOTO(core_connect(comm), err_comm);
    comm->exec.stall_check = core_stall_check;
    comm->exec.stall_arg = comm;
    CHORUS_CHECK_GOTO(chorus__tune_create(comm, &comm->tune), err_comm);
    status = chorus__bootstrap_barrier(comm->bs);
    if (status != CHORUS_SUCCESS) {
        chorus__error_context(status, "chorus_comm_init: rank %d: final barrier", rank);
        goto err_comm;
    }
    /* Past the final barrier every rank has formed the comm: a stop that comes now (a
     * member died just after) is for the comm's next call to find, as any death is. */
    stop_attach(stop, NULL);
    atomic_store(&comm->abort_flag, 0);
    core_log_ready(comm);
    chorus__hang_register(comm);
    comm->flight = chorus__fr_open(comm->comm_id, rank, nranks);
    comm->trace = chorus__trace_open(comm->comm_id, rank, nranks);
    comm->exec.trace = comm->trace;
    *comm_p = comm;
    return CHORUS_SUCCESS;

err_free:
    stop_attach(stop, NULL);
    core_comm_free(comm);
err_nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "chorus_comm_init: rank %d: no memory", rank);
err_comm:
    stop_attach(stop, NULL);
    core_comm_free(comm);
    return status;
}

chorus_status_t chorus_comm_init_env(chorus_comm_t *comm_p)
{
    chorus_unique_id_t id;
    chorus_status_t status;
    int rank, nranks, is_root;

    chorus__error_clear();
    if (comm_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_init_env: comm_p is NULL");
    status = chorus__bootstrap_id_from_env(&id, &rank, &nranks, &is_root);
    if (status != CHORUS_SUCCESS) return chorus__error_context(status, "chorus_comm_init_env");
    if (is_root == CHORUS_BS_ROOT_ADDR || is_root == CHORUS_BS_ROOT_ANY) {
        status = chorus__bootstrap_root_start(&id, is_root == CHORUS_BS_ROOT_ANY);
        if (status != CHORUS_SUCCESS)
            return chorus__error_context(status, "chorus_comm_init_env: rank %d: root", rank);
    }
    status = chorus_comm_init(comm_p, nranks, &id, rank);
    if (status == CHORUS_ERR_TIMEOUT && is_root == CHORUS_BS_ROOT_RANK0 &&
        chorus__bootstrap_root_unreached())
        return chorus__error_context(status, "chorus_comm_init_env: rank %d of %d: rank 0, "
                                     "which serves the rendezvous, never came (or listens "
                                     "elsewhere)", rank, nranks);
    return status;
}

chorus_status_t chorus_comm_rank(chorus_comm_t comm, int *rank_p)
{
    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_rank: comm is NULL");
    if (rank_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_rank: rank_p is NULL");
    *rank_p = comm->rank;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_size(chorus_comm_t comm, int *size_p)
{
    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_size: comm is NULL");
    if (size_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_size: size_p is NULL");
    *size_p = comm->nranks;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_destroy(chorus_comm_t comm)
{
    chorus__error_clear();
    if (comm == NULL) return CHORUS_SUCCESS;
    core_comm_free(comm);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_set_timeout(chorus_comm_t comm, double seconds)
{
    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_set_timeout: comm is NULL");
    if (!(seconds >= 0.0) || seconds > 1e9)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: chorus_comm_set_timeout: %g seconds is not in 0..1e9",
                             comm->rank, seconds);
    /* The proxy and the progress thread read the timeout while they run. */
    chorus__comm_quiesce(comm);
    comm->timeout_s = seconds;
    if (comm->arena != NULL) chorus__arena_set_timeout(comm->arena, seconds);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_set_reproducible(chorus_comm_t comm, int level)
{
    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "chorus_comm_set_reproducible: comm is NULL");
    if (level < CHORUS_REPRO_NONE || level > CHORUS_REPRO_EXACT)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: chorus_comm_set_reproducible: level %d is not 0, 1 or 2",
                             comm->rank, level);
    /* Device calls queued earlier run with the level they were called under. */
    chorus__comm_quiesce(comm);
    comm->repro = level;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_get_reproducible(chorus_comm_t comm, int *level_p)
{
    chorus__error_clear();
    if (comm == NULL || level_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "chorus_comm_get_reproducible: %s is NULL",
                             comm == NULL ? "comm" : "level_p");
    *level_p = comm->repro;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_abort(chorus_comm_t comm)
{
    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_comm_abort: comm is NULL");
    atomic_store(&comm->abort_flag, 1);
    /* Not chorus__comm_record_error: that takes the calling thread's message, and this
     * thread may have nothing to do with the comm's calls. */
    pthread_mutex_lock(&comm->err_lock);
    if (atomic_load_explicit(&comm->async_error, memory_order_relaxed) == 0) {
        snprintf(comm->first_error, sizeof comm->first_error,
                 "rank %d: the communicator was aborted", comm->rank);
        atomic_store_explicit(&comm->async_error, (int)CHORUS_ERR_ABORTED, memory_order_release);
    }
    pthread_mutex_unlock(&comm->err_lock);
    CHORUS_INFO("core", "comm %016llx aborted", (unsigned long long)comm->comm_id);
    if (chorus__fr_dump(comm->flight, NULL, "abort") != CHORUS_SUCCESS) chorus__error_clear();
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_dump_flight_record(chorus_comm_t comm, const char *dir)
{
    chorus_status_t status;

    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "chorus_comm_dump_flight_record: comm is NULL");
    status = chorus__fr_dump(comm->flight, dir, "request");
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "chorus_comm_dump_flight_record");
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_get_async_error(chorus_comm_t comm, chorus_status_t *async_error_p)
{
    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "chorus_comm_get_async_error: comm is NULL");
    if (async_error_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "chorus_comm_get_async_error: async_error_p is NULL");
    *async_error_p =
        (chorus_status_t)atomic_load_explicit(&comm->async_error, memory_order_acquire);
    return CHORUS_SUCCESS;
}
