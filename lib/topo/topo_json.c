/*
 * The topology in JSON (docs/topology.schema.json), read for CHORUS_TOPO_FILE and written
 * by chorus-bench --topo-dump.
 *
 * Loading is strict: an unknown key is an error naming it, because a misspelt "numa" in a
 * hand-written file would otherwise be silently ignored and the ring built from defaults.
 * Optional keys take the defaults an unknown value has in the model (-1 NUMA node, ""
 * bus ids, 0 counts), and the dump writes every key, so load(dump(t)) equals t exactly.
 */
#include "topo/topo.h"

#include "util/status.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define TOPO_SCHEMA_NAME "chorus-topology"
#define TOPO_SCHEMA_VERSION 1

/* ---- Loading ---- */

/* Rejects keys of obj that are not in the NULL-terminated list known. */
static chorus_status_t tj_known_keys(json_t *obj, const char *const *known, const char *where)
{
    const char *key;
    json_t *v;
    int i;

    json_object_foreach(obj, key, v) {
        for (i = 0; known[i] != NULL && strcmp(known[i], key) != 0; i++) {
        }
        if (known[i] == NULL)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s: unknown key \"%s\"",
                                 where, key);
    }
    (void)v;
    return CHORUS_SUCCESS;
}

/* An integer member in [lo, hi]; def when absent. */
static chorus_status_t tj_int(json_t *obj, const char *key, long long def, long long lo,
                              long long hi, const char *where, long long *out_p)
{
    json_t *v = json_object_get(obj, key);
    long long x;

    if (v == NULL) {
        *out_p = def;
        return CHORUS_SUCCESS;
    }
    if (!json_is_integer(v))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s: \"%s\" is not an integer",
                             where, key);
    x = (long long)json_integer_value(v);
    if (x < lo || x > hi)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "topo: %s: \"%s\" = %lld is out of range [%lld, %lld]", where, key,
                             x, lo, hi);
    *out_p = x;
    return CHORUS_SUCCESS;
}

/* A string member that fits len bytes with its NUL; "" when absent unless required. */
static chorus_status_t tj_str(json_t *obj, const char *key, int required, char *out, size_t len,
                              const char *where)
{
    json_t *v = json_object_get(obj, key);

    if (v == NULL && !required) {
        out[0] = '\0';
        return CHORUS_SUCCESS;
    }
    if (v == NULL || !json_is_string(v))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s: \"%s\" %s", where, key,
                             v == NULL ? "is missing" : "is not a string");
    if (strlen(json_string_value(v)) >= len)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "topo: %s: \"%s\" is longer than %zu characters", where, key,
                             len - 1);
    memcpy(out, json_string_value(v), strlen(json_string_value(v)) + 1);
    return CHORUS_SUCCESS;
}

/* The length of an optional array member (0 when absent), or -1 after an error. */
static int tj_array_len(json_t *obj, const char *key, const char *where)
{
    json_t *v = json_object_get(obj, key);

    if (v == NULL) return 0;
    if (!json_is_array(v)) {
        chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s: \"%s\" is not an array", where, key);
        return -1;
    }
    return (int)json_array_size(v);
}

static chorus_status_t tj_load_dev(json_t *o, chorus_topo_dev_t *d, const char *where)
{
    static const char *const known[] = {"name",      "bus_id",    "pci_switch", "numa",
                                        "vendor_id", "device_id", "speed_mbps", NULL};
    chorus_status_t status;
    long long x;

    if (!json_is_object(o))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s is not an object", where);
    CHORUS_CHECK_GOTO(tj_known_keys(o, known, where), out);
    CHORUS_CHECK_GOTO(tj_str(o, "name", 1, d->name, sizeof d->name, where), out);
    CHORUS_CHECK_GOTO(tj_str(o, "bus_id", 0, d->bus_id, sizeof d->bus_id, where), out);
    CHORUS_CHECK_GOTO(tj_str(o, "pci_switch", 0, d->pci_switch, sizeof d->pci_switch, where),
                      out);
    CHORUS_CHECK_GOTO(tj_int(o, "numa", -1, -1, 1 << 20, where, &x), out);
    d->numa = (int)x;
    CHORUS_CHECK_GOTO(tj_int(o, "vendor_id", 0, 0, 0xffff, where, &x), out);
    d->vendor_id = (uint16_t)x;
    CHORUS_CHECK_GOTO(tj_int(o, "device_id", 0, 0, 0xffff, where, &x), out);
    d->device_id = (uint16_t)x;
    CHORUS_CHECK_GOTO(tj_int(o, "speed_mbps", 0, 0, (long long)1 << 53, where, &x), out);
    d->speed_mbps = (uint64_t)x;
out:
    return status;
}

static chorus_status_t tj_load_numa(json_t *o, chorus_topo_numa_t *n, const char *where)
{
    static const char *const known[] = {"id", "cores", "pus", "memory_mb", NULL};
    chorus_status_t status;
    long long x;

    if (!json_is_object(o))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s is not an object", where);
    CHORUS_CHECK_GOTO(tj_known_keys(o, known, where), out);
    if (json_object_get(o, "id") == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s: \"id\" is missing", where);
    CHORUS_CHECK_GOTO(tj_int(o, "id", 0, 0, 1 << 20, where, &x), out);
    n->id = (int)x;
    CHORUS_CHECK_GOTO(tj_int(o, "cores", 0, 0, 1 << 24, where, &x), out);
    n->cores = (int)x;
    CHORUS_CHECK_GOTO(tj_int(o, "pus", 0, 0, 1 << 24, where, &x), out);
    n->pus = (int)x;
    CHORUS_CHECK_GOTO(tj_int(o, "memory_mb", 0, 0, (long long)1 << 53, where, &x), out);
    n->memory_mb = (uint64_t)x;
out:
    return status;
}

static chorus_status_t tj_load_host(json_t *o, chorus_topo_host_t *h, int hi)
{
    static const char *const known[] = {"hostname", "cores", "pus", "numa", "gpus", "nics", NULL};
    char where[96];
    chorus_status_t status;
    int nnuma, ngpus, nnics, i;
    long long x;

    snprintf(where, sizeof where, "hosts[%d]", hi);
    if (!json_is_object(o))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s is not an object", where);
    CHORUS_CHECK_GOTO(tj_known_keys(o, known, where), out);
    CHORUS_CHECK_GOTO(tj_str(o, "hostname", 1, h->hostname, sizeof h->hostname, where), out);
    CHORUS_CHECK_GOTO(tj_int(o, "cores", 0, 0, 1 << 24, where, &x), out);
    h->cores = (int)x;
    CHORUS_CHECK_GOTO(tj_int(o, "pus", 0, 0, 1 << 24, where, &x), out);
    h->pus = (int)x;
    nnuma = tj_array_len(o, "numa", where);
    ngpus = tj_array_len(o, "gpus", where);
    nnics = tj_array_len(o, "nics", where);
    if (nnuma < 0 || ngpus < 0 || nnics < 0) return CHORUS_ERR_INVALID_ARGUMENT;
    CHORUS_CHECK_GOTO(chorus__topo_host_resize(h, nnuma, ngpus, nnics), out);
    for (i = 0; i < nnuma && status == CHORUS_SUCCESS; i++) {
        snprintf(where, sizeof where, "hosts[%d].numa[%d]", hi, i);
        status = tj_load_numa(json_array_get(json_object_get(o, "numa"), (size_t)i),
                              &h->numa[i], where);
    }
    for (i = 0; i < ngpus && status == CHORUS_SUCCESS; i++) {
        snprintf(where, sizeof where, "hosts[%d].gpus[%d]", hi, i);
        status = tj_load_dev(json_array_get(json_object_get(o, "gpus"), (size_t)i),
                             &h->gpus[i], where);
    }
    for (i = 0; i < nnics && status == CHORUS_SUCCESS; i++) {
        snprintf(where, sizeof where, "hosts[%d].nics[%d]", hi, i);
        status = tj_load_dev(json_array_get(json_object_get(o, "nics"), (size_t)i),
                             &h->nics[i], where);
    }
out:
    return status;
}

static chorus_status_t tj_load_root(json_t *root, chorus_topo_t **topo_p)
{
    static const char *const known[] = {"schema", "version", "hosts", NULL};
    json_t *hosts = json_object_get(root, "hosts");
    chorus_topo_t *t = NULL;
    chorus_status_t status;
    json_t *schema = json_object_get(root, "schema");
    long long version;
    int i;

    if (!json_is_object(root))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: the top level is not an object");
    CHORUS_CHECK_GOTO(tj_known_keys(root, known, "top level"), err);
    if (schema != NULL && (!json_is_string(schema) ||
                           strcmp(json_string_value(schema), TOPO_SCHEMA_NAME) != 0))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: \"schema\" is not \"%s\"",
                             TOPO_SCHEMA_NAME);
    CHORUS_CHECK_GOTO(tj_int(root, "version", TOPO_SCHEMA_VERSION, TOPO_SCHEMA_VERSION,
                             TOPO_SCHEMA_VERSION, "top level", &version), err);
    if (!json_is_array(hosts) || json_array_size(hosts) == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "topo: \"hosts\" is missing or not a non-empty array");
    CHORUS_CHECK_GOTO(chorus__topo_alloc((int)json_array_size(hosts), &t), err);
    for (i = 0; i < t->nhosts; i++)
        CHORUS_CHECK_GOTO(tj_load_host(json_array_get(hosts, (size_t)i), &t->hosts[i], i),
                          err_free);
    *topo_p = t;
    return CHORUS_SUCCESS;

err_free:
    chorus__topo_free(t);
err:
    return status;
}

chorus_status_t chorus__topo_load_string(const char *text, chorus_topo_t **topo_p)
{
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    chorus_status_t status;

    if (root == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: line %d: %s", jerr.line,
                             jerr.text);
    status = tj_load_root(root, topo_p);
    json_decref(root);
    return status;
}

chorus_status_t chorus__topo_load(const char *path, chorus_topo_t **topo_p)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    chorus_status_t status;

    if (root == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "topo: %s: line %d: %s", path,
                             jerr.line, jerr.text);
    status = tj_load_root(root, topo_p);
    json_decref(root);
    if (status != CHORUS_SUCCESS) return chorus__error_context(status, "%s", path);
    snprintf((*topo_p)->source, sizeof (*topo_p)->source, "%s", path);
    return CHORUS_SUCCESS;
}

/* ---- Dumping ---- */

/* json_object_set_new with a NULL value (no memory) leaves the object incomplete; the
 * caller checks the count of failures once. */
static int tj_set(json_t *obj, const char *key, json_t *v)
{
    return v == NULL || json_object_set_new(obj, key, v) != 0;
}

static json_t *tj_dev(const chorus_topo_dev_t *d)
{
    json_t *o = json_object();
    int bad = o == NULL;

    if (bad) return NULL;
    bad |= tj_set(o, "name", json_string(d->name));
    bad |= tj_set(o, "bus_id", json_string(d->bus_id));
    bad |= tj_set(o, "pci_switch", json_string(d->pci_switch));
    bad |= tj_set(o, "numa", json_integer(d->numa));
    bad |= tj_set(o, "vendor_id", json_integer(d->vendor_id));
    bad |= tj_set(o, "device_id", json_integer(d->device_id));
    bad |= tj_set(o, "speed_mbps", json_integer((json_int_t)d->speed_mbps));
    if (!bad) return o;
    json_decref(o);
    return NULL;
}

static json_t *tj_numa(const chorus_topo_numa_t *n)
{
    json_t *o = json_object();
    int bad = o == NULL;

    if (bad) return NULL;
    bad |= tj_set(o, "id", json_integer(n->id));
    bad |= tj_set(o, "cores", json_integer(n->cores));
    bad |= tj_set(o, "pus", json_integer(n->pus));
    bad |= tj_set(o, "memory_mb", json_integer((json_int_t)n->memory_mb));
    if (!bad) return o;
    json_decref(o);
    return NULL;
}

static json_t *tj_host(const chorus_topo_host_t *h)
{
    json_t *o = json_object(), *numa = json_array(), *gpus = json_array(), *nics = json_array();
    int bad = o == NULL || numa == NULL || gpus == NULL || nics == NULL, i;

    for (i = 0; !bad && i < h->nnuma; i++) bad |= json_array_append_new(numa, tj_numa(&h->numa[i]));
    for (i = 0; !bad && i < h->ngpus; i++) bad |= json_array_append_new(gpus, tj_dev(&h->gpus[i]));
    for (i = 0; !bad && i < h->nnics; i++) bad |= json_array_append_new(nics, tj_dev(&h->nics[i]));
    if (!bad) {
        bad |= tj_set(o, "hostname", json_string(h->hostname));
        bad |= tj_set(o, "cores", json_integer(h->cores));
        bad |= tj_set(o, "pus", json_integer(h->pus));
        bad |= tj_set(o, "numa", numa);
        bad |= tj_set(o, "gpus", gpus);
        bad |= tj_set(o, "nics", nics);
        if (!bad) return o;
        json_decref(o);
        return NULL;
    }
    json_decref(o);
    json_decref(numa);
    json_decref(gpus);
    json_decref(nics);
    return NULL;
}

chorus_status_t chorus__topo_dump_string(const chorus_topo_t *t, char **json_p)
{
    json_t *root = json_object(), *hosts = json_array();
    int bad = root == NULL || hosts == NULL, i;
    char *text = NULL;

    for (i = 0; !bad && i < t->nhosts; i++)
        bad |= json_array_append_new(hosts, tj_host(&t->hosts[i]));
    if (!bad) {
        bad |= tj_set(root, "schema", json_string(TOPO_SCHEMA_NAME));
        bad |= tj_set(root, "version", json_integer(TOPO_SCHEMA_VERSION));
        bad |= json_object_set(root, "hosts", hosts) != 0;
    }
    if (!bad) text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(hosts);
    json_decref(root);
    if (text == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "topo: no memory for the dump");
    *json_p = text;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__topo_dump(const chorus_topo_t *t, const char *path)
{
    chorus_status_t status;
    char *text = NULL;
    FILE *f;

    status = chorus__topo_dump_string(t, &text);
    if (status != CHORUS_SUCCESS) return status;
    f = fopen(path, "w");
    if (f == NULL) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "topo: opening %s", path);
        goto err_free;
    }
    if (fputs(text, f) == EOF || fputc('\n', f) == EOF) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "topo: writing %s", path);
        fclose(f);
        goto err_free;
    }
    if (fclose(f) != 0)
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "topo: closing %s", path);
err_free:
    free(text);
    return status;
}
