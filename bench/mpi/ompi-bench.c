/*
 * ompi-bench: MPI_Allreduce and MPI_Allgather timed and checked exactly as chorus-bench
 * times and checks chorus_allreduce and chorus_allgather, for bench/compare.sh.
 *
 *   mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 \
 *       build/bin/ompi-bench allreduce -b 8 -e 64M -f 4
 *
 * Built with mpicc.openmpi by `make compare-peers` when Open MPI is installed.
 */
#include "peer.h"

#include <mpi.h>

/* MPI's default error handler aborts the job, which is what a benchmark wants, so the
 * return codes are only turned into the 0/1 of peer_backend_t. */
static int ompi_coll(void *ctx, int coll, const float *send, float *recv, size_t count,
                     int in_place)
{
    const void *in = in_place ? MPI_IN_PLACE : (const void *)send;
    int rc;

    (void)ctx;
    if (count > (size_t)2147483647) return 1;
    if (coll == PEER_ALLGATHER)
        rc = MPI_Allgather(in, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
    else
        rc = MPI_Allreduce(in, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
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
    be.coll = ompi_coll;
    be.barrier = ompi_barrier;
    be.max_double = ompi_max_double;
    be.sum_u64 = ompi_sum_u64;
    be.gather_pids = ompi_gather_pids;
    /* Every rank gets the same status: the wrong-value count is summed over the ranks, and
     * a failed MPI call has already aborted the job. */
    status = peer_main(&be, &opt);
    MPI_Finalize();
    return status;
}
