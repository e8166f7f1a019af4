/*
 * Acceptance 5 of issue 5: one table of bad inputs to the public API, each row naming the
 * call, the status it must return and a piece of the message chorus_last_error() must then
 * hold. The piece names the function and the argument, and the rank wherever a
 * communicator is known, because a user reads one rank's log out of hundreds.
 *
 * The rows run on three communicators made in this process: a 1-rank one (rank 0), rank 1
 * of a 2-rank one (its rank 0 lives in a helper thread; a message that always said
 * "rank 0" would fail there), and an aborted 1-rank one. After every row the runner checks
 * what a bad input must never do: change an output argument, fail a healthy communicator,
 * or leave a group open. Rows that expect CHORUS_SUCCESS are boundaries the API documents
 * as valid, kept next to the inputs they border.
 *
 * test_api_args.c checks the valid results of the same calls and overlaps with this table
 * on purpose: this file is the list a reader can audit in one place.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>

#include "chorus.h"
#include "util/config.h"

#define OK CHORUS_SUCCESS
#define INVAL CHORUS_ERR_INVALID_ARGUMENT
#define UNSUP CHORUS_ERR_UNSUPPORTED
#define ABORTED CHORUS_ERR_ABORTED

/* A count whose byte size wraps size_t to 0 (int32) or to a small number (float64). */
#define WRAP4 (SIZE_MAX / 4 + 1)
#define WRAP8 (SIZE_MAX / 8 + 2)
/* Just over the 2^40 bytes one call may move, in int32. */
#define OVER_TIB (((size_t)1 << 40) / 4 + 1)

static struct {
    chorus_comm_t w1;   /* 1-rank communicator */
    chorus_comm_t r0;   /* rank 0 of the 2-rank communicator, owned by the helper thread */
    chorus_comm_t r1;   /* rank 1 of it */
    chorus_comm_t dead; /* 1-rank communicator, aborted */
    chorus_unique_id_t id2;
    chorus_status_t r0_status;
    int32_t a[64], b[64];
    /* Outputs: preset before every row, and they must still hold the preset on failure. */
    chorus_comm_t out_comm;
    int out_int;
    chorus_status_t out_st;
    const char *out_name;
    double out_us;
    char tune_file[128];
    /* A helper that makes more calls after the one under test keeps that call's message. */
    char saved_msg[1024];
    int use_saved;
} F;

#define W1 F.w1
#define R1 F.r1
#define DEAD F.dead
#define A F.a
#define B F.b
#define SENTINEL_COMM ((chorus_comm_t)&F)
#define I32 CHORUS_INT32

/* ---- helpers for the rows that need more than one call ---- */

static void save_msg(void)
{
    snprintf(F.saved_msg, sizeof F.saved_msg, "%s", chorus_last_error());
    F.use_saved = 1;
}

/* A 1-rank communicator from a unique id whose byte at `at` is xor-ed with `flip`. */
static chorus_status_t init_corrupted(size_t at, int flip)
{
    chorus_unique_id_t id;
    chorus_status_t st = chorus_get_unique_id(&id);

    if (st != CHORUS_SUCCESS) return st;
    id.internal[at] = (char)(id.internal[at] ^ flip);
    return chorus_comm_init(&F.out_comm, 1, &id, 0);
}

/* chorus_comm_init_env with exactly the given launcher variables ("NAME=value ..."). */
static chorus_status_t init_env_with(const char *assignments)
{
    static const char *const vars[] = {"CHORUS_RANK", "CHORUS_WORLD_SIZE", "CHORUS_UNIQUE_ID",
                                       "CHORUS_ROOT", "RANK", "WORLD_SIZE", "MASTER_ADDR",
                                       "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                                       "PMI_RANK", "PMI_SIZE"};
    char buf[512], *save = NULL, *tok;
    chorus_status_t st;

    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    snprintf(buf, sizeof buf, "%s", assignments);
    for (tok = strtok_r(buf, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        *eq = '\0';
        setenv(tok, eq + 1, 1);
    }
    chorus__config_reload();
    st = chorus_comm_init_env(&F.out_comm);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    chorus__config_reload();
    return st;
}

/* A collective called inside a group: the group itself stays valid and empty. */
static chorus_status_t allreduce_in_group(void)
{
    chorus_status_t st;

    chorus_group_start();
    st = chorus_allreduce(A, B, 4, I32, CHORUS_SUM, W1, NULL);
    save_msg();
    if (chorus_group_end() != CHORUS_SUCCESS) return CHORUS_ERR_INTERNAL;
    return st;
}

static chorus_status_t group_end_without_start(void)
{
    return chorus_group_end();
}

/* Groups nest; one end more than the starts is the misuse. */
static chorus_status_t group_end_twice_after_one_start(void)
{
    chorus_group_start();
    chorus_group_start();
    if (chorus_group_end() != CHORUS_SUCCESS || chorus_group_end() != CHORUS_SUCCESS)
        return CHORUS_ERR_INTERNAL;
    return chorus_group_end();
}

/* A nested group whose outermost end finds a send to self with no receive. */
static chorus_status_t group_nested_unmatched_self_send(void)
{
    chorus_group_start();
    chorus_group_start();
    chorus_send(A, 4, I32, 0, W1, NULL);
    if (chorus_group_end() != CHORUS_SUCCESS) return CHORUS_ERR_INTERNAL;
    return chorus_group_end();
}

static chorus_status_t group_self_sizes_differ(void)
{
    chorus_group_start();
    chorus_send(A, 4, I32, 0, W1, NULL);
    chorus_recv(B, 8, I32, 0, W1, NULL);
    return chorus_group_end();
}

/* A bad call inside a group fails the group's end too, naming the first bad call. */
static chorus_status_t group_with_bad_peer(void)
{
    chorus_group_start();
    chorus_send(A, 4, I32, 0, W1, NULL);
    chorus_recv(B, 4, I32, 0, W1, NULL);
    chorus_send(A, 4, I32, 9, W1, NULL);
    return chorus_group_end();
}

/* The second call of a group on another communicator. */
static chorus_status_t group_two_comms(void)
{
    chorus_status_t st;

    chorus_group_start();
    chorus_send(A, 4, I32, 0, W1, NULL);
    st = chorus_recv(B, 4, I32, 0, R1, NULL);
    save_msg();
    if (chorus_group_end() != CHORUS_ERR_INVALID_ARGUMENT) return CHORUS_ERR_INTERNAL;
    return st;
}

/* The group's communicator is destroyed before chorus_group_end: the recorded operations
 * cannot run, and saying success would hide that they were dropped. */
static chorus_status_t group_comm_destroyed(void)
{
    chorus_unique_id_t id;
    chorus_comm_t c;

    if (chorus_get_unique_id(&id) != CHORUS_SUCCESS || chorus_comm_init(&c, 1, &id, 0) != 0)
        return CHORUS_ERR_INTERNAL;
    chorus_group_start();
    chorus_send(A, 4, I32, 0, c, NULL);
    chorus_recv(B, 4, I32, 0, c, NULL);
    chorus_comm_destroy(c);
    return chorus_group_end();
}

/* chorus_tune_record into a path that cannot be created. */
static chorus_status_t tune_record_unwritable(void)
{
    chorus_status_t st;

    setenv("CHORUS_TUNE_FILE", "/proc/chorus-no-such-dir/tune.conf", 1);
    chorus__config_reload();
    st = chorus_tune_record(W1, "allreduce", 4096, "ring", 65536);
    setenv("CHORUS_TUNE_FILE", F.tune_file, 1);
    chorus__config_reload();
    return st;
}

/* ---- the table ---- */

/* X(id, description, call, expected status, what the message must contain: pieces
 * separated by '|', each of which must appear) */
#define BAD_INPUTS(X)                                                                              \
    /* unique ids and communicator creation */                                                     \
    X(uid_null, "get_unique_id: NULL id_p", chorus_get_unique_id(NULL), INVAL,                     \
      "chorus_get_unique_id: id_p is NULL")                                                        \
    X(init_null_comm_p, "comm_init: NULL comm_p", chorus_comm_init(NULL, 1, &F.id2, 0), INVAL,     \
      "chorus_comm_init: comm_p is NULL")                                                          \
    X(init_null_id, "comm_init: NULL id", chorus_comm_init(&F.out_comm, 1, NULL, 0), INVAL,        \
      "chorus_comm_init: id is NULL")                                                              \
    X(init_zero_ranks, "comm_init: nranks 0", chorus_comm_init(&F.out_comm, 0, &F.id2, 0),         \
      INVAL, "chorus_comm_init: nranks 0 is not in 1..1048576")                                       \
    X(init_neg_ranks, "comm_init: nranks INT_MIN",                                                 \
      chorus_comm_init(&F.out_comm, INT_MIN, &F.id2, 0), INVAL,                                    \
      "chorus_comm_init: nranks -2147483648")                                                      \
    X(init_rank_high, "comm_init: rank == nranks",                                                 \
      chorus_comm_init(&F.out_comm, 4, &F.id2, 4), INVAL,                                          \
      "chorus_comm_init: rank 4 out of range for 4 ranks")                                         \
    X(init_rank_neg, "comm_init: rank -1", chorus_comm_init(&F.out_comm, 4, &F.id2, -1), INVAL,    \
      "chorus_comm_init: rank -1 out of range")                                                    \
    X(init_too_many, "comm_init: nranks 2^20 + 1 (beyond the bootstrap's limit)",                  \
      chorus_comm_init(&F.out_comm, (1 << 20) + 1, &F.id2, 0), INVAL,                              \
      "chorus_comm_init: nranks 1048577 is not in 1..1048576")                                     \
    X(init_int_max, "comm_init: nranks INT_MAX (refused before any allocation)",                   \
      chorus_comm_init(&F.out_comm, INT_MAX, &F.id2, 0), INVAL,                                    \
      "chorus_comm_init: nranks 2147483647 is not in 1..1048576")                                  \
    X(init_bad_magic, "comm_init: id with a corrupted magic", init_corrupted(0, 0x20), INVAL,      \
      "chorus_comm_init: rank 0 of 1|not a Chorus unique id (bad magic)")                          \
    X(init_bad_version, "comm_init: id of another version", init_corrupted(4, 0x40), INVAL,        \
      "chorus_comm_init: rank 0 of 1|unique id version 65")                                        \
    X(init_bad_family, "comm_init: id with an unknown address family",                             \
      init_corrupted(5, 0x08), INVAL, "rank 0 of 1|corrupted unique id (root address)")            \
    X(init_bad_tail, "comm_init: id with a byte set in its zero tail",                             \
      init_corrupted(100, 0x01), INVAL, "rank 0 of 1|corrupted unique id (byte 100)")              \
    X(init_wrong_secret, "comm_init: id with a wrong secret (the root refuses it)",                \
      init_corrupted(30, 0x10), CHORUS_ERR_AUTH, "chorus_comm_init: rank 0 of 1|secret")           \
    X(init_env_null, "comm_init_env: NULL comm_p", chorus_comm_init_env(NULL), INVAL,              \
      "chorus_comm_init_env: comm_p is NULL")                                                      \
    X(init_env_empty, "comm_init_env: no launcher variables", init_env_with(""), INVAL,            \
      "chorus_comm_init_env|no rank in the environment")                                           \
    X(init_env_half, "comm_init_env: CHORUS_RANK without CHORUS_WORLD_SIZE",                       \
      init_env_with("CHORUS_RANK=0"), INVAL,                                                       \
      "chorus_comm_init_env|CHORUS_RANK is set but CHORUS_WORLD_SIZE")                             \
    X(init_env_rank_high, "comm_init_env: RANK >= WORLD_SIZE",                                     \
      init_env_with("RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1"), INVAL,             \
      "chorus_comm_init_env|RANK=2 and WORLD_SIZE=2")                                              \
    X(init_env_rank_text, "comm_init_env: CHORUS_RANK not a number",                               \
      init_env_with("CHORUS_RANK=one CHORUS_WORLD_SIZE=2"), INVAL, "init_env|CHORUS_RANK=one")     \
    X(init_env_bad_hex, "comm_init_env: CHORUS_UNIQUE_ID too short",                               \
      init_env_with("CHORUS_RANK=0 CHORUS_WORLD_SIZE=1 CHORUS_UNIQUE_ID=abcd"), INVAL,             \
      "chorus_comm_init_env|hex id of 4 digits")                                                   \
    X(init_env_no_root, "comm_init_env: rank and size but no rendezvous address",                  \
      init_env_with("CHORUS_RANK=0 CHORUS_WORLD_SIZE=1"), INVAL,                                   \
      "init_env|no rendezvous address")                                                            \
    /* accessors, abort, destroy */                                                                \
    X(rank_null_comm, "comm_rank: NULL comm", chorus_comm_rank(NULL, &F.out_int), INVAL,           \
      "chorus_comm_rank: comm is NULL")                                                            \
    X(rank_null_out, "comm_rank: NULL rank_p", chorus_comm_rank(W1, NULL), INVAL,                  \
      "chorus_comm_rank: rank_p is NULL")                                                          \
    X(size_null_comm, "comm_size: NULL comm", chorus_comm_size(NULL, &F.out_int), INVAL,           \
      "chorus_comm_size: comm is NULL")                                                            \
    X(size_null_out, "comm_size: NULL size_p", chorus_comm_size(R1, NULL), INVAL,                  \
      "chorus_comm_size: size_p is NULL")                                                          \
    X(abort_null, "comm_abort: NULL comm", chorus_comm_abort(NULL), INVAL,                         \
      "chorus_comm_abort: comm is NULL")                                                           \
    X(async_null_comm, "comm_get_async_error: NULL comm",                                          \
      chorus_comm_get_async_error(NULL, &F.out_st), INVAL,                                         \
      "chorus_comm_get_async_error: comm is NULL")                                                 \
    X(async_null_out, "comm_get_async_error: NULL async_error_p",                                  \
      chorus_comm_get_async_error(W1, NULL), INVAL, "async_error_p is NULL")                       \
    X(destroy_null, "comm_destroy: NULL is accepted and ignored", chorus_comm_destroy(NULL),       \
      OK, "")                                                                                      \
    /* split */                                                                                    \
    X(split_null_comm, "comm_split: NULL comm", chorus_comm_split(NULL, 0, 0, &F.out_comm),        \
      INVAL, "comm_split: comm is NULL")                                                           \
    X(split_null_out, "comm_split: NULL newcomm_p", chorus_comm_split(W1, 0, 0, NULL), INVAL,      \
      "rank 0: comm_split: newcomm_p is NULL")                                                     \
    X(split_neg_color, "comm_split: color -5", chorus_comm_split(W1, -5, 0, &F.out_comm),          \
      INVAL, "rank 0: comm_split: color -5 is negative")                                           \
    X(split_min_color, "comm_split: color INT_MIN",                                                \
      chorus_comm_split(W1, INT_MIN, 0, &F.out_comm), INVAL, "color -2147483648")                  \
    X(split_aborted, "comm_split: aborted comm", chorus_comm_split(DEAD, 0, 0, &F.out_comm),       \
      ABORTED, "rank 0: comm_split: the communicator failed earlier")                              \
    X(split_nocolor_min_key, "comm_split: NOCOLOR with key INT_MIN is valid",                      \
      chorus_comm_split(W1, CHORUS_SPLIT_NOCOLOR, INT_MIN, &F.out_comm), OK, "")                   \
    /* NULL communicator, every collective and point-to-point call */                              \
    X(ar_null_comm, "allreduce: NULL comm",                                                        \
      chorus_allreduce(A, B, 4, I32, CHORUS_SUM, NULL, NULL), INVAL, "allreduce: comm is NULL")    \
    X(ag_null_comm, "allgather: NULL comm", chorus_allgather(A, B, 1, I32, NULL, NULL), INVAL,     \
      "allgather: comm is NULL")                                                                   \
    X(rs_null_comm, "reduce_scatter: NULL comm",                                                   \
      chorus_reduce_scatter(A, B, 1, I32, CHORUS_SUM, NULL, NULL), INVAL,                          \
      "reduce_scatter: comm is NULL")                                                              \
    X(bc_null_comm, "broadcast: NULL comm", chorus_broadcast(A, B, 4, I32, 0, NULL, NULL),         \
      INVAL, "broadcast: comm is NULL")                                                            \
    X(red_null_comm, "reduce: NULL comm",                                                          \
      chorus_reduce(A, B, 4, I32, CHORUS_SUM, 0, NULL, NULL), INVAL, "reduce: comm is NULL")       \
    X(a2a_null_comm, "alltoall: NULL comm", chorus_alltoall(A, B, 1, I32, NULL, NULL), INVAL,      \
      "alltoall: comm is NULL")                                                                    \
    X(send_null_comm, "send: NULL comm", chorus_send(A, 1, I32, 0, NULL, NULL), INVAL,             \
      "send: comm is NULL")                                                                        \
    X(recv_null_comm, "recv: NULL comm", chorus_recv(B, 1, I32, 0, NULL, NULL), INVAL,             \
      "recv: comm is NULL")                                                                        \
    X(barrier_null_comm, "barrier: NULL comm", chorus_barrier(NULL), INVAL,                        \
      "barrier: comm is NULL")                                                                     \
    /* NULL buffers */                                                                             \
    X(ar_null_send, "allreduce: NULL sendbuf",                                                     \
      chorus_allreduce(NULL, B, 4, I32, CHORUS_SUM, W1, NULL), INVAL,                              \
      "rank 0: allreduce: sendbuf is NULL")                                                        \
    X(ar_null_recv_r1, "allreduce: NULL recvbuf on rank 1",                                        \
      chorus_allreduce(A, NULL, 4, I32, CHORUS_SUM, R1, NULL), INVAL,                              \
      "rank 1: allreduce: recvbuf is NULL")                                                        \
    X(ag_null_send, "allgather: NULL sendbuf", chorus_allgather(NULL, B, 4, I32, R1, NULL),        \
      INVAL, "rank 1: allgather: sendbuf is NULL")                                                 \
    X(ag_null_recv, "allgather: NULL recvbuf", chorus_allgather(A, NULL, 4, I32, W1, NULL),        \
      INVAL, "rank 0: allgather: recvbuf is NULL")                                                 \
    X(rs_null_send, "reduce_scatter: NULL sendbuf",                                                \
      chorus_reduce_scatter(NULL, B, 4, I32, CHORUS_SUM, R1, NULL), INVAL,                         \
      "rank 1: reduce_scatter: sendbuf is NULL")                                                   \
    X(rs_null_recv, "reduce_scatter: NULL recvbuf",                                                \
      chorus_reduce_scatter(A, NULL, 4, I32, CHORUS_MAX, W1, NULL), INVAL,                         \
      "rank 0: reduce_scatter: recvbuf is NULL")                                                   \
    X(bc_null_send_root, "broadcast: NULL sendbuf on the root",                                    \
      chorus_broadcast(NULL, B, 4, I32, 1, R1, NULL), INVAL,                                       \
      "rank 1: broadcast: sendbuf is NULL")                                                        \
    X(bc_null_recv, "broadcast: NULL recvbuf", chorus_broadcast(A, NULL, 4, I32, 0, W1, NULL),     \
      INVAL, "rank 0: broadcast: recvbuf is NULL")                                                 \
    X(red_null_send, "reduce: NULL sendbuf off the root",                                          \
      chorus_reduce(NULL, B, 4, I32, CHORUS_SUM, 0, R1, NULL), INVAL,                              \
      "rank 1: reduce: sendbuf is NULL")                                                           \
    X(red_null_recv_root, "reduce: NULL recvbuf on the root",                                      \
      chorus_reduce(A, NULL, 4, I32, CHORUS_SUM, 1, R1, NULL), INVAL,                              \
      "rank 1: reduce: recvbuf is NULL")                                                           \
    X(a2a_null_send, "alltoall: NULL sendbuf", chorus_alltoall(NULL, B, 4, I32, W1, NULL),         \
      INVAL, "rank 0: alltoall: sendbuf is NULL")                                                  \
    X(a2a_null_recv, "alltoall: NULL recvbuf", chorus_alltoall(A, NULL, 4, I32, R1, NULL),         \
      INVAL, "rank 1: alltoall: recvbuf is NULL")                                                  \
    X(send_null_buf, "send: NULL buf", chorus_send(NULL, 4, I32, 0, R1, NULL), INVAL,              \
      "rank 1: send: buf is NULL")                                                                 \
    X(recv_null_buf, "recv: NULL buf", chorus_recv(NULL, 4, I32, 0, R1, NULL), INVAL,              \
      "rank 1: recv: buf is NULL")                                                                 \
    X(count0_null_bufs, "allreduce: count 0 with NULL buffers is valid",                           \
      chorus_allreduce(NULL, NULL, 0, I32, CHORUS_SUM, R1, NULL), OK, "")                          \
    /* unknown dtype and op */                                                                     \
    X(ar_dtype, "allreduce: dtype 42",                                                             \
      chorus_allreduce(A, B, 4, (chorus_dtype_t)42, CHORUS_SUM, R1, NULL), INVAL,                  \
      "rank 1: allreduce: unknown dtype 42")                                                       \
    X(ar_dtype_count0, "allreduce: dtype -1 is checked at count 0 too",                            \
      chorus_allreduce(NULL, NULL, 0, (chorus_dtype_t)-1, CHORUS_SUM, W1, NULL), INVAL,            \
      "rank 0: allreduce: unknown dtype -1")                                                       \
    X(ag_dtype, "allgather: dtype NUM_DTYPES",                                                     \
      chorus_allgather(A, B, 1, CHORUS_NUM_DTYPES, W1, NULL), INVAL,                               \
      "rank 0: allgather: unknown dtype 10")                                                       \
    X(rs_dtype, "reduce_scatter: dtype 99",                                                        \
      chorus_reduce_scatter(A, B, 1, (chorus_dtype_t)99, CHORUS_SUM, W1, NULL), INVAL,             \
      "reduce_scatter: unknown dtype 99")                                                          \
    X(bc_dtype, "broadcast: dtype INT_MIN",                                                        \
      chorus_broadcast(A, B, 1, (chorus_dtype_t)INT_MIN, 0, W1, NULL), INVAL,                      \
      "rank 0: broadcast: unknown dtype -2147483648")                                              \
    X(red_dtype, "reduce: dtype 11", chorus_reduce(A, B, 1, (chorus_dtype_t)11, CHORUS_MIN, 0,     \
      W1, NULL), INVAL, "rank 0: reduce: unknown dtype 11")                                        \
    X(a2a_dtype, "alltoall: dtype 12",                                                             \
      chorus_alltoall(A, B, 1, (chorus_dtype_t)12, R1, NULL), INVAL,                               \
      "rank 1: alltoall: unknown dtype 12")                                                        \
    X(send_dtype, "send: dtype 42", chorus_send(A, 1, (chorus_dtype_t)42, 0, W1, NULL), INVAL,     \
      "rank 0: send: unknown dtype 42")                                                            \
    X(recv_dtype, "recv: dtype -3", chorus_recv(B, 1, (chorus_dtype_t)-3, 0, R1, NULL), INVAL,     \
      "rank 1: recv: unknown dtype -3")                                                            \
    X(ar_op, "allreduce: op 99",                                                                   \
      chorus_allreduce(A, B, 4, I32, (chorus_op_t)99, W1, NULL), INVAL,                            \
      "rank 0: allreduce: unknown op 99")                                                          \
    X(ar_op_num, "allreduce: op NUM_OPS on rank 1",                                                \
      chorus_allreduce(A, B, 4, I32, CHORUS_NUM_OPS, R1, NULL), INVAL,                             \
      "rank 1: allreduce: unknown op 5")                                                           \
    X(rs_op, "reduce_scatter: op -2",                                                              \
      chorus_reduce_scatter(A, B, 1, I32, (chorus_op_t)-2, W1, NULL), INVAL,                       \
      "rank 0: reduce_scatter: unknown op -2")                                                     \
    X(red_op, "reduce: op 7", chorus_reduce(A, B, 4, I32, (chorus_op_t)7, 0, R1, NULL), INVAL,     \
      "rank 1: reduce: unknown op 7")                                                              \
    /* roots and peers out of range */                                                             \
    X(bc_root_high, "broadcast: root == nranks",                                                   \
      chorus_broadcast(A, B, 4, I32, 2, R1, NULL), INVAL,                                          \
      "rank 1: broadcast: root 2 out of range for 2 ranks")                                        \
    X(bc_root_neg, "broadcast: root -1", chorus_broadcast(A, B, 4, I32, -1, W1, NULL), INVAL,      \
      "rank 0: broadcast: root -1 out of range for 1 ranks")                                       \
    X(red_root_high, "reduce: root INT_MAX",                                                       \
      chorus_reduce(A, B, 4, I32, CHORUS_SUM, INT_MAX, R1, NULL), INVAL,                           \
      "rank 1: reduce: root 2147483647 out of range")                                              \
    X(red_root_neg, "reduce: root INT_MIN at count 0",                                             \
      chorus_reduce(NULL, NULL, 0, I32, CHORUS_SUM, INT_MIN, W1, NULL), INVAL,                     \
      "rank 0: reduce: root -2147483648 out of range")                                             \
    X(send_peer_high, "send: peer == nranks", chorus_send(A, 4, I32, 2, R1, NULL), INVAL,          \
      "rank 1: send: peer 2 out of range for 2 ranks")                                             \
    X(send_peer_neg, "send: peer -1", chorus_send(A, 4, I32, -1, W1, NULL), INVAL,                 \
      "rank 0: send: peer -1 out of range")                                                        \
    X(recv_peer_high, "recv: peer 1 of 1 rank", chorus_recv(B, 4, I32, 1, W1, NULL), INVAL,        \
      "rank 0: recv: peer 1 out of range for 1 ranks")                                             \
    X(recv_peer_min, "recv: peer INT_MIN", chorus_recv(B, 0, I32, INT_MIN, R1, NULL), INVAL,       \
      "rank 1: recv: peer -2147483648 out of range")                                               \
    /* counts whose byte size overflows size_t or passes the 2^40-byte limit */                    \
    X(ar_count_max, "allreduce: count SIZE_MAX",                                                   \
      chorus_allreduce(A, B, SIZE_MAX, I32, CHORUS_SUM, W1, NULL), INVAL,                          \
      "rank 0: allreduce: count 18446744073709551615 of 4-byte elements is too large")             \
    X(ar_count_wrap, "allreduce: count * 4 wraps to 0",                                            \
      chorus_allreduce(A, B, WRAP4, I32, CHORUS_SUM, R1, NULL), INVAL,                             \
      "rank 1: allreduce: count 4611686018427387904 of 4-byte")                                    \
    X(ag_count_wrap, "allgather: count * 8 wraps to 8",                                            \
      chorus_allgather(A, B, WRAP8, CHORUS_FLOAT64, R1, NULL), INVAL,                              \
      "rank 1: allgather: count 2305843009213693953 of 8-byte elements is too large")              \
    X(rs_count_tib, "reduce_scatter: just over 2^40 bytes",                                        \
      chorus_reduce_scatter(A, B, OVER_TIB, I32, CHORUS_SUM, W1, NULL), INVAL,                     \
      "rank 0: reduce_scatter: count 274877906945")                                                \
    X(bc_count_wrap, "broadcast: count * 2 wraps", chorus_broadcast(A, B, SIZE_MAX / 2 + 1,        \
      CHORUS_FLOAT16, 0, W1, NULL), INVAL, "rank 0: broadcast: count 9223372036854775808")         \
    X(red_count_wrap, "reduce: count * 8 wraps",                                                   \
      chorus_reduce(A, B, WRAP8, CHORUS_UINT64, CHORUS_SUM, 0, R1, NULL), INVAL,                   \
      "rank 1: reduce: count 2305843009213693953")                                                 \
    X(a2a_count_tib, "alltoall: just over 2^40 bytes per peer",                                    \
      chorus_alltoall(A, B, OVER_TIB, I32, R1, NULL), INVAL,                                       \
      "rank 1: alltoall: count 274877906945 of 4-byte")                                            \
    X(send_count_wrap, "send: count * 4 wraps to 0",                                               \
      chorus_send(A, WRAP4, CHORUS_FLOAT32, 0, R1, NULL), INVAL,                                   \
      "rank 1: send: count 4611686018427387904 of 4-byte elements is too large")                   \
    X(recv_count_max, "recv: count SIZE_MAX", chorus_recv(B, SIZE_MAX, CHORUS_INT8, 0, W1,         \
      NULL), INVAL, "rank 0: recv: count 18446744073709551615")                                    \
    /* aliasing: in place only in the layout chorus.h documents */                                 \
    X(ar_overlap, "allreduce: recvbuf = sendbuf + 1 element",                                      \
      chorus_allreduce(A, A + 1, 4, I32, CHORUS_SUM, W1, NULL), INVAL,                             \
      "rank 0: allreduce: sendbuf and recvbuf overlap")                                            \
    X(ag_inplace_rank0_layout_on_r1, "allgather: sendbuf == recvbuf on rank 1 (needs +1*n)",       \
      chorus_allgather(A, A, 4, I32, R1, NULL), INVAL,                                             \
      "rank 1: allgather: sendbuf and recvbuf overlap")                                            \
    X(rs_inplace_wrong, "reduce_scatter: recvbuf == sendbuf on rank 1 (needs +1*n)",               \
      chorus_reduce_scatter(A, A, 4, I32, CHORUS_SUM, R1, NULL), INVAL,                            \
      "rank 1: reduce_scatter: sendbuf and recvbuf overlap")                                       \
    X(bc_overlap, "broadcast: recvbuf = sendbuf + 2 elements",                                     \
      chorus_broadcast(A, A + 2, 4, I32, 0, W1, NULL), INVAL,                                      \
      "rank 0: broadcast: sendbuf and recvbuf overlap")                                            \
    X(red_overlap_root, "reduce: overlapping buffers on the root",                                 \
      chorus_reduce(A + 3, A, 4, I32, CHORUS_MAX, 1, R1, NULL), INVAL,                             \
      "rank 1: reduce: sendbuf and recvbuf overlap")                                               \
    X(a2a_overlap, "alltoall: recvbuf = sendbuf + 1 element",                                      \
      chorus_alltoall(A, A + 1, 2, I32, R1, NULL), INVAL,                                          \
      "rank 1: alltoall: sendbuf and recvbuf overlap")                                             \
    /* CUDA streams in a host-only build */                                                        \
    X(ar_stream, "allreduce: a stream", chorus_allreduce(A, B, 4, I32, CHORUS_SUM, W1, &F),        \
      UNSUP, "rank 0: allreduce: stream is not NULL")                                              \
    X(a2a_stream, "alltoall: a stream", chorus_alltoall(A, B, 1, I32, R1, &F), UNSUP,              \
      "rank 1: alltoall: stream is not NULL")                                                      \
    X(recv_stream, "recv: a stream", chorus_recv(B, 1, I32, 0, W1, &F), UNSUP,                     \
      "rank 0: recv: stream is not NULL")                                                          \
    /* groups */                                                                                   \
    X(grp_end_alone, "group_end without group_start", group_end_without_start(), INVAL,            \
      "group_end: no matching chorus_group_start")                                                 \
    X(grp_end_extra, "group_end once more than group_start (nested)",                              \
      group_end_twice_after_one_start(), INVAL, "group_end: no matching chorus_group_start")       \
    X(grp_nested_unmatched, "nested group: a send to self without its recv",                       \
      group_nested_unmatched_self_send(), INVAL,                                                   \
      "rank 0: group: a send to self has no matching recv from self")                              \
    X(grp_self_sizes, "group: send to self of 16 bytes, recv of 32", group_self_sizes_differ(),    \
      INVAL, "rank 0: group: a send to self of 16 bytes meets a recv from self of 32 bytes")       \
    X(grp_bad_member, "group: one call with peer 9 fails the group",                               \
      group_with_bad_peer(), INVAL, "group_end|rank 0: send: peer 9 out of range")                 \
    X(grp_two_comms, "group: operations of two communicators", group_two_comms(), INVAL,           \
      "rank 1: recv: a group may hold operations of one communicator")                             \
    X(grp_comm_destroyed, "group: its communicator destroyed before group_end",                    \
      group_comm_destroyed(), INVAL, "group_end|rank 0: the group's communicator was destroyed")   \
    X(grp_collective, "allreduce inside a group", allreduce_in_group(), UNSUP,                     \
      "rank 0: allreduce: collectives inside chorus_group_start/end are not supported")            \
    X(send_self_no_group, "send to self outside a group", chorus_send(A, 4, I32, 0, W1, NULL),     \
      INVAL, "rank 0: send: a send to self outside a group can never complete")                    \
    X(recv_self_no_group, "recv from self outside a group",                                        \
      chorus_recv(B, 4, I32, 1, R1, NULL), INVAL,                                                  \
      "rank 1: recv: a recv from self outside a group")                                            \
    /* an aborted communicator: calls fail, argument errors stay argument errors */                \
    X(dead_allreduce, "allreduce on an aborted comm",                                              \
      chorus_allreduce(A, B, 4, I32, CHORUS_SUM, DEAD, NULL), ABORTED,                             \
      "rank 0: allreduce: the communicator failed earlier (aborted)")                              \
    X(dead_barrier, "barrier on an aborted comm", chorus_barrier(DEAD), ABORTED,                   \
      "rank 0: barrier: the communicator failed earlier")                                          \
    X(dead_send, "send on an aborted comm", chorus_send(A, 4, I32, 0, DEAD, NULL), ABORTED,        \
      "rank 0: send: the communicator failed earlier")                                             \
    X(dead_bad_dtype, "bad dtype on an aborted comm is still INVALID_ARGUMENT",                    \
      chorus_allreduce(A, B, 4, (chorus_dtype_t)42, CHORUS_SUM, DEAD, NULL), INVAL,                \
      "rank 0: allreduce: unknown dtype 42")                                                       \
    /* chorus_algorithm_name */                                                                    \
    X(an_null_comm, "algorithm_name: NULL comm",                                                   \
      chorus_algorithm_name(NULL, "allreduce", 4, I32, &F.out_name), INVAL,                        \
      "chorus_algorithm_name: comm is NULL")                                                       \
    X(an_null_coll, "algorithm_name: NULL collective",                                             \
      chorus_algorithm_name(R1, NULL, 4, I32, &F.out_name), INVAL,                                 \
      "rank 1: chorus_algorithm_name: collective is NULL")                                         \
    X(an_null_out, "algorithm_name: NULL name_p",                                                  \
      chorus_algorithm_name(W1, "allreduce", 4, I32, NULL), INVAL,                                 \
      "rank 0: chorus_algorithm_name: name_p is NULL")                                             \
    X(an_sendrecv, "algorithm_name: \"sendrecv\" is not a collective name",                        \
      chorus_algorithm_name(W1, "sendrecv", 4, I32, &F.out_name), INVAL,                           \
      "rank 0: chorus_algorithm_name: unknown collective \"sendrecv\"")                            \
    X(an_dtype_barrier, "algorithm_name: barrier still checks dtype",                              \
      chorus_algorithm_name(R1, "barrier", 0, (chorus_dtype_t)42, &F.out_name), INVAL,             \
      "rank 1: chorus_algorithm_name: unknown dtype 42")                                           \
    /* chorus_algorithm_predict */                                                                 \
    X(ap_null_comm, "algorithm_predict: NULL comm",                                                \
      chorus_algorithm_predict(NULL, "allreduce", NULL, 4, I32, &F.out_us), INVAL,                 \
      "chorus_algorithm_predict: comm is NULL")                                                    \
    X(ap_null_coll, "algorithm_predict: NULL collective",                                          \
      chorus_algorithm_predict(W1, NULL, "ring", 4, I32, &F.out_us), INVAL,                        \
      "rank 0: chorus_algorithm_predict: collective is NULL")                                      \
    X(ap_null_out, "algorithm_predict: NULL us_p",                                                 \
      chorus_algorithm_predict(R1, "allreduce", "ring", 4, I32, NULL), INVAL,                      \
      "rank 1: chorus_algorithm_predict: us_p is NULL")                                            \
    X(ap_unknown_coll, "algorithm_predict: unknown collective",                                    \
      chorus_algorithm_predict(W1, "allreduc", NULL, 4, I32, &F.out_us), INVAL,                    \
      "rank 0: chorus_algorithm_predict: unknown collective \"allreduc\"")                         \
    X(ap_unknown_algo, "algorithm_predict: unknown algorithm",                                     \
      chorus_algorithm_predict(R1, "allreduce", "rings", 4, I32, &F.out_us), INVAL,                \
      "rank 1: chorus_algorithm_predict: unknown algorithm \"rings\"")                             \
    X(ap_algo_not_impl, "algorithm_predict: pairwise does not run allreduce",                      \
      chorus_algorithm_predict(R1, "allreduce", "pairwise", 4, I32, &F.out_us), UNSUP,             \
      "rank 1: chorus_algorithm_predict: pairwise does not implement allreduce")                   \
    X(ap_dtype, "algorithm_predict: dtype 42",                                                     \
      chorus_algorithm_predict(W1, "allgather", "ring", 4, (chorus_dtype_t)42, &F.out_us),         \
      INVAL, "rank 0: chorus_algorithm_predict: unknown dtype 42")                                 \
    X(apb_flags, "algorithm_predict_buffers: unknown flag",                                      \
      chorus_algorithm_predict_buffers(R1, "allreduce", "ring", 4, I32, 4u, &F.out_us), INVAL,      \
      "rank 1: chorus_algorithm_predict_buffers: unknown flags 0x4")                               \
    X(apb_null_out, "algorithm_predict_buffers: NULL us_p",                                      \
      chorus_algorithm_predict_buffers(W1, "allgather", NULL, 4, I32, CHORUS_PREDICT_REGISTERED,    \
                                       NULL),                                                       \
      INVAL, "rank 0: chorus_algorithm_predict_buffers: us_p is NULL")                             \
    /* chorus_tune_record (CHORUS_TUNE_FILE points into a private temporary folder) */             \
    X(st_null_comm, "set_timeout: NULL comm", chorus_comm_set_timeout(NULL, 1.0), INVAL,           \
      "chorus_comm_set_timeout: comm is NULL")                                                     \
    X(st_negative, "set_timeout: negative seconds", chorus_comm_set_timeout(R1, -1.0), INVAL,       \
      "rank 1: chorus_comm_set_timeout: -1 seconds")                                               \
    X(st_nan, "set_timeout: NaN seconds", chorus_comm_set_timeout(W1, NAN), INVAL,                 \
      "rank 0: chorus_comm_set_timeout: nan seconds")                                              \
    X(st_huge, "set_timeout: above 1e9 seconds", chorus_comm_set_timeout(W1, 1e10), INVAL,         \
      "rank 0: chorus_comm_set_timeout: 1e+10 seconds")                                            \
    X(sr_null_comm, "set_reproducible: NULL comm", chorus_comm_set_reproducible(NULL, 1), INVAL,   \
      "chorus_comm_set_reproducible: comm is NULL")                                                \
    X(sr_three, "set_reproducible: level 3", chorus_comm_set_reproducible(R1, 3), INVAL,           \
      "rank 1: chorus_comm_set_reproducible: level 3 is not 0, 1 or 2")                            \
    X(sr_negative, "set_reproducible: level -1", chorus_comm_set_reproducible(W1, -1), INVAL,      \
      "rank 0: chorus_comm_set_reproducible: level -1 is not 0, 1 or 2")                           \
    X(gr_null_comm, "get_reproducible: NULL comm",                                                 \
      chorus_comm_get_reproducible(NULL, &F.out_int), INVAL,                                       \
      "chorus_comm_get_reproducible: comm is NULL")                                                \
    X(gr_null_out, "get_reproducible: NULL level_p", chorus_comm_get_reproducible(W1, NULL),       \
      INVAL, "chorus_comm_get_reproducible: level_p is NULL")                                      \
    X(tr_null_comm, "tune_record: NULL comm",                                                      \
      chorus_tune_record(NULL, "allreduce", 4096, "ring", 65536), INVAL,                           \
      "chorus_tune_record: comm is NULL")                                                          \
    X(tr_null_coll, "tune_record: NULL collective",                                                \
      chorus_tune_record(W1, NULL, 4096, "ring", 65536), INVAL,                                    \
      "rank 0: chorus_tune_record: collective is NULL")                                            \
    X(tr_null_algo, "tune_record: NULL algorithm",                                                 \
      chorus_tune_record(R1, "allreduce", 4096, NULL, 65536), INVAL,                               \
      "rank 1: chorus_tune_record: algorithm is NULL")                                             \
    X(tr_unknown_coll, "tune_record: unknown collective",                                          \
      chorus_tune_record(W1, "scan", 4096, "ring", 65536), INVAL,                                  \
      "rank 0: chorus_tune_record: unknown collective \"scan\"")                                   \
    X(tr_auto, "tune_record: \"auto\" is not a measured algorithm",                                \
      chorus_tune_record(W1, "allreduce", 4096, "auto", 65536), INVAL,                             \
      "rank 0: chorus_tune_record: \"auto\" is not an algorithm")                                  \
    X(tr_not_impl, "tune_record: tree does not run allgather",                                     \
      chorus_tune_record(R1, "allgather", 4096, "tree", 65536), INVAL,                             \
      "rank 1: chorus_tune_record: tree does not implement allgather")                             \
    X(tr_arena_sendrecv, "tune_record: the arena runs no sendrecv",                                \
      chorus_tune_record(W1, "sendrecv", 4096, "arena", 65536), INVAL,                             \
      "rank 0: chorus_tune_record: unknown collective \"sendrecv\"")                               \
    X(tr_bytes0, "tune_record: 0 bytes", chorus_tune_record(W1, "allreduce", 0, "ring", 65536),    \
      INVAL, "rank 0: chorus_tune_record: allreduce of 0 bytes")                                   \
    X(tr_bytes_huge, "tune_record: above 1 TiB",                                                   \
      chorus_tune_record(W1, "allreduce", ((size_t)1 << 40) + 1, "ring", 65536), INVAL,            \
      "rank 0: chorus_tune_record|1099511627777 bytes|1 TiB")                                      \
    X(tr_chunk0, "tune_record: chunk 0", chorus_tune_record(R1, "broadcast", 4096, "tree", 0),     \
      INVAL, "rank 1: chorus_tune_record: broadcast of 4096 bytes with chunk 0")                   \
    X(tr_unwritable, "tune_record: a file that cannot be written", tune_record_unwritable(),       \
      CHORUS_ERR_SYSTEM, "rank 0: chorus_tune_record|/proc/chorus-no-such-dir")

/* One function per row, so that each call is evaluated only when its row runs. */
#define ROW_FN(id, desc, call, want, what) \
    static chorus_status_t row_##id(void) { return (call); }
BAD_INPUTS(ROW_FN)
#undef ROW_FN

typedef struct {
    const char *id;
    const char *desc;
    chorus_status_t (*call)(void);
    chorus_status_t want;
    const char *what;
} bad_input_t;

#define ROW(id, desc, call, want, what) {#id, desc, row_##id, want, what},
static const bad_input_t rows[] = {BAD_INPUTS(ROW)};
#undef ROW
#define NROWS (sizeof rows / sizeof rows[0])

/* ---- fixtures ---- */

static void *rank0_main(void *arg)
{
    (void)arg;
    F.r0_status = chorus_comm_init(&F.r0, 2, &F.id2, 0);
    return NULL;
}

static int setup(void **state)
{
    chorus_unique_id_t id;
    pthread_t tid;
    const char *tmp = getenv("TMPDIR");
    (void)state;

    /* Every wait in these rows is local or on loopback: a short deadline keeps a
     * regression from hanging the suite. The tune file lives in a private folder. */
    setenv("CHORUS_TIMEOUT", "10", 1);
    snprintf(F.tune_file, sizeof F.tune_file, "%s/chorus-bad-inputs.XXXXXX",
             tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(F.tune_file) == NULL) return -1;
    strncat(F.tune_file, "/tune.conf", sizeof F.tune_file - strlen(F.tune_file) - 1);
    setenv("CHORUS_TUNE_FILE", F.tune_file, 1);
    chorus__config_reload();

    if (chorus_get_unique_id(&id) != CHORUS_SUCCESS || chorus_comm_init(&F.w1, 1, &id, 0) != 0 ||
        chorus_get_unique_id(&id) != CHORUS_SUCCESS || chorus_comm_init(&F.dead, 1, &id, 0) != 0 ||
        chorus_comm_abort(F.dead) != CHORUS_SUCCESS) {
        print_error("cannot make the 1-rank communicators: %s\n", chorus_last_error());
        return -1;
    }
    if (chorus_get_unique_id(&F.id2) != CHORUS_SUCCESS ||
        pthread_create(&tid, NULL, rank0_main, NULL) != 0)
        return -1;
    if (chorus_comm_init(&F.r1, 2, &F.id2, 1) != CHORUS_SUCCESS) {
        print_error("cannot make rank 1 of 2: %s\n", chorus_last_error());
        pthread_join(tid, NULL);
        return -1;
    }
    pthread_join(tid, NULL);
    for (int i = 0; i < 64; i++) F.a[i] = i;
    return F.r0_status == CHORUS_SUCCESS ? 0 : -1;
}

static int teardown(void **state)
{
    char dir[128];
    (void)state;

    chorus_comm_destroy(F.w1);
    chorus_comm_destroy(F.r1);
    chorus_comm_destroy(F.r0);
    chorus_comm_destroy(F.dead);
    unlink(F.tune_file);
    snprintf(dir, sizeof dir, "%s", F.tune_file);
    *strrchr(dir, '/') = '\0';
    rmdir(dir);
    return 0;
}

/* ---- the runner ---- */

static void preset_outputs(void)
{
    F.out_comm = SENTINEL_COMM;
    F.out_int = -12345;
    F.out_st = (chorus_status_t)12345;
    F.out_name = "untouched";
    F.out_us = -1.0;
    F.use_saved = 0;
}

/* Nonzero if msg holds every '|'-separated piece of what. */
static int msg_has_all(const char *msg, const char *what)
{
    char piece[256];

    while (*what != '\0') {
        size_t n = strcspn(what, "|");
        snprintf(piece, sizeof piece, "%.*s", (int)n, what);
        if (strstr(msg, piece) == NULL) return 0;
        what += n + (what[n] == '|');
    }
    return 1;
}

/* What a failed row must have left alone. Returns a complaint or NULL. */
static const char *outputs_changed(void)
{
    if (F.out_comm != SENTINEL_COMM) return "*comm_p was written";
    if (F.out_int != -12345) return "an int output was written";
    if (F.out_st != (chorus_status_t)12345) return "*async_error_p was written";
    if (strcmp(F.out_name, "untouched") != 0) return "*name_p was written";
    if (F.out_us != -1.0) return "*us_p was written";
    return NULL;
}

/* A bad input must not fail a healthy communicator or leave a group open. */
static const char *state_damaged(void)
{
    chorus_status_t st = CHORUS_SUCCESS;

    if (chorus_comm_get_async_error(F.w1, &st) != CHORUS_SUCCESS || st != CHORUS_SUCCESS)
        return "the 1-rank communicator was failed";
    if (chorus_comm_get_async_error(F.r1, &st) != CHORUS_SUCCESS || st != CHORUS_SUCCESS)
        return "rank 1's communicator was failed";
    if (chorus_group_end() != CHORUS_ERR_INVALID_ARGUMENT) return "a group was left open";
    return NULL;
}

static void test_bad_inputs_table(void **state)
{
    size_t failed = 0, bad = 0;
    (void)state;

    for (size_t i = 0; i < NROWS; i++) {
        const bad_input_t *r = &rows[i];
        const char *why = NULL, *msg;
        char msg_copy[1024];
        chorus_status_t st;

        preset_outputs();
        st = r->call();
        msg = F.use_saved ? F.saved_msg : chorus_last_error();
        snprintf(msg_copy, sizeof msg_copy, "%s", msg != NULL ? msg : "(null)");
        if (st != r->want)
            why = "wrong status";
        else if (st != CHORUS_SUCCESS && (msg == NULL || msg[0] == '\0'))
            why = "empty message";
        else if (st != CHORUS_SUCCESS && !msg_has_all(msg, r->what))
            why = "message lacks the expected text";
        else if (st != CHORUS_SUCCESS)
            why = outputs_changed();
        if (why == NULL) why = state_damaged();
        if (st == CHORUS_SUCCESS && F.out_comm != SENTINEL_COMM && F.out_comm != NULL)
            chorus_comm_destroy(F.out_comm); /* only a valid boundary row gets here */
        bad += r->want != CHORUS_SUCCESS;
        if (why != NULL) {
            failed++;
            print_error("FAIL %-28s %s: %s\n     got %s (%d): \"%s\"\n     want %s (%d) "
                        "with \"%s\"\n",
                        r->id, r->desc, why, chorus_status_string(st), (int)st, msg_copy,
                        chorus_status_string(r->want), (int)r->want, r->what);
        } else if (getenv("BAD_INPUTS_VERBOSE") != NULL) {
            print_message("ok   %-28s %-4d %s\n", r->id, (int)st, msg_copy);
        }
    }
    print_message("%zu rows (%zu bad inputs, %zu valid boundaries), %zu failed\n", NROWS, bad,
                  NROWS - bad, failed);
    assert_true(bad >= 30);
    assert_int_equal(failed, 0);
}

/* The functions that return no status answer a bad input with their documented value. */
static void test_non_status_functions(void **state)
{
    (void)state;

    assert_int_equal(chorus_dtype_size((chorus_dtype_t)42), 0);
    assert_int_equal(chorus_dtype_size((chorus_dtype_t)-1), 0);
    assert_int_equal(chorus_dtype_size(CHORUS_NUM_DTYPES), 0);
    assert_null(chorus_dtype_name((chorus_dtype_t)42));
    assert_null(chorus_dtype_name((chorus_dtype_t)INT_MIN));
    assert_null(chorus_op_name(CHORUS_NUM_OPS));
    assert_null(chorus_op_name((chorus_op_t)-1));
    assert_string_equal(chorus_status_string((chorus_status_t)-999), "unknown status");
    assert_string_equal(chorus_status_string((chorus_status_t)1), "unknown status");
    assert_int_equal(chorus_version(), CHORUS_VERSION_CODE);
    /* A success clears the thread's message. */
    assert_int_equal(chorus_comm_rank(NULL, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    assert_true(chorus_last_error()[0] != '\0');
    assert_int_equal(chorus_comm_destroy(NULL), CHORUS_SUCCESS);
    assert_string_equal(chorus_last_error(), "");
}

int main(void)
{
    /* These tables check the host-only answers (a stream with host buffers is
     * UNSUPPORTED there); with a GPU the same call is INVALID_ARGUMENT, which
     * tests/gpu/coll_matrix.c checks. So no GPU plugin, whatever the machine has. */
    setenv("CHORUS_CUDA_PLUGIN", "none", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_inputs_table),
        cmocka_unit_test(test_non_status_functions),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
