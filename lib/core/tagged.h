/*
 * Tagged point to point, inside lib/core: the state shared by tagged.c (the envelopes, the
 * matching and the service on the progress thread) and tagged_calls.c (the public calls,
 * which validate and hand operations over). The protocol is described in tagged.c.
 */
#ifndef CHORUS_CORE_TAGGED_H
#define CHORUS_CORE_TAGGED_H

#include "core/comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define TG_MAGIC 0x43544147u /* "GATC" */
enum { TG_DATA = 1, TG_ACK = 2, TG_NACK = 3 };

/* An envelope, in host byte order (every rank of a job shares one). */
typedef struct {
    uint32_t magic;
    uint32_t kind;  /* TG_* */
    int32_t tag;    /* DATA */
    int32_t dtype;  /* DATA: the send's; NACK: the receive's */
    uint64_t count; /* DATA: the send's; NACK: the receive's */
    uint64_t id;    /* DATA: its number on the channel, from 1; ACK/NACK: the one answered */
} tg_env_t;

typedef struct tg_op {
    struct tg_op *next; /* the inbox, the posted receives, or its peer's sends */
    chorus_request_t req;
    int is_send;
    int peer; /* CHORUS_ANY_SOURCE for such a receive */
    int tag;
    chorus_dtype_t dtype;
    uint64_t count, bytes;
    void *buf;
    int *source_p;
    uint64_t seq; /* this rank's tagged call number: "tagged send #3" */
    uint64_t deadline_ns;
    double timeout_s; /* the comm's when posted, for messages */
    int ended;    /* its request is complete (a send may stay listed until its answer) */
    int landing;  /* a receive whose payload is arriving into buf */
    /* A send to another rank: its envelope, number and transport requests, its answer. */
    tg_env_t env;
    chorus_tp_req_t ereq, dreq;
    int answer;   /* 0: none yet; TG_ACK or TG_NACK */
    int nack_dtype;
    uint64_t nack_count;
    /* A receive ends with this once its answer has left. */
    chorus_status_t status;
    char msg[256];
} tg_op_t;

/* A message that arrived before its receive (held), or one being drained (discard). */
typedef struct tg_msg {
    struct tg_msg *next; /* the held list, in arrival order */
    int peer, tag;
    chorus_dtype_t dtype;
    uint64_t count, bytes, id;
    void *data;
    int arrived;       /* its payload is complete */
    int discard;       /* drop it once arrived */
    tg_op_t *claimed;  /* the receive it goes to once arrived */
    tg_op_t *self_send; /* from this rank: the send (data points at its buffer) */
} tg_msg_t;

/* An answer being sent, and the receive that completes when it has left. */
typedef struct tg_ctl {
    struct tg_ctl *next;
    tg_env_t env;
    chorus_tp_req_t req;
    tg_op_t *then;
} tg_ctl_t;

typedef struct {
    tg_env_t in; /* the envelope being received */
    chorus_tp_req_t inreq;
    int in_payload;   /* the payload of `in` is arriving: into `into`, or into `held` */
    tg_op_t *into;
    tg_msg_t *held;
    chorus_tp_req_t preq;
    uint64_t in_ids, out_ids; /* DATA messages received from / sent to the peer */
    tg_op_t *sends;           /* sent, not yet answered or not yet left, in id order */
    tg_ctl_t *ctls;
} tg_peer_t;

struct chorus_tagged {
    pthread_mutex_t lock; /* inbox, dead */
    tg_op_t *inbox, *inbox_tail;
    int dead;             /* the service ended: calls fail at once */
    atomic_int closing;   /* chorus_comm_destroy */
    uint64_t calls;       /* the caller's thread only */
    /* The progress thread's. */
    tg_peer_t *peers;
    tg_op_t *posted, *posted_tail; /* receives, in post order */
    tg_msg_t *held, *held_tail;    /* messages, in arrival order */
};

/* The service: runs on the comm's progress thread (chorus__async_serve) until the comm is
 * destroyed, aborted or failed. */
void chorus__tagged_serve(chorus_comm_t comm);

#endif
