/*
 * Socket helpers: addresses, listening, connecting with a deadline, whole-buffer I/O with
 * a deadline, and the choice of interface. IPv4 and IPv6.
 */
#ifndef CHORUS_UTIL_SOCK_H
#define CHORUS_UTIL_SOCK_H

#include "chorus.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* "host:port" or "[v6]:port" -> address (resolves names with getaddrinfo). */
chorus_status_t chorus__sock_parse_addr(const char *text, struct sockaddr_storage *addr_p);

/* Address -> "1.2.3.4:5678" into buf (always NUL-terminated). Returns buf. */
const char *chorus__sock_addr_str(const struct sockaddr_storage *addr, char *buf, size_t len);

/* The address to listen on: CHORUS_SOCKET_IFNAME's first address if set, else the address
 * of the interface that routes to `toward` (when not NULL), else of the default route,
 * else of the first interface that is up and not loopback (IPv4),
 * else loopback. Port 0. */
chorus_status_t chorus__sock_pick_local_addr(const struct sockaddr_storage *toward,
                                             struct sockaddr_storage *addr_p);

/* Socket bound to addr (port 0 = any) and listening; *bound_p gets the real address.
 * Close-on-exec, nonblocking, SO_REUSEADDR. */
chorus_status_t chorus__sock_listen(const struct sockaddr_storage *addr, int backlog, int *fd_p,
                                    struct sockaddr_storage *bound_p);

/* Connects with retries (ECONNREFUSED while the peer starts) until deadline_ns. Returns a
 * nonblocking, TCP_NODELAY, close-on-exec socket. CHORUS_ERR_ABORTED once *abort_flag
 * (may be NULL; any thread may set it, it is read atomically) becomes nonzero. */
chorus_status_t chorus__sock_connect(const struct sockaddr_storage *addr, uint64_t deadline_ns,
                                     const atomic_int *abort_flag, int *fd_p);

/* The same, with SO_SNDBUF / SO_RCVBUF set to sndbuf / rcvbuf (0: the kernel's autotuning)
 * before connect(). They must be set before: the SYN announces the receive window and its
 * scale from the buffer at that moment, and the peer bounds its segment size by the largest
 * window it has seen; a buffer shrunk after the handshake can then never hold one of the
 * peer's segments, and every segment waits for TCP's persist timer. */
chorus_status_t chorus__sock_connect_buf(const struct sockaddr_storage *addr, int sndbuf,
                                         int rcvbuf, uint64_t deadline_ns,
                                         const atomic_int *abort_flag, int *fd_p);

/* Sends / receives exactly len bytes on a (nonblocking) socket, polling until
 * deadline_ns. A closed connection is CHORUS_ERR_REMOTE. */
chorus_status_t chorus__sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
chorus_status_t chorus__sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);

/* Sets O_NONBLOCK on or off. */
chorus_status_t chorus__sock_set_nonblocking(int fd, int on);

#endif
