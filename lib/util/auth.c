/*
 * Connection authentication (protocol in auth.h). Wire layout, every integer big-endian:
 *   challenge (server -> client, 24 bytes): "CHRS", u32 version, nonce_s[16]
 *   response  (client -> server, 52 + hello_len bytes): nonce_c[16], mac_c[32],
 *             u32 hello_len, hello[hello_len]
 *   proof     (server -> client, 32 bytes): mac_s
 * The server reads exactly these bytes and no more, so whatever the client sends after
 * its response stays in the socket for the caller.
 */
#include "util/auth.h"

#include "util/clock.h"
#include "util/log.h"
#include "util/sock.h"
#include "util/status.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AUTH_MAGIC "CHRS"
#define AUTH_VERSION 1u
#define AUTH_NONCE_BYTES 16
#define AUTH_MAC_BYTES 32
#define AUTH_CHALLENGE_BYTES (4 + 4 + AUTH_NONCE_BYTES)
#define AUTH_RESPONSE_HEAD (AUTH_NONCE_BYTES + AUTH_MAC_BYTES + 4)
_Static_assert(AUTH_RESPONSE_HEAD == CHORUS_AUTH_RESPONSE_HEAD, "auth.h and auth.c disagree");

/* A stranger gets this long to complete its handshake, so that one that connects and
 * says nothing is dropped while real peers go on. */
#define AUTH_HANDSHAKE_S 5.0
/* Handshakes served at once; more connections wait in the kernel's backlog. */
#define AUTH_MAX_PENDING 64
/* How often a waiting acceptor looks at the abort flag. */
#define AUTH_POLL_SLICE_MS 100

/* The abort flag is set by another thread (chorus_comm_abort). It publishes no other data,
 * so a relaxed load is enough: a set flag is seen within a poll slice or two. */
static int auth_aborted(const atomic_int *abort_flag)
{
    return abort_flag != NULL && atomic_load_explicit(abort_flag, memory_order_relaxed) != 0;
}

static void auth_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t auth_get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

chorus_status_t chorus__random_bytes(void *buf, size_t len)
{
    if (len > (size_t)INT32_MAX || RAND_bytes(buf, (int)len) != 1) {
        return chorus__error(CHORUS_ERR_SYSTEM, "auth: RAND_bytes failed (no entropy?)");
    }
    return CHORUS_SUCCESS;
}

/* HMAC-SHA256 over the concatenation of up to four pieces. The one-shot HMAC() is used
 * because the HMAC_CTX calls are deprecated in OpenSSL 3, and the input is small. */
static chorus_status_t auth_mac(const uint8_t secret[CHORUS_SECRET_BYTES], const void *p0,
                                size_t l0, const void *p1, size_t l1, const void *p2, size_t l2,
                                const void *p3, size_t l3, uint8_t mac[AUTH_MAC_BYTES])
{
    uint8_t buf[8 + 2 * AUTH_NONCE_BYTES + 4 + CHORUS_AUTH_HELLO_MAX];
    unsigned mac_len = 0;
    size_t len = l0 + l1 + l2 + l3;

    if (len > sizeof(buf)) return chorus__error(CHORUS_ERR_INTERNAL, "auth: MAC input too long");
    memcpy(buf, p0, l0);
    memcpy(buf + l0, p1, l1);
    memcpy(buf + l0 + l1, p2, l2);
    if (l3 > 0) memcpy(buf + l0 + l1 + l2, p3, l3);
    if (HMAC(EVP_sha256(), secret, CHORUS_SECRET_BYTES, buf, len, mac, &mac_len) == NULL ||
        mac_len != AUTH_MAC_BYTES) {
        OPENSSL_cleanse(buf, len);
        return chorus__error(CHORUS_ERR_INTERNAL, "auth: HMAC-SHA256 failed");
    }
    OPENSSL_cleanse(buf, len);
    return CHORUS_SUCCESS;
}

/* The client's MAC: "chorus-c" | nonce_s | nonce_c | hello_len | hello. */
static chorus_status_t auth_client_mac(const uint8_t secret[CHORUS_SECRET_BYTES],
                                       const uint8_t *nonce_s, const uint8_t *nonce_c,
                                       const uint8_t len_be[4], const void *hello, size_t hello_len,
                                       uint8_t mac[AUTH_MAC_BYTES])
{
    uint8_t nonces[2 * AUTH_NONCE_BYTES];

    memcpy(nonces, nonce_s, AUTH_NONCE_BYTES);
    memcpy(nonces + AUTH_NONCE_BYTES, nonce_c, AUTH_NONCE_BYTES);
    return auth_mac(secret, "chorus-c", 8, nonces, sizeof(nonces), len_be, 4, hello, hello_len,
                    mac);
}

/* The server's MAC: "chorus-s" | nonce_c | nonce_s. */
static chorus_status_t auth_server_mac(const uint8_t secret[CHORUS_SECRET_BYTES],
                                       const uint8_t *nonce_c, const uint8_t *nonce_s,
                                       uint8_t mac[AUTH_MAC_BYTES])
{
    return auth_mac(secret, "chorus-s", 8, nonce_c, AUTH_NONCE_BYTES, nonce_s, AUTH_NONCE_BYTES,
                    NULL, 0, mac);
}

chorus_status_t chorus__auth_client(int fd, const uint8_t secret[CHORUS_SECRET_BYTES],
                                    const void *hello, size_t hello_len, uint64_t deadline_ns)
{
    uint8_t challenge[AUTH_CHALLENGE_BYTES];
    uint8_t msg[AUTH_RESPONSE_HEAD + CHORUS_AUTH_HELLO_MAX];
    uint8_t proof[AUTH_MAC_BYTES], expect[AUTH_MAC_BYTES];
    uint8_t *nonce_c = msg, *mac_c = msg + AUTH_NONCE_BYTES;
    uint8_t *len_be = msg + AUTH_NONCE_BYTES + AUTH_MAC_BYTES;
    chorus_status_t status;

    if (hello_len > CHORUS_AUTH_HELLO_MAX || (hello == NULL && hello_len > 0)) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "auth: hello of %zu bytes (max %d)",
                             hello_len, CHORUS_AUTH_HELLO_MAX);
    }
    status = chorus__sock_recv_all(fd, challenge, sizeof(challenge), deadline_ns);
    if (status != CHORUS_SUCCESS) {
        return chorus__error_context(status, "auth: waiting for the server's challenge");
    }
    if (memcmp(challenge, AUTH_MAGIC, 4) != 0 || auth_get32(challenge + 4) != AUTH_VERSION) {
        return chorus__error(CHORUS_ERR_REMOTE,
                             "auth: the server is not a Chorus endpoint of protocol version %u",
                             AUTH_VERSION);
    }
    status = chorus__random_bytes(nonce_c, AUTH_NONCE_BYTES);
    if (status != CHORUS_SUCCESS) return status;
    auth_put32(len_be, (uint32_t)hello_len);
    if (hello_len > 0) memcpy(msg + AUTH_RESPONSE_HEAD, hello, hello_len);
    status = auth_client_mac(secret, challenge + 8, nonce_c, len_be, hello, hello_len, mac_c);
    if (status != CHORUS_SUCCESS) return status;
    status = chorus__sock_send_all(fd, msg, AUTH_RESPONSE_HEAD + hello_len, deadline_ns);
    if (status != CHORUS_SUCCESS) return chorus__error_context(status, "auth: sending response");

    status = chorus__sock_recv_all(fd, proof, sizeof(proof), deadline_ns);
    if (status == CHORUS_ERR_REMOTE) {
        /* The server closes on a wrong MAC without a word, to tell a stranger nothing. */
        return chorus__error(CHORUS_ERR_AUTH,
                             "auth: the server closed the connection instead of proving the "
                             "secret (do both ends use the same id / CHORUS_SECRET?)");
    }
    if (status != CHORUS_SUCCESS) {
        return chorus__error_context(status, "auth: waiting for the server's proof");
    }
    status = auth_server_mac(secret, nonce_c, challenge + 8, expect);
    if (status != CHORUS_SUCCESS) return status;
    if (CRYPTO_memcmp(proof, expect, AUTH_MAC_BYTES) != 0) {
        return chorus__error(CHORUS_ERR_AUTH, "auth: the server failed to prove the secret");
    }
    return CHORUS_SUCCESS;
}

/* ---- Acceptor ---------------------------------------------------------------------- */

typedef struct {
    int fd;
    uint64_t deadline_ns;
    struct sockaddr_storage addr;
    uint8_t nonce_s[AUTH_NONCE_BYTES];
    size_t got;  /* bytes of msg received so far */
    size_t want; /* bytes of msg expected in all (head, then head+hello) */
    uint8_t msg[AUTH_RESPONSE_HEAD + CHORUS_AUTH_HELLO_MAX];
} auth_pending_t;

struct chorus_acceptor {
    int listen_fd;
    uint8_t secret[CHORUS_SECRET_BYTES];
    char what[64];
    unsigned refused;
    int npending;
    auth_pending_t *pending[AUTH_MAX_PENDING];
    /* One handshake finished but not yet handed out (accept returns one at a time). */
    auth_pending_t *ready;
};

chorus_status_t chorus__acceptor_create(int listen_fd, const uint8_t secret[CHORUS_SECRET_BYTES],
                                        const char *what, chorus_acceptor_t **acc_p)
{
    chorus_acceptor_t *acc = calloc(1, sizeof(*acc));

    if (acc == NULL) return chorus__error(CHORUS_ERR_NO_MEMORY, "auth: acceptor allocation");
    acc->listen_fd = listen_fd;
    memcpy(acc->secret, secret, CHORUS_SECRET_BYTES);
    snprintf(acc->what, sizeof(acc->what), "%s", what != NULL ? what : "acceptor");
    *acc_p = acc;
    return CHORUS_SUCCESS;
}

unsigned chorus__acceptor_refused(const chorus_acceptor_t *acc)
{
    return acc->refused;
}

static void auth_pending_free(auth_pending_t *p)
{
    if (p->fd >= 0) close(p->fd);
    OPENSSL_cleanse(p, sizeof(*p));
    free(p);
}

/* Drops pending handshake i with a WARN that names the peer (never the secret). */
static void auth_refuse(chorus_acceptor_t *acc, int i, const char *why)
{
    char text[80];

    CHORUS_WARN("auth", "%s: refused connection from %s: %s", acc->what,
                chorus__sock_addr_str(&acc->pending[i]->addr, text, sizeof(text)), why);
    acc->refused++;
    auth_pending_free(acc->pending[i]);
    acc->pending[i] = acc->pending[--acc->npending];
}

/* Takes every connection waiting in the backlog and sends each its challenge. */
static chorus_status_t auth_accept_new(chorus_acceptor_t *acc)
{
    for (;;) {
        struct sockaddr_storage addr;
        socklen_t alen = sizeof(addr);
        uint8_t challenge[AUTH_CHALLENGE_BYTES];
        auth_pending_t *p;
        int fd, one = 1;

        if (acc->npending == AUTH_MAX_PENDING) return CHORUS_SUCCESS;
        memset(&addr, 0, sizeof(addr));
        fd = accept4(acc->listen_fd, (struct sockaddr *)&addr, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return CHORUS_SUCCESS;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
            return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "auth: %s: accept", acc->what);
        }
        /* Handshakes and the caller's small messages must not wait for Nagle. */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        p = calloc(1, sizeof(*p));
        if (p == NULL) {
            close(fd);
            return chorus__error(CHORUS_ERR_NO_MEMORY, "auth: %s: handshake state", acc->what);
        }
        p->fd = fd;
        p->addr = addr;
        p->want = AUTH_RESPONSE_HEAD;
        p->deadline_ns = chorus__deadline_after(AUTH_HANDSHAKE_S);
        acc->pending[acc->npending++] = p;
        memcpy(challenge, AUTH_MAGIC, 4);
        auth_put32(challenge + 4, AUTH_VERSION);
        if (chorus__random_bytes(p->nonce_s, AUTH_NONCE_BYTES) != CHORUS_SUCCESS) {
            auth_refuse(acc, acc->npending - 1, "no random bytes for the challenge");
            continue;
        }
        memcpy(challenge + 8, p->nonce_s, AUTH_NONCE_BYTES);
        /* A fresh socket's send buffer always takes 24 bytes at once. */
        if (send(fd, challenge, sizeof(challenge), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            (ssize_t)sizeof(challenge)) {
            auth_refuse(acc, acc->npending - 1, "closed before the challenge");
        }
    }
}

int chorus__auth_check_response(const uint8_t secret[CHORUS_SECRET_BYTES], const uint8_t *nonce_s,
                                const uint8_t *msg, size_t got, size_t *want_p,
                                size_t *hello_len_p, const char **why_p)
{
    uint8_t expect[AUTH_MAC_BYTES];
    uint32_t hello_len;

    if (got < AUTH_RESPONSE_HEAD) {
        *want_p = AUTH_RESPONSE_HEAD;
        return 0;
    }
    /* The length is checked before it sizes anything: a stranger's u32 must not make the
     * reader wait for, or reach past, more than the largest hello. */
    hello_len = auth_get32(msg + AUTH_NONCE_BYTES + AUTH_MAC_BYTES);
    if (hello_len > CHORUS_AUTH_HELLO_MAX) {
        *why_p = "oversized hello (not a Chorus peer)";
        return -1;
    }
    if (got < AUTH_RESPONSE_HEAD + hello_len) {
        *want_p = AUTH_RESPONSE_HEAD + hello_len;
        return 0;
    }
    if (got > AUTH_RESPONSE_HEAD + hello_len) {
        *why_p = "more bytes than its response holds";
        return -1;
    }
    if (auth_client_mac(secret, nonce_s, msg, msg + AUTH_NONCE_BYTES + AUTH_MAC_BYTES,
                        msg + AUTH_RESPONSE_HEAD, hello_len, expect) != CHORUS_SUCCESS ||
        CRYPTO_memcmp(expect, msg + AUTH_NONCE_BYTES, AUTH_MAC_BYTES) != 0) {
        OPENSSL_cleanse(expect, sizeof(expect));
        *why_p = "wrong MAC (different secret, or not a Chorus peer)";
        return -1;
    }
    OPENSSL_cleanse(expect, sizeof(expect));
    *hello_len_p = hello_len;
    return 1;
}

/* Reads what handshake i has sent. Returns 1 when it completed (moved to acc->ready),
 * 0 when it needs more bytes, -1 when it was refused (and removed). */
static int auth_progress(chorus_acceptor_t *acc, int i)
{
    auth_pending_t *p = acc->pending[i];
    uint8_t proof[AUTH_MAC_BYTES];
    const char *why = "malformed response";
    size_t hello_len = 0;
    int verdict;

    /* The parser says how many bytes the response has in all; exactly those are read, so
     * that what the client sends after its response stays in the socket for the caller. */
    while ((verdict = chorus__auth_check_response(acc->secret, p->nonce_s, p->msg, p->got,
                                                  &p->want, &hello_len, &why)) == 0) {
        ssize_t n = recv(p->fd, p->msg + p->got, p->want - p->got, MSG_DONTWAIT);
        if (n > 0) {
            p->got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        auth_refuse(acc, i, n == 0 ? "closed during the handshake" : strerror(errno));
        return -1;
    }
    if (verdict < 0) {
        auth_refuse(acc, i, why);
        return -1;
    }
    if (auth_server_mac(acc->secret, p->msg, p->nonce_s, proof) != CHORUS_SUCCESS ||
        send(p->fd, proof, sizeof(proof), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(proof)) {
        auth_refuse(acc, i, "closed before the server's proof");
        return -1;
    }
    acc->ready = p;
    acc->pending[i] = acc->pending[--acc->npending];
    return 1;
}

/* Hands out acc->ready if it fits the caller's buffer; otherwise drops it, counts it as
 * refused and returns CHORUS_ERR_REMOTE so that the accept loop goes on. */
static chorus_status_t auth_take_ready(chorus_acceptor_t *acc, void *hello, size_t hello_max,
                                       size_t *hello_len_p, int *fd_p)
{
    auth_pending_t *p = acc->ready;
    size_t len = auth_get32(p->msg + AUTH_NONCE_BYTES + AUTH_MAC_BYTES);
    char text[80];

    acc->ready = NULL;
    if (len > hello_max) {
        /* An authenticated peer with an unexpected hello is a bug or a version skew. */
        CHORUS_WARN("auth", "%s: dropped %s: hello of %zu bytes, at most %zu expected", acc->what,
                    chorus__sock_addr_str(&p->addr, text, sizeof(text)), len, hello_max);
        acc->refused++;
        auth_pending_free(p);
        return CHORUS_ERR_REMOTE;
    }
    if (len > 0) memcpy(hello, p->msg + AUTH_RESPONSE_HEAD, len);
    *hello_len_p = len;
    *fd_p = p->fd;
    p->fd = -1;
    auth_pending_free(p);
    return CHORUS_SUCCESS;
}

/* Refuses handshakes whose time is up; returns the ms until the next such deadline. */
static int auth_expire(chorus_acceptor_t *acc, int max_ms)
{
    int i, ms = max_ms;

    for (i = 0; i < acc->npending;) {
        if (chorus__deadline_passed(acc->pending[i]->deadline_ns)) {
            auth_refuse(acc, i, "handshake not completed in time");
            continue;
        }
        int left = chorus__deadline_ms_left(acc->pending[i]->deadline_ns, max_ms);
        if (left < ms) ms = left;
        i++;
    }
    return ms;
}

chorus_status_t chorus__acceptor_accept(chorus_acceptor_t *acc, void *hello, size_t hello_max,
                                        size_t *hello_len_p, uint64_t deadline_ns,
                                        const atomic_int *abort_flag, int *fd_p)
{
    struct pollfd pfds[AUTH_MAX_PENDING + 1];
    chorus_status_t status;
    int i, n, rc, ms;

    for (;;) {
        if (acc->ready != NULL) {
            status = auth_take_ready(acc, hello, hello_max, hello_len_p, fd_p);
            if (status == CHORUS_SUCCESS) return status;
            continue;
        }
        if (auth_aborted(abort_flag)) {
            return chorus__error(CHORUS_ERR_ABORTED, "auth: %s: accept aborted", acc->what);
        }
        if (chorus__deadline_passed(deadline_ns)) {
            return chorus__error(CHORUS_ERR_TIMEOUT,
                                 "auth: %s: no authenticated connection before the deadline "
                                 "(%u refused)",
                                 acc->what, acc->refused);
        }
        ms = auth_expire(acc, chorus__deadline_ms_left(deadline_ns, AUTH_POLL_SLICE_MS));
        n = 0;
        if (acc->npending < AUTH_MAX_PENDING) {
            pfds[n++] = (struct pollfd){.fd = acc->listen_fd, .events = POLLIN};
        }
        for (i = 0; i < acc->npending; i++) {
            pfds[n++] = (struct pollfd){.fd = acc->pending[i]->fd, .events = POLLIN};
        }
        rc = poll(pfds, (nfds_t)n, ms);
        if (rc < 0 && errno != EINTR) {
            return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "auth: %s: poll", acc->what);
        }
        if (rc <= 0) continue;
        /* A recv that finds nothing is cheap, so every pending handshake is tried
         * rather than mapping poll's answers back through the shifting table. */
        for (i = 0; i < acc->npending && acc->ready == NULL;) {
            if (auth_progress(acc, i) == 0) i++;
        }
        if (acc->npending < AUTH_MAX_PENDING && acc->ready == NULL) {
            status = auth_accept_new(acc);
            if (status != CHORUS_SUCCESS) return status;
        }
    }
}

void chorus__acceptor_destroy(chorus_acceptor_t *acc)
{
    int i;

    if (acc == NULL) return;
    for (i = 0; i < acc->npending; i++)
        auth_pending_free(acc->pending[i]);
    if (acc->ready != NULL) auth_pending_free(acc->ready);
    OPENSSL_cleanse(acc, sizeof(*acc));
    free(acc);
}
