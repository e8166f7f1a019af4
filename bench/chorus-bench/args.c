/*
 * The command line of chorus-bench: the nccl-tests flags (-b -e -f -i -n -w -c -d -o -r
 * -a -z, and -G for device buffers) with their meanings, and ours (--algo, --transport,
 * --time-per-size, --json, --csv, --plot, --lat-max, --backend). The help text lists every
 * flag; keep it in step with bench/README.md.
 */
#include "bench.h"
#include "util/config.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    OPT_HELP_ENV = 256,
    OPT_ALGO,
    OPT_TRANSPORT,
    OPT_TIME_PER_SIZE,
    OPT_JSON,
    OPT_CSV,
    OPT_PLOT,
    OPT_LAT_MAX,
    OPT_ROUNDS,
    OPT_BACKEND,
    OPT_REPRO,
};

static const char *const coll_names[COLL_COUNT] = {
    "allreduce",  "allgather",       "reduce_scatter", "broadcast", "reduce",
    "alltoall",   "sendrecv",        "barrier",        "gather",    "scatter",
    "allgatherv", "reduce_scatterv", "alltoallv",
};

static const char *const dtype_aliases[][2] = {
    {"half", "float16"}, {"fp16", "float16"},   {"bf16", "bfloat16"}, {"float", "float32"},
    {"fp32", "float32"}, {"double", "float64"}, {"int", "int32"},     {"char", "int8"},
};

/* Every algorithm name the library knows; "all" runs each that implements the collective.
 * Kept in the order of the library's enum so that --algo all lists them the same way. */
const char *const bench_algo_names[BENCH_NALGOS] = {
    "auto",         "ring",  "tree",  "rd",   "pairwise", "dissemination",
    "rabenseifner", "bruck", "swing", "hier", "arena"};
static const char *const algo_choices[] = {"auto",     "ring",          "tree",         "rd",
                                           "pairwise", "dissemination", "rabenseifner", "bruck",
                                           "swing",    "hier",          "arena",        "all"};
static const char *const transport_choices[] = {"auto", "shm", "tcp"};
static const char *const backend_choices[] = {"chorus", "nccl"};

const char *bench_coll_name(coll_t coll)
{
    return (unsigned)coll < COLL_COUNT ? coll_names[coll] : "?";
}

void bench_usage(FILE *out)
{
    fprintf(
        out,
        "usage: chorus-bench COLLECTIVE [options]    (run on every rank, e.g. under chorusrun)\n"
        "       chorus-bench sweep --ranks N,N,... [sweep options] COLLECTIVE [options]\n"
        "       chorus-bench calibrate COLLECTIVE [options]   (--algo all with chunk sizes;\n"
        "                           records each size's fastest in the calibration file)\n"
        "       chorus-bench --help-env\n"
        "       chorus-bench --version     (the library's version and what it was built with)\n"
        "       chorus-bench --info        (topology, transport per peer class, CHORUS_*;\n"
        "                           under a launcher for the per-peer part)\n"
        "       chorus-bench --topo-dump FILE   (this host's topology as JSON, the schema\n"
        "                           of docs/topology.schema.json that CHORUS_TOPO_FILE reads)\n"
        "COLLECTIVE: allreduce allgather reduce_scatter broadcast reduce alltoall sendrecv\n"
        "            barrier gather scatter allgatherv reduce_scatterv alltoallv (the v-forms\n"
        "            with equal blocks; these five on host buffers only), or all (each in\n"
        "            turn); nccl-tests names (all_reduce_perf, gather_perf) work\n"
        "options as in nccl-tests:\n"
        "  -b, --minbytes SIZE      smallest size in bytes, K/M/G suffixes (default 32M)\n"
        "  -e, --maxbytes SIZE      largest size (default 32M)\n"
        "  -f, --stepfactor N       multiply the size by N at each step\n"
        "  -i, --stepbytes SIZE     else add SIZE at each step (default 1M)\n"
        "  -n, --iters N            timed iterations per size (default: adapt, see\n"
        "                           --time-per-size)\n"
        "  -w, --warmup_iters N     warm-up iterations (default 5)\n"
        "  -c, --check 0|1          check the results (default 1)\n"
        "  -d, --datatype TYPE      int8 uint8 int32 uint32 int64 uint64 float16 bfloat16\n"
        "                           float32 float64, or all (default float32)\n"
        "  -o, --op OP              sum prod min max avg, or all (default sum)\n"
        "  -r, --root N             root of broadcast, reduce, gather, scatter (0)\n"
        "  -a, --average 0|1|2|3    the time a row shows: 0 rank 0's, 1 the mean over ranks,\n"
        "                           2 the fastest rank's, 3 the slowest rank's (default 3)\n"
        "  -z, --blocking 0|1       host buffers: accepted for nccl-tests scripts (host\n"
        "                           collectives always block); -G: 1 synchronises the stream\n"
        "                           after every call, 0 (the -G default) only after the loop\n"
        "  -G, --device             device buffers (CUDA, through the GPU plugin of Chorus):\n"
        "                           one stream per rank, device CHORUS_LOCAL_RANK modulo the\n"
        "                           device count; exit 77 with 'skipped:' when there is none\n"
        "  -R, --registered <0/1>   1: buffers from chorus_mem_alloc (with -G,\n"
        "                           chorus_mem_alloc_device): registered memory, read in\n"
        "                           place by the ranks of the host, as nccl-tests' -R\n"
        "Chorus options:\n"
        "      --algo ALGO          auto, ring, tree, rd, rabenseifner, swing, bruck, hier,\n"
        "                           arena, pairwise, dissemination: sets CHORUS_ALGO before\n"
        "                           init; all: each algorithm that implements the collective\n"
        "                           (and auto), timed in interleaved rounds per size, with\n"
        "                           the model's predicted time and the tuner's pick\n"
        "      --rounds N           --algo all and calibrate: rounds per size, the median\n"
        "                           is kept (1 to 15, default 3)\n"
        "      --reproducible L     1, 2 or all: the default against reproducible level 1\n"
        "                           (order-fixed) and/or 2 (exact sum), each on a split\n"
        "                           communicator, timed in interleaved rounds per size as\n"
        "                           --algo all does, with each level's time over the\n"
        "                           default's\n"
        "      --transport TP       auto, shm or tcp: sets CHORUS_TRANSPORT before init\n"
        "      --backend B          chorus (default) or nccl: the same sizes, checks and\n"
        "                           columns through NCCL (libnccl.so.2, loaded at run time;\n"
        "                           needs -G); exit 77 with 'skipped:' without NCCL or GPU\n"
        "      --time-per-size SEC  without -n, choose the iterations so that the timed calls\n"
        "                           of a size take about SEC seconds, within [%d, %d]\n"
        "                           (default 0.5)\n"
        "      --lat-max SIZE       sizes up to SIZE also get the latency across ranks\n"
        "                           (avg/min/max) table (default 64K)\n"
        "      --json FILE          write every row and the run's metadata as JSON\n"
        "                           (schema: bench/schema/chorus-bench.schema.json)\n"
        "      --csv FILE           write every row as CSV, metadata in '#' lines\n"
        "      --plot PREFIX        draw PREFIX-COLL-busbw.png and PREFIX-COLL-latency.png\n"
        "                           with gnuplot (skipped, with a message, without it)\n"
        "  -h, --help               this help\n"
        "      --help-env           the CHORUS_* environment variables\n"
        "sweep options (chorus-bench sweep -h for more):\n"
        "      --ranks N,N,...      rank counts to run (required)\n"
        "      --launcher CMD       launcher taking -n N (default: chorusrun next to this\n"
        "                           program)\n"
        "      --algos A,A,...      also run each algorithm (default: --algo or auto)\n"
        "      --keep DIR           keep each job's JSON and output in DIR\n",
        BENCH_ITERS_MIN, BENCH_ITERS_MAX);
}

/* Sizes as nccl-tests reads them: K, M and G are powers of 1024 (the library's parser). */
int bench_parse_size(const char *text, size_t *bytes_p)
{
    uint64_t bytes;

    if (chorus__parse_size(text, &bytes) != 0 || bytes > SIZE_MAX) return -1;
    *bytes_p = (size_t)bytes;
    return 0;
}

static int parse_int(const char *text, int min, int max, int *value_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return -1;
    *value_p = (int)v;
    return 0;
}

static int parse_seconds(const char *text, double *value_p)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v > 0.0) || v > 3600.0) return -1;
    *value_p = v;
    return 0;
}

static int parse_choice(const char *text, const char *const *choices, size_t n, const char **out_p)
{
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(text, choices[i]) == 0) {
            *out_p = choices[i];
            return 0;
        }
    }
    return -1;
}

static int parse_dtype(const char *text, options_t *opt)
{
    if (strcasecmp(text, "all") == 0) {
        opt->all_dtypes = 1;
        return 0;
    }
    for (size_t i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++)
        if (strcasecmp(text, dtype_aliases[i][0]) == 0) text = dtype_aliases[i][1];
    for (int d = 0; d < CHORUS_NUM_DTYPES; d++) {
        const char *name = chorus_dtype_name((chorus_dtype_t)d);
        if (name != NULL && strcasecmp(text, name) == 0) {
            opt->dtype = (chorus_dtype_t)d;
            opt->all_dtypes = 0;
            return 0;
        }
    }
    return -1;
}

static int parse_op(const char *text, options_t *opt)
{
    if (strcasecmp(text, "all") == 0) {
        opt->all_ops = 1;
        return 0;
    }
    for (int o = 0; o < CHORUS_NUM_OPS; o++) {
        const char *name = chorus_op_name((chorus_op_t)o);
        if (name != NULL && strcasecmp(text, name) == 0) {
            opt->op = (chorus_op_t)o;
            opt->all_ops = 0;
            return 0;
        }
    }
    return -1;
}

/* Copies a collective name without its underscores and without a trailing "_perf", so that
 * the nccl-tests names (all_reduce, all_reduce_perf) are accepted too. */
static void squeeze_name(const char *text, char *out, size_t size)
{
    size_t n = 0;

    for (; *text != '\0' && strcmp(text, "_perf") != 0 && n < size - 1; text++)
        if (*text != '_') out[n++] = *text;
    out[n] = '\0';
}

int bench_parse_coll(const char *text, coll_t *coll_p)
{
    char name[32], want[32];

    squeeze_name(text, name, sizeof(name));
    for (int c = 0; c < COLL_COUNT; c++) {
        squeeze_name(coll_names[c], want, sizeof(want));
        if (strcasecmp(name, want) == 0) {
            *coll_p = (coll_t)c;
            return 0;
        }
    }
    return -1;
}

static const struct option long_options[] = {
    {"minbytes", required_argument, NULL, 'b'},
    {"maxbytes", required_argument, NULL, 'e'},
    {"stepfactor", required_argument, NULL, 'f'},
    {"stepbytes", required_argument, NULL, 'i'},
    {"iters", required_argument, NULL, 'n'},
    {"warmup_iters", required_argument, NULL, 'w'},
    {"check", required_argument, NULL, 'c'},
    {"datatype", required_argument, NULL, 'd'},
    {"op", required_argument, NULL, 'o'},
    {"root", required_argument, NULL, 'r'},
    {"average", required_argument, NULL, 'a'},
    {"blocking", required_argument, NULL, 'z'},
    {"device", no_argument, NULL, 'G'},
    {"registered", required_argument, NULL, 'R'},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"algo", required_argument, NULL, OPT_ALGO},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"time-per-size", required_argument, NULL, OPT_TIME_PER_SIZE},
    {"lat-max", required_argument, NULL, OPT_LAT_MAX},
    {"rounds", required_argument, NULL, OPT_ROUNDS},
    {"reproducible", required_argument, NULL, OPT_REPRO},
    {"json", required_argument, NULL, OPT_JSON},
    {"csv", required_argument, NULL, OPT_CSV},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"help", no_argument, NULL, 'h'},
    {"help-env", no_argument, NULL, OPT_HELP_ENV},
    {NULL, 0, NULL, 0},
};

/* Applies one option; returns 0, 1 after a help text, -1 on a bad value. */
static int apply_option(int c, const char *arg, options_t *opt, int *factor_p)
{
    int avg = 0;

    switch (c) {
    case 'b': return bench_parse_size(arg, &opt->min_bytes);
    case 'e': return bench_parse_size(arg, &opt->max_bytes);
    case 'i': return bench_parse_size(arg, &opt->step_bytes);
    case 'f': return parse_int(arg, 1, 1 << 20, factor_p);
    case 'n': return parse_int(arg, 1, 1000000000, &opt->iters);
    case 'w': return parse_int(arg, 0, 1000000000, &opt->warmup);
    case 'c': return parse_int(arg, 0, 1, &opt->check);
    case 'r': return parse_int(arg, 0, 1000000000, &opt->root);
    case 'z': return parse_int(arg, 0, 1, &opt->blocking);
    case 'G': opt->device = 1; return 0;
    case 'R': return parse_int(arg, 0, 1, &opt->registered);
    case OPT_BACKEND: {
        const char *name;
        if (parse_choice(arg, backend_choices, 2, &name) != 0) return -1;
        opt->backend = strcmp(name, "nccl") == 0 ? BACKEND_NCCL : BACKEND_CHORUS;
        return 0;
    }
    case 'a':
        if (parse_int(arg, 0, 3, &avg) != 0) return -1;
        opt->avg_mode = (avg_mode_t)avg;
        return 0;
    case 'd': return parse_dtype(arg, opt);
    case 'o': return parse_op(arg, opt);
    case OPT_ALGO:
        if (parse_choice(arg, algo_choices, BENCH_NALGOS + 1, &opt->algo) != 0) return -1;
        opt->algo_all = strcmp(opt->algo, "all") == 0;
        if (opt->algo_all) opt->algo = NULL;
        return 0;
    case OPT_TRANSPORT: return parse_choice(arg, transport_choices, 3, &opt->transport);
    case OPT_TIME_PER_SIZE: return parse_seconds(arg, &opt->time_per_size);
    case OPT_LAT_MAX: return bench_parse_size(arg, &opt->lat_max);
    case OPT_ROUNDS: return parse_int(arg, 1, 15, &opt->rounds);
    case OPT_REPRO:
        /* A set of levels: bit L for level L. */
        if (strcmp(arg, "all") == 0) opt->repro_levels = 6;
        else if (strcmp(arg, "1") == 0) opt->repro_levels = 2;
        else if (strcmp(arg, "2") == 0) opt->repro_levels = 4;
        else return -1;
        opt->algo_all = 1;
        return 0;
    case OPT_JSON: opt->json_path = arg; return 0;
    case OPT_CSV: opt->csv_path = arg; return 0;
    case OPT_PLOT: opt->plot_prefix = arg; return 0;
    case 'h': bench_usage(stdout); return 1;
    case OPT_HELP_ENV: chorus__config_print(stdout); return 1;
    default: return -2;
    }
}

static void option_name(int c, char *out, size_t size)
{
    if (c < 256) {
        snprintf(out, size, "-%c", c);
        return;
    }
    for (const struct option *o = long_options; o->name != NULL; o++) {
        if (o->val == c) {
            snprintf(out, size, "--%s", o->name);
            return;
        }
    }
    snprintf(out, size, "?");
}

int bench_parse_args(int argc, char **argv, options_t *opt)
{
    int c, factor = 1, rc;
    char name[32];

    *opt = (options_t){.coll = COLL_COUNT,
                       .min_bytes = 32 << 20,
                       .max_bytes = 32 << 20,
                       .step_bytes = 1 << 20,
                       .factor = 1,
                       .iters = 0,
                       .warmup = 5,
                       .check = 1,
                       .blocking = -1,
                       .avg_mode = AVG_MAX,
                       .dtype = CHORUS_FLOAT32,
                       .op = CHORUS_SUM,
                       .time_per_size = 0.5,
                       .rounds = 3,
                       .lat_max = BENCH_LAT_MAX_DEFAULT};
    optind = 1;
    while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:r:a:z:R:Gh", long_options, NULL)) != -1) {
        rc = apply_option(c, optarg, opt, &factor);
        if (rc == 1) return 1;
        if (rc == -2) {
            fprintf(stderr, "chorus-bench: see chorus-bench -h\n");
            return -1;
        }
        if (rc != 0) {
            option_name(c, name, sizeof(name));
            fprintf(stderr, "chorus-bench: invalid value '%s' for %s (see chorus-bench -h)\n",
                    optarg, name);
            return -1;
        }
    }
    opt->factor = (size_t)factor;
    if (optind == argc - 1 && strcasecmp(argv[optind], "all") == 0) {
        opt->all_colls = 1;
        opt->coll = COLL_ALLREDUCE;
    } else if (optind != argc - 1 || bench_parse_coll(argv[optind], &opt->coll) != 0) {
        if (optind < argc)
            fprintf(stderr, "chorus-bench: unknown collective '%s'\n", argv[optind]);
        else
            fprintf(stderr, "chorus-bench: which collective? (see chorus-bench -h)\n");
        return -1;
    }
    if (opt->min_bytes > opt->max_bytes || (opt->factor == 1 && opt->step_bytes == 0)) {
        fprintf(stderr, "chorus-bench: need minbytes <= maxbytes and a step that grows\n");
        return -1;
    }
    /* NCCL collectives take device buffers only; --algo all times Chorus's algorithms. */
    if (opt->backend == BACKEND_NCCL && (!opt->device || opt->algo_all)) {
        fprintf(stderr, "chorus-bench: --backend nccl needs -G and does not take --algo all\n");
        return -1;
    }
    if (opt->registered && opt->device && opt->backend == BACKEND_NCCL) {
        fprintf(stderr, "chorus-bench: -R 1 -G gives Chorus's registered device memory, which "
                "--backend nccl does not take\n");
        return -1;
    }
    /* On device buffers the nccl-tests default: calls back to back, one synchronisation. */
    if (opt->blocking < 0) opt->blocking = opt->device ? 0 : 1;
    return 0;
}
