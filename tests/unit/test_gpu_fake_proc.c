/*
 * Unit tests of the fake GPU plugin (tests/gpu/fake, libchorus-cuda-fake.so) that need
 * other processes: a child forked after initialisation is refused, IPC handles between
 * processes, the number of devices and dma-buf export as set by the environment, exit with
 * live streams, and segments left by a killed process. Each case re-executes this binary
 * with a mode (run_self in gpu_fake_util.h); the modes are at the end. The cases inside one
 * process are in test_gpu_fake.c.
 */
#include "unit/gpu_fake_util.h"

#include <dirent.h>
#include <sys/mman.h>

static void hex_encode(const void *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", ((const unsigned char *)p)[i]);
}

static void hex_decode(const char *s, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        ((unsigned char *)p)[i] = (unsigned char)v;
    }
}

/* Names in /dev/shm the fake made for process pid. */
static int shm_count(pid_t pid)
{
    char prefix[64];
    struct dirent *d;
    int n = 0;
    DIR *dir = opendir("/dev/shm");
    snprintf(prefix, sizeof prefix, "chorus-fakegpu-%d-", (int)pid);
    if (!dir) return 0;
    while ((d = readdir(dir)))
        if (strncmp(d->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(dir);
    return n;
}

/* ---- Processes ---- */

static void test_fork_after_init(void **state)
{
    int st, n = -1;
    const char *desc = NULL;
    pid_t pid;
    (void)state;
    /* Initialised here, not by whichever case ran before: this is the first one. */
    OK(G->init(&n, &desc));
    pid = fork();
    if (pid == 0) {
        void *d = NULL;
        chorus_status_t s = G->malloc_device(&d, 64);
        _exit(s == CHORUS_ERR_INVALID_ARGUMENT && strstr(G->last_error(), "forked") ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_ipc(void **state)
{
    enum { N = 65536 };
    unsigned char in[N], out[N], handle[CHORUS_GPU_IPC_HANDLE_BYTES];
    char hex[2 * CHORUS_GPU_IPC_HANDLE_BYTES + 1];
    void *d, *p = NULL;
    (void)state;
    fill(in, N, 11);
    OK(G->malloc_device(&d, N));
    OK(G->memcpy_async(d, in, N, NULL));
    OK(G->stream_synchronize(NULL));
    FAILS(G->ipc_get_handle((char *)d + 64, handle), CHORUS_ERR_INVALID_ARGUMENT, "base");
    FAILS(G->ipc_get_handle(in, handle), CHORUS_ERR_INVALID_ARGUMENT, "cudaMalloc");
    OK(G->ipc_get_handle(d, handle));
    FAILS(G->ipc_open(handle, &p), CHORUS_ERR_INVALID_ARGUMENT, "own IPC handle");
    hex_encode(handle, sizeof handle, hex);
    /* the child checks it sees in[], writes in[] + 1 (fill seed 12), closes */
    assert_int_equal(run_self("--ipc-child", hex, NULL, NULL), 0);
    OK(G->memcpy_async(out, d, N, NULL));
    OK(G->stream_synchronize(NULL));
    fill(in, N, 12);
    assert_memory_equal(out, in, N);
    assert_int_equal(shm_count(getpid()), 1);
    OK(G->free_device(d));
    assert_int_equal(shm_count(getpid()), 0);
    assert_int_equal(run_self("--ipc-gone", hex, NULL, NULL), 0);
    memset(handle, 0, sizeof handle);
    FAILS(G->ipc_open(handle, &p), CHORUS_ERR_INVALID_ARGUMENT, "not a handle");
}

static void test_zero_devices(void **state)
{
    (void)state;
    assert_int_equal(run_self("--zero-devices", "", "CHORUS_FAKE_GPU_DEVICES", "0"), 0);
    assert_int_equal(run_self("--bad-devices", "", "CHORUS_FAKE_GPU_DEVICES", "9"), 0);
}

static void test_exit_with_live_streams(void **state)
{
    (void)state;
    assert_int_equal(run_self("--exit-live", "", NULL, NULL), 0);
    assert_int_equal(shm_count(last_child), 0); /* the destructor unlinked its segment */
}

/* A process killed before freeing leaves its segments; the next process's first allocation
 * removes them. */
static void test_sweep_dead(void **state)
{
    pid_t leaker;
    (void)state;
    assert_int_equal(run_self("--leak", "", NULL, NULL), 0);
    leaker = last_child;
    assert_int_equal(shm_count(leaker), 1);
    assert_int_equal(run_self("--exit-live", "", NULL, NULL), 0);
    assert_int_equal(shm_count(leaker), 0);
}

/* CHORUS_FAKE_GPU_DMABUF: off by default, a real descriptor when on, a bad value refused. */
static void test_dmabuf(void **state)
{
    (void)state;
    assert_int_equal(run_self("--dmabuf", "0", "CHORUS_FAKE_GPU_DMABUF", ""), 0);
    assert_int_equal(run_self("--dmabuf", "0", "CHORUS_FAKE_GPU_DMABUF", "0"), 0);
    assert_int_equal(run_self("--dmabuf", "1", "CHORUS_FAKE_GPU_DMABUF", "1"), 0);
    assert_int_equal(run_self("--dmabuf", "2", "CHORUS_FAKE_GPU_DMABUF", "2"), 0);
}

/* ---- Child modes (a fresh process each) ---- */

#define CHILD_CHECK(cond)                                                                \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "child %s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond,  \
                    G ? G->last_error() : "no plugin");                                  \
            _exit(1);                                                                    \
        }                                                                                \
    } while (0)

static int child_ipc(const char *hex, int gone)
{
    enum { N = 65536 };
    unsigned char handle[CHORUS_GPU_IPC_HANDLE_BYTES], buf[N], want[N];
    void *p, *p2;
    int kind = -1, dev = -1;
    hex_decode(hex, handle, sizeof handle);
    if (gone) {
        CHILD_CHECK(G->ipc_open(handle, &p) == CHORUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(strstr(G->last_error(), "freed by its owner") != NULL);
        return 0;
    }
    CHILD_CHECK(G->ipc_open(handle, &p) == CHORUS_SUCCESS);
    CHILD_CHECK(G->pointer_kind(p, &kind, &dev) == CHORUS_SUCCESS && kind == 1);
    CHILD_CHECK(G->ipc_open(handle, &p2) == CHORUS_SUCCESS && p2 == p); /* counted */
    CHILD_CHECK(G->memcpy_async(buf, p, N, NULL) == CHORUS_SUCCESS);
    CHILD_CHECK(G->stream_synchronize(NULL) == CHORUS_SUCCESS);
    fill(want, N, 11);
    CHILD_CHECK(memcmp(buf, want, N) == 0);
    CHILD_CHECK(G->memcpy_async(p, buf, N + 1, NULL) == CHORUS_ERR_INVALID_ARGUMENT);
    fill(buf, N, 12);
    CHILD_CHECK(G->memcpy_async(p, buf, N, NULL) == CHORUS_SUCCESS);
    CHILD_CHECK(G->stream_synchronize(NULL) == CHORUS_SUCCESS);
    CHILD_CHECK(G->free_device(p) == CHORUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(G->ipc_close(p) == CHORUS_SUCCESS);
    CHILD_CHECK(G->ipc_close(p) == CHORUS_SUCCESS);
    CHILD_CHECK(G->ipc_close(p) == CHORUS_ERR_INVALID_ARGUMENT);
    return 0;
}

/* dmabuf_export in a fresh process: mode 0 CHORUS_FAKE_GPU_DMABUF unset (UNSUPPORTED, as a
 * driver without dma-buf), 1 set (a descriptor whose bytes at the offset are the device
 * bytes, and that sees later device writes), 2 a bad value (init fails, naming it). */
static int child_dmabuf(int mode)
{
    enum { N = 3 * 4096 + 100, OFF = 4096 + 36, LEN = 5000 };
    unsigned char in[N], want[N];
    const unsigned char *m;
    uint64_t off = 0;
    int n = -1, fd = -1;
    const char *desc = NULL;
    void *d, *h;

    if (mode == 2) {
        CHILD_CHECK(G->init(&n, &desc) == CHORUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(strstr(G->last_error(), "CHORUS_FAKE_GPU_DMABUF=2") != NULL);
        return 0;
    }
    CHILD_CHECK(G->dmabuf_export != NULL);
    CHILD_CHECK(G->init(&n, &desc) == CHORUS_SUCCESS && n == 1);
    CHILD_CHECK(G->malloc_device(&d, N) == CHORUS_SUCCESS);
    if (mode == 0) {
        CHILD_CHECK(G->dmabuf_export(d, N, &fd, &off) == CHORUS_ERR_UNSUPPORTED);
        CHILD_CHECK(strstr(G->last_error(), "dma-buf") != NULL && fd == -1);
        return 0;
    }
    fill(in, N, 21);
    CHILD_CHECK(G->memcpy_async(d, in, N, NULL) == CHORUS_SUCCESS);
    CHILD_CHECK(G->stream_synchronize(NULL) == CHORUS_SUCCESS);
    CHILD_CHECK(G->dmabuf_export((char *)d + OFF, LEN, &fd, &off) == CHORUS_SUCCESS);
    CHILD_CHECK(fd >= 0 && off == OFF);
    m = mmap(NULL, OFF + LEN, PROT_READ, MAP_SHARED, fd, 0);
    CHILD_CHECK(m != MAP_FAILED);
    CHILD_CHECK(memcmp(m + off, in + OFF, LEN) == 0);
    /* The same memory, not a copy: a later device write shows through the descriptor. */
    fill(want, N, 22);
    CHILD_CHECK(G->memcpy_async(d, want, N, NULL) == CHORUS_SUCCESS);
    CHILD_CHECK(G->stream_synchronize(NULL) == CHORUS_SUCCESS);
    CHILD_CHECK(memcmp(m + off, want + OFF, LEN) == 0);
    munmap((void *)(uintptr_t)m, OFF + LEN);
    close(fd);
    fd = -1;
    /* Misuse: past the allocation's end, host memory, pinned memory, 0 bytes. */
    CHILD_CHECK(G->dmabuf_export((char *)d + OFF, N, &fd, &off) == CHORUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(strstr(G->last_error(), "past the end") != NULL);
    CHILD_CHECK(G->dmabuf_export(in, N, &fd, &off) == CHORUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(G->malloc_host(&h, 64) == CHORUS_SUCCESS);
    CHILD_CHECK(G->dmabuf_export(h, 64, &fd, &off) == CHORUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(G->dmabuf_export(d, 0, &fd, &off) == CHORUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(fd == -1);
    CHILD_CHECK(G->free_host(h) == CHORUS_SUCCESS);
    CHILD_CHECK(G->free_device(d) == CHORUS_SUCCESS);
    /* A freed allocation exports nothing. */
    CHILD_CHECK(G->dmabuf_export(d, 64, &fd, &off) == CHORUS_ERR_INVALID_ARGUMENT);
    return 0;
}

static int child_devices(int bad)
{
    int n = -1;
    const char *desc = NULL;
    void *d;
    if (bad) {
        CHILD_CHECK(G->init(&n, &desc) == CHORUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(strstr(G->last_error(), "CHORUS_FAKE_GPU_DEVICES=9") != NULL);
        return 0;
    }
    CHILD_CHECK(G->init(&n, &desc) == CHORUS_SUCCESS && n == 0);
    CHILD_CHECK(strcmp(desc, "fake GPU (host memory, for tests): 0 device(s)") == 0);
    CHILD_CHECK(G->malloc_device(&d, 64) != CHORUS_SUCCESS);
    CHILD_CHECK(G->set_device(0) == CHORUS_ERR_INVALID_ARGUMENT);
    return 0;
}

/* Exits (through exit(), so destructors run) with a stream held forever by a flag, another
 * destroyed with work queued, and live allocations: no hang, no crash, no shm left. */
static int child_exit_live(void)
{
    void *s1, *s2, *d;
    volatile uint64_t *flag;
    static unsigned char buf[1 << 20], buf2[1 << 20];
    alarm(20);
    CHILD_CHECK(G->stream_create(&s1) == CHORUS_SUCCESS);
    CHILD_CHECK(G->stream_create(&s2) == CHORUS_SUCCESS);
    CHILD_CHECK(G->malloc_device(&d, sizeof buf) == CHORUS_SUCCESS);
    CHILD_CHECK(G->malloc_host((void **)&flag, 8) == CHORUS_SUCCESS);
    raise_flag(flag, 0);
    CHILD_CHECK(G->stream_wait_flag(s1, flag, 1) == CHORUS_SUCCESS);
    CHILD_CHECK(G->memcpy_async(d, buf, sizeof buf, s1) == CHORUS_SUCCESS);
    for (int i = 0; i < 50; i++)
        CHILD_CHECK(G->memcpy_async(buf, d, sizeof buf, s2) == CHORUS_SUCCESS);
    CHILD_CHECK(G->stream_destroy(s2) == CHORUS_SUCCESS);
    CHILD_CHECK(G->memcpy_async(buf2, d, sizeof buf2, NULL) == CHORUS_SUCCESS);
    CHILD_CHECK(shm_count(getpid()) == 1);
    exit(0);
}

int main(int argc, char **argv)
{
    int rc;
    if (!gfu_open("gpu_fake_proc", &rc)) return rc;
    if (argc >= 2 && strcmp(argv[1], "--ipc-child") == 0) return child_ipc(argv[2], 0);
    if (argc >= 2 && strcmp(argv[1], "--ipc-gone") == 0) return child_ipc(argv[2], 1);
    if (argc >= 2 && strcmp(argv[1], "--zero-devices") == 0) return child_devices(0);
    if (argc >= 2 && strcmp(argv[1], "--bad-devices") == 0) return child_devices(1);
    if (argc >= 3 && strcmp(argv[1], "--dmabuf") == 0) return child_dmabuf(atoi(argv[2]));
    if (argc >= 2 && strcmp(argv[1], "--exit-live") == 0) return child_exit_live();
    if (argc >= 2 && strcmp(argv[1], "--leak") == 0) { /* dies without its destructor */
        void *d;
        CHILD_CHECK(G->malloc_device(&d, 100) == CHORUS_SUCCESS);
        _exit(0);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_after_init),
        cmocka_unit_test(test_ipc),
        cmocka_unit_test(test_zero_devices),
        cmocka_unit_test(test_exit_with_live_streams),
        cmocka_unit_test(test_sweep_dead),
        cmocka_unit_test(test_dmabuf),
    };
    return cmocka_run_group_tests_name("gpu_fake_proc", tests, NULL, NULL);
}
