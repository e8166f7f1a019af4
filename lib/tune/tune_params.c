/*
 * The model's parameters: built-in defaults, the calibration file (key = value text) and
 * the quick measurement of the local copy and reduce rates.
 */
#include "tune/tune.h"

#include "kernels.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/status.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const tune_kind_names[CHORUS_TUNE_NKINDS] = {"self", "shm", "tcp"};
static const char *const tune_corr_rows[2] = {"shm", "tcp"};

void chorus__tune_params_default(chorus_tune_params_t *p)
{
    memset(p, 0, sizeof *p);
    /* Fitted by hand against chorus-bench --algo all at 2, 4 and 8 ranks on the 2-core
     * development machine; chorus-bench calibrate records measured decisions on top. */
    p->alpha_us[CHORUS_TUNE_SELF] = 0.05;
    p->alpha_us[CHORUS_TUNE_SHM] = 1.0;
    p->alpha_us[CHORUS_TUNE_TCP] = 12.0;
    p->send_ns[CHORUS_TUNE_SELF] = 0.0;
    p->send_ns[CHORUS_TUNE_SHM] = 0.12;
    p->send_ns[CHORUS_TUNE_TCP] = 0.25;
    p->recv_ns[CHORUS_TUNE_SHM] = 0.12;
    p->recv_ns[CHORUS_TUNE_TCP] = 0.25;
    p->copy_ns = 0.12;
    p->reduce_ns = 0.15;
    p->raw_copy_ns = 0.024;
    p->raw_reduce_ns = 0.065;
    p->step_us = 0.2;
    p->switch_us = 1.0;
    p->sync_us = 0.5;
    p->llc_mb = 32.0;
    p->dram_factor = 2.0;
    p->cores = 0;
    for (int r = 0; r < 2; r++)
        for (int a = 0; a < CHORUS_NUM_ALGOS; a++)
            p->corr[r][a] = 1.0;
}

/* The address of the parameter a key names, or NULL. */
static double *tune_param_slot(chorus_tune_params_t *p, const char *key)
{
    static const struct {
        const char *name;
        size_t off;
    } scalars[] = {
        {"copy_ns", offsetof(chorus_tune_params_t, copy_ns)},
        {"reduce_ns", offsetof(chorus_tune_params_t, reduce_ns)},
        {"raw_copy_ns", offsetof(chorus_tune_params_t, raw_copy_ns)},
        {"raw_reduce_ns", offsetof(chorus_tune_params_t, raw_reduce_ns)},
        {"step_us", offsetof(chorus_tune_params_t, step_us)},
        {"switch_us", offsetof(chorus_tune_params_t, switch_us)},
        {"sync_us", offsetof(chorus_tune_params_t, sync_us)},
        {"llc_mb", offsetof(chorus_tune_params_t, llc_mb)},
        {"dram_factor", offsetof(chorus_tune_params_t, dram_factor)},
    };
    const char *dot = strchr(key, '.');

    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++)
        if (strcmp(key, scalars[i].name) == 0) return (double *)((char *)p + scalars[i].off);
    if (dot == NULL) return NULL;
    for (int k = 0; k < CHORUS_TUNE_NKINDS; k++) {
        size_t n = strlen(tune_kind_names[k]);
        if (strncmp(key, tune_kind_names[k], n) != 0 || key[n] != '.') continue;
        if (strcmp(dot + 1, "alpha_us") == 0) return &p->alpha_us[k];
        if (strcmp(dot + 1, "send_ns") == 0) return &p->send_ns[k];
        if (strcmp(dot + 1, "recv_ns") == 0) return &p->recv_ns[k];
        if (strcmp(dot + 1, "wire_ns") == 0) return &p->wire_ns[k];
        return NULL;
    }
    if (strncmp(key, "corr.", 5) == 0) {
        for (int r = 0; r < 2; r++) {
            size_t n = strlen(tune_corr_rows[r]);
            if (strncmp(key + 5, tune_corr_rows[r], n) != 0 || key[5 + n] != '.') continue;
            int a = chorus__algo_parse(key + 6 + n);
            return a > CHORUS_ALGO_AUTO ? &p->corr[r][a] : NULL;
        }
    }
    return NULL;
}

/* Strips blanks at both ends of [s, e) in place; returns the new start. */
static char *tune_trim(char *s)
{
    char *e = s + strlen(s);

    while (*s == ' ' || *s == '\t') s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) e--;
    *e = '\0';
    return s;
}

/* One line; 0 on success, else the status with the message set. */
static chorus_status_t tune_parse_line(char *line, const char *name, int lineno,
                                       chorus_tune_params_t *p)
{
    char *eq, *key, *val, *end;
    double v, *slot;

    line = tune_trim(line);
    if (*line == '\0' || *line == '#') return CHORUS_SUCCESS;
    eq = strchr(line, '=');
    if (eq == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: %s:%d: expected key = value",
                             name, lineno);
    *eq = '\0';
    key = tune_trim(line);
    val = tune_trim(eq + 1);
    if (strncmp(key, "rule.", 5) == 0) return chorus__tune_rule_parse(p, key, val, name, lineno);
    errno = 0;
    v = strtod(val, &end);
    if (*val == '\0' || *end != '\0' || errno != 0 || !(v >= 0.0) || v > 1e9)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "tune: %s:%d: %s: \"%.32s\" is not a non-negative number", name,
                             lineno, key, val);
    if (strcmp(key, "version") == 0) return CHORUS_SUCCESS;
    if (strcmp(key, "cores") == 0) {
        p->cores = (int)v;
        p->from_file = 1;
        return CHORUS_SUCCESS;
    }
    slot = tune_param_slot(p, key);
    if (slot == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: %s:%d: unknown key \"%.48s\"",
                             name, lineno, key);
    *slot = v;
    p->from_file = 1;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__tune_params_parse(const char *text, const char *name,
                                          chorus_tune_params_t *p)
{
    chorus_tune_params_t work = *p;
    chorus_status_t status = CHORUS_SUCCESS;
    char *copy = strdup(text), *line, *save = NULL;
    int lineno = 0;

    if (copy == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: %s: no memory", name);
    /* strtok_r would merge empty lines and shift the numbers, so split by hand. */
    for (line = copy; line != NULL && status == CHORUS_SUCCESS; line = save) {
        char *nl = strchr(line, '\n');
        save = nl != NULL ? nl + 1 : NULL;
        if (nl != NULL) *nl = '\0';
        status = tune_parse_line(line, name, ++lineno, &work);
    }
    free(copy);
    if (status == CHORUS_SUCCESS) *p = work;
    return status;
}

/* Rules for every shape and collective of a machine fit well within this. */
#define TUNE_LOAD_MAX ((size_t)1 << 20)

chorus_status_t chorus__tune_params_load(const char *path, chorus_tune_params_t *p)
{
    chorus_status_t status;
    char *buf;
    size_t n;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "tune: cannot open %s", path);
    buf = malloc(TUNE_LOAD_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "tune: no memory to read %s", path);
    }
    n = fread(buf, 1, TUNE_LOAD_MAX + 1, f);
    fclose(f);
    if (n > TUNE_LOAD_MAX) {
        free(buf);
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "tune: %s is larger than %zu bytes",
                             path, TUNE_LOAD_MAX);
    }
    buf[n] = '\0';
    status = chorus__tune_params_parse(buf, path, p);
    free(buf);
    return status;
}

int chorus__tune_params_write(const chorus_tune_params_t *p, FILE *out)
{
    fprintf(out, "# Chorus cost model parameters; see lib/tune/tune.h\n");
    fprintf(out, "version = 1\ncores = %d\n", p->cores);
    fprintf(out, "copy_ns = %.4g\nreduce_ns = %.4g\nstep_us = %.4g\nswitch_us = %.4g\n",
            p->copy_ns, p->reduce_ns, p->step_us, p->switch_us);
    fprintf(out, "sync_us = %.4g\nllc_mb = %.4g\ndram_factor = %.4g\n", p->sync_us, p->llc_mb,
            p->dram_factor);
    fprintf(out, "raw_copy_ns = %.4g\nraw_reduce_ns = %.4g\n", p->raw_copy_ns, p->raw_reduce_ns);
    for (int k = 0; k < CHORUS_TUNE_NKINDS; k++)
        fprintf(out, "%s.alpha_us = %.4g\n%s.send_ns = %.4g\n%s.recv_ns = %.4g\n%s.wire_ns = %.4g\n",
                tune_kind_names[k], p->alpha_us[k], tune_kind_names[k], p->send_ns[k],
                tune_kind_names[k], p->recv_ns[k], tune_kind_names[k], p->wire_ns[k]);
    for (int r = 0; r < 2; r++)
        for (int a = CHORUS_ALGO_AUTO + 1; a < CHORUS_NUM_ALGOS; a++)
            if (p->corr[r][a] != 1.0)
                fprintf(out, "corr.%s.%s = %.4g\n", tune_corr_rows[r],
                        chorus__algo_name((chorus_algo_t)a), p->corr[r][a]);
    return ferror(out) ? -1 : 0;
}

void chorus__tune_file_path(char *buf, size_t len)
{
    const char *set = chorus__config_str("CHORUS_TUNE_FILE");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char host[128] = "localhost";

    if (set != NULL) {
        snprintf(buf, len, "%s", set);
        return;
    }
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    if (xdg != NULL && xdg[0] == '/')
        snprintf(buf, len, "%s/chorus/tune-%s.conf", xdg, host);
    else
        snprintf(buf, len, "%s/.cache/chorus/tune-%s.conf", home != NULL ? home : "/tmp", host);
}

/* Nanoseconds per byte of the best of a few runs of fn over 64 KiB (cache-resident, like
 * the chunks the engine works on). */
#define TUNE_MEASURE_BYTES (64u << 10)
#define TUNE_MEASURE_REPS 8

void chorus__tune_params_measure(chorus_tune_params_t *p)
{
    float *a = malloc(TUNE_MEASURE_BYTES), *b = malloc(TUNE_MEASURE_BYTES);
    float *c = malloc(TUNE_MEASURE_BYTES);
    size_t count = TUNE_MEASURE_BYTES / sizeof(float);
    uint64_t best_copy = UINT64_MAX, best_red = UINT64_MAX, t0;

    if (a == NULL || b == NULL || c == NULL) goto out;
    for (size_t i = 0; i < count; i++) a[i] = b[i] = (float)i;
    for (int r = 0; r < TUNE_MEASURE_REPS; r++) {
        t0 = chorus__now_ns();
        chorus_kernel_copy(c, a, TUNE_MEASURE_BYTES);
        t0 = chorus__now_ns() - t0;
        if (t0 < best_copy) best_copy = t0;
        t0 = chorus__now_ns();
        (void)chorus_kernel_reduce(c, a, b, count, CHORUS_FLOAT32, CHORUS_SUM);
        t0 = chorus__now_ns() - t0;
        if (t0 < best_red) best_red = t0;
    }
    /* A preempted measurement only makes things look slower, and the best of eight is
     * rarely preempted; a zero reading (coarse clock) keeps the default. */
    if (best_copy > 0 && best_copy < UINT64_MAX)
        p->copy_ns = (double)best_copy / TUNE_MEASURE_BYTES;
    if (best_red > 0 && best_red < UINT64_MAX)
        p->reduce_ns = (double)best_red / TUNE_MEASURE_BYTES;
out:
    free(a);
    free(b);
    free(c);
}
