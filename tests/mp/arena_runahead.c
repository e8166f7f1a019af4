/*
 * Back-to-back rooted collectives on the shared arena, checked after every call. The root
 * of a broadcast and the non-roots of a reduce read nothing, so they return without waiting
 * for the others and may start the next call while the readers still copy out of this
 * one (lib/arena/arena_coll.c); this drives that run-ahead through every pairing of
 * broadcast, reduce, allgather and allreduce, with rotating roots, on the inline, flat and
 * staged paths, and checks every value of every call on every rank; then broadcasts whose
 * sizes alternate between the eager rings and the other paths, as DDP's start-up makes.
 *
 *   chorusrun -n N mp_arena_runahead [--iters N]     (CHORUS_ALGO=arena; exit 77 without it)
 */
#include "mp/mp_common.h"

#include <getopt.h>

static int failures;

/* Value of element i of rank r's input in call k. */
static int32_t value(int k, int r, size_t i)
{
    return (int32_t)((k * 131 + r * 17 + (int)(i % 1000) * 3) % 100003);
}

static void check(const char *what, int k, int rank, size_t i, int32_t got, int32_t want)
{
    if (got == want || failures > 10) return;
    printf("FAIL rank %d: call %d (%s) element %zu: got %d, expected %d\n", rank, k, what, i,
           (int)got, (int)want);
    failures++;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"iters", required_argument, NULL, 'i'}, {0, 0, 0, 0}};
    static const size_t counts[] = {1, 2, 100, 300, 5000, 200003};
    int rank, n, c, iters = 700;
    const char *algo = NULL;
    chorus_comm_t comm;
    int32_t *send, *recv;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'i') iters = atoi(optarg);
        else return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    comm = mp_init_env("mp_arena_runahead", &rank, &n);
    if (n < 2 || chorus_algorithm_name(comm, "broadcast", 16, CHORUS_INT32, &algo) !=
                     CHORUS_SUCCESS || strcmp(algo, "arena") != 0) {
        printf("skipped: the arena does not run broadcast here (%d ranks, algorithm %s; set "
               "CHORUS_ALGO=arena)\n", n, algo != NULL ? algo : "?");
        chorus_comm_destroy(comm);
        return 77;
    }
    send = malloc(200003 * sizeof *send * (size_t)n);
    recv = malloc(200003 * sizeof *recv * (size_t)n);
    if (send == NULL || recv == NULL) return 1;
    for (int k = 0; k < iters && failures == 0; k++) {
        size_t count = counts[(k / 4) % (sizeof counts / sizeof counts[0])];
        /* In every 700 calls: 100 that mix all four with rotating roots, then 300 small
         * broadcasts from one root and 300 small reduces to one root, so that their writers
         * run as far ahead as the eager rings let them and wrap around them (128 entries). */
        int at = k % 700, phase = at < 100 ? 0 : at < 400 ? 1 : 2;
        int root = phase == 1 ? 0 : phase == 2 ? n - 1 : (k / 2) % n;
        int kind = phase == 0 ? k % 4 : phase - 1;
        chorus_status_t st = CHORUS_SUCCESS;

        /* Large counts are slow on oversubscribed cores: one in eight calls. */
        if (count > 10000 && k % 8 != 0) count = 5000;
        if (phase != 0 && count > 100) count = 100;
        for (size_t i = 0; i < count; i++) send[i] = value(k, rank, i);
        memset(recv, 0xcc, count * sizeof *recv * (size_t)n);
        switch (kind) {
        case 0: /* broadcast, in place on the root every other time */
            if (rank == root && k % 8 == 0) memcpy(recv, send, count * sizeof *send);
            st = chorus_broadcast(rank == root && k % 8 == 0 ? recv : send, recv, count,
                                  CHORUS_INT32, root, comm, NULL);
            for (size_t i = 0; i < count && st == CHORUS_SUCCESS; i++)
                check("broadcast", k, rank, i, recv[i], value(k, root, i));
            break;
        case 1: /* reduce, NULL recvbuf off the root */
            st = chorus_reduce(send, rank == root ? recv : NULL, count, CHORUS_INT32,
                               CHORUS_SUM, root, comm, NULL);
            for (size_t i = 0; i < count && rank == root && st == CHORUS_SUCCESS; i++) {
                int32_t want = 0;
                for (int r = 0; r < n; r++) want += value(k, r, i);
                check("reduce", k, rank, i, recv[i], want);
            }
            break;
        case 2:
            st = chorus_allgather(send, recv, count, CHORUS_INT32, comm, NULL);
            for (int r = 0; r < n && st == CHORUS_SUCCESS; r++)
                for (size_t i = 0; i < count; i++)
                    check("allgather", k, rank, i, recv[(size_t)r * count + i], value(k, r, i));
            break;
        default:
            st = chorus_allreduce(send, recv, count, CHORUS_INT32, CHORUS_MAX, comm, NULL);
            for (size_t i = 0; i < count && st == CHORUS_SUCCESS; i++) {
                int32_t want = value(k, 0, i);
                for (int r = 1; r < n; r++) want = value(k, r, i) > want ? value(k, r, i) : want;
                check("allreduce", k, rank, i, recv[i], want);
            }
            break;
        }
        if (st != CHORUS_SUCCESS) {
            printf("FAIL rank %d: call %d: %s: %s\n", rank, k, chorus_status_string(st),
                   chorus_last_error());
            failures++;
        }
    }
    /* Broadcasts from rank 0 whose sizes alternate between the eager rings (up to 1 KiB)
     * and the other paths, as DDP's start-up makes them: the root of a larger one returns
     * at once and runs on into the next small ones while its readers, still in the larger
     * one, compare the hashes of the small ones made before it (a check that read the
     * root's current hash reported a mismatch that was not). */
    static const size_t startup[] = {36, 6792, 2048, 64, 4096, 64, 512};
    for (int k = 0; k < 280 && failures == 0; k++) {
        size_t count = startup[k % 7];
        chorus_status_t st;
        for (size_t i = 0; i < count; i++) send[i] = value(k + 100000, rank, i);
        memset(recv, 0xcc, count * sizeof *recv);
        st = chorus_broadcast(send, recv, count, CHORUS_INT32, 0, comm, NULL);
        if (st != CHORUS_SUCCESS) {
            printf("FAIL rank %d: start-up broadcast %d (%zu elements): %s: %s\n", rank, k,
                   count, chorus_status_string(st), chorus_last_error());
            failures++;
            break;
        }
        for (size_t i = 0; i < count; i++)
            check("start-up broadcast", k, rank, i, recv[i], value(k + 100000, 0, i));
    }
    if (failures == 0) printf("rank %d: %d calls checked\n", rank, iters + 280);
    free(send);
    free(recv);
    chorus_comm_destroy(comm);
    return failures == 0 ? 0 : 1;
}
