/*
 * The registration cache (lib/util/regcache.c) over fake registration calls:
 * hits inside a registered range, page rounding, LRU eviction under the byte budget that
 * spares entries in use, invalidation (now, or at the last put), and failures.
 */
#include "util/regcache.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define FAKE_MAX 64

/* The fake NIC: a table of live registrations, so a double dereg or a leak shows. */
typedef struct {
    uintptr_t start[FAKE_MAX];
    size_t len[FAKE_MAX];
    int live[FAKE_MAX];
    int regs, deregs, fail_next;
} fake_nic_t;

static int fake_reg(void *ctx, void *addr, size_t len, void **mr_p, uint32_t *lkey_p,
                    uint32_t *rkey_p)
{
    fake_nic_t *nic = ctx;
    if (nic->fail_next) {
        nic->fail_next = 0;
        errno = ENOMEM;
        return -1;
    }
    assert_true(nic->regs < FAKE_MAX);
    int k = nic->regs++;
    nic->start[k] = (uintptr_t)addr;
    nic->len[k] = len;
    nic->live[k] = 1;
    *mr_p = &nic->live[k];
    *lkey_p = 1000u + (uint32_t)k;
    *rkey_p = 2000u + (uint32_t)k;
    return 0;
}

static void fake_dereg(void *ctx, void *mr)
{
    fake_nic_t *nic = ctx;
    int *live = mr;
    assert_int_equal(*live, 1);
    *live = 0;
    nic->deregs++;
}

static int live_count(const fake_nic_t *nic)
{
    int n = 0;
    for (int i = 0; i < nic->regs; i++)
        n += nic->live[i];
    return n;
}

static uintptr_t page(void)
{
    return (uintptr_t)sysconf(_SC_PAGESIZE);
}

static void test_hit_inside_and_rounding(void **state)
{
    static fake_nic_t nic;
    chorus_regcache_ops_t ops = {fake_reg, fake_dereg, &nic, "test"};
    chorus_regcache_t *rc;
    chorus_reg_t *a, *b, *c;
    chorus_regcache_stats_t st;
    uintptr_t pg = page();
    uint8_t *buf = aligned_alloc(pg, 8 * pg);
    (void)state;
    memset(&nic, 0, sizeof(nic));
    assert_int_equal(chorus__regcache_create(&ops, 64 * pg, &rc), CHORUS_SUCCESS);
    assert_int_equal(chorus__regcache_get(rc, buf + 10, 2 * pg, &a), CHORUS_SUCCESS);
    assert_int_equal(a->start, (uintptr_t)buf);
    assert_int_equal(a->end, (uintptr_t)buf + 3 * pg);
    assert_int_equal(a->lkey, 1000);
    /* Inside the rounded range: a hit, the same entry. */
    assert_int_equal(chorus__regcache_get(rc, buf + pg, 2 * pg, &b), CHORUS_SUCCESS);
    assert_ptr_equal(a, b);
    assert_int_equal(a->refs, 2);
    assert_ptr_equal(chorus__regcache_find(rc, buf, 3 * pg), a);
    /* Crossing its end: a miss and a new registration. */
    assert_null(chorus__regcache_find(rc, buf + 2 * pg, 2 * pg));
    assert_int_equal(chorus__regcache_get(rc, buf + 2 * pg, 2 * pg, &c), CHORUS_SUCCESS);
    assert_ptr_not_equal(a, c);
    chorus__regcache_stats(rc, &st);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.bytes, 5 * pg);
    chorus__regcache_put(rc, a);
    chorus__regcache_put(rc, a);
    chorus__regcache_put(rc, a);
    chorus__regcache_put(rc, c);
    assert_int_equal(live_count(&nic), 2); /* cached, not deregistered */
    chorus__regcache_destroy(rc);
    assert_int_equal(live_count(&nic), 0);
    assert_int_equal(nic.deregs, 2);
    free(buf);
}

static void test_lru_eviction_budget(void **state)
{
    static fake_nic_t nic;
    chorus_regcache_ops_t ops = {fake_reg, fake_dereg, &nic, "test"};
    chorus_regcache_t *rc;
    chorus_reg_t *r[5];
    chorus_regcache_stats_t st;
    uintptr_t pg = page();
    uint8_t *buf = aligned_alloc(pg, 16 * pg);
    (void)state;
    memset(&nic, 0, sizeof(nic));
    /* Room for three one-page entries. */
    assert_int_equal(chorus__regcache_create(&ops, 3 * pg, &rc), CHORUS_SUCCESS);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(chorus__regcache_get(rc, buf + (size_t)i * 2 * pg, pg, &r[i]),
                         CHORUS_SUCCESS);
        chorus__regcache_put(rc, r[i]);
    }
    /* Touch entry 0, so entry 1 is the least recently used. */
    chorus_reg_t *again = chorus__regcache_find(rc, buf, pg);
    assert_ptr_equal(again, r[0]);
    chorus__regcache_put(rc, again);
    assert_int_equal(chorus__regcache_get(rc, buf + 6 * pg, pg, &r[3]), CHORUS_SUCCESS);
    assert_int_equal(nic.live[1], 0); /* entry 1 went */
    assert_int_equal(nic.live[0], 1);
    assert_int_equal(nic.live[2], 1);
    /* Entries in use are never evicted: a 4-page one exceeds the budget alone. */
    assert_int_equal(chorus__regcache_get(rc, buf + 8 * pg, 4 * pg, &r[4]), CHORUS_SUCCESS);
    assert_int_equal(nic.live[0] + nic.live[2], 0);
    assert_int_equal(nic.live[3], 1); /* r[3] still referenced */
    chorus__regcache_stats(rc, &st);
    assert_int_equal(st.evictions, 3);
    assert_int_equal(st.bytes, 5 * pg);
    /* Once released, the cache goes back under budget. */
    chorus__regcache_put(rc, r[3]);
    chorus__regcache_stats(rc, &st);
    assert_int_equal(st.bytes, 4 * pg);
    chorus__regcache_put(rc, r[4]);
    chorus__regcache_stats(rc, &st);
    assert_int_equal(st.bytes, 0); /* over budget alone: evicted at its last put */
    chorus__regcache_destroy(rc);
    assert_int_equal(live_count(&nic), 0);
    free(buf);
}

static void test_invalidate(void **state)
{
    static fake_nic_t nic;
    chorus_regcache_ops_t ops = {fake_reg, fake_dereg, &nic, "test"};
    chorus_regcache_t *rc;
    chorus_reg_t *a, *b, *c, *d;
    uintptr_t pg = page();
    uint8_t *buf = aligned_alloc(pg, 16 * pg);
    (void)state;
    memset(&nic, 0, sizeof(nic));
    assert_int_equal(chorus__regcache_create(&ops, 64 * pg, &rc), CHORUS_SUCCESS);
    assert_int_equal(chorus__regcache_get(rc, buf, 2 * pg, &a), CHORUS_SUCCESS);
    assert_int_equal(chorus__regcache_get(rc, buf + 4 * pg, 2 * pg, &b), CHORUS_SUCCESS);
    assert_int_equal(chorus__regcache_get(rc, buf + 8 * pg, 2 * pg, &c), CHORUS_SUCCESS);
    chorus__regcache_put(rc, a);
    chorus__regcache_put(rc, c);
    /* Overlaps a (unused: gone now) and b (in use: gone at its put); c is untouched. */
    chorus__regcache_invalidate(rc, buf + pg, 4 * pg);
    assert_int_equal(nic.live[0], 0);
    assert_int_equal(nic.live[1], 1);
    assert_null(chorus__regcache_find(rc, buf + 4 * pg, pg));
    assert_int_equal(b->lkey, 1001); /* still usable by its holder */
    chorus__regcache_put(rc, b);
    assert_int_equal(nic.live[1], 0);
    assert_int_equal(nic.live[2], 1);
    /* The same addresses register afresh. */
    assert_int_equal(chorus__regcache_get(rc, buf, pg, &d), CHORUS_SUCCESS);
    assert_int_equal(d->lkey, 1003);
    chorus__regcache_put(rc, d);
    chorus__regcache_destroy(rc);
    assert_int_equal(live_count(&nic), 0);
    assert_int_equal(nic.deregs, 4);
    free(buf);
}

static void test_failures(void **state)
{
    static fake_nic_t nic;
    chorus_regcache_ops_t ops = {fake_reg, fake_dereg, &nic, "test"};
    chorus_regcache_t *rc;
    chorus_reg_t *r = (chorus_reg_t *)&nic; /* must stay untouched */
    chorus_regcache_stats_t st;
    uint8_t buf[64];
    (void)state;
    memset(&nic, 0, sizeof(nic));
    assert_int_equal(chorus__regcache_create(&ops, 1 << 20, &rc), CHORUS_SUCCESS);
    nic.fail_next = 1;
    assert_int_equal(chorus__regcache_get(rc, buf, sizeof(buf), &r), CHORUS_ERR_SYSTEM);
    assert_ptr_equal(r, (chorus_reg_t *)&nic);
    assert_non_null(strstr(chorus_last_error(), "registering"));
    assert_int_equal(chorus__regcache_get(rc, buf, 0, &r), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__regcache_stats(rc, &st);
    assert_int_equal(st.entries, 0);
    chorus__regcache_destroy(rc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_inside_and_rounding),
        cmocka_unit_test(test_lru_eviction_budget),
        cmocka_unit_test(test_invalidate),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
