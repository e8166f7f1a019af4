/*
 * Allreduce straight from registered windows (issue 38), as NCCL's symmetric kernels do:
 * when every rank's send buffer lies in a window (arena_win.c), nobody copies anything into
 * the arena.
 *
 *   one-shot: every rank reduces all n send buffers, read in its peers' windows, straight
 *             into its receive buffer: one synchronisation, n reads and one write per byte;
 *             for small vectors and 2 ranks. When some rank works in place (it would
 *             overwrite what its peers are reading), in chunks, each written back once every
 *             rank has read it (direct_one_shot_chunked).
 *   two-shot: every rank reduces its slice of all n send buffers into the same slice of its
 *             own receive buffer (which must lie in a window too), then copies the other
 *             slices from its peers' receive buffers: about two reads and two writes per
 *             byte whatever n is, and two synchronisations.
 *
 * Both start with one step in which every rank publishes, with its signature, where its
 * buffers lie (arena_ctl_t.offer); every rank then decides the same from the same control
 * lines. When not every rank offered its send buffer, the call goes on as a staged
 * allreduce (arena.c) from that step. Both end with a step that every rank publishes once
 * it has read everything, and that every rank waits for: its buffers are its caller's
 * again when the call returns.
 */
#include "arena/arena_int.h"

#include "kernels.h"
#include "util/config.h"
#include "util/status.h"

#include <stdlib.h>
#include <string.h>

/* Vectors up to this many bytes (and every vector on 2 ranks) go one-shot. */
#define ARENA_ONESHOT_MAX_DEFAULT ((size_t)256 << 10)
/* In place, the staged path (arena.c) measured faster than reading the peers' buffers up to
 * 16 MiB on 2 ranks, and at every size from 3 ranks on (chorus-bench allreduce -R 1 against
 * -R 0, 2026-12-05, the 2-core VM: 2 ranks 64 KiB 21.5 us against 8.7, 4 MiB 620 against
 * 570, 64 MiB 14.8 ms against 17.1; 4 ranks two-shot 64 MiB 2.57 GB/s against 2.80): a
 * buffer rewritten at every call is in its owner's cache, and every peer then pulls all of
 * it across, where the staged path moves slices. So in place, only 2 ranks from 16 MiB. */
#define ARENA_INPLACE_MIN ((size_t)16 << 20)
/* The chunk of the one-shot in chunks: two of them stay in cache as the scratch. */
#define ARENA_DIRECT_CHUNK ((size_t)256 << 10)

/* Rank r's slice of count elements, whole cache lines but for the last: [*b_p, *e_p). */
static void direct_slice(const chorus_arena_t *a, size_t count, size_t esize, int r, size_t *b_p,
                         size_t *e_p)
{
    size_t unit = ARENA_LINE / esize, units = (count + unit - 1) / unit;
    size_t b = units * (size_t)r / (size_t)a->n * unit, e = units * (size_t)(r + 1) / (size_t)a->n * unit;

    *b_p = b < count ? b : count;
    *e_p = e < count ? e : count;
}

static chorus_status_t direct_reduce(chorus_arena_t *a, void *dst, size_t count,
                                     chorus_dtype_t dtype, chorus_op_t op, const char *what)
{
    chorus_status_t status = arena__reduce(a, dst, count, dtype, op);

    if (status != CHORUS_SUCCESS)
        return arena__fail(a, chorus__error(status, "rank %d: arena: %s: reduce failed", a->rank,
                                            what));
    return CHORUS_SUCCESS;
}

/* The last step: this rank has read everything; return once every rank has. */
static chorus_status_t direct_done(chorus_arena_t *a, uint64_t step, const char *what)
{
    arena__publish(a, step);
    return arena__wait_all(a, step, what);
}

static chorus_status_t direct_one_shot(chorus_arena_t *a, const void *send, void *recv,
                                       size_t count, chorus_dtype_t dtype, chorus_op_t op,
                                       uint64_t s0, const char *what)
{
    size_t bytes = count * chorus_dtype_size(dtype);
    chorus_status_t status;

    for (int r = 0; r < a->n; r++) a->srcs[r] = a->wsrc[r];
    a->srcs[a->me] = send;
    status = direct_reduce(a, recv, count, dtype, op, what);
    if (status != CHORUS_SUCCESS) return status;
    a->win_bytes += bytes * (uint64_t)(a->n - 1);
    return direct_done(a, s0 + 2, what);
}

/* A private scratch of at least bytes (a->tmp). */
static chorus_status_t direct_scratch(chorus_arena_t *a, size_t bytes, const char *what)
{
    if (a->tmp_cap >= bytes) return CHORUS_SUCCESS;
    void *t = realloc(a->tmp, bytes);
    if (t == NULL)
        return arena__fail(a, chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: arena: %s: no memory "
                                            "for %zu bytes", a->rank, what, bytes));
    a->tmp = t;
    a->tmp_cap = bytes;
    return CHORUS_SUCCESS;
}

/* One-shot in chunks, for a call where some rank works in place: such a rank must not
 * overwrite a chunk of its buffer before every peer has read it. Per chunk k every rank
 * reduces all n inputs' chunk k (into its receive buffer, or, in place, into one of two
 * chunks of private scratch that stay in cache) and publishes step s0 + 2 + k ("read
 * through chunk k"); before that it waits until every rank has published s0 + 1 + k, that
 * is has read chunk k - 1, and an in-place rank then writes chunk k - 1 from its scratch.
 * So each byte is read from memory once per rank and written once, with one wait per
 * chunk, and the last wait (every rank has read everything) is also the end: nobody reads
 * this rank's buffer any more. */
static chorus_status_t direct_one_shot_chunked(chorus_arena_t *a, const void *send, void *recv,
                                               size_t count, chorus_dtype_t dtype, chorus_op_t op,
                                               uint64_t s0, const char *what)
{
    size_t esize = chorus_dtype_size(dtype), ce = ARENA_DIRECT_CHUNK / esize, nchunks, prev = 0;
    int in_place = send == recv;
    uint8_t *out = recv, *scratch = NULL;
    chorus_status_t status;

    if (ce == 0) ce = 1;
    nchunks = (count + ce - 1) / ce;
    if (in_place) {
        status = direct_scratch(a, 2 * ce * esize, what);
        if (status != CHORUS_SUCCESS) return status;
        scratch = a->tmp;
    }
    for (size_t k = 0; k < nchunks; k++) {
        size_t off = k * ce, len = count - off < ce ? count - off : ce;
        uint8_t *dst = in_place ? scratch + (k & 1) * ce * esize : out + off * esize;

        for (int r = 0; r < a->n; r++) a->srcs[r] = a->wsrc[r] + off * esize;
        a->srcs[a->me] = (const uint8_t *)send + off * esize;
        status = direct_reduce(a, dst, len, dtype, op, what);
        if (status == CHORUS_SUCCESS && k > 0) status = arena__wait_all(a, s0 + 1 + k, what);
        if (status != CHORUS_SUCCESS) return status;
        if (in_place && k > 0)
            memcpy(out + (k - 1) * ce * esize, scratch + ((k - 1) & 1) * ce * esize, prev * esize);
        arena__publish(a, s0 + 2 + k);
        prev = len;
    }
    status = arena__wait_all(a, s0 + 1 + nchunks, what);
    if (status != CHORUS_SUCCESS) return status;
    if (in_place)
        memcpy(out + (nchunks - 1) * ce * esize, scratch + ((nchunks - 1) & 1) * ce * esize,
               prev * esize);
    a->win_bytes += count * esize * (uint64_t)(a->n - 1);
    return CHORUS_SUCCESS;
}

static chorus_status_t direct_two_shot(chorus_arena_t *a, const void *send, void *recv,
                                       size_t count, chorus_dtype_t dtype, chorus_op_t op,
                                       uint64_t s0, const char *what)
{
    size_t esize = chorus_dtype_size(dtype), b, e;
    uint64_t par = a->opno & 1;
    uint8_t *out = recv;
    chorus_status_t status;

    direct_slice(a, count, esize, a->me, &b, &e);
    /* Never in place (arena__direct_allreduce sends those elsewhere): the slice written
     * here is no rank's source. */
    for (int r = 0; r < a->n; r++) a->srcs[r] = a->wsrc[r] + b * esize;
    a->srcs[a->me] = (const uint8_t *)send + b * esize;
    if (e > b) {
        status = direct_reduce(a, out + b * esize, e - b, dtype, op, what);
        if (status != CHORUS_SUCCESS) return status;
    }
    arena__publish(a, s0 + 2);
    status = arena__wait_all(a, s0 + 2, what);
    if (status != CHORUS_SUCCESS) return status;
    for (int k = 1; k < a->n; k++) {
        int r = a->me + k < a->n ? a->me + k : a->me + k - a->n;
        const uint8_t *theirs = arena__win_at(a, r, a->ctl[r].offer[par][1], count * esize);
        size_t rb, re;

        direct_slice(a, count, esize, r, &rb, &re);
        chorus_kernel_copy_stream(out + rb * esize, theirs + rb * esize, (re - rb) * esize,
                                  3 * count * esize);
    }
    a->win_bytes += count * esize / (uint64_t)a->n * (uint64_t)(a->n - 1) * 2;
    return direct_done(a, s0 + 3, what);
}

/* A broadcast root that offers its buffer waits for its readers at the end, where the
 * copying path lets it run ahead, so below some size the staged path wins: the window path
 * from 8 KiB on up to 4 ranks and from 32 KiB above (chorus-bench broadcast -R 1, µs per
 * call, window against staged, 2026-12-05, 2 cores: 2 ranks 8K 0.45 / 0.82, 32K 1.02 /
 * 4.51, 128K 2.78 / 17.0; 4 ranks 2K 4.66 / 5.62, 32K 5.97 / 10.3; 8 ranks 8K 12.5 / 9.1,
 * 32K 12.1 / 13.4, 128K 19.8 / 33.5). An earlier limit of 256 KiB came from a run in
 * which both ranks shared one core (48.6 us at 64 KiB on 2 ranks; 1.6 us with a core
 * each). */
#define ARENA_WIN_BCAST_MIN(n) ((n) > 4 ? (size_t)32 << 10 : (size_t)8 << 10)

chorus_arena_win_path_t chorus__arena_win_path(chorus_coll_t coll, int n, size_t bytes,
                                               int in_place, size_t flat_max)
{
    size_t one_shot_max;

    switch (coll) {
    case CHORUS_COLL_ALLREDUCE:
        if (bytes <= flat_max || (in_place && (n > 2 || bytes < ARENA_INPLACE_MIN)))
            return CHORUS_ARENA_WIN_NONE;
        /* One-shot reads n vectors: its limit shrinks as ranks grow (2 ranks: always; 4: the
         * limit; 8: half of it; 8 ranks at 256 KiB measured 1.31x Open MPI one-shot). */
        one_shot_max = chorus__config_size("CHORUS_WIN_ONESHOT_MAX", ARENA_ONESHOT_MAX_DEFAULT);
        if (n > 4) one_shot_max = one_shot_max * 4 / (size_t)n;
        return n == 2 || bytes <= one_shot_max ? CHORUS_ARENA_WIN_ONE_SHOT
                                               : CHORUS_ARENA_WIN_TWO_SHOT;
    case CHORUS_COLL_BROADCAST:
        return bytes >= ARENA_WIN_BCAST_MIN(n) ? CHORUS_ARENA_WIN_READ : CHORUS_ARENA_WIN_NONE;
    case CHORUS_COLL_ALLGATHER:
        return bytes > ARENA_INLINE ? CHORUS_ARENA_WIN_READ : CHORUS_ARENA_WIN_NONE;
    case CHORUS_COLL_ALLTOALL:
    case CHORUS_COLL_REDUCE_SCATTER:
        /* In place, a rank's own reads (alltoall) or own part (reduce_scatter) would
         * overwrite what its peers read: it offers nothing (arena_coll.c). */
        return !in_place && (size_t)n * bytes > ARENA_INLINE ? CHORUS_ARENA_WIN_READ
                                                             : CHORUS_ARENA_WIN_NONE;
    default: return CHORUS_ARENA_WIN_NONE;
    }
}

int arena__direct_allreduce(chorus_arena_t *a, const void *send, void *recv, size_t count,
                            chorus_dtype_t dtype, chorus_op_t op, const char *what,
                            chorus_status_t *status_p)
{
    size_t bytes = count * chorus_dtype_size(dtype);
    uint64_t s0 = a->step, par = a->opno & 1;
    int all_send = 1, all_recv = 1, any_in_place = 0;
    chorus_arena_win_path_t path;
    chorus_status_t status;

    a->ctl[a->me].offer[par][0] = arena__win_offer(a, send, bytes);
    a->ctl[a->me].offer[par][1] = arena__win_offer(a, recv, bytes);
    arena__sig_set(a, CHORUS_COLL_ALLREDUCE, count, dtype, op, 0);
    arena__publish(a, s0 + 1);
    status = arena__wait_all(a, s0 + 1, what);
    if (status == CHORUS_SUCCESS) status = arena__check_sigs(a, (int)par, what);
    if (status != CHORUS_SUCCESS) {
        *status_p = status;
        return 1;
    }
    for (int r = 0; r < a->n; r++) {
        uint64_t vs = a->ctl[r].offer[par][0], vr = a->ctl[r].offer[par][1];
        a->wsrc[r] = r == a->me ? NULL : arena__win_at(a, r, vs, bytes);
        if (vs == 0) all_send = 0;
        if (vr == 0) all_recv = 0;
        if (vs != 0 && vs == vr) any_in_place = 1;
        if (r != a->me && vs != 0 && a->wsrc[r] == NULL) {
            *status_p = arena__fail(a, chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: %s: "
                                                     "rank %d names a window this rank does "
                                                     "not have", a->rank, what, a->ranks[r]));
            return 1;
        }
    }
    path = chorus__arena_win_path(CHORUS_COLL_ALLREDUCE, a->n, bytes, any_in_place, a->flat_slot);
    if (path == CHORUS_ARENA_WIN_NONE) return 0; /* the staged path (ARENA_INPLACE_MIN) */
    if (all_send && (path == CHORUS_ARENA_WIN_ONE_SHOT || !all_recv)) {
        a->win_calls++;
        *status_p = any_in_place
                        ? direct_one_shot_chunked(a, send, recv, count, dtype, op, s0, what)
                        : direct_one_shot(a, send, recv, count, dtype, op, s0, what);
        return 1;
    }
    if (all_send && all_recv) {
        a->win_calls++;
        *status_p = direct_two_shot(a, send, recv, count, dtype, op, s0, what);
        return 1;
    }
    return 0; /* the staged path, from step s0 + 1, which every rank has published */
}
