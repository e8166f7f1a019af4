/*
 * What a tcp transport peer sends (lib/transport/tcp): the first byte of the input picks
 *   0  chorus__tcp_header_decode: a 16-byte frame header, for a receive of `posted` bytes
 *      on rank `rank` of `nranks` (all three from the input);
 *   1  chorus__tcp_hello_check: the hello of a connecting peer, for a communicator id, a
 *      rank and a mask of expected peers from the input (the mask is a heap block of
 *      exactly rank bytes, so a peer index out of range is caught by ASan);
 *   2  the receive path itself: up to 3 receives of sizes from the input are posted on a
 *      transport whose peer is one end of a socketpair; the rest of the input is written
 *      to the other end, which is then closed (the peer's end of stream), and
 *      tcp_progress runs until every receive completed.
 *
 * Invariants, each against an independent reading of the wire format of tcp.h: a header
 * is accepted (TCP_HDR_MSG) exactly when its magic is TCP_MSG_MAGIC, its reserved word 0
 * and its length the posted one; a goodbye's blamed rank is -1 or a rank of ours but not
 * us; a hello is accepted exactly when it is well formed, for this communicator, from a
 * lower rank we expect. On the stream, every receive completes (no hang), the ones the
 * stream satisfies succeed with exactly its bytes, all later ones fail, and nothing is
 * written outside the posted buffers (heap blocks of exactly the posted size). When all
 * succeeded, the idle connection's check (tcp_check_peers) sees the rest: its end alone
 * is a dead peer, a lone goodbye is a clean leave (a failure when it blames a rank), and
 * anything else is data that waits for a receive.
 */
#include "fuzz_common.h"

#include "transport/tcp/tcp.h"

#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_RECVS 3

static uint64_t get_be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static void fuzz_header(const unsigned char *data, size_t size)
{
    uint8_t hdr[TCP_HDR_BYTES];
    tcp_hdr_t h;

    if (size < TCP_HDR_BYTES + 8 + 4 + 4) return;
    memcpy(hdr, data, sizeof hdr);
    /* posted is at most TCP_MAX_MSG in the transport (post_check); a few bits above it
     * make sure larger lengths are tried too. */
    size_t posted = (size_t)(get_be(data + 16, 8) & (((uint64_t)1 << 41) - 1));
    int nranks = (int)(get_be(data + 24, 4) % ((uint32_t)1 << 20)) + 1;
    int rank = (int)(get_be(data + 28, 4) % (uint32_t)nranks);
    uint64_t len = get_be(hdr, 8);
    uint32_t magic = (uint32_t)get_be(hdr + 8, 4), word = (uint32_t)get_be(hdr + 12, 4);

    tcp_hdr_verdict_t v = chorus__tcp_header_decode(hdr, posted, rank, nranks, &h);
    FUZZ_CHECK(h.len == len && h.magic == magic && h.word == word);
    int well_formed = magic == TCP_MSG_MAGIC && word == 0;
    /* posted may exceed TCP_MAX_MSG here (never in the transport): such a length is too
     * long even when it is the posted one (regress-posted-above-max). */
    FUZZ_CHECK((v == TCP_HDR_MSG) == (well_formed && len == posted && len <= TCP_MAX_MSG));
    if (v == TCP_HDR_MSG) FUZZ_CHECK(h.len <= TCP_MAX_MSG);
    FUZZ_CHECK((v == TCP_HDR_BYE) == (magic == TCP_BYE_MAGIC && len == 0));
    if (v == TCP_HDR_BYE) {
        FUZZ_CHECK(h.blame == -1 || (h.blame >= 0 && h.blame < nranks && h.blame != rank));
        FUZZ_CHECK(h.blame == -1 || (uint32_t)h.blame + 1 == (word & TCP_BYE_BLAME_MASK));
        FUZZ_CHECK(h.mismatch == ((word >> 24) == TCP_BYE_MISMATCH));
        if (word >= 1 && word <= (uint32_t)nranks && word - 1 != (uint32_t)rank) {
            FUZZ_CHECK(h.blame == (int)word - 1);
        }
    }
    FUZZ_CHECK((v == TCP_HDR_TOO_LONG) == (well_formed && len > TCP_MAX_MSG));
    FUZZ_CHECK((v == TCP_HDR_MISMATCH) == (well_formed && len <= TCP_MAX_MSG && len != posted));
    FUZZ_CHECK((v == TCP_HDR_BAD_MAGIC) ==
               (!well_formed && !(magic == TCP_BYE_MAGIC && len == 0)));
}

static void fuzz_hello(const unsigned char *data, size_t size)
{
    const char *why = NULL;

    if (size < 9) return;
    uint64_t comm_id = get_be(data, 8);
    int rank = data[8];
    /* One mask bit per lower rank, then the hello (its exact length: a heap block). */
    size_t mask_bytes = ((size_t)rank + 7) / 8;
    if (size < 9 + mask_bytes) return;
    uint8_t *mask = malloc(rank > 0 ? (size_t)rank : 1);
    size_t len = size - 9 - mask_bytes;
    uint8_t *hello = malloc(len > 0 ? len : 1);
    FUZZ_CHECK(mask != NULL && hello != NULL);
    for (int p = 0; p < rank; p++)
        mask[p] = (uint8_t)(data[9 + p / 8] >> (p % 8) & 1);
    memcpy(hello, data + 9 + mask_bytes, len);

    int peer = chorus__tcp_hello_check(hello, len, comm_id, rank, mask, &why);
    int ok = len == TCP_HELLO_BYTES && get_be(hello, 4) == TCP_HELLO_MAGIC &&
             get_be(hello + 8, 8) == comm_id && get_be(hello + 4, 4) < (uint64_t)rank &&
             mask[get_be(hello + 4, 4)];
    FUZZ_CHECK((peer >= 0) == ok);
    if (ok) FUZZ_CHECK((uint64_t)peer == get_be(hello + 4, 4));
    if (!ok) FUZZ_CHECK(peer == -1 && why != NULL && why[0] != '\0');
    free(hello);
    free(mask);
}

/* The outcome the stream must give: how many receives succeed (the rest fail). */
static int expected_successes(const uint8_t *s, size_t n, const size_t *posted, int nrecv)
{
    size_t off = 0;

    for (int i = 0; i < nrecv; i++) {
        if (n - off < TCP_HDR_BYTES) return i;
        if (get_be(s + off, 8) != posted[i] || get_be(s + off + 8, 4) != TCP_MSG_MAGIC ||
            get_be(s + off + 12, 4) != 0) {
            return i;
        }
        off += TCP_HDR_BYTES;
        if (n - off < posted[i]) return i;
        off += posted[i];
    }
    return nrecv;
}

/* A transport of 2 ranks, as tcp_init and connect_all leave it, with peer 1 on fd. */
static chorus_tp_t *fake_tp(int fd)
{
    chorus_tp_t *tp = calloc(1, sizeof(*tp));

    FUZZ_CHECK(tp != NULL);
    tp->rank = 0;
    tp->nranks = 2;
    tp->listen_fd = -1;
    tp->blame = -1;
    tp->error = CHORUS_SUCCESS;
    tp->peers = calloc(2, sizeof(*tp->peers));
    tp->pfds = calloc(2, sizeof(*tp->pfds));
    tp->check_peer = calloc(2, sizeof(*tp->check_peer));
    FUZZ_CHECK(tp->peers != NULL && tp->pfds != NULL && tp->check_peer != NULL);
    tp->peers[0].fd = -1;
    tp->peers[1].fd = fd;
    return tp;
}

/* With no receive posted, what is left of the stream (rest, n bytes) then its end: a
 * peer that died (nothing left), a goodbye (alone, else it waits behind data), or one
 * that blames a failure. tcp_check_peers must tell them apart. */
static void idle_check(chorus_tp_t *tp, const uint8_t *rest, size_t n)
{
    int bye = n == TCP_HDR_BYTES && get_be(rest, 8) == 0 && get_be(rest + 8, 4) == TCP_BYE_MAGIC;
    int fails = n == 0 || (bye && get_be(rest + 12, 4) != 0);

    (void)tcp_check_peers(tp, 1);
    FUZZ_CHECK((tp->error != CHORUS_SUCCESS) == fails);
    FUZZ_CHECK(tp->peers[1].bye == bye);
}

static void fuzz_stream(const unsigned char *data, size_t size)
{
    chorus_tp_req_t req[MAX_RECVS];
    uint8_t *buf[MAX_RECVS] = {NULL};
    size_t posted[MAX_RECVS];
    int sv[2];

    if (size < 1) return;
    int nrecv = 1 + data[0] % MAX_RECVS;
    if (size < 1 + 2 * (size_t)nrecv) return;
    for (int i = 0; i < nrecv; i++)
        posted[i] = get_be(data + 1 + 2 * i, 2) % 4097;
    const uint8_t *stream = data + 1 + 2 * nrecv;
    size_t n = size - 1 - 2 * (size_t)nrecv;
    if (n > 65536) return; /* the socket buffer takes it whole: no writer thread needed */

    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    FUZZ_CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0);
    FUZZ_CHECK(write(sv[1], stream, n) == (ssize_t)n); /* fits: inputs are small */
    close(sv[1]);
    chorus_tp_t *tp = fake_tp(sv[0]);
    for (int i = 0; i < nrecv; i++) {
        if (posted[i] > 0) FUZZ_CHECK((buf[i] = malloc(posted[i])) != NULL);
        FUZZ_CHECK(tcp_irecv(tp, 1, buf[i], posted[i], &req[i]) == CHORUS_SUCCESS);
    }
    /* Everything is in the socket already, then its end: a few passes must finish. */
    for (int pass = 0; pass < 8 && !req[nrecv - 1].done; pass++)
        (void)tcp_progress(tp);

    int good = expected_successes(stream, n, posted, nrecv);
    size_t off = 0;
    for (int i = 0; i < nrecv; i++) {
        FUZZ_CHECK(req[i].done);
        FUZZ_CHECK((req[i].status == CHORUS_SUCCESS) == (i < good));
        if (i < good) {
            FUZZ_CHECK(posted[i] == 0 || memcmp(buf[i], stream + off + TCP_HDR_BYTES,
                                                posted[i]) == 0);
            off += TCP_HDR_BYTES + posted[i];
        }
    }
    FUZZ_CHECK((tp->error == CHORUS_SUCCESS) == (good == nrecv));
    if (good == nrecv) idle_check(tp, stream + off, n - off);
    if (tp->peers[1].fd >= 0) close(tp->peers[1].fd);
    for (int i = 0; i < nrecv; i++)
        free(buf[i]);
    free(tp->check_peer);
    free(tp->pfds);
    free(tp->peers);
    free(tp);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: fuzz_header(data + 1, size - 1); break;
    case 1: fuzz_hello(data + 1, size - 1); break;
    default: fuzz_stream(data + 1, size - 1); break;
    }
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv("CHORUS_DEBUG");
    return 0;
}
