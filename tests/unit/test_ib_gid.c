/* RoCE v2 GID choice (lib/transport/ib/ib_gid.c): forced index, auto-pick order, refusals. */
#include "transport/ib/ib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static ib_gid_entry_t v4(int index, int type, uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
    ib_gid_entry_t e = {index, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d}, type};
    return e;
}

static ib_gid_entry_t zero(int index)
{
    ib_gid_entry_t e;
    memset(&e, 0, sizeof(e));
    e.index = index;
    return e;
}

static ib_gid_entry_t v6(int index, int type, uint8_t first, uint8_t second)
{
    ib_gid_entry_t e = {index,
                        {first, second, 0, 0, 0, 0, 0, 0, 2, 0x1b, 0x21, 0xff, 0xfe, 1, 2, 3},
                        type};
    return e;
}

/* The usual mlx5 RoCE table: fe80 v1/v2, then IPv4 v1/v2, then a global IPv6 v1/v2. */
static void test_auto_prefers_v4_mapped_v2(void **state)
{
    ib_gid_entry_t t[6] = {v6(0, 1, 0xfe, 0x80),          v6(1, 2, 0xfe, 0x80),
                           v4(2, 1, 10, 0, 0, 7),          v4(3, 2, 10, 0, 0, 7),
                           v6(4, 1, 0x20, 0x01),           v6(5, 2, 0x20, 0x01)};
    int pos = -1;
    (void)state;
    assert_int_equal(ib_gid_select(t, 6, -1, 1, &pos), CHORUS_SUCCESS);
    assert_int_equal(pos, 3);
    /* Without the IPv4 one, the IPv6 global v2 GID. */
    t[3] = v4(3, 2, 0, 0, 0, 0);
    assert_int_equal(ib_gid_select(t, 6, -1, 1, &pos), CHORUS_SUCCESS);
    assert_int_equal(pos, 5);
    /* 169.254/16 is link-local too: still the IPv6 global one. */
    t[3] = v4(3, 2, 169, 254, 3, 4);
    assert_int_equal(ib_gid_select(t, 6, -1, 1, &pos), CHORUS_SUCCESS);
    assert_int_equal(pos, 5);
}

static void test_auto_refuses_link_local(void **state)
{
    ib_gid_entry_t t[3] = {v6(0, 1, 0xfe, 0x80), v6(1, 2, 0xfe, 0x80), v4(2, 1, 10, 1, 1, 1)};
    int pos = 77;
    (void)state;
    assert_int_equal(ib_gid_select(t, 3, -1, 1, &pos), CHORUS_ERR_UNSUPPORTED);
    assert_int_equal(pos, 77); /* outputs only on success */
    assert_non_null(strstr(chorus_last_error(), "link-local"));
    assert_non_null(strstr(chorus_last_error(), "CHORUS_IB_GID_INDEX"));
    /* No GID at all. */
    assert_int_equal(ib_gid_select(t, 0, -1, 1, &pos), CHORUS_ERR_UNSUPPORTED);
    /* v1 only (not routable): refused as well. */
    assert_int_equal(ib_gid_select(&t[2], 1, -1, 1, &pos), CHORUS_ERR_UNSUPPORTED);
}

static void test_forced_index(void **state)
{
    ib_gid_entry_t t[4] = {v6(0, 1, 0xfe, 0x80), v6(1, 2, 0xfe, 0x80), v4(3, 2, 10, 0, 0, 7),
                           zero(5)};
    int pos = -1;
    (void)state;
    /* The table index, not the position, and link-local allowed when asked for. */
    assert_int_equal(ib_gid_select(t, 4, 1, 1, &pos), CHORUS_SUCCESS);
    assert_int_equal(pos, 1);
    assert_int_equal(ib_gid_select(t, 4, 3, 1, &pos), CHORUS_SUCCESS);
    assert_int_equal(pos, 2);
    pos = 9;
    assert_int_equal(ib_gid_select(t, 4, 2, 1, &pos), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "CHORUS_IB_GID_INDEX=2"));
    assert_int_equal(ib_gid_select(t, 4, 5, 1, &pos), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(pos, 9);
}

/* InfiniBand routes by LID: the first non-zero GID (the fe80 port GID) is right there. */
static void test_infiniband_first_gid(void **state)
{
    ib_gid_entry_t t[2] = {zero(0), v6(1, 0, 0xfe, 0x80)};
    int pos = -1;
    (void)state;
    assert_int_equal(ib_gid_select(t, 2, -1, 0, &pos), CHORUS_SUCCESS);
    assert_int_equal(pos, 1);
}

static void test_format(void **state)
{
    ib_gid_entry_t e = v4(0, 2, 10, 0, 0, 7);
    char text[64];
    (void)state;
    ib_gid_format(e.gid, text, sizeof(text));
    assert_string_equal(text, "0000:0000:0000:0000:0000:ffff:0a00:0007");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_prefers_v4_mapped_v2),
        cmocka_unit_test(test_auto_refuses_link_local),
        cmocka_unit_test(test_forced_index),
        cmocka_unit_test(test_infiniband_first_gid),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
