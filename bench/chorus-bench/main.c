/*
 * chorus-bench: bandwidth and latency of Chorus collectives, in the style of nccl-tests.
 *
 *   chorusrun -n 4 -- chorus-bench allreduce -b 8 -e 64M -f 4 -c 1
 *   chorus-bench sweep --ranks 2,4,8 allreduce -b 1K -e 16M -f 4 --plot out/ar
 *   chorusrun -n 8 -- chorus-bench allreduce -G [--backend nccl] -b 8 -e 1G -f 2
 *
 * Every rank runs it; rank 0 prints the tables and writes the files. The columns, the size
 * conventions and the bus bandwidth factors are those of nccl-tests (see bench/README.md),
 * so that numbers can be compared with NCCL's. The process exits non-zero when a check
 * found a wrong value or a call failed.
 */
#include "bench.h"
#include "gpu/gpu.h"
#include "util/config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOST_BYTES 64
#define REASON_BYTES 512
/* The exit status of a run that cannot happen here (no GPU, no NCCL): "skipped". */
#define EXIT_SKIPPED 77

/* The command line as a shell would take it back: arguments with odd characters quoted. */
static char *join_command(int argc, char **argv)
{
    size_t len = 1;
    char *out, *p;

    for (int i = 0; i < argc; i++)
        len += 4 * strlen(argv[i]) + 3;
    out = malloc(len);
    if (out == NULL) return NULL;
    p = out;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int plain = *a != '\0' && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_=+.,/:@%") == strlen(a);
        if (i > 0) *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (; *a != '\0'; a++) {
            if (*a == '\'')
                p += sprintf(p, "'\\''");
            else
                *p++ = *a;
        }
        *p++ = '\'';
    }
    *p = '\0';
    return out;
}

/* Run metadata; the host count comes from the gathered host names. */
static void fill_meta(bench_t *b, char (*hosts)[HOST_BYTES])
{
    meta_t *m = &b->res.meta;
    const char *text;
    time_t now = time(NULL);
    struct tm tm;

    m->ranks = b->nranks;
    m->hosts = 0;
    for (int r = 0; r < b->nranks; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = strcmp(hosts[q], hosts[r]) == 0;
        if (!seen) m->hosts++;
    }
    m->version = chorus_version();
    text = chorus__config_str("CHORUS_TRANSPORT");
    snprintf(m->transport, sizeof(m->transport), "%s", text != NULL ? text : "auto");
    text = chorus__config_str("CHORUS_ALGO");
    snprintf(m->algo_requested, sizeof(m->algo_requested), "%s", text != NULL ? text : "auto");
    m->chunk_size = chorus__config_size("CHORUS_CHUNK_SIZE", 512u << 10);
    snprintf(m->hostname, sizeof(m->hostname), "%s", hosts[0]);
    gmtime_r(&now, &tm);
    strftime(m->date, sizeof(m->date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    m->min_bytes = b->opt.min_bytes;
    m->max_bytes = b->opt.max_bytes;
    m->warmup = b->opt.warmup;
    m->iters = b->opt.iters;
    m->check = b->opt.check;
    m->avg_mode = (int)b->opt.avg_mode;
    m->time_per_size = b->opt.time_per_size;
    m->blocking = b->opt.blocking;
    m->registered = b->opt.registered;
    snprintf(m->device, sizeof(m->device), "%s", b->gpu != NULL ? "gpu" : "host");
    snprintf(m->backend, sizeof(m->backend), "%s",
             b->opt.backend == BACKEND_NCCL ? "nccl" : "chorus");
    snprintf(m->gpu, sizeof(m->gpu), "%s", b->gpu != NULL ? chorus__gpu_describe() : "");
    m->nccl_version = b->opt.backend == BACKEND_NCCL ? bench_nccl_version() : 0;
}

/* The nccl-tests header, with one line per rank in place of the GPU list. */
static void print_header(bench_t *b)
{
    struct {
        int32_t pid, device;
        char host[HOST_BYTES];
    } me, *all;
    char(*hosts)[HOST_BYTES];
    chorus_status_t status;
    const meta_t *m = &b->res.meta;
    char iters[64];

    memset(&me, 0, sizeof(me));
    me.pid = (int32_t)getpid();
    me.device = b->gpu != NULL ? b->gpu_device : -1;
    if (gethostname(me.host, sizeof(me.host) - 1) != 0) strcpy(me.host, "?");
    all = calloc((size_t)b->nranks, sizeof(*all));
    hosts = calloc((size_t)b->nranks, sizeof(*hosts));
    if (all == NULL || hosts == NULL) bench_fail(b, CHORUS_ERR_NO_MEMORY, "allocation", 0);
    status = chorus_allgather(&me, all, sizeof(me), CHORUS_UINT8, b->comm, NULL);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, "allgather of the rank list", sizeof(me));
    for (int r = 0; r < b->nranks; r++)
        memcpy(hosts[r], all[r].host, HOST_BYTES);
    fill_meta(b, hosts);
    if (b->opt.iters > 0)
        snprintf(iters, sizeof(iters), "%d", b->opt.iters);
    else
        snprintf(iters, sizeof(iters), "auto(%gs/size)", b->opt.time_per_size);
    if (b->rank == 0) {
        printf("# chorus-bench %s (Chorus %d): nranks %d minBytes %zu maxBytes %zu step: %zu(%s) "
               "warmup iters: %d iters: %s validation: %d\n",
               b->opt.all_colls ? "all" : bench_coll_name(b->opt.coll), m->version, b->nranks,
               b->opt.min_bytes, b->opt.max_bytes,
               b->opt.factor > 1 ? b->opt.factor : b->opt.step_bytes,
               b->opt.factor > 1 ? "factor" : "bytes", b->opt.warmup, iters, b->opt.check);
        printf("# hosts %d transport %s algo_requested %s chunk %llu backend %s device %s%s "
               "blocking: %s (-z %d)\n",
               m->hosts, m->transport, m->algo_requested, (unsigned long long)m->chunk_size,
               m->backend, m->device, m->registered ? " registered (-R 1)" : "",
               b->gpu == NULL    ? "always"
               : b->opt.blocking ? "sync after each call"
                                 : "sync after the loop",
               b->opt.blocking);
        if (b->gpu != NULL && m->nccl_version > 0)
            printf("# gpu: %s; NCCL %d\n", m->gpu, m->nccl_version);
        else if (b->gpu != NULL)
            printf("# gpu: %s\n", m->gpu);
        printf("#\n# Using devices\n");
        for (int r = 0; r < b->nranks; r++) {
            if (all[r].device < 0)
                printf("#  Rank %2d Group  0 Pid %6d on %10s device  cpu\n", r, (int)all[r].pid,
                       all[r].host);
            else
                printf("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s]\n", r, (int)all[r].pid,
                       all[r].host, (int)all[r].device, b->gpu->name);
        }
        fflush(stdout);
    }
    free(hosts);
    free(all);
}

/* Every rank learns whether any rank cannot run (no GPU, no NCCL), so that all of them
 * stop together; rank 0 prints the first reason. Returns 1 to skip. */
static int skip_everywhere(bench_t *b, const char *reason)
{
    char mine[REASON_BYTES], (*all)[REASON_BYTES];
    chorus_status_t status;
    int skip = 0;

    snprintf(mine, sizeof(mine), "%s", reason);
    all = calloc((size_t)b->nranks, sizeof(*all));
    if (all == NULL) bench_fail(b, CHORUS_ERR_NO_MEMORY, "allocation", 0);
    status = chorus_allgather(mine, all, sizeof(mine), CHORUS_UINT8, b->comm, NULL);
    if (status != CHORUS_SUCCESS) bench_fail(b, status, "allgather of the skip reasons", 0);
    for (int r = 0; r < b->nranks && !skip; r++) {
        if (all[r][0] == '\0') continue;
        skip = 1;
        if (b->rank == 0) {
            if (r == 0)
                printf("skipped: %s\n", all[r]);
            else
                printf("skipped: rank %d: %s\n", r, all[r]);
            fflush(stdout);
        }
    }
    free(all);
    /* No rank leaves before rank 0 has printed: a launcher that stops a job at its first
     * non-zero exit would otherwise kill rank 0 before the reason is out. */
    if (skip) (void)chorus_barrier(b->comm);
    return skip;
}

/* The files rank 0 writes after the run; a file that cannot be written fails the run. */
static int write_reports(const bench_t *b)
{
    int rc = 0;

    if (b->opt.json_path != NULL && bench_write_json(&b->res, b->opt.json_path) != 0) rc = 1;
    if (b->opt.csv_path != NULL && bench_write_csv_file(&b->res, b->opt.csv_path) != 0) rc = 1;
    if (b->opt.plot_prefix != NULL) {
        const char *label = "";
        if (bench_plot(b->opt.plot_prefix, &b->res, &label, 1, 1) == -2) rc = 1;
    }
    return rc;
}

/* --algo all: one pass per algorithm name, each on a communicator split from the world
 * after CHORUS_ALGO is set, because the library reads it when a communicator is created.
 * The auto pass comes first; a forced pass times the sizes where its algorithm runs. */
/* The path of this executable, so that sweep can start it under the launcher. */
static void self_path(const char *argv0, char *out, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", out, size - 1);

    if (n > 0) {
        out[n] = '\0';
        return;
    }
    snprintf(out, size, "%s", argv0);
}

/* `chorus-bench kernels`: the local kernels against memcpy (kernels.c). */
int bench_kernels_main(int argc, char **argv);
/* `chorus-bench --info` and `--topo-dump FILE` (info.c); -1 when neither is given. */
int bench_info_main(int argc, char **argv);

int main(int argc, char **argv)
{
    bench_t b;
    chorus_status_t status;
    int rc;

    if (argc > 1 && strcmp(argv[1], "kernels") == 0) return bench_kernels_main(argc - 1, argv + 1);
    rc = bench_info_main(argc, argv);
    if (rc >= 0) return rc;
    if (argc > 1 && strcmp(argv[1], "sweep") == 0) {
        char self[PATH_MAX];
        self_path(argv[0], self, sizeof(self));
        return bench_sweep(argc - 1, argv + 1, self);
    }
    memset(&b, 0, sizeof(b));
    /* Before getopt, which reorders argv. */
    b.res.meta.command = join_command(argc, argv);
    /* calibrate is --algo all with chunk sizes, and it records what won. */
    if (argc > 1 && strcmp(argv[1], "calibrate") == 0) {
        rc = bench_parse_args(argc - 1, argv + 1, &b.opt);
        b.opt.calibrate = b.opt.algo_all = 1;
        b.opt.algo = NULL;
    } else {
        rc = bench_parse_args(argc, argv, &b.opt);
    }
    if (rc == 0 && b.opt.calibrate && b.opt.backend == BACKEND_NCCL) {
        fprintf(stderr, "chorus-bench: calibrate times Chorus's algorithms: no --backend nccl\n");
        rc = -1;
    }
    if (rc != 0) {
        free(b.res.meta.command);
        return rc < 0 ? 2 : 0;
    }
    /* Before the communicator: the device is chosen before anything touches CUDA. */
    char reason[REASON_BYTES] = "";
    int pre = bench_gpu_preinit(&b, reason, sizeof(reason));
    if (pre < -1) {
        fprintf(stderr, "chorus-bench: %s\n", reason);
        free(b.res.meta.command);
        return 1;
    }
    /* The library reads its configuration when the communicator is created. */
    if (b.opt.algo != NULL) setenv("CHORUS_ALGO", b.opt.algo, 1);
    if (b.opt.transport != NULL) setenv("CHORUS_TRANSPORT", b.opt.transport, 1);
    status = chorus_comm_init_env(&b.comm);
    if (status != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-bench: chorus_comm_init_env failed: %s: %s\n",
                chorus_status_string(status), chorus_last_error());
        return 1;
    }
    if (chorus_comm_rank(b.comm, &b.rank) != CHORUS_SUCCESS ||
        chorus_comm_size(b.comm, &b.nranks) != CHORUS_SUCCESS)
        bench_fail(&b, CHORUS_ERR_INTERNAL, "rank and size", 0);
    if (skip_everywhere(&b, pre != 0 ? reason : "")) {
        free(b.res.meta.command);
        chorus_comm_destroy(b.comm);
        return EXIT_SKIPPED;
    }
    if (b.opt.root >= b.nranks) {
        if (b.rank == 0)
            fprintf(stderr, "chorus-bench: root %d is not a rank of %d\n", b.opt.root, b.nranks);
        chorus_comm_destroy(b.comm);
        return 2;
    }
    bench_gpu_setup(&b);
    b.times = calloc((size_t)b.nranks, sizeof(double));
    b.vcounts = calloc((size_t)b.nranks, sizeof(size_t));
    b.vdispls = calloc((size_t)b.nranks, sizeof(size_t));
    if (b.times == NULL || b.vcounts == NULL || b.vdispls == NULL)
        bench_fail(&b, CHORUS_ERR_NO_MEMORY, "allocation", 0);
    b.vper = SIZE_MAX; /* no layout yet: the first v-form call fills the arrays */
    b.world = b.comm;
    print_header(&b);
    if (b.opt.algo_all) {
        bench_run_algo_all(&b);
    } else {
        bench_run(&b);
    }
    rc = b.res.wrong_total == 0 ? 0 : 1;
    if (b.rank == 0) {
        printf("#\n# Out of bounds values : %llu %s\n", (unsigned long long)b.res.wrong_total,
               b.res.wrong_total == 0 ? "OK" : "FAILED");
        printf("# Avg bus bandwidth    : %g\n#\n",
               b.res.busbw_count > 0 ? b.res.busbw_sum / b.res.busbw_count : 0.0);
        fflush(stdout);
    }
    if (b.opt.registered) {
        /* What shows that the calls read their peers' buffers in place, and the bound the
         * memory bandwidth sets (collective: every rank copies). */
        uint64_t calls = 0, bytes = 0;
        (void)chorus_mem_stats(b.comm, &calls, &bytes);
        b.res.meta.reg_calls = calls;
        b.res.meta.reg_bytes = bytes;
        if (b.rank == 0)
            printf("# Registered memory    : rank 0: %llu calls read every peer's buffer in "
                   "place, %.3g GB read from peers' buffers\n", (unsigned long long)calls,
                   (double)bytes / 1e9);
        /* The host memory's bandwidth bounds host calls only. */
        if (!b.opt.device) bench_membw_report(&b);
    }
    /* After the -R figures, which the files carry too. */
    if (b.rank == 0 && write_reports(&b) != 0) rc = 1;
    /* Rank 0 has written everything before any rank exits (a failing exit status makes
     * chorusrun stop the others). */
    status = chorus_barrier(b.comm);
    if (status != CHORUS_SUCCESS) bench_fail(&b, status, "final barrier", 0);
    bench_results_free(&b.res);
    free(b.times);
    free(b.vcounts);
    free(b.vdispls);
    bench_gpu_teardown(&b);
    chorus_comm_destroy(b.comm);
    return rc;
}
