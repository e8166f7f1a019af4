/*
 * tcp-ceiling: the fastest rate at which the kernel moves a ring's traffic over loopback
 * tcp on this machine, with no library at all, for bench/compare.sh -t tcp.
 *
 *   build/bin/tcp-ceiling -n 4 -b 64K -e 256M -f 4 -r 2
 *
 * RANKS processes connect in a ring over 127.0.0.1. For each size, every rank sends
 * 2(n-1)/n * size bytes to rank+1 and receives as many from rank-1 per iteration, in calls
 * of at most size/n bytes through send and receive buffers of size bytes: the bytes and
 * the calls of a ring allreduce of size bytes, without its reduction and without the
 * dependency of each step on the one before. Calls are also cut at --max-call (256 KiB):
 * the fastest call size here, since data the receiver copies out soon after the sender
 * copied it in is still in the cache (32 MiB calls ran at 1.0-1.4 GB/s on 2 ranks, 256 KiB
 * calls at 1.4-2.2 in the same minutes). So busbw here (bytes sent per rank per
 * second) is directly comparable to an allreduce's busbw of that size, and bounds it: a
 * ring allreduce over loopback tcp pushes the same bytes through the same kernel copies,
 * and reduces besides.
 *
 * Deliberately no code from lib/: this is the baseline the library is measured against.
 * All ranks are children; the parent only waits, and stops the others when one fails.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 1024
#define MAX_SIZE (UINT64_C(1) << 32)
/* Idle polls of the two sockets that yield the core before a rank sleeps in poll(). */
#define SPIN_YIELDS 64
/* The most iterations of one timed loop (small sizes on a fast machine). */
#define ITERS_MAX 1000000

enum wait_mode { WAIT_YIELD, WAIT_POLL };

typedef struct {
    int nranks;
    uint64_t min, max, factor;
    int rounds;
    double time_per_size;
    uint64_t buf;
    uint64_t max_call;
    enum wait_mode wait;
    /* Seconds a rank may spend in one phase (start-up, one timed loop) before its
     * watchdog ends it; a timed loop adds four times its expected length. */
    int timeout;
} opts_t;

/* One rank's end of the ring. */
typedef struct {
    const opts_t *opt;
    int rank;
    int in_fd;  /* from rank-1 */
    int out_fd; /* to rank+1 */
    char *sbuf, *rbuf;
    int granted_snd, granted_rcv;
} ring_t;

static char watchdog_msg[128];
static size_t watchdog_len;

static void usage(void)
{
    fprintf(stderr,
            "usage: tcp-ceiling -n RANKS -b MIN -e MAX -f FACTOR [-r ROUNDS]\n"
            "                   [--time-per-size SEC] [--buf SIZE] [--wait yield|poll]\n"
            "                   [--max-call SIZE] [--timeout SEC]\n"
            "  -n  ranks in the ring (2..%d), forked on this machine\n"
            "  -b/-e  smallest/largest size in bytes (K M G suffixes, 1..4G)\n"
            "  -f  size factor (>= 2)           -r  rounds per size, the best is kept (1)\n"
            "  --time-per-size SEC  each timed loop lasts about this long, >= 3 iterations"
            " (0.2)\n"
            "  --buf SIZE  SO_SNDBUF and SO_RCVBUF to ask for, 0 for autotuning (4M)\n"
            "  --max-call SIZE  largest send or recv call, 0 for size/n only (256K)\n"
            "  --wait MODE  what an idle rank does: yield the core (sched_yield) or sleep\n"
            "               in poll() (yield)\n"
            "  --timeout SEC  a rank stuck this long in one phase gives up (120)\n"
            "Prints per size the slowest rank's time per iteration and the bytes each rank\n"
            "sent per second (GB = 1e9), as a ring allreduce's busbw of that size.\n",
            MAX_RANKS);
    exit(2);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A byte count with an optional K, M or G suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *out_p)
{
    static const char units[] = "KMG";
    const char *unit = NULL;
    unsigned long long v;
    char *end;
    int shift = 0;

    if (s[0] < '0' || s[0] > '9') return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0) return -1;
    if (*end != '\0') unit = strchr(units, toupper((unsigned char)*end));
    if (unit != NULL) {
        shift = 10 * (int)(unit - units + 1);
        end++;
    }
    if (*end != '\0' || v > (UINT64_MAX >> shift)) return -1;
    *out_p = (uint64_t)v << shift;
    return 0;
}

static int parse_int(const char *s, long lo, long hi, int *out_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return -1;
    *out_p = (int)v;
    return 0;
}

static void parse_args(int argc, char **argv, opts_t *opt)
{
    enum { OPT_TPS = 256, OPT_BUF, OPT_MAX_CALL, OPT_WAIT, OPT_TIMEOUT };
    static const struct option longopts[] = {
        {"time-per-size", required_argument, NULL, OPT_TPS},
        {"buf", required_argument, NULL, OPT_BUF},
        {"max-call", required_argument, NULL, OPT_MAX_CALL},
        {"wait", required_argument, NULL, OPT_WAIT},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, bad = 0, factor = 0;
    char *end;

    *opt = (opts_t){.rounds = 1,
                    .time_per_size = 0.2,
                    .buf = 4u << 20,
                    .max_call = 256u << 10,
                    .wait = WAIT_YIELD,
                    .timeout = 120};
    while ((c = getopt_long(argc, argv, "n:b:e:f:r:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': bad |= parse_int(optarg, 2, MAX_RANKS, &opt->nranks); break;
        case 'b': bad |= parse_size(optarg, &opt->min); break;
        case 'e': bad |= parse_size(optarg, &opt->max); break;
        case 'f': bad |= parse_int(optarg, 2, 1 << 20, &factor); break;
        case 'r': bad |= parse_int(optarg, 1, 1000, &opt->rounds); break;
        case OPT_TPS:
            errno = 0;
            opt->time_per_size = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(opt->time_per_size > 0.0) ||
                opt->time_per_size > 3600.0)
                bad = 1;
            break;
        case OPT_BUF: bad |= parse_size(optarg, &opt->buf) || opt->buf > INT_MAX / 2; break;
        case OPT_MAX_CALL: bad |= parse_size(optarg, &opt->max_call); break;
        case OPT_TIMEOUT: bad |= parse_int(optarg, 1, 86400, &opt->timeout); break;
        case OPT_WAIT:
            if (strcmp(optarg, "yield") == 0)
                opt->wait = WAIT_YIELD;
            else if (strcmp(optarg, "poll") == 0)
                opt->wait = WAIT_POLL;
            else
                bad = 1;
            break;
        default: usage();
        }
    }
    opt->factor = (uint64_t)factor;
    if (bad || optind != argc || opt->nranks == 0 || opt->factor == 0 || opt->min == 0 ||
        opt->min > opt->max || opt->max > MAX_SIZE)
        usage();
}

/* Errors of a rank name the rank, the call and the peer; the rank then exits with 1. */
static int rank_error(const ring_t *r, const char *call, int peer, int err)
{
    if (peer >= 0)
        fprintf(stderr, "tcp-ceiling: rank %d: %s rank %d: %s\n", r->rank, call, peer,
                err != 0 ? strerror(err) : "connection closed");
    else
        fprintf(stderr, "tcp-ceiling: rank %d: %s: %s\n", r->rank, call, strerror(err));
    return -1;
}

static int prev_rank(const ring_t *r)
{
    return (r->rank + r->opt->nranks - 1) % r->opt->nranks;
}

static int next_rank(const ring_t *r)
{
    return (r->rank + 1) % r->opt->nranks;
}

/* Sleeps until fd is ready for events. The watchdog bounds the wait. */
static int wait_fd(const ring_t *r, int fd, short events, int peer)
{
    struct pollfd p = {.fd = fd, .events = events};

    while (poll(&p, 1, -1) < 0) {
        if (errno != EINTR) return rank_error(r, "poll for", peer, errno);
    }
    return 0;
}

/* Blocking send and receive of small control messages over the nonblocking ring sockets. */
static int send_full(const ring_t *r, const void *buf, size_t len)
{
    size_t done = 0;

    while (done < len) {
        ssize_t k = send(r->out_fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);
        if (k > 0) {
            done += (size_t)k;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(r, r->out_fd, POLLOUT, next_rank(r)) != 0) return -1;
        } else if (errno != EINTR) {
            return rank_error(r, "send to", next_rank(r), errno);
        }
    }
    return 0;
}

static int recv_full(const ring_t *r, void *buf, size_t len)
{
    size_t done = 0;

    while (done < len) {
        ssize_t k = recv(r->in_fd, (char *)buf + done, len - done, 0);
        if (k > 0) {
            done += (size_t)k;
        } else if (k == 0) {
            return rank_error(r, "recv from", prev_rank(r), 0);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(r, r->in_fd, POLLIN, prev_rank(r)) != 0) return -1;
        } else if (errno != EINTR) {
            return rank_error(r, "recv from", prev_rank(r), errno);
        }
    }
    return 0;
}

/* One trip of a 64-bit value around the ring, from rank 0 back to rank 0. With take_max
 * every rank forwards the larger of what it got and its own value, and rank 0 ends with
 * the maximum; without, rank 0's value reaches every rank (a broadcast). Either way rank 0
 * returns only when every rank has reached this call. */
static int ring_pass(const ring_t *r, uint64_t *value, int take_max)
{
    uint64_t v;

    if (r->rank == 0) {
        if (send_full(r, value, sizeof(*value)) != 0) return -1;
        if (recv_full(r, &v, sizeof(v)) != 0) return -1;
    } else {
        if (recv_full(r, &v, sizeof(v)) != 0) return -1;
        if (take_max && *value > v) v = *value;
        if (send_full(r, &v, sizeof(v)) != 0) return -1;
    }
    *value = v;
    return 0;
}

/* The length of the next send or receive call: at most one piece (size/n rounded up, or
 * --max-call if less), never across a piece's end or the buffer's end. */
static size_t call_len(uint64_t done, uint64_t total, uint64_t size, uint64_t piece)
{
    uint64_t len = total - done;
    uint64_t off = done % size;

    if (len > piece - done % piece) len = piece - done % piece;
    if (len > size - off) len = size - off;
    return (size_t)len;
}

/* A rank with nothing to do either yields the core to the rank it waits for (on an
 * oversubscribed machine the other side of the copy needs it) or, after SPIN_YIELDS idle
 * rounds or with --wait poll, sleeps until one of its sockets is ready. */
static int idle(const ring_t *r, unsigned *spins, int want_out, int want_in)
{
    struct pollfd p[2] = {{.fd = r->out_fd, .events = want_out ? POLLOUT : 0},
                          {.fd = r->in_fd, .events = want_in ? POLLIN : 0}};

    if (r->opt->wait == WAIT_YIELD && ++*spins < SPIN_YIELDS) {
        sched_yield();
        return 0;
    }
    *spins = 0;
    if (poll(p, 2, -1) < 0 && errno != EINTR) return rank_error(r, "poll", -1, errno);
    return 0;
}

/* One iteration: 2(n-1)/n * size bytes out to rank+1 and as many in from rank-1, both
 * directions at once, as the sockets take them. */
static int ring_iteration(const ring_t *r, uint64_t size)
{
    uint64_t n = (uint64_t)r->opt->nranks;
    uint64_t total = 2 * (n - 1) * size / n, piece = (size + n - 1) / n;
    uint64_t sent = 0, got = 0;
    unsigned spins = 0;

    if (r->opt->max_call > 0 && piece > r->opt->max_call) piece = r->opt->max_call;

    while (sent < total || got < total) {
        int progress = 0;
        if (sent < total) {
            size_t len = call_len(sent, total, size, piece);
            ssize_t k = send(r->out_fd, r->sbuf + sent % size, len, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k > 0) {
                sent += (uint64_t)k;
                progress = 1;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return rank_error(r, "send to", next_rank(r), errno);
            }
        }
        if (got < total) {
            size_t len = call_len(got, total, size, piece);
            ssize_t k = recv(r->in_fd, r->rbuf + got % size, len, MSG_DONTWAIT);
            if (k > 0) {
                got += (uint64_t)k;
                progress = 1;
            } else if (k == 0) {
                return rank_error(r, "recv from", prev_rank(r), 0);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return rank_error(r, "recv from", prev_rank(r), errno);
            }
        }
        if (progress)
            spins = 0;
        else if (idle(r, &spins, sent < total, got < total) != 0)
            return -1;
    }
    return 0;
}

/* Rank 0's iteration count reaches every rank (which releases them together, within a
 * trip around the ring), each runs the loop, and rank 0 gets the slowest rank's time per
 * iteration in *sec_p. The watchdog allows four times the expected length. */
static int timed_loop(const ring_t *r, uint64_t size, uint64_t iters, double expect_s,
                      double *sec_p)
{
    double grace = 4.0 * expect_s * (double)iters, t0, sec;
    uint64_t ns;

    if (ring_pass(r, &iters, 0) != 0) return -1;
    alarm((unsigned)r->opt->timeout + (unsigned)(grace < 86400.0 ? grace : 86400.0));
    t0 = now_s();
    for (uint64_t i = 0; i < iters; i++) {
        if (ring_iteration(r, size) != 0) return -1;
    }
    sec = (now_s() - t0) / (double)iters;
    ns = (uint64_t)(sec * 1e9);
    if (ring_pass(r, &ns, 1) != 0) return -1;
    *sec_p = (double)ns * 1e-9;
    return 0;
}

/* Rank 0's count of iterations for the timed rounds: warm-up loops of 1, 2, 4, ...
 * iterations until one lasts an eighth of --time-per-size, then enough iterations at the
 * last loop's rate to fill it, at least 3. Rank 0 tells the others when to stop. */
static int calibrate(const ring_t *r, uint64_t size, uint64_t *iters_p, double *once_p)
{
    const double tps = r->opt->time_per_size;
    uint64_t k = 1, next;
    double sec;

    for (;;) {
        if (timed_loop(r, size, k, 0.0, &sec) != 0) return -1;
        next = 0;
        if (r->rank == 0 && (double)k * sec < tps / 8.0 && k < ITERS_MAX / 2) next = 2 * k;
        if (ring_pass(r, &next, 0) != 0) return -1;
        if (next == 0) break;
        k = next;
    }
    if (sec * ITERS_MAX <= tps)
        *iters_p = ITERS_MAX;
    else
        *iters_p = tps / sec < 3.0 ? 3 : (uint64_t)(tps / sec);
    *once_p = sec;
    return 0;
}

/* For one size: calibration, then the best of the rounds, printed by rank 0. */
static int run_size(const ring_t *r, uint64_t size)
{
    const opts_t *opt = r->opt;
    double once, sec, best = 0.0;
    uint64_t iters, n = (uint64_t)opt->nranks;

    if (calibrate(r, size, &iters, &once) != 0) return -1;
    for (int k = 0; k < opt->rounds; k++) {
        if (timed_loop(r, size, iters, once, &sec) != 0) return -1;
        if (k == 0 || sec < best) best = sec;
    }
    if (r->rank == 0) {
        double bytes = (double)(2 * (n - 1) * size / n);
        printf("%12llu  %12.1f  %10.3f\n", (unsigned long long)size, best * 1e6,
               bytes / best / 1e9);
        fflush(stdout);
    }
    return 0;
}

static void print_header(const ring_t *r)
{
    const opts_t *opt = r->opt;

    printf("# tcp-ceiling: %d ranks in a ring over 127.0.0.1 tcp, no library. Per iteration each\n"
           "# rank sends 2(n-1)/n*size bytes to rank+1 and receives as many from rank-1, in\n"
           "# calls of at most size/n and %llu bytes (a ring allreduce's traffic, no reduction).\n",
           opt->nranks, (unsigned long long)opt->max_call);
    printf("# sockets: TCP_NODELAY, buffers asked %llu B (0: autotuning), kernel reports "
           "SO_SNDBUF %d\n# SO_RCVBUF %d; idle ranks %s\n",
           (unsigned long long)opt->buf, r->granted_snd, r->granted_rcv,
           opt->wait == WAIT_YIELD ? "yield the core, then poll" : "sleep in poll");
    printf("# time: slowest rank's time per iteration, best of %d round(s) of >= %g s and >= 3 "
           "iterations;\n# busbw: bytes sent per rank per second (GB = 1e9)\n",
           opt->rounds, opt->time_per_size);
    printf("#%11s  %12s  %10s\n", "size", "time_us", "busbw_GBps");
    fflush(stdout);
}

static int tune_socket(const ring_t *r, int fd, const char *what)
{
    int one = 1, buf = (int)r->opt->buf;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        return rank_error(r, what, -1, errno);
    if (buf > 0 && (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)) != 0 ||
                    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf)) != 0))
        return rank_error(r, what, -1, errno);
    return 0;
}

/* Rank r connects to rank r+1's listener, which the parent opened before the fork, and
 * accepts rank r-1 on its own; connect completes from the listen backlog, so no order is
 * needed. Each side sends its rank first to check the wiring. */
static int ring_connect(ring_t *r, int listen_fd, uint16_t next_port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(next_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(int);
    int32_t me = r->rank, peer = -1;

    r->out_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (r->out_fd < 0) return rank_error(r, "socket", -1, errno);
    if (tune_socket(r, r->out_fd, "setsockopt on the socket to rank+1") != 0) return -1;
    if (connect(r->out_fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS)
        return rank_error(r, "connect to", next_rank(r), errno);
    r->in_fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK);
    if (r->in_fd < 0) return rank_error(r, "accept from", prev_rank(r), errno);
    /* A refused connect shows up here, on the first send. */
    if (send_full(r, &me, sizeof(me)) != 0 || recv_full(r, &peer, sizeof(peer)) != 0) return -1;
    if (peer != prev_rank(r)) {
        fprintf(stderr, "tcp-ceiling: rank %d: accepted rank %d, expected rank %d\n", r->rank, peer,
                prev_rank(r));
        return -1;
    }
    if (getsockopt(r->out_fd, SOL_SOCKET, SO_SNDBUF, &r->granted_snd, &len) != 0 ||
        getsockopt(r->in_fd, SOL_SOCKET, SO_RCVBUF, &r->granted_rcv, &len) != 0)
        return rank_error(r, "getsockopt", -1, errno);
    return 0;
}

static void on_watchdog(int sig)
{
    ssize_t k;

    (void)sig;
    k = write(STDERR_FILENO, watchdog_msg, watchdog_len);
    (void)k;
    _exit(3);
}

/* A rank: dies with its parent, arms its watchdog, joins the ring, runs every size.
 * Returns the exit status. */
static int rank_main(const opts_t *opt, int rank, int *listen_fds, const uint16_t *ports,
                     pid_t parent)
{
    ring_t r = {.opt = opt, .rank = rank, .in_fd = -1, .out_fd = -1};
    struct sigaction sa = {.sa_handler = on_watchdog};
    int status = 1;

    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        rank_error(&r, "prctl(PR_SET_PDEATHSIG)", -1, errno);
        return 1;
    }
    if (getppid() != parent) return 1;
    snprintf(watchdog_msg, sizeof(watchdog_msg),
             "tcp-ceiling: rank %d: stuck for --timeout %d s in one phase, giving up\n", rank,
             opt->timeout);
    watchdog_len = strlen(watchdog_msg);
    sigaction(SIGALRM, &sa, NULL);
    alarm((unsigned)opt->timeout);
    for (int i = 0; i < opt->nranks; i++) {
        if (i != rank) close(listen_fds[i]);
    }
    /* Page-aligned, as benchmarks' buffers are: the kernel's copies are much slower from
     * and to a buffer that does not start on a cache line (malloc's 16 bytes past a page
     * start halved the rate at in-cache sizes on an AMD EPYC). */
    r.sbuf = aligned_alloc(4096, (opt->max + 4095) & ~(uint64_t)4095);
    r.rbuf = aligned_alloc(4096, (opt->max + 4095) & ~(uint64_t)4095);
    if (r.sbuf == NULL || r.rbuf == NULL) {
        rank_error(&r, "allocation of the send and receive buffers", -1, ENOMEM);
        goto out;
    }
    /* Touch every page now so that no timed loop pays for the first faults. */
    memset(r.sbuf, rank + 1, opt->max);
    memset(r.rbuf, 0, opt->max);
    if (ring_connect(&r, listen_fds[rank], ports[(rank + 1) % opt->nranks]) != 0) goto out;
    close(listen_fds[rank]);
    if (rank == 0) print_header(&r);
    for (uint64_t size = opt->min; size <= opt->max; size *= opt->factor) {
        if (run_size(&r, size) != 0) goto out;
        if (size > opt->max / opt->factor) break;
    }
    status = 0;
out:
    if (r.in_fd >= 0) close(r.in_fd);
    if (r.out_fd >= 0) close(r.out_fd);
    free(r.sbuf);
    free(r.rbuf);
    return status;
}

/* One listener per rank on 127.0.0.1, port 0: the kernel picks free ports, and the
 * children inherit both the sockets and the port list, so nothing is published later.
 * Accepted sockets inherit the listener's buffers, and the receive buffer must be set
 * before the handshake for the window scale to allow all of it. */
static int open_listeners(const opts_t *opt, int *fds, uint16_t *ports)
{
    int buf = (int)opt->buf, i;

    for (i = 0; i < opt->nranks; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);

        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0) goto err;
        if (buf > 0 && (setsockopt(fds[i], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)) != 0 ||
                        setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf)) != 0))
            goto err_close;
        if (bind(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fds[i], 4) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&a, &len) != 0)
            goto err_close;
        ports[i] = ntohs(a.sin_port);
    }
    return 0;
err_close:
    close(fds[i]);
err:
    fprintf(stderr, "tcp-ceiling: listener for rank %d on 127.0.0.1: %s\n", i, strerror(errno));
    while (i-- > 0)
        close(fds[i]);
    return -1;
}

static void describe_exit(int rank, pid_t pid, int wstatus)
{
    if (WIFSIGNALED(wstatus))
        fprintf(stderr, "tcp-ceiling: rank %d (pid %d) killed by signal %d (%s)\n", rank, (int)pid,
                WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
    else
        fprintf(stderr, "tcp-ceiling: rank %d (pid %d) exited with status %d\n", rank, (int)pid,
                WEXITSTATUS(wstatus));
}

/* Waits for every rank. The first that fails takes the others down with it (they would
 * otherwise wait for it until their watchdog fires); the later exits are not reported.
 * Returns 0 when every rank exited with 0. */
static int supervise(pid_t *pids, int n)
{
    int left = n, failed = 0;

    while (left > 0) {
        int wstatus, rank = -1;
        pid_t pid = waitpid(-1, &wstatus, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "tcp-ceiling: waitpid: %s\n", strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++) {
            if (pids[i] == pid) rank = i;
        }
        if (rank < 0) continue;
        pids[rank] = 0;
        left--;
        if (failed || (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) continue;
        describe_exit(rank, pid, wstatus);
        failed = 1;
        for (int i = 0; i < n; i++) {
            if (pids[i] > 0) kill(pids[i], SIGKILL);
        }
    }
    return failed;
}

int main(int argc, char **argv)
{
    static int listen_fds[MAX_RANKS];
    static uint16_t ports[MAX_RANKS];
    static pid_t pids[MAX_RANKS];
    pid_t parent = getpid();
    opts_t opt;
    int forked;

    parse_args(argc, argv, &opt);
    if (open_listeners(&opt, listen_fds, ports) != 0) return 1;
    fflush(NULL);
    for (forked = 0; forked < opt.nranks; forked++) {
        pid_t pid = fork();
        if (pid == 0) _exit(rank_main(&opt, forked, listen_fds, ports, parent));
        if (pid < 0) {
            fprintf(stderr, "tcp-ceiling: fork of rank %d: %s\n", forked, strerror(errno));
            for (int i = 0; i < forked; i++)
                kill(pids[i], SIGKILL);
            break;
        }
        pids[forked] = pid;
    }
    for (int i = 0; i < opt.nranks; i++)
        close(listen_fds[i]);
    return supervise(pids, forked) || forked < opt.nranks ? 1 : 0;
}
