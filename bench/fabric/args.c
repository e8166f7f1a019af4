/*
 * Command line of chorus-fabric. Every rank parses the same arguments, so every rank
 * reaches the same decision; only rank 0 prints (main.c passes quiet on the others).
 */
#include "fabric_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: chorus-fabric [options]\n"
    "Run on every rank of a job (chorusrun, mpirun, srun, tests/cluster/cluster.sh). Measures\n"
    "every pair of hosts (latency, bandwidth each way and both ways at once), every pair of\n"
    "ranks inside each host, a concurrent all-hosts round (3+ hosts), and ring and tree\n"
    "allreduce over the job and each host; flags every figure below --threshold of its\n"
    "expected rate, and ends with the verdict line \"chorus-fabric: PASS\" or\n"
    "\"chorus-fabric: FAIL: ...\" naming the slow hosts and links, worst first.\n"
    "\n"
    "options:\n"
    "  --expect-gbps G        expected inter-host pair rate, Gbit/s (default: the median\n"
    "                         of all inter-host pairs)\n"
    "  --expect-intra-gbps G  expected rate between ranks of one host (default: median)\n"
    "  --threshold F          flag figures below F x expected, 0 < F <= 1 (default 0.8)\n"
    "  --time-budget S        the whole run fits in S seconds, >= 5 (default 120); sizes\n"
    "                         and repetitions are scaled from a short probe\n"
    "  --json FILE            write every measurement, the verdict and the setup as JSON\n"
    "                         (bench/schema/chorus-fabric.schema.json)\n"
    "  --html DIR             write DIR/index.html and DIR/pairs.png (heat map; gnuplot)\n"
    "  --no-coll              skip the allreduce phase\n"
    "  -v, --verbose          the plan and the progress of each phase on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    "Rates are payload Gbit/s (10^9 bits); allreduce rates are bus bandwidth. Hosts are\n"
    "told apart by hostname (CHORUS_HOSTID overrides it) and numbered by their first rank.\n"
    "\n"
    "exit status:\n"
    "  0  PASS: every figure at or above the threshold\n"
    "  1  FAIL: a figure below it (the verdict line names where)\n"
    "  2  the test could not run: bad arguments, or a communication call failed (rank 0\n"
    "     prints which call, rank, peer and phase)\n";

static int bad(const char *fmt, const char *arg, int quiet)
{
    if (!quiet) {
        fprintf(stderr, "chorus-fabric: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n%s", usage_text);
    }
    return FABRIC_EXIT_ERROR;
}

/* A finite number in [lo, hi]. */
static int parse_num(const char *text, double lo, double hi, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Set by main.c on ranks other than 0, which parse the same arguments silently. */
static int args_quiet;

void fabric_args_quiet(int quiet)
{
    args_quiet = quiet;
}

int fabric_parse_args(int argc, char **argv, fabric_opts_t *o)
{
    int quiet = args_quiet;

    *o = (fabric_opts_t){.threshold = 0.8, .time_budget_s = 120};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        double *num = NULL, lo = 0, hi = 0;

        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (!quiet) fputs(usage_text, stdout);
            return -1;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            o->verbose = 1;
            continue;
        } else if (strcmp(a, "--no-coll") == 0) {
            o->no_coll = 1;
            continue;
        } else if (strcmp(a, "--expect-gbps") == 0) {
            num = &o->expect_gbps, lo = 1e-6, hi = 1e6;
        } else if (strcmp(a, "--expect-intra-gbps") == 0) {
            num = &o->expect_intra_gbps, lo = 1e-6, hi = 1e6;
        } else if (strcmp(a, "--threshold") == 0) {
            num = &o->threshold, lo = 1e-6, hi = 1;
        } else if (strcmp(a, "--time-budget") == 0) {
            num = &o->time_budget_s, lo = 5, hi = 1e6;
        } else if (strcmp(a, "--json") == 0 || strcmp(a, "--html") == 0) {
            if (val == NULL || val[0] == '\0') return bad("%s needs a path", a, quiet);
            if (a[2] == 'j')
                o->json_path = val;
            else
                o->html_dir = val;
            i++;
            continue;
        } else {
            return bad("unknown option '%s'", a, quiet);
        }
        if (val == NULL) return bad("%s needs a value", a, quiet);
        if (parse_num(val, lo, hi, num) != 0) {
            if (!quiet)
                fprintf(stderr, "chorus-fabric: %s: '%s' is not a number in [%g, %g]\n", a, val,
                        lo, hi);
            return bad("bad value for %s", a, quiet);
        }
        i++;
    }
    return 0;
}
