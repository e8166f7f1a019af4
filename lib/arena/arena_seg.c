/*
 * The arena's shared segment: local rank 0 creates it, every rank attaches to it, and it is
 * unlinked once all have mapped it, so nothing is left in /dev/shm even if a rank crashes
 * later. The segment is untrusted until checked: an attacher verifies owner, mode, size,
 * layout and an HMAC of the comm's secret before using anything in it.
 *
 * Creation is collective and all-or-nothing: two bootstrap allgathers (the name, then each
 * rank's outcome) make every rank reach the same decision, because a comm where some ranks
 * have an arena and others do not would pick different algorithms and hang.
 */
#include "arena/arena_int.h"

#include "util/proc.h"

#include "bootstrap/bootstrap.h"
#include "util/auth.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARENA_NAME_PREFIX "/chorus-arena-"
/* Defaults, measured on a 2-core EPYC VM (see arena.c for the reasoning). */
#define ARENA_FLAT_MAX_DEFAULT ((uint64_t)16 << 10)
#define ARENA_CHUNK_DEFAULT ((uint64_t)512 << 10)
/* Bytes read from one peer from which allgather, broadcast and alltoall copy straight from
 * the peer's buffer (arena_cma.c); below, the system call and page pinning cost more than
 * the second copy through the segment saves. */
#define ARENA_CMA_MIN_DEFAULT ((uint64_t)256 << 10)
/* The staged slots of all ranks together stay below this, so many ranks get smaller
 * chunks instead of a huge segment. */
#define ARENA_STAGE_BUDGET ((uint64_t)64 << 20)

/* What each rank tells the others, twice: before attaching (name, pid) and after
 * (status). Fixed size, no pointers. */
typedef struct {
    char name[ARENA_NAME_MAX];
    uint64_t pidns;
    uint32_t pid;
    int32_t rank;
    int32_t local_index;
    int32_t enabled;
    int32_t status;
    int32_t cma_ok; /* the second exchange: this rank could read its neighbour's memory */
    uint64_t probe; /* the first: where arena__probe_word is in this process */
} arena_block_t;

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* The eager rings follow the result area. */
static uint64_t arena_eager_off(uint64_t res_off, uint64_t chunk)
{
    return align_up(res_off + 2 * chunk, ARENA_PAGE);
}

void arena__layout(uint32_t nlocal, uint64_t flat_slot, uint64_t chunk, uint64_t *ctl_off_p,
                   uint64_t *flat_off_p, uint64_t *stage_off_p, uint64_t *res_off_p,
                   uint64_t *total_p)
{
    uint64_t ctl_off = align_up(sizeof(arena_hdr_t), ARENA_PAGE);
    uint64_t flat_off = align_up(ctl_off + nlocal * sizeof(arena_ctl_t), ARENA_PAGE);
    uint64_t stage_off = align_up(flat_off + 2 * nlocal * flat_slot, ARENA_PAGE);
    uint64_t res_off = align_up(stage_off + 2 * nlocal * chunk, ARENA_PAGE);

    *ctl_off_p = ctl_off;
    *flat_off_p = flat_off;
    *stage_off_p = stage_off;
    *res_off_p = res_off;
    *total_p = align_up(arena_eager_off(res_off, chunk) + ARENA_EAGER_BYTES(nlocal), ARENA_PAGE);
}

/* HMAC(secret, label | comm_id | nlocal | flat_slot | chunk | total | nonce): proves that the
 * owner knows the secret and binds the layout, so a tampered size is caught too. */
static chorus_status_t arena_token(const uint8_t *secret, const arena_hdr_t *h, uint8_t out[32])
{
    static const char label[] = "chorus-arena-seg";
    uint8_t msg[sizeof label + 5 * 8 + 16];
    uint64_t f[5] = {h->comm_id, h->nlocal, h->flat_slot, h->chunk, h->total_size};
    unsigned out_len = 0;

    memcpy(msg, label, sizeof label);
    memcpy(msg + sizeof label, f, sizeof f);
    memcpy(msg + sizeof label + sizeof f, h->nonce, 16);
    if (HMAC(EVP_sha256(), secret, CHORUS_SECRET_BYTES, msg, sizeof msg, out, &out_len) == NULL ||
        out_len != 32)
        return chorus__error(CHORUS_ERR_INTERNAL, "arena: HMAC-SHA256 failed");
    return CHORUS_SUCCESS;
}

/* Chunk and flat sizes from the environment, rounded to cache lines and bounded. */
static void arena_sizes(int nlocal, uint64_t *flat_p, uint64_t *chunk_p)
{
    uint64_t flat = chorus__config_size("CHORUS_ARENA_FLAT_MAX", ARENA_FLAT_MAX_DEFAULT);
    uint64_t chunk = chorus__config_size("CHORUS_ARENA_CHUNK", ARENA_CHUNK_DEFAULT);

    if (flat > ((uint64_t)1 << 20)) flat = (uint64_t)1 << 20;
    if (chunk > ARENA_STAGE_BUDGET / (2 * (uint64_t)nlocal))
        chunk = ARENA_STAGE_BUDGET / (2 * (uint64_t)nlocal);
    if (chunk < (uint64_t)4 << 10) chunk = (uint64_t)4 << 10;
    /* alltoall and reduce_scatter cut a chunk into one part per rank: a line each at least. */
    if (chunk < (uint64_t)nlocal * ARENA_LINE) chunk = (uint64_t)nlocal * ARENA_LINE;
    *flat_p = align_up(flat < ARENA_LINE ? ARENA_LINE : flat, ARENA_LINE);
    *chunk_p = align_up(chunk, ARENA_LINE);
}

/* Fills in the pointers of a mapped, checked segment. */
static void arena_bind(chorus_arena_t *a)
{
    a->hdr = (arena_hdr_t *)a->base;
    a->ctl = (arena_ctl_t *)(a->base + a->hdr->ctl_off);
    a->flat = a->base + a->hdr->flat_off;
    a->stage = a->base + a->hdr->stage_off;
    a->res = a->base + a->hdr->res_off;
    a->eager = a->base + arena_eager_off(a->hdr->res_off, a->hdr->chunk);
    a->flat_slot = (size_t)a->hdr->flat_slot;
    a->chunk = (size_t)a->hdr->chunk;
}

/* Local rank 0: a new segment with a random name, mode 0600, sized and filled in. */
static chorus_status_t arena_seg_create(chorus_arena_t *a, const chorus_arena_params_t *p,
                                        char *name)
{
    uint64_t flat, chunk, ctl_off, flat_off, stage_off, res_off, total;
    chorus_status_t status;
    arena_hdr_t *h;
    uint32_t salt;
    void *base;
    int fd;

    CHORUS_CHECK_GOTO(chorus__random_bytes(&salt, sizeof salt), err);
    snprintf(name, ARENA_NAME_MAX, ARENA_NAME_PREFIX "%016" PRIx64 "-%08x", p->comm_id, salt);
    arena_sizes(p->nlocal, &flat, &chunk);
    arena__layout((uint32_t)p->nlocal, flat, chunk, &ctl_off, &flat_off, &stage_off, &res_off,
                  &total);
    /* O_EXCL: the segment is new and ours, never a stale or planted one. */
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: arena: shm_open(%s)",
                                     p->rank, name);
        goto err;
    }
    if (ftruncate(fd, (off_t)total) != 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: arena: ftruncate(%s, %"
                                     PRIu64 ")", p->rank, name, total);
        goto err_unlink;
    }
    /* MAP_POPULATE: fault the pages in now rather than inside the first collectives. */
    base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: arena: mmap(%s)",
                                     p->rank, name);
        goto err_unlink;
    }
    close(fd);
    h = base;
    h->version = ARENA_VERSION;
    h->hdr_size = sizeof *h;
    h->total_size = total;
    h->comm_id = p->comm_id;
    h->nlocal = (uint32_t)p->nlocal;
    h->owner_pid = (uint32_t)getpid();
    h->flat_slot = flat;
    h->chunk = chunk;
    h->ctl_off = ctl_off;
    h->flat_off = flat_off;
    h->stage_off = stage_off;
    h->res_off = res_off;
    CHORUS_CHECK_GOTO(chorus__random_bytes(h->nonce, sizeof h->nonce), err_unmap);
    CHORUS_CHECK_GOTO(arena_token(p->secret, h, h->token), err_unmap);
    atomic_store_explicit(&h->magic, ARENA_MAGIC, memory_order_release);
    a->base = base;
    a->size = total;
    return CHORUS_SUCCESS;

err_unmap:
    munmap(base, total);
    fd = -1;
err_unlink:
    if (fd >= 0) close(fd);
    shm_unlink(name);
err:
    return status;
}

/* Checks the owner's header against the mapping, our comm and the secret. */
static chorus_status_t arena_seg_check(const chorus_arena_params_t *p, const arena_hdr_t *h,
                                       size_t size, uint32_t owner_pid, const char *name)
{
    uint64_t ctl_off, flat_off, stage_off, res_off, total;
    uint8_t token[32];
    chorus_status_t status;
    const char *why = NULL;

    arena__layout(h->nlocal, h->flat_slot, h->chunk, &ctl_off, &flat_off, &stage_off, &res_off,
                  &total);
    if (atomic_load_explicit(&h->magic, memory_order_acquire) != ARENA_MAGIC) why = "magic";
    else if (h->version != ARENA_VERSION || h->hdr_size != sizeof *h) why = "version";
    else if (h->comm_id != p->comm_id) why = "communicator id";
    else if (h->nlocal != (uint32_t)p->nlocal) why = "rank count";
    else if (h->owner_pid != owner_pid) why = "owner pid";
    else if (h->flat_slot == 0 || h->flat_slot % ARENA_LINE != 0 || h->flat_slot > (1u << 20) ||
             h->chunk == 0 || h->chunk % ARENA_LINE != 0 || h->chunk > ARENA_STAGE_BUDGET)
        why = "slot size";
    else if (h->ctl_off != ctl_off || h->flat_off != flat_off || h->stage_off != stage_off ||
             h->res_off != res_off || h->total_size != total || total != size)
        why = "layout";
    if (why != NULL)
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: segment %s has a bad %s",
                             p->rank, name, why);
    status = arena_token(p->secret, h, token);
    if (status != CHORUS_SUCCESS) return status;
    if (CRYPTO_memcmp(token, h->token, sizeof token) != 0)
        return chorus__error(CHORUS_ERR_AUTH,
                             "rank %d: arena: segment %s does not prove the job secret", p->rank,
                             name);
    return CHORUS_SUCCESS;
}

chorus_status_t arena__shm_map(const char *name, size_t min, size_t max, int populate,
                               int rank, const char *what, void **base_p, size_t *size_p)
{
    struct stat st;
    void *base;
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);

    if (fd < 0)
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: %s: shm_open(%s)", rank,
                                   what, name);
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0 ||
        (uint64_t)st.st_size < min || (uint64_t)st.st_size > max) {
        close(fd);
        return chorus__error(CHORUS_ERR_AUTH, "rank %d: %s: %s is not private to this user or "
                             "has a bad size", rank, what, name);
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: %s: mmap(%s)", rank, what,
                                   name);
    *base_p = base;
    *size_p = (size_t)st.st_size;
    return CHORUS_SUCCESS;
}

/* Other local ranks: open, check that only our user can touch it, map, verify. */
static chorus_status_t arena_seg_attach(chorus_arena_t *a, const chorus_arena_params_t *p,
                                        const arena_block_t *owner)
{
    chorus_status_t status;
    size_t size;
    void *base;

    if (strnlen(owner->name, ARENA_NAME_MAX) == ARENA_NAME_MAX ||
        strncmp(owner->name, ARENA_NAME_PREFIX, strlen(ARENA_NAME_PREFIX)) != 0 ||
        strchr(owner->name + 1, '/') != NULL)
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: bad segment name from rank %d",
                             p->rank, owner->rank);
    status = arena__shm_map(owner->name, sizeof(arena_hdr_t), (size_t)1 << 40, 1, p->rank,
                            "arena: segment", &base, &size);
    if (status != CHORUS_SUCCESS) return status;
    status = arena_seg_check(p, base, size, owner->pid, owner->name);
    if (status != CHORUS_SUCCESS) {
        munmap(base, size);
        return status;
    }
    a->base = base;
    a->size = size;
    return CHORUS_SUCCESS;
}

static void arena_free(chorus_arena_t *a)
{
    arena__win_free_all(a);
    if (a->base != NULL) munmap(a->base, a->size);
    free(a->ranks);
    free(a->pids);
    free(a->pid_check);
    free((void *)a->srcs);
    free((void *)a->wsrc);
    free(a->vpacked);
    free(a->seen);
    free(a->tmp);
    free(a);
}

/* The process-local object, before the segment exists. */
static chorus_status_t arena_alloc(const chorus_arena_params_t *p, chorus_arena_t **a_p)
{
    chorus_arena_t *a = calloc(1, sizeof *a);

    if (a == NULL) goto err;
    a->n = p->nlocal;
    a->eager_depth = arena__eager_depth((uint32_t)p->nlocal);
    a->me = p->local_index;
    a->rank = p->rank;
    a->timeout_s = p->timeout_s;
    a->abort_flag = p->abort_flag;
    a->wait = p->wait;
    a->ranks = calloc((size_t)a->n, sizeof *a->ranks);
    a->pids = calloc((size_t)a->n, sizeof *a->pids);
    a->pid_check = calloc((size_t)a->n, 1);
    a->srcs = calloc((size_t)a->n, sizeof *a->srcs);
    a->wsrc = calloc((size_t)a->n, sizeof *a->wsrc);
    a->vpacked = calloc((size_t)a->n, 1);
    a->seen = calloc((size_t)a->n, sizeof *a->seen);
    if (a->ranks == NULL || a->pids == NULL || a->pid_check == NULL || a->srcs == NULL ||
        a->wsrc == NULL || a->vpacked == NULL ||
        a->seen == NULL)
        goto err;
    *a_p = a;
    return CHORUS_SUCCESS;

err:
    if (a != NULL) arena_free(a);
    return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: arena: no memory", p->rank);
}

/* After the name exchange: attach (others) and record who is who. */
static chorus_status_t arena_join(chorus_arena_t *a, const chorus_arena_params_t *p,
                                  const arena_block_t *blocks)
{
    const arena_block_t *owner = NULL;
    uint64_t pidns = chorus__pidns();
    chorus_status_t status;

    for (int r = 0; r < a->n; r++) {
        if (blocks[r].local_index < 0 || blocks[r].local_index >= a->n)
            return chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: rank %d sent a bad local "
                                 "index %d", p->rank, r, blocks[r].local_index);
        a->ranks[blocks[r].local_index] = blocks[r].rank;
        a->pids[blocks[r].local_index] = blocks[r].pid;
        a->pid_check[blocks[r].local_index] = pidns != 0 && blocks[r].pidns == pidns;
        if (blocks[r].local_index == 0) owner = &blocks[r];
    }
    /* Single copy between processes needs our pid namespace (the pids must mean the same
     * processes) and the kernel's permission (ptrace rules, seccomp in containers): try it
     * on the next local rank; arena_agree makes it all or nothing. */
    a->cma = chorus__config_int("CHORUS_ARENA_CMA", 0) != 0;
    for (int r = 0; r < a->n && a->cma; r++) a->cma = a->pid_check[r];
    for (int r = 0; r < a->n && a->cma; r++)
        if (blocks[r].local_index == (a->me + 1) % a->n)
            a->cma = arena__cma_probe(blocks[r].pid, blocks[r].probe);
    if (owner == NULL || owner->status != CHORUS_SUCCESS)
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: local rank 0 could not create "
                             "the segment", p->rank);
    if (a->me != 0) {
        status = arena_seg_attach(a, p, owner);
        if (status != CHORUS_SUCCESS) return status;
    }
    arena_bind(a);
    a->ctl[a->me].rank = p->rank;
    return CHORUS_SUCCESS;
}

/* The second exchange: every rank's outcome, so that all reach the same decision. A failed
 * check of the secret is an error everywhere; anything else (no /dev/shm space, ...)
 * switches the arena off on every rank, with a warning, since the schedules still work. */
static chorus_status_t arena_agree(const chorus_arena_params_t *p, arena_block_t *blocks,
                                   chorus_status_t mine, chorus_arena_t *a, int *use_p)
{
    chorus_status_t status;
    int bad = -1;

    blocks[p->rank].status = mine;
    blocks[p->rank].cma_ok = a != NULL && mine == CHORUS_SUCCESS && a->cma;
    status = chorus__bootstrap_allgather(p->bs, blocks, sizeof *blocks);
    if (status != CHORUS_SUCCESS) return status;
    for (int r = 0; r < p->nlocal; r++) {
        if (blocks[r].status == CHORUS_ERR_AUTH) {
            if (mine != CHORUS_SUCCESS) return mine;
            return chorus__error(CHORUS_ERR_AUTH, "rank %d: arena: rank %d could not verify the "
                                 "shared segment", p->rank, r);
        }
        if (blocks[r].status != CHORUS_SUCCESS && bad < 0) bad = r;
        if (a != NULL && !blocks[r].cma_ok) a->cma = 0;
    }
    if (bad >= 0)
        CHORUS_WARN("arena", "rank %d: arena switched off: rank %d could not set it up (%s)",
                    p->rank, bad, chorus_status_string((chorus_status_t)blocks[bad].status));
    *use_p = bad < 0;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__arena_create(const chorus_arena_params_t *params,
                                     chorus_arena_t **arena_p)
{
    const chorus_arena_params_t *p = params;
    chorus_arena_t *a = NULL;
    chorus_status_t status, mine = CHORUS_SUCCESS;
    arena_block_t *blocks;
    char name[ARENA_NAME_MAX] = "";
    int enabled = 1, created = 0, use = 0;

    if (p->nlocal < 2) {
        *arena_p = NULL;
        return CHORUS_SUCCESS;
    }
    if (p->nlocal > ARENA_MAX_LOCAL || p->rank < 0 || p->rank >= p->nlocal)
        enabled = 0;
    else
        enabled = chorus__config_int("CHORUS_ARENA", 1) != 0;
    blocks = calloc((size_t)p->nlocal, sizeof *blocks);
    if (blocks == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: arena: no memory", p->rank);
    if (enabled) mine = arena_alloc(p, &a);
    if (a != NULL && p->local_index == 0) {
        mine = arena_seg_create(a, p, name);
        created = mine == CHORUS_SUCCESS;
    }
    /* Every rank takes part in both exchanges whatever happened, so none is left waiting. */
    {
        arena_block_t *b = &blocks[p->rank < p->nlocal ? p->rank : 0];

        memcpy(b->name, name, sizeof name);
        b->pidns = chorus__pidns();
        b->pid = (uint32_t)getpid();
        b->rank = p->rank;
        b->local_index = p->local_index;
        b->enabled = enabled;
        b->status = mine;
        b->probe = (uint64_t)(uintptr_t)&arena__probe_word;
    }
    CHORUS_CHECK_GOTO(chorus__bootstrap_allgather(p->bs, blocks, sizeof *blocks), err_free);
    for (int r = 0; r < p->nlocal; r++) enabled &= blocks[r].enabled != 0;
    if (enabled && mine == CHORUS_SUCCESS) mine = arena_join(a, p, blocks);
    CHORUS_CHECK_GOTO(arena_agree(p, blocks, mine, a, &use), err_free);
    /* Everyone has mapped it (or given up): the name is no longer needed. */
    if (created) shm_unlink(name);
    created = 0;
    free(blocks);
    if (!enabled || !use) {
        if (a != NULL) arena_free(a);
        *arena_p = NULL;
        return CHORUS_SUCCESS;
    }
    a->cma_min = chorus__config_size("CHORUS_ARENA_CMA_MIN", ARENA_CMA_MIN_DEFAULT);
    CHORUS_INFO("arena", "rank %d: arena of %d ranks, %zu bytes: flat below %zu bytes, chunks "
                "of %zu bytes, single copy %s%zu bytes", p->rank, a->n, a->size, a->flat_slot,
                a->chunk, a->cma ? "from " : "off (", a->cma ? a->cma_min : (size_t)0);
    *arena_p = a;
    return CHORUS_SUCCESS;

err_free:
    if (created) shm_unlink(name);
    if (a != NULL) arena_free(a);
    free(blocks);
    return status;
}

void chorus__arena_destroy(chorus_arena_t *arena)
{
    if (arena != NULL) arena_free(arena);
}

void chorus__arena_set_timeout(chorus_arena_t *arena, double timeout_s)
{
    arena->timeout_s = timeout_s;
}

void chorus__arena_set_exact(chorus_arena_t *arena, uint64_t divisor)
{
    arena->exact_divisor = divisor;
}
