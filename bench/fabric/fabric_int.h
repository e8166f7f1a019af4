/*
 * Internal declarations of the measurement side of chorus-fabric: the round schedule
 * (schedule.c), the time plan (budget.c), and the measurement phases (measure_p2p.c,
 * measure_coll.c) with the context main.c gives them. Not part of the contract in
 * fabric.h: only main.c, the measure_*.c files and their unit tests include it.
 */
#ifndef CHORUS_BENCH_FABRIC_INT_H
#define CHORUS_BENCH_FABRIC_INT_H

#include "fabric.h"

#include <stdint.h>
#include <stdio.h>

/* ---- Arguments (args.c) ---- */

/* Nonzero: fabric_parse_args prints nothing (ranks other than 0 parse silently). */
void fabric_args_quiet(int quiet);

/* ---- Schedule (schedule.c; pure) ---- */

/* Rounds needed so that every pair of n endpoints meets once: n - 1 for even n, n for odd
 * n (one endpoint idles per round), 0 for n <= 1. */
int fabric_schedule_nrounds(int n);

/* The pairs of round `round` (0 <= round < fabric_schedule_nrounds(n)) by the circle
 * method: partner[i] is i's partner, or -1 when i idles. partner holds n entries. Returns
 * the number of pairs in the round, or -1 for a bad n or round. */
int fabric_schedule_round(int n, int round, int *partner);

/* ---- Time plan (budget.c; pure) ---- */

/* Sizes below which a figure means little, and above which nothing is gained. */
#define FABRIC_MIN_BYTES (64u << 10)   /* bandwidth message */
#define FABRIC_MAX_BYTES (16u << 20)
#define FABRIC_MIN_REPS 3              /* messages per bandwidth test */
#define FABRIC_MAX_REPS 1000
#define FABRIC_MIN_LAT_REPS 10         /* ping-pongs per latency test */
#define FABRIC_MAX_LAT_REPS 1000
#define FABRIC_MIN_COLL_BYTES (64u << 10)
#define FABRIC_MAX_COLL_BYTES (64u << 20)
#define FABRIC_MIN_COLL_REPS 3
#define FABRIC_MAX_COLL_REPS 50

/* What the plan is made from: the probe's figures and the job's shape. A rate or latency of
 * 0 means "not probed" (no second host, no host with two ranks). */
typedef struct {
    double budget_s;      /* --time-budget */
    double spent_s;       /* already used on rank 0 when the plan is made (init, probe) */
    int nhosts;
    int nranks;
    int max_host_ranks;   /* ranks on the most populated host */
    int no_coll;
    double inter_Bps;     /* one-way payload rate between two host leaders, bytes/s */
    double inter_lat_s;   /* one-way latency between them */
    double intra_Bps;     /* between two ranks of one host */
    double intra_lat_s;
} fabric_budget_in_t;

/* One bandwidth test: reps messages of bytes, stopped early after cap_s (a slow link). */
typedef struct {
    uint64_t bytes;
    int reps;
    int lat_reps;         /* ping-pongs of the latency test before it */
    double test_s;        /* planned duration of each of the three bandwidth tests */
    double cap_s;         /* a one-way test stops sending after this long */
} fabric_test_plan_t;

typedef struct {
    double budget_s;
    double usable_s;      /* budget less what was spent and the margin */
    double phase_s[4];    /* FABRIC_PHASE_*: seconds given to each phase (0: skipped) */
    int inter_rounds, intra_rounds;
    fabric_test_plan_t inter, intra;
    fabric_test_plan_t conc; /* per shift (lat_reps unused) */
    uint64_t coll_bytes;     /* whole job; per host: coll_host_bytes */
    uint64_t coll_host_bytes;
    double coll_slot_s;      /* per algorithm on the whole job */
    double coll_host_slot_s; /* per algorithm on each host (hosts in parallel) */
    /* The retest of flagged pairs: [0] inter-host, [1] intra-host. Its slice is taken from
     * its pair phase (FABRIC_RETEST_SHARE); slot_s is one round of the first test, and the
     * probe's figures size the retest once the number of its rounds is known. */
    double retest_s[2];
    double slot_s[2];
    double rate_Bps[2], lat_s[2];
} fabric_plan_t;

enum { FABRIC_PHASE_INTER = 0, FABRIC_PHASE_INTRA, FABRIC_PHASE_CONC, FABRIC_PHASE_COLL };

/* Seconds held back at the end for analysis and reports (gnuplot), and the fraction of the
 * rest kept unplanned against noise and slower links than the probe saw. */
#define FABRIC_END_RESERVE_S 3.0
#define FABRIC_MARGIN 0.25

/* The share of each pair phase kept for the retest of its flagged pairs, and the shortest
 * retest round, as a fraction of a first-test round: shorter tests say little more than
 * the first one did. */
#define FABRIC_RETEST_SHARE 0.15
#define FABRIC_RETEST_MIN_SLOT 0.125

/* Fills *plan from in. Always succeeds: a budget too small for the minimums gets the
 * minimums (the run then takes longer than asked, and says so with -v). */
void fabric_budget_plan(const fabric_budget_in_t *in, fabric_plan_t *plan);

/* Chooses a message size and a count so that reps * bytes at rate_Bps take about
 * seconds: about 16 messages, sizes within [min_bytes, max_bytes] (multiples of 4 KiB),
 * reps within [min_reps, max_reps]. */
void fabric_budget_size(double rate_Bps, double seconds, uint64_t min_bytes, uint64_t max_bytes,
                        int min_reps, int max_reps, uint64_t *bytes_p, int *reps_p);

/* Timed allreduce calls that fit in slot_s after a warm-up call of call_s seconds (the
 * slowest rank's), within [FABRIC_MIN_COLL_REPS, FABRIC_MAX_COLL_REPS]. */
int fabric_budget_coll_reps(double slot_s, double call_s);

/* The retest of `intra` (0: inter-host pairs, 1: intra-host) when it needs `rounds`
 * rounds: *t gets the test of one round, the slice shared between them (no longer than a
 * first-test round, no shorter than FABRIC_RETEST_MIN_SLOT of one). Returns how many rounds
 * fit in the slice (at most `rounds`; 0 when none does). */
int fabric_budget_retest(const fabric_plan_t *plan, int intra, int rounds,
                         fabric_test_plan_t *t);

/* The plan's own estimate of how long the measurement phases take at the probed rates. */
double fabric_budget_predict(const fabric_budget_in_t *in, const fabric_plan_t *plan);

/* The plan, one line per phase (for -v). */
void fabric_budget_print(const fabric_budget_in_t *in, const fabric_plan_t *plan, FILE *out);

/* ---- Retest of flagged pairs (retest.c; pure) ---- */

/* The class median of a pair list as analyze.c takes it: over both one-way rates of every
 * pair (bidir 0), or over the both-ways rates (bidir 1); values < 0 are not measured; -1
 * when nothing was. */
double fabric_pairs_median(const fabric_pair_t *p, int n, int bidir);

/* The pairs of p (n) that analyze.c would flag: a one-way rate below threshold x expected,
 * or the both-ways rate below threshold x 2 expected, expected being expect_gbps if > 0
 * else the class medians. sel gets their indices, most severe (lowest ratio) first, and
 * ratio (may be NULL) their worst ratio; returns how many (sel and ratio hold n). */
int fabric_retest_select(const fabric_pair_t *p, int n, double expect_gbps, double threshold,
                         int *sel, double *ratio);

/* Rounds of disjoint pairs for the selected pairs, in their order: each goes to the first
 * round in which neither of its endpoints (a, b) is busy, if that round is below
 * max_rounds; round[i] gets the round of sel[i], or -1 when it does not fit. Returns the
 * number of rounds used. */
int fabric_retest_rounds(const fabric_pair_t *p, const int *sel, int nsel, int max_rounds,
                         int *round);

/* ---- CPU samples (cpu.c) ---- */

/* The aggregate "cpu" line of /proc/stat, in jiffies. */
typedef struct {
    uint64_t total;   /* user nice system idle iowait irq softirq steal */
    uint64_t idle;    /* idle + iowait */
    uint64_t softirq;
    int ok;           /* 1: read and parsed */
} fabric_cpu_sample_t;

/* Parses /proc/stat's text into *s. Returns 0, or -1 (s->ok 0) without a "cpu " line of at
 * least 7 numbers. */
int fabric_cpu_parse(const char *text, fabric_cpu_sample_t *s);

/* Reads /proc/stat (or CHORUS_FABRIC_PROC_STAT, "%d" replaced by index: see cpu.c) into *s.
 * Returns 0, or -1 with s->ok 0 when it cannot be read. */
int fabric_cpu_sample(int index, fabric_cpu_sample_t *s);

/* The busy and softirq fractions of the CPU time between samples a and b; both -1 when
 * either sample failed or the counters did not move forward. */
void fabric_cpu_fractions(const fabric_cpu_sample_t *a, const fabric_cpu_sample_t *b,
                          double *busy_p, double *softirq_p);

/* ---- Measurement context (main.c fills it; measure_*.c use it) ---- */

typedef struct {
    chorus_comm_t world;   /* the whole job */
    chorus_comm_t leaders; /* host leaders only (NULL elsewhere) */
    chorus_comm_t host;    /* this rank's host */
    int rank, nranks;
    int nhosts;
    int my_host;
    int local;             /* index of this rank among its host's ranks */
    const int *host_of;    /* nranks */
    const int *host_leader;/* nhosts: lowest rank of each host */
    const int *host_nranks;/* nhosts */
    const int *host_ranks; /* the ranks of my host, in order (host_nranks[my_host]) */
    const char *const *host_name; /* nhosts */
    const fabric_opts_t *opts;
    double t0;             /* start of the run, monotonic seconds */
    double timeout_s;      /* chorus_comm_set_timeout of every communicator */
    const char *phase;     /* what is running, for error messages */
    char err[512];         /* the first failure, in words */
} fabric_ctx_t;

/* Monotonic clock, seconds. */
double fabric_now(void);

/* Records a failed chorus call in ctx->err ("rank R: phase P: what with rank Q (hostN):
 * detail") unless one is recorded already, and returns status. */
chorus_status_t fabric_fail(fabric_ctx_t *ctx, chorus_status_t status, const char *what,
                            int peer);

/* Progress on rank 0's stderr with -v. */
void fabric_progress(const fabric_ctx_t *ctx, const char *fmt, ...);

/* Median of n values (sorts v); -1 for n == 0. */
double fabric_median(double *v, int n);

/* One pair figure as it travels to rank 0 (same binary on every rank, so raw bytes). */
typedef struct {
    int32_t kind;      /* FABRIC_REC_* */
    int32_t a, b, host;
    double gbps[2];
    double bidir_gbps;
    double lat_us;
    uint64_t bytes;
    int32_t reps;
    int32_t algo;      /* coll */
    int32_t nranks;    /* coll */
    int32_t retested;  /* pairs: measured twice, the better figures kept */
    double time_us;    /* coll */
    double first_gbps[2]; /* pairs, retested: the first test's one-way rates */
    int32_t retest_skipped; /* pairs: flagged, but the retest's slice had no room for it */
    int32_t pad;
    double cpu_busy, cpu_softirq; /* cpu: this rank's samples of its host over the rounds */
} fabric_rec_t;

enum { FABRIC_REC_INTER = 1, FABRIC_REC_INTRA, FABRIC_REC_CONC, FABRIC_REC_COLL, FABRIC_REC_CPU };

/* A growing array of records kept by one rank. */
typedef struct {
    fabric_rec_t *v;
    int n, cap;
} fabric_recs_t;

chorus_status_t fabric_recs_add(fabric_recs_t *r, const fabric_rec_t *rec);

/* Phase 2: the probe between host 0 and host 1's leaders and between the first two ranks
 * of the first host with two. Every rank gets the same figures (in's rate fields). */
chorus_status_t fabric_probe(fabric_ctx_t *ctx, fabric_budget_in_t *in);

/* Phase 3: every pair of host leaders (records on the lower host's leader). Called on every
 * rank: *min_Bps_p is then, everywhere, the slowest one-way rate of any pair (0: none). */
chorus_status_t fabric_measure_inter(fabric_ctx_t *ctx, const fabric_plan_t *plan,
                                     fabric_recs_t *out, double *min_Bps_p);
/* Phase 4: every pair of ranks within each host (records on the lower rank). */
chorus_status_t fabric_measure_intra(fabric_ctx_t *ctx, const fabric_plan_t *plan,
                                     fabric_recs_t *out);
/* Phase 5: the concurrent shifts (3+ hosts); one record per shift on each leader, its
 * send rate toward its destination. The message size follows min_Bps, the slowest pair
 * rate the inter-host phase saw. */
chorus_status_t fabric_measure_conc(fabric_ctx_t *ctx, const fabric_plan_t *plan,
                                    double min_Bps, fabric_recs_t *out);
/* Phase 6: allreduce, ring and tree, whole job then each host (records on rank 0 and on
 * each host's leader). */
chorus_status_t fabric_measure_coll(fabric_ctx_t *ctx, const fabric_plan_t *plan,
                                    fabric_recs_t *out);

#endif
