/*
 * Unit tests of the authenticated handshake (lib/util/auth.c) over loopback: a good peer,
 * a wrong secret, garbage, a truncated response, an oversized hello, a silent stranger
 * that must not delay a real peer, many peers at once, fake servers, and a log that names
 * the stranger but never the secret.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/auth.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/sock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint8_t SECRET[CHORUS_SECRET_BYTES] = {0x5e, 0xc7, 0x21, 0x99, 0x01, 0x02, 0x03, 0x04,
                                                    0xa5, 0x5a, 0xde, 0xad, 0xbe, 0xef, 0x10, 0x42};
static const char SECRET_HEX[] = "5ec72199";
static char log_path[64];

typedef struct {
    int lfd;
    struct sockaddr_storage addr;
    chorus_acceptor_t *acc;
} server_t;

static void server_open(server_t *s)
{
    struct sockaddr_storage any;
    memset(&any, 0, sizeof(any));
    ((struct sockaddr_in *)&any)->sin_family = AF_INET;
    ((struct sockaddr_in *)&any)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(chorus__sock_listen(&any, 64, &s->lfd, &s->addr), CHORUS_SUCCESS);
    assert_int_equal(chorus__acceptor_create(s->lfd, SECRET, "test", &s->acc), CHORUS_SUCCESS);
}

static void server_close(server_t *s)
{
    chorus__acceptor_destroy(s->acc);
    close(s->lfd);
}

static int raw_connect(const server_t *s)
{
    int fd = -1;
    assert_int_equal(chorus__sock_connect(&s->addr, chorus__deadline_after(5), NULL, &fd),
                     CHORUS_SUCCESS);
    return fd;
}

/* A client thread: runs the handshake with `secret` and, on success, sends "ping". */
typedef struct {
    const server_t *srv;
    uint8_t secret[CHORUS_SECRET_BYTES];
    char hello[64];
    double delay_s;
    chorus_status_t status;
    pthread_t tid;
} client_t;

static void *client_main(void *arg)
{
    client_t *c = arg;
    int fd;

    if (c->delay_s > 0) usleep((useconds_t)(c->delay_s * 1e6));
    c->status = chorus__sock_connect(&c->srv->addr, chorus__deadline_after(5), NULL, &fd);
    if (c->status != CHORUS_SUCCESS) return NULL;
    c->status =
        chorus__auth_client(fd, c->secret, c->hello, strlen(c->hello), chorus__deadline_after(5));
    if (c->status == CHORUS_SUCCESS) {
        c->status = chorus__sock_send_all(fd, "ping", 4, chorus__deadline_after(5));
    }
    close(fd);
    return NULL;
}

static void client_start(client_t *c, const server_t *srv, const uint8_t *secret, const char *hello,
                         double delay_s)
{
    memset(c, 0, sizeof(*c));
    c->srv = srv;
    memcpy(c->secret, secret, CHORUS_SECRET_BYTES);
    snprintf(c->hello, sizeof(c->hello), "%s", hello);
    c->delay_s = delay_s;
    assert_int_equal(pthread_create(&c->tid, NULL, client_main, c), 0);
}

/* Accepts one connection and checks it is the good client with its hello and its ping. */
static void accept_good(server_t *s, const char *hello)
{
    char got[CHORUS_AUTH_HELLO_MAX], ping[4];
    size_t len = 0;
    int fd = -1;

    assert_int_equal(chorus__acceptor_accept(s->acc, got, sizeof(got), &len,
                                             chorus__deadline_after(5), NULL, &fd),
                     CHORUS_SUCCESS);
    assert_int_equal(len, strlen(hello));
    assert_memory_equal(got, hello, len);
    assert_int_equal(chorus__sock_recv_all(fd, ping, 4, chorus__deadline_after(5)), CHORUS_SUCCESS);
    assert_memory_equal(ping, "ping", 4);
    close(fd);
}

/* Waits until fd is closed by the server (recv returns 0 or an error). */
static void expect_closed(int fd)
{
    char buf[64];
    chorus_status_t st;
    do {
        st = chorus__sock_recv_all(fd, buf, 1, chorus__deadline_after(5));
    } while (st == CHORUS_SUCCESS);
    assert_int_equal(st, CHORUS_ERR_REMOTE);
}

static void test_good_peer(void **state)
{
    server_t s;
    client_t c;
    (void)state;

    server_open(&s);
    client_start(&c, &s, SECRET, "rank 3 ring", 0);
    accept_good(&s, "rank 3 ring");
    pthread_join(c.tid, NULL);
    assert_int_equal(c.status, CHORUS_SUCCESS);
    assert_int_equal(chorus__acceptor_refused(s.acc), 0);
    server_close(&s);
}

static void test_empty_hello(void **state)
{
    server_t s;
    client_t c;
    (void)state;

    server_open(&s);
    client_start(&c, &s, SECRET, "", 0);
    accept_good(&s, "");
    pthread_join(c.tid, NULL);
    assert_int_equal(c.status, CHORUS_SUCCESS);
    server_close(&s);
}

static void test_bad_secret(void **state)
{
    uint8_t wrong[CHORUS_SECRET_BYTES];
    server_t s;
    client_t bad, good;
    (void)state;

    memcpy(wrong, SECRET, sizeof(wrong));
    wrong[7] ^= 1;
    server_open(&s);
    client_start(&bad, &s, wrong, "bad", 0);
    client_start(&good, &s, SECRET, "good", 0.2);
    accept_good(&s, "good");
    pthread_join(bad.tid, NULL);
    pthread_join(good.tid, NULL);
    assert_int_equal(bad.status, CHORUS_ERR_AUTH);
    assert_int_equal(good.status, CHORUS_SUCCESS);
    assert_int_equal(chorus__acceptor_refused(s.acc), 1);
    server_close(&s);
}

/* A stranger thread: connects, reads the challenge, sends `len` bytes of `msg` (or stays
 * silent when len < 0), then waits for the server to close it. */
typedef struct {
    const server_t *srv;
    uint8_t msg[128];
    int len;
    int close_early; /* closes right after sending instead of waiting */
    int fd;
    int got_challenge;
    pthread_t tid;
} stranger_t;

static void *stranger_main(void *arg)
{
    stranger_t *st = arg;
    uint8_t challenge[24];

    st->fd = raw_connect(st->srv);
    if (st->len < 0) return NULL; /* silent: the test closes fd */
    st->got_challenge = chorus__sock_recv_all(st->fd, challenge, sizeof(challenge),
                                              chorus__deadline_after(5)) == CHORUS_SUCCESS &&
                        memcmp(challenge, "CHRS", 4) == 0;
    chorus__sock_send_all(st->fd, st->msg, (size_t)st->len, chorus__deadline_after(5));
    if (st->close_early) {
        close(st->fd);
        st->fd = -1;
        return NULL;
    }
    expect_closed(st->fd);
    close(st->fd);
    st->fd = -1;
    return NULL;
}

/* Runs one stranger then a good client; the good one must be accepted and the stranger
 * counted as refused. */
static void run_stranger(const uint8_t *msg, int len, int close_early)
{
    server_t s;
    stranger_t st;
    client_t good;

    server_open(&s);
    memset(&st, 0, sizeof(st));
    st.srv = &s;
    memcpy(st.msg, msg, (size_t)len);
    st.len = len;
    st.close_early = close_early;
    assert_int_equal(pthread_create(&st.tid, NULL, stranger_main, &st), 0);
    client_start(&good, &s, SECRET, "good", 0.2);
    accept_good(&s, "good");
    pthread_join(good.tid, NULL);
    pthread_join(st.tid, NULL);
    assert_int_equal(good.status, CHORUS_SUCCESS);
    assert_true(st.got_challenge);
    assert_int_equal(chorus__acceptor_refused(s.acc), 1);
    server_close(&s);
}

static void test_garbage(void **state)
{
    uint8_t junk[100];
    (void)state;
    /* hello_len bytes of 0x41 make 1094795585: refused as oversized without reading on. */
    memset(junk, 0x41, sizeof(junk));
    run_stranger(junk, sizeof(junk), 0);
}

static void test_wrong_mac_zero_hello(void **state)
{
    uint8_t msg[52];
    (void)state;
    memset(msg, 0, sizeof(msg)); /* hello_len 0, MAC all zero */
    run_stranger(msg, sizeof(msg), 0);
}

static void test_truncated(void **state)
{
    uint8_t msg[20];
    (void)state;
    memset(msg, 7, sizeof(msg));
    run_stranger(msg, sizeof(msg), 1);
}

static void test_oversized_hello(void **state)
{
    uint8_t msg[52];
    (void)state;
    memset(msg, 0, sizeof(msg));
    msg[48] = 0;
    msg[49] = 0;
    msg[50] = (CHORUS_AUTH_HELLO_MAX + 1) >> 8;
    msg[51] = (CHORUS_AUTH_HELLO_MAX + 1) & 0xff;
    run_stranger(msg, sizeof(msg), 0);
}

static void test_silent_stranger(void **state)
{
    server_t s;
    stranger_t st;
    client_t good;
    uint64_t t0;
    (void)state;

    server_open(&s);
    memset(&st, 0, sizeof(st));
    st.srv = &s;
    st.len = -1;
    stranger_main(&st); /* connected, says nothing */
    client_start(&good, &s, SECRET, "good", 0);
    t0 = chorus__now_ns();
    accept_good(&s, "good");
    /* The stranger's handshake deadline is seconds away; the good peer must not wait. */
    assert_true(chorus__now_ns() - t0 < 1000000000ull);
    pthread_join(good.tid, NULL);
    assert_int_equal(good.status, CHORUS_SUCCESS);
    assert_int_equal(chorus__acceptor_refused(s.acc), 0);
    /* Destroying the acceptor closes the pending handshake. */
    server_close(&s);
    expect_closed(st.fd);
    close(st.fd);
}

static void test_many_peers(void **state)
{
    enum { N = 8 };
    client_t c[N];
    stranger_t st[3];
    server_t s;
    int seen[N] = {0};
    int i;
    (void)state;

    server_open(&s);
    for (i = 0; i < 3; i++) {
        memset(&st[i], 0, sizeof(st[i]));
        st[i].srv = &s;
        st[i].len = 52;
        memset(st[i].msg, 0x10 + i, sizeof(st[i].msg));
        memset(st[i].msg + 48, 0, 4); /* hello_len 0: refused at once for its MAC */
        assert_int_equal(pthread_create(&st[i].tid, NULL, stranger_main, &st[i]), 0);
    }
    for (i = 0; i < N; i++) {
        char hello[24];
        snprintf(hello, sizeof(hello), "peer %d", i);
        client_start(&c[i], &s, SECRET, hello, 0);
    }
    for (i = 0; i < N; i++) {
        char got[CHORUS_AUTH_HELLO_MAX];
        size_t len = 0;
        int fd = -1, k = -1;
        assert_int_equal(chorus__acceptor_accept(s.acc, got, sizeof(got), &len,
                                                 chorus__deadline_after(5), NULL, &fd),
                         CHORUS_SUCCESS);
        got[len] = '\0';
        assert_int_equal(sscanf(got, "peer %d", &k), 1);
        assert_true(k >= 0 && k < N);
        seen[k]++;
        close(fd);
    }
    for (i = 0; i < N; i++) {
        pthread_join(c[i].tid, NULL);
        assert_int_equal(seen[i], 1);
    }
    /* The strangers may still be pending: serve them until all three are refused. */
    while (chorus__acceptor_refused(s.acc) < 3) {
        char got[8];
        size_t len;
        int fd;
        assert_int_equal(chorus__acceptor_accept(s.acc, got, sizeof(got), &len,
                                                 chorus__now_ns() + 50000000ull, NULL, &fd),
                         CHORUS_ERR_TIMEOUT);
    }
    for (i = 0; i < 3; i++)
        pthread_join(st[i].tid, NULL);
    assert_int_equal(chorus__acceptor_refused(s.acc), 3);
    server_close(&s);
}

static void test_abort_and_timeout(void **state)
{
    atomic_int abort_flag = 1;
    server_t s;
    char got[8];
    size_t len;
    int fd;
    uint64_t t0;
    (void)state;

    server_open(&s);
    assert_int_equal(chorus__acceptor_accept(s.acc, got, sizeof(got), &len,
                                             chorus__deadline_after(5), &abort_flag, &fd),
                     CHORUS_ERR_ABORTED);
    t0 = chorus__now_ns();
    assert_int_equal(chorus__acceptor_accept(s.acc, got, sizeof(got), &len,
                                             chorus__deadline_after(0.2), NULL, &fd),
                     CHORUS_ERR_TIMEOUT);
    assert_true(chorus__now_ns() - t0 >= 150000000ull);
    server_close(&s);
}

static void test_hello_larger_than_caller_buffer(void **state)
{
    server_t s;
    client_t big, good;
    char got[8];
    size_t len = 0;
    int fd = -1;
    (void)state;

    server_open(&s);
    /* The big one authenticates first, then is dropped for its size; the good one,
     * started later, is what accept returns. */
    client_start(&big, &s, SECRET, "a hello longer than eight", 0);
    client_start(&good, &s, SECRET, "ok", 0.1);
    assert_int_equal(chorus__acceptor_accept(s.acc, got, sizeof(got), &len,
                                             chorus__deadline_after(5), NULL, &fd),
                     CHORUS_SUCCESS);
    assert_int_equal(len, 2);
    assert_memory_equal(got, "ok", 2);
    close(fd);
    pthread_join(big.tid, NULL);
    pthread_join(good.tid, NULL);
    assert_int_equal(chorus__acceptor_refused(s.acc), 1);
    server_close(&s);
}

static void test_client_rejects_oversized_hello(void **state)
{
    char hello[CHORUS_AUTH_HELLO_MAX + 1];
    (void)state;
    memset(hello, 'x', sizeof(hello));
    assert_int_equal(chorus__auth_client(-1, SECRET, hello, sizeof(hello), 0),
                     CHORUS_ERR_INVALID_ARGUMENT);
}

/* A fake server that sends `challenge` and then `proof`, to test the client's checks. */
typedef struct {
    int lfd;
    uint8_t challenge[24];
    uint8_t proof[32];
    pthread_t tid;
} fake_server_t;

static void *fake_main(void *arg)
{
    fake_server_t *f = arg;
    uint8_t resp[52 + 16];
    int fd = -1;
    uint64_t dl = chorus__deadline_after(5);

    while (fd < 0 && !chorus__deadline_passed(dl)) {
        fd = accept(f->lfd, NULL, NULL);
        if (fd < 0) usleep(1000);
    }
    if (fd < 0) return NULL;
    chorus__sock_send_all(fd, f->challenge, sizeof(f->challenge), dl);
    if (chorus__sock_recv_all(fd, resp, sizeof(resp), dl) == CHORUS_SUCCESS) {
        chorus__sock_send_all(fd, f->proof, sizeof(f->proof), dl);
    }
    usleep(100000);
    close(fd);
    return NULL;
}

static chorus_status_t run_fake(const char *magic)
{
    server_t s;
    fake_server_t f;
    chorus_status_t st;
    int fd;

    memset(&f, 0, sizeof(f));
    server_open(&s);
    f.lfd = s.lfd;
    memcpy(f.challenge, magic, 4);
    f.challenge[7] = 1;
    memset(f.proof, 0x33, sizeof(f.proof));
    assert_int_equal(pthread_create(&f.tid, NULL, fake_main, &f), 0);
    fd = raw_connect(&s);
    st = chorus__auth_client(fd, SECRET, "0123456789abcdef", 16, chorus__deadline_after(5));
    close(fd);
    pthread_join(f.tid, NULL);
    server_close(&s);
    return st;
}

static void test_client_bad_magic(void **state)
{
    (void)state;
    assert_int_equal(run_fake("XXXX"), CHORUS_ERR_REMOTE);
}

static void test_client_bad_proof(void **state)
{
    (void)state;
    assert_int_equal(run_fake("CHRS"), CHORUS_ERR_AUTH);
}

/* The refusals above were logged at WARN: with the stranger's address, never the secret. */
static void test_log_names_stranger_not_secret(void **state)
{
    char line[4096];
    int named = 0, leaked = 0;
    FILE *f;
    (void)state;

    f = fopen(log_path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "auth: test: refused connection from 127.0.0.1:") != NULL) named++;
        if (strstr(line, SECRET_HEX) != NULL) leaked++;
    }
    fclose(f);
    assert_true(named >= 5);
    assert_int_equal(leaked, 0);
}

static void test_random_bytes(void **state)
{
    uint8_t a[32], b[32];
    (void)state;
    assert_int_equal(chorus__random_bytes(a, sizeof(a)), CHORUS_SUCCESS);
    assert_int_equal(chorus__random_bytes(b, sizeof(b)), CHORUS_SUCCESS);
    assert_memory_not_equal(a, b, sizeof(a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_good_peer),
        cmocka_unit_test(test_empty_hello),
        cmocka_unit_test(test_bad_secret),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_wrong_mac_zero_hello),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_oversized_hello),
        cmocka_unit_test(test_silent_stranger),
        cmocka_unit_test(test_many_peers),
        cmocka_unit_test(test_abort_and_timeout),
        cmocka_unit_test(test_hello_larger_than_caller_buffer),
        cmocka_unit_test(test_client_rejects_oversized_hello),
        cmocka_unit_test(test_client_bad_magic),
        cmocka_unit_test(test_client_bad_proof),
        cmocka_unit_test(test_log_names_stranger_not_secret),
    };
    int rc;

    /* Logging is configured once per process, so it is set before any test runs. */
    snprintf(log_path, sizeof(log_path), "/tmp/chorus_test_auth.%d.log", (int)getpid());
    setenv("CHORUS_DEBUG", "warn", 1);
    setenv("CHORUS_DEBUG_FILE", log_path, 1);
    chorus__config_reload();
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (getenv("KEEP_LOG") == NULL) unlink(log_path);
    return rc;
}
