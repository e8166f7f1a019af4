/*
 * What the reduction loops ask of the CPU (reduce_ops.h): whether AVX2 may run, and
 * whether an output is too large to be worth caching.
 */
#include "reduce_ops.h"

#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

/* Used when the C library cannot tell the size of the last-level cache. */
#define DEFAULT_LLC_BYTES ((size_t)32 << 20)
#define MAX_LLC_BYTES ((size_t)128 << 20)

static _Atomic int baseline_only;

int chorus__kernel_have_avx2(void)
{
#if CHORUS__KERNELS_X86
    /* One load and test of a table the compiler's runtime fills before main. */
    if (atomic_load_explicit(&baseline_only, memory_order_relaxed)) return 0;
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

#if CHORUS__KERNELS_X86
void chorus__kernel_force_baseline(int on)
{
    atomic_store_explicit(&baseline_only, on, memory_order_relaxed);
}

/* The last-level cache one core sees. sysfs gives the slice of this core (32 MiB on an
 * EPYC CCX), where sysconf may give the sum over every slice of the package, which
 * no single core can use. */
static size_t read_llc_bytes(void)
{
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long long v = 0;
    char unit = 0;
    long l3 = -1;

    if (f != NULL) {
        int got = fscanf(f, "%llu%c", &v, &unit);
        fclose(f);
        if (got >= 1 && v > 0) {
            if (unit == 'K') v <<= 10;
            if (unit == 'M') v <<= 20;
            return (size_t)v;
        }
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    /* Without sysfs (some VMs) glibc's answer comes from cpuid and can be the whole
     * package's L3 (512 MiB on an EPYC guest here) where a process only uses its complex's
     * share (32 MiB): copies there were DRAM-bound from ~24 MiB while streaming stores
     * never started. No one cache complex today has more than MAX_LLC_BYTES, so a larger
     * answer is taken for such a sum and the default is used instead. */
    if (l3 > (long)MAX_LLC_BYTES) l3 = -1;
    return l3 > 0 ? (size_t)l3 : DEFAULT_LLC_BYTES;
}

/* Read once; racing first callers store the same value. */
static _Atomic size_t llc_cached;
#endif

static _Atomic size_t stream_threshold;

int chorus__kernel_use_stream(size_t traffic)
{
#if CHORUS__KERNELS_X86
    size_t t = atomic_load_explicit(&stream_threshold, memory_order_relaxed);

    if (t == 0) {
        t = atomic_load_explicit(&llc_cached, memory_order_relaxed);
        if (t == 0) {
            t = read_llc_bytes();
            atomic_store_explicit(&llc_cached, t, memory_order_relaxed);
        }
    }
    return traffic >= t;
#else
    (void)traffic;
    return 0;
#endif
}

void chorus__kernel_set_stream_threshold(size_t traffic)
{
    atomic_store_explicit(&stream_threshold, traffic, memory_order_relaxed);
}
