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
#define TCP_HDR_BYTES 16
#define TCP_HELLO_BYTES 16
#define TCP_MAX_MSG ((uint64_t)1 << 40) /* the largest message the header may announce */

/* The request kinds kept in chorus_tp_req_t.kind. */
enum { TCP_REQ_SEND = 1, TCP_REQ_RECV = 2 };

typedef struct {
    int fd;                             /* -1 until connected and after a failure */
    chorus_status_t error;              /* CHORUS_SUCCESS while the connection is healthy */
    chorus_tp_req_t *sq_head, *sq_tail; /* sends, in posting order */
    chorus_tp_req_t *rq_head, *rq_tail; /* receives, in posting order */
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

/* The data path (tcp_progress.c). */
chorus_status_t tcp_isend(struct chorus_tp *tp, int peer, const void *buf, size_t bytes,
                          chorus_tp_req_t *req);
chorus_status_t tcp_irecv(struct chorus_tp *tp, int peer, void *buf, size_t bytes,
                          chorus_tp_req_t *req);
chorus_status_t tcp_progress(struct chorus_tp *tp);
chorus_status_t tcp_wait(struct chorus_tp *tp, uint64_t timeout_us);

#endif
