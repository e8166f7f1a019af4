/*
 * Gather, scatter and the v-forms (allgatherv, reduce_scatterv, alltoallv) through the
 * shared arena (issue 41).
 *
 * The pattern is arena_coll.c's: each writer puts what its peers need into its own slot,
 * publishes a step, and the readers take it straight out of the slots. What differs is that
 * parts have a length per writer and part:
 *   gather           every rank but the root writes its block; the root reads them all
 *   scatter          the root writes one part per rank; every other rank reads its own
 *   allgatherv       every rank writes its block (recvcounts[rank]); every rank reads all
 *   reduce_scatterv  every rank writes part d (recvcounts[d]) for each d; rank d reduces
 *                    the n parts d in rank order
 *   alltoallv        every rank writes part d (its sendcounts[d]) for each d; rank d reads
 *                    part d of every writer
 * A chunk carries the same slice [i * ce, i * ce + ce) of every part (clipped to each
 * part's length), at a stride of ce elements in the slot, so that every rank cuts the call
 * into the same chunks: ce and the number of chunks follow from the longest part of any
 * writer, which every rank must know. For gather, scatter, allgatherv and reduce_scatterv
 * it does from its own arguments (counts are the same on every rank, else the call is a
 * mismatch that the signature shows: it carries the count, or a hash of recvcounts). For
 * alltoallv only the writer knows its sendcounts, so the call starts with an operation of
 * its own that publishes every rank's sendcounts and recvcounts in the flat slots: then
 * every rank checks every pair (rank p's sendcounts[q] against q's recvcounts[p]) and finds
 * the same contradiction, if any.
 *
 * Every rank waits for every other at the first chunk and compares all signatures, readers
 * or not (arena_coll.c lets a rank that only writes run ahead): so ranks that disagree about
 * counts, root or datatype fail with CHORUS_ERR_MISMATCH on every rank, in the call itself.
 *
 * Registered windows (issue 38; arena_win.c), as arena_coll.c uses them: a writer whose send
 * buffer lies in a window offers it with the first step and writes nothing into its slot;
 * its readers take its parts from the window. When every writer offered, the readers read
 * everything at once after the first step, without chunks. A call where any writer offered
 * ends with one more step, which the offering writers wait for: when they return, nobody
 * reads their buffers. reduce_scatterv not in place; alltoallv where its counts tables
 * have room for the writers' sdispls too (its readers need them), and not for a writer
 * whose blocks went with its table.
 */
#include "arena/arena_int.h"

#include "kernels.h"
#include "util/status.h"

#include <string.h>

typedef struct {
    const chorus_arena_v_args_t *v;
    size_t esize;
    size_t parts;        /* parts a writer writes: 1 or n */
    size_t maxlen;       /* the longest part of any writer, in elements */
    size_t ce;           /* elements of a part in one chunk (the stride in a slot) */
    size_t nchunks;
    int where;           /* ARENA_MOVE_* */
    int root;            /* gather, scatter: the root's local index; else -1 */
    int own_in_slot;     /* reduce_scatterv in place: my own part goes through my slot */
    uint64_t g0;         /* the arena's chunk counter before the data */
    int win;             /* windows may be used: every rank decides the same */
    int offered;         /* my send buffer lies in a window, and my readers read it there */
    int any_win;         /* some writer offered: the call ends with the completion step */
    size_t rs_total;     /* reduce_scatterv: elements of a send buffer (sum of recvcounts) */
    const uint8_t *table_base; /* alltoallv: the flat slots holding every rank's counts */
    int table_par;
    int table_sd;        /* alltoallv: the tables carry sdispls too (for windows) */
    size_t traffic;
} vmove_t;

/* Writer r's counts table (alltoallv): a word saying whether its blocks follow the table
 * (VM_PACKED), then n sendcounts and n recvcounts, by comm rank, and n sdispls where
 * windows may be used and the flat slot has room (table_sd): a reader of r's window needs
 * them. */
#define VM_PACKED 1u
static const uint64_t *vm_table(const chorus_arena_t *a, const vmove_t *m, int r)
{
    return (const uint64_t *)(const void *)(m->table_base +
                                            ((size_t)r * 2 + (size_t)m->table_par) * a->flat_slot) +
           1;
}

/* Whether writer r's blocks went with its table: read from the tables once (vm_counts),
 * since r may rewrite its table for its next call while this rank still reads. */
static int vm_packed(const chorus_arena_t *a, int r)
{
    return a->vpacked[r] != 0;
}

/* Elements of writer r's part d (local indices). */
static size_t vm_part_len(const chorus_arena_t *a, const vmove_t *m, int r, size_t d)
{
    const chorus_arena_v_args_t *v = m->v;

    switch (v->coll) {
    case CHORUS_COLL_GATHER:
    case CHORUS_COLL_SCATTER: return v->count;
    case CHORUS_COLL_ALLGATHERV: return v->recvcounts[a->ranks[r]];
    case CHORUS_COLL_REDUCE_SCATTERV: return v->recvcounts[a->ranks[d]];
    default: /* alltoallv: a writer whose blocks went with its table has none left */
        return vm_packed(a, r) ? 0 : (size_t)vm_table(a, m, r)[a->ranks[d]];
    }
}

/* Elements of part length len in chunk i (0 once the part has ended). */
static size_t vm_slice(const vmove_t *m, size_t len, size_t i)
{
    size_t off = i * m->ce;
    if (off >= len) return 0;
    return len - off < m->ce ? len - off : m->ce;
}

static uint8_t *vm_slot(const chorus_arena_t *a, const vmove_t *m, int r, size_t i)
{
    return arena__move_slot(a, m->where, r, m->g0 + i);
}

static void vm_copy(const vmove_t *m, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return;
    if (bytes > ARENA_INLINE) chorus_kernel_copy_stream(dst, src, bytes, m->traffic);
    else memcpy(dst, src, bytes);
}

/* Does this rank write parts, and which of them go through its slot? */
static int vm_writes(const chorus_arena_t *a, const vmove_t *m)
{
    switch (m->v->coll) {
    case CHORUS_COLL_GATHER: return a->me != m->root;
    case CHORUS_COLL_SCATTER: return a->me == m->root;
    default: return 1;
    }
}

static int vm_reads(const chorus_arena_t *a, const vmove_t *m)
{
    switch (m->v->coll) {
    case CHORUS_COLL_GATHER: return a->me == m->root;
    case CHORUS_COLL_SCATTER: return a->me != m->root;
    default: return 1;
    }
}

/* Where part d of this rank's send buffer starts. */
static const uint8_t *vm_send_part(const chorus_arena_t *a, const vmove_t *m, size_t d,
                                   size_t rs_off)
{
    const chorus_arena_v_args_t *v = m->v;
    const uint8_t *s = v->sendbuf;

    switch (v->coll) {
    case CHORUS_COLL_SCATTER: return s + (size_t)a->ranks[d] * v->count * m->esize;
    case CHORUS_COLL_REDUCE_SCATTERV: return s + rs_off * m->esize;
    case CHORUS_COLL_ALLTOALLV: return s + v->sdispls[a->ranks[d]] * m->esize;
    default: return s;
    }
}

/* Slice i of my parts into my slot. */
static void vm_write(chorus_arena_t *a, const vmove_t *m, size_t i)
{
    uint8_t *slot = vm_slot(a, m, a->me, i);
    size_t rs_off = 0;

    if (!vm_writes(a, m) || m->offered) return;
    for (size_t d = 0; d < m->parts; d++) {
        size_t len = vm_part_len(a, m, a->me, d), n = vm_slice(m, len, i);
        int own = m->parts > 1 && d == (size_t)a->me;

        if (n > 0 && (!own || m->own_in_slot))
            memcpy(slot + d * m->ce * m->esize,
                   vm_send_part(a, m, d, rs_off) + i * m->ce * m->esize, n * m->esize);
        rs_off += m->v->coll == CHORUS_COLL_REDUCE_SCATTERV ? len : 0;
    }
}

/* What never goes through a slot: a rank's own block, copied once before the chunks. */
static void vm_own(chorus_arena_t *a, const vmove_t *m)
{
    const chorus_arena_v_args_t *v = m->v;
    const uint8_t *s = v->sendbuf;
    uint8_t *r = v->recvbuf;
    const int me = a->ranks[a->me];

    switch (v->coll) {
    case CHORUS_COLL_GATHER:
        if (a->me == m->root) vm_copy(m, r + (size_t)me * v->count * m->esize, s,
                                      v->count * m->esize);
        return;
    case CHORUS_COLL_SCATTER:
        if (a->me == m->root) vm_copy(m, r, s + (size_t)me * v->count * m->esize,
                                      v->count * m->esize);
        return;
    case CHORUS_COLL_ALLGATHERV:
        vm_copy(m, r + v->rdispls[me] * m->esize, s, v->recvcounts[me] * m->esize);
        return;
    case CHORUS_COLL_ALLTOALLV:
        vm_copy(m, r + v->rdispls[me] * m->esize, s + v->sdispls[me] * m->esize,
                v->recvcounts[me] * m->esize);
        return;
    default: return;
    }
}

/* The bytes of writer r's send buffer that its readers read, 0 for a rank that writes
 * nothing: the same on every rank (never what only r knows, such as whether it works in
 * place), so that every rank decides the same from the offers. */
static size_t vm_win_bytes(const chorus_arena_t *a, const vmove_t *m, int r)
{
    const chorus_arena_v_args_t *v = m->v;

    switch (v->coll) {
    case CHORUS_COLL_GATHER: return r == m->root ? 0 : v->count * m->esize;
    case CHORUS_COLL_SCATTER: return r == m->root ? (size_t)a->n * v->count * m->esize : 0;
    case CHORUS_COLL_ALLGATHERV: return v->recvcounts[a->ranks[r]] * m->esize;
    case CHORUS_COLL_REDUCE_SCATTERV: return m->rs_total * m->esize;
    case CHORUS_COLL_ALLTOALLV: {
        /* From r's table, which every rank reads the same; a writer whose blocks went with
         * its table has nothing left to offer. */
        const uint64_t *t = vm_table(a, m, r);
        size_t end = 0;
        if (!m->table_sd || vm_packed(a, r)) return 0;
        for (int p = 0; p < a->n; p++)
            if (t[p] > 0 && t[2 * a->n + p] + t[p] > end) end = (size_t)(t[2 * a->n + p] + t[p]);
        return end * m->esize;
    }
    default: return 0;
    }
}

/* Where my part of writer r's chunk i is: in its window when it offered one, else in its
 * slot. win_off: where my part starts in a writer's send buffer. */
static const uint8_t *vm_src(const chorus_arena_t *a, const vmove_t *m, int r, size_t i,
                             size_t win_off)
{
    if (m->any_win && a->wsrc[r] != NULL) return a->wsrc[r] + win_off + i * m->ce * m->esize;
    return vm_slot(a, m, r, i) + (m->parts > 1 ? (size_t)a->me : 0) * m->ce * m->esize;
}

/* After the first step, whose control lines carry every writer's offer: where each
 * offered buffer is mapped here (a->wsrc), whether any writer offered, and whether all did
 * (*all_p). Every rank reads the same lines, so all decide the same. */
static chorus_status_t vm_resolve(chorus_arena_t *a, vmove_t *m, int *all_p)
{
    int all = 1;

    m->any_win = 0;
    for (int r = 0; r < a->n; r++) {
        uint64_t o = a->ctl[r].offer[a->opno & 1][0];
        size_t bytes = vm_win_bytes(a, m, r);

        a->wsrc[r] = NULL;
        if (bytes == 0) continue; /* not a writer */
        if (o != 0 && r != a->me) {
            a->wsrc[r] = arena__win_at(a, r, o, bytes);
            /* alltoallv: straight at r's block for me, from r's table, which r may rewrite
             * for its next call once this one's steps are through. */
            if (a->wsrc[r] != NULL && m->v->coll == CHORUS_COLL_ALLTOALLV)
                a->wsrc[r] += vm_table(a, m, r)[2 * a->n + a->ranks[a->me]] * m->esize;
            if (a->wsrc[r] == NULL)
                return arena__fail(a, chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: %s: "
                                                    "rank %d names window %u at %llu, which "
                                                    "this rank does not have",
                                                    a->rank, m->v->what, a->ranks[r],
                                                    (unsigned)ARENA_OFFER_ID(o),
                                                    (unsigned long long)ARENA_OFFER_OFF(o)));
        }
        m->any_win |= o != 0;
        if (o == 0) all = 0;
    }
    *all_p = all && m->any_win;
    return CHORUS_SUCCESS;
}

/* Slice i of what I receive, out of the writers' slots (or windows). */
static chorus_status_t vm_read(chorus_arena_t *a, const vmove_t *m, size_t i, size_t rs_own)
{
    const chorus_arena_v_args_t *v = m->v;
    uint8_t *recv = v->recvbuf;
    const size_t me = (size_t)a->me, off = i * m->ce * m->esize;
    chorus_status_t status;

    switch (v->coll) {
    case CHORUS_COLL_SCATTER: {
        size_t n = vm_slice(m, v->count, i);
        if (m->any_win && a->wsrc[m->root] != NULL) a->win_bytes += n * m->esize;
        vm_copy(m, recv + off,
                vm_src(a, m, m->root, i, (size_t)a->ranks[me] * v->count * m->esize),
                n * m->esize);
        return CHORUS_SUCCESS;
    }
    case CHORUS_COLL_REDUCE_SCATTERV: {
        size_t n = vm_slice(m, v->recvcounts[a->ranks[me]], i);
        if (n == 0) return CHORUS_SUCCESS;
        for (int r = 0; r < a->n; r++) {
            a->srcs[r] = vm_src(a, m, r, i, rs_own * m->esize);
            if (r != (int)me && m->any_win && a->wsrc[r] != NULL) a->win_bytes += n * m->esize;
        }
        if (!m->own_in_slot) a->srcs[me] = (const uint8_t *)v->sendbuf + rs_own * m->esize + off;
        status = arena__reduce(a, recv + off, n, v->dtype, v->op);
        if (status != CHORUS_SUCCESS)
            return arena__fail(a, chorus__error(status, "rank %d: arena: %s: reduce failed",
                                                a->rank, v->what));
        return CHORUS_SUCCESS;
    }
    default:
        /* gather (the root), allgatherv, alltoallv: every other writer's part for me, from
         * my right neighbour on, so that readers do not all start on one slot. */
        for (int k = 1; k < a->n; k++) {
            int r = a->me + k < a->n ? a->me + k : a->me + k - a->n;
            int cr = a->ranks[r];
            size_t len, dst;

            if (v->coll == CHORUS_COLL_GATHER) {
                len = v->count;
                dst = (size_t)cr * v->count;
            } else if (v->coll == CHORUS_COLL_ALLTOALLV && vm_packed(a, r)) {
                continue; /* taken with its table (vm_counts) */
            } else {
                len = v->recvcounts[cr];
                dst = v->rdispls[cr];
            }
            if (m->any_win && a->wsrc[r] != NULL) a->win_bytes += vm_slice(m, len, i) * m->esize;
            vm_copy(m, recv + dst * m->esize + off, vm_src(a, m, r, i, 0),
                    vm_slice(m, len, i) * m->esize);
        }
        return CHORUS_SUCCESS;
    }
}

/* Where the parts go and how they are cut: every rank computes the same from maxlen. */
static void vm_plan(const chorus_arena_t *a, vmove_t *m)
{
    arena_plan_t p = arena__plan(a, m->parts, m->maxlen, m->esize);

    m->where = p.where;
    m->ce = p.ce;
    m->nchunks = m->maxlen > 0 ? p.nchunks : 0;
}

/* alltoallv's first operation: every rank publishes its sendcounts and recvcounts, and
 * checks every pair. A rank whose blocks for the others fit the flat slot after its table
 * puts them there too (back to back, by destination), and its readers take them at once:
 * a small alltoallv is then one step, like the other collectives, instead of two. Leaves
 * the tables in the flat slots of this operation's parity. */
static chorus_status_t vm_counts(chorus_arena_t *a, vmove_t *m)
{
    const chorus_arena_v_args_t *v = m->v;
    const int n = a->n, me = a->ranks[a->me];
    const int sd = a->nwins > 0 && (1 + 3 * (size_t)n) * sizeof(uint64_t) <= a->flat_slot;
    const size_t hdr = (1 + (sd ? 3 : 2) * (size_t)n) * sizeof(uint64_t);
    uint64_t s0 = a->step, *mine, total = 0;
    uint8_t *packed;
    chorus_status_t status = arena__enter(a, v->what);

    if (status != CHORUS_SUCCESS) return status;
    a->opno++;
    arena__sig_set(a, CHORUS_COLL_ALLTOALLV, 0, v->dtype, CHORUS_SUM, 0);
    m->table_base = a->flat;
    m->table_par = (int)(a->opno & 1);
    mine = (uint64_t *)(void *)(a->flat + ((size_t)a->me * 2 + (size_t)m->table_par) * a->flat_slot);
    packed = (uint8_t *)mine + hdr;
    m->table_sd = sd;
    for (int p = 0; p < n; p++) {
        mine[1 + p] = v->sendcounts[p];
        mine[1 + n + p] = v->recvcounts[p];
        if (sd) mine[1 + 2 * n + p] = v->sdispls[p];
        if (p != me) total += v->sendcounts[p];
    }
    mine[0] = total * m->esize <= a->flat_slot - hdr ? VM_PACKED : 0;
    if (mine[0] & VM_PACKED) {
        for (int p = 0; p < n; p++) {
            size_t bytes = v->sendcounts[p] * m->esize;
            if (p == me || bytes == 0) continue;
            memcpy(packed, (const uint8_t *)v->sendbuf + v->sdispls[p] * m->esize, bytes);
            packed += bytes;
        }
    }
    arena__publish(a, s0 + 1);
    status = arena__wait_all(a, s0 + 1, v->what);
    if (status == CHORUS_SUCCESS) status = arena__check_sigs(a, m->table_par, v->what);
    if (status != CHORUS_SUCCESS) return status;
    m->maxlen = 0;
    for (int r = 0; r < n; r++) a->vpacked[r] = (vm_table(a, m, r)[-1] & VM_PACKED) != 0;
    for (int r = 0; r < n; r++) {
        const uint64_t *t = vm_table(a, m, r);
        for (int d = 0; d < n; d++) {
            uint64_t sent = t[a->ranks[d]], want = vm_table(a, m, d)[n + a->ranks[r]];
            if (sent != want)
                return arena__fail(
                    a, chorus__error(CHORUS_ERR_MISMATCH,
                                     "rank %d: arena: %s: the counts of alltoallv differ: rank "
                                     "%d sends rank %d %llu elements but rank %d expects %llu "
                                     "(counts with rank %d)",
                                     a->rank, v->what, a->ranks[r], a->ranks[d],
                                     (unsigned long long)sent, a->ranks[d],
                                     (unsigned long long)want, a->ranks[r]));
            if (d != r && !vm_packed(a, r) && sent > m->maxlen) m->maxlen = (size_t)sent;
        }
    }
    /* My blocks from the writers that packed theirs: after its table, the blocks for the
     * ranks before me (its own excepted). */
    for (int r = 0; r < n; r++) {
        const uint64_t *t = vm_table(a, m, r);
        size_t off = 0;
        int cr = a->ranks[r];

        if (r == a->me || !vm_packed(a, r)) continue;
        for (int p = 0; p < me; p++)
            if (p != cr) off += (size_t)t[p];
        vm_copy(m, (uint8_t *)v->recvbuf + v->rdispls[cr] * m->esize,
                (const uint8_t *)(t + (sd ? 3 : 2) * n) + off * m->esize,
                v->recvcounts[cr] * m->esize);
    }
    return CHORUS_SUCCESS;
}

/* The end of a call where some writer offered its buffer: every rank says it has read
 * everything (step s), and an offering writer returns only once all have. */
static chorus_status_t vm_win_done(chorus_arena_t *a, const vmove_t *m, uint64_t s)
{
    arena__publish(a, s);
    return m->offered ? arena__wait_all(a, s, m->v->what) : CHORUS_SUCCESS;
}

chorus_status_t chorus__arena_v(chorus_arena_t *a, const chorus_arena_v_args_t *v)
{
    vmove_t m;
    uint64_t s0, sig_count = 0;
    size_t rs_own = 0;
    int reads;
    chorus_status_t status;

    memset(&m, 0, sizeof m);
    m.v = v;
    m.esize = chorus_dtype_size(v->dtype);
    m.root = -1;
    if (m.esize == 0 || ARENA_LINE % m.esize != 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: arena: %s: bad dtype %d",
                             a->rank, v->what, (int)v->dtype);
    switch (v->coll) {
    case CHORUS_COLL_GATHER:
    case CHORUS_COLL_SCATTER:
        m.root = arena__local_index(a, v->root);
        if (m.root < 0)
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: arena: %s: bad root %d",
                                 a->rank, v->what, v->root);
        m.parts = v->coll == CHORUS_COLL_SCATTER ? (size_t)a->n : 1;
        m.maxlen = v->count;
        sig_count = v->count;
        break;
    case CHORUS_COLL_ALLGATHERV:
    case CHORUS_COLL_REDUCE_SCATTERV:
        m.parts = v->coll == CHORUS_COLL_ALLGATHERV ? 1 : (size_t)a->n;
        for (int p = 0; p < a->n; p++) {
            if (v->recvcounts[p] > m.maxlen) m.maxlen = v->recvcounts[p];
            if (p < a->ranks[a->me]) rs_own += v->recvcounts[p];
            m.rs_total += v->recvcounts[p];
        }
        sig_count = v->counts_hash;
        /* In place, my block of sendbuf is recvbuf: the reduction's destination may alias
         * only its first source, so my own part goes through my slot too. */
        m.own_in_slot = v->coll == CHORUS_COLL_REDUCE_SCATTERV &&
                        (const uint8_t *)v->recvbuf == (const uint8_t *)v->sendbuf +
                                                           rs_own * m.esize;
        break;
    case CHORUS_COLL_ALLTOALLV:
        m.parts = (size_t)a->n;
        status = vm_counts(a, &m);
        if (status != CHORUS_SUCCESS) return status;
        break;
    default:
        return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: arena: %s: not a v-form", a->rank,
                             v->what);
    }
    m.traffic = m.maxlen * m.esize * (size_t)a->n * (m.parts + 1);
    vm_own(a, &m);
    if (v->coll == CHORUS_COLL_ALLTOALLV && m.maxlen == 0) return CHORUS_SUCCESS;

    s0 = a->step;
    status = arena__enter(a, v->what);
    if (status != CHORUS_SUCCESS) return status;
    a->opno++;
    m.g0 = a->gchunk;
    vm_plan(a, &m);
    arena__sig_set(a, v->coll, sig_count, v->dtype,
                   v->coll == CHORUS_COLL_REDUCE_SCATTERV ? v->op : CHORUS_SUM,
                   m.root < 0 ? 0 : a->ranks[m.root]);
    reads = vm_reads(a, &m);
    /* Windows: decided from what every rank knows (nwins, the plan, the collective). */
    m.win = a->nwins > 0 && m.where != ARENA_MOVE_INLINE &&
            (v->coll != CHORUS_COLL_ALLTOALLV || m.table_sd);
    if (m.win) {
        /* Not in place for reduce_scatterv: my own part goes through my slot. */
        uint64_t o = vm_writes(a, &m) && !m.own_in_slot
                         ? arena__win_offer(a, v->sendbuf, vm_win_bytes(a, &m, a->me))
                         : 0;
        m.offered = o != 0;
        a->ctl[a->me].offer[a->opno & 1][0] = o;
    }
    for (size_t i = 0; i < m.nchunks; i++) {
        if (i > 0) {
            status = arena__wait_all(a, s0 + i, v->what);
            if (status != CHORUS_SUCCESS) return status;
        }
        vm_write(a, &m, i);
        arena__publish(a, s0 + i + 1);
        if (i == 0) {
            /* Everyone, reader or not, compares every signature once. */
            status = arena__wait_all(a, s0 + 1, v->what);
            if (status == CHORUS_SUCCESS)
                status = arena__check_sigs(a, (int)(a->opno & 1), v->what);
            if (status == CHORUS_SUCCESS && m.win) {
                int all = 0;
                status = vm_resolve(a, &m, &all);
                if (status == CHORUS_SUCCESS && all) { /* everything from the windows, at once */
                    m.ce = m.maxlen;
                    if (reads) {
                        status = vm_read(a, &m, 0, rs_own);
                        if (status != CHORUS_SUCCESS) return status;
                        a->win_calls++;
                    }
                    a->unchecked = 0;
                    return vm_win_done(a, &m, s0 + 2);
                }
            }
        } else if (reads) {
            status = v->coll == CHORUS_COLL_SCATTER
                         ? arena__wait_range(a, s0 + i + 1, m.root, m.root + 1, v->what)
                         : arena__wait_all(a, s0 + i + 1, v->what);
        }
        if (status == CHORUS_SUCCESS && reads) status = vm_read(a, &m, i, rs_own);
        if (status != CHORUS_SUCCESS) return status;
    }
    a->unchecked = 0;
    if (m.where == ARENA_MOVE_STAGED) a->gchunk += m.nchunks;
    if (m.any_win) return vm_win_done(a, &m, s0 + m.nchunks + 1);
    return CHORUS_SUCCESS;
}
