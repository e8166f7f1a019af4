/*
 * The root service: a detached thread that collects one authenticated hello per rank
 * (rank, nranks, the rank's ring listening address) and, once all have arrived, sends
 * every rank the whole address table. It then frees everything it owns and ends; it also
 * ends at the CHORUS_TIMEOUT deadline. Nobody joins it, so it must never touch memory
 * that its starter owns: it gets its own copy of everything.
 *
 * Table message (root -> rank): "TABL", u32 nranks, nranks packed addresses.
 * At the deadline, the ranks that came get the verdict instead (bs_internal.h: "MISS", the
 * ranks that never came), so that each returns CHORUS_ERR_TIMEOUT naming them.
 */
#include "bootstrap/bs_internal.h"

#include "util/auth.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/sock.h"
#include "util/status.h"

#include <netinet/in.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int listen_fd;
    chorus_id_info_t info;
    char name[96]; /* "bootstrap root 1.2.3.4:5" for logs */
    uint64_t deadline_ns;
    chorus_bs_root_tab_t tab;
} root_t;

static void root_free(root_t *root)
{
    int r;

    if (root->tab.fds != NULL) {
        for (r = 0; r < root->tab.nranks; r++) {
            if (root->tab.fds[r] >= 0) close(root->tab.fds[r]);
        }
    }
    free(root->tab.fds);
    free(root->tab.table);
    if (root->listen_fd >= 0) close(root->listen_fd);
    OPENSSL_cleanse(root, sizeof(*root));
    free(root);
}

/* The first admitted hello sizes the tables (nranks is bounded by the caller). */
static int root_alloc(chorus_bs_root_tab_t *tab, uint32_t nranks)
{
    tab->fds = malloc(sizeof(int) * nranks);
    tab->table = calloc(1, 8 + (size_t)CHORUS_BS_ADDR_BYTES * nranks);
    if (tab->fds == NULL || tab->table == NULL) {
        CHORUS_WARN("bootstrap", "%s: no memory for %u ranks", tab->name, (unsigned)nranks);
        free(tab->fds);
        free(tab->table);
        tab->fds = NULL;
        tab->table = NULL;
        return 0;
    }
    tab->nranks = (int)nranks;
    for (int r = 0; r < tab->nranks; r++)
        tab->fds[r] = -1;
    memcpy(tab->table, "TABL", 4);
    chorus__bs_put32(tab->table + 4, nranks);
    return 1;
}

int chorus__bs_root_admit(chorus_bs_root_tab_t *tab, const chorus_bs_hello_t *h)
{
    if (h->purpose != CHORUS_BS_PURPOSE_ROOT || h->comm_id != tab->comm_id) {
        CHORUS_WARN("bootstrap",
                    "%s: dropped a peer with the right secret but another "
                    "communicator or purpose (a stale job?)",
                    tab->name);
        return 0;
    }
    if (h->nranks < 1 || h->nranks > CHORUS_BS_MAX_RANKS || h->rank >= h->nranks) {
        CHORUS_WARN("bootstrap", "%s: dropped rank %u of %u: out of range", tab->name,
                    (unsigned)h->rank, (unsigned)h->nranks);
        return 0;
    }
    /* Checked before the first hello fixes the rank count: a hello that is refused anyway
     * must not size the tables. */
    if (h->addr.ss_family != AF_INET && h->addr.ss_family != AF_INET6) {
        CHORUS_WARN("bootstrap", "%s: rank %u sent no address", tab->name, (unsigned)h->rank);
        return 0;
    }
    if (tab->nranks == 0 && !root_alloc(tab, h->nranks)) return 0;
    if ((int)h->nranks != tab->nranks) {
        CHORUS_WARN("bootstrap", "%s: rank %u says there are %u ranks, but earlier ranks said %d",
                    tab->name, (unsigned)h->rank, (unsigned)h->nranks, tab->nranks);
        return 0;
    }
    if (tab->fds[h->rank] >= 0) {
        CHORUS_WARN("bootstrap", "%s: rank %u joined twice; the second is dropped", tab->name,
                    (unsigned)h->rank);
        return 0;
    }
    chorus__bs_pack_addr(&h->addr, tab->table + 8 + (size_t)CHORUS_BS_ADDR_BYTES * h->rank);
    return 1;
}

size_t chorus__bs_miss_pack(const chorus_bs_root_tab_t *tab, uint8_t out[CHORUS_BS_MISS_MAX_BYTES])
{
    uint32_t missing = 0;
    size_t len = 12;

    memcpy(out, "MISS", 4);
    chorus__bs_put32(out + 4, (uint32_t)tab->nranks);
    for (int r = 0; r < tab->nranks; r++) {
        if (tab->fds[r] >= 0) continue;
        if (missing < CHORUS_BS_MISS_LIST) {
            chorus__bs_put32(out + len, (uint32_t)r);
            len += 4;
        }
        missing++;
    }
    chorus__bs_put32(out + 8, missing);
    return len;
}

chorus_status_t chorus__bs_miss_describe(const uint8_t *body, size_t len, int nranks, char *text,
                                         size_t cap)
{
    uint32_t missing, listed;
    size_t used;

    if (len < 4 || nranks < 1) return chorus__error(CHORUS_ERR_REMOTE, "a verdict too short");
    missing = chorus__bs_get32(body);
    listed = missing < CHORUS_BS_MISS_LIST ? missing : CHORUS_BS_MISS_LIST;
    if (missing == 0 || missing >= (uint32_t)nranks || len != 4 + 4 * (size_t)listed)
        return chorus__error(CHORUS_ERR_REMOTE,
                             "a malformed verdict (%u of %d ranks missing, %zu bytes)",
                             (unsigned)missing, nranks, len);
    used = (size_t)snprintf(text, cap, "%d of %d ranks came before the root's deadline; never "
                            "came: rank%s", nranks - (int)missing, nranks,
                            missing > 1 ? "s" : "");
    for (uint32_t i = 0; i < listed; i++) {
        uint32_t r = chorus__bs_get32(body + 4 + 4 * (size_t)i);
        if (r >= (uint32_t)nranks || (i > 0 && r <= chorus__bs_get32(body + 4 * (size_t)i)))
            return chorus__error(CHORUS_ERR_REMOTE, "a malformed verdict (rank %u listed "
                                 "after %u, of %d)", (unsigned)r,
                                 i > 0 ? (unsigned)chorus__bs_get32(body + 4 * (size_t)i) : 0u,
                                 nranks);
        if (used < cap)
            used += (size_t)snprintf(text + used, cap - used, "%s %u", i > 0 ? "," : "",
                                     (unsigned)r);
    }
    if (missing > listed && used < cap)
        snprintf(text + used, cap - used, " (and %u more)", (unsigned)(missing - listed));
    return CHORUS_SUCCESS;
}

/* Root threads of this process sending their verdicts (chorus__bs_root_verdicts_settle). */
static atomic_int verdicts_in_flight;

/* At the deadline: every rank that came hears which never did. Best effort, briefly: the
 * deadline has passed, and a rank that stopped waiting has closed its end. */
static void root_send_verdict(root_t *root)
{
    uint8_t msg[CHORUS_BS_MISS_MAX_BYTES];
    size_t len;
    uint64_t until = chorus__deadline_after(1.0);

    if (root->tab.nranks == 0) return;
    atomic_fetch_add(&verdicts_in_flight, 1);
    len = chorus__bs_miss_pack(&root->tab, msg);
    for (int r = 0; r < root->tab.nranks; r++) {
        if (root->tab.fds[r] >= 0 &&
            chorus__sock_send_all(root->tab.fds[r], msg, len, until) != CHORUS_SUCCESS)
            CHORUS_INFO("bootstrap", "%s: could not tell rank %d who is missing: %s",
                        root->name, r, chorus_last_error());
    }
    atomic_fetch_sub(&verdicts_in_flight, 1);
}

void chorus__bs_root_verdicts_settle(double max_s)
{
    uint64_t until = chorus__deadline_after(max_s);

    while (atomic_load(&verdicts_in_flight) > 0 && !chorus__deadline_passed(until))
        usleep(1000);
}

/* Collects the hellos. Returns 0 once all ranks arrived, -1 when giving up. */
static int root_gather(root_t *root, chorus_acceptor_t *acc)
{
    uint8_t buf[CHORUS_BS_HELLO_BYTES];
    chorus_bs_root_tab_t *tab = &root->tab;
    chorus_bs_hello_t h;
    size_t len;
    int fd;

    while (tab->nranks == 0 || tab->arrived < tab->nranks) {
        chorus_status_t status =
            chorus__acceptor_accept(acc, buf, sizeof(buf), &len, root->deadline_ns, NULL, &fd);
        if (status != CHORUS_SUCCESS) {
            CHORUS_WARN("bootstrap", "%s: giving up with %d of %d ranks arrived: %s", root->name,
                        tab->arrived, tab->nranks, chorus_last_error());
            return -1;
        }
        if (chorus__bs_hello_unpack(buf, len, &h) != CHORUS_SUCCESS ||
            !chorus__bs_root_admit(tab, &h)) {
            close(fd);
            continue;
        }
        tab->fds[h.rank] = fd;
        tab->arrived++;
        CHORUS_TRACE("bootstrap", "%s: rank %u arrived (%d of %d)", root->name, (unsigned)h.rank,
                     tab->arrived, tab->nranks);
    }
    return 0;
}

static void *root_main(void *arg)
{
    root_t *root = arg;
    chorus_acceptor_t *acc = NULL;
    size_t table_len;
    int r;

    if (chorus__acceptor_create(root->listen_fd, root->info.secret, root->name, &acc) !=
        CHORUS_SUCCESS) {
        CHORUS_WARN("bootstrap", "%s: cannot start: %s", root->name, chorus_last_error());
        goto out;
    }
    if (root_gather(root, acc) != 0) {
        if (chorus__deadline_passed(root->deadline_ns)) root_send_verdict(root);
        goto out;
    }
    /* Everyone is here: nobody else may join, so the listener goes before the sends. */
    chorus__acceptor_destroy(acc);
    acc = NULL;
    close(root->listen_fd);
    root->listen_fd = -1;
    /* This detached thread is done with libcrypto (the nonces of the handshakes): its
     * per-thread state goes now, before the table lets the ranks go on (a process that
     * exits while the thread is still ending would otherwise leave it behind). */
    OPENSSL_thread_stop();
    table_len = 8 + (size_t)CHORUS_BS_ADDR_BYTES * root->tab.nranks;
    for (r = 0; r < root->tab.nranks; r++) {
        if (chorus__sock_send_all(root->tab.fds[r], root->tab.table, table_len,
                                  root->deadline_ns) != CHORUS_SUCCESS) {
            CHORUS_WARN("bootstrap", "%s: could not send the table to rank %d: %s", root->name, r,
                        chorus_last_error());
        }
    }
    CHORUS_INFO("bootstrap", "%s: all %d ranks met", root->name, root->tab.nranks);
out:
    chorus__acceptor_destroy(acc);
    root_free(root);
    OPENSSL_thread_stop();
    return NULL;
}

chorus_status_t chorus__bs_root_spawn(int listen_fd, const chorus_id_info_t *info)
{
    pthread_attr_t attr;
    pthread_t tid;
    root_t *root;
    char text[80];
    int rc;

    root = calloc(1, sizeof(*root));
    if (root == NULL) {
        close(listen_fd);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "bootstrap: root service allocation");
    }
    root->listen_fd = listen_fd;
    root->info = *info;
    root->tab.comm_id = info->comm_id;
    root->tab.name = root->name;
    root->deadline_ns = chorus__deadline_after(chorus__config_seconds("CHORUS_TIMEOUT", 300.0));
    snprintf(root->name, sizeof(root->name), "bootstrap root %s",
             chorus__sock_addr_str(&info->root_addr, text, sizeof(text)));
    if (pthread_attr_init(&attr) != 0) {
        root_free(root);
        return chorus__error(CHORUS_ERR_SYSTEM, "bootstrap: pthread_attr_init");
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&tid, &attr, root_main, root);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        root_free(root);
        return chorus__error_errno(CHORUS_ERR_SYSTEM, rc, "bootstrap: starting the root thread");
    }
    return CHORUS_SUCCESS;
}

/* The wildcard address of addr's family, keeping its port. */
static void root_any_addr(struct sockaddr_storage *addr)
{
    if (addr->ss_family == AF_INET6) {
        ((struct sockaddr_in6 *)addr)->sin6_addr = in6addr_any;
        ((struct sockaddr_in6 *)addr)->sin6_scope_id = 0;
    } else {
        ((struct sockaddr_in *)addr)->sin_addr.s_addr = htonl(INADDR_ANY);
    }
}

chorus_status_t chorus__bootstrap_new_id(const struct sockaddr_storage *listen_addr,
                                         chorus_unique_id_t *id_p)
{
    struct sockaddr_storage addr;
    chorus_id_info_t info;
    chorus_unique_id_t id;
    chorus_status_t status;
    uint8_t comm[8];
    int fd;

    if (listen_addr != NULL) {
        addr = *listen_addr;
    } else {
        status = chorus__sock_pick_local_addr(NULL, &addr);
        if (status != CHORUS_SUCCESS) return status;
    }
    memset(&info, 0, sizeof(info));
    CHORUS_CHECK_GOTO(chorus__random_bytes(info.secret, sizeof(info.secret)), err);
    CHORUS_CHECK_GOTO(chorus__random_bytes(comm, sizeof(comm)), err);
    info.comm_id = chorus__bs_get64(comm);
    CHORUS_CHECK_GOTO(chorus__sock_listen(&addr, SOMAXCONN, &fd, &info.root_addr), err);
    CHORUS_CHECK_GOTO(chorus__id_encode(&info, &id), err_close);
    /* The thread owns fd from here on, also when it fails to start. */
    CHORUS_CHECK_GOTO(chorus__bs_root_spawn(fd, &info), err);
    *id_p = id;
    OPENSSL_cleanse(&info, sizeof(info));
    return CHORUS_SUCCESS;

err_close:
    close(fd);
err:
    OPENSSL_cleanse(&info, sizeof(info));
    return chorus__error_context(status, "bootstrap: making a unique id");
}

chorus_status_t chorus__bootstrap_root_start(const chorus_unique_id_t *id, int any_addr)
{
    struct sockaddr_storage addr;
    chorus_id_info_t info;
    chorus_status_t status;
    int fd;

    CHORUS_CHECK_GOTO(chorus__id_decode(id, &info), err);
    addr = info.root_addr;
    if (any_addr) root_any_addr(&addr);
    CHORUS_CHECK_GOTO(chorus__sock_listen(&addr, SOMAXCONN, &fd, NULL), err);
    CHORUS_CHECK_GOTO(chorus__bs_root_spawn(fd, &info), err);
    OPENSSL_cleanse(&info, sizeof(info));
    return CHORUS_SUCCESS;

err:
    OPENSSL_cleanse(&info, sizeof(info));
    return chorus__error_context(status, "bootstrap: starting the root service");
}
