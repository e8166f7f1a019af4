/*
 * PMIx: the launcher's own key-value service (mpirun of Open MPI 4/5, prterun, `srun
 * --mpi=pmix`). Every process it starts can ask its local PMIx server who it is and can
 * exchange data with the job's other processes, so rank 0 publishes the unique id (a
 * fresh root address and a fresh secret) and the others read it after a fence: no
 * variable to set, no secret file, and the id never leaves the job's own servers.
 */
#include "bootstrap/launch.h"

#include "util/log.h"
#include "util/status.h"

#include <stdlib.h>
#include <string.h>

int chorus__pmix_launched(void)
{
    const char *ns = getenv("PMIX_NAMESPACE"), *rank = getenv("PMIX_RANK");

    return ns != NULL && ns[0] != '\0' && rank != NULL && rank[0] != '\0';
}

#ifndef CHORUS_HAVE_PMIX

int chorus__pmix_built(void)
{
    return 0;
}

chorus_status_t chorus__pmix_rank_size(int *rank_p, int *nranks_p, int *local_rank_p,
                                       int *nnodes_p)
{
    (void)rank_p, (void)nranks_p, (void)local_rank_p, (void)nnodes_p;
    return chorus__error(CHORUS_ERR_UNSUPPORTED,
                         "bootstrap: built without PMIx (apt-get install libpmix-dev)");
}

chorus_status_t chorus__pmix_share_id(int rank, int nnodes, double timeout_s,
                                      chorus_unique_id_t *id_p)
{
    (void)rank, (void)nnodes, (void)timeout_s, (void)id_p;
    return chorus__error(CHORUS_ERR_UNSUPPORTED,
                         "bootstrap: built without PMIx (apt-get install libpmix-dev)");
}

#else


#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <pmix.h>
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t pmix_lock = PTHREAD_MUTEX_INITIALIZER;
static int pmix_up;         /* PMIx_Init succeeded */
static pmix_proc_t pmix_me; /* this process: namespace and rank */
static unsigned pmix_calls; /* share_id calls so far: call k uses key chorus.id.k */

int chorus__pmix_built(void)
{
    return 1;
}

/* The launcher counts a process that connected and never disconnected as one that died
 * before finishing (Open MPI's mpirun says so and fails the job): disconnect at exit. */
static void pmix_at_exit(void)
{
    pthread_mutex_lock(&pmix_lock);
    if (pmix_up) PMIx_Finalize(NULL, 0);
    pmix_up = 0;
    pthread_mutex_unlock(&pmix_lock);
}

static chorus_status_t pmix_connect(void)
{
    static int registered;
    pmix_status_t rc = PMIX_SUCCESS;

    pthread_mutex_lock(&pmix_lock);
    if (!pmix_up) {
        rc = PMIx_Init(&pmix_me, NULL, 0);
        pmix_up = rc == PMIX_SUCCESS;
        if (pmix_up && !registered) registered = atexit(pmix_at_exit) == 0;
    }
    pthread_mutex_unlock(&pmix_lock);
    if (rc != PMIX_SUCCESS) {
        return chorus__error(CHORUS_ERR_SYSTEM, "bootstrap: PMIx_Init: %s (PMIX_NAMESPACE=%s)",
                             PMIx_Error_string(rc), getenv("PMIX_NAMESPACE"));
    }
    return CHORUS_SUCCESS;
}

/* An unsigned number PMIx holds for proc (whatever integer type the server chose);
 * -1 when it has none. */
static long pmix_get_uint(const pmix_proc_t *proc, const char *key)
{
    pmix_value_t *val = NULL;
    long v = -1;

    if (PMIx_Get(proc, key, NULL, 0, &val) != PMIX_SUCCESS || val == NULL) return -1;
    switch (val->type) {
    case PMIX_UINT32: v = val->data.uint32; break;
    case PMIX_UINT16: v = val->data.uint16; break;
    case PMIX_UINT8: v = val->data.uint8; break;
    case PMIX_UINT64: v = val->data.uint64 <= INT_MAX ? (long)val->data.uint64 : -1; break;
    case PMIX_UINT: v = val->data.uint <= INT_MAX ? (long)val->data.uint : -1; break;
    case PMIX_INT: v = val->data.integer >= 0 ? val->data.integer : -1; break;
    case PMIX_INT32: v = val->data.int32 >= 0 ? val->data.int32 : -1; break;
    case PMIX_PROC_RANK: v = val->data.rank <= INT_MAX ? (long)val->data.rank : -1; break;
    default: break;
    }
    PMIX_VALUE_RELEASE(val);
    return v;
}

chorus_status_t chorus__pmix_rank_size(int *rank_p, int *nranks_p, int *local_rank_p,
                                       int *nnodes_p)
{
    pmix_proc_t job;
    long size, local, nodes;
    chorus_status_t status = pmix_connect();

    if (status != CHORUS_SUCCESS) return status;
    PMIX_LOAD_PROCID(&job, pmix_me.nspace, PMIX_RANK_WILDCARD);
    size = pmix_get_uint(&job, PMIX_JOB_SIZE);
    if (size < 1 || size > CHORUS_BS_MAX_RANKS || pmix_me.rank >= (pmix_rank_t)size) {
        return chorus__error(CHORUS_ERR_SYSTEM,
                             "bootstrap: PMIx namespace %s: rank %u and job size %ld do not "
                             "make a rank and a size",
                             pmix_me.nspace, (unsigned)pmix_me.rank, size);
    }
    local = pmix_get_uint(&pmix_me, PMIX_LOCAL_RANK);
    nodes = pmix_get_uint(&job, PMIX_NUM_NODES);
    *rank_p = (int)pmix_me.rank;
    *nranks_p = (int)size;
    *local_rank_p = local >= 0 && local < size ? (int)local : -1;
    *nnodes_p = nodes >= 1 ? (int)nodes : 0;
    return CHORUS_SUCCESS;
}

/* Rank 0's root: on loopback when the whole job is on this host (nothing outside can
 * reach it), else on the interface the library picks for every listener. */
static chorus_status_t pmix_new_id(int nnodes, chorus_unique_id_t *id_p)
{
    struct sockaddr_storage lo;

    if (nnodes != 1) return chorus__bootstrap_new_id(NULL, id_p);
    memset(&lo, 0, sizeof(lo));
    ((struct sockaddr_in *)&lo)->sin_family = AF_INET;
    ((struct sockaddr_in *)&lo)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return chorus__bootstrap_new_id(&lo, id_p);
}

chorus_status_t chorus__pmix_share_id(int rank, int nnodes, double timeout_s,
                                      chorus_unique_id_t *id_p)
{
    char key[PMIX_MAX_KEYLEN + 1], hex[2 * CHORUS_UNIQUE_ID_BYTES + 1];
    pmix_info_t info[2];
    pmix_value_t val, *got = NULL;
    pmix_proc_t root;
    pmix_status_t rc;
    chorus_status_t status;
    bool collect = true;
    int timeout = timeout_s <= 0 ? 0 : timeout_s >= INT_MAX ? INT_MAX : (int)timeout_s + 1;

    status = pmix_connect();
    if (status != CHORUS_SUCCESS) return status;
    pthread_mutex_lock(&pmix_lock);
    snprintf(key, sizeof(key), "chorus.id.%u", pmix_calls++);
    pthread_mutex_unlock(&pmix_lock);
    if (rank == 0) {
        status = pmix_new_id(nnodes, id_p);
        if (status != CHORUS_SUCCESS) return status;
        chorus__id_to_hex(id_p, hex);
        memset(&val, 0, sizeof(val));
        val.type = PMIX_STRING;
        val.data.string = hex;
        rc = PMIx_Put(PMIX_GLOBAL, key, &val);
        if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
        if (rc != PMIX_SUCCESS) goto err_pmix;
    }
    /* The fence carries the data, and a deadline: a rank that never comes must not hang
     * the others forever. */
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
    rc = PMIx_Fence(NULL, 0, info, timeout > 0 ? 2 : 1);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS) goto err_pmix;
    if (rank == 0) return CHORUS_SUCCESS;
    PMIX_LOAD_PROCID(&root, pmix_me.nspace, 0);
    rc = PMIx_Get(&root, key, NULL, 0, &got);
    if (rc != PMIX_SUCCESS) goto err_pmix;
    if (got == NULL || got->type != PMIX_STRING || got->data.string == NULL) {
        if (got != NULL) PMIX_VALUE_RELEASE(got);
        return chorus__error(CHORUS_ERR_SYSTEM,
                             "bootstrap: rank %d: PMIx key %s of rank 0 is not a string", rank,
                             key);
    }
    status = chorus__id_from_hex(got->data.string, id_p);
    PMIX_VALUE_RELEASE(got);
    if (status != CHORUS_SUCCESS)
        return chorus__error_context(status, "bootstrap: rank %d: the id rank 0 published", rank);
    return CHORUS_SUCCESS;

err_pmix:
    return chorus__error(rc == PMIX_ERR_TIMEOUT ? CHORUS_ERR_TIMEOUT : CHORUS_ERR_SYSTEM,
                         "bootstrap: rank %d: PMIx exchange of %s (namespace %s): %s", rank, key,
                         pmix_me.nspace, PMIx_Error_string(rc));
}

#endif
