/*
 * The collective matrix on CUDA device buffers: tests/mp/coll_matrix.c (every collective x
 * dtype x op x in-place x roots x counts, exact for integers, bounded for floats, identical
 * bytes on every rank), with each of its calls on its test buffers run on device memory
 * on a stream of this program's:
 *
 *   queue host->device copies of the send buffer and of the receive buffer (poison, or the
 *   input in place) on the stream; call the collective with the device buffers and the
 *   stream; queue device->host copies back; synchronize the stream; then the matrix checks.
 *
 * Nothing is synchronized between the fill and the call, so a collective that does not wait
 * for earlier work on its stream reads the previous case's data (CHORUS_FAKE_GPU_DELAY_US
 * makes the fake plugin's copies slow, which makes that certain). Calls on other memory (the
 * matrix's hash and result exchanges, the barrier's directory name) stay host calls, so the
 * cross-rank comparison does not depend on the path under test. Send and receive, in
 * groups or not, run on device mirrors of the matrix's buffers (gt_p2p).
 *
 * Before the matrix: mixed host/device buffers are rejected, and a chain of 40 collectives
 * and copies queued without synchronizing in between must come out in order; groups that
 * mix host and device buffers or two streams are rejected; a ring of device groups of
 * several sizes (above the staging chunk too) delivers every message; a device send or a
 * host send outside a group meets a device recv inside one. With --mismatch
 * the program only checks that ranks calling different device collectives get
 * CHORUS_ERR_MISMATCH (as the comm's async error and from the next call); with
 * --host-vs-device, that an allreduce on host memory against the same on device memory
 * does.
 *
 * With CHORUS_TEST_DEV_WIN=all (or odd), the device buffers lie in registered device windows
 * (chorus_mem_alloc_device) on every rank (or the odd ones), and with all the run fails if
 * no call read its peers' windows.
 *
 *   chorusrun -n 4 -- gpu_coll_matrix [--mismatch|--host-vs-device] [mp_coll_matrix options]
 *
 * Prints "skipped: no CUDA device" and exits 77 when there is no GPU; exits 1 with the
 * loader's reason when a plugin is there but broken (gpu_gate.h).
 */
#include "mp/mp_common.h"

#include "gpu/gpu.h"
#include "gpu_gate.h"

static const chorus_gpu_ops_t *G;
static void *g_stream;
static int g_group_depth;

/* ---- Which buffers are the matrix's test buffers ----
 * The matrix allocates them through COLL_MATRIX_BUF_ALLOC (its gbuf_alloc); remembering
 * those allocations tells its test calls from its bookkeeping calls. */

#define GT_MAX_LIVE 64
static struct {
    unsigned char *p;
    size_t bytes;
} gt_live[GT_MAX_LIVE];

static void *gt_malloc(size_t bytes)
{
    unsigned char *p = malloc(bytes);
    if (p == NULL) return p;
    for (int i = 0; i < GT_MAX_LIVE; i++) {
        if (gt_live[i].p == NULL) {
            gt_live[i].p = p;
            gt_live[i].bytes = bytes;
            return p;
        }
    }
    fprintf(stderr, "gpu_coll_matrix: more than %d live test buffers\n", GT_MAX_LIVE);
    exit(1);
}

static void gt_free(void *p)
{
    for (int i = 0; i < GT_MAX_LIVE; i++)
        if (p != NULL && gt_live[i].p == p) gt_live[i].p = NULL;
    free(p);
}

static int gt_is_test_buf(const void *q)
{
    for (int i = 0; i < GT_MAX_LIVE; i++)
        if (q != NULL && gt_live[i].p != NULL && (const unsigned char *)q >= gt_live[i].p &&
            (const unsigned char *)q < gt_live[i].p + gt_live[i].bytes)
            return 1;
    return 0;
}

/* ---- Device memory ---- */

static void gt_die(chorus_status_t st, const char *what)
{
    if (st == CHORUS_SUCCESS) return;
    printf("FAIL gpu: %s: %s: %s\n", what, chorus_status_string(st), G->last_error());
    fflush(stdout);
    exit(1);
}

/* Two device buffers, grown as needed. */
static void *g_dev[2];
static size_t g_dev_bytes[2];

/* CHORUS_TEST_DEV_WIN=all|odd: the device buffers of every rank (or of the odd ranks, so
 * that calls mix registered and plain buffers) lie in two registered device windows
 * (chorus_mem_alloc_device), made at the first device call; sizes past them take plain
 * device memory. g_win_calls: chorus_mem_stats' count after the last call. */
#define GT_WIN_BYTES ((size_t)16 << 20)
static int g_win_mode; /* 0 none, 1 all, 2 odd */
static void *g_win[2];
static uint64_t g_win_calls;

static void gt_win_setup(chorus_comm_t comm, int rank)
{
    static int done;
    if (done || g_win_mode == 0) return;
    done = 1;
    for (int i = 0; i < 2; i++)
        gt_die(chorus_mem_alloc_device(comm, GT_WIN_BYTES, &g_win[i]), "mem_alloc_device");
    if (g_win_mode == 2 && rank % 2 == 0) g_win[0] = g_win[1] = NULL;
}

static void *gt_dev(int i, size_t bytes)
{
    if (bytes == 0) bytes = 1;
    if (g_win[i] != NULL && bytes <= GT_WIN_BYTES) return g_win[i];
    if (bytes > g_dev_bytes[i]) {
        if (g_dev[i] != NULL) gt_die(G->free_device(g_dev[i]), "free_device");
        gt_die(G->malloc_device(&g_dev[i], bytes), "malloc_device");
        g_dev_bytes[i] = bytes;
    }
    return g_dev[i];
}

/* ---- Collectives on device memory ---- */

enum { GT_AR, GT_AG, GT_RS, GT_BC, GT_RD, GT_A2A };

static chorus_status_t gt_real(int coll, const void *s, void *r, size_t count, chorus_dtype_t dt,
                               chorus_op_t op, int root, chorus_comm_t comm, void *stream)
{
    switch (coll) {
    case GT_AR: return chorus_allreduce(s, r, count, dt, op, comm, stream);
    case GT_AG: return chorus_allgather(s, r, count, dt, comm, stream);
    case GT_RS: return chorus_reduce_scatter(s, r, count, dt, op, comm, stream);
    case GT_BC: return chorus_broadcast(s, r, count, dt, root, comm, stream);
    case GT_RD: return chorus_reduce(s, r, count, dt, op, root, comm, stream);
    default: return chorus_alltoall(s, r, count, dt, comm, stream);
    }
}

/* The matrix's call on host buffers s and r, run on device copies of them. */
static chorus_status_t gt_coll(int coll, const void *s, void *r, size_t count, chorus_dtype_t dt,
                               chorus_op_t op, int root, chorus_comm_t comm)
{
    int rank, n;
    chorus_comm_rank(comm, &rank);
    chorus_comm_size(comm, &n);
    if (!gt_is_test_buf(s) && !gt_is_test_buf(r))
        return gt_real(coll, s, r, count, dt, op, root, comm, NULL);
    gt_win_setup(comm, rank);
    size_t bytes = count * mp_dtype_size(dt), total = bytes * (size_t)n;
    /* Count 0 on device buffers: accepted, counted, nothing queued. */
    if (count == 0)
        return gt_real(coll, s != NULL ? gt_dev(1, 1) : NULL, r != NULL ? gt_dev(0, 1) : NULL,
                       0, dt, op, root, comm, g_stream);
    size_t sb = coll == GT_RS || coll == GT_A2A ? total : bytes;
    size_t rb = coll == GT_AG || coll == GT_A2A ? total : bytes;
    if (coll == GT_BC && rank != root) sb = 0;
    if (coll == GT_RD && rank != root) rb = 0;
    if (s == NULL) sb = 0;
    if (r == NULL) rb = 0;
    const char *hs = s;
    char *hr = r, *ds = NULL, *dr = NULL;
    int overlap = sb > 0 && rb > 0 && hs < hr + rb && hr < hs + sb;
    if (overlap) {
        /* In-place layouts map to the same layout in device memory: one region. */
        const char *lo = hs < hr ? hs : hr, *hi = hs + sb > hr + rb ? hs + sb : hr + rb;
        char *d = gt_dev(0, (size_t)(hi - lo));
        ds = d + (hs - lo);
        dr = d + (hr - lo);
        gt_die(G->memcpy_async(d, lo, (size_t)(hi - lo), g_stream), "fill buffers");
    } else {
        if (rb > 0) dr = gt_dev(0, rb);
        if (sb > 0) ds = gt_dev(1, sb);
        /* The receive buffer gets the matrix's poison, so a result never written shows. */
        if (rb > 0) gt_die(G->memcpy_async(dr, hr, rb, g_stream), "fill recvbuf");
        if (sb > 0) gt_die(G->memcpy_async(ds, hs, sb, g_stream), "fill sendbuf");
    }
    chorus_status_t st = gt_real(coll, sb > 0 ? ds : NULL, rb > 0 ? dr : NULL, count, dt, op,
                                 root, comm, g_stream);
    if (g_win_mode != 0) gt_die(chorus_mem_stats(comm, &g_win_calls, NULL), "mem_stats");
    if (st == CHORUS_SUCCESS) {
        if (rb > 0) gt_die(G->memcpy_async(hr, dr, rb, g_stream), "read recvbuf");
        /* The send buffer comes back too, so the matrix sees whether it was modified. */
        if (sb > 0 && !overlap)
            gt_die(G->memcpy_async((void *)hs, ds, sb, g_stream), "read sendbuf");
    }
    gt_die(G->stream_synchronize(g_stream), "stream_synchronize");
    return st;
}

static chorus_status_t gt_allreduce(const void *s, void *r, size_t count, chorus_dtype_t dt,
                                    chorus_op_t op, chorus_comm_t comm, void *stream)
{
    (void)stream;
    return gt_coll(GT_AR, s, r, count, dt, op, 0, comm);
}

static chorus_status_t gt_allgather(const void *s, void *r, size_t count, chorus_dtype_t dt,
                                    chorus_comm_t comm, void *stream)
{
    (void)stream;
    return gt_coll(GT_AG, s, r, count, dt, CHORUS_SUM, 0, comm);
}

static chorus_status_t gt_reduce_scatter(const void *s, void *r, size_t count, chorus_dtype_t dt,
                                         chorus_op_t op, chorus_comm_t comm, void *stream)
{
    (void)stream;
    return gt_coll(GT_RS, s, r, count, dt, op, 0, comm);
}

static chorus_status_t gt_broadcast(const void *s, void *r, size_t count, chorus_dtype_t dt,
                                    int root, chorus_comm_t comm, void *stream)
{
    (void)stream;
    return gt_coll(GT_BC, s, r, count, dt, CHORUS_SUM, root, comm);
}

static chorus_status_t gt_reduce(const void *s, void *r, size_t count, chorus_dtype_t dt,
                                 chorus_op_t op, int root, chorus_comm_t comm, void *stream)
{
    (void)stream;
    return gt_coll(GT_RD, s, r, count, dt, op, root, comm);
}

static chorus_status_t gt_alltoall(const void *s, void *r, size_t count, chorus_dtype_t dt,
                                   chorus_comm_t comm, void *stream)
{
    (void)stream;
    return gt_coll(GT_A2A, s, r, count, dt, CHORUS_SUM, 0, comm);
}

/* Send and recv on device memory. Each test buffer a send or recv touches gets a device
 * mirror, filled on the stream from the host buffer (data, or the matrix's poison) at its
 * first use in the round; a round is one call outside a group, or a whole group. At the
 * round's end (after the call, or after chorus_group_end) every mirror is copied back on
 * the stream and the stream synchronized, so the matrix checks what the device got. */
static void *g_mirror[GT_MAX_LIVE];
static size_t g_mirror_bytes[GT_MAX_LIVE];
static int g_mapped[GT_MAX_LIVE];

static void *gt_mirror(const void *q)
{
    for (int i = 0; i < GT_MAX_LIVE; i++) {
        const unsigned char *p = gt_live[i].p;
        if (p == NULL || (const unsigned char *)q < p || (const unsigned char *)q >= p +
            gt_live[i].bytes)
            continue;
        if (!g_mapped[i]) {
            if (gt_live[i].bytes > g_mirror_bytes[i]) {
                if (g_mirror[i] != NULL) gt_die(G->free_device(g_mirror[i]), "free_device");
                gt_die(G->malloc_device(&g_mirror[i], gt_live[i].bytes), "malloc_device");
                g_mirror_bytes[i] = gt_live[i].bytes;
            }
            gt_die(G->memcpy_async(g_mirror[i], p, gt_live[i].bytes, g_stream), "fill mirror");
            g_mapped[i] = 1;
        }
        return (char *)g_mirror[i] + ((const unsigned char *)q - p);
    }
    return NULL;
}

static void gt_round_end(void)
{
    for (int i = 0; i < GT_MAX_LIVE; i++) {
        if (!g_mapped[i]) continue;
        gt_die(G->memcpy_async(gt_live[i].p, g_mirror[i], gt_live[i].bytes, g_stream),
               "read mirror");
        g_mapped[i] = 0;
    }
    gt_die(G->stream_synchronize(g_stream), "stream_synchronize");
}

static chorus_status_t gt_p2p(int is_send, const void *buf, size_t count, chorus_dtype_t dt,
                              int peer, chorus_comm_t comm)
{
    size_t bytes = count * mp_dtype_size(dt);
    if (!gt_is_test_buf(buf) || bytes == 0)
        return is_send ? chorus_send(buf, count, dt, peer, comm, NULL)
                       : chorus_recv((void *)buf, count, dt, peer, comm, NULL);
    void *d = gt_mirror(buf);
    chorus_status_t st = is_send ? chorus_send(d, count, dt, peer, comm, g_stream)
                                 : chorus_recv(d, count, dt, peer, comm, g_stream);
    if (g_group_depth == 0) gt_round_end();
    return st;
}

static chorus_status_t gt_send(const void *buf, size_t count, chorus_dtype_t dt, int peer,
                               chorus_comm_t comm, void *stream)
{
    (void)stream;
    return gt_p2p(1, buf, count, dt, peer, comm);
}

static chorus_status_t gt_recv(void *buf, size_t count, chorus_dtype_t dt, int peer,
                               chorus_comm_t comm, void *stream)
{
    (void)stream;
    return gt_p2p(0, buf, count, dt, peer, comm);
}

static chorus_status_t gt_group_start(void)
{
    g_group_depth++;
    return chorus_group_start();
}

static chorus_status_t gt_group_end(void)
{
    chorus_status_t st = chorus_group_end();
    if (--g_group_depth == 0) gt_round_end();
    return st;
}

/* ---- Checks before the matrix ---- */

static int gt_failures;

static void gt_expect(int ok, int rank, const char *what)
{
    if (ok) return;
    printf("FAIL rank=%d: %s (%s)\n", rank, what, chorus_last_error());
    fflush(stdout);
    gt_failures++;
}

/* Mixed host and device buffers are rejected before anything is queued. */
static void gt_mixed(chorus_comm_t comm, int rank)
{
    uint32_t host[8] = {0};
    void *dev = gt_dev(0, sizeof host);
    chorus_status_t st;
    st = chorus_allreduce(host, dev, 8, CHORUS_UINT32, CHORUS_SUM, comm, g_stream);
    gt_expect(st == CHORUS_ERR_INVALID_ARGUMENT && strstr(chorus_last_error(), "sendbuf is host"),
              rank, "allreduce host sendbuf, device recvbuf: INVALID_ARGUMENT naming sendbuf");
    st = chorus_allgather(dev, host, 1, CHORUS_UINT32, comm, g_stream);
    gt_expect(st == CHORUS_ERR_INVALID_ARGUMENT && strstr(chorus_last_error(), "recvbuf is host"),
              rank, "allgather device sendbuf, host recvbuf: INVALID_ARGUMENT naming recvbuf");
    st = chorus_allreduce(host, host, 8, CHORUS_UINT32, CHORUS_SUM, comm, g_stream);
    gt_expect(st == CHORUS_ERR_INVALID_ARGUMENT, rank, "host buffers with a stream rejected");
}

/* 40 rounds of (allreduce a -> b, then a copy b -> a on the stream) queued with no
 * synchronisation; every round multiplies by nranks, so the end value tells whether every
 * step saw the one before: a[i] = n^39 * sum over ranks of x[i] (mod 2^64). */
static void gt_chain(chorus_comm_t comm, int rank, int n)
{
    enum { COUNT = 1000, ROUNDS = 40 };
    uint64_t *h = malloc(COUNT * sizeof *h), *want = malloc(COUNT * sizeof *want);
    char *a = gt_dev(0, 2 * COUNT * sizeof *h), *b = a + COUNT * sizeof *h;
    uint64_t mul = 1;
    for (int k = 1; k < ROUNDS; k++) mul *= (uint64_t)n;
    for (size_t i = 0; i < COUNT; i++) {
        want[i] = 0;
        for (int q = 0; q < n; q++) want[i] += mp_rand(mp_rank_key(77, q), i);
        want[i] *= mul;
        h[i] = mp_rand(mp_rank_key(77, rank), i);
    }
    gt_die(G->memcpy_async(a, h, COUNT * sizeof *h, g_stream), "chain fill");
    for (int k = 0; k < ROUNDS; k++) {
        chorus_status_t st = chorus_allreduce(a, b, COUNT, CHORUS_UINT64, CHORUS_SUM, comm,
                                              g_stream);
        mp_die_on_error(st, comm, rank, "chain allreduce");
        gt_die(G->memcpy_async(a, b, COUNT * sizeof *h, g_stream), "chain copy");
    }
    gt_die(G->memcpy_async(h, a, COUNT * sizeof *h, g_stream), "chain read");
    gt_die(G->stream_synchronize(g_stream), "chain synchronize");
    for (size_t i = 0; i < COUNT; i++) {
        if (h[i] != want[i]) {
            printf("FAIL rank=%d: chain of %d queued allreduces: index %zu: got %llu expected "
                   "%llu\n", rank, ROUNDS, i, (unsigned long long)h[i],
                   (unsigned long long)want[i]);
            gt_failures++;
            break;
        }
    }
    free(h);
    free(want);
}

/* ---- Send and receive on device memory, in groups and not ---- */

/* Byte i of the message number `msg` from rank `from`. */
static unsigned char gt_byte(int from, int msg, size_t i)
{
    return (unsigned char)mp_rand(mp_rank_key(1000u + (unsigned)msg, from), i / 8) >> (i % 8);
}

static void gt_fill_dev(void *dev, int from, int msg, size_t bytes)
{
    unsigned char *h = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) h[i] = gt_byte(from, msg, i);
    gt_die(G->memcpy_async(dev, h, bytes, g_stream), "p2p fill");
    gt_die(G->stream_synchronize(g_stream), "p2p fill synchronize");
    free(h);
}

/* Compares device memory (after synchronizing g_stream) with message msg of rank from. */
static void gt_check_dev(const void *dev, int from, int msg, size_t bytes, int rank,
                         const char *what)
{
    unsigned char *h = malloc(bytes);
    gt_die(G->memcpy_async(h, dev, bytes, g_stream), "p2p read");
    gt_die(G->stream_synchronize(g_stream), "p2p read synchronize");
    for (size_t i = 0; i < bytes; i++) {
        if (h[i] != gt_byte(from, msg, i)) {
            printf("FAIL rank=%d: %s (%zu bytes from rank %d): byte %zu is %u, expected %u\n",
                   rank, what, bytes, from, i, h[i], gt_byte(from, msg, i));
            gt_failures++;
            break;
        }
    }
    free(h);
}

/* A group mixing host and device buffers, or device buffers on two streams, is rejected
 * by the call that breaks the rule and by chorus_group_end, and runs nothing. */
static void gt_group_rules(chorus_comm_t comm, int rank, int n)
{
    uint32_t host[8] = {0};
    void *dev = gt_dev(0, sizeof host), *stream2 = NULL;
    int peer = (rank + 1) % n;
    chorus_status_t st;
    gt_die(G->stream_create(&stream2), "stream_create");
    chorus_group_start();
    st = chorus_send(dev, 8, CHORUS_UINT32, peer, comm, g_stream);
    gt_expect(st == CHORUS_SUCCESS, rank, "device send in a group is recorded");
    st = chorus_recv(host, 8, CHORUS_UINT32, peer, comm, NULL);
    gt_expect(st == CHORUS_ERR_INVALID_ARGUMENT &&
                  strstr(chorus_last_error(), "all host or all device") != NULL,
              rank, "host recv after a device send in one group: INVALID_ARGUMENT");
    st = chorus_group_end();
    gt_expect(st == CHORUS_ERR_INVALID_ARGUMENT &&
                  strstr(chorus_last_error(), "all host or all device") != NULL,
              rank, "group_end of a host/device group: INVALID_ARGUMENT with the reason");

    chorus_group_start();
    st = chorus_recv(dev, 4, CHORUS_UINT32, peer, comm, g_stream);
    if (st == CHORUS_SUCCESS)
        st = chorus_send((char *)dev + 16, 4, CHORUS_UINT32, peer, comm, stream2);
    gt_expect(st == CHORUS_ERR_INVALID_ARGUMENT && strstr(chorus_last_error(), "one stream"),
              rank, "device ops of one group on two streams: INVALID_ARGUMENT naming both");
    st = chorus_group_end();
    gt_expect(st == CHORUS_ERR_INVALID_ARGUMENT && strstr(chorus_last_error(), "one stream"),
              rank, "group_end of a group on two streams: INVALID_ARGUMENT");
    gt_die(G->stream_destroy(stream2), "stream_destroy");
}

/* Every rank sends two messages of each size to the next rank, one to the previous and one
 * to itself, and receives the matching ones, in one device group; sizes include one above the
 * staging chunk of make test (16K) and one above the default (4 MiB). Then the same group
 * with the receives first, so the order of posting does not matter. */
static void gt_group_ring(chorus_comm_t comm, int rank, int n)
{
    static const size_t sizes[] = {1, 12345, 70001, (4u << 20) + 5};
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t b = sizes[k];
        char *d = gt_dev(0, 8 * b);
        char *s0 = d, *s1 = d + b, *s2 = d + 2 * b, *r0 = d + 3 * b, *r1 = d + 4 * b,
             *r2 = d + 5 * b, *s3 = d + 6 * b, *r3 = d + 7 * b;
        for (int recv_first = 0; recv_first < 2; recv_first++) {
            int m = (int)k * 8 + recv_first * 4;
            gt_fill_dev(s0, rank, m, b);
            gt_fill_dev(s1, rank, m + 1, b);
            gt_fill_dev(s2, rank, m + 2, b);
            gt_fill_dev(s3, rank, m + 3, b);
            chorus_status_t st = chorus_group_start();
            for (int pass = 0; pass < 2 && st == CHORUS_SUCCESS; pass++) {
                if (pass == recv_first) {
                    st = chorus_send(s0, b, CHORUS_UINT8, next, comm, g_stream);
                    if (!st) st = chorus_send(s1, b, CHORUS_UINT8, next, comm, g_stream);
                    if (!st) st = chorus_send(s2, b, CHORUS_UINT8, prev, comm, g_stream);
                    if (!st) st = chorus_send(s3, b, CHORUS_UINT8, rank, comm, g_stream);
                } else {
                    st = chorus_recv(r0, b, CHORUS_UINT8, prev, comm, g_stream);
                    if (!st) st = chorus_recv(r1, b, CHORUS_UINT8, prev, comm, g_stream);
                    if (!st) st = chorus_recv(r2, b, CHORUS_UINT8, next, comm, g_stream);
                    if (!st) st = chorus_recv(r3, b, CHORUS_UINT8, rank, comm, g_stream);
                }
            }
            chorus_status_t end = chorus_group_end();
            mp_die_on_error(st != CHORUS_SUCCESS ? st : end, comm, rank, "device group ring");
            gt_check_dev(r0, prev, m, b, rank, "group ring: first message from prev");
            gt_check_dev(r1, prev, m + 1, b, rank, "group ring: second message from prev");
            gt_check_dev(r2, next, m + 2, b, rank, "group ring: message from next");
            gt_check_dev(r3, rank, m + 3, b, rank, "group ring: message to self");
            gt_check_dev(s0, rank, m, b, rank, "group ring: send buffer intact");
        }
    }
}

/* Pairs (0,1), (2,3), ...: a device send outside a group meets a device recv inside a
 * group, each way, and a host send outside a group meets a device recv in a group; sizes
 * below and above the staging chunk. */
static void gt_group_interop(chorus_comm_t comm, int rank, int n)
{
    static const size_t sizes[] = {100, 70001};
    int partner = rank ^ 1, even = rank % 2 == 0;
    chorus_status_t st;
    if (partner >= n) return;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t b = sizes[k];
        char *d = gt_dev(0, b);
        for (int way = 0; way < 3; way++) {
            /* way 0: even sends on device outside a group; 1: odd does; 2: even sends
             * from host memory. The other side receives on device in a group. */
            int m = 100 + (int)k * 4 + way, sender = way == 1 ? !even : even;
            int from = sender ? rank : partner;
            if (sender && way == 2) {
                unsigned char *h = malloc(b);
                for (size_t i = 0; i < b; i++) h[i] = gt_byte(rank, m, i);
                st = chorus_send(h, b, CHORUS_UINT8, partner, comm, NULL);
                free(h);
            } else if (sender) {
                gt_fill_dev(d, rank, m, b);
                st = chorus_send(d, b, CHORUS_UINT8, partner, comm, g_stream);
            } else {
                chorus_group_start();
                st = chorus_recv(d, b, CHORUS_UINT8, partner, comm, g_stream);
                chorus_status_t end = chorus_group_end();
                if (st == CHORUS_SUCCESS) st = end;
            }
            mp_die_on_error(st, comm, rank, "device p2p in and out of a group");
            if (!sender || way != 2)
                gt_check_dev(d, from, m, b, rank, sender ? "interop: send buffer intact"
                                                         : "interop: received");
        }
    }
}

static chorus_comm_t gt_init_env(const char *prog, int *rank_p, int *nranks_p)
{
    chorus_comm_t comm = mp_init_env(prog, rank_p, nranks_p);
    gt_mixed(comm, *rank_p);
    gt_chain(comm, *rank_p, *nranks_p);
    if (*nranks_p > 1) {
        gt_group_rules(comm, *rank_p, *nranks_p);
        gt_group_ring(comm, *rank_p, *nranks_p);
        gt_group_interop(comm, *rank_p, *nranks_p);
    }
    if (gt_failures > 0) {
        chorus_comm_abort(comm);
        chorus_comm_destroy(comm);
        exit(1);
    }
    if (*rank_p == 0)
        printf("gpu_coll_matrix: mixed buffers, the queued chain and device groups passed\n");
    return comm;
}

/* Ranks but the last allreduce COUNT elements, the last one 2 * COUNT. */
static int gt_mismatch(void)
{
    enum { COUNT = 1000 };
    int rank, n;
    chorus_comm_t comm = mp_init_env("gpu_coll_matrix", &rank, &n);
    size_t count = rank == n - 1 ? 2 * COUNT : COUNT;
    void *d = gt_dev(0, 2 * count * sizeof(float));
    chorus_status_t st, async = CHORUS_SUCCESS;
    /* A matching device call first sets the device path up (its set-up meets the other
     * ranks and would refuse the mismatched call at once): the mismatch is then found
     * where it runs, asynchronously. */
    gt_die(chorus_allreduce(d, (char *)d + COUNT * sizeof(float), COUNT, CHORUS_FLOAT32,
                            CHORUS_SUM, comm, g_stream), "a matching device allreduce");
    st = chorus_allreduce(d, (char *)d + count * sizeof(float), count, CHORUS_FLOAT32,
                          CHORUS_SUM, comm, g_stream);
    gt_expect(st == CHORUS_SUCCESS, rank, "the mismatched call is queued");
    gt_die(G->stream_synchronize(g_stream), "stream_synchronize after a failed collective");
    chorus_comm_get_async_error(comm, &async);
    if (rank == n - 1)
        gt_expect(async == CHORUS_ERR_MISMATCH, rank, "async error is CHORUS_ERR_MISMATCH");
    else
        gt_expect(async != CHORUS_SUCCESS, rank, "async error is set");
    st = chorus_barrier(comm);
    gt_expect(st == async && st != CHORUS_SUCCESS, rank, "the next call returns the error");
    if (rank == n - 1 || gt_failures > 0)
        printf("gpu_coll_matrix --mismatch rank %d: async error %s: %s\n", rank,
               chorus_status_string(async), chorus_last_error());
    chorus_comm_destroy(comm);
    return gt_failures > 0 ? 1 : 0;
}

/* The last rank allreduces COUNT floats of host memory, the others of device memory: a host
 * call and a device call never pass for each other (issue 18), whatever path the device
 * call takes. Every rank must end with CHORUS_ERR_MISMATCH. */
static int gt_host_vs_device(void)
{
    enum { COUNT = 1000 };
    int rank, n;
    chorus_comm_t base = mp_init_env("gpu_coll_matrix", &rank, &n);
    static float host[2 * COUNT];

    /* Twice: as the comm's first device call (the device path is chosen and set up then),
     * and after a device call every rank made (the path is in place). */
    for (int warm = 0; warm < 2; warm++) {
        chorus_comm_t comm = NULL;
        chorus_status_t st, async = CHORUS_SUCCESS;
        char msg[512] = "";
        void *d = gt_dev(0, 2 * COUNT * sizeof(float));
        double t0;

        gt_die(chorus_comm_split(base, 0, rank, &comm), "comm_split");
        if (warm) {
            gt_die(chorus_allreduce(d, (char *)d + COUNT * sizeof(float), COUNT, CHORUS_FLOAT32,
                                    CHORUS_SUM, comm, g_stream),
                   "a device allreduce on every rank");
            gt_die(G->stream_synchronize(g_stream), "stream_synchronize");
            chorus_comm_get_async_error(comm, &async);
            gt_die(async, "a device allreduce on every rank (its asynchronous error)");
        }
        t0 = mp_now();
        if (rank == n - 1) {
            st = chorus_allreduce(host, host + COUNT, COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm,
                                  NULL);
            async = st;
            snprintf(msg, sizeof msg, "%s", chorus_last_error());
        } else {
            st = chorus_allreduce(d, (char *)d + COUNT * sizeof(float), COUNT, CHORUS_FLOAT32,
                                  CHORUS_SUM, comm, g_stream);
            /* Queued (the error comes asynchronously), or refused at once when the call sets
             * up the device path and meets the others first. */
            snprintf(msg, sizeof msg, "%s", chorus_last_error());
            gt_expect(st == CHORUS_SUCCESS || st == CHORUS_ERR_MISMATCH, rank,
                      "the device call is queued or is the mismatch");
            gt_die(G->stream_synchronize(g_stream), "stream_synchronize after a failed collective");
            chorus_comm_get_async_error(comm, &async);
        }
        gt_expect(async == CHORUS_ERR_MISMATCH, rank, "host vs device: CHORUS_ERR_MISMATCH");
        gt_expect(mp_now() - t0 < 1.0, rank, "host vs device: the mismatch took over 1 s");
        printf("gpu_coll_matrix --host-vs-device%s rank %d (%s buffers): %s after %.3f s: %s\n",
               warm ? " after a device call" : "", rank, rank == n - 1 ? "host" : "device",
               chorus_status_string(async), mp_now() - t0, msg);
        chorus_comm_destroy(comm);
    }
    chorus_comm_destroy(base);
    return gt_failures > 0 ? 1 : 0;
}

/* ---- The matrix itself, on the calls above ---- */

#define COLL_MATRIX_BUF_ALLOC(n) gt_malloc(n)
#define COLL_MATRIX_BUF_FREE(p) gt_free(p)
#define chorus_allreduce gt_allreduce
#define chorus_allgather gt_allgather
#define chorus_reduce_scatter gt_reduce_scatter
#define chorus_broadcast gt_broadcast
#define chorus_reduce gt_reduce
#define chorus_alltoall gt_alltoall
#define chorus_send gt_send
#define chorus_recv gt_recv
#define chorus_group_start gt_group_start
#define chorus_group_end gt_group_end
#define mp_init_env gt_init_env
#define main mp_coll_matrix_main
int mp_coll_matrix_main(int argc, char **argv);
#include "mp/coll_matrix.c"
#undef main

int main(int argc, char **argv)
{
    int ndev = 0;
    const char *desc = "";
    int gate = gpu_gate(1);
    if (gate != 0) return gate;
    G = chorus__gpu();
    gt_die(G->init(&ndev, &desc), "init");
    gt_die(G->set_device(0), "set_device");
    gt_die(G->stream_create(&g_stream), "stream_create");
    if (argc > 1 && strcmp(argv[1], "--mismatch") == 0) return gt_mismatch();
    if (argc > 1 && strcmp(argv[1], "--host-vs-device") == 0) return gt_host_vs_device();
    const char *w = getenv("CHORUS_TEST_DEV_WIN");
    g_win_mode = w == NULL ? 0 : strcmp(w, "all") == 0 ? 1 : strcmp(w, "odd") == 0 ? 2 : -1;
    if (g_win_mode < 0) {
        fprintf(stderr, "CHORUS_TEST_DEV_WIN=%s: all or odd\n", w);
        return 2;
    }
    int rc = mp_coll_matrix_main(argc, argv);
    /* Every rank's buffers in windows: some calls must have read the peers' in place. */
    if (rc == 0 && g_win_mode == 1 && g_win_calls == 0 && getenv("CHORUS_WORLD_SIZE") != NULL &&
        atoi(getenv("CHORUS_WORLD_SIZE")) > 1) {
        printf("FAIL: CHORUS_TEST_DEV_WIN=all, yet no device call read its peers' windows\n");
        return 1;
    }
    if (g_win_mode != 0) printf("device calls that read peers' windows: %llu\n",
                                (unsigned long long)g_win_calls);
    return rc;
}
