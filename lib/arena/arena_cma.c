/*
 * Cross memory attach (process_vm_readv) for the arena: a rank reads a peer's buffer
 * straight into its own, one copy per byte where the staged path makes two (into the
 * segment, out of it). Open MPI's vader and UCX's cma transport use the same system call;
 * it needs the kernel's ptrace permission over the peer (same user, no Yama restriction,
 * a seccomp profile that allows it), so the arena probes it once at creation
 * (arena_seg.c) and every rank uses it only when every rank could.
 */
#include "arena/arena_int.h"

#include "util/status.h"

#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

const volatile uint64_t arena__probe_word = ARENA_PROBE;

int arena__cma_probe(uint32_t pid, uint64_t probe)
{
    uint64_t word = 0;
    struct iovec local = {&word, sizeof word};
    struct iovec remote = {(void *)(uintptr_t)probe, sizeof word};

    return process_vm_readv((pid_t)pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof word &&
           word == ARENA_PROBE;
}

chorus_status_t arena__cma_read(chorus_arena_t *a, int peer, void *dst, uint64_t addr,
                                size_t bytes, const char *what)
{
    uint8_t *d = dst;

    while (bytes > 0) {
        struct iovec local = {d, bytes};
        struct iovec remote = {(void *)(uintptr_t)addr, bytes};
        ssize_t got = process_vm_readv((pid_t)a->pids[peer], &local, 1, &remote, 1, 0);

        if (got <= 0) {
            int err = got < 0 ? errno : EIO;
            if (err == EINTR) continue;
            return arena__fail(a, chorus__error(CHORUS_ERR_REMOTE, "rank %d: arena: %s: reading "
                                                "%zu bytes from rank %d (pid %u) failed: %s",
                                                a->rank, what, bytes, a->ranks[peer],
                                                (unsigned)a->pids[peer], strerror(err)));
        }
        d += got;
        addr += (uint64_t)got;
        bytes -= (size_t)got;
    }
    return CHORUS_SUCCESS;
}
