/*
 * The survivors' agreement of chorus_comm_shrink, as a pure protocol: events in (a message
 * from a peer, a peer found dead), messages out, no I/O and no clock, so that a test can
 * drive every rank of a job in one thread and kill any rank before any of its messages
 * (tests/unit/test_agree.c). shrink.c drives it over sockets.
 *
 * Each rank holds a set of suspects (ranks it believes dead), which only grows, and gossips
 * it on every message. Its target is the lowest rank it does not suspect. A rank whose
 * target is itself coordinates: it probes every rank it does not suspect with its state and
 * decides, once every one of them has joined it (sent a state naming it as target), that
 * the survivors are the ranks it does not suspect; it sends that decision to each of them.
 * Everybody else sends its state to its target, and again when its suspects grow. A
 * decision is final: a decided rank answers any later state with the decision, and a rank
 * that receives one adopts it (the first it receives) and passes it to everyone it talked
 * to. So when a coordinator dies after telling some ranks, the next coordinator asks the
 * ranks it does not suspect, one of which holds the decision, and adopts it instead of
 * deciding anew: with suspicions that are true (a peer is suspected only after its
 * connection ended or was refused) two survivors never decide differently.
 *
 * A rank that is suspected by somebody is excluded: whoever suspects it answers it with
 * EXCLUDED, and it gossips its own suspicion to the ranks it talked to before it stops.
 * A decision may name a rank that died after it was taken; the communicator built from it
 * then fails to form and the driver runs the next epoch with that rank suspected.
 *
 * A decision that reaches a rank from somebody other than its target is not taken at once
 * (its coordinator may count it as joined), but kept: if this rank becomes the coordinator
 * later, it adopts that decision, as it would one a probe brought back. So a decision held
 * by a rank that then left (shrink.c: it returned with it) is not lost when the coordinator
 * that made it dies, as long as it reached the next coordinator.
 *
 * Every message carries its sender's vote, a number the driver gives (shrink.c: the epoch
 * whose communicator the sender formed and holds); the coordinator sees the votes of every
 * rank that joined it, so when it decides it can tell whether they all voted the same.
 */
#ifndef CHORUS_CORE_AGREE_H
#define CHORUS_CORE_AGREE_H

#include "chorus.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CHORUS_AGREE_RUNNING = 0,
    CHORUS_AGREE_DECIDED = 1,  /* dead set and blob are final; this rank is a survivor */
    CHORUS_AGREE_EXCLUDED = 2, /* somebody suspects this rank, or the decision left it out */
} chorus_agree_state_t;

typedef enum {
    CHORUS_AGREE_MSG_STATE = 1,    /* suspects, and whom the sender joins */
    CHORUS_AGREE_MSG_DECIDE = 2,   /* the dead set and the coordinator's blob */
    CHORUS_AGREE_MSG_EXCLUDED = 3, /* "you are not among the survivors" */
    CHORUS_AGREE_MSG_KEPT = 4,     /* a decision the sender keeps for another (agree.h) */
} chorus_agree_msg_type_t;

/* The opaque part of a decision (the new communicator's unique id, in shrink.c). */
#define CHORUS_AGREE_BLOB_MAX 256
/* A message: 28-byte header (magic, type, epoch, sender, target, nranks, vote), the bitmap
 * of nranks bits, then for DECIDE and KEPT a u32 blob length and the blob. */
#define CHORUS_AGREE_HEADER_BYTES 28
/* Where the u32 epoch and the u32 vote are in a message (the driver's watcher reads them). */
#define CHORUS_AGREE_EPOCH_AT 8
#define CHORUS_AGREE_VOTE_AT 24
/* The vote of a rank that has nothing to vote for. */
#define CHORUS_AGREE_NO_VOTE 0xffffffffu

typedef struct chorus_agree chorus_agree_t;

/* An agreement among nranks for rank me, in epoch (messages of other epochs are refused),
 * with this rank's vote and the ranks it already believes dead (suspects: nranks bytes,
 * nonzero = dead; may be NULL). Queues the first messages. */
chorus_status_t chorus__agree_create(int me, int nranks, uint32_t epoch, uint32_t vote,
                                     const uint8_t *suspects, chorus_agree_t **agree_p);
void chorus__agree_destroy(chorus_agree_t *agree);

/* Peer was found dead (its connection ended or was refused). */
void chorus__agree_on_dead(chorus_agree_t *agree, int peer);

/* A message as received from peer `from` (the authenticated sender). A malformed message
 * (wrong size, magic, epoch or sender, bits past nranks) is CHORUS_ERR_REMOTE with a
 * message naming the peer; the caller should then treat the peer as dead. A message of
 * another epoch is CHORUS_ERR_MISMATCH; *epoch_p (may be NULL) gets its epoch. */
chorus_status_t chorus__agree_on_msg(chorus_agree_t *agree, int from, const void *msg, size_t len,
                                     uint32_t *epoch_p);

/* Takes the next message to send: *to_p, and its bytes into buf (at least
 * chorus__agree_msg_max bytes), *len_p. Returns 0 when nothing is queued. */
int chorus__agree_next_out(chorus_agree_t *agree, int *to_p, void *buf, size_t *len_p);
size_t chorus__agree_msg_max(int nranks);

/* Before this rank returns with its decision: queues the decision for every survivor, so
 * that none of them, when the coordinator died before it told them all, takes this rank's
 * departure for a death and decides without it (agree.h). The driver sends them all. */
void chorus__agree_leave(chorus_agree_t *agree);

/* Queues this rank's state for peer (one in an older epoch learns of the newer one). */
void chorus__agree_poke(chorus_agree_t *agree, int peer);

chorus_agree_state_t chorus__agree_state(const chorus_agree_t *agree);

/* Nonzero once this rank took the decision itself (it is the coordinator): the driver must
 * then set the blob before it sends the queued decisions. */
int chorus__agree_decided_here(const chorus_agree_t *agree);
chorus_status_t chorus__agree_set_blob(chorus_agree_t *agree, const void *blob, size_t len);

/* After the decision: nranks bytes, nonzero = not a survivor; and the blob. Before: the
 * current suspects. */
const uint8_t *chorus__agree_dead(const chorus_agree_t *agree);
const void *chorus__agree_blob(const chorus_agree_t *agree, size_t *len_p);

/* Nonzero if every rank the decision keeps voted `vote` (this rank's own vote included).
 * Meaningful at the coordinator once it decided here: every survivor had joined it. */
int chorus__agree_unanimous(const chorus_agree_t *agree, uint32_t vote);

/* The rank this one joins (itself when it coordinates), and the peer whose decision it
 * adopted or that excluded it (-1: none, or its own). */
int chorus__agree_target(const chorus_agree_t *agree);
int chorus__agree_told_by(const chorus_agree_t *agree);

/* Nonzero if a second, different decision arrived after the first: a broken invariant the
 * tests look for (it is ignored otherwise). */
int chorus__agree_conflict(const chorus_agree_t *agree);

#endif
