/*
 * What the files of lib/bootstrap share and nobody else needs: the packed address, the
 * hellos, the root service start and the duplex exchange of the ring.
 */
#ifndef CHORUS_BOOTSTRAP_INTERNAL_H
#define CHORUS_BOOTSTRAP_INTERNAL_H

#include "bootstrap/bootstrap.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

/* An address on the wire: u8 family (4 or 6), u8 zero, u16 port, 16 bytes of address
 * (IPv4 in the first 4), u32 IPv6 scope id. Big-endian. */
#define CHORUS_BS_ADDR_BYTES 24

/* A rank's hello (inside the authenticated handshake): u32 purpose, u64 comm id,
 * u32 rank, u32 nranks, packed address (the rank's ring listener; zero for the ring). */
#define CHORUS_BS_HELLO_BYTES (4 + 8 + 4 + 4 + CHORUS_BS_ADDR_BYTES)
#define CHORUS_BS_PURPOSE_ROOT 0x524f4f54u /* "ROOT" */
#define CHORUS_BS_PURPOSE_RING 0x52494e47u /* "RING" */

typedef struct {
    uint32_t purpose;
    uint64_t comm_id;
    uint32_t rank;
    uint32_t nranks;
    struct sockaddr_storage addr;
} chorus_bs_hello_t;

static inline void chorus__bs_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void chorus__bs_put32(uint8_t *p, uint32_t v)
{
    chorus__bs_put16(p, (uint16_t)(v >> 16));
    chorus__bs_put16(p + 2, (uint16_t)v);
}

static inline void chorus__bs_put64(uint8_t *p, uint64_t v)
{
    chorus__bs_put32(p, (uint32_t)(v >> 32));
    chorus__bs_put32(p + 4, (uint32_t)v);
}

static inline uint16_t chorus__bs_get16(const uint8_t *p)
{
    return (uint16_t)(((unsigned)p[0] << 8) | p[1]);
}

static inline uint32_t chorus__bs_get32(const uint8_t *p)
{
    return ((uint32_t)chorus__bs_get16(p) << 16) | chorus__bs_get16(p + 2);
}

static inline uint64_t chorus__bs_get64(const uint8_t *p)
{
    return ((uint64_t)chorus__bs_get32(p) << 32) | chorus__bs_get32(p + 4);
}

/* Packs an IPv4/IPv6 address (anything else packs as family 0). */
void chorus__bs_pack_addr(const struct sockaddr_storage *addr, uint8_t out[CHORUS_BS_ADDR_BYTES]);

/* Unpacks; CHORUS_ERR_INVALID_ARGUMENT when the family is not 4 or 6 or padding is set. */
chorus_status_t chorus__bs_unpack_addr(const uint8_t in[CHORUS_BS_ADDR_BYTES],
                                       struct sockaddr_storage *addr_p);

void chorus__bs_hello_pack(const chorus_bs_hello_t *h, uint8_t out[CHORUS_BS_HELLO_BYTES]);
chorus_status_t chorus__bs_hello_unpack(const uint8_t *in, size_t len, chorus_bs_hello_t *h_p);

/* What the root service collects: one hello per rank, the rank count fixed by the first
 * hello it admits. The fields are the admission's (chorus__bs_root_admit); the caller files
 * the connection of an admitted rank in fds[rank] and counts it in arrived. */
typedef struct {
    uint64_t comm_id;
    const char *name; /* for log messages */
    int nranks;       /* 0 until the first hello is admitted */
    int arrived;
    int *fds;         /* nranks entries, -1 until that rank arrives */
    uint8_t *table;   /* the table message: 8-byte header, then nranks packed addresses */
} chorus_bs_root_tab_t;

/* Admits a hello that arrived at the root (after authentication): a rank of the
 * communicator, below its rank count (at most CHORUS_BS_MAX_RANKS, and the same as the
 * earlier hellos said), not arrived yet, with an address, which goes into the table (the
 * table is allocated at the first admitted hello). Returns 1 when admitted, 0 to refuse
 * (logged). Pure but for the allocation and the log, so that tests/fuzz/fuzz_bs_root.c
 * feeds it sequences of hellos. Free fds and table when done. */
int chorus__bs_root_admit(chorus_bs_root_tab_t *tab, const chorus_bs_hello_t *h);

/* The root's verdict at its deadline, sent instead of the table to every rank that came:
 * "MISS", u32 nranks, u32 number of ranks that never came, then the first of them (at
 * most CHORUS_BS_MISS_LIST, ascending), u32 each. A rank waits up to
 * CHORUS_BS_VERDICT_GRACE_S past its own deadline to hear it, so that a rank started a
 * little before the root still learns who is missing. */
#define CHORUS_BS_MISS_LIST 16
#define CHORUS_BS_MISS_MAX_BYTES (12 + 4 * CHORUS_BS_MISS_LIST)
#define CHORUS_BS_VERDICT_GRACE_S 2.0

/* Packs the verdict for tab (the ranks whose fds[] are -1); returns its length. */
size_t chorus__bs_miss_pack(const chorus_bs_root_tab_t *tab, uint8_t out[CHORUS_BS_MISS_MAX_BYTES]);

/* Reads the verdict's body (after "MISS" and nranks: u32 count, the listed ranks) from
 * body/len for a communicator of nranks, and writes "N of M ranks came ...; never came:
 * ranks a, b (and K more)" into text. CHORUS_ERR_REMOTE for a malformed verdict (a count
 * past nranks, a list too short or too long, a rank out of range or out of order). */
chorus_status_t chorus__bs_miss_describe(const uint8_t *body, size_t len, int nranks, char *text,
                                         size_t cap);

/* Waits (at most max_s) while a root thread of this process is still sending its verdict:
 * a rank that heard it returns, and its process may exit, which would end the root thread
 * before the other ranks heard it (under chorus_comm_init_env, rank 0 hosts the root). */
void chorus__bs_root_verdicts_settle(double max_s);

/* Starts the detached root service thread on listen_fd (which it then owns and closes,
 * also on failure) for the id described by info. */
chorus_status_t chorus__bs_root_spawn(int listen_fd, const chorus_id_info_t *info);

/* Sends slen bytes on send_fd while receiving rlen bytes on recv_fd (either length may be
 * 0, and the fds may be equal), so that a ring where everyone sends first cannot deadlock
 * on full socket buffers. Honours the deadline and *abort_flag; `what` names the
 * operation in errors. */
chorus_status_t chorus__bs_exchange(int send_fd, const void *sbuf, size_t slen, int recv_fd,
                                    void *rbuf, size_t rlen, uint64_t deadline_ns,
                                    const atomic_int *abort_flag, const char *what);

#endif
