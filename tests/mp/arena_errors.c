/*
 * Failure cases of the shared arena (lib/arena), run with CHORUS_ALGO=arena under
 * chorusrun on 2 or more ranks, for one collective (--coll, default allreduce; any of
 * allreduce allgather reduce_scatter broadcast reduce alltoall barrier). Each case needs a
 * fresh job, since after an error the communicator is failed:
 *
 *   --case mismatch-dtype   rank 0 calls with float32, the others int32 of the same size:
 *                           everyone gets CHORUS_ERR_MISMATCH
 *   --case mismatch-count   rank 0 a small vector (flat path), the others a large one
 *                           (staged path): CHORUS_ERR_MISMATCH, and no rank writes past
 *                           its buffers
 *   --case mismatch-root    (broadcast, reduce) rank 0 names root 0, the others root 1
 *   --case mismatch-coll    rank 0 calls the collective, the others an allgather (a
 *                           broadcast when the collective is allgather) of the same count
 *   --case timeout          the last rank comes late: the others get CHORUS_ERR_TIMEOUT
 *                           naming it, at the deadline (CHORUS_TIMEOUT, at most 5 s), and
 *                           the late one an error at once (at its second call at the latest)
 *   --case dead             the last rank exits: the others get an error naming it within
 *                           seconds, not at the deadline
 *
 * In a broadcast or a reduce a rank may return before it heard from every peer (the
 * writers do not wait for the readers, as an eager send would not, and a broadcast reader
 * waits for the root alone), so it learns of a mismatch, a late or a dead peer at its next
 * call: for those two collectives these cases make one (a barrier) and check either. Every call is in place on a buffer between guard zones. Exits 0 when the case behaved,
 * 1 when not, 77 ("skipped: ...") when the arena does not run the collective here.
 */
#include "mp/mp_common.h"

#include <getopt.h>

#define GUARD 64

static int failures;

static void expect(int ok, int rank, const char *fmt, const char *detail)
{
    if (ok) return;
    printf("FAIL rank %d: ", rank);
    printf(fmt, detail);
    printf("\n");
    failures++;
}

/* The status must be `want`, and the message must mention `needle` (NULL: anything). */
static void expect_error(chorus_status_t st, chorus_status_t want, const char *needle, int rank)
{
    const char *msg = chorus_last_error();

    expect(st == want, rank, "got %s", chorus_status_string(st));
    if (st == want) printf("rank %d: %s as expected: %s\n", rank, chorus_status_string(st), msg);
    if (needle != NULL) expect(strstr(msg, needle) != NULL, rank, "message lacks the peer: %s",
                               msg);
}

/* A buffer of count floats between two guard zones, to catch overruns. */
static float *guarded(size_t count)
{
    unsigned char *p = malloc(count * sizeof(float) + 2 * GUARD);

    if (p == NULL) exit(1);
    memset(p, 0xa5, count * sizeof(float) + 2 * GUARD);
    for (size_t i = 0; i < count; i++) ((float *)(void *)(p + GUARD))[i] = 1.0f;
    return (float *)(void *)(p + GUARD);
}

static int guards_intact(const float *buf, size_t count)
{
    const unsigned char *p = (const unsigned char *)buf;

    for (size_t i = 0; i < GUARD; i++)
        if (p[-1 - (long)i] != 0xa5 || p[count * sizeof(float) + i] != 0xa5) return 0;
    return 1;
}

static const char *coll_name = "allreduce";
static int nranks;

/* One in-place call of the collective `name` on buf (nranks * count floats; only the
 * first count used by allreduce, broadcast and reduce), dtype and root as given. */
static chorus_status_t call(const char *name, float *buf, size_t count, chorus_dtype_t dtype,
                            int root, int rank, chorus_comm_t comm)
{
    size_t esize = chorus_dtype_size(dtype);
    char *b = (char *)buf;

    if (strcmp(name, "allreduce") == 0)
        return chorus_allreduce(buf, buf, count, dtype, CHORUS_SUM, comm, NULL);
    if (strcmp(name, "allgather") == 0)
        return chorus_allgather(b + (size_t)rank * count * esize, buf, count, dtype, comm, NULL);
    if (strcmp(name, "reduce_scatter") == 0)
        return chorus_reduce_scatter(buf, b + (size_t)rank * count * esize, count, dtype,
                                     CHORUS_SUM, comm, NULL);
    if (strcmp(name, "broadcast") == 0)
        return chorus_broadcast(buf, buf, count, dtype, root, comm, NULL);
    if (strcmp(name, "reduce") == 0)
        return chorus_reduce(buf, buf, count, dtype, CHORUS_SUM, root, comm, NULL);
    if (strcmp(name, "alltoall") == 0)
        return chorus_alltoall(buf, buf, count, dtype, comm, NULL);
    return chorus_barrier(comm);
}

/* Nonzero when `name` may return on this rank before it has heard from every peer: the
 * writers of a broadcast or reduce do not wait for the readers, and a reader of a
 * broadcast waits for the root alone. */
static int eager(const char *name)
{
    return strcmp(name, "broadcast") == 0 || strcmp(name, "reduce") == 0;
}

/* For an eager rank whose call succeeded: the next call must report what went wrong. */
static chorus_status_t then_barrier(chorus_status_t st, int is_eager, chorus_comm_t comm)
{
    if (st != CHORUS_SUCCESS || !is_eager) return st;
    return chorus_barrier(comm);
}

static void case_mismatch(int rank, const char *how, chorus_comm_t comm)
{
    int by_count = strcmp(how, "count") == 0, by_dtype = strcmp(how, "dtype") == 0;
    int by_root = strcmp(how, "root") == 0, by_coll = strcmp(how, "coll") == 0;
    size_t count = by_count && rank != 0 ? 1 << 20 : 16;
    const char *mine = coll_name;
    char who[32];
    float *buf = guarded(count * (size_t)nranks);
    chorus_status_t st;

    if (by_coll && rank != 0)
        mine = strcmp(coll_name, "allgather") == 0 ? "broadcast" : "allgather";
    int root = by_root && rank != 0 ? 1 : 0, is_eager = eager(mine);

    st = call(mine, buf, count, by_dtype && rank != 0 ? CHORUS_INT32 : CHORUS_FLOAT32, root,
              rank, comm);
    st = then_barrier(st, is_eager, comm);
    /* Every rank sees some peer that called something else: rank 0 sees rank 1, the
     * others see rank 0; a rank may instead hear from a peer that found the mismatch
     * first, which is a mismatch too (issue 18), naming that peer. */
    snprintf(who, sizeof who, "rank %d called", rank == 0 ? 1 : 0);
    if (st == CHORUS_ERR_MISMATCH && strstr(chorus_last_error(), who) == NULL)
        expect_error(st, CHORUS_ERR_MISMATCH, "found that the ranks' calls differ", rank);
    else
        expect_error(st, CHORUS_ERR_MISMATCH, who, rank);
    expect(guards_intact(buf, count * (size_t)nranks), rank, "%s",
           "the call wrote outside its buffer");
    free((unsigned char *)buf - GUARD);
}

static void case_timeout(int rank, int n, chorus_comm_t comm)
{
    const char *t = getenv("CHORUS_TIMEOUT");
    double timeout = t != NULL ? atof(t) : 0, t0;
    float buf[4 * 16];
    char who[32];
    chorus_status_t st;

    for (int i = 0; i < 4 * 16; i++) buf[i] = 1.0f;
    if (timeout <= 0 || timeout > 5) {
        printf("FAIL rank %d: run with CHORUS_TIMEOUT between 0 and 5 seconds\n", rank);
        failures++;
        return;
    }
    if (rank == n - 1) {
        usleep((useconds_t)((timeout + 1.5) * 1e6));
        /* The others published their vectors before they gave up, so this first call may
         * still complete; the next one has nobody to meet and must fail at once, since the
         * others marked themselves failed. */
        t0 = mp_now();
        st = call(coll_name, buf, 4, CHORUS_FLOAT32, 0, rank, comm);
        if (st == CHORUS_SUCCESS) st = chorus_barrier(comm);
        expect(st != CHORUS_SUCCESS, rank, "%s", "the late rank's call and barrier succeeded");
        expect(mp_now() - t0 < 2.0, rank, "%s", "the late rank waited for the deadline");
        printf("rank %d: late call: %s: %s\n", rank, chorus_status_string(st),
               chorus_last_error());
        return;
    }
    t0 = mp_now();
    st = call(coll_name, buf, 4, CHORUS_FLOAT32, 0, rank, comm);
    st = then_barrier(st, eager(coll_name), comm);
    snprintf(who, sizeof who, "rank(s) %d", n - 1);
    expect_error(st, CHORUS_ERR_TIMEOUT, who, rank);
    expect(mp_now() - t0 >= timeout * 0.9 && mp_now() - t0 < timeout + 1.5, rank, "%s",
           "the timeout did not come at the deadline");
}

static void case_dead(int rank, int n, chorus_comm_t comm)
{
    float buf[4 * 16];
    char who[32];
    double t0;
    chorus_status_t st;

    for (int i = 0; i < 4 * 16; i++) buf[i] = 1.0f;
    if (rank == n - 1) {
        fflush(stdout);
        _exit(0);
    }
    t0 = mp_now();
    st = call(coll_name, buf, 4, CHORUS_FLOAT32, 0, rank, comm);
    st = then_barrier(st, eager(coll_name), comm);
    snprintf(who, sizeof who, "rank %d", n - 1);
    expect(st != CHORUS_SUCCESS, rank, "%s", "a call without the dead rank succeeded");
    expect(strstr(chorus_last_error(), who) != NULL, rank, "message lacks the peer: %s",
           chorus_last_error());
    expect(mp_now() - t0 < 10.0, rank, "%s", "the dead peer was noticed only at the deadline");
    printf("rank %d: %s: %s\n", rank, chorus_status_string(st), chorus_last_error());
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"case", required_argument, NULL, 'c'},
                                         {"coll", required_argument, NULL, 'l'},
                                         {0, 0, 0, 0}};
    const char *which = NULL, *algo = NULL;
    chorus_comm_t comm;
    int rank, n, c;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'c') which = optarg;
        else if (c == 'l') coll_name = optarg;
        else return 2;
    }
    if (which == NULL) {
        fprintf(stderr, "usage: mp_arena_errors --case mismatch-dtype|mismatch-count|"
                        "mismatch-root|mismatch-coll|timeout|dead [--coll NAME]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    comm = mp_init_env("mp_arena_errors", &rank, &n);
    nranks = n;
    if (n < 2 || chorus_algorithm_name(comm, coll_name, 16, CHORUS_FLOAT32, &algo) !=
                     CHORUS_SUCCESS || strcmp(algo, "arena") != 0) {
        printf("skipped: the arena does not run %s here (%d ranks, algorithm %s; set "
               "CHORUS_ALGO=arena)\n", coll_name, n, algo != NULL ? algo : "?");
        chorus_comm_destroy(comm);
        return 77;
    }
    if (strncmp(which, "mismatch-", 9) == 0 &&
        (strcmp(which + 9, "dtype") == 0 || strcmp(which + 9, "count") == 0 ||
         strcmp(which + 9, "root") == 0 || strcmp(which + 9, "coll") == 0))
        case_mismatch(rank, which + 9, comm);
    else if (strcmp(which, "timeout") == 0) case_timeout(rank, n, comm);
    else if (strcmp(which, "dead") == 0) case_dead(rank, n, comm);
    else {
        fprintf(stderr, "mp_arena_errors: unknown case %s\n", which);
        return 2;
    }
    chorus_comm_destroy(comm);
    return failures == 0 ? 0 : 1;
}
