/*
 * shm-floor: the fastest a 2-process synchronisation through shared memory can be on this
 * machine, with no library: what a 2-rank barrier, and any 2-rank collective that waits for
 * its peer, cannot beat.
 *
 *   shm-floor [-n ROUNDS] [-r REPEATS]
 *
 * Two processes (fork) share one page; each owns one cache line with a counter. A round
 * is: publish my round number on my line, then spin until the peer's line shows the same
 * round. Two ways to publish are measured:
 *   release  a plain store (the cheapest, what a waker that never sleeps could use)
 *   locked   a sequentially consistent exchange (a locked instruction on x86, what a
 *            publisher must use when its peer may be asleep and must be woken: Dekker)
 * Prints one line per way: "shm-floor: <way> <us> us per round (best of R runs of N)".
 * A round trip here is the transfer of one line each way; Open MPI's and Chorus's 2-rank
 * small calls are this plus their software. Exit 0, or 1 when a process could not run.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Alignas(64) _Atomic uint64_t round; /* the owner's last round */
    char pad[120];                        /* two lines apart: no adjacent-line coupling */
} floor_line_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs rounds [first, first + n) as process me; returns seconds taken. */
static double floor_run(floor_line_t *lines, int me, int locked, uint64_t first, uint64_t n)
{
    _Atomic uint64_t *mine = &lines[me].round, *peer = &lines[1 - me].round;
    double t0 = now_s();

    for (uint64_t r = first; r < first + n; r++) {
        if (locked) (void)atomic_exchange_explicit(mine, r, memory_order_seq_cst);
        else atomic_store_explicit(mine, r, memory_order_release);
        while (atomic_load_explicit(peer, memory_order_acquire) < r) continue;
    }
    return now_s() - t0;
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    unsigned long long x = strtoull(s, &end, 10);

    if (*s == '\0' || *end != '\0' || x == 0) return -1;
    *v = x;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t rounds = 1000000, repeats = 5, next = 1;
    floor_line_t *lines;
    int opt, status;
    pid_t child;

    while ((opt = getopt(argc, argv, "n:r:h")) != -1) {
        if ((opt == 'n' && parse_u64(optarg, &rounds) == 0) ||
            (opt == 'r' && parse_u64(optarg, &repeats) == 0))
            continue;
        fprintf(stderr, "usage: shm-floor [-n ROUNDS] [-r REPEATS] (both > 0)\n");
        return 2;
    }
    if (optind != argc) {
        fprintf(stderr, "usage: shm-floor [-n ROUNDS] [-r REPEATS] (both > 0)\n");
        return 2;
    }
    lines = mmap(NULL, 2 * sizeof *lines, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
    if (lines == MAP_FAILED) {
        perror("shm-floor: mmap");
        return 1;
    }
    memset(lines, 0, 2 * sizeof *lines);
    child = fork();
    if (child < 0) {
        perror("shm-floor: fork");
        return 1;
    }
    if (child == 0) prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int locked = 0; locked < 2; locked++) {
        double best = 1e30;

        /* Both processes run the same rounds in the same order, so they stay in step. */
        for (uint64_t k = 0; k < repeats; k++, next += rounds) {
            double t = floor_run(lines, child == 0, locked, next, rounds);
            if (t < best) best = t;
        }
        if (child != 0)
            printf("shm-floor: %-7s %.3f us per round (best of %llu runs of %llu)\n",
                   locked ? "locked" : "release", best / (double)rounds * 1e6,
                   (unsigned long long)repeats, (unsigned long long)rounds);
    }
    if (child == 0) _exit(0);
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "shm-floor: the second process failed\n");
        return 1;
    }
    return 0;
}
