/*
 * PCI bus id text. Parsed by hand: scanf's %x would accept signs, "0x" prefixes and
 * leading spaces, and a bus id that is not exactly one must never match another.
 */
#include "util/pci.h"

#include <stdio.h>
#include <string.h>

/* One hex field of at most max digits at *s_p: 0 and its value (*s_p moved past it),
 * or -1. */
static int pci_hex_field(const char **s_p, int max, unsigned long *v_p)
{
    const char *s = *s_p;
    unsigned long v = 0;
    int digits = 0;

    for (; *s != '\0' && strchr("0123456789abcdefABCDEF", *s) != NULL; s++, digits++)
        v = v * 16 + (unsigned long)(*s <= '9' ? *s - '0' : (*s | 0x20) - 'a' + 10);
    if (digits == 0 || digits > max) return -1;
    *s_p = s;
    *v_p = v;
    return 0;
}

int chorus__pci_bus_id_canon(const char *s, char out[CHORUS_PCI_BUSID_MAX])
{
    unsigned long dom = 0, bus, dev, fn;
    const char *colon2;

    if (s == NULL) return -1;
    /* Two colons: a domain comes first. */
    colon2 = strchr(s, ':');
    colon2 = colon2 != NULL ? strchr(colon2 + 1, ':') : NULL;
    if (colon2 != NULL && (pci_hex_field(&s, 8, &dom) != 0 || *s++ != ':')) return -1;
    if (pci_hex_field(&s, 2, &bus) != 0 || *s++ != ':') return -1;
    if (pci_hex_field(&s, 2, &dev) != 0 || *s++ != '.') return -1;
    if (pci_hex_field(&s, 1, &fn) != 0 || *s != '\0') return -1;
    /* PCI has 32 devices of 8 functions per bus. */
    if (dev > 0x1f || fn > 7) return -1;
    snprintf(out, CHORUS_PCI_BUSID_MAX, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
    return 0;
}

int chorus__pci_bus_id_equal(const char *a, const char *b)
{
    char x[CHORUS_PCI_BUSID_MAX], y[CHORUS_PCI_BUSID_MAX];

    if (chorus__pci_bus_id_canon(a, x) != 0 || chorus__pci_bus_id_canon(b, y) != 0) return 0;
    return strcmp(x, y) == 0;
}
