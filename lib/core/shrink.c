/*
 * Recovery: chorus_comm_revoke, chorus_comm_shrink and chorus_comm_failed_ranks.
 *
 * A shrink revokes the failed communicator (its peers' waits end at once), then runs the
 * survivors' agreement of agree.c over fresh connections between the ranks' bootstrap
 * listeners, which stay open for the communicator's life and authenticate with its secret:
 * the failed comm's own streams are out of step and carry nothing more.
 *
 * Epochs alternate between forming and confirming. The coordinator of a decision makes a
 * new unique id (its process serves the rendezvous); every survivor joins the new
 * communicator with the rank it has among the survivors, then runs the next epoch of the
 * agreement, voting for the epoch whose communicator it formed (or for none). Only when the
 * coordinator of that epoch sees that every survivor formed it, and that nobody was lost
 * since, does it decide to KEEP it; otherwise its decision is a new id, every holder
 * destroys what it formed, and the survivors form again. Forming alone cannot be the end:
 * it completes on some ranks and not on others when a member dies in its last steps (the
 * final barrier passes on the ranks that got every token first), and a rank that gave up
 * while the others went on would shrink without them into a second job. A decision is
 * uniform, so a kept communicator is kept by all.
 *
 * While a communicator forms, a watcher thread keeps an eye on the agreement's connections:
 * a survivor that dies then, or a peer in the next epoch that did not form it, stops the
 * formation (the next decision cannot keep it). So a death at any moment of a shrink ends
 * in an agreement among the ranks still alive, or in an error at the deadline, never in a
 * wait without end. A rank that returns with KEEP first sends that decision to every
 * survivor and closes its listener (chorus__agree_leave): one whose coordinator died before
 * telling it then adopts the decision rather than take the departed for dead.
 *
 * Frames on the agreement's connections: u32 length of what follows, u8 kind (AGREE: an
 * agree.c message), the payload.
 */
#include "core/shrink_int.h"

static chorus_status_t sk_set_blob(shrink_t *s);

/* Sends what the agreement queued. */
static chorus_status_t sk_send_queued(shrink_t *s)
{
    size_t len;
    int to;

    /* A death found while sending can complete the decision here: the blob is checked
     * before every message. */
    for (;;) {
        chorus_status_t st = sk_set_blob(s);
        if (st != CHORUS_SUCCESS) return st;
        if (!chorus__agree_next_out(s->ag, &to, s->msg, &len)) return CHORUS_SUCCESS;
        shrink__queue_frame(s, to, SK_FRAME_AGREE, s->msg, len);
        shrink__flush_peer(s, to);
    }
}

/* Whether the decision of this epoch, taken here, can keep the communicator of the last:
 * this rank formed it, every survivor voted for it, and the survivors are those it was
 * formed for. */
static int sk_can_keep(shrink_t *s)
{
    return s->held != NULL && s->vote + 1 == s->epoch && chorus__agree_unanimous(s->ag, s->vote) &&
           memcmp(chorus__agree_dead(s->ag), s->held_dead, (size_t)s->n) == 0;
}

/* Whether a decision's blob says KEEP (and of which epoch). */
static int sk_is_keep(const void *blob, size_t len, uint32_t *epoch_p)
{
    if (len != SK_KEEP_BYTES || memcmp(blob, SK_KEEP_MAGIC, 4) != 0) return 0;
    *epoch_p = get32((const uint8_t *)blob + 4);
    return 1;
}

/* The coordinator's decision, made when it decides: KEEP, or the next communicator's id. */
static chorus_status_t sk_set_blob(shrink_t *s)
{
    if (chorus__agree_decided_here(s->ag)) {
        size_t blob_len;
        (void)chorus__agree_blob(s->ag, &blob_len);
        if (blob_len == 0 && sk_can_keep(s)) {
            uint8_t keep[SK_KEEP_BYTES];
            memcpy(keep, SK_KEEP_MAGIC, 4);
            put32(keep + 4, s->vote);
            return chorus__agree_set_blob(s->ag, keep, sizeof keep);
        }
        if (blob_len == 0) {
            chorus_unique_id_t id;
            chorus_status_t st =
                chorus__bootstrap_new_id(chorus__bootstrap_local_addr(s->comm->bs), &id);
            if (st != CHORUS_SUCCESS)
                return chorus__error_context(st, "rank %d: comm_shrink: making the new id",
                                             s->me);
            return chorus__agree_set_blob(s->ag, &id, sizeof id);
        }
    }
    return CHORUS_SUCCESS;
}

static chorus_status_t sk_start_epoch(shrink_t *s, uint32_t epoch)
{
    chorus_status_t status;

    chorus__agree_destroy(s->ag);
    s->ag = NULL;
    s->epoch = epoch;
    status = chorus__agree_create(s->me, s->n, epoch, s->vote, s->suspect, &s->ag);
    if (status != CHORUS_SUCCESS) return status;
    for (int p = 0; p < s->n; p++) {
        if (s->peers[p].dead) chorus__agree_on_dead(s->ag, p);
    }
    return CHORUS_SUCCESS;
}

/* The ranks this one still waits for, as "2, 5". */
static void sk_waiting_for(const shrink_t *s, char *buf, size_t size)
{
    size_t len = 0;
    int target = chorus__agree_target(s->ag);

    buf[0] = '\0';
    for (int p = 0; p < s->n && len < size; p++) {
        if (p == s->me || s->suspect[p] || (target != s->me && p != target)) continue;
        len += (size_t)snprintf(buf + len, size - len, "%s%d", len ? ", " : "", p);
    }
}

/* Runs epochs of the agreement until this rank has a decision, is excluded, or the
 * deadline passes. */
static chorus_status_t sk_agree(shrink_t *s)
{
    for (;;) {
        chorus_agree_state_t st;
        chorus_status_t status = sk_send_queued(s);

        if (status != CHORUS_SUCCESS) return status;
        st = chorus__agree_state(s->ag);
        if (st == CHORUS_AGREE_DECIDED) return CHORUS_SUCCESS;
        if (st == CHORUS_AGREE_EXCLUDED) {
            int by = chorus__agree_told_by(s->ag);
            return chorus__error(CHORUS_ERR_REMOTE,
                                 "rank %d: comm_shrink: the survivors excluded this rank (%s%d "
                                 "believes it lost): it is not in the new communicator",
                                 s->me, by >= 0 ? "rank " : "", by >= 0 ? by : s->me);
        }
        if (s->seen_epoch > s->epoch) {
            status = sk_start_epoch(s, s->seen_epoch);
            if (status != CHORUS_SUCCESS) return status;
            for (int p = 0; p < s->n; p++) { /* the frames that were held back */
                for (int k = 0; k < 2; k++) shrink__dispatch(s, p, k);
            }
            continue;
        }
        if (chorus__deadline_passed(s->deadline_ns)) {
            char names[128];
            sk_waiting_for(s, names, sizeof names);
            return chorus__error(CHORUS_ERR_TIMEOUT,
                                 "rank %d: comm_shrink: no agreement before the deadline "
                                 "(epoch %u, waiting for rank(s) %s)",
                                 s->me, s->epoch, names[0] ? names : "none");
        }
        shrink__poll(s, SK_POLL_MS);
    }
}

/* ---- forming the new communicator ---- */

/* Whether a frame seen while this rank forms the communicator of its epoch means that the
 * next decision cannot keep it: a peer already in the next epoch that did not form it (or a
 * decision of that epoch, taken without this rank's vote), or a peer further on. */
static int sk_gives_up(const shrink_t *s, const uint8_t *f, size_t len)
{
    uint32_t epoch, vote;

    if (f[0] != SK_FRAME_AGREE || len < 1 + CHORUS_AGREE_HEADER_BYTES) return 0;
    epoch = get32(f + 1 + CHORUS_AGREE_EPOCH_AT);
    vote = get32(f + 1 + CHORUS_AGREE_VOTE_AT);
    if (epoch <= s->epoch) return 0;
    return epoch > s->epoch + 1 || f[1 + 4] != CHORUS_AGREE_MSG_STATE || vote != s->epoch;
}

/* The watcher: a survivor that dies, or a peer that gave up on this formation, stops it. */
static void *sk_watch(void *arg)
{
    shrink_t *s = arg;
    const uint8_t *dead = chorus__agree_dead(s->ag);

    /* The main thread is inside the formation: the peers and the poll arrays are ours. */
    while (!atomic_load(&s->watch_stop)) {
        struct pollfd *pfds = s->pfds;
        int *who = s->who;
        nfds_t nf;
        shrink__accept(s);
        nf = shrink__poll_set(s, 1);
        if (poll(pfds, nf, 10) <= 0) continue;
        for (nfds_t i = 0; i < nf; i++) {
            int p = who[i] < 0 ? ~who[i] : who[i], k = who[i] < 0;
            sk_peer_t *pp = &s->peers[p];
            size_t off = 0, len = 0;
            const uint8_t *f;
            int ended;
            if (pfds[i].revents == 0 || pp->dead) continue;
            ended = shrink__read(pp, k) != 0;
            /* The frames stay in the buffer: the main thread reads them in the next epoch. */
            while ((f = shrink__frame_at(pp, k, off, shrink__frame_max(s), &len)) != NULL &&
                   f != pp->rbuf[k] + off) {
                off += 4 + len;
                if (sk_gives_up(s, f, len)) {
                    uint32_t epoch = get32(f + 1 + CHORUS_AGREE_EPOCH_AT);
                    if (epoch > s->seen_epoch) s->seen_epoch = epoch;
                    chorus__stop_request(&s->stop);
                }
            }
            if (ended && !dead[p]) {
                CHORUS_INFO("shrink", "rank %d: survivor %d went while the new comm formed",
                            s->me, p);
                chorus__stop_request(&s->stop);
            }
            if (ended) pp->dead = 2; /* the main thread closes it (shrink__mark_dead) */
        }
    }
    return NULL;
}

/* Joins the new communicator of the decision; CHORUS_ERR_ABORTED when the watcher stopped
 * it, so that the next epoch begins. */
static chorus_status_t sk_form(shrink_t *s, chorus_comm_t *newcomm_p)
{
    const uint8_t *dead = chorus__agree_dead(s->ag);
    chorus_unique_id_t id;
    size_t len;
    const void *blob = chorus__agree_blob(s->ag, &len);
    int newrank = 0, newsize = 0;
    chorus_status_t status;

    if (len != sizeof id)
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: comm_shrink: the decision carries %zu "
                             "bytes, not a unique id", s->me, len);
    memcpy(&id, blob, sizeof id);
    for (int p = 0; p < s->n; p++) {
        if (dead[p]) continue;
        /* It died after the decision: the rendezvous would wait for it to the deadline
         * (and the watcher, which watches the living, would not stop it). */
        if (s->peers[p].dead || s->peers[p].refused_ns != 0)
            return chorus__error(CHORUS_ERR_ABORTED, "rank %d: comm_shrink: epoch %u: rank %d "
                                 "died after the decision that keeps it", s->me, s->epoch, p);
        if (p < s->me) newrank++;
        newsize++;
    }
    chorus__stop_init(&s->stop);
    atomic_store(&s->watch_stop, 0);
    if (pthread_create(&s->watcher, NULL, sk_watch, s) != 0) {
        chorus__stop_fini(&s->stop);
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: comm_shrink: watcher",
                                   s->me);
    }
    CHORUS_INFO("shrink", "rank %d: epoch %u: joining the new communicator as rank %d of %d",
                s->me, s->epoch, newrank, newsize);
    status = chorus__comm_init_stoppable(newcomm_p, newsize, &id, newrank, &s->stop);
    atomic_store(&s->watch_stop, 1);
    pthread_join(s->watcher, NULL);
    chorus__stop_fini(&s->stop);
    chorus__log_set_rank(s->me);
    for (int p = 0; p < s->n; p++) {
        if (s->peers[p].dead == 2) {
            s->peers[p].dead = 0;
            shrink__mark_dead(s, p);
        }
    }
    return status;
}

/* For tests/fault/test_fault_shrink.sh: CHORUS_TEST_DIE_AFTER_FORM=R kills rank R of the
 * shrinking communicator the moment its first formation succeeded, before the other ranks
 * may have finished theirs: the death that makes a formation complete on some ranks only. */
static void sk_test_die_after_form(const shrink_t *s)
{
    static int fired;

    if (!fired && s->epoch == 0 && chorus__config_int("CHORUS_TEST_DIE_AFTER_FORM", -1) == s->me)
        raise(SIGKILL);
    fired = 1;
}

/* Destroys the communicator this rank formed: the decision did not keep it. */
static void sk_drop_held(shrink_t *s)
{
    char why[256];

    if (s->held == NULL) return;
    /* revoke and destroy clear the thread's error: an error being returned keeps its words */
    snprintf(why, sizeof why, "%s", chorus_last_error());
    (void)chorus_comm_revoke(s->held);
    (void)chorus_comm_destroy(s->held);
    chorus__error_restore(why);
    chorus__log_set_rank(s->me);
    s->held = NULL;
    s->vote = CHORUS_AGREE_NO_VOTE;
}

/* Before returning with the decision: every survivor gets it (chorus__agree_leave), each
 * send done or its peer gone, within SK_AUTH_S. */
static void sk_leave(shrink_t *s)
{
    uint64_t until = chorus__deadline_after(SK_AUTH_S);

    chorus__agree_leave(s->ag);
    if (sk_send_queued(s) != CHORUS_SUCCESS) return;
    for (;;) {
        int pending = 0;
        for (int p = 0; p < s->n; p++) pending |= !s->peers[p].dead && s->peers[p].plen > 0;
        if (!pending || chorus__deadline_passed(until)) return;
        shrink__poll(s, SK_POLL_MS);
    }
}

static void sk_free(shrink_t *s)
{
    if (s->acceptor_running) {
        atomic_store(&s->acceptor_stop, 1);
        pthread_join(s->acceptor, NULL);
        for (int r = 0; r < s->n; r++) {
            if (s->accepted_fd[r] >= 0) close(s->accepted_fd[r]);
        }
        pthread_mutex_destroy(&s->accepted_lock);
    }
    free(s->accepted_fd);
    for (int p = 0; s->peers != NULL && p < s->n; p++) {
        shrink__close_peer(&s->peers[p]);
        for (int k = 0; k < 2; k++) free(s->peers[p].rbuf[k]);
        free(s->peers[p].pend);
    }
    free(s->peers);
    sk_drop_held(s);
    free(s->held_dead);
    free(s->suspect);
    free(s->msg);
    free(s->pfds);
    free(s->who);
    chorus__agree_destroy(s->ag);
}

/* ---- public ---- */

chorus_status_t chorus_comm_revoke(chorus_comm_t comm)
{
    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "comm_revoke: comm is NULL");
    chorus__log_set_rank(comm->rank);
    /* Our own work in flight ends first (nonblocking operations, device calls)... */
    atomic_store(&comm->abort_flag, 1);
    chorus__comm_quiesce(comm);
    pthread_mutex_lock(&comm->err_lock);
    if (atomic_load_explicit(&comm->async_error, memory_order_relaxed) == 0) {
        snprintf(comm->first_error, sizeof comm->first_error,
                 "rank %d: the communicator was revoked", comm->rank);
        atomic_store_explicit(&comm->async_error, (int)CHORUS_ERR_ABORTED, memory_order_release);
    }
    pthread_mutex_unlock(&comm->err_lock);
    /* ...then every peer learns: the arena's failed mark, each transport's goodbye, and the
     * bootstrap ring's end. */
    if (comm->arena != NULL) (void)chorus__arena_fail(comm->arena, CHORUS_ERR_ABORTED);
    for (int t = 0; t < comm->ntps; t++)
        chorus__tp_leave(comm->tps[t].ops, comm->tps[t].tp, CHORUS_ERR_ABORTED);
    chorus__bootstrap_close_ring(comm->bs);
    CHORUS_INFO("core", "rank %d: comm %016llx revoked", comm->rank,
                (unsigned long long)comm->comm_id);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_shrink(chorus_comm_t comm, unsigned flags, chorus_comm_t *newcomm_p)
{
    shrink_t s;
    chorus_status_t status;
    chorus_comm_t newcomm = NULL;
    uint64_t t0 = chorus__now_ns();

    chorus__error_clear();
    if (comm == NULL) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "comm_shrink: comm is NULL");
    if (newcomm_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: comm_shrink: newcomm_p is NULL",
                             comm->rank);
    if (flags != 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: comm_shrink: flags 0x%x (none are defined: pass 0)",
                             comm->rank, flags);
    if (comm->lost != NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: comm_shrink: this communicator was shrunk already; shrink "
                             "the new one", comm->rank);
    (void)chorus_comm_revoke(comm);
    chorus__error_clear();

    memset(&s, 0, sizeof s);
    s.comm = comm;
    s.me = comm->rank;
    s.n = comm->nranks;
    s.acc = chorus__bootstrap_acceptor(comm->bs);
    s.deadline_ns = chorus__deadline_after(comm->timeout_s);
    s.peers = calloc((size_t)s.n, sizeof *s.peers);
    s.suspect = calloc((size_t)s.n, 1);
    s.msg = malloc(chorus__agree_msg_max(s.n));
    s.pfds = calloc((size_t)s.n * 2, sizeof *s.pfds);
    s.who = calloc((size_t)s.n * 2, sizeof *s.who);
    s.held_dead = calloc((size_t)s.n, 1);
    if (s.peers == NULL || s.suspect == NULL || s.msg == NULL || s.acc == NULL ||
        s.pfds == NULL || s.who == NULL || s.held_dead == NULL) {
        status = chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: comm_shrink: %d ranks", s.me, s.n);
        goto out;
    }
    for (int p = 0; p < s.n; p++) s.peers[p].out_fd = s.peers[p].in_fd = -1;
    s.vote = CHORUS_AGREE_NO_VOTE;
    CHORUS_CHECK_GOTO(shrink__acceptor_start(&s), out);
    CHORUS_CHECK_GOTO(sk_start_epoch(&s, 0), out);
    for (;;) {
        const uint8_t *dead;
        const void *blob;
        size_t blob_len;
        uint32_t kept;
        int left = 0;

        CHORUS_CHECK_GOTO(sk_agree(&s), out);
        dead = chorus__agree_dead(s.ag);
        blob = chorus__agree_blob(s.ag, &blob_len);
        if (sk_is_keep(blob, blob_len, &kept)) {
            if (s.held == NULL || kept != s.vote) { /* every survivor voted for it: not us? */
                status = chorus__error(CHORUS_ERR_REMOTE,
                                       "rank %d: comm_shrink: epoch %u: the decision keeps the "
                                       "communicator of epoch %u, which this rank does not hold",
                                       s.me, s.epoch, kept);
                goto out;
            }
            break;
        }
        sk_drop_held(&s); /* a new id: what was formed is not kept */
        for (int p = 0; p < s.n; p++) left += !dead[p];
        /* Alone out of several: every other rank refused us, which is also what a rank sees
         * when the others shrank without it and destroyed the old comm (it was believed
         * dead). Going on alone could be half of a split job: refused. */
        if (left == 1 && s.n > 1) {
            status = chorus__error(CHORUS_ERR_REMOTE,
                                   "rank %d: comm_shrink: no other rank of %d answered: they "
                                   "died, or they shrank without this rank; it does not go on "
                                   "alone (a job of one can chorus_comm_init a comm of its own)",
                                   s.me, s.n);
            goto out;
        }
        status = sk_form(&s, &newcomm);
        if (status == CHORUS_SUCCESS) {
            sk_test_die_after_form(&s);
            s.held = newcomm;
            newcomm = NULL;
            s.vote = s.epoch;
            memcpy(s.held_dead, dead, (size_t)s.n);
        } else {
            if (chorus__deadline_passed(s.deadline_ns)) {
                chorus__error_context(status, "rank %d: comm_shrink: epoch %u: forming the new "
                                      "communicator", s.me, s.epoch);
                goto out;
            }
            CHORUS_INFO("shrink", "rank %d: epoch %u did not form (%s); next epoch", s.me,
                        s.epoch, chorus_last_error());
        }
        CHORUS_CHECK_GOTO(sk_start_epoch(&s, s.seen_epoch > s.epoch ? s.seen_epoch : s.epoch + 1),
                          out);
        for (int p = 0; p < s.n; p++) {
            for (int k = 0; k < 2; k++) shrink__dispatch(&s, p, k);
        }
    }
    sk_leave(&s);
    newcomm = s.held;
    s.held = NULL;
    comm->lost = malloc((size_t)s.n);
    if (comm->lost != NULL) memcpy(comm->lost, chorus__agree_dead(s.ag), (size_t)s.n);
    {
        int nlost = 0;
        for (int p = 0; p < s.n; p++) nlost += chorus__agree_dead(s.ag)[p] != 0;
        CHORUS_INFO("shrink", "rank %d: shrunk to %d ranks (%d lost) in %.1f ms, epoch %u", s.me,
                    s.n - nlost, nlost, (double)(chorus__now_ns() - t0) / 1e6, s.epoch);
    }
    newcomm->repro = comm->repro; /* the survivors' results stay reproducible */
    *newcomm_p = newcomm;
    status = CHORUS_SUCCESS;
out:
    sk_free(&s);
    /* Nothing more comes through this comm's listener: a survivor still in its shrink that
     * tries to reach this rank is refused at once (and has the decision already). */
    if (status == CHORUS_SUCCESS) chorus__bootstrap_close_listener(comm->bs);
    return status;
}

chorus_status_t chorus_comm_failed_ranks(chorus_comm_t comm, int *ranks, int max, int *count_p)
{
    int count = 0;

    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "comm_failed_ranks: comm is NULL");
    if (count_p == NULL || max < 0 || (max > 0 && ranks == NULL))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: comm_failed_ranks: count_p is NULL, or ranks is NULL "
                             "with max %d", comm->rank, max);
    for (int p = 0; comm->lost != NULL && p < comm->nranks; p++) {
        if (!comm->lost[p]) continue;
        if (count < max) ranks[count] = p;
        count++;
    }
    *count_p = count;
    return CHORUS_SUCCESS;
}
