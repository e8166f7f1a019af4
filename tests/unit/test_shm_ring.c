/*
 * Unit tests of the shm transport's ring (lib/transport/shm/shm_ring.c), both ends in one
 * process: wraparound at every offset, 64-bit counter wrap, messages larger than the
 * ring, zero length, length mismatch, corrupt headers and counters, and two threads
 * streaming 64 MiB with every byte checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "transport/shm/shm.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define RING 4096u

typedef struct {
    shm_ring_ctl_t *ctl;
    uint8_t *data; /* exactly RING bytes from malloc, so ASan/valgrind see any overrun */
    uint64_t size;
    shm_ring_t tx;
    shm_ring_t rx;
} pair_t;

static void pair_init(pair_t *p, uint64_t size, uint64_t start)
{
    p->ctl = aligned_alloc(SHM_CACHE_LINE, sizeof(*p->ctl));
    assert_non_null(p->ctl);
    memset(p->ctl, 0, sizeof(*p->ctl));
    p->data = malloc(size);
    assert_non_null(p->data);
    memset(p->data, 0xee, size);
    p->size = size;
    atomic_store(&p->ctl->head, start);
    atomic_store(&p->ctl->tail, start);
    shm_ring_view(&p->tx, p->ctl, p->data, size, 1);
    shm_ring_view(&p->rx, p->ctl, p->data, size, 0);
}

static void pair_fini(pair_t *p)
{
    free(p->data);
    free(p->ctl);
}

static uint8_t pattern(uint32_t msg, uint64_t i)
{
    return (uint8_t)(msg * 131u + i * 7u + (i >> 8) * 13u + 1u);
}

static void fill(uint8_t *buf, uint64_t n, uint32_t msg)
{
    for (uint64_t i = 0; i < n; i++) buf[i] = pattern(msg, i);
}

/* Fills a destination with the complement of message msg's pattern before the receive:
 * every byte then differs from the one the message must put there, so a byte the ring
 * leaves unwritten fails check (zeros or a constant would pass wherever the pattern
 * happens to hold that value). */
static void poison(uint8_t *buf, uint64_t n, uint32_t msg)
{
    for (uint64_t i = 0; i < n; i++) buf[i] = (uint8_t)~pattern(msg, i);
}

static void check(const uint8_t *buf, uint64_t n, uint32_t msg)
{
    for (uint64_t i = 0; i < n; i++) {
        if (buf[i] != pattern(msg, i)) fail_msg("message %u byte %llu differs", msg,
                                                (unsigned long long)i);
    }
}

/* Moves one message from tx to rx, alternating sides until both are done. */
static void transfer(pair_t *p, const uint8_t *src, uint64_t n, uint8_t *dst)
{
    uint64_t tcur = 0, rcur = 0, len = 0;
    unsigned tf = 0, rf = 0;
    int rounds = 0;

    while (!(tf & SHM_RING_DONE) || !(rf & SHM_RING_DONE)) {
        if (!(tf & SHM_RING_DONE)) tf = shm_ring_tx(&p->tx, src, n, &tcur);
        if (!(rf & SHM_RING_DONE)) rf = shm_ring_rx(&p->rx, dst, n, &rcur, &len);
        assert_false((tf | rf) & (SHM_RING_CORRUPT | SHM_RING_MISMATCH));
        assert_true(++rounds < 1000000);
    }
    assert_int_equal(len, n);
    assert_int_equal(tcur, SHM_MSG_HDR + n);
    assert_int_equal(rcur, SHM_MSG_HDR + n);
}

static void test_wrap_every_offset(void **state)
{
    uint8_t src[1500], dst[1500];
    (void)state;

    /* The counters start at every offset of the ring, and near 2^64 so that the 64-bit
     * counters themselves wrap during the test. */
    for (uint64_t base = 0; base < 2; base++) {
        for (uint64_t off = 0; off < RING; off++) {
            pair_t p;
            uint64_t start = (base ? UINT64_MAX - 2 * RING + 1 : 0) + off;
            uint64_t n = 1 + (off * 37) % sizeof(src);

            pair_init(&p, RING, start);
            for (uint32_t m = 0; m < 3; m++) {
                fill(src, n, (uint32_t)off + m);
                poison(dst, n, (uint32_t)off + m);
                transfer(&p, src, n, dst);
                check(dst, n, (uint32_t)off + m);
            }
            pair_fini(&p);
        }
    }
}

static void test_larger_than_ring(void **state)
{
    const uint64_t sizes[] = {RING - SHM_MSG_HDR, RING, RING + 1, 3 * RING + 5, 100000};
    pair_t p;
    (void)state;

    pair_init(&p, RING, 0);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint8_t *src = malloc(sizes[k]);
        uint8_t *dst = malloc(sizes[k]);

        fill(src, sizes[k], (uint32_t)k);
        poison(dst, sizes[k], (uint32_t)k);
        transfer(&p, src, sizes[k], dst);
        check(dst, sizes[k], (uint32_t)k);
        free(src);
        free(dst);
    }
    pair_fini(&p);
}

static void test_full_ring_waits(void **state)
{
    static uint8_t src[RING], dst[RING];
    uint64_t cur = 0, cur2 = 0, rcur = 0, len = 0;
    pair_t p;
    unsigned f;
    (void)state;

    pair_init(&p, RING, 0);
    fill(src, sizeof(src), 9);
    poison(dst, sizeof(dst), 9);
    /* A message that fills the ring is written up to the ring's size and then waits. */
    f = shm_ring_tx(&p.tx, src, RING, &cur);
    assert_int_equal(f, SHM_RING_MOVED);
    assert_int_equal(cur, RING);
    f = shm_ring_tx(&p.tx, src, RING, &cur);
    assert_int_equal(f, 0);
    /* Nor can a second message start. */
    assert_int_equal(shm_ring_tx(&p.tx, src, 1, &cur2), 0);
    assert_int_equal(cur2, 0);
    assert_false(shm_ring_tx_ready(&p.tx));
    assert_true(shm_ring_rx_ready(&p.rx));
    f = shm_ring_rx(&p.rx, dst, RING, &rcur, &len);
    assert_int_equal(f, SHM_RING_MOVED);
    assert_true(shm_ring_tx_ready(&p.tx));
    f = shm_ring_tx(&p.tx, src, RING, &cur);
    assert_int_equal(f, SHM_RING_MOVED | SHM_RING_DONE);
    f = shm_ring_rx(&p.rx, dst, RING, &rcur, &len);
    assert_int_equal(f, SHM_RING_MOVED | SHM_RING_DONE);
    check(dst, RING, 9);
    assert_false(shm_ring_rx_ready(&p.rx));
    pair_fini(&p);
}

static void test_zero_length(void **state)
{
    uint8_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8];
    uint64_t cur = 0, rcur = 0, len = 99;
    pair_t p;
    (void)state;

    pair_init(&p, RING, 0);
    assert_false(shm_ring_rx_ready(&p.rx));
    assert_int_equal(shm_ring_rx(&p.rx, NULL, 0, &rcur, &len), 0);
    assert_int_equal(shm_ring_tx(&p.tx, NULL, 0, &cur), SHM_RING_MOVED | SHM_RING_DONE);
    assert_true(shm_ring_rx_ready(&p.rx));
    assert_int_equal(shm_ring_rx(&p.rx, NULL, 0, &rcur, &len), SHM_RING_MOVED | SHM_RING_DONE);
    assert_int_equal(len, 0);
    /* The stream goes on after it; dst starts as the complement of src, so every byte
     * must be written. */
    for (size_t i = 0; i < sizeof(dst); i++) dst[i] = (uint8_t)~src[i];
    transfer(&p, src, sizeof(src), dst);
    assert_memory_equal(src, dst, sizeof(src));
    pair_fini(&p);
}

static void test_length_mismatch(void **state)
{
    static uint8_t src[3 * RING], dst[3 * RING];
    uint64_t cur = 0, rcur = 0, len = 0;
    const uint64_t cases[][2] = {{100, 50}, {50, 100}, {0, 8}, {8, 0}, {3 * RING, 10}};
    pair_t p;
    (void)state;

    pair_init(&p, RING, 0);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        uint64_t sent = cases[k][0], posted = cases[k][1];
        unsigned tf = 0, rf = 0;

        /* The receive completes with the sender's length; the rest of the message is
         * skipped as it arrives, and the next message is read intact. */
        cur = rcur = 0;
        /* The complement of the message: any of its bytes written into the receive shows. */
        poison(dst, sizeof(dst), 1);
        fill(src, sent, 1);
        tf = shm_ring_tx(&p.tx, src, sent, &cur);
        rf = shm_ring_rx(&p.rx, dst, posted, &rcur, &len);
        assert_true(rf & SHM_RING_MISMATCH);
        assert_true(rf & SHM_RING_DONE);
        assert_false(rf & SHM_RING_CORRUPT);
        assert_int_equal(len, sent);
        for (uint64_t i = 0; i < posted; i++) assert_int_equal(dst[i], (uint8_t)~pattern(1, i));
        while (!(tf & SHM_RING_DONE)) {
            tf = shm_ring_tx(&p.tx, src, sent, &cur);
            shm_ring_rx_drain(&p.rx);
        }
        fill(src, 77, 2);
        poison(dst, 77, 2);
        transfer(&p, src, 77, dst);
        check(dst, 77, 2);
    }
    pair_fini(&p);
}

static void write_header(pair_t *p, uint32_t magic, uint32_t seq, uint64_t len)
{
    uint64_t head = atomic_load(&p->ctl->head);
    uint32_t w[2] = {magic, seq};

    memcpy(p->data + (head & (p->size - 1)), w, sizeof(w));
    memcpy(p->data + (head & (p->size - 1)) + 8, &len, sizeof(len));
    atomic_store(&p->ctl->head, head + SHM_MSG_HDR);
}

static void test_corrupt_header(void **state)
{
    const uint64_t lens[] = {UINT64_MAX, SHM_MSG_MAX, (uint64_t)1 << 63};
    uint8_t dst[64];
    uint64_t rcur, len;
    pair_t p;
    (void)state;

    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        pair_init(&p, RING, 0);
        write_header(&p, SHM_MSG_MAGIC, 0, lens[k]);
        rcur = 0;
        assert_true(shm_ring_rx(&p.rx, dst, sizeof(dst), &rcur, &len) & SHM_RING_CORRUPT);
        assert_int_equal(len, lens[k]);
        assert_int_equal(rcur, 0);
        pair_fini(&p);
    }
    /* A bad magic or an out-of-order sequence number breaks the stream too. */
    pair_init(&p, RING, 0);
    write_header(&p, 0x12345678, 0, 8);
    rcur = 0;
    assert_true(shm_ring_rx(&p.rx, dst, 8, &rcur, &len) & SHM_RING_CORRUPT);
    pair_fini(&p);
    pair_init(&p, RING, 0);
    write_header(&p, SHM_MSG_MAGIC, 5, 8);
    rcur = 0;
    assert_true(shm_ring_rx(&p.rx, dst, 8, &rcur, &len) & SHM_RING_CORRUPT);
    pair_fini(&p);
}

static void test_corrupt_counters(void **state)
{
    uint8_t buf[RING];
    uint64_t cur, len;
    pair_t p;
    (void)state;

    /* A head more than one ring ahead of the tail, or behind it, is refused by the
     * consumer without reading anything. */
    pair_init(&p, RING, 1000);
    atomic_store(&p.ctl->head, 1000 + RING + 1);
    cur = 0;
    assert_true(shm_ring_rx(&p.rx, buf, 10, &cur, &len) & SHM_RING_CORRUPT);
    atomic_store(&p.ctl->head, 999);
    assert_true(shm_ring_rx(&p.rx, buf, 10, &cur, &len) & SHM_RING_CORRUPT);
    pair_fini(&p);

    /* A tail ahead of the head is refused by the producer without writing anything. */
    pair_init(&p, RING, 1000);
    cur = 0;
    fill(buf, RING, 3);
    assert_int_equal(shm_ring_tx(&p.tx, buf, RING, &cur), SHM_RING_MOVED);
    atomic_store(&p.ctl->tail, 1000 + 2 * RING + 64);
    assert_true(shm_ring_tx(&p.tx, buf, RING, &cur) & SHM_RING_CORRUPT);
    pair_fini(&p);

    /* A mid-message head jump past the ring is refused while copying the payload. */
    pair_init(&p, RING, 0);
    write_header(&p, SHM_MSG_MAGIC, 0, 3 * RING);
    cur = 0;
    {
        uint8_t *big = malloc(3 * RING);
        assert_int_equal(shm_ring_rx(&p.rx, big, 3 * RING, &cur, &len), SHM_RING_MOVED);
        assert_int_equal(cur, SHM_MSG_HDR);
        atomic_store(&p.ctl->head, SHM_MSG_HDR + RING + 1);
        assert_true(shm_ring_rx(&p.rx, big, 3 * RING, &cur, &len) & SHM_RING_CORRUPT);
        assert_int_equal(cur, SHM_MSG_HDR);
        free(big);
    }
    pair_fini(&p);
}

/* ---- Two threads ---- */

#define STREAM_TOTAL ((uint64_t)64 << 20)

typedef struct {
    pair_t *p;
    uint32_t nmsgs;
    uint64_t *lens;
} stream_t;

static void *producer_main(void *arg)
{
    stream_t *s = arg;
    uint64_t maxlen = 0;
    uint8_t *buf;

    for (uint32_t m = 0; m < s->nmsgs; m++) maxlen = s->lens[m] > maxlen ? s->lens[m] : maxlen;
    buf = malloc(maxlen + 1);
    for (uint32_t m = 0; m < s->nmsgs; m++) {
        uint64_t cur = 0;
        unsigned f = 0;

        fill(buf, s->lens[m], m);
        while (!((f = shm_ring_tx(&s->p->tx, buf, s->lens[m], &cur)) & SHM_RING_DONE)) {
            if (f & SHM_RING_CORRUPT) break;
            if (!(f & SHM_RING_MOVED)) sched_yield();
        }
    }
    free(buf);
    return NULL;
}

static void test_two_threads_64mib(void **state)
{
    pair_t p;
    stream_t s;
    pthread_t th;
    uint64_t total = 0, maxlen = 0, rng = 88172645463325252ull;
    uint8_t *buf;
    (void)state;

    /* Lengths mix zero, tiny, odd and larger-than-ring messages (ring 64 KiB). */
    s.lens = malloc(100000 * sizeof(*s.lens));
    s.nmsgs = 0;
    while (total < STREAM_TOTAL) {
        uint64_t len;

        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        switch (rng % 4) {
        case 0: len = rng % 17; break;
        case 1: len = rng % 4099; break;
        case 2: len = rng % 70001; break;
        default: len = rng % 300007; break;
        }
        s.lens[s.nmsgs++] = len;
        total += len;
        maxlen = len > maxlen ? len : maxlen;
    }
    pair_init(&p, 65536, UINT64_MAX - 1000000);
    s.p = &p;
    buf = malloc(maxlen + 1);
    assert_int_equal(pthread_create(&th, NULL, producer_main, &s), 0);
    for (uint32_t m = 0; m < s.nmsgs; m++) {
        uint64_t cur = 0, len = 0;
        unsigned f = 0;

        /* buf still holds earlier messages, whose bytes may equal this one's. */
        poison(buf, s.lens[m], m);
        while (!((f = shm_ring_rx(&p.rx, buf, s.lens[m], &cur, &len)) & SHM_RING_DONE)) {
            assert_false(f & SHM_RING_CORRUPT);
            if (!(f & SHM_RING_MOVED)) sched_yield();
        }
        assert_false(f & (SHM_RING_CORRUPT | SHM_RING_MISMATCH));
        check(buf, s.lens[m], m);
    }
    pthread_join(th, NULL);
    assert_false(shm_ring_rx_ready(&p.rx));
    free(buf);
    free(s.lens);
    pair_fini(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrap_every_offset),
        cmocka_unit_test(test_larger_than_ring),
        cmocka_unit_test(test_full_ring_waits),
        cmocka_unit_test(test_zero_length),
        cmocka_unit_test(test_length_mismatch),
        cmocka_unit_test(test_corrupt_header),
        cmocka_unit_test(test_corrupt_counters),
        cmocka_unit_test(test_two_threads_64mib),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
