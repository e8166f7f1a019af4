/*
 * Tagged point to point (chorus_tagged_isend/irecv), run under chorusrun:
 *
 *   mp_tagged --case order|any|self|flood|mismatch|timeout|refuse|destroy|destroy_held
 *
 * order     every rank sends every other rank messages of 0 B..4 MiB under tags 0..K-1
 *           (and three under one tag); receivers post them in reverse tag order: each
 *           lands by its tag, the three of one tag in the order sent; contents exact
 * any       every rank sends every other rank two messages; receivers take them all from
 *           CHORUS_ANY_SOURCE: each sender's rank reported, its two in order, contents
 *           exact, and every sender counted exactly twice
 * self      sends to self matched by receives posted before and after
 * flood     2000 messages of random tags and sizes between each pair, received in a
 *           shuffled order: everything held and matched right
 * mismatch  rank 0 sends 10 int32 under tag 3, rank 1 receives 12: both requests end
 *           CHORUS_ERR_MISMATCH naming the other side's count; the comm goes on
 * timeout   with a 1 s deadline, rank 0 sends tag 1 and rank 1 receives tag 2: both end
 *           CHORUS_ERR_TIMEOUT, rank 1's message names the held tag 1; then (told by a
 *           tag-9 message) rank 1 receives tag 1 after all, and the comm goes on
 * refuse    bad arguments fail at the call; a collective on a tagged comm is refused
 * destroy   a receive nothing matches, then destroy: its request ends CHORUS_ERR_ABORTED
 * destroy_held  rank 1 destroys the comm while rank 0's 64 MiB message arrives into memory
 *           held for it: no leak or double free (ASan), rank 1's receive ends ABORTED,
 *           rank 0's send fails rather than hangs
 *
 * Exit 0 passes, 1 fails (the reason printed).
 */
#include "mp_common.h"

static int g_rank, g_n;
static int g_fail;

/* The value of element i of the message (src -> dst, tag, k-th of that tag). */
static uint32_t val(int src, int dst, int tag, int k, size_t i)
{
    return (uint32_t)mp_rand(mp_rank_key(((uint64_t)dst << 32) | (uint64_t)(tag * 8 + k), src),
                             i);
}

static uint32_t *message(int src, int dst, int tag, int k, size_t n)
{
    uint32_t *b = malloc(n * sizeof *b + 1);
    for (size_t i = 0; i < n; i++) b[i] = val(src, dst, tag, k, i);
    return b;
}

static void check_message(const uint32_t *b, int src, int dst, int tag, int k, size_t n,
                          const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] != val(src, dst, tag, k, i)) {
            CHECK(0, "%s: from %d tag %d #%d: element %zu of %zu is %u, not %u", what, src, tag,
                  k, i, n, b[i], val(src, dst, tag, k, i));
            return;
        }
    }
}

/* Receive buffers start as the complement of what must arrive. */
static uint32_t *poisoned(int src, int dst, int tag, int k, size_t n)
{
    uint32_t *b = message(src, dst, tag, k, n);
    for (size_t i = 0; i < n; i++) b[i] = ~b[i];
    return b;
}

/* ---- order ---- */

enum { ORDER_TAGS = 12, SAME_TAG = 100, SAME_K = 3 };

static size_t order_count(int tag)
{
    static const size_t counts[ORDER_TAGS] = {0, 1, 7, 1024, 3, 1 << 20, 255, 65536, 2, 9999,
                                              17, 300000};
    return counts[tag];
}

static void case_order(chorus_comm_t comm)
{
    int n = g_n, me = g_rank, nmsg = ORDER_TAGS + SAME_K;
    chorus_request_t *reqs = calloc((size_t)(2 * n * nmsg), sizeof *reqs);
    uint32_t **bufs = calloc((size_t)(2 * n * nmsg), sizeof *bufs);
    int nr = 0;

    /* Receives first, in reverse tag order, from every peer. */
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        for (int t = ORDER_TAGS - 1; t >= 0; t--) {
            bufs[nr] = poisoned(p, me, t, 0, order_count(t));
            OK(chorus_tagged_irecv(bufs[nr], order_count(t), CHORUS_UINT32, p, t, comm, NULL,
                                   &reqs[nr]));
            nr++;
        }
        for (int k = 0; k < SAME_K; k++) {
            bufs[nr] = poisoned(p, me, SAME_TAG, k, 1000);
            OK(chorus_tagged_irecv(bufs[nr], 1000, CHORUS_UINT32, p, SAME_TAG, comm, NULL,
                                   &reqs[nr]));
            nr++;
        }
    }
    int ns = nr;
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        /* Same-tag messages first, then tags in increasing order. */
        for (int k = 0; k < SAME_K; k++) {
            bufs[ns] = message(me, p, SAME_TAG, k, 1000);
            OK(chorus_tagged_isend(bufs[ns], 1000, CHORUS_UINT32, p, SAME_TAG, comm, &reqs[ns]));
            ns++;
        }
        for (int t = 0; t < ORDER_TAGS; t++) {
            bufs[ns] = message(me, p, t, 0, order_count(t));
            OK(chorus_tagged_isend(bufs[ns], order_count(t), CHORUS_UINT32, p, t, comm,
                                   &reqs[ns]));
            ns++;
        }
    }
    /* Wait for the sends first: they can complete only once the receives took them. */
    for (int i = ns - 1; i >= 0; i--) OK(chorus_wait(&reqs[i]));
    nr = 0;
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        for (int t = ORDER_TAGS - 1; t >= 0; t--, nr++)
            check_message(bufs[nr], p, me, t, 0, order_count(t), "order");
        for (int k = 0; k < SAME_K; k++, nr++)
            check_message(bufs[nr], p, me, SAME_TAG, k, 1000, "order (one tag)");
    }
    for (int i = 0; i < ns; i++) free(bufs[i]);
    free(bufs);
    free(reqs);
}

/* ---- any ---- */

static void case_any(chorus_comm_t comm)
{
    int n = g_n, me = g_rank, m = 2 * (n - 1);
    chorus_request_t *sreq = calloc((size_t)m + 1, sizeof *sreq);
    uint32_t **sbuf = calloc((size_t)m + 1, sizeof *sbuf);
    int *count = calloc((size_t)n, sizeof *count), ns = 0;

    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        for (int k = 0; k < 2; k++) {
            sbuf[ns] = message(me, p, 5, k, 4096);
            OK(chorus_tagged_isend(sbuf[ns], 4096, CHORUS_UINT32, p, 5, comm, &sreq[ns]));
            ns++;
        }
    }
    uint32_t *r = malloc(4096 * sizeof *r);
    for (int i = 0; i < m; i++) {
        chorus_request_t req;
        int src = -7;
        memset(r, 0xA5, 4096 * sizeof *r);
        OK(chorus_tagged_irecv(r, 4096, CHORUS_UINT32, CHORUS_ANY_SOURCE, 5, comm, &src, &req));
        OK(chorus_wait(&req));
        CHECK(src >= 0 && src < n && src != me, "any: source %d", src);
        if (src < 0 || src >= n || src == me) continue;
        check_message(r, src, me, 5, count[src], 4096, "any");
        count[src]++;
    }
    for (int p = 0; p < n; p++)
        if (p != me) CHECK(count[p] == 2, "any: %d messages from rank %d, not 2", count[p], p);
    for (int i = 0; i < ns; i++) {
        OK(chorus_wait(&sreq[i]));
        free(sbuf[i]);
    }
    free(r);
    free(count);
    free(sbuf);
    free(sreq);
}

/* ---- self ---- */

static void case_self(chorus_comm_t comm)
{
    uint32_t *a = message(g_rank, g_rank, 1, 0, 333), *b = poisoned(g_rank, g_rank, 1, 0, 333);
    chorus_request_t s, r;
    int src = -1;

    /* The receive first, then the send; then the other way round (held message). */
    OK(chorus_tagged_irecv(b, 333, CHORUS_UINT32, g_rank, 1, comm, &src, &r));
    OK(chorus_tagged_isend(a, 333, CHORUS_UINT32, g_rank, 1, comm, &s));
    OK(chorus_wait(&s));
    OK(chorus_wait(&r));
    check_message(b, g_rank, g_rank, 1, 0, 333, "self (receive first)");
    CHECK(src == g_rank, "self: source %d", src);
    memset(b, 0, 333 * sizeof *b);
    OK(chorus_tagged_isend(a, 333, CHORUS_UINT32, g_rank, 1, comm, &s));
    src = -1;
    OK(chorus_tagged_irecv(b, 333, CHORUS_UINT32, CHORUS_ANY_SOURCE, 1, comm, &src, &r));
    OK(chorus_wait(&r));
    OK(chorus_wait(&s));
    check_message(b, g_rank, g_rank, 1, 0, 333, "self (send first)");
    CHECK(src == g_rank, "self: source %d", src);
    free(a);
    free(b);
}

/* ---- flood ---- */

enum { FLOOD = 2000, FLOOD_TAGS = 37 };

static void case_flood(chorus_comm_t comm)
{
    int n = g_n, me = g_rank;
    /* Message j between src and dst: tag and size from (src, dst, j); the k-th of its tag
     * is that tag's count of earlier j. Receives are posted in a shuffled order of tags,
     * with the k-th receive of a tag taking the k-th message. */
    size_t total = (size_t)FLOOD * (size_t)(n - 1);
    chorus_request_t *reqs = calloc(2 * total, sizeof *reqs);
    uint32_t **bufs = calloc(2 * total, sizeof *bufs);
    int *rtag = calloc(total, sizeof *rtag), *rk = calloc(total, sizeof *rk),
        *rsrc = calloc(total, sizeof *rsrc);
    size_t *rn = calloc(total, sizeof *rn), nr = 0, ns = 0;
    int kseen[FLOOD_TAGS];

    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        size_t first = nr;
        memset(kseen, 0, sizeof kseen);
        for (int j = 0; j < FLOOD; j++) {
            uint64_t x = mp_rand(mp_rank_key(7, p * 1000 + me), (uint64_t)j);
            rtag[nr] = (int)(x % FLOOD_TAGS);
            rn[nr] = (size_t)((x >> 8) % 700);
            rk[nr] = kseen[rtag[nr]]++;
            rsrc[nr] = p;
            nr++;
        }
        /* Shuffle this peer's receives, keeping each tag's own order (stable by k). */
        for (size_t i = nr - 1; i > first; i--) {
            size_t j = first + (size_t)(mp_rand(mp_rank_key(9, me), i) % (i - first + 1));
            int t = rtag[i]; rtag[i] = rtag[j]; rtag[j] = t;
            size_t c = rn[i]; rn[i] = rn[j]; rn[j] = c;
            int k = rk[i]; rk[i] = rk[j]; rk[j] = k;
        }
        /* Re-number k in posting order per tag (the k-th posted receive of a tag takes the
         * k-th message); sizes then follow the message, so look them up again. */
        memset(kseen, 0, sizeof kseen);
        for (size_t i = first; i < nr; i++) rk[i] = kseen[rtag[i]]++;
        for (size_t i = first; i < nr; i++) {
            int seen = 0;
            for (int j = 0; j < FLOOD; j++) {
                uint64_t x = mp_rand(mp_rank_key(7, p * 1000 + me), (uint64_t)j);
                if ((int)(x % FLOOD_TAGS) != rtag[i]) continue;
                if (seen++ == rk[i]) {
                    rn[i] = (size_t)((x >> 8) % 700);
                    break;
                }
            }
        }
    }
    /* Sends, interleaved with this rank's receives half-way (some held, some posted). */
    size_t half = nr / 2;
    for (size_t i = 0; i < half; i++)
        OK(chorus_tagged_irecv(bufs[i] = poisoned(rsrc[i], me, rtag[i], rk[i], rn[i]), rn[i],
                               CHORUS_UINT32, rsrc[i], rtag[i], comm, NULL, &reqs[i]));
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        memset(kseen, 0, sizeof kseen);
        for (int j = 0; j < FLOOD; j++) {
            uint64_t x = mp_rand(mp_rank_key(7, me * 1000 + p), (uint64_t)j);
            int tag = (int)(x % FLOOD_TAGS);
            size_t cnt = (size_t)((x >> 8) % 700);
            size_t s = total + ns++;
            bufs[s] = message(me, p, tag, kseen[tag]++, cnt);
            OK(chorus_tagged_isend(bufs[s], cnt, CHORUS_UINT32, p, tag, comm, &reqs[s]));
        }
    }
    for (size_t i = half; i < nr; i++)
        OK(chorus_tagged_irecv(bufs[i] = poisoned(rsrc[i], me, rtag[i], rk[i], rn[i]), rn[i],
                               CHORUS_UINT32, rsrc[i], rtag[i], comm, NULL, &reqs[i]));
    OK(chorus_wait_all(2 * total, reqs));
    for (size_t i = 0; i < nr; i++) check_message(bufs[i], rsrc[i], me, rtag[i], rk[i], rn[i],
                                                  "flood");
    for (size_t i = 0; i < 2 * total; i++) free(bufs[i]);
    free(bufs);
    free(reqs);
    free(rtag);
    free(rk);
    free(rsrc);
    free(rn);
}

/* ---- mismatch, timeout ---- */

static void case_mismatch(chorus_comm_t comm)
{
    int32_t buf[12] = {0};
    chorus_request_t req;
    chorus_status_t st;

    if (g_rank == 0) {
        OK(chorus_tagged_isend(buf, 10, CHORUS_INT32, 1, 3, comm, &req));
        st = chorus_wait(&req);
        CHECK(st == CHORUS_ERR_MISMATCH && strstr(chorus_last_error(), "12 x int32") != NULL,
              "mismatch: send ended %s: %s", chorus_status_string(st), chorus_last_error());
        printf("rank 0: %s\n", chorus_last_error());
    } else if (g_rank == 1) {
        OK(chorus_tagged_irecv(buf, 12, CHORUS_INT32, 0, 3, comm, NULL, &req));
        st = chorus_wait(&req);
        CHECK(st == CHORUS_ERR_MISMATCH && strstr(chorus_last_error(), "10 x int32") != NULL,
              "mismatch: recv ended %s: %s", chorus_status_string(st), chorus_last_error());
        printf("rank 1: %s\n", chorus_last_error());
    }
    /* The comm goes on. */
    if (g_rank <= 1) {
        int32_t v = 41 + g_rank, w = 0;
        chorus_request_t rr;
        OK(chorus_tagged_isend(&v, 1, CHORUS_INT32, 1 - g_rank, 4, comm, &req));
        OK(chorus_tagged_irecv(&w, 1, CHORUS_INT32, 1 - g_rank, 4, comm, NULL, &rr));
        OK(chorus_wait(&rr));
        OK(chorus_wait(&req));
        CHECK(w == 42 - g_rank, "after the mismatch: got %d", w);
    }
}

static void case_timeout(chorus_comm_t comm)
{
    int32_t v = 7, w = 0, go = 1;
    chorus_request_t req;
    chorus_status_t st;

    OK(chorus_comm_set_timeout(comm, 1.0));
    if (g_rank == 0) {
        OK(chorus_tagged_isend(&v, 1, CHORUS_INT32, 1, 1, comm, &req));
        st = chorus_wait(&req);
        CHECK(st == CHORUS_ERR_TIMEOUT && strstr(chorus_last_error(), "rank 1") != NULL,
              "timeout: send ended %s: %s", chorus_status_string(st), chorus_last_error());
        printf("rank 0: %s\n", chorus_last_error());
        /* Only now may rank 1 take the message (tag 9 says so): nothing breaks. */
        OK(chorus_tagged_isend(&go, 1, CHORUS_INT32, 1, 9, comm, &req));
        OK(chorus_wait(&req));
    } else if (g_rank == 1) {
        OK(chorus_tagged_irecv(&w, 1, CHORUS_INT32, 0, 2, comm, NULL, &req));
        st = chorus_wait(&req);
        CHECK(st == CHORUS_ERR_TIMEOUT && strstr(chorus_last_error(), "tag 1 (1 x int32) from "
                                                 "rank 0") != NULL,
              "timeout: recv ended %s: %s", chorus_status_string(st), chorus_last_error());
        printf("rank 1: %s\n", chorus_last_error());
        OK(chorus_tagged_irecv(&go, 1, CHORUS_INT32, 0, 9, comm, NULL, &req));
        OK(chorus_wait(&req));
        OK(chorus_tagged_irecv(&w, 1, CHORUS_INT32, 0, 1, comm, NULL, &req));
        OK(chorus_wait(&req));
        CHECK(w == 7, "the held message: got %d", w);
    }
}

/* ---- refuse, destroy ---- */

static void expect(chorus_status_t st, chorus_status_t want, const char *needle, const char *what)
{
    CHECK(st == want && strstr(chorus_last_error(), needle) != NULL, "%s: %s (%s), wanted %s "
          "naming \"%s\"", what, chorus_status_string(st), chorus_last_error(),
          chorus_status_string(want), needle);
}

static void case_refuse(chorus_comm_t comm)
{
    int32_t v = 0;
    chorus_request_t req = NULL;

    expect(chorus_tagged_isend(&v, 1, CHORUS_INT32, 0, -1, comm, &req),
           CHORUS_ERR_INVALID_ARGUMENT, "tag -1", "negative tag");
    expect(chorus_tagged_isend(&v, 1, CHORUS_INT32, CHORUS_ANY_SOURCE, 0, comm, &req),
           CHORUS_ERR_INVALID_ARGUMENT, "out of range", "any-source send");
    expect(chorus_tagged_irecv(&v, 1, CHORUS_INT32, g_n, 0, comm, NULL, &req),
           CHORUS_ERR_INVALID_ARGUMENT, "out of range", "peer n");
    expect(chorus_tagged_irecv(NULL, 1, CHORUS_INT32, 0, 0, comm, NULL, &req),
           CHORUS_ERR_INVALID_ARGUMENT, "buf is NULL", "NULL buffer");
    expect(chorus_tagged_irecv(&v, 1, (chorus_dtype_t)99, 0, 0, comm, NULL, &req),
           CHORUS_ERR_INVALID_ARGUMENT, "dtype", "bad dtype");
    expect(chorus_tagged_irecv(&v, 1, CHORUS_INT32, 0, 0, comm, NULL, NULL),
           CHORUS_ERR_INVALID_ARGUMENT, "req_p", "NULL req_p");
    expect(chorus_tagged_irecv(&v, 1, CHORUS_INT32, 0, 0, NULL, NULL, &req),
           CHORUS_ERR_INVALID_ARGUMENT, "comm is NULL", "NULL comm");
    CHECK(req == NULL, "a refused call left a request");
    /* A self exchange makes the comm tagged; then collectives are refused. */
    chorus_request_t s, r;
    OK(chorus_tagged_isend(&v, 1, CHORUS_INT32, g_rank, 0, comm, &s));
    OK(chorus_tagged_irecv(&v, 1, CHORUS_INT32, g_rank, 0, comm, NULL, &r));
    OK(chorus_wait(&s));
    OK(chorus_wait(&r));
    expect(chorus_allreduce(&v, &v, 1, CHORUS_INT32, CHORUS_SUM, comm, NULL),
           CHORUS_ERR_INVALID_ARGUMENT, "tagged sends and receives only", "allreduce");
    expect(chorus_send(&v, 1, CHORUS_INT32, g_rank, comm, NULL), CHORUS_ERR_INVALID_ARGUMENT,
           "tagged sends and receives only", "send");
    chorus_comm_t sub;
    expect(chorus_comm_split(comm, 0, g_rank, &sub), CHORUS_ERR_INVALID_ARGUMENT,
           "tagged sends and receives only", "split");
}

static void case_destroy(chorus_comm_t *comm_p)
{
    int32_t v = 0;
    chorus_request_t req;

    OK(chorus_tagged_irecv(&v, 1, CHORUS_INT32, CHORUS_ANY_SOURCE, 77, *comm_p, NULL, &req));
    chorus_comm_destroy(*comm_p);
    *comm_p = NULL;
    expect(chorus_wait(&req), CHORUS_ERR_ABORTED, "destroyed", "pending receive at destroy");
}

/* A message arriving into held memory when its receiver destroys the comm: nothing leaks or
 * is freed twice (run under ASan), the receiver's pending receive ends ABORTED, and the
 * sender's send fails (its peer left) instead of hanging. */
static void case_destroy_held(chorus_comm_t *comm_p)
{
    const size_t n = (size_t)16 << 20;
    chorus_request_t req;
    chorus_status_t st;

    if (g_rank == 0) {
        uint32_t *big = calloc(n, sizeof *big);
        OK(chorus_tagged_isend(big, n, CHORUS_UINT32, 1, 5, *comm_p, &req));
        st = chorus_wait(&req);
        CHECK(st != CHORUS_SUCCESS, "destroy_held: the send to a rank that left succeeded");
        printf("rank 0: the send ended %s: %s\n", chorus_status_string(st), chorus_last_error());
        free(big);
    } else if (g_rank == 1) {
        int32_t v;
        struct timespec ts = {0, 20 * 1000 * 1000};
        OK(chorus_tagged_irecv(&v, 1, CHORUS_INT32, 0, 99, *comm_p, NULL, &req));
        nanosleep(&ts, NULL);
        chorus_comm_destroy(*comm_p);
        *comm_p = NULL;
        expect(chorus_wait(&req), CHORUS_ERR_ABORTED, "destroyed", "pending receive at destroy");
    }
}

int main(int argc, char **argv)
{
    const char *which = NULL;
    chorus_comm_t comm, tc;

    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], "--case") == 0) which = argv[i + 1];
    if (which == NULL) {
        fprintf(stderr, "usage: mp_tagged --case order|any|self|flood|mismatch|timeout|refuse|"
                        "destroy|destroy_held\n");
        return 2;
    }
    if (chorus_comm_init_env(&comm) != CHORUS_SUCCESS) {
        fprintf(stderr, "init: %s\n", chorus_last_error());
        return 1;
    }
    chorus_comm_rank(comm, &g_rank);
    chorus_comm_size(comm, &g_n);
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Tagged traffic on a comm of its own, as include/chorus.h advises; the first comm
     * stays for collectives (the barrier at the end). */
    if (chorus_comm_split(comm, 0, g_rank, &tc) != CHORUS_SUCCESS) {
        fprintf(stderr, "split: %s\n", chorus_last_error());
        return 1;
    }
    if (strcmp(which, "order") == 0) case_order(tc);
    else if (strcmp(which, "any") == 0) case_any(tc);
    else if (strcmp(which, "self") == 0) case_self(tc);
    else if (strcmp(which, "flood") == 0) case_flood(tc);
    else if (strcmp(which, "mismatch") == 0 && g_n >= 2) case_mismatch(tc);
    else if (strcmp(which, "timeout") == 0 && g_n >= 2) case_timeout(tc);
    else if (strcmp(which, "refuse") == 0) case_refuse(tc);
    else if (strcmp(which, "destroy") == 0) case_destroy(&tc);
    else if (strcmp(which, "destroy_held") == 0 && g_n >= 2) case_destroy_held(&tc);
    else {
        fprintf(stderr, "unknown case %s (mismatch, timeout, destroy_held need 2 ranks)\n",
                which);
        return 2;
    }
    /* Everyone is done before anyone's tagged comm closes. */
    OK(chorus_barrier(comm));
    chorus_comm_destroy(tc);
    chorus_comm_destroy(comm);
    if (!g_fail) printf("rank %d: %s: ok\n", g_rank, which);
    return g_fail;
}
