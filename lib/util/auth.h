/*
 * Connection authentication: HMAC-SHA256 challenge-response (libcrypto) proving that
 * both ends know the job secret, before any other byte is trusted.
 *
 * Protocol on a fresh stream socket (all fields fixed size, so no length is trusted):
 *   server -> client: "CHRS" magic, version, 16-byte nonce_s
 *   client -> server: 16-byte nonce_c, HMAC(secret, "chorus-c" | nonce_s | nonce_c | hello_len | hello)
 *                     then hello_len (u32) and hello bytes (at most CHORUS_AUTH_HELLO_MAX)
 *   server -> client: HMAC(secret, "chorus-s" | nonce_c | nonce_s)
 * The hello (rank, purpose, communicator id) is covered by the client's MAC. A peer that
 * fails, sends garbage or stalls is dropped; the server logs it at WARN and goes on.
 */
#ifndef CHORUS_UTIL_AUTH_H
#define CHORUS_UTIL_AUTH_H

#include "chorus.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define CHORUS_SECRET_BYTES 16
#define CHORUS_AUTH_HELLO_MAX 512

/* Fills buf with cryptographically random bytes (libcrypto RAND_bytes). */
chorus_status_t chorus__random_bytes(void *buf, size_t len);

/* Client side, on a connected blocking-or-not socket: proves the secret, sends hello,
 * checks the server's proof. CHORUS_ERR_AUTH if the server fails to prove it. */
chorus_status_t chorus__auth_client(int fd, const uint8_t secret[CHORUS_SECRET_BYTES],
                                    const void *hello, size_t hello_len, uint64_t deadline_ns);

/* The client's response as the server reads it: nonce_c[16], mac_c[32], u32 hello_len,
 * hello[hello_len]. */
#define CHORUS_AUTH_RESPONSE_HEAD 52
#define CHORUS_AUTH_RESPONSE_MAX (CHORUS_AUTH_RESPONSE_HEAD + CHORUS_AUTH_HELLO_MAX)

/* The acceptor's whole parser of a stranger's bytes, kept pure so that it can be fuzzed:
 * msg holds the got bytes of a response received so far (got <= CHORUS_AUTH_RESPONSE_MAX),
 * nonce_s the 16-byte challenge they answer. Returns 0 when more bytes are needed (*want_p:
 * the response's length in all as far as it is known, got < *want_p <=
 * CHORUS_AUTH_RESPONSE_MAX), 1 when the response proves the secret (the hello is the
 * *hello_len_p bytes at msg + CHORUS_AUTH_RESPONSE_HEAD), -1 when it must be refused (*why_p:
 * a static string saying why, never the secret). Reads no byte of msg past got. */
int chorus__auth_check_response(const uint8_t secret[CHORUS_SECRET_BYTES], const uint8_t *nonce_s,
                                const uint8_t *msg, size_t got, size_t *want_p,
                                size_t *hello_len_p, const char **why_p);

/* An acceptor serves a listening socket: it accepts connections and runs the server
 * side of the handshake for many of them at once (poll), so a stalled stranger cannot
 * hold up a real peer. */
typedef struct chorus_acceptor chorus_acceptor_t;

chorus_status_t chorus__acceptor_create(int listen_fd, const uint8_t secret[CHORUS_SECRET_BYTES],
                                        const char *what, chorus_acceptor_t **acc_p);

/* Returns the next authenticated connection (fd, blocking mode unspecified: set what you
 * need) and its hello. Strangers are refused and logged meanwhile. CHORUS_ERR_TIMEOUT at
 * the deadline; CHORUS_ERR_ABORTED when *abort_flag becomes nonzero (may be NULL; any
 * thread may set it, it is read atomically). */
chorus_status_t chorus__acceptor_accept(chorus_acceptor_t *acc, void *hello, size_t hello_max,
                                        size_t *hello_len_p, uint64_t deadline_ns,
                                        const atomic_int *abort_flag, int *fd_p);

/* Number of connections refused so far (for tests and logs). */
unsigned chorus__acceptor_refused(const chorus_acceptor_t *acc);

/* Closes pending handshakes (not listen_fd, which the caller owns). */
void chorus__acceptor_destroy(chorus_acceptor_t *acc);

#endif
