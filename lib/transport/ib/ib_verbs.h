/*
 * The verbs side of the ib transport (only where libibverbs is: CHORUS_HAVE_IBV): the
 * instance, its peers and the wire formats. ib_dev.c opens the device, ib_tp.c sets up
 * and tears down, ib_tp_data.c moves data. Nothing outside lib/transport/ib includes it.
 */
#ifndef CHORUS_TRANSPORT_IB_VERBS_H
#define CHORUS_TRANSPORT_IB_VERBS_H

#ifdef CHORUS_HAVE_IBV

#include "transport/ib/ib.h"
#include "util/auth.h"

#include <infiniband/verbs.h>

#define IB_NSLOTS 16u             /* receive slots per sender (a power of two) */
#define IB_SLOT_BYTES (32u << 10) /* bytes of a slot, header included */
#define IB_CREDIT_BATCH 4u        /* consumed slots returned at once when nothing piggy-backs */
#define IB_SQ_DEPTH (IB_NSLOTS + IB_NSLOTS / IB_CREDIT_BATCH + 8)
#define IB_RQ_DEPTH (IB_NSLOTS + IB_NSLOTS / IB_CREDIT_BATCH + 8)
#define IB_MAX_RANKS 57 /* QP numbers of every rank fit the address blob (see ib_blob_t) */
#define IB_PING_NS ((uint64_t)500 * 1000 * 1000) /* liveness write to a silent awaited peer */
#define IB_STASH 32

/* The header at the start of every slot a fragment is written to. */
#define IB_FRAG_MAGIC 0x47524643u /* "CFRG" */
#define IB_FRAG_FIRST 1u          /* first fragment of a message */
#define IB_FRAG_HELLO 2u          /* the first fragment of a connection: the secret's proof */
/* IB_FRAG_RTS, IB_FRAG_RTR and IB_FRAG_FIN (ib.h) mark the rendezvous's fragments. */
typedef struct {
    uint32_t magic;
    uint32_t seq;    /* full sequence number; the immediate carries its low 31 bits */
    uint32_t credit; /* piggy-backed cumulative credit for the other direction */
    uint32_t len;    /* payload bytes of this fragment */
    uint64_t total;  /* bytes of the whole message */
    uint32_t flags;
    uint32_t pad;
} ib_frag_hdr_t;

#define IB_FRAG_PAYLOAD (IB_SLOT_BYTES - sizeof(ib_frag_hdr_t))
#define IB_HELLO_MAC 32

/* The address blob. The receive region holds IB_NSLOTS slots for every rank (the slots
 * of sender s start at rx_addr + s * IB_NSLOTS * slot_bytes); the QP numbers of the QPs
 * this rank made for each rank are packed 3 bytes each, which bounds nranks. */
#define IB_BLOB_MAGIC 0x42494843u /* "CHIB" */
#define IB_BLOB_VERSION 1u
typedef struct {
    uint32_t magic;
    uint32_t version;
    int32_t rank;
    int32_t nranks;
    uint64_t comm_id;
    uint64_t rx_addr;
    uint32_t rx_rkey;
    uint32_t psn;
    uint16_t lid;
    uint8_t port;
    uint8_t roce;
    uint8_t mtu; /* enum ibv_mtu */
    uint8_t pad[3];
    uint32_t slot_bytes;
    uint8_t gid[16];
    uint8_t nonce[16];
    uint8_t qpn[IB_MAX_RANKS][3];
} ib_blob_t;

_Static_assert(sizeof(ib_blob_t) <= CHORUS_TP_BLOB_MAX, "ib address blob too large");

/* What the device scan chose. */
typedef struct {
    struct ibv_context *ctx;
    char dev[IB_HCA_NAME];
    int port;
    int roce;
    uint16_t lid;
    int gid_index;
    uint8_t gid[16];
    enum ibv_mtu mtu;
} ib_dev_choice_t;

/* Opens the first active port that CHORUS_IB_HCA allows (without a list of devices to use,
 * the first of params->nic_preference: ib_port_pick_pref) and picks its GID
 * (CHORUS_IB_GID_INDEX, else ib_gid_select). CHORUS_ERR_UNSUPPORTED when the host has no
 * usable RDMA device. */
chorus_status_t ib_dev_open(const chorus_tp_params_t *params, ib_dev_choice_t *choice_p);

#define IB_REQ_SEND 1
#define IB_REQ_RECV 2

/* Scratch words of a request (chorus_tp_req_t.priv). */
#define IB_PRIV_STARTED 0 /* a fragment (eager) or the RTS of it went / was taken */
#define IB_PRIV_PATH 1    /* ib_path_t (sends) */
#define IB_PRIV_DEVICE 2  /* the buffer is device memory */
#define IB_PRIV_REG 3     /* ib_zreg_t * of a rendezvous send whose FIN went */

/* A registration the rendezvous holds: from the cache, and dropped from it after the
 * message when the message made it (nothing tells us when user memory is freed, and a
 * registration of freed-then-reused pages would move stale bytes; what reg_mem registered
 * stays). */
typedef struct {
    chorus_reg_t *reg;
    int device;    /* from the device cache */
    int transient; /* made for this message: invalidated at the put */
} ib_zreg_t;

typedef struct {
    int rank; /* -1: not a peer */
    struct ibv_qp *qp;
    ib_credit_t cr;
    uint64_t remote_addr; /* our slots in its receive region */
    uint32_t rkey;
    uint32_t remote_qpn; /* its QP for us: named in its hello's proof */
    uint8_t nonce[16];   /* its nonce: our hello proves the secret against it */
    int verified;        /* its hello proved the secret */
    int hello_sent;
    int sq_posted;              /* work requests on the send queue not completed yet */
    uint8_t tx_busy[IB_NSLOTS]; /* staging slot still being written from */
    uint64_t rx_skip;           /* payload bytes left of a message its receive refused */
    /* Rendezvous (ib_tp_zc.c). At most one send and one receive per peer are in it. */
    ib_rndv_t z;
    ib_zreg_t ztx_reg, zrx_reg; /* the source of the send, the receive's buffer */
    int rtr_due;                /* rtr_out is still to be written */
    ib_rtr_t rtr_out;
    int fin_due; /* fin_out (a send that gave up) is still to be written */
    ib_fin_t fin_out;
    chorus_tp_req_t *zd_head, *zd_tail; /* sends whose FIN went, until it completes */
    uint64_t last_ping_ns;
    chorus_tp_req_t *sq_head, *sq_tail;
    chorus_tp_req_t *rq_head, *rq_tail;
    chorus_status_t failed;
    char why[192];
} ib_peer_t;

typedef struct {
    int rank;
    int nranks;
    uint8_t secret[CHORUS_SECRET_BYTES];
    chorus_tp_params_t params; /* params.secret points at secret above */
    ib_dev_choice_t dev;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq;
    int cq_size;
    uint8_t nonce[16];
    uint32_t psn;
    uint8_t *rx_buf; /* nranks * IB_NSLOTS slots the peers write to */
    struct ibv_mr *rx_mr;
    uint8_t *tx_buf; /* the same shape: what we write from */
    struct ibv_mr *tx_mr;
    size_t region_bytes;
    ib_peer_t *peers; /* nranks entries */
    int npeers;
    chorus_regcache_t *regcache;     /* host memory: reg_mem / dereg_mem and the rendezvous */
    chorus_regcache_t *regcache_dev; /* device memory (dma-buf); NULL without params.mem */
    uint64_t zcopy_min;              /* CHORUS_IB_ZCOPY_MIN; 0: host messages always eager */
    uint64_t max_msg;                /* the port's largest message: one RDMA WRITE at most */
    int dmabuf_ok;                   /* the device did not refuse dma-buf registration */
    /* The registration calls, behind pointers so that tests need no device. */
    struct ibv_mr *(*reg_host)(struct ibv_pd *pd, void *addr, size_t len, int access);
    struct ibv_mr *(*reg_dmabuf)(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                 int fd, int access);
    int (*dereg)(struct ibv_mr *mr);
    chorus_status_t reg_status; /* why the last registration failed, for messages */
    char reg_why[192];
    int connected;
    struct ibv_wc stash[IB_STASH]; /* completions wait() polled, for progress() */
    int nstash;
    chorus_status_t unreported;
} ib_tp_t;

/* wr_id of our work requests: peer rank, kind, slot. */
#define IB_WR_RECV 1u
#define IB_WR_DATA 2u
#define IB_WR_CREDIT 3u
#define IB_WR_ZDATA 4u /* an RDMA WRITE of rendezvous data */
#define IB_WR_FIN 5u   /* the FIN fragment of a rendezvous send */
static inline uint64_t ib_wr_id(int peer, unsigned kind, uint32_t slot)
{
    return (uint64_t)(uint32_t)peer << 32 | (uint64_t)kind << 16 | slot;
}

/* The proof of the secret a hello carries: HMAC-SHA256 over the communicator, both ranks,
 * the receiver's nonce (fresh per init, so an old hello cannot be replayed) and the
 * sender's QP number. */
chorus_status_t ib_hello_mac(const ib_tp_t *tp, int src, int dst, const uint8_t nonce[16],
                             uint32_t src_qpn, uint8_t out[IB_HELLO_MAC]);

/* Data path (ib_tp_data.c). */
chorus_status_t ib_peer_fail(ib_tp_t *tp, ib_peer_t *p, chorus_status_t status, const char *fmt,
                             ...) CHORUS_PRINTF(4, 5);
chorus_status_t ib_post_recv(ib_tp_t *tp, ib_peer_t *p);
chorus_status_t ib_send_hello(ib_tp_t *tp, ib_peer_t *p);
/* Polls and handles completions; the one place where fragments are taken in. */
chorus_status_t ib_poll(ib_tp_t *tp);
chorus_status_t ib_isend(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                         chorus_tp_req_t *req);
chorus_status_t ib_irecv(chorus_tp_t *tp, int peer, void *buf, size_t bytes, chorus_tp_req_t *req);
chorus_status_t ib_progress(chorus_tp_t *tp);
chorus_status_t ib_wait(chorus_tp_t *tp, uint64_t timeout_us);
/* Fails every pending request of every peer (fini, and setup errors). */
void ib_fail_all(ib_tp_t *tp, chorus_status_t status, const char *why);
/* Writes one fragment into the peer's next slot, when credit, staging slot and send queue
 * allow: 1 if it went (*seq_p: its sequence, may be NULL), 0 if not now. kind: IB_WR_DATA or
 * IB_WR_FIN. */
int ib_tx_fragment(ib_tp_t *tp, ib_peer_t *p, const void *payload, uint32_t len, uint64_t total,
                   uint32_t flags, unsigned kind, uint32_t *seq_p);

/* Rendezvous (ib_tp_zc.c). */
/* The regcache_ops_t calls: host memory (tp->reg_host), device memory (params.mem->dmabuf,
 * then tp->reg_dmabuf, the fd closed after; tp->reg_why says why one failed), and dereg. */
int ib_reg_host_cb(void *ctx, void *addr, size_t len, void **mr_p, uint32_t *lkey_p,
                   uint32_t *rkey_p);
int ib_reg_dev_cb(void *ctx, void *addr, size_t len, void **mr_p, uint32_t *lkey_p,
                  uint32_t *rkey_p);
void ib_dereg_cb(void *ctx, void *mr);
/* Nonzero if buf is device memory (params.mem says; never without it). */
int ib_is_device(const ib_tp_t *tp, const void *buf);
/* Sender: moves the rendezvous send at the head of p's queue on: 1 if it left the queue
 * (done, failed, or waiting for its FIN's completion), 0 if it must wait. */
int ib_zc_tx(ib_tp_t *tp, ib_peer_t *p, chorus_tp_req_t *req);
/* Writes a due RTR or FIN: 0 when one is still due (nothing else may go first). */
int ib_zc_tx_control(ib_tp_t *tp, ib_peer_t *p);
/* Receiver: the fragment h at the head of p's stream, classified as action; returns 1 if it
 * was consumed, 0 if it must wait (the peer may have failed: check p->failed). */
int ib_zc_rx(ib_tp_t *tp, ib_peer_t *p, const ib_frag_hdr_t *h, ib_rx_action_t action);
/* A completion of kind IB_WR_FIN or IB_WR_ZDATA. */
void ib_zc_completion(ib_tp_t *tp, ib_peer_t *p, unsigned kind);
/* Drops what a failed peer's rendezvous holds, failing its FIN-waiting sends. */
void ib_zc_fail(ib_tp_t *tp, ib_peer_t *p, chorus_status_t status);

#endif /* CHORUS_HAVE_IBV */
#endif
