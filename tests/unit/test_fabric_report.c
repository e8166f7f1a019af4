/*
 * chorus-fabric's reports (bench/fabric/report_*.c) of a synthetic 8-host result with host5
 * at half rate (host3's CPU saturated, and one pair of ranks on host0 slow in its only test):
 * the text ends with the verdict line naming host5 and host3's CPU, the JSON validates against
 * bench/schema/chorus-fabric.schema.json (python3-jsonschema; else its required keys are
 * checked), and the HTML folder holds index.html and, with gnuplot, a non-empty pairs.png.
 * FABRIC_REPORT_KEEP=DIR keeps the example report in DIR (text, JSON and HTML).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fabric.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SCHEMA "bench/schema/chorus-fabric.schema.json"

#include "fabric_synth.h"

static const char *g_setup =
    "{\"hostname\": \"h\", \"nics\": [{\"name\": \"eth0\", \"operstate\": \"up\", "
    "\"speed_mbps\": null, \"mtu\": 1500, \"numa\": null}], \"rdma\": [{\"device\": \"mlx5_0\", "
    "\"port\": 1, \"state\": \"ACTIVE\", \"link_layer\": \"Ethernet\", \"rate\": \"100 Gb/sec\", "
    "\"gid_index\": 0, \"gid\": \"fe80::1\", \"gid_kind\": \"link-local\"}], \"gpus\": [], "
    "\"gpudirect\": \"n/a\", \"warnings\": [\"mlx5_0 port 1: link-local GID selected\"]}";

static char g_dir[512];
static fabric_result_t *g_r;
static fabric_verdict_t g_v;
static fabric_opts_t g_o;

static int setup_example(void **state)
{
    double factor[8] = {1, 1, 1, 1, 1, 0.5, 1, 1};
    const char *keep = getenv("FABRIC_REPORT_KEEP");

    (void)state;
    if (keep != NULL && *keep != '\0') {
        snprintf(g_dir, sizeof(g_dir), "%s", keep);
        mkdir(g_dir, 0755);
    } else {
        snprintf(g_dir, sizeof(g_dir), "%s/fabric-report.XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (mkdtemp(g_dir) == NULL) return -1;
    }
    g_r = synth(8, 2, 0.2, factor, 0.1);
    g_r->hosts[3].setup_json = strdup(g_setup);
    /* Pair host0-host5 (the first with host5) was flagged, retested and kept its figures. */
    g_r->inter[4].retested = 1;
    g_r->inter[4].first_gbps[0] = 0.05;
    g_r->inter[4].first_gbps[1] = 0.06;
    /* Every host's CPU was sampled; host3's was saturated. */
    for (int h = 0; h < 8; h++) {
        g_r->hosts[h].cpu_busy = 0.4;
        g_r->hosts[h].cpu_softirq = 0.02;
    }
    g_r->hosts[3].cpu_busy = 0.97;
    g_r->hosts[3].cpu_softirq = 0.41;
    /* Ranks 0-1 on host0 slow in a test that was not repeated: a note, not a finding. */
    g_r->intra[0].gbps[0] *= 0.5;
    memset(&g_o, 0, sizeof(g_o));
    g_o.threshold = 0.8;
    g_o.time_budget_s = 120;
    return fabric_analyze(g_r, &g_o, &g_v) == CHORUS_SUCCESS ? 0 : -1;
}

static int teardown_example(void **state)
{
    char cmd[1024];
    (void)state;
    fabric_verdict_free(&g_v);
    synth_free(g_r);
    if (getenv("FABRIC_REPORT_KEEP") != NULL && *getenv("FABRIC_REPORT_KEEP") != '\0') return 0;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf;
    long n;

    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = calloc(1, (size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = '\0';
    fclose(f);
    return buf;
}

static void test_text(void **state)
{
    char path[600], *text, *last;
    FILE *f;

    (void)state;
    snprintf(path, sizeof(path), "%s/report.txt", g_dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fabric_report_text(g_r, &g_v, f);
    fclose(f);
    text = slurp(path);
    assert_non_null(text);
    assert_true(strlen(text) > 1 && text[strlen(text) - 1] == '\n');
    text[strlen(text) - 1] = '\0';
    last = strrchr(text, '\n');
    assert_non_null(last);
    assert_string_equal(last + 1,
                        "chorus-fabric: FAIL: slow hosts: host5; slow allreduce: ring (whole job); "
                        "likely cause: saturated CPU on host3");
    /* The matrix names hosts, flags host5's row, and the setup warning is there. */
    assert_non_null(strstr(text, "host7"));
    assert_non_null(strstr(text, "*"));
    assert_non_null(strstr(text, "host3: mlx5_0 port 1: link-local GID selected"));
    assert_int_equal(g_r->inter[4].a * 10 + g_r->inter[4].b, 5);
    assert_non_null(strstr(text, "\nRetested (flagged by the first test"));
    assert_non_null(strstr(text, "\n  host0-host5: first 0.050, 0.060; kept "));
    assert_non_null(strstr(text, "\nHost CPU during the rounds"));
    assert_non_null(strstr(text, "  97.0     41.0 *\n"));
    assert_non_null(strstr(text, "\nNotes (2; they do not fail the run):\n  cpu     host3: CPU 97% "
                                 "busy, 41% softirq during the rounds: a likely cause of the low "
                                 "rates, not the links\n  not_retested not retested: ranks 0-1 on "
                                 "host0: "));
    free(text);
}

static void test_pass_line(void **state)
{
    fabric_result_t *r = synth(4, 1, 1.0, NULL, 0.05);
    fabric_verdict_t v;
    char line[256];

    (void)state;
    assert_int_equal(fabric_analyze(r, &g_o, &v), CHORUS_SUCCESS);
    fabric_verdict_line(r, &v, line, sizeof(line));
    assert_string_equal(line, "chorus-fabric: PASS");
    fabric_verdict_free(&v);
    /* A link, slow in its retest too. */
    r->inter[0].gbps[1] = 0.2;
    synth_retested(&r->inter[0]);
    assert_int_equal(fabric_analyze(r, &g_o, &v), CHORUS_SUCCESS);
    fabric_verdict_line(r, &v, line, sizeof(line));
    assert_string_equal(line, "chorus-fabric: FAIL: slow links: host0-host1");
    fabric_verdict_free(&v);
    synth_free(r);
}

static int run_status(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_keys(json_t *j)
{
    const char *top[] = {"tool", "schema_version", "verdict", "options", "run", "hosts",
                         "host_of", "inter", "intra", "concurrent", "coll", "findings",
                         "notes", "warnings"};
    for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++)
        assert_non_null(json_object_get(j, top[i]));
}

static void test_json(void **state)
{
    char path[600], cmd[2048];
    json_t *j, *f0;

    (void)state;
    snprintf(path, sizeof(path), "%s/report.json", g_dir);
    assert_int_equal(fabric_report_json(g_r, &g_v, &g_o, path), CHORUS_SUCCESS);
    j = json_load_file(path, 0, NULL);
    assert_non_null(j);
    check_keys(j);
    assert_string_equal(json_string_value(json_object_get(j, "tool")), "chorus-fabric");
    assert_false(json_boolean_value(json_object_get(json_object_get(j, "verdict"), "pass")));
    assert_int_equal(json_array_size(json_object_get(j, "inter")), 28);
    assert_int_equal(json_array_size(json_object_get(j, "intra")), 8);
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "concurrent"), "gbps")),
                     8);
    f0 = json_array_get(json_object_get(j, "findings"), 0);
    assert_non_null(f0);
    assert_true(json_is_object(json_object_get(json_array_get(json_object_get(j, "hosts"), 3),
                                               "setup")));
    /* Every host's CPU; host3 saturated. The notes: host3's CPU, then the pair not retested. */
    for (int h = 0; h < 8; h++) {
        json_t *cpu = json_object_get(json_array_get(json_object_get(j, "hosts"), (size_t)h),
                                      "cpu");
        assert_true(json_is_object(cpu));
        assert_true(json_real_value(json_object_get(cpu, "busy")) == (h == 3 ? 0.97 : 0.4));
        assert_int_equal(json_boolean_value(json_object_get(cpu, "saturated")), h == 3);
    }
    assert_int_equal(json_array_size(json_object_get(j, "notes")), 2);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "notes"), 0), "kind")), "cpu");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "notes"), 1), "kind")),
                        "not_retested");
    json_decref(j);
    if (access(SCHEMA, R_OK) != 0 || run_status("python3 -c 'import jsonschema' 2>/dev/null")) {
        print_message("skipped: schema validation (python3-jsonschema or %s missing); "
                      "required keys checked\n", SCHEMA);
        skip();
    }
    /* The validator must be able to fail: a copy with a broken field is refused. */
    snprintf(cmd, sizeof(cmd),
             "python3 - '%s' '%s' <<'EOF'\n"
             "import json, sys, jsonschema\n"
             "schema = json.load(open(sys.argv[1]))\n"
             "doc = json.load(open(sys.argv[2]))\n"
             "cls = jsonschema.validators.validator_for(schema)\n"
             "cls.check_schema(schema)\n"
             "cls(schema).validate(doc)\n"
             "doc['inter'][0]['gbps_ab'] = 'fast'\n"
             "errs = list(cls(schema).iter_errors(doc))\n"
             "sys.exit(0 if errs else 3)\n"
             "EOF", SCHEMA, path);
    assert_int_equal(run_status(cmd), 0);
}

static void test_html(void **state)
{
    char path[600], *page;
    struct stat sb;

    (void)state;
    assert_int_equal(fabric_report_html(g_r, &g_v, g_dir), CHORUS_SUCCESS);
    snprintf(path, sizeof(path), "%s/index.html", g_dir);
    page = slurp(path);
    assert_non_null(page);
    assert_non_null(strstr(page, "chorus-fabric: FAIL: slow hosts: host5"));
    assert_non_null(strstr(page, "<th>host5</th>"));
    assert_non_null(strstr(page, "<h2>Notes</h2>"));
    assert_non_null(strstr(page, "<h2>Host CPU during the rounds</h2>"));
    snprintf(path, sizeof(path), "%s/pairs.dat", g_dir);
    assert_int_equal(stat(path, &sb), 0);
    if (run_status("gnuplot --version >/dev/null 2>&1") != 0) {
        assert_non_null(strstr(page, "gnuplot not found"));
        free(page);
        print_message("skipped: gnuplot not installed (apt-get install gnuplot-nox): no PNG\n");
        skip();
    }
    assert_non_null(strstr(page, "<img src=\"pairs.png\""));
    free(page);
    snprintf(path, sizeof(path), "%s/pairs.png", g_dir);
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size > 1000);
}

/* Without gnuplot on PATH the page says so, and the report still stands. */
static void test_html_without_gnuplot(void **state)
{
    char dir[700], path[800], *page, *old = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    fabric_result_t *r = synth(1, 3, 1.0, NULL, 0);
    fabric_verdict_t v;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/nognuplot", g_dir);
    assert_int_equal(fabric_analyze(r, &g_o, &v), CHORUS_SUCCESS);
    setenv("PATH", "/nonexistent", 1);
    assert_int_equal(fabric_report_html(r, &v, dir), CHORUS_SUCCESS);
    if (old != NULL) setenv("PATH", old, 1);
    free(old);
    snprintf(path, sizeof(path), "%s/index.html", dir);
    page = slurp(path);
    assert_non_null(page);
    assert_non_null(strstr(page, "gnuplot not found"));
    assert_null(strstr(page, "<img"));
    /* One host: the matrix is of its ranks. */
    assert_non_null(strstr(page, "<th>rank 2</th>"));
    free(page);
    fabric_verdict_free(&v);
    synth_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_pass_line),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_html),
        cmocka_unit_test(test_html_without_gnuplot),
    };
    return cmocka_run_group_tests(tests, setup_example, teardown_example);
}
