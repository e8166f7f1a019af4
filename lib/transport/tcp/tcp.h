/*
 * Private to the TCP transport: the instance, the per-peer connection state and the wire
 * format. tcp_conn.c sets connections up and tears them down; tcp_progress.c moves data.
 *
 * Wire format: every message is a 16-byte header followed by its payload:
 *   u64 payload length (big endian), u32 TCP_MSG_MAGIC (big endian), u32 zero (reserved).
 * A receiver reads a header only once a receive is posted for that peer, so unread data
 * stays in the socket and TCP's window throttles a sender that runs ahead.
 */
#ifndef CHORUS_TRANSPORT_TCP_H
#define CHORUS_TRANSPORT_TCP_H

#include "transport/transport.h"
#include "util/auth.h"
#include "util/status.h"

#include <stdatomic.h>
#include <stdint.h>
#include <poll.h>
#include <sys/socket.h>

#define TCP_MSG_MAGIC 0x43544d31u   /* "CTM1" */
#define TCP_HELLO_MAGIC 0x43544831u /* "CTH1" */
/* A header with this magic and length 0 is the last thing a rank that closes cleanly
 * (tcp_fini at a message boundary) writes: an end of stream without it means the peer
 * died or failed, which lets survivors tell a dead rank from one that left. */
#define TCP_BYE_MAGIC 0x43544259u /* "CTBY" */
/* Its reserved word carries, in its low 24 bits, 1 + the rank whose failure made the
 * sender leave (0: none), so that the ranks waiting on a survivor that leaves still learn
 * whom to blame, and in its high 8 bits why it left: TCP_BYE_MISMATCH when its calls did
 * not match its peers' (found by it or told by another), so that every rank reports the
 * mismatch as one. */
#define TCP_BYE_BLAME_MASK 0xffffffu
#define TCP_BYE_MISMATCH 1u
/* How often, while requests are pending, every connection is checked for a peer that
 * died or went silent (also the connections no request waits on). */
#define TCP_CHECK_NS ((uint64_t)50 * 1000 * 1000)
#define TCP_HDR_BYTES 16
#define TCP_HELLO_BYTES 16
#define TCP_MAX_MSG ((uint64_t)1 << 40) /* the largest message the header may announce */

/* What a complete frame header says (chorus__tcp_header_decode). */
typedef enum {
    TCP_HDR_MSG = 0,   /* a message of the posted length */
    TCP_HDR_BYE,       /* a goodbye */
    TCP_HDR_BAD_MAGIC, /* not a header of this protocol (wrong magic or reserved word) */
    TCP_HDR_TOO_LONG,  /* a message longer than TCP_MAX_MSG */
    TCP_HDR_MISMATCH,  /* a message of another length than posted */
} tcp_hdr_verdict_t;

typedef struct {
    uint64_t len;   /* the length it announces */
    uint32_t magic; /* its magic word */
    uint32_t word;  /* its reserved word (for a goodbye: 1 + the rank it blames, or 0) */
    int blame;      /* TCP_HDR_BYE: the rank its sender blames, in [0, nranks) and not ours;
                     * -1 when it blames nobody we know */
    int mismatch;   /* TCP_HDR_BYE: its sender left because the calls did not match */
} tcp_hdr_t;

/* Decodes the 16 bytes of a header that a peer sent for a receive of `posted` bytes, on
 * rank `rank` of nranks. Pure (no state, no system calls), so that the libFuzzer target
 * tests/fuzz/fuzz_tcp_frame.c can feed it anything. Only TCP_HDR_MSG lets a payload be
 * read, and then out->len == posted. */
tcp_hdr_verdict_t chorus__tcp_header_decode(const uint8_t hdr[TCP_HDR_BYTES], size_t posted,
                                            int rank, int nranks, tcp_hdr_t *out);

/* Checks the hello that a connecting peer sent (after authentication) to rank `rank` of
 * communicator comm_id: returns the peer's rank, which is lower than rank and set in
 * peer_mask (rank entries), or -1 with *why_p saying why it is refused. Pure, like the
 * header decoder (tests/fuzz/fuzz_tcp_frame.c). */
int chorus__tcp_hello_check(const uint8_t *hello, size_t len, uint64_t comm_id, int rank,
                            const uint8_t *peer_mask, const char **why_p);

/* The request kinds kept in chorus_tp_req_t.kind. */
enum { TCP_REQ_SEND = 1, TCP_REQ_RECV = 2 };

typedef struct {
    int fd;                             /* -1 until connected and after a failure */
    chorus_status_t error;              /* CHORUS_SUCCESS while the connection is healthy */
    chorus_tp_req_t *sq_head, *sq_tail; /* sends, in posting order */
    chorus_tp_req_t *rq_head, *rq_tail; /* receives, in posting order */
    int bye;                            /* it said goodbye: its end of stream is no failure */
    int held;                           /* isend_queued left the send queue unwritten */
    char why[320];                      /* the failure, repeated to requests posted later */
} tcp_peer_t;

struct chorus_tp {
    int rank;
    int nranks;
    uint8_t secret[CHORUS_SECRET_BYTES];
    uint64_t comm_id;
    double timeout_s;
    const atomic_int *abort_flag;
    int listen_fd;
    struct sockaddr_storage bound; /* what get_addr hands out */
    int sndbuf, rcvbuf;            /* SO_SNDBUF / SO_RCVBUF to set; 0: kernel autotuning */
    chorus_status_t error;         /* the first connection error, returned by progress() */
    tcp_peer_t *peers;             /* nranks entries; peers[rank] is never connected */
    struct pollfd *pfds;           /* scratch for wait(), nranks entries */
    int keepalive_s;               /* CHORUS_TCP_KEEPALIVE: silent peers fail after this; 0 off */
    uint64_t last_check_ns;        /* the last tcp_check_peers pass */
    int blame;                     /* the peer whose failure came first (-1: none), for goodbyes */
    chorus_status_t left;          /* why this rank left (tcp_leave; SUCCESS: it has not) */
    int *check_peer;               /* scratch for tcp_check_peers: the peer of each pfds entry */
};

/* Applies CHORUS_TCP_BUF to SO_SNDBUF / SO_RCVBUF (where the kernel allows that much) and
 * TCP_NODELAY. Failures are logged, not fatal: the defaults still work. Call it before
 * connect() (or on the listener before any peer connects): buffers set after the handshake
 * leave the peer's segments sized for the default window, larger than a small buffer can
 * ever offer again, and the connection then crawls on TCP's persist timer. */
void tcp_tune_socket(const struct chorus_tp *tp, int fd);

/* Marks the connection to peer failed: closes it, completes every pending request on it
 * with status, and records the detail message (fmt, plus strerror(err) when err != 0).
 * Returns status. */
chorus_status_t tcp_fail_peer(struct chorus_tp *tp, int peer, chorus_status_t status, int err,
                              const char *fmt, ...) CHORUS_PRINTF(5, 6);

/* Looks at every connection, idle ones included, at most every TCP_CHECK_NS unless force:
 * fails peers whose stream ended without a goodbye (killed, crashed), whose socket has an
 * error (keep-alive timeout, reset) or whose kernel acknowledged nothing of our pending
 * data for keepalive_s seconds (host or link down). Returns the transport's first error. */
chorus_status_t tcp_check_peers(struct chorus_tp *tp, int force);

/* Writes the goodbye header to peer if its stream is at a message boundary (best effort,
 * never blocks). For tcp_fini. */
void tcp_say_goodbye(struct chorus_tp *tp, int peer);
/* The transport op leave: a goodbye carrying why to every peer, then the connections close
 * and their requests end with status. */
void tcp_leave(struct chorus_tp *tp, chorus_status_t status);

/* The data path (tcp_progress.c). */
chorus_status_t tcp_isend(struct chorus_tp *tp, int peer, const void *buf, size_t bytes,
                          chorus_tp_req_t *req);
chorus_status_t tcp_isend_queued(struct chorus_tp *tp, int peer, const void *buf, size_t bytes,
                                 chorus_tp_req_t *req);
int tcp_peek(struct chorus_tp *tp, int peer, void *buf, size_t len);
chorus_status_t tcp_irecv(struct chorus_tp *tp, int peer, void *buf, size_t bytes,
                          chorus_tp_req_t *req);
chorus_status_t tcp_progress(struct chorus_tp *tp);
chorus_status_t tcp_wait(struct chorus_tp *tp, uint64_t timeout_us);

#endif
