/*
 * Chorus: collective communication for distributed training.
 *
 * This is the whole public API. Every function returns a chorus_status_t; on an error,
 * chorus_last_error() returns a message for the calling thread that names the rank, the
 * peer and the operation. Nothing in the library prints unless CHORUS_DEBUG asks for it,
 * and nothing calls abort() or exit().
 *
 * Buffers and streams. A buffer is host memory or CUDA device memory, told apart by the
 * pointer (only when a CUDA plugin loaded and found a device; otherwise every buffer is host
 * memory). Both buffers of a call must be the same kind; a NULL buffer where the call allows
 * one takes the other's kind; mixing is CHORUS_ERR_INVALID_ARGUMENT naming which is where.
 *  - Host buffers: `stream` must be NULL, and the call blocks until the operation is
 *    complete on this rank (its buffers may be reused on return). The chorus_i* calls
 *    ("Nonblocking operations" below) start the same operations and return at once.
 *  - Device buffers (all on one device per communicator): `stream` is the cudaStream_t,
 *    passed as void * (NULL: the legacy default stream). The call checks its arguments,
 *    queues the operation and returns at once, as NCCL's do: the operation starts after all
 *    work queued on `stream` before the call and completes before any work queued on
 *    `stream` after it. A proxy thread of the communicator runs its device operations in
 *    call order, through CUDA IPC when all ranks share a host (CHORUS_GPU_PATH=auto|ipc|
 *    staging) or else through pinned host buffers (CHORUS_GPU_STAGING_CHUNK). An error
 *    found after the call returned (a peer died, a timeout, ranks that called different
 *    collectives) becomes the communicator's async error (chorus_comm_get_async_error),
 *    the stream still moves on (the results are then undefined), and the next call on the
 *    communicator returns the error. Host-side calls on a communicator (host collectives,
 *    barrier, send/recv, split, set_timeout, destroy) first wait for its queued device
 *    operations. Device send/recv work outside and inside groups (see chorus_send and
 *    chorus_group_start).
 *
 * Thread safety: the functions on one communicator must be called from one thread at a
 * time, except chorus_comm_abort() and chorus_comm_get_async_error(), which may be called
 * from any thread at any time. Different communicators are independent.
 */
#ifndef CHORUS_H
#define CHORUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0
#define CHORUS_VERSION_CODE \
    (CHORUS_VERSION_MAJOR * 10000 + CHORUS_VERSION_MINOR * 100 + CHORUS_VERSION_PATCH)

/* Status codes. Success is 0; errors are negative and distinct. */
typedef enum {
    CHORUS_SUCCESS = 0,
    CHORUS_ERR_INVALID_ARGUMENT = -1, /* a caller passed something the API does not accept */
    CHORUS_ERR_SYSTEM = -2,           /* a system call failed (errno is in the message) */
    CHORUS_ERR_REMOTE = -3,           /* a peer failed, closed its connection or sent garbage */
    CHORUS_ERR_TIMEOUT = -4,          /* a wait passed its deadline (CHORUS_TIMEOUT) */
    CHORUS_ERR_MISMATCH = -5,         /* ranks called different collectives or arguments */
    CHORUS_ERR_ABORTED = -6,          /* the communicator was aborted */
    CHORUS_ERR_UNSUPPORTED = -7,      /* valid, but not supported by this build or transport */
    CHORUS_ERR_AUTH = -8,             /* a peer failed to prove the job's secret */
    CHORUS_ERR_NO_MEMORY = -9,        /* an allocation failed */
    CHORUS_ERR_INTERNAL = -10,        /* a bug in Chorus: please report it */
} chorus_status_t;

/* A static, human-readable name for a status ("invalid argument"). Never NULL. */
const char *chorus_status_string(chorus_status_t status);

/* The detail message of the last error on the calling thread, e.g.
 * "rank 3: allreduce #812: peer 5 closed the connection". Empty string if none.
 * The pointer stays valid until the next Chorus call on this thread. */
const char *chorus_last_error(void);

/* Version of the library actually loaded, as CHORUS_VERSION_CODE. */
int chorus_version(void);

/* What the loaded library was built with, one static line such as
 * "chorus 0.1.0: ucx yes, ib verbs yes, hwloc yes": a transport built without its library
 * is a stub that returns CHORUS_ERR_UNSUPPORTED. Never NULL. */
const char *chorus_build_info(void);

/* ---- Datatypes and reduction operations ---- */

typedef enum {
    CHORUS_INT8 = 0,
    CHORUS_UINT8 = 1,
    CHORUS_INT32 = 2,
    CHORUS_UINT32 = 3,
    CHORUS_INT64 = 4,
    CHORUS_UINT64 = 5,
    CHORUS_FLOAT16 = 6,  /* IEEE 754 binary16 */
    CHORUS_BFLOAT16 = 7, /* bfloat16 */
    CHORUS_FLOAT32 = 8,
    CHORUS_FLOAT64 = 9,
    CHORUS_NUM_DTYPES
} chorus_dtype_t;

/* AVG is SUM followed by one division by the number of ranks. For integer types the
 * division truncates toward zero (C semantics). Integer SUM and PROD wrap modulo 2^bits.
 * MIN and MAX propagate NaN. FLOAT16 and BFLOAT16 are reduced through float32 and
 * rounded back to nearest-even after every operation. */
typedef enum {
    CHORUS_SUM = 0,
    CHORUS_PROD = 1,
    CHORUS_MIN = 2,
    CHORUS_MAX = 3,
    CHORUS_AVG = 4,
    CHORUS_NUM_OPS
} chorus_op_t;

/* Size in bytes of one element, or 0 for an unknown datatype. */
size_t chorus_dtype_size(chorus_dtype_t dtype);
/* Short names: "int8", ..., "float32"; "sum", ..., "avg". NULL if unknown. */
const char *chorus_dtype_name(chorus_dtype_t dtype);
const char *chorus_op_name(chorus_op_t op);

/* ---- Communicators ---- */

/* Opaque, fixed size, safe to copy and to send to other processes by any means.
 * It holds the root's address and a 128-bit secret: treat it like a password. */
#define CHORUS_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[CHORUS_UNIQUE_ID_BYTES];
} chorus_unique_id_t;

typedef struct chorus_comm *chorus_comm_t;

/* Creates a new unique id and starts the rendezvous service for it in this process (a
 * background thread that ends once all ranks have met, or at the deadline). Call it on
 * one process, then give the id to all ranks, which call chorus_comm_init. The root
 * listens on the interface of CHORUS_SOCKET_IFNAME if set, else on the interface of the
 * default route, else on the first interface that is up and not loopback, else on
 * loopback. */
chorus_status_t chorus_get_unique_id(chorus_unique_id_t *id_p);

/* Collective over nranks processes: joins rank `rank` to the communicator named by id.
 * Blocks until every rank has joined and all connections are authenticated, or until
 * CHORUS_TIMEOUT passes. On success *comm_p is set; on failure it is left untouched. A
 * rank that never comes: at its deadline (CHORUS_TIMEOUT where it runs) the root tells
 * every rank that came which ranks did not, and each returns CHORUS_ERR_TIMEOUT naming
 * them (a rank waits up to 2 s past its own deadline to hear it). */
chorus_status_t chorus_comm_init(chorus_comm_t *comm_p, int nranks, const chorus_unique_id_t *id,
                                 int rank);

/* Like chorus_comm_init, but takes rank, size, rendezvous address and secret from the
 * launcher that started the process, with nothing to set under the common ones (where rank
 * 0 serves the rendezvous and never comes, the others' CHORUS_ERR_TIMEOUT says so):
 *   rank and size: the first found of CHORUS_RANK/CHORUS_WORLD_SIZE; torchrun's
 *     RANK/WORLD_SIZE; a PMIx server (mpirun, prterun, srun --mpi=pmix; in builds with
 *     libpmix); Open MPI's OMPI_COMM_WORLD_RANK/SIZE; Slurm's SLURM_PROCID and
 *     SLURM_STEP_NUM_TASKS (else SLURM_NTASKS); PMI_RANK/PMI_SIZE. CHORUS_LAUNCHER=chorus,
 *     torchrun, pmix, mpi, slurm or pmi reads that one only.
 *   rendezvous: CHORUS_ROOT=host:port, else MASTER_ADDR:MASTER_PORT, where rank 0 serves
 *     it with the secret CHORUS_SECRET, else the 0600 file CHORUS_SECRET_FILE (default
 *     ~/.chorus/secret, created when missing). With neither set: under PMIx rank 0 makes a
 *     fresh id (address and secret) and shares it through the PMIx server (a collective
 *     call: every rank must make it, the k-th call of each pairing with the k-th of the
 *     others); under Slurm the root is the step's first host (SLURM_STEP_NODELIST, where
 *     task 0 runs) on a port derived from SLURM_JOB_ID and SLURM_STEP_ID, with the secret
 *     file as above (a home directory shared by the nodes).
 * chorus-bench --info prints which source was used. */
chorus_status_t chorus_comm_init_env(chorus_comm_t *comm_p);

/* Rank of this process and number of ranks. */
chorus_status_t chorus_comm_rank(chorus_comm_t comm, int *rank_p);
chorus_status_t chorus_comm_size(chorus_comm_t comm, int *size_p);

/* Collective over comm: ranks with the same color form a new communicator, ordered by
 * key then by rank in comm. A rank passing CHORUS_SPLIT_NOCOLOR gets *newcomm_p = NULL. */
#define CHORUS_SPLIT_NOCOLOR (-1)
chorus_status_t chorus_comm_split(chorus_comm_t comm, int color, int key, chorus_comm_t *newcomm_p);

/* Frees the communicator and everything it holds. Local: it does not wait for peers (a
 * nonblocking operation still in flight is ended with CHORUS_ERR_ABORTED; its request stays
 * valid until waited for or freed). Safe after an error or an abort. NULL is accepted and
 * ignored. */
chorus_status_t chorus_comm_destroy(chorus_comm_t comm);

/* How long any wait inside a call on comm may last before the call returns
 * CHORUS_ERR_TIMEOUT, in seconds; 0 means no deadline. The default is CHORUS_TIMEOUT (300)
 * as read when the communicator was created. Local: each rank sets its own. Call it
 * between calls on comm, not during one. CHORUS_ERR_INVALID_ARGUMENT for a NULL comm or
 * for seconds that are negative, not a number, or above 1e9. */
chorus_status_t chorus_comm_set_timeout(chorus_comm_t comm, double seconds);

/* ---- Reproducible reductions ----
 * A floating-point sum depends on the order of its additions. By default Chorus reduces in
 * whatever order is fastest, so the bits of a result may change with the algorithm, the
 * chunk size, the transport or the timing (never between the ranks of one call: every rank
 * gets the same bytes). A reproducible communicator fixes that for allreduce,
 * reduce_scatter and reduce on CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32 and
 * CHORUS_FLOAT64, on host and device buffers, blocking or not; integer reductions are
 * exact at every level.
 *   CHORUS_REPRO_NONE (0): the default.
 *   CHORUS_REPRO_ORDER (1): every element is reduced in rank order, ((x0 op x1) op x2) ...,
 *     each step rounded as a two-operand reduction is: the bytes depend on the values and
 *     the rank count only, whatever algorithm, chunk size, transport or path runs the call.
 *   CHORUS_REPRO_EXACT (2): SUM and AVG return the exact sum (for AVG, the exact sum
 *     divided by the rank count) rounded once to nearest-even: the bytes depend only on the
 *     multiset of the inputs, not on the rank count or the order. PROD, MIN and MAX run as
 *     at level 1.
 * The price: the reduction is a direct exchange (each rank sends every other rank the part
 * it owns), or the shared arena on one host; the chosen algorithm (CHORUS_ALGO) then runs
 * the other collectives only. docs/reproducible.md has the measured cost.
 * The default is CHORUS_REPRODUCIBLE (0, 1 or 2) as read when the communicator was created
 * (chorus_comm_init fails with CHORUS_ERR_INVALID_ARGUMENT for another value). Every rank
 * must use the same level for a call; set it between calls. */
#define CHORUS_REPRO_NONE 0
#define CHORUS_REPRO_ORDER 1
#define CHORUS_REPRO_EXACT 2
chorus_status_t chorus_comm_set_reproducible(chorus_comm_t comm, int level);
chorus_status_t chorus_comm_get_reproducible(chorus_comm_t comm, int *level_p);

/* Marks the communicator as failed and unblocks every call waiting on it, which return
 * CHORUS_ERR_ABORTED. May be called from any thread. The communicator must still be
 * destroyed. */
chorus_status_t chorus_comm_abort(chorus_comm_t comm);

/* The flight recorder: every communicator keeps its last CHORUS_FR_ENTRIES operations
 * (default 256; 0 turns it off): sequence number, call, count, datatype, reduction, root
 * or peer, algorithm, state (started, done, failed), status and times. With CHORUS_FR_DIR
 * set, each rank writes them as JSON to DIR/chorus-fr.<comm id>.<rank>.json when a call
 * fails, when the comm is aborted, on a fatal signal, and on SIGUSR1 (handlers installed at
 * the first communicator, chaining to the program's own). This call writes the file on
 * demand, into dir, or CHORUS_FR_DIR when dir is NULL. `chorus-trace fr DIR` merges the
 * ranks' files and names the first operation where they diverge or stop, and the ranks
 * that never reached it. Local; callable from any thread. */
chorus_status_t chorus_comm_dump_flight_record(chorus_comm_t comm, const char *dir);

/* The first error seen on the communicator by any call or by background progress, or
 * CHORUS_SUCCESS. May be called from any thread. */
chorus_status_t chorus_comm_get_async_error(chorus_comm_t comm, chorus_status_t *async_error_p);

/* ---- Registered memory ----
 * Memory that every rank on a host can read with plain loads, so that collectives on it
 * copy each byte once: a rank reads its peers' data straight from their buffers instead of
 * through the shared arena (broadcast, allgather, alltoall, reduce_scatter, allreduce, on a
 * communicator whose ranks share one host). Any part of it may be a send or receive
 * buffer, in place or not, and a call may mix ranks whose buffers are registered with ranks
 * whose buffers are not: each peer's data is read from wherever it is. Buffers outside it
 * take the usual paths.
 *
 * A collective on registered buffers returns only once every peer has finished reading
 * this rank's buffer, so the caller may overwrite it at once, as after any call.
 * If a rank dies while its peers read its buffer, they read valid memory (the mapping
 * outlives the process) and their call fails with the usual error naming it. */

/* Collective over comm: every rank calls it with the same bytes (> 0), in the same order as
 * its other chorus_mem_alloc calls on comm, and gets its own buffer of that size, aligned to
 * 4096 bytes and mapped by its peers on the host. Ranks that ask different sizes get
 * CHORUS_ERR_MISMATCH. On a communicator that spans hosts (or with CHORUS_ARENA=0) the
 * memory is this rank's alone and collectives on it take the usual paths. */
chorus_status_t chorus_mem_alloc(chorus_comm_t comm, size_t bytes, void **ptr_p);

/* Collective: every rank frees its buffer of the same chorus_mem_alloc. A pointer that
 * chorus_mem_alloc did not return on comm, a second free, or a free while a nonblocking
 * call uses the buffer is CHORUS_ERR_INVALID_ARGUMENT. chorus_comm_destroy frees what is
 * left. */
chorus_status_t chorus_mem_free(chorus_comm_t comm, void *ptr);

/* Registered device memory (as NCCL's ncclMemAlloc, over the CUDA virtual memory API):
 * collective over comm like chorus_mem_alloc, every rank with the same bytes, each on the
 * device current on its calling thread. Each rank gets device memory of at least bytes
 * (rounded up to the allocation granularity, 2 MiB on current GPUs) that every other rank
 * of its host has mapped into its own device address space, exchanged as file descriptors
 * over Unix sockets and authenticated with the job secret; it stays valid for a peer that
 * reads it after its owner died. chorus_mem_free frees it (collective). Device collectives
 * accept it as any device buffer. CHORUS_ERR_UNSUPPORTED without a GPU, or where the device
 * cannot share memory as POSIX file descriptors; CHORUS_ERR_MISMATCH when the ranks ask
 * different sizes. On a communicator that spans hosts the memory is this rank's alone. */
chorus_status_t chorus_mem_alloc_device(chorus_comm_t comm, size_t bytes, void **ptr_p);

/* Since comm was made, on this rank: how many collectives read every peer's data straight
 * from its registered buffer (no copy through the shared arena), and how many bytes this
 * rank read from its peers' registered buffers (in those calls and in calls where only some
 * peers' buffers were registered). Local. For benchmarks and tests: it shows which path a
 * call took. Either pointer may be NULL. */
chorus_status_t chorus_mem_stats(chorus_comm_t comm, uint64_t *single_copy_calls_p,
                                 uint64_t *window_bytes_p);

/* Registration with the network (as NCCL's ncclCommRegister): host memory registered with
 * every transport of comm that registers memory (ucx: ucp_mem_map; ib: ibv_reg_mr), so that
 * their zero-copy paths send from it and receive into it, and peers read and write it with
 * RDMA, without registering it at each call. Local, not collective. ptr and bytes may be any
 * host range that stays mapped until chorus_comm_deregister (or chorus_comm_destroy, which
 * deregisters what is left). On a communicator whose transports need no registration
 * (shared memory, tcp) nothing is registered and *transports_p is 0; the handle is valid
 * all the same. Memory from chorus_mem_alloc on a communicator that spans hosts (or with
 * CHORUS_ARENA=0) is registered this way already. transports_p may be NULL. */
typedef struct chorus_comm_reg *chorus_comm_reg_t;
chorus_status_t chorus_comm_register(chorus_comm_t comm, void *ptr, size_t bytes,
                                     chorus_comm_reg_t *handle_p, int *transports_p);

/* Undoes chorus_comm_register. A handle that chorus_comm_register did not return on comm,
 * a second deregister, or a deregister while nonblocking calls are in flight on comm (they
 * may use the range) is CHORUS_ERR_INVALID_ARGUMENT. */
chorus_status_t chorus_comm_deregister(chorus_comm_t comm, chorus_comm_reg_t handle);

/* ---- Recovery ----
 * When a rank dies, the survivors' calls on the comm fail (CHORUS_ERR_REMOTE, naming it).
 * They can then go on with the ranks that are left: each calls chorus_comm_shrink, gets a
 * new communicator of the survivors, destroys the failed one and carries on. */

/* Makes every rank's pending and later calls on comm fail at once: this rank's in-flight
 * nonblocking and device work ends with CHORUS_ERR_ABORTED, and its peers' waits on it end
 * with an error that says it left, so that one rank's local decision to give up becomes
 * everyone's. Call it from the thread that makes the comm's calls, between calls (from
 * another thread, chorus_comm_abort unblocks a call first). The comm must still be
 * destroyed; only chorus_comm_shrink, chorus_comm_failed_ranks and chorus_comm_destroy
 * remain useful on it. */
chorus_status_t chorus_comm_revoke(chorus_comm_t comm);

/* Collective over the ranks of comm that are alive: revokes comm, agrees with the other
 * survivors on who is alive, and sets *newcomm_p to a new communicator of the survivors,
 * ranked in their old order, with its own authenticated connections and none of comm's
 * state. Call it after any error on comm (or to give up on a peer that is stuck). Ranks
 * that die during the call are left out too: the agreement starts again without them. A
 * rank that is alive but that another survivor believes dead is left out and told so
 * (CHORUS_ERR_REMOTE, *newcomm_p untouched). The whole call honours comm's timeout
 * (chorus_comm_set_timeout): a rank that is alive but never calls it holds the others until
 * then (CHORUS_ERR_TIMEOUT naming it). A rank that finds every other rank gone gets
 * CHORUS_ERR_REMOTE rather than a comm of one: it cannot tell that from having been left out.
 * Results of the call that failed are undefined on every rank: it may have completed on
 * some. flags must be 0. comm must still be destroyed. */
chorus_status_t chorus_comm_shrink(chorus_comm_t comm, unsigned flags, chorus_comm_t *newcomm_p);

/* Collective over comm: takes in nnew new ranks (NCCL's ncclCommGrow). Rank 0 gives an id
 * it made with chorus_get_unique_id (its process then serves the rendezvous; id is ignored
 * on the other ranks) and hands it to the new processes, which call
 * chorus_comm_init(&c, size + nnew, &id, size + k) for k = 0 .. nnew - 1, or
 * chorus_comm_init_env with CHORUS_UNIQUE_ID. Every rank gets *newcomm_p: comm's ranks
 * first, keeping their ranks, then the new ones; comm's timeout carries over. The id's
 * secret keeps strangers out as at any init; a rank count that differs between ranks is
 * CHORUS_ERR_MISMATCH, and new ranks that never come end the call at CHORUS_TIMEOUT with
 * CHORUS_ERR_TIMEOUT naming them. comm is unchanged and still usable. */
chorus_status_t chorus_comm_grow(chorus_comm_t comm, int nnew, const chorus_unique_id_t *id,
                                 chorus_comm_t *newcomm_p);

/* The ranks of comm that the survivors agreed were lost, in increasing order: up to max of
 * them into ranks, and their number into *count_p. Before a chorus_comm_shrink of comm, none
 * (the errors of the failed calls name the ranks this rank saw go). */
chorus_status_t chorus_comm_failed_ranks(chorus_comm_t comm, int *ranks, int max, int *count_p);

/* ---- Collectives ----
 * Every rank of comm must call the same collectives in the same order with matching
 * arguments. In-place operation is allowed: sendbuf == recvbuf for allreduce, broadcast,
 * reduce and alltoall; for allgather sendbuf == recvbuf + rank * sendcount; for
 * reduce_scatter recvbuf == sendbuf + rank * recvcount. A count of 0 is valid: the call
 * checks its arguments and returns at once without communicating. */

/* recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank. */
chorus_status_t chorus_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                 void *stream);

/* recvbuf[r * sendcount + i] = sendbuf of rank r [i]; recvbuf holds nranks * sendcount. */
chorus_status_t chorus_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                 chorus_dtype_t dtype, chorus_comm_t comm, void *stream);

/* recvbuf[i] = op over ranks of sendbuf[rank * recvcount + i]; sendbuf holds
 * nranks * recvcount elements. */
chorus_status_t chorus_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                      void *stream);

/* recvbuf = sendbuf of root, on every rank. sendbuf is only read on root and may be NULL
 * elsewhere. */
chorus_status_t chorus_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, int root, chorus_comm_t comm, void *stream);

/* On root, recvbuf[i] = op over ranks of sendbuf[i]. recvbuf is only written on root and
 * may be NULL elsewhere. */
chorus_status_t chorus_reduce(const void *sendbuf, void *recvbuf, size_t count,
                              chorus_dtype_t dtype, chorus_op_t op, int root, chorus_comm_t comm,
                              void *stream);

/* recvbuf[r * count + i] = sendbuf of rank r [rank * count + i]; both hold nranks * count. */
chorus_status_t chorus_alltoall(const void *sendbuf, void *recvbuf, size_t count_per_peer,
                                chorus_dtype_t dtype, chorus_comm_t comm, void *stream);

/* ---- Rooted and irregular collectives ----
 * Host memory only for now: device buffers or a non-NULL stream are
 * CHORUS_ERR_UNSUPPORTED. Same rules as above (every rank calls them in the same order with
 * matching arguments; a call where no rank has anything to move returns at once), and:
 *  - Counts and displacements are in elements. Count arrays hold one entry per rank of comm
 *    and are only read during the call (the nonblocking forms copy them).
 *  - Matching: gather and scatter need the same sendcount / recvcount, dtype and root on
 *    every rank; allgatherv and reduce_scatterv the same recvcounts array on every rank
 *    (displs are each rank's own layout); alltoallv needs sendcounts[p] on this rank to
 *    equal recvcounts[rank] on rank p. Ranks that disagree get CHORUS_ERR_MISMATCH (the
 *    message naming the rank that differs), never a hang or an overrun; that is checked
 *    unless CHORUS_CHECK_CALLS=0. On one host (the shared arena) every rank of the call
 *    gets it in the call. Across hosts, in gather, scatter and alltoallv a rank that
 *    exchanges nothing with the ranks that disagree may complete the call (its data is
 *    what a correct call gives) and gets the error at its next call. A disagreement on whether the
 *    call moves anything at all (counts all 0 on some ranks) shows at the next call.
 *  - Blocks of a receive buffer must not overlap (an element written twice), nor may a
 *    block end beyond the address space or exceed 2^40 bytes: CHORUS_ERR_INVALID_ARGUMENT
 *    naming the ranks whose blocks collide. Blocks of alltoallv's sendbuf may overlap (the
 *    same data sent to several ranks).
 *  - In place: gather with sendbuf == recvbuf + root * sendcount on root; scatter with
 *    recvbuf == sendbuf + root * recvcount on root; allgatherv with sendbuf == recvbuf +
 *    displs[rank]; reduce_scatterv with recvbuf == sendbuf + (recvcounts[0] + ... +
 *    recvcounts[rank - 1]). alltoallv has no in-place form. Any other overlap of sendbuf
 *    and recvbuf is CHORUS_ERR_INVALID_ARGUMENT. */

/* On root, recvbuf[r * sendcount + i] = sendbuf of rank r [i]; recvbuf holds
 * nranks * sendcount elements there and is not used elsewhere (may be NULL). As MPI_Gather
 * and ncclGather. */
chorus_status_t chorus_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                              chorus_dtype_t dtype, int root, chorus_comm_t comm, void *stream);

/* recvbuf[i] = sendbuf of root [rank * recvcount + i]; sendbuf holds nranks * recvcount
 * elements on root and is not used elsewhere (may be NULL). As MPI_Scatter and
 * ncclScatter. */
chorus_status_t chorus_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                               chorus_dtype_t dtype, int root, chorus_comm_t comm, void *stream);

/* recvbuf[displs[r] + i] = sendbuf of rank r [i] for i < recvcounts[r], on every rank;
 * sendcount must equal recvcounts[rank]. Elements of recvbuf outside the blocks are not
 * touched. As MPI_Allgatherv. */
chorus_status_t chorus_allgatherv(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  const size_t *recvcounts, const size_t *displs,
                                  chorus_dtype_t dtype, chorus_comm_t comm, void *stream);

/* recvbuf[i] = op over ranks of sendbuf[off + i] for i < recvcounts[rank], where off is
 * recvcounts[0] + ... + recvcounts[rank - 1]: sendbuf holds the sum of recvcounts, rank r's
 * block after rank r - 1's. As MPI_Reduce_scatter. Not covered by reproducible
 * communicators yet (its floating-point results may change with the ring order). */
chorus_status_t chorus_reduce_scatterv(const void *sendbuf, void *recvbuf,
                                       const size_t *recvcounts, chorus_dtype_t dtype,
                                       chorus_op_t op, chorus_comm_t comm, void *stream);

/* recvbuf[rdispls[r] + i] = sendbuf of rank r [sdispls of rank r [rank] + i] for
 * i < recvcounts[r]: rank r's sendcounts[rank] elements at its sdispls[rank] land at
 * rdispls[r] here. sendcounts[rank] must equal recvcounts[rank]. Elements of recvbuf
 * outside the blocks are not touched. As MPI_Alltoallv. */
chorus_status_t chorus_alltoallv(const void *sendbuf, void *recvbuf, const size_t *sendcounts,
                                 const size_t *sdispls, const size_t *recvcounts,
                                 const size_t *rdispls, chorus_dtype_t dtype, chorus_comm_t comm,
                                 void *stream);

/* Point to point. Outside a group, a send on host memory blocks until the peer has posted
 * the matching receive and the data has left the buffer (as ncclSend: never count on a
 * send being buffered), and a recv until its data has arrived; on device memory both are
 * queued on `stream` like a collective. Messages between two ranks arrive in the order
 * they were sent. Inside chorus_group_start/end, sends and receives are only recorded, and
 * chorus_group_end runs them all together, so that exchanges cannot deadlock.
 * Matching: each send is one message, received by the peer's receive from this rank in
 * the same position, which must have the same count and datatype (else both ranks get
 * CHORUS_ERR_MISMATCH naming both calls; with CHORUS_CHECK_CALLS=0 only the size in bytes
 * is checked, and the receiver gets CHORUS_ERR_REMOTE); either side may be host or device
 * memory, in a group or not. A send or receive that waits for a peer which went on to a
 * collective needing this rank is CHORUS_ERR_MISMATCH too. */
chorus_status_t chorus_send(const void *buf, size_t count, chorus_dtype_t dtype, int peer,
                            chorus_comm_t comm, void *stream);
chorus_status_t chorus_recv(void *buf, size_t count, chorus_dtype_t dtype, int peer,
                            chorus_comm_t comm, void *stream);

/* Returns once every rank of comm has entered the barrier. */
chorus_status_t chorus_barrier(chorus_comm_t comm);

/* Groups nest; the outermost chorus_group_end runs what was recorded. A group may hold
 * sends and receives of one communicator, either all on host memory (NULL stream) or all
 * on device memory of one device with one stream; a call that breaks either rule is
 * CHORUS_ERR_INVALID_ARGUMENT, and the group then fails as a whole. A device group is
 * queued on its stream at chorus_group_end as one operation (its sends are staged through
 * a pinned host buffer the size of the group's messages, kept by the communicator), and
 * chorus_group_end returns at once. An error in chorus_group_end covers all of them. */
chorus_status_t chorus_group_start(void);
chorus_status_t chorus_group_end(void);

/* ---- Nonblocking operations (host memory) ----
 * Each collective and send/recv on host memory can be started without waiting for it:
 * the chorus_i* call checks its arguments (an error is returned at once and no request is
 * made), queues the operation and returns a request in *req_p. The operation runs on a
 * progress thread of the communicator (started at its first nonblocking call), so it
 * moves while the caller computes; complete it with chorus_wait, chorus_test or
 * chorus_wait_all. The buffers must not be touched until then (recvbuf not read, sendbuf
 * not written).
 *  - Several operations may be in flight on one communicator. They run and complete in the
 *    order issued, which must be the same on every rank, exactly as blocking calls would:
 *    signatures are checked (CHORUS_ERR_MISMATCH names both calls) and the results are bit
 *    for bit those of the blocking calls.
 *  - Sends and receives issued one after another form one group (as chorus_group_start/end
 *    would), which starts at the next collective call, wait, test or blocking call on the
 *    communicator: so an exchange written isend + irecv on both ranks cannot deadlock, in
 *    any order and at any size. A send or receive to self needs its match in the same
 *    group.
 *  - A failed operation fails its request with the usual status and message (delivered by
 *    chorus_wait/test to the calling thread's chorus_last_error) and marks the
 *    communicator failed: the operations queued after it fail too. chorus_comm_abort ends
 *    every request in flight with CHORUS_ERR_ABORTED; so does chorus_comm_destroy, which
 *    stays local. CHORUS_TIMEOUT (chorus_comm_set_timeout) bounds each operation from the
 *    moment it starts running.
 *  - A blocking call on the communicator first waits for every operation in flight.
 *  - Device buffers are refused (CHORUS_ERR_UNSUPPORTED): device calls are already
 *    asynchronous, ordered on their stream.
 * Threads: the chorus_i* calls follow the communicator's one-thread rule; chorus_wait,
 * chorus_test, chorus_wait_all and chorus_request_free may be called from any thread, on
 * requests no other thread is using, also while the communicator's thread issues more. */
typedef struct chorus_request *chorus_request_t;

chorus_status_t chorus_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                  chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                  chorus_request_t *req_p);
chorus_status_t chorus_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  chorus_dtype_t dtype, chorus_comm_t comm,
                                  chorus_request_t *req_p);
chorus_status_t chorus_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                       chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                       chorus_request_t *req_p);
chorus_status_t chorus_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                  chorus_dtype_t dtype, int root, chorus_comm_t comm,
                                  chorus_request_t *req_p);
chorus_status_t chorus_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                               chorus_dtype_t dtype, chorus_op_t op, int root, chorus_comm_t comm,
                               chorus_request_t *req_p);
chorus_status_t chorus_ialltoall(const void *sendbuf, void *recvbuf, size_t count_per_peer,
                                 chorus_dtype_t dtype, chorus_comm_t comm,
                                 chorus_request_t *req_p);
chorus_status_t chorus_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                               chorus_dtype_t dtype, int root, chorus_comm_t comm,
                               chorus_request_t *req_p);
chorus_status_t chorus_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                chorus_dtype_t dtype, int root, chorus_comm_t comm,
                                chorus_request_t *req_p);
chorus_status_t chorus_iallgatherv(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   const size_t *recvcounts, const size_t *displs,
                                   chorus_dtype_t dtype, chorus_comm_t comm,
                                   chorus_request_t *req_p);
chorus_status_t chorus_ireduce_scatterv(const void *sendbuf, void *recvbuf,
                                        const size_t *recvcounts, chorus_dtype_t dtype,
                                        chorus_op_t op, chorus_comm_t comm,
                                        chorus_request_t *req_p);
chorus_status_t chorus_ialltoallv(const void *sendbuf, void *recvbuf, const size_t *sendcounts,
                                  const size_t *sdispls, const size_t *recvcounts,
                                  const size_t *rdispls, chorus_dtype_t dtype,
                                  chorus_comm_t comm, chorus_request_t *req_p);
chorus_status_t chorus_ibarrier(chorus_comm_t comm, chorus_request_t *req_p);
chorus_status_t chorus_isend(const void *buf, size_t count, chorus_dtype_t dtype, int peer,
                             chorus_comm_t comm, chorus_request_t *req_p);
chorus_status_t chorus_irecv(void *buf, size_t count, chorus_dtype_t dtype, int peer,
                             chorus_comm_t comm, chorus_request_t *req_p);

/* Waits until the operation of *req_p is complete, frees the request, sets *req_p to NULL
 * and returns the operation's status (its message in chorus_last_error). A NULL *req_p
 * returns CHORUS_SUCCESS at once. Waiting spins briefly, then yields, then sleeps. */
chorus_status_t chorus_wait(chorus_request_t *req_p);

/* *done_p = 1 when the operation is complete: the request is then freed, *req_p set to NULL
 * and the operation's status returned; else *done_p = 0 and CHORUS_SUCCESS. Never blocks
 * (it may start the pending send/recv group). A NULL *req_p is complete. */
chorus_status_t chorus_test(chorus_request_t *req_p, int *done_p);

/* Waits for every request of reqs[0..n) (NULLs allowed), freeing each and setting it to
 * NULL; returns the first failed status in array order (its message in chorus_last_error),
 * else CHORUS_SUCCESS. */
chorus_status_t chorus_wait_all(size_t n, chorus_request_t *reqs);

/* Releases a request without waiting: the operation still runs to completion, and its
 * status is dropped. Sets *req_p to NULL. */
chorus_status_t chorus_request_free(chorus_request_t *req_p);

/* ---- Tagged point to point (host memory) ----
 * Sends and receives matched as MPI matches them, for programs whose receives do not
 * follow their peers' send order (a framework's send/recv with tags, a receive from
 * whichever rank sends first):
 *  - A receive takes the first message, in arrival order, whose sender is `peer` (any
 *    sender for CHORUS_ANY_SOURCE) and whose tag is `tag`; a message that arrives before
 *    its receive is posted is held (copied to memory of the library's) until one is.
 *    Messages from one sender with one tag are received in the order sent.
 *  - Matched messages must agree in datatype and count: else both requests end with
 *    CHORUS_ERR_MISMATCH, naming both calls, and the communicator goes on.
 *  - A send completes once a receive has taken its message (as MPI_Issend): a send that
 *    nothing receives ends at the communicator's timeout with CHORUS_ERR_TIMEOUT naming the
 *    peer and tag, as does a receive that nothing matches (which names the messages held).
 *  - On a receive, *source_p (may be NULL; it must stay valid until the request completes)
 *    is set to the sender's rank when it succeeds.
 *  - The first tagged call makes comm a tagged communicator, which carries nothing else: a
 *    collective, chorus_send/recv or comm split on it afterwards is
 *    CHORUS_ERR_INVALID_ARGUMENT. Make one for them with chorus_comm_split(comm, 0, rank).
 *    Its operations run on the communicator's progress thread; complete them with
 *    chorus_wait, chorus_test, chorus_wait_all, or drop them with chorus_request_free.
 *  - tag >= 0. The calls follow the communicator's one-thread rule; waits may come from any
 *    thread. A lost peer fails every pending tagged request (CHORUS_ERR_REMOTE) and the
 *    communicator. Device buffers: CHORUS_ERR_UNSUPPORTED. */
#define CHORUS_ANY_SOURCE (-1)

chorus_status_t chorus_tagged_isend(const void *buf, size_t count, chorus_dtype_t dtype,
                                    int peer, int tag, chorus_comm_t comm,
                                    chorus_request_t *req_p);
chorus_status_t chorus_tagged_irecv(void *buf, size_t count, chorus_dtype_t dtype, int peer,
                                    int tag, chorus_comm_t comm, int *source_p,
                                    chorus_request_t *req_p);

/* ---- Introspection ---- */

/* The algorithm Chorus would choose on comm for `collective` ("allreduce", "allgather",
 * "reduce_scatter", "broadcast", "reduce", "alltoall", "barrier", "gather", "scatter",
 * "allgatherv", "reduce_scatterv", "alltoallv") of count elements of dtype, as a static
 * name ("ring", "tree", "rd", "pairwise", "dissemination", "direct"). count means what it
 * means in that collective's call (allgather, gather: sendcount; reduce_scatter, scatter:
 * recvcount; alltoall: count per peer; the v-forms: one rank's block) and is ignored for
 * "barrier"; dtype must be valid even there. The last five have one algorithm each, which
 * chorus_algorithm_predict does not model (CHORUS_ERR_UNSUPPORTED).
 * The answer follows CHORUS_ALGO as read when comm was created. Local: it communicates
 * nothing. CHORUS_ERR_INVALID_ARGUMENT for a NULL comm, collective or name_p, an unknown
 * collective name or an unknown dtype. For tools and logs; the choice may change between
 * releases. */
chorus_status_t chorus_algorithm_name(chorus_comm_t comm, const char *collective, size_t count,
                                      chorus_dtype_t dtype, const char **name_p);

/* The cost model's predicted time, in microseconds, of one call of `collective` (as in
 * chorus_algorithm_name) of count elements of dtype on comm, run with `algorithm` ("ring",
 * "rd", ...; NULL or "auto": the algorithm chorus_algorithm_name reports). Local: it
 * communicates nothing, and every rank gets the same number. CHORUS_ERR_UNSUPPORTED when
 * the algorithm does not implement the collective on this comm or the model is off
 * (CHORUS_TUNE=0); CHORUS_ERR_INVALID_ARGUMENT as chorus_algorithm_name, and for an
 * unknown algorithm name. A model, not a measurement: for tools and tuning. */
chorus_status_t chorus_algorithm_predict(chorus_comm_t comm, const char *collective,
                                         const char *algorithm, size_t count,
                                         chorus_dtype_t dtype, double *us_p);

/* What chorus_algorithm_predict_buffers assumes of the call's buffers (flags, or-ed). */
#define CHORUS_PREDICT_REGISTERED 1u /* every rank's buffers lie in memory from
                                      * chorus_mem_alloc: on one host, collectives read
                                      * their peers' buffers in place */
#define CHORUS_PREDICT_IN_PLACE 2u   /* every rank calls in place */

/* As chorus_algorithm_predict, for a call whose buffers are as flags say (0: plain buffers,
 * out of place, which is what chorus_algorithm_predict assumes). The registered paths
 * differ only where the call runs on one host's shared arena; elsewhere the flags do not
 * change the answer. CHORUS_ERR_INVALID_ARGUMENT as chorus_algorithm_predict, and for an
 * unknown flag. */
chorus_status_t chorus_algorithm_predict_buffers(chorus_comm_t comm, const char *collective,
                                                 const char *algorithm, size_t count,
                                                 chorus_dtype_t dtype, unsigned flags,
                                                 double *us_p);

/* Records a measured decision in the calibration file the tuner reads when a communicator
 * is created (CHORUS_TUNE_FILE, else $XDG_CACHE_HOME/chorus/tune-<hostname>.conf or
 * ~/.cache/chorus/...): communicators shaped like comm (the transport between same-host
 * ranks, the numbers of ranks and hosts) run `collective` of about `bytes` bytes (the size
 * class of the nearest recorded size, within 4x) with `algorithm` and a pipeline chunk of
 * chunk_bytes, unless CHORUS_ALGO forces another. Replaces an earlier record of the same
 * collective, shape and size; keeps every other line. Local, and it writes a file: call it
 * on one rank (chorus-bench calibrate measures every algorithm and records the fastest).
 * CHORUS_ERR_INVALID_ARGUMENT for a NULL comm or name, an unknown collective or algorithm,
 * one that does not implement the collective, or a size of 0 or above 1 TiB;
 * CHORUS_ERR_SYSTEM, naming the path, when the file cannot be written. */
chorus_status_t chorus_tune_record(chorus_comm_t comm, const char *collective, size_t bytes,
                                   const char *algorithm, size_t chunk_bytes);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_H */
