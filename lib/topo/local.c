/*
 * Cheap facts about the local machine, read from sysfs and procfs: the NUMA node of the
 * CPU a thread runs on, of a network interface and of a PCI device. Communicator creation
 * asks them of every rank, so each is a handful of small file reads (no hwloc, no
 * netlink); all answer -1 (or fail) where the kernel does not say, which the order
 * functions treat as "unknown".
 */
#include "topo/topo.h"

#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first integer in a small sysfs file, or fallback. */
static int local_read_int(const char *path, int fallback)
{
    FILE *f = fopen(path, "r");
    int v;

    if (f == NULL) return fallback;
    if (fscanf(f, "%d", &v) != 1) v = fallback;
    fclose(f);
    return v;
}

int chorus__topo_cpu_numa(void)
{
    char path[64];
    struct dirent *e;
    DIR *d;
    unsigned int ucpu = 0, unode = 0;
    int cpu, node = -1;

    /* getcpu answers both from the vDSO in nanoseconds; sysfs is the fallback. */
    if (getcpu(&ucpu, &unode) == 0 && unode < INT_MAX) return (int)unode;
    cpu = sched_getcpu();
    if (cpu < 0) return -1;
    /* The kernel links cpuN/nodeM for the node of every online CPU: one directory scan. */
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d", cpu);
    d = opendir(path);
    if (d == NULL) return -1;
    while ((e = readdir(d)) != NULL && node < 0) {
        char *end;
        long v;

        if (strncmp(e->d_name, "node", 4) != 0) continue;
        v = strtol(e->d_name + 4, &end, 10);
        if (end != e->d_name + 4 && *end == '\0' && v >= 0 && v < INT_MAX) node = (int)v;
    }
    closedir(d);
    return node;
}

int chorus__topo_pci_numa(const char *bus_id)
{
    char path[128];
    int node;

    if (bus_id == NULL || bus_id[0] == '\0' || strchr(bus_id, '/') != NULL) return -1;
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", bus_id);
    node = local_read_int(path, -1);
    return node >= 0 ? node : -1;
}

/* The NUMA node of the interface named exactly name: its device's node, or the node of
 * the device above it (a virtio NIC's device is the virtio bus device, whose parent is
 * the PCI function). -1 for virtual interfaces (lo, veth, bridges) and single-node
 * machines that report -1. */
static int local_if_numa_exact(const char *name)
{
    char path[128];
    int node;

    if (strchr(name, '/') != NULL || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return -1;
    snprintf(path, sizeof path, "/sys/class/net/%s/device/numa_node", name);
    node = local_read_int(path, -1);
    if (node < 0) {
        snprintf(path, sizeof path, "/sys/class/net/%s/device/../numa_node", name);
        node = local_read_int(path, -1);
    }
    return node >= 0 ? node : -1;
}

int chorus__topo_if_numa(const char *ifname)
{
    char path[128];
    struct dirent *e;
    DIR *d;
    size_t len;
    int node = -1;

    if (ifname == NULL || ifname[0] == '\0') return -1;
    /* An exact name wins over a prefix, as CHORUS_SOCKET_IFNAME reads in lib/util/sock.c. */
    snprintf(path, sizeof path, "/sys/class/net/%s", ifname);
    if (strchr(ifname, '/') == NULL && access(path, F_OK) == 0)
        return local_if_numa_exact(ifname);
    d = opendir("/sys/class/net");
    if (d == NULL) return -1;
    len = strlen(ifname);
    while ((e = readdir(d)) != NULL && node < 0)
        if (e->d_name[0] != '.' && strncmp(e->d_name, ifname, len) == 0)
            node = local_if_numa_exact(e->d_name);
    closedir(d);
    return node;
}

int chorus__topo_net_ifname(char *buf, size_t len)
{
    const char *ifname = chorus__config_str("CHORUS_SOCKET_IFNAME");
    char line[256], name[64];
    unsigned long dest, flags;
    FILE *f;
    int found = 0;

    if (len == 0) return -1;
    if (ifname != NULL && ifname[0] != '\0') {
        snprintf(buf, len, "%s", ifname);
        return 0;
    }
    /* The IPv4 default route's interface: destination 0 and the route up (RTF_UP). */
    f = fopen("/proc/net/route", "r");
    if (f == NULL) return -1;
    if (fgets(line, sizeof line, f) == NULL) line[0] = '\0'; /* the header */
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = sscanf(line, "%63s %lx %*x %lx", name, &dest, &flags) == 3 && dest == 0 &&
                (flags & 1) != 0;
    fclose(f);
    if (!found) return -1;
    snprintf(buf, len, "%s", name);
    return 0;
}

/* The NIC node CHORUS_TOPO_FILE gives for this host: the NIC named ifname when the file
 * lists one of that name, else the host's best NIC; -1 when the file does not describe
 * this host. A file that does not load is said once per call at info level: the order is
 * only a refinement, so communicator creation goes on without it. */
static int local_file_nic_numa(const char *path, const char *ifname)
{
    const chorus_topo_host_t *h;
    chorus_topo_t *t = NULL;
    char host[CHORUS_TOPO_NAME_MAX] = "";
    int i, node = -1;

    if (chorus__topo_load(path, &t) != CHORUS_SUCCESS) {
        CHORUS_INFO("topo", "CHORUS_TOPO_FILE not used for NUMA placement: %s",
                    chorus_last_error());
        return -1;
    }
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    h = chorus__topo_find_host(t, host);
    if (h != NULL) {
        node = chorus__topo_nic_numa(h);
        for (i = 0; i < h->nnics; i++)
            if (ifname[0] != '\0' && strcmp(h->nics[i].name, ifname) == 0) node = h->nics[i].numa;
    }
    chorus__topo_free(t);
    return node;
}

/* The NIC's node found last and the settings it was found under: a process that creates
 * many communicators (splits, tests) reads sysfs and procfs once, about 0.1 ms. */
static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER;
static char local_key[512];
static int local_key_valid, local_nic_numa = -1;

void chorus__topo_local_numa(int *numa_p, int *nic_numa_p)
{
    const char *path = chorus__config_str("CHORUS_TOPO_FILE");
    const char *want = chorus__config_str("CHORUS_SOCKET_IFNAME");
    char ifname[64] = "", key[sizeof local_key];
    int nic = -1;

    snprintf(key, sizeof key, "%s\n%s", want != NULL ? want : "", path != NULL ? path : "");
    pthread_mutex_lock(&local_lock);
    if (local_key_valid && strcmp(key, local_key) == 0) {
        nic = local_nic_numa;
    } else {
        if (chorus__topo_net_ifname(ifname, sizeof ifname) != 0) ifname[0] = '\0';
        if (path != NULL && path[0] != '\0') nic = local_file_nic_numa(path, ifname);
        if (nic < 0 && ifname[0] != '\0') nic = chorus__topo_if_numa(ifname);
        snprintf(local_key, sizeof local_key, "%s", key);
        local_key_valid = 1;
        local_nic_numa = nic;
    }
    pthread_mutex_unlock(&local_lock);
    *numa_p = chorus__topo_cpu_numa();
    *nic_numa_p = nic;
}
