/*
 * The host's CPU during the measurement rounds, from /proc/stat. A link test moves data
 * through the kernel's network stack: on a host whose cores are taken (by other jobs, or by
 * the softirq work of the networking itself) every rate it measures is low, and a validator
 * that reads only the rates blames the links. So every rank samples the aggregate "cpu" line
 * when the rounds start and when they end, and the verdict names a host whose CPU was
 * saturated in between as a likely cause (analyze.c).
 *
 * /proc/stat is per machine: the "hosts" of the emulated cluster (network namespaces of one
 * machine) all read the same figures, which is right for them, as they share the cores.
 *
 * CHORUS_FABRIC_PROC_STAT=PATH reads PATH instead of /proc/stat, with "%d" in it replaced by
 * the sample's index (0 at the start of the rounds, 1 at the end), so that a test can play a
 * saturated host from two files without burning any CPU (tests/mp/fabric_local.sh). It is a
 * hook of this tool, read with getenv, not a setting of the library.
 */
#include "fabric_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The jiffies of the "cpu" line: user nice system idle iowait irq softirq steal (guest and
 * guest_nice are already counted in user and nice, so they are not added again). */
enum {
    CPU_USER,
    CPU_NICE,
    CPU_SYSTEM,
    CPU_IDLE,
    CPU_IOWAIT,
    CPU_IRQ,
    CPU_SOFTIRQ,
    CPU_STEAL,
    CPU_NFIELDS
};

int fabric_cpu_parse(const char *text, fabric_cpu_sample_t *s)
{
    unsigned long long f[CPU_NFIELDS] = {0};
    const char *line = text;
    int n;

    memset(s, 0, sizeof(*s));
    /* The aggregate line is "cpu " (the per-core ones are "cpu0 ", "cpu1 "...). */
    while (line != NULL && strncmp(line, "cpu ", 4) != 0) {
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    if (line == NULL) return -1;
    n = sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3],
               &f[4], &f[5], &f[6], &f[7]);
    /* Kernels before 2.6.11 have no steal column; older than that is not worth reading. */
    if (n < CPU_SOFTIRQ + 1) return -1;
    for (int i = 0; i < CPU_NFIELDS; i++)
        s->total += f[i];
    s->idle = f[CPU_IDLE] + f[CPU_IOWAIT];
    s->softirq = f[CPU_SOFTIRQ];
    s->ok = 1;
    return 0;
}

/* The file a sample reads: /proc/stat, or the test's file with "%d" replaced by index. */
static void sample_path(int index, char *path, size_t size)
{
    const char *fake = getenv("CHORUS_FABRIC_PROC_STAT");
    const char *pct = fake != NULL ? strstr(fake, "%d") : NULL;

    if (fake == NULL || *fake == '\0')
        snprintf(path, size, "/proc/stat");
    else if (pct == NULL)
        snprintf(path, size, "%s", fake);
    else
        snprintf(path, size, "%.*s%d%s", (int)(pct - fake), fake, index, pct + 2);
}

int fabric_cpu_sample(int index, fabric_cpu_sample_t *s)
{
    char path[4096], buf[4096];
    FILE *f;
    size_t n;

    memset(s, 0, sizeof(*s));
    sample_path(index, path, sizeof(path));
    f = fopen(path, "r");
    if (f == NULL) return -1;
    /* The aggregate line comes first; 4 KiB holds it with room to spare. */
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return fabric_cpu_parse(buf, s);
}

void fabric_cpu_fractions(const fabric_cpu_sample_t *a, const fabric_cpu_sample_t *b,
                          double *busy_p, double *softirq_p)
{
    double dt;

    *busy_p = *softirq_p = -1;
    /* Counters only grow; a file that went backwards or did not move says nothing. */
    if (!a->ok || !b->ok || b->total <= a->total || b->idle < a->idle || b->softirq < a->softirq)
        return;
    dt = (double)(b->total - a->total);
    *busy_p = 1.0 - (double)(b->idle - a->idle) / dt;
    *softirq_p = (double)(b->softirq - a->softirq) / dt;
    if (*busy_p < 0) *busy_p = 0;
}

int fabric_cpu_saturated(double busy, double softirq)
{
    return busy >= FABRIC_CPU_BUSY_SATURATED || softirq >= FABRIC_CPU_SOFTIRQ_SATURATED;
}
