/*
 * The single-producer single-consumer byte ring of the shm transport (see shm.h). No
 * system calls here: this file is pure so that tests/unit/test_shm_ring.c can drive both
 * ends in one process.
 *
 * Ordering: a side copies bytes first and then publishes its counter with a release
 * store; the other side reads the counter with an acquire load before it touches the
 * bytes. The counters only grow (64 bits do not wrap in practice), so "full" and "empty"
 * need no extra flag. A counter read from the other process is checked before use:
 * whatever it holds, no copy leaves the ring or the user's buffer.
 */
#include "transport/shm/shm.h"

#include <string.h>

/* Largest piece copied before the counter is published: small enough that the other side
 * starts copying out while this side is still copying in, large enough that publishing
 * (one cache line moving between cores) costs little per byte. */
#define SHM_PIECE ((uint64_t)64 * 1024)

typedef struct {
    uint32_t magic;
    uint32_t seq;
    uint64_t len;
} shm_msg_hdr_t;

_Static_assert(sizeof(shm_msg_hdr_t) == SHM_MSG_HDR, "message header layout");

static uint64_t align_msg(uint64_t pos)
{
    return (pos + SHM_MSG_HDR - 1) & ~(uint64_t)(SHM_MSG_HDR - 1);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

void shm_ring_view(shm_ring_t *r, shm_ring_ctl_t *ctl, void *data, uint64_t size, int producer)
{
    uint64_t head = atomic_load_explicit(&ctl->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&ctl->tail, memory_order_acquire);

    memset(r, 0, sizeof(*r));
    r->ctl = ctl;
    r->data = data;
    r->size = size;
    r->pos = producer ? head : tail;
    r->peer = producer ? tail : head;
}

/* Copies n <= size bytes in or out at counter pos, in two pieces where the ring wraps. */
static void copy_in(shm_ring_t *r, uint64_t pos, const uint8_t *src, uint64_t n)
{
    uint64_t off = pos & (r->size - 1);
    uint64_t first = min_u64(n, r->size - off);

    memcpy(r->data + off, src, first);
    memcpy(r->data, src + first, n - first);
}

static void copy_out(shm_ring_t *r, uint64_t pos, uint8_t *dst, uint64_t n)
{
    uint64_t off = pos & (r->size - 1);
    uint64_t first = min_u64(n, r->size - off);

    memcpy(dst, r->data + off, first);
    memcpy(dst + first, r->data, n - first);
}

/* Producer: free bytes, re-reading the consumer's tail when the cached value leaves less
 * than want. Returns UINT64_MAX if the tail is impossible (ahead of head, or further back
 * than one ring). */
static uint64_t tx_free(shm_ring_t *r, uint64_t want)
{
    uint64_t used = r->pos - r->peer;

    if (used <= r->size && r->size - used >= want) return r->size - used;
    r->peer = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
    used = r->pos - r->peer;
    if (used > r->size) return UINT64_MAX;
    return r->size - used;
}

/* Consumer: bytes available, re-reading the producer's head when the cached value shows
 * less than want. UINT64_MAX if the head is impossible. */
static uint64_t rx_avail(shm_ring_t *r, uint64_t want)
{
    uint64_t avail = r->peer - r->pos;

    if (avail >= want && avail <= r->size) return avail;
    r->peer = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
    avail = r->peer - r->pos;
    if (avail > r->size) return UINT64_MAX;
    return avail;
}

static void publish(_Atomic uint64_t *counter, uint64_t value)
{
    atomic_store_explicit(counter, value, memory_order_release);
}

unsigned shm_ring_tx(shm_ring_t *r, const void *buf, uint64_t bytes, uint64_t *cursor_p)
{
    uint64_t cur = *cursor_p;
    unsigned flags = 0;

    if (cur == 0) {
        /* The header goes whole at a 16-aligned counter, so it never wraps. */
        uint64_t start = align_msg(r->pos);
        uint64_t need = start - r->pos + SHM_MSG_HDR;
        uint64_t space = tx_free(r, need);
        shm_msg_hdr_t hdr = {SHM_MSG_MAGIC, r->seq, bytes};

        if (space == UINT64_MAX) return SHM_RING_CORRUPT;
        if (space < need) return 0;
        copy_in(r, start, (const uint8_t *)&hdr, sizeof(hdr));
        r->seq++;
        r->pos = start + SHM_MSG_HDR;
        cur = SHM_MSG_HDR;
        publish(&r->ctl->head, r->pos);
        flags |= SHM_RING_MOVED;
    }
    while (cur - SHM_MSG_HDR < bytes) {
        uint64_t left = bytes - (cur - SHM_MSG_HDR);
        uint64_t want = min_u64(left, SHM_PIECE);
        uint64_t space = tx_free(r, want);
        uint64_t n;

        if (space == UINT64_MAX) return flags | SHM_RING_CORRUPT;
        if (space == 0) break;
        n = min_u64(want, space);
        copy_in(r, r->pos, (const uint8_t *)buf + (cur - SHM_MSG_HDR), n);
        r->pos += n;
        cur += n;
        publish(&r->ctl->head, r->pos);
        flags |= SHM_RING_MOVED;
    }
    *cursor_p = cur;
    if (cur - SHM_MSG_HDR == bytes) flags |= SHM_RING_DONE;
    return flags;
}

unsigned shm_ring_rx_drain(shm_ring_t *r)
{
    unsigned flags = 0;

    while (r->discard > 0) {
        uint64_t avail = rx_avail(r, 1);
        uint64_t n;

        if (avail == UINT64_MAX) return flags | SHM_RING_CORRUPT;
        if (avail == 0) break;
        n = min_u64(avail, r->discard);
        r->pos += n;
        r->discard -= n;
        publish(&r->ctl->tail, r->pos);
        flags |= SHM_RING_MOVED;
    }
    return flags;
}

/* Reads and checks the next header; 0 if it has not arrived yet. */
static unsigned rx_header(shm_ring_t *r, uint64_t *len_p)
{
    uint64_t start = align_msg(r->pos);
    uint64_t need = start - r->pos + SHM_MSG_HDR;
    uint64_t avail = rx_avail(r, need);
    shm_msg_hdr_t hdr;

    if (avail == UINT64_MAX) return SHM_RING_CORRUPT;
    if (avail < need) return 0;
    copy_out(r, start, (uint8_t *)&hdr, sizeof(hdr));
    if (hdr.magic != SHM_MSG_MAGIC || hdr.seq != r->seq || hdr.len >= SHM_MSG_MAX) {
        *len_p = hdr.len;
        return SHM_RING_CORRUPT;
    }
    r->seq++;
    r->pos = start + SHM_MSG_HDR;
    publish(&r->ctl->tail, r->pos);
    *len_p = hdr.len;
    return SHM_RING_MOVED;
}

unsigned shm_ring_rx(shm_ring_t *r, void *buf, uint64_t bytes, uint64_t *cursor_p,
                     uint64_t *len_p)
{
    uint64_t cur = *cursor_p;
    unsigned flags = shm_ring_rx_drain(r);

    if ((flags & SHM_RING_CORRUPT) || r->discard > 0) return flags;
    if (cur == 0) {
        uint64_t len = 0;
        unsigned got = rx_header(r, &len);

        flags |= got;
        if (got & SHM_RING_CORRUPT) {
            *len_p = len;
            return flags;
        }
        if (got == 0) return flags;
        if (len != bytes) {
            /* Skip the payload so that the next message is read from its start. */
            *len_p = len;
            r->discard = len;
            return flags | shm_ring_rx_drain(r) | SHM_RING_MISMATCH | SHM_RING_DONE;
        }
        cur = SHM_MSG_HDR;
    }
    while (cur - SHM_MSG_HDR < bytes) {
        uint64_t left = bytes - (cur - SHM_MSG_HDR);
        uint64_t want = min_u64(left, SHM_PIECE);
        uint64_t avail = rx_avail(r, want);
        uint64_t n;

        if (avail == UINT64_MAX) {
            *cursor_p = cur;
            return flags | SHM_RING_CORRUPT;
        }
        if (avail == 0) break;
        n = min_u64(want, avail);
        copy_out(r, r->pos, (uint8_t *)buf + (cur - SHM_MSG_HDR), n);
        r->pos += n;
        cur += n;
        publish(&r->ctl->tail, r->pos);
        flags |= SHM_RING_MOVED;
    }
    *cursor_p = cur;
    if (cur - SHM_MSG_HDR == bytes) {
        *len_p = bytes;
        flags |= SHM_RING_DONE;
    }
    return flags;
}

int shm_ring_peek(shm_ring_t *r, void *buf, uint64_t len)
{
    uint64_t start = align_msg(r->pos), need = start - r->pos + SHM_MSG_HDR + len;
    uint64_t avail;
    shm_msg_hdr_t hdr;

    if (r->discard > 0) return 0;
    avail = rx_avail(r, need);
    if (avail == UINT64_MAX || avail < need) return 0;
    copy_out(r, start, (uint8_t *)&hdr, sizeof(hdr));
    if (hdr.magic != SHM_MSG_MAGIC || hdr.seq != r->seq || hdr.len != len) return 0;
    copy_out(r, start + SHM_MSG_HDR, buf, len);
    return 1;
}

int shm_ring_rx_ready(shm_ring_t *r)
{
    return atomic_load_explicit(&r->ctl->head, memory_order_acquire) != r->pos;
}

int shm_ring_tx_ready(shm_ring_t *r)
{
    return atomic_load_explicit(&r->ctl->tail, memory_order_acquire) != r->peer;
}
