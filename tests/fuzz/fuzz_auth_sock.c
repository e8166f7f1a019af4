/*
 * The real acceptor (lib/util/auth.c) on a listening socket on 127.0.0.1, driven the way a
 * stranger drives it: per input, a client connects, reads the challenge, writes the input
 * as its response and then either half-closes (FIN) or resets (RST). Slower than fuzz_auth
 * (a connection per input), so `make fuzz` gives it a third of the time; it covers what the
 * pure parser cannot: the reads of exactly the response's bytes, refusals, the proof.
 *
 * Input: one control byte (bit 0: sign the response with the secret, as a real peer does;
 * bit 1: end with FIN rather than RST), then the response. The outcome is predicted from the
 * protocol of auth.h and must be exactly what the acceptor does: an unsigned response is
 * always refused, a signed and complete one is accepted with its hello when the hello fits
 * the caller's buffer, and what the client sent after its response is still in the socket.
 */
#include "fuzz_common.h"

#include "util/auth.h"
#include "util/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_MAX 256 /* the caller's buffer: smaller than CHORUS_AUTH_HELLO_MAX on purpose */

static const uint8_t secret[CHORUS_SECRET_BYTES] = "fuzz-secret-0123";
static chorus_acceptor_t *acc;
static struct sockaddr_in laddr;

static uint32_t get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The client's MAC, written from the protocol of auth.h. */
static void sign(uint8_t *resp, const uint8_t *nonce_s, size_t hello_bytes)
{
    uint8_t buf[8 + 32 + 4 + CHORUS_AUTH_HELLO_MAX];
    unsigned len = 0;

    memcpy(buf, "chorus-c", 8);
    memcpy(buf + 8, nonce_s, 16);
    memcpy(buf + 24, resp, 16);
    memcpy(buf + 40, resp + 48, 4);
    memcpy(buf + 44, resp + CHORUS_AUTH_RESPONSE_HEAD, hello_bytes);
    FUZZ_CHECK(HMAC(EVP_sha256(), secret, sizeof(secret), buf, 44 + hello_bytes, resp + 16,
                    &len) != NULL && len == 32);
}

/* One short turn of the acceptor. Returns the accepted fd or -1; the deadline is a few
 * tens of microseconds so that a turn with nothing to do costs at most one poll tick. */
static int pump(uint8_t *hello, size_t *hello_len)
{
    int fd = -1;
    chorus_status_t st = chorus__acceptor_accept(acc, hello, HELLO_MAX, hello_len,
                                                 chorus__now_ns() + 30000, NULL, &fd);
    if (st == CHORUS_SUCCESS) return fd;
    FUZZ_CHECK(st == CHORUS_ERR_TIMEOUT);
    return -1;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    uint8_t resp[CHORUS_AUTH_RESPONSE_MAX + 64], challenge[24];
    uint8_t *hello = malloc(HELLO_MAX); /* exactly the size given, so overflows are caught */
    size_t len, got = 0, hello_len = 0;
    unsigned refused0 = chorus__acceptor_refused(acc);
    uint64_t give_up = chorus__now_ns() + 2000000000ull;
    int c, fd = -1, sign_it, fin, complete, expect_accept, closed = 0;
    uint32_t claimed;

    FUZZ_CHECK(hello != NULL);
    if (size < 1) {
        free(hello);
        return 0;
    }
    sign_it = data[0] & 1;
    fin = data[0] & 2;
    len = size - 1 < sizeof(resp) ? size - 1 : sizeof(resp);
    memcpy(resp, data + 1, len);
    claimed = len >= CHORUS_AUTH_RESPONSE_HEAD ? get32(resp + 48) : 0;
    complete = len >= CHORUS_AUTH_RESPONSE_HEAD && claimed <= CHORUS_AUTH_HELLO_MAX &&
               len >= CHORUS_AUTH_RESPONSE_HEAD + claimed;
    expect_accept = sign_it && complete && claimed <= HELLO_MAX;

    c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(c >= 0);
    FUZZ_CHECK(connect(c, (struct sockaddr *)&laddr, sizeof(laddr)) == 0);
    if (!fin) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* close() resets: no TIME_WAIT */
        setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    while (got < sizeof(challenge)) {
        ssize_t n;
        FUZZ_CHECK(pump(hello, &hello_len) < 0 && chorus__now_ns() < give_up);
        while ((n = recv(c, challenge + got, sizeof(challenge) - got, MSG_DONTWAIT)) > 0) {
            got += (size_t)n;
        }
    }
    FUZZ_CHECK(memcmp(challenge, "CHRS", 4) == 0 && get32(challenge + 4) == 1);
    if (sign_it && len >= CHORUS_AUTH_RESPONSE_HEAD) {
        size_t hello_bytes = len - CHORUS_AUTH_RESPONSE_HEAD;
        if (hello_bytes > claimed) hello_bytes = claimed;
        if (hello_bytes > CHORUS_AUTH_HELLO_MAX) hello_bytes = CHORUS_AUTH_HELLO_MAX;
        sign(resp, challenge + 8, hello_bytes);
    }
    FUZZ_CHECK(send(c, resp, len, MSG_NOSIGNAL) == (ssize_t)len);
    if (fin) {
        shutdown(c, SHUT_WR);
    } else if (!complete && claimed <= CHORUS_AUTH_HELLO_MAX) {
        /* The acceptor would wait for the rest until its 5 s deadline; a reset ends it.
         * The bytes already queued are still read before the reset is seen. */
        close(c);
        closed = 1;
    }
    /* Exactly one outcome, soon: accepted, or one more refusal. */
    while (fd < 0 && chorus__acceptor_refused(acc) == refused0) {
        FUZZ_CHECK(chorus__now_ns() < give_up);
        fd = pump(hello, &hello_len);
    }
    FUZZ_CHECK((fd >= 0) == expect_accept);
    FUZZ_CHECK(chorus__acceptor_refused(acc) == refused0 + (fd < 0));
    if (fd >= 0) {
        size_t rest = len - CHORUS_AUTH_RESPONSE_HEAD - claimed;
        uint8_t after[CHORUS_AUTH_RESPONSE_MAX + 64];
        size_t have = 0;
        ssize_t n;

        FUZZ_CHECK(hello_len == claimed);
        FUZZ_CHECK(memcmp(hello, resp + CHORUS_AUTH_RESPONSE_HEAD, claimed) == 0);
        /* The acceptor read its response and not one byte more. */
        while (have < rest && chorus__now_ns() < give_up) {
            n = recv(fd, after + have, sizeof(after) - have, MSG_DONTWAIT);
            if (n > 0) have += (size_t)n;
            if (n == 0) break;
        }
        FUZZ_CHECK(have == rest && memcmp(after, resp + len - rest, rest) == 0);
    }
    if (!closed) close(c);
    if (fd >= 0) close(fd);
    free(hello);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    socklen_t alen = sizeof(laddr);
    int lfd;

    (void)argc;
    (void)argv;
    unsetenv("CHORUS_DEBUG");
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(lfd >= 0);
    memset(&laddr, 0, sizeof(laddr));
    laddr.sin_family = AF_INET;
    laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(bind(lfd, (struct sockaddr *)&laddr, sizeof(laddr)) == 0);
    FUZZ_CHECK(listen(lfd, 16) == 0);
    FUZZ_CHECK(getsockname(lfd, (struct sockaddr *)&laddr, &alen) == 0);
    FUZZ_CHECK(chorus__acceptor_create(lfd, secret, "fuzz", &acc) == CHORUS_SUCCESS);
    return 0;
}
