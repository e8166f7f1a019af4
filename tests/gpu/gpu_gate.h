/*
 * Whether a GPU test (the programs of tests/gpu) can run, from the loader's outcome
 * (lib/gpu/gpu.h): a skip is only for a machine without a GPU, and a plugin that is there
 * but broken fails the test with the loader's reason, since on the first real GPU a skip
 * would hide it.
 */
#ifndef CHORUS_TESTS_GPU_GATE_H
#define CHORUS_TESTS_GPU_GATE_H

#include "gpu/gpu.h"

#include <stdio.h>

/* 0 when a plugin with a device is loaded. Otherwise the exit status for main: 77 when
 * there is no GPU (no plugin built, no driver, no device, CHORUS_CUDA_PLUGIN=none), after
 * "skipped: no CUDA device (<why>)" on stdout when say is set (one rank of a job says it);
 * 1 when the plugin is broken, after "FAIL: <the loader's reason>" on stderr whatever say
 * is, so that every rank's log shows it. */
static inline int gpu_gate(int say)
{
    switch (chorus__gpu_state()) {
    case CHORUS_GPU_READY:
        return 0;
    case CHORUS_GPU_ABSENT:
        if (say) printf("skipped: no CUDA device (%s)\n", chorus__gpu_describe());
        return 77;
    case CHORUS_GPU_BROKEN:
        break;
    }
    fprintf(stderr, "FAIL: %s\n", chorus__gpu_describe());
    return 1;
}

#endif
