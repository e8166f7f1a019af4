/*
 * chorus-bench --backend nccl: the same calls through NCCL, so that Chorus and NCCL can be
 * timed and checked on the same GPUs with the same sizes, columns and files.
 *
 * NCCL is loaded with dlopen (libnccl.so.2 on the loader's path, then under
 * /usr/local/cuda and $CUDA_HOME), so that chorus-bench builds and runs without it, and
 * the few types it needs are declared here with the values of NCCL's stable ABI (nccl.h
 * of NCCL 2.x, checked against 2.28): the unique id is 128 bytes passed by value, the
 * enums are ints, and ncclRedOp_t orders max before min, unlike chorus_op_t. NCCL 2.10 or
 * later is required (bfloat16 and ncclAvg).
 *
 * The NCCL communicator is bootstrapped over the Chorus one: rank 0's unique id goes to
 * the others with a host chorus_broadcast. Alltoall and sendrecv are grouped ncclSend and
 * ncclRecv calls, as nccl-tests makes them; NCCL has no barrier.
 */
#include "bench.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_ID_BYTES 128
#define NCCL_MIN_VERSION 21000 /* 2.10.0: ncclBfloat16, ncclAvg */

typedef struct {
    char internal[NCCL_ID_BYTES];
} nccl_id_t;
typedef struct nccl_comm *nccl_comm_t;
typedef int nccl_result_t; /* ncclResult_t */

enum { NCCL_SUCCESS = 0, NCCL_INVALID_ARGUMENT = 4, NCCL_INVALID_USAGE = 5, NCCL_REMOTE = 6 };

struct bench_nccl {
    nccl_comm_t comm;
};

static struct {
    void *handle;
    int version;
    nccl_result_t (*get_version)(int *version);
    nccl_result_t (*get_unique_id)(nccl_id_t *id);
    nccl_result_t (*comm_init_rank)(nccl_comm_t *comm, int nranks, nccl_id_t id, int rank);
    nccl_result_t (*comm_destroy)(nccl_comm_t comm);
    const char *(*error_string)(nccl_result_t result);
    nccl_result_t (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op,
                                nccl_comm_t comm, void *stream);
    nccl_result_t (*all_gather)(const void *send, void *recv, size_t count, int dtype,
                                nccl_comm_t comm, void *stream);
    nccl_result_t (*reduce_scatter)(const void *send, void *recv, size_t count, int dtype, int op,
                                    nccl_comm_t comm, void *stream);
    nccl_result_t (*broadcast)(const void *send, void *recv, size_t count, int dtype, int root,
                               nccl_comm_t comm, void *stream);
    nccl_result_t (*reduce)(const void *send, void *recv, size_t count, int dtype, int op, int root,
                            nccl_comm_t comm, void *stream);
    nccl_result_t (*send)(const void *buf, size_t count, int dtype, int peer, nccl_comm_t comm,
                          void *stream);
    nccl_result_t (*recv)(void *buf, size_t count, int dtype, int peer, nccl_comm_t comm,
                          void *stream);
    nccl_result_t (*group_start)(void);
    nccl_result_t (*group_end)(void);
} nccl;

static char nccl_last_error[256];

/* Where to resolve each symbol: the address of its function pointer in `nccl`. */
static const struct {
    const char *name;
    void *slot;
} nccl_symbols[] = {
    {"ncclGetVersion", &nccl.get_version},
    {"ncclGetUniqueId", &nccl.get_unique_id},
    {"ncclCommInitRank", &nccl.comm_init_rank},
    {"ncclCommDestroy", &nccl.comm_destroy},
    {"ncclGetErrorString", &nccl.error_string},
    {"ncclAllReduce", &nccl.all_reduce},
    {"ncclAllGather", &nccl.all_gather},
    {"ncclReduceScatter", &nccl.reduce_scatter},
    {"ncclBroadcast", &nccl.broadcast},
    {"ncclReduce", &nccl.reduce},
    {"ncclSend", &nccl.send},
    {"ncclRecv", &nccl.recv},
    {"ncclGroupStart", &nccl.group_start},
    {"ncclGroupEnd", &nccl.group_end},
};

/* The candidates, in order; *why collects each failure. */
static void *open_nccl(char *why, size_t size)
{
    const char *home = getenv("CUDA_HOME");
    char paths[4][512];
    int n = 0;

    snprintf(paths[n++], sizeof(paths[0]), "libnccl.so.2");
    snprintf(paths[n++], sizeof(paths[0]), "/usr/local/cuda/lib64/libnccl.so.2");
    if (home != NULL && home[0] != '\0') {
        snprintf(paths[n++], sizeof(paths[0]), "%.400s/lib64/libnccl.so.2", home);
        snprintf(paths[n++], sizeof(paths[0]), "%.400s/lib/libnccl.so.2", home);
    }
    why[0] = '\0';
    for (int i = 0; i < n; i++) {
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        const char *err;
        size_t used = strlen(why);
        if (h != NULL) return h;
        err = dlerror();
        /* Each reason bounded, so that every candidate gets a word in. */
        snprintf(why + used, size - used, "%s%.200s", used > 0 ? "; " : "",
                 err != NULL ? err : paths[i]);
    }
    return NULL;
}

int bench_nccl_load(char *reason, size_t size)
{
    char why[1024];
    int version = 0;

    if (nccl.handle != NULL) return 0;
    nccl.handle = open_nccl(why, sizeof(why));
    if (nccl.handle == NULL) {
        snprintf(reason, size, "NCCL not found (%.900s)", why);
        return -1;
    }
    for (size_t i = 0; i < sizeof(nccl_symbols) / sizeof(nccl_symbols[0]); i++) {
        void *sym = dlsym(nccl.handle, nccl_symbols[i].name);
        if (sym == NULL) {
            snprintf(reason, size, "libnccl.so.2 has no %s", nccl_symbols[i].name);
            goto err_close;
        }
        /* POSIX: function pointers and void * have the same representation. */
        memcpy(nccl_symbols[i].slot, &sym, sizeof(sym));
    }
    if (nccl.get_version(&version) != NCCL_SUCCESS || version < NCCL_MIN_VERSION) {
        snprintf(reason, size, "NCCL %d is older than 2.10 (no bfloat16 or avg)", version);
        goto err_close;
    }
    nccl.version = version;
    return 0;

err_close:
    dlclose(nccl.handle);
    nccl.handle = NULL;
    return -1;
}

int bench_nccl_version(void)
{
    return nccl.version;
}

const char *bench_nccl_error(void)
{
    return nccl_last_error;
}

/* Records what failed and maps NCCL's result on the nearest Chorus status. */
static chorus_status_t nccl_check(const bench_t *b, nccl_result_t result, const char *call)
{
    if (result == NCCL_SUCCESS) return CHORUS_SUCCESS;
    snprintf(nccl_last_error, sizeof(nccl_last_error), "rank %d: %s: %s (ncclResult_t %d)", b->rank,
             call, nccl.error_string(result), result);
    switch (result) {
    case NCCL_INVALID_ARGUMENT:
    case NCCL_INVALID_USAGE: return CHORUS_ERR_INVALID_ARGUMENT;
    case NCCL_REMOTE: return CHORUS_ERR_REMOTE;
    default: return CHORUS_ERR_SYSTEM;
    }
}

chorus_status_t bench_nccl_init(bench_t *b)
{
    struct {
        int32_t ok;
        nccl_id_t id;
    } msg;
    struct bench_nccl *n;
    chorus_status_t status = CHORUS_SUCCESS;

    memset(&msg, 0, sizeof(msg));
    /* Rank 0 sends its failure too, so that no rank waits for an id that never comes. */
    if (b->rank == 0) {
        status = nccl_check(b, nccl.get_unique_id(&msg.id), "ncclGetUniqueId");
        msg.ok = status == CHORUS_SUCCESS;
    }
    if (chorus_broadcast(&msg, &msg, sizeof(msg), CHORUS_UINT8, 0, b->comm, NULL) != CHORUS_SUCCESS)
        return CHORUS_ERR_REMOTE;
    if (!msg.ok) {
        if (b->rank != 0)
            snprintf(nccl_last_error, sizeof(nccl_last_error),
                     "rank 0 could not make the NCCL unique id");
        return status != CHORUS_SUCCESS ? status : CHORUS_ERR_REMOTE;
    }
    n = calloc(1, sizeof(*n));
    if (n == NULL) return CHORUS_ERR_NO_MEMORY;
    status = nccl_check(b, nccl.comm_init_rank(&n->comm, b->nranks, msg.id, b->rank),
                        "ncclCommInitRank");
    if (status != CHORUS_SUCCESS) {
        free(n);
        return status;
    }
    b->nccl = n;
    return CHORUS_SUCCESS;
}

void bench_nccl_destroy(bench_t *b)
{
    if (b->nccl == NULL) return;
    (void)nccl.comm_destroy(b->nccl->comm);
    free(b->nccl);
    b->nccl = NULL;
}

static int nccl_dtype(chorus_dtype_t dtype)
{
    switch (dtype) {
    case CHORUS_INT8: return 0;
    case CHORUS_UINT8: return 1;
    case CHORUS_INT32: return 2;
    case CHORUS_UINT32: return 3;
    case CHORUS_INT64: return 4;
    case CHORUS_UINT64: return 5;
    case CHORUS_FLOAT16: return 6;
    case CHORUS_FLOAT32: return 7;
    case CHORUS_FLOAT64: return 8;
    case CHORUS_BFLOAT16: return 9;
    default: return -1;
    }
}

static int nccl_op(chorus_op_t op)
{
    switch (op) {
    case CHORUS_SUM: return 0;
    case CHORUS_PROD: return 1;
    case CHORUS_MAX: return 2;
    case CHORUS_MIN: return 3;
    case CHORUS_AVG: return 4;
    default: return -1;
    }
}

/* One grouped exchange: alltoall (a block to and from every rank) or the sendrecv ring. */
static chorus_status_t nccl_exchange(bench_t *b, const test_t *t, size_t count, const void *send,
                                     void *recv)
{
    nccl_comm_t comm = b->nccl->comm;
    int dtype = nccl_dtype(t->dtype);
    size_t block = count * chorus_dtype_size(t->dtype);
    chorus_status_t status = nccl_check(b, nccl.group_start(), "ncclGroupStart");

    if (status != CHORUS_SUCCESS) return status;
    if (t->coll == COLL_SENDRECV) {
        int next = (t->rank + 1) % t->nranks, prev = (t->rank + t->nranks - 1) % t->nranks;
        status = nccl_check(b, nccl.send(send, count, dtype, next, comm, b->stream), "ncclSend");
        if (status == CHORUS_SUCCESS)
            status =
                nccl_check(b, nccl.recv(recv, count, dtype, prev, comm, b->stream), "ncclRecv");
    } else {
        for (int peer = 0; peer < t->nranks && status == CHORUS_SUCCESS; peer++) {
            status = nccl_check(b,
                                nccl.send((const char *)send + (size_t)peer * block, count, dtype,
                                          peer, comm, b->stream),
                                "ncclSend");
            if (status == CHORUS_SUCCESS)
                status = nccl_check(b,
                                    nccl.recv((char *)recv + (size_t)peer * block, count, dtype,
                                              peer, comm, b->stream),
                                    "ncclRecv");
        }
    }
    /* The group is closed even after a failure, so that NCCL's group depth stays right. */
    chorus_status_t end = nccl_check(b, nccl.group_end(), "ncclGroupEnd");
    return status != CHORUS_SUCCESS ? status : end;
}

chorus_status_t bench_nccl_run(bench_t *b, const test_t *t, const counts_t *c, const void *send,
                               void *recv)
{
    nccl_comm_t comm = b->nccl->comm;
    int dtype = nccl_dtype(t->dtype), op = nccl_op(t->op);
    size_t count = c->param_count;
    void *s = b->stream;

    switch (t->coll) {
    case COLL_ALLREDUCE:
        return nccl_check(b, nccl.all_reduce(send, recv, count, dtype, op, comm, s),
                          "ncclAllReduce");
    case COLL_ALLGATHER:
        return nccl_check(b, nccl.all_gather(send, recv, count, dtype, comm, s), "ncclAllGather");
    case COLL_REDUCE_SCATTER:
        return nccl_check(b, nccl.reduce_scatter(send, recv, count, dtype, op, comm, s),
                          "ncclReduceScatter");
    case COLL_BROADCAST:
        return nccl_check(b, nccl.broadcast(send, recv, count, dtype, t->root, comm, s),
                          "ncclBroadcast");
    case COLL_REDUCE:
        return nccl_check(b, nccl.reduce(send, recv, count, dtype, op, t->root, comm, s),
                          "ncclReduce");
    case COLL_ALLTOALL:
    case COLL_SENDRECV: return nccl_exchange(b, t, count, send, recv);
    default:
        snprintf(nccl_last_error, sizeof(nccl_last_error), "rank %d: NCCL has no %s", b->rank,
                 bench_coll_name(t->coll));
        return CHORUS_ERR_UNSUPPORTED;
    }
}
