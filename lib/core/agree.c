/*
 * The survivors' agreement (see agree.h for the protocol and why it is safe).
 */
#include "core/agree.h"

#include "util/status.h"

#include <stdlib.h>
#include <string.h>

#define AGREE_MAGIC 0x43484147u /* "CHAG" */

/* What is queued for one peer: a bit per message type; a decision or an exclusion
 * supersedes a state. OUT_STASH, the kept decision of another, goes first and alone:
 * whoever hears from this rank hears of that decision before any suspicion it gossips. */
#define OUT_STATE (1u << CHORUS_AGREE_MSG_STATE)
#define OUT_DECIDE (1u << CHORUS_AGREE_MSG_DECIDE)
#define OUT_EXCLUDED (1u << CHORUS_AGREE_MSG_EXCLUDED)
#define OUT_STASH (1u << 4)

struct chorus_agree {
    int me;
    int n;
    uint32_t epoch;
    chorus_agree_state_t state;
    int target;
    int decided_here;
    int told_by;
    int conflict;
    uint8_t *suspect; /* n: believed dead; after the decision, the decision's dead set */
    uint8_t *joined;  /* n: sent a state naming this rank as its target */
    uint8_t *talked;  /* n: a message went either way */
    uint8_t *out;     /* n: OUT_* bits queued */
    int out_next;     /* where the next scan of out starts */
    uint32_t *vote;   /* n: each rank's vote, as its last message gave it */
    size_t blob_len;
    uint8_t blob[CHORUS_AGREE_BLOB_MAX];
    /* A decision from a rank that was not this one's target, kept for when this rank
     * coordinates (agree.h). */
    int stash_from; /* -1: none kept */
    uint8_t *stash_sent; /* n: the kept decision went to that rank */
    uint8_t *stash_bits; /* bitmap_bytes(n) */
    size_t stash_len;
    uint8_t stash_blob[CHORUS_AGREE_BLOB_MAX];
};

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static size_t bitmap_bytes(int n)
{
    return ((size_t)n + 7) / 8;
}

size_t chorus__agree_msg_max(int nranks)
{
    return CHORUS_AGREE_HEADER_BYTES + bitmap_bytes(nranks) + 4 + CHORUS_AGREE_BLOB_MAX;
}

static void queue(chorus_agree_t *a, int to, unsigned bits)
{
    if (to == a->me) return;
    if (a->state == CHORUS_AGREE_RUNNING && a->stash_from >= 0 && !a->stash_sent[to] &&
        to != a->stash_from) {
        a->stash_sent[to] = 1;
        bits |= OUT_STASH;
    }
    a->out[to] |= (uint8_t)bits;
}

static int lowest_trusted(const chorus_agree_t *a)
{
    for (int p = 0; p < a->n; p++) {
        if (!a->suspect[p]) return p;
    }
    return -1;
}

/* This rank is suspected (or left out): it says so to everyone it talked to, whose
 * suspects then grow by it, and stops. */
static void become_excluded(chorus_agree_t *a, int by)
{
    a->state = CHORUS_AGREE_EXCLUDED;
    a->suspect[a->me] = 1;
    a->told_by = by;
    for (int p = 0; p < a->n; p++) {
        if (a->talked[p] && p != by) queue(a, p, OUT_STATE);
    }
}

static void adopt(chorus_agree_t *a, int from, const uint8_t *bits, const uint8_t *blob,
                  size_t blob_len);

/* Decides when every trusted rank has joined this one, the coordinator. */
static void check_decide(chorus_agree_t *a)
{
    if (a->state != CHORUS_AGREE_RUNNING || a->target != a->me) return;
    for (int p = 0; p < a->n; p++) {
        if (p != a->me && !a->suspect[p] && !a->joined[p]) return;
    }
    a->state = CHORUS_AGREE_DECIDED;
    a->decided_here = 1;
    for (int p = 0; p < a->n; p++) {
        if (a->suspect[p]) {
            if (a->talked[p]) queue(a, p, OUT_EXCLUDED);
        } else {
            queue(a, p, OUT_DECIDE);
        }
    }
}

/* After the suspects grew: a new target, and everyone concerned learns the new suspects
 * (the coordinator probes every trusted rank that has not joined it). */
static void suspects_grew(chorus_agree_t *a)
{
    if (a->state != CHORUS_AGREE_RUNNING) return;
    if (a->suspect[a->me]) {
        become_excluded(a, -1);
        return;
    }
    a->target = lowest_trusted(a);
    if (a->target == a->me && a->stash_from >= 0) { /* a decision exists: it is final */
        adopt(a, a->stash_from, a->stash_bits, a->stash_blob, a->stash_len);
        return;
    }
    for (int p = 0; p < a->n; p++) {
        int probe = a->target == a->me && !a->suspect[p] && !a->joined[p];
        if (a->talked[p] || probe || p == a->target) queue(a, p, OUT_STATE);
    }
    check_decide(a);
}

chorus_status_t chorus__agree_create(int me, int nranks, uint32_t epoch, uint32_t vote,
                                     const uint8_t *suspects, chorus_agree_t **agree_p)
{
    chorus_agree_t *a;

    if (nranks < 1 || me < 0 || me >= nranks || agree_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "agree: rank %d of %d is not a valid rank", me, nranks);
    a = calloc(1, sizeof *a);
    if (a != NULL) {
        a->suspect = calloc((size_t)nranks, 5);
        a->vote = calloc((size_t)nranks, sizeof *a->vote);
        a->stash_bits = calloc(bitmap_bytes(nranks), 1);
    }
    if (a == NULL || a->suspect == NULL || a->vote == NULL || a->stash_bits == NULL) {
        if (a != NULL) {
            free(a->suspect);
            free(a->vote);
            free(a->stash_bits);
        }
        free(a);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: agree: %d ranks", me, nranks);
    }
    a->joined = a->suspect + nranks;
    a->talked = a->joined + nranks;
    a->out = a->talked + nranks;
    a->stash_sent = a->out + nranks;
    a->me = me;
    a->n = nranks;
    a->epoch = epoch;
    a->told_by = -1;
    a->stash_from = -1;
    for (int p = 0; p < nranks; p++) a->vote[p] = CHORUS_AGREE_NO_VOTE;
    a->vote[me] = vote;
    for (int p = 0; suspects != NULL && p < nranks; p++) a->suspect[p] = suspects[p] != 0;
    a->suspect[me] = 0; /* a rank in its own suspects would stop before it asked anybody */
    a->target = me;
    suspects_grew(a);
    *agree_p = a;
    return CHORUS_SUCCESS;
}

void chorus__agree_destroy(chorus_agree_t *agree)
{
    if (agree == NULL) return;
    free(agree->suspect);
    free(agree->vote);
    free(agree->stash_bits);
    free(agree);
}

void chorus__agree_on_dead(chorus_agree_t *a, int peer)
{
    if (peer < 0 || peer >= a->n || peer == a->me) return;
    a->joined[peer] = 0;
    if (a->state != CHORUS_AGREE_RUNNING || a->suspect[peer]) return;
    a->suspect[peer] = 1;
    suspects_grew(a);
}

static void on_state(chorus_agree_t *a, int from, int target, uint32_t vote, const uint8_t *bits)
{
    int grew = 0;

    a->vote[from] = vote;
    if (a->state == CHORUS_AGREE_DECIDED) {
        queue(a, from, a->suspect[from] ? OUT_EXCLUDED : OUT_DECIDE);
        return;
    }
    if (a->state != CHORUS_AGREE_RUNNING) return;
    if (a->suspect[from]) {
        queue(a, from, OUT_EXCLUDED);
        return;
    }
    for (int p = 0; p < a->n; p++) {
        if ((bits[p / 8] >> (p % 8) & 1) && !a->suspect[p]) {
            a->suspect[p] = 1;
            a->joined[p] = 0;
            grew = 1;
        }
    }
    if (a->suspect[a->me]) {
        become_excluded(a, from);
        return;
    }
    if (a->suspect[from]) { /* it says it is suspected itself: it is leaving */
        suspects_grew(a);
        return;
    }
    a->joined[from] = target == a->me;
    if (grew) {
        suspects_grew(a);
    } else {
        check_decide(a);
    }
}

static void on_decide(chorus_agree_t *a, int from, int kept, const uint8_t *bits,
                      const uint8_t *blob, size_t blob_len)
{
    /* A kept decision may be one a later coordinator never saw, when every rank that held it
     * as its own had died: the decision this rank took instead stands. */
    if (kept && a->state == CHORUS_AGREE_DECIDED) return;
    if (a->state == CHORUS_AGREE_DECIDED) {
        int differs;
        if (a->suspect[from]) return; /* a dead coordinator's late word: nobody heeds it */
        differs = blob_len != a->blob_len || memcmp(blob, a->blob, blob_len) != 0;
        for (int p = 0; p < a->n; p++) differs |= (bits[p / 8] >> (p % 8) & 1) != a->suspect[p];
        a->conflict |= differs;
        return;
    }
    if (a->state != CHORUS_AGREE_RUNNING) return;
    /* A rank that joined a coordinator takes the decision from it only: the coordinator
     * counts it as joined, and may decide on that count at any time. Another's decision is
     * kept for when this rank coordinates. */
    if (from != a->target && a->target != a->me) {
        if (a->stash_from < 0) {
            a->stash_from = from;
            memcpy(a->stash_bits, bits, bitmap_bytes(a->n));
            memcpy(a->stash_blob, blob, blob_len);
            a->stash_len = blob_len;
            queue(a, a->target, 0); /* the coordinator learns of it at once */
        }
        return;
    }
    adopt(a, from, bits, blob, blob_len);
}

/* Takes a coordinator's decision as this rank's, and passes it on. */
static void adopt(chorus_agree_t *a, int from, const uint8_t *bits, const uint8_t *blob,
                  size_t blob_len)
{
    for (int p = 0; p < a->n; p++) a->suspect[p] = bits[p / 8] >> (p % 8) & 1;
    memcpy(a->blob, blob, blob_len);
    a->blob_len = blob_len;
    a->told_by = from;
    a->state = a->suspect[a->me] ? CHORUS_AGREE_EXCLUDED : CHORUS_AGREE_DECIDED;
    if (a->state == CHORUS_AGREE_EXCLUDED) return;
    /* Pass it on: a rank that joined this one, or that this one joined, may not have it;
     * nor may `from`, when what it sent was a decision it kept for another (OUT_STASH). */
    for (int p = 0; p < a->n; p++) {
        if (a->talked[p]) queue(a, p, a->suspect[p] ? OUT_EXCLUDED : OUT_DECIDE);
    }
}

chorus_status_t chorus__agree_on_msg(chorus_agree_t *a, int from, const void *msg_, size_t len,
                                     uint32_t *epoch_p)
{
    const uint8_t *msg = msg_, *bits = msg + CHORUS_AGREE_HEADER_BYTES;
    size_t nb = bitmap_bytes(a->n), want = CHORUS_AGREE_HEADER_BYTES + nb, blob_len = 0;
    unsigned type;
    uint32_t epoch, target, vote;

    if (from < 0 || from >= a->n || from == a->me)
        return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: agree: a message from rank %d",
                             a->me, from);
    if (len < want || get32(msg) != AGREE_MAGIC || msg[5] != 0 || msg[6] != 0 || msg[7] != 0 ||
        get32(msg + 12) != (uint32_t)from || get32(msg + 20) != (uint32_t)a->n)
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: shrink: rank %d sent a malformed agreement message "
                             "(%zu bytes)", a->me, from, len);
    type = msg[4];
    epoch = get32(msg + CHORUS_AGREE_EPOCH_AT);
    target = get32(msg + 16);
    vote = get32(msg + CHORUS_AGREE_VOTE_AT);
    if (epoch_p != NULL) *epoch_p = epoch;
    if (a->n % 8 != 0 && bits[nb - 1] >> (a->n % 8) != 0)
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: shrink: rank %d's agreement message names ranks past %d",
                             a->me, from, a->n - 1);
    if (type == CHORUS_AGREE_MSG_DECIDE || type == CHORUS_AGREE_MSG_KEPT) {
        if (len < want + 4 || (blob_len = get32(msg + want)) > CHORUS_AGREE_BLOB_MAX)
            return chorus__error(CHORUS_ERR_REMOTE,
                                 "rank %d: shrink: rank %d's decision is malformed", a->me, from);
        want += 4 + blob_len;
    }
    if (len != want || type < CHORUS_AGREE_MSG_STATE || type > CHORUS_AGREE_MSG_KEPT ||
        (type == CHORUS_AGREE_MSG_STATE && target >= (uint32_t)a->n))
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: shrink: rank %d sent a malformed agreement message "
                             "(type %u, %zu bytes)", a->me, from, type, len);
    if (epoch != a->epoch)
        return chorus__error(CHORUS_ERR_MISMATCH,
                             "rank %d: shrink: rank %d is in agreement epoch %u, this rank in %u",
                             a->me, from, epoch, a->epoch);
    a->talked[from] = 1;
    switch (type) {
    case CHORUS_AGREE_MSG_STATE: on_state(a, from, (int)target, vote, bits); break;
    case CHORUS_AGREE_MSG_DECIDE:
    case CHORUS_AGREE_MSG_KEPT:
        on_decide(a, from, type == CHORUS_AGREE_MSG_KEPT, bits,
                  msg + CHORUS_AGREE_HEADER_BYTES + nb + 4, blob_len);
        break;
    default:
        if (a->state == CHORUS_AGREE_RUNNING) become_excluded(a, from);
        break;
    }
    return CHORUS_SUCCESS;
}

int chorus__agree_next_out(chorus_agree_t *a, int *to_p, void *buf_, size_t *len_p)
{
    uint8_t *buf = buf_;
    size_t nb = bitmap_bytes(a->n), len = CHORUS_AGREE_HEADER_BYTES + nb;

    for (int i = 0; i < a->n; i++) {
        int p = (a->out_next + i) % a->n, stash;
        unsigned bits = a->out[p], type;

        if (a->state != CHORUS_AGREE_RUNNING) bits &= ~OUT_STASH; /* it has its own now */
        if (bits == 0) {
            a->out[p] = 0;
            continue;
        }
        stash = (bits & OUT_STASH) != 0;
        /* The kept decision goes alone; what else is queued for p follows it. */
        a->out[p] = stash ? (uint8_t)(bits & ~OUT_STASH) : 0;
        a->out_next = stash ? p : (p + 1) % a->n;
        type = stash                 ? CHORUS_AGREE_MSG_KEPT
               : bits & OUT_DECIDE   ? CHORUS_AGREE_MSG_DECIDE
               : bits & OUT_EXCLUDED ? CHORUS_AGREE_MSG_EXCLUDED
                                     : CHORUS_AGREE_MSG_STATE;
        /* A decision that is not final here (the coordinator before set_blob) is not sent
         * yet: the driver sets the blob first. */
        memset(buf, 0, len);
        put32(buf, AGREE_MAGIC);
        buf[4] = (uint8_t)type;
        put32(buf + CHORUS_AGREE_EPOCH_AT, a->epoch);
        put32(buf + 12, (uint32_t)a->me);
        put32(buf + 16, (uint32_t)(a->target < 0 ? a->me : a->target));
        put32(buf + 20, (uint32_t)a->n);
        put32(buf + CHORUS_AGREE_VOTE_AT, a->vote[a->me]);
        if (stash) {
            memcpy(buf + CHORUS_AGREE_HEADER_BYTES, a->stash_bits, nb);
        } else {
            for (int q = 0; q < a->n; q++) {
                if (a->suspect[q])
                    buf[CHORUS_AGREE_HEADER_BYTES + q / 8] |= (uint8_t)(1u << (q % 8));
            }
        }
        if (type == CHORUS_AGREE_MSG_DECIDE || type == CHORUS_AGREE_MSG_KEPT) {
            size_t blob_len = stash ? a->stash_len : a->blob_len;
            put32(buf + len, (uint32_t)blob_len);
            memcpy(buf + len + 4, stash ? a->stash_blob : a->blob, blob_len);
            len += 4 + blob_len;
        }
        a->talked[p] = 1;
        *to_p = p;
        *len_p = len;
        return 1;
    }
    return 0;
}

void chorus__agree_leave(chorus_agree_t *a)
{
    if (a->state != CHORUS_AGREE_DECIDED) return;
    for (int p = 0; p < a->n; p++) {
        if (!a->suspect[p]) queue(a, p, OUT_DECIDE);
    }
}

void chorus__agree_poke(chorus_agree_t *a, int peer)
{
    if (peer < 0 || peer >= a->n) return;
    if (a->state == CHORUS_AGREE_DECIDED)
        queue(a, peer, a->suspect[peer] ? OUT_EXCLUDED : OUT_DECIDE);
    else
        queue(a, peer, OUT_STATE);
}

chorus_agree_state_t chorus__agree_state(const chorus_agree_t *a)
{
    return a->state;
}

int chorus__agree_decided_here(const chorus_agree_t *a)
{
    return a->decided_here;
}

chorus_status_t chorus__agree_set_blob(chorus_agree_t *a, const void *blob, size_t len)
{
    if (len > CHORUS_AGREE_BLOB_MAX || (len > 0 && blob == NULL))
        return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: agree: a blob of %zu bytes", a->me,
                             len);
    memcpy(a->blob, blob, len);
    a->blob_len = len;
    return CHORUS_SUCCESS;
}

const uint8_t *chorus__agree_dead(const chorus_agree_t *a)
{
    return a->suspect;
}

const void *chorus__agree_blob(const chorus_agree_t *a, size_t *len_p)
{
    if (len_p != NULL) *len_p = a->blob_len;
    return a->blob;
}

int chorus__agree_unanimous(const chorus_agree_t *a, uint32_t vote)
{
    for (int p = 0; p < a->n; p++) {
        if (!a->suspect[p] && a->vote[p] != vote) return 0;
    }
    return 1;
}

int chorus__agree_target(const chorus_agree_t *a)
{
    return a->target;
}

int chorus__agree_told_by(const chorus_agree_t *a)
{
    return a->told_by;
}

int chorus__agree_conflict(const chorus_agree_t *a)
{
    return a->conflict;
}
