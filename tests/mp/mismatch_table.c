/*
 * A table of mismatched calls (issue 18): in each case the last rank (the odd one) calls
 * something else than the others, whatever path each call takes (arena, schedules, eager
 * entries, point-to-point), and every rank that takes part must get CHORUS_ERR_MISMATCH
 * within 1 s although the deadline (CHORUS_TIMEOUT) is far longer, with nothing written
 * outside its buffers. A rank whose call needed nothing from the odd rank (a broadcast's
 * root, a reduce's non-root, a send the transport buffered, a reader whose root agreed
 * with it) may return success, as an eager send does in MPI, and must then get the
 * mismatch from its next call (a barrier), still within the second. The communicator then
 * fails every later call at once.
 *
 *   mp_mismatch_table [--case NAME[,NAME...]] [--list]
 *
 * Host against device buffers is not in this table (it needs the device plugin): see
 * tests/gpu/coll_matrix.c (--host-vs-device).
 *
 * Every case runs on a communicator of its own, split from the one the launcher made, so
 * one case's failure does not touch the next. Point-to-point cases involve rank 0 and the
 * odd rank only; the others sit them out. Rank 0 prints one line per case (how many ranks
 * got the mismatch, the slowest time) and the program exits 0 when every case behaved,
 * 1 when one did not.
 */
#include "mp/mp_common.h"

#include <getopt.h>
#include <time.h>

#define MAX_ELEMS ((size_t)1 << 20) /* per rank and part: the largest count of a case */
#define LIMIT_S 1.0                 /* how soon every rank must know */

typedef enum {
    K_NONE, K_ALLREDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_BROADCAST, K_REDUCE, K_ALLTOALL,
    K_BARRIER, K_SEND, K_RECV
} kind_t;

/* One rank's call; root -1 is the odd rank (the last). */
typedef struct {
    kind_t kind;
    size_t count;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;
} call_t;

typedef struct {
    const char *name;
    call_t others, odd;
} case_t;

#define F32 CHORUS_FLOAT32
#define SUM CHORUS_SUM

static const case_t cases[] = {
    {"allreduce-vs-allgather", {K_ALLREDUCE, 65536, F32, SUM, 0}, {K_ALLGATHER, 65536, F32, SUM, 0}},
    {"allreduce-count", {K_ALLREDUCE, 1000, F32, SUM, 0}, {K_ALLREDUCE, 999, F32, SUM, 0}},
    {"allreduce-dtype", {K_ALLREDUCE, 1000, F32, SUM, 0}, {K_ALLREDUCE, 1000, CHORUS_INT32, SUM, 0}},
    {"allreduce-op", {K_ALLREDUCE, 1000, F32, SUM, 0}, {K_ALLREDUCE, 1000, F32, CHORUS_MAX, 0}},
    {"allreduce-flat-vs-staged", {K_ALLREDUCE, 8, F32, SUM, 0}, {K_ALLREDUCE, MAX_ELEMS, F32, SUM, 0}},
    {"allreduce-vs-barrier", {K_ALLREDUCE, 1000, F32, SUM, 0}, {K_BARRIER, 0, F32, SUM, 0}},
    {"allgather-vs-alltoall", {K_ALLGATHER, 256, F32, SUM, 0}, {K_ALLTOALL, 256, F32, SUM, 0}},
    {"allgather-dtype-size", {K_ALLGATHER, 1000, F32, SUM, 0}, {K_ALLGATHER, 1000, CHORUS_FLOAT64, SUM, 0}},
    {"reduce_scatter-vs-allreduce", {K_REDUCE_SCATTER, 256, F32, SUM, 0}, {K_ALLREDUCE, 256, F32, SUM, 0}},
    {"reduce_scatter-count", {K_REDUCE_SCATTER, 256, F32, SUM, 0}, {K_REDUCE_SCATTER, 255, F32, SUM, 0}},
    {"reduce_scatter-sign", {K_REDUCE_SCATTER, 256, CHORUS_INT32, SUM, 0}, {K_REDUCE_SCATTER, 256, CHORUS_UINT32, SUM, 0}},
    {"broadcast-vs-reduce", {K_BROADCAST, 1000, F32, SUM, 0}, {K_REDUCE, 1000, F32, SUM, 0}},
    {"broadcast-root", {K_BROADCAST, 1000, F32, SUM, 0}, {K_BROADCAST, 1000, F32, SUM, -1}},
    {"broadcast-count", {K_BROADCAST, 100, F32, SUM, 0}, {K_BROADCAST, 99, F32, SUM, 0}},
    {"broadcast-same-bytes", {K_BROADCAST, 1000, F32, SUM, 0}, {K_BROADCAST, 4000, CHORUS_INT8, SUM, 0}},
    {"reduce-root", {K_REDUCE, 1000, F32, SUM, 0}, {K_REDUCE, 1000, F32, SUM, -1}},
    {"reduce-op", {K_REDUCE, 1000, F32, SUM, 0}, {K_REDUCE, 1000, F32, CHORUS_PROD, 0}},
    {"alltoall-count", {K_ALLTOALL, 100, F32, SUM, 0}, {K_ALLTOALL, 101, F32, SUM, 0}},
    {"barrier-vs-broadcast", {K_BARRIER, 0, F32, SUM, 0}, {K_BROADCAST, 2, F32, SUM, 0}},
    {"send-recv-count", {K_SEND, 1000, F32, SUM, 0}, {K_RECV, 999, F32, SUM, 0}},
    /* The same bytes in another type: only the signature tells them apart. */
    {"send-recv-dtype", {K_SEND, 1000, CHORUS_INT32, SUM, 0}, {K_RECV, 1000, F32, SUM, 0}},
    /* The last rank sends to rank 0 while everyone else allreduces. */
    {"allreduce-vs-send", {K_ALLREDUCE, 1000, F32, SUM, 0}, {K_SEND, 1000, F32, SUM, 0}},
    /* The last rank waits for a message from rank 0 while everyone else allgathers. */
    {"allgather-vs-recv", {K_ALLGATHER, 1000, F32, SUM, 0}, {K_RECV, 1000, F32, SUM, 0}},
};
#define NCASES (sizeof cases / sizeof cases[0])

static int failures;

static void expect(int ok, int rank, const char *what, const char *detail)
{
    if (ok) return;
    printf("FAIL rank %d: %s: %s\n", rank, what, detail);
    failures++;
}

/* Nonzero if name is one of the comma-separated names of list. */
static int listed(const char *list, const char *name)
{
    size_t len = strlen(name);

    for (const char *p = list; p != NULL; p = strchr(p, ',') != NULL ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, name, len) == 0 && (p[len] == ',' || p[len] == '\0')) return 1;
    return 0;
}

static int is_p2p(const case_t *c)
{
    return c->others.kind == K_SEND || c->others.kind == K_RECV;
}

static chorus_status_t call(const call_t *c, chorus_comm_t comm, int n, const void *send,
                            void *recv)
{
    int root = c->root < 0 ? n - 1 : c->root, peer = 0;

    switch (c->kind) {
    case K_ALLREDUCE: return chorus_allreduce(send, recv, c->count, c->dtype, c->op, comm, NULL);
    case K_ALLGATHER: return chorus_allgather(send, recv, c->count, c->dtype, comm, NULL);
    case K_REDUCE_SCATTER:
        return chorus_reduce_scatter(send, recv, c->count, c->dtype, c->op, comm, NULL);
    case K_BROADCAST: return chorus_broadcast(send, recv, c->count, c->dtype, root, comm, NULL);
    case K_REDUCE: return chorus_reduce(send, recv, c->count, c->dtype, c->op, root, comm, NULL);
    case K_ALLTOALL: return chorus_alltoall(send, recv, c->count, c->dtype, comm, NULL);
    case K_BARRIER: return chorus_barrier(comm);
    case K_SEND:
    case K_RECV:
        /* Rank 0 and the odd rank talk to each other. */
        if (chorus_comm_rank(comm, &peer) != CHORUS_SUCCESS) return CHORUS_ERR_INTERNAL;
        peer = peer == 0 ? n - 1 : 0;
        return c->kind == K_SEND ? chorus_send(send, c->count, c->dtype, peer, comm, NULL)
                                 : chorus_recv(recv, c->count, c->dtype, peer, comm, NULL);
    default: return CHORUS_SUCCESS;
    }
}

/* Runs case c on a fresh communicator; returns this rank's time to the error (-1: sat it
 * out). */
static double run_case(const case_t *c, chorus_comm_t base, int rank, int n)
{
    const int odd = rank == n - 1;
    const call_t *mine = odd ? &c->odd : &c->others;
    const size_t bytes = MAX_ELEMS * (size_t)n * 8;
    unsigned char *send = mp_guarded(bytes), *recv = mp_guarded(bytes);
    chorus_comm_t comm = NULL;
    chorus_status_t st;
    double t0, dt = -1;

    st = chorus_comm_split(base, 0, rank, &comm);
    expect(st == CHORUS_SUCCESS, rank, "comm_split", chorus_last_error());
    if (st != CHORUS_SUCCESS) exit(1);
    if (!is_p2p(c) || rank == 0 || odd) {
        t0 = mp_now();
        st = call(mine, comm, n, send, recv);
        dt = mp_now() - t0;
        printf("rank %d: %s: %s after %.3f s: %s\n", rank, c->name, chorus_status_string(st),
               dt, st == CHORUS_SUCCESS ? "" : chorus_last_error());
        expect(st == CHORUS_SUCCESS || st == CHORUS_ERR_MISMATCH, rank, c->name,
               "want CHORUS_ERR_MISMATCH (or success where this rank needed nothing from a "
               "mismatched peer)");
        if (st == CHORUS_SUCCESS) {
            /* Like an eager send's error: a rank whose call needed nothing from the odd
             * rank (a broadcast root, a reduce's non-root, a send the transport buffered,
             * a reader whose root agreed with it) learns at its next call. */
            st = chorus_barrier(comm);
            dt = mp_now() - t0;
            printf("rank %d: %s: the next call: %s after %.3f s: %s\n", rank, c->name,
                   chorus_status_string(st), dt, chorus_last_error());
            expect(st == CHORUS_ERR_MISMATCH, rank, c->name,
                   "the call after the mismatched one: want CHORUS_ERR_MISMATCH");
        }
        expect(dt < LIMIT_S, rank, c->name, "the mismatch took longer than 1 s to surface");
        expect(mp_guards_intact(send, bytes) && mp_guards_intact(recv, bytes), rank, c->name,
               "a call wrote outside its buffers");
        t0 = mp_now();
        st = chorus_barrier(comm);
        expect(st != CHORUS_SUCCESS, rank, c->name, "a barrier after the mismatch succeeded");
        expect(mp_now() - t0 < LIMIT_S, rank, c->name,
               "a barrier on the failed communicator waited");
    } else {
        /* Sat out a point-to-point case: its next collective learns that the pair failed. */
        t0 = mp_now();
        st = chorus_barrier(comm);
        printf("rank %d: %s: sat it out; a barrier: %s after %.3f s: %s\n", rank, c->name,
               chorus_status_string(st), mp_now() - t0, chorus_last_error());
        expect(st == CHORUS_ERR_MISMATCH, rank, c->name,
               "a barrier after a mismatched send/recv: want CHORUS_ERR_MISMATCH");
        expect(mp_now() - t0 < LIMIT_S, rank, c->name,
               "the mismatch took longer than 1 s to surface");
    }
    chorus_comm_destroy(comm);
    mp_guarded_free(send);
    mp_guarded_free(recv);
    return dt;
}

/* Not a mismatch, the control for sig_peek's rule on sends: a rank sends to rank 0 before
 * a broadcast from rank 0, which calls the broadcast first and receives after it. Rank 0's
 * part of the broadcast needs nothing from the sender, so both calls complete although the
 * send's signature waits at rank 0 while the other ranks, late on purpose, hold the
 * broadcast up (past the engine's peek delay). Every rank must succeed with the right
 * bytes. (Were the sender a child of rank 0 in the broadcast, rank 0 would wait for its
 * signature and the program would deadlock, as it would with NCCL, whose sends are not
 * buffered either. So the sender is one that the broadcasts do not make rank 0's peer: the
 * tree of tree.c gives the root one child, the largest power of two below the ranks, and
 * the ring's chain rank 1, so from 4 ranks rank 3; at 3 ranks the last, which the tree
 * makes rank 0's child: there the control holds for the chosen algorithm and for
 * CHORUS_ALGO=ring, not for a forced tree.) */
#define LEGAL_CASE "legal-send-before-broadcast"

static void run_legal(chorus_comm_t base, int rank, int n)
{
    int32_t msg[64], got[64], data[64];
    const int from = n > 3 ? 3 : n - 1;
    chorus_comm_t comm = NULL;
    chorus_status_t st;

    for (int i = 0; i < 64; i++) {
        msg[i] = rank == from ? 7000 + i : -1;
        data[i] = rank == 0 ? 100 + i : -1;
        got[i] = -1;
    }
    st = chorus_comm_split(base, 0, rank, &comm);
    expect(st == CHORUS_SUCCESS, rank, "comm_split", chorus_last_error());
    if (st != CHORUS_SUCCESS) exit(1);
    if (rank == from && n > 2) {
        st = chorus_send(msg, 64, CHORUS_INT32, 0, comm, NULL);
        expect(st == CHORUS_SUCCESS, rank, LEGAL_CASE ": send", chorus_last_error());
    }
    if (rank != 0 && rank != from) {
        struct timespec late = {0, 100 * 1000 * 1000};
        nanosleep(&late, NULL);
    }
    st = chorus_broadcast(data, data, 64, CHORUS_INT32, 0, comm, NULL);
    expect(st == CHORUS_SUCCESS, rank, LEGAL_CASE ": broadcast", chorus_last_error());
    for (int i = 0; i < 64 && st == CHORUS_SUCCESS; i++)
        if (data[i] != 100 + i) {
            expect(0, rank, LEGAL_CASE, "broadcast: wrong data");
            break;
        }
    if (rank == 0 && n > 2) {
        st = chorus_recv(got, 64, CHORUS_INT32, from, comm, NULL);
        expect(st == CHORUS_SUCCESS, rank, LEGAL_CASE ": recv", chorus_last_error());
        for (int i = 0; i < 64 && st == CHORUS_SUCCESS; i++)
            if (got[i] != 7000 + i) {
                expect(0, rank, LEGAL_CASE, "recv: wrong data");
                break;
            }
    }
    st = chorus_barrier(comm);
    expect(st == CHORUS_SUCCESS, rank, LEGAL_CASE ": barrier", chorus_last_error());
    if (rank == 0) printf("case %-28s no mismatch: %s\n", LEGAL_CASE, st == CHORUS_SUCCESS ? "ok" : "FAIL");
    chorus_comm_destroy(comm);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"case", required_argument, NULL, 'c'},
                                         {"list", no_argument, NULL, 'l'},
                                         {0, 0, 0, 0}};
    const char *only = NULL;
    chorus_comm_t base;
    int rank, n, opt, ran = 0, all = 0;

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 'c') {
            only = optarg;
        } else if (opt == 'l') {
            for (size_t i = 0; i < NCASES; i++) printf("%s\n", cases[i].name);
            printf("%s\n", LEGAL_CASE);
            return 0;
        } else {
            fprintf(stderr, "usage: mp_mismatch_table [--case NAME[,NAME...]] [--list]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    base = mp_init_env("mp_mismatch_table", &rank, &n);
    if (n < 2) {
        printf("skipped: mismatches need 2 or more ranks\n");
        chorus_comm_destroy(base);
        return 77;
    }
    for (size_t i = 0; i < NCASES; i++) {
        double dt, worst;
        int hit, got;

        if (only != NULL && !listed(only, cases[i].name)) continue;
        ran++;
        dt = run_case(&cases[i], base, rank, n);
        worst = dt;
        hit = dt >= 0;
        /* The base communicator is untouched by the case's failure: it gathers the result. */
        if (chorus_allreduce(&worst, &worst, 1, CHORUS_FLOAT64, CHORUS_MAX, base, NULL) !=
                CHORUS_SUCCESS ||
            chorus_allreduce(&hit, &got, 1, CHORUS_INT32, CHORUS_SUM, base, NULL) !=
                CHORUS_SUCCESS) {
            expect(0, rank, "the base communicator", chorus_last_error());
            break;
        }
        if (rank == 0)
            printf("case %-28s %d ranks took part, the slowest knew after %.3f s\n",
                   cases[i].name, got, worst);
    }
    if (only == NULL || listed(only, LEGAL_CASE)) {
        ran++;
        run_legal(base, rank, n);
    }
    expect(ran > 0, rank, "no case ran", only != NULL ? only : "");
    if (chorus_allreduce(&failures, &all, 1, CHORUS_INT32, CHORUS_SUM, base, NULL) !=
        CHORUS_SUCCESS)
        all = failures + 1;
    if (rank == 0) printf("%s: %d failed checks over all ranks\n", all == 0 ? "ok" : "FAIL", all);
    chorus_comm_destroy(base);
    return all == 0 ? 0 : 1;
}
