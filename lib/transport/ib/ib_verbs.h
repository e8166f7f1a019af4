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
    chorus_regcache_t *regcache; /* reg_mem / dereg_mem */
    int connected;
    struct ibv_wc stash[IB_STASH]; /* completions wait() polled, for progress() */
    int nstash;
    chorus_status_t unreported;
} ib_tp_t;

/* wr_id of our work requests: peer rank, kind, slot. */
#define IB_WR_RECV 1u
#define IB_WR_DATA 2u
#define IB_WR_CREDIT 3u
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

#endif /* CHORUS_HAVE_IBV */
#endif
