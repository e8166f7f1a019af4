/*
 * Bootstrap: how ranks find each other before any transport exists.
 *
 * The unique id holds the root's address, a 128-bit secret and a communicator id. The
 * root service (a thread in the process that made the id) accepts one authenticated
 * connection per rank, collects each rank's bootstrap listening address, and sends the
 * whole table back; then it ends. Ranks then connect in a ring (rank r to rank r+1,
 * authenticated) and use it for out-of-band allgather and barrier: the transports'
 * address blobs, host identities, comm_split's colors.
 */
#ifndef CHORUS_BOOTSTRAP_H
#define CHORUS_BOOTSTRAP_H

#include "chorus.h"
#include "util/auth.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The most ranks a communicator may have: it bounds the table the bootstrap root sends,
 * and chorus_comm_init refuses more before allocating anything per rank. */
#define CHORUS_BS_MAX_RANKS (1 << 20)

/* The decoded content of a chorus_unique_id_t. */
typedef struct {
    struct sockaddr_storage root_addr;
    uint8_t secret[CHORUS_SECRET_BYTES];
    uint64_t comm_id;
} chorus_id_info_t;

/* Encodes / decodes the id (magic and version checked: CHORUS_ERR_INVALID_ARGUMENT on a
 * malformed id). */
chorus_status_t chorus__id_encode(const chorus_id_info_t *info, chorus_unique_id_t *id);
chorus_status_t chorus__id_decode(const chorus_unique_id_t *id, chorus_id_info_t *info_p);

/* Makes a fresh id whose root listens on listen_addr (NULL: chorus__sock_pick_local_addr;
 * port 0 = any) and starts the root service thread for it in this process. */
chorus_status_t chorus__bootstrap_new_id(const struct sockaddr_storage *listen_addr,
                                         chorus_unique_id_t *id_p);

/* Starts the root service for an id whose address and secret were chosen elsewhere (the
 * launcher environment: rank 0 binds CHORUS_ROOT / MASTER_ADDR:MASTER_PORT). With any_addr
 * it listens on the id's port on every interface instead of the id's address. */
chorus_status_t chorus__bootstrap_root_start(const chorus_unique_id_t *id, int any_addr);

/* Who serves the root of an id from the environment (chorus__bootstrap_id_from_env). */
#define CHORUS_BS_ROOT_NONE 0  /* chorusrun, or already running in rank 0 (PMIx) */
#define CHORUS_BS_ROOT_ADDR 1  /* this rank, on the id's address */
#define CHORUS_BS_ROOT_ANY 2   /* this rank, on the id's port on every interface */
#define CHORUS_BS_ROOT_RANK0 3 /* rank 0, which starts it in its chorus_comm_init_env */

/* Nonzero when this thread's last chorus__bootstrap_init found nobody listening at the
 * root's address by its deadline (chorus_comm_init_env then names the rank that serves it). */
int chorus__bootstrap_root_unreached(void);

/* Reads the launcher environment (see chorus_comm_init_env in chorus.h): rank, size,
 * root address and secret, and builds the id every rank will agree on. *is_root_p says
 * who must start the root service (CHORUS_BS_ROOT_*): rank 0, unless CHORUS_UNIQUE_ID
 * (hex, set by chorusrun) gives the id directly, or PMIx shared an id whose root rank 0
 * already serves. Under PMIx this is collective over the job. */
chorus_status_t chorus__bootstrap_id_from_env(chorus_unique_id_t *id_p, int *rank_p,
                                              int *nranks_p, int *is_root_p);

/* What the last successful chorus__bootstrap_id_from_env of this thread read: the
 * launcher, rank, size, local rank and root, as one line; NULL before any. */
const char *chorus__bootstrap_env_source(void);

/* Hex text of an id (2 * CHORUS_UNIQUE_ID_BYTES + 1 chars) and back. */
void chorus__id_to_hex(const chorus_unique_id_t *id, char *hex);
chorus_status_t chorus__id_from_hex(const char *hex, chorus_unique_id_t *id_p);

typedef struct chorus_bootstrap chorus_bootstrap_t;

/* Joins the rendezvous of id as rank of nranks; blocks until the ring is connected or
 * timeout_s passes or *abort_flag is set (may be NULL; any thread may set it at any time:
 * it is read atomically). */
chorus_status_t chorus__bootstrap_init(const chorus_unique_id_t *id, int rank, int nranks,
                                       double timeout_s, const atomic_int *abort_flag,
                                       chorus_bootstrap_t **bs_p);

/* data holds nranks blocks of size bytes; this rank's block (at rank * size) is given,
 * the others are filled in. Blocking, with the bootstrap deadline. */
chorus_status_t chorus__bootstrap_allgather(chorus_bootstrap_t *bs, void *data, size_t size);

/* Returns once all ranks have called it. */
chorus_status_t chorus__bootstrap_barrier(chorus_bootstrap_t *bs);

/* The local address this rank reaches the root from: transports listen on its interface. */
const struct sockaddr_storage *chorus__bootstrap_local_addr(const chorus_bootstrap_t *bs);

/* The decoded id (secret, comm id). */
const chorus_id_info_t *chorus__bootstrap_id_info(const chorus_bootstrap_t *bs);

/* The address of rank's bootstrap listener, which stays open for the communicator's life
 * (chorus_comm_shrink's survivors meet there, authenticated with the id's secret). */
chorus_status_t chorus__bootstrap_peer_addr(const chorus_bootstrap_t *bs, int rank,
                                            struct sockaddr_storage *addr_p);

/* The acceptor of this rank's listener (connections authenticated with the id's secret). */
chorus_acceptor_t *chorus__bootstrap_acceptor(chorus_bootstrap_t *bs);

/* Closes the ring's connections only (the listener stays): a rank that leaves the ring
 * tells its neighbours at once. */
void chorus__bootstrap_close_ring(chorus_bootstrap_t *bs);

/* Nonzero when a ring neighbour has closed its end (it revoked or destroyed the comm, or
 * died), *rank_p naming it; never blocks. */
int chorus__bootstrap_ring_gone(chorus_bootstrap_t *bs, int *rank_p);
/* Stops serving the listener (the acceptor and the listening socket): later connections to
 * this rank are refused at once. For a communicator that was shrunk, whose listener has no
 * more use: its survivors then see at once that this rank has left. */
void chorus__bootstrap_close_listener(chorus_bootstrap_t *bs);

/* Closes the ring connections and the listener. */
void chorus__bootstrap_destroy(chorus_bootstrap_t *bs);

#endif
