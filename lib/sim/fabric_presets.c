/*
 * Fabrics made by a tool, not typed by hand: "netns" (the emulated cluster of
 * tests/cluster: network namespaces on one bridge, each host's veth capped by tbf),
 * "fattree" (GPU hosts with NVLink inside and one NIC per GPU on a rail-optimised fat
 * tree), "nvlink" (one host of GPUs). `chorus-sim --preset SPEC --describe` prints the
 * JSON, to keep, compare or edit.
 *
 * SPEC is NAME[:key=value,...]; the keys of each preset are listed in
 * chorus__fab_preset_help. Figures not given are the defaults below, each with where it
 * comes from.
 */
#include "sim/fabric.h"

#include "util/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *chorus__fab_preset_help(void)
{
    return "  netns[:hosts=H,ranks=R,mbit=M]     the emulated cluster: H hosts (4) of R ranks (1)\n"
           "                                      on one bridge, each host's link M Mbit/s (100)\n"
           "  fattree[:hosts=H,gpus=G,rails=K,gbps=B,oversub=O,nvlink=N,hosts_per_leaf=L]\n"
           "                                      H hosts (512) of G GPUs (8), K NICs (8) of B\n"
           "                                      Gbit/s (400), 2-level fat tree O:1 (2), NVLink\n"
           "                                      N GB/s per GPU each way (450), L hosts per leaf (32)\n"
           "  nvlink[:gpus=G,nvlink=N]             one host of G GPUs (8) on NVLink, N GB/s (450)\n";
}

/* Reads "k=v,k=v" into the named doubles; CHORUS_ERR_INVALID_ARGUMENT for another key. */
static chorus_status_t preset_args(const char *spec, const char *const *keys, double *vals)
{
    const char *p = strchr(spec, ':');

    while (p != NULL && *++p != '\0') {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        size_t klen;
        int hit = 0;
        char *stop;
        double v;
        if (end == NULL) end = p + strlen(p);
        if (eq == NULL || eq > end)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "preset %s: \"%.*s\" is not key=value",
                                 spec, (int)(end - p), p);
        klen = (size_t)(eq - p);
        v = strtod(eq + 1, &stop);
        if (stop != end || !(v > 0))
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "preset %s: %.*s is not a number "
                                 "> 0", spec, (int)(end - eq - 1), eq + 1);
        for (int i = 0; keys[i] != NULL; i++)
            if (strlen(keys[i]) == klen && strncmp(keys[i], p, klen) == 0) {
                vals[i] = v;
                hit = 1;
            }
        if (!hit)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "preset %s: unknown key \"%.*s\"",
                                 spec, (int)klen, p);
        p = *end ? end : NULL;
    }
    return CHORUS_SUCCESS;
}

static int is_preset(const char *spec, const char *name)
{
    size_t n = strlen(name);
    return strncmp(spec, name, n) == 0 && (spec[n] == '\0' || spec[n] == ':');
}

chorus_status_t chorus__fab_desc_preset(const char *spec, chorus_fab_desc_t *d)
{
    chorus_status_t st;

    chorus__fab_desc_default(d);
    if (is_preset(spec, "netns")) {
        static const char *const keys[] = {"hosts", "ranks", "mbit", NULL};
        double v[] = {4, 1, 100};
        if ((st = preset_args(spec, keys, v)) != CHORUS_SUCCESS) return st;
        snprintf(d->name, sizeof d->name, "netns-%gx%g-%gmbit", v[0], v[1], v[2]);
        d->hosts = (int)v[0];
        d->ranks_per_host = (int)v[1];
        /* Ranks of one host share memory: the copy rate of shm on this machine class. */
        snprintf(d->intra_kind, sizeof d->intra_kind, "shm");
        d->intra_gbps = 40;
        d->intra_lat_us = 2;
        /* Each host's veth, capped by tbf at mbit (on the wire); the bridge forwards in the
         * kernel. What carries payload is a TCP segment's 1448 bytes of every 1514 on the
         * wire (Ethernet 14, IP 20, TCP 20 and its timestamp option 12): a constant of the
         * protocols, not a fit. */
        d->nic_gbps = v[2] / 1000 * 1448.0 / 1514.0;
        /* tbf's bucket (tests/cluster/cluster.sh: burst 80kb, tc's 1024-byte kb): a link
         * that idled sends that much at the speed of a veth without tbf, 10 Gbit/s (two
         * unshaped hosts: chorus-bench sendrecv of 4 MiB, 1.42 GB/s each way, 2026-12-03). */
        d->nic_burst = 80 * 1024;
        d->nic_peak_gbps = 10;
        d->nic_lat_us = 25;
        /* The tcp transport's socket buffers (CHORUS_TCP_BUF, 4 MiB): a send is done once
         * its bytes are in the kernel, while earlier ones still wait for the wire. */
        d->nic_sendbuf = 4 << 20;
        d->net = CHORUS_FAB_NET_SWITCH;
        d->switch_lat_us = 5;
        d->msg_us = 8;       /* a tcp message's system calls on each end */
        d->reduce_GBps = 4;  /* float32 sum, one core */
        d->copy_GBps = 8;
        d->cores_per_host = 2;
        return CHORUS_SUCCESS;
    }
    if (is_preset(spec, "fattree")) {
        static const char *const keys[] = {"hosts", "gpus", "rails", "gbps", "oversub",
                                           "nvlink", "hosts_per_leaf", NULL};
        double v[] = {512, 8, 8, 400, 2, 450, 32};
        if ((st = preset_args(spec, keys, v)) != CHORUS_SUCCESS) return st;
        {
            char name[160];
            snprintf(name, sizeof name, "fattree-%gx%g-%grail-%ggbps-%g:1", v[0], v[1], v[2],
                     v[3], v[4]);
            snprintf(d->name, sizeof d->name, "%.63s", name);
        }
        d->hosts = (int)v[0];
        d->ranks_per_host = (int)v[1];
        snprintf(d->intra_kind, sizeof d->intra_kind, "nvlink");
        d->intra_gbps = v[5] * 8; /* GB/s to Gbit/s */
        d->intra_lat_us = 1;
        d->nics = (int)v[2];
        d->nic_gbps = v[3];
        d->nic_lat_us = 1;
        d->net = CHORUS_FAB_NET_FAT_TREE;
        d->levels = 2;
        d->hosts_per_leaf = (int)v[6];
        d->oversub[0] = v[4];
        d->switch_lat_us = 0.6;
        d->msg_us = 2;        /* a GPU kernel's step, as NCCL's LL/simple protocols pay */
        d->reduce_GBps = 1500; /* device memory rate: reductions are not the bottleneck */
        d->copy_GBps = 1500;
        return CHORUS_SUCCESS;
    }
    if (is_preset(spec, "nvlink")) {
        static const char *const keys[] = {"gpus", "nvlink", NULL};
        double v[] = {8, 450};
        if ((st = preset_args(spec, keys, v)) != CHORUS_SUCCESS) return st;
        snprintf(d->name, sizeof d->name, "nvlink-%g-%gGBps", v[0], v[1]);
        d->hosts = 1;
        d->ranks_per_host = (int)v[0];
        snprintf(d->intra_kind, sizeof d->intra_kind, "nvlink");
        d->intra_gbps = v[1] * 8;
        d->intra_lat_us = 1;
        d->msg_us = 2;
        d->reduce_GBps = 1500;
        d->copy_GBps = 1500;
        return CHORUS_SUCCESS;
    }
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "no preset \"%s\"; the presets:\n%s", spec,
                         chorus__fab_preset_help());
}
