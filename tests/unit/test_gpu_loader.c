/*
 * The GPU plugin loader (lib/gpu/gpu.c) tells "no GPU here" from "a plugin that is there
 * but broken" (issue 36): chorus__gpu_state, the words of chorus__gpu_describe, the errors
 * of device calls without a GPU (chorus__gpu_unavailable, chorus__gpu_error), and the gate
 * of the GPU test programs (tests/gpu/gpu_gate.h: skip only when absent, fail when broken).
 *
 * The loader runs once per process, so every case re-executes this binary with --child and
 * an environment of its own; the child prints what it found and the parent checks it. The
 * plugins broken on purpose (tests/gpu/broken, built with this binary) are in
 * $BUILD/tests/broken, the fake plugin and the real one in $BUILD/lib, both found from this
 * binary's own path ($BUILD/tests).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gpu/gpu.h"
#include "gpu/gpu_gate.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char self_path[4096];
static char build_dir[4096]; /* $BUILD, absolute */
static char out[16384];      /* the last child's stdout and stderr */
static char tmp_dir[64];     /* test_default_lookup's directory, removed by its teardown */

/* ---- The child: what the loader says, in lines the parent looks for ---- */

static int child_main(void)
{
    chorus_status_t st;
    int gate;

    printf("state=%d\n", (int)chorus__gpu_state());
    printf("desc=%s\n", chorus__gpu_describe());
    fflush(stdout);
    gate = gpu_gate(1);
    fflush(stdout);
    fflush(stderr);
    printf("gate=%d\n", gate);
    if (chorus__gpu() == NULL) {
        st = chorus__gpu_unavailable("rank 0: allreduce: stream is not NULL");
        printf("unavailable=%d %s\n", (int)st, chorus_last_error());
        st = chorus__gpu_error(CHORUS_ERR_SYSTEM, "rank 0: allreduce #1: memcpy");
        printf("gpu_error=%d %s\n", (int)st, chorus_last_error());
    }
    return 0;
}

/* ---- The parent ---- */

/* Runs the child with CHORUS_CUDA_PLUGIN=plugin (unset when NULL), LD_LIBRARY_PATH=ldpath
 * (unset when NULL) and one more NAME=VALUE setting when extra is given, from exe (this
 * binary when NULL). Its output goes to out; returns its exit status. */
static int run_child(const char *exe, const char *plugin, const char *ldpath, const char *extra)
{
    size_t used = 0;
    ssize_t n;
    int fds[2], st;
    pid_t pid;

    if (exe == NULL) exe = self_path;
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char setting[512];
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        unsetenv("CHORUS_CUDA_PLUGIN");
        unsetenv("LD_LIBRARY_PATH");
        if (plugin != NULL) setenv("CHORUS_CUDA_PLUGIN", plugin, 1);
        if (ldpath != NULL) setenv("LD_LIBRARY_PATH", ldpath, 1);
        if (extra != NULL) {
            snprintf(setting, sizeof setting, "%s", extra);
            char *eq = strchr(setting, '=');
            if (eq != NULL) {
                *eq = '\0';
                setenv(setting, eq + 1, 1);
            }
        }
        unsetenv("CHORUS_DEBUG");
        execl(exe, exe, "--child", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    while ((n = read(fds[0], out + used, sizeof out - 1 - used)) > 0) used += (size_t)n;
    out[used] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Prints the child's description line after label (never its "skipped:" line, which
 * tests/run_tests.sh would take for the reason of a cmocka skip). */
static void show_desc(const char *label)
{
    const char *d = strstr(out, "desc=");

    if (d != NULL) printf("# %s: %.*s\n", label, (int)strcspn(d + 5, "\n"), d + 5);
}

/* The child's output holds want. */
static void expect(const char *want)
{
    if (strstr(out, want) == NULL) fail_msg("the loader's output lacks \"%s\":\n%s", want, out);
}

/* A broken outcome: BROKEN, the gate fails the test with the loader's words, device calls
 * fail with CHORUS_ERR_SYSTEM naming the reason; the output holds each of want1..want3
 * that is not NULL. */
static void expect_broken(const char *want1, const char *want2, const char *want3)
{
    char line[160];

    expect("state=2\n");
    expect("gate=1\n");
    expect("FAIL: broken CUDA plugin ");
    snprintf(line, sizeof line, "unavailable=%d rank 0: allreduce: stream is not NULL: broken "
             "CUDA plugin", (int)CHORUS_ERR_SYSTEM);
    expect(line);
    expect("gpu_error=");
    expect("memcpy: broken CUDA plugin");
    if (strstr(out, "skipped:") != NULL) fail_msg("a broken plugin skipped:\n%s", out);
    if (want1 != NULL) expect(want1);
    if (want2 != NULL) expect(want2);
    if (want3 != NULL) expect(want3);
}

/* An absent outcome: ABSENT, the gate skips with the reason, device calls are
 * CHORUS_ERR_UNSUPPORTED "no CUDA device (...)"; the description holds want. */
static void expect_absent(const char *want)
{
    char line[160];

    expect("state=1\n");
    expect("gate=77\n");
    expect("skipped: no CUDA device (");
    snprintf(line, sizeof line, "unavailable=%d rank 0: allreduce: stream is not NULL: no CUDA "
             "device (", (int)CHORUS_ERR_UNSUPPORTED);
    expect(line);
    if (strstr(out, "FAIL:") != NULL) fail_msg("a machine without a GPU failed:\n%s", out);
    if (want != NULL) expect(want);
}

static void broken_path(char *buf, size_t len, const char *kind)
{
    struct stat st;

    snprintf(buf, len, "%s/tests/broken/libchorus-cuda-%s.so", build_dir, kind);
    if (stat(buf, &st) != 0) fail_msg("%s is not built (make builds it with this test)", buf);
}

/* ---- Cases ---- */

/* Each plugin broken on purpose, named by CHORUS_CUDA_PLUGIN. */
static void test_broken_plugins(void **state)
{
    static const struct {
        const char *kind, *want1, *want2;
    } cases[] = {
        {"notelf", "dlopen: ", "libchorus-cuda-notelf.so: "},
        {"undef", "dlopen: ", "chorus_broken_plugin_missing_function"},
        {"nosym", "no entry chorus_gpu_plugin", "undefined symbol: chorus_gpu_plugin"},
        {"abi", "does not speak ABI", NULL},      /* want2: the version, below */
        {"abitable", "does not speak ABI", NULL},
        {"init", "the broken-init plugin failed to start: ", "init fails on purpose"},
    };
    char path[4200], abi_null[64], abi_table[64];
    (void)state;

    snprintf(abi_null, sizeof abi_null, "chorus_gpu_plugin(%d) returned NULL",
             CHORUS_GPU_ABI_VERSION);
    snprintf(abi_table, sizeof abi_table, "its table is of ABI %d", CHORUS_GPU_ABI_VERSION - 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *want2 = cases[i].want2;
        if (strcmp(cases[i].kind, "abi") == 0) want2 = abi_null;
        if (strcmp(cases[i].kind, "abitable") == 0) want2 = abi_table;
        broken_path(path, sizeof path, cases[i].kind);
        assert_int_equal(run_child(NULL, path, NULL, NULL), 0);
        show_desc(cases[i].kind);
        expect_broken(path, cases[i].want1, want2);
    }
}

/* CHORUS_CUDA_PLUGIN naming a file that is not there: the user asked for that plugin, so
 * it is broken, not a machine without a GPU. */
static void test_forced_missing(void **state)
{
    char path[4200];
    (void)state;

    snprintf(path, sizeof path, "%s/tests/broken/no-such-plugin.so", build_dir);
    assert_int_equal(run_child(NULL, path, NULL, NULL), 0);
    expect_broken(path, "No such file or directory", "CHORUS_CUDA_PLUGIN names it");
}

/* The fake plugin: a device (READY), no device (ABSENT), and an init that fails for a bad
 * setting (BROKEN, with the plugin's own message). */
static void test_fake_plugin(void **state)
{
    char path[4200];
    struct stat st;
    (void)state;

    snprintf(path, sizeof path, "%s/lib/libchorus-cuda-fake.so", build_dir);
    if (stat(path, &st) != 0) fail_msg("%s is not built (make all builds it)", path);
    assert_int_equal(run_child(NULL, path, NULL, NULL), 0);
    expect("state=0\n");
    expect("gate=0\n");
    expect("desc=fake plugin: ");
    assert_int_equal(run_child(NULL, path, NULL, "CHORUS_FAKE_GPU_DEVICES=0"), 0);
    expect_absent("fake plugin: fake GPU (host memory, for tests): 0 device(s)");
    assert_int_equal(run_child(NULL, path, NULL, "CHORUS_FAKE_GPU_DEVICES=many"), 0);
    expect_broken("the fake plugin failed to start: ", "CHORUS_FAKE_GPU_DEVICES=many", NULL);
}

static void test_none(void **state)
{
    (void)state;
    assert_int_equal(run_child(NULL, "none", NULL, NULL), 0);
    expect_absent("(CHORUS_CUDA_PLUGIN=none)");
}

/* Copies the file at from to to (mode 755). */
static void copy_file(const char *from, const char *to)
{
    char buf[65536];
    ssize_t n;
    int in = open(from, O_RDONLY), outfd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);

    assert_true(in >= 0 && outfd >= 0);
    while ((n = read(in, buf, sizeof buf)) > 0) assert_int_equal(write(outfd, buf, (size_t)n), n);
    close(in);
    close(outfd);
}

/* The default lookup (no CHORUS_CUDA_PLUGIN): from a copy of this binary in a directory of
 * its own, with nothing there it is absent; a broken file beside it, in ../lib from it or
 * on LD_LIBRARY_PATH is broken; a good one on LD_LIBRARY_PATH loads. */
static void test_default_lookup(void **state)
{
    char *dir = tmp_dir, made[] = "/tmp/chorus-gpu-loader-XXXXXX";
    char exe[256], sub[256], plugin[256], notelf[4200], nosym[4200], fake[4200];
    void *h;
    (void)state;

    broken_path(notelf, sizeof notelf, "notelf");
    broken_path(nosym, sizeof nosym, "nosym");
    snprintf(fake, sizeof fake, "%s/lib/libchorus-cuda-fake.so", build_dir);
    assert_non_null(mkdtemp(made));
    snprintf(tmp_dir, sizeof tmp_dir, "%s", made);
    snprintf(sub, sizeof sub, "%s/bin", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/lib", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/ld", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(exe, sizeof exe, "%s/bin/test_gpu_loader", dir);
    copy_file(self_path, exe);

    /* Nothing anywhere: absent, unless this machine has one on the loader's path. */
    h = dlopen("libchorus-cuda.so", RTLD_LAZY | RTLD_LOCAL);
    if (h != NULL) {
        dlclose(h);
        printf("# a libchorus-cuda.so is on the loader's path here: the no-file case is not "
               "checked\n");
    } else {
        assert_int_equal(run_child(exe, NULL, NULL, NULL), 0);
        expect_absent("no CUDA plugin: libchorus-cuda.so is neither in ");
    }

    /* A file that will not load beside the binary. */
    snprintf(plugin, sizeof plugin, "%s/bin/libchorus-cuda.so", dir);
    copy_file(notelf, plugin);
    assert_int_equal(run_child(exe, NULL, NULL, NULL), 0);
    expect_broken(plugin, "dlopen: ", NULL);
    unlink(plugin);

    /* In ../lib from the binary. */
    snprintf(plugin, sizeof plugin, "%s/lib/libchorus-cuda.so", dir);
    copy_file(notelf, plugin);
    assert_int_equal(run_child(exe, NULL, NULL, NULL), 0);
    expect_broken("/bin/../lib/libchorus-cuda.so", "dlopen: ", NULL);
    unlink(plugin);

    /* On the loader's path: one that will not load, one without the entry, a good one. */
    snprintf(sub, sizeof sub, "%s/ld", dir);
    snprintf(plugin, sizeof plugin, "%s/ld/libchorus-cuda.so", dir);
    copy_file(notelf, plugin);
    assert_int_equal(run_child(exe, NULL, sub, NULL), 0);
    expect_broken("broken CUDA plugin libchorus-cuda.so: dlopen: ", NULL, NULL);
    copy_file(nosym, plugin);
    assert_int_equal(run_child(exe, NULL, sub, NULL), 0);
    expect_broken("broken CUDA plugin libchorus-cuda.so: no entry chorus_gpu_plugin", NULL,
                  NULL);
    copy_file(fake, plugin);
    assert_int_equal(run_child(exe, NULL, sub, NULL), 0);
    expect("state=0\n");
    expect("gate=0\n");
}

/* Removes test_default_lookup's directory, whether the case passed or not. */
static int remove_tmp_dir(void **state)
{
    char cmd[128];
    (void)state;

    if (tmp_dir[0] == '\0') return 0;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The real plugin, found as the library finds it (../lib from this binary): here it must
 * load and either find a device or say there is no driver or no device; never broken. */
static void test_real_plugin(void **state)
{
    char path[4200];
    struct stat st;
    (void)state;

    snprintf(path, sizeof path, "%s/lib/libchorus-cuda.so", build_dir);
    if (stat(path, &st) != 0) {
        printf("skipped: %s not built (no nvcc)\n", path);
        skip();
    }
    assert_int_equal(run_child(NULL, NULL, NULL, NULL), 0);
    show_desc("real plugin");
    if (strstr(out, "state=0\n") != NULL) {
        expect("desc=cuda plugin: ");
        expect("gate=0\n");
        return;
    }
    expect_absent("cuda plugin: ");
    if (strstr(out, "(no driver") == NULL && strstr(out, "(no device") == NULL)
        fail_msg("the real plugin is absent for a reason that is neither no driver nor no "
                 "device:\n%s", out);
}

int main(int argc, char **argv)
{
    ssize_t n;
    char *slash;

    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main();
    n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    self_path[n > 0 ? n : 0] = '\0';
    /* $BUILD/tests/test_gpu_loader: $BUILD is two levels up. */
    snprintf(build_dir, sizeof build_dir, "%s", self_path);
    for (int i = 0; i < 2; i++)
        if ((slash = strrchr(build_dir, '/')) != NULL) *slash = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broken_plugins), cmocka_unit_test(test_forced_missing),
        cmocka_unit_test(test_fake_plugin),    cmocka_unit_test(test_none),
        cmocka_unit_test_teardown(test_default_lookup, remove_tmp_dir),
        cmocka_unit_test(test_real_plugin),
    };
    return cmocka_run_group_tests_name("gpu_loader", tests, NULL, NULL);
}
