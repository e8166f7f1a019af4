/*
 * Single-host collectives on device memory through CUDA IPC: the GPU counterpart of the
 * host arena (lib/arena), and Chorus's CUDA P2P path (NVLink or PCIe, or one GPU shared by
 * several ranks).
 *
 * Each local rank allocates a device staging slot, exports it with a CUDA IPC handle, and
 * opens every peer's (handles are exchanged once, through the comm's bootstrap). A
 * collective runs per chunk: each rank copies its input chunk into its own slot on its
 * stream, the ranks synchronise through the host arena's control lines (a step barrier
 * that also compares the operation's signature, so mismatched calls end in
 * CHORUS_ERR_MISMATCH), then each rank runs a kernel that reads the peers' slots directly
 * (the fused n-source reduce of chorus_gpu_ops_t, or a copy) and writes its output, and
 * the ranks synchronise again before a slot is reused. Events on the stream tell the host
 * when its own copies and kernels are done; nothing else orders producer and consumer.
 *
 * Why not a point-to-point transport under the schedules: for the same reason as the host
 * arena. A kernel that reads all peers' memory in one pass reduces n sources with one
 * write, where a ring over point-to-point copies moves every byte 2(n-1)/n times through
 * staging; and it keeps the engine free of device pointers.
 *
 * Not thread-safe: one thread (the comm's GPU proxy, lib/core/gpu_coll.c) calls it.
 */
#ifndef CHORUS_GPU_IPC_ARENA_H
#define CHORUS_GPU_IPC_ARENA_H

#include "chorus.h"
#include "algo/schedule.h"
#include "arena/arena.h"
#include "gpu/gpu.h"

#include <stddef.h>
#include <stdint.h>

typedef struct chorus_ipc_arena chorus_ipc_arena_t;
struct chorus_dev_wins;

typedef struct {
    int rank;                    /* rank in the comm (for messages) */
    int nlocal;                  /* ranks on this host == ranks of the comm */
    int local_index;             /* this rank's index among them */
    const chorus_gpu_ops_t *gpu; /* the loaded plugin */
    int device;                  /* this rank's device ordinal */
    void *stream;                /* the proxy's stream: every copy and kernel goes there */
    size_t slot_bytes;           /* CHORUS_GPU_IPC_CHUNK */
    chorus_arena_t *host_arena;  /* the comm's host arena: synchronisation */
    struct chorus_bootstrap *bs; /* to exchange the IPC handles (collective on the comm) */
} chorus_ipc_arena_params_t;

/* Collective over the comm (every rank calls it, from its proxy thread). On failure of any
 * rank (e.g. IPC not possible between these devices) every rank gets the error, so all
 * fall back to staging together. */
chorus_status_t chorus__ipc_arena_create(const chorus_ipc_arena_params_t *params,
                                         chorus_ipc_arena_t **arena_p);
void chorus__ipc_arena_destroy(chorus_ipc_arena_t *arena);

/* One collective with the argument conventions of chorus.h: sendbuf and recvbuf are device
 * memory of this rank's device (validated; count > 0; recvbuf may be NULL on non-roots of
 * reduce and sendbuf on non-roots of broadcast). op may be AVG (divided on the device).
 * Returns when the result is in recvbuf (the proxy's stream has finished it). opno numbers
 * the comm's operations (the signature); what names it for messages ("allreduce #12").
 * wins (may be NULL): the comm's registered device windows; allgather, broadcast, alltoall
 * and allreduce up to 1 MiB read their peers' send buffers there, with no copy through the
 * slots, when every rank they read has its send buffer in one. */
chorus_status_t chorus__ipc_arena_run(chorus_ipc_arena_t *arena, chorus_coll_t coll,
                                      const void *sendbuf, void *recvbuf, size_t count,
                                      chorus_dtype_t dtype, chorus_op_t op, int root,
                                      uint64_t opno, struct chorus_dev_wins *wins,
                                      const char *what);

#endif
