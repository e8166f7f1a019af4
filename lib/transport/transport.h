/*
 * The transport interface. A transport moves bytes between this rank and its peers; it
 * knows nothing about collectives. One instance serves one communicator and a set of
 * peers (a mask chosen by the core: e.g. shm for same-host peers, tcp for the rest).
 *
 * Contract shared by every transport:
 * - Messages from rank A to rank B arrive in the order A posted them, and each is matched
 *   to the irecv that B posted for A in the same position. A message and its receive must
 *   have the same length; a different length completes the receive with
 *   CHORUS_ERR_MISMATCH (the calls of the two ranks differ). Zero-length messages are
 *   valid and are delivered (they synchronise).
 * - isend/irecv never block. A request is complete when req->done is nonzero; req->status
 *   then says how it ended. The caller owns the request memory and the buffer until then.
 * - A send may complete before the peer received (the transport buffered it) or only once
 *   the peer received: callers must not rely on either.
 * - progress() never blocks; wait() sleeps until there may be work, or timeout_us.
 * - After a connection fails, every pending and later request on it completes with an
 *   error naming the peer; progress() returns that error too.
 * - Every connection proves knowledge of the job secret before any data flows.
 */
#ifndef CHORUS_TRANSPORT_H
#define CHORUS_TRANSPORT_H

#include "chorus.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define CHORUS_TP_BLOB_MAX 256 /* largest address blob a transport may produce */

/* Capability bits. */
#define CHORUS_TP_CAP_HOST_MEM (1u << 0)   /* can send from / receive into host memory */
#define CHORUS_TP_CAP_DEVICE_MEM (1u << 1) /* can touch CUDA device memory directly */
#define CHORUS_TP_CAP_PUT (1u << 2)        /* one-sided put with notification */
#define CHORUS_TP_CAP_SAME_HOST (1u << 3)  /* only reaches peers on the same host */

/* A request. The first fields are the result; the rest are scratch space owned by the
 * transport while the request is pending (intrusive links, progress counters).
 * `done` is a plain int: progress is single-threaded per communicator, so a request is
 * completed inside isend/irecv/progress/close by the same thread that later reads `done`
 * (no transport completes requests from a helper thread; tcp's accept thread exists only
 * during connect_all and never touches requests). A transport that ever completes from
 * another thread must make this atomic_int and store it with release. */
typedef struct chorus_tp_req {
    int done;
    chorus_status_t status;
    /* Owned by the transport while pending. */
    struct chorus_tp_req *next;
    void *buf;
    size_t bytes;
    size_t offset;
    int peer;
    int kind;
    uint64_t priv[4];
} chorus_tp_req_t;

/* Fills a request being posted: pending, no error, links cleared. For transports. */
static inline void chorus__tp_req_reset(chorus_tp_req_t *req, int peer, const void *buf,
                                        size_t bytes, int kind)
{
    req->done = 0;
    req->status = CHORUS_SUCCESS;
    req->next = NULL;
    req->buf = (void *)buf;
    req->bytes = bytes;
    req->offset = 0;
    req->peer = peer;
    req->kind = kind;
}

/* Ends a request with status. Called by the thread that polls it (see chorus_tp_req_t). */
static inline void chorus__tp_req_complete(chorus_tp_req_t *req, chorus_status_t status)
{
    req->status = status;
    req->next = NULL;
    req->done = 1;
}

/* A FIFO of pending requests (one per peer and direction), linked through req->next. */
static inline void chorus__tp_queue_push(chorus_tp_req_t **head_p, chorus_tp_req_t **tail_p,
                                         chorus_tp_req_t *req)
{
    req->next = NULL;
    if (*tail_p != NULL) (*tail_p)->next = req;
    else *head_p = req;
    *tail_p = req;
}

/* Unlinks the head, which the caller still holds. */
static inline void chorus__tp_queue_pop(chorus_tp_req_t **head_p, chorus_tp_req_t **tail_p)
{
    *head_p = (*head_p)->next;
    if (*head_p == NULL) *tail_p = NULL;
}

/* Ends every request of the queue, in order, with status (a failed connection). */
static inline void chorus__tp_queue_fail(chorus_tp_req_t **head_p, chorus_tp_req_t **tail_p,
                                         chorus_status_t status)
{
    while (*head_p != NULL) {
        chorus_tp_req_t *req = *head_p;

        chorus__tp_queue_pop(head_p, tail_p);
        chorus__tp_req_complete(req, status);
    }
}

/* Device memory as the core's GPU plugin sees it, for a transport that can move it without
 * a copy through host memory (ib: GPUDirect RDMA, the NIC reading and writing GPU memory
 * through a dma-buf). Transports never load the plugin themselves (they sit above lib/gpu
 * in the layers): the core hands them these two calls, or NULL where there is no GPU. */
typedef struct {
    /* 1 if p is device memory, 0 if host memory (or unknown to the plugin). */
    int (*is_device)(const void *p);
    /* A dma-buf file descriptor covering [p, p + bytes) and the offset of p in it; the
     * caller closes the fd once it has registered the range. CHORUS_ERR_UNSUPPORTED where
     * the driver cannot export one (no dma-buf support: GPUDirect is then unavailable). */
    chorus_status_t (*dmabuf)(const void *p, size_t bytes, int *fd_p, uint64_t *offset_p);
} chorus_tp_mem_ops_t;

typedef struct {
    int rank;
    int nranks;
    const uint8_t *secret; /* CHORUS_SECRET_BYTES bytes: connections must prove it */
    uint64_t comm_id;      /* random per communicator; names shm segments, checked in hellos */
    double timeout_s;      /* connection setup deadline (CHORUS_TIMEOUT) */
    /* Nonzero: give up waits with CHORUS_ERR_ABORTED. Set by another thread at any time
     * (chorus_comm_abort); read it with atomic_load_explicit, relaxed. May be NULL. */
    const atomic_int *abort_flag;
    /* The address to listen on (from bootstrap, the interface that reaches the root). */
    const void *listen_addr; /* struct sockaddr_storage *, port ignored */
    /* The NICs to prefer, as PCI bus ids nearest first, comma-separated ("0000:1a:00.0,
     * 0000:9a:00.0" without the space); NULL or "" for no preference. The core computes it
     * from the topology (lib/topo) for the rank's current GPU; transports that choose among
     * several NICs honour it below any explicit setting (CHORUS_IB_HCA), others ignore it.
     * Valid during init only: a transport that wants it later copies it. */
    const char *nic_preference;
    /* Device memory calls (see chorus_tp_mem_ops_t); NULL: host memory only. Valid for the
     * transport's whole life. A transport that uses them to move device buffers directly
     * reports CHORUS_TP_CAP_DEVICE_MEM from its instance_caps op. */
    const chorus_tp_mem_ops_t *mem;
} chorus_tp_params_t;

typedef struct chorus_tp chorus_tp_t; /* each transport defines its own */

typedef struct chorus_tp_ops {
    size_t size;          /* sizeof(chorus_tp_ops_t) when the table was built: lets it grow */
    const char *name;     /* "tcp", "shm", "virtual" */
    uint32_t caps;        /* CHORUS_TP_CAP_* */

    /* Creates an instance and whatever it listens on. Does not block. */
    chorus_status_t (*init)(const chorus_tp_params_t *params, chorus_tp_t **tp_p);

    /* Writes the address blob peers need to reach this rank (at most CHORUS_TP_BLOB_MAX
     * bytes). The core exchanges blobs with an out-of-band allgather. */
    chorus_status_t (*get_addr)(chorus_tp_t *tp, void *blob, size_t *len_p);

    /* Connects to every peer p with peer_mask[p] != 0; blobs holds nranks blobs of
     * CHORUS_TP_BLOB_MAX bytes each, indexed by rank. Collective among the masked peers
     * (each rank calls it with masks that agree pairwise). Blocks until all are connected
     * and authenticated, or until deadline_ns (CHORUS_ERR_TIMEOUT) or abort. Strangers that
     * connect meanwhile are refused, logged, and do not disturb the setup. */
    chorus_status_t (*connect_all)(chorus_tp_t *tp, const uint8_t *peer_mask,
                                   const void *blobs, uint64_t deadline_ns);

    /* Posts a send of bytes from buf to peer / a receive from peer into buf. Never block.
     * An error return means the request was not posted. */
    chorus_status_t (*isend)(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                             chorus_tp_req_t *req);
    chorus_status_t (*irecv)(chorus_tp_t *tp, int peer, void *buf, size_t bytes,
                             chorus_tp_req_t *req);

    /* Moves data for pending requests and completes them. Never blocks. Returns the
     * first connection error seen (the affected requests are completed with it). */
    chorus_status_t (*progress)(chorus_tp_t *tp);

    /* Sleeps until there may be something for progress() to do, or timeout_us passes.
     * May return early. Callers spin and yield first: this is for long idle spells. */
    chorus_status_t (*wait)(chorus_tp_t *tp, uint64_t timeout_us);

    /* Memory registration; NULL where not needed. */
    chorus_status_t (*reg_mem)(chorus_tp_t *tp, void *buf, size_t bytes, void **handle_p);
    chorus_status_t (*dereg_mem)(chorus_tp_t *tp, void *handle);

    /* Closes every connection and frees the instance. Never blocks for long. */
    void (*fini)(chorus_tp_t *tp);

    /* What this instance can do, when it differs from caps (an ib instance moves device
     * buffers only when it was given params->mem and its device can register a dma-buf);
     * NULL: caps. Appended last: check size before reading it. */
    uint32_t (*instance_caps)(chorus_tp_t *tp);

    /* The communicator failed with status (a mismatch, a lost peer, a timeout): tell every
     * peer now, with the reason where the wire can carry it (a peer that learns of a
     * mismatch reports CHORUS_ERR_MISMATCH too), so that ranks waiting on this one fail at
     * once instead of at their deadline; pending requests end with status and the
     * connections take no more. NULL: peers learn when the instance closes. Appended last:
     * use chorus__tp_leave. */
    void (*leave)(chorus_tp_t *tp, chorus_status_t status);

    /* Like isend, but the message may stay queued until the next isend to the same peer or
     * the next progress(): a small message (a call signature) and the data posted after it
     * then leave in one write, and the peer wakes once for both. NULL: isend. Appended
     * last: use chorus__tp_isend_queued. */
    chorus_status_t (*isend_queued)(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                                    chorus_tp_req_t *req);

    /* When no receive from peer is posted and peer's next message is exactly len bytes and
     * has arrived whole: copies it into buf without taking it and returns 1; else 0. The
     * engine looks at what a peer outside the current schedule sent (its next call's
     * signature) when it has waited a while. NULL: never. Appended last: use
     * chorus__tp_peek. */
    int (*peek)(chorus_tp_t *tp, int peer, void *buf, size_t len);
} chorus_tp_ops_t;

/* The capabilities of instance tp of ops. */
static inline uint32_t chorus__tp_instance_caps(const chorus_tp_ops_t *ops, chorus_tp_t *tp)
{
    if (ops->size >= offsetof(chorus_tp_ops_t, instance_caps) + sizeof ops->instance_caps &&
        ops->instance_caps != NULL)
        return ops->instance_caps(tp);
    return ops->caps;
}

/* Calls ops->leave where the table has it. */
static inline void chorus__tp_leave(const chorus_tp_ops_t *ops, chorus_tp_t *tp,
                                    chorus_status_t status)
{
    if (ops->size >= offsetof(chorus_tp_ops_t, leave) + sizeof ops->leave && ops->leave != NULL)
        ops->leave(tp, status);
}

/* Calls ops->isend_queued where the table has it, else ops->isend. */
static inline chorus_status_t chorus__tp_isend_queued(const chorus_tp_ops_t *ops, chorus_tp_t *tp,
                                                      int peer, const void *buf, size_t bytes,
                                                      chorus_tp_req_t *req)
{
    if (ops->size >= offsetof(chorus_tp_ops_t, isend_queued) + sizeof ops->isend_queued &&
        ops->isend_queued != NULL)
        return ops->isend_queued(tp, peer, buf, bytes, req);
    return ops->isend(tp, peer, buf, bytes, req);
}

/* Calls ops->peek where the table has it, else 0. */
static inline int chorus__tp_peek(const chorus_tp_ops_t *ops, chorus_tp_t *tp, int peer,
                                  void *buf, size_t len)
{
    if (ops->size >= offsetof(chorus_tp_ops_t, peek) + sizeof ops->peek && ops->peek != NULL)
        return ops->peek(tp, peer, buf, len);
    return 0;
}

/* The transports built into this library. */
extern const chorus_tp_ops_t chorus__tp_tcp_ops;
extern const chorus_tp_ops_t chorus__tp_shm_ops;
extern const chorus_tp_ops_t chorus__tp_ucx_ops; /* a stub without CHORUS_HAVE_UCX */
extern const chorus_tp_ops_t chorus__tp_ib_ops;  /* lib/transport/ib (engineer I) */

#endif
