/*
 * The hang report (hang.h). A fixed table of slots, one per live communicator, holds what
 * the report needs as atomics: the SIGUSR1 handler may only read memory and call write(),
 * so it formats its lines by hand from the table and never takes a lock.
 */
#include "core/hang.h"

#include "core/comm.h"
#include "core/engine.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/sigfmt.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* More live communicators than this go unreported (the report is a diagnosis aid). */
#define HANG_SLOTS 256
#define HANG_LINE_MAX 1024

typedef struct {
    atomic_int used;                 /* claimed by a comm */
    atomic_uint_least64_t comm_id;   /* 0 while being set up or torn down */
    atomic_int rank;
    atomic_int nranks;
    _Atomic(const char *) name;      /* of the call in flight, or of the last one */
    atomic_uint_least64_t seq;       /* the call in flight; 0: idle */
    atomic_uint_least64_t last_done; /* the last call that returned */
    atomic_uint_least64_t since_ns;  /* when the call in flight started (coarse clock) */
    atomic_uint_least64_t reported;  /* the seq whose timeout line was written */
} hang_slot_t;

static hang_slot_t hang_slots[HANG_SLOTS];
static pthread_once_t hang_once = PTHREAD_ONCE_INIT;
static int hang_level;
static struct sigaction hang_old_action;

/* ---- lines, formatted without stdio (async-signal-safe: util/sigfmt.h) ---- */

typedef struct {
    char buf[HANG_LINE_MAX];
    chorus_sigfmt_t f;
} hang_line_t;

static void line_init(hang_line_t *l)
{
    /* One byte kept back by sigfmt for the newline, one more for the terminator. */
    l->f = (chorus_sigfmt_t){l->buf, sizeof l->buf - 1, 0};
}

/* The fields every line has, up to and including last_done and since_ms. */
static void put_head(hang_line_t *l, const hang_slot_t *s, const char *state, uint64_t now)
{
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    uint64_t since = atomic_load_explicit(&s->since_ns, memory_order_relaxed);
    int rank = atomic_load_explicit(&s->rank, memory_order_relaxed);

    chorus__sigfmt_str(&l->f, "chorus-hang: rank=");
    chorus__sigfmt_u64(&l->f, rank < 0 ? 0 : (uint64_t)rank);
    chorus__sigfmt_str(&l->f, " nranks=");
    chorus__sigfmt_u64(&l->f, (uint64_t)atomic_load_explicit(&s->nranks, memory_order_relaxed));
    chorus__sigfmt_str(&l->f, " comm=");
    chorus__sigfmt_hex64(&l->f, atomic_load_explicit(&s->comm_id, memory_order_relaxed));
    chorus__sigfmt_str(&l->f, " state=");
    chorus__sigfmt_str(&l->f, state);
    chorus__sigfmt_str(&l->f, " op=");
    chorus__sigfmt_str(&l->f, seq != 0 ? atomic_load_explicit(&s->name, memory_order_relaxed) : "-");
    chorus__sigfmt_str(&l->f, " seq=");
    chorus__sigfmt_u64(&l->f, seq);
    chorus__sigfmt_str(&l->f, " last_done=");
    chorus__sigfmt_u64(&l->f, atomic_load_explicit(&s->last_done, memory_order_relaxed));
    chorus__sigfmt_str(&l->f, " since_ms=");
    chorus__sigfmt_u64(&l->f, seq != 0 && now > since ? (now - since) / 1000000u : 0);
}

static void hang_on_signal(int sig, siginfo_t *info, void *ctx)
{
    int saved_errno = errno;
    uint64_t now = chorus__now_coarse_ns();

    for (int i = 0; i < HANG_SLOTS; i++) {
        hang_slot_t *s = &hang_slots[i];
        hang_line_t l;
        if (!atomic_load_explicit(&s->used, memory_order_acquire) ||
            atomic_load_explicit(&s->comm_id, memory_order_acquire) == 0)
            continue;
        line_init(&l);
        put_head(&l, s, atomic_load_explicit(&s->seq, memory_order_relaxed) ? "inflight" : "idle",
                 now);
        chorus__sigfmt_str(&l.f, " waiting=- :: pid ");
        chorus__sigfmt_u64(&l.f, (uint64_t)getpid());
        l.buf[l.f.len++] = '\n';
        (void)chorus__sigfmt_write(STDERR_FILENO, &l.f);
    }
    /* A handler the program had before us still runs. */
    chorus__sig_chain(&hang_old_action, sig, info, ctx);
    errno = saved_errno;
}

static void hang_init(void)
{
    struct sigaction sa;

    hang_level = (int)chorus__config_int("CHORUS_HANG_REPORT", 1);
    if (hang_level < 2) return;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = hang_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, &hang_old_action) != 0)
        CHORUS_WARN("core", "CHORUS_HANG_REPORT=2: cannot handle SIGUSR1: %s", strerror(errno));
}

static hang_slot_t *hang_slot(const struct chorus_comm *comm)
{
    return comm->hang_slot >= 0 && comm->hang_slot < HANG_SLOTS ? &hang_slots[comm->hang_slot]
                                                                : NULL;
}

void chorus__hang_register(struct chorus_comm *comm)
{
    pthread_once(&hang_once, hang_init);
    comm->hang_slot = -1;
    for (int i = 0; i < HANG_SLOTS; i++) {
        int expected = 0;
        hang_slot_t *s = &hang_slots[i];
        if (!atomic_compare_exchange_strong(&s->used, &expected, 1)) continue;
        atomic_store_explicit(&s->rank, comm->rank, memory_order_relaxed);
        atomic_store_explicit(&s->nranks, comm->nranks, memory_order_relaxed);
        atomic_store_explicit(&s->name, (const char *)NULL, memory_order_relaxed);
        atomic_store_explicit(&s->seq, 0, memory_order_relaxed);
        atomic_store_explicit(&s->last_done, 0, memory_order_relaxed);
        atomic_store_explicit(&s->reported, 0, memory_order_relaxed);
        /* Last: the handler skips the slot until the comm id is there. */
        atomic_store_explicit(&s->comm_id, comm->comm_id ? comm->comm_id : 1, memory_order_release);
        comm->hang_slot = i;
        return;
    }
}

void chorus__hang_unregister(struct chorus_comm *comm)
{
    hang_slot_t *s = hang_slot(comm);

    if (s == NULL) return;
    atomic_store_explicit(&s->comm_id, 0, memory_order_release);
    atomic_store_explicit(&s->used, 0, memory_order_release);
    comm->hang_slot = -1;
}

void chorus__hang_begin(struct chorus_comm *comm, const char *name, uint64_t seq, uint64_t now)
{
    hang_slot_t *s = hang_slot(comm);
    uint64_t prev;

    if (s == NULL) return;
    /* A call that returned without passing through chorus__hang_end (an error before the
     * schedule ran) is over by now. */
    prev = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if (prev != 0) atomic_store_explicit(&s->last_done, prev, memory_order_relaxed);
    atomic_store_explicit(&s->name, name, memory_order_relaxed);
    atomic_store_explicit(&s->since_ns, now, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq, memory_order_release);
}

void chorus__hang_end(struct chorus_comm *comm)
{
    hang_slot_t *s = hang_slot(comm);
    uint64_t seq;

    if (s == NULL) return;
    seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if (seq == 0) return;
    atomic_store_explicit(&s->last_done, seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, 0, memory_order_release);
}

/* "recv:3,send:1": the peers and directions of x's pending transfers, each once, or "-". */
static void put_pending(hang_line_t *l, const chorus_exec_t *x)
{
    int seen_peer[16], seen_send[16], nseen = 0;

    if (x == NULL || x->sched == NULL || x->ninflight == 0) {
        chorus__sigfmt_str(&l->f, "-");
        return;
    }
    for (uint32_t i = 0; i < x->ninflight; i++) {
        const chorus_step_t *st = &x->sched->steps[x->inflight[i]];
        int send = st->kind == CHORUS_STEP_SEND, dup = 0;
        for (int k = 0; k < nseen; k++) dup |= seen_peer[k] == st->peer && seen_send[k] == send;
        if (dup) continue;
        if (nseen == 16) {
            chorus__sigfmt_str(&l->f, ",...");
            break;
        }
        seen_peer[nseen] = st->peer;
        seen_send[nseen++] = send;
        if (nseen > 1) chorus__sigfmt_str(&l->f, ",");
        chorus__sigfmt_str(&l->f, send ? "send:" : "recv:");
        chorus__sigfmt_u64(&l->f, st->peer < 0 ? 0 : (uint64_t)st->peer);
    }
}

void chorus__hang_report_exec(struct chorus_comm *comm, chorus_status_t status,
                              const char *detail, const chorus_exec_t *x)
{
    hang_slot_t *s = hang_slot(comm);
    hang_line_t l;
    uint64_t seq;

    pthread_once(&hang_once, hang_init);
    if (s == NULL || status != CHORUS_ERR_TIMEOUT || hang_level < 1) return;
    seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    /* One line per timed-out call, whichever path reports it first. */
    if (atomic_exchange_explicit(&s->reported, seq, memory_order_relaxed) == seq) return;
    line_init(&l);
    put_head(&l, s, "timeout", chorus__now_coarse_ns());
    chorus__sigfmt_str(&l.f, " waiting=");
    put_pending(&l, x);
    chorus__sigfmt_str(&l.f, " :: ");
    chorus__sigfmt_str(&l.f, detail);
    l.buf[l.f.len] = '\0';
    chorus__log_report(l.buf);
}

void chorus__hang_on_error(struct chorus_comm *comm, chorus_status_t status, const char *detail)
{
    chorus__hang_report_exec(comm, status, detail, NULL);
}
