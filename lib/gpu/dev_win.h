/*
 * Registered device memory (issue 38): the windows of chorus_mem_alloc_device, device
 * memory that every rank of a host maps into its own device address space, as NCCL's
 * ncclMemAlloc and symmetric windows do, so that a device collective may read its peers'
 * buffers where they lie.
 *
 * Each window is one shareable allocation per local rank (the plugin's vmm_alloc: cuMem
 * memory exported as a POSIX file descriptor). The descriptors travel between the local
 * ranks over Unix datagram sockets (SCM_RIGHTS, abstract names, so nothing is left in the
 * file system), each message carrying an HMAC of the comm's secret over who sends what to
 * whom, so a stranger's descriptor is never mapped; every rank then maps every peer's
 * (vmm_import). The memory lives while some process maps it: a rank that dies leaves its
 * readers valid memory.
 *
 * Windows are numbered in the order they were made, the same on every rank, so a buffer is
 * named to peers as (window, offset), as the host windows are (lib/arena/arena_win.c).
 * Not thread-safe: the comm's one-thread rule covers it.
 */
#ifndef CHORUS_GPU_DEV_WIN_H
#define CHORUS_GPU_DEV_WIN_H

#include "chorus.h"
#include "gpu/gpu.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct chorus_bootstrap;
typedef struct chorus_dev_wins chorus_dev_wins_t;

typedef struct {
    const chorus_gpu_ops_t *gpu;
    int rank;                    /* rank in the comm (for messages) */
    int nlocal;                  /* ranks sharing windows: this host's, or 1 (private) */
    int local_index;             /* this rank's index among them */
    const int *local_ranks;      /* their ranks in the comm (nlocal entries, copied) */
    struct chorus_bootstrap *bs; /* an allgather over exactly those ranks; NULL when nlocal 1 */
    const uint8_t *secret;       /* CHORUS_SECRET_BYTES: the comm's secret */
    uint64_t comm_id;
    double timeout_s;            /* for the descriptors' exchange */
} chorus_dev_win_params_t;

/* An empty set of windows for a communicator. */
chorus_status_t chorus__dev_wins_create(const chorus_dev_win_params_t *params,
                                        chorus_dev_wins_t **set_p);
/* Unmaps every window left (local: the comm is going away). NULL is a no-op. */
void chorus__dev_wins_destroy(chorus_dev_wins_t *set);

/* Collective over the set's ranks, every one with the same bytes: this rank's window of at
 * least bytes, on the calling thread's current device, mapped by every peer. Ranks asking
 * different sizes all get CHORUS_ERR_MISMATCH; a failure anywhere fails every rank. */
chorus_status_t chorus__dev_win_alloc(chorus_dev_wins_t *set, size_t bytes, void **ptr_p);
/* Whether ptr is the start of one of this rank's windows. */
int chorus__dev_win_owns(const chorus_dev_wins_t *set, const void *ptr);
/* Collective: every rank frees its pointer of the same window. CHORUS_ERR_INVALID_ARGUMENT
 * (before any communication) for a pointer chorus__dev_win_owns does not know. */
chorus_status_t chorus__dev_win_free(chorus_dev_wins_t *set, void *ptr);

/* Whether [ptr, ptr + bytes) lies in one of this rank's windows: its number and offset. */
int chorus__dev_win_find(const chorus_dev_wins_t *set, const void *ptr, size_t bytes,
                         uint32_t *id_p, uint64_t *off_p);
/* Local rank r's window id at off, bytes long, as mapped here; NULL when out of bounds. */
void *chorus__dev_win_at(const chorus_dev_wins_t *set, uint32_t id, int r, uint64_t off,
                         size_t bytes);

/* How many windows the set holds (the same number on every rank). */
int chorus__dev_win_count(const chorus_dev_wins_t *set);

/* Device collectives that read every peer's buffer in its window, and the bytes read from
 * peers' windows (chorus_mem_stats): counted by the comm's device proxy (lib/gpu/ipc_arena.c),
 * read from any thread. */
void chorus__dev_win_note(chorus_dev_wins_t *set, uint64_t bytes);
void chorus__dev_win_stats(const chorus_dev_wins_t *set, uint64_t *calls_p, uint64_t *bytes_p);

#endif
