/*
 * Reproducible reductions (chorus.h, chorus_comm_set_reproducible) on the rank count the
 * launcher gives, run by tests/run_tests.sh on 1 to 8 ranks.
 *
 * Every rank generates every rank's input (values depend only on seed, rank and index), so
 * each can compute the expected result itself and compare bytes:
 *   level 1: the rank-order fold x0 op x1 op ... op x(n-1), two operands at a time with
 *            chorus_kernel_reduce (then chorus_kernel_divide for AVG);
 *   level 2: chorus_kernel_reduce_exact over the n inputs (the correctly rounded sum, or
 *            sum / n for AVG; unit/test_reduce_exact checks that kernel against big-integer
 *            arithmetic).
 * The calls run on communicators split with each algorithm (CHORUS_ALGO: ring, tree, rd,
 * rabenseifner, swing, hier, arena, direct, auto), chunk size (CHORUS_CHUNK_SIZE 64K and
 * 4M) and transport (CHORUS_TRANSPORT shm, tcp, ucx where built; --quick: one each),
 * for allreduce, reduce_scatter and reduce (roots 0 and n-1), in and out of place, float32,
 * float64, bfloat16 and float16 with exponents spread wide and sums that cancel: every one
 * must give the expected bytes, so they all agree with each other and on every rank.
 *
 * Level 2 also gets data whose multiset does not depend on the rank count: element i's
 * nonzero values are the same K numbers on every rank count (two families: K = min(n, 3)
 * and K = min(n, 5)), the other ranks hold +0, and which rank holds which value rotates
 * with i. The expected bytes are then the same on every n >= K: the test prints their
 * digest, and tests/run_tests.sh checks that 3 to 8 ranks (K = 3) and 5 to 8 (K = 5)
 * printed the same.
 */
#include "mp_common.h"

#include "kernels.h"
#include "util/config.h"

#include <math.h>

#define SEED 0x5EED0F0E5EEDull

static int g_rank, g_n, g_fail;

static const chorus_dtype_t dtypes[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_BFLOAT16,
                                        CHORUS_FLOAT16};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])
static const size_t counts[] = {3, 4099, 70001};
#define NCOUNTS (sizeof counts / sizeof counts[0])

typedef struct {
    const char *algo, *transport, *chunk;
    chorus_comm_t comm;
} variant_t;

/* ---- Data ---- */

/* An adversarial value of dt for (rank, index): magnitudes over most of the exponent range,
 * and on a third of the elements values that cancel across ranks (a big one on even ranks,
 * its negation on the next, plus a small one). */
static double value(chorus_dtype_t dt, int rank, size_t i)
{
    const uint64_t r = mp_rand(mp_rank_key(SEED ^ (uint64_t)dt, rank), i);
    const int span = dt == CHORUS_FLOAT16 ? 24 : dt == CHORUS_FLOAT64 ? 600 : 200;
    const double sign = (r & 1) ? -1.0 : 1.0;
    const int e = (int)((r >> 8) % (uint64_t)span) - span / 2;
    double v = sign * ldexp(1.0 + mp_unit(r), e);

    if (i % 3 == 0) {
        /* Cancellation: the pair (2k, 2k+1) holds b and -b, b shared by the pair. */
        const uint64_t q = mp_rand(mp_rank_key(SEED ^ (uint64_t)dt, rank & ~1), i);
        const double b = ldexp(1.0 + mp_unit(q), (int)((q >> 8) % 12));
        v = ((rank & 1) ? -b : b) + ldexp(v, -span / 4);
    }
    return v;
}

/* Rank `rank`'s input of n elements: family 0 is value(); family K > 0 is the rank-count
 * independent multiset (see the top). */
static void fill(chorus_dtype_t dt, int family, int rank, void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v;
        if (family == 0) {
            v = value(dt, rank, i);
        } else {
            const int k = (rank + (int)(i % (size_t)g_n)) % g_n; /* which value it holds */
            v = k < family ? value(dt, k, i) : 0.0;
        }
        mp_put_float(dt, buf, i, v);
    }
}

/* ---- Expected results ---- */

static void expected(chorus_dtype_t dt, chorus_op_t op, int level, int family, size_t total,
                     void *out)
{
    const size_t es = mp_dtype_size(dt);
    void **in = calloc((size_t)g_n, sizeof *in);
    chorus_status_t st = CHORUS_SUCCESS;

    for (int r = 0; r < g_n; r++) {
        in[r] = malloc(total * es);
        fill(dt, family, r, in[r], total);
    }
    if (level == 2 && (op == CHORUS_SUM || op == CHORUS_AVG)) {
        st = chorus_kernel_reduce_exact(out, (const void *const *)in, g_n, total, dt,
                                        op == CHORUS_AVG ? (uint64_t)g_n : 1);
    } else {
        memcpy(out, in[0], total * es);
        for (int r = 1; r < g_n && st == CHORUS_SUCCESS; r++)
            st = chorus_kernel_reduce(out, out, in[r], total, dt,
                                      op == CHORUS_AVG ? CHORUS_SUM : op);
        if (st == CHORUS_SUCCESS && op == CHORUS_AVG)
            st = chorus_kernel_divide(out, total, dt, (uint64_t)g_n);
    }
    if (st != CHORUS_SUCCESS) {
        fprintf(stderr, "rank %d: reference: %s\n", g_rank, chorus_last_error());
        exit(1);
    }
    for (int r = 0; r < g_n; r++) free(in[r]);
    free(in);
}

/* ---- One call ---- */

typedef enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_REDUCE } coll_t;

typedef struct {
    coll_t coll;
    int root;
    int inplace;
} shape_t;

static const char *coll_name(coll_t c)
{
    return c == C_ALLREDUCE ? "allreduce" : c == C_REDUCE ? "reduce"
                                                                                : "reduce_scatter";
}

/* Runs one call on v and compares with want (the expected vector of `total` elements). */
static void check_call(const variant_t *v, const shape_t *sh, chorus_dtype_t dt, chorus_op_t op,
                       int level, int family, size_t count, const void *want)
{
    const size_t es = mp_dtype_size(dt);
    const int rs = sh->coll == C_REDUCE_SCATTER;
    const size_t total = rs ? count * (size_t)g_n : count;
    unsigned char *send = malloc(total * es), *recv = malloc(total * es);
    void *sbuf = send, *rbuf = recv;
    const void *got, *exp;
    size_t nbytes;
    chorus_status_t st;

    fill(dt, family, g_rank, send, total);
    memset(recv, 0xA5, total * es);
    if (sh->inplace) {
        /* reduce_scatter in place: recvbuf is the rank's block of sendbuf (chorus.h). */
        sbuf = send;
        rbuf = rs ? send + (size_t)g_rank * count * es : send;
    }
    if (sh->coll == C_ALLREDUCE)
        st = chorus_allreduce(sbuf, rbuf, count, dt, op, v->comm, NULL);
    else if (rs)
        st = chorus_reduce_scatter(sbuf, rbuf, count, dt, op, v->comm, NULL);
    else
        st = chorus_reduce(sbuf, rbuf, count, dt, op, sh->root, v->comm, NULL);
    if (st != CHORUS_SUCCESS) {
        fprintf(stderr, "rank %d: %s: %s\n", g_rank, coll_name(sh->coll), chorus_last_error());
        exit(1);
    }
    got = rbuf;
    exp = rs ? (const unsigned char *)want + (size_t)g_rank * count * es : want;
    nbytes = count * es;
    if (sh->coll == C_REDUCE && g_rank != sh->root) nbytes = 0;
    for (size_t i = 0; i < nbytes / es; i++) {
        if (memcmp((const char *)got + i * es, (const char *)exp + i * es, es) == 0) continue;
        fprintf(stderr,
                "rank %d: level %d, family %d, %s %s %s, %zu elements, %s, root %d, algo %s, "
                "transport %s, chunk %s: element %zu is %#llx, expected %#llx\n",
                g_rank, level, family, coll_name(sh->coll), mp_dtype_name(dt), mp_op_name(op),
                count, sh->inplace ? "in place" : "out of place", sh->root, v->algo,
                v->transport, v->chunk, i, (unsigned long long)mp_get_bits(dt, got, i),
                (unsigned long long)mp_get_bits(dt, exp, i));
        g_fail = 1;
        break;
    }
    free(send);
    free(recv);
}

static const shape_t *shapes(size_t *n_p)
{
    static shape_t sh[6];
    const shape_t all[] = {{C_ALLREDUCE, 0, 0}, {C_ALLREDUCE, 0, 1},
                           {C_REDUCE_SCATTER, 0, 0},
                           {C_REDUCE_SCATTER, 0, 1}, {C_REDUCE, 0, 0},
                           {C_REDUCE, 0, 1}};
    memcpy(sh, all, sizeof all);
    sh[5].root = g_n - 1;
    *n_p = 6;
    return sh;
}

/* Every shape on every variant for one (dtype, count, op, level): the expected bytes are
 * computed once. */
static void run_case(variant_t *vars, size_t nvars, chorus_dtype_t dt, size_t count,
                     chorus_op_t op, int level)
{
    const size_t total = count * (size_t)g_n;
    void *want = malloc(total * mp_dtype_size(dt));
    size_t nsh;
    const shape_t *sh = shapes(&nsh);

    expected(dt, op, level, 0, total, want);
    for (size_t k = 0; k < nvars; k++) {
        if (vars[k].comm == NULL) continue;
        if (chorus_comm_set_reproducible(vars[k].comm, level) != CHORUS_SUCCESS) {
            fprintf(stderr, "rank %d: set_reproducible: %s\n", g_rank, chorus_last_error());
            exit(1);
        }
        for (size_t s = 0; s < nsh; s++)
            check_call(&vars[k], &sh[s], dt, op, level, 0, count, want);
    }
    free(want);
}

/* Level 2 on data whose multiset is the same for every rank count >= K. */
static void run_families(const variant_t *v)
{
    const shape_t all = {C_ALLREDUCE, 0, 0};
    const int ks[] = {3, 5};

    chorus_comm_set_reproducible(v->comm, CHORUS_REPRO_EXACT);
    for (size_t d = 0; d < NDTYPES; d++)
        for (size_t k = 0; k < 2; k++) {
            const int family = ks[k] < g_n ? ks[k] : g_n;
            const size_t count = counts[1], es = mp_dtype_size(dtypes[d]);
            void *want = malloc(count * es);
            expected(dtypes[d], CHORUS_SUM, 2, family, count, want);
            check_call(v, &all, dtypes[d], CHORUS_SUM, 2, family, count, want);
            if (g_rank == 0)
                printf("digest: level 2, %d nonzero values an element, %s: %016llx\n", family,
                       mp_dtype_name(dtypes[d]), (unsigned long long)mp_hash(want, count * es));
            free(want);
        }
}

/* ---- Variants ---- */

static void set_or_unset(const char *name, const char *value)
{
    if (value != NULL) setenv(name, value, 1);
    else unsetenv(name);
}

/* A communicator split from world under the variant's settings; 0 when its transport is
 * not built in (then every rank says so and skips it). */
static int make_variant(chorus_comm_t world, variant_t *v)
{
    chorus_status_t st;

    set_or_unset("CHORUS_ALGO", v->algo);
    set_or_unset("CHORUS_TRANSPORT", v->transport);
    set_or_unset("CHORUS_CHUNK_SIZE", v->chunk);
    chorus__config_reload();
    st = chorus_comm_split(world, 0, g_rank, &v->comm);
    unsetenv("CHORUS_ALGO");
    unsetenv("CHORUS_TRANSPORT");
    unsetenv("CHORUS_CHUNK_SIZE");
    chorus__config_reload();
    if (st == CHORUS_ERR_UNSUPPORTED) {
        if (g_rank == 0)
            printf("variant algo %s, transport %s: not built here (%s)\n",
                   v->algo ? v->algo : "auto", v->transport, chorus_last_error());
        return 0;
    }
    if (st != CHORUS_SUCCESS) {
        fprintf(stderr, "rank %d: split (%s, %s, %s): %s\n", g_rank, v->algo, v->transport,
                v->chunk, chorus_last_error());
        exit(1);
    }
    return 1;
}

int main(int argc, char **argv)
{
    variant_t vars[] = {
        {"ring", "shm", "64K", NULL},     {"ring", "tcp", "4M", NULL},
        {"tree", "tcp", "64K", NULL},     {"rabenseifner", "shm", "4M", NULL},
        {"hier", "tcp", "4M", NULL},      {"arena", "shm", NULL, NULL},
        {"direct", "shm", "4M", NULL},    {"direct", "tcp", "64K", NULL},
        {"auto", "ucx", "64K", NULL},     {"auto", "auto", NULL, NULL},
        {"rd", "shm", "64K", NULL},       {"swing", "tcp", "4M", NULL},
    };
    const size_t nvars = sizeof vars / sizeof vars[0];
    const chorus_op_t ops[] = {CHORUS_SUM, CHORUS_AVG, CHORUS_PROD};
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    chorus_comm_t world = mp_init_env("mp_repro", &g_rank, &g_n);
    size_t nmade = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t k = 0; k < nvars; k++) {
        /* --quick (many ranks on few cores): one variant per transport. */
        if (quick && k != 0 && k != 7 && k != 8 && k != 9) continue;
        nmade += make_variant(world, &vars[k]);
    }
    for (size_t d = 0; d < NDTYPES; d++)
        for (size_t c = 0; c < NCOUNTS; c++) {
            /* --quick: the largest count on float32 only. */
            if (quick && c + 1 == NCOUNTS && dtypes[d] != CHORUS_FLOAT32) continue;
            /* SUM on every count; AVG and PROD on the middle one. */
            for (int o = 0; o < (c == 1 ? 3 : 1); o++)
                for (int level = CHORUS_REPRO_ORDER; level <= CHORUS_REPRO_EXACT; level++)
                    run_case(vars, nvars, dtypes[d], counts[c], ops[o], level);
        }
    run_families(vars[0].comm != NULL ? &vars[0] : &vars[nvars - 1]);
    for (size_t k = 0; k < nvars; k++) {
        if (vars[k].comm == NULL) continue;
        chorus_comm_destroy(vars[k].comm);
    }
    chorus_comm_destroy(world);
    if (g_rank == 0)
        printf("mp_repro: %d ranks, %zu configurations: %s\n", g_n, nmade,
               g_fail ? "FAILED" : "ok");
    return g_fail;
}
