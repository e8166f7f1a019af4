/*
 * Waiting for the other local ranks. The fast path (arena_int.h) is one acquire load per
 * rank; this file is what happens when someone has not arrived yet.
 *
 * The wait follows the comm's policy: spin for spin_ns (a peer running on another core
 * arrives within microseconds), then sched_yield for yield_ns (with more ranks than cores
 * spin_ns is 0: the rank we wait for may need our core, and a yield costs 1-3 us where
 * waking a sleeper costs ~45 us), then sleep on the segment's futex word. Every wait
 * watches the deadline, the abort flag, the peers' failed flags and, now and then, whether
 * the peers' processes still exist: a dead peer is an error, never a hang.
 */
#include "arena/arena_int.h"

#include "util/clock.h"
#include "util/proc.h"
#include "util/status.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How often a long wait looks for dead peers and for a peer in the same call on the other
 * path (chorus__arena_cross_check). */
#define ARENA_CHECK_NS 20000000ULL
/* Longest single futex sleep, so the abort flag is seen promptly. */
#define ARENA_SLEEP_NS 10000000ULL

void arena__publish(chorus_arena_t *a, uint64_t step)
{
    a->step = step;
    /* A sequentially consistent exchange is the store and the full fence that pairs with
     * the sleeper's (Dekker: either we see its count, or it sees our step before it blocks,
     * so no wake-up is lost) in one locked instruction, cheaper than a store and an mfence
     * on x86. */
    (void)atomic_exchange_explicit(&a->ctl[a->me].seq, step, memory_order_seq_cst);
    if (atomic_load_explicit(&a->hdr->sleepers, memory_order_relaxed) != 0) {
        atomic_fetch_add_explicit(&a->hdr->bell, 1, memory_order_relaxed);
        chorus__futex_wake(&a->hdr->bell, INT_MAX);
    }
}

chorus_status_t arena__fail(chorus_arena_t *a, chorus_status_t status)
{
    if (a->hdr == NULL) return status;
    atomic_store_explicit(&a->ctl[a->me].failed, (int32_t)status, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    atomic_fetch_add_explicit(&a->hdr->bell, 1, memory_order_relaxed);
    chorus__futex_wake(&a->hdr->bell, INT_MAX);
    return status;
}

/* The first local rank in [r, end) that has not published step (end: none). */
static int arena_missing(const chorus_arena_t *a, uint64_t step, int r, int end)
{
    while (r < end && atomic_load_explicit(&a->ctl[r].seq, memory_order_acquire) >= step) r++;
    return r;
}

/* "2, 5, 7": the comm ranks that have not published step. */
static void arena_missing_list(const chorus_arena_t *a, uint64_t step, int first, int end,
                               char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int r = arena_missing(a, step, first, end); r < end && used + 16 < len;
         r = arena_missing(a, step, r + 1, end))
        used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? ", " : "", a->ranks[r]);
}

chorus_status_t arena__peer_failed(const chorus_arena_t *a, int r, int32_t failed,
                                   const char *what)
{
    /* A mismatch found anywhere is every rank's mismatch: the calls did not agree, and the
     * ranks that could not compare learn it from the one that did. */
    if (failed == CHORUS_ERR_MISMATCH)
        return chorus__error(CHORUS_ERR_MISMATCH, "rank %d: arena: %s: rank %d found that the "
                             "ranks' calls differ (its error names both calls)", a->rank, what,
                             a->ranks[r]);
    return chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: %s: rank %d failed (%s)", a->rank,
                         what, a->ranks[r], chorus_status_string((chorus_status_t)failed));
}

/* A peer that will never arrive: it gave up (failed flag) or its process is gone. */
static chorus_status_t arena_check_peers(chorus_arena_t *a, uint64_t step, int first, int end,
                                         int check_pids, const char *what)
{
    for (int r = arena_missing(a, step, first, end); r < end;
         r = arena_missing(a, step, r + 1, end)) {
        int32_t failed = atomic_load_explicit(&a->ctl[r].failed, memory_order_acquire);

        if (failed != 0) return arena__peer_failed(a, r, failed, what);
        if (check_pids && a->pid_check[r] && chorus__pid_dead(a->pids[r]))
            return chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: %s: rank %d (pid %u) died",
                                 a->rank, what, a->ranks[r], a->pids[r]);
    }
    return CHORUS_SUCCESS;
}

/* Blocks on the bell until a publisher rings it or ns pass. */
static void arena_sleep(chorus_arena_t *a, uint64_t step, int first, int end, uint64_t ns)
{
    uint32_t bell;

    atomic_fetch_add_explicit(&a->hdr->sleepers, 1, memory_order_seq_cst);
    bell = atomic_load_explicit(&a->hdr->bell, memory_order_seq_cst);
    if (arena_missing(a, step, first, end) < end) chorus__futex_wait(&a->hdr->bell, bell, ns);
    atomic_fetch_sub_explicit(&a->hdr->sleepers, 1, memory_order_relaxed);
}

void chorus__arena_note_call(chorus_arena_t *a, uint64_t coll_seq, int on_arena,
                             chorus_coll_t coll, uint64_t count, chorus_dtype_t dtype,
                             chorus_op_t op, int root)
{
    arena_ctl_t *c = &a->ctl[a->me];

    atomic_store_explicit(&c->call_seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    c->call_sig.count = count;
    c->call_sig.opno = (uint16_t)coll_seq;
    c->call_sig.root = (uint16_t)root;
    c->call_sig.coll = (uint8_t)coll;
    c->call_sig.dtype = (uint8_t)dtype;
    c->call_sig.op = (uint8_t)op;
    c->call_sig.valid = on_arena ? 1 : 2;
    atomic_store_explicit(&c->call_seq, coll_seq + 1, memory_order_release);
}

chorus_status_t chorus__arena_cross_check(chorus_arena_t *a, const char *what)
{
    const arena_ctl_t *mine = &a->ctl[a->me];
    uint64_t seq = atomic_load_explicit(&mine->call_seq, memory_order_relaxed);
    arena_sig_t ms = mine->call_sig, ps;

    if (seq == 0) return CHORUS_SUCCESS;
    for (int r = 0; r < a->n; r++) {
        const arena_ctl_t *c = &a->ctl[r];
        char ours[128], theirs[128];

        if (r == a->me || atomic_load_explicit(&c->call_seq, memory_order_acquire) != seq)
            continue;
        ps = c->call_sig;
        atomic_thread_fence(memory_order_acquire);
        /* Rewritten meanwhile (the peer moved on): not the same call any more. */
        if (atomic_load_explicit(&c->call_seq, memory_order_relaxed) != seq) continue;
        if (ps.valid == ms.valid || (ps.valid != 1 && ps.valid != 2)) continue;
        arena__sig_text(&ms, ours, sizeof ours);
        arena__sig_text(&ps, theirs, sizeof theirs);
        return chorus__error(CHORUS_ERR_MISMATCH,
                             "rank %d: %s: %s (%s) but rank %d called %s (%s): the calls, or "
                             "the ranks' algorithm settings, differ", a->rank, what, ours,
                             ms.valid == 1 ? "on the shared arena" : "on a schedule",
                             a->ranks[r], theirs,
                             ps.valid == 1 ? "on the shared arena" : "on a schedule");
    }
    return CHORUS_SUCCESS;
}

int chorus__arena_peer_call(const chorus_arena_t *a, int rank, uint64_t *coll_seq_p,
                            chorus_coll_t *coll_p, int *root_p, char *text, size_t len)
{
    for (int r = 0; r < a->n; r++) {
        const arena_ctl_t *c = &a->ctl[r];
        uint64_t seq;
        arena_sig_t sig;

        if (a->ranks[r] != rank || r == a->me) continue;
        seq = atomic_load_explicit(&c->call_seq, memory_order_acquire);
        sig = c->call_sig;
        atomic_thread_fence(memory_order_acquire);
        if (seq == 0 || atomic_load_explicit(&c->call_seq, memory_order_relaxed) != seq) return 0;
        *coll_seq_p = seq - 1;
        *coll_p = (chorus_coll_t)(sig.coll & ~ARENA_SIG_DEVICE);
        *root_p = sig.root;
        arena__sig_text(&sig, text, len);
        return 1;
    }
    return 0;
}

chorus_status_t arena__wait_slow(chorus_arena_t *a, uint64_t step, int first, int end,
                                 const char *what)
{
    uint64_t start = chorus__now_ns(), now = start, next_check = start + ARENA_CHECK_NS;
    uint64_t deadline = a->timeout_s > 0 ? start + (uint64_t)(a->timeout_s * 1e9) : UINT64_MAX;
    uint64_t spin_end = start + a->wait.spin_ns, yield_end = spin_end + a->wait.yield_ns;
    chorus_status_t status;
    char who[256];

    for (;;) {
        first = arena_missing(a, step, first, end);
        if (first == end) return CHORUS_SUCCESS;
        if (a->abort_flag != NULL && atomic_load_explicit(a->abort_flag, memory_order_relaxed))
            return arena__fail(a, chorus__error(CHORUS_ERR_ABORTED, "rank %d: arena: %s: "
                                                "aborted", a->rank, what));
        if (now < spin_end) {
            /* Spin a while between clock reads: they cost more than a poll. */
            for (int i = 0; i < 64 && arena_missing(a, step, first, end) < end; i++) continue;
            now = chorus__now_ns();
            continue;
        }
        status = arena_check_peers(a, step, first, end, now >= next_check, what);
        if (status == CHORUS_SUCCESS && now >= next_check)
            status = chorus__arena_cross_check(a, what);
        if (status != CHORUS_SUCCESS) return arena__fail(a, status);
        if (now >= next_check) next_check = now + ARENA_CHECK_NS;
        if (now >= deadline) {
            arena_missing_list(a, step, first, end, who, sizeof who);
            return arena__fail(a, chorus__error(CHORUS_ERR_TIMEOUT, "rank %d: arena: %s timed "
                               "out after %.1f s waiting for rank(s) %s", a->rank, what,
                               a->timeout_s, who));
        }
        if (now < yield_end) sched_yield();
        else arena_sleep(a, step, first, end, deadline - now < ARENA_SLEEP_NS ? deadline - now
                                                                         : ARENA_SLEEP_NS);
        now = chorus__now_ns();
    }
}
