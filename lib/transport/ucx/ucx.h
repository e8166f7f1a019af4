/*
 * Private to the UCX transport (built only with CHORUS_HAVE_UCX): the instance, the
 * per-peer state, the tag layout and the blob format. ucx_conn.c sets up and tears down;
 * ucx_data.c moves data; ucx_mem.c registers memory (the cache); ucx_rma.c is the
 * receiver-driven RMA rendezvous for large messages.
 *
 * Blob: u32 UCX_BLOB_MAGIC, 16-byte nonce, u32 address length, the UCP worker address.
 * Tags: control (handshake) tags have UCX_TAG_CTRL set and carry the sender's rank and a
 * piece of the communicator id; data tags are (sender rank << 40 | sequence) XOR the
 * per-direction key, so they look random and anything may collide with UCX_TAG_CTRL only
 * by a 2^-64 chance.
 *
 * The RMA rendezvous of message k from s to r uses three more tags under the same key
 * (s -> r), told apart by bit 63 and the rank field before the XOR, so they never collide
 * with each other or with data tags: RTS (1, s, k) from s, FIN (1, r, k) from s, and RTR
 * (0, s, k) from r under the key r -> s (r's own data to s is (0, r, j) under that key).
 * Every data receive of message k is posted with a mask that ignores bit 63, so it matches both the
 * data and the RTS of message k: a side that took the tag path while its peer took the RMA path
 * (lengths or CHORUS_UCX_RMA_MIN differ) sees the other's message and fails with a length mismatch
 * instead of hanging. The two are told apart by content, not by the tag UCX reports (UCX 1.13
 * leaves recv_info.sender_tag unset for some expected messages): an RTS is UCX_RTS_BYTES long and
 * starts with a 64-bit value derived from the key and the sequence number, which no data
 * can carry but by a 2^-64 chance.
 */
#ifndef CHORUS_TRANSPORT_UCX_H
#define CHORUS_TRANSPORT_UCX_H

#include "transport/transport.h"
#include "util/auth.h"
#include "util/regcache.h"
#include "util/status.h"

#include <pthread.h>
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
#define UCX_TAG_DATA_MASK (UCX_TAG_FULL & ~UCX_TAG_CTRL) /* data or RTS of one message */
/* Messages of at least this many bytes on the tag path carry a cached registration (below
 * it UCX copies through its bounce buffers and a registration buys nothing). */
#define UCX_MEMH_MIN ((size_t)64 << 10)
/* Unmapped ranges remembered between two uses of the cache (ucx_mem.c); more than this
 * and the whole cache is dropped. */
#define UCX_INVAL_SLOTS 64
/* How long fini lets endpoints flush before it forces them closed. */
#define UCX_CLOSE_NS ((uint64_t)1000 * 1000 * 1000)

enum { UCX_REQ_SEND = 1, UCX_REQ_RECV = 2, UCX_REQ_CTRL = 3 };

struct ucx_tp;
struct ucx_rma;

/* Lives in the memory UCX allocates with each request (ucp_params_t.request_size). */
typedef struct ucx_slot {
    struct ucx_slot *prev, *next; /* the peer's pending requests */
    chorus_tp_req_t *req;         /* the caller's request; NULL once detached (fini) */
    struct ucx_tp *tp;
    int peer;
    int kind;
    size_t bytes;
    uint64_t rts_magic;     /* a data receive: how an RTS for it would start (or 0) */
    struct chorus_reg *reg; /* a cached registration held until completion, or NULL */
    struct ucx_rma *rma;    /* a part of an RMA rendezvous, or NULL */
    int part;               /* which part (ucx_rma.c) */
} ucx_slot_t;

/* What a post completes: a caller's request, or a part of an RMA rendezvous. */
typedef struct {
    chorus_tp_req_t *req;
    struct ucx_rma *rma;
    int part;
    struct chorus_reg *reg; /* registration whose memh the operation uses (ref held) */
    ucp_tag_t mask;         /* UCX_TAG_FULL, or UCX_TAG_DATA_MASK for data receives */
    void **request_p;       /* if set: the UCX request while pending, NULL once ended */
    uint64_t rts_magic;     /* a data receive: how an RTS for it would start */
} ucx_target_t;

/* A registration of the cache: the memory handle and, once a peer needed it, its packed
 * remote key. */
typedef struct {
    ucp_mem_h memh;
    void *rkey_buf;
    size_t rkey_len;
} ucx_mr_t;

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
    int left;              /* leave closed every endpoint (ucx_leave) */
    chorus_status_t error; /* the first connection error, returned by progress() */
    ucx_peer_t *peers;     /* nranks entries */
    /* Memory registration (ucx_mem.c). */
    struct chorus_regcache *regcache;
    int mem_events; /* UCX's memory hooks tell us about unmapped memory (see ucx_mem.c) */
    pthread_mutex_t inval_lock;
    int inval_count, inval_all;
    struct {
        uintptr_t addr;
        size_t len;
    } inval[UCX_INVAL_SLOTS];
    /* The RMA rendezvous (ucx_rma.c). */
    size_t rma_min;                /* messages of at least this many bytes use it; 0: never */
    struct ucx_rma *rma_head;      /* every live rendezvous */
    struct ucx_rma *rma_ready;     /* rendezvous with a step to take in progress() */
    uint64_t rma_sends, rma_recvs; /* completed through RMA (tests read them) */
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

#define UCX_RTS_BYTES 16 /* an RTS: its magic, then the sender's length */

/* The first 8 bytes of the RTS of message seq under key. */
static inline uint64_t chorus__ucx_rts_magic(uint64_t key, uint64_t seq)
{
    return key ^ (seq + 1) * 0x9E3779B97F4A7C15ull ^ 0x4352545343525453ull;
}

/* The RMA tags of message seq from `from` to `to` under key (from -> to). */
static inline ucp_tag_t chorus__ucx_rts_tag(int from, uint64_t seq, uint64_t key)
{
    return chorus__ucx_data_tag(from, seq, key) ^ UCX_TAG_CTRL;
}

static inline ucp_tag_t chorus__ucx_fin_tag(int to, uint64_t seq, uint64_t key)
{
    return chorus__ucx_data_tag(to, seq, key) ^ UCX_TAG_CTRL;
}

/* The RTR that `to` sends back for message seq it receives, under key (to -> from). */
static inline ucp_tag_t chorus__ucx_rtr_tag(int from, uint64_t seq, uint64_t key)
{
    return chorus__ucx_data_tag(from, seq, key);
}

/* The data path (ucx_data.c). */

/* Posts a tagged send or receive of bytes with the given kind; the slot joins peer's
 * pending list and req (may be NULL for internal messages) completes through it. */
chorus_status_t chorus__ucx_post(ucx_tp_t *tp, int peer, int send, void *buf, size_t bytes,
                                 ucp_tag_t tag, int kind, chorus_tp_req_t *req);

/* The same for any target (a request or an RMA part), with a registration and a mask.
 * The target's registration reference passes to the operation (put at its completion). */
chorus_status_t chorus__ucx_post_to(ucx_tp_t *tp, int peer, int send, void *buf, size_t bytes,
                                    ucp_tag_t tag, int kind, const ucx_target_t *t);

/* Starts a slot that UCX returned for an operation (put, flush) of an RMA part. */
void chorus__ucx_track(ucx_tp_t *tp, int peer, void *request, const ucx_target_t *t);
/* Takes a tracked request off its peer's list (nothing if it is on none). */
void chorus__ucx_unlink(ucx_tp_t *tp, ucx_slot_t *s);

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

/* Memory registration (ucx_mem.c). */

/* Creates the cache and subscribes to UCX's unmap events; fini undoes it (the worker and
 * context still live). */
chorus_status_t chorus__ucx_mem_init(ucx_tp_t *tp);
void chorus__ucx_mem_fini(ucx_tp_t *tp);

/* A referenced registration covering the range, from the cache; chorus__ucx_mem_put drops
 * it (and, without memory events, deregisters it: nothing would tell a later free). */
chorus_status_t chorus__ucx_mem_get(ucx_tp_t *tp, const void *buf, size_t bytes,
                                    struct chorus_reg **reg_p);
void chorus__ucx_mem_put(ucx_tp_t *tp, struct chorus_reg *reg);

/* The memh of a registration. */
ucp_mem_h chorus__ucx_memh(const struct chorus_reg *reg);

/* The packed remote key of a registration (packed once, kept with it). */
chorus_status_t chorus__ucx_rkey(ucx_tp_t *tp, struct chorus_reg *reg, const void **rkey_p,
                                 size_t *len_p);

chorus_status_t chorus__ucx_reg_mem(chorus_tp_t *tp, void *buf, size_t bytes, void **handle_p);
chorus_status_t chorus__ucx_dereg_mem(chorus_tp_t *tp, void *handle);

/* The RMA rendezvous (ucx_rma.c). */

/* Posts a send / receive of at least tp->rma_min bytes through the rendezvous. */
chorus_status_t chorus__ucx_rma_isend(ucx_tp_t *tp, int peer, const void *buf, size_t bytes,
                                      chorus_tp_req_t *req);
chorus_status_t chorus__ucx_rma_irecv(ucx_tp_t *tp, int peer, void *buf, size_t bytes,
                                      chorus_tp_req_t *req);

/* A part of a rendezvous ended (UCX's callback or an immediate completion): records it,
 * never posts (the next step runs from chorus__ucx_rma_run). */
void chorus__ucx_rma_event(ucx_tp_t *tp, struct ucx_rma *rma, int part, ucs_status_t st,
                           size_t length);

/* Takes the pending steps of every ready rendezvous; from progress() and the posts. */
void chorus__ucx_rma_run(ucx_tp_t *tp);

/* Completes the callers' requests of peer's rendezvous with status (the peer failed). */
void chorus__ucx_rma_fail_peer(ucx_tp_t *tp, int peer, chorus_status_t status);

/* Frees every rendezvous left (fini, after the worker is gone). */
void chorus__ucx_rma_free_all(ucx_tp_t *tp);

#endif
