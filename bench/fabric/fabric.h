/*
 * chorus-fabric: does every link of a cluster deliver what was promised, and if not, which
 * one? One command, run on every rank of a job (chorusrun, mpirun, srun, the emulated
 * cluster), measures the fabric with the library's own transports and ends in a verdict.
 *
 * The run, in phases (main.c):
 *   1. a communicator over the whole job; hostnames gathered, hosts numbered by first rank;
 *      every host's setup (setup.c: NICs, RDMA devices, GPUs and their nearest NIC) sent to
 *      rank 0 as a JSON object;
 *   2. a short probe that estimates the rates, from which budget.c sizes every later test
 *      to fit --time-budget;
 *   3. inter-host pairs: the leader (lowest rank) of every host measures latency,
 *      bandwidth each way and both ways at once against every other host's leader, in
 *      rounds of disjoint pairs (schedule.c), so that tests do not share a link;
 *   4. intra-host pairs: every pair of ranks inside a host, in rounds, hosts in parallel;
 *      after each of phases 3 and 4 the pairs with a figure below the threshold are
 *      measured again (retest.c), most severe first, in rounds of disjoint pairs within a
 *      slice of the budget, and keep the better figures: one burst of a shared CPU must
 *      not name a healthy link;
 *   5. the concurrent round (3+ hosts): in shift s = 1 .. H-1 every host leader sends to
 *      host h + s and receives from h - s at once, so every host link carries traffic both
 *      ways while rates are taken; rates far below the isolated ones mean oversubscription;
 *   6. allreduce with ring and with tree, over the whole job and over each host (2+ ranks);
 *   7. rank 0 analyses (analyze.c) and reports (report_*.c).
 * From the start of phase 3 to the end of phase 6 every rank samples its host's CPU
 * (cpu.c, /proc/stat), so that the verdict can name a saturated host as the likely cause
 * of low rates rather than its links.
 * All results live on rank 0 in a fabric_result_t; the other ranks only measure.
 *
 * Units: rates are payload bits per second in Gbit/s (10^9), the unit links are sold in;
 * allreduce rates are nccl-tests bus bandwidth, also in Gbit/s. Times in microseconds.
 * A value < 0 means "not measured".
 *
 * Exit status: FABRIC_EXIT_PASS (0), FABRIC_EXIT_FAIL (1: a figure below the threshold),
 * FABRIC_EXIT_ERROR (2: the test itself could not run, or bad arguments).
 */
#ifndef CHORUS_BENCH_FABRIC_H
#define CHORUS_BENCH_FABRIC_H

#include "chorus.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FABRIC_NAME_MAX 64

enum { FABRIC_EXIT_PASS = 0, FABRIC_EXIT_FAIL = 1, FABRIC_EXIT_ERROR = 2 };

/* ---- Options (args.c) ---- */

typedef struct {
    double expect_gbps;       /* --expect-gbps: inter-host pair rate; 0: median of the class */
    double expect_intra_gbps; /* --expect-intra-gbps: rank pairs inside a host; 0: median */
    double threshold;         /* --threshold: flag below this fraction of expected (0.8) */
    double time_budget_s;     /* --time-budget SECONDS (120) */
    const char *json_path;    /* --json FILE, NULL: none */
    const char *html_dir;     /* --html DIR, NULL: none */
    int no_coll;              /* --no-coll: skip the allreduce phase */
    int verbose;              /* -v: progress of each phase on rank 0's stderr */
} fabric_opts_t;

/* Parses argv into o (defaults first). Returns 0, or FABRIC_EXIT_ERROR after printing
 * usage and what was wrong; -1 after printing --help (exit 0). */
int fabric_parse_args(int argc, char **argv, fabric_opts_t *o);

/* ---- Results (filled on rank 0 by main.c and measure_*.c) ---- */

typedef struct {
    char name[FABRIC_NAME_MAX]; /* hostname */
    int nranks;                 /* ranks on this host */
    int leader;                 /* its lowest rank: it runs the inter-host tests */
    char *setup_json;           /* setup.c's JSON object for the host (malloc'ed); NULL: none */
    /* The host's CPU over the measurement rounds (cpu.c), the highest figure any of its
     * ranks sampled: the fraction of all its CPU time that was busy (all but idle and
     * iowait), and the fraction in softirq (the kernel's network receive work among it);
     * < 0: not sampled. */
    double cpu_busy, cpu_softirq;
} fabric_host_t;

/* One point-to-point measurement between two endpoints. */
typedef struct {
    int a, b;          /* inter-host: host indices, a < b; intra-host: ranks, a < b */
    int host;          /* intra-host: the host both ranks are on; inter-host: -1 */
    double gbps[2];    /* one way at a time: [0] a -> b, [1] b -> a */
    double bidir_gbps; /* both ways at once, the sum of the two directions */
    double lat_us;     /* one way: half the median round trip of an 8-byte message */
    uint64_t bytes;    /* message size of the bandwidth tests */
    int reps;          /* messages per bandwidth test */
    int retested;      /* 1: flagged by the first test and measured again; every figure is
                        * the better of the two (rates the higher, latency the lower) */
    double first_gbps[2]; /* retested: the one-way rates of the first test; else -1 */
    int retest_skipped; /* flagged by the first test, but the retest's slice of the budget
                         * had no room for it (so retested is 0) */
} fabric_pair_t;

typedef enum { FABRIC_ALGO_RING = 0, FABRIC_ALGO_TREE = 1, FABRIC_NALGOS = 2 } fabric_algo_t;

typedef struct {
    fabric_algo_t algo;
    int host;          /* -1: the whole job; else the communicator of that host's ranks */
    int nranks;
    uint64_t bytes;    /* vector size */
    double time_us;    /* median per call */
    double busbw_gbps; /* bytes * 8 * 2 (n - 1) / n / time, in Gbit/s */
} fabric_coll_t;

/* The concurrent round (nhosts >= 3; else both arrays are NULL). */
typedef struct {
    double *gbps;         /* nhosts x nhosts, [src * nhosts + dst]: src -> dst in its shift */
    double *host_tx_gbps; /* per host: the median over its shifts of its send rate */
} fabric_concurrent_t;

typedef struct {
    int nranks, nhosts;
    fabric_host_t *hosts; /* nhosts */
    int *host_of;         /* nranks: host index of each rank */
    int ninter;
    fabric_pair_t *inter; /* every pair of hosts, sorted by (a, b) */
    int nintra;
    fabric_pair_t *intra; /* every pair of ranks within each host, sorted by (host, a, b) */
    fabric_concurrent_t conc;
    int ncoll;
    fabric_coll_t *coll;  /* whole job first (ring, tree), then per host */
    double budget_s;      /* the time budget the run was planned for */
    double elapsed_s;     /* what the whole run took, measured on rank 0 */
    char transport[32];   /* what carried inter-host traffic (CHORUS_TRANSPORT or "auto") */
} fabric_result_t;

/* Frees everything r owns (not r itself). */
void fabric_result_free(fabric_result_t *r);

/* ---- Setup of the local host (setup.c) ---- */

/*
 * A JSON object describing what this host can see (malloc'ed string in *json_p):
 * {"hostname", "nics": [{"name","operstate","speed_mbps","mtu","numa"}],
 *  "rdma": [{"device","port","state","link_layer","rate","gid_index","gid","gid_kind"}],
 *  "gpus": [{"index","bus_id","numa","nearest_nic","distance"}],
 *  "gpudirect": "dma-buf"|"nvidia-peermem"|"off"|"n/a",
 *  "warnings": ["GPU 0 (0000:17:00.0) is across sockets from its nearest NIC mlx5_1", ...]}
 * Warnings name what commonly breaks fabrics: a GPU far from its NIC, GPUDirect off while
 * GPUs and RDMA devices are present, a link-local GID selected, a NIC link down.
 */
chorus_status_t fabric_setup_collect(char **json_p);
/* The same with /sys read under sysfs_root ("/sys" for fabric_setup_collect): for tests on
 * a fake tree (tests/unit/test_fabric_setup.c). */
chorus_status_t fabric_setup_collect_at(const char *sysfs_root, char **json_p);

/* ---- The host's CPU (cpu.c) ---- */

/*
 * A host's CPU counts as saturated over the measurement rounds when at least 90% of its CPU
 * time was busy, or at least 30% was softirq. Busy: the tests' ranks wait by spinning for
 * 20 us, then yielding, then sleeping (CHORUS_SPIN_US, CHORUS_YIELD_US), so ranks waiting
 * for their round do not fill the cores; at 90% over a whole run the ranks that move data
 * have no core to spare for their copies and system calls. Softirq: the kernel's packet
 * processing runs there and is charged to whichever core it lands on; a third of all CPU
 * time in it is the network stack itself taking the cores that the senders and receivers
 * need (normally a few percent at these rates). Either way the rates measured on that host
 * say more about its CPU than about its links.
 */
#define FABRIC_CPU_BUSY_SATURATED 0.90
#define FABRIC_CPU_SOFTIRQ_SATURATED 0.30

/* 1 when a host's figures (fractions; < 0: not sampled) cross either threshold above. */
int fabric_cpu_saturated(double busy, double softirq);

/* ---- Analysis (analyze.c; pure) ---- */

typedef enum {
    FABRIC_FIND_HOST = 0, /* a host whose links are slow (most of its pairs / its shifts) */
    FABRIC_FIND_LINK,     /* a pair of hosts that is slow while neither host is */
    FABRIC_FIND_INTRA,    /* a pair of ranks inside a host */
    FABRIC_FIND_OVERSUB,  /* concurrent rates well below isolated ones */
    FABRIC_FIND_COLL,     /* allreduce bus bandwidth below expectation */
    /* Notes (fabric_verdict_t.note): they never fail the run. */
    FABRIC_FIND_CPU,          /* a host whose CPU was saturated during the rounds */
    FABRIC_FIND_NOT_RETESTED, /* a pair below its expectation that was not measured again,
                               * so not called faulty (a link or intra pair otherwise) */
} fabric_find_kind_t;

typedef struct {
    fabric_find_kind_t kind;
    int host;            /* host index (HOST, LINK, INTRA, per-host COLL, CPU, NOT_RETESTED
                          * of either class); -1: none */
    int peer;            /* LINK: the other host; INTRA: the second rank; NOT_RETESTED: as
                          * LINK or INTRA; else -1 */
    int rank;            /* INTRA (and NOT_RETESTED of an intra pair): the first rank; else -1 */
    char metric[40];     /* "pair_gbps", "bidir_gbps", "concurrent_tx_gbps", "ring_busbw_gbps";
                          * CPU: "cpu_busy" or "cpu_softirq", whichever crossed its threshold */
    double measured;     /* the figure (the median of the host's pairs for HOST) */
    double expected;     /* CPU: the threshold it crossed */
    double ratio;        /* measured / expected: the severity, lower is worse (CPU: >= 1) */
    int intra;           /* NOT_RETESTED: 1 for a pair of ranks inside a host */
    char text[512];      /* one line naming hosts by name, for the summary */
} fabric_finding_t;

typedef struct {
    double threshold;
    double expect_gbps;       /* inter-host pair rate used: given, or the class median */
    double expect_intra_gbps; /* likewise */
    int expect_given;         /* 1 if --expect-gbps was given */
    int expect_intra_given;   /* 1 if --expect-intra-gbps was given */
    int nfind;
    fabric_finding_t *find;   /* causes first (host, link, intra, oversub, in that order of
                               * kinds), then the allreduce findings they may explain; most
                               * severe (lowest ratio) first within a kind */
    int nnote;
    fabric_finding_t *note;   /* CPU notes (saturated hosts, by host), then NOT_RETESTED
                               * ones (most severe first): said, never failing the run */
    int nsaturated;           /* hosts among the CPU notes */
    int nwarn;
    char **warn;              /* setup warnings, each prefixed by its host's name */
    int pass;                 /* 1: PASS (no finding; notes and warnings do not fail) */
} fabric_verdict_t;

/* Compares every figure of r with its expected rate and fills v. */
chorus_status_t fabric_analyze(const fabric_result_t *r, const fabric_opts_t *o,
                               fabric_verdict_t *v);
void fabric_verdict_free(fabric_verdict_t *v);

/* ---- Reports (report_*.c) ---- */

/* The terminal summary: setup, tables, findings, and the verdict as its last line:
 * "chorus-fabric: PASS" or "chorus-fabric: FAIL: slow hosts: host5; slow links: ...". */
void fabric_report_text(const fabric_result_t *r, const fabric_verdict_t *v, FILE *out);
/* Every measurement, the verdict and the setup, in bench/schema/chorus-fabric.schema.json. */
chorus_status_t fabric_report_json(const fabric_result_t *r, const fabric_verdict_t *v,
                                   const fabric_opts_t *o, const char *path);
/* DIR/index.html with the tables and DIR/pairs.png, a heat map of the pair bandwidth
 * matrix drawn by gnuplot (its .dat and .gp stay next to it); without gnuplot the page
 * says so and the report still stands. */
/* The verdict line that ends the text report (also in the JSON and the page), in buf. */
void fabric_verdict_line(const fabric_result_t *r, const fabric_verdict_t *v, char *buf,
                         size_t size);
/* The hosts of v's CPU notes in words, for the verdict line and the findings they may
 * explain: "all 8 hosts" when every host of several, else their names ("host3, host5").
 * Returns how many hosts (0: none, buf ""). */
int fabric_cpu_saturated_hosts(const fabric_result_t *r, const fabric_verdict_t *v, char *buf,
                               size_t size);
/* "host", "link", "intra", "oversub", "coll", "cpu", "not_retested". */
const char *fabric_find_kind_name(fabric_find_kind_t kind);
chorus_status_t fabric_report_html(const fabric_result_t *r, const fabric_verdict_t *v,
                                   const char *dir);

#endif
