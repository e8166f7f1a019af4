/*
 * chorus-bench --topo-dump FILE and --info: what Chorus sees of the machine and how it
 * chose to reach its peers.
 *
 * --topo-dump writes the local host's topology (CHORUS_TOPO_FILE when set, else hwloc
 * discovery) in the schema of docs/topology.schema.json, so that a file written on one
 * machine, edited where the PCI view of a VM is wrong, and given back through
 * CHORUS_TOPO_FILE comes out of --topo-dump unchanged.
 *
 * --info prints the topology, then, when started by a launcher (chorusrun, torchrun, mpirun,
 * srun, ...), where rank, size and rendezvous came from, the transport this rank uses per
 * class of peer and why (rank 0 prints; every rank takes
 * part in creating the communicator), the host map and the ring order built from it, and
 * last every CHORUS_* variable with its value and help. Without a launcher it says so and
 * prints the rest. The per-peer part reads the communicator's internals (lib/core/comm.h),
 * as the choice is not part of the public API.
 */
#include "bench.h"
#include "bootstrap/bootstrap.h"
#include "core/comm.h"
#include "topo/topo.h"
#include "util/config.h"

#include <stdlib.h>
#include <string.h>

/* Called by main() before the options are parsed; -1 when neither mode is asked for. */
int bench_info_main(int argc, char **argv);

static const char *info_kind_name(int kind)
{
    switch (kind) {
    case CHORUS_PEER_SELF: return "self";
    case CHORUS_PEER_SHM: return "shm";
    case CHORUS_PEER_TCP: return "tcp";
    default: return "other";
    }
}

/* Why a peer of this class got this transport, from the rule lib/core applies. */
static const char *info_reason(int same_host, int kind)
{
    const char *tp = chorus__config_str("CHORUS_TRANSPORT");

    if (tp != NULL && strcmp(tp, "auto") != 0) return "forced by CHORUS_TRANSPORT";
    if (same_host && kind == CHORUS_PEER_SHM)
        return "same host identity (hostname, boot id, network namespace, or CHORUS_HOSTID)";
    if (!same_host) return "another host: the inter-host transport of this build";
    return "the core's choice";
}

/* Rank 0's peers grouped by (same host?, transport), with the host map and ring order. */
static void info_peers(chorus_comm_t comm)
{
    int counts[2][256] = {{0}}, p, same, k, *order;

    for (p = 0; p < comm->nranks; p++) {
        if (p == comm->rank) continue;
        same = comm->host_of[p] == comm->host_of[comm->rank];
        counts[same][comm->peer_kind[p]]++;
    }
    printf("\ncommunicator: %d ranks on %d host%s; this is rank %d\n", comm->nranks,
           comm->nhosts, comm->nhosts == 1 ? "" : "s", comm->rank);
    printf("  %-12s %-6s %6s  why\n", "peer class", "via", "peers");
    for (same = 1; same >= 0; same--)
        for (k = 0; k < 256; k++)
            if (counts[same][k] > 0)
                printf("  %-12s %-6s %6d  %s\n", same ? "same host" : "other host",
                       info_kind_name(k), counts[same][k], info_reason(same, k));
    printf("  host of each rank:");
    for (p = 0; p < comm->nranks; p++) printf(" %d", comm->host_of[p]);
    order = malloc((size_t)comm->nranks * sizeof *order);
    if (order != NULL &&
        chorus__topo_ring_order(comm->nranks, comm->host_of, comm->nhosts, NULL, NULL, order) ==
            CHORUS_SUCCESS) {
        printf("\n  topology ring order:");
        for (p = 0; p < comm->nranks; p++) printf(" %d", order[p]);
        printf(" (crosses between hosts %d times; rank order: ",
               chorus__topo_ring_crossings(comm->nranks, comm->host_of, order));
        for (p = 0; p < comm->nranks; p++) order[p] = p;
        printf("%d)", chorus__topo_ring_crossings(comm->nranks, comm->host_of, order));
    }
    printf("\n");
    free(order);
}

static int info_run(void)
{
    chorus_topo_t *topo = NULL;
    chorus_comm_t comm = NULL;
    chorus_status_t status;
    int rank = 0;

    status = chorus_comm_init_env(&comm);
    if (status == CHORUS_SUCCESS) chorus_comm_rank(comm, &rank);
    if (rank == 0) {
        printf("build: %s\n", chorus_build_info());
        if (chorus__topo_local(&topo) == CHORUS_SUCCESS)
            chorus__topo_print(topo, stdout);
        else
            printf("topology: %s\n", chorus_last_error());
        chorus__topo_free(topo);
        if (comm != NULL && chorus__bootstrap_env_source() != NULL)
            printf("\nlaunch: %s\n", chorus__bootstrap_env_source());
        if (comm != NULL)
            info_peers(comm);
        else
            printf("\ncommunicator: none (%s); start under a launcher, e.g. chorusrun -n 2 -- "
                   "chorus-bench --info, to see the transport of each peer\n",
                   chorus_last_error());
        printf("\nenvironment:\n");
        chorus__config_print(stdout);
        fflush(stdout);
    }
    if (comm != NULL) {
        /* Rank 0 has printed before any rank leaves (chorusrun stops the others when one
         * exits with an error). */
        status = chorus_barrier(comm);
        chorus_comm_destroy(comm);
        if (status != CHORUS_SUCCESS) return 1;
    }
    return 0;
}

static int info_dump(const char *path)
{
    chorus_topo_t *topo = NULL;
    chorus_status_t status;

    status = chorus__topo_local(&topo);
    if (status == CHORUS_SUCCESS) status = chorus__topo_dump(topo, path);
    chorus__topo_free(topo);
    if (status != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-bench: --topo-dump: %s\n", chorus_last_error());
        return 1;
    }
    return 0;
}

int bench_info_main(int argc, char **argv)
{
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--topo-dump") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "chorus-bench: --topo-dump needs a file name\n");
                return 2;
            }
            return info_dump(argv[i + 1]);
        }
        if (strncmp(argv[i], "--topo-dump=", 12) == 0) return info_dump(argv[i] + 12);
        if (strcmp(argv[i], "--info") == 0) return info_run();
        if (strcmp(argv[i], "--version") == 0) {
            printf("%s\n", chorus_build_info());
            return 0;
        }
    }
    return -1;
}
