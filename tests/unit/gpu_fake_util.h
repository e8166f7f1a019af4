/*
 * Shared by the unit tests of the fake GPU plugin (tests/gpu/fake, libchorus-cuda-fake.so):
 * tests/unit/test_gpu_fake.c (the table, memory, streams and events, kernels, threads) and
 * tests/unit/test_gpu_fake_proc.c (fork, IPC between processes, the environment, exit).
 *
 * The plugin is dlopened from $BUILD/lib (BUILD defaults to "build"); when it is not built
 * the test says "skipped: <path> not built" (a cmocka skip). Some cases need a fresh
 * process (environment read once at start, IPC, exit with live streams): a binary
 * re-executes itself with a mode argument (run_self), never just forks, since CUDA (and the
 * fake) cannot be used in a child forked after initialisation.
 */
#ifndef CHORUS_TESTS_GPU_FAKE_UTIL_H
#define CHORUS_TESTS_GPU_FAKE_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gpu/gpu.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Everything here is static in a header: a test file that uses only part of it must not
 * trip -Wunused-function, which C compilers do not raise for unused static inline
 * functions. */
#define GFU_FN static inline

static char plugin_path[4096];
static char self_path[4096]; /* this binary (read once: under valgrind /proc/self/exe is
                              * valgrind itself, but readlink is answered for the client) */
static const chorus_gpu_ops_t *G;

/* ---- Helpers ---- */

#define OK(expr) check_ok((expr), #expr)

GFU_FN void check_ok(chorus_status_t status, const char *expr)
{
    if (status != CHORUS_SUCCESS) fail_msg("%s: status %d: %s", expr, status, G->last_error());
}

/* expr fails with status, and the message contains want. */
#define FAILS(expr, st, want) check_fails((expr), (st), (want), #expr)

GFU_FN void check_fails(chorus_status_t status, chorus_status_t want_status, const char *want,
                        const char *expr)
{
    if (status != want_status)
        fail_msg("%s: status %d, want %d (%s)", expr, status, want_status, G->last_error());
    if (want && !strstr(G->last_error(), want))
        fail_msg("%s: message \"%s\" lacks \"%s\"", expr, G->last_error(), want);
}

GFU_FN const chorus_gpu_ops_t *load_plugin(void)
{
    void *h = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    chorus_gpu_plugin_fn fn;
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", plugin_path, dlerror());
        return NULL;
    }
    fn = (chorus_gpu_plugin_fn)dlsym(h, CHORUS_GPU_PLUGIN_SYMBOL);
    return fn ? fn(CHORUS_GPU_ABI_VERSION) : NULL;
}

/* Runs this binary again with a mode (and env NAME=VALUE when given); its exit status, or
 * 128 + the signal that killed it. last_child is its pid. */
static pid_t last_child;

GFU_FN int run_self(const char *mode, const char *arg, const char *env_name,
                    const char *env_val)
{
    int st;
    pid_t pid = fork();
    last_child = pid;
    if (pid == 0) {
        if (env_name) setenv(env_name, env_val, 1);
        execl(self_path, self_path, mode, arg, (char *)NULL);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The host raises a wait flag (a release store, as Chorus's proxy would). */
GFU_FN void raise_flag(volatile uint64_t *flag, uint64_t v)
{
    atomic_store_explicit((_Atomic uint64_t *)(uintptr_t)flag, v, memory_order_release);
}

GFU_FN void fill(void *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = (unsigned char)(i * 131u + seed);
}

GFU_FN void test_not_built(void **state)
{
    (void)state;
    printf("skipped: %s not built\n", plugin_path);
    skip();
}

/* The start of main(): finds this binary and the plugin, and loads the plugin into G.
 * Returns 1 when G is ready; otherwise 0 with *rc_p the exit status for main. A plugin not
 * built is a cmocka skip in group (exit 0, "[  SKIPPED ]"), which tests/run_tests.sh
 * reports as SKIP with the reason; it treats a bare exit 77 of a unit binary as a failure. */
GFU_FN int gfu_open(const char *group, int *rc_p)
{
    const char *build = getenv("BUILD");
    struct stat st;
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    self_path[n > 0 ? n : 0] = '\0';
    snprintf(plugin_path, sizeof plugin_path, "%s/lib/libchorus-cuda-fake.so",
             build && *build ? build : "build");
    if (stat(plugin_path, &st) != 0) {
        const struct CMUnitTest none[] = {cmocka_unit_test(test_not_built)};
        *rc_p = cmocka_run_group_tests_name(group, none, NULL, NULL);
        return 0;
    }
    G = load_plugin();
    if (!G) {
        fprintf(stderr, "%s: no chorus_gpu_plugin table\n", plugin_path);
        *rc_p = 1;
        return 0;
    }
    return 1;
}

#endif /* CHORUS_TESTS_GPU_FAKE_UTIL_H */
