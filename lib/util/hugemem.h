/*
 * Large arrays that are read at random (the simulator's per-step state: hundreds of MB
 * touched a few bytes at a time) spend much of their time in TLB misses on 4 KiB pages.
 * chorus__huge_alloc asks the kernel for transparent huge pages on such an array; where
 * the kernel has none, or THP is off, it is plain memory. Free it with free().
 */
#ifndef CHORUS_UTIL_HUGEMEM_H
#define CHORUS_UTIL_HUGEMEM_H

#include <stddef.h>

/* bytes of zeroed memory, 2 MiB aligned and advised for huge pages (NULL: no memory). */
void *chorus__huge_calloc(size_t bytes);

#endif
