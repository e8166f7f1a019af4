/*
 * Unit tests of the bootstrap (lib/bootstrap): the unique id and its hex form, the
 * rendezvous of 1, 2 and 5 ranks run as threads of this process with exact allgather and
 * barrier checks, strangers at the root and at the ring listeners during setup, deadline
 * and abort, and the launcher environment (precedence, root address, secret file).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/bs_internal.h"
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
#include <sys/stat.h>
#include <unistd.h>

#define BIG_BLOCK (256 * 1024) /* larger than a socket buffer: the ring must not deadlock */

static struct sockaddr_storage loopback(uint16_t port)
{
    struct sockaddr_storage a;
    memset(&a, 0, sizeof(a));
    ((struct sockaddr_in *)&a)->sin_family = AF_INET;
    ((struct sockaddr_in *)&a)->sin_port = htons(port);
    ((struct sockaddr_in *)&a)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* ---- Unique id ----------------------------------------------------------------------- */

static void fill_info(chorus_id_info_t *info, int v6)
{
    memset(info, 0, sizeof(*info));
    if (v6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&info->root_addr;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(4242);
        inet_pton(AF_INET6, "fd00::1:2:3", &in6->sin6_addr);
    } else {
        info->root_addr = loopback(29500);
        inet_pton(AF_INET, "10.1.2.3", &((struct sockaddr_in *)&info->root_addr)->sin_addr);
    }
    for (int i = 0; i < CHORUS_SECRET_BYTES; i++)
        info->secret[i] = (uint8_t)(i * 17 + 3);
    info->comm_id = 0x0123456789abcdefull;
}

static void check_round_trip(int v6)
{
    chorus_id_info_t info, back;
    chorus_unique_id_t id, id2;
    char hex[2 * CHORUS_UNIQUE_ID_BYTES + 1], a[80], b[80];

    fill_info(&info, v6);
    assert_int_equal(chorus__id_encode(&info, &id), CHORUS_SUCCESS);
    assert_int_equal(chorus__id_decode(&id, &back), CHORUS_SUCCESS);
    assert_string_equal(chorus__sock_addr_str(&back.root_addr, a, sizeof(a)),
                        chorus__sock_addr_str(&info.root_addr, b, sizeof(b)));
    assert_string_equal(a, v6 ? "[fd00::1:2:3]:4242" : "10.1.2.3:29500");
    assert_memory_equal(back.secret, info.secret, CHORUS_SECRET_BYTES);
    assert_true(back.comm_id == info.comm_id);
    chorus__id_to_hex(&id, hex);
    assert_int_equal(strlen(hex), 2 * CHORUS_UNIQUE_ID_BYTES);
    assert_int_equal(chorus__id_from_hex(hex, &id2), CHORUS_SUCCESS);
    assert_memory_equal(&id, &id2, sizeof(id));
}

static void test_id_round_trip(void **state)
{
    (void)state;
    check_round_trip(0);
    check_round_trip(1);
}

static void test_id_malformed(void **state)
{
    chorus_id_info_t info, back;
    chorus_unique_id_t id, bad;
    char hex[2 * CHORUS_UNIQUE_ID_BYTES + 1];
    (void)state;

    fill_info(&info, 0);
    assert_int_equal(chorus__id_encode(&info, &id), CHORUS_SUCCESS);
    bad = id;
    bad.internal[0] = 'X'; /* magic */
    assert_int_equal(chorus__id_decode(&bad, &back), CHORUS_ERR_INVALID_ARGUMENT);
    bad = id;
    bad.internal[4] = 9; /* version */
    assert_int_equal(chorus__id_decode(&bad, &back), CHORUS_ERR_INVALID_ARGUMENT);
    bad = id;
    bad.internal[5] = 5; /* family */
    assert_int_equal(chorus__id_decode(&bad, &back), CHORUS_ERR_INVALID_ARGUMENT);
    bad = id;
    bad.internal[6] = bad.internal[7] = 0; /* port 0 */
    assert_int_equal(chorus__id_decode(&bad, &back), CHORUS_ERR_INVALID_ARGUMENT);
    bad = id;
    bad.internal[CHORUS_UNIQUE_ID_BYTES - 1] = 1; /* tail */
    assert_int_equal(chorus__id_decode(&bad, &back), CHORUS_ERR_INVALID_ARGUMENT);
    memset(&bad, 0, sizeof(bad));
    assert_int_equal(chorus__id_decode(&bad, &back), CHORUS_ERR_INVALID_ARGUMENT);

    chorus__id_to_hex(&id, hex);
    assert_int_equal(chorus__id_from_hex("abcd", &bad), CHORUS_ERR_INVALID_ARGUMENT);
    hex[10] = 'g';
    assert_int_equal(chorus__id_from_hex(hex, &bad), CHORUS_ERR_INVALID_ARGUMENT);
    chorus__id_to_hex(&id, hex);
    hex[2 * CHORUS_UNIQUE_ID_BYTES - 1] = '1'; /* valid hex, corrupt tail */
    assert_int_equal(chorus__id_from_hex(hex, &bad), CHORUS_ERR_INVALID_ARGUMENT);
    info.root_addr.ss_family = AF_UNIX;
    assert_int_equal(chorus__id_encode(&info, &bad), CHORUS_ERR_INVALID_ARGUMENT);
}

static void test_parse_addr(void **state)
{
    struct sockaddr_storage a;
    char text[80];
    (void)state;

    assert_int_equal(chorus__sock_parse_addr("127.0.0.1:80", &a), CHORUS_SUCCESS);
    assert_string_equal(chorus__sock_addr_str(&a, text, sizeof(text)), "127.0.0.1:80");
    assert_int_equal(chorus__sock_parse_addr("localhost:29500", &a), CHORUS_SUCCESS);
    assert_string_equal(chorus__sock_addr_str(&a, text, sizeof(text)), "127.0.0.1:29500");
    assert_int_equal(chorus__sock_parse_addr("[::1]:7", &a), CHORUS_SUCCESS);
    assert_string_equal(chorus__sock_addr_str(&a, text, sizeof(text)), "[::1]:7");
    assert_int_equal(chorus__sock_parse_addr("::1:7", &a), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__sock_parse_addr("host", &a), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__sock_parse_addr("1.2.3.4:99999", &a), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__sock_parse_addr("1.2.3.4:", &a), CHORUS_ERR_INVALID_ARGUMENT);
}

static void test_pick_local_addr(void **state)
{
    struct sockaddr_storage lo = loopback(1234), a;
    char text[80];
    (void)state;

    /* Toward loopback, the route's source is loopback, with port 0. */
    assert_int_equal(chorus__sock_pick_local_addr(&lo, &a), CHORUS_SUCCESS);
    assert_string_equal(chorus__sock_addr_str(&a, text, sizeof(text)), "127.0.0.1:0");
    setenv("CHORUS_SOCKET_IFNAME", "lo", 1);
    chorus__config_reload();
    assert_int_equal(chorus__sock_pick_local_addr(NULL, &a), CHORUS_SUCCESS);
    assert_string_equal(chorus__sock_addr_str(&a, text, sizeof(text)), "127.0.0.1:0");
    setenv("CHORUS_SOCKET_IFNAME", "nosuchif9", 1);
    chorus__config_reload();
    assert_int_equal(chorus__sock_pick_local_addr(&lo, &a), CHORUS_ERR_INVALID_ARGUMENT);
    unsetenv("CHORUS_SOCKET_IFNAME");
    chorus__config_reload();
    assert_int_equal(chorus__sock_pick_local_addr(NULL, &a), CHORUS_SUCCESS);
    assert_true(a.ss_family == AF_INET || a.ss_family == AF_INET6);
}

/* ---- Ranks as threads ------------------------------------------------------------------ */

typedef struct {
    chorus_unique_id_t id;
    int rank, nranks;
    double timeout_s;
    const atomic_int *abort_flag;
    chorus_status_t status;
    int bad_data; /* nonzero: which check failed */
    pthread_t tid;
} rank_t;

static uint8_t value(int rank, size_t i, int round)
{
    return (uint8_t)(rank * 37 + i * 11 + (i >> 9) + round * 101 + 1);
}

/* Allgathers `size` bytes per rank and checks every byte; returns 0 when exact. */
static int check_allgather(chorus_bootstrap_t *bs, int rank, int n, size_t size, int round,
                           chorus_status_t *st_p)
{
    uint8_t *buf = malloc(size * (size_t)n);
    size_t i;
    int r, bad = 0;

    if (buf == NULL) return 1;
    memset(buf, 0xee, size * (size_t)n);
    for (i = 0; i < size; i++)
        buf[(size_t)rank * size + i] = value(rank, i, round);
    *st_p = chorus__bootstrap_allgather(bs, buf, size);
    for (r = 0; r < n && *st_p == CHORUS_SUCCESS && !bad; r++) {
        for (i = 0; i < size; i++) {
            if (buf[(size_t)r * size + i] != value(r, i, round)) bad = 1;
        }
    }
    free(buf);
    return bad;
}

static void *rank_main(void *arg)
{
    rank_t *rk = arg;
    chorus_bootstrap_t *bs = NULL;

    rk->status =
        chorus__bootstrap_init(&rk->id, rk->rank, rk->nranks, rk->timeout_s, rk->abort_flag, &bs);
    if (rk->status != CHORUS_SUCCESS) return NULL;
    if (chorus__bootstrap_id_info(bs)->comm_id == 0 ||
        chorus__bootstrap_local_addr(bs)->ss_family !=
            chorus__bootstrap_id_info(bs)->root_addr.ss_family) {
        rk->bad_data = 1;
    }
    if (!rk->bad_data && check_allgather(bs, rk->rank, rk->nranks, 7, 0, &rk->status)) {
        rk->bad_data = 2;
    }
    if (!rk->bad_data && rk->status == CHORUS_SUCCESS) {
        rk->status = chorus__bootstrap_barrier(bs);
    }
    if (!rk->bad_data && rk->status == CHORUS_SUCCESS &&
        check_allgather(bs, rk->rank, rk->nranks, BIG_BLOCK, 1, &rk->status)) {
        rk->bad_data = 3;
    }
    if (!rk->bad_data && rk->status == CHORUS_SUCCESS) {
        rk->status = chorus__bootstrap_barrier(bs);
    }
    chorus__bootstrap_destroy(bs);
    return NULL;
}

static rank_t *start_ranks(const chorus_unique_id_t *id, int n)
{
    rank_t *rk = calloc((size_t)n, sizeof(*rk));
    assert_non_null(rk);
    for (int r = 0; r < n; r++) {
        rk[r].id = *id;
        rk[r].rank = r;
        rk[r].nranks = n;
        rk[r].timeout_s = 20;
        assert_int_equal(pthread_create(&rk[r].tid, NULL, rank_main, &rk[r]), 0);
    }
    return rk;
}

static void join_ranks(rank_t *rk, int n)
{
    for (int r = 0; r < n; r++)
        pthread_join(rk[r].tid, NULL);
    for (int r = 0; r < n; r++) {
        if (rk[r].status != CHORUS_SUCCESS || rk[r].bad_data) {
            print_error("rank %d: status %d, bad_data %d: %s\n", r, rk[r].status, rk[r].bad_data,
                        chorus_last_error());
        }
        assert_int_equal(rk[r].status, CHORUS_SUCCESS);
        assert_int_equal(rk[r].bad_data, 0);
    }
    free(rk);
}

static void run_ranks(int n)
{
    struct sockaddr_storage lo = loopback(0);
    chorus_unique_id_t id;

    assert_int_equal(chorus__bootstrap_new_id(&lo, &id), CHORUS_SUCCESS);
    join_ranks(start_ranks(&id, n), n);
}

static void test_ranks_1(void **state)
{
    (void)state;
    run_ranks(1);
}

static void test_ranks_2(void **state)
{
    (void)state;
    run_ranks(2);
}

static void test_ranks_5(void **state)
{
    (void)state;
    run_ranks(5);
}

static void test_ranks_ipv6(void **state)
{
    struct sockaddr_storage lo6;
    chorus_unique_id_t id;
    int fd;
    (void)state;

    memset(&lo6, 0, sizeof(lo6));
    ((struct sockaddr_in6 *)&lo6)->sin6_family = AF_INET6;
    ((struct sockaddr_in6 *)&lo6)->sin6_addr = in6addr_loopback;
    if (chorus__sock_listen(&lo6, 1, &fd, NULL) != CHORUS_SUCCESS) {
        print_message("skipped: no IPv6 loopback here\n");
        skip();
    }
    close(fd);
    assert_int_equal(chorus__bootstrap_new_id(&lo6, &id), CHORUS_SUCCESS);
    join_ranks(start_ranks(&id, 3), 3);
}

/* ---- Strangers ------------------------------------------------------------------------- */

/* A stranger connects to addr and, per kind, sends junk (0), stays silent (1),
 * authenticates with a wrong secret (2), or authenticates with the right secret but as
 * another communicator (3). Its fd stays open until the test closes it. No cmocka asserts
 * here: it also runs on other threads. */
typedef struct {
    struct sockaddr_storage addr;
    int kind;
    const chorus_id_info_t *info;
    int fd;
    chorus_status_t status; /* of the connect, then of the handshake for kinds 2 and 3 */
    pthread_t tid;
} stranger_t;

static void *stranger_main(void *arg)
{
    stranger_t *s = arg;
    uint8_t junk[64], hello[CHORUS_BS_HELLO_BYTES], secret[CHORUS_SECRET_BYTES];
    chorus_bs_hello_t h;

    s->fd = -1;
    s->status = chorus__sock_connect(&s->addr, chorus__deadline_after(5), NULL, &s->fd);
    if (s->status != CHORUS_SUCCESS) return NULL;
    if (s->kind == 0) {
        memset(junk, 0x5a, sizeof(junk));
        s->status = chorus__sock_send_all(s->fd, junk, sizeof(junk), chorus__deadline_after(5));
    } else if (s->kind >= 2) {
        memset(&h, 0, sizeof(h));
        h.purpose = CHORUS_BS_PURPOSE_ROOT;
        h.comm_id = s->info->comm_id + 1;
        h.rank = 0;
        h.nranks = 1;
        h.addr = loopback(9);
        chorus__bs_hello_pack(&h, hello);
        memcpy(secret, s->info->secret, sizeof(secret));
        if (s->kind == 2) secret[0] ^= 0x80;
        s->status =
            chorus__auth_client(s->fd, secret, hello, sizeof(hello), chorus__deadline_after(5));
    }
    return NULL;
}

/* The root's admission (chorus__bs_root_admit) of hellos that passed authentication: the
 * first admitted hello fixes the rank count; a rank that already arrived, a rank count that
 * differs from it, a rank out of range, another comm or purpose are refused and change
 * nothing. */
static chorus_bs_hello_t root_hello(uint64_t comm_id, uint32_t rank, uint32_t nranks)
{
    chorus_bs_hello_t h;

    memset(&h, 0, sizeof(h));
    h.purpose = CHORUS_BS_PURPOSE_ROOT;
    h.comm_id = comm_id;
    h.rank = rank;
    h.nranks = nranks;
    h.addr = loopback((uint16_t)(40000 + rank));
    return h;
}

static void test_root_admit(void **state)
{
    const uint64_t cid = 0x5151515151515151ull;
    chorus_bs_root_tab_t tab;
    chorus_bs_hello_t h;
    (void)state;

    memset(&tab, 0, sizeof(tab));
    tab.comm_id = cid;
    tab.name = "test root";
    h = root_hello(cid, 1, 3);
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 1);
    assert_int_equal(tab.nranks, 3);
    assert_non_null(tab.fds);
    assert_non_null(tab.table);
    assert_int_equal(tab.fds[1], -1);
    tab.fds[1] = 1001; /* what the caller does with an admitted rank (never closed here) */
    tab.arrived++;

    h = root_hello(cid, 1, 3); /* rank 1 again */
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 0);
    h = root_hello(cid, 0, 2); /* fewer ranks than the first hello said */
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 0);
    h = root_hello(cid, 0, 4); /* more */
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 0);
    h = root_hello(cid, 3, 3); /* out of range */
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 0);
    h = root_hello(cid + 1, 0, 3); /* another communicator */
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 0);
    h = root_hello(cid, 0, 3);
    h.purpose = CHORUS_BS_PURPOSE_RING;
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 0);
    assert_int_equal(tab.nranks, 3);
    assert_int_equal(tab.fds[0], -1);
    assert_int_equal(tab.fds[2], -1);

    h = root_hello(cid, 0, 3);
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 1);
    h = root_hello(cid, 2, 3);
    assert_int_equal(chorus__bs_root_admit(&tab, &h), 1);
    free(tab.fds);
    free(tab.table);
}

/* The root's verdict at its deadline (chorus__bs_miss_pack) and its reading by a rank
 * (chorus__bs_miss_describe): the ranks that never came, the first CHORUS_BS_MISS_LIST of
 * them listed; a malformed verdict is CHORUS_ERR_REMOTE, never a read past its end. */
static void test_root_verdict(void **state)
{
    uint8_t msg[CHORUS_BS_MISS_MAX_BYTES], bad[CHORUS_BS_MISS_MAX_BYTES];
    chorus_bs_root_tab_t tab;
    char text[256];
    size_t len;
    int fds[40];
    (void)state;

    memset(&tab, 0, sizeof(tab));
    tab.fds = fds;
    tab.nranks = 5;
    for (int r = 0; r < 5; r++) fds[r] = r == 1 || r == 4 ? -1 : 100 + r;
    len = chorus__bs_miss_pack(&tab, msg);
    assert_int_equal(len, 12 + 2 * 4);
    assert_memory_equal(msg, "MISS", 4);
    assert_int_equal(chorus__bs_get32(msg + 4), 5);
    assert_int_equal(chorus__bs_miss_describe(msg + 8, len - 8, 5, text, sizeof(text)),
                     CHORUS_SUCCESS);
    assert_string_equal(text,
                        "3 of 5 ranks came before the root's deadline; never came: ranks 1, 4");

    /* 40 ranks, 37 missing: the first 16 listed, the rest counted. */
    tab.nranks = 40;
    for (int r = 0; r < 40; r++) fds[r] = r == 0 || r == 7 || r == 39 ? 100 + r : -1;
    len = chorus__bs_miss_pack(&tab, msg);
    assert_int_equal(len, CHORUS_BS_MISS_MAX_BYTES);
    assert_int_equal(chorus__bs_miss_describe(msg + 8, len - 8, 40, text, sizeof(text)),
                     CHORUS_SUCCESS);
    assert_string_equal(text, "3 of 40 ranks came before the root's deadline; never came: ranks "
                              "1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17 (and 21 "
                              "more)");
    /* Too small a buffer truncates the text, nothing more. */
    assert_int_equal(chorus__bs_miss_describe(msg + 8, len - 8, 40, text, 20), CHORUS_SUCCESS);
    assert_int_equal(strlen(text), 19);

    /* Malformed: no count; nobody or everybody missing; a list shorter or longer than the
     * count says; a rank out of range; ranks out of order or repeated. */
    assert_int_equal(chorus__bs_miss_describe(msg + 8, 3, 40, text, sizeof(text)),
                     CHORUS_ERR_REMOTE);
    memcpy(bad, msg + 8, len - 8);
    chorus__bs_put32(bad, 0);
    assert_int_equal(chorus__bs_miss_describe(bad, 4, 40, text, sizeof(text)), CHORUS_ERR_REMOTE);
    chorus__bs_put32(bad, 40);
    assert_int_equal(chorus__bs_miss_describe(bad, len - 8, 40, text, sizeof(text)),
                     CHORUS_ERR_REMOTE);
    chorus__bs_put32(bad, 2);
    assert_int_equal(chorus__bs_miss_describe(bad, 8, 40, text, sizeof(text)), CHORUS_ERR_REMOTE);
    assert_int_equal(chorus__bs_miss_describe(bad, 16, 40, text, sizeof(text)), CHORUS_ERR_REMOTE);
    assert_int_equal(chorus__bs_miss_describe(bad, 12, 40, text, sizeof(text)), CHORUS_SUCCESS);
    chorus__bs_put32(bad + 8, 40);
    assert_int_equal(chorus__bs_miss_describe(bad, 12, 40, text, sizeof(text)), CHORUS_ERR_REMOTE);
    chorus__bs_put32(bad + 8, 1);
    assert_int_equal(chorus__bs_miss_describe(bad, 12, 40, text, sizeof(text)), CHORUS_ERR_REMOTE);
    chorus__bs_put32(bad + 4, 5);
    chorus__bs_put32(bad + 8, 3);
    assert_int_equal(chorus__bs_miss_describe(bad, 12, 40, text, sizeof(text)), CHORUS_ERR_REMOTE);
}

static void test_strangers_at_root(void **state)
{
    struct sockaddr_storage lo = loopback(0);
    chorus_unique_id_t id;
    chorus_id_info_t info;
    stranger_t st[4];
    int k;
    rank_t *rk;
    (void)state;

    assert_int_equal(chorus__bootstrap_new_id(&lo, &id), CHORUS_SUCCESS);
    assert_int_equal(chorus__id_decode(&id, &info), CHORUS_SUCCESS);
    for (k = 0; k < 4; k++) {
        st[k] = (stranger_t){.addr = info.root_addr, .kind = k, .info = &info};
        stranger_main(&st[k]);
    }
    /* The root is a thread of its own, so the handshakes completed: a wrong secret is
     * refused, and the right secret gets through the handshake only. */
    assert_int_equal(st[0].status, CHORUS_SUCCESS);
    assert_int_equal(st[1].status, CHORUS_SUCCESS);
    assert_int_equal(st[2].status, CHORUS_ERR_AUTH);
    assert_int_equal(st[3].status, CHORUS_SUCCESS);
    rk = start_ranks(&id, 3);
    join_ranks(rk, 3);
    for (k = 0; k < 4; k++)
        close(st[k].fd);
}

/* A fake root, run by the test, so that it knows every rank's ring listener and can send
 * strangers there before it hands out the table. */
#define FAKE_MAX 8
typedef struct {
    chorus_id_info_t info;
    int lfd;
    int nranks;
    stranger_t st[4 * FAKE_MAX];
    int nstrangers;
    int ok;
    pthread_t tid;
} fake_root_t;

static void *fake_root_main(void *arg)
{
    fake_root_t *fr = arg;
    chorus_acceptor_t *acc = NULL;
    uint8_t table[8 + CHORUS_BS_ADDR_BYTES * FAKE_MAX], buf[CHORUS_BS_HELLO_BYTES];
    int fds[FAKE_MAX], r, k, fd;
    size_t len;
    chorus_bs_hello_t h;

    if (chorus__acceptor_create(fr->lfd, fr->info.secret, "fake root", &acc) != CHORUS_SUCCESS) {
        return NULL;
    }
    memcpy(table, "TABL", 4);
    chorus__bs_put32(table + 4, (uint32_t)fr->nranks);
    for (r = 0; r < fr->nranks; r++) {
        if (chorus__acceptor_accept(acc, buf, sizeof(buf), &len, chorus__deadline_after(10), NULL,
                                    &fd) != CHORUS_SUCCESS ||
            chorus__bs_hello_unpack(buf, len, &h) != CHORUS_SUCCESS || h.rank >= FAKE_MAX) {
            goto out;
        }
        fds[h.rank] = fd;
        chorus__bs_pack_addr(&h.addr, table + 8 + CHORUS_BS_ADDR_BYTES * h.rank);
        /* Strangers on threads: their handshakes need the rank's acceptor, which runs
         * only once the table below has arrived. */
        for (k = 0; k < 4; k++) {
            stranger_t *s = &fr->st[fr->nstrangers++];
            *s = (stranger_t){.addr = h.addr, .kind = k, .info = &fr->info};
            pthread_create(&s->tid, NULL, stranger_main, s);
        }
    }
    /* Let the strangers connect first, so that they are in the ranks' backlogs. */
    usleep(100000);
    for (r = 0; r < fr->nranks; r++) {
        chorus__sock_send_all(fds[r], table, 8 + CHORUS_BS_ADDR_BYTES * (size_t)fr->nranks,
                              chorus__deadline_after(10));
        close(fds[r]);
    }
    fr->ok = 1;
out:
    chorus__acceptor_destroy(acc);
    return NULL;
}

static void test_strangers_at_ring(void **state)
{
    struct sockaddr_storage lo = loopback(0);
    chorus_unique_id_t id;
    fake_root_t fr;
    rank_t *rk;
    int k;
    (void)state;

    memset(&fr, 0, sizeof(fr));
    fr.nranks = 4;
    for (k = 0; k < CHORUS_SECRET_BYTES; k++)
        fr.info.secret[k] = (uint8_t)(k + 100);
    fr.info.comm_id = 77;
    assert_int_equal(chorus__sock_listen(&lo, 16, &fr.lfd, &fr.info.root_addr), CHORUS_SUCCESS);
    assert_int_equal(chorus__id_encode(&fr.info, &id), CHORUS_SUCCESS);
    assert_int_equal(pthread_create(&fr.tid, NULL, fake_root_main, &fr), 0);
    rk = start_ranks(&id, fr.nranks);
    join_ranks(rk, fr.nranks);
    pthread_join(fr.tid, NULL);
    assert_true(fr.ok);
    assert_int_equal(fr.nstrangers, 4 * fr.nranks);
    for (k = 0; k < fr.nstrangers; k++) {
        pthread_join(fr.st[k].tid, NULL);
        /* Whatever the stranger got, it never got data: the wrong secret never passes. */
        if (fr.st[k].kind == 2) assert_int_not_equal(fr.st[k].status, CHORUS_SUCCESS);
        if (fr.st[k].fd >= 0) close(fr.st[k].fd);
    }
    close(fr.lfd);
}

/* ---- Deadline and abort ------------------------------------------------------------- */

static void test_timeout_and_abort(void **state)
{
    struct sockaddr_storage lo = loopback(0);
    atomic_int abort_flag = 0;
    chorus_bootstrap_t *bs = NULL;
    chorus_unique_id_t id;
    chorus_id_info_t info;
    uint64_t t0;
    rank_t rk;
    int lfd;
    (void)state;

    /* A root that listens and never answers. */
    memset(&info, 0, sizeof(info));
    info.comm_id = 5;
    assert_int_equal(chorus__sock_listen(&lo, 16, &lfd, &info.root_addr), CHORUS_SUCCESS);
    assert_int_equal(chorus__id_encode(&info, &id), CHORUS_SUCCESS);
    t0 = chorus__now_ns();
    assert_int_equal(chorus__bootstrap_init(&id, 0, 2, 0.3, NULL, &bs), CHORUS_ERR_TIMEOUT);
    assert_true(chorus__now_ns() - t0 >= 250000000ull);
    assert_null(bs);

    memset(&rk, 0, sizeof(rk));
    rk.id = id;
    rk.nranks = 2;
    rk.timeout_s = 30;
    rk.abort_flag = &abort_flag;
    t0 = chorus__now_ns();
    assert_int_equal(pthread_create(&rk.tid, NULL, rank_main, &rk), 0);
    usleep(200000);
    atomic_store(&abort_flag, 1);
    pthread_join(rk.tid, NULL);
    assert_int_equal(rk.status, CHORUS_ERR_ABORTED);
    assert_true(chorus__now_ns() - t0 < 5000000000ull);
    close(lfd);

    assert_int_equal(chorus__bootstrap_init(&id, 2, 2, 1, NULL, &bs), CHORUS_ERR_INVALID_ARGUMENT);
    assert_int_equal(chorus__bootstrap_init(&id, 0, 0, 1, NULL, &bs), CHORUS_ERR_INVALID_ARGUMENT);
}

/* ---- Launcher environment ------------------------------------------------------------ */

static const char *const launcher_vars[] = {
    "CHORUS_RANK",        "CHORUS_WORLD_SIZE",    "RANK",
    "WORLD_SIZE",         "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",       "SLURM_NTASKS",         "PMI_RANK",
    "PMI_SIZE",           "CHORUS_UNIQUE_ID",     "CHORUS_ROOT",
    "MASTER_ADDR",        "MASTER_PORT",          "CHORUS_SECRET",
    "CHORUS_SECRET_FILE",
};

static void env_clear(void)
{
    for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(launcher_vars[0]); i++) {
        unsetenv(launcher_vars[i]);
    }
    chorus__config_reload();
}

static chorus_status_t from_env(int *rank_p, int *n_p, int *root_p, chorus_id_info_t *info_p)
{
    chorus_unique_id_t id;
    chorus_status_t st;

    chorus__config_reload();
    st = chorus__bootstrap_id_from_env(&id, rank_p, n_p, root_p);
    if (st == CHORUS_SUCCESS && info_p != NULL) {
        assert_int_equal(chorus__id_decode(&id, info_p), CHORUS_SUCCESS);
    }
    return st;
}

static void test_env_rank_precedence(void **state)
{
    static const char *const pairs[][2] = {
        {"CHORUS_RANK", "CHORUS_WORLD_SIZE"},
        {"RANK", "WORLD_SIZE"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
        {"PMI_RANK", "PMI_SIZE"},
    };
    int rank = -1, n = -1, root = -1, i;
    char v[16];
    (void)state;

    env_clear();
    setenv("CHORUS_ROOT", "127.0.0.1:29500", 1);
    setenv("CHORUS_SECRET", "00112233445566778899aabbccddeeff", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    /* Set all five launchers with different values; remove them from the top. */
    for (i = 0; i < 5; i++) {
        snprintf(v, sizeof(v), "%d", i);
        setenv(pairs[i][0], v, 1);
        snprintf(v, sizeof(v), "%d", 10 + i);
        setenv(pairs[i][1], v, 1);
    }
    for (i = 0; i < 5; i++) {
        assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_SUCCESS);
        assert_int_equal(rank, i);
        assert_int_equal(n, 10 + i);
        assert_int_equal(root, i == 0 ? CHORUS_BS_ROOT_ADDR : CHORUS_BS_ROOT_RANK0);
        unsetenv(pairs[i][0]);
        unsetenv(pairs[i][1]);
    }
    setenv("RANK", "3", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("WORLD_SIZE", "3", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("RANK", "x1", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("RANK", "-1", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("RANK", "2", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_SUCCESS);
    assert_int_equal(rank, 2);
    assert_int_equal(n, 3);
    assert_int_equal(root, CHORUS_BS_ROOT_RANK0);
    env_clear();
}

static void test_env_root_and_secret(void **state)
{
    chorus_id_info_t a, b, c;
    chorus_unique_id_t id, got;
    int rank, n, root;
    char text[80], hex[2 * CHORUS_UNIQUE_ID_BYTES + 1];
    (void)state;

    env_clear();
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("CHORUS_SECRET", "00112233445566778899aabbccddeeff", 1);
    setenv("MASTER_PORT", "29501", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("MASTER_ADDR", "localhost", 1);
    assert_int_equal(from_env(&rank, &n, &root, &a), CHORUS_SUCCESS);
    assert_string_equal(chorus__sock_addr_str(&a.root_addr, text, sizeof(text)), "127.0.0.1:29501");
    assert_int_equal(a.secret[0], 0x00);
    assert_int_equal(a.secret[15], 0xff);
    assert_int_equal(root, CHORUS_BS_ROOT_ADDR);
    /* Every rank derives the same comm id; another root gives another. */
    setenv("RANK", "1", 1);
    assert_int_equal(from_env(&rank, &n, &root, &b), CHORUS_SUCCESS);
    assert_int_equal(root, CHORUS_BS_ROOT_RANK0);
    assert_true(a.comm_id == b.comm_id);
    setenv("CHORUS_ROOT", "127.0.0.1:29502", 1); /* wins over MASTER_* */
    assert_int_equal(from_env(&rank, &n, &root, &c), CHORUS_SUCCESS);
    assert_string_equal(chorus__sock_addr_str(&c.root_addr, text, sizeof(text)), "127.0.0.1:29502");
    assert_true(a.comm_id != c.comm_id);

    setenv("CHORUS_SECRET", "00112233445566778899aabbccddeef", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    setenv("CHORUS_SECRET", "00112233445566778899aabbccddeefg", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);

    /* CHORUS_UNIQUE_ID overrides everything, and nobody serves the root. */
    fill_info(&a, 0);
    assert_int_equal(chorus__id_encode(&a, &id), CHORUS_SUCCESS);
    chorus__id_to_hex(&id, hex);
    setenv("CHORUS_UNIQUE_ID", hex, 1);
    setenv("RANK", "0", 1);
    chorus__config_reload();
    assert_int_equal(chorus__bootstrap_id_from_env(&got, &rank, &n, &root), CHORUS_SUCCESS);
    assert_memory_equal(&got, &id, sizeof(id));
    assert_int_equal(root, CHORUS_BS_ROOT_NONE);
    setenv("CHORUS_UNIQUE_ID", "0123", 1);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    env_clear();
}

typedef struct {
    chorus_status_t status;
    chorus_id_info_t info;
    pthread_t tid;
} env_thread_t;

static void *env_thread(void *arg)
{
    env_thread_t *t = arg;
    chorus_unique_id_t id;
    int rank, n, root;

    t->status = chorus__bootstrap_id_from_env(&id, &rank, &n, &root);
    if (t->status == CHORUS_SUCCESS) t->status = chorus__id_decode(&id, &t->info);
    return NULL;
}

static void test_env_secret_file(void **state)
{
    char home[64], path[128], buf[64];
    chorus_id_info_t a, b;
    env_thread_t th[4];
    int rank, n, root, i;
    const char *old_home = getenv("HOME");
    char *saved = old_home != NULL ? strdup(old_home) : NULL;
    struct stat st;
    FILE *f;
    (void)state;

    env_clear();
    snprintf(home, sizeof(home), "/tmp/chorus_test_home.XXXXXX");
    assert_non_null(mkdtemp(home));
    setenv("HOME", home, 1);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("CHORUS_ROOT", "127.0.0.1:29503", 1);
    chorus__config_reload();
    /* Four "ranks" of one host race to create it: all must read the same secret. */
    for (i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i].tid, NULL, env_thread, &th[i]), 0);
    for (i = 0; i < 4; i++)
        pthread_join(th[i].tid, NULL);
    for (i = 0; i < 4; i++) {
        assert_int_equal(th[i].status, CHORUS_SUCCESS);
        assert_memory_equal(th[i].info.secret, th[0].info.secret, CHORUS_SECRET_BYTES);
    }
    snprintf(path, sizeof(path), "%s/.chorus", home);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    snprintf(path, sizeof(path), "%s/.chorus/secret", home);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_int_equal(strlen(buf), 33); /* 32 hex digits and a newline */
    assert_int_equal(from_env(&rank, &n, &root, &a), CHORUS_SUCCESS);
    assert_memory_equal(a.secret, th[0].info.secret, CHORUS_SECRET_BYTES);

    /* A file others can read is refused. */
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(from_env(&rank, &n, &root, NULL), CHORUS_ERR_AUTH);
    assert_int_equal(chmod(path, 0600), 0);

    /* CHORUS_SECRET_FILE names another file; CHORUS_SECRET wins over both. */
    snprintf(path, sizeof(path), "%s/other", home);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("ffeeddccbbaa99887766554433221100\n", f);
    fclose(f);
    assert_int_equal(chmod(path, 0600), 0);
    setenv("CHORUS_SECRET_FILE", path, 1);
    assert_int_equal(from_env(&rank, &n, &root, &b), CHORUS_SUCCESS);
    assert_int_equal(b.secret[0], 0xff);
    assert_int_equal(b.secret[15], 0x00);
    setenv("CHORUS_SECRET", "0102030405060708090a0b0c0d0e0f10", 1);
    assert_int_equal(from_env(&rank, &n, &root, &b), CHORUS_SUCCESS);
    assert_int_equal(b.secret[0], 0x01);

    unlink(path);
    snprintf(path, sizeof(path), "%s/.chorus/secret", home);
    unlink(path);
    snprintf(path, sizeof(path), "%s/.chorus", home);
    rmdir(path);
    rmdir(home);
    if (saved != NULL) {
        setenv("HOME", saved, 1);
        free(saved);
    }
    env_clear();
}

/* The launcher path end to end: rank 0 serves the root at the fixed CHORUS_ROOT port. */
static void test_env_root_start(void **state)
{
    struct sockaddr_storage lo = loopback(0), bound;
    chorus_unique_id_t id;
    int rank, n, root, fd;
    char text[32];
    (void)state;

    /* A free port: bound, then released for the root to take. */
    assert_int_equal(chorus__sock_listen(&lo, 1, &fd, &bound), CHORUS_SUCCESS);
    close(fd);
    snprintf(text, sizeof(text), "127.0.0.1:%u",
             (unsigned)ntohs(((struct sockaddr_in *)&bound)->sin_port));
    env_clear();
    setenv("CHORUS_RANK", "0", 1);
    setenv("CHORUS_WORLD_SIZE", "3", 1);
    setenv("CHORUS_ROOT", text, 1);
    setenv("CHORUS_SECRET", "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf", 1);
    chorus__config_reload();
    assert_int_equal(chorus__bootstrap_id_from_env(&id, &rank, &n, &root), CHORUS_SUCCESS);
    assert_int_equal(root, 1);
    assert_int_equal(chorus__bootstrap_root_start(&id, 0), CHORUS_SUCCESS);
    join_ranks(start_ranks(&id, n), n);
    env_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_round_trip),
        cmocka_unit_test(test_id_malformed),
        cmocka_unit_test(test_parse_addr),
        cmocka_unit_test(test_pick_local_addr),
        cmocka_unit_test(test_ranks_1),
        cmocka_unit_test(test_ranks_2),
        cmocka_unit_test(test_ranks_5),
        cmocka_unit_test(test_ranks_ipv6),
        cmocka_unit_test(test_root_admit),
        cmocka_unit_test(test_strangers_at_root),
        cmocka_unit_test(test_strangers_at_ring),
        cmocka_unit_test(test_root_verdict),
        cmocka_unit_test(test_timeout_and_abort),
        cmocka_unit_test(test_env_rank_precedence),
        cmocka_unit_test(test_env_root_and_secret),
        cmocka_unit_test(test_env_secret_file),
        cmocka_unit_test(test_env_root_start),
    };

    /* Only loopback: the interface choice must not depend on this machine's network. */
    setenv("CHORUS_TIMEOUT", "20", 1);
    unsetenv("CHORUS_SOCKET_IFNAME");
    chorus__config_reload();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
