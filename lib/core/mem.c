/*
 * chorus_mem_alloc and chorus_mem_free (issue 38): the public face of registered memory.
 * On a one-host comm with an arena they are the arena's windows (lib/arena/arena_win.c),
 * which every local peer maps; elsewhere the memory is private to the rank, and recorded
 * here so that a free can tell a good pointer from a bad one.
 */
#include "core/comm.h"

#include "arena/arena.h"
#include "core/async.h"
#include "util/log.h"
#include "util/status.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

struct chorus_mem_block {
    void *ptr;
    size_t bytes;
};

static chorus_status_t mem_private_alloc(chorus_comm_t comm, size_t bytes, void **ptr_p)
{
    void *p;

    if (comm->nmem_blocks == comm->mem_blocks_cap) {
        int cap = comm->mem_blocks_cap ? comm->mem_blocks_cap * 2 : 8;
        struct chorus_mem_block *grown = realloc(comm->mem_blocks, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_alloc: no memory",
                                 comm->rank);
        comm->mem_blocks = grown;
        comm->mem_blocks_cap = cap;
    }
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return chorus__error_errno(CHORUS_ERR_NO_MEMORY, errno, "rank %d: mem_alloc: %zu bytes",
                                   comm->rank, bytes);
    comm->mem_blocks[comm->nmem_blocks++] = (struct chorus_mem_block){p, bytes};
    *ptr_p = p;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_mem_alloc(chorus_comm_t comm, size_t bytes, void **ptr_p)
{
    chorus__error_clear();
    if (comm == NULL) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "mem_alloc: comm is NULL");
    if (ptr_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: mem_alloc: ptr_p is NULL",
                             comm->rank);
    if (bytes == 0 || bytes > ((size_t)1 << 40))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: mem_alloc: %zu bytes (1 to 2^40)", comm->rank, bytes);
    *ptr_p = NULL;
    chorus__comm_quiesce(comm);
    if (comm->arena == NULL) return mem_private_alloc(comm, bytes, ptr_p);
    return chorus__arena_win_alloc(comm->arena, comm->bs,
                                   chorus__bootstrap_id_info(comm->bs)->secret, comm->comm_id,
                                   bytes, ptr_p);
}

chorus_status_t chorus_mem_free(chorus_comm_t comm, void *ptr)
{
    chorus__error_clear();
    if (comm == NULL) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "mem_free: comm is NULL");
    if (ptr == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: mem_free: ptr is NULL",
                             comm->rank);
    if (chorus__async_inflight(comm) > 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: mem_free: %d nonblocking "
                             "operation(s) in flight on this communicator may use %p: wait for "
                             "them first", comm->rank, chorus__async_inflight(comm), ptr);
    if (comm->arena != NULL) return chorus__arena_win_free(comm->arena, comm->bs, ptr);
    for (int i = 0; i < comm->nmem_blocks; i++) {
        if (comm->mem_blocks[i].ptr != ptr) continue;
        munmap(ptr, comm->mem_blocks[i].bytes);
        comm->mem_blocks[i] = comm->mem_blocks[--comm->nmem_blocks];
        return CHORUS_SUCCESS;
    }
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: mem_free: %p is not memory from "
                         "chorus_mem_alloc on this communicator (or was freed)", comm->rank, ptr);
}

chorus_status_t chorus_mem_stats(chorus_comm_t comm, uint64_t *single_copy_calls_p,
                                 uint64_t *window_bytes_p)
{
    uint64_t calls, bytes;

    chorus__error_clear();
    if (comm == NULL) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "mem_stats: comm is NULL");
    chorus__arena_win_stats(comm->arena, &calls, &bytes);
    if (single_copy_calls_p != NULL) *single_copy_calls_p = calls;
    if (window_bytes_p != NULL) *window_bytes_p = bytes;
    return CHORUS_SUCCESS;
}

void chorus__mem_release(chorus_comm_t comm)
{
    for (int i = 0; i < comm->nmem_blocks; i++)
        munmap(comm->mem_blocks[i].ptr, comm->mem_blocks[i].bytes);
    free(comm->mem_blocks);
    comm->mem_blocks = NULL;
    comm->nmem_blocks = comm->mem_blocks_cap = 0;
}
