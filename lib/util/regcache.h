/*
 * A registration cache for memory a NIC or a communication library must register before it
 * moves it (ibv_reg_mr, ucp_mem_map): registering pins pages and costs tens of microseconds
 * per megabyte, and the same gradient buffers are sent on every step, so each is registered
 * once and reused. The registration calls sit behind pointers, so the ib and ucx transports
 * share the cache and the tests need neither a NIC nor UCX.
 */
#ifndef CHORUS_UTIL_REGCACHE_H
#define CHORUS_UTIL_REGCACHE_H

#include "chorus.h"

#include <stddef.h>
#include <stdint.h>

/* The registration calls, behind pointers so that tests need no NIC. reg returns 0 and
 * an opaque handle and keys (verbs lkey/rkey; users without 32-bit keys leave them 0), or
 * -1 with errno set. who names the user in messages ("ib", "ucx"). */
typedef struct {
    int (*reg)(void *ctx, void *addr, size_t len, void **mr_p, uint32_t *lkey_p, uint32_t *rkey_p);
    void (*dereg)(void *ctx, void *mr);
    void *ctx;
    const char *who;
} chorus_regcache_ops_t;

typedef struct chorus_reg {
    uintptr_t start, end; /* registered bytes [start, end), page aligned */
    void *mr;
    uint32_t lkey, rkey;
    int refs;
    int dead;                       /* invalidated while referenced: deregistered at the last put */
    struct chorus_reg *prev, *next; /* list in LRU order, most recently used first */
} chorus_reg_t;

typedef struct chorus_regcache chorus_regcache_t;

typedef struct {
    uint64_t hits, misses, evictions, invalidations;
    uint64_t bytes;   /* registered now */
    unsigned entries; /* registered now */
} chorus_regcache_stats_t;

chorus_status_t chorus__regcache_create(const chorus_regcache_ops_t *ops, size_t budget_bytes,
                                        chorus_regcache_t **rc_p);

/* A referenced registration covering [addr, addr + len): a cached one that contains the
 * range (hit), else a new one of the range rounded out to pages, after evicting least
 * recently used unreferenced entries until the new one fits the byte budget (one larger
 * than the budget is still made: the budget bounds what is cached, not what is in use). */
chorus_status_t chorus__regcache_get(chorus_regcache_t *rc, const void *addr, size_t len,
                                     chorus_reg_t **reg_p);

/* A cached registration containing the range, referenced, or NULL: never registers. */
chorus_reg_t *chorus__regcache_find(chorus_regcache_t *rc, const void *addr, size_t len);

/* Drops a reference from get or find. */
void chorus__regcache_put(chorus_regcache_t *rc, chorus_reg_t *reg);

/* The memory [addr, addr + len) is going away or changing mapping: every entry that
 * overlaps it is deregistered now, or at its last put if referenced, and is never
 * returned again. */
void chorus__regcache_invalidate(chorus_regcache_t *rc, const void *addr, size_t len);

void chorus__regcache_stats(const chorus_regcache_t *rc, chorus_regcache_stats_t *stats_p);

/* Deregisters everything (references left are a caller bug, logged). */
void chorus__regcache_destroy(chorus_regcache_t *rc);

#endif
