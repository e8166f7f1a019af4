/*
 * chorus_mem_alloc and chorus_mem_free (issue 38): the public face of registered memory.
 * On a one-host comm with an arena they are the arena's windows (lib/arena/arena_win.c),
 * which every local peer maps; elsewhere the memory is private to the rank, registered with
 * the comm's network transports (below), and recorded here so that a free can tell a good
 * pointer from a bad one.
 *
 * chorus_comm_register and chorus_comm_deregister: a range registered with every transport
 * of the comm that has reg_mem (ucx, ib). Each transport keeps the registration in its
 * cache (util/regcache.h) with a reference held, so its zero-copy paths find it at every
 * call and it is never evicted while the handle lives. Handles are kept on a list of the
 * comm: a deregister checks its argument against it before touching it.
 */
#include "core/comm.h"

#include "arena/arena.h"
#include "core/async.h"
#include "core/gpu_coll.h"
#include "gpu/dev_win.h"
#include "gpu/gpu.h"
#include "util/log.h"
#include "util/status.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "transport/transport.h"

struct chorus_comm_reg {
    struct chorus_comm_reg *next; /* comm->regs, for chorus_comm_register's handles */
    void *ptr;
    size_t bytes;
    int ntp; /* the transports that registered the range, with their handles */
    const chorus_tp_ops_t *ops[2];
    chorus_tp_t *tp[2];
    void *handle[2];
};

struct chorus_mem_block {
    void *ptr;
    size_t bytes;
    struct chorus_comm_reg *reg; /* its registration with the transports */
};

static void reg_drop(struct chorus_comm_reg *reg)
{
    if (reg == NULL) return;
    for (int i = reg->ntp - 1; i >= 0; i--) (void)reg->ops[i]->dereg_mem(reg->tp[i], reg->handle[i]);
    free(reg);
}

/* Registers [ptr, ptr + bytes) with every transport of comm that registers memory. */
static chorus_status_t reg_make(chorus_comm_t comm, void *ptr, size_t bytes, const char *what,
                                struct chorus_comm_reg **reg_p)
{
    struct chorus_comm_reg *reg = calloc(1, sizeof *reg);

    if (reg == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s: no memory", comm->rank, what);
    reg->ptr = ptr;
    reg->bytes = bytes;
    for (int t = 0; t < comm->ntps; t++) {
        const chorus_tp_ops_t *ops = comm->tps[t].ops;
        chorus_status_t status;

        if (ops->reg_mem == NULL || ops->dereg_mem == NULL) continue;
        status = ops->reg_mem(comm->tps[t].tp, ptr, bytes, &reg->handle[reg->ntp]);
        if (status != CHORUS_SUCCESS) {
            reg_drop(reg);
            return chorus__error_context(status, "rank %d: %s: registering %zu bytes at %p "
                                         "with the %s transport", comm->rank, what, bytes, ptr,
                                         ops->name);
        }
        reg->ops[reg->ntp] = ops;
        reg->tp[reg->ntp] = comm->tps[t].tp;
        reg->ntp++;
    }
    *reg_p = reg;
    return CHORUS_SUCCESS;
}

static chorus_status_t mem_private_alloc(chorus_comm_t comm, size_t bytes, void **ptr_p)
{
    struct chorus_comm_reg *reg = NULL;
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
    /* A tagged comm's progress thread uses its transports at any time: no registration
     * there (its sends register per message, as before). */
    if (comm->tagged == NULL) {
        chorus_status_t status = reg_make(comm, p, bytes, "mem_alloc", &reg);
        if (status != CHORUS_SUCCESS) {
            munmap(p, bytes);
            return status;
        }
    }
    comm->mem_blocks[comm->nmem_blocks++] = (struct chorus_mem_block){p, bytes, reg};
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

chorus_status_t chorus_mem_alloc_device(chorus_comm_t comm, size_t bytes, void **ptr_p)
{
    const chorus_gpu_ops_t *gpu;

    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "mem_alloc_device: comm is NULL");
    if (ptr_p == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: mem_alloc_device: ptr_p is "
                             "NULL", comm->rank);
    if (bytes == 0 || bytes > ((size_t)1 << 40))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: mem_alloc_device: %zu bytes (1 to 2^40)", comm->rank, bytes);
    *ptr_p = NULL;
    gpu = chorus__gpu();
    if (gpu == NULL) return chorus__gpu_unavailable("rank %d: mem_alloc_device", comm->rank);
    chorus__comm_quiesce(comm);
    if (comm->dev_wins == NULL) {
        /* One host: every rank maps every other's window. Across hosts: private memory. */
        int one_host = comm->nhosts <= 1;
        chorus_dev_win_params_t p = {
            .gpu = gpu,
            .rank = comm->rank,
            .nlocal = one_host ? comm->nranks : 1,
            .local_index = one_host ? comm->rank : 0,
            .local_ranks = NULL, /* one host: local index == rank */
            .bs = one_host && comm->nranks > 1 ? comm->bs : NULL,
            .secret = chorus__bootstrap_id_info(comm->bs)->secret,
            .comm_id = comm->comm_id,
            .timeout_s = comm->timeout_s,
        };
        chorus_status_t status = chorus__dev_wins_create(&p, &comm->dev_wins);
        if (status != CHORUS_SUCCESS) return status;
    }
    return chorus__dev_win_alloc(comm->dev_wins, bytes, ptr_p);
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
    if (chorus__dev_win_owns(comm->dev_wins, ptr)) {
        chorus__comm_quiesce(comm); /* device calls queued on the proxy may read it */
        return chorus__dev_win_free(comm->dev_wins, ptr);
    }
    if (comm->arena != NULL) return chorus__arena_win_free(comm->arena, comm->bs, ptr);
    for (int i = 0; i < comm->nmem_blocks; i++) {
        if (comm->mem_blocks[i].ptr != ptr) continue;
        reg_drop(comm->mem_blocks[i].reg);
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
    uint64_t calls, bytes, dcalls, dbytes;

    chorus__error_clear();
    if (comm == NULL) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "mem_stats: comm is NULL");
    chorus__arena_win_stats(comm->arena, &calls, &bytes);
    chorus__dev_win_stats(comm->dev_wins, &dcalls, &dbytes);
    if (single_copy_calls_p != NULL) *single_copy_calls_p = calls + dcalls;
    if (window_bytes_p != NULL) *window_bytes_p = bytes + dbytes;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_register(chorus_comm_t comm, void *ptr, size_t bytes,
                                     chorus_comm_reg_t *handle_p, int *transports_p)
{
    struct chorus_comm_reg *reg = NULL;
    chorus_status_t status;
    int device = -1;

    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "comm_register: comm is NULL");
    if (handle_p == NULL || ptr == NULL || bytes == 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: comm_register: %s",
                             comm->rank, handle_p == NULL ? "handle_p is NULL"
                                         : ptr == NULL  ? "ptr is NULL"
                                                        : "0 bytes");
    *handle_p = NULL;
    if (transports_p != NULL) *transports_p = 0;
    status = chorus__gpu_classify(comm, "comm_register", ptr, 1, NULL, 0, NULL, &device);
    if (status != CHORUS_SUCCESS) return status;
    if (device >= 0)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: comm_register: %p is memory of "
                             "device %d: host memory only", comm->rank, ptr, device);
    /* Waits for this rank's nonblocking work, which uses the transports on another thread;
     * refuses a tagged comm, whose progress thread never stops. */
    status = chorus__comm_check_failed(comm, "comm_register");
    if (status != CHORUS_SUCCESS) return status;
    status = reg_make(comm, ptr, bytes, "comm_register", &reg);
    if (status != CHORUS_SUCCESS) return status;
    reg->next = comm->regs;
    comm->regs = reg;
    *handle_p = reg;
    if (transports_p != NULL) *transports_p = reg->ntp;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus_comm_deregister(chorus_comm_t comm, chorus_comm_reg_t handle)
{
    struct chorus_comm_reg **at;

    chorus__error_clear();
    if (comm == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "comm_deregister: comm is NULL");
    for (at = &comm->regs; *at != NULL && *at != handle; at = &(*at)->next) {
    }
    if (handle == NULL || *at == NULL)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: comm_deregister: %p is not "
                             "a handle of chorus_comm_register on this communicator (or was "
                             "deregistered)", comm->rank, (void *)handle);
    if (chorus__async_inflight(comm) > 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: comm_deregister: %d "
                             "nonblocking operation(s) in flight on this communicator may use "
                             "%p: wait for them first", comm->rank, chorus__async_inflight(comm),
                             handle->ptr);
    *at = handle->next;
    reg_drop(handle);
    return CHORUS_SUCCESS;
}

void chorus__mem_release(chorus_comm_t comm)
{
    chorus__dev_wins_destroy(comm->dev_wins);
    comm->dev_wins = NULL;
    while (comm->regs != NULL) {
        struct chorus_comm_reg *reg = comm->regs;
        comm->regs = reg->next;
        reg_drop(reg);
    }
    for (int i = 0; i < comm->nmem_blocks; i++) {
        reg_drop(comm->mem_blocks[i].reg);
        munmap(comm->mem_blocks[i].ptr, comm->mem_blocks[i].bytes);
    }
    free(comm->mem_blocks);
    comm->mem_blocks = NULL;
    comm->nmem_blocks = comm->mem_blocks_cap = 0;
}
