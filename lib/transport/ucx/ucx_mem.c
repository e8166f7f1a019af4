/*
 * UCX transport: memory registration, cached (util/regcache.h). A registration is a
 * ucp_mem_map of the page-rounded range; the data path passes its memh to UCX with large
 * tag messages (so UCX does not register per message) and the RMA rendezvous packs its
 * remote key once and keeps it with the entry.
 *
 * Why a cached registration is never stale. On rc/dc a registration pins the physical
 * pages behind a virtual range; it stays right as long as that range keeps the same pages.
 * A buffer that is freed and reallocated at the same address keeps its pages unless the
 * range was unmapped or its pages dropped in between (munmap, mremap, brk shrinking,
 * madvise DONTNEED, shmdt): glibc's free() only does that through those calls. UCX's memory
 * hooks (ucm) see every one of them and report UCM_EVENT_VM_UNMAPPED before the pages go;
 * our handler queues the range and the next use of the cache drops every entry that
 * overlaps it (the handler itself may run on any thread and inside any allocation, so it
 * only appends to a fixed queue under a lock; an overflow drops the whole cache). Where the
 * hooks are off or do not work (UCX_MEM_EVENTS=n, a static binary; ucm_test_events says
 * so), the transport cannot tell when memory is freed: the data path then leaves
 * registration to UCX (which registers per message, or through its own hooked cache), the
 * RMA path registers per message, and the last dereg of a reg_mem handle drops the entry
 * (as the ib transport does).
 */
#include "transport/transport.h"

#ifdef CHORUS_HAVE_UCX

#include "transport/ucx/ucx.h"

#include "util/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <ucm/api/ucm.h>

/* Below UCX's own registration cache (priority 1000 in UCX 1.13): any order works, the
 * queue is only read later. */
#define UCX_MEM_EVENT_PRIORITY 1500

static int ucx_mem_reg(void *ctx, void *addr, size_t len, void **mr_p, uint32_t *lkey_p,
                       uint32_t *rkey_p)
{
    ucx_tp_t *tp = ctx;
    ucp_mem_map_params_t params;
    ucx_mr_t *mr = calloc(1, sizeof(*mr));
    ucs_status_t st;

    if (mr == NULL) {
        errno = ENOMEM;
        return -1;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = addr;
    params.length = len;
    st = ucp_mem_map(tp->context, &params, &mr->memh);
    if (st != UCS_OK) {
        CHORUS_INFO("ucx", "rank %d: ucp_mem_map of %zu bytes at %p: %s", tp->rank, len, addr,
                    ucs_status_string(st));
        free(mr);
        errno = st == UCS_ERR_NO_MEMORY ? ENOMEM : EINVAL;
        return -1;
    }
    *mr_p = mr;
    *lkey_p = 0;
    *rkey_p = 0;
    return 0;
}

static void ucx_mem_dereg(void *ctx, void *mrv)
{
    ucx_tp_t *tp = ctx;
    ucx_mr_t *mr = mrv;

    if (mr->rkey_buf != NULL) ucp_rkey_buffer_release(mr->rkey_buf);
    ucp_mem_unmap(tp->context, mr->memh);
    free(mr);
}

/* UCX's hook, before memory leaves the address space: remember the range. */
static void ucx_mem_unmapped(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    ucx_tp_t *tp = arg;

    if (type != UCM_EVENT_VM_UNMAPPED) return;
    pthread_mutex_lock(&tp->inval_lock);
    if (tp->inval_count < UCX_INVAL_SLOTS) {
        tp->inval[tp->inval_count].addr = (uintptr_t)event->vm_unmapped.address;
        tp->inval[tp->inval_count].len = event->vm_unmapped.size;
        tp->inval_count++;
    } else {
        tp->inval_all = 1;
    }
    pthread_mutex_unlock(&tp->inval_lock);
}

/* Drops the entries of every range unmapped since the last call. */
static void ucx_mem_drain(ucx_tp_t *tp)
{
    struct {
        uintptr_t addr;
        size_t len;
    } ranges[UCX_INVAL_SLOTS];
    int n, all;

    pthread_mutex_lock(&tp->inval_lock);
    n = tp->inval_count;
    all = tp->inval_all;
    memcpy(ranges, tp->inval, (size_t)n * sizeof(ranges[0]));
    tp->inval_count = 0;
    tp->inval_all = 0;
    pthread_mutex_unlock(&tp->inval_lock);
    /* Outside the lock: deregistering may itself unmap memory and call the handler. */
    if (all) chorus__regcache_invalidate(tp->regcache, NULL, SIZE_MAX);
    for (int i = 0; i < n && !all; i++)
        chorus__regcache_invalidate(tp->regcache, (const void *)ranges[i].addr, ranges[i].len);
}

chorus_status_t chorus__ucx_mem_init(ucx_tp_t *tp)
{
    chorus_regcache_ops_t ops = {ucx_mem_reg, ucx_mem_dereg, tp, "ucx"};
    chorus_status_t status;
    ucs_status_t st;

    status = chorus__regcache_create(&ops, (size_t)1 << 30, &tp->regcache);
    if (status != CHORUS_SUCCESS) return status;
    pthread_mutex_init(&tp->inval_lock, NULL);
    st = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, UCX_MEM_EVENT_PRIORITY, ucx_mem_unmapped, tp);
    if (st == UCS_OK) {
        /* Installed is not enough: the hooks may be patched in and still never fire. */
        if (ucm_test_events(UCM_EVENT_VM_UNMAPPED) == UCS_OK) {
            tp->mem_events = 1;
        } else {
            ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, ucx_mem_unmapped, tp);
        }
    }
    if (!tp->mem_events) {
        CHORUS_INFO("ucx",
                    "rank %d: UCX's memory hooks are off (%s): registrations are not kept "
                    "between messages",
                    tp->rank, ucs_status_string(st));
    }
    /* Whatever the hooks reported while they were being tested is not about our cache. */
    ucx_mem_drain(tp);
    return CHORUS_SUCCESS;
}

void chorus__ucx_mem_fini(ucx_tp_t *tp)
{
    if (tp->regcache == NULL) return;
    /* After this returns, no handler of ours runs on any thread. */
    if (tp->mem_events) ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, ucx_mem_unmapped, tp);
    tp->mem_events = 0;
    chorus__regcache_destroy(tp->regcache);
    tp->regcache = NULL;
    pthread_mutex_destroy(&tp->inval_lock);
}

chorus_status_t chorus__ucx_mem_get(ucx_tp_t *tp, const void *buf, size_t bytes,
                                    chorus_reg_t **reg_p)
{
    chorus_reg_t *reg;
    chorus_status_t status;

    ucx_mem_drain(tp);
    status = chorus__regcache_get(tp->regcache, buf, bytes, &reg);
    if (status != CHORUS_SUCCESS) return chorus__error_context(status, "rank %d", tp->rank);
    *reg_p = reg;
    return CHORUS_SUCCESS;
}

void chorus__ucx_mem_put(ucx_tp_t *tp, chorus_reg_t *reg)
{
    /* Without memory events nothing tells us when the memory is freed, and a registration
     * of freed-then-reused pages would move stale data: the last user drops the entry. */
    if (!tp->mem_events && reg->refs == 1)
        chorus__regcache_invalidate(tp->regcache, (void *)reg->start, reg->end - reg->start);
    chorus__regcache_put(tp->regcache, reg);
}

ucp_mem_h chorus__ucx_memh(const chorus_reg_t *reg)
{
    return ((const ucx_mr_t *)reg->mr)->memh;
}

chorus_status_t chorus__ucx_rkey(ucx_tp_t *tp, chorus_reg_t *reg, const void **rkey_p,
                                 size_t *len_p)
{
    ucx_mr_t *mr = reg->mr;

    if (mr->rkey_buf == NULL) {
        ucs_status_t st = ucp_rkey_pack(tp->context, mr->memh, &mr->rkey_buf, &mr->rkey_len);
        if (st != UCS_OK) {
            mr->rkey_buf = NULL;
            return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: ucx: packing a remote key: %s",
                                 tp->rank, ucs_status_string(st));
        }
    }
    *rkey_p = mr->rkey_buf;
    *len_p = mr->rkey_len;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__ucx_reg_mem(chorus_tp_t *tpv, void *buf, size_t bytes, void **handle_p)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;
    chorus_reg_t *reg;
    chorus_status_t status = chorus__ucx_mem_get(tp, buf, bytes, &reg);

    if (status != CHORUS_SUCCESS) return status;
    *handle_p = reg;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__ucx_dereg_mem(chorus_tp_t *tpv, void *handle)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;

    if (handle == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: ucx: dereg_mem: no handle",
                             tp->rank);
    }
    chorus__ucx_mem_put(tp, handle);
    return CHORUS_SUCCESS;
}

#endif
