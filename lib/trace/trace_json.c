/* Chrome trace / Perfetto JSON: the writer and the merger of parts (trace_json.h). */
#include "trace/trace_json.h"

#include "util/status.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TJSON_HEADER "{\"traceEvents\":["
#define TJSON_FOOTER "]}"

static const char *const tev_names[CHORUS_TEV_NKINDS] = {"send", "recv", "reduce",
                                                         "copy", "wait", "call"};

void chorus__tjson_begin(chorus_tjson_t *w, FILE *f, uint64_t origin_us)
{
    w->f = f;
    w->nevents = 0;
    w->next_id = 1;
    w->origin_us = origin_us;
    fputs(TJSON_HEADER "\n", f);
}

/* origin + t microseconds with three decimals, the origin added in integers. */
static void tjson_ts(const chorus_tjson_t *w, const char *key, double t)
{
    uint64_t ns = t > 0 ? (uint64_t)llround(t * 1e3) : 0;
    fprintf(w->f, ",\"%s\":%" PRIu64 ".%03u", key, w->origin_us + ns / 1000, (unsigned)(ns % 1000));
}

/* Every event but the first starts by ending the previous line with a comma. */
static void tjson_sep(chorus_tjson_t *w)
{
    if (w->nevents++ > 0) fputs(",\n", w->f);
}

/* s as a JSON string's contents: names come from the library and tools, but a host name
 * in a label could hold anything. */
static void tjson_str(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

void chorus__tjson_process(chorus_tjson_t *w, int pid, const char *label)
{
    static const char *const threads[] = {"calls", "cpu", "wait"};

    tjson_sep(w);
    fprintf(w->f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"", pid);
    tjson_str(w->f, label);
    fputs("\"}}", w->f);
    tjson_sep(w);
    fprintf(w->f,
            "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\","
            "\"args\":{\"sort_index\":%d}}",
            pid, pid);
    for (int t = 0; t < 3; t++) {
        tjson_sep(w);
        fprintf(w->f,
                "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
                "\"args\":{\"name\":\"%s\"}}",
                pid, t, threads[t]);
    }
}

void chorus__tjson_event(chorus_tjson_t *w, int pid, const chorus_tev_t *e)
{
    const char *kind = e->kind < CHORUS_TEV_NKINDS ? tev_names[e->kind] : "?";
    double dur = e->t1_us > e->t0_us ? e->t1_us - e->t0_us : 0;

    switch (e->kind) {
    case CHORUS_TEV_SEND:
    case CHORUS_TEV_RECV: {
        /* Async slices: a rank has many messages in flight, which complete in any order. */
        uint64_t id = w->next_id++;
        const char *dir = e->kind == CHORUS_TEV_SEND ? "send to" : "recv from";
        tjson_sep(w);
        fprintf(w->f, "{\"ph\":\"b\",\"pid\":%d,\"tid\":0", pid);
        tjson_ts(w, "ts", e->t0_us);
        fprintf(w->f,
                ",\"cat\":\"%s\",\"name\":\"%s %d\",\"id2\":{\"local\":\"0x%" PRIx64 "\"},"
                "\"args\":{\"bytes\":%" PRIu64 ",\"peer\":%d}}",
                kind, dir, (int)e->peer, id, e->bytes, (int)e->peer);
        tjson_sep(w);
        fprintf(w->f, "{\"ph\":\"e\",\"pid\":%d,\"tid\":0", pid);
        tjson_ts(w, "ts", e->t1_us);
        fprintf(w->f, ",\"cat\":\"%s\",\"name\":\"%s %d\",\"id2\":{\"local\":\"0x%" PRIx64 "\"}}",
                kind, dir, (int)e->peer, id);
        return;
    }
    case CHORUS_TEV_CALL:
        tjson_sep(w);
        fprintf(w->f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":0", pid);
        tjson_ts(w, "ts", e->t0_us);
        fprintf(w->f, ",\"dur\":%.3f,\"cat\":\"call\",\"name\":\"", dur);
        tjson_str(w->f, e->name != NULL ? e->name : "call");
        fprintf(w->f, "\",\"args\":{\"bytes\":%" PRIu64 ",\"algo\":\"", e->bytes);
        tjson_str(w->f, e->algo != NULL ? e->algo : "");
        fputs("\"}}", w->f);
        return;
    default:
        tjson_sep(w);
        fprintf(w->f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d", pid,
                e->kind == CHORUS_TEV_WAIT ? 2 : 1);
        tjson_ts(w, "ts", e->t0_us);
        fprintf(w->f,
                ",\"dur\":%.3f,\"cat\":\"%s\",\"name\":\"%s\",\"args\":{\"bytes\":%" PRIu64 "}}",
                dur, kind, kind, e->bytes);
        return;
    }
}

int chorus__tjson_end(chorus_tjson_t *w, const char *source, const char *details)
{
    tjson_sep(w);
    fprintf(w->f, "{\"ph\":\"M\",\"pid\":0,\"name\":\"chorus\",\"args\":{\"source\":\"%s\"%s%s}}",
            source, details != NULL ? "," : "", details != NULL ? details : "");
    fputs("\n" TJSON_FOOTER "\n", w->f);
    return fflush(w->f) == 0 && !ferror(w->f) ? 0 : -1;
}

/* ---- Merging ---- */

typedef struct {
    char **lines; /* the event lines of the part, without their trailing comma */
    size_t n;
} tjson_part_t;

static void part_free(tjson_part_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->lines[i]);
    free(p->lines);
    p->lines = NULL;
    p->n = 0;
}

static void chomp(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    if (n > 0 && s[n - 1] == ',') s[n - 1] = '\0';
}

static chorus_status_t part_read(const char *path, tjson_part_t *p)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0, capl = 0;
    ssize_t len;
    int first = 1, closed = 0;
    chorus_status_t st = CHORUS_SUCCESS;

    memset(p, 0, sizeof *p);
    if (f == NULL)
        return chorus__error(CHORUS_ERR_SYSTEM, "trace merge: %s: %s", path, strerror(errno));
    while ((len = getline(&line, &cap, f)) >= 0) {
        chomp(line);
        if (first) {
            first = 0;
            if (strcmp(line, TJSON_HEADER) != 0) break;
            continue;
        }
        if (closed) {
            closed = 0; /* something after the footer: not a part */
            break;
        }
        if (strcmp(line, TJSON_FOOTER) == 0) {
            closed = 1;
            continue;
        }
        if (p->n == capl) {
            size_t c = capl ? 2 * capl : 1024;
            char **v = realloc(p->lines, c * sizeof *v);
            if (v == NULL) {
                st = chorus__error(CHORUS_ERR_NO_MEMORY, "trace merge: no memory for %s", path);
                goto out;
            }
            p->lines = v;
            capl = c;
        }
        p->lines[p->n] = strdup(line);
        if (p->lines[p->n] == NULL) {
            st = chorus__error(CHORUS_ERR_NO_MEMORY, "trace merge: no memory for %s", path);
            goto out;
        }
        p->n++;
    }
    if (!closed)
        st = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                           "trace merge: %s is not a Chorus trace (header, one event per line, "
                           "\"]}\" last)",
                           path);
out:
    free(line);
    fclose(f);
    if (st != CHORUS_SUCCESS) part_free(p);
    return st;
}

/* The "ts" of an event line: its whole microseconds, and where its digits are. */
static int line_ts(const char *line, uint64_t *us_p, const char **begin_p, const char **end_p)
{
    const char *t = strstr(line, "\"ts\":");
    char *end;

    if (t == NULL) return 0;
    t += 5;
    errno = 0;
    *us_p = strtoull(t, &end, 10);
    if (end == t || errno != 0) return 0;
    *begin_p = t;
    *end_p = end; /* the fraction, if any, stays as written */
    return 1;
}

chorus_status_t chorus__tjson_merge(const char *out, const char *const *paths, int nparts)
{
    tjson_part_t *parts = calloc((size_t)(nparts > 0 ? nparts : 1), sizeof *parts);
    uint64_t base = UINT64_MAX, us;
    const char *b, *e;
    chorus_status_t st = CHORUS_SUCCESS;
    FILE *f = NULL;
    uint64_t nev = 0;
    char tmp[4200];

    if (parts == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "trace merge: no memory");
    for (int k = 0; k < nparts && st == CHORUS_SUCCESS; k++) {
        st = part_read(paths[k], &parts[k]);
        for (size_t i = 0; st == CHORUS_SUCCESS && i < parts[k].n; i++)
            if (line_ts(parts[k].lines[i], &us, &b, &e) && us < base) base = us;
    }
    if (st != CHORUS_SUCCESS) goto out;
    if (base == UINT64_MAX) base = 0;
    /* Written aside and renamed, so that a reader never sees half a file. */
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", out, (long)getpid());
    f = fopen(tmp, "w");
    if (f == NULL) {
        st = chorus__error(CHORUS_ERR_SYSTEM, "trace merge: %s: %s", tmp, strerror(errno));
        goto out;
    }
    fputs(TJSON_HEADER "\n", f);
    for (int k = 0; k < nparts; k++)
        for (size_t i = 0; i < parts[k].n; i++) {
            const char *line = parts[k].lines[i];
            if (nev++ > 0) fputs(",\n", f);
            if (line_ts(line, &us, &b, &e)) {
                fwrite(line, 1, (size_t)(b - line), f);
                fprintf(f, "%" PRIu64 "%s", us - base, e);
            } else {
                fputs(line, f);
            }
        }
    fprintf(f,
            "%s{\"ph\":\"M\",\"pid\":0,\"name\":\"chorus_merge\",\"args\":{\"parts\":%d,"
            "\"origin_us\":%" PRIu64 "}}\n" TJSON_FOOTER "\n",
            nev > 0 ? ",\n" : "", nparts, base);
    if (fclose(f) != 0 || rename(tmp, out) != 0) {
        st = chorus__error(CHORUS_ERR_SYSTEM, "trace merge: writing %s: %s", out, strerror(errno));
        unlink(tmp);
    }
out:
    for (int k = 0; k < nparts; k++)
        part_free(&parts[k]);
    free(parts);
    return st;
}
