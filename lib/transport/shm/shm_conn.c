/*
 * Setup and teardown of the shm transport: init creates our segment (empty, so that its
 * name can go into the address blob), connect_all sizes it for the masked peers, maps
 * theirs, and proves the secret both ways; fini closes everything.
 *
 * Handshake, for each pair (A, B): A lays out its segment and publishes its magic; B maps
 * it, checks it (sizes, ids, A's HMAC token), writes its own token into the ring it will
 * write to, and sets the ring's `attached` flag. A checks B's token before it reads a
 * byte from that ring. Once every peer attached to our segment nobody needs its name any
 * more, so we unlink it: a job that crashes after setup leaves nothing in /dev/shm.
 */
#include "transport/shm/shm.h"
#include "util/proc.h"

#include "util/auth.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHM_DEFAULT_RING ((uint64_t)4 << 20)

static uint64_t ring_size_from_config(void)
{
    uint64_t want = chorus__config_size("CHORUS_SHM_RING_SIZE", SHM_DEFAULT_RING);
    uint64_t size = SHM_RING_MIN;

    if (want > SHM_RING_MAX) want = SHM_RING_MAX;
    while (size < want) size <<= 1;
    return size;
}

chorus_status_t shm_init(const chorus_tp_params_t *params, chorus_tp_t **tp_p)
{
    chorus_status_t status;
    shm_tp_t *tp;

    if (params == NULL || params->nranks <= 0 || params->rank < 0 ||
        params->rank >= params->nranks || params->secret == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "shm: init: bad parameters");
    }
    tp = calloc(1, sizeof(*tp));
    if (tp == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: shm: init", params->rank);
    tp->by_rank = calloc((size_t)params->nranks, sizeof(*tp->by_rank));
    if (tp->by_rank == NULL) {
        status = chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: shm: init", params->rank);
        goto err_free;
    }
    tp->rank = params->rank;
    tp->nranks = params->nranks;
    memcpy(tp->secret, params->secret, CHORUS_SECRET_BYTES);
    tp->params = *params;
    tp->params.secret = tp->secret;
    tp->ring_size = ring_size_from_config();
    CHORUS_CHECK_GOTO(shm_seg_create(&tp->own, params->comm_id, params->rank), err_free_ranks);
    CHORUS_INFO("shm", "rank %d: segment %s, rings of %" PRIu64 " bytes", tp->rank, tp->own.name,
                tp->ring_size);
    *tp_p = (chorus_tp_t *)tp;
    return CHORUS_SUCCESS;

err_free_ranks:
    free(tp->by_rank);
err_free:
    free(tp);
    return status;
}

chorus_status_t shm_get_addr(chorus_tp_t *tp_, void *blob, size_t *len_p)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;
    shm_blob_t b;

    _Static_assert(sizeof(b) <= CHORUS_TP_BLOB_MAX, "shm blob too large");
    shm_blob_fill(&b, &tp->own, tp->params.comm_id, tp->rank);
    memcpy(blob, &b, sizeof(b));
    *len_p = sizeof(b);
    return CHORUS_SUCCESS;
}

/* Step 1 for one peer: map and check its segment, then attach to our ring in it. */
static chorus_status_t attach_peer(shm_tp_t *tp, shm_peer_t *p)
{
    chorus_status_t status;
    shm_ring_ctl_t *ctl;
    int ready = 0;
    uint32_t idx;

    status = shm_seg_attach(&p->seg, &tp->params, p->rank, &p->blob, &ready);
    if (status != CHORUS_SUCCESS || !ready) return status;
    idx = shm_seg_ring_index(&p->seg, tp->rank);
    if (idx == SHM_NO_RING) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: shm: peer %d has no ring for us (do the masks agree?)",
                             tp->rank, p->rank);
    }
    ctl = shm_seg_ring(&p->seg, idx);
    status = shm_token(tp->secret, "chorus-shm-ring", tp->params.comm_id, tp->rank, p->rank,
                       p->seg.hdr->nonce, ctl->token);
    if (status != CHORUS_SUCCESS) return status;
    ctl->producer_rank = tp->rank;
    shm_ring_view(&p->tx, ctl, ctl + 1, p->seg.ring_size, 1);
    atomic_store_explicit(&ctl->attached, 1, memory_order_release);
    atomic_fetch_add(&p->seg.hdr->attached, 1);
    shm_notify(p);
    p->attached = 1;
    return CHORUS_SUCCESS;
}

/* Step 2 for one peer: once it attached to its ring in our segment, check its proof. */
static chorus_status_t verify_peer(shm_tp_t *tp, shm_peer_t *p)
{
    uint32_t idx = shm_seg_ring_index(&tp->own, p->rank);
    shm_ring_ctl_t *ctl;
    uint8_t token[32];
    chorus_status_t status;

    /* Peers can write our segment, the index included: it is checked like theirs. */
    if (idx == SHM_NO_RING) {
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: shm: our ring index for peer %d was "
                             "overwritten", tp->rank, p->rank);
    }
    ctl = shm_seg_ring(&tp->own, idx);
    if (atomic_load_explicit(&ctl->attached, memory_order_acquire) == 0) return CHORUS_SUCCESS;
    status = shm_token(tp->secret, "chorus-shm-ring", tp->params.comm_id, p->rank, tp->rank,
                       tp->own.hdr->nonce, token);
    if (status != CHORUS_SUCCESS) return status;
    if (ctl->producer_rank != p->rank || !shm_token_equal(token, ctl->token)) {
        return chorus__error(CHORUS_ERR_AUTH,
                             "rank %d: shm: the writer of peer %d's ring does not prove the job "
                             "secret", tp->rank, p->rank);
    }
    shm_ring_view(&p->rx, ctl, ctl + 1, tp->ring_size, 0);
    p->verified = 1;
    return CHORUS_SUCCESS;
}

/* One round of both setup steps for a peer that is not done yet. */
static chorus_status_t setup_step(shm_tp_t *tp, shm_peer_t *p)
{
    chorus_status_t status = CHORUS_SUCCESS;

    if (!p->attached) status = attach_peer(tp, p);
    if (status == CHORUS_SUCCESS && !p->verified) status = verify_peer(tp, p);
    return status;
}

/* Why setup cannot go on (deadline, abort, a dead peer), or CHORUS_SUCCESS. */
static chorus_status_t setup_check(shm_tp_t *tp, uint64_t deadline_ns)
{
    chorus_status_t status;

    if (tp->params.abort_flag != NULL &&
        atomic_load_explicit(tp->params.abort_flag, memory_order_relaxed)) {
        return chorus__error(CHORUS_ERR_ABORTED, "rank %d: shm: connect aborted", tp->rank);
    }
    for (int i = 0; i < tp->npeers; i++) {
        shm_peer_t *p = &tp->peers[i];

        if (p->attached && p->verified) continue;
        if (!p->pid_check || !chorus__pid_dead(p->blob.pid)) continue;
        /* A peer needs nothing from us once we attached to its segment: it may attach to
         * ours, finish its connect_all, run and exit between our last look at its ring
         * and the pid check above. Look again now that it is known dead: only what it
         * never did before dying makes the setup fail. */
        status = setup_step(tp, p);
        if (status != CHORUS_SUCCESS) return status;
        if (!p->attached || !p->verified) {
            return chorus__error(CHORUS_ERR_REMOTE, "rank %d: shm: peer %d (pid %u) died during "
                                 "connect", tp->rank, p->rank, p->blob.pid);
        }
    }
    if (chorus__deadline_passed(deadline_ns)) {
        for (int i = 0; i < tp->npeers; i++) {
            shm_peer_t *p = &tp->peers[i];

            if (!p->attached || !p->verified) {
                return chorus__error(CHORUS_ERR_TIMEOUT,
                                     "rank %d: shm: peer %d did not connect before the deadline",
                                     tp->rank, p->rank);
            }
        }
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t make_peers(shm_tp_t *tp, const uint8_t *peer_mask, const void *blobs)
{
    uint64_t pidns = chorus__pidns();
    chorus_status_t status;

    for (int r = 0; r < tp->nranks; r++) tp->npeers += peer_mask[r] && r != tp->rank;
    tp->peers = calloc(tp->npeers > 0 ? (size_t)tp->npeers : 1, sizeof(*tp->peers));
    if (tp->peers == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: shm", tp->rank);
    for (int r = 0, i = 0; r < tp->nranks; r++) {
        shm_peer_t *p = &tp->peers[i];

        if (!peer_mask[r] || r == tp->rank) continue;
        p->rank = r;
        p->seg.fd = -1;
        memcpy(&p->blob, (const uint8_t *)blobs + (size_t)r * CHORUS_TP_BLOB_MAX,
               sizeof(p->blob));
        status = shm_blob_check(&p->blob, tp->params.comm_id, tp->rank, r);
        if (status != CHORUS_SUCCESS) return status;
        /* A pid from another pid namespace (containers sharing /dev/shm) means nothing
         * here, so death is then only seen through the peer's close flag. */
        p->pid_check = pidns != 0 && p->blob.pidns == pidns;
        tp->by_rank[r] = p;
        i++;
    }
    return CHORUS_SUCCESS;
}

chorus_status_t shm_connect_all(chorus_tp_t *tp_, const uint8_t *peer_mask, const void *blobs,
                                uint64_t deadline_ns)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;
    long sleep_ns = 20000;
    chorus_status_t status;

    if (tp->connected || tp->peers != NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: shm: connect_all called twice",
                             tp->rank);
    }
    status = make_peers(tp, peer_mask, blobs);
    if (status != CHORUS_SUCCESS) return status;
    status = shm_seg_layout(&tp->own, &tp->params, peer_mask, tp->ring_size);
    if (status != CHORUS_SUCCESS) return status;
    for (;;) {
        int left = 0;

        for (int i = 0; i < tp->npeers; i++) {
            shm_peer_t *p = &tp->peers[i];

            CHORUS_CHECK_GOTO(setup_step(tp, p), err);
            left += !p->attached || !p->verified;
        }
        if (left == 0) break;
        CHORUS_CHECK_GOTO(setup_check(tp, deadline_ns), err);
        /* Peers set up at their own pace; back off to 1 ms so that 8 ranks on 2 cores do
         * not steal the CPU from the ones still working. */
        nanosleep(&(struct timespec){0, sleep_ns}, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
    shm_seg_unlink(&tp->own);
    tp->connected = 1;
    tp->last_check_ns = chorus__now_ns();
    CHORUS_INFO("shm", "rank %d: connected to %d peers", tp->rank, tp->npeers);
    return CHORUS_SUCCESS;

err:
    return status;
}

void shm_leave(chorus_tp_t *tp_, chorus_status_t status)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;

    if (tp == NULL || tp->own.hdr == NULL || status == CHORUS_SUCCESS ||
        atomic_load(&tp->own.hdr->closed) != 0)
        return;
    /* Peers waiting on us fail at once, and a mismatch stays one for them. */
    atomic_store(&tp->own.hdr->closed,
                 status == CHORUS_ERR_MISMATCH ? SHM_CLOSED_MISMATCH : SHM_CLOSED);
    for (int i = 0; i < tp->npeers; i++) {
        shm_peer_t *p = &tp->peers[i];

        if (p->attached) shm_notify(p);
        if (p->failed != CHORUS_SUCCESS) continue;
        /* Not shm_peer_fail: the thread's error message is the failure's, keep it. */
        p->failed = status;
        snprintf(p->why, sizeof p->why, "this rank left after its communicator failed (%s)",
                 chorus_status_string(status));
        chorus__tp_queue_fail(&p->sq_head, &p->sq_tail, status);
        chorus__tp_queue_fail(&p->rq_head, &p->rq_tail, status);
    }
}

void shm_fini(chorus_tp_t *tp_)
{
    shm_tp_t *tp = (shm_tp_t *)tp_;

    if (tp == NULL) return;
    if (tp->own.hdr != NULL) {
        /* Tell the peers, and wake those asleep, so that they fail fast instead of
         * waiting for our pid to disappear. */
        if (atomic_load(&tp->own.hdr->closed) == 0) atomic_store(&tp->own.hdr->closed, SHM_CLOSED);
        for (int i = 0; i < tp->npeers; i++) {
            if (tp->peers[i].attached) shm_notify(&tp->peers[i]);
        }
    }
    for (int i = 0; i < tp->npeers; i++) shm_seg_close(&tp->peers[i].seg);
    shm_seg_close(&tp->own);
    free(tp->peers);
    free(tp->by_rank);
    free(tp);
}
