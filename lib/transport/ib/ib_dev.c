/*
 * Device and port choice. CHORUS_IB_HCA follows the NCCL_IB_HCA syntax that cluster
 * admins already write ("mlx5_0:1,mlx5_1:1", "^mlx5_2", "=mlx5_0"), parsed by a pure
 * function; without it the transport follows the core's nic_preference (the NICs nearest
 * to the rank's GPU first, computed from the topology so that the transport never reads
 * it), through ib_port_pick_pref, pure too. The scan of ibv_get_device_list that feeds
 * them exists only where libibverbs does (CHORUS_HAVE_IBV).
 */
#include "transport/ib/ib.h"

#include "util/config.h"
#include "util/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CHORUS_HAVE_IBV
#include <infiniband/verbs.h>
#endif

/* One "name[:port]" item of length len at s. */
static chorus_status_t parse_item(const char *s, size_t len, ib_hca_spec_t *spec)
{
    const char *colon = memchr(s, ':', len);
    size_t name_len = colon != NULL ? (size_t)(colon - s) : len;

    if (name_len == 0 || name_len >= IB_HCA_NAME) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "ib: CHORUS_IB_HCA item \"%.*s\": bad device name", (int)len, s);
    }
    memcpy(spec->name, s, name_len);
    spec->name[name_len] = '\0';
    spec->port = 0;
    if (colon != NULL) {
        size_t digits = len - name_len - 1;
        long port = 0;

        if (digits == 0 || digits > 3) goto err_port;
        for (size_t i = 0; i < digits; i++) {
            char ch = colon[1 + i];

            if (ch < '0' || ch > '9') goto err_port;
            port = port * 10 + (ch - '0');
        }
        if (port < 1 || port > 255) goto err_port;
        spec->port = (int)port;
    }
    return CHORUS_SUCCESS;

err_port:
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "ib: CHORUS_IB_HCA item \"%.*s\": the port must be 1..255", (int)len, s);
}

chorus_status_t ib_hca_parse(const char *text, ib_hca_list_t *list_p)
{
    ib_hca_list_t list;
    const char *s = text;
    chorus_status_t status;

    memset(&list, 0, sizeof(list));
    if (s == NULL) s = "";
    if (*s == '^') {
        list.exclude = 1;
        s++;
    }
    if (*s == '=') {
        list.exact = 1;
        s++;
    }
    while (*s != '\0') {
        const char *comma = strchr(s, ',');
        size_t len = comma != NULL ? (size_t)(comma - s) : strlen(s);

        if (list.n == IB_HCA_MAX) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "ib: CHORUS_IB_HCA lists more than %d devices", IB_HCA_MAX);
        }
        status = parse_item(s, len, &list.e[list.n]);
        if (status != CHORUS_SUCCESS) return status;
        list.n++;
        s += len;
        if (*s == ',') {
            s++;
            if (*s == '\0') {
                return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                     "ib: CHORUS_IB_HCA \"%s\" ends with a comma", text);
            }
        }
    }
    if ((list.exclude || list.exact) && list.n == 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "ib: CHORUS_IB_HCA \"%s\" names no device", text);
    }
    *list_p = list;
    return CHORUS_SUCCESS;
}

static int item_match(const ib_hca_list_t *list, const ib_hca_spec_t *e, const char *dev, int port)
{
    int name_ok = list->exact ? strcmp(e->name, dev) == 0
                              : strncmp(e->name, dev, strlen(e->name)) == 0;

    return name_ok && (e->port == 0 || e->port == port);
}

int ib_hca_match(const ib_hca_list_t *list, const char *dev, int port)
{
    int hit = 0;

    if (list->n == 0) return 1;
    for (int i = 0; i < list->n && !hit; i++)
        hit = item_match(list, &list->e[i], dev, port);
    return list->exclude ? !hit : hit;
}

int ib_port_pick(const ib_port_cand_t *cands, int n, const ib_hca_list_t *list, int *pos_p)
{
    for (int i = 0; i < n; i++) {
        if (cands[i].active && ib_hca_match(list, cands[i].dev, cands[i].port)) {
            *pos_p = i;
            return 0;
        }
    }
    return -1;
}

/* The place of PCI address bus in the comma-separated list pref (0 first), comparing
 * canonical forms; -1 when bus is malformed or pref does not name it. */
static int pref_place(const char *pref, const char *bus)
{
    char want[CHORUS_PCI_BUSID_MAX], item[CHORUS_PCI_BUSID_MAX], canon[CHORUS_PCI_BUSID_MAX];
    int place = 0;

    if (pref == NULL || chorus__pci_bus_id_canon(bus, want) != 0) return -1;
    while (*pref != '\0') {
        size_t len = strcspn(pref, ",");

        /* An item too long for any bus id, or malformed, names nothing but keeps its place. */
        if (len < sizeof item) {
            memcpy(item, pref, len);
            item[len] = '\0';
            if (chorus__pci_bus_id_canon(item, canon) == 0 && strcmp(canon, want) == 0)
                return place;
        }
        place++;
        pref += len + (pref[len] == ',');
    }
    return -1;
}

int ib_port_pick_pref(const ib_port_cand_t *cands, int n, const ib_hca_list_t *list,
                      const char *pref, int *pos_p)
{
    int best = -1, best_place = 0;

    for (int i = 0; i < n && pref != NULL && pref[0] != '\0'; i++) {
        int place;

        if (!cands[i].active || !ib_hca_match(list, cands[i].dev, cands[i].port)) continue;
        place = pref_place(pref, cands[i].bus_id);
        if (place >= 0 && (best < 0 || place < best_place)) {
            best = i;
            best_place = place;
        }
    }
    if (best < 0) return ib_port_pick(cands, n, list, pos_p);
    *pos_p = best;
    return 0;
}

int ib_dev_bus_id(const char *ibdev, char *buf, size_t len)
{
    char path[160], target[256];
    const char *base;
    ssize_t n;

    if (ibdev == NULL || ibdev[0] == '\0' || strchr(ibdev, '/') != NULL || len == 0) return -1;
    if (strcmp(ibdev, ".") == 0 || strcmp(ibdev, "..") == 0) return -1;
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/device", ibdev);
    n = readlink(path, target, sizeof target - 1);
    if (n <= 0) return -1;
    target[n] = '\0';
    /* The link ends in the PCI function: "../../../0000:17:00.0". */
    base = strrchr(target, '/');
    base = base != NULL ? base + 1 : target;
    if (strlen(base) >= len) return -1;
    snprintf(buf, len, "%s", base);
    return 0;
}

#ifdef CHORUS_HAVE_IBV
#include "transport/ib/ib_verbs.h"

/* Fills the candidate list from every port of every device (contexts kept open in ctxs,
 * one per device, for the one that wins). */
static int scan_ports(struct ibv_device **devs, int ndev, struct ibv_context **ctxs,
                      ib_port_cand_t *cands, int max)
{
    int n = 0;

    for (int d = 0; d < ndev; d++) {
        struct ibv_device_attr attr;

        ctxs[d] = ibv_open_device(devs[d]);
        if (ctxs[d] == NULL) continue;
        if (ibv_query_device(ctxs[d], &attr) != 0) continue;
        for (int port = 1; port <= attr.phys_port_cnt && n < max; port++) {
            struct ibv_port_attr pa;

            if (ibv_query_port(ctxs[d], (uint8_t)port, &pa) != 0) continue;
            snprintf(cands[n].dev, sizeof(cands[n].dev), "%s", ibv_get_device_name(devs[d]));
            cands[n].port = port;
            cands[n].active = pa.state == IBV_PORT_ACTIVE;
            cands[n].roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
            if (ib_dev_bus_id(cands[n].dev, cands[n].bus_id, sizeof cands[n].bus_id) != 0)
                cands[n].bus_id[0] = '\0';
            n++;
        }
    }
    return n;
}

/* The port to use: CHORUS_IB_HCA's first allowed one when it lists devices to use (the
 * admin's order wins); otherwise the first of the core's preference (the NICs nearest to the
 * rank's GPU) that is active and not excluded, else the first active one. */
static int pick_port(const chorus_tp_params_t *params, const ib_port_cand_t *cands, int n,
                     const ib_hca_list_t *list, int *pos_p)
{
    const char *pref = params->nic_preference;
    int rc;

    if ((list->n > 0 && !list->exclude) || pref == NULL || pref[0] == '\0')
        return ib_port_pick(cands, n, list, pos_p);
    rc = ib_port_pick_pref(cands, n, list, pref, pos_p);
    if (rc == 0)
        CHORUS_INFO("ib", "rank %d: %s:%d (%s) for NIC preference %s", params->rank,
                    cands[*pos_p].dev, cands[*pos_p].port,
                    cands[*pos_p].bus_id[0] ? cands[*pos_p].bus_id : "no PCI address", pref);
    return rc;
}

/* Reads the port's GID table and chooses one entry. */
static chorus_status_t choose_gid(int rank, ib_dev_choice_t *c, int table_len)
{
    ib_gid_entry_t *entries = calloc(table_len > 0 ? (size_t)table_len : 1, sizeof(*entries));
    int64_t forced = chorus__config_int("CHORUS_IB_GID_INDEX", -1);
    chorus_status_t status;
    int n = 0, pos = -1;

    if (entries == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ib: GIDs", rank);
    for (int i = 0; i < table_len; i++) {
        struct ibv_gid_entry ge;

        /* Unpopulated entries fail (ENODATA): they are simply not candidates. */
        if (ibv_query_gid_ex(c->ctx, (uint32_t)c->port, (uint32_t)i, &ge, 0) != 0) continue;
        entries[n].index = i;
        memcpy(entries[n].gid, ge.gid.raw, 16);
        entries[n].type = ge.gid_type == IBV_GID_TYPE_ROCE_V2   ? IB_GID_TYPE_ROCE_V2
                          : ge.gid_type == IBV_GID_TYPE_ROCE_V1 ? IB_GID_TYPE_ROCE_V1
                                                                : IB_GID_TYPE_IB;
        n++;
    }
    if (forced > INT32_MAX) forced = INT32_MAX;
    status = ib_gid_select(entries, n, forced < 0 ? -1 : (int)forced, c->roce, &pos);
    if (status == CHORUS_SUCCESS) {
        c->gid_index = entries[pos].index;
        memcpy(c->gid, entries[pos].gid, 16);
    } else {
        chorus__error_context(status, "rank %d: %s:%d", rank, c->dev, c->port);
    }
    free(entries);
    return status;
}

chorus_status_t ib_dev_open(const chorus_tp_params_t *params, ib_dev_choice_t *choice_p)
{
    int rank = params->rank;
    ib_dev_choice_t c;
    ib_hca_list_t list;
    ib_port_cand_t cands[64];
    struct ibv_context *ctxs[64];
    struct ibv_device **devs;
    struct ibv_port_attr pa;
    chorus_status_t status;
    int ndev = 0, n, pos = -1, owner = -1;

    memset(&c, 0, sizeof(c));
    memset(ctxs, 0, sizeof(ctxs));
    status = ib_hca_parse(chorus__config_str("CHORUS_IB_HCA"), &list);
    if (status != CHORUS_SUCCESS) return status;
    devs = ibv_get_device_list(&ndev);
    if (devs == NULL || ndev == 0) {
        if (devs != NULL) ibv_free_device_list(devs);
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: ib: no RDMA device (%s)", rank,
                             devs == NULL ? strerror(errno) : "ibv_get_device_list is empty");
    }
    if (ndev > 64) ndev = 64;
    n = scan_ports(devs, ndev, ctxs, cands, 64);
    if (pick_port(params, cands, n, &list, &pos) != 0) {
        const char *hca = chorus__config_str("CHORUS_IB_HCA");

        status = chorus__error(CHORUS_ERR_UNSUPPORTED,
                               "rank %d: ib: no active port among %d ports of %d devices allowed "
                               "by CHORUS_IB_HCA=\"%s\"", rank, n, ndev, hca ? hca : "");
        goto out;
    }
    for (int d = 0; d < ndev && owner < 0; d++) {
        if (ctxs[d] != NULL && strcmp(ibv_get_device_name(devs[d]), cands[pos].dev) == 0) {
            owner = d;
        }
    }
    c.ctx = ctxs[owner];
    snprintf(c.dev, sizeof(c.dev), "%s", cands[pos].dev);
    c.port = cands[pos].port;
    c.roce = cands[pos].roce;
    if (ibv_query_port(c.ctx, (uint8_t)c.port, &pa) != 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: ib: query %s:%d", rank,
                                     c.dev, c.port);
        goto out;
    }
    c.lid = pa.lid;
    c.mtu = pa.active_mtu;
    status = choose_gid(rank, &c, pa.gid_tbl_len);
    if (status != CHORUS_SUCCESS) goto out;
    ctxs[owner] = NULL; /* kept: it is the result */
    CHORUS_INFO("ib", "rank %d: %s port %d (%s), GID index %d", rank, c.dev, c.port,
                c.roce ? "RoCE" : "InfiniBand", c.gid_index);
    *choice_p = c;
out:
    for (int d = 0; d < ndev; d++) {
        if (ctxs[d] != NULL) ibv_close_device(ctxs[d]);
    }
    ibv_free_device_list(devs);
    return status;
}
#endif /* CHORUS_HAVE_IBV */
