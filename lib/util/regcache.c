/*
 * The registration cache of util/regcache.h (ib: ibv_reg_mr; ucx: ucp_mem_map).
 * Entries are kept in one list in LRU order: a cache holds tens of entries, so a linear
 * search costs less than keeping an interval tree right. A registration is never trusted
 * after its memory may have changed: chorus__regcache_invalidate drops every overlapping entry,
 * and entries still in use are deregistered only at their last put.
 */
#include "util/regcache.h"

#include "util/log.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

struct chorus_regcache {
    chorus_regcache_ops_t ops;
    size_t budget;
    uintptr_t page;
    chorus_reg_t *head; /* most recently used */
    chorus_reg_t *tail;
    chorus_regcache_stats_t stats;
};

chorus_status_t chorus__regcache_create(const chorus_regcache_ops_t *ops, size_t budget_bytes,
                                        chorus_regcache_t **rc_p)
{
    chorus_regcache_t *rc = calloc(1, sizeof(*rc));
    long page = sysconf(_SC_PAGESIZE);

    if (rc == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "%s: registration cache",
                             ops->who != NULL ? ops->who : "regcache");
    rc->ops = *ops;
    if (rc->ops.who == NULL) rc->ops.who = "regcache";
    rc->budget = budget_bytes;
    rc->page = page > 0 ? (uintptr_t)page : 4096;
    *rc_p = rc;
    return CHORUS_SUCCESS;
}

static void unlink_reg(chorus_regcache_t *rc, chorus_reg_t *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        rc->head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    else
        rc->tail = r->prev;
    r->prev = r->next = NULL;
}

static void push_front(chorus_regcache_t *rc, chorus_reg_t *r)
{
    r->prev = NULL;
    r->next = rc->head;
    if (rc->head != NULL)
        rc->head->prev = r;
    else
        rc->tail = r;
    rc->head = r;
}

/* Deregisters an entry that is no longer in the list or referenced. */
static void release(chorus_regcache_t *rc, chorus_reg_t *r)
{
    rc->ops.dereg(rc->ops.ctx, r->mr);
    rc->stats.bytes -= r->end - r->start;
    rc->stats.entries--;
    free(r);
}

chorus_reg_t *chorus__regcache_find(chorus_regcache_t *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, e = a + len;

    for (chorus_reg_t *r = rc->head; r != NULL; r = r->next) {
        if (r->start <= a && e <= r->end) {
            unlink_reg(rc, r);
            push_front(rc, r);
            r->refs++;
            rc->stats.hits++;
            return r;
        }
    }
    return NULL;
}

/* Evicts unreferenced entries from the LRU end until `more` bytes fit the budget. */
static void make_room(chorus_regcache_t *rc, size_t more)
{
    chorus_reg_t *r = rc->tail;

    while (r != NULL && rc->stats.bytes + more > rc->budget) {
        chorus_reg_t *prev = r->prev;

        if (r->refs == 0) {
            unlink_reg(rc, r);
            release(rc, r);
            rc->stats.evictions++;
        }
        r = prev;
    }
}

chorus_status_t chorus__regcache_get(chorus_regcache_t *rc, const void *addr, size_t len,
                                     chorus_reg_t **reg_p)
{
    uintptr_t start, end;
    chorus_reg_t *r;

    if (len == 0 || (uintptr_t)addr + len < (uintptr_t)addr) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s: register %zu bytes at %p",
                             rc->ops.who, len, addr);
    }
    r = chorus__regcache_find(rc, addr, len);
    if (r != NULL) {
        *reg_p = r;
        return CHORUS_SUCCESS;
    }
    rc->stats.misses++;
    start = (uintptr_t)addr & ~(rc->page - 1);
    end = ((uintptr_t)addr + len + rc->page - 1) & ~(rc->page - 1);
    make_room(rc, end - start);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "%s: registration cache", rc->ops.who);
    r->start = start;
    r->end = end;
    if (rc->ops.reg(rc->ops.ctx, (void *)start, end - start, &r->mr, &r->lkey, &r->rkey) != 0) {
        int err = errno;

        free(r);
        return chorus__error_errno(CHORUS_ERR_SYSTEM, err, "%s: registering %zu bytes at %p",
                                   rc->ops.who, (size_t)(end - start), (void *)start);
    }
    r->refs = 1;
    push_front(rc, r);
    rc->stats.bytes += end - start;
    rc->stats.entries++;
    *reg_p = r;
    return CHORUS_SUCCESS;
}

void chorus__regcache_put(chorus_regcache_t *rc, chorus_reg_t *reg)
{
    if (--reg->refs > 0) return;
    if (reg->dead) {
        release(rc, reg);
        return;
    }
    make_room(rc, 0);
}

void chorus__regcache_invalidate(chorus_regcache_t *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, e = a + len;
    chorus_reg_t *r = rc->head;

    while (r != NULL) {
        chorus_reg_t *next = r->next;

        if (r->start < e && a < r->end) {
            unlink_reg(rc, r);
            rc->stats.invalidations++;
            /* A referenced entry leaves the list now (never found again) and is freed by
             * its last put. */
            if (r->refs > 0)
                r->dead = 1;
            else
                release(rc, r);
        }
        r = next;
    }
}

void chorus__regcache_stats(const chorus_regcache_t *rc, chorus_regcache_stats_t *stats_p)
{
    *stats_p = rc->stats;
}

void chorus__regcache_destroy(chorus_regcache_t *rc)
{
    if (rc == NULL) return;
    while (rc->head != NULL) {
        chorus_reg_t *r = rc->head;

        if (r->refs > 0)
            CHORUS_WARN(rc->ops.who, "registration cache: %p still referenced", (void *)r);
        unlink_reg(rc, r);
        release(rc, r);
    }
    free(rc);
}
