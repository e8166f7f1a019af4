/*
 * Private parts of the shared-memory transport (lib/transport/shm): the ring, the
 * segment layout and the address blob. Nothing outside lib/transport/shm and its unit
 * tests includes this file.
 *
 * Layout. Each rank owns one POSIX shm segment (mode 0600) holding its INBOUND rings, one
 * per peer that sends to it:
 *
 *   shm_seg_hdr_t           magic (published last), sizes, owner rank/pid, HMAC token,
 *                           doorbell and sleeping words for futex wake-ups, attach count
 *   uint32_t index[nranks]  ring number of each sender (SHM_NO_RING for non-peers)
 *   rings[nrings]           shm_ring_ctl_t (head, tail, producer's token) then the data
 *
 * A ring is a single-producer single-consumer byte stream: head and tail are 64-bit byte
 * counters that only grow, on separate cache lines; the data offset is counter & mask.
 * A message is a 16-byte header (magic, sequence number, length) at a 16-aligned counter,
 * then the payload, which may wrap and may be larger than the ring: it streams through it
 * in pieces while the consumer copies it straight into the posted receive buffer.
 */
#ifndef CHORUS_TRANSPORT_SHM_H
#define CHORUS_TRANSPORT_SHM_H

#include "transport/transport.h"
#include "util/status.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm rings need lock-free 64-bit atomics");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "shm doorbells need lock-free 32-bit atomics");

#define SHM_CACHE_LINE 64
#define SHM_MSG_MAGIC 0x4d534843u /* "CHSM" */
#define SHM_MSG_HDR 16u           /* bytes of a message header; also the message alignment */
/* Values of a segment's closed word: 0 while its owner is there. */
#define SHM_CLOSED 1u          /* it closed (fini), or left after a failure */
#define SHM_CLOSED_MISMATCH 2u /* it left because the ranks' calls differ */
#define SHM_RING_MIN ((uint64_t)4096)
#define SHM_RING_MAX ((uint64_t)1 << 30)
/* No buffer in a 48-bit address space can be this large: a longer header is corrupt. */
#define SHM_MSG_MAX ((uint64_t)1 << 48)

/* ---- Ring ---- */

/* The shared control block of one ring, at the start of its slot in the segment. */
typedef struct {
    _Alignas(SHM_CACHE_LINE) _Atomic uint64_t head; /* bytes written; producer stores */
    _Alignas(SHM_CACHE_LINE) _Atomic uint64_t tail; /* bytes consumed; consumer stores */
    /* Set once by the producer when it attached: its rank and proof of the secret. */
    _Alignas(SHM_CACHE_LINE) _Atomic uint32_t attached;
    int32_t producer_rank;
    uint8_t token[32];
    uint8_t pad_[SHM_CACHE_LINE - 40];
} shm_ring_ctl_t;

_Static_assert(sizeof(shm_ring_ctl_t) == 3 * SHM_CACHE_LINE, "ring control block layout");

/* One side's view of a ring. Each side keeps its own counter and a cached copy of the
 * other side's, so that the shared cache lines are read only when the cache says the
 * ring looks full (producer) or empty (consumer). */
typedef struct {
    shm_ring_ctl_t *ctl;
    uint8_t *data;
    uint64_t size; /* power of two */
    uint64_t pos;  /* producer: head; consumer: tail (this side's counter) */
    uint64_t peer; /* cached counter of the other side */
    uint32_t seq;  /* sequence number of the next message */
    uint64_t discard; /* consumer: payload bytes left of a rejected message */
} shm_ring_t;

/* Results of the ring operations, as bit flags. */
#define SHM_RING_MOVED 1u    /* a counter moved: the other side may want a wake-up */
#define SHM_RING_DONE 2u     /* the message is complete */
#define SHM_RING_MISMATCH 4u /* rx: the message has another length (*len_p); it is skipped */
#define SHM_RING_CORRUPT 8u  /* the stream is broken (bad header or counters) */

/* Binds a view to a ring of size data bytes (a power of two >= SHM_RING_MIN), for the
 * producer or the consumer side; the counters start from what is in ctl. */
void shm_ring_view(shm_ring_t *r, shm_ring_ctl_t *ctl, void *data, uint64_t size, int producer);

/* Producer: writes what fits of the message (buf, bytes). *cursor_p counts the bytes of
 * this message already in the ring, header included (start at 0). Never blocks. */
unsigned shm_ring_tx(shm_ring_t *r, const void *buf, uint64_t bytes, uint64_t *cursor_p);

/* Consumer: reads what is there of the next message into (buf, bytes), *cursor_p as for
 * tx. A message of another length completes with SHM_RING_MISMATCH | SHM_RING_DONE and
 * its length in *len_p; its payload is then skipped by later calls. Never reads or
 * writes outside the ring or the buffer, whatever the producer wrote. */
unsigned shm_ring_rx(shm_ring_t *r, void *buf, uint64_t bytes, uint64_t *cursor_p,
                     uint64_t *len_p);

/* Consumer: skips what has arrived of a rejected message (also done by shm_ring_rx). */
unsigned shm_ring_rx_drain(shm_ring_t *r);

/* Consumer, between messages: when the next message is exactly len bytes and has arrived
 * whole, copies its payload into buf without taking it and returns 1; else 0. */
int shm_ring_peek(shm_ring_t *r, void *buf, uint64_t len);

/* Nonzero if the consumer would find new bytes / the producer would find free space. */
int shm_ring_rx_ready(shm_ring_t *r);
int shm_ring_tx_ready(shm_ring_t *r);

/* ---- Segment ---- */

#define SHM_SEG_MAGIC 0x43484f5255534d31ull /* "CHORUSM1" */
#define SHM_SEG_VERSION 1u
#define SHM_NO_RING UINT32_MAX
#define SHM_NAME_MAX 64

typedef struct {
    _Alignas(SHM_CACHE_LINE) _Atomic uint64_t magic; /* stored last, with release */
    uint32_t version;
    uint32_t hdr_size;    /* sizeof(shm_seg_hdr_t) */
    uint64_t total_size;  /* bytes of the whole segment */
    uint64_t comm_id;
    int32_t owner_rank;
    int32_t nranks;
    uint32_t owner_pid;
    uint32_t nrings;
    uint64_t ring_size;   /* data bytes of each ring */
    uint64_t rings_off;   /* offset of ring 0; ring i is at rings_off + i * ring_stride */
    uint64_t ring_stride;
    uint64_t pidns;       /* inode of the owner's pid namespace (0: unknown) */
    uint8_t nonce[16];
    uint8_t token[32];    /* HMAC proving the owner knows the secret */
    /* Wake-ups: peers that moved a ring of this owner bump the doorbell and FUTEX_WAKE it
     * only when the owner says it is sleeping. */
    _Alignas(SHM_CACHE_LINE) _Atomic uint32_t doorbell;
    _Atomic uint32_t sleeping;
    _Atomic uint32_t closed;   /* the owner called fini or left: SHM_CLOSED_* */
    _Alignas(SHM_CACHE_LINE) _Atomic uint32_t attached; /* producers that attached */
} shm_seg_hdr_t;

/* The address blob: enough to find, open and check a peer's segment. */
typedef struct {
    uint32_t magic;
    uint32_t version;
    int32_t rank;
    uint32_t pid;
    uint64_t comm_id;
    uint64_t pidns;
    char name[SHM_NAME_MAX]; /* NUL-terminated "/chorus-..." */
} shm_blob_t;

#define SHM_BLOB_MAGIC 0x53485042u /* "SHPB" */

/* A mapped segment (ours or a peer's). */
typedef struct {
    char name[SHM_NAME_MAX];
    int fd;          /* -1 once closed */
    int linked;      /* we created it and it is not yet unlinked */
    void *base;
    size_t size;
    shm_seg_hdr_t *hdr;
    /* Copies of the checked layout: the shared header could change after the check. */
    int nranks;
    uint32_t nrings;
    uint64_t ring_size;
    uint64_t rings_off;
    uint64_t ring_stride;
} shm_seg_t;

/* Creates our (empty) segment with a fresh random name; shm_seg_layout sizes and fills it.
 * Functions that fail record an error naming rank and peer. */
chorus_status_t shm_seg_create(shm_seg_t *seg, uint64_t comm_id, int rank);
chorus_status_t shm_seg_layout(shm_seg_t *seg, const chorus_tp_params_t *params,
                               const uint8_t *peer_mask, uint64_t ring_size);
/* Opens a peer's segment from its blob. *ready_p = 0 while the peer has not laid it out
 * yet (try again later); on success the segment is mapped and fully checked. */
chorus_status_t shm_seg_attach(shm_seg_t *seg, const chorus_tp_params_t *params, int peer,
                               const shm_blob_t *blob, int *ready_p);
/* Ring `index` (< nrings) of a checked segment; the ring number of a sender, SHM_NO_RING
 * when it has none. */
shm_ring_ctl_t *shm_seg_ring(const shm_seg_t *seg, uint32_t index);
uint32_t shm_seg_ring_index(const shm_seg_t *seg, int sender);
void shm_seg_unlink(shm_seg_t *seg);
void shm_seg_close(shm_seg_t *seg);

/* Tokens: HMAC-SHA256 of (label, comm_id, ranks, nonce) under the job secret. */
chorus_status_t shm_token(const uint8_t *secret, const char *label, uint64_t comm_id, int a,
                          int b, const uint8_t nonce[16], uint8_t out[32]);
int shm_token_equal(const uint8_t a[32], const uint8_t b[32]);

/* The blob for our segment, and its checks. */
void shm_blob_fill(shm_blob_t *blob, const shm_seg_t *seg, uint64_t comm_id, int rank);
chorus_status_t shm_blob_check(const shm_blob_t *blob, uint64_t comm_id, int rank, int peer);

/* ---- Transport instance (shm_conn.c: setup and teardown; shm_tp.c: data path) ---- */

#define SHM_REQ_SEND 1
#define SHM_REQ_RECV 2
/* How often a peer with pending requests is checked for death or close. */
#define SHM_CHECK_NS ((uint64_t)100 * 1000 * 1000)

typedef struct {
    int rank;
    int pid_check;     /* its pid is meaningful here (same pid namespace) */
    int attached;      /* we mapped its segment and attached to our ring in it */
    int verified;      /* it attached to its ring in our segment and proved the secret */
    shm_blob_t blob;
    shm_seg_t seg;     /* its segment: our outbound ring and its doorbell */
    shm_ring_t tx;     /* our ring in its segment */
    shm_ring_t rx;     /* its ring in our segment */
    chorus_tp_req_t *sq_head, *sq_tail;
    chorus_tp_req_t *rq_head, *rq_tail;
    chorus_status_t failed;
    char why[192];     /* the error every request on a failed peer completes with */
} shm_peer_t;

typedef struct {
    int rank;
    int nranks;
    uint8_t secret[32];
    chorus_tp_params_t params; /* params.secret points at secret above */
    uint64_t ring_size;
    shm_seg_t own;
    shm_peer_t **by_rank; /* nranks entries, NULL where not a peer */
    shm_peer_t *peers;    /* npeers entries */
    int npeers;
    int connected;
    uint64_t last_check_ns;
    /* A peer failure not yet returned by progress(): wait() may be the one that sees it. */
    chorus_status_t unreported;
} shm_tp_t;

/* Data path helpers shared by setup and teardown. */
void shm_notify(shm_peer_t *p);
chorus_status_t shm_peer_fail(shm_tp_t *tp, shm_peer_t *p, chorus_status_t status,
                              const char *fmt, ...) CHORUS_PRINTF(4, 5);

chorus_status_t shm_init(const chorus_tp_params_t *params, chorus_tp_t **tp_p);
chorus_status_t shm_get_addr(chorus_tp_t *tp, void *blob, size_t *len_p);
chorus_status_t shm_connect_all(chorus_tp_t *tp, const uint8_t *peer_mask, const void *blobs,
                                uint64_t deadline_ns);
void shm_fini(chorus_tp_t *tp);
/* The transport op leave: marks our segment closed with the reason, wakes the peers, and
 * ends our pending requests with status. */
void shm_leave(chorus_tp_t *tp, chorus_status_t status);

#endif
