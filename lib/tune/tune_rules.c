/*
 * Measured decisions: lines of the calibration file that name the algorithm and pipeline
 * chunk to run for one collective and size on communicators of one shape,
 *
 *     rule.<collective>.<transport>.<ranks>x<hosts>.<bytes> = <algorithm> <chunk bytes>
 *     rule.allreduce.tcp.2x1.1048576 = rd 524288
 *
 * written by chorus_tune_record() (chorus-bench calibrate measures every algorithm and
 * records the fastest) and read with the model's parameters. A rule is what Open MPI's
 * dynamic rules file and NCCL's tuner plugins give their users: where the model and the
 * machine disagree, a measurement on the machine decides. The shape is the transport of
 * same-host peers and the numbers of ranks and hosts, because those decide which algorithm
 * wins; a rule of another shape says nothing about this communicator and is skipped.
 */
#include "tune/tune.h"

#include "util/status.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The calibration file is small; more than this is not a file Chorus wrote. */
#define TUNE_FILE_MAX ((size_t)1 << 20)

static const char *const tune_scope_kinds[CHORUS_TUNE_NKINDS] = {"self", "shm", "tcp"};

int chorus__tune_class(uint64_t bytes)
{
    int c = 0;

    while (bytes > 1) {
        bytes >>= 1;
        c++;
    }
    return c;
}

void chorus__tune_scope_format(char *buf, size_t len, int local_kind, int nranks, int nhosts)
{
    if (local_kind < 0 || local_kind >= CHORUS_TUNE_NKINDS) local_kind = CHORUS_TUNE_SELF;
    snprintf(buf, len, "%s.%dx%d", tune_scope_kinds[local_kind], nranks, nhosts);
}

/* The collective named by [name, name + len), or -1. */
static int tune_rule_coll(const char *name, size_t len)
{
    for (int c = 0; c < CHORUS_NUM_COLLS; c++) {
        const char *n = chorus__coll_name((chorus_coll_t)c);
        if (n != NULL && strlen(n) == len && strncmp(n, name, len) == 0) return c;
    }
    return -1;
}

/* A positive integer of at most 2^40 filling the whole of text, or 0. */
static uint64_t tune_rule_number(const char *text)
{
    char *end;
    unsigned long long v;

    if (*text < '0' || *text > '9') return 0;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v > ((uint64_t)1 << 40)) return 0;
    return (uint64_t)v;
}

chorus_status_t chorus__tune_rule_parse(chorus_tune_params_t *p, const char *key, const char *val,
                                        const char *name, int lineno)
{
    const char *coll_end, *size_dot;
    char scope[sizeof p->rule_scope], algo_name[32], chunk_text[32], extra[2];
    uint64_t bytes, chunk;
    int coll, algo;
    size_t scope_len;

    /* key: "rule." coll "." scope "." bytes, where scope itself holds one dot. */
    key += 5;
    coll_end = strchr(key, '.');
    size_dot = strrchr(key, '.');
    if (coll_end == NULL || size_dot == coll_end ||
        (coll = tune_rule_coll(key, (size_t)(coll_end - key))) < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: %s:%d: rule.%.48s: expected "
                             "rule.<collective>.<transport>.<ranks>x<hosts>.<bytes>", name,
                             lineno, key);
    scope_len = (size_t)(size_dot - coll_end - 1);
    bytes = tune_rule_number(size_dot + 1);
    if (scope_len == 0 || scope_len >= sizeof scope || bytes == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: %s:%d: rule.%.48s: bad shape "
                             "or size", name, lineno, key);
    memcpy(scope, coll_end + 1, scope_len);
    scope[scope_len] = '\0';
    /* value: "<algorithm> <chunk bytes>" and nothing else. */
    if (sscanf(val, "%31s %31s %1s", algo_name, chunk_text, extra) != 2 ||
        (algo = chorus__algo_parse(algo_name)) <= CHORUS_ALGO_AUTO ||
        (chunk = tune_rule_number(chunk_text)) == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: %s:%d: rule.%.48s: expected "
                             "\"<algorithm> <chunk bytes>\", got \"%.48s\"", name, lineno, key,
                             val);
    if (p->rule_scope[0] == '\0' || strcmp(scope, p->rule_scope) != 0) return CHORUS_SUCCESS;
    p->rule_algo[coll][chorus__tune_class(bytes)] = (uint8_t)algo;
    p->rule_chunk_log2[coll][chorus__tune_class(bytes)] = (uint8_t)chorus__tune_class(chunk);
    return CHORUS_SUCCESS;
}

int chorus__tune_rule_find(const chorus_tune_params_t *p, chorus_coll_t coll, uint64_t bytes,
                           chorus_algo_t *algo_p, uint64_t *chunk_p)
{
    int c = chorus__tune_class(bytes);

    if ((int)coll < 0 || coll >= CHORUS_NUM_COLLS) return 0;
    /* Nearest first; of two at the same distance, the smaller size. */
    for (int d = 0; d <= 2; d++) {
        for (int side = -1; side <= 1; side += 2) {
            int k = c + side * d;
            if (k < 0 || k >= CHORUS_TUNE_NCLASSES || p->rule_algo[coll][k] == 0) continue;
            *algo_p = (chorus_algo_t)p->rule_algo[coll][k];
            *chunk_p = (uint64_t)1 << p->rule_chunk_log2[coll][k];
            return 1;
        }
    }
    return 0;
}

/* The whole file at path into a new string ("" when it does not exist), or NULL. */
static char *tune_file_read(const char *path, chorus_status_t *status_p)
{
    FILE *f = fopen(path, "r");
    char *text;
    size_t n;

    if (f == NULL && errno == ENOENT) return strdup("");
    if (f == NULL) {
        *status_p = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "tune: cannot read %s", path);
        return NULL;
    }
    text = malloc(TUNE_FILE_MAX + 1);
    if (text == NULL) {
        fclose(f);
        *status_p = chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory for %s", path);
        return NULL;
    }
    n = fread(text, 1, TUNE_FILE_MAX + 1, f);
    fclose(f);
    if (n > TUNE_FILE_MAX) {
        free(text);
        *status_p = chorus__error(CHORUS_ERR_SYSTEM, "tune: %s is larger than %zu bytes", path,
                                  TUNE_FILE_MAX);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* Nonzero if line is "key = ..." for this key (blanks around the key allowed). */
static int tune_line_has_key(const char *line, size_t len, const char *key)
{
    size_t k = strlen(key);

    while (len > 0 && (*line == ' ' || *line == '\t')) {
        line++;
        len--;
    }
    if (len < k || strncmp(line, key, k) != 0) return 0;
    for (line += k, len -= k; len > 0 && (*line == ' ' || *line == '\t'); line++, len--) {
    }
    return len > 0 && *line == '=';
}

/* Creates the file's directory when it is missing (not its parents: those are the user's). */
static void tune_make_dir(const char *path)
{
    char dir[PATH_MAX];
    char *slash;

    snprintf(dir, sizeof dir, "%s", path);
    slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) return;
    *slash = '\0';
    if (mkdir(dir, 0700) != 0 && errno == ENOENT) {
        /* ~/.cache itself may be missing on a fresh account. */
        char *up = strrchr(dir, '/');
        if (up != NULL && up != dir) {
            *up = '\0';
            (void)mkdir(dir, 0700);
            *up = '/';
            (void)mkdir(dir, 0700);
        }
    }
}

chorus_status_t chorus__tune_file_set(const char *path, const char *key, const char *value)
{
    chorus_status_t status = CHORUS_SUCCESS;
    char tmp[PATH_MAX];
    char *old;
    const char *line;
    FILE *out;

    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: path too long: %.64s...", path);
    old = tune_file_read(path, &status);
    if (old == NULL) return status;
    tune_make_dir(path);
    out = fopen(tmp, "w");
    if (out == NULL) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "tune: cannot write %s", tmp);
        goto out;
    }
    if (old[0] == '\0')
        fprintf(out, "# Chorus calibration: cost model parameters and measured decisions "
                     "(chorus-bench calibrate); see lib/tune/tune.h\n");
    for (line = old; *line != '\0';) {
        const char *nl = strchr(line, '\n');
        size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
        if (!tune_line_has_key(line, len, key)) fprintf(out, "%.*s\n", (int)len, line);
        line += len + (nl != NULL);
    }
    fprintf(out, "%s = %s\n", key, value);
    if ((ferror(out) != 0) + (fclose(out) != 0)) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "tune: cannot write %s", tmp);
        (void)unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "tune: cannot replace %s", path);
        (void)unlink(tmp);
    }
out:
    free(old);
    return status;
}
