/*
 * Allgather, reduce_scatter, broadcast, reduce, alltoall and barrier through the shared
 * arena.
 *
 * All five are one pattern: each rank writes what others need from it into its own slot,
 * publishes a step, waits until every rank has published it, and then reads what it needs
 * straight out of the others' slots (copying, or for reduce_scatter reducing all n sources
 * in one pass, in rank order). So a byte is copied once into the segment and once out of
 * it, where a schedule over the shm byte rings copies it in and out once per hop, and
 * there is one synchronisation per chunk where a schedule has one per message and step.
 *
 * What a rank writes is `parts` parts of `count` elements: one (allgather: its vector;
 * broadcast: the root's vector, nobody else writes) or one per rank (alltoall and
 * reduce_scatter: the block meant for rank d goes to part d). Where the slot is:
 *   - every part fits ARENA_INLINE bytes together: the control line itself, so that a
 *     waiter gets step, signature and data in one cache-line transfer;
 *   - they fit a flat slot: the flat slot of this operation's parity, one step;
 *   - larger: in chunks through the staging slots (by the parity of the arena's chunk
 *     counter), each chunk taking the same slice [i * ce, i * ce + ce) of every part.
 *
 * Per chunk i: write my parts' slice i, publish step s0 + i + 1, wait for every rank at
 * it, read slice i. Reuse of the slots by parity is safe because a rank writes chunk i + 1
 * into the slot of chunk i - 1 only after it saw every rank publish chunk i, which each did
 * after reading chunk i - 1; across operations the same holds with the arena's chunk
 * counter for the staging slots and the operation counter for the flat and inline ones
 * (arena.c makes the same argument for allreduce, and every operation ends after a wait
 * for every rank at its last step, so the two kinds interleave safely). Each operation's
 * signature is published with its first step and checked before any peer data is read.
 */
#include "arena/arena_int.h"

#include "kernels.h"
#include "util/status.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* One data-moving collective on the arena. */
typedef struct {
    chorus_coll_t coll;
    const uint8_t *send;
    uint8_t *recv;
    size_t count;   /* elements of one part */
    size_t esize;
    size_t parts;   /* parts a writer writes: 1 or n */
    size_t ce;      /* elements of one part in one chunk */
    size_t nchunks;
    size_t traffic; /* bytes all local ranks' buffers span (to choose streaming stores) */
    int root;       /* broadcast, reduce: the root's local index; -1 otherwise */
    int own_in_slot; /* in place (reduce_scatter, reduce root): my own part goes through my
                      * slot, since the kernel's destination may alias only its first source */
    int where;      /* ARENA_MOVE_* */
    chorus_dtype_t dtype;
    chorus_op_t op;
    uint64_t g0;    /* the arena's chunk counter before the operation */
    int offered;    /* registered windows: my buffer lies in one and my peers read it there */
    int any_win;    /* some rank of the operation offered its buffer (then every rank
                     * publishes one more step at the end, which offerers wait for) */
    int use_wsrc;   /* a->wsrc holds this operation's peers' buffers (move_resolve) */
    const char *what;
} arena_move_t;

/* Rank r's slot for chunk i of m. */
static uint8_t *move_slot(const chorus_arena_t *a, const arena_move_t *m, int r, size_t i)
{
    return arena__move_slot(a, m->where, r, m->g0 + i);
}

/* Elements of each part in chunk i. */
static size_t move_len(const arena_move_t *m, size_t i)
{
    size_t off = i * m->ce;
    return m->count - off < m->ce ? m->count - off : m->ce;
}

/* Byte offsets: of part p's slice i in a slot, and of element off of part p in a buffer. */
static size_t move_slot_off(const arena_move_t *m, size_t p)
{
    return p * m->ce * m->esize;
}

static size_t move_buf_off(const arena_move_t *m, size_t p, size_t off)
{
    return (p * m->count + off) * m->esize;
}

/* The k-th peer from my right neighbour on (k = 1 .. n - 1), so that n readers do not all
 * start on one writer's slot. */
static int move_peer(const chorus_arena_t *a, int k)
{
    return a->me + k < a->n ? a->me + k : a->me + k - a->n;
}

static void move_copy(const arena_move_t *m, void *dst, const void *src, size_t bytes)
{
    if (bytes > ARENA_INLINE) chorus_kernel_copy_stream(dst, src, bytes, m->traffic);
    else memcpy(dst, src, bytes);
}

/* Where rank r's part `part` of chunk i is: in its registered buffer when it offered one
 * (a->wsrc), else in its slot. */
static const uint8_t *move_src(const chorus_arena_t *a, const arena_move_t *m, int r, size_t i,
                               size_t part)
{
    if (m->use_wsrc && a->wsrc[r] != NULL)
        return a->wsrc[r] + (m->parts > 1 ? move_buf_off(m, part, i * m->ce) : i * m->ce * m->esize);
    return move_slot(a, m, r, i) + move_slot_off(m, m->parts > 1 ? part : 0);
}

/* My parts' slice i into my slot. */
static void move_write(chorus_arena_t *a, const arena_move_t *m, size_t i)
{
    size_t off = i * m->ce, bytes = move_len(m, i) * m->esize;
    uint8_t *slot = move_slot(a, m, a->me, i);

    if (m->offered) return; /* my peers read my buffer itself (the root's copy: below) */

    switch (m->coll) {
    case CHORUS_COLL_REDUCE:
        if (a->me == m->root && !m->own_in_slot) return;
        memcpy(slot, m->send + off * m->esize, bytes);
        return;
    case CHORUS_COLL_BROADCAST:
        /* The root's own copy comes after the chunk is published (move_root_copy). */
        if (a->me == m->root) memcpy(slot, m->send + off * m->esize, bytes);
        return;
    case CHORUS_COLL_ALLGATHER: memcpy(slot, m->send + off * m->esize, bytes); return;
    case CHORUS_COLL_ALLTOALL:
    case CHORUS_COLL_REDUCE_SCATTER:
        for (size_t d = 0; d < m->parts; d++)
            if (d != (size_t)a->me || m->own_in_slot)
                memcpy(slot + move_slot_off(m, d), m->send + move_buf_off(m, d, off), bytes);
        return;
    default: return;
    }
}

/* A broadcast root reads nothing: its own copy of chunk i (all of it, when its readers
 * read its window), made once the chunk is published, so that it runs beside its
 * readers' copies rather than before them. */
static void move_root_copy(const chorus_arena_t *a, const arena_move_t *m, size_t i)
{
    size_t off = i * m->ce;

    if (m->coll == CHORUS_COLL_BROADCAST && a->me == m->root && m->send != m->recv)
        move_copy(m, m->recv + off * m->esize, m->send + off * m->esize,
                  move_len(m, i) * m->esize);
}

/* Slice i of what I receive, out of every rank's slot. */
static chorus_status_t move_read(chorus_arena_t *a, const arena_move_t *m, size_t i)
{
    size_t off = i * m->ce, len = move_len(m, i), bytes = len * m->esize;
    size_t me = (size_t)a->me;
    chorus_status_t status;

    switch (m->coll) {
    case CHORUS_COLL_ALLGATHER:
        /* Mine first (from sendbuf, still in my cache; nothing to do in place). */
        if (m->send != m->recv + move_buf_off(m, me, 0))
            move_copy(m, m->recv + move_buf_off(m, me, off), m->send + off * m->esize, bytes);
        for (int k = 1; k < a->n; k++) {
            int r = move_peer(a, k);
            move_copy(m, m->recv + move_buf_off(m, (size_t)r, off), move_src(a, m, r, i, 0),
                      bytes);
        }
        return CHORUS_SUCCESS;
    case CHORUS_COLL_BROADCAST:
        move_copy(m, m->recv + off * m->esize, move_src(a, m, m->root, i, 0), bytes);
        return CHORUS_SUCCESS;
    case CHORUS_COLL_ALLTOALL:
        if (m->send != m->recv)
            move_copy(m, m->recv + move_buf_off(m, me, off), m->send + move_buf_off(m, me, off),
                      bytes);
        for (int k = 1; k < a->n; k++) {
            int r = move_peer(a, k);
            move_copy(m, m->recv + move_buf_off(m, (size_t)r, off), move_src(a, m, r, i, me),
                      bytes);
        }
        return CHORUS_SUCCESS;
    case CHORUS_COLL_REDUCE: /* the root: every rank's part 0, mine from sendbuf */
    case CHORUS_COLL_REDUCE_SCATTER:
        for (int r = 0; r < a->n; r++) a->srcs[r] = move_src(a, m, r, i, m->parts > 1 ? me : 0);
        if (!m->own_in_slot)
            a->srcs[me] = m->send + (m->parts > 1 ? move_buf_off(m, me, off) : off * m->esize);
        status = arena__reduce(a, m->recv + off * m->esize, len, m->dtype, m->op);
        if (status != CHORUS_SUCCESS)
            return arena__fail(a, chorus__error(status, "rank %d: arena: %s: reduce failed",
                                                a->rank, m->what));
        return CHORUS_SUCCESS;
    default: return CHORUS_SUCCESS;
    }
}

/* Chooses where the parts go and how they are cut into chunks. */
static void move_plan(const chorus_arena_t *a, arena_move_t *m)
{
    arena_plan_t p = arena__plan(a, m->parts, m->count, m->esize);

    m->where = p.where;
    m->ce = p.ce;
    m->nchunks = p.nchunks;
}

/* Nonzero when m reads straight from its peers' buffers (arena_cma.c): decided from the
 * signature alone (collective and size), so that every rank of a matching call takes the
 * same path, and a mismatched one is caught at the first step, which both paths share. */
static int move_single_copy(const chorus_arena_t *a, const arena_move_t *m)
{
    if (!a->cma || m->count * m->esize < a->cma_min) return 0;
    return m->coll == CHORUS_COLL_ALLGATHER || m->coll == CHORUS_COLL_BROADCAST ||
           m->coll == CHORUS_COLL_ALLTOALL;
}

/* The single-copy path: each rank publishes the address of what its peers need with the
 * first step, every rank reads its share with process_vm_readv straight into its receive
 * buffer, and a second step tells the owners that their buffers are free again. In-place
 * alltoall offers a private copy of its input, since its own reads overwrite the buffer
 * its peers would read. */
static chorus_status_t move_cma(chorus_arena_t *a, const arena_move_t *m, uint64_t s0)
{
    size_t bytes = m->count * m->esize, me = (size_t)a->me;
    const uint8_t *offer = m->send;
    chorus_status_t status;

    if (m->coll == CHORUS_COLL_BROADCAST && a->me != m->root) offer = NULL;
    if (m->coll == CHORUS_COLL_ALLTOALL && m->send == m->recv) {
        if (a->tmp_cap < bytes * (size_t)a->n) {
            void *t = realloc(a->tmp, bytes * (size_t)a->n);
            if (t == NULL)
                return arena__fail(a, chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: arena: %s: "
                                                    "no memory for %zu bytes", a->rank, m->what,
                                                    bytes * (size_t)a->n));
            a->tmp = t;
            a->tmp_cap = bytes * (size_t)a->n;
        }
        memcpy(a->tmp, m->send, bytes * (size_t)a->n);
        offer = a->tmp;
    }
    a->ctl[a->me].addr = (uint64_t)(uintptr_t)offer;
    arena__publish(a, s0 + 1);
    status = arena__wait_all(a, s0 + 1, m->what);
    if (status == CHORUS_SUCCESS) status = arena__check_sigs(a, (int)(a->opno & 1), m->what);
    if (status != CHORUS_SUCCESS) return status;
    switch (m->coll) {
    case CHORUS_COLL_BROADCAST:
        if (a->me != m->root)
            status = arena__cma_read(a, m->root, m->recv, a->ctl[m->root].addr, bytes, m->what);
        else if (m->send != m->recv)
            move_copy(m, m->recv, m->send, bytes);
        break;
    default: /* allgather, alltoall: mine first, then from my right neighbour on */
        if (m->coll == CHORUS_COLL_ALLGATHER && m->send != m->recv + move_buf_off(m, me, 0))
            move_copy(m, m->recv + move_buf_off(m, me, 0), m->send, bytes);
        if (m->coll == CHORUS_COLL_ALLTOALL && m->send != m->recv)
            move_copy(m, m->recv + move_buf_off(m, me, 0), m->send + move_buf_off(m, me, 0),
                      bytes);
        for (int k = 1; k < a->n && status == CHORUS_SUCCESS; k++) {
            int r = move_peer(a, k);
            uint64_t from = a->ctl[r].addr +
                            (m->coll == CHORUS_COLL_ALLTOALL ? move_buf_off(m, me, 0) : 0);
            status = arena__cma_read(a, r, m->recv + move_buf_off(m, (size_t)r, 0), from, bytes,
                                     m->what);
        }
        break;
    }
    if (status != CHORUS_SUCCESS) return status;
    arena__publish(a, s0 + 2);
    return arena__wait_all(a, s0 + 2, m->what);
}

/* Registered windows (arena_win.c). Whether m may read peers' buffers in their windows:
 * decided from the signature alone, like the single-copy path, so that every rank of a
 * matching call takes the same steps; whether each peer offered its buffer is its own
 * affair, read with its first step (in place, move_offer offers nothing). */
static int move_may_win(const chorus_arena_t *a, const arena_move_t *m)
{
    return a->nwins > 0 && m->where != ARENA_MOVE_INLINE &&
           chorus__arena_win_path(m->coll, a->n, m->count * m->esize, 0, 0) !=
               CHORUS_ARENA_WIN_NONE;
}

/* Writes into my control line which window (if any) holds the buffer my peers read from
 * me; published with the first step. Not in place for alltoall (my own reads overwrite
 * it) nor where my own part must go through my slot (in-place reduce_scatter). */
static void move_offer(chorus_arena_t *a, arena_move_t *m)
{
    size_t bytes = m->count * m->esize * m->parts;
    uint64_t v;

    if (m->coll == CHORUS_COLL_BROADCAST && a->me != m->root) bytes = 0;
    if (m->coll == CHORUS_COLL_ALLTOALL && m->send == m->recv) bytes = 0;
    if (m->own_in_slot) bytes = 0;
    v = arena__win_offer(a, m->send, bytes);
    m->offered = v != 0;
    a->ctl[a->me].offer[a->opno & 1][0] = v;
}

/* Once the ranks this one reads have published the first step: where each one's buffer is
 * mapped here (a->wsrc), whether some rank offered (m->any_win) and whether every rank
 * offered (*all_p: then nothing goes through the slots; for broadcast, the root). Every
 * rank reaches the same two answers from the same control lines. */
static chorus_status_t move_resolve(chorus_arena_t *a, arena_move_t *m, int *all_p)
{
    size_t bytes = m->count * m->esize * m->parts;
    int all = 1;

    m->any_win = 0;
    for (int r = 0; r < a->n; r++) {
        uint64_t v = a->ctl[r].offer[a->opno & 1][0];
        a->wsrc[r] = NULL;
        if (m->coll == CHORUS_COLL_BROADCAST && r != m->root) continue;
        if (v != 0 && r != a->me) {
            a->wsrc[r] = arena__win_at(a, r, v, bytes);
            if (a->wsrc[r] == NULL)
                return arena__fail(a, chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: %s: "
                                                    "rank %d names window %u at %" PRIu64
                                                    ", which this rank does not have",
                                                    a->rank, m->what, a->ranks[r],
                                                    ARENA_OFFER_ID(v), ARENA_OFFER_OFF(v)));
        }
        m->any_win |= v != 0;
        if (a->wsrc[r] != NULL) a->win_bytes += m->count * m->esize;
        if (v == 0) all = 0; /* every rank, this one too: all must take the same steps */
    }
    m->use_wsrc = 1;
    *all_p = all && m->any_win;
    return CHORUS_SUCCESS;
}

/* The end of an operation where some rank offered its buffer: every rank says it has read
 * everything (step s), and an offerer returns only when all have, so that its caller may
 * overwrite the buffer at once. */
static chorus_status_t move_win_done(chorus_arena_t *a, const arena_move_t *m, uint64_t s)
{
    arena__publish(a, s);
    if (!m->offered) return CHORUS_SUCCESS;
    return arena__wait_all(a, s, m->what);
}

/* Nonzero when this rank reads anything in m: everyone but the root of a broadcast, only
 * the root of a reduce. */
static int move_reads(const chorus_arena_t *a, const arena_move_t *m)
{
    if (m->coll == CHORUS_COLL_BROADCAST) return a->me != m->root;
    if (m->coll == CHORUS_COLL_REDUCE) return a->me == m->root;
    return 1;
}

/* Per chunk i: wait until every rank has finished reading chunk i - 2, whose slots chunk i
 * reuses (step s0 + i: arena__enter for the first chunk); write my parts of chunk i; publish
 * s0 + i + 1 ("chunk i written, chunk i - 1 read"); then, if this rank reads, wait for
 * the ranks it reads at it (every rank, or the root of a broadcast), compare their
 * signatures (first chunk) and read. A rank that reads nothing
 * (broadcast root, reduce non-roots) runs one chunk ahead of the readers and returns
 * without waiting for them, as an eager send would; it compares the signatures at the
 * start of its next operation instead (arena__enter). */
static chorus_status_t move_run(chorus_arena_t *a, arena_move_t *m)
{
    uint64_t s0 = a->step;
    int reads, win;
    chorus_status_t status;

    if (m->esize == 0 || ARENA_LINE % m->esize != 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: arena: %s: bad dtype %d",
                             a->rank, m->what, (int)m->dtype);
    if (arena__eager_applies(a, m->coll, m->count * m->esize))
        return arena__eager(a, m->coll, m->send, m->recv, m->count, m->dtype, m->op, m->root,
                            m->what);
    status = arena__enter(a, m->what);
    if (status != CHORUS_SUCCESS) return status;
    a->opno++;
    m->g0 = a->gchunk;
    move_plan(a, m);
    arena__sig_set(a, m->coll, m->count, m->dtype, m->op, m->root < 0 ? 0 : m->root);
    win = move_may_win(a, m);
    if (win) move_offer(a, m);
    if (!win && move_single_copy(a, m)) return move_cma(a, m, s0);
    reads = move_reads(a, m);
    if (win && !reads && m->offered) { /* a broadcast root whose readers read its buffer */
        m->ce = m->count;
        /* Readers may start at once: its own copy reads the buffer they read and writes
         * only its receive buffer, so it runs beside theirs (after it, the two copies ran
         * one after the other: 2 ranks, 256 MiB, 0.43 of the memory-bandwidth bound). */
        arena__publish(a, s0 + 1);
        move_root_copy(a, m, 0);
        a->unchecked = 1;
        return move_win_done(a, m, s0 + 2);
    }
    for (size_t i = 0; i < m->nchunks; i++) {
        if (i > 0) {
            status = arena__wait_all(a, s0 + i, m->what);
            if (status != CHORUS_SUCCESS) return status;
        }
        move_write(a, m, i);
        arena__publish(a, s0 + i + 1);
        move_root_copy(a, m, i);
        if (!reads) continue;
        /* A broadcast reader needs the root alone: it does not wait for the other readers
         * (no lockstep among them), and compares the other signatures at its next call. */
        status = m->coll == CHORUS_COLL_BROADCAST
                     ? arena__wait_range(a, s0 + i + 1, m->root, m->root + 1, m->what)
                     : arena__wait_all(a, s0 + i + 1, m->what);
        if (status == CHORUS_SUCCESS && i == 0)
            status = m->coll == CHORUS_COLL_BROADCAST
                         ? arena__check_sigs_range(a, (int)(a->opno & 1), m->root, m->root + 1,
                                                   m->what)
                         : arena__check_sigs(a, (int)(a->opno & 1), m->what);
        if (status == CHORUS_SUCCESS && i == 0 && win) {
            int all = 0;
            status = move_resolve(a, m, &all);
            if (status == CHORUS_SUCCESS && all) { /* everything from the windows, at once */
                m->ce = m->count;
                a->win_calls++;
                status = move_read(a, m, 0);
                if (status != CHORUS_SUCCESS) return status;
                a->unchecked = m->coll == CHORUS_COLL_BROADCAST;
                return move_win_done(a, m, s0 + 2);
            }
        }
        if (status == CHORUS_SUCCESS) status = move_read(a, m, i);
        if (status != CHORUS_SUCCESS) return status;
    }
    a->unchecked = !reads || m->coll == CHORUS_COLL_BROADCAST;
    if (m->where == ARENA_MOVE_STAGED) a->gchunk += m->nchunks;
    if (win && m->any_win) return move_win_done(a, m, s0 + m->nchunks + 1);
    return CHORUS_SUCCESS;
}

static void move_init(arena_move_t *m, chorus_coll_t coll, const void *sendbuf, void *recvbuf,
                      size_t count, chorus_dtype_t dtype, const char *what)
{
    memset(m, 0, sizeof *m);
    m->coll = coll;
    m->send = sendbuf;
    m->recv = recvbuf;
    m->count = count;
    m->esize = chorus_dtype_size(dtype);
    m->parts = 1;
    m->root = -1;
    m->dtype = dtype;
    m->op = CHORUS_SUM;
    m->what = what;
}

/* Broadcast and reduce: the root, a comm rank, as a local index. */
static chorus_status_t move_set_root(const chorus_arena_t *arena, arena_move_t *m, int root)
{
    m->root = arena__local_index(arena, root);
    if (m->root < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: arena: %s: bad root %d",
                             arena->rank, m->what, root);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__arena_allgather(chorus_arena_t *arena, const void *sendbuf,
                                        void *recvbuf, size_t sendcount, chorus_dtype_t dtype,
                                        const char *what)
{
    arena_move_t m;

    move_init(&m, CHORUS_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, what);
    m.traffic = (size_t)arena->n * sendcount * m.esize * (size_t)(arena->n + 1);
    return move_run(arena, &m);
}

chorus_status_t chorus__arena_reduce_scatter(chorus_arena_t *arena, const void *sendbuf,
                                             void *recvbuf, size_t recvcount,
                                             chorus_dtype_t dtype, chorus_op_t op,
                                             const char *what)
{
    arena_move_t m;

    move_init(&m, CHORUS_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, what);
    m.parts = (size_t)arena->n;
    m.op = op;
    m.traffic = (size_t)arena->n * recvcount * m.esize * (size_t)(arena->n + 1);
    /* The kernel lets its destination alias only the first source: in place, my own part
     * is read from my slot unless I am that first source. */
    m.own_in_slot = recvbuf == m.send + move_buf_off(&m, (size_t)arena->me, 0) && arena->me != 0;
    return move_run(arena, &m);
}

chorus_status_t chorus__arena_broadcast(chorus_arena_t *arena, const void *sendbuf,
                                        void *recvbuf, size_t count, chorus_dtype_t dtype,
                                        int root, const char *what)
{
    arena_move_t m;

    chorus_status_t status;

    move_init(&m, CHORUS_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, what);
    status = move_set_root(arena, &m, root);
    if (status != CHORUS_SUCCESS) return status;
    m.traffic = count * m.esize * 2 * (size_t)arena->n;
    return move_run(arena, &m);
}

chorus_status_t chorus__arena_reduce(chorus_arena_t *arena, const void *sendbuf, void *recvbuf,
                                     size_t count, chorus_dtype_t dtype, chorus_op_t op,
                                     int root, const char *what)
{
    arena_move_t m;

    chorus_status_t status;

    move_init(&m, CHORUS_COLL_REDUCE, sendbuf, recvbuf, count, dtype, what);
    status = move_set_root(arena, &m, root);
    if (status != CHORUS_SUCCESS) return status;
    m.op = op;
    m.traffic = count * m.esize * 3 * (size_t)arena->n;
    /* In place, the root's own vector is read through its slot unless it is the first
     * source (the kernel lets its destination alias only that one). */
    m.own_in_slot = arena->me == m.root && recvbuf == sendbuf && m.root != 0;
    return move_run(arena, &m);
}

chorus_status_t chorus__arena_alltoall(chorus_arena_t *arena, const void *sendbuf,
                                       void *recvbuf, size_t count_per_peer,
                                       chorus_dtype_t dtype, const char *what)
{
    arena_move_t m;

    move_init(&m, CHORUS_COLL_ALLTOALL, sendbuf, recvbuf, count_per_peer, dtype, what);
    m.parts = (size_t)arena->n;
    m.traffic = (size_t)arena->n * count_per_peer * m.esize * 2 * (size_t)arena->n;
    return move_run(arena, &m);
}

chorus_status_t chorus__arena_barrier(chorus_arena_t *arena, const char *what)
{
    arena_move_t m;

    move_init(&m, CHORUS_COLL_BARRIER, NULL, NULL, 0, CHORUS_UINT8, what);
    return move_run(arena, &m);
}
