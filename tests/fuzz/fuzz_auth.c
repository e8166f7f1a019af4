/*
 * The acceptor's parser of a stranger's handshake response (chorus__auth_check_response,
 * lib/util/auth.c), fed the way the acceptor feeds it: bytes arrive in pieces, and the next
 * read never asks for more than the parser's *want - got. Input: one control byte, then the
 * response bytes. Control bit 0 set: the harness signs the response with the secret, as a
 * real peer would (so the accept path is reached with any hello_len and hello); clear: the
 * bytes go in as they are, as a stranger's would. Bits 1-7: the size of each read (1-127).
 *
 * Invariants: the parser never reads past got (ASan: msg is a heap block of exactly the
 * bytes received), *want stays in (got, CHORUS_AUTH_RESPONSE_MAX]; an unsigned response is
 * never accepted; a signed one is accepted exactly when its hello_len is at most
 * CHORUS_AUTH_HELLO_MAX and all of its hello arrived, with that hello.
 */
#include "fuzz_common.h"

#include "util/auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>

static const uint8_t secret[CHORUS_SECRET_BYTES] = "fuzz-secret-0123";
static const uint8_t nonce_s[16] = "nonce-of-server!";

/* The client's MAC written from the protocol of auth.h, independently of auth.c. */
static void sign(uint8_t *resp, size_t hello_bytes)
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

static uint32_t get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    uint8_t resp[CHORUS_AUTH_RESPONSE_MAX + 64];
    size_t len, got = 0, want = 0, hello_len = 0, step;
    const char *why = NULL;
    int signed_, verdict = 0;
    uint32_t claimed;

    if (size < 1) return 0;
    signed_ = data[0] & 1;
    step = (size_t)(data[0] >> 1) + 1;
    len = size - 1 < sizeof(resp) ? size - 1 : sizeof(resp);
    memcpy(resp, data + 1, len);
    claimed = len >= CHORUS_AUTH_RESPONSE_HEAD ? get32(resp + 48) : 0;
    if (signed_ && len >= CHORUS_AUTH_RESPONSE_HEAD) {
        size_t hello_bytes = len - CHORUS_AUTH_RESPONSE_HEAD;
        if (hello_bytes > claimed) hello_bytes = claimed;
        if (hello_bytes > CHORUS_AUTH_HELLO_MAX) hello_bytes = CHORUS_AUTH_HELLO_MAX;
        sign(resp, hello_bytes);
    }
    for (;;) {
        /* A fresh block of exactly got bytes each time, so any read past it is caught. */
        uint8_t *msg = malloc(got > 0 ? got : 1);
        FUZZ_CHECK(msg != NULL);
        memcpy(msg, resp, got);
        verdict = chorus__auth_check_response(secret, nonce_s, msg, got, &want, &hello_len, &why);
        if (verdict == 1) {
            FUZZ_CHECK(memcmp(msg + CHORUS_AUTH_RESPONSE_HEAD,
                              resp + CHORUS_AUTH_RESPONSE_HEAD, hello_len) == 0);
        }
        free(msg);
        if (verdict != 0) break;
        FUZZ_CHECK(want > got && want <= CHORUS_AUTH_RESPONSE_MAX);
        if (got == len) break; /* the stranger stops talking: the deadline would drop it */
        size_t n = step < want - got ? step : want - got;
        got += n < len - got ? n : len - got;
    }
    if (verdict < 0) FUZZ_CHECK(why != NULL && why[0] != '\0');
    if (!signed_) FUZZ_CHECK(verdict != 1);
    if (signed_) {
        int complete = len >= CHORUS_AUTH_RESPONSE_HEAD && claimed <= CHORUS_AUTH_HELLO_MAX &&
                       len >= CHORUS_AUTH_RESPONSE_HEAD + claimed;
        FUZZ_CHECK((verdict == 1) == complete);
        if (verdict == 1) FUZZ_CHECK(hello_len == claimed);
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
