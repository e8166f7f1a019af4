/*
 * The hang summary (hang.h). A report line reads
 *
 *   chorus-hang: rank=2 nranks=4 comm=<hex> state=timeout op=allreduce seq=17
 *       last_done=16 since_ms=60012 waiting=recv:3,send:1 :: <message>
 *
 * The collective of the first timeout report is the one the summary is about. A rank
 * "arrived" at it when its own report names the same communicator, operation and sequence
 * number (timed out there, or in flight there when asked by SIGUSR1). The ranks that did
 * not arrive are the suspects; when the reports say whom they were waiting for, only the
 * ranks waited for count, because a rank that was stopped before its own deadline did not
 * get to write its line and is not to blame for that.
 */
#include "hang.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HANG_MAX_WAIT 16

typedef struct {
    int valid;
    char comm[20];
    char state[12];
    char op[24];
    unsigned long long seq, last_done, since_ms;
    int nwait;
    int wait_peer[HANG_MAX_WAIT];
    char wait_kind[HANG_MAX_WAIT][5];
} report_t;

static report_t *reports;
static int hang_nranks;
static report_t first; /* the first timeout report: the collective of the summary */
static int first_rank = -1;

int hang_init(int nranks)
{
    reports = calloc((size_t)nranks, sizeof *reports);
    hang_nranks = nranks;
    return reports != NULL ? 0 : -1;
}

/* The value of "key=" in [line, end) copied into out, or "" when absent. */
static void field(const char *line, const char *end, const char *key, char *out, size_t size)
{
    size_t klen = strlen(key), n = 0;
    const char *p = line;

    out[0] = '\0';
    for (; p + klen < end; p++) {
        if ((p == line || p[-1] == ' ') && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            p += klen + 1;
            while (p < end && *p != ' ' && n + 1 < size) out[n++] = *p++;
            out[n] = '\0';
            return;
        }
    }
}

/* "recv:3,send:1" into the report's waiting list. */
static void parse_waiting(const char *text, report_t *r)
{
    const char *p = text;

    r->nwait = 0;
    while (*p != '\0' && r->nwait < HANG_MAX_WAIT) {
        const char *colon = strchr(p, ':');
        if (colon == NULL || colon - p > 4) return;
        memcpy(r->wait_kind[r->nwait], p, (size_t)(colon - p));
        r->wait_kind[r->nwait][colon - p] = '\0';
        r->wait_peer[r->nwait++] = atoi(colon + 1);
        p = strchr(colon, ',');
        if (p == NULL) return;
        p++;
    }
}

int hang_note_line(int rank, const char *line, size_t len)
{
    static const char tag[] = "chorus-hang: ";
    const char *end = line + len, *start, *detail;
    char num[24], waiting[160];
    report_t r;

    if (reports == NULL || rank < 0 || rank >= hang_nranks) return 0;
    start = memmem(line, len, tag, sizeof tag - 1);
    if (start == NULL) return 0;
    detail = memmem(start, (size_t)(end - start), " :: ", 4);
    if (detail != NULL) end = detail;
    memset(&r, 0, sizeof r);
    field(start, end, "comm", r.comm, sizeof r.comm);
    field(start, end, "state", r.state, sizeof r.state);
    field(start, end, "op", r.op, sizeof r.op);
    field(start, end, "seq", num, sizeof num);
    r.seq = strtoull(num, NULL, 10);
    field(start, end, "last_done", num, sizeof num);
    r.last_done = strtoull(num, NULL, 10);
    field(start, end, "since_ms", num, sizeof num);
    r.since_ms = strtoull(num, NULL, 10);
    field(start, end, "waiting", waiting, sizeof waiting);
    if (strcmp(waiting, "-") != 0) parse_waiting(waiting, &r);
    if (r.comm[0] == '\0' || r.state[0] == '\0') return 0;
    r.valid = 1;
    /* A rank's report about the summary's communicator wins over one about another, and
     * its timeout line over the state it reported for the same call when asked. */
    if (!reports[rank].valid || first_rank < 0 || strcmp(r.comm, first.comm) == 0) {
        const report_t *old = &reports[rank];
        if (!(old->valid && strcmp(old->state, "timeout") == 0 && old->seq == r.seq &&
              strcmp(old->comm, r.comm) == 0))
            reports[rank] = r;
    }
    if (first_rank < 0 && strcmp(r.state, "timeout") == 0) {
        first = r;
        first_rank = rank;
        return 1;
    }
    return 0;
}

int hang_seen_timeout(void)
{
    return first_rank >= 0;
}

/* Nonzero if rank r's report shows it inside the summary's collective. */
static int arrived(int r)
{
    const report_t *x = &reports[r];

    return x->valid && strcmp(x->comm, first.comm) == 0 && x->seq == first.seq &&
           strcmp(x->op, first.op) == 0 &&
           (strcmp(x->state, "timeout") == 0 || strcmp(x->state, "inflight") == 0);
}

static void describe(int r)
{
    const report_t *x = &reports[r];

    fprintf(stderr, "chorusrun:   rank %d: ", r);
    if (!x->valid || strcmp(x->comm, first.comm) != 0) {
        fprintf(stderr, "no report\n");
        return;
    }
    if (strcmp(x->state, "idle") == 0) {
        fprintf(stderr, "idle, last completed #%llu\n", x->last_done);
        return;
    }
    fprintf(stderr, "%s in %s #%llu after %.1f s", strcmp(x->state, "timeout") == 0 ? "timed out"
                                                                                  : "waiting",
            x->op, x->seq, (double)x->since_ms / 1000.0);
    for (int i = 0; i < x->nwait; i++)
        fprintf(stderr, "%s%s %d", i == 0 ? ", pending: " : ", ", x->wait_kind[i], x->wait_peer[i]);
    fprintf(stderr, " (last completed #%llu)\n", x->last_done);
}

void hang_summary(void)
{
    int any_waiting = 0, nsuspects = 0;
    char *named;

    if (reports == NULL) return;
    if (first_rank < 0) goto out;
    named = calloc((size_t)hang_nranks, 1);
    if (named == NULL) goto out;
    for (int r = 0; r < hang_nranks; r++) {
        const report_t *x = &reports[r];
        if (!arrived(r)) continue;
        for (int i = 0; i < x->nwait; i++) {
            if (x->wait_peer[i] < 0 || x->wait_peer[i] >= hang_nranks) continue;
            named[x->wait_peer[i]] = 1;
            any_waiting = 1;
        }
    }
    fprintf(stderr, "chorusrun: hang summary: %s #%llu on comm %s timed out (first: rank %d)\n",
            first.op, first.seq, first.comm, first_rank);
    for (int r = 0; r < hang_nranks; r++) describe(r);
    fprintf(stderr, "chorusrun: never arrived at %s #%llu:", first.op, first.seq);
    for (int r = 0; r < hang_nranks; r++) {
        if (arrived(r) || (any_waiting && !named[r])) continue;
        fprintf(stderr, " rank %d", r);
        nsuspects++;
    }
    fprintf(stderr, "%s\n", nsuspects == 0 ? " none found (every rank reported being in it)" : "");
    free(named);
out:
    free(reports);
    reports = NULL;
}
