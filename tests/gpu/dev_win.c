/*
 * Registered device memory (chorus_mem_alloc_device, lib/gpu/dev_win.c) on whatever plugin
 * loads (the fake one with CHORUS_CUDA_PLUGIN), under chorusrun on one host:
 *
 *   - every rank gets device memory (the plugin says so) of at least the size asked, and
 *     reads every peer's window, mapped here, with the bytes that peer wrote (3 MiB, past
 *     the first 2 MiB granule);
 *   - a device allreduce whose buffers lie in windows gives exact sums; 12 allgathers back to
 *     back on one stream, each rewriting the send buffer its peers read in the one before,
 *     all read the peers' windows (chorus_mem_stats) and give each round's bytes;
 *   - a stranger's datagrams sent to a rank's socket during the exchange (forged MAC, each
 *     with a descriptor attached) are dropped, the allocation succeeds, and no descriptor is
 *     left open;
 *   - bad input is CHORUS_ERR_INVALID_ARGUMENT naming the call: NULL comm or ptr_p, 0 bytes,
 *     a second free, a pointer inside a window; ranks asking different sizes all get
 *     CHORUS_ERR_MISMATCH and the comm goes on;
 *   - --unsupported (run with CHORUS_FAKE_GPU_VMM=0): CHORUS_ERR_UNSUPPORTED on every rank;
 *   - --owner-dies: the last rank writes its window and exits without freeing; the others
 *     still read its bytes there.
 *
 * Exits 0 when all held, 1 otherwise, 77 ("skipped: ...") without a GPU (gpu_gate.h).
 * Takes comm->dev_wins and comm->comm_id from lib/core/comm.h.
 */
#include "mp/mp_common.h"

#include "core/comm.h"
#include "gpu/dev_win.h"
#include "gpu/gpu.h"
#include "gpu_gate.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BYTES ((size_t)3 << 20)

static int g_rank, g_fail; /* mp_common.h's CHECK */
static const chorus_gpu_ops_t *G;
static void *g_stream;

static uint8_t pattern(int rank, size_t i)
{
    return (uint8_t)(rank * 31 + i * 7 + (i >> 12));
}

static void fill(void *dev, int rank, size_t bytes)
{
    uint8_t *h = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) h[i] = pattern(rank, i);
    OK(G->memcpy_async(dev, h, bytes, g_stream));
    OK(G->stream_synchronize(g_stream));
    free(h);
}

/* Whether dev holds rank's pattern over bytes. */
static int holds(const void *dev, int rank, size_t bytes)
{
    uint8_t *h = malloc(bytes);
    int ok = 1;
    OK(G->memcpy_async(h, dev, bytes, g_stream));
    OK(G->stream_synchronize(g_stream));
    for (size_t i = 0; i < bytes && ok; i++) ok = h[i] == pattern(rank, i);
    free(h);
    return ok;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    while (d != NULL && (e = readdir(d)) != NULL) n += e->d_name[0] != '.';
    if (d != NULL) closedir(d);
    return n - 1; /* the directory's own */
}

/* Every peer's window as mapped here holds what that peer wrote. */
static void check_peers(chorus_comm_t comm, void *mine, int n, size_t bytes)
{
    uint32_t id = 0;
    uint64_t off = 0;
    CHECK(chorus__dev_win_find(comm->dev_wins, mine, bytes, &id, &off) && off == 0,
          "my window %p is not found", mine);
    for (int r = 0; r < n; r++) {
        void *w = chorus__dev_win_at(comm->dev_wins, id, r, 0, bytes);
        CHECK(w != NULL, "rank %d's window %u is not mapped here", r, id);
        if (w != NULL) CHECK(holds(w, r, bytes), "rank %d's window %u holds other bytes", r, id);
    }
}

/* The stranger: sends forged messages to local rank 0's socket for window `id` until told
 * to stop. Each is what the last rank would send (dev_win.c's dw_msg_t, with the comm id
 * and window number that the socket's name shows anyone) but for the MAC, and carries a
 * descriptor of memory of the right size: accepted, it would be mapped as that rank's
 * window, and check_peers would see zeros where its bytes should be. */
typedef struct {
    uint64_t comm_id;
    uint32_t id;
    int from;
    size_t granted;
    atomic_int stop;
    int sent;
} stranger_t;

static void *stranger(void *arg)
{
    stranger_t *s = arg;
    struct sockaddr_un a;
    uint8_t junk[96];
    int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), fd = open("/dev/null", O_RDONLY);
    socklen_t len;

    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                      (size_t)snprintf(a.sun_path + 1, sizeof a.sun_path - 1,
                                       "chorus-dw-%016" PRIx64 "-%u-%d", s->comm_id, s->id, 0));
    struct {
        uint64_t magic, comm_id;
        uint32_t id;
        int32_t from, to;
        uint32_t pad;
        uint64_t bytes;
        uint8_t mac[32];
    } m = {0x4e49575645445243ULL, s->comm_id, s->id, s->from, 0, 0, s->granted, {0}};
    if (fd >= 0) close(fd);
    fd = memfd_create("stranger", 0);
    if (fd >= 0 && ftruncate(fd, (off_t)s->granted) != 0) {
        close(fd);
        fd = -1;
    }
    memset(m.mac, 0x5a, sizeof m.mac);
    memset(junk, 0, sizeof junk);
    memcpy(junk, &m, sizeof m);
    while (!atomic_load(&s->stop)) {
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {junk, sizeof m};
        struct msghdr h;
        struct cmsghdr *c;
        memset(&h, 0, sizeof h);
        memset(&ctl, 0, sizeof ctl);
        h.msg_name = &a;
        h.msg_namelen = len;
        h.msg_iov = &iov;
        h.msg_iovlen = 1;
        h.msg_control = ctl.buf;
        h.msg_controllen = sizeof ctl.buf;
        c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
        if (sendmsg(sock, &h, MSG_DONTWAIT | MSG_NOSIGNAL) > 0) s->sent++;
        usleep(100);
    }
    close(fd);
    close(sock);
    return NULL;
}

static void expect(int rank, chorus_status_t st, chorus_status_t want, const char *call)
{
    CHECK(st == want && strstr(chorus_last_error(), call) != NULL,
          "rank %d: %s: %s (want %s): \"%s\"", rank, call, chorus_status_string(st),
          chorus_status_string(want), chorus_last_error());
}

static int run_unsupported(chorus_comm_t comm, int rank)
{
    void *p = (void *)1;
    chorus_status_t st = chorus_mem_alloc_device(comm, BYTES, &p);
    CHECK(st == CHORUS_ERR_UNSUPPORTED && p == NULL, "rank %d: mem_alloc_device without "
          "shareable memory: %s (want unsupported), \"%s\"", rank, chorus_status_string(st),
          chorus_last_error());
    OK(chorus_barrier(comm)); /* the comm goes on */
    return g_fail;
}

static int run_owner_dies(chorus_comm_t comm, int rank, int n)
{
    void *p = NULL;
    mp_die_on_error(chorus_mem_alloc_device(comm, BYTES, &p), comm, rank, "mem_alloc_device");
    fill(p, rank, BYTES);
    mp_die_on_error(chorus_barrier(comm), comm, rank, "barrier");
    if (rank == n - 1) {
        printf("rank %d exits without freeing its window\n", rank);
        fflush(stdout);
        _exit(0);
    }
    usleep(300 * 1000);
    check_peers(comm, p, n, BYTES);
    printf("[%d] dev_win --owner-dies: %d ranks: %d failure(s)\n", rank, n, g_fail);
    fflush(stdout);
    _exit(g_fail ? 1 : 0); /* the comm has lost a rank: no destroy */
}

int main(int argc, char **argv)
{
    int rank, n, gate;
    chorus_comm_t comm;

    /* Rank 1's fake device runs slow, so that the others run ahead of it (before the plugin
     * loads, with the first communicator). */
    if (getenv("CHORUS_RANK") != NULL && atoi(getenv("CHORUS_RANK")) == 1 &&
        getenv("CHORUS_FAKE_GPU_DELAY_US") == NULL)
        setenv("CHORUS_FAKE_GPU_DELAY_US", "300", 1);
    comm = mp_init_env("gpu_dev_win", &rank, &n);
    const size_t count = 4099;
    void *a = NULL, *b = NULL, *c = NULL;
    chorus_status_t st;

    g_rank = rank;
    gate = gpu_gate(1); /* every rank says why: the first to exit may end the job */
    if (gate != 0) {
        chorus_comm_destroy(comm);
        return gate;
    }
    G = chorus__gpu();
    OK(G->stream_create(&g_stream));
    if (argc > 1 && strcmp(argv[1], "--unsupported") == 0) {
        run_unsupported(comm, rank);
    } else if (argc > 1 && strcmp(argv[1], "--owner-dies") == 0) {
        return run_owner_dies(comm, rank, n);
    } else {
        int is_dev = 0, dev = -1;
        /* 1. Windows, mapped by every peer. */
        mp_die_on_error(chorus_mem_alloc_device(comm, BYTES, &a), comm, rank, "mem_alloc_device");
        OK(G->pointer_kind(a, &is_dev, &dev));
        CHECK(is_dev, "rank %d: mem_alloc_device gave %p, which is not device memory", rank, a);
        fill(a, rank, BYTES);
        OK(chorus_barrier(comm));
        check_peers(comm, a, n, BYTES);
        OK(chorus_barrier(comm)); /* nobody frees before everyone has read */

        /* 2. A device allreduce on window buffers: exact sums. */
        {
            uint32_t *h = malloc(count * sizeof *h), *out = malloc(count * sizeof *out);
            for (size_t i = 0; i < count; i++) h[i] = (uint32_t)(rank + 1) * 1000u + (uint32_t)i;
            OK(G->memcpy_async(a, h, count * sizeof *h, g_stream));
            OK(chorus_allreduce(a, (uint8_t *)a + (1u << 20), count, CHORUS_UINT32, CHORUS_SUM,
                                comm, g_stream));
            OK(G->memcpy_async(out, (uint8_t *)a + (1u << 20), count * sizeof *out, g_stream));
            OK(G->stream_synchronize(g_stream));
            for (size_t i = 0; i < count; i++) {
                uint32_t want = 1000u * (uint32_t)(n * (n + 1) / 2) + (uint32_t)(n * i);
                if (out[i] != want) {
                    CHECK(0, "allreduce element %zu: %u, want %u", i, out[i], want);
                    break;
                }
            }
            free(h);
            free(out);
        }

        /* 2b. Back to back on one stream, nothing synchronised in between: each round
         * rewrites the send buffer that peers read in the round before, so a rank that
         * returned before its peers finished reading (no completion step) would hand them
         * the next round's bytes. Rank 1 runs slow (CHORUS_FAKE_GPU_DELAY_US, set below). */
        {
            enum { ROUNDS = 12, CNT = 1024 };
            uint32_t *h = malloc((size_t)ROUNDS * CNT * sizeof *h);
            uint32_t *out = malloc((size_t)ROUNDS * (size_t)n * CNT * sizeof *out);
            uint8_t *res = (uint8_t *)a + (1u << 20);
            uint64_t calls0 = 0, calls1 = 0;
            OK(chorus_mem_stats(comm, &calls0, NULL));
            for (int k = 0; k < ROUNDS; k++) {
                for (int i = 0; i < CNT; i++)
                    h[k * CNT + i] = (uint32_t)(k * 100000 + rank * 1000 + i);
                OK(G->memcpy_async(a, h + (size_t)k * CNT, CNT * sizeof *h, g_stream));
                OK(chorus_allgather(a, res + (size_t)k * n * CNT * sizeof *h, CNT, CHORUS_UINT32,
                                    comm, g_stream));
            }
            OK(G->memcpy_async(out, res, (size_t)ROUNDS * n * CNT * sizeof *out, g_stream));
            OK(G->stream_synchronize(g_stream));
            OK(chorus_mem_stats(comm, &calls1, NULL));
            CHECK(n == 1 || calls1 - calls0 == ROUNDS, "rank %d: %llu of %d allgathers read the "
                  "peers' windows", rank, (unsigned long long)(calls1 - calls0), ROUNDS);
            for (int k = 0, bad = 0; k < ROUNDS && !bad; k++)
                for (int r = 0; r < n && !bad; r++)
                    for (int i = 0; i < CNT && !bad; i++) {
                        uint32_t got = out[((size_t)k * n + r) * CNT + i];
                        uint32_t want = (uint32_t)(k * 100000 + r * 1000 + i);
                        if (got != want) {
                            CHECK(0, "round %d, rank %d's element %d: %u, want %u", k, r, i, got,
                                  want);
                            bad = 1;
                        }
                    }
            free(h);
            free(out);
        }

        /* 3. A stranger sends forged descriptors to rank 0 during the next allocation. */
        {
            /* The fake's granularity is 2 MiB. */
            stranger_t s = {.comm_id = comm->comm_id, .id = 1, .from = n - 1,
                            .granted = (BYTES + (2u << 20) - 1) / (2u << 20) * (2u << 20)};
            pthread_t t;
            int fds0 = open_fds(), started = 0;
            atomic_init(&s.stop, 0);
            /* The stranger's rank joins late: rank 0 has bound its socket and waits in the
             * first exchange meanwhile, so the forgeries are queued ahead of the real one. */
            if (rank == n - 1 && n > 1) {
                started = pthread_create(&t, NULL, stranger, &s) == 0;
                usleep(50 * 1000);
            }
            st = chorus_mem_alloc_device(comm, BYTES, &b);
            OK(st);
            if (started) {
                atomic_store(&s.stop, 1);
                pthread_join(t, NULL);
                CHECK(s.sent > 0 || n == 1, "the stranger sent nothing");
                printf("[%d] the stranger sent %d forged message(s)\n", rank, s.sent);
            }
            OK(chorus_barrier(comm));
            if (st == CHORUS_SUCCESS) {
                fill(b, rank, BYTES);
                OK(chorus_barrier(comm));
                check_peers(comm, b, n, BYTES);
                OK(chorus_barrier(comm));
            }
            if (rank == 0)
                CHECK(open_fds() == fds0, "rank 0 has %d descriptors open, %d before: a "
                      "stranger's descriptor was kept", open_fds(), fds0);
        }

        /* 4. Bad input. */
        expect(rank, chorus_mem_alloc_device(NULL, BYTES, &c), CHORUS_ERR_INVALID_ARGUMENT,
               "mem_alloc_device");
        expect(rank, chorus_mem_alloc_device(comm, BYTES, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "mem_alloc_device");
        expect(rank, chorus_mem_alloc_device(comm, 0, &c), CHORUS_ERR_INVALID_ARGUMENT,
               "mem_alloc_device");
        expect(rank, chorus_mem_free(comm, (uint8_t *)a + 4096), CHORUS_ERR_INVALID_ARGUMENT,
               "mem_free");
        st = chorus_mem_alloc_device(comm, rank == 0 ? BYTES : 3 * BYTES, &c);
        CHECK(n == 1 || (st == CHORUS_ERR_MISMATCH && c == NULL), "rank %d: different sizes: "
              "%s (want mismatch): \"%s\"", rank, chorus_status_string(st), chorus_last_error());
        if (n == 1 && st == CHORUS_SUCCESS) OK(chorus_mem_free(comm, c));
        OK(chorus_barrier(comm)); /* the comm goes on */

        OK(chorus_mem_free(comm, a));
        expect(rank, chorus_mem_free(comm, a), CHORUS_ERR_INVALID_ARGUMENT, "mem_free");
        if (b != NULL) OK(chorus_mem_free(comm, b));
    }
    OK(G->stream_destroy(g_stream));
    printf("[%d] dev_win: %d ranks: %d failure(s)\n", rank, n, g_fail);
    OK(chorus_comm_destroy(comm));
    return g_fail ? 1 : 0;
}
