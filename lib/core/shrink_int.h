/*
 * The shrink's connections (shrink_net.c) and the state it shares with the protocol that
 * drives them (shrink.c): one survivor's links to every other survivor's bootstrap
 * listener, the frames on them, and the acceptor thread.
 */
#ifndef CHORUS_CORE_SHRINK_INT_H
#define CHORUS_CORE_SHRINK_INT_H

#include "core/agree.h"
#include "core/comm.h"

#include "arena/arena.h"
#include "util/auth.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/sock.h"
#include "util/status.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SK_HELLO_MAGIC "SHRK"
#define SK_HELLO_BYTES 20 /* magic, u64 comm id, u32 rank, u32 nranks */
#define SK_FRAME_AGREE 1 /* (2 was FORMED, which the KEEP decision replaced) */
#define SK_POLL_MS 2
#define SK_AUTH_S 2.0 /* a peer that has begun its shrink answers a handshake at once */
/* A refused connection is a death only after this much more reading: the peer may have
 * left with a decision it sent us just before, on a connection our acceptor thread is
 * still handing over. */
#define SK_REFUSED_GRACE_NS 20000000ull
/* The decision to keep the communicator formed in an epoch: this magic and the epoch. */
#define SK_KEEP_MAGIC "KEEP"
#define SK_KEEP_BYTES 8

typedef enum {
    SK_NONE = 0,
    SK_CONNECTING, /* our connect in flight */
    SK_CHALLENGE,  /* connected: waiting for the peer's acceptor to challenge us */
    SK_READY,
} sk_link_state_t;

typedef struct {
    int out_fd; /* the connection we opened */
    sk_link_state_t out_state;
    int in_fd;  /* the connection it opened (either may carry messages) */
    uint8_t *rbuf[2]; /* bytes read from out_fd / in_fd, frames not yet taken */
    size_t rlen[2], rcap[2];
    uint8_t *pend; /* frames waiting for out_fd to be ready */
    size_t plen;
    int dead;            /* its connection ended, or it refused one */
    uint64_t refused_ns; /* it refused a connection then (0: it did not) */
} sk_peer_t;

typedef struct {
    chorus_comm_t comm;
    int me, n;
    uint32_t epoch;
    uint64_t deadline_ns;
    sk_peer_t *peers;
    uint8_t *suspect; /* kept across epochs */
    chorus_agree_t *ag;
    /* What this rank formed and votes for: the communicator of epoch `vote` and the dead set
     * of the decision it was formed from (CHORUS_AGREE_NO_VOTE: none). */
    uint32_t vote;
    chorus_comm_t held;
    uint8_t *held_dead;
    uint8_t *msg; /* chorus__agree_msg_max + frame header */
    chorus_acceptor_t *acc;
    /* The watcher, during a formation. */
    pthread_t watcher;
    atomic_int watch_stop;
    chorus_stop_t stop;
    uint32_t seen_epoch; /* the highest epoch a peer showed */
    struct pollfd *pfds; /* 2 * n: the main loop's, then the watcher's */
    int *who;
    /* The acceptor thread: it authenticates the survivors' connections while this rank's
     * own handshakes wait for theirs (two ranks that connect to each other at once would
     * otherwise each wait for the other's acceptor). It queues them here. */
    pthread_t acceptor;
    int acceptor_running;
    atomic_int acceptor_stop;
    pthread_mutex_t accepted_lock;
    int *accepted_fd; /* n: a connection from that rank waiting to be taken, or -1 */
} shrink_t;

static inline void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---- shrink_net.c ---- */

/* Closes p's connections and drops what was buffered. */
void shrink__close_peer(sk_peer_t *pp);
/* p is gone: its links close, it is suspected from now on, and the agreement learns. */
void shrink__mark_dead(shrink_t *s, int p);
/* Appends a frame for p; sent at once where the link is ready. */
void shrink__queue_frame(shrink_t *s, int p, int kind, const void *payload, size_t len);
/* Sends what is pending on p's ready link (connecting first where there is none). */
void shrink__flush_peer(shrink_t *s, int p);
/* Takes the connections the acceptor thread authenticated. */
void shrink__accept(shrink_t *s);
/* Reads what p sent on link k (0: ours, 1: its); 0, or -1 when the link ended. */
int shrink__read(sk_peer_t *pp, int k);
/* The next whole frame of link k at off, or NULL; a pointer to its length field itself
 * when the length is one no frame has. */
const uint8_t *shrink__frame_at(const sk_peer_t *pp, int k, size_t off, size_t max,
                                size_t *len_p);
size_t shrink__frame_max(const shrink_t *s);
/* Feeds p's whole frames on link k to the agreement. */
void shrink__dispatch(shrink_t *s, int p, int k);
/* Fills s->pfds and s->who (peer p's link opened by us as p, by it as ~p) with the live
 * links (ready_only: ours only once authenticated); returns their number. */
nfds_t shrink__poll_set(shrink_t *s, int ready_only);
/* One look at every connection, waiting up to wait_ms: accepts, connects, reads. */
void shrink__poll(shrink_t *s, int wait_ms);
/* Starts the acceptor thread (sk_free in shrink.c stops it). */
chorus_status_t shrink__acceptor_start(shrink_t *s);

#endif
