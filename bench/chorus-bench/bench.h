/*
 * chorus-bench internals. The files split the work as follows:
 *   main.c         start-up: options, environment, communicator, run metadata, reports
 *   args.c         the command line (nccl-tests flags and ours) and the help text
 *   run.c          the timed loops, the iteration count, the text tables of rank 0
 *   data.c         buffer contents and result checks
 *   report_json.c  the JSON document (written, and read back by sweep), with jansson
 *   report_csv.c   the CSV file
 *   algo_all.c     --algo all and `chorus-bench calibrate`: every algorithm, interleaved
 *   sweep.c        `chorus-bench sweep`: one job per rank count, and the scaling table
 *   plot.c         PNG plots through gnuplot
 *   gpu.c          -G: device buffers, the stream, and the copies of the checks
 *   nccl.c         --backend nccl: libnccl.so.2 through dlopen, no nccl.h needed
 * From the library: the public API (chorus.h), lib/util/config.h, and for -G the GPU
 * table of lib/gpu/gpu.h (the same plugin the library uses, so the bench and the library
 * agree on what a device pointer is).
 */
#ifndef CHORUS_BENCH_H
#define CHORUS_BENCH_H

#include "chorus.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    COLL_ALLREDUCE,
    COLL_ALLGATHER,
    COLL_REDUCE_SCATTER,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLTOALL,
    COLL_SENDRECV, /* ring: send to rank + 1, receive from rank - 1, in one group */
    COLL_BARRIER,  /* latency only: no data */
    /* The rooted and irregular ones (host memory only in the library). They come after the
     * others so that the first eight keep their numbers; the v-forms run with uniform
     * counts, the default of nccl-tests and OSU, so that they line up with their regular
     * counterparts (bench_counts). */
    COLL_GATHER,
    COLL_SCATTER,
    COLL_ALLGATHERV,
    COLL_REDUCE_SCATTERV,
    COLL_ALLTOALLV,
    COLL_COUNT
} coll_t;

/* Who runs the timed calls: the Chorus collectives, or NCCL's (with -G) for comparison. */
typedef enum { BACKEND_CHORUS = 0, BACKEND_NCCL = 1 } backend_t;

/* The `-a` choices of nccl-tests: which rank's time a row shows. */
typedef enum { AVG_RANK0 = 0, AVG_MEAN = 1, AVG_MIN = 2, AVG_MAX = 3 } avg_mode_t;

/* Sizes at or below this get the latency table across ranks by default (--lat-max). */
#define BENCH_LAT_MAX_DEFAULT ((size_t)64 << 10)
#define BENCH_ITERS_MIN 5
#define BENCH_ITERS_MAX 1000
/* Room for an algorithm name in a row ("dissemination" and whatever comes later). */
#define BENCH_ALGO_NAME_BYTES 32
/* The algorithm names of --algo (auto and the library's), in bench_algo_names. */
#define BENCH_NALGOS 11

typedef struct {
    int all_colls;
    coll_t coll;
    size_t min_bytes, max_bytes, step_bytes;
    size_t factor; /* > 1: multiply the size; 1: add step_bytes */
    int iters;     /* 0: adapt to time_per_size */
    int warmup, check, root;
    int blocking; /* -1 until resolved: 1 on host buffers, 0 on device buffers by default */
    avg_mode_t avg_mode;
    int all_dtypes, all_ops;
    chorus_dtype_t dtype;
    chorus_op_t op;
    double time_per_size; /* seconds of timed calls per size, both placements together */
    size_t lat_max;
    const char *algo;      /* NULL: leave CHORUS_ALGO as it is */
    int algo_all;          /* --algo all: every algorithm, each on a split communicator */
    int rounds;            /* --algo all and calibrate: interleaved rounds per size */
    int calibrate;         /* chorus-bench calibrate: also chunk sizes, and record the best */
    int repro_levels;      /* --reproducible: bit L set to time level L against the default
                            * (the algo_all.c machinery, with levels for algorithms) */
    const char *transport; /* NULL: leave CHORUS_TRANSPORT as it is */
    const char *json_path, *csv_path, *plot_prefix;
    int device;        /* -G: buffers in device memory, calls on one stream */
    int registered;    /* -R 1: host buffers from chorus_mem_alloc (registered memory) */
    backend_t backend; /* --backend */
} options_t;

/* One test: a collective with one datatype and op, as seen by one rank. */
typedef struct {
    coll_t coll;
    chorus_dtype_t dtype;
    chorus_op_t op; /* ignored by collectives that do not reduce */
    int root;       /* used by broadcast, reduce, gather and scatter */
    int rank;
    int nranks;
} test_t;

/* Element counts of one size, with the nccl-tests conventions (see bench/README.md).
 * In place, the send buffer is base + send_inplace_offset * rank and the receive buffer
 * base + recv_inplace_offset * rank (elements). */
typedef struct {
    size_t send_count;
    size_t recv_count;
    size_t param_count; /* the count argument of the call */
    size_t send_inplace_offset;
    size_t recv_inplace_offset;
} counts_t;

/* One result row: one size of one test, out of place or in place. */
typedef struct {
    coll_t coll;
    int has_dtype, has_op, has_root; /* 0: not applicable to the collective */
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;
    int in_place;
    uint64_t size, count;
    double time_us, algbw, busbw;
    int64_t wrong; /* -1: not checked */
    double lat_avg_us, lat_min_us, lat_max_us;
    int iters;
    /* The algorithm the library chose for this collective and count
     * (chorus_algorithm_name), or "p2p" for sendrecv. A copy, because sweep reads rows
     * back from files. */
    char algo[BENCH_ALGO_NAME_BYTES];
    /* The cost model's time for this call (chorus_algorithm_predict), -1 when it has none. */
    double predicted_us;
    /* -R 1, out of place: the busbw that the measured memory bandwidth allows this row's
     * single-copy path (membw.c); 0 when it has none. */
    double bound_busbw;
    int pass; /* --algo all: index in bench_algo_names of the pass (0: auto); not saved */
} row_t;

/* What a run was, for the JSON and CSV files. Strings are owned by the struct. */
typedef struct {
    int ranks, hosts, version;
    /* What was asked for: CHORUS_TRANSPORT and CHORUS_ALGO (auto when unset); each row
     * records the algorithm actually chosen. */
    char transport[32], algo_requested[32];
    uint64_t chunk_size;
    char hostname[256];
    char date[32]; /* ISO 8601, UTC */
    char *command;
    /* The options that shaped the numbers. */
    uint64_t min_bytes, max_bytes;
    int warmup, iters; /* iters 0: adaptive */
    int check, avg_mode;
    double time_per_size;
    /* Where the buffers were ("host" or "gpu") and who ran the calls ("chorus", "nccl"). */
    char device[8], backend[8];
    char gpu[160];    /* -G: chorus__gpu_describe(); empty on host buffers */
    int nccl_version; /* --backend nccl: ncclGetVersion(); 0 otherwise */
    int blocking;
    int registered; /* -R */
    /* -R 1: what chorus_mem_stats said on rank 0 after the run, and the memory bandwidth
     * measured in the same run (bytes copied per second by all ranks at once; 0 when not
     * measured). */
    uint64_t reg_calls, reg_bytes;
    double membw_copy_Bps;
} meta_t;

typedef struct {
    meta_t meta;
    row_t *rows;
    size_t nrows, cap;
    uint64_t wrong_total;
    double busbw_sum;
    int busbw_count;
} results_t;

typedef struct {
    options_t opt;
    chorus_comm_t comm;    /* the one the calls run on */
    chorus_comm_t world;   /* the launcher's; with --algo all, comm is split from it */
    const char *pass_algo; /* --algo all: the algorithm of this pass ("auto" first) */
    int rank, nranks;
    void *sendbuf, *recvbuf; /* -G: device memory, never touched by the host */
    double *times;           /* one per rank, for the spread across ranks */
    /* The v-forms' count and displacement arrays (one entry per rank), uniform: every block
     * holds vper elements at rank * vper. Filled when a call's per-rank count changes. */
    size_t *vcounts, *vdispls, vper;
    /* -G: the plugin's table, the stream every call runs on, the device ordinal, and the
     * host mirrors of sendbuf and recvbuf where checked data is made and read. */
    const struct chorus_gpu_ops *gpu;
    void *stream;
    int gpu_device;
    void *host_send, *host_recv;
    struct bench_nccl *nccl; /* --backend nccl */
    results_t res;
} bench_t;

/* ---- membw.c ---- */
/* -R: measures the memory bandwidth of all ranks copying at once (collective) and prints,
 * on rank 0, the bound it sets on each out-of-place row and the fraction reached. */
void bench_membw_report(bench_t *b);

/* ---- args.c ---- */
extern const char *const bench_algo_names[BENCH_NALGOS];
const char *bench_coll_name(coll_t coll);
int bench_parse_coll(const char *text, coll_t *coll_p);
int bench_parse_size(const char *text, size_t *bytes_p);
void bench_usage(FILE *out);
/* Returns 0 to run, 1 when a help text was printed, -1 on a usage error (printed). */
int bench_parse_args(int argc, char **argv, options_t *opt);

/* ---- data.c ---- */
/* Counts for a buffer of count elements (size / element size). */
counts_t bench_counts(coll_t coll, size_t count, int nranks);
/* 1 if the collective takes a reduction op, 0 if it only moves data. */
int bench_coll_reduces(coll_t coll);
/* 1 if the collective takes a root (broadcast, reduce). */
int bench_coll_rooted(coll_t coll);
/* 1 if the collective has an in-place form that chorus-bench times. */
int bench_coll_has_in_place(coll_t coll);
/* 1 if the library runs the collective on host memory only (no -G, no --backend nccl). */
int bench_coll_host_only(coll_t coll);
/* 1 if the library has more than one algorithm for the collective (--algo all, calibrate). */
int bench_coll_has_algos(coll_t coll);
/* Fills the buffers for a checked run and returns the send and receive pointers to pass
 * to the call: the send data are exact values that depend on rank and index, the
 * receive buffer (or, in place, the rest of the common buffer) holds a pattern that no
 * correct result contains. base_recv is the receive buffer out of place and the common
 * buffer in place. */
void bench_prepare(const test_t *t, const counts_t *c, int in_place, void *sendbuf, void *base_recv,
                   void **send_p, void **recv_p);
/* Number of result elements on this rank that differ from the expected ones. */
size_t bench_count_wrong(const test_t *t, const counts_t *c, const void *recv);

/* ---- run.c ---- */
/* Runs every test the options ask for, prints the tables (rank 0) and fills b->res. */
void bench_run(bench_t *b);
/* Ends the benchmark on this rank after a failed call; chorusrun then stops the others. */
void bench_fail(bench_t *b, chorus_status_t status, const char *what, size_t bytes);
/* --algo all, on rank 0 after every pass: per size, the tuner's pick against the fastest
 * forced algorithm. */
void bench_print_picks(const bench_t *b);
/* The pieces of one timed half-line, for algo_all.c: the row's description (algorithm,
 * prediction) on b->comm; the timed loop of row->iters calls (the slowest rank's time,
 * the same on every rank); with -c 1, one checked call on fresh data. */
void bench_row_init(bench_t *b, const test_t *t, const counts_t *c, int in_place, uint64_t shown,
                    int iters, row_t *row);
void bench_row_time(bench_t *b, const test_t *t, const counts_t *c, row_t *row);
void bench_row_check(bench_t *b, const test_t *t, const counts_t *c, row_t *row);

/* As bench_fail, with the message of whatever failed (the GPU plugin, NCCL). */
void bench_fail_text(bench_t *b, chorus_status_t status, const char *what, size_t bytes,
                     const char *text);
/* The call of one test on b's backend and stream (-G: enqueued only; see bench_gpu_sync). */
chorus_status_t bench_run_coll(bench_t *b, const test_t *t, const counts_t *c, const void *send,
                               void *recv);

/* ---- gpu.c ---- */
/* Before the communicator: with -G, loads the GPU plugin and makes this rank's device
 * (CHORUS_LOCAL_RANK modulo the device count) current; with --backend nccl, loads NCCL.
 * Returns 0, or -1 with why the run cannot happen here in reason (then the run is
 * skipped, not failed). */
int bench_gpu_preinit(bench_t *b, char *reason, size_t size);
/* After the communicator: the stream, the device buffers and their host mirrors (-G), or
 * the host buffers; with --backend nccl, the NCCL communicator. */
void bench_gpu_setup(bench_t *b);
void bench_gpu_teardown(bench_t *b);
/* -G: waits for everything enqueued on the stream; nothing on host buffers. */
void bench_gpu_sync(bench_t *b, size_t bytes);
/* Fills the buffers of a checked call (bench_prepare on the host mirrors, then copied to
 * the device) and returns the pointers for the call. */
void bench_gpu_prepare(bench_t *b, const test_t *t, const counts_t *c, int in_place, void **send_p,
                       void **recv_p);
/* After the checked call: the result as the host can read it (copied back under -G). */
const void *bench_gpu_result(bench_t *b, const test_t *t, const counts_t *c, void *recv);

/* ---- nccl.c ---- */
/* dlopens libnccl.so.2 and resolves what chorus-bench calls; -1 with the reason. */
int bench_nccl_load(char *reason, size_t size);
int bench_nccl_version(void);
/* The NCCL communicator: rank 0's unique id goes to the others on b->comm. */
chorus_status_t bench_nccl_init(bench_t *b);
void bench_nccl_destroy(bench_t *b);
chorus_status_t bench_nccl_run(bench_t *b, const test_t *t, const counts_t *c, const void *send,
                               void *recv);
/* The message of the last NCCL failure on this rank. */
const char *bench_nccl_error(void);

/* ---- algo_all.c ---- */
/* --algo all and chorus-bench calibrate: every algorithm (calibrate: and chunk size) on
 * its own split communicator, timed in interleaved rounds per size; prints each size's
 * medians and the tuner's pick against the best, and calibrate records the best of each
 * size in the calibration file (rank 0). */
void bench_run_algo_all(bench_t *b);

/* ---- results (report_json.c) ---- */
/* Appends a row; returns -1 when out of memory. */
int bench_results_add(results_t *r, const row_t *row);
void bench_results_free(results_t *r);
int bench_write_json(const results_t *r, const char *path);
/* Reads a file written by bench_write_json (sweep reads its jobs' results this way). */
int bench_read_json(const char *path, results_t *r);

/* ---- report_csv.c ---- */
int bench_write_csv(FILE *out, const results_t *r, int with_header);
int bench_write_csv_file(const results_t *r, const char *path);

/* ---- plot.c ---- */
/* Draws PREFIX-COLL-busbw.png and PREFIX-COLL-latency.png for each collective in the
 * runs: one line per run label (and, when a run holds several, per datatype, op and
 * placement). in_place_too: also draw the in-place series. Creates PREFIX's directories.
 * Returns 0; -1 (printed) when gnuplot is missing or failed, which is not fatal (the data
 * files are there); -2 (printed) when a file cannot be written, which the caller's exit
 * status must show. */
int bench_plot(const char *prefix, const results_t *runs, const char *const *labels, int nruns,
               int in_place_too);

/* ---- sweep.c ---- */
/* `chorus-bench sweep ...`: argv[0] is "sweep". Returns the exit status. */
int bench_sweep(int argc, char **argv, const char *self);

#endif
