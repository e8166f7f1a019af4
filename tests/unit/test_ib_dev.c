/* CHORUS_IB_HCA parsing and the port choice (lib/transport/ib/ib_dev.c), without a NIC. */
#include "transport/ib/ib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static void test_parse_forms(void **state)
{
    ib_hca_list_t l;
    (void)state;
    assert_int_equal(ib_hca_parse(NULL, &l), CHORUS_SUCCESS);
    assert_int_equal(l.n, 0);
    assert_int_equal(ib_hca_parse("mlx5_0:1", &l), CHORUS_SUCCESS);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.e[0].name, "mlx5_0");
    assert_int_equal(l.e[0].port, 1);
    assert_int_equal(ib_hca_parse("mlx5_0", &l), CHORUS_SUCCESS);
    assert_int_equal(l.e[0].port, 0);
    assert_int_equal(ib_hca_parse("^=mlx5_0:1,mlx5_3:2,bnxt_re0", &l), CHORUS_SUCCESS);
    assert_int_equal(l.exclude, 1);
    assert_int_equal(l.exact, 1);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.e[1].name, "mlx5_3");
    assert_int_equal(l.e[1].port, 2);
    assert_string_equal(l.e[2].name, "bnxt_re0");
}

static void test_parse_errors(void **state)
{
    static const char *bad[] = {"mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", ":1",
                                "mlx5_0,", "mlx5_0,,mlx5_1", "^", "=", "mlx5_0:1:2"};
    ib_hca_list_t l;
    char many[512] = "";
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        l.n = 99;
        assert_int_equal(ib_hca_parse(bad[i], &l), CHORUS_ERR_INVALID_ARGUMENT);
        assert_int_equal(l.n, 99);
        assert_non_null(strstr(chorus_last_error(), "CHORUS_IB_HCA"));
    }
    for (int i = 0; i <= IB_HCA_MAX; i++)
        strcat(many, i == 0 ? "d" : ",d");
    assert_int_equal(ib_hca_parse(many, &l), CHORUS_ERR_INVALID_ARGUMENT);
}

static void test_match(void **state)
{
    ib_hca_list_t l;
    (void)state;
    assert_int_equal(ib_hca_parse("", &l), CHORUS_SUCCESS);
    assert_true(ib_hca_match(&l, "anything", 3));
    assert_int_equal(ib_hca_parse("mlx5", &l), CHORUS_SUCCESS); /* prefix */
    assert_true(ib_hca_match(&l, "mlx5_0", 1));
    assert_true(ib_hca_match(&l, "mlx5_1", 2));
    assert_false(ib_hca_match(&l, "mlx4_0", 1));
    assert_int_equal(ib_hca_parse("=mlx5", &l), CHORUS_SUCCESS); /* exact */
    assert_false(ib_hca_match(&l, "mlx5_0", 1));
    assert_int_equal(ib_hca_parse("mlx5_0:1,mlx5_1", &l), CHORUS_SUCCESS);
    assert_true(ib_hca_match(&l, "mlx5_0", 1));
    assert_false(ib_hca_match(&l, "mlx5_0", 2));
    assert_true(ib_hca_match(&l, "mlx5_1", 2));
    assert_int_equal(ib_hca_parse("^mlx5_0:1", &l), CHORUS_SUCCESS);
    assert_false(ib_hca_match(&l, "mlx5_0", 1));
    assert_true(ib_hca_match(&l, "mlx5_0", 2));
    assert_true(ib_hca_match(&l, "mlx5_1", 1));
}

static void test_port_pick(void **state)
{
    ib_port_cand_t c[4] = {
        {"mlx5_0", 1, 0, 1}, /* down */
        {"mlx5_1", 1, 1, 1},
        {"mlx5_2", 1, 1, 0},
        {"mlx5_2", 2, 1, 0},
    };
    ib_hca_list_t l;
    int pos = -1;
    (void)state;
    assert_int_equal(ib_hca_parse(NULL, &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick(c, 4, &l, &pos), 0);
    assert_int_equal(pos, 1);
    assert_int_equal(ib_hca_parse("mlx5_2:2", &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick(c, 4, &l, &pos), 0);
    assert_int_equal(pos, 3);
    assert_int_equal(ib_hca_parse("mlx5_0", &l), CHORUS_SUCCESS);
    pos = 7;
    assert_int_equal(ib_port_pick(c, 4, &l, &pos), -1); /* only a down port */
    assert_int_equal(pos, 7);
    assert_int_equal(ib_hca_parse("^mlx5_1", &l), CHORUS_SUCCESS);
    assert_int_equal(ib_port_pick(c, 4, &l, &pos), 0);
    assert_int_equal(pos, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_forms),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_port_pick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
