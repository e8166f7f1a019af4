/*
 * Fabric descriptions as JSON (docs/fabric.md), read and written with jansson. Reading is
 * strict: an unknown key is an error naming its path, so a typo never silently leaves a
 * default in place.
 */
#include "sim/fabric.h"

#include "util/status.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name; /* of the text, for messages */
    chorus_status_t st;
} fj_ctx_t;

static void fj_fail(fj_ctx_t *c, const char *path, const char *why)
{
    if (c->st != CHORUS_SUCCESS) return;
    c->st = chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: %s: %s", c->name, path, why);
}

/* Fails on a key of obj that is not in the NULL-terminated list. */
static void fj_keys(fj_ctx_t *c, json_t *obj, const char *path, const char *const *known)
{
    const char *key;
    json_t *v;
    char where[160];

    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (int i = 0; known[i] != NULL; i++) ok |= strcmp(known[i], key) == 0;
        (void)v;
        if (!ok) {
            snprintf(where, sizeof where, "%s%s%s", path, path[0] ? "." : "", key);
            fj_fail(c, where, "unknown key");
        }
    }
}

static void fj_num(fj_ctx_t *c, json_t *obj, const char *path, const char *key, double *out)
{
    json_t *v = json_object_get(obj, key);
    char where[160];

    if (v == NULL) return;
    snprintf(where, sizeof where, "%s%s%s", path, path[0] ? "." : "", key);
    if (!json_is_number(v)) fj_fail(c, where, "not a number");
    else *out = json_number_value(v);
}

static void fj_int(fj_ctx_t *c, json_t *obj, const char *path, const char *key, int *out)
{
    double d = *out;
    char where[160];

    fj_num(c, obj, path, key, &d);
    snprintf(where, sizeof where, "%s%s%s", path, path[0] ? "." : "", key);
    if (d != (double)(int)d) fj_fail(c, where, "not a whole number");
    else *out = (int)d;
}

static void fj_str(fj_ctx_t *c, json_t *obj, const char *path, const char *key, char *out,
                   size_t len)
{
    json_t *v = json_object_get(obj, key);
    char where[160];

    if (v == NULL) return;
    snprintf(where, sizeof where, "%s%s%s", path, path[0] ? "." : "", key);
    if (!json_is_string(v) || strlen(json_string_value(v)) >= len)
        fj_fail(c, where, "not a string (or too long)");
    else
        snprintf(out, len, "%s", json_string_value(v));
}

static void fj_bool(fj_ctx_t *c, json_t *obj, const char *path, const char *key, int *out)
{
    json_t *v = json_object_get(obj, key);
    char where[160];

    if (v == NULL) return;
    snprintf(where, sizeof where, "%s%s%s", path, path[0] ? "." : "", key);
    if (!json_is_boolean(v)) fj_fail(c, where, "not true or false");
    else *out = json_is_true(v);
}

static json_t *fj_obj(fj_ctx_t *c, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (v != NULL && !json_is_object(v)) {
        fj_fail(c, key, "not an object");
        return NULL;
    }
    return v;
}

static void fj_network(fj_ctx_t *c, json_t *net, chorus_fab_desc_t *d)
{
    static const char *const keys[] = {"type", "levels", "hosts_per_leaf", "leaves_per_pod",
                                       "oversubscription", "switch_lat_us", "switches",
                                       "links", NULL};
    char type[32] = "switch";
    json_t *v;

    fj_keys(c, net, "network", keys);
    fj_str(c, net, "network", "type", type, sizeof type);
    if (strcmp(type, "switch") == 0) d->net = CHORUS_FAB_NET_SWITCH;
    else if (strcmp(type, "fat_tree") == 0) d->net = CHORUS_FAB_NET_FAT_TREE;
    else if (strcmp(type, "explicit") == 0) d->net = CHORUS_FAB_NET_EXPLICIT;
    else fj_fail(c, "network.type", "not switch, fat_tree or explicit");
    fj_int(c, net, "network", "levels", &d->levels);
    fj_int(c, net, "network", "hosts_per_leaf", &d->hosts_per_leaf);
    fj_int(c, net, "network", "leaves_per_pod", &d->leaves_per_pod);
    fj_num(c, net, "network", "switch_lat_us", &d->switch_lat_us);
    v = json_object_get(net, "oversubscription");
    if (v != NULL) {
        if (json_is_number(v)) {
            d->oversub[0] = d->oversub[1] = json_number_value(v);
        } else if (json_is_array(v) && json_array_size(v) >= 1 && json_array_size(v) <= 2) {
            for (size_t i = 0; i < json_array_size(v); i++) {
                json_t *x = json_array_get(v, i);
                if (!json_is_number(x)) fj_fail(c, "network.oversubscription", "not numbers");
                else d->oversub[i] = json_number_value(x);
            }
        } else {
            fj_fail(c, "network.oversubscription", "a number or an array of 1 or 2 numbers");
        }
    }
    v = json_object_get(net, "switches");
    if (v != NULL) {
        if (!json_is_array(v)) {
            fj_fail(c, "network.switches", "not an array of names");
            return;
        }
        d->nswitches = (int)json_array_size(v);
        d->switches = calloc((size_t)d->nswitches + 1, sizeof *d->switches);
        if (d->switches == NULL) {
            c->st = chorus__error(CHORUS_ERR_NO_MEMORY, "%s: no memory", c->name);
            return;
        }
        for (int i = 0; i < d->nswitches; i++) {
            json_t *x = json_array_get(v, (size_t)i);
            if (!json_is_string(x) || strlen(json_string_value(x)) >= CHORUS_FAB_NAME_MAX)
                fj_fail(c, "network.switches", "names are strings of under 48 characters");
            else
                snprintf(d->switches[i], CHORUS_FAB_NAME_MAX, "%s", json_string_value(x));
        }
    }
    v = json_object_get(net, "links");
    if (v != NULL) {
        static const char *const lkeys[] = {"a", "b", "gbps", "lat_us", NULL};
        if (!json_is_array(v)) {
            fj_fail(c, "network.links", "not an array");
            return;
        }
        d->nxlinks = (int)json_array_size(v);
        d->xlinks = calloc((size_t)d->nxlinks + 1, sizeof *d->xlinks);
        if (d->xlinks == NULL) {
            c->st = chorus__error(CHORUS_ERR_NO_MEMORY, "%s: no memory", c->name);
            return;
        }
        for (int i = 0; i < d->nxlinks; i++) {
            json_t *x = json_array_get(v, (size_t)i);
            char path[64];
            snprintf(path, sizeof path, "network.links[%d]", i);
            if (!json_is_object(x)) {
                fj_fail(c, path, "not an object");
                continue;
            }
            fj_keys(c, x, path, lkeys);
            d->xlinks[i].gbps = d->nic_gbps;
            d->xlinks[i].lat_us = d->switch_lat_us;
            fj_str(c, x, path, "a", d->xlinks[i].a, sizeof d->xlinks[i].a);
            fj_str(c, x, path, "b", d->xlinks[i].b, sizeof d->xlinks[i].b);
            fj_num(c, x, path, "gbps", &d->xlinks[i].gbps);
            fj_num(c, x, path, "lat_us", &d->xlinks[i].lat_us);
        }
    }
}

static void fj_overrides(fj_ctx_t *c, json_t *v, chorus_fab_desc_t *d)
{
    static const char *const keys[] = {"link", "factor", "down", NULL};

    if (!json_is_array(v)) {
        fj_fail(c, "overrides", "not an array");
        return;
    }
    d->noverrides = (int)json_array_size(v);
    d->overrides = calloc((size_t)d->noverrides + 1, sizeof *d->overrides);
    if (d->overrides == NULL) {
        c->st = chorus__error(CHORUS_ERR_NO_MEMORY, "%s: no memory", c->name);
        return;
    }
    for (int i = 0; i < d->noverrides; i++) {
        json_t *x = json_array_get(v, (size_t)i), *down;
        char path[64];
        snprintf(path, sizeof path, "overrides[%d]", i);
        if (!json_is_object(x)) {
            fj_fail(c, path, "not an object");
            continue;
        }
        fj_keys(c, x, path, keys);
        d->overrides[i].factor = 1;
        fj_str(c, x, path, "link", d->overrides[i].link, sizeof d->overrides[i].link);
        fj_num(c, x, path, "factor", &d->overrides[i].factor);
        down = json_object_get(x, "down");
        if (down != NULL && !json_is_boolean(down)) fj_fail(c, path, "down is true or false");
        d->overrides[i].down = down != NULL && json_is_true(down);
    }
}

chorus_status_t chorus__fab_desc_parse(const char *text, const char *name, chorus_fab_desc_t *d)
{
    static const char *const keys[] = {"name", "hosts", "ranks_per_host", "intra", "nic",
                                       "network", "cpu", "overrides", "comment", NULL};
    static const char *const ikeys[] = {"kind", "gbps", "lat_us", "bus_gbps", "pairs",
                                        "send_buffer_bytes", "send_ns", "recv_ns", NULL};
    static const char *const nkeys[] = {"count",       "gbps",      "lat_us",  "send_buffer_bytes",
                                        "burst_bytes", "peak_gbps", "send_ns", "recv_ns",
                                        NULL};
    static const char *const ckeys[] = {"msg_us", "reduce_GBps", "copy_GBps", "cores_per_host",
                                        "step_us", "wait_us", "llc_mb", "dram_factor",
                                        "recv_streams", NULL};
    fj_ctx_t c = {name, CHORUS_SUCCESS};
    json_error_t err;
    json_t *root = json_loads(text, 0, &err), *o;

    chorus__fab_desc_default(d);
    if (root == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: line %d: %s", name, err.line,
                             err.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: not a JSON object", name);
    }
    fj_keys(&c, root, "", keys);
    fj_str(&c, root, "", "name", d->name, sizeof d->name);
    fj_int(&c, root, "", "hosts", &d->hosts);
    fj_int(&c, root, "", "ranks_per_host", &d->ranks_per_host);
    if ((o = fj_obj(&c, root, "intra")) != NULL) {
        fj_keys(&c, o, "intra", ikeys);
        fj_str(&c, o, "intra", "kind", d->intra_kind, sizeof d->intra_kind);
        fj_num(&c, o, "intra", "gbps", &d->intra_gbps);
        fj_num(&c, o, "intra", "lat_us", &d->intra_lat_us);
        fj_num(&c, o, "intra", "bus_gbps", &d->bus_gbps);
        fj_bool(&c, o, "intra", "pairs", &d->intra_pairs);
        fj_num(&c, o, "intra", "send_buffer_bytes", &d->intra_sendbuf);
        fj_num(&c, o, "intra", "send_ns", &d->intra_send_ns);
        fj_num(&c, o, "intra", "recv_ns", &d->intra_recv_ns);
    }
    if ((o = fj_obj(&c, root, "nic")) != NULL) {
        fj_keys(&c, o, "nic", nkeys);
        fj_int(&c, o, "nic", "count", &d->nics);
        fj_num(&c, o, "nic", "gbps", &d->nic_gbps);
        fj_num(&c, o, "nic", "lat_us", &d->nic_lat_us);
        fj_num(&c, o, "nic", "send_buffer_bytes", &d->nic_sendbuf);
        fj_num(&c, o, "nic", "burst_bytes", &d->nic_burst);
        fj_num(&c, o, "nic", "peak_gbps", &d->nic_peak_gbps);
        fj_num(&c, o, "nic", "send_ns", &d->net_send_ns);
        fj_num(&c, o, "nic", "recv_ns", &d->net_recv_ns);
    }
    if ((o = fj_obj(&c, root, "cpu")) != NULL) {
        fj_keys(&c, o, "cpu", ckeys);
        fj_num(&c, o, "cpu", "msg_us", &d->msg_us);
        fj_num(&c, o, "cpu", "reduce_GBps", &d->reduce_GBps);
        fj_num(&c, o, "cpu", "copy_GBps", &d->copy_GBps);
        fj_int(&c, o, "cpu", "cores_per_host", &d->cores_per_host);
        fj_num(&c, o, "cpu", "step_us", &d->step_us);
        fj_num(&c, o, "cpu", "wait_us", &d->wait_us);
        fj_num(&c, o, "cpu", "llc_mb", &d->llc_mb);
        fj_num(&c, o, "cpu", "dram_factor", &d->dram_factor);
        fj_bool(&c, o, "cpu", "recv_streams", &d->recv_streams);
    }
    if ((o = fj_obj(&c, root, "network")) != NULL) fj_network(&c, o, d);
    if ((o = json_object_get(root, "overrides")) != NULL) fj_overrides(&c, o, d);
    json_decref(root);
    if (c.st != CHORUS_SUCCESS) chorus__fab_desc_free(d);
    return c.st;
}

chorus_status_t chorus__fab_desc_load(const char *path, chorus_fab_desc_t *d)
{
    FILE *f = fopen(path, "r");
    char *text;
    long len;
    chorus_status_t st;

    if (f == NULL) return chorus__error(CHORUS_ERR_SYSTEM, "cannot read %s", path);
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        len > (64 << 20)) {
        fclose(f);
        return chorus__error(CHORUS_ERR_SYSTEM, "cannot read %s (or over 64 MiB)", path);
    }
    text = malloc((size_t)len + 1);
    if (text == NULL || fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        fclose(f);
        return chorus__error(CHORUS_ERR_SYSTEM, "cannot read %s", path);
    }
    text[len] = '\0';
    fclose(f);
    st = chorus__fab_desc_parse(text, path, d);
    free(text);
    return st;
}

int chorus__fab_desc_write(const chorus_fab_desc_t *d, void *file)
{
    static const char *const types[] = {"switch", "fat_tree", "explicit"};
    json_t *root = json_object(), *net = json_object(), *ov = json_array();
    int rc;

    json_object_set_new(root, "name", json_string(d->name));
    json_object_set_new(root, "hosts", json_integer(d->hosts));
    json_object_set_new(root, "ranks_per_host", json_integer(d->ranks_per_host));
    json_object_set_new(root, "intra",
                        json_pack("{s:s, s:f, s:f, s:f, s:b, s:f, s:f, s:f}", "kind",
                                  d->intra_kind, "gbps", d->intra_gbps, "lat_us", d->intra_lat_us,
                                  "bus_gbps", d->bus_gbps, "pairs", d->intra_pairs != 0,
                                  "send_buffer_bytes", d->intra_sendbuf, "send_ns",
                                  d->intra_send_ns, "recv_ns", d->intra_recv_ns));
    json_object_set_new(root, "nic", json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "count",
                                               d->nics, "gbps", d->nic_gbps, "lat_us",
                                               d->nic_lat_us, "send_buffer_bytes", d->nic_sendbuf,
                                               "burst_bytes", d->nic_burst, "peak_gbps",
                                               d->nic_peak_gbps, "send_ns", d->net_send_ns,
                                               "recv_ns", d->net_recv_ns));
    json_object_set_new(net, "type", json_string(types[d->net]));
    if (d->net == CHORUS_FAB_NET_FAT_TREE) {
        json_object_set_new(net, "levels", json_integer(d->levels));
        json_object_set_new(net, "hosts_per_leaf", json_integer(d->hosts_per_leaf));
        if (d->levels == 3) json_object_set_new(net, "leaves_per_pod", json_integer(d->leaves_per_pod));
        json_object_set_new(net, "oversubscription",
                            d->levels == 3 ? json_pack("[f, f]", d->oversub[0], d->oversub[1])
                                           : json_pack("[f]", d->oversub[0]));
    }
    json_object_set_new(net, "switch_lat_us", json_real(d->switch_lat_us));
    if (d->net == CHORUS_FAB_NET_EXPLICIT) {
        json_t *sw = json_array(), *ln = json_array();
        for (int i = 0; i < d->nswitches; i++) json_array_append_new(sw, json_string(d->switches[i]));
        for (int i = 0; i < d->nxlinks; i++)
            json_array_append_new(ln, json_pack("{s:s, s:s, s:f, s:f}", "a", d->xlinks[i].a, "b",
                                                d->xlinks[i].b, "gbps", d->xlinks[i].gbps,
                                                "lat_us", d->xlinks[i].lat_us));
        json_object_set_new(net, "switches", sw);
        json_object_set_new(net, "links", ln);
    }
    json_object_set_new(root, "network", net);
    json_object_set_new(root, "cpu",
                        json_pack("{s:f, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:b}", "msg_us",
                                  d->msg_us, "reduce_GBps", d->reduce_GBps, "copy_GBps",
                                  d->copy_GBps, "cores_per_host", d->cores_per_host, "step_us",
                                  d->step_us, "wait_us", d->wait_us, "llc_mb", d->llc_mb,
                                  "dram_factor", d->dram_factor, "recv_streams",
                                  d->recv_streams != 0));
    for (int i = 0; i < d->noverrides; i++) {
        const chorus_fab_override_t *o = &d->overrides[i];
        json_array_append_new(ov, o->down ? json_pack("{s:s, s:b}", "link", o->link, "down", 1)
                                          : json_pack("{s:s, s:f}", "link", o->link, "factor",
                                                      o->factor));
    }
    if (d->noverrides > 0) json_object_set_new(root, "overrides", ov);
    else json_decref(ov);
    rc = json_dumpf(root, (FILE *)file, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    if (rc == 0 && fputc('\n', (FILE *)file) == EOF) rc = -1;
    json_decref(root);
    return rc == 0 ? 0 : -1;
}
