/*
 * Private to lib/arena: the layout of the shared segment, the process-local arena object,
 * and the synchronisation helpers the collectives use.
 *
 * Segment layout (every offset a multiple of 4096, recomputed and checked by attachers):
 *   header                  magic, sizes, HMAC token; the futex word on its own line
 *   ctl[nlocal]             one control block per local rank, 128 bytes each (two lines,
 *                           so the adjacent-line prefetcher does not couple neighbours)
 *   flat[nlocal][2]         flat-path slots of flat_slot bytes, by operation parity
 *   stage[nlocal][2]        staged-path slots of chunk bytes, by chunk parity
 *   res[2]                  reduced chunks (each rank writes its slice), by chunk parity
 *
 * Synchronisation: each rank owns one monotonic step counter (ctl.seq). Every publication
 * is a store-release of the next step; a wait is "every rank's seq >= s". A rank publishes
 * step s + 1 only after it saw every rank at s, so counters never drift apart by more than
 * two steps, and all ranks that ran the same operations agree on every step number.
 */
#ifndef CHORUS_ARENA_INT_H
#define CHORUS_ARENA_INT_H

#include "arena/arena.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define ARENA_MAGIC 0x414e455241524843ULL /* "CHRARENA" */
#define ARENA_VERSION 2
#define ARENA_LINE 64
#define ARENA_PAGE 4096
#define ARENA_NAME_MAX 64
#define ARENA_MAX_LOCAL 1024
#define ARENA_INLINE 8

/* The signature of one operation: ranks compare it before reading each other's data. */
typedef struct {
    uint64_t count;
    uint16_t opno; /* low bits of the operation number */
    uint16_t root; /* broadcast and reduce; 0 for the others */
    uint8_t coll;
    uint8_t dtype;
    uint8_t op;
    uint8_t valid;
} arena_sig_t;

/* Eager entries (arena_eager.c): each rank has a ring of arena__eager_depth(nlocal) entries
 * for small rooted calls, so that the ranks that only write (the root of a broadcast, the
 * non-roots of a reduce) can run that many calls ahead of the readers. Deep rings matter
 * on oversubscribed cores: a writer that runs far ahead lets each reader, once scheduled,
 * take many calls in one time slice instead of yielding at every call (4 ranks on 2 cores,
 * broadcast of 8 B: 1.2 us a call with 16 entries, 0.55 with 64, 0.45 with 128); fewer
 * entries for many local ranks keep the rings to about 9-18 MB in all. */
#define ARENA_EAGER_DEPTH_MAX 128
#define ARENA_EAGER_MAX 1024

static inline uint32_t arena__eager_depth(uint32_t nlocal)
{
    return nlocal <= 64 ? 128 : nlocal <= 256 ? 32 : 16;
}

typedef struct {
    /* The step of the call this entry holds, stored (release) after its signature and data:
     * a reader polls this line rather than the writer's control line, so the writer's
     * publication does not wait for a line its readers keep pulling away. */
    alignas(ARENA_LINE) _Atomic uint64_t step;
    arena_sig_t sig;
    /* The writer's hash of the signatures of its eager calls up to and including this one
     * (arena__eager_check). */
    uint64_t chain;
    alignas(ARENA_LINE) uint8_t data[ARENA_EAGER_MAX];
} arena_eager_t;

/* One rank's control block. The first line is what peers poll on every step: the step
 * counter and the signatures of the current and previous operation (by parity), so one
 * cache-line transfer gives a waiter both. */
typedef struct {
    alignas(ARENA_LINE) _Atomic uint64_t seq;
    arena_sig_t sig[2];
    /* Flat-path vectors of up to ARENA_INLINE bytes travel here, by operation parity, so a
     * waiter gets step, signature and data in the one line transfer. */
    alignas(8) uint8_t inl[2][8];
    /* Second line: written once or when giving up. */
    /* (The first line is full: seq 8 + sig 32 + inl 16 bytes.) */
    alignas(ARENA_LINE) _Atomic int32_t failed; /* the chorus_status_t this rank failed with */
    int32_t rank;
    /* Single-copy operations (arena_cma.c): the address in this process of the buffer its
     * peers read the current operation's data from, published with the operation's first
     * step. */
    uint64_t addr;
    /* Registered windows (arena_win.c): where the buffers its peers read an operation's
     * data from lie, ARENA_OFFER(window, offset) or 0 (not in a window): [parity][0: send
     * buffer, 1: receive buffer]. Published with the operation's first step, by operation
     * parity like the signatures, since a rank that has moved on to the next operation
     * must not overwrite what a slower one is still to read. */
    uint64_t offer[2][2];
    /* Third line, written once per collective and read only by a peer that has waited a
     * while (chorus__arena_cross_check): the comm's number of the collective this rank is
     * in, plus one (0: none yet), and its signature, valid 1 when it runs on the arena and 2
     * when on a schedule. call_seq is 0 while the signature is rewritten. */
    alignas(ARENA_LINE) _Atomic uint64_t call_seq;
    arena_sig_t call_sig;
} arena_ctl_t;

_Static_assert(offsetof(arena_ctl_t, inl) + sizeof(((arena_ctl_t *)0)->inl) <= ARENA_LINE,
               "what a waiter polls fits one cache line");

/* A registered window (arena_win.c): the same size and number on every local rank. */
typedef struct {
    uint32_t id;    /* in the order windows were made, the same on every rank */
    int busy;       /* operations in flight that use it (a free then is an error) */
    size_t bytes;   /* what the caller got */
    uint8_t **base; /* n: each local rank's window as mapped in this process */
} arena_win_t;

typedef struct {
    _Atomic uint64_t magic; /* stored last (release): the rest is complete when it is set */
    uint32_t version;
    uint32_t hdr_size;
    uint64_t total_size;
    uint64_t comm_id;
    uint32_t nlocal;
    uint32_t owner_pid;
    uint64_t flat_slot;
    uint64_t chunk;
    uint64_t ctl_off;
    uint64_t flat_off;
    uint64_t stage_off;
    uint64_t res_off;
    uint8_t nonce[16];
    uint8_t token[32];
    /* Sleepers: a waiter that gives up yielding counts itself in sleepers and blocks on
     * bell; a publisher that sees sleepers bumps bell and wakes them. */
    alignas(ARENA_LINE) _Atomic uint32_t bell;
    _Atomic uint32_t sleepers;
} arena_hdr_t;

struct chorus_arena {
    uint8_t *base;
    size_t size;
    arena_hdr_t *hdr;
    arena_ctl_t *ctl;
    uint8_t *flat;
    uint8_t *stage;
    uint8_t *res;
    size_t flat_slot; /* bytes of one flat slot == flat_max */
    size_t chunk;     /* bytes of one staged slot */
    int n;            /* local ranks */
    int me;           /* my local index */
    int next_device;  /* chorus__arena_next_is_device: the next signature says device */
    int rank;         /* my rank in the comm */
    int *ranks;       /* comm rank of each local index */
    uint32_t *pids;   /* pid of each local index (from the bootstrap exchange) */
    uint8_t *pid_check; /* nonzero when that pid lives in our pid namespace */
    const void **srcs;  /* n source pointers for the reduce kernel (no allocation per call) */
    const uint8_t **wsrc; /* n: where each peer's buffer of the current operation is mapped
                           * here when it lies in a registered window, else NULL */
    uint8_t *vpacked;   /* alltoallv (arena_v.c): per local rank, whether its blocks went
                         * with its counts table; kept here because a peer may rewrite its
                         * table once this rank has published its last step */
    uint64_t exact_divisor; /* chorus__arena_set_exact: 0 folds, else exact sum / it */
    uint64_t step;      /* my last published step */
    uint64_t opno;      /* operations run */
    uint64_t gchunk;    /* staged chunks run, all operations together (slot parity) */
    double timeout_s;
    const atomic_int *abort_flag;
    chorus_wait_policy_t wait;
    uint8_t *eager;     /* nlocal rings of eager_depth entries */
    uint32_t eager_depth; /* arena__eager_depth(n) */
    uint64_t first_step[ARENA_EAGER_DEPTH_MAX]; /* of operation k, at k % eager_depth */
    uint64_t chain;           /* the hash of my eager calls' signatures (arena_eager.c) */
    uint64_t last_eager_opno; /* my last eager call, and the step it published */
    uint64_t last_eager_step;
    int eager_unchecked;      /* eager calls since the chains were last compared */
    uint64_t seen_all;  /* the highest step every local rank was seen at */
    uint64_t *seen;     /* per local rank, the highest step it was seen at (what an acquire
                         * load returned: what it wrote before is visible to this rank) */
    int unchecked;      /* the last operation ended before this rank compared signatures */
    int cma;            /* every local rank can read every other's memory (arena_cma.c) */
    size_t cma_min;     /* bytes one rank reads from one peer from which single copy is used */
    void *tmp;          /* a private copy for in-place alltoall on the single-copy path */
    size_t tmp_cap;
    arena_win_t *wins;  /* registered windows (arena_win.c) */
    int nwins, wins_cap;
    uint32_t win_serial; /* the number of the next window */
    uint64_t win_calls;  /* collectives that read every peer's data in its window */
    uint64_t win_bytes;  /* bytes this rank read from its peers' windows */
};

/* ---- arena_win.c ---- */

/* An offer (arena_ctl_t.offer): window id + 1 in the top 24 bits, the offset (windows are
 * at most 2^40 bytes) below. */
#define ARENA_OFFER(id, off) (((uint64_t)(id) + 1) << 40 | (uint64_t)(off))
#define ARENA_OFFER_ID(v) ((uint32_t)((v) >> 40) - 1)
#define ARENA_OFFER_OFF(v) ((v) & (((uint64_t)1 << 40) - 1))

/* This rank's offer of [ptr, ptr + bytes): ARENA_OFFER of its window, or 0. */
uint64_t arena__win_offer(const chorus_arena_t *a, const void *ptr, size_t bytes);
/* Where local rank r's offer v of bytes is mapped here, or NULL (0, or not a window this
 * rank has: an error of the caller's peer). */
const uint8_t *arena__win_at(const chorus_arena_t *a, int r, uint64_t v, size_t bytes);

/* Whether [ptr, ptr + bytes) lies in one of this rank's windows: its id and offset. */
int arena__win_find(const chorus_arena_t *a, const void *ptr, size_t bytes, uint32_t *id_p,
                    uint64_t *off_p);
/* Local rank r's window id at off, bytes long, as mapped here; NULL when out of bounds. */
const uint8_t *arena__win_peer(const chorus_arena_t *a, uint32_t id, int r, uint64_t off,
                               size_t bytes);
/* ---- arena_direct.c ---- */

/* Allreduce from registered windows, after arena__enter (opno counted): returns 1 when it
 * ran (its status in *status_p), 0 when the call must go on as a staged allreduce from the
 * step this rank has just published (every rank returns the same). */
int arena__direct_allreduce(chorus_arena_t *a, const void *send, void *recv, size_t count,
                            chorus_dtype_t dtype, chorus_op_t op, const char *what,
                            chorus_status_t *status_p);

/* Unmaps every window (the arena's end). */
void arena__win_free_all(chorus_arena_t *a);

/* dst = the n sources reduced in local rank order (which is comm rank order: the arena
 * serves one-host comms): folded with op, or summed exactly when the call asked for it
 * (chorus__arena_set_exact). The one reduction of every arena collective. */
chorus_status_t arena__reduce(const chorus_arena_t *a, void *dst, size_t count,
                              chorus_dtype_t dtype, chorus_op_t op);

/* ---- arena_seg.c ---- */

/* The byte offsets of a segment for nlocal ranks with these slot sizes; total_p is the
 * segment size. Deterministic, so attachers check the owner's header against it. */
void arena__layout(uint32_t nlocal, uint64_t flat_slot, uint64_t chunk, uint64_t *ctl_off_p,
                   uint64_t *flat_off_p, uint64_t *stage_off_p, uint64_t *res_off_p,
                   uint64_t *total_p);

/* Opens the shared memory object name, checks that only this user can touch it and that
 * its size is in [min, max], and maps it whole (populate: fault it in now). what names the
 * object in messages ("arena: segment"). */
chorus_status_t arena__shm_map(const char *name, size_t min, size_t max, int populate,
                               int rank, const char *what, void **base_p, size_t *size_p);

/* ---- arena_cma.c ---- */

/* Nonzero when this process can read `peer`'s memory with process_vm_readv (cross memory
 * attach): the kernel allows it and the word at probe in that process is ARENA_PROBE. */
#define ARENA_PROBE 0x43484f5255534d41ULL /* "CHORUSMA" */
extern const volatile uint64_t arena__probe_word;
int arena__cma_probe(uint32_t pid, uint64_t probe);

/* Reads bytes from address addr of process pid into dst, all of it, or an error naming
 * the peer (comm rank) and the operation. */
chorus_status_t arena__cma_read(chorus_arena_t *a, int peer, void *dst, uint64_t addr,
                                size_t bytes, const char *what);

/* Bytes of the eager rings of nlocal ranks, and where they start after the result area. */
#define ARENA_EAGER_BYTES(nlocal)                                                              \
    ((uint64_t)(nlocal) * arena__eager_depth(nlocal) * sizeof(arena_eager_t))

/* ---- arena_eager.c ---- */

/* Nonzero when a call of coll with these bytes per rank takes the eager path. */
int arena__eager_applies(const chorus_arena_t *a, chorus_coll_t coll, size_t bytes);
/* Broadcast or reduce of up to ARENA_EAGER_MAX bytes through the eager rings; root is a
 * local index. */
chorus_status_t arena__eager(chorus_arena_t *a, chorus_coll_t coll, const void *sendbuf,
                             void *recvbuf, size_t count, chorus_dtype_t dtype, chorus_op_t op,
                             int root, const char *what);
/* Rank r's eager entry signature of call opno if it wrote one (for messages), or NULL. */
const arena_sig_t *arena__eager_sig(const chorus_arena_t *a, int r, uint64_t opno);
/* At a call that waits for everyone: compare every rank's chain of eager signatures. */
chorus_status_t arena__eager_check(chorus_arena_t *a, const char *what);

/* ---- arena_sync.c ---- */

/* Publishes step (store-release of my counter) and wakes sleepers if there are any. */
void arena__publish(chorus_arena_t *a, uint64_t step);

/* The slow part of arena__wait_range: spin, yield, sleep, with deadline, abort flag,
 * failed and dead peers, until local ranks [first, end) have all published step. */
chorus_status_t arena__wait_slow(chorus_arena_t *a, uint64_t step, int first, int end,
                                 const char *what);

/* The error for local rank r's failed flag: CHORUS_ERR_MISMATCH when r found a mismatch
 * (every rank reports it as one), else CHORUS_ERR_REMOTE naming r and its status. */
chorus_status_t arena__peer_failed(const chorus_arena_t *a, int r, int32_t failed,
                                   const char *what);

/* Marks this rank failed with status in the segment (peers stop waiting for it) and
 * returns status. */
chorus_status_t arena__fail(chorus_arena_t *a, chorus_status_t status);

/* The top bit of a signature's collective byte: a device collective (arena_barrier.c). */
#define ARENA_SIG_DEVICE 0x80

/* Writes this rank's signature of the operation about to run (a->opno already counts it)
 * into its control line; the next publication makes it visible. */
void arena__sig_set(chorus_arena_t *a, chorus_coll_t coll, size_t count, chorus_dtype_t dtype,
                    chorus_op_t op, int root);

/* Nonzero when two signatures describe the same call. */
static inline int arena__sig_same(const arena_sig_t *x, const arena_sig_t *y)
{
    return x->count == y->count && x->opno == y->opno && x->root == y->root &&
           x->coll == y->coll && x->dtype == y->dtype && x->op == y->op && x->valid == y->valid;
}

/* "allreduce #3 of 16 x float32 sum", or "no operation" (for messages). */
void arena__sig_text(const arena_sig_t *s, char *buf, size_t len);

/* Fails this rank with CHORUS_ERR_MISMATCH naming local rank r's call and this rank's. */
chorus_status_t arena__sig_mismatch(chorus_arena_t *a, int r, const arena_sig_t *theirs,
                                    const arena_sig_t *mine, const char *what);

/* Compares every rank's signature of the operation of parity par with this rank's:
 * CHORUS_ERR_MISMATCH naming both calls (and failing this rank) at the first difference. */
chorus_status_t arena__check_sigs(chorus_arena_t *a, int par, const char *what);
/* The same for local ranks [first, end) only. */
chorus_status_t arena__check_sigs_range(chorus_arena_t *a, int par, int first, int end,
                                        const char *what);

/* Returns once local ranks [first, end) have published step (or an error naming who did
 * not). */
static inline chorus_status_t arena__wait_range(chorus_arena_t *a, uint64_t step, int first,
                                                int end, const char *what)
{
    /* A peer seen at or past step needs no load: the acquire load that saw it already
     * made its writes visible, and its line, which it writes at every call, stays put. */
    for (int r = first; r < end; r++) {
        uint64_t v;
        if (a->seen[r] >= step) continue;
        v = atomic_load_explicit(&a->ctl[r].seq, memory_order_acquire);
        if (v < step) return arena__wait_slow(a, step, r, end, what);
        a->seen[r] = v;
    }
    return CHORUS_SUCCESS;
}

/* Where a data-moving operation's parts go (arena_coll.c, arena_v.c): every part of it in
 * the control line (up to ARENA_INLINE bytes together), in the flat slot of the operation's
 * parity, or in chunks through the staging slots, each chunk carrying the same slice of
 * every part. */
enum { ARENA_MOVE_STAGED, ARENA_MOVE_FLAT, ARENA_MOVE_INLINE };

typedef struct {
    int where;      /* ARENA_MOVE_* */
    size_t ce;      /* elements of a part in one chunk (the stride of parts in a slot) */
    size_t nchunks; /* 1 unless staged */
} arena_plan_t;

/* The plan for `parts` parts of up to `count` elements of esize bytes. Staged slices are
 * whole cache lines where the chunk allows, so that no two parts share a line, and at
 * least one element. Every rank computes the same from the same arguments. */
static inline arena_plan_t arena__plan(const chorus_arena_t *a, size_t parts, size_t count,
                                       size_t esize)
{
    size_t bytes = parts * count * esize, unit = ARENA_LINE / esize;
    arena_plan_t p = {ARENA_MOVE_STAGED, count, 1};

    if (bytes <= ARENA_INLINE) {
        p.where = ARENA_MOVE_INLINE;
    } else if (bytes <= a->flat_slot) {
        p.where = ARENA_MOVE_FLAT;
    } else {
        p.ce = a->chunk / (parts * esize);
        if (p.ce >= unit) p.ce -= p.ce % unit;
        if (p.ce == 0) p.ce = 1;
        if (p.ce > count) p.ce = count;
        p.nchunks = (count + p.ce - 1) / p.ce;
    }
    return p;
}

/* Local rank r's slot of the current operation under plan `where`; g is the arena's chunk
 * counter of the chunk (staged slots alternate by its parity). */
static inline uint8_t *arena__move_slot(const chorus_arena_t *a, int where, int r, uint64_t g)
{
    size_t par = (size_t)(a->opno & 1);

    switch (where) {
    case ARENA_MOVE_INLINE: return a->ctl[r].inl[par];
    case ARENA_MOVE_FLAT: return a->flat + ((size_t)r * 2 + par) * a->flat_slot;
    default: return a->stage + ((size_t)r * 2 + (size_t)(g & 1)) * a->chunk;
    }
}

/* The local index of comm rank `rank`, or -1. */
static inline int arena__local_index(const chorus_arena_t *a, int rank)
{
    for (int r = 0; r < a->n; r++)
        if (a->ranks[r] == rank) return r;
    return -1;
}

static inline chorus_status_t arena__wait_all(chorus_arena_t *a, uint64_t step, const char *what)
{
    chorus_status_t status;

    if (a->seen_all >= step) return CHORUS_SUCCESS;
    status = arena__wait_range(a, step, 0, a->n, what);
    if (status == CHORUS_SUCCESS) a->seen_all = step;
    return status;
}

/* What every operation does first: wait until every local rank has published the last step
 * of the previous operation, and compare that operation's signatures if this rank returned
 * from it without doing so (the root of a broadcast, the non-roots of a reduce: they read
 * nothing, so they do not wait for the others). From here on every rank has finished
 * reading what the operation before the previous one wrote (reads of an operation end
 * before the next one publishes anything), so this one may overwrite its slots, and the
 * previous operation's signatures stay in place until every rank has passed this point. */
chorus_status_t arena__enter(chorus_arena_t *a, const char *what);

#endif
