/*
 * The path of device send/recv (lib/core/gpu_direct.c): chorus__gpu_p2p_path as a pure
 * function over every (peer transport caps x buffer kind x CHORUS_GPU_PATH), groups whose
 * peers differ, sends to self, the errors of a forced path; CHORUS_GPU_PATH's parsing; and
 * the device-memory calls the core hands the transports (chorus_tp_params_t.mem), on the
 * fake GPU plugin (skipped when it is not built).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/gpu_coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CAP_HOST CHORUS_TP_CAP_HOST_MEM
#define CAP_DEV (CHORUS_TP_CAP_HOST_MEM | CHORUS_TP_CAP_DEVICE_MEM)

static char plugin_path[4096];

/* The fake plugin's table; a cmocka skip when it is not built (main then sets
 * CHORUS_CUDA_PLUGIN=none), a failure with the loader's reason when it is there but does
 * not load. */
static const chorus_gpu_ops_t *fake_gpu_or_skip(void)
{
    const chorus_gpu_ops_t *g = chorus__gpu();

    if (g == NULL && chorus__gpu_state() == CHORUS_GPU_BROKEN)
        fail_msg("the fake GPU plugin is broken: %s", chorus__gpu_describe());
    if (g == NULL) {
        printf("skipped: no fake GPU plugin (%s)\n", chorus__gpu_describe());
        skip();
    }
    return g;
}

static chorus_p2p_op_t op(int is_send, int peer)
{
    chorus_p2p_op_t o;

    memset(&o, 0, sizeof o);
    o.is_send = is_send;
    o.peer = peer;
    o.addr = 0x1000u * (unsigned)(peer + 1);
    o.bytes = 64;
    return o;
}

/* The path for one op to peer 1 of 2 whose transport has caps. */
static chorus_status_t one(chorus_gpu_path_t setting, int is_device, uint32_t caps,
                           int is_send, chorus_gpu_path_t *path_p)
{
    chorus_gpu_peer_t peers[2] = {{0, NULL}, {caps, "ib"}};
    chorus_p2p_op_t o = op(is_send, 1);

    *path_p = (chorus_gpu_path_t)-1;
    return chorus__gpu_p2p_path(setting, is_device, 0, 2, peers, &o, 1, "send #3", path_p);
}

/* Every caps x kind x setting, for sends and receives alike. */
static void test_matrix(void **state)
{
    static const struct {
        chorus_gpu_path_t setting;
        int is_device;
        uint32_t caps;
        chorus_status_t status;
        chorus_gpu_path_t path;
    } rows[] = {
        /* host buffers: never a device path, whatever is set */
        {GPU_PATH_AUTO, 0, CAP_HOST, CHORUS_SUCCESS, GPU_PATH_HOST},
        {GPU_PATH_AUTO, 0, CAP_DEV, CHORUS_SUCCESS, GPU_PATH_HOST},
        {GPU_PATH_DIRECT, 0, CAP_HOST, CHORUS_SUCCESS, GPU_PATH_HOST},
        {GPU_PATH_DIRECT, 0, CAP_DEV, CHORUS_SUCCESS, GPU_PATH_HOST},
        {GPU_PATH_STAGING, 0, CAP_DEV, CHORUS_SUCCESS, GPU_PATH_HOST},
        {GPU_PATH_IPC, 0, CAP_HOST, CHORUS_SUCCESS, GPU_PATH_HOST},
        /* device buffers */
        {GPU_PATH_AUTO, 1, CAP_HOST, CHORUS_SUCCESS, GPU_PATH_STAGING},
        {GPU_PATH_AUTO, 1, 0, CHORUS_SUCCESS, GPU_PATH_STAGING},
        {GPU_PATH_AUTO, 1, CAP_DEV, CHORUS_SUCCESS, GPU_PATH_DIRECT},
        {GPU_PATH_AUTO, 1, CHORUS_TP_CAP_DEVICE_MEM, CHORUS_SUCCESS, GPU_PATH_DIRECT},
        {GPU_PATH_DIRECT, 1, CAP_DEV, CHORUS_SUCCESS, GPU_PATH_DIRECT},
        {GPU_PATH_DIRECT, 1, CAP_HOST, CHORUS_ERR_UNSUPPORTED, (chorus_gpu_path_t)-1},
        {GPU_PATH_DIRECT, 1, CAP_HOST | CHORUS_TP_CAP_PUT, CHORUS_ERR_UNSUPPORTED,
         (chorus_gpu_path_t)-1},
        {GPU_PATH_STAGING, 1, CAP_DEV, CHORUS_SUCCESS, GPU_PATH_STAGING},
        {GPU_PATH_STAGING, 1, CAP_HOST, CHORUS_SUCCESS, GPU_PATH_STAGING},
        {GPU_PATH_IPC, 1, CAP_DEV, CHORUS_SUCCESS, GPU_PATH_STAGING},
        {GPU_PATH_IPC, 1, CAP_HOST, CHORUS_SUCCESS, GPU_PATH_STAGING},
    };
    (void)state;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        for (int is_send = 0; is_send <= 1; is_send++) {
            chorus_gpu_path_t path;
            chorus_status_t st = one(rows[i].setting, rows[i].is_device, rows[i].caps, is_send,
                                     &path);
            if (st != rows[i].status || path != rows[i].path)
                fail_msg("row %zu (%s, %s, caps %#x, %s): status %d path %d, want %d %d (%s)", i,
                         chorus__gpu_path_name(rows[i].setting),
                         rows[i].is_device ? "device" : "host", (unsigned)rows[i].caps,
                         is_send ? "send" : "recv", st, (int)path, rows[i].status,
                         (int)rows[i].path, chorus_last_error());
        }
    }
}

/* A forced direct path that a peer cannot take names the rank, the peer, its transport and
 * the op. */
static void test_forced_error_message(void **state)
{
    chorus_gpu_peer_t peers[4] = {{CAP_DEV, "ib"}, {CAP_DEV, "ib"}, {0, NULL}, {CAP_HOST, "tcp"}};
    chorus_p2p_op_t ops[3] = {op(1, 0), op(0, 1), op(1, 3)};
    chorus_gpu_path_t path = GPU_PATH_AUTO;
    (void)state;
    assert_int_equal(chorus__gpu_p2p_path(GPU_PATH_DIRECT, 1, 2, 4, peers, ops, 3, "group_end",
                                          &path),
                     CHORUS_ERR_UNSUPPORTED);
    assert_int_equal(path, GPU_PATH_AUTO); /* untouched on error */
    assert_non_null(strstr(chorus_last_error(), "rank 2: group_end: CHORUS_GPU_PATH=direct, "
                                                "but peer 3 is reached through tcp"));
}

/* A group takes one path: direct only when every peer can. */
static void test_groups(void **state)
{
    chorus_gpu_peer_t peers[4] = {{CAP_DEV, "ib"}, {0, NULL}, {CAP_DEV, "ib"}, {CAP_HOST, "shm"}};
    chorus_p2p_op_t all_dev[4] = {op(1, 0), op(0, 0), op(1, 2), op(0, 2)};
    chorus_p2p_op_t mixed[3] = {op(1, 0), op(0, 3), op(1, 2)};
    chorus_p2p_op_t with_self[4] = {op(1, 1), op(0, 1), op(1, 2), op(0, 0)};
    chorus_p2p_op_t only_self[2] = {op(1, 1), op(0, 1)};
    chorus_gpu_path_t path;
    (void)state;
    assert_int_equal(chorus__gpu_p2p_path(GPU_PATH_AUTO, 1, 1, 4, peers, all_dev, 4, "g", &path),
                     CHORUS_SUCCESS);
    assert_int_equal(path, GPU_PATH_DIRECT);
    assert_int_equal(chorus__gpu_p2p_path(GPU_PATH_AUTO, 1, 1, 4, peers, mixed, 3, "g", &path),
                     CHORUS_SUCCESS);
    assert_int_equal(path, GPU_PATH_STAGING);
    /* Self is no transport: its pairs are device copies on the direct path. */
    assert_int_equal(
        chorus__gpu_p2p_path(GPU_PATH_AUTO, 1, 1, 4, peers, with_self, 4, "g", &path),
        CHORUS_SUCCESS);
    assert_int_equal(path, GPU_PATH_DIRECT);
    assert_int_equal(
        chorus__gpu_p2p_path(GPU_PATH_DIRECT, 1, 1, 4, peers, only_self, 2, "g", &path),
        CHORUS_SUCCESS);
    assert_int_equal(path, GPU_PATH_DIRECT);
    /* The order of the ops does not change the answer. */
    chorus_p2p_op_t mixed_rev[3] = {mixed[2], mixed[1], mixed[0]};
    assert_int_equal(
        chorus__gpu_p2p_path(GPU_PATH_AUTO, 1, 1, 4, peers, mixed_rev, 3, "g", &path),
        CHORUS_SUCCESS);
    assert_int_equal(path, GPU_PATH_STAGING);
}

static void test_bad_peer(void **state)
{
    chorus_gpu_peer_t peers[2] = {{0, NULL}, {CAP_DEV, "ib"}};
    chorus_p2p_op_t o = op(1, 2);
    chorus_gpu_path_t path = GPU_PATH_AUTO;
    (void)state;
    assert_int_equal(chorus__gpu_p2p_path(GPU_PATH_AUTO, 1, 0, 2, peers, &o, 1, "send", &path),
                     CHORUS_ERR_INVALID_ARGUMENT);
    o.peer = -1;
    assert_int_equal(chorus__gpu_p2p_path(GPU_PATH_AUTO, 0, 0, 2, peers, &o, 1, "send", &path),
                     CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(path, GPU_PATH_AUTO);
}

static void test_parse(void **state)
{
    static const char *const names[] = {"auto", "ipc", "staging", "direct"};
    chorus_gpu_path_t path = GPU_PATH_HOST;
    (void)state;
    assert_int_equal(chorus__gpu_path_parse(NULL, 0, &path), CHORUS_SUCCESS);
    assert_int_equal(path, GPU_PATH_AUTO);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(chorus__gpu_path_parse(names[i], 0, &path), CHORUS_SUCCESS);
        assert_int_equal(path, (chorus_gpu_path_t)i);
        assert_string_equal(chorus__gpu_path_name(path), names[i]);
    }
    assert_string_equal(chorus__gpu_path_name(GPU_PATH_HOST), "host");
    path = GPU_PATH_IPC;
    assert_int_equal(chorus__gpu_path_parse("host", 5, &path), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__gpu_path_parse("Direct", 5, &path), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "rank 5: CHORUS_GPU_PATH=Direct is not auto, "
                                                "ipc, staging or direct"));
    assert_int_equal(path, GPU_PATH_IPC);
}

/* The calls of chorus_tp_params_t.mem over the fake plugin with dma-buf on: pointer kinds,
 * and a descriptor that maps to the device bytes. NULL for a comm without a GPU. */
static void test_tp_mem(void **state)
{
    enum { N = 10000, OFF = 4200 };
    struct chorus_comm comm;
    const chorus_tp_mem_ops_t *mem;
    const chorus_gpu_ops_t *g;
    unsigned char in[N], host[16];
    const unsigned char *m;
    uint64_t off = 0;
    int fd = -1;
    void *d;
    (void)state;
    memset(&comm, 0, sizeof comm);
    assert_null(chorus__gpu_tp_mem(&comm));
    g = fake_gpu_or_skip();
    comm.gpu_ops = g;
    mem = chorus__gpu_tp_mem(&comm);
    assert_non_null(mem);
    assert_ptr_equal(mem, chorus__gpu_tp_mem(&comm)); /* static: outlives every comm */
    for (int i = 0; i < N; i++) in[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(g->malloc_device(&d, N), CHORUS_SUCCESS);
    assert_int_equal(g->memcpy_async(d, in, N, NULL), CHORUS_SUCCESS);
    assert_int_equal(g->stream_synchronize(NULL), CHORUS_SUCCESS);
    assert_int_equal(mem->is_device(d), 1);
    assert_int_equal(mem->is_device((char *)d + OFF), 1);
    assert_int_equal(mem->is_device(host), 0);
    assert_int_equal(mem->is_device(NULL), 0);
    assert_int_equal(mem->dmabuf((char *)d + OFF, 100, &fd, &off), CHORUS_SUCCESS);
    assert_true(fd >= 0);
    assert_int_equal(off, OFF);
    m = mmap(NULL, N, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    assert_memory_equal(m + off, in + OFF, 100);
    munmap((void *)(uintptr_t)m, N);
    close(fd);
    /* Host memory has no dma-buf: the error names the range and the plugin's reason. */
    assert_int_equal(mem->dmabuf(host, sizeof host, &fd, &off), CHORUS_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(chorus_last_error(), "dma-buf of 16 bytes"));
    assert_non_null(strstr(chorus_last_error(), "not device memory"));
    assert_int_equal(g->free_device(d), CHORUS_SUCCESS);
}

/* The direct path end to end on a one-rank comm: a device group of sends to self and
 * receives from self is direct (no transport is involved), so the proxy runs it as device
 * copies after the stream's earlier work, and releases the stream after them. The fake's
 * slowed copies make a missing wait read stale bytes. */
static void test_direct_self(void **state)
{
    enum { N = 70001 };
    const chorus_gpu_ops_t *g = fake_gpu_or_skip();
    static unsigned char in[2][N], out[2][N];
    chorus_unique_id_t id;
    chorus_comm_t comm;
    void *stream, *d;
    (void)state;
    assert_int_equal(chorus_get_unique_id(&id), CHORUS_SUCCESS);
    assert_int_equal(chorus_comm_init(&comm, 1, &id, 0), CHORUS_SUCCESS);
    assert_int_equal(g->stream_create(&stream), CHORUS_SUCCESS);
    assert_int_equal(g->malloc_device(&d, 4 * N), CHORUS_SUCCESS);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) in[k][i] = (unsigned char)(i * 13 + k * 101 + 1);
    /* Queued on the stream before the group: the group must wait for them. */
    assert_int_equal(g->memcpy_async(d, in[0], N, stream), CHORUS_SUCCESS);
    assert_int_equal(g->memcpy_async((char *)d + N, in[1], N, stream), CHORUS_SUCCESS);
    assert_int_equal(chorus_group_start(), CHORUS_SUCCESS);
    assert_int_equal(chorus_recv((char *)d + 3 * N, N, CHORUS_UINT8, 0, comm, stream),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus_send(d, N, CHORUS_UINT8, 0, comm, stream), CHORUS_SUCCESS);
    assert_int_equal(chorus_send((char *)d + N, N, CHORUS_UINT8, 0, comm, stream),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus_recv((char *)d + 2 * N, N, CHORUS_UINT8, 0, comm, stream),
                     CHORUS_SUCCESS);
    assert_int_equal(chorus_group_end(), CHORUS_SUCCESS);
    /* Queued after: must see the group's result. The k-th send feeds the k-th receive. */
    assert_int_equal(g->memcpy_async(out[0], (char *)d + 3 * N, N, stream), CHORUS_SUCCESS);
    assert_int_equal(g->memcpy_async(out[1], (char *)d + 2 * N, N, stream), CHORUS_SUCCESS);
    assert_int_equal(g->stream_synchronize(stream), CHORUS_SUCCESS);
    assert_memory_equal(out[0], in[0], N);
    assert_memory_equal(out[1], in[1], N);
    /* An unmatched send to self fails the group, with the reason, as on the host path. */
    assert_int_equal(chorus_group_start(), CHORUS_SUCCESS);
    assert_int_equal(chorus_send(d, N, CHORUS_UINT8, 0, comm, stream), CHORUS_SUCCESS);
    assert_int_equal(chorus_group_end(), CHORUS_SUCCESS); /* queued: the proxy finds it */
    assert_int_equal(g->stream_synchronize(stream), CHORUS_SUCCESS);
    chorus_status_t async = CHORUS_SUCCESS;
    assert_int_equal(chorus_comm_get_async_error(comm, &async), CHORUS_SUCCESS);
    assert_int_equal(async, CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(g->free_device(d), CHORUS_SUCCESS);
    assert_int_equal(g->stream_destroy(stream), CHORUS_SUCCESS);
    assert_int_equal(chorus_comm_destroy(comm), CHORUS_SUCCESS);
}

int main(void)
{
    const char *build = getenv("BUILD");
    struct stat st;

    /* The fake plugin with dma-buf on, set before the library reads its configuration. */
    snprintf(plugin_path, sizeof plugin_path, "%s/lib/libchorus-cuda-fake.so",
             build && *build ? build : "build");
    if (stat(plugin_path, &st) == 0) {
        char abs[4096];
        if (realpath(plugin_path, abs) != NULL) setenv("CHORUS_CUDA_PLUGIN", abs, 1);
        setenv("CHORUS_FAKE_GPU_DMABUF", "1", 1);
        setenv("CHORUS_FAKE_GPU_DELAY_US", "200", 1);
    } else {
        setenv("CHORUS_CUDA_PLUGIN", "none", 1);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix),
        cmocka_unit_test(test_forced_error_message),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_bad_peer),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_tp_mem),
        cmocka_unit_test(test_direct_self),
    };
    return cmocka_run_group_tests_name("gpu_path", tests, NULL, NULL);
}
