/*
 * Socket helpers. Every socket Chorus makes is nonblocking and close-on-exec, so that a
 * child started by the application never inherits a rendezvous or data connection, and
 * every wait goes through poll() with a deadline, so that nothing here can hang forever.
 */
#include "util/sock.h"

#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* While connecting, how often the abort flag is looked at, and the longest pause between
 * two attempts when the peer is not listening yet. */
#define SOCK_POLL_SLICE_MS 100
#define SOCK_RETRY_MAX_MS 100

/* The abort flag is set by another thread (chorus_comm_abort). It publishes no other data,
 * so a relaxed load is enough: a set flag is seen within a poll slice or two. */
static int sock_aborted(const atomic_int *abort_flag)
{
    return abort_flag != NULL && atomic_load_explicit(abort_flag, memory_order_relaxed) != 0;
}

static socklen_t sock_addr_len(const struct sockaddr_storage *addr)
{
    return addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static uint16_t sock_port(const struct sockaddr_storage *addr)
{
    if (addr->ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)addr)->sin6_port);
    return ntohs(((const struct sockaddr_in *)addr)->sin_port);
}

static void sock_set_port(struct sockaddr_storage *addr, uint16_t port)
{
    if (addr->ss_family == AF_INET6) {
        ((struct sockaddr_in6 *)addr)->sin6_port = htons(port);
    } else {
        ((struct sockaddr_in *)addr)->sin_port = htons(port);
    }
}

static void sock_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The peer's address as text, for error messages. */
static const char *sock_peer_str(int fd, char *buf, size_t len)
{
    struct sockaddr_storage peer;
    socklen_t plen = sizeof(peer);

    memset(&peer, 0, sizeof(peer));
    if (getpeername(fd, (struct sockaddr *)&peer, &plen) != 0) {
        snprintf(buf, len, "fd %d", fd);
        return buf;
    }
    return chorus__sock_addr_str(&peer, buf, len);
}

chorus_status_t chorus__sock_parse_addr(const char *text, struct sockaddr_storage *addr_p)
{
    char host[256];
    const char *port_text;
    const char *colon;
    size_t host_len;
    char *end;
    long port;
    struct addrinfo hints, *res = NULL, *ai, *pick = NULL;
    int rc;

    if (text == NULL || text[0] == '\0') {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sock: empty address");
    }
    /* "[v6]:port" keeps the colons of an IPv6 address apart from the port's. */
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':') goto err_syntax;
        host_len = (size_t)(close - text - 1);
        if (host_len == 0 || host_len >= sizeof(host)) goto err_syntax;
        memcpy(host, text + 1, host_len);
        port_text = close + 2;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL || memchr(text, ':', (size_t)(colon - text)) != NULL) goto err_syntax;
        host_len = (size_t)(colon - text);
        if (host_len == 0 || host_len >= sizeof(host)) goto err_syntax;
        memcpy(host, text, host_len);
        port_text = colon + 1;
    }
    host[host_len] = '\0';
    errno = 0;
    port = strtol(port_text, &end, 10);
    if (port_text[0] == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535) {
        goto err_syntax;
    }

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sock: cannot resolve '%s': %s", host,
                             rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    }
    /* IPv4 first: "localhost" must mean 127.0.0.1 so that every rank names the same
     * address, whatever order the resolver lists them in. */
    for (ai = res; ai != NULL && pick == NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) pick = ai;
    }
    for (ai = res; ai != NULL && pick == NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET6) pick = ai;
    }
    if (pick == NULL || pick->ai_addrlen > sizeof(struct sockaddr_storage)) {
        freeaddrinfo(res);
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sock: no IPv4/IPv6 address for '%s'",
                             host);
    }
    memset(addr_p, 0, sizeof(*addr_p));
    memcpy(addr_p, pick->ai_addr, pick->ai_addrlen);
    sock_set_port(addr_p, (uint16_t)port);
    freeaddrinfo(res);
    return CHORUS_SUCCESS;

err_syntax:
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "sock: malformed address '%s' (want host:port or [v6]:port)", text);
}

const char *chorus__sock_addr_str(const struct sockaddr_storage *addr, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];

    if (buf == NULL || len == 0) return buf;
    if (addr == NULL) {
        snprintf(buf, len, "(none)");
    } else if (addr->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host)) == NULL) host[0] = '\0';
        snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(in->sin_port));
    } else if (addr->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host)) == NULL) host[0] = '\0';
        snprintf(buf, len, "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "(family %d)", (int)addr->ss_family);
    }
    return buf;
}

static int sock_is_link_local6(const struct sockaddr *sa)
{
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    return IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr);
}

/* First usable address of the interface named ifname: IPv4 preferred, then a global IPv6.
 * An exact name wins over a prefix ("eth" matches "eth0"), as with NCCL_SOCKET_IFNAME. */
static chorus_status_t sock_ifname_addr(const char *ifname, struct sockaddr_storage *addr_p)
{
    struct ifaddrs *ifs, *it, *pick = NULL;
    size_t plen = strlen(ifname);
    int pass;

    if (getifaddrs(&ifs) != 0) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: getifaddrs");
    }
    for (pass = 0; pass < 4 && pick == NULL; pass++) {
        int exact = pass < 2, want_v4 = (pass % 2) == 0;
        for (it = ifs; it != NULL && pick == NULL; it = it->ifa_next) {
            if (it->ifa_addr == NULL || !(it->ifa_flags & IFF_UP)) continue;
            if (exact ? strcmp(it->ifa_name, ifname) != 0
                      : strncmp(it->ifa_name, ifname, plen) != 0)
                continue;
            if (want_v4 && it->ifa_addr->sa_family == AF_INET) pick = it;
            if (!want_v4 && it->ifa_addr->sa_family == AF_INET6 &&
                !sock_is_link_local6(it->ifa_addr))
                pick = it;
        }
    }
    if (pick == NULL) {
        freeifaddrs(ifs);
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "sock: CHORUS_SOCKET_IFNAME=%s: no such interface with an "
                             "IPv4 or global IPv6 address that is up",
                             ifname);
    }
    memset(addr_p, 0, sizeof(*addr_p));
    memcpy(addr_p, pick->ifa_addr,
           pick->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                : sizeof(struct sockaddr_in6));
    freeifaddrs(ifs);
    return CHORUS_SUCCESS;
}

/* The source address the kernel would use toward dest: connect() on a UDP socket picks
 * the route and the local address without sending a packet. Returns 0 on success. */
static int sock_route_source(const struct sockaddr_storage *dest, struct sockaddr_storage *src_p)
{
    struct sockaddr_storage to = *dest, src;
    socklen_t slen = sizeof(src);
    int fd, ok;

    if (sock_port(&to) == 0) sock_set_port(&to, 9);
    fd = socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    memset(&src, 0, sizeof(src));
    ok = connect(fd, (struct sockaddr *)&to, sock_addr_len(&to)) == 0 &&
         getsockname(fd, (struct sockaddr *)&src, &slen) == 0;
    close(fd);
    if (!ok) return -1;
    sock_set_port(&src, 0);
    *src_p = src;
    return 0;
}

/* The IPv4 address of the first interface that is up and not loopback (port 0). Returns
 * 0 on success. */
static int sock_first_interface(struct sockaddr_storage *addr_p)
{
    struct ifaddrs *ifs, *it;
    int rc = -1;

    if (getifaddrs(&ifs) != 0) return -1;
    for (it = ifs; it != NULL && rc != 0; it = it->ifa_next) {
        if (it->ifa_addr == NULL || it->ifa_addr->sa_family != AF_INET) continue;
        if (!(it->ifa_flags & IFF_UP) || (it->ifa_flags & IFF_LOOPBACK)) continue;
        memset(addr_p, 0, sizeof(*addr_p));
        memcpy(addr_p, it->ifa_addr, sizeof(struct sockaddr_in));
        sock_set_port(addr_p, 0);
        rc = 0;
    }
    freeifaddrs(ifs);
    return rc;
}

chorus_status_t chorus__sock_pick_local_addr(const struct sockaddr_storage *toward,
                                             struct sockaddr_storage *addr_p)
{
    const char *ifname = chorus__config_str("CHORUS_SOCKET_IFNAME");
    struct sockaddr_storage addr, probe;
    chorus_status_t status;

    if (ifname != NULL && ifname[0] != '\0') {
        status = sock_ifname_addr(ifname, &addr);
        if (status != CHORUS_SUCCESS) return status;
        sock_set_port(&addr, 0);
        *addr_p = addr;
        return CHORUS_SUCCESS;
    }
    if (toward != NULL && sock_route_source(toward, &addr) == 0) {
        *addr_p = addr;
        return CHORUS_SUCCESS;
    }
    /* The default route: a public address that is never contacted, only routed. */
    memset(&probe, 0, sizeof(probe));
    ((struct sockaddr_in *)&probe)->sin_family = AF_INET;
    ((struct sockaddr_in *)&probe)->sin_port = htons(53);
    inet_pton(AF_INET, "192.0.2.1", &((struct sockaddr_in *)&probe)->sin_addr);
    if (sock_route_source(&probe, &addr) == 0) {
        *addr_p = addr;
        return CHORUS_SUCCESS;
    }
    memset(&probe, 0, sizeof(probe));
    ((struct sockaddr_in6 *)&probe)->sin6_family = AF_INET6;
    ((struct sockaddr_in6 *)&probe)->sin6_port = htons(53);
    inet_pton(AF_INET6, "2001:db8::1", &((struct sockaddr_in6 *)&probe)->sin6_addr);
    if (sock_route_source(&probe, &addr) == 0) {
        *addr_p = addr;
        return CHORUS_SUCCESS;
    }
    /* No default route (a private cluster network, a namespace): the first interface that
     * is up and not loopback still reaches the other hosts of its network. */
    if (sock_first_interface(&addr) == 0) {
        *addr_p = addr;
        return CHORUS_SUCCESS;
    }
    memset(&addr, 0, sizeof(addr));
    ((struct sockaddr_in *)&addr)->sin_family = AF_INET;
    ((struct sockaddr_in *)&addr)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHORUS_INFO("sock", "no route and no interface but loopback: using loopback");
    *addr_p = addr;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__sock_set_nonblocking(int fd, int on)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0) return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: fcntl(F_GETFL)");
    flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
    if (fcntl(fd, F_SETFL, flags) != 0) {
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: fcntl(F_SETFL)");
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__sock_listen(const struct sockaddr_storage *addr, int backlog, int *fd_p,
                                    struct sockaddr_storage *bound_p)
{
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    char text[80];
    int fd, one = 1;
    chorus_status_t status;

    if (addr == NULL || (addr->ss_family != AF_INET && addr->ss_family != AF_INET6)) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sock: listen: bad address family");
    }
    fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: socket");
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: SO_REUSEADDR");
        goto err_close;
    }
    if (bind(fd, (const struct sockaddr *)addr, sock_addr_len(addr)) != 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: bind %s",
                                     chorus__sock_addr_str(addr, text, sizeof(text)));
        goto err_close;
    }
    if (listen(fd, backlog > 0 ? backlog : SOMAXCONN) != 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: listen %s",
                                     chorus__sock_addr_str(addr, text, sizeof(text)));
        goto err_close;
    }
    memset(&bound, 0, sizeof(bound));
    if (getsockname(fd, (struct sockaddr *)&bound, &blen) != 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: getsockname");
        goto err_close;
    }
    if (bound_p != NULL) *bound_p = bound;
    *fd_p = fd;
    return CHORUS_SUCCESS;

err_close:
    close(fd);
    return status;
}

/* One connection attempt: 0 connected, else the errno that made it fail (ETIMEDOUT at the
 * deadline, ECANCELED on abort). */
static int sock_try_connect(const struct sockaddr_storage *addr, int sndbuf, int rcvbuf,
                            uint64_t deadline_ns, const atomic_int *abort_flag, int *fd_p)
{
    int fd, err = 0, one = 1;
    socklen_t elen = sizeof(err);

    fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    if (sndbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) != 0) {
        CHORUS_WARN("sock", "SO_SNDBUF %d: %s", sndbuf, strerror(errno));
    }
    if (rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) != 0) {
        CHORUS_WARN("sock", "SO_RCVBUF %d: %s", rcvbuf, strerror(errno));
    }
    if (connect(fd, (const struct sockaddr *)addr, sock_addr_len(addr)) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
            err = errno;
            goto err_close;
        }
        for (;;) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int rc;
            if (sock_aborted(abort_flag)) {
                err = ECANCELED;
                goto err_close;
            }
            if (chorus__deadline_passed(deadline_ns)) {
                err = ETIMEDOUT;
                goto err_close;
            }
            rc = poll(&pfd, 1, chorus__deadline_ms_left(deadline_ns, SOCK_POLL_SLICE_MS));
            if (rc < 0 && errno != EINTR) {
                err = errno;
                goto err_close;
            }
            if (rc > 0) break;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
        if (err != 0) goto err_close;
    }
    /* Small control messages must leave at once, not wait for Nagle. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *fd_p = fd;
    return 0;

err_close:
    close(fd);
    return err;
}

chorus_status_t chorus__sock_connect(const struct sockaddr_storage *addr, uint64_t deadline_ns,
                                     const atomic_int *abort_flag, int *fd_p)
{
    return chorus__sock_connect_buf(addr, 0, 0, deadline_ns, abort_flag, fd_p);
}

chorus_status_t chorus__sock_connect_buf(const struct sockaddr_storage *addr, int sndbuf,
                                         int rcvbuf, uint64_t deadline_ns,
                                         const atomic_int *abort_flag, int *fd_p)
{
    char text[80];
    int backoff_ms = 1, err;

    if (addr == NULL || (addr->ss_family != AF_INET && addr->ss_family != AF_INET6)) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "sock: connect: bad address family");
    }
    for (;;) {
        err = sock_try_connect(addr, sndbuf, rcvbuf, deadline_ns, abort_flag, fd_p);
        if (err == 0) return CHORUS_SUCCESS;
        if (err == ECANCELED) {
            return chorus__error(CHORUS_ERR_ABORTED, "sock: connect to %s aborted",
                                 chorus__sock_addr_str(addr, text, sizeof(text)));
        }
        /* Refused (or reset by a full backlog) means the peer is not listening yet:
         * it may still be starting, so try again until the deadline. */
        if (err != ECONNREFUSED && err != ECONNRESET && err != ETIMEDOUT && err != EAGAIN) {
            return chorus__error_errno(CHORUS_ERR_REMOTE, err, "sock: connect to %s",
                                       chorus__sock_addr_str(addr, text, sizeof(text)));
        }
        if (chorus__deadline_passed(deadline_ns)) {
            return chorus__error(CHORUS_ERR_TIMEOUT, "sock: connect to %s timed out (last: %s)",
                                 chorus__sock_addr_str(addr, text, sizeof(text)), strerror(err));
        }
        if (sock_aborted(abort_flag)) {
            return chorus__error(CHORUS_ERR_ABORTED, "sock: connect to %s aborted",
                                 chorus__sock_addr_str(addr, text, sizeof(text)));
        }
        sock_sleep_ms(chorus__deadline_ms_left(deadline_ns, backoff_ms));
        backoff_ms = backoff_ms * 2 > SOCK_RETRY_MAX_MS ? SOCK_RETRY_MAX_MS : backoff_ms * 2;
    }
}

/* Waits for events on fd; CHORUS_ERR_TIMEOUT at the deadline. */
static chorus_status_t sock_wait(int fd, short events, uint64_t deadline_ns, const char *op)
{
    struct pollfd pfd = {.fd = fd, .events = events};
    char peer[80];
    int rc;

    for (;;) {
        if (chorus__deadline_passed(deadline_ns)) {
            return chorus__error(CHORUS_ERR_TIMEOUT, "sock: %s %s timed out", op,
                                 sock_peer_str(fd, peer, sizeof(peer)));
        }
        rc = poll(&pfd, 1, chorus__deadline_ms_left(deadline_ns, 1000));
        if (rc > 0) return CHORUS_SUCCESS;
        if (rc < 0 && errno != EINTR) {
            return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: poll");
        }
    }
}

chorus_status_t chorus__sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    const char *p = buf;
    char peer[80];
    chorus_status_t status;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            status = sock_wait(fd, POLLOUT, deadline_ns, "send to");
            if (status != CHORUS_SUCCESS) return status;
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            return chorus__error(CHORUS_ERR_REMOTE, "sock: %s closed the connection (send)",
                                 sock_peer_str(fd, peer, sizeof(peer)));
        }
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: send to %s",
                                   sock_peer_str(fd, peer, sizeof(peer)));
    }
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    char *p = buf;
    char peer[80];
    chorus_status_t status;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            return chorus__error(CHORUS_ERR_REMOTE, "sock: %s closed the connection (recv)",
                                 sock_peer_str(fd, peer, sizeof(peer)));
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            status = sock_wait(fd, POLLIN, deadline_ns, "recv from");
            if (status != CHORUS_SUCCESS) return status;
            continue;
        }
        if (errno == ECONNRESET) {
            return chorus__error(CHORUS_ERR_REMOTE, "sock: %s reset the connection (recv)",
                                 sock_peer_str(fd, peer, sizeof(peer)));
        }
        return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "sock: recv from %s",
                                   sock_peer_str(fd, peer, sizeof(peer)));
    }
    return CHORUS_SUCCESS;
}
