/*
 * What one host can see of its fabric, as a JSON object (schema in fabric.h): the network
 * interfaces and RDMA ports from sysfs, the GPUs and their nearest NIC from lib/topo, the
 * GPUDirect state, and warnings about what commonly breaks a fabric.
 *
 * Everything is read under a sysfs root so that tests can build a fake tree in a temporary
 * folder (fabric_setup_collect_at); production reads /sys. Nothing here fails the run: a file
 * that cannot be read becomes null in the object, because a setup report that stops at the
 * first odd virtual interface would hide the rest.
 */
#include "fabric.h"

#include "topo/topo.h"
#include "transport/ib/ib.h"
#include "util/config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define SETUP_MAX_GIDS 256

/* The first line of root/rel, without its newline, in buf; 0, or -1 if unreadable. */
static int read_line(const char *root, const char *rel, char *buf, size_t size)
{
    char path[4096];
    FILE *f;
    size_t len;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    f = fopen(path, "r");
    if (f == NULL) return -1;
    if (fgets(buf, (int)size, f) == NULL) {
        fclose(f);
        return -1;
    }
    fclose(f);
    len = strlen(buf);
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
        buf[--len] = '\0';
    return 0;
}

/* A relative path from a format; names from readdir can be long, and an over-long path
 * simply fails to open later, so truncation is harmless here. */
static void relf(char *buf, size_t size, const char *fmt, ...) CHORUS_PRINTF(3, 4);
static void relf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* An integer file as JSON: null when unreadable or negative (speed is -1 on veth). */
static json_t *read_int_json(const char *root, const char *rel)
{
    char buf[64], *end;
    long v;

    if (read_line(root, rel, buf, sizeof(buf)) != 0) return json_null();
    v = strtol(buf, &end, 10);
    if (end == buf || v < 0) return json_null();
    return json_integer(v);
}

static json_t *read_str_json(const char *root, const char *rel)
{
    char buf[256];
    return read_line(root, rel, buf, sizeof(buf)) == 0 ? json_string(buf) : json_null();
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names in root/rel (no dot entries), sorted, in a NULL-terminated malloc'ed array. */
static char **list_dir(const char *root, const char *rel)
{
    char path[4096], **names = NULL;
    size_t n = 0;
    DIR *d;
    struct dirent *e;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    d = opendir(path);
    names = calloc(1, sizeof(*names));
    if (d == NULL || names == NULL) goto out;
    while ((e = readdir(d)) != NULL) {
        char **grown;
        if (e->d_name[0] == '.') continue;
        grown = realloc(names, (n + 2) * sizeof(*names));
        if (grown == NULL) break;
        names = grown;
        names[n] = strdup(e->d_name);
        if (names[n] == NULL) break;
        names[++n] = NULL;
    }
    qsort(names, n, sizeof(*names), cmp_str);
out:
    if (d != NULL) closedir(d);
    return names;
}

static void free_list(char **names)
{
    for (size_t i = 0; names != NULL && names[i] != NULL; i++)
        free(names[i]);
    free(names);
}

static void warn(json_t *warnings, const char *fmt, ...) CHORUS_PRINTF(2, 3);
static void warn(json_t *warnings, const char *fmt, ...)
{
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    json_array_append_new(warnings, json_string(text));
}

static json_t *collect_nics(const char *root, json_t *warnings)
{
    json_t *nics = json_array();
    char **names = list_dir(root, "class/net"), rel[512], state[64];

    for (size_t i = 0; names != NULL && names[i] != NULL; i++) {
        const char *n = names[i];
        json_t *o;
        if (strcmp(n, "lo") == 0) continue;
        o = json_object();
        relf(rel, sizeof(rel), "class/net/%s/operstate", n);
        if (read_line(root, rel, state, sizeof(state)) != 0) snprintf(state, sizeof(state), "?");
        json_object_set_new(o, "name", json_string(n));
        json_object_set_new(o, "operstate", json_string(state));
        relf(rel, sizeof(rel), "class/net/%s/speed", n);
        json_object_set_new(o, "speed_mbps", read_int_json(root, rel));
        relf(rel, sizeof(rel), "class/net/%s/mtu", n);
        json_object_set_new(o, "mtu", read_int_json(root, rel));
        relf(rel, sizeof(rel), "class/net/%s/device/numa_node", n);
        json_object_set_new(o, "numa", read_int_json(root, rel));
        json_array_append_new(nics, o);
        /* Only a physical NIC (one with a device link) that is down is news: virtual ones
         * (ifb, dummy, an unused bridge) sit down by design, and "unknown" is what tunnels
         * report. */
        relf(rel, sizeof(rel), "%s/class/net/%s/device", root, n);
        if (strcmp(state, "down") == 0 && access(rel, F_OK) == 0)
            warn(warnings, "NIC %s link is down", n);
    }
    free_list(names);
    return nics;
}

/* "fe80:0000:...:0001" (sysfs form) into 16 bytes; 0, or -1 if malformed. */
static int parse_gid(const char *text, uint8_t gid[16])
{
    unsigned g[8];

    if (sscanf(text, "%4x:%4x:%4x:%4x:%4x:%4x:%4x:%4x", &g[0], &g[1], &g[2], &g[3], &g[4], &g[5],
               &g[6], &g[7]) != 8)
        return -1;
    for (int i = 0; i < 8; i++) {
        gid[2 * i] = (uint8_t)(g[i] >> 8);
        gid[2 * i + 1] = (uint8_t)g[i];
    }
    return 0;
}

static const char *gid_kind(const uint8_t g[16])
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (g[0] == 0xfe && (g[1] & 0xc0) == 0x80) return "link-local";
    if (memcmp(g, mapped, sizeof(mapped)) == 0) return "ipv4-mapped";
    return "other";
}

/* The non-zero GIDs of a port, with their RoCE version from gid_attrs/types. */
static int read_gids(const char *root, const char *port_rel, int roce, ib_gid_entry_t *e)
{
    static const uint8_t zero[16];
    char rel[512], buf[128];
    int n = 0;

    for (int i = 0; i < SETUP_MAX_GIDS; i++) {
        relf(rel, sizeof(rel), "%s/gids/%d", port_rel, i);
        if (read_line(root, rel, buf, sizeof(buf)) != 0) break;
        if (parse_gid(buf, e[n].gid) != 0 || memcmp(e[n].gid, zero, 16) == 0) continue;
        e[n].index = i;
        e[n].type = roce ? IB_GID_TYPE_ROCE_V1 : IB_GID_TYPE_IB;
        relf(rel, sizeof(rel), "%s/gid_attrs/types/%d", port_rel, i);
        if (roce && read_line(root, rel, buf, sizeof(buf)) == 0 && strstr(buf, "v2") != NULL)
            e[n].type = IB_GID_TYPE_ROCE_V2;
        n++;
    }
    return n;
}

/* The GID the ib transport would use on this port, as it would choose it (ib_gid_select,
 * CHORUS_IB_GID_INDEX); on a refusal, the first GID, so that the report shows what is there. */
static void port_gid(json_t *o, const char *root, const char *dev, const char *port_rel,
                     const char *port, int roce, json_t *warnings)
{
    static ib_gid_entry_t e[SETUP_MAX_GIDS];
    int n = read_gids(root, port_rel, roce, e), pos = -1;
    int forced = (int)chorus__config_int("CHORUS_IB_GID_INDEX", -1);
    char text[INET6_ADDRSTRLEN];
    const char *kind;
    chorus_status_t st;

    if (n == 0) {
        json_object_set_new(o, "gid_index", json_null());
        json_object_set_new(o, "gid", json_null());
        json_object_set_new(o, "gid_kind", json_null());
        return;
    }
    st = ib_gid_select(e, n, forced, roce, &pos);
    if (st != CHORUS_SUCCESS) pos = 0;
    kind = gid_kind(e[pos].gid);
    if (inet_ntop(AF_INET6, e[pos].gid, text, sizeof(text)) == NULL) snprintf(text, 2, "?");
    json_object_set_new(o, "gid_index", json_integer(e[pos].index));
    json_object_set_new(o, "gid", json_string(text));
    json_object_set_new(o, "gid_kind", json_string(kind));
    /* On InfiniBand the LID routes and fe80:: GIDs are the norm; on RoCE a link-local GID
     * does not cross an IP router, which fails only when the job spans subnets. */
    if (st != CHORUS_SUCCESS)
        warn(warnings,
             "%s port %s: no usable GID (%s%s): the ib transport refuses this port; "
             "set CHORUS_IB_GID_INDEX",
             dev, port, forced >= 0 ? "CHORUS_IB_GID_INDEX not present" : "only link-local",
             forced >= 0 ? "" : " RoCE GIDs");
    else if (roce && strcmp(kind, "link-local") == 0)
        warn(warnings, "%s port %s: link-local GID %s (index %d) selected: RoCE traffic will "
             "not cross IP routers", dev, port, text, e[pos].index);
}

static json_t *collect_rdma(const char *root, json_t *warnings)
{
    json_t *rdma = json_array();
    char **devs = list_dir(root, "class/infiniband"), rel[512], buf[128];

    for (size_t i = 0; devs != NULL && devs[i] != NULL; i++) {
        char **ports;
        relf(rel, sizeof(rel), "class/infiniband/%s/ports", devs[i]);
        ports = list_dir(root, rel);
        for (size_t p = 0; ports != NULL && ports[p] != NULL; p++) {
            json_t *o = json_object();
            char port_rel[512], state[64] = "?";
            const char *s;
            int roce;
            relf(port_rel, sizeof(port_rel), "class/infiniband/%s/ports/%s", devs[i],
                     ports[p]);
            json_object_set_new(o, "device", json_string(devs[i]));
            json_object_set_new(o, "port", json_integer(atoi(ports[p])));
            /* sysfs says "4: ACTIVE"; the word is what people read. */
            relf(rel, sizeof(rel), "%s/state", port_rel);
            if (read_line(root, rel, buf, sizeof(buf)) == 0) {
                s = strchr(buf, ':');
                snprintf(state, sizeof(state), "%.63s", s != NULL ? s + 1 + (s[1] == ' ') : buf);
            }
            json_object_set_new(o, "state", json_string(state));
            relf(rel, sizeof(rel), "%s/link_layer", port_rel);
            roce = read_line(root, rel, buf, sizeof(buf)) == 0 && strcmp(buf, "Ethernet") == 0;
            json_object_set_new(o, "link_layer", read_str_json(root, rel));
            relf(rel, sizeof(rel), "%s/rate", port_rel);
            json_object_set_new(o, "rate", read_str_json(root, rel));
            port_gid(o, root, devs[i], port_rel, ports[p], roce, warnings);
            json_array_append_new(rdma, o);
            if (strcmp(state, "ACTIVE") != 0)
                warn(warnings, "RDMA %s port %s is %s", devs[i], ports[p], state);
        }
        free_list(ports);
    }
    free_list(devs);
    return rdma;
}

static const char *distance_name(int d)
{
    return d == CHORUS_TOPO_DIST_SWITCH ? "switch" : d == CHORUS_TOPO_DIST_NUMA ? "numa" : "sys";
}

static json_t *collect_gpus(const char *hostname, json_t *warnings)
{
    json_t *gpus = json_array();
    chorus_topo_t *t = NULL;
    const chorus_topo_host_t *h;

    if (chorus__topo_local(&t) != CHORUS_SUCCESS) {
        warn(warnings, "topology unavailable: %s", chorus_last_error());
        return gpus;
    }
    h = chorus__topo_find_host(t, hostname);
    for (int g = 0; h != NULL && g < h->ngpus; g++) {
        const chorus_topo_dev_t *gpu = &h->gpus[g];
        int nic = chorus__topo_nearest_nic(h, g), d = -1;
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(g));
        json_object_set_new(o, "bus_id", json_string(gpu->bus_id));
        json_object_set_new(o, "numa", gpu->numa >= 0 ? json_integer(gpu->numa) : json_null());
        if (nic >= 0) d = chorus__topo_dev_distance(gpu, &h->nics[nic]);
        json_object_set_new(o, "nearest_nic", nic >= 0 ? json_string(h->nics[nic].name)
                                                       : json_null());
        json_object_set_new(o, "distance", d >= 0 ? json_string(distance_name(d)) : json_null());
        json_array_append_new(gpus, o);
        if (nic < 0)
            warn(warnings, "GPU %d (%s) has no NIC in the topology", g, gpu->bus_id);
        else if (d == CHORUS_TOPO_DIST_SYS)
            warn(warnings, "GPU %d (%s) is %s its nearest NIC %s", g, gpu->bus_id,
                 gpu->numa >= 0 && h->nics[nic].numa >= 0 ? "across sockets from"
                                                          : "at an unknown distance from",
                 h->nics[nic].name);
    }
    chorus__topo_free(t);
    return gpus;
}

/* dma-buf registration of GPU memory needs Linux 5.12 and an NVIDIA driver of release 515
 * or later (with the open kernel modules); the driver's flavour is not visible in sysfs, so
 * this says "possible", not "working". */
static int dmabuf_possible(const char *root)
{
    char buf[64];
    struct utsname u;
    int major = 0, minor = 0;

    if (read_line(root, "module/nvidia/version", buf, sizeof(buf)) != 0 || atoi(buf) < 515)
        return 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2) return 0;
    return major > 5 || (major == 5 && minor >= 12);
}

static const char *gpudirect(const char *root, size_t ngpus, size_t nrdma, json_t *warnings)
{
    char path[4096];

    if (ngpus == 0 || nrdma == 0) return "n/a";
    snprintf(path, sizeof(path), "%s/module/nvidia_peermem", root);
    if (access(path, F_OK) == 0) return "nvidia-peermem";
    if (dmabuf_possible(root)) return "dma-buf";
    warn(warnings, "GPUDirect RDMA is off: GPUs and RDMA devices are present, but "
         "nvidia_peermem is not loaded and dma-buf needs Linux 5.12 and driver 515+");
    return "off";
}

chorus_status_t fabric_setup_collect_at(const char *sysfs_root, char **json_p)
{
    json_t *root = json_object(), *warnings = json_array(), *nics, *rdma, *gpus;
    char host[256] = "?", *text;

    if (root == NULL || warnings == NULL) goto err_json;
    if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "?");
    nics = collect_nics(sysfs_root, warnings);
    rdma = collect_rdma(sysfs_root, warnings);
    gpus = collect_gpus(host, warnings);
    json_object_set_new(root, "hostname", json_string(host));
    json_object_set_new(root, "nics", nics);
    json_object_set_new(root, "rdma", rdma);
    json_object_set_new(root, "gpus", gpus);
    json_object_set_new(root, "gpudirect", json_string(gpudirect(sysfs_root, json_array_size(gpus),
                                                                 json_array_size(rdma), warnings)));
    json_object_set_new(root, "warnings", warnings);
    warnings = NULL;
    text = json_dumps(root, JSON_COMPACT);
    if (text == NULL) goto err_json;
    json_decref(root);
    *json_p = text;
    return CHORUS_SUCCESS;

err_json:
    json_decref(warnings);
    json_decref(root);
    return CHORUS_ERR_NO_MEMORY;
}

chorus_status_t fabric_setup_collect(char **json_p)
{
    return fabric_setup_collect_at("/sys", json_p);
}
