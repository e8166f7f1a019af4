/*
 * The consumer side of an shm ring (lib/transport/shm/shm_ring.c) facing a hostile
 * producer. The ring lives in our own segment, but every peer maps it and may write
 * anything there: the data area, the frame headers and the head counter. Here the control
 * block and a data area of SHM_RING_MIN bytes are heap blocks (ASan sees any access
 * outside them), and the input is a script of what the producer does between the
 * consumer's calls. Input: u64 starting counter (so that counters near 2^64 are tried),
 * then operations, each one byte and its arguments:
 *   0 write: u16 offset, u8 n, n bytes into the data area (wrapping)
 *   1 header: u8 flags, u32 length: a header at the aligned head, head moves past it
 *     (flags bit 0: wrong magic, bit 1: wrong sequence number, bit 2: length + 2^48)
 *   2 payload: u16 n: head moves n bytes (the data is whatever is there)
 *   3 head: i32 delta: head set to the consumer's counter + delta (also behind it)
 *   4 head: u64: head set to anything
 *   5 receive: u8 size index: shm_ring_rx with a buffer (a heap block of exactly the
 *     posted size) of one of a few sizes, continuing the receive in progress if any
 *
 * Invariants, from an independent reading of the format in shm.h: the consumer never
 * moves past the head it was shown, and publishes its counter; a corrupt stream
 * (impossible head, bad magic, sequence or length) gives SHM_RING_CORRUPT and after that
 * the transport stops using the ring (so does the harness); a header is consumed only
 * when it is well formed; what lands in the buffer is exactly the bytes of the ring
 * between the consumer's counters, at the right offset, and nothing else of the buffer
 * changes; a message of another length is a MISMATCH that writes nothing.
 *
 * corpus/shm_ring/regress-retracted-head{,-2}, regress-head-after-header: harness bugs
 * only. The producer publishes a head, then moves it back while the consumer still holds
 * the first value cached: the consumer consumes up to the cached (published) head, then
 * reads the head again and reports the stream corrupt, which is right (the first version
 * of this harness demanded that it never pass the latest head, which a producer can
 * always undercut after the fact). And a head more than a ring ahead of the consumer's
 * counter at the start of a call is legitimate once the consumer has published the
 * header it consumed in that call.
 */
#include "fuzz_common.h"

#include "transport/shm/shm.h"

#include <string.h>

#define RING SHM_RING_MIN
#define SENTINEL 0xa5

static const uint64_t sizes[] = {0, 1, 7, 16, 100, 4000, 4096, 4097, 10000};

typedef struct {
    const unsigned char *p;
    size_t n;
} input_t;

static int take(input_t *in, void *out, size_t n)
{
    if (in->n < n) return 0;
    memcpy(out, in->p, n);
    in->p += n;
    in->n -= n;
    return 1;
}

static uint64_t take_be(input_t *in, int n, int *ok)
{
    uint8_t b[8];
    uint64_t v = 0;

    *ok = take(in, b, (size_t)n);
    for (int i = 0; *ok && i < n; i++)
        v = v << 8 | b[i];
    return v;
}

typedef struct {
    shm_ring_ctl_t *ctl;
    uint8_t *data;
    shm_ring_t r;
    uint64_t head; /* what the producer last published */
    /* The receive in progress: its buffer, what the buffer must hold, its size, cursor. */
    uint8_t *buf, *shadow;
    uint64_t bytes, cursor;
    int posted;
} harness_t;

static uint64_t align16(uint64_t pos)
{
    return (pos + 15) & ~(uint64_t)15;
}

static void set_head(harness_t *h, uint64_t head)
{
    h->head = head;
    atomic_store_explicit(&h->ctl->head, head, memory_order_release);
}

static void put_header(harness_t *h, unsigned flags, uint64_t len)
{
    uint64_t start = align16(h->head);
    uint32_t magic = SHM_MSG_MAGIC ^ (flags & 1u), seq = h->r.seq + (flags >> 1 & 1u);

    if (flags & 4u) len += SHM_MSG_MAX;
    /* Native byte order, like the producer's struct (shm_ring.c): magic, seq, len. */
    memcpy(h->data + (start & (RING - 1)), &magic, 4);
    memcpy(h->data + ((start + 4) & (RING - 1)), &seq, 4);
    memcpy(h->data + ((start + 8) & (RING - 1)), &len, 8);
    set_head(h, start + SHM_MSG_HDR);
}

static void post(harness_t *h, uint64_t bytes)
{
    h->bytes = bytes;
    h->cursor = 0;
    h->buf = malloc(bytes > 0 ? bytes : 1);
    h->shadow = malloc(bytes > 0 ? bytes : 1);
    FUZZ_CHECK(h->buf != NULL && h->shadow != NULL);
    memset(h->buf, SENTINEL, bytes);
    memset(h->shadow, SENTINEL, bytes);
    h->posted = 1;
}

static void unpost(harness_t *h)
{
    free(h->buf);
    free(h->shadow);
    h->buf = h->shadow = NULL;
    h->posted = 0;
}

/* The most bytes past pos a consumer may have been shown: the further of the two heads
 * it can have read (cached before the call, or the one published now), each taken only
 * when it is ahead of pos (counters are compared modulo 2^64). Within one call the
 * consumer republishes its counter, so a head more than a ring ahead of pos may be
 * legitimate by the time it is read: no bound by the ring size here. */
static uint64_t shown_bytes(uint64_t pos, uint64_t peer0, uint64_t peer1)
{
    uint64_t a = peer0 - pos, b = peer1 - pos, half = (uint64_t)1 << 63;

    a = a < half ? a : 0;
    b = b < half ? b : 0;
    return a > b ? a : b;
}

/* One receive call, checked. Returns 0 once the ring is corrupt (the transport then
 * fails the peer and never touches the ring again). */
static int receive(harness_t *h)
{
    uint8_t snap[RING];
    uint64_t pos0 = h->r.pos, seq0 = h->r.seq, cur0 = h->cursor, discard0 = h->r.discard;
    uint64_t peer0 = h->r.peer;
    uint64_t len = UINT64_MAX;

    memcpy(snap, h->data, RING);
    unsigned flags = shm_ring_rx(&h->r, h->buf, h->bytes, &h->cursor, &len);
    uint64_t pos1 = h->r.pos, cur1 = h->cursor;

    /* Never past a head it was shown: the latest, or the one it had cached (what a
     * producer published stays consumable even if it then moves head back: that is
     * corrupt, found when the head is read again). Its own counter is published. */
    FUZZ_CHECK(h->r.peer == h->head || h->r.peer == peer0);
    uint64_t shown = shown_bytes(pos0, peer0, h->head);
    FUZZ_CHECK(pos1 - pos0 <= shown);
    FUZZ_CHECK(atomic_load(&h->ctl->tail) == pos1);
    FUZZ_CHECK(cur1 >= cur0 && (cur1 == 0 || (cur1 >= SHM_MSG_HDR &&
                                              cur1 - SHM_MSG_HDR <= h->bytes)));
    /* A header is consumed only when it is well formed and was there. */
    if (h->r.seq != seq0) {
        FUZZ_CHECK(cur0 == 0 && h->r.seq == (uint32_t)(seq0 + 1));
        uint64_t start = align16(discard0 > 0 ? pos0 + discard0 : pos0);
        uint32_t magic, seq;
        uint64_t hlen;
        memcpy(&magic, snap + (start & (RING - 1)), 4);
        memcpy(&seq, snap + ((start + 4) & (RING - 1)), 4);
        memcpy(&hlen, snap + ((start + 8) & (RING - 1)), 8);
        FUZZ_CHECK(magic == SHM_MSG_MAGIC && seq == (uint32_t)seq0 && hlen < SHM_MSG_MAX);
        FUZZ_CHECK(start + SHM_MSG_HDR - pos0 <= shown);
        if (hlen != h->bytes) FUZZ_CHECK((flags & SHM_RING_MISMATCH) && len == hlen);
    }
    if (flags & SHM_RING_MISMATCH) {
        FUZZ_CHECK((flags & SHM_RING_DONE) && cur1 == 0 && len != h->bytes);
    }
    /* The payload copied in this call: the ring's bytes just behind the new counter. */
    if (cur1 > SHM_MSG_HDR && cur1 > cur0) {
        uint64_t from = cur0 > SHM_MSG_HDR ? cur0 - SHM_MSG_HDR : 0, to = cur1 - SHM_MSG_HDR;
        for (uint64_t k = from; k < to; k++)
            h->shadow[k] = snap[(pos1 - (to - k)) & (RING - 1)];
    }
    FUZZ_CHECK(h->bytes == 0 || memcmp(h->buf, h->shadow, h->bytes) == 0);
    if (flags & SHM_RING_DONE) {
        FUZZ_CHECK((flags & SHM_RING_MISMATCH) || (cur1 == SHM_MSG_HDR + h->bytes &&
                                                   len == h->bytes));
        unpost(h);
    }
    if (flags & SHM_RING_CORRUPT) return 0;
    /* Not corrupt: the head it last read was possible. */
    FUZZ_CHECK(h->r.peer - pos1 <= RING);
    return 1;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    input_t in = {data, size};
    harness_t h;
    int ok;

    memset(&h, 0, sizeof(h));
    uint64_t base = take_be(&in, 8, &ok);
    if (!ok) return 0;
    h.ctl = aligned_alloc(SHM_CACHE_LINE, sizeof(*h.ctl));
    h.data = malloc(RING);
    FUZZ_CHECK(h.ctl != NULL && h.data != NULL);
    memset(h.ctl, 0, sizeof(*h.ctl));
    memset(h.data, 0, RING);
    atomic_store(&h.ctl->head, base);
    atomic_store(&h.ctl->tail, base);
    h.head = base;
    shm_ring_view(&h.r, h.ctl, h.data, RING, 0);

    int live = 1;
    uint8_t op;
    while (live && take(&in, &op, 1)) {
        uint64_t a;
        uint8_t b[256];
        switch (op % 6) {
        case 0:
            a = take_be(&in, 2, &ok);
            if (!ok || !take(&in, b, 1)) break;
            {
                size_t n = b[0] < in.n ? b[0] : in.n;
                for (size_t k = 0; k < n; k++)
                    h.data[(a + k) & (RING - 1)] = in.p[k];
                in.p += n;
                in.n -= n;
            }
            break;
        case 1:
            if (!take(&in, b, 1)) break;
            a = take_be(&in, 4, &ok);
            if (ok) put_header(&h, b[0], a);
            break;
        case 2:
            a = take_be(&in, 2, &ok);
            if (ok) set_head(&h, h.head + a);
            break;
        case 3:
            a = take_be(&in, 4, &ok);
            if (ok) set_head(&h, h.r.pos + (uint64_t)(int64_t)(int32_t)(uint32_t)a);
            break;
        case 4:
            a = take_be(&in, 8, &ok);
            if (ok) set_head(&h, a);
            break;
        default:
            if (!take(&in, b, 1)) break;
            if (!h.posted) post(&h, sizes[b[0] % (sizeof(sizes) / sizeof(sizes[0]))]);
            live = receive(&h);
            break;
        }
    }
    if (h.posted) unpost(&h);
    free(h.data);
    free(h.ctl);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv("CHORUS_DEBUG");
    return 0;
}
