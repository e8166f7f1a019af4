/*
 * Registered windows (issue 38): memory every local rank can read with plain loads.
 *
 * chorus_mem_alloc is collective over a one-host communicator: every rank creates a shared
 * memory object of the same size (mode 0600, O_EXCL), whose first page is a header proving
 * the job secret (HMAC, as the arena's own segment does), and hands the caller the rest.
 * The ranks exchange the names over the bootstrap, each maps every peer's object and checks
 * its header, and once all have mapped them the owners unlink the names, so nothing is left
 * in /dev/shm if a process dies. A window's mappings outlive its owner: a peer that dies
 * while others read its window leaves them reading valid memory (the object is freed only
 * when the last mapping goes), never a SIGBUS.
 *
 * Windows are numbered in the order they were made, the same on every rank, so a rank names
 * one of its buffers to its peers as (window, offset) and they find it in their mappings
 * (arena_coll.c, arena.c read straight from there).
 */
#include "arena/arena_int.h"

#include "bootstrap/bootstrap.h"
#include "util/auth.h"
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

#define WIN_NAME_PREFIX "/chorus-win-"
#define WIN_MAGIC 0x4e49575355524843ULL /* "CHRUSWIN" */

typedef struct {
    uint64_t magic;
    uint64_t comm_id;
    uint64_t bytes;
    uint32_t id;
    uint32_t rank;
    uint8_t nonce[16];
    uint8_t token[32];
} win_hdr_t;

typedef struct {
    char name[ARENA_NAME_MAX];
    uint64_t bytes;
    uint32_t id;
    int32_t status;
} win_block_t;

static size_t win_map_bytes(size_t bytes)
{
    return ARENA_PAGE + (bytes + ARENA_PAGE - 1) / ARENA_PAGE * ARENA_PAGE;
}

/* HMAC(secret, label | comm_id | id | rank | bytes | nonce). */
static chorus_status_t win_token(const uint8_t *secret, const win_hdr_t *h, uint8_t out[32])
{
    uint8_t msg[16 + 8 + 4 + 4 + 8 + 16];
    unsigned out_len = 0;

    memcpy(msg, "chorus-window-v1", 16);
    memcpy(msg + 16, &h->comm_id, 8);
    memcpy(msg + 24, &h->id, 4);
    memcpy(msg + 28, &h->rank, 4);
    memcpy(msg + 32, &h->bytes, 8);
    memcpy(msg + 40, h->nonce, 16);
    if (HMAC(EVP_sha256(), secret, CHORUS_SECRET_BYTES, msg, sizeof msg, out, &out_len) == NULL ||
        out_len != 32)
        return chorus__error(CHORUS_ERR_INTERNAL, "arena: window: HMAC-SHA256 failed");
    return CHORUS_SUCCESS;
}

/* Creates, sizes and maps this rank's object; *base_p is the whole mapping. */
static chorus_status_t win_create(const chorus_arena_t *a, const uint8_t *secret, uint64_t comm_id,
                                  uint32_t id, size_t bytes, char *name, uint8_t **base_p)
{
    size_t map = win_map_bytes(bytes);
    chorus_status_t status;
    win_hdr_t *h;
    uint32_t salt;
    void *base;
    int fd;

    status = chorus__random_bytes(&salt, sizeof salt);
    if (status != CHORUS_SUCCESS) return status;
    snprintf(name, ARENA_NAME_MAX, WIN_NAME_PREFIX "%016" PRIx64 "-%u-%d-%08x", comm_id, id,
             a->me, salt);
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: mem_alloc: shm_open(%s)",
                                   a->rank, name);
    if (ftruncate(fd, (off_t)map) != 0) {
        status = chorus__error_errno(CHORUS_ERR_NO_MEMORY, errno,
                                     "rank %d: mem_alloc: %zu bytes of shared memory", a->rank,
                                     bytes);
        close(fd);
        shm_unlink(name);
        return status;
    }
    base = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        status = chorus__error_errno(CHORUS_ERR_NO_MEMORY, errno, "rank %d: mem_alloc: mmap(%s)",
                                     a->rank, name);
        shm_unlink(name);
        return status;
    }
    h = base;
    h->comm_id = comm_id;
    h->bytes = bytes;
    h->id = id;
    h->rank = (uint32_t)a->me;
    status = chorus__random_bytes(h->nonce, sizeof h->nonce);
    if (status == CHORUS_SUCCESS) status = win_token(secret, h, h->token);
    if (status != CHORUS_SUCCESS) {
        munmap(base, map);
        shm_unlink(name);
        return status;
    }
    h->magic = WIN_MAGIC;
    *base_p = base;
    return CHORUS_SUCCESS;
}

/* Maps local rank r's object named in b and checks that it proves the secret. */
static chorus_status_t win_attach(const chorus_arena_t *a, const uint8_t *secret, uint64_t comm_id,
                                  int r, const win_block_t *b, uint32_t id, size_t bytes,
                                  uint8_t **base_p)
{
    size_t map = win_map_bytes(bytes), size;
    const win_hdr_t *h;
    uint8_t token[32];
    char what[64];
    chorus_status_t status;
    void *base;

    if (strnlen(b->name, ARENA_NAME_MAX) == ARENA_NAME_MAX ||
        strncmp(b->name, WIN_NAME_PREFIX, strlen(WIN_NAME_PREFIX)) != 0 ||
        strchr(b->name + 1, '/') != NULL)
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: mem_alloc: bad window name from rank %d",
                             a->rank, a->ranks[r]);
    snprintf(what, sizeof what, "mem_alloc: rank %d's window", a->ranks[r]);
    status = arena__shm_map(b->name, map, map, 0, a->rank, what, &base, &size);
    if (status != CHORUS_SUCCESS) return status;
    h = base;
    if (h->magic != WIN_MAGIC || h->comm_id != comm_id || h->id != id || h->bytes != bytes ||
        h->rank != (uint32_t)r || win_token(secret, h, token) != CHORUS_SUCCESS ||
        CRYPTO_memcmp(token, h->token, sizeof token) != 0) {
        munmap(base, map);
        return chorus__error(CHORUS_ERR_AUTH, "rank %d: mem_alloc: rank %d's window %s does not "
                             "prove the job secret", a->rank, a->ranks[r], b->name);
    }
    *base_p = base;
    return CHORUS_SUCCESS;
}

static void win_unmap(const chorus_arena_t *a, arena_win_t *w)
{
    for (int r = 0; r < a->n; r++) {
        if (w->base[r] != NULL) munmap(w->base[r] - ARENA_PAGE, win_map_bytes(w->bytes));
    }
    free(w->base);
    w->base = NULL;
}

chorus_status_t chorus__arena_win_alloc(chorus_arena_t *a, struct chorus_bootstrap *bs,
                                        const uint8_t *secret, uint64_t comm_id, size_t bytes,
                                        void **ptr_p)
{
    win_block_t *blocks;
    arena_win_t w = {0};
    chorus_status_t status, mine;
    char name[ARENA_NAME_MAX] = "";
    uint8_t *own = NULL;
    int bad = -1;

    if (a->nwins == a->wins_cap) {
        int cap = a->wins_cap ? a->wins_cap * 2 : 8;
        arena_win_t *grown = realloc(a->wins, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_alloc: no memory", a->rank);
        a->wins = grown;
        a->wins_cap = cap;
    }
    blocks = calloc((size_t)a->n, sizeof *blocks);
    w.base = calloc((size_t)a->n, sizeof *w.base);
    if (blocks == NULL || w.base == NULL) {
        free(blocks);
        free(w.base);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_alloc: no memory", a->rank);
    }
    w.id = a->win_serial;
    w.bytes = bytes;
    /* Every rank takes part in both exchanges whatever happened, so none is left waiting. */
    mine = win_create(a, secret, comm_id, w.id, bytes, name, &own);
    if (mine == CHORUS_SUCCESS) w.base[a->me] = own + ARENA_PAGE;
    memcpy(blocks[a->me].name, name, sizeof name);
    blocks[a->me].bytes = bytes;
    blocks[a->me].id = w.id;
    blocks[a->me].status = mine;
    status = chorus__bootstrap_allgather(bs, blocks, sizeof *blocks);
    if (status != CHORUS_SUCCESS) goto out;
    for (int r = 0; r < a->n && mine == CHORUS_SUCCESS; r++) {
        if (blocks[r].status != CHORUS_SUCCESS) {
            mine = chorus__error(CHORUS_ERR_REMOTE, "rank %d: mem_alloc: rank %d could not make "
                                 "its window", a->rank, a->ranks[r]);
        } else if (blocks[r].bytes != bytes || blocks[r].id != w.id) {
            mine = chorus__error(CHORUS_ERR_MISMATCH, "rank %d: mem_alloc: window %u of %zu "
                                 "bytes here, rank %d asks window %u of %" PRIu64 " bytes",
                                 a->rank, w.id, bytes, a->ranks[r], blocks[r].id,
                                 blocks[r].bytes);
        } else if (r != a->me) {
            uint8_t *base = NULL;
            mine = win_attach(a, secret, comm_id, r, &blocks[r], w.id, bytes, &base);
            if (mine == CHORUS_SUCCESS) w.base[r] = base + ARENA_PAGE;
        }
    }
    /* The second exchange: all succeed or all fail, and the names can go. */
    blocks[a->me].status = mine;
    status = chorus__bootstrap_allgather(bs, blocks, sizeof *blocks);
    if (name[0] != '\0') shm_unlink(name);
    if (status != CHORUS_SUCCESS) goto out;
    for (int r = 0; r < a->n; r++) {
        if (blocks[r].status != CHORUS_SUCCESS && bad < 0) bad = r;
    }
    if (mine != CHORUS_SUCCESS) {
        status = mine;
    } else if (bad >= 0) {
        status = chorus__error(CHORUS_ERR_REMOTE, "rank %d: mem_alloc: rank %d could not map "
                               "every window (%s)", a->rank, a->ranks[bad],
                               chorus_status_string((chorus_status_t)blocks[bad].status));
    }
out:
    free(blocks);
    if (status != CHORUS_SUCCESS) {
        win_unmap(a, &w);
        return status;
    }
    a->win_serial++;
    a->wins[a->nwins++] = w;
    *ptr_p = w.base[a->me];
    CHORUS_INFO("arena", "rank %d: window %u of %zu bytes mapped by %d ranks", a->rank, w.id,
                bytes, a->n);
    return CHORUS_SUCCESS;
}

/* The index of the window ptr starts, or -1. */
static int win_index(const chorus_arena_t *a, const void *ptr)
{
    for (int i = 0; i < a->nwins; i++) {
        if (a->wins[i].base[a->me] == ptr) return i;
    }
    return -1;
}

chorus_status_t chorus__arena_win_free(chorus_arena_t *a, struct chorus_bootstrap *bs, void *ptr)
{
    int32_t *ids;
    int i = win_index(a, ptr);
    chorus_status_t status;

    if (i < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: mem_free: %p is not memory "
                             "from chorus_mem_alloc on this communicator (or was freed)",
                             a->rank, ptr);
    if (a->wins[i].busy != 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: mem_free: window %u is in "
                             "use by %d operation(s) in flight", a->rank, a->wins[i].id,
                             a->wins[i].busy);
    /* Collective: every rank frees the same window, and none unmaps a peer's while that
     * peer may still name it in a call. */
    ids = calloc((size_t)a->n, sizeof *ids);
    if (ids == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_free", a->rank);
    ids[a->me] = (int32_t)a->wins[i].id;
    status = chorus__bootstrap_allgather(bs, ids, sizeof *ids);
    for (int r = 0; r < a->n && status == CHORUS_SUCCESS; r++) {
        if (ids[r] != ids[a->me])
            status = chorus__error(CHORUS_ERR_MISMATCH, "rank %d: mem_free: window %d here, "
                                   "window %d on rank %d", a->rank, ids[a->me], ids[r],
                                   a->ranks[r]);
    }
    free(ids);
    if (status != CHORUS_SUCCESS) return status;
    win_unmap(a, &a->wins[i]);
    a->wins[i] = a->wins[--a->nwins];
    return CHORUS_SUCCESS;
}

void arena__win_free_all(chorus_arena_t *a)
{
    for (int i = 0; i < a->nwins; i++) win_unmap(a, &a->wins[i]);
    free(a->wins);
    a->wins = NULL;
    a->nwins = a->wins_cap = 0;
}

int arena__win_find(const chorus_arena_t *a, const void *ptr, size_t bytes, uint32_t *id_p,
                    uint64_t *off_p)
{
    const uint8_t *p = ptr;

    for (int i = 0; i < a->nwins; i++) {
        const uint8_t *b = a->wins[i].base[a->me];
        if (p >= b && bytes <= a->wins[i].bytes && (size_t)(p - b) <= a->wins[i].bytes - bytes) {
            *id_p = a->wins[i].id;
            *off_p = (uint64_t)(p - b);
            return 1;
        }
    }
    return 0;
}

const uint8_t *arena__win_peer(const chorus_arena_t *a, uint32_t id, int r, uint64_t off,
                               size_t bytes)
{
    for (int i = 0; i < a->nwins; i++) {
        if (a->wins[i].id != id) continue;
        if (off > a->wins[i].bytes || bytes > a->wins[i].bytes - off) return NULL;
        return a->wins[i].base[r] + off;
    }
    return NULL;
}

uint64_t arena__win_offer(const chorus_arena_t *a, const void *ptr, size_t bytes)
{
    uint32_t id;
    uint64_t off;

    if (bytes == 0 || !arena__win_find(a, ptr, bytes, &id, &off)) return 0;
    return ARENA_OFFER(id, off);
}

const uint8_t *arena__win_at(const chorus_arena_t *a, int r, uint64_t v, size_t bytes)
{
    if (v == 0) return NULL;
    return arena__win_peer(a, ARENA_OFFER_ID(v), r, ARENA_OFFER_OFF(v), bytes);
}
