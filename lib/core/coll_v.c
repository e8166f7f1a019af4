/*
 * The collectives of issue 41: gather and scatter, and the v-forms, whose blocks have a
 * length per rank (allgatherv, reduce_scatterv) or per pair of ranks (alltoallv). They run
 * on the common path of coll.c (checks, counting, the engine, requests); what is theirs is
 * here: the checks of the count arrays, the signatures that make ranks which disagree about
 * the counts fail with CHORUS_ERR_MISMATCH instead of waiting for data that will not come,
 * and the schedules, which depend on the arrays and so are built at every call instead of
 * coming from the cache (whose key is one count).
 *
 * Signatures (engine.h): allgatherv and reduce_scatterv need every rank's recvcounts to be
 * the same, so the signature carries their sum and a 64-bit hash of the whole array, which
 * ring neighbours compare (the ring sends at least one message on every edge, ring.c).
 * alltoallv needs each rank's sendcounts[p] to be p's recvcounts[me]: each pair of ranks
 * exchanges a signature holding the pair's two counts, which the pairwise schedule sends
 * between every pair, so a contradiction shows on the pair where it is.
 */
#include "core/comm.h"

#include "util/status.h"

#include <stdlib.h>
#include <string.h>

int chorus__coll_is_v(chorus_coll_t coll)
{
    return coll == CHORUS_COLL_ALLGATHERV || coll == CHORUS_COLL_REDUCE_SCATTERV ||
           coll == CHORUS_COLL_ALLTOALLV;
}

/* ---- Argument checks ---- */

/* The span of the non-empty blocks of an array: [lo, hi) in elements (lo = hi = 0: none). */
typedef struct {
    uint64_t lo, hi;
} v_extent_t;

typedef struct {
    uint64_t off, len;
    int rank;
} v_block_t;

static int v_block_cmp(const void *a, const void *b)
{
    const v_block_t *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Checks the blocks counts[p] elements at displs[p] (back to back when displs is NULL) of
 * one buffer: each at most 2^40 bytes and ending within the address space; with disjoint,
 * no two non-empty ones sharing an element (a receive buffer: an element written twice).
 * cname and dname name the arrays in messages. */
static chorus_status_t v_blocks(chorus_comm_t comm, const char *name, const char *cname,
                                const char *dname, const size_t *counts, const size_t *displs,
                                size_t esize, int disjoint, v_extent_t *ext_p)
{
    const int n = comm->nranks;
    const uint64_t max_end = SIZE_MAX / esize;
    uint64_t off = 0, end_max = 0;
    v_block_t *blocks = NULL;
    int nblocks = 0, owner = -1;
    chorus_status_t status = CHORUS_SUCCESS;

    ext_p->lo = ext_p->hi = 0;
    if (disjoint && n > 1) {
        blocks = malloc((size_t)n * sizeof *blocks);
        if (blocks == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: %s: no memory to check %s",
                                 comm->rank, name, cname);
    }
    for (int p = 0; p < n; p++) {
        uint64_t len = counts[p];

        if (displs != NULL) off = displs[p];
        if (len > CHORUS_CORE_MAX_MESSAGE_BYTES / esize) {
            status = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                   "rank %d: %s: %s[%d] = %zu elements of %zu bytes is too large "
                                   "(at most 2^40 bytes per block)",
                                   comm->rank, name, cname, p, counts[p], esize);
            goto out;
        }
        if (off > max_end || len > max_end - off) {
            status = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                   "rank %d: %s: the block of rank %d (%s[%d] = %zu, %s %llu) "
                                   "ends beyond the address space",
                                   comm->rank, name, p, cname, p, counts[p],
                                   displs != NULL ? dname : "offset", (unsigned long long)off);
            goto out;
        }
        if (len > 0) {
            if (ext_p->hi == 0 || off < ext_p->lo) ext_p->lo = off;
            if (off + len > ext_p->hi) ext_p->hi = off + len;
            if (blocks != NULL) blocks[nblocks++] = (v_block_t){off, len, p};
        }
        off += len;
    }
    if (blocks != NULL) qsort(blocks, (size_t)nblocks, sizeof *blocks, v_block_cmp);
    for (int i = 0; i < nblocks; i++) {
        const v_block_t *b = &blocks[i];
        if (i > 0 && b->off < end_max) {
            int lo = owner < b->rank ? owner : b->rank, hi = owner < b->rank ? b->rank : owner;
            status = chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                   "rank %d: %s: the blocks of ranks %d and %d overlap "
                                   "(%s[%d] = %zu at %s[%d] = %zu, %s[%d] = %zu at %s[%d] = %zu)",
                                   comm->rank, name, lo, hi, cname, lo, counts[lo], dname, lo,
                                   displs[lo], cname, hi, counts[hi], dname, hi, displs[hi]);
            goto out;
        }
        if (b->off + b->len > end_max) {
            end_max = b->off + b->len;
            owner = b->rank;
        }
    }
out:
    free(blocks);
    return status;
}

/* Nonzero when the aoff..aoff + alen bytes of a and the boff..boff + blen bytes of b share
 * a byte (empty ranges share none). In integers: a may be NULL when its range is empty. */
static int v_overlap(const void *a, uint64_t aoff, uint64_t alen, const void *b, uint64_t boff,
                     uint64_t blen)
{
    uintptr_t x = (uintptr_t)a + (uintptr_t)aoff, y = (uintptr_t)b + (uintptr_t)boff;
    return alen > 0 && blen > 0 && x < y + blen && y < x + alen;
}

static chorus_status_t v_null(chorus_comm_t comm, const char *name, const char *what)
{
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: %s: %s is NULL", comm->rank,
                         name, what);
}

static chorus_status_t v_check_allgatherv(chorus_comm_t comm, chorus_coll_call_t *call,
                                          size_t esize, const char *name)
{
    const int me = comm->rank;
    v_extent_t ext;
    chorus_status_t status;
    const char *s = call->sendbuf;
    char *r = call->recvbuf;

    if (call->recvcounts == NULL) return v_null(comm, name, "recvcounts");
    if (call->rdispls == NULL) return v_null(comm, name, "displs");
    status = v_blocks(comm, name, "recvcounts", "displs", call->recvcounts, call->rdispls,
                      esize, 1, &ext);
    if (status != CHORUS_SUCCESS) return status;
    if (call->count != call->recvcounts[me])
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: sendcount %zu but recvcounts[%d] = %zu: a rank's "
                             "own block must be what it sends",
                             me, name, call->count, me, call->recvcounts[me]);
    if (call->count > 0 && s == NULL) return v_null(comm, name, "sendbuf");
    if (ext.hi > 0 && r == NULL) return v_null(comm, name, "recvbuf");
    /* In place: this rank's block of recvbuf is its sendbuf. */
    if (v_overlap(s, 0, call->count * esize, r, ext.lo * esize, (ext.hi - ext.lo) * esize) &&
        (uintptr_t)s != (uintptr_t)r + call->rdispls[me] * esize)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: sendbuf and recvbuf overlap but are not the in-place "
                             "layout (sendbuf == recvbuf + displs[rank])", me, name);
    return CHORUS_SUCCESS;
}

static chorus_status_t v_check_reduce_scatterv(chorus_comm_t comm, chorus_coll_call_t *call,
                                               size_t esize, const char *name)
{
    const int me = comm->rank;
    v_extent_t ext;
    chorus_status_t status;
    const char *s = call->sendbuf;
    char *r = call->recvbuf;
    uint64_t mine = 0;

    if (call->recvcounts == NULL) return v_null(comm, name, "recvcounts");
    status = v_blocks(comm, name, "recvcounts", "offset", call->recvcounts, NULL, esize, 0, &ext);
    if (status != CHORUS_SUCCESS) return status;
    for (int p = 0; p < me; p++) mine += call->recvcounts[p];
    call->count = call->recvcounts[me];
    if (ext.hi > 0 && s == NULL) return v_null(comm, name, "sendbuf");
    if (call->count > 0 && r == NULL) return v_null(comm, name, "recvbuf");
    /* In place: recvbuf is this rank's block of sendbuf (blocks back to back from 0). */
    if (v_overlap(s, 0, ext.hi * esize, r, 0, call->count * esize) &&
        (uintptr_t)r != (uintptr_t)s + mine * esize)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: sendbuf and recvbuf overlap but are not the in-place "
                             "layout (recvbuf == sendbuf + the sum of recvcounts[0..rank))",
                             me, name);
    return CHORUS_SUCCESS;
}

static chorus_status_t v_check_alltoallv(chorus_comm_t comm, chorus_coll_call_t *call,
                                         size_t esize, const char *name)
{
    const int me = comm->rank;
    v_extent_t sext, rext;
    chorus_status_t status;
    const char *s = call->sendbuf;
    const char *r = call->recvbuf;

    if (call->sendcounts == NULL) return v_null(comm, name, "sendcounts");
    if (call->sdispls == NULL) return v_null(comm, name, "sdispls");
    if (call->recvcounts == NULL) return v_null(comm, name, "recvcounts");
    if (call->rdispls == NULL) return v_null(comm, name, "rdispls");
    /* Send blocks may overlap: they are only read, and one block may go to several ranks. */
    status = v_blocks(comm, name, "sendcounts", "sdispls", call->sendcounts, call->sdispls,
                      esize, 0, &sext);
    if (status == CHORUS_SUCCESS)
        status = v_blocks(comm, name, "recvcounts", "rdispls", call->recvcounts, call->rdispls,
                          esize, 1, &rext);
    if (status != CHORUS_SUCCESS) return status;
    if (call->sendcounts[me] != call->recvcounts[me])
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: sendcounts[%d] = %zu but recvcounts[%d] = %zu: the "
                             "block a rank sends itself is the one it receives",
                             me, name, me, call->sendcounts[me], me, call->recvcounts[me]);
    call->count = call->sendcounts[me];
    if (sext.hi > 0 && s == NULL) return v_null(comm, name, "sendbuf");
    if (rext.hi > 0 && r == NULL) return v_null(comm, name, "recvbuf");
    if (v_overlap(s, sext.lo * esize, (sext.hi - sext.lo) * esize, r, rext.lo * esize,
                  (rext.hi - rext.lo) * esize))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: %s: the blocks of sendbuf and recvbuf overlap (alltoallv "
                             "has no in-place form)", me, name);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__validate_v(chorus_comm_t comm, chorus_coll_call_t *call, size_t esize)
{
    const char *name = chorus__core_coll_name(call->coll);

    switch (call->coll) {
    case CHORUS_COLL_ALLGATHERV: return v_check_allgatherv(comm, call, esize, name);
    case CHORUS_COLL_REDUCE_SCATTERV: return v_check_reduce_scatterv(comm, call, esize, name);
    case CHORUS_COLL_ALLTOALLV: return v_check_alltoallv(comm, call, esize, name);
    default:
        return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: %s: not a v-form", comm->rank, name);
    }
}

/* ---- Signatures and schedules ---- */

/* A 64-bit hash of n counts (splitmix64's finaliser over a running mix): equal arrays hash
 * alike on every rank, and a change in any count changes it. */
uint64_t chorus__coll_v_hash(const size_t *v, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;

    for (int p = 0; p < n; p++) {
        h ^= (uint64_t)v[p] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return h;
}

chorus_status_t chorus__coll_v_sign(chorus_comm_t comm, const chorus_coll_call_t *call,
                                    chorus_exec_sig_t *sig)
{
    const int n = comm->nranks, me = comm->rank;

    if (call->coll != CHORUS_COLL_ALLTOALLV) {
        uint64_t total = 0;
        for (int p = 0; p < n; p++) total += call->recvcounts[p];
        sig->count = total;
        sig->p2p_hash = chorus__coll_v_hash(call->recvcounts, n);
        chorus__exec_sign(&comm->exec, sig);
        return CHORUS_SUCCESS;
    }
    if (comm->vsigs == NULL) {
        comm->vsigs = malloc((size_t)n * sizeof *comm->vsigs);
        if (comm->vsigs == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: alltoallv: no memory for %d "
                                 "call signatures", me, n);
    }
    sig->magic = CHORUS_EXEC_SIG_MAGIC;
    sig->count = 0;
    sig->p2p_hash = 0;
    for (int p = 0; p < n; p++) {
        chorus_exec_sig_t *s = &comm->vsigs[p];
        *s = *sig;
        /* count: what the lower rank of the pair sends the higher; p2p_hash: back. */
        s->count = me < p ? call->sendcounts[p] : call->recvcounts[p];
        s->p2p_hash = me < p ? call->recvcounts[p] : call->sendcounts[p];
    }
    chorus__exec_sign_peers(&comm->exec, sig, comm->vsigs);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__coll_v_sched(chorus_comm_t comm, chorus_algo_t algo,
                                     const chorus_coll_args_t *args,
                                     const chorus_sched_t **sched_p)
{
    chorus_status_t status;

    if (comm->vsched_valid) chorus__sched_fini(&comm->vsched);
    comm->vsched_valid = 0;
    chorus__sched_init(&comm->vsched, comm->rank, comm->nranks);
    status = chorus__algo_build(algo, args, &comm->vsched);
    if (status != CHORUS_SUCCESS) {
        chorus__sched_fini(&comm->vsched);
        return chorus__error_context(status, "rank %d: %s: building the %s schedule",
                                     comm->rank, chorus__core_coll_name(args->coll),
                                     chorus__algo_name(algo));
    }
    comm->vsched_valid = 1;
    *sched_p = &comm->vsched;
    return CHORUS_SUCCESS;
}

/* ---- Entry points ---- */

chorus_status_t chorus_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                              chorus_dtype_t dtype, int root, chorus_comm_t comm, void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_GATHER, sendbuf, recvbuf, sendcount, dtype,
                               CHORUS_SUM, root, stream, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                               chorus_dtype_t dtype, int root, chorus_comm_t comm, void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                               CHORUS_SUM, root, stream, -1, NULL, NULL, NULL, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_allgatherv(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  const size_t *recvcounts, const size_t *displs,
                                  chorus_dtype_t dtype, chorus_comm_t comm, void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLGATHERV, sendbuf, recvbuf, sendcount, dtype,
                               CHORUS_SUM, 0, stream, -1, NULL, NULL, recvcounts, displs};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_reduce_scatterv(const void *sendbuf, void *recvbuf,
                                       const size_t *recvcounts, chorus_dtype_t dtype,
                                       chorus_op_t op, chorus_comm_t comm, void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_REDUCE_SCATTERV, sendbuf, recvbuf, 0, dtype, op, 0,
                               stream, -1, NULL, NULL, recvcounts, NULL};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_alltoallv(const void *sendbuf, void *recvbuf, const size_t *sendcounts,
                                 const size_t *sdispls, const size_t *recvcounts,
                                 const size_t *rdispls, chorus_dtype_t dtype, chorus_comm_t comm,
                                 void *stream)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLTOALLV, sendbuf, recvbuf, 0, dtype, CHORUS_SUM,
                               0, stream, -1, sendcounts, sdispls, recvcounts, rdispls};
    return chorus__coll_entry(comm, &call);
}

chorus_status_t chorus_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                               chorus_dtype_t dtype, int root, chorus_comm_t comm,
                               chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_GATHER, sendbuf, recvbuf, sendcount, dtype,
                               CHORUS_SUM, root, NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                chorus_dtype_t dtype, int root, chorus_comm_t comm,
                                chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                               CHORUS_SUM, root, NULL, -1, NULL, NULL, NULL, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_iallgatherv(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   const size_t *recvcounts, const size_t *displs,
                                   chorus_dtype_t dtype, chorus_comm_t comm,
                                   chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLGATHERV, sendbuf, recvbuf, sendcount, dtype,
                               CHORUS_SUM, 0, NULL, -1, NULL, NULL, recvcounts, displs};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_ireduce_scatterv(const void *sendbuf, void *recvbuf,
                                        const size_t *recvcounts, chorus_dtype_t dtype,
                                        chorus_op_t op, chorus_comm_t comm,
                                        chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_REDUCE_SCATTERV, sendbuf, recvbuf, 0, dtype, op, 0,
                               NULL, -1, NULL, NULL, recvcounts, NULL};
    return chorus__icoll_entry(comm, &call, req_p);
}

chorus_status_t chorus_ialltoallv(const void *sendbuf, void *recvbuf, const size_t *sendcounts,
                                  const size_t *sdispls, const size_t *recvcounts,
                                  const size_t *rdispls, chorus_dtype_t dtype,
                                  chorus_comm_t comm, chorus_request_t *req_p)
{
    chorus_coll_call_t call = {CHORUS_COLL_ALLTOALLV, sendbuf, recvbuf, 0, dtype, CHORUS_SUM,
                               0, NULL, -1, sendcounts, sdispls, recvcounts, rdispls};
    return chorus__icoll_entry(comm, &call, req_p);
}
