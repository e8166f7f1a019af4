/*
 * Collectives and point-to-point calls on CUDA device buffers, stream-ordered as NCCL's
 * (internal to lib/core; the semantics are in include/chorus.h).
 *
 * A call on device buffers validates on the caller's thread, records an event on the
 * caller's stream (the op starts after everything queued there before), makes the stream
 * wait for the comm's done counter to reach the op's ticket (later work sees the result),
 * queues the op and returns. One proxy thread per communicator, started at the first
 * device call, runs the queue in order: it waits for the op's start event, runs the op
 * (CUDA IPC through lib/gpu/ipc_arena.h, or pinned host staging around the host
 * collectives), and raises the done counter, also after an error, so that no stream hangs.
 *
 * Why a proxy thread and not host callbacks (cudaLaunchHostFunc): a host function may not
 * call CUDA, and a collective must (copies, kernels, events); and a thread gives each op
 * the comm's deadline, abort flag and waiting policy like any host wait.
 *
 * Host-side calls on a comm with device work in flight first drain the queue
 * (chorus__comm_check_failed does it), so the comm's internals are never used by two
 * threads at once and its operations keep one order.
 */
#ifndef CHORUS_CORE_GPU_COLL_H
#define CHORUS_CORE_GPU_COLL_H

#include "core/comm.h"

/* Tells device buffers from host ones: *device_p is the device ordinal of the buffers of
 * a call, or -1 for host memory. send_used / recv_used say whether this rank uses the
 * buffer (a NULL or unused buffer takes the other's kind). Both must be the same kind
 * (CHORUS_ERR_INVALID_ARGUMENT naming which is where); host buffers need a NULL stream.
 * With no GPU every buffer is host memory and nothing is asked. */
chorus_status_t chorus__gpu_classify(chorus_comm_t comm, const char *opname, const void *sendbuf,
                                     int send_used, const void *recvbuf, int recv_used,
                                     void *stream, int *device_p);

/* Queues a validated collective on device buffers (call->device >= 0) and returns. Counts
 * it in the comm's sequence (also with count 0) in call order. */
chorus_status_t chorus__gpu_coll_submit(chorus_comm_t comm, const chorus_coll_call_t *call);

/* One send or receive of a group (or alone), as p2p.c records it: bytes > 0 at addr. */
typedef struct {
    int is_send;
    int peer;
    uintptr_t addr;
    size_t bytes;
    int dtype; /* chorus_dtype_t as called: the call signature (bytes / its size = count) */
} chorus_p2p_op_t;

/* Queues n >= 1 validated sends and receives on device memory of one device, ordered on one
 * stream, as one op of the proxy: a device send or receive outside a group (n == 1), or
 * the device operations of a group at its chorus_group_end. The ops are copied. Every
 * send is one message on the wire, whatever its size, like a send on host memory, so
 * each kind of send meets each kind of receive. */
chorus_status_t chorus__gpu_p2p_submit(chorus_comm_t comm, const chorus_p2p_op_t *ops, size_t n,
                                       int device, void *stream);

/* Waits until the proxy has run everything queued (a no-op when none was ever started). */
void chorus__gpu_drain(chorus_comm_t comm);

/* Stops and joins the proxy (after draining, or at once after an abort) and frees the
 * comm's device state (destroy). */
void chorus__gpu_comm_destroy(chorus_comm_t comm);

/* ---- Internal to gpu_coll.c (queue, proxy) and gpu_staging.c (the staging path) ---- */

#include "gpu/gpu.h"

#include <pthread.h>

#define CHORUS_GPU_NSLOTS 3 /* staging buffer sets: D2H of k+1, host op of k, H2D of k-1 */

/* CHORUS_GPU_PATH, and the path an op runs on. AUTO is only a setting; HOST only a
 * result (the buffers are host memory: no device path at all). */
typedef enum {
    GPU_PATH_AUTO = 0,
    GPU_PATH_IPC,     /* collectives on one host through CUDA IPC (ipc_arena.c) */
    GPU_PATH_STAGING, /* through pinned host memory and the host path (gpu_staging.c) */
    GPU_PATH_DIRECT,  /* send/recv: the transport moves device memory itself (GPUDirect) */
    GPU_PATH_HOST,
} chorus_gpu_path_t;

/* "auto", "ipc", "staging", "direct", "host". */
const char *chorus__gpu_path_name(chorus_gpu_path_t path);

/* CHORUS_GPU_PATH's text (NULL: auto) as a setting; CHORUS_ERR_INVALID_ARGUMENT naming rank
 * for anything else. */
chorus_status_t chorus__gpu_path_parse(const char *text, int rank, chorus_gpu_path_t *path_p);

/* How this rank reaches one peer, as the path choice needs it. */
typedef struct {
    uint32_t caps;       /* chorus__tp_instance_caps of the peer's transport; 0 for self */
    const char *tp_name; /* for messages; NULL for self */
} chorus_gpu_peer_t;

/* The path of the sends and receives ops[0..n) of one op of the proxy (a group, or one
 * call), a pure function: host buffers (is_device 0) -> HOST whatever the setting; device
 * buffers -> DIRECT when the setting is auto or direct and every peer of the ops other than
 * this rank is reached through a transport instance with CHORUS_TP_CAP_DEVICE_MEM (sends
 * and receives to self are device copies then), else STAGING. A setting of direct where a
 * peer's transport cannot is CHORUS_ERR_UNSUPPORTED naming rank, the peer, its transport
 * and what (the op); ipc and staging stage (ipc is a collective path). peers has an entry
 * per rank; a peer out of range is CHORUS_ERR_INVALID_ARGUMENT. */
chorus_status_t chorus__gpu_p2p_path(chorus_gpu_path_t setting, int is_device, int rank,
                                     int nranks, const chorus_gpu_peer_t *peers,
                                     const chorus_p2p_op_t *ops, size_t n, const char *what,
                                     chorus_gpu_path_t *path_p);

/* The device-memory calls the core hands every transport (chorus_tp_params_t.mem) over the
 * loaded GPU plugin: static, so valid for the life of the process; NULL when comm has no
 * GPU (no plugin, CHORUS_CUDA_PLUGIN=none, or no device). */
const chorus_tp_mem_ops_t *chorus__gpu_tp_mem(chorus_comm_t comm);

typedef enum { GPU_OP_NOP = 0, GPU_OP_COLL, GPU_OP_P2P } chorus_gpu_op_kind_t;

typedef struct {
    chorus_gpu_op_kind_t kind;
    chorus_coll_call_t call; /* GPU_OP_COLL */
    chorus_p2p_op_t one;     /* GPU_OP_P2P: the op when nops == 1 */
    chorus_p2p_op_t *list;   /* GPU_OP_P2P: the ops when nops > 1 (owned; the proxy frees) */
    size_t nops;
    chorus_gpu_path_t path; /* GPU_OP_P2P: DIRECT or STAGING, chosen at submit */
    void *start;     /* event recorded on the caller's stream at the call; NULL for NOP */
    uint64_t ticket; /* the done counter's value once the op is over; 0 for NOP */
} chorus_gpu_op_t;

typedef struct {
    void *in, *out;       /* pinned host memory: the host op's send and receive buffers */
    void *ev_in, *ev_out; /* recorded after the copy into in / out of out */
} chorus_gpu_slot_t;


typedef struct chorus_gpu_comm {
    chorus_comm_t comm;
    const chorus_gpu_ops_t *ops;
    int device;               /* every device call of the comm uses this device */
    chorus_gpu_path_t setting; /* CHORUS_GPU_PATH as read */
    chorus_gpu_path_t path;   /* collectives: the setting; then the path chosen (ipc, staging) */
    int path_chosen;
    int logged_direct;        /* the first direct send/recv was logged */
    chorus_gpu_peer_t *peers; /* nranks: how each peer is reached, for the send/recv path */
    size_t chunk;             /* CHORUS_GPU_STAGING_CHUNK */
    struct gpu_counter *counter; /* the done counter, from the pool of gpu_coll.c */
    volatile uint64_t *done;  /* pinned: the last finished ticket; streams wait on it */
    uint64_t tickets;         /* the last ticket handed out (caller's thread) */

    /* The queue and the event pool, under lock. */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the proxy: an op was queued, or stop */
    pthread_cond_t idle; /* drain: the queue is empty */
    chorus_gpu_op_t *q;  /* ring of qcap ops; the one at qhead runs and leaves when done */
    size_t qcap, qhead, qlen;
    void **events;       /* start events the proxy is done with, for reuse */
    size_t nevents, events_cap;
    int stop;
    pthread_t thread;

    /* The proxy's own (no lock). */
    void *stream_in, *stream_out; /* device->host and host->device copies (ipc: stream_in) */
    chorus_gpu_slot_t slots[CHORUS_GPU_NSLOTS];
    size_t slot_bytes;
    /* Send/recv: one pinned buffer holding every message of a group, grown and kept. */
    void *p2p_host;
    size_t p2p_bytes;
    void *p2p_ev_in, *p2p_ev_out;
    chorus_p2p_op_t *p2p_ops; /* the group's ops on p2p_host */
    size_t p2p_ops_cap;
    struct chorus_ipc_arena *ipc;
} chorus_gpu_comm_t;

/* Makes g->p2p_ops hold n operations (the send/recv paths copy a group's list there). */
chorus_status_t chorus__gpu_p2p_ops_reserve(chorus_gpu_comm_t *g, size_t n, const char *what);

/* Waits on the proxy until ev has completed, with the comm's deadline, abort flag and
 * waiting policy; for names what the op is waiting for in messages. */
chorus_status_t chorus__gpu_wait_event(chorus_gpu_comm_t *g, void *ev, const char *what,
                                       const char *waiting_for);

/* gpu_staging.c: one collective or send/recv on device memory through pinned host buffers
 * and the host path, pipelined; returns when the result is in device memory. */
chorus_status_t chorus__gpu_staging_coll(chorus_gpu_comm_t *g, const chorus_coll_call_t *call,
                                         const char *what);
/* gpu_staging.c: sends and receives on device memory (one group, or one op) through one
 * pinned buffer that holds them all: every send copied to it, the host group run on it,
 * every receive copied back; returns when the receives are in device memory. */
chorus_status_t chorus__gpu_staging_p2p(chorus_gpu_comm_t *g, const chorus_p2p_op_t *ops,
                                        size_t n, const char *what);
void chorus__gpu_staging_free(chorus_gpu_comm_t *g);

/* gpu_direct.c: sends and receives on device memory (one group, or one op) handed to the
 * transports as they are, their path DIRECT (chorus__gpu_p2p_path); pairs to self are
 * copies on the device. Returns when every transfer and copy is complete. */
chorus_status_t chorus__gpu_direct_p2p(chorus_gpu_comm_t *g, const chorus_p2p_op_t *ops,
                                       size_t n, const char *what);

/* p2p.c: runs n sends and receives on host memory together as one group (named what in
 * messages), as chorus_group_end does. */
chorus_status_t chorus__p2p_run_host(chorus_comm_t comm, const chorus_p2p_op_t *ops, size_t n,
                                     const char *what);

/* p2p.c: runs n >= 1 validated host sends and receives together as one group, numbered in
 * the comm's sequence like chorus_group_end's ("send #4" alone, else "group #4"): the
 * batches of nonblocking sends and receives (async.c). */
chorus_status_t chorus__p2p_run_batch(chorus_comm_t comm, const chorus_p2p_op_t *ops, size_t n);

#endif
