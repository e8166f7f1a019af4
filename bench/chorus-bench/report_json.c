/*
 * The result rows of a run, and their JSON form (written with jansson). The document is
 * described in bench/README.md and by bench/schema/chorus-bench.schema.json; sweep reads
 * its jobs' documents back with bench_read_json(), so the two stay in step here.
 */
#include "bench.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* 2: metadata.algorithm became algo_requested, and every row has the chosen algo. */
#define SCHEMA_VERSION 2

int bench_results_add(results_t *r, const row_t *row)
{
    if (r->nrows == r->cap) {
        size_t cap = r->cap > 0 ? 2 * r->cap : 64;
        row_t *rows = realloc(r->rows, cap * sizeof(*rows));
        if (rows == NULL) return -1;
        r->rows = rows;
        r->cap = cap;
    }
    r->rows[r->nrows++] = *row;
    return 0;
}

void bench_results_free(results_t *r)
{
    free(r->rows);
    free(r->meta.command);
    memset(r, 0, sizeof(*r));
}

/* jansson's constructors return NULL when out of memory, and json_object_set_new then
 * fails too; one check of the finished document covers them all. */
static int set(json_t *obj, const char *key, json_t *value)
{
    return json_object_set_new(obj, key, value);
}

static json_t *meta_json(const meta_t *m)
{
    json_t *o = json_object(), *opt = json_object();
    int bad = o == NULL || opt == NULL;

    bad |= set(opt, "min_bytes", json_integer((json_int_t)m->min_bytes));
    bad |= set(opt, "max_bytes", json_integer((json_int_t)m->max_bytes));
    bad |= set(opt, "warmup_iters", json_integer(m->warmup));
    bad |= set(opt, "iters", m->iters > 0 ? json_integer(m->iters) : json_null());
    bad |= set(opt, "time_per_size", json_real(m->time_per_size));
    bad |= set(opt, "check", json_boolean(m->check));
    bad |= set(opt, "average", json_integer(m->avg_mode));
    bad |= set(opt, "blocking", json_integer(m->blocking));
    bad |= set(opt, "registered", json_integer(m->registered));
    bad |= set(o, "ranks", json_integer(m->ranks));
    bad |= set(o, "hosts", json_integer(m->hosts));
    bad |= set(o, "transport", json_string(m->transport));
    bad |= set(o, "algo_requested", json_string(m->algo_requested));
    bad |= set(o, "chunk_size", json_integer((json_int_t)m->chunk_size));
    bad |= set(o, "chorus_version", json_integer(m->version));
    bad |= set(o, "hostname", json_string(m->hostname));
    bad |= set(o, "date", json_string(m->date));
    bad |= set(o, "command", json_string(m->command != NULL ? m->command : ""));
    bad |= set(o, "device", json_string(m->device[0] != '\0' ? m->device : "host"));
    bad |= set(o, "backend", json_string(m->backend[0] != '\0' ? m->backend : "chorus"));
    if (m->gpu[0] != '\0') bad |= set(o, "gpu", json_string(m->gpu));
    if (m->nccl_version > 0) bad |= set(o, "nccl_version", json_integer(m->nccl_version));
    bad |= set(o, "options", opt);
    if (m->registered) {
        json_t *reads = json_object(), *bw;
        bad |= reads == NULL;
        bad |= set(reads, "calls", json_integer((json_int_t)m->reg_calls));
        bad |= set(reads, "bytes", json_integer((json_int_t)m->reg_bytes));
        bad |= set(o, "registered_reads", reads);
        if (m->membw_copy_Bps > 0.0) {
            bw = json_object();
            bad |= bw == NULL;
            bad |= set(bw, "copy_GBps", json_real(m->membw_copy_Bps / 1e9));
            bad |= set(bw, "traffic_GBps", json_real(2.0 * m->membw_copy_Bps / 1e9));
            bad |= set(o, "memory_bandwidth", bw);
        }
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *row_json(const row_t *w)
{
    json_t *o = json_object();
    int bad = o == NULL;

    bad |= set(o, "collective", json_string(bench_coll_name(w->coll)));
    bad |= set(o, "size", json_integer((json_int_t)w->size));
    bad |= set(o, "count", json_integer((json_int_t)w->count));
    bad |= set(o, "dtype", w->has_dtype ? json_string(chorus_dtype_name(w->dtype)) : json_null());
    bad |= set(o, "op", w->has_op ? json_string(chorus_op_name(w->op)) : json_null());
    bad |= set(o, "root", w->has_root ? json_integer(w->root) : json_null());
    bad |= set(o, "in_place", json_boolean(w->in_place));
    bad |= set(o, "algo", json_string(w->algo));
    bad |= set(o, "time_us", json_real(w->time_us));
    bad |= set(o, "algbw", json_real(w->algbw));
    bad |= set(o, "busbw", json_real(w->busbw));
    bad |= set(o, "wrong", w->wrong >= 0 ? json_integer(w->wrong) : json_null());
    bad |= set(o, "lat_avg_us", json_real(w->lat_avg_us));
    bad |= set(o, "lat_min_us", json_real(w->lat_min_us));
    bad |= set(o, "lat_max_us", json_real(w->lat_max_us));
    bad |= set(o, "iters", json_integer(w->iters));
    /* Optional: only where the cost model had an answer. */
    if (w->predicted_us >= 0.0) bad |= set(o, "predicted_us", json_real(w->predicted_us));
    if (w->bound_busbw > 0.0) {
        bad |= set(o, "bound_busbw", json_real(w->bound_busbw));
        bad |= set(o, "bound_fraction", json_real(w->busbw / w->bound_busbw));
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int bench_write_json(const results_t *r, const char *path)
{
    json_t *doc = json_object(), *rows = json_array(), *summary = json_object();
    int bad = doc == NULL || rows == NULL || summary == NULL;

    for (size_t i = 0; i < r->nrows && !bad; i++)
        bad |= json_array_append_new(rows, row_json(&r->rows[i]));
    bad |= set(summary, "wrong_total", json_integer((json_int_t)r->wrong_total));
    bad |= set(summary, "avg_busbw",
               json_real(r->busbw_count > 0 ? r->busbw_sum / r->busbw_count : 0.0));
    bad |= set(doc, "tool", json_string("chorus-bench"));
    bad |= set(doc, "schema_version", json_integer(SCHEMA_VERSION));
    bad |= set(doc, "metadata", meta_json(&r->meta));
    bad |= set(doc, "rows", rows);
    bad |= set(doc, "summary", summary);
    if (bad) {
        fprintf(stderr, "chorus-bench: out of memory building the JSON document\n");
        json_decref(doc);
        return -1;
    }
    if (json_dump_file(doc, path, JSON_INDENT(1) | JSON_REAL_PRECISION(9)) != 0) {
        fprintf(stderr, "chorus-bench: cannot write %s\n", path);
        json_decref(doc);
        return -1;
    }
    json_decref(doc);
    return 0;
}

/* ---- Reading back (sweep) ---- */

static double num(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

static int parse_dtype_name(const char *name, chorus_dtype_t *dtype_p)
{
    for (int d = 0; d < CHORUS_NUM_DTYPES && name != NULL; d++) {
        if (strcasecmp(name, chorus_dtype_name((chorus_dtype_t)d)) == 0) {
            *dtype_p = (chorus_dtype_t)d;
            return 0;
        }
    }
    return -1;
}

static int parse_op_name(const char *name, chorus_op_t *op_p)
{
    for (int o = 0; o < CHORUS_NUM_OPS && name != NULL; o++) {
        if (strcasecmp(name, chorus_op_name((chorus_op_t)o)) == 0) {
            *op_p = (chorus_op_t)o;
            return 0;
        }
    }
    return -1;
}

static int read_row(const json_t *o, row_t *w)
{
    const json_t *v;
    const char *coll = json_string_value(json_object_get(o, "collective"));

    memset(w, 0, sizeof(*w));
    if (!json_is_object(o) || coll == NULL || bench_parse_coll(coll, &w->coll) != 0) return -1;
    v = json_object_get(o, "dtype");
    w->has_dtype = json_is_string(v);
    if (w->has_dtype && parse_dtype_name(json_string_value(v), &w->dtype) != 0) return -1;
    v = json_object_get(o, "op");
    w->has_op = json_is_string(v);
    if (w->has_op && parse_op_name(json_string_value(v), &w->op) != 0) return -1;
    v = json_object_get(o, "root");
    w->has_root = json_is_integer(v);
    w->root = w->has_root ? (int)json_integer_value(v) : -1;
    w->in_place = json_is_true(json_object_get(o, "in_place"));
    v = json_object_get(o, "algo");
    snprintf(w->algo, sizeof(w->algo), "%s", json_is_string(v) ? json_string_value(v) : "?");
    w->size = (uint64_t)num(o, "size");
    w->count = (uint64_t)num(o, "count");
    w->time_us = num(o, "time_us");
    w->algbw = num(o, "algbw");
    w->busbw = num(o, "busbw");
    v = json_object_get(o, "wrong");
    w->wrong = json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
    w->lat_avg_us = num(o, "lat_avg_us");
    w->lat_min_us = num(o, "lat_min_us");
    w->lat_max_us = num(o, "lat_max_us");
    w->iters = (int)num(o, "iters");
    v = json_object_get(o, "predicted_us");
    w->predicted_us = json_is_number(v) ? json_number_value(v) : -1.0;
    v = json_object_get(o, "bound_busbw");
    w->bound_busbw = json_is_number(v) ? json_number_value(v) : 0.0;
    return 0;
}

static void read_meta(const json_t *o, meta_t *m)
{
    const char *s;

    m->ranks = (int)num(o, "ranks");
    m->hosts = (int)num(o, "hosts");
    m->version = (int)num(o, "chorus_version");
    m->chunk_size = (uint64_t)num(o, "chunk_size");
    s = json_string_value(json_object_get(o, "transport"));
    snprintf(m->transport, sizeof(m->transport), "%s", s != NULL ? s : "?");
    s = json_string_value(json_object_get(o, "algo_requested"));
    snprintf(m->algo_requested, sizeof(m->algo_requested), "%s", s != NULL ? s : "?");
    s = json_string_value(json_object_get(o, "hostname"));
    snprintf(m->hostname, sizeof(m->hostname), "%s", s != NULL ? s : "?");
    s = json_string_value(json_object_get(o, "date"));
    snprintf(m->date, sizeof(m->date), "%s", s != NULL ? s : "?");
    s = json_string_value(json_object_get(o, "command"));
    m->command = s != NULL ? strdup(s) : NULL;
    /* Absent in files written before -G: those ran on host buffers through Chorus. */
    s = json_string_value(json_object_get(o, "device"));
    snprintf(m->device, sizeof(m->device), "%s", s != NULL ? s : "host");
    s = json_string_value(json_object_get(o, "backend"));
    snprintf(m->backend, sizeof(m->backend), "%s", s != NULL ? s : "chorus");
    s = json_string_value(json_object_get(o, "gpu"));
    snprintf(m->gpu, sizeof(m->gpu), "%s", s != NULL ? s : "");
    m->nccl_version = (int)num(o, "nccl_version");
}

int bench_read_json(const char *path, results_t *r)
{
    json_error_t error;
    json_t *doc = json_load_file(path, 0, &error), *rows, *summary;
    size_t i;
    row_t row;

    memset(r, 0, sizeof(*r));
    if (doc == NULL) {
        fprintf(stderr, "chorus-bench: %s:%d: %s\n", path, error.line, error.text);
        return -1;
    }
    rows = json_object_get(doc, "rows");
    if (!json_is_object(json_object_get(doc, "metadata")) || !json_is_array(rows)) {
        fprintf(stderr, "chorus-bench: %s is not a chorus-bench document\n", path);
        goto err_doc;
    }
    read_meta(json_object_get(doc, "metadata"), &r->meta);
    for (i = 0; i < json_array_size(rows); i++) {
        if (read_row(json_array_get(rows, i), &row) != 0) {
            fprintf(stderr, "chorus-bench: %s: row %zu is malformed\n", path, i);
            goto err_rows;
        }
        if (bench_results_add(r, &row) != 0) goto err_rows;
    }
    summary = json_object_get(doc, "summary");
    r->wrong_total = (uint64_t)num(summary, "wrong_total");
    json_decref(doc);
    return 0;

err_rows:
    bench_results_free(r);
err_doc:
    json_decref(doc);
    return -1;
}
