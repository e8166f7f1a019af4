/*
 * The flight recorder (flight.h): a ring of fixed entries per communicator, and its dump as
 * JSON, formatted by hand so that a signal handler may write it (open, write, rename and
 * close are async-signal-safe; nothing here allocates or locks once the ring exists).
 */
#include "core/flight.h"

#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/sigfmt.h"
#include "util/status.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Live comms the signal handlers can dump; more go unrecorded (a diagnosis aid). */
#define FR_SLOTS 256
#define FR_DIR_MAX 512
#define FR_ENTRIES_DEFAULT 256
#define FR_ENTRIES_MAX (1 << 20)

enum { FR_STARTED = 1, FR_DONE = 2, FR_FAILED = 3 };

typedef struct {
    atomic_uint_least64_t seq; /* 0: empty; written last */
    const char *name;
    const char *algo;
    uint64_t count;
    uint64_t t_begin, t_end; /* coarse CLOCK_MONOTONIC ns; t_end 0 while started */
    int32_t root;            /* root or peer, -1: none */
    int16_t dtype, op;       /* -1: none */
    int32_t state;
    int32_t status;
} fr_entry_t;

struct chorus_flight {
    uint64_t comm_id;
    int rank, nranks, slot;
    pid_t pid;
    char host[64];
    uint32_t n;
    uint64_t cur;         /* the seq of the call in flight, 0: none */
    uint64_t last_seq;    /* the newest seq recorded */
    uint64_t dumped_fail; /* the failed seq whose ring was written */
    fr_entry_t e[];
};

static _Atomic(chorus_flight_t *) fr_table[FR_SLOTS];
static pthread_once_t fr_once = PTHREAD_ONCE_INIT;
static long fr_entries;
static char fr_dir[FR_DIR_MAX]; /* CHORUS_FR_DIR, "" when unset */
static atomic_uint_least64_t fr_writes;

static const int fr_fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define FR_NFATAL ((int)(sizeof fr_fatal / sizeof fr_fatal[0]))
static struct sigaction fr_old_fatal[FR_NFATAL], fr_old_usr1;

static void fr_dump_all(const char *reason);

static const char *fr_signal_reason(int sig)
{
    switch (sig) {
    case SIGSEGV: return "signal SIGSEGV";
    case SIGBUS: return "signal SIGBUS";
    case SIGILL: return "signal SIGILL";
    case SIGFPE: return "signal SIGFPE";
    case SIGABRT: return "signal SIGABRT";
    default: return "signal";
    }
}

/* A fatal signal: every comm's ring out, then what would have happened without us. */
static void fr_on_fatal(int sig, siginfo_t *info, void *ctx)
{
    (void)info;
    (void)ctx;
    fr_dump_all(fr_signal_reason(sig));
    for (int i = 0; i < FR_NFATAL; i++) {
        if (fr_fatal[i] == sig) {
            sigaction(sig, &fr_old_fatal[i], NULL);
            break;
        }
    }
    raise(sig); /* delivered once this handler returns: the old action, or the default */
}

static void fr_on_usr1(int sig, siginfo_t *info, void *ctx)
{
    int saved_errno = errno;

    fr_dump_all("SIGUSR1");
    /* A handler the program (or the hang report) had before us still runs. */
    chorus__sig_chain(&fr_old_usr1, sig, info, ctx);
    errno = saved_errno;
}

static void fr_init(void)
{
    const char *dir = chorus__config_str("CHORUS_FR_DIR");
    struct sigaction sa;

    fr_entries = chorus__config_int("CHORUS_FR_ENTRIES", FR_ENTRIES_DEFAULT);
    if (fr_entries < 0) fr_entries = 0;
    if (fr_entries > FR_ENTRIES_MAX) fr_entries = FR_ENTRIES_MAX;
    if (dir == NULL || dir[0] == '\0' || fr_entries == 0) return;
    if (strlen(dir) >= sizeof fr_dir - 64) {
        CHORUS_WARN("core", "CHORUS_FR_DIR is too long (%zu bytes): no flight records",
                    strlen(dir));
        return;
    }
    snprintf(fr_dir, sizeof fr_dir, "%s", dir);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fr_on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < FR_NFATAL; i++)
        if (sigaction(fr_fatal[i], &sa, &fr_old_fatal[i]) != 0)
            CHORUS_WARN("core", "CHORUS_FR_DIR: cannot handle signal %d: %s", fr_fatal[i],
                        strerror(errno));
    sa.sa_sigaction = fr_on_usr1;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    if (sigaction(SIGUSR1, &sa, &fr_old_usr1) != 0)
        CHORUS_WARN("core", "CHORUS_FR_DIR: cannot handle SIGUSR1: %s", strerror(errno));
}

chorus_flight_t *chorus__fr_open(uint64_t comm_id, int rank, int nranks)
{
    chorus_flight_t *fr;

    pthread_once(&fr_once, fr_init);
    if (fr_entries == 0) return NULL;
    fr = calloc(1, sizeof *fr + (size_t)fr_entries * sizeof(fr_entry_t));
    if (fr == NULL) {
        CHORUS_WARN("core", "rank %d: no memory for a flight recorder of %ld entries", rank,
                    fr_entries);
        return NULL;
    }
    fr->comm_id = comm_id;
    fr->rank = rank;
    fr->nranks = nranks;
    fr->pid = getpid();
    fr->n = (uint32_t)fr_entries;
    fr->slot = -1;
    if (gethostname(fr->host, sizeof fr->host - 1) != 0) snprintf(fr->host, sizeof fr->host, "?");
    for (int i = 0; i < FR_SLOTS; i++) {
        chorus_flight_t *expected = NULL;
        if (atomic_compare_exchange_strong(&fr_table[i], &expected, fr)) {
            fr->slot = i;
            break;
        }
    }
    return fr;
}

void chorus__fr_close(chorus_flight_t *fr)
{
    if (fr == NULL) return;
    /* A handler that loaded the pointer just before may still read it: the ring is the
     * last thing a comm frees, and a dump in that instant is a diagnosis aid lost. */
    if (fr->slot >= 0) atomic_store(&fr_table[fr->slot], (chorus_flight_t *)NULL);
    free(fr);
}

static fr_entry_t *fr_entry(chorus_flight_t *fr, uint64_t seq)
{
    return &fr->e[seq % fr->n];
}

void chorus__fr_begin(chorus_flight_t *fr, const char *name, uint64_t seq, uint64_t now)
{
    fr_entry_t *e;

    if (fr == NULL || seq == 0) return;
    if (fr->cur != 0) {
        fr_entry_t *prev = fr_entry(fr, fr->cur);
        if (prev->state == FR_STARTED) {
            prev->state = FR_DONE;
            prev->t_end = now;
        }
    }
    e = fr_entry(fr, seq);
    atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
    e->name = name;
    e->algo = NULL;
    e->count = 0;
    e->root = -1;
    e->dtype = -1;
    e->op = -1;
    e->state = FR_STARTED;
    e->status = CHORUS_SUCCESS;
    e->t_begin = now;
    e->t_end = 0;
    atomic_store_explicit(&e->seq, seq, memory_order_release);
    fr->cur = seq;
    fr->last_seq = seq;
}

void chorus__fr_note(chorus_flight_t *fr, uint64_t count, chorus_dtype_t dtype, chorus_op_t op,
                     int root, const char *algo)
{
    fr_entry_t *e;

    if (fr == NULL || fr->cur == 0) return;
    e = fr_entry(fr, fr->cur);
    e->count = count;
    e->dtype = (int16_t)dtype;
    e->op = (int16_t)op;
    e->root = root;
    e->algo = algo;
}

void chorus__fr_end(chorus_flight_t *fr, chorus_status_t status)
{
    fr_entry_t *e;
    uint64_t seq;

    if (fr == NULL || fr->cur == 0) return;
    seq = fr->cur;
    e = fr_entry(fr, seq);
    e->status = status;
    e->t_end = chorus__now_coarse_ns();
    e->state = status == CHORUS_SUCCESS ? FR_DONE : FR_FAILED;
    fr->cur = 0;
    if (status != CHORUS_SUCCESS && fr_dir[0] != '\0' && fr->dumped_fail != seq) {
        fr->dumped_fail = seq;
        (void)chorus__fr_dump(fr, NULL, status == CHORUS_ERR_TIMEOUT ? "timeout" : "error");
    }
}

/* ---- the dump ---- */

static const char *fr_state_name(int32_t state)
{
    switch (state) {
    case FR_STARTED: return "started";
    case FR_DONE: return "done";
    case FR_FAILED: return "failed";
    default: return "?";
    }
}

static void fr_key_u64(chorus_sigfmt_t *f, const char *key, uint64_t v)
{
    chorus__sigfmt_str(f, key);
    chorus__sigfmt_u64(f, v);
}

static void fr_key_i64(chorus_sigfmt_t *f, const char *key, int64_t v)
{
    chorus__sigfmt_str(f, key);
    chorus__sigfmt_i64(f, v);
}

static void fr_key_str(chorus_sigfmt_t *f, const char *key, const char *v)
{
    chorus__sigfmt_str(f, key);
    if (v == NULL) chorus__sigfmt_str(f, "null");
    else chorus__sigfmt_json_str(f, v);
}

/* One entry as a JSON object, into f (a fresh line buffer). */
static void fr_put_entry(chorus_sigfmt_t *f, const fr_entry_t *e, uint64_t seq)
{
    fr_key_u64(f, "{\"seq\": ", seq);
    fr_key_str(f, ", \"op\": ", e->name);
    fr_key_u64(f, ", \"count\": ", e->count);
    fr_key_str(f, ", \"dtype\": ", e->dtype >= 0 ? chorus_dtype_name((chorus_dtype_t)e->dtype) : NULL);
    fr_key_str(f, ", \"redop\": ", e->op >= 0 ? chorus_op_name((chorus_op_t)e->op) : NULL);
    fr_key_i64(f, ", \"root\": ", e->root);
    fr_key_str(f, ", \"algo\": ", e->algo);
    fr_key_str(f, ", \"state\": ", fr_state_name(e->state));
    fr_key_str(f, ", \"status\": ", chorus_status_string((chorus_status_t)e->status));
    fr_key_u64(f, ", \"begin_ns\": ", e->t_begin);
    fr_key_u64(f, ", \"end_ns\": ", e->t_end);
    chorus__sigfmt_str(f, "}");
}

/* The ring as JSON into fd: the comm, the dump's reason and clocks, then the entries in
 * sequence order. Async-signal-safe. */
static int fr_write(int fd, const chorus_flight_t *fr, const char *reason)
{
    char buf[1024];
    chorus_sigfmt_t f = {buf, sizeof buf, 0};
    struct timespec wall = {0, 0};
    uint64_t oldest, newest = fr->last_seq;
    int first = 1, rc = 0;

    clock_gettime(CLOCK_REALTIME, &wall);
    chorus__sigfmt_str(&f, "{\"chorus_flight_record\": 1, \"comm\": \"");
    chorus__sigfmt_hex64(&f, fr->comm_id);
    fr_key_i64(&f, "\", \"rank\": ", fr->rank);
    fr_key_i64(&f, ", \"nranks\": ", fr->nranks);
    fr_key_str(&f, ", \"host\": ", fr->host);
    fr_key_i64(&f, ", \"pid\": ", (int64_t)fr->pid);
    fr_key_str(&f, ", \"reason\": ", reason);
    fr_key_u64(&f, ", \"in_flight\": ", fr->cur);
    fr_key_u64(&f, ", \"newest\": ", newest);
    fr_key_u64(&f, ", \"entries_kept\": ", fr->n);
    fr_key_u64(&f, ",\n \"dumped_mono_ns\": ", chorus__now_coarse_ns());
    fr_key_u64(&f, ", \"dumped_wall_ns\": ", (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec);
    chorus__sigfmt_str(&f, ",\n \"entries\": [");
    rc |= chorus__sigfmt_write(fd, &f);
    oldest = newest >= fr->n ? newest - fr->n + 1 : 1;
    for (uint64_t seq = oldest; newest != 0 && seq <= newest; seq++) {
        const fr_entry_t *e = &fr->e[seq % fr->n];
        if (atomic_load_explicit(&e->seq, memory_order_acquire) != seq) continue;
        f.len = 0;
        chorus__sigfmt_str(&f, first ? "\n  " : ",\n  ");
        fr_put_entry(&f, e, seq);
        rc |= chorus__sigfmt_write(fd, &f);
        first = 0;
    }
    f.len = 0;
    chorus__sigfmt_str(&f, "\n]}\n");
    rc |= chorus__sigfmt_write(fd, &f);
    return rc;
}

/* DIR/chorus-fr.<comm id>.<rank>.json, written beside under a temporary name and renamed,
 * so that a reader never sees half a file. */
static int fr_write_file(const chorus_flight_t *fr, const char *dir, const char *reason)
{
    char path[FR_DIR_MAX + 96], tmp[FR_DIR_MAX + 112];
    chorus_sigfmt_t p = {path, sizeof path, 0}, t = {tmp, sizeof tmp, 0};
    int fd, rc;

    chorus__sigfmt_str(&p, dir);
    chorus__sigfmt_str(&p, "/chorus-fr.");
    chorus__sigfmt_hex64(&p, fr->comm_id);
    chorus__sigfmt_str(&p, ".");
    chorus__sigfmt_u64(&p, (uint64_t)(fr->rank < 0 ? 0 : fr->rank));
    chorus__sigfmt_str(&p, ".json");
    path[p.len] = '\0';
    chorus__sigfmt_str(&t, path);
    /* A name of its own per write: a signal's dump may interrupt another one. */
    chorus__sigfmt_str(&t, ".tmp.");
    chorus__sigfmt_u64(&t, (uint64_t)fr->pid);
    chorus__sigfmt_str(&t, ".");
    chorus__sigfmt_u64(&t, atomic_fetch_add(&fr_writes, 1));
    tmp[t.len] = '\0';
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    rc = fr_write(fd, fr, reason);
    if (close(fd) != 0) rc = -1;
    if (rc == 0 && rename(tmp, path) != 0) rc = -1;
    if (rc != 0) unlink(tmp);
    return rc;
}

static void fr_dump_all(const char *reason)
{
    if (fr_dir[0] == '\0') return;
    for (int i = 0; i < FR_SLOTS; i++) {
        chorus_flight_t *fr = atomic_load(&fr_table[i]);
        if (fr != NULL) (void)fr_write_file(fr, fr_dir, reason);
    }
}

chorus_status_t chorus__fr_dump(chorus_flight_t *fr, const char *dir, const char *reason)
{
    if (fr == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "the flight recorder is off "
                                                          "(CHORUS_FR_ENTRIES=0)");
    if (dir == NULL) dir = fr_dir;
    if (dir[0] == '\0')
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: no directory for the flight "
                             "record (CHORUS_FR_DIR is unset)", fr->rank);
    if (strlen(dir) >= FR_DIR_MAX)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: flight record directory "
                             "too long (%zu bytes)", fr->rank, strlen(dir));
    if (fr_write_file(fr, dir, reason) != 0)
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: writing the flight "
                                   "record into %s", fr->rank, dir);
    return CHORUS_SUCCESS;
}
