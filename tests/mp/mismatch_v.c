/*
 * Ranks that disagree about the counts of gather, scatter and the v-forms (issue 41), under
 * chorusrun over shm, tcp or ucx:
 *
 *   mp_mismatch_v --case gather-count|gather-root|scatter-count|allgatherv|reduce_scatterv|
 *                        alltoallv|alltoallv-zero
 *
 * The last rank (the odd one) differs from the others:
 *   gather-count     sends 5 elements instead of 4
 *   gather-root      names root 1 instead of 0 (on 3 ranks or more: the root is in the middle)
 *   scatter-count    expects 5 elements instead of 4
 *   allgatherv       its recvcounts say rank 0 has 6 elements, the others' 5 (the odd rank's
 *                    own data is the same everywhere)
 *   reduce_scatterv  its recvcounts give rank 0 one element more and itself one less (the
 *                    same total: only the hash of the array tells)
 *   alltoallv        it sends rank 0 three elements where rank 0 expects two
 *   alltoallv-zero   it sends rank 0 nothing where rank 0 expects two
 *
 * The odd rank and rank 0, whose counts it contradicts in every case, must fail with
 * CHORUS_ERR_MISMATCH naming both sides, within the deadline. So must every rank of
 * allgatherv and reduce_scatterv, whose rings carry every block through every rank (a rank
 * that never exchanged with the odd rank hears it from a peer that left over the mismatch).
 * On one host the calls run on the shared arena, where every rank compares every rank's
 * signature (alltoallv: every pair's counts) before it reads: there every rank must fail.
 * On schedules (tcp, ucx, CHORUS_ARENA=0), in gather, scatter and alltoallv a rank that
 * exchanges nothing with the odd rank nor with a rank that found the mismatch before its own
 * part ended cannot tell (as in tests/mp/mismatch.c's rooted cases): it may succeed, but
 * then with the result a correct call gives, and its next call must fail. Nothing is written outside the buffers, and the
 * next call on the failed communicator fails at once.
 * Exits 0 when the case behaved, 1 when not.
 */
#include "mp/mp_common.h"

#include <getopt.h>

#define CAP 4096 /* elements of each buffer: more than any case moves */

static int failures;
static int on_arena; /* the call runs on the shared arena: every rank must fail */

static void expect(int ok, int rank, const char *what, const char *detail)
{
    if (ok) return;
    printf("FAIL rank %d: %s: %s\n", rank, what, detail);
    failures++;
}

static chorus_status_t call_case(const char *which, int rank, int n, chorus_comm_t comm,
                                 int32_t *send, int32_t *recv)
{
    const int odd = rank == n - 1;
    size_t c[64], d[64], sc[64], sd[64], rc[64], rd[64], off = 0;

    for (int p = 0; p < n; p++) c[p] = 5, d[p] = 8 * (size_t)p;
    if (strcmp(which, "gather-count") == 0)
        return chorus_gather(send, recv, odd ? 5 : 4, CHORUS_INT32, 0, comm, NULL);
    if (strcmp(which, "gather-root") == 0)
        return chorus_gather(send, recv, 4, CHORUS_INT32, odd ? 1 : 0, comm, NULL);
    if (strcmp(which, "scatter-count") == 0)
        return chorus_scatter(send, recv, odd ? 5 : 4, CHORUS_INT32, 0, comm, NULL);
    if (strcmp(which, "allgatherv") == 0) {
        if (odd) c[0] = 6;
        return chorus_allgatherv(send, recv, 5, c, d, CHORUS_INT32, comm, NULL);
    }
    if (strcmp(which, "reduce_scatterv") == 0) {
        if (odd) c[0] = 6, c[n - 1] = 4;
        return chorus_reduce_scatterv(send, recv, c, CHORUS_INT32, CHORUS_SUM, comm, NULL);
    }
    if (strncmp(which, "alltoallv", 9) == 0) {
        for (int p = 0; p < n; p++) {
            sc[p] = rc[p] = 2;
            sd[p] = rd[p] = off;
            off += 4;
        }
        if (odd) sc[0] = strcmp(which, "alltoallv") == 0 ? 3 : 0;
        return chorus_alltoallv(send, recv, sc, sd, rc, rd, CHORUS_INT32, comm, NULL);
    }
    fprintf(stderr, "mp_mismatch_v: unknown case %s\n", which);
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"case", required_argument, NULL, 'c'}, {0, 0, 0, 0}};
    const char *which = NULL, *t = getenv("CHORUS_TIMEOUT"), *msg;
    double timeout = t != NULL ? atof(t) : 0, t0, dt;
    const size_t bytes = CAP * sizeof(int32_t);
    unsigned char *send, *recv;
    chorus_comm_t comm;
    chorus_status_t st;
    int rank, n, c;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'c') which = optarg;
        else return 2;
    }
    if (which == NULL) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (timeout <= 0 || timeout > 10) {
        printf("FAIL: run with CHORUS_TIMEOUT between 0 and 10 seconds\n");
        return 1;
    }
    comm = mp_init_env("mp_mismatch_v", &rank, &n);
    if (n < 2 || n > 64) {
        printf("skipped: mismatches need 2 to 64 ranks (%d)\n", n);
        chorus_comm_destroy(comm);
        return 77;
    }
    /* Where the call runs, as the library says (every rank gets the same answer). */
    {
        char coll[32];
        const char *algo = "";
        snprintf(coll, sizeof coll, "%.*s", (int)strcspn(which, "-"), which);
        if (chorus_algorithm_name(comm, coll, 4, CHORUS_INT32, &algo) != CHORUS_SUCCESS) {
            printf("FAIL rank %d: chorus_algorithm_name(%s): %s\n", rank, coll,
                   chorus_last_error());
            return 1;
        }
        on_arena = strcmp(algo, "arena") == 0;
        if (rank == 0) printf("%s runs on %s\n", coll, algo);
    }
    send = mp_guarded(bytes);
    recv = mp_guarded(bytes);
    memset(send, 1, bytes);
    t0 = mp_now();
    st = call_case(which, rank, n, comm, (int32_t *)(void *)send, (int32_t *)(void *)recv);
    dt = mp_now() - t0;
    msg = chorus_last_error();
    printf("rank %d: %s after %.3f s: %s\n", rank, chorus_status_string(st), dt, msg);
    const int ring = strcmp(which, "allgatherv") == 0 || strcmp(which, "reduce_scatterv") == 0;
    if (st == CHORUS_SUCCESS && !ring && !on_arena && rank != 0 && rank != n - 1) {
        /* Uninvolved: its own part was right. gather and scatter's non-roots move only their
         * own block; alltoallv: its blocks from the agreeing ranks. */
        const int32_t *r = (const int32_t *)(void *)recv;
        if (strncmp(which, "alltoallv", 9) == 0 || strcmp(which, "scatter-count") == 0)
            for (int i = 0; i < 2; i++)
                expect(r[i] == 0x01010101, rank, "a call that succeeded left wrong data", which);
    } else {
        expect(st == CHORUS_ERR_MISMATCH, rank, "want CHORUS_ERR_MISMATCH", msg);
        expect(strstr(msg, "rank ") != NULL, rank, "the message names no rank", msg);
    }
    /* The odd rank and rank 0 (which it contradicts in every case) name both calls, or
     * heard first that a peer left over the mismatch, whose own error names them. */
    if (rank == n - 1 || rank == 0)
        expect(strstr(msg, " but rank ") != NULL || strstr(msg, "calls differ") != NULL ||
                   strstr(msg, "counts with rank") != NULL ||
                   (strstr(msg, " called ") != NULL && strstr(msg, "this rank ") != NULL),
               rank, "the message lacks both sides", msg);
    expect(dt < timeout + 2.0, rank, "the call waited past the deadline", which);
    expect(mp_guards_intact(send, bytes) && mp_guards_intact(recv, bytes), rank,
           "a call wrote outside its buffers", which);
    t0 = mp_now();
    st = chorus_barrier(comm);
    expect(st != CHORUS_SUCCESS, rank, "a barrier after the mismatch succeeded", which);
    expect(mp_now() - t0 < 1.0, rank, "a barrier on the failed communicator waited", which);
    mp_guarded_free(send);
    mp_guarded_free(recv);
    chorus_comm_destroy(comm);
    return failures == 0 ? 0 : 1;
}
