/*
 * Acceptance 7 of issue 5: many small allreduces and many communicator create/destroy
 * cycles leak nothing. Run under chorusrun on 2 or more ranks, over shm or tcp:
 *
 *   chorusrun -n 4 -- mp_leak_cycles [--allreduces 100000] [--cycles 1000]
 *       [--warmup-allreduces 2000] [--warmup-cycles 20] [--valgrind]
 *
 * Each rank first warms up (the schedule cache, the scratch buffers, glibc's per-thread
 * arenas and its cache of thread stacks all reach their steady size there), then takes a
 * baseline of what it holds, runs the allreduces and then the cycles, and compares after
 * each phase:
 *
 *   open fds       /proc/self/fd entries                       slack 0
 *   threads        Threads: of /proc/self/status               slack 0
 *   mappings       lines of /proc/self/maps                    slack 4
 *   shm mappings   lines of /proc/self/maps under /dev/shm/    slack 0
 *   heap           mallinfo2(): uordblks + hblkhd              slack 16 KiB
 *   RSS            resident pages of /proc/self/statm          slack 8 MiB
 *   /dev/shm       entries named chorus-* (the prefix of lib/transport/shm/shm_seg.c and
 *                  lib/arena/arena_seg.c) that appeared since the baseline     slack 0
 *
 * Why these slacks: a rendezvous thread of chorus_get_unique_id() ends on its own once all
 * ranks met, so fds and threads are sampled again for up to 3 s until they settle, and then
 * must be back exactly at the baseline. glibc may map or drop one more arena or cached
 * stack when threads come and go (mappings, 4). The heap slack is 16 KiB: measured growth
 * is 0 to 4 KiB once the warm-up is done (run with glibc's tcache off,
 * GLIBC_TUNABLES=glibc.malloc.tcache_count=0, as tests/leak_cycles.sh and make test do:
 * the cache's freed chunks count as in use and grew by up to 27 KiB, bounded), and one leaked allocation of 16 bytes per cycle
 * (1,000) or of 1 byte per allreduce (100,000) at the full counts already passes it, or
 * of 80 bytes per cycle at the counts of `make test`. RSS also counts the pages glibc keeps
 * after free and the shm pages a live communicator has touched, so it only catches a leak
 * the others miss that is larger than 8 MiB. Other jobs may create chorus-* segments in
 * /dev/shm at the same time, and a segment lives there only until every peer mapped it,
 * so only a new entry that is still there after 3 s counts.
 *
 * --valgrind keeps the fd, thread and shm checks and leaves memory to valgrind's own leak
 * check (its allocator replaces glibc's and its RSS is its own); an ASan build does the
 * same by itself, leaving memory to LeakSanitizer.
 *
 * Every allreduce is checked exactly (8 to 64 bytes of int32, int64 or uint8 sums), and so
 * is one allreduce on each new communicator. Cycles alternate between chorus_comm_split of
 * the world (odd ranks first, so the new ranks differ from the old) and chorus_comm_init
 * from a fresh id that rank 0 makes with chorus_get_unique_id() and broadcasts.
 * Exit status: 0 when everything held, 1 otherwise.
 */
#include "mp/mp_common.h"

#include <dirent.h>
#include <getopt.h>
#include <malloc.h>

/* AddressSanitizer keeps freed memory in quarantine (256 MiB) and replaces glibc's
 * allocator, so heap and RSS say nothing there; its LeakSanitizer checks at exit instead. */
#if defined(__SANITIZE_ADDRESS__)
#define LEAK_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LEAK_UNDER_ASAN 1
#endif
#endif
#ifndef LEAK_UNDER_ASAN
#define LEAK_UNDER_ASAN 0
#endif

typedef struct {
    long fds;
    long threads;
    long maps;
    long shm_maps;
    long heap;
    long rss_kb;
} usage_t;

typedef struct {
    long allreduces;
    long cycles;
    long warm_allreduces;
    long warm_cycles;
    int valgrind;
} opts_t;

static int failures;

/* ---- what the process holds ---- */

static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long n = 0;

    if (d == NULL) return -1;
    while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory stream's own fd */
}

static long status_field(const char *field)
{
    char line[256];
    size_t len = strlen(field);
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (f == NULL) return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, len) == 0) v = atol(line + len);
    fclose(f);
    return v;
}

static void count_maps(long *all_p, long *shm_p)
{
    char line[1024];
    FILE *f = fopen("/proc/self/maps", "r");

    *all_p = *shm_p = 0;
    if (f == NULL) return;
    while (fgets(line, sizeof line, f) != NULL) {
        (*all_p)++;
        *shm_p += strstr(line, "/dev/shm/") != NULL;
    }
    fclose(f);
}

static usage_t sample(void)
{
    usage_t u;
    struct mallinfo2 mi = mallinfo2();
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    u.fds = count_fds();
    u.threads = status_field("Threads:");
    count_maps(&u.maps, &u.shm_maps);
    u.heap = (long)(mi.uordblks + mi.hblkhd);
    u.rss_kb = resident * (sysconf(_SC_PAGESIZE) / 1024);
    return u;
}

static int settled(const usage_t *u, const usage_t *base)
{
    return u->fds <= base->fds && u->threads <= base->threads && u->shm_maps <= base->shm_maps;
}

/* Samples until the asynchronous teardown (rendezvous threads) is over, at most 3 s. */
static usage_t sample_settled(const usage_t *base)
{
    usage_t u = sample();

    for (int i = 0; i < 300 && !settled(&u, base); i++) {
        usleep(10000);
        u = sample();
    }
    return u;
}

/* The baseline: once fds and threads held still for 100 ms (the last warm-up cycle's
 * rendezvous thread has ended), at most 3 s. */
static usage_t sample_stable(void)
{
    usage_t u = sample(), prev = u;

    for (int i = 0, still = 0; i < 300 && still < 10; i++) {
        usleep(10000);
        u = sample();
        still = u.fds == prev.fds && u.threads == prev.threads ? still + 1 : 0;
        prev = u;
    }
    return u;
}

/* ---- /dev/shm ---- */

#define MAX_NAMES 4096

typedef struct {
    char *names[MAX_NAMES];
    int n;
} names_t;

static void shm_list(names_t *l)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;

    l->n = 0;
    if (d == NULL) return;
    while ((e = readdir(d)) != NULL && l->n < MAX_NAMES)
        /* The fake GPU plugin's segments (tests/gpu/fake) belong to other test jobs. */
        if (strncmp(e->d_name, "chorus-", 7) == 0 && strncmp(e->d_name, "chorus-fakegpu-", 15) != 0)
            l->names[l->n++] = strdup(e->d_name);
    closedir(d);
}

static void shm_free(names_t *l)
{
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    l->n = 0;
}

static int shm_has(const names_t *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0) return 1;
    return 0;
}

/* Entries that are new since base and still there after up to 3 s. */
static int shm_new_entries(const names_t *base, int rank, const char *phase)
{
    names_t now;
    int left = 0;

    for (int i = 0; i < 30; i++) {
        shm_list(&now);
        left = 0;
        for (int k = 0; k < now.n; k++) left += !shm_has(base, now.names[k]);
        if (left == 0 || i == 29) break;
        shm_free(&now);
        usleep(100000);
    }
    for (int k = 0; k < now.n && left > 0; k++)
        if (!shm_has(base, now.names[k]))
            printf("FAIL rank %d: after %s, /dev/shm/%s is still there\n", rank, phase,
                   now.names[k]);
    shm_free(&now);
    return left;
}

/* ---- the checks ---- */

static void check_growth(const char *phase, const char *what, long base, long now, long slack,
                         int rank)
{
    printf("rank %d: after %s: %-13s %ld -> %ld (%+ld, slack %ld)\n", rank, phase, what, base,
           now, now - base, slack);
    if (now - base > slack) {
        printf("FAIL rank %d: %s grew by %ld after %s (slack %ld)\n", rank, what, now - base,
               phase, slack);
        failures++;
    }
}

static void check_all(const char *phase, const usage_t *base, const names_t *shm_base,
                      const opts_t *o, chorus_comm_t world, int rank)
{
    usage_t u;

    mp_die_on_error(chorus_barrier(world), world, rank, "barrier");
    u = sample_settled(base);
    check_growth(phase, "open fds", base->fds, u.fds, 0, rank);
    check_growth(phase, "threads", base->threads, u.threads, 0, rank);
    check_growth(phase, "maps", base->maps, u.maps, 4, rank);
    check_growth(phase, "shm maps", base->shm_maps, u.shm_maps, 0, rank);
    if (!o->valgrind) {
        check_growth(phase, "heap bytes", base->heap, u.heap, 16 << 10, rank);
        check_growth(phase, "RSS KiB", base->rss_kb, u.rss_kb, 8 << 10, rank);
    }
    failures += shm_new_entries(shm_base, rank, phase);
    fflush(stdout);
}

/* ---- the work ---- */

/* Allreduce number i: 8 to 64 bytes of int32, int64 or uint8, checked exactly. */
static void small_allreduce(chorus_comm_t comm, long i, int rank, int n)
{
    static const chorus_dtype_t dts[3] = {CHORUS_INT32, CHORUS_INT64, CHORUS_UINT8};
    chorus_dtype_t dt = dts[i % 3];
    size_t es = mp_dtype_size(dt), bytes = 8 * (size_t)(1 + i % 8), count = bytes / es;
    unsigned char buf[64];
    int inplace = (i / 3) % 2;
    unsigned char out[64];

    for (size_t k = 0; k < count; k++) mp_put_bits(dt, buf, k, (uint64_t)(rank + 1 + k + i));
    mp_die_on_error(chorus_allreduce(buf, inplace ? buf : out, count, dt, CHORUS_SUM, comm, NULL),
                    comm, rank, "allreduce");
    for (size_t k = 0; k < count; k++) {
        /* sum over r of (r + 1 + k + i), wrapping like the type. */
        uint64_t want = (uint64_t)n * (uint64_t)(n + 1) / 2 + (uint64_t)n * (k + (uint64_t)i);
        uint64_t got = mp_get_bits(dt, inplace ? buf : out, k);
        if (es < 8) want &= ((uint64_t)1 << (8 * es)) - 1;
        if (got != want) {
            printf("FAIL rank %d: allreduce #%ld (%zu x %s) element %zu: got %llu, want %llu\n",
                   rank, i, count, mp_dtype_name(dt), k, (unsigned long long)got,
                   (unsigned long long)want);
            failures++;
            return;
        }
    }
}

/* Cycle c: a new communicator of every rank, one checked allreduce on it, destroyed. */
static void one_cycle(chorus_comm_t world, long c, int rank, int n)
{
    chorus_comm_t comm = NULL;
    int32_t v[4], want;
    int newrank = -1, newsize = -1;

    if (c % 2 == 0) {
        /* Odd ranks first: the new ranks are a permutation of the old. */
        mp_die_on_error(chorus_comm_split(world, 0, (rank % 2 == 0) * n + rank, &comm), world,
                        rank, "chorus_comm_split");
    } else {
        chorus_unique_id_t id;
        memset(&id, 0, sizeof id);
        if (rank == 0) mp_die_on_error(chorus_get_unique_id(&id), world, rank, "get_unique_id");
        mp_die_on_error(chorus_broadcast(&id, &id, sizeof id, CHORUS_UINT8, 0, world, NULL),
                        world, rank, "broadcast of the id");
        mp_die_on_error(chorus_comm_init(&comm, n, &id, rank), world, rank, "chorus_comm_init");
    }
    mp_die_on_error(chorus_comm_rank(comm, &newrank), comm, rank, "comm_rank");
    mp_die_on_error(chorus_comm_size(comm, &newsize), comm, rank, "comm_size");
    for (int k = 0; k < 4; k++) v[k] = newrank * 10 + k + (int32_t)c;
    mp_die_on_error(chorus_allreduce(v, v, 4, CHORUS_INT32, CHORUS_SUM, comm, NULL), comm, rank,
                    "allreduce on the new comm");
    for (int k = 0; k < 4; k++) {
        want = 10 * (n * (n - 1) / 2) + n * (k + (int32_t)c);
        if (newsize != n || v[k] != want) {
            printf("FAIL rank %d: cycle %ld: size %d, element %d = %d, want %d\n", rank, c,
                   newsize, k, v[k], want);
            failures++;
            break;
        }
    }
    mp_die_on_error(chorus_comm_destroy(comm), NULL, rank, "chorus_comm_destroy");
}

static void parse(int argc, char **argv, opts_t *o)
{
    static const struct option longs[] = {
        {"allreduces", required_argument, NULL, 'a'},
        {"cycles", required_argument, NULL, 'c'},
        {"warmup-allreduces", required_argument, NULL, 'A'},
        {"warmup-cycles", required_argument, NULL, 'C'},
        {"valgrind", no_argument, NULL, 'v'},
        {NULL, 0, NULL, 0},
    };
    int ch;

    o->allreduces = 100000;
    o->cycles = 1000;
    o->warm_allreduces = 2000;
    o->warm_cycles = 20;
    o->valgrind = 0;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 'a': o->allreduces = atol(optarg); break;
        case 'c': o->cycles = atol(optarg); break;
        case 'A': o->warm_allreduces = atol(optarg); break;
        case 'C': o->warm_cycles = atol(optarg); break;
        case 'v': o->valgrind = 1; break;
        default:
            fprintf(stderr, "usage: mp_leak_cycles [--allreduces N] [--cycles N] "
                            "[--warmup-allreduces N] [--warmup-cycles N] [--valgrind]\n");
            exit(2);
        }
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    usage_t base;
    names_t shm_base;
    chorus_comm_t world;
    int rank, n, all_ok = 1;
    double t0, t_ar, t_cy;
    char phase[64];

    parse(argc, argv, &o);
    if (LEAK_UNDER_ASAN) o.valgrind = 1; /* the same reasons: memory is the sanitizer's */
    world = mp_init_env("mp_leak_cycles", &rank, &n);
    setvbuf(stdout, NULL, _IOLBF, 0);

    for (long i = 0; i < o.warm_allreduces; i++) small_allreduce(world, i, rank, n);
    for (long c = 0; c < o.warm_cycles; c++) one_cycle(world, c, rank, n);
    mp_die_on_error(chorus_barrier(world), world, rank, "barrier");
    /* stdout's buffer is allocated at the first line printed: before the baseline. */
    printf("rank %d: warmed up: %ld allreduces, %ld cycles\n", rank, o.warm_allreduces,
           o.warm_cycles);
    base = sample_stable();
    shm_list(&shm_base);

    t0 = mp_now();
    for (long i = 0; i < o.allreduces; i++) small_allreduce(world, o.warm_allreduces + i, rank, n);
    t_ar = mp_now() - t0;
    snprintf(phase, sizeof phase, "%ld allreduces", o.allreduces);
    check_all(phase, &base, &shm_base, &o, world, rank);

    t0 = mp_now();
    for (long c = 0; c < o.cycles; c++) one_cycle(world, o.warm_cycles + c, rank, n);
    t_cy = mp_now() - t0;
    snprintf(phase, sizeof phase, "%ld cycles", o.cycles);
    check_all(phase, &base, &shm_base, &o, world, rank);
    shm_free(&shm_base);

    /* Every rank learns whether any failed, so rank 0's verdict covers the job. */
    int32_t bad = failures > 0;
    mp_die_on_error(chorus_allreduce(&bad, &bad, 1, CHORUS_INT32, CHORUS_MAX, world, NULL), world,
                    rank, "allreduce of the verdict");
    all_ok = bad == 0;
    if (rank == 0)
        printf("%d ranks: %ld allreduces in %.1f s (%.1f us each), %ld create/destroy cycles "
               "in %.1f s (%.1f ms each): %s\n",
               n, o.allreduces, t_ar, o.allreduces ? t_ar * 1e6 / (double)o.allreduces : 0.0,
               o.cycles, t_cy, o.cycles ? t_cy * 1e3 / (double)o.cycles : 0.0,
               all_ok ? "no growth" : "FAILED");
    mp_die_on_error(chorus_comm_destroy(world), NULL, rank, "chorus_comm_destroy");
    return failures > 0 || !all_ok ? 1 : 0;
}
