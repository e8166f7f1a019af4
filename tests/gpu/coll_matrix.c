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
 * cross-rank comparison does not depend on the path under test. Send and receive inside a
 * group stay on host memory too (device buffers in groups are not supported yet).
 *
 * Before the matrix: mixed host/device buffers are rejected, and a chain of 40 collectives
 * and copies queued without synchronizing in between must come out in order. With --mismatch
 * the program only checks that ranks calling different device collectives get
 * CHORUS_ERR_MISMATCH (as the comm's async error and from the next call).
 *
 *   chorusrun -n 4 -- gpu_coll_matrix [--mismatch] [mp_coll_matrix options]
 *
 * Prints "skipped: no CUDA device" and exits 77 when no plugin found a device.
 */
#include "mp/mp_common.h"

#include "gpu/gpu.h"

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

static void *gt_dev(int i, size_t bytes)
{
    if (bytes == 0) bytes = 1;
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

/* Blocking send and recv outside a group on device memory: stream-ordered, so the copy
 * back after the stream's synchronisation sees the data. */
static chorus_status_t gt_p2p(int is_send, const void *buf, size_t count, chorus_dtype_t dt,
                              int peer, chorus_comm_t comm)
{
    size_t bytes = count * mp_dtype_size(dt);
    if (g_group_depth > 0 || !gt_is_test_buf(buf) || bytes == 0)
        return is_send ? chorus_send(buf, count, dt, peer, comm, NULL)
                       : chorus_recv((void *)buf, count, dt, peer, comm, NULL);
    void *d = gt_dev(0, bytes);
    gt_die(G->memcpy_async(d, buf, bytes, g_stream), "fill p2p buffer");
    chorus_status_t st = is_send ? chorus_send(d, count, dt, peer, comm, g_stream)
                                 : chorus_recv(d, count, dt, peer, comm, g_stream);
    if (st == CHORUS_SUCCESS && !is_send)
        gt_die(G->memcpy_async((void *)buf, d, bytes, g_stream), "read p2p buffer");
    gt_die(G->stream_synchronize(g_stream), "stream_synchronize");
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
    g_group_depth--;
    return chorus_group_end();
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

static chorus_comm_t gt_init_env(const char *prog, int *rank_p, int *nranks_p)
{
    chorus_comm_t comm = mp_init_env(prog, rank_p, nranks_p);
    gt_mixed(comm, *rank_p);
    gt_chain(comm, *rank_p, *nranks_p);
    if (gt_failures > 0) {
        chorus_comm_abort(comm);
        chorus_comm_destroy(comm);
        exit(1);
    }
    if (*rank_p == 0) printf("gpu_coll_matrix: mixed buffers and the queued chain passed\n");
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
    G = chorus__gpu();
    if (G == NULL) {
        printf("skipped: no CUDA device (%s)\n", chorus__gpu_describe());
        return 77;
    }
    gt_die(G->init(&ndev, &desc), "init");
    gt_die(G->set_device(0), "set_device");
    gt_die(G->stream_create(&g_stream), "stream_create");
    if (argc > 1 && strcmp(argv[1], "--mismatch") == 0) return gt_mismatch();
    return mp_coll_matrix_main(argc, argv);
}
