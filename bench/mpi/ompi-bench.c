/*
 * ompi-bench: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast,
 * MPI_Reduce, MPI_Alltoall, MPI_Barrier, MPI_Gather, MPI_Scatter, MPI_Allgatherv,
 * MPI_Reduce_scatter and MPI_Alltoallv timed and checked exactly as chorus-bench times and
 * checks the same Chorus collectives, for bench/compare.sh (the driver is peer.h). The
 * v-forms get equal blocks (count each, at rank * count), as chorus-bench gives them.
 *
 *   mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 \
 *       build/bin/ompi-bench allreduce -b 8 -e 64M -f 4
 *
 * Built with mpicc.openmpi by `make compare-peers` when Open MPI is installed.
 */
#include "peer.h"

#include <mpi.h>

/* This rank, and the v-forms' arrays (MPI takes int counts and displacements). */
typedef struct {
    int rank, nranks;
    int *counts, *displs; /* nranks each: every block count elements at rank * count */
    int per;              /* the count the arrays hold; -1 before the first v-form call */
} ompi_ctx_t;

/* Refills the arrays only when the count changes, so that the timed loop does not pay. */
static void ompi_uniform(ompi_ctx_t *x, int per)
{
    if (x->per == per) return;
    for (int r = 0; r < x->nranks; r++) {
        x->counts[r] = per;
        x->displs[r] = r * per;
    }
    x->per = per;
}

/* The rooted and irregular collectives. In place, MPI_IN_PLACE is the root's alone for
 * gather and scatter: the other ranks pass NULL for the buffer MPI ignores on them (here
 * it would alias the one they use). */
static int ompi_coll_v(ompi_ctx_t *x, const peer_call_t *call)
{
    const void *in = call->in_place ? MPI_IN_PLACE : (const void *)call->send;
    float *recv = call->recv;
    int count = (int)call->count, root = call->root, is_root = x->rank == root;

    /* Every displacement (rank * count) must fit an int too. */
    if (call->count > (size_t)(2147483647 / x->nranks)) return 1;
    switch (call->coll) {
    case PEER_GATHER:
        if (call->in_place && !is_root)
            return MPI_Gather(call->send, count, MPI_FLOAT, NULL, count, MPI_FLOAT, root,
                              MPI_COMM_WORLD);
        return MPI_Gather(in, count, MPI_FLOAT, recv, count, MPI_FLOAT, root, MPI_COMM_WORLD);
    case PEER_SCATTER:
        /* In place the root's block stays where it is in the input (recv = send +
         * root * count), as chorus_scatter's in-place rule has it. */
        if (call->in_place)
            return MPI_Scatter(is_root ? call->send : NULL, count, MPI_FLOAT,
                               is_root ? MPI_IN_PLACE : (void *)recv, count, MPI_FLOAT, root,
                               MPI_COMM_WORLD);
        return MPI_Scatter(call->send, count, MPI_FLOAT, recv, count, MPI_FLOAT, root,
                           MPI_COMM_WORLD);
    case PEER_ALLGATHERV:
        ompi_uniform(x, count);
        return MPI_Allgatherv(in, count, MPI_FLOAT, recv, x->counts, x->displs, MPI_FLOAT,
                              MPI_COMM_WORLD);
    case PEER_REDUCE_SCATTERV:
        /* As reduce_scatter: in place the input is the whole buffer and MPI leaves this
         * rank's block at its start (in_place_rs_at_start). */
        ompi_uniform(x, count);
        return MPI_Reduce_scatter(in, call->in_place ? (float *)call->send : recv, x->counts,
                                  MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case PEER_ALLTOALLV:
        ompi_uniform(x, count);
        return MPI_Alltoallv(call->send, x->counts, x->displs, MPI_FLOAT, recv, x->counts,
                             x->displs, MPI_FLOAT, MPI_COMM_WORLD);
    default: return MPI_ERR_OTHER;
    }
}

/* MPI's default error handler aborts the job, which is what a benchmark wants, so the
 * return codes are only turned into the 0/1 of peer_backend_t. In place, each call is
 * MPI's own in-place form of the layout peer.h describes. ctx is an ompi_ctx_t. */
static int ompi_coll(void *ctx, const peer_call_t *call)
{
    const void *in = call->in_place ? MPI_IN_PLACE : (const void *)call->send;
    float *recv = call->recv;
    int count = (int)call->count, rank = ((const ompi_ctx_t *)ctx)->rank, rc;

    if (call->count > (size_t)2147483647) return 1;
    switch (call->coll) {
    case PEER_ALLREDUCE:
        rc = MPI_Allreduce(in, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case PEER_ALLGATHER:
        rc = MPI_Allgather(in, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case PEER_REDUCE_SCATTER:
        /* In place the input is the whole buffer (call->send) and MPI leaves this rank's
         * block at its start (in_place_rs_at_start). */
        rc = MPI_Reduce_scatter_block(in, call->in_place ? (float *)call->send : recv, count,
                                      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case PEER_BROADCAST:
        /* MPI_Bcast has one buffer. Out of place the root sends from its send buffer and
         * then copies it to its receive buffer, which chorus_broadcast also fills; the
         * other ranks receive into recv directly. */
        if (call->in_place || rank != call->root) {
            rc = MPI_Bcast(recv, count, MPI_FLOAT, call->root, MPI_COMM_WORLD);
        } else {
            rc = MPI_Bcast((void *)call->send, count, MPI_FLOAT, call->root, MPI_COMM_WORLD);
            memcpy(recv, call->send, call->count * sizeof(float));
        }
        break;
    case PEER_REDUCE:
        /* MPI_IN_PLACE is the root's alone; in place the other ranks pass their buffer as
         * the input and no receive buffer: MPI uses it on the root only, and here it would
         * alias the input, which MPI forbids. */
        if (call->in_place && rank != call->root)
            rc = MPI_Reduce(call->send, NULL, count, MPI_FLOAT, MPI_SUM, call->root,
                            MPI_COMM_WORLD);
        else
            rc = MPI_Reduce(in, recv, count, MPI_FLOAT, MPI_SUM, call->root, MPI_COMM_WORLD);
        break;
    case PEER_ALLTOALL:
        rc = MPI_Alltoall(in, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case PEER_BARRIER: rc = MPI_Barrier(MPI_COMM_WORLD); break;
    default: rc = ompi_coll_v((ompi_ctx_t *)ctx, call); break;
    }
    return rc != MPI_SUCCESS;
}

static int ompi_barrier(void *ctx)
{
    (void)ctx;
    return MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS;
}

static int ompi_max_double(void *ctx, double *value)
{
    (void)ctx;
    return MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) !=
           MPI_SUCCESS;
}

static int ompi_sum_u64(void *ctx, uint64_t *value)
{
    (void)ctx;
    return MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD) !=
           MPI_SUCCESS;
}

static int ompi_gather_pids(void *ctx, int32_t *pids)
{
    int32_t me = (int32_t)getpid();

    (void)ctx;
    return MPI_Allgather(&me, 1, MPI_INT32_T, pids, 1, MPI_INT32_T, MPI_COMM_WORLD) != MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    peer_backend_t be;
    peer_opts_t opt;
    ompi_ctx_t ctx;
    char version[MPI_MAX_LIBRARY_VERSION_STRING], library[64];
    int len = 0, status;

    MPI_Init(&argc, &argv);
    if (peer_parse(argc, argv, "ompi-bench", &opt) != 0) {
        MPI_Finalize();
        return 2;
    }
    memset(&be, 0, sizeof(be));
    MPI_Comm_rank(MPI_COMM_WORLD, &be.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &be.nranks);
    /* "Open MPI v4.1.4, package: ..." becomes "Open MPI v4.1.4". */
    MPI_Get_library_version(version, &len);
    snprintf(library, sizeof(library), "%.*s", (int)strcspn(version, ",\n"), version);
    be.prog = "ompi-bench";
    be.library = library;
    ctx.rank = be.rank;
    ctx.nranks = be.nranks;
    ctx.per = -1;
    ctx.counts = calloc((size_t)be.nranks, sizeof(int));
    ctx.displs = calloc((size_t)be.nranks, sizeof(int));
    if (ctx.counts == NULL || ctx.displs == NULL) {
        fprintf(stderr, "ompi-bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    be.ctx = &ctx;
    be.coll = ompi_coll;
    be.in_place_rs_at_start = 1;
    be.barrier = ompi_barrier;
    be.max_double = ompi_max_double;
    be.sum_u64 = ompi_sum_u64;
    be.gather_pids = ompi_gather_pids;
    /* Every rank gets the same status: the wrong-value count is summed over the ranks, and
     * a failed MPI call has already aborted the job. */
    status = peer_main(&be, &opt);
    free(ctx.counts);
    free(ctx.displs);
    MPI_Finalize();
    return status;
}
