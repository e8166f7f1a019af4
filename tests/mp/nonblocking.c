/*
 * The nonblocking API (chorus_i*, chorus_wait/test/wait_all), run under chorusrun:
 *
 *   mp_nonblocking --case inflight|order|p2p|errors|abort|destroy|timeout|leak|overlap
 *                  [--ops N] [--ms T]
 *
 * inflight  every collective x several dtypes in flight at once (24 requests), then
 *           waited in reverse order: integer results exact, float results the same bytes
 *           as the blocking call on the same data, on every rank (hash compared)
 * order     N allreduces in flight; once the last is waited for, every earlier one tests
 *           complete (they complete in the order issued); then mixed with blocking calls
 * p2p       isend/irecv exchanges of 1 B..8 MiB (over the shm ring and socket buffers) in
 *           both orders (irecv first, isend first), to self inside a batch, and a ring
 *           shift; contents exact
 * errors    ranks issue allreduces of different counts while others are in flight: the
 *           odd request fails with CHORUS_ERR_MISMATCH (or names the failure), the later
 *           ones fail too, the comm has an async error; bad arguments fail at the call
 * abort     rank 0 issues an allreduce and a barrier that rank 1 never joins; another
 *           thread aborts the comm: both requests end with CHORUS_ERR_ABORTED
 * destroy   rank 0 issues an allreduce rank 1 never joins and destroys the comm: the
 *           request stays valid and ends with CHORUS_ERR_ABORTED
 * timeout   as abort, but with a 1 s deadline: the requests end with CHORUS_ERR_TIMEOUT,
 *           the deadline counted from when each operation started
 * leak      --ops N (default 100000) small allreduces, 8 in flight: threads, fds and RSS
 *           do not grow from the first tenth to the end
 * overlap   a collective of about T ms (--ms, measured alone first) in flight while the
 *           rank computes for the same time: both end in well under the sum (prints the
 *           ratio; meant for a rate-limited network where the collective waits)
 *
 * Exit 0 passes, 1 fails (the reason printed).
 */
#include "mp_common.h"

#include <errno.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>

static int g_rank, g_n;
static int g_fail;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Every rank's hash of buf must equal rank 0's. */
static void check_same_everywhere(chorus_comm_t comm, const void *buf, size_t len,
                                  const char *what)
{
    uint64_t h = mp_hash(buf, len), *all = calloc((size_t)g_n, sizeof *all);
    OK(chorus_allgather(&h, all, 1, CHORUS_UINT64, comm, NULL));
    for (int r = 0; r < g_n; r++) CHECK(all[r] == all[0], "%s: rank %d's bytes differ", what, r);
    free(all);
}

/* ---- inflight ---- */

enum { IF_COUNT = 10007 };

static int32_t ival(int rank, size_t i)
{
    return (int32_t)(mp_rand(mp_rank_key(7, rank), i) % 2001) - 1000;
}

static float fval(int rank, size_t i)
{
    return (float)(mp_unit(mp_rand(mp_rank_key(9, rank), i)) * 2.0 - 1.0);
}

static int case_inflight(chorus_comm_t comm)
{
    const size_t n = IF_COUNT, nr = (size_t)g_n;
    int32_t *ar_in = malloc(n * 4), *ar_out = malloc(n * 4), *ag_out = malloc(n * nr * 4);
    int32_t *rs_in = malloc(n * nr * 4), *rs_out = malloc(n * 4), *bc = malloc(n * 4);
    int32_t *rd_out = malloc(n * 4), *a2a_in = malloc(n * nr * 4), *a2a_out = malloc(n * nr * 4);
    float *f_in = malloc(n * 4), *f_nb = malloc(n * 4), *f_bl = malloc(n * 4);
    double *d_in = malloc(n * 8), *d_nb = malloc(n * 8), *d_bl = malloc(n * 8);
    int64_t *mx = malloc(n * 8), *mn = malloc(n * 8);
    chorus_request_t reqs[24];
    int nreq = 0, root = g_n - 1;

    for (size_t i = 0; i < n; i++) {
        ar_in[i] = ival(g_rank, i);
        bc[i] = g_rank == root ? ival(100, i) : -1;
        f_in[i] = fval(g_rank, i);
        d_in[i] = (double)fval(g_rank, i + n);
        mx[i] = mn[i] = ival(g_rank, i + 2 * n);
    }
    for (size_t i = 0; i < n * nr; i++) {
        rs_in[i] = ival(g_rank, i + 3 * n);
        a2a_in[i] = ival(g_rank, i + 4 * n);
    }
    /* The blocking reference for the floats first: same comm, same sizes, same algorithm. */
    OK(chorus_allreduce(f_in, f_bl, n, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL));
    OK(chorus_allreduce(d_in, d_bl, n, CHORUS_FLOAT64, CHORUS_AVG, comm, NULL));

    OK(chorus_iallreduce(ar_in, ar_out, n, CHORUS_INT32, CHORUS_SUM, comm, &reqs[nreq++]));
    OK(chorus_iallgather(ar_in, ag_out, n, CHORUS_INT32, comm, &reqs[nreq++]));
    OK(chorus_ireduce_scatter(rs_in, rs_out, n, CHORUS_INT32, CHORUS_SUM, comm, &reqs[nreq++]));
    OK(chorus_ibroadcast(bc, bc, n, CHORUS_INT32, root, comm, &reqs[nreq++]));
    OK(chorus_ireduce(ar_in, rd_out, n, CHORUS_INT32, CHORUS_MAX, 0, comm, &reqs[nreq++]));
    OK(chorus_ialltoall(a2a_in, a2a_out, n, CHORUS_INT32, comm, &reqs[nreq++]));
    OK(chorus_ibarrier(comm, &reqs[nreq++]));
    OK(chorus_iallreduce(f_in, f_nb, n, CHORUS_FLOAT32, CHORUS_SUM, comm, &reqs[nreq++]));
    OK(chorus_iallreduce(d_in, d_nb, n, CHORUS_FLOAT64, CHORUS_AVG, comm, &reqs[nreq++]));
    OK(chorus_iallreduce(mx, mx, n, CHORUS_INT64, CHORUS_MAX, comm, &reqs[nreq++]));
    OK(chorus_iallreduce(mn, mn, n, CHORUS_INT64, CHORUS_MIN, comm, &reqs[nreq++]));
    OK(chorus_iallreduce(NULL, NULL, 0, CHORUS_INT32, CHORUS_SUM, comm, &reqs[nreq++]));
    /* Waited in reverse: the last completes after all the others. */
    for (int k = nreq - 1; k >= 0; k--) {
        OK(chorus_wait(&reqs[k]));
        CHECK(reqs[k] == NULL, "chorus_wait left request %d set", k);
    }
    for (size_t i = 0; i < n; i++) {
        int64_t sum = 0, max = INT64_MIN, mn_want = INT64_MAX, mx_want = INT64_MIN;
        int32_t rmax = INT32_MIN;
        for (int r = 0; r < g_n; r++) {
            sum += ival(r, i);
            if (ival(r, i) > rmax) rmax = ival(r, i);
            if (ival(r, i + 2 * n) > mx_want) mx_want = ival(r, i + 2 * n);
            if (ival(r, i + 2 * n) < mn_want) mn_want = ival(r, i + 2 * n);
        }
        max = rmax;
        CHECK(ar_out[i] == (int32_t)sum, "allreduce[%zu] = %d, want %lld", i, ar_out[i],
              (long long)sum);
        CHECK(bc[i] == ival(100, i), "broadcast[%zu] = %d", i, bc[i]);
        if (g_rank == 0) CHECK(rd_out[i] == (int32_t)max, "reduce max[%zu] = %d", i, rd_out[i]);
        CHECK(mx[i] == mx_want && mn[i] == mn_want, "int64 max/min[%zu]", i);
        int64_t rs = 0;
        for (int r = 0; r < g_n; r++) rs += ival(r, i + 3 * n + (size_t)g_rank * n);
        CHECK(rs_out[i] == (int32_t)rs, "reduce_scatter[%zu] = %d, want %lld", i, rs_out[i],
              (long long)rs);
        for (int r = 0; r < g_n; r++) {
            CHECK(ag_out[(size_t)r * n + i] == ival(r, i), "allgather[%d][%zu]", r, i);
            CHECK(a2a_out[(size_t)r * n + i] == ival(r, i + 4 * n + (size_t)g_rank * n),
                  "alltoall[%d][%zu]", r, i);
        }
        if (g_fail) break;
    }
    CHECK(memcmp(f_nb, f_bl, n * 4) == 0, "float32 iallreduce differs from the blocking call");
    CHECK(memcmp(d_nb, d_bl, n * 8) == 0, "float64 avg iallreduce differs from the blocking call");
    check_same_everywhere(comm, f_nb, n * 4, "float32 iallreduce");
    check_same_everywhere(comm, d_nb, n * 8, "float64 iallreduce");
    free(ar_in), free(ar_out), free(ag_out), free(rs_in), free(rs_out), free(bc), free(rd_out);
    free(a2a_in), free(a2a_out), free(f_in), free(f_nb), free(f_bl), free(d_in), free(d_nb);
    free(d_bl), free(mx), free(mn);
    return 0;
}

/* ---- order ---- */

static int case_order(chorus_comm_t comm, int nops)
{
    enum { N = 4099 };
    int64_t *bufs = malloc((size_t)nops * N * sizeof *bufs);
    chorus_request_t *reqs = calloc((size_t)nops, sizeof *reqs);

    for (int k = 0; k < nops; k++)
        for (int i = 0; i < N; i++) bufs[(size_t)k * N + i] = (int64_t)k * 1000 + g_rank + i;
    for (int k = 0; k < nops; k++)
        OK(chorus_iallreduce(&bufs[(size_t)k * N], &bufs[(size_t)k * N], N, CHORUS_INT64,
                             CHORUS_SUM, comm, &reqs[k]));
    OK(chorus_wait(&reqs[nops - 1]));
    for (int k = 0; k < nops - 1; k++) {
        int done = 0;
        OK(chorus_test(&reqs[k], &done));
        CHECK(done == 1 && reqs[k] == NULL, "request %d of %d not complete after the last", k,
              nops);
    }
    int64_t base = (int64_t)g_n * (g_n - 1) / 2;
    for (int k = 0; k < nops; k++)
        for (int i = 0; i < N; i++)
            CHECK(bufs[(size_t)k * N + i] == ((int64_t)k * 1000 + i) * g_n + base,
                  "op %d [%d] = %lld", k, i, (long long)bufs[(size_t)k * N + i]);
    /* Nonblocking and blocking calls interleaved keep call order on every rank. */
    int32_t a = g_rank + 1, b = 0, c = 10 * (g_rank + 1);
    chorus_request_t r1, r2;
    OK(chorus_iallreduce(&a, &a, 1, CHORUS_INT32, CHORUS_SUM, comm, &r1));
    OK(chorus_allreduce(&c, &b, 1, CHORUS_INT32, CHORUS_MAX, comm, NULL)); /* waits for r1 */
    int done = 0;
    OK(chorus_test(&r1, &done));
    CHECK(done == 1, "a blocking call returned before the request issued before it");
    OK(chorus_iallreduce(&c, &c, 1, CHORUS_INT32, CHORUS_SUM, comm, &r2));
    OK(chorus_wait_all(1, &r2));
    CHECK(a == g_n * (g_n + 1) / 2 && b == 10 * g_n && c == 10 * g_n * (g_n + 1) / 2,
          "interleaved: %d %d %d", a, b, c);
    free(bufs);
    free(reqs);
    return 0;
}

/* ---- p2p ---- */

static uint8_t pval(int from, int to, size_t i)
{
    return (uint8_t)(mp_rand(mp_rank_key(11, from * 1000 + to), i) & 0xff);
}

static int case_p2p(chorus_comm_t comm)
{
    static const size_t sizes[] = {1, 4096, 1 << 20, 8 << 20};
    int right = (g_rank + 1) % g_n, left = (g_rank + g_n - 1) % g_n;

    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t len = sizes[s];
        uint8_t *out = malloc(len), *in = malloc(len), *self_in = malloc(len);
        for (size_t i = 0; i < len; i++) out[i] = pval(g_rank, right, i);
        for (int order = 0; order < 2; order++) {
            chorus_request_t r[4];
            /* Each receive starts as the complement of what must arrive, so that a byte
             * left unwritten differs from the expected one wherever it is (zeros would
             * pass wherever the pattern holds a zero). */
            for (size_t i = 0; i < len; i++) {
                in[i] = (uint8_t)~pval(left, g_rank, i);
                self_in[i] = (uint8_t)~out[i];
            }
            /* Ring shift, receive posted first on even ranks and in the even round. */
            if ((order + g_rank) % 2 == 0) {
                OK(chorus_irecv(in, len, CHORUS_UINT8, left, comm, &r[0]));
                OK(chorus_isend(out, len, CHORUS_UINT8, right, comm, &r[1]));
            } else {
                OK(chorus_isend(out, len, CHORUS_UINT8, right, comm, &r[1]));
                OK(chorus_irecv(in, len, CHORUS_UINT8, left, comm, &r[0]));
            }
            /* To self, in the same batch. */
            OK(chorus_isend(out, len, CHORUS_UINT8, g_rank, comm, &r[2]));
            OK(chorus_irecv(self_in, len, CHORUS_UINT8, g_rank, comm, &r[3]));
            OK(chorus_wait_all(4, r));
            size_t bad = 0;
            for (size_t i = 0; i < len; i++) bad += in[i] != pval(left, g_rank, i);
            CHECK(bad == 0, "%zu bytes from rank %d: %zu wrong", len, left, bad);
            CHECK(memcmp(self_in, out, len) == 0, "%zu bytes to self differ", len);
        }
        free(out), free(in), free(self_in);
    }
    /* A send with no match on the peer fails the batch at run time, not at the call... but
     * here every rank has its match: a final collective proves the streams are in step. */
    int32_t x = 1;
    OK(chorus_allreduce(&x, &x, 1, CHORUS_INT32, CHORUS_SUM, comm, NULL));
    CHECK(x == g_n, "allreduce after the exchanges: %d", x);
    return 0;
}

/* ---- errors ---- */

static int case_errors(chorus_comm_t comm)
{
    int32_t buf[64] = {0};
    chorus_request_t r[3] = {NULL, NULL, NULL}, bad = (chorus_request_t)0x1;
    chorus_status_t st;

    /* Argument errors are errors of the call: no request. */
    st = chorus_iallreduce(buf, buf, 4, CHORUS_NUM_DTYPES, CHORUS_SUM, comm, &bad);
    CHECK(st == CHORUS_ERR_INVALID_ARGUMENT && bad == NULL, "bad dtype: %d", st);
    st = chorus_iallreduce(buf, buf, 4, CHORUS_INT32, CHORUS_SUM, comm, NULL);
    CHECK(st == CHORUS_ERR_INVALID_ARGUMENT, "NULL req_p: %d", st);
    st = chorus_isend(buf, 4, CHORUS_INT32, g_n, comm, &bad);
    CHECK(st == CHORUS_ERR_INVALID_ARGUMENT && strstr(chorus_last_error(), "peer") != NULL,
          "peer out of range: %d %s", st, chorus_last_error());
    st = chorus_wait(NULL);
    CHECK(st == CHORUS_ERR_INVALID_ARGUMENT, "chorus_wait(NULL): %d", st);
    OK(chorus_wait(&r[0])); /* a NULL request is complete */

    /* Rank 1 calls with another count: a mismatch, caught in flight. */
    size_t count = g_rank == 1 ? 17 : 16;
    OK(chorus_iallreduce(buf, buf, 8, CHORUS_INT32, CHORUS_SUM, comm, &r[0]));
    OK(chorus_iallreduce(buf, buf, count, CHORUS_INT32, CHORUS_SUM, comm, &r[1]));
    OK(chorus_iallreduce(buf, buf, 8, CHORUS_INT32, CHORUS_SUM, comm, &r[2]));
    OK(chorus_wait(&r[0]));
    st = chorus_wait(&r[1]);
    CHECK(st == CHORUS_ERR_MISMATCH || st == CHORUS_ERR_REMOTE,
          "the mismatched request: %s: %s", chorus_status_string(st), chorus_last_error());
    CHECK(strstr(chorus_last_error(), "allreduce") != NULL, "message does not name it: %s",
          chorus_last_error());
    printf("rank %d: mismatched request: %s: %s\n", g_rank, chorus_status_string(st),
           chorus_last_error());
    st = chorus_wait(&r[2]);
    CHECK(st != CHORUS_SUCCESS && strstr(chorus_last_error(), "failed earlier") != NULL,
          "the request after it: %s: %s", chorus_status_string(st), chorus_last_error());
    chorus_status_t async;
    OK(chorus_comm_get_async_error(comm, &async));
    CHECK(async != CHORUS_SUCCESS, "no async error after a failed request");
    st = chorus_iallreduce(buf, buf, 8, CHORUS_INT32, CHORUS_SUM, comm, &bad);
    CHECK(st != CHORUS_SUCCESS && bad == NULL, "a call on the failed comm: %d", st);
    return 0;
}

/* ---- abort, destroy, timeout ---- */

static void *abort_later(void *arg)
{
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    chorus_comm_abort(arg);
    return NULL;
}

static int case_stuck(chorus_comm_t *comm_p, const char *how)
{
    chorus_comm_t comm = *comm_p;
    static float buf[1 << 16];
    chorus_request_t r[2];
    chorus_status_t st, want;
    pthread_t t;
    double t0;

    /* Rank 1 never joins: it only waits for rank 0's verdict at the end. */
    if (g_rank != 0) {
        if (strcmp(how, "destroy") == 0 || strcmp(how, "timeout") == 0 ||
            strcmp(how, "abort") == 0) {
            sleep(strcmp(how, "timeout") == 0 ? 4 : 2);
        }
        return 0;
    }
    if (strcmp(how, "timeout") == 0) OK(chorus_comm_set_timeout(comm, 1.0));
    t0 = now_ms();
    OK(chorus_iallreduce(buf, buf, 1 << 16, CHORUS_FLOAT32, CHORUS_SUM, comm, &r[0]));
    OK(chorus_ibarrier(comm, &r[1]));
    if (strcmp(how, "abort") == 0) {
        want = CHORUS_ERR_ABORTED;
        pthread_create(&t, NULL, abort_later, comm);
        st = chorus_wait(&r[0]);
        CHECK(st == want, "aborted request: %s: %s", chorus_status_string(st), chorus_last_error());
        st = chorus_wait(&r[1]);
        CHECK(st == want, "the request after it: %s: %s", chorus_status_string(st),
              chorus_last_error());
        pthread_join(t, NULL);
    } else if (strcmp(how, "destroy") == 0) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        OK(chorus_comm_destroy(comm));
        *comm_p = NULL;
        st = chorus_wait(&r[0]);
        CHECK(st == CHORUS_ERR_ABORTED, "request after destroy: %s: %s",
              chorus_status_string(st), chorus_last_error());
        st = chorus_wait(&r[1]);
        CHECK(st == CHORUS_ERR_ABORTED, "second request after destroy: %s",
              chorus_status_string(st));
    } else {
        st = chorus_wait(&r[0]);
        double ms = now_ms() - t0;
        CHECK(st == CHORUS_ERR_TIMEOUT, "request past its deadline: %s: %s",
              chorus_status_string(st), chorus_last_error());
        CHECK(ms > 900 && ms < 20000, "timed out after %.0f ms with a 1 s deadline", ms);
        st = chorus_wait(&r[1]);
        CHECK(st != CHORUS_SUCCESS, "the request after it succeeded");
    }
    printf("rank 0: %s: requests in flight ended after %.0f ms\n", how, now_ms() - t0);
    return 0;
}

/* ---- leak ---- */

/* rss_kb is RssAnon, the process's private memory: VmRSS also counts the pages of the
 * shared-memory rings, which a run touches a little further along at every message until
 * each ring has been gone round once (measured: 4 ranks over shm, +14 MB over the first
 * 1,000,000 operations, +0 over the next 1,000,000), and which are no leak. */
static void proc_counts(long *threads, long *fds, long *rss_kb)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    *threads = *rss_kb = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "Threads:", 8) == 0) *threads = atol(line + 8);
        if (strncmp(line, "RssAnon:", 8) == 0) *rss_kb = atol(line + 8);
    }
    if (f != NULL) fclose(f);
    *fds = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) *fds += e->d_name[0] != '.';
    if (d != NULL) closedir(d);
}

static int case_leak(chorus_comm_t comm, int nops)
{
    enum { WINDOW = 8, N = 64 };
    int32_t bufs[WINDOW][N];
    chorus_request_t r[WINDOW] = {NULL};
    long th0 = 0, fd0 = 0, rss0 = 0, th, fd, rss;

    for (int k = 0; k < nops && !g_fail; k++) {
        int w = k % WINDOW;
        if (r[w] != NULL) {
            OK(chorus_wait(&r[w]));
            CHECK(bufs[w][N - 1] == g_n * (k - WINDOW), "op %d: %d", k - WINDOW, bufs[w][N - 1]);
        }
        /* Every 16th step also exchanges with the neighbours, while allreduces fly. */
        if (k % 16 == 15 && g_n > 1) {
            chorus_request_t x[2];
            int32_t out = k, in = -1;
            OK(chorus_isend(&out, 1, CHORUS_INT32, (g_rank + 1) % g_n, comm, &x[0]));
            OK(chorus_irecv(&in, 1, CHORUS_INT32, (g_rank + g_n - 1) % g_n, comm, &x[1]));
            OK(chorus_wait_all(2, x));
            CHECK(in == k, "exchange %d got %d", k, in);
        }
        for (int i = 0; i < N; i++) bufs[w][i] = k;
        OK(chorus_iallreduce(bufs[w], bufs[w], N, CHORUS_INT32, CHORUS_SUM, comm, &r[w]));
        if (k == nops / 10) {
            OK(chorus_wait_all(WINDOW, r));
            proc_counts(&th0, &fd0, &rss0);
        }
    }
    OK(chorus_wait_all(WINDOW, r));
    proc_counts(&th, &fd, &rss);
    printf("rank %d: after %d ops: threads %ld -> %ld, fds %ld -> %ld, private rss %ld -> %ld "
           "kB\n", g_rank, nops, th0, th, fd0, fd, rss0, rss);
    CHECK(th == th0 && fd == fd0, "threads or fds grew");
    CHECK(rss < rss0 + 2048, "RSS grew by %ld kB", rss - rss0);
    return 0;
}

/* ---- overlap ---- */

static volatile double g_sink;

/* About ms of CPU work on this thread. */
static void compute_for(double ms)
{
    double t0 = now_ms(), x = 1.0;
    while (now_ms() - t0 < ms)
        for (int i = 0; i < 10000; i++) x = x * 1.0000001 + 1e-9;
    g_sink = x;
}

static int case_overlap(chorus_comm_t comm, int ms_target)
{
    size_t count = 1 << 16;
    float *buf = calloc(1 << 24, sizeof *buf);
    double t_comm = 0, t_both;
    chorus_request_t r;

    /* Grow the message until the collective alone takes about the target (rank 0's time
     * decides for everyone). */
    for (;;) {
        double t0 = now_ms(), t;
        OK(chorus_allreduce(buf, buf, count, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL));
        t = now_ms() - t0;
        OK(chorus_broadcast(&t, &t, 1, CHORUS_FLOAT64, 0, comm, NULL));
        t_comm = t;
        if (t >= ms_target || count >= (1u << 24)) break;
        count *= 2;
    }
    double best = 1e30;
    for (int round = 0; round < 3; round++) {
        OK(chorus_barrier(comm));
        double t0 = now_ms();
        OK(chorus_iallreduce(buf, buf, count, CHORUS_FLOAT32, CHORUS_SUM, comm, &r));
        compute_for(t_comm);
        OK(chorus_wait(&r));
        t_both = now_ms() - t0;
        OK(chorus_allreduce(&t_both, &t_both, 1, CHORUS_FLOAT64, CHORUS_MAX, comm, NULL));
        if (t_both < best) best = t_both;
    }
    if (g_rank == 0)
        printf("overlap: %zu floats, collective alone %.1f ms, compute %.1f ms, both at once "
               "%.1f ms = %.2f of the sum\n",
               count, t_comm, t_comm, best, best / (2 * t_comm));
    CHECK(best < 1.5 * t_comm, "no overlap: %.1f ms for both, %.1f ms each", best, t_comm);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *which = NULL;
    int nops = 0, ms = 200;
    chorus_comm_t comm;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--case") == 0) which = argv[i + 1];
        else if (strcmp(argv[i], "--ops") == 0) nops = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--ms") == 0) ms = atoi(argv[i + 1]);
    }
    if (which == NULL) {
        fprintf(stderr, "usage: mp_nonblocking --case inflight|order|p2p|errors|abort|destroy|"
                        "timeout|leak|overlap [--ops N] [--ms T]\n");
        return 2;
    }
    if (chorus_comm_init_env(&comm) != CHORUS_SUCCESS) {
        fprintf(stderr, "init: %s\n", chorus_last_error());
        return 1;
    }
    chorus_comm_rank(comm, &g_rank);
    chorus_comm_size(comm, &g_n);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(which, "inflight") == 0) case_inflight(comm);
    else if (strcmp(which, "order") == 0) case_order(comm, nops > 0 ? nops : 64);
    else if (strcmp(which, "p2p") == 0) case_p2p(comm);
    else if (strcmp(which, "errors") == 0 && g_n >= 2) case_errors(comm);
    else if (strcmp(which, "abort") == 0 || strcmp(which, "destroy") == 0 ||
             strcmp(which, "timeout") == 0)
        case_stuck(&comm, which);
    else if (strcmp(which, "leak") == 0) case_leak(comm, nops > 0 ? nops : 100000);
    else if (strcmp(which, "overlap") == 0) case_overlap(comm, ms);
    else {
        fprintf(stderr, "unknown case %s (errors needs 2 ranks)\n", which);
        return 2;
    }
    chorus_comm_destroy(comm);
    if (!g_fail) printf("rank %d: %s: ok\n", g_rank, which);
    return g_fail;
}
