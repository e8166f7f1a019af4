/*
 * The shrink's connections: links to the other survivors' bootstrap listeners (each pair may
 * hold two, one opened by either side), authenticated with the communicator's secret, the
 * frames on them, and the acceptor thread. See shrink.c for the protocol they carry.
 */
#include "core/shrink_int.h"

void shrink__close_peer(sk_peer_t *pp)
{
    if (pp->out_fd >= 0) close(pp->out_fd);
    if (pp->in_fd >= 0) close(pp->in_fd);
    pp->out_fd = pp->in_fd = -1;
    pp->out_state = SK_NONE;
    for (int k = 0; k < 2; k++) pp->rlen[k] = 0;
    pp->plen = 0;
}

void shrink__mark_dead(shrink_t *s, int p)
{
    sk_peer_t *pp = &s->peers[p];

    if (pp->dead) return;
    pp->dead = 1;
    shrink__close_peer(pp);
    s->suspect[p] = 1;
    if (s->ag != NULL) chorus__agree_on_dead(s->ag, p);
    CHORUS_INFO("shrink", "rank %d: rank %d is gone", s->me, p);
}

/* ---- connections ---- */

static void sk_hello(const shrink_t *s, uint8_t out[SK_HELLO_BYTES])
{
    memcpy(out, SK_HELLO_MAGIC, 4);
    put32(out + 4, (uint32_t)(s->comm->comm_id >> 32));
    put32(out + 8, (uint32_t)s->comm->comm_id);
    put32(out + 12, (uint32_t)s->me);
    put32(out + 16, (uint32_t)s->n);
}

/* p refused a connection: dead, once what it may have sent before it left was read (the
 * grace; shrink__poll marks it when that has passed). */
static void sk_refused(shrink_t *s, int p)
{
    if (s->peers[p].refused_ns == 0) s->peers[p].refused_ns = chorus__now_ns();
}

/* Starts a connection to p's listener; a refusal means p's process is gone. */
static void sk_connect_start(shrink_t *s, int p)
{
    sk_peer_t *pp = &s->peers[p];
    struct sockaddr_storage addr;
    socklen_t alen;
    int fd, one = 1;

    if (chorus__bootstrap_peer_addr(s->comm->bs, p, &addr) != CHORUS_SUCCESS) {
        shrink__mark_dead(s, p);
        return;
    }
    alen = addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return; /* tried again at the next message */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)&addr, alen) != 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        if (err == ECONNREFUSED || err == ECONNRESET || err == ENETUNREACH ||
            err == EHOSTUNREACH)
            sk_refused(s, p);
        return;
    }
    pp->out_fd = fd;
    pp->out_state = SK_CONNECTING;
    CHORUS_TRACE("shrink", "rank %d: connecting to rank %d", s->me, p);
}

/* Appends a frame for p; sent at once where the link is ready. */
void shrink__queue_frame(shrink_t *s, int p, int kind, const void *payload, size_t len)
{
    sk_peer_t *pp = &s->peers[p];
    uint8_t *grown;

    if (pp->dead) return;
    grown = realloc(pp->pend, pp->plen + 5 + len);
    if (grown == NULL) {
        shrink__mark_dead(s, p); /* no memory: the agreement goes on without it, or times out */
        return;
    }
    pp->pend = grown;
    put32(pp->pend + pp->plen, (uint32_t)(len + 1));
    pp->pend[pp->plen + 4] = (uint8_t)kind;
    memcpy(pp->pend + pp->plen + 5, payload, len);
    pp->plen += 5 + len;
}

/* Sends what is pending on p's ready link (the one it opened if ours is not ready). */
void shrink__flush_peer(shrink_t *s, int p)
{
    sk_peer_t *pp = &s->peers[p];
    int fd = pp->out_state == SK_READY ? pp->out_fd : pp->in_fd;

    if (pp->dead || pp->plen == 0) return;
    if (fd < 0) {
        if (pp->out_state == SK_NONE) sk_connect_start(s, p);
        return;
    }
    /* Frames are small and the peer reads them at once: a short blocking send. */
    if (chorus__sock_send_all(fd, pp->pend, pp->plen, chorus__deadline_after(SK_AUTH_S)) !=
        CHORUS_SUCCESS) {
        shrink__mark_dead(s, p);
        return;
    }
    pp->plen = 0;
}

/* Moves our connection to p along: connected, challenged, authenticated. */
static void sk_progress_out(shrink_t *s, int p, short revents)
{
    sk_peer_t *pp = &s->peers[p];
    uint8_t hello[SK_HELLO_BYTES];

    if (pp->out_state == SK_CONNECTING && (revents & (POLLOUT | POLLERR | POLLHUP))) {
        int err = 0;
        socklen_t elen = sizeof err;
        if (getsockopt(pp->out_fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
        if (err == ECONNREFUSED) {
            close(pp->out_fd);
            pp->out_fd = -1;
            pp->out_state = SK_NONE;
            sk_refused(s, p);
            return;
        }
        if (err != 0) {
            shrink__mark_dead(s, p);
            return;
        }
        pp->out_state = SK_CHALLENGE;
        return;
    }
    if (pp->out_state == SK_CHALLENGE && (revents & (POLLIN | POLLERR | POLLHUP))) {
        sk_hello(s, hello);
        if (chorus__auth_client(pp->out_fd, chorus__bootstrap_id_info(s->comm->bs)->secret, hello,
                                sizeof hello, chorus__deadline_after(SK_AUTH_S)) !=
            CHORUS_SUCCESS) {
            shrink__mark_dead(s, p);
            return;
        }
        pp->out_state = SK_READY;
        CHORUS_TRACE("shrink", "rank %d: connected to rank %d", s->me, p);
        shrink__flush_peer(s, p);
    }
}

/* The acceptor thread (strangers are refused inside chorus__acceptor_accept). */
static void *sk_acceptor_main(void *arg)
{
    shrink_t *s = arg;
    uint8_t hello[CHORUS_AUTH_HELLO_MAX];
    size_t len;
    int fd;

    while (!atomic_load(&s->acceptor_stop)) {
        uint64_t id;
        uint32_t r;
        if (chorus__acceptor_accept(s->acc, hello, sizeof hello, &len,
                                    s->deadline_ns, &s->acceptor_stop,
                                    &fd) != CHORUS_SUCCESS)
            continue;
        if (len != SK_HELLO_BYTES || memcmp(hello, SK_HELLO_MAGIC, 4) != 0) goto drop;
        id = (uint64_t)get32(hello + 4) << 32 | get32(hello + 8);
        r = get32(hello + 12);
        if (id != s->comm->comm_id || get32(hello + 16) != (uint32_t)s->n || r >= (uint32_t)s->n ||
            (int)r == s->me)
            goto drop;
        (void)chorus__sock_set_nonblocking(fd, 1);
        pthread_mutex_lock(&s->accepted_lock);
        if (s->accepted_fd[r] >= 0) close(s->accepted_fd[r]);
        s->accepted_fd[r] = fd;
        pthread_mutex_unlock(&s->accepted_lock);
        continue;
    drop:
        CHORUS_WARN("shrink", "rank %d: dropped an authenticated connection that is not a "
                    "survivor of this communicator", s->me);
        close(fd);
    }
    return NULL;
}

/* Takes the connections the acceptor thread authenticated. */
void shrink__accept(shrink_t *s)
{
    pthread_mutex_lock(&s->accepted_lock);
    for (int r = 0; r < s->n; r++) {
        int fd = s->accepted_fd[r];
        if (fd < 0) continue;
        s->accepted_fd[r] = -1;
        if (s->peers[r].dead) { /* gone for us; it learns from the closed socket */
            close(fd);
            continue;
        }
        if (s->peers[r].in_fd >= 0) close(s->peers[r].in_fd);
        s->peers[r].in_fd = fd;
        s->peers[r].rlen[1] = 0;
    }
    pthread_mutex_unlock(&s->accepted_lock);
}

/* Reads what p sent on link k; 0, or -1 when the link ended. */
int shrink__read(sk_peer_t *pp, int k)
{
    int fd = k == 0 ? pp->out_fd : pp->in_fd;

    for (;;) {
        ssize_t got;
        if (pp->rcap[k] - pp->rlen[k] < 512) {
            size_t cap = pp->rcap[k] * 2 + 1024;
            uint8_t *grown = realloc(pp->rbuf[k], cap);
            if (grown == NULL) return -1;
            pp->rbuf[k] = grown;
            pp->rcap[k] = cap;
        }
        got = recv(fd, pp->rbuf[k] + pp->rlen[k], pp->rcap[k] - pp->rlen[k], MSG_DONTWAIT);
        if (got > 0) {
            pp->rlen[k] += (size_t)got;
            continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        return -1;
    }
}

/* The next whole frame of link k, or NULL; *len_p its payload length with the kind. */
const uint8_t *shrink__frame_at(const sk_peer_t *pp, int k, size_t off, size_t max,
                                  size_t *len_p)
{
    size_t len;

    if (pp->rlen[k] - off < 4) return NULL;
    len = get32(pp->rbuf[k] + off);
    if (len == 0 || len > max) return pp->rbuf[k] + off; /* malformed: caller drops the peer */
    if (pp->rlen[k] - off - 4 < len) return NULL;
    *len_p = len;
    return pp->rbuf[k] + off + 4;
}

/* ---- the agreement ---- */

size_t shrink__frame_max(const shrink_t *s)
{
    return 1 + chorus__agree_msg_max(s->n);
}

/* Feeds p's whole frames to the agreement. */
void shrink__dispatch(shrink_t *s, int p, int k)
{
    sk_peer_t *pp = &s->peers[p];
    size_t off = 0, len = 0;
    const uint8_t *f;

    while (!pp->dead && (f = shrink__frame_at(pp, k, off, shrink__frame_max(s), &len)) != NULL) {
        uint32_t epoch = 0;
        chorus_status_t st;

        if (f == pp->rbuf[k] + off) { /* a length no frame has */
            shrink__mark_dead(s, p);
            return;
        }
        off += 4 + len;
        if (f[0] != SK_FRAME_AGREE) continue;
        st = chorus__agree_on_msg(s->ag, p, f + 1, len - 1, &epoch);
        CHORUS_TRACE("shrink", "rank %d: message type %u from rank %d (epoch %u, target %u): %s; "
                     "state %d target %d", s->me, f[1 + 4], p, epoch, get32(f + 1 + 16),
                     chorus_status_string(st), (int)chorus__agree_state(s->ag),
                     chorus__agree_target(s->ag));
        if (st == CHORUS_ERR_MISMATCH) {
            if (epoch > s->seen_epoch) s->seen_epoch = epoch;
            if (epoch < s->epoch) chorus__agree_poke(s->ag, p);
            /* A newer epoch: the caller starts it, and this frame is read again then. */
            if (epoch > s->epoch) {
                off -= 4 + len;
                break;
            }
        } else if (st != CHORUS_SUCCESS) {
            CHORUS_WARN("shrink", "%s", chorus_last_error());
            shrink__mark_dead(s, p);
            return;
        }
    }
    if (off > 0 && !pp->dead) {
        memmove(pp->rbuf[k], pp->rbuf[k] + off, pp->rlen[k] - off);
        pp->rlen[k] -= off;
    }
}

nfds_t shrink__poll_set(shrink_t *s, int ready_only)
{
    nfds_t nf = 0;

    for (int p = 0; p < s->n; p++) {
        sk_peer_t *pp = &s->peers[p];
        if (pp->dead) continue;
        if (pp->out_fd >= 0 && (!ready_only || pp->out_state == SK_READY)) {
            short ev = pp->out_state == SK_CONNECTING ? POLLOUT : POLLIN;
            s->pfds[nf] = (struct pollfd){.fd = pp->out_fd, .events = ev};
            s->who[nf++] = p;
        }
        if (pp->in_fd >= 0) {
            s->pfds[nf] = (struct pollfd){.fd = pp->in_fd, .events = POLLIN};
            s->who[nf++] = ~p;
        }
    }
    return nf;
}

/* One look at every connection: accepts, connects, reads. */
void shrink__poll(shrink_t *s, int wait_ms)
{
    struct pollfd *pfds = s->pfds;
    int *who = s->who;
    nfds_t nf;

    shrink__accept(s);
    for (int p = 0; p < s->n; p++) {
        sk_peer_t *pp = &s->peers[p];
        if (!pp->dead && pp->refused_ns != 0 &&
            chorus__now_ns() - pp->refused_ns > SK_REFUSED_GRACE_NS) {
            /* what it sent before it left is read: its connection ended (or never was) */
            if (pp->in_fd >= 0) {
                (void)shrink__read(pp, 1);
                shrink__dispatch(s, p, 1);
            }
            shrink__mark_dead(s, p);
        }
        if (pp->plen > 0 && pp->refused_ns == 0) shrink__flush_peer(s, p);
    }
    nf = shrink__poll_set(s, 0);
    if (nf == 0 || poll(pfds, nf, wait_ms) <= 0) return;
    for (nfds_t i = 0; i < nf; i++) {
        int p = who[i] < 0 ? ~who[i] : who[i], k = who[i] < 0;
        sk_peer_t *pp = &s->peers[p];
        if (pfds[i].revents == 0 || pp->dead) continue;
        if (k == 0 && pp->out_state != SK_READY) {
            sk_progress_out(s, p, pfds[i].revents);
            continue;
        }
        if ((k == 0 ? pp->out_fd : pp->in_fd) < 0) continue;
        if (shrink__read(pp, k) != 0) {
            shrink__dispatch(s, p, k); /* what it sent before it went */
            shrink__mark_dead(s, p);
            continue;
        }
        shrink__dispatch(s, p, k);
    }
}

chorus_status_t shrink__acceptor_start(shrink_t *s)
{
    s->accepted_fd = malloc(sizeof(int) * (size_t)s->n);
    if (s->accepted_fd == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: comm_shrink: %d ranks", s->me, s->n);
    for (int r = 0; r < s->n; r++) s->accepted_fd[r] = -1;
    pthread_mutex_init(&s->accepted_lock, NULL);
    atomic_init(&s->acceptor_stop, 0);
    if (pthread_create(&s->acceptor, NULL, sk_acceptor_main, s) != 0) {
        pthread_mutex_destroy(&s->accepted_lock);
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno,
                                   "rank %d: comm_shrink: acceptor thread", s->me);
    }
    s->acceptor_running = 1;
    return CHORUS_SUCCESS;
}

