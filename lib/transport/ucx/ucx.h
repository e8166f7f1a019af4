/*
 * Private to the UCX transport (built only with CHORUS_HAVE_UCX): the instance, the
 * per-peer state, the tag layout and the blob format. ucx_conn.c sets up and tears down;
 * ucx_data.c moves data.
 *
 * Blob: u32 UCX_BLOB_MAGIC, 16-byte nonce, u32 address length, the UCP worker address.
 * Tags: control (handshake) tags have UCX_TAG_CTRL set and carry the sender's rank and a
 * piece of the communicator id; data tags are (sender rank << 40 | sequence) XOR the
 * per-direction key, so they look random and anything may collide with UCX_TAG_CTRL only
 * by a 2^-64 chance.
 */
#ifndef CHORUS_TRANSPORT_UCX_H
#define CHORUS_TRANSPORT_UCX_H

#include "transport/transport.h"
#include "util/auth.h"
#include "util/status.h"

#include <stdatomic.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#define UCX_BLOB_MAGIC 0x43555831u /* "CUX1" */
#define UCX_NONCE_BYTES 16
#define UCX_MAC_BYTES 32
#define UCX_BLOB_HEAD (4 + UCX_NONCE_BYTES + 4)
#define UCX_MAX_RANKS (1 << 23) /* ranks fit in the 23 bits of a tag left above a sequence */
#define UCX_SEQ_BITS 40
#define UCX_TAG_CTRL ((uint64_t)1 << 63)
#define UCX_TAG_FULL ((ucp_tag_t)-1)
/* How long fini lets endpoints flush before it forces them closed. */
#define UCX_CLOSE_NS ((uint64_t)1000 * 1000 * 1000)

enum { UCX_REQ_SEND = 1, UCX_REQ_RECV = 2, UCX_REQ_CTRL = 3 };

struct ucx_tp;

/* Lives in the memory UCX allocates with each request (ucp_params_t.request_size). */
typedef struct ucx_slot {
    struct ucx_slot *prev, *next; /* the peer's pending requests */
    chorus_tp_req_t *req;         /* the caller's request; NULL once detached (fini) */
    struct ucx_tp *tp;
    int peer;
    int kind;
    size_t bytes;
} ucx_slot_t;

typedef struct {
    struct ucx_tp *tp;
    int rank;
    ucp_ep_h ep;                    /* NULL until connect_all, and after close */
    uint8_t nonce[UCX_NONCE_BYTES]; /* the peer's, from its blob */
    uint64_t key_out, key_in;       /* tag keys: to the peer, from the peer */
    uint64_t send_seq, recv_seq;    /* messages posted to / from the peer */
    int no_errhandling;             /* its endpoint has no peer-failure handling (sm only) */
    int verified;                   /* its proof of the secret was checked */
    ucs_status_t ep_status;         /* set by UCX's error callback (UCS_OK: healthy) */
    chorus_status_t error;          /* CHORUS_SUCCESS while healthy */
    char why[320];                  /* the failure, repeated to requests posted later */
    ucx_slot_t *head;               /* pending requests (doubly linked) */
    /* The handshake: our proof to the peer and the peer's to us, as they travel. */
    uint8_t mac_out[UCX_MAC_BYTES], mac_in[UCX_MAC_BYTES];
    chorus_tp_req_t ctrl_send, ctrl_recv;
    /* Then each side tells the other that it accepted the proof: connect_all returns only
     * once both sides have, so a rank that returns and at once dies or leaves cannot take
     * its proof with it while its peer still waits in connect_all. */
    uint8_t ack_out[8], ack_in[8];
    int ack_sent;
    chorus_tp_req_t ack_send, ack_recv;
} ucx_peer_t;

typedef struct ucx_tp {
    int rank;
    int nranks;
    uint8_t secret[CHORUS_SECRET_BYTES];
    uint64_t comm_id;
    const atomic_int *abort_flag;
    uint8_t nonce[UCX_NONCE_BYTES];
    uint8_t blob[CHORUS_TP_BLOB_MAX];
    size_t blob_len;
    ucp_context_h context;
    ucp_worker_h worker;
    int efd;       /* the worker's event fd, for wait() */
    int ep_errors; /* some ep_status was set and is not handled yet */
    int in_post;   /* a receive is being posted: its callback fills imm_* */
    int imm_done;
    ucs_status_t imm_status;
    size_t imm_length;
    unsigned refused;      /* handshake messages refused (bad proof or length) */
    int closing;           /* fini has begun: completions no longer touch callers' requests */
    chorus_status_t error; /* the first connection error, returned by progress() */
    ucx_peer_t *peers;     /* nranks entries */
} ucx_tp_t;

static inline void chorus__ucx_put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline void chorus__ucx_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static inline uint32_t chorus__ucx_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t chorus__ucx_get_be64(const uint8_t *p)
{
    return (uint64_t)chorus__ucx_get_be32(p) << 32 | chorus__ucx_get_be32(p + 4);
}

/* The tag of the seq-th message from `from`, under key. */
static inline ucp_tag_t chorus__ucx_data_tag(int from, uint64_t seq, uint64_t key)
{
    return ((uint64_t)(uint32_t)from << UCX_SEQ_BITS |
            (seq & (((uint64_t)1 << UCX_SEQ_BITS) - 1))) ^
           key;
}

/* The control tag of the handshake message (ack 0: the proof, 1: the acknowledgement that
 * the proof was accepted) from `from` in communicator comm_id. */
static inline ucp_tag_t chorus__ucx_ctrl_tag(int from, uint64_t comm_id, int ack)
{
    return UCX_TAG_CTRL | (uint64_t)(ack != 0) << 62 | (comm_id & 0x3fffff) << UCX_SEQ_BITS |
           (uint32_t)from;
}

/* The data path (ucx_data.c). */

/* Posts a tagged send or receive of bytes with the given kind; the slot joins peer's
 * pending list and req (may be NULL for internal messages) completes through it. */
chorus_status_t chorus__ucx_post(ucx_tp_t *tp, int peer, int send, void *buf, size_t bytes,
                                 ucp_tag_t tag, int kind, chorus_tp_req_t *req);

/* Fails every peer whose endpoint reported an error; returns the first error. */
chorus_status_t chorus__ucx_handle_errors(ucx_tp_t *tp);

/* Marks peer failed with status: cancels its pending requests (they complete with status)
 * and records why. Returns status. */
chorus_status_t chorus__ucx_fail_peer(ucx_tp_t *tp, int peer, chorus_status_t status,
                                      const char *fmt, ...) CHORUS_PRINTF(4, 5);

chorus_status_t chorus__ucx_isend(chorus_tp_t *tp, int peer, const void *buf, size_t bytes,
                                  chorus_tp_req_t *req);
chorus_status_t chorus__ucx_irecv(chorus_tp_t *tp, int peer, void *buf, size_t bytes,
                                  chorus_tp_req_t *req);
chorus_status_t chorus__ucx_progress(chorus_tp_t *tp);
chorus_status_t chorus__ucx_wait(chorus_tp_t *tp, uint64_t timeout_us);

#endif
