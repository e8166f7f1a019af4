/*
 * What the files of the CUDA plugin share (lib/gpu/plugin): the driver's entry points and
 * the thread's error message, kept in cuda_plugin.c, and the virtual-memory calls of
 * cuda_vmm.c for the table. Built with -fvisibility=hidden: nothing here leaves
 * libchorus-cuda.so.
 */
#ifndef CHORUS_GPU_PLUGIN_CUDA_INT_H
#define CHORUS_GPU_PLUGIN_CUDA_INT_H

#include "gpu/gpu.h"

#include <cuda.h>
#include <stddef.h>

/* A driver function of at least `version`, reached through the runtime
 * (cudaGetDriverEntryPointByVersion), or NULL where the driver lacks it. */
void *chorus__cu_drv_symbol(const char *name, unsigned version);

/* Sets the thread's last_error() to "<call>(...): <CUDA error name> (CUresult r)" and
 * returns the status that r maps to (UNSUPPORTED, INVALID_ARGUMENT or SYSTEM). */
chorus_status_t chorus__cu_drv_fail(const char *call, CUresult r);
/* Sets the thread's last_error() and returns status. */
chorus_status_t chorus__cu_set_error(chorus_status_t status, const char *fmt, ...)
    CHORUS_PRINTF(2, 3);

/* cuda_vmm.c: the vmm_* calls and multicast_supported of chorus_gpu_ops_t. */
chorus_status_t chorus__cu_vmm_alloc(size_t bytes, void **p, size_t *granted_p, int *fd_p);
chorus_status_t chorus__cu_vmm_import(int fd, size_t bytes, void **p);
chorus_status_t chorus__cu_vmm_free(void *p);
chorus_status_t chorus__cu_multicast_supported(int device, int *yes_p);

#endif
