/*
 * Registered memory (issue 38): what chorus_mem_alloc and chorus_mem_free promise, under
 * chorusrun on 1 or more ranks of one host.
 *
 *   - a window is the size asked, page-aligned, readable and writable, and freeing it
 *     returns CHORUS_SUCCESS on every rank;
 *   - bad input is CHORUS_ERR_INVALID_ARGUMENT naming the rank and the call, and changes
 *     nothing: a NULL comm, pointer or ptr_p, 0 bytes, a pointer that chorus_mem_alloc did
 *     not return (malloc'd memory, a pointer inside a window), and a second free;
 *   - a free while a nonblocking call on the comm is in flight is CHORUS_ERR_INVALID_ARGUMENT
 *     (rank 0 posts an iallreduce the others join 0.3 s later), and the window stays good;
 *   - ranks asking different sizes all get CHORUS_ERR_MISMATCH, and the communicator still
 *     works afterwards (the next alloc and an allreduce on it succeed);
 *   - chorus_mem_stats counts a collective that read every peer's window (on 2 or more
 *     ranks with the arena), and an allreduce whose buffers are not registered adds nothing;
 *   - without a GPU, chorus_mem_alloc_device is CHORUS_ERR_UNSUPPORTED naming the call;
 *   - chorus_algorithm_predict_buffers costs registered buffers where the arena reads them in
 *     place, and only there.
 *
 * Exits 0 when all held, 1 otherwise (each failure printed).
 */
#include "mp/mp_common.h"

#include "gpu/gpu.h"

static int g_rank, g_fail; /* mp_common.h's CHECK */

/* st is `want`, and the message names this rank and `call`. */
static void expect_err(int rank, chorus_status_t st, chorus_status_t want, const char *call,
                       int line)
{
    char me[32];
    snprintf(me, sizeof me, "rank %d", rank);
    if (st != want || strstr(chorus_last_error(), call) == NULL ||
        (strstr(chorus_last_error(), me) == NULL && strstr(chorus_last_error(), "comm is") == NULL)) {
        printf("FAIL rank %d line %d: %s: status %s (want %s), message \"%s\"\n", rank, line,
               call, chorus_status_string(st), chorus_status_string(want), chorus_last_error());
        g_fail = 1;
    }
}

int main(void)
{
    int rank, n;
    chorus_comm_t comm = mp_init_env("mp_mem_errors", &rank, &n);
    void *a = NULL, *b = (void *)1;
    char *heap = malloc(4096);
    uint64_t calls0 = 0, calls1 = 0, bytes0 = 0, bytes1 = 0;
    int32_t *v;
    const size_t count = 1 << 18; /* 1 MiB of int32: past the arena's flat path */

    setvbuf(stdout, NULL, _IOLBF, 0);
    g_rank = rank;
    /* Arguments. */
    expect_err(rank, chorus_mem_alloc(NULL, 4096, &a), CHORUS_ERR_INVALID_ARGUMENT, "mem_alloc",
               __LINE__);
    expect_err(rank, chorus_mem_alloc(comm, 0, &a), CHORUS_ERR_INVALID_ARGUMENT, "mem_alloc",
               __LINE__);
    expect_err(rank, chorus_mem_alloc(comm, 4096, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "mem_alloc", __LINE__);
    expect_err(rank, chorus_mem_free(comm, NULL), CHORUS_ERR_INVALID_ARGUMENT, "mem_free",
               __LINE__);
    expect_err(rank, chorus_mem_free(comm, heap), CHORUS_ERR_INVALID_ARGUMENT, "mem_free",
               __LINE__);
    expect_err(rank, chorus_mem_stats(NULL, NULL, NULL), CHORUS_ERR_INVALID_ARGUMENT,
               "mem_stats", __LINE__);

    /* A good window: its size, alignment, contents, an allreduce on it, a free. */
    mp_die_on_error(chorus_mem_alloc(comm, 2 * count * sizeof(int32_t), &a), comm, rank,
                    "chorus_mem_alloc");
    CHECK(((uintptr_t)a & 4095) == 0, "window %p is not page-aligned", a);
    v = a;
    for (size_t i = 0; i < 2 * count; i++) v[i] = (int32_t)(rank + 1 + (int)(i % 5));
    mp_die_on_error(chorus_mem_stats(comm, &calls0, &bytes0), comm, rank, "chorus_mem_stats");
    mp_die_on_error(chorus_allreduce(v, v + count, count, CHORUS_INT32, CHORUS_SUM, comm, NULL),
                    comm, rank, "allreduce on the window");
    for (size_t i = 0; i < count; i++) {
        int32_t want = (int32_t)(n * (n + 1) / 2 + n * (int)(i % 5));
        if (v[count + i] != want) {
            CHECK(0, "allreduce element %zu: %d, not %d", i, v[count + i], want);
            break;
        }
    }
    mp_die_on_error(chorus_mem_stats(comm, &calls1, &bytes1), comm, rank, "chorus_mem_stats");
    if (n > 1 && getenv("CHORUS_ARENA") == NULL)
        CHECK(calls1 == calls0 + 1 && bytes1 > bytes0,
               "the allreduce on registered buffers did not read its peers' windows (%llu -> "
               "%llu calls, %llu -> %llu bytes)", (unsigned long long)calls0,
               (unsigned long long)calls1, (unsigned long long)bytes0, (unsigned long long)bytes1);
    {
        /* Buffers that are not registered: the usual path, nothing counted. */
        int32_t *s = calloc(count, sizeof *s), *r = calloc(count, sizeof *r);
        uint64_t calls2 = 0, bytes2 = 0;
        mp_die_on_error(chorus_allreduce(s, r, count, CHORUS_INT32, CHORUS_SUM, comm, NULL),
                        comm, rank, "allreduce off the window");
        mp_die_on_error(chorus_mem_stats(comm, &calls2, &bytes2), comm, rank, "mem_stats");
        CHECK(calls2 == calls1 && bytes2 == bytes1,
               "an allreduce of unregistered buffers counted as single copy");
        free(s);
        free(r);
    }
    if (n > 1 && getenv("CHORUS_ARENA") == NULL) {
        /* The model costs the registered paths: a registered allgather reads its peers in
         * place (cheaper than through the slots); in place, an alltoall offers nothing and
         * costs what a plain one does; a schedule ("ring") costs the same either way. */
        const unsigned reg = CHORUS_PREDICT_REGISTERED, ip = CHORUS_PREDICT_IN_PLACE;
        const size_t big = (size_t)4 << 20; /* elements */
        double plain = -1, regd = -1, a_ip = -1, a_rip = -1, ring = -1, ring_reg = -1;
        mp_die_on_error(chorus_algorithm_predict_buffers(comm, "allgather", "arena", big,
                                                         CHORUS_FLOAT32, 0, &plain),
                        comm, rank, "predict plain");
        mp_die_on_error(chorus_algorithm_predict_buffers(comm, "allgather", "arena", big,
                                                         CHORUS_FLOAT32, reg, &regd),
                        comm, rank, "predict registered");
        mp_die_on_error(chorus_algorithm_predict_buffers(comm, "alltoall", "arena", big / n,
                                                         CHORUS_FLOAT32, ip, &a_ip),
                        comm, rank, "predict in place");
        mp_die_on_error(chorus_algorithm_predict_buffers(comm, "alltoall", "arena", big / n,
                                                         CHORUS_FLOAT32, reg | ip, &a_rip),
                        comm, rank, "predict registered in place");
        mp_die_on_error(chorus_algorithm_predict_buffers(comm, "allgather", "ring", big,
                                                         CHORUS_FLOAT32, 0, &ring),
                        comm, rank, "predict ring");
        mp_die_on_error(chorus_algorithm_predict_buffers(comm, "allgather", "ring", big,
                                                         CHORUS_FLOAT32, reg, &ring_reg),
                        comm, rank, "predict ring registered");
        CHECK(regd > 0 && regd < plain, "registered allgather predicted %.1f us, plain %.1f",
              regd, plain);
        CHECK(a_rip == a_ip, "in-place alltoall predicted %.1f us registered, %.1f plain", a_rip,
              a_ip);
        CHECK(ring_reg == ring, "ring allgather predicted %.1f us registered, %.1f plain",
              ring_reg, ring);
    }
    if (chorus__gpu_state() != CHORUS_GPU_READY) {
        /* Registered device memory needs a GPU: without one, the named refusal (with one,
         * tests/gpu/dev_win.c tests it). */
        void *d = (void *)1;
        expect_err(rank, chorus_mem_alloc_device(comm, 4096, &d), CHORUS_ERR_UNSUPPORTED,
                   "mem_alloc_device", __LINE__);
        CHECK(d == NULL, "a refused mem_alloc_device left *ptr_p at %p", d);
    }
    expect_err(rank, chorus_mem_free(comm, (char *)a + 64), CHORUS_ERR_INVALID_ARGUMENT,
               "mem_free", __LINE__);
    mp_die_on_error(chorus_mem_free(comm, a), comm, rank, "chorus_mem_free");
    expect_err(rank, chorus_mem_free(comm, a), CHORUS_ERR_INVALID_ARGUMENT, "mem_free",
               __LINE__);

    /* A free while a nonblocking call is in flight. */
    if (n > 1) {
        chorus_request_t req;
        mp_die_on_error(chorus_mem_alloc(comm, 4096, &a), comm, rank, "chorus_mem_alloc");
        if (rank != 0) usleep(300000);
        mp_die_on_error(chorus_iallreduce(a, a, 64, CHORUS_INT32, CHORUS_SUM, comm, &req), comm,
                        rank, "iallreduce");
        if (rank == 0)
            expect_err(rank, chorus_mem_free(comm, a), CHORUS_ERR_INVALID_ARGUMENT, "mem_free",
                       __LINE__);
        mp_die_on_error(chorus_wait(&req), comm, rank, "wait");
        mp_die_on_error(chorus_mem_free(comm, a), comm, rank, "chorus_mem_free after the wait");
    }
    /* Ranks that disagree about the size (with 2 or more ranks and the arena). */
    if (n > 1 && getenv("CHORUS_ARENA") == NULL) {
        chorus_status_t st = chorus_mem_alloc(comm, rank == 0 ? 8192 : 4096, &b);
        expect_err(rank, st, CHORUS_ERR_MISMATCH, "mem_alloc", __LINE__);
        CHECK(b == NULL, "a failed mem_alloc left *ptr_p at %p", b);
    }
    /* The communicator still works: a window of the same size everywhere, a collective. */
    mp_die_on_error(chorus_mem_alloc(comm, 4096, &a), comm, rank, "chorus_mem_alloc after");
    mp_die_on_error(chorus_allreduce(a, a, 16, CHORUS_INT32, CHORUS_SUM, comm, NULL), comm, rank,
                    "allreduce after");
    mp_die_on_error(chorus_mem_free(comm, a), comm, rank, "chorus_mem_free after");
    {
        int all = 0;
        mp_die_on_error(chorus_allreduce(&g_fail, &all, 1, CHORUS_INT32, CHORUS_SUM, comm, NULL),
                        comm, rank, "the failure count");
        if (rank == 0) printf("mp_mem_errors: %d ranks: %d failure(s)\n", n, all);
        chorus_comm_destroy(comm);
        free(heap);
        return all == 0 ? 0 : 1;
    }
}
