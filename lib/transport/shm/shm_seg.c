/*
 * Segments of the shm transport: creating ours, laying it out once the peers are known,
 * and opening and checking a peer's. A peer's segment is untrusted input: every size and
 * offset in its header is checked against the size of the mapping before anything in it
 * is used, and its HMAC token must prove the job secret.
 */
#include "transport/shm/shm.h"
#include "util/proc.h"

#include "util/auth.h"
#include "util/status.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_NAME_PREFIX "/chorus-"
/* A segment larger than this is not one of ours (8 ranks x 1 GiB rings is far below). */
#define SHM_SEG_SIZE_MAX ((uint64_t)1 << 40)

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) & ~(a - 1);
}

static uint64_t index_off(void)
{
    return align_up(sizeof(shm_seg_hdr_t), SHM_CACHE_LINE);
}

chorus_status_t shm_seg_create(shm_seg_t *seg, uint64_t comm_id, int rank)
{
    uint32_t salt;
    chorus_status_t status;
    int fd;

    memset(seg, 0, sizeof(*seg));
    seg->fd = -1;
    /* The random salt keeps a stale segment of a crashed job, or a squatter, from
     * colliding with ours; O_EXCL makes sure the segment is new and ours. */
    status = chorus__random_bytes(&salt, sizeof(salt));
    if (status != CHORUS_SUCCESS) return status;
    snprintf(seg->name, sizeof(seg->name), SHM_NAME_PREFIX "%016" PRIx64 "-%d-%08x", comm_id,
             rank, salt);
    fd = shm_open(seg->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: shm: shm_open(%s)", rank,
                                   seg->name);
    }
    seg->fd = fd;
    seg->linked = 1;
    return CHORUS_SUCCESS;
}

chorus_status_t shm_seg_layout(shm_seg_t *seg, const chorus_tp_params_t *params,
                               const uint8_t *peer_mask, uint64_t ring_size)
{
    uint64_t stride = sizeof(shm_ring_ctl_t) + ring_size;
    uint64_t rings_off = align_up(index_off() + 4 * (uint64_t)params->nranks, 4096);
    uint32_t nrings = 0;
    uint64_t total;
    shm_seg_hdr_t *hdr;
    uint32_t *index;
    chorus_status_t status;
    void *base;

    for (int p = 0; p < params->nranks; p++) nrings += peer_mask[p] && p != params->rank;
    total = rings_off + nrings * stride;
    if (total > SHM_SEG_SIZE_MAX) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: shm: %u rings of %" PRIu64 " bytes are too many",
                             params->rank, nrings, ring_size);
    }
    if (ftruncate(seg->fd, (off_t)total) != 0) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: shm: ftruncate(%s, %" PRIu64
                                   ")", params->rank, seg->name, total);
    }
    base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    if (base == MAP_FAILED) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: shm: mmap(%s)",
                                   params->rank, seg->name);
    }
    hdr = base;
    hdr->version = SHM_SEG_VERSION;
    hdr->hdr_size = sizeof(*hdr);
    hdr->total_size = total;
    hdr->comm_id = params->comm_id;
    hdr->owner_rank = params->rank;
    hdr->nranks = params->nranks;
    hdr->owner_pid = (uint32_t)getpid();
    hdr->nrings = nrings;
    hdr->ring_size = ring_size;
    hdr->rings_off = rings_off;
    hdr->ring_stride = stride;
    hdr->pidns = chorus__pidns();
    CHORUS_CHECK_GOTO(chorus__random_bytes(hdr->nonce, sizeof(hdr->nonce)), err_unmap);
    CHORUS_CHECK_GOTO(shm_token(params->secret, "chorus-shm-seg", params->comm_id, params->rank,
                                params->rank, hdr->nonce, hdr->token),
                      err_unmap);
    index = (uint32_t *)((uint8_t *)base + index_off());
    nrings = 0;
    for (int p = 0; p < params->nranks; p++) {
        index[p] = peer_mask[p] && p != params->rank ? nrings++ : SHM_NO_RING;
    }
    /* Everything above is visible to a peer that sees the magic. */
    atomic_store_explicit(&hdr->magic, SHM_SEG_MAGIC, memory_order_release);
    seg->base = base;
    seg->size = total;
    seg->hdr = hdr;
    seg->nranks = params->nranks;
    seg->nrings = nrings;
    seg->ring_size = ring_size;
    seg->rings_off = rings_off;
    seg->ring_stride = stride;
    return CHORUS_SUCCESS;

err_unmap:
    munmap(base, total);
    return status;
}

/* Checks a peer's header against the mapping and our parameters. */
static chorus_status_t seg_check(shm_seg_t *seg, const chorus_tp_params_t *params,
                                 int peer, const shm_blob_t *blob)
{
    const shm_seg_hdr_t *h = seg->hdr;
    uint8_t token[32];
    chorus_status_t status;
    const char *why = NULL;
    uint32_t idx;

    if (h->version != SHM_SEG_VERSION) why = "version";
    else if (h->hdr_size != sizeof(*h) || h->total_size != seg->size) why = "size";
    else if (h->comm_id != params->comm_id) why = "communicator id";
    else if (h->owner_rank != peer || h->nranks != params->nranks) why = "rank";
    else if (h->owner_pid != blob->pid) why = "pid";
    else if (h->ring_size < SHM_RING_MIN || h->ring_size > SHM_RING_MAX ||
             (h->ring_size & (h->ring_size - 1)) != 0)
        why = "ring size";
    else if (h->ring_stride != sizeof(shm_ring_ctl_t) + h->ring_size ||
             h->rings_off < index_off() + 4 * (uint64_t)h->nranks ||
             h->rings_off % SHM_CACHE_LINE != 0 || h->rings_off > seg->size ||
             h->nrings > (uint32_t)h->nranks ||
             h->rings_off + (uint64_t)h->nrings * h->ring_stride != seg->size)
        why = "layout";
    if (why != NULL) {
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: shm: peer %d's segment %s has a bad %s",
                             params->rank, peer, seg->name, why);
    }
    seg->nranks = h->nranks;
    seg->nrings = h->nrings;
    seg->ring_size = h->ring_size;
    seg->rings_off = h->rings_off;
    seg->ring_stride = h->ring_stride;
    status = shm_token(params->secret, "chorus-shm-seg", params->comm_id, peer, peer, h->nonce,
                       token);
    if (status != CHORUS_SUCCESS) return status;
    if (!shm_token_equal(token, h->token)) {
        return chorus__error(CHORUS_ERR_AUTH,
                             "rank %d: shm: peer %d's segment %s does not prove the job secret",
                             params->rank, peer, seg->name);
    }
    idx = shm_seg_ring_index(seg, params->rank);
    if (idx == SHM_NO_RING) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "rank %d: shm: peer %d has no ring for us (do the masks agree?)",
                             params->rank, peer);
    }
    return CHORUS_SUCCESS;
}

/* Opens the peer's segment file once and checks that only our user can touch it. */
static chorus_status_t seg_open(shm_seg_t *seg, const chorus_tp_params_t *params, int peer,
                                const shm_blob_t *blob)
{
    struct stat st;
    int fd;

    snprintf(seg->name, sizeof(seg->name), "%s", blob->name);
    fd = shm_open(seg->name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        return chorus__error_errno(errno == ENOENT ? CHORUS_ERR_REMOTE : CHORUS_ERR_SYSTEM, errno,
                                   "rank %d: shm: cannot open peer %d's segment %s",
                                   params->rank, peer, seg->name);
    }
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        close(fd);
        return chorus__error(CHORUS_ERR_AUTH,
                             "rank %d: shm: peer %d's segment %s is not private to this user",
                             params->rank, peer, seg->name);
    }
    seg->fd = fd;
    return CHORUS_SUCCESS;
}

chorus_status_t shm_seg_attach(shm_seg_t *seg, const chorus_tp_params_t *params, int peer,
                               const shm_blob_t *blob, int *ready_p)
{
    chorus_status_t status;
    struct stat st;
    uint64_t magic;

    if (seg->fd < 0 && seg->base == NULL) {
        status = seg_open(seg, params, peer, blob);
        if (status != CHORUS_SUCCESS) return status;
    }
    if (seg->base == NULL) {
        /* The owner sizes the segment once, with its final size: until then it is empty. */
        if (fstat(seg->fd, &st) != 0) {
            return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: shm: fstat(%s)",
                                       params->rank, seg->name);
        }
        if (st.st_size == 0) {
            *ready_p = 0;
            return CHORUS_SUCCESS;
        }
        if ((uint64_t)st.st_size < sizeof(shm_seg_hdr_t) ||
            (uint64_t)st.st_size > SHM_SEG_SIZE_MAX) {
            return chorus__error(CHORUS_ERR_REMOTE, "rank %d: shm: peer %d's segment %s has a "
                                 "bad size %lld", params->rank, peer, seg->name,
                                 (long long)st.st_size);
        }
        seg->base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd,
                         0);
        if (seg->base == MAP_FAILED) {
            seg->base = NULL;
            return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: shm: mmap(%s)",
                                       params->rank, seg->name);
        }
        seg->size = (size_t)st.st_size;
        seg->hdr = seg->base;
        close(seg->fd);
        seg->fd = -1;
    }
    magic = atomic_load_explicit(&seg->hdr->magic, memory_order_acquire);
    if (magic == 0) {
        *ready_p = 0;
        return CHORUS_SUCCESS;
    }
    if (magic != SHM_SEG_MAGIC) {
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: shm: peer %d's segment %s has a bad "
                             "magic", params->rank, peer, seg->name);
    }
    status = seg_check(seg, params, peer, blob);
    if (status != CHORUS_SUCCESS) return status;
    *ready_p = 1;
    return CHORUS_SUCCESS;
}

uint32_t shm_seg_ring_index(const shm_seg_t *seg, int sender)
{
    const _Atomic uint32_t *index =
        (const _Atomic uint32_t *)((const uint8_t *)seg->base + index_off());
    uint32_t i;

    if (sender < 0 || sender >= seg->nranks) return SHM_NO_RING;
    /* Read once: the value checked is the value used. */
    i = atomic_load_explicit(&index[sender], memory_order_relaxed);
    return i < seg->nrings ? i : SHM_NO_RING;
}

shm_ring_ctl_t *shm_seg_ring(const shm_seg_t *seg, uint32_t index)
{
    return (shm_ring_ctl_t *)((uint8_t *)seg->base + seg->rings_off +
                              (uint64_t)index * seg->ring_stride);
}

void shm_seg_unlink(shm_seg_t *seg)
{
    if (seg->linked) {
        shm_unlink(seg->name);
        seg->linked = 0;
    }
}

void shm_seg_close(shm_seg_t *seg)
{
    shm_seg_unlink(seg);
    if (seg->base != NULL) munmap(seg->base, seg->size);
    if (seg->fd >= 0) close(seg->fd);
    seg->base = NULL;
    seg->hdr = NULL;
    seg->fd = -1;
}

chorus_status_t shm_token(const uint8_t *secret, const char *label, uint64_t comm_id, int a,
                          int b, const uint8_t nonce[16], uint8_t out[32])
{
    uint8_t msg[64];
    size_t len = strlen(label);
    unsigned out_len = 0;
    int32_t ab[2] = {a, b};

    /* Labels are short constants; the rest has a fixed size, so the message is unambiguous. */
    memcpy(msg, label, len);
    memcpy(msg + len, &comm_id, 8);
    memcpy(msg + len + 8, ab, 8);
    memcpy(msg + len + 16, nonce, 16);
    if (HMAC(EVP_sha256(), secret, CHORUS_SECRET_BYTES, msg, len + 32, out, &out_len) == NULL ||
        out_len != 32) {
        return chorus__error(CHORUS_ERR_INTERNAL, "shm: HMAC-SHA256 failed");
    }
    return CHORUS_SUCCESS;
}

int shm_token_equal(const uint8_t a[32], const uint8_t b[32])
{
    return CRYPTO_memcmp(a, b, 32) == 0;
}

void shm_blob_fill(shm_blob_t *blob, const shm_seg_t *seg, uint64_t comm_id, int rank)
{
    memset(blob, 0, sizeof(*blob));
    blob->magic = SHM_BLOB_MAGIC;
    blob->version = SHM_SEG_VERSION;
    blob->rank = rank;
    blob->pid = (uint32_t)getpid();
    blob->comm_id = comm_id;
    blob->pidns = chorus__pidns();
    snprintf(blob->name, sizeof(blob->name), "%s", seg->name);
}

chorus_status_t shm_blob_check(const shm_blob_t *blob, uint64_t comm_id, int rank, int peer)
{
    size_t len = strnlen(blob->name, sizeof(blob->name));
    size_t plen = strlen(SHM_NAME_PREFIX);

    if (blob->magic != SHM_BLOB_MAGIC || blob->version != SHM_SEG_VERSION ||
        blob->rank != peer || blob->comm_id != comm_id || blob->pid == 0 ||
        len == sizeof(blob->name) || len <= plen ||
        strncmp(blob->name, SHM_NAME_PREFIX, plen) != 0 || strchr(blob->name + 1, '/') != NULL) {
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: shm: bad address blob from peer %d",
                             rank, peer);
    }
    return CHORUS_SUCCESS;
}

