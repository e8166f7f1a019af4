/* The recorder behind CHORUS_TRACE (trace.h). */
#include "trace/trace.h"

#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint64_t t0, t1, bytes;
    int32_t peer;
    uint32_t name; /* CALL: offset of "what\0algo\0" in the name pool */
    uint8_t kind;
} trace_rec_t;

struct chorus_trace {
    char out[4096];  /* the merged file */
    char stem[4096]; /* out.<comm id>: parts are stem.<rank>, the tally stem.done */
    int rank, nranks;
    char host[256];
    uint64_t mono0; /* chorus__now_ns() and the wall clock read together */
    uint64_t real0_ns;
    trace_rec_t *rec;
    size_t n, cap, max;
    uint64_t dropped;
    char *pool;
    size_t npool, cappool;
};

/* Traced communicators opened by this process: the first writes FILE itself. */
static atomic_int trace_opened;

chorus_trace_t *chorus__trace_open(uint64_t comm_id, int rank, int nranks)
{
    const char *file = chorus__config_str("CHORUS_TRACE");
    chorus_trace_t *t;
    struct timespec ts;
    int nth;

    if (file == NULL || file[0] == '\0') return NULL;
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        CHORUS_WARN("trace", "no memory for the CHORUS_TRACE recorder: tracing is off");
        return NULL;
    }
    nth = atomic_fetch_add(&trace_opened, 1);
    if (nth == 0)
        snprintf(t->out, sizeof t->out, "%s", file);
    else
        snprintf(t->out, sizeof t->out, "%s.%016" PRIx64, file, comm_id);
    snprintf(t->stem, sizeof t->stem, "%s.%016" PRIx64, file, comm_id);
    t->rank = rank;
    t->nranks = nranks;
    if (gethostname(t->host, sizeof t->host - 1) != 0) snprintf(t->host, sizeof t->host, "?");
    t->max = (size_t)chorus__config_int("CHORUS_TRACE_MAX", 1000000);
    clock_gettime(CLOCK_REALTIME, &ts);
    t->mono0 = chorus__now_ns();
    t->real0_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return t;
}

static trace_rec_t *trace_slot(chorus_trace_t *t)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        trace_rec_t *v;
        if (cap > t->max) cap = t->max;
        if (t->n >= cap) {
            if (t->dropped++ == 0)
                CHORUS_WARN("trace",
                            "rank %d: CHORUS_TRACE_MAX (%zu events) reached; later "
                            "events are dropped",
                            t->rank, t->max);
            return NULL;
        }
        v = realloc(t->rec, cap * sizeof *v);
        if (v == NULL) {
            t->dropped++;
            return NULL;
        }
        t->rec = v;
        t->cap = cap;
    }
    return &t->rec[t->n++];
}

void chorus__trace_add(chorus_trace_t *t, int kind, int peer, uint64_t bytes, uint64_t t0_ns,
                       uint64_t t1_ns)
{
    trace_rec_t *r = trace_slot(t);
    if (r == NULL) return;
    r->t0 = t0_ns;
    r->t1 = t1_ns;
    r->bytes = bytes;
    r->peer = peer;
    r->name = 0;
    r->kind = (uint8_t)kind;
}

void chorus__trace_call(chorus_trace_t *t, const char *what, const char *algo, uint64_t bytes,
                        uint64_t t0_ns, uint64_t t1_ns)
{
    size_t lw = strlen(what) + 1, la = strlen(algo != NULL ? algo : "") + 1;
    trace_rec_t *r;

    if (t->npool + lw + la > t->cappool) {
        size_t cap = t->cappool ? 2 * t->cappool : 65536;
        char *p;
        while (cap < t->npool + lw + la)
            cap *= 2;
        p = realloc(t->pool, cap);
        if (p == NULL) {
            t->dropped++;
            return;
        }
        t->pool = p;
        t->cappool = cap;
    }
    r = trace_slot(t);
    if (r == NULL) return;
    r->t0 = t0_ns;
    r->t1 = t1_ns;
    r->bytes = bytes;
    r->peer = -1;
    r->name = (uint32_t)t->npool;
    r->kind = CHORUS_TEV_CALL;
    memcpy(t->pool + t->npool, what, lw);
    memcpy(t->pool + t->npool + lw, algo != NULL ? algo : "", la);
    t->npool += lw + la;
}

/* Microseconds past the writer's origin, the wall clock's whole microseconds at open: the
 * wall clock, so that the ranks of one machine line up exactly and those of several as
 * well as their clocks agree. */
static double trace_us(const chorus_trace_t *t, uint64_t mono)
{
    return (double)(t->real0_ns % 1000 + (mono - t->mono0)) * 1e-3;
}

static int trace_write_part(chorus_trace_t *t, const char *path)
{
    FILE *f = fopen(path, "w");
    chorus_tjson_t w;
    char label[384], details[128];
    int rc;

    if (f == NULL) return -1;
    chorus__tjson_begin(&w, f, t->real0_ns / 1000);
    snprintf(label, sizeof label, "rank %d of %d on %s", t->rank, t->nranks, t->host);
    chorus__tjson_process(&w, t->rank, label);
    for (size_t i = 0; i < t->n; i++) {
        const trace_rec_t *r = &t->rec[i];
        chorus_tev_t e = {
            trace_us(t, r->t0), trace_us(t, r->t1), r->bytes, r->peer, r->kind, NULL, NULL};
        if (r->kind == CHORUS_TEV_CALL) {
            e.name = t->pool + r->name;
            e.algo = e.name + strlen(e.name) + 1;
        }
        chorus__tjson_event(&w, t->rank, &e);
    }
    snprintf(details, sizeof details, "\"rank\":%d,\"nranks\":%d,\"dropped\":%" PRIu64, t->rank,
             t->nranks, t->dropped);
    rc = chorus__tjson_end(&w, "run", details);
    return fclose(f) == 0 && rc == 0 ? 0 : -1;
}

/* Adds this rank to the tally of written parts; the one that completes it merges. */
static void trace_tally(chorus_trace_t *t)
{
    char done[4200], line[32];
    int fd, count = 0;
    FILE *f;

    snprintf(done, sizeof done, "%s.done", t->stem);
    fd = open(done, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        CHORUS_WARN("trace", "rank %d: %s: %s; the parts stay unmerged", t->rank, done,
                    strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    snprintf(line, sizeof line, "%d\n", t->rank);
    if (write(fd, line, strlen(line)) != (ssize_t)strlen(line)) goto out;
    f = fopen(done, "r");
    if (f == NULL) goto out;
    while (fgets(line, sizeof line, f) != NULL)
        count++;
    fclose(f);
    if (count == t->nranks) {
        char **paths = calloc((size_t)t->nranks, sizeof *paths);
        int ok = paths != NULL;
        for (int r = 0; ok && r < t->nranks; r++) {
            paths[r] = malloc(4200);
            if (paths[r] == NULL)
                ok = 0;
            else
                snprintf(paths[r], 4200, "%s.%d", t->stem, r);
        }
        if (ok &&
            chorus__tjson_merge(t->out, (const char *const *)paths, t->nranks) == CHORUS_SUCCESS) {
            for (int r = 0; r < t->nranks; r++)
                unlink(paths[r]);
            unlink(done);
            CHORUS_INFO("trace", "rank %d: merged %d parts into %s", t->rank, t->nranks, t->out);
        } else {
            CHORUS_WARN("trace", "rank %d: merging %s.*: %s", t->rank, t->stem,
                        ok ? chorus_last_error() : "no memory");
        }
        for (int r = 0; paths != NULL && r < t->nranks; r++)
            free(paths[r]);
        free(paths);
    }
out:
    flock(fd, LOCK_UN);
    close(fd);
}

void chorus__trace_close(chorus_trace_t *t)
{
    char part[4200];

    if (t == NULL) return;
    snprintf(part, sizeof part, "%s.%d", t->stem, t->rank);
    if (trace_write_part(t, part) != 0)
        CHORUS_WARN("trace", "rank %d: writing %s: %s", t->rank, part, strerror(errno));
    else
        trace_tally(t);
    free(t->rec);
    free(t->pool);
    free(t);
}
