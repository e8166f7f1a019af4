/*
 * A fabric description from what chorus-fabric measured (its --json report,
 * bench/schema/chorus-fabric.schema.json), so that a real cluster is described by a tool and
 * not by hand.
 *
 * What is taken, and how:
 * - hosts and ranks per host from the run (host_of; hosts of unequal rank counts are refused:
 *   a description has one ranks_per_host);
 * - the NIC rate: per host, the median of its send rates in the concurrent round when there
 *   was one (every host sending at once, as a collective does), else the median of its
 *   pairs' rates one at a time; the description's rate is the median over hosts, and a host
 *   below 90% of it gets an override of its NIC with the ratio (the slow link the report
 *   found);
 * - latencies: a pair's one-way latency is the software cost on both ends plus two NIC
 *   links, so each NIC link gets (median latency - 2 x msg_us) / 2;
 * - inside hosts: the median rate and latency of the intra pairs;
 * - socket buffers: the tcp transport's 4 MiB when tcp carried the traffic (run.transport
 *   tcp, or auto, which is tcp between hosts), else none and 2 us of software a message.
 * The CPU figures (message software cost, reduce and copy rates) are not in the report and
 * stay the netns preset's, which docs/fabric.md calls starting points.
 */
#include "sim/fabric.h"

#include "util/status.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *p, const void *q)
{
    double x = *(const double *)p, y = *(const double *)q;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    if (n <= 0) return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double num_or(json_t *o, const char *key, double fallback)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : fallback;
}

static chorus_status_t import_bad(const char *path, const char *what)
{
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: not a usable chorus-fabric report: %s",
                         path, what);
}

/* Per host h, the median of what it sent: in the concurrent round, or one pair at a time. */
static double host_rate(json_t *root, int h, double *scratch)
{
    json_t *conc = json_object_get(root, "concurrent"), *inter = json_object_get(root, "inter"), *p;
    json_t *tx = json_object_get(conc, "host_tx_gbps");
    size_t k;
    int n = 0;

    if (json_is_array(tx) && json_is_number(json_array_get(tx, (size_t)h)))
        return json_number_value(json_array_get(tx, (size_t)h));
    json_array_foreach(inter, k, p) {
        int a = (int)json_integer_value(json_object_get(p, "a"));
        int b = (int)json_integer_value(json_object_get(p, "b"));
        double ab = num_or(p, "gbps_ab", -1), ba = num_or(p, "gbps_ba", -1);
        if (a == h && ab > 0) scratch[n++] = ab;
        if (b == h && ba > 0) scratch[n++] = ba;
    }
    return median(scratch, n);
}

chorus_status_t chorus__fab_desc_from_fabric(const char *path, chorus_fab_desc_t *d)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err), *host_of, *inter, *intra, *p;
    const char *transport, *tool;
    double *v = NULL, *rates = NULL, nic, lat;
    int nranks, nhosts = 0, rph = -1, n = 0, nslow = 0, made = 0, tcp;
    int *count = NULL;
    size_t k;
    chorus_status_t st = CHORUS_SUCCESS;

    if (root == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: line %d: %s", path, err.line,
                             err.text);
    host_of = json_object_get(root, "host_of");
    inter = json_object_get(root, "inter");
    intra = json_object_get(root, "intra");
    transport = json_string_value(json_object_get(json_object_get(root, "run"), "transport"));
    tool = json_string_value(json_object_get(root, "tool"));
    if (tool == NULL || strcmp(tool, "chorus-fabric") != 0 || !json_is_array(host_of) ||
        json_array_size(host_of) == 0 || !json_is_array(inter)) {
        st = import_bad(path, "no tool \"chorus-fabric\", host_of or inter");
        goto out;
    }
    nranks = (int)json_array_size(host_of);
    for (int r = 0; r < nranks; r++) {
        json_int_t h = json_integer_value(json_array_get(host_of, (size_t)r));
        if (h < 0 || h >= nranks) {
            st = import_bad(path, "host_of has a host index out of range");
            goto out;
        }
        if (h + 1 > nhosts) nhosts = (int)h + 1;
    }
    count = calloc((size_t)nhosts, sizeof *count);
    v = malloc((json_array_size(inter) * 2 + json_array_size(intra) * 2 + (size_t)nhosts + 1) *
               sizeof *v);
    rates = malloc(((size_t)nhosts + 1) * sizeof *rates);
    if (count == NULL || v == NULL || rates == NULL) {
        st = chorus__error(CHORUS_ERR_NO_MEMORY, "%s: no memory", path);
        goto out;
    }
    for (int r = 0; r < nranks; r++) count[json_integer_value(json_array_get(host_of, (size_t)r))]++;
    for (int h = 0; h < nhosts; h++) {
        if (rph < 0) rph = count[h];
        if (count[h] != rph) {
            st = import_bad(path, "hosts hold different numbers of ranks");
            goto out;
        }
    }

    /* Start from the emulated cluster's preset: its CPU figures are the starting point. */
    st = chorus__fab_desc_preset("netns", d);
    if (st != CHORUS_SUCCESS) goto out;
    made = 1;
    snprintf(d->name, sizeof d->name, "measured-%dx%d", nhosts, rph);
    d->hosts = nhosts;
    d->ranks_per_host = rph;
    /* "auto" carries traffic between hosts over tcp (CHORUS_TRANSPORT's meaning). */
    tcp = transport == NULL || strcmp(transport, "tcp") == 0 || strcmp(transport, "auto") == 0;
    d->nic_sendbuf = tcp ? 4 << 20 : 0;
    if (!tcp) d->msg_us = 2;

    if (nhosts > 1) {
        for (int h = 0; h < nhosts; h++) rates[h] = host_rate(root, h, v);
        memcpy(v, rates, (size_t)nhosts * sizeof *v);
        nic = median(v, nhosts);
        if (!(nic > 0)) {
            st = import_bad(path, "no inter-host rate was measured");
            goto out;
        }
        d->nic_gbps = nic;
        n = 0;
        json_array_foreach(inter, k, p) if (num_or(p, "lat_us", -1) >= 0) v[n++] = num_or(p, "lat_us", 0);
        lat = median(v, n);
        d->nic_lat_us = lat > 2 * d->msg_us ? (lat - 2 * d->msg_us) / 2 : 0;
        d->switch_lat_us = 0;
        for (int h = 0; h < nhosts; h++)
            if (rates[h] > 0 && rates[h] < 0.9 * nic) nslow++;
        if (nslow > 0) {
            d->overrides = calloc((size_t)nslow, sizeof *d->overrides);
            if (d->overrides == NULL) {
                st = chorus__error(CHORUS_ERR_NO_MEMORY, "%s: no memory", path);
                goto out;
            }
            for (int h = 0; h < nhosts; h++)
                if (rates[h] > 0 && rates[h] < 0.9 * nic) {
                    chorus_fab_override_t *o = &d->overrides[d->noverrides++];
                    snprintf(o->link, sizeof o->link, "h%d.nic0", h);
                    o->factor = rates[h] / nic;
                }
        }
    }
    n = 0;
    json_array_foreach(intra, k, p) {
        double ab = num_or(p, "gbps_ab", -1), ba = num_or(p, "gbps_ba", -1);
        if (ab > 0) v[n++] = ab;
        if (ba > 0) v[n++] = ba;
    }
    if (n > 0) d->intra_gbps = median(v, n);
    n = 0;
    json_array_foreach(intra, k, p) if (num_or(p, "lat_us", -1) >= 0) v[n++] = num_or(p, "lat_us", 0);
    if (n > 0) d->intra_lat_us = fmax(0, (median(v, n) - 2 * d->msg_us) / 2);
out:
    if (st != CHORUS_SUCCESS && made) chorus__fab_desc_free(d);
    free(count);
    free(v);
    free(rates);
    json_decref(root);
    return st;
}
