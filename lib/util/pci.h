/*
 * PCI addresses ("bus ids") as text. Each source spells them its own way: sysfs and hwloc
 * write "0000:17:00.0", CUDA writes "00000000:17:00.0" (upper case on some versions), and
 * lspci drops the domain ("17:00.0"). Anything that matches a device found one way with a
 * device found another compares the canonical form made here.
 */
#ifndef CHORUS_UTIL_PCI_H
#define CHORUS_UTIL_PCI_H

#include <stddef.h>

/* Room for any canonical bus id and its terminator ("ffffffff:ff:1f.7" at most). */
#define CHORUS_PCI_BUSID_MAX 24

/* Writes the canonical form of bus id s into out (CHORUS_PCI_BUSID_MAX bytes): lower case,
 * the domain in at least 4 hex digits ("dddd:bb:dd.f"; a missing domain is 0). Accepts
 * "domain:bus:device.function" or "bus:device.function", hex digits of either case, the
 * domain up to 8 digits, bus and device up to 2, the function 1; nothing else (no signs,
 * no "0x", no spaces, no trailing text). 0 on success; -1 (out untouched) if malformed. */
int chorus__pci_bus_id_canon(const char *s, char out[CHORUS_PCI_BUSID_MAX]);

/* 1 if a and b are well-formed bus ids of the same PCI function; 0 otherwise. */
int chorus__pci_bus_id_equal(const char *a, const char *b);

#endif
