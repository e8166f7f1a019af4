/*
 * The CUDA IPC arena (lib/gpu/ipc_arena.c) on device buffers: every collective x dtype x op,
 * counts 1, 13, 4099 and a staged allreduce of 20011 elements on 1 MiB slots, and 5003 on
 * the smallest slots (several chunks for every dtype), in place and out of place, with
 * exact integers, order-derived float bounds, identical bytes on every rank where the result
 * is the same everywhere, untouched send buffers and guard bytes after every output. Host
 * collectives run between the device ones on the same comm (the hash comparison), which
 * checks that the host arena and the device step barrier share the control lines correctly.
 * Then two mismatches, each on a fresh comm (an error fails the arena for good): ranks
 * calling different device collectives, and a host arena allreduce against a device one.
 *
 *   CHORUS_CUDA_PLUGIN=$BUILD/lib/libchorus-cuda-fake.so \
 *       $BUILD/bin/chorusrun -n 3 -- $BUILD/tests/gpu_ipc_arena
 *
 * Links libchorus.a statically and takes comm->arena and comm->bs from lib/core/comm.h.
 * Prints "skipped: no CUDA device" and exits 77 when there is no GPU; exits 1 with the
 * loader's reason when a plugin is there but broken (gpu_gate.h).
 */
#include "mp/mp_common.h"

#include "arena/arena.h"
#include "core/comm.h"
#include "gpu/gpu.h"
#include "gpu/ipc_arena.h"
#include "gpu_gate.h"

#include <math.h>
#include <stdarg.h>

#define RAW (-1)
#define GUARD 64
#define SEED 0x1dc0ffee

typedef struct {
    chorus_comm_t comm;
    int rank;
    int n;
    const chorus_gpu_ops_t *gpu;
    void *stream; /* the ipc arena's */
    void *xfer;   /* the test's own copies: a second stream, so a missing wait in the arena
                   * shows up as a wrong result instead of being ordered by the stream */
    chorus_ipc_arena_t *ipc;
    uint64_t *keys;
    uint64_t opno;
    int failures;
    int cases;
} ctx_t;

typedef struct {
    chorus_coll_t coll;
    chorus_dtype_t dt;
    int op; /* RAW for the collectives that only move data */
    size_t count;
    int root;
    int inplace;
    const char *arena;
} tcase_t;

static void fail(ctx_t *c, const tcase_t *k, const char *fmt, ...) CHORUS_PRINTF(3, 4);
static void fail(ctx_t *c, const tcase_t *k, const char *fmt, ...)
{
    va_list ap;

    printf("FAIL rank %d: %s %s %s count %zu root %d%s (%s slots): ", c->rank,
           chorus__coll_name(k->coll), mp_dtype_name(k->dt), k->op == RAW ? "-" : mp_op_name(k->op),
           k->count, k->root, k->inplace ? " in place" : "", k->arena);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    c->failures++;
}

static void die(ctx_t *c, chorus_status_t st, const char *what)
{
    mp_die_on_error(st, c->comm, c->rank, what);
}

/* ---- Inputs and expected values (as tests/mp/coll_matrix.c) ---- */

static void gen(chorus_dtype_t dt, int op, int n, uint64_t key, size_t index, void *buf,
                size_t j)
{
    uint64_t r = mp_rand(key, index), v = r;
    int bits = (int)mp_dtype_size(dt) * 8;

    if (op == RAW) {
        mp_put_bits(dt, buf, j, r);
    } else if (mp_is_float(dt)) {
        double u = mp_unit(r), s = (r & 1) ? -1.0 : 1.0;
        double x = op == CHORUS_SUM || op == CHORUS_AVG ? s * (0.5 + 0.5 * u)
                   : op == CHORUS_PROD                  ? 1.0 + (u - 0.5) / 8
                                                        : s * (1.0 + 999.0 * u);
        mp_put_float(dt, buf, j, x);
    } else {
        if (op == CHORUS_PROD) {
            static const int64_t sv[] = {1, 2, 3, -1, -2};
            v = mp_is_signed(dt) ? (uint64_t)sv[r % 5] : 1 + r % 3;
        } else if (op == CHORUS_AVG && mp_is_signed(dt)) {
            uint64_t range = ((1ULL << (bits - 1)) - 1) / (uint64_t)n;
            v = r % (2 * range + 1) - range;
        } else if (op == CHORUS_AVG) {
            uint64_t max = bits == 64 ? ~0ULL : (1ULL << bits) - 1, range = max / (uint64_t)n;
            v = range == ~0ULL ? r : r % (range + 1);
        }
        mp_put_bits(dt, buf, j, v);
    }
}

/* Integers: exact (wrapping sum and prod, truncating avg). */
static int check_int(ctx_t *c, const tcase_t *k, const void *got, size_t j, size_t index)
{
    int bits = (int)mp_dtype_size(k->dt) * 8;
    uint64_t mask = bits == 64 ? ~0ULL : (1ULL << bits) - 1, acc = 0, x, want, umin = ~0ULL,
             umax = 0;
    int64_t smin = INT64_MAX, smax = INT64_MIN, ssum = 0;

    for (int q = 0; q < c->n; q++) {
        gen(k->dt, k->op, c->n, c->keys[q], index, &x, 0);
        int64_t s = mp_get_int(k->dt, &x, 0);
        uint64_t u = (uint64_t)s;

        acc = q == 0 ? u : (k->op == CHORUS_PROD ? acc * u : acc + u);
        smin = s < smin ? s : smin;
        smax = s > smax ? s : smax;
        umin = u < umin ? u : umin;
        umax = u > umax ? u : umax;
        ssum += k->op == CHORUS_AVG && mp_is_signed(k->dt) ? s : 0;
    }
    want = acc;
    if (k->op == CHORUS_MIN) want = mp_is_signed(k->dt) ? (uint64_t)smin : umin;
    if (k->op == CHORUS_MAX) want = mp_is_signed(k->dt) ? (uint64_t)smax : umax;
    if (k->op == CHORUS_AVG)
        want = mp_is_signed(k->dt) ? (uint64_t)(ssum / c->n) : acc / (uint64_t)c->n;
    if ((mp_get_bits(k->dt, got, j) & mask) == (want & mask)) return 1;
    fail(c, k, "index %zu: got 0x%llx expected 0x%llx", j,
         (unsigned long long)mp_get_bits(k->dt, got, j), (unsigned long long)(want & mask));
    return 0;
}

/* Floats: min/max exact; sum, avg and prod within the bound of n - 1 roundings (see
 * tests/mp/coll_matrix.c for the derivation). */
static int check_float(ctx_t *c, const tcase_t *k, const void *got, size_t j, size_t index)
{
    long double ref = 0, sabs = 0, x, u = mp_unit_roundoff(k->dt), bound = 0, have;
    long double gamma = (c->n - 1) * u / (1 - (c->n - 1) * u), eps = c->n * 0x1p-62L;
    uint64_t e;

    for (int q = 0; q < c->n; q++) {
        gen(k->dt, k->op, c->n, c->keys[q], index, &e, 0);
        x = mp_get_float(k->dt, &e, 0);
        if (q == 0) ref = x;
        else if (k->op == CHORUS_PROD) ref *= x;
        else if (k->op == CHORUS_MIN) ref = x < ref ? x : ref;
        else if (k->op == CHORUS_MAX) ref = x > ref ? x : ref;
        else ref += x;
        sabs += fabsl(x);
    }
    if (k->op == CHORUS_SUM) bound = gamma * sabs + u * fabsl(ref) + eps * sabs;
    if (k->op == CHORUS_AVG) {
        ref /= c->n;
        bound = (gamma * sabs + eps * sabs) / c->n + 3 * u * fabsl(ref);
    }
    if (k->op == CHORUS_PROD) bound = (gamma + eps) * fabsl(ref);
    have = mp_get_float(k->dt, got, j);
    if (fabsl(have - ref) <= bound) return 1;
    fail(c, k, "index %zu: got %.17Lg expected %.17Lg (bound %.3Lg)", j, have, ref, bound);
    return 0;
}

/* got[j] == the reduction of element base + j over ranks, for j < count. */
static void check_reduced(ctx_t *c, const tcase_t *k, const void *got, size_t count,
                          size_t base)
{
    for (size_t j = 0; j < count; j++) {
        int ok = mp_is_float(k->dt) ? check_float(c, k, got, j, base + j)
                                    : check_int(c, k, got, j, base + j);
        if (!ok) return;
    }
}

/* got[j] == element base + j of rank src's RAW input, for j < count. */
static void check_raw(ctx_t *c, const tcase_t *k, const void *got, size_t count, int src,
                      size_t base)
{
    uint64_t e;

    for (size_t j = 0; j < count; j++) {
        gen(k->dt, RAW, c->n, c->keys[src], base + j, &e, 0);
        if (mp_get_bits(k->dt, &e, 0) != mp_get_bits(k->dt, got, j)) {
            fail(c, k, "index %zu: got 0x%llx expected 0x%llx (from rank %d)", j,
                 (unsigned long long)mp_get_bits(k->dt, got, j),
                 (unsigned long long)mp_get_bits(k->dt, &e, 0), src);
            return;
        }
    }
}

/* ---- Device buffers ---- */

static void *dev_alloc(ctx_t *c, size_t bytes)
{
    void *p = NULL;
    die(c, c->gpu->malloc_device(&p, bytes + GUARD), "malloc_device");
    return p;
}

static void to_dev(ctx_t *c, void *dst, const void *src, size_t bytes)
{
    die(c, c->gpu->memcpy_async(dst, src, bytes, c->xfer), "memcpy to device");
    die(c, c->gpu->stream_synchronize(c->xfer), "stream_synchronize");
}

static void from_dev(ctx_t *c, void *dst, const void *src, size_t bytes)
{
    die(c, c->gpu->memcpy_async(dst, src, bytes, c->xfer), "memcpy from device");
    die(c, c->gpu->stream_synchronize(c->xfer), "stream_synchronize");
}

/* Every rank's hash of the result must be the same where compare is set (a host allgather
 * between device collectives, which also exercises the host arena next to the device
 * barrier). Every rank calls it for every case, so the host collectives line up. */
static void check_same_everywhere(ctx_t *c, const tcase_t *k, const void *buf, size_t bytes,
                                  int compare)
{
    uint64_t *all = calloc((size_t)c->n, sizeof *all);

    all[c->rank] = buf != NULL ? mp_hash(buf, bytes) : 0;
    die(c, chorus_allgather(all + c->rank, all, 1, CHORUS_UINT64, c->comm, NULL), "allgather");
    for (int r = 0; compare && r < c->n; r++) {
        if (all[r] != all[0]) {
            fail(c, k, "rank %d's result differs from rank 0's", r);
            break;
        }
    }
    free(all);
}

/* Elements of the send and receive buffers of a case. */
static void case_sizes(const ctx_t *c, const tcase_t *k, size_t *send_p, size_t *recv_p)
{
    size_t n = (size_t)c->n, cnt = k->count;

    switch (k->coll) {
    case CHORUS_COLL_ALLGATHER: *send_p = cnt, *recv_p = n * cnt; break;
    case CHORUS_COLL_REDUCE_SCATTER: *send_p = n * cnt, *recv_p = cnt; break;
    case CHORUS_COLL_ALLTOALL: *send_p = n * cnt, *recv_p = n * cnt; break;
    default: *send_p = cnt, *recv_p = cnt; break;
    }
}

/* Checks the result (host copy in out) of case k. */
static void check_case(ctx_t *c, const tcase_t *k, const uint8_t *out)
{
    size_t cnt = k->count, es = mp_dtype_size(k->dt);

    switch (k->coll) {
    case CHORUS_COLL_ALLREDUCE: check_reduced(c, k, out, cnt, 0); break;
    case CHORUS_COLL_REDUCE_SCATTER: check_reduced(c, k, out, cnt, (size_t)c->rank * cnt); break;
    case CHORUS_COLL_REDUCE:
        if (c->rank == k->root) check_reduced(c, k, out, cnt, 0);
        break;
    case CHORUS_COLL_BROADCAST: check_raw(c, k, out, cnt, k->root, 0); break;
    case CHORUS_COLL_ALLGATHER:
        for (int r = 0; r < c->n; r++) check_raw(c, k, out + (size_t)r * cnt * es, cnt, r, 0);
        break;
    case CHORUS_COLL_ALLTOALL:
        for (int r = 0; r < c->n; r++)
            check_raw(c, k, out + (size_t)r * cnt * es, cnt, r, (size_t)c->rank * cnt);
        break;
    default: break;
    }
}

/* Runs one case on device buffers and checks everything about it. */
static void run_case(ctx_t *c, const tcase_t *k)
{
    size_t es = mp_dtype_size(k->dt), ns, nr, roff = 0;
    int root = k->coll == CHORUS_COLL_BROADCAST || k->coll == CHORUS_COLL_REDUCE;
    uint8_t *in, *out, *dsend, *drecv;
    const void *sendbuf;
    void *recvbuf;
    char what[64];
    chorus_status_t st;

    case_sizes(c, k, &ns, &nr);
    in = malloc(ns * es + GUARD);
    out = malloc((ns > nr ? ns : nr) * es + GUARD);
    for (size_t j = 0; j < ns; j++) gen(k->dt, k->op, c->n, c->keys[c->rank], j, in, j);
    memset(in + ns * es, 0xa5, GUARD);
    dsend = dev_alloc(c, ns * es);
    to_dev(c, dsend, in, ns * es + GUARD);
    drecv = k->inplace ? dsend : dev_alloc(c, nr * es);
    if (!k->inplace) to_dev(c, drecv + nr * es, in + ns * es, GUARD);
    sendbuf = dsend;
    recvbuf = drecv;
    /* In place as chorus.h defines it. */
    if (k->inplace && k->coll == CHORUS_COLL_REDUCE_SCATTER) roff = (size_t)c->rank * k->count;
    if (k->inplace && k->coll == CHORUS_COLL_ALLGATHER) {
        drecv = dev_alloc(c, nr * es);
        to_dev(c, drecv + (size_t)c->rank * k->count * es, in, ns * es);
        to_dev(c, drecv + nr * es, in + ns * es, GUARD);
        sendbuf = drecv + (size_t)c->rank * k->count * es;
        recvbuf = drecv;
    }
    recvbuf = (uint8_t *)recvbuf + roff * es;
    if (root && c->rank != k->root && k->coll == CHORUS_COLL_BROADCAST && !k->inplace)
        sendbuf = NULL;
    if (root && c->rank != k->root && k->coll == CHORUS_COLL_REDUCE && !k->inplace)
        recvbuf = NULL;
    snprintf(what, sizeof what, "%s #%llu", chorus__coll_name(k->coll),
             (unsigned long long)++c->opno);
    st = chorus__ipc_arena_run(c->ipc, k->coll, sendbuf, recvbuf, k->count, k->dt,
                               k->op == RAW ? CHORUS_SUM : (chorus_op_t)k->op, k->root, c->opno,
                               NULL, what);
    die(c, st, what);
    c->cases++;
    if (recvbuf != NULL) {
        from_dev(c, out, recvbuf, nr * es + GUARD);
        check_case(c, k, out);
        /* (In place, reduce_scatter's recvbuf is followed by the rest of sendbuf.) */
        int guarded = !(k->inplace && k->coll == CHORUS_COLL_REDUCE_SCATTER);

        for (size_t j = 0; j < GUARD && guarded; j++) {
            if (out[nr * es + j] != 0xa5) {
                fail(c, k, "guard byte %zu after recvbuf overwritten", j);
                break;
            }
        }
    }
    check_same_everywhere(c, k, recvbuf != NULL ? out : NULL, nr * es,
                          k->coll == CHORUS_COLL_ALLREDUCE || k->coll == CHORUS_COLL_ALLGATHER ||
                              k->coll == CHORUS_COLL_BROADCAST);
    if (!k->inplace && sendbuf != NULL) {
        from_dev(c, out, dsend, ns * es + GUARD);
        if (memcmp(out, in, ns * es + GUARD) != 0) fail(c, k, "sendbuf was modified");
    }
    if (drecv != dsend) c->gpu->free_device(drecv);
    c->gpu->free_device(dsend);
    free(in);
    free(out);
}

/* ---- The matrix ---- */

static chorus_ipc_arena_t *ipc_create(ctx_t *c, chorus_comm_t comm, size_t slot_bytes)
{
    chorus_ipc_arena_params_t p;
    chorus_ipc_arena_t *ipc = NULL;
    int device = 0;

    if (comm->arena == NULL) {
        printf("FAIL rank %d: the comm has no host arena (CHORUS_ARENA=0?)\n", c->rank);
        exit(1);
    }
    die(c, c->gpu->get_device(&device), "get_device");
    memset(&p, 0, sizeof p);
    p.rank = comm->rank;
    p.nlocal = comm->nlocal;
    p.local_index = comm->local_index;
    p.gpu = c->gpu;
    p.device = device;
    p.stream = c->stream;
    p.slot_bytes = slot_bytes;
    p.host_arena = comm->arena;
    p.bs = comm->bs;
    die(c, chorus__ipc_arena_create(&p, &ipc), "chorus__ipc_arena_create");
    return ipc;
}

static int reduces(chorus_coll_t coll)
{
    return coll == CHORUS_COLL_ALLREDUCE || coll == CHORUS_COLL_REDUCE_SCATTER ||
           coll == CHORUS_COLL_REDUCE;
}

/* Every collective x dtype x op at count, out of place and (with_inplace) in place. */
static void run_count(ctx_t *c, const char *arena, size_t count, int with_inplace)
{
    static const chorus_coll_t colls[] = {CHORUS_COLL_ALLREDUCE, CHORUS_COLL_REDUCE_SCATTER,
                                          CHORUS_COLL_ALLGATHER, CHORUS_COLL_BROADCAST,
                                          CHORUS_COLL_REDUCE, CHORUS_COLL_ALLTOALL};

    for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
        for (int dt = 0; dt < CHORUS_NUM_DTYPES; dt++) {
            int op0 = reduces(colls[i]) ? 0 : RAW, op1 = reduces(colls[i]) ? CHORUS_NUM_OPS : 0;

            for (int op = op0; op < op1 || op == op0; op++) {
                for (int inplace = 0; inplace <= with_inplace; inplace++) {
                    tcase_t k = {colls[i], (chorus_dtype_t)dt, op, count,
                                 (int)(c->opno % (uint64_t)c->n), inplace, arena};
                    run_case(c, &k);
                }
            }
        }
    }
}

/* Ranks that call different things must all get CHORUS_ERR_MISMATCH, on a fresh comm each
 * time (the first error fails the arena for good). host: rank 0 calls the host arena's
 * allreduce where the others call the device one; else rank 0 calls allreduce and the
 * others broadcast. */
static void run_mismatch(ctx_t *c, int host)
{
    tcase_t k = {CHORUS_COLL_ALLREDUCE, CHORUS_FLOAT32, CHORUS_SUM, 16, 0, 0,
                 host ? "host vs device" : "allreduce vs broadcast"};
    chorus_comm_t comm = NULL;
    chorus_ipc_arena_t *ipc;
    float hin[16] = {0}, hout[16];
    void *dbuf;
    chorus_status_t st;

    die(c, chorus_comm_split(c->comm, 0, c->rank, &comm), "chorus_comm_split");
    ipc = ipc_create(c, comm, 1 << 16);
    dbuf = dev_alloc(c, 2 * sizeof hin);
    to_dev(c, dbuf, hin, sizeof hin);
    if (host && c->rank == 0)
        st = chorus__arena_allreduce(comm->arena, hin, hout, 16, CHORUS_FLOAT32, CHORUS_SUM,
                                     "allreduce #1");
    else if (c->rank == 0 || host)
        st = chorus__ipc_arena_run(ipc, CHORUS_COLL_ALLREDUCE, dbuf, (float *)dbuf + 16, 16,
                                   CHORUS_FLOAT32, CHORUS_SUM, 0, 1, NULL, "allreduce #1");
    else
        st = chorus__ipc_arena_run(ipc, CHORUS_COLL_BROADCAST, dbuf, dbuf, 16, CHORUS_FLOAT32,
                                   CHORUS_SUM, 0, 1, NULL, "broadcast #1");
    c->cases++;
    if (st != CHORUS_ERR_MISMATCH)
        fail(c, &k, "got %s (%s), expected a mismatch", chorus_status_string(st),
             chorus_last_error());
    else if (strstr(chorus_last_error(), "rank ") == NULL)
        fail(c, &k, "the message names no peer: %s", chorus_last_error());
    if (c->rank == 1) printf("mismatch (%s) on rank 1: %s\n", k.arena, chorus_last_error());
    c->gpu->free_device(dbuf);
    chorus__ipc_arena_destroy(ipc);
    chorus_comm_destroy(comm);
}

int main(void)
{
    ctx_t c = {0};
    size_t counts[] = {1, 13, 4099};
    int failures = 0;
    chorus_status_t st;

    c.comm = mp_init_env("gpu_ipc_arena", &c.rank, &c.n);
    st = gpu_gate(c.rank == 0);
    if (st != 0) {
        chorus_comm_destroy(c.comm);
        return st;
    }
    c.gpu = chorus__gpu();
    if (c.n < 2) {
        if (c.rank == 0) printf("skipped: the ipc arena needs 2 or more ranks\n");
        chorus_comm_destroy(c.comm);
        return 77;
    }
    die(&c, chorus_comm_set_timeout(c.comm, 60), "chorus_comm_set_timeout");
    die(&c, c.gpu->stream_create(&c.stream), "stream_create");
    die(&c, c.gpu->stream_create(&c.xfer), "stream_create");
    c.keys = calloc((size_t)c.n, sizeof *c.keys);
    for (int r = 0; r < c.n; r++) c.keys[r] = mp_rank_key(SEED, r);

    c.ipc = ipc_create(&c, c.comm, 1 << 20);
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        run_count(&c, "1 MiB", counts[i], counts[i] == 13);
    for (int dt = 0; dt < CHORUS_NUM_DTYPES; dt++) {
        for (int op = 0; op < CHORUS_NUM_OPS; op++) {
            tcase_t k = {CHORUS_COLL_ALLREDUCE, (chorus_dtype_t)dt, op, 20011, 0, dt & 1,
                         "1 MiB"};
            run_case(&c, &k);
        }
    }
    chorus__ipc_arena_destroy(c.ipc);
    /* The smallest slots: 5003 elements take several chunks for every dtype. */
    c.ipc = ipc_create(&c, c.comm, 8192);
    run_count(&c, "8 KiB", 5003, 1);
    chorus__ipc_arena_destroy(c.ipc);

    run_mismatch(&c, 0);
    run_mismatch(&c, 1);

    st = chorus_allreduce(&c.failures, &failures, 1, CHORUS_INT32, CHORUS_SUM, c.comm, NULL);
    die(&c, st, "allreduce of the failure counts");
    if (c.rank == 0) printf("%d cases per rank, %d failures in all\n", c.cases, failures);
    c.gpu->stream_destroy(c.stream);
    c.gpu->stream_destroy(c.xfer);
    free(c.keys);
    chorus_comm_destroy(c.comm);
    return failures == 0 ? 0 : 1;
}
