/*
 * Registered device memory: chorus_mem_alloc_device's windows (dev_win.h says what they
 * are). An allocation runs in four steps, every rank taking part in each whatever happened
 * before, so none is left waiting:
 *
 *   1. vmm_alloc (exported as a descriptor), and a datagram socket bound to this rank's
 *      abstract name for the window;
 *   2. an allgather of each rank's outcome and granted size (a mismatch fails all);
 *   3. each rank sends its descriptor to every peer and receives theirs, checking each
 *      message's HMAC, and maps them (vmm_import);
 *   4. an allgather of the outcome: all succeed or all unmap.
 *
 * Why datagrams: a descriptor crosses processes only as SCM_RIGHTS on a Unix socket, and an
 * unconnected datagram socket needs no accept or connection order between the ranks: each
 * sends to the others' names and reads its own queue, without blocking (a peer's queue may
 * be full while it is itself sending), until every peer's message has come or the deadline.
 */
#include "gpu/dev_win.h"

#include "bootstrap/bootstrap.h"
#include "util/auth.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define DW_MAGIC 0x4e49575645445243ULL /* "CRDEVWIN" */

typedef struct {
    uint32_t id;
    size_t bytes;  /* granted: the same on every rank */
    void **base;   /* nlocal: each local rank's window as mapped here */
} dev_win_t;

struct chorus_dev_wins {
    chorus_dev_win_params_t p;
    int *local_ranks;
    dev_win_t *wins;
    int nwins, cap;
    uint32_t serial;
    _Atomic uint64_t calls, bytes_read; /* chorus__dev_win_note */
};

/* The message that carries a descriptor (the descriptor itself rides as SCM_RIGHTS). */
typedef struct {
    uint64_t magic;
    uint64_t comm_id;
    uint32_t id;
    int32_t from, to; /* local indices */
    uint32_t pad;
    uint64_t bytes;
    uint8_t mac[32]; /* HMAC(secret, the fields above) */
} dw_msg_t;

/* What the allgathers carry. */
typedef struct {
    int32_t status;
    uint32_t id;
    uint64_t bytes; /* granted */
} dw_block_t;

chorus_status_t chorus__dev_wins_create(const chorus_dev_win_params_t *params,
                                        chorus_dev_wins_t **set_p)
{
    chorus_dev_wins_t *set;

    if (params->gpu == NULL || params->nlocal < 1 || params->local_index < 0 ||
        params->local_index >= params->nlocal || (params->nlocal > 1 && params->bs == NULL))
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: device windows: bad "
                             "parameters", params->rank);
    set = calloc(1, sizeof *set);
    if (set != NULL) set->local_ranks = malloc((size_t)params->nlocal * sizeof(int));
    if (set == NULL || set->local_ranks == NULL) {
        free(set);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: device windows: no memory",
                             params->rank);
    }
    set->p = *params;
    for (int r = 0; r < params->nlocal; r++)
        set->local_ranks[r] = params->local_ranks != NULL ? params->local_ranks[r] : r;
    set->p.local_ranks = set->local_ranks;
    *set_p = set;
    return CHORUS_SUCCESS;
}

static void dw_unmap(const chorus_dev_wins_t *set, dev_win_t *w)
{
    if (w->base == NULL) return;
    for (int r = 0; r < set->p.nlocal; r++)
        if (w->base[r] != NULL) (void)set->p.gpu->vmm_free(w->base[r]);
    free(w->base);
    w->base = NULL;
}

void chorus__dev_wins_destroy(chorus_dev_wins_t *set)
{
    if (set == NULL) return;
    for (int i = 0; i < set->nwins; i++) dw_unmap(set, &set->wins[i]);
    free(set->wins);
    free(set->local_ranks);
    free(set);
}

static chorus_status_t dw_mac(const chorus_dev_wins_t *set, dw_msg_t *m, uint8_t out[32])
{
    uint8_t msg[9 + 8 + 4 + 4 + 4 + 8];
    unsigned out_len = 0;

    memcpy(msg, "chorus-dw", 9);
    memcpy(msg + 9, &m->comm_id, 8);
    memcpy(msg + 17, &m->id, 4);
    memcpy(msg + 21, &m->from, 4);
    memcpy(msg + 25, &m->to, 4);
    memcpy(msg + 29, &m->bytes, 8);
    if (HMAC(EVP_sha256(), set->p.secret, CHORUS_SECRET_BYTES, msg, sizeof msg, out, &out_len) ==
            NULL ||
        out_len != 32)
        return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: device windows: HMAC failed",
                             set->p.rank);
    return CHORUS_SUCCESS;
}

/* The abstract socket name of local rank r for window id. */
static socklen_t dw_addr(const chorus_dev_wins_t *set, uint32_t id, int r, struct sockaddr_un *a)
{
    int len;

    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    len = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "chorus-dw-%016" PRIx64 "-%u-%d",
                   set->p.comm_id, id, r);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

static chorus_status_t dw_send(const chorus_dev_wins_t *set, int sock, uint32_t id, int to,
                               size_t bytes, int fd, int *sent_p)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct sockaddr_un addr;
    socklen_t alen = dw_addr(set, id, to, &addr);
    dw_msg_t m;
    struct iovec iov = {&m, sizeof m};
    struct msghdr h;
    struct cmsghdr *c;
    chorus_status_t status;

    memset(&m, 0, sizeof m);
    m.magic = DW_MAGIC;
    m.comm_id = set->p.comm_id;
    m.id = id;
    m.from = set->p.local_index;
    m.to = to;
    m.bytes = bytes;
    status = dw_mac(set, &m, m.mac);
    if (status != CHORUS_SUCCESS) return status;
    memset(&h, 0, sizeof h);
    memset(&ctl, 0, sizeof ctl);
    h.msg_name = &addr;
    h.msg_namelen = alen;
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctl.buf;
    h.msg_controllen = sizeof ctl.buf;
    c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sock, &h, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof m) {
        *sent_p = 1;
        return CHORUS_SUCCESS;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return CHORUS_SUCCESS;
    return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: mem_alloc_device: sending "
                               "window %u to rank %d", set->p.rank, id, set->local_ranks[to]);
}

/* Takes one message off sock if there is one: a peer's descriptor for window id into
 * fds[from]. Anything else (a stranger's, a forged or stale message) is dropped, with any
 * descriptor it carried closed, and counted in *dropped_p. */
static void dw_recv(const chorus_dev_wins_t *set, int sock, uint32_t id, size_t bytes, int *fds,
                    int *got_p, int *dropped_p)
{
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    dw_msg_t m;
    struct iovec iov = {&m, sizeof m};
    struct msghdr h;
    struct cmsghdr *c;
    int fd = -1, nfds = 0;
    uint8_t mac[32];
    ssize_t got;

    memset(&h, 0, sizeof h);
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctl.buf;
    h.msg_controllen = sizeof ctl.buf;
    got = recvmsg(sock, &h, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0) return;
    for (c = CMSG_FIRSTHDR(&h); c != NULL; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
            int one;
            memcpy(&one, CMSG_DATA(c) + k * sizeof(int), sizeof one);
            if (nfds++ == 0) fd = one;
            else close(one);
        }
    }
    if (got != (ssize_t)sizeof m || (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nfds != 1 ||
        m.magic != DW_MAGIC || m.comm_id != set->p.comm_id || m.id != id ||
        m.to != set->p.local_index || m.from < 0 || m.from >= set->p.nlocal ||
        m.from == set->p.local_index || m.bytes != bytes || fds[m.from] >= 0 ||
        dw_mac(set, &m, mac) != CHORUS_SUCCESS || CRYPTO_memcmp(mac, m.mac, sizeof mac) != 0) {
        (*dropped_p)++;
        if (fd >= 0) close(fd);
        return;
    }
    fds[m.from] = fd;
    (*got_p)++;
}

/* Step 3: my descriptor to every peer, theirs to me, until all arrived or the deadline. */
static chorus_status_t dw_exchange(const chorus_dev_wins_t *set, int sock, uint32_t id,
                                   size_t bytes, int my_fd, int *fds)
{
    const int n = set->p.nlocal, me = set->p.local_index;
    /* A comm without a deadline (timeout 0) waits as long as its bootstrap would. */
    uint64_t deadline = set->p.timeout_s > 0 ? chorus__now_ns() + (uint64_t)(set->p.timeout_s * 1e9)
                                             : UINT64_MAX;
    int *sent = calloc((size_t)n, sizeof *sent), nsent = 1, got = 0, dropped = 0;
    chorus_status_t status = CHORUS_SUCCESS;

    if (sent == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_alloc_device: no memory",
                             set->p.rank);
    sent[me] = 1;
    while (status == CHORUS_SUCCESS && (nsent < n || got < n - 1)) {
        struct pollfd pfd = {sock, POLLIN, 0};
        for (int r = 0; r < n && status == CHORUS_SUCCESS; r++) {
            if (sent[r]) continue;
            status = dw_send(set, sock, id, r, bytes, my_fd, &sent[r]);
            nsent += sent[r];
        }
        while (status == CHORUS_SUCCESS && got < n - 1 && poll(&pfd, 1, 0) > 0)
            dw_recv(set, sock, id, bytes, fds, &got, &dropped);
        if (status != CHORUS_SUCCESS || (nsent == n && got == n - 1)) break;
        if (chorus__now_ns() > deadline) {
            int missing = -1;
            for (int r = 0; r < n && missing < 0; r++)
                if (r != me && fds[r] < 0) missing = r;
            status = chorus__error(CHORUS_ERR_TIMEOUT, "rank %d: mem_alloc_device: window %u: "
                                   "%s rank %d within %.1f s", set->p.rank, id,
                                   nsent < n ? "could not send to" : "nothing came from",
                                   set->local_ranks[missing >= 0 ? missing : 0],
                                   set->p.timeout_s);
            break;
        }
        (void)poll(&pfd, 1, 1);
    }
    free(sent);
    if (dropped > 0)
        CHORUS_WARN("gpu", "rank %d: mem_alloc_device: dropped %d message(s) on window %u's "
                    "socket that were not a peer's (a stranger's, or forged)", set->p.rank,
                    dropped, id);
    return status;
}

/* Steps 1 and 3 for this rank: its memory, and every peer's mapped. */
static chorus_status_t dw_make(chorus_dev_wins_t *set, dev_win_t *w, size_t bytes,
                               dw_block_t *blocks)
{
    const int n = set->p.nlocal, me = set->p.local_index;
    int my_fd = -1, sock = -1, *fds = NULL;
    struct sockaddr_un addr;
    socklen_t alen = dw_addr(set, w->id, me, &addr);
    chorus_status_t status, all;
    size_t granted = 0;

    status = set->p.gpu->vmm_alloc(bytes, &w->base[me], &granted, n > 1 ? &my_fd : NULL);
    if (status != CHORUS_SUCCESS)
        status = chorus__gpu_error(status, "rank %d: mem_alloc_device: %zu bytes", set->p.rank,
                                   bytes);
    if (status == CHORUS_SUCCESS && n > 1) {
        sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (sock < 0 || bind(sock, (struct sockaddr *)&addr, alen) != 0)
            status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "rank %d: mem_alloc_device: "
                                         "a socket for window %u", set->p.rank, w->id);
    }
    if (n == 1) {
        w->bytes = granted;
        return status;
    }
    /* Step 2. */
    blocks[me] = (dw_block_t){(int32_t)status, w->id, granted};
    all = chorus__bootstrap_allgather(set->p.bs, blocks, sizeof *blocks);
    for (int r = 0; r < n && all == CHORUS_SUCCESS && status == CHORUS_SUCCESS; r++) {
        if (blocks[r].status != CHORUS_SUCCESS)
            status = chorus__error(CHORUS_ERR_REMOTE, "rank %d: mem_alloc_device: rank %d could "
                                   "not make its window", set->p.rank, set->local_ranks[r]);
        else if (blocks[r].bytes != granted || blocks[r].id != w->id)
            status = chorus__error(CHORUS_ERR_MISMATCH, "rank %d: mem_alloc_device: window %u "
                                   "of %zu bytes here, rank %d asks window %u of %" PRIu64
                                   " bytes", set->p.rank, w->id, granted, set->local_ranks[r],
                                   blocks[r].id, blocks[r].bytes);
    }
    if (all != CHORUS_SUCCESS) status = all;
    w->bytes = granted;
    if (status == CHORUS_SUCCESS) {
        fds = malloc((size_t)n * sizeof *fds);
        if (fds == NULL)
            status = chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_alloc_device: no memory",
                                   set->p.rank);
        for (int r = 0; fds != NULL && r < n; r++) fds[r] = -1;
    }
    if (status == CHORUS_SUCCESS) status = dw_exchange(set, sock, w->id, granted, my_fd, fds);
    for (int r = 0; status == CHORUS_SUCCESS && r < n; r++) {
        if (r == me) continue;
        status = set->p.gpu->vmm_import(fds[r], granted, &w->base[r]);
        if (status != CHORUS_SUCCESS)
            status = chorus__gpu_error(status, "rank %d: mem_alloc_device: mapping rank %d's "
                                       "window %u", set->p.rank, set->local_ranks[r], w->id);
    }
    for (int r = 0; fds != NULL && r < n; r++)
        if (fds[r] >= 0) close(fds[r]);
    free(fds);
    if (my_fd >= 0) close(my_fd);
    if (sock >= 0) close(sock);
    return status;
}

chorus_status_t chorus__dev_win_alloc(chorus_dev_wins_t *set, size_t bytes, void **ptr_p)
{
    const int n = set->p.nlocal, me = set->p.local_index;
    dev_win_t w = {0};
    dw_block_t *blocks;
    chorus_status_t status, mine;
    int bad = -1;

    if (set->p.gpu->vmm_alloc == NULL || set->p.gpu->vmm_import == NULL ||
        set->p.gpu->vmm_free == NULL)
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: mem_alloc_device: the %s plugin "
                             "has no shareable device memory", set->p.rank, set->p.gpu->name);
    if (set->nwins == set->cap) {
        int cap = set->cap ? set->cap * 2 : 8;
        dev_win_t *grown = realloc(set->wins, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_alloc_device: no memory",
                                 set->p.rank);
        set->wins = grown;
        set->cap = cap;
    }
    blocks = calloc((size_t)n, sizeof *blocks);
    w.base = calloc((size_t)n, sizeof *w.base);
    if (blocks == NULL || w.base == NULL) {
        free(blocks);
        free(w.base);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_alloc_device: no memory",
                             set->p.rank);
    }
    w.id = set->serial;
    mine = dw_make(set, &w, bytes, blocks);
    status = mine;
    if (n > 1) { /* step 4 */
        blocks[me] = (dw_block_t){(int32_t)mine, w.id, w.bytes};
        status = chorus__bootstrap_allgather(set->p.bs, blocks, sizeof *blocks);
        for (int r = 0; r < n && status == CHORUS_SUCCESS; r++)
            if (blocks[r].status != CHORUS_SUCCESS && bad < 0) bad = r;
        if (status == CHORUS_SUCCESS) status = mine;
        if (status == CHORUS_SUCCESS && bad >= 0)
            status = chorus__error(CHORUS_ERR_REMOTE, "rank %d: mem_alloc_device: rank %d could "
                                   "not map every window (%s)", set->p.rank,
                                   set->local_ranks[bad],
                                   chorus_status_string((chorus_status_t)blocks[bad].status));
    }
    free(blocks);
    if (status != CHORUS_SUCCESS) {
        dw_unmap(set, &w);
        return status;
    }
    set->serial++;
    set->wins[set->nwins++] = w;
    *ptr_p = w.base[me];
    CHORUS_INFO("gpu", "rank %d: device window %u of %zu bytes mapped by %d rank(s)", set->p.rank,
                w.id, w.bytes, n);
    return CHORUS_SUCCESS;
}

static int dw_index(const chorus_dev_wins_t *set, const void *ptr)
{
    for (int i = 0; set != NULL && i < set->nwins; i++)
        if (set->wins[i].base[set->p.local_index] == ptr) return i;
    return -1;
}

int chorus__dev_win_owns(const chorus_dev_wins_t *set, const void *ptr)
{
    return ptr != NULL && dw_index(set, ptr) >= 0;
}

chorus_status_t chorus__dev_win_free(chorus_dev_wins_t *set, void *ptr)
{
    const int n = set->p.nlocal;
    int i = dw_index(set, ptr);
    dw_block_t *blocks;
    chorus_status_t status = CHORUS_SUCCESS;

    if (i < 0)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "rank %d: mem_free: %p is not a "
                             "window of chorus_mem_alloc_device on this communicator (or was "
                             "freed)", set->p.rank, ptr);
    if (n > 1) { /* every rank frees the same window: compare the numbers */
        blocks = calloc((size_t)n, sizeof *blocks);
        if (blocks == NULL)
            return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: mem_free: no memory",
                                 set->p.rank);
        blocks[set->p.local_index] = (dw_block_t){0, set->wins[i].id, set->wins[i].bytes};
        status = chorus__bootstrap_allgather(set->p.bs, blocks, sizeof *blocks);
        for (int r = 0; r < n && status == CHORUS_SUCCESS; r++)
            if (blocks[r].id != set->wins[i].id)
                status = chorus__error(CHORUS_ERR_MISMATCH, "rank %d: mem_free: window %u here, "
                                       "rank %d frees window %u", set->p.rank, set->wins[i].id,
                                       set->local_ranks[r], blocks[r].id);
        free(blocks);
        if (status != CHORUS_SUCCESS) return status;
    }
    dw_unmap(set, &set->wins[i]);
    set->wins[i] = set->wins[--set->nwins];
    return CHORUS_SUCCESS;
}

int chorus__dev_win_find(const chorus_dev_wins_t *set, const void *ptr, size_t bytes,
                         uint32_t *id_p, uint64_t *off_p)
{
    const uint8_t *c = ptr;

    for (int i = 0; set != NULL && c != NULL && i < set->nwins; i++) {
        const uint8_t *base = set->wins[i].base[set->p.local_index];
        if (c < base || bytes > set->wins[i].bytes ||
            (size_t)(c - base) > set->wins[i].bytes - bytes)
            continue;
        *id_p = set->wins[i].id;
        *off_p = (uint64_t)(c - base);
        return 1;
    }
    return 0;
}

void *chorus__dev_win_at(const chorus_dev_wins_t *set, uint32_t id, int r, uint64_t off,
                         size_t bytes)
{
    if (set == NULL || r < 0 || r >= set->p.nlocal) return NULL;
    for (int i = 0; i < set->nwins; i++) {
        const dev_win_t *w = &set->wins[i];
        if (w->id != id) continue;
        if (bytes > w->bytes || off > w->bytes - bytes) return NULL;
        return (uint8_t *)w->base[r] + off;
    }
    return NULL;
}

int chorus__dev_win_count(const chorus_dev_wins_t *set)
{
    return set != NULL ? set->nwins : 0;
}

void chorus__dev_win_note(chorus_dev_wins_t *set, uint64_t bytes)
{
    atomic_fetch_add(&set->calls, 1);
    atomic_fetch_add(&set->bytes_read, bytes);
}

void chorus__dev_win_stats(const chorus_dev_wins_t *set, uint64_t *calls_p, uint64_t *bytes_p)
{
    *calls_p = set != NULL ? atomic_load(&set->calls) : 0;
    *bytes_p = set != NULL ? atomic_load(&set->bytes_read) : 0;
}
