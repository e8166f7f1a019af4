/*
 * Fake device memory (see fake.h). One address range is reserved PROT_NONE for the whole
 * process; each allocation takes the next pages of it (never reused, with a guard page
 * after each, so a stale or overrunning pointer never lands in someone else's memory) and
 * gets its bytes from a shm segment mapped read-write elsewhere. The plugin reaches the
 * bytes through the table below; the host, dereferencing the device address, faults.
 */
#include "fake.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAKE_IPC_MAGIC 0x55504746656b6146ull /* "FakeFGPU" */
#define FAKE_NAME_BYTES 40

/* ALLOC_FREED_PINNED: pinned memory after cudaFreeHost, its pages released but its
 * addresses still reserved (PROT_NONE) and listed, so that a copy queued before the free
 * and run after it fails with a message on its stream instead of writing into memory that
 * malloc may have handed out again, or faulting on a worker. The newest
 * FAKE_PINNED_QUARANTINE of them are kept; older ones are unmapped for good. */
/* ALLOC_VMM: shareable memory from vmm_alloc or vmm_import (cuMem), backed by a memfd
 * that lives as long as some process maps it. */
typedef enum { ALLOC_OWN, ALLOC_IPC, ALLOC_PINNED, ALLOC_FREED_PINNED, ALLOC_VMM } alloc_kind_t;

/* cuMemGetAllocationGranularity's usual answer for device memory: 2 MiB. */
#define FAKE_VMM_GRANULARITY ((size_t)2 << 20)

#define FAKE_PINNED_QUARANTINE 64

typedef struct {
    char *addr;      /* what the caller sees: device address, or the pinned pointer */
    size_t bytes;    /* as requested */
    size_t map_bytes; /* page-rounded */
    char *backing;   /* the read-write mapping (== addr for pinned memory) */
    alloc_kind_t kind;
    int device;
    int opens; /* ALLOC_IPC: ipc_open count in this process */
    unsigned long freed_seq; /* ALLOC_FREED_PINNED: order of the frees */
    pid_t owner;
    char name[FAKE_NAME_BYTES];
} alloc_t;

/* The IPC handle, CHORUS_GPU_IPC_HANDLE_BYTES (64) bytes. */
typedef struct {
    uint64_t magic;
    int32_t owner;
    uint32_t pad;
    uint64_t map_bytes;
    char name[FAKE_NAME_BYTES];
} ipc_handle_t;
_Static_assert(sizeof(ipc_handle_t) == 64, "IPC handle must be 64 bytes");

static pthread_rwlock_t mem_lock = PTHREAD_RWLOCK_INITIALIZER;
static alloc_t *allocs; /* sorted by addr */
static size_t nallocs, cap_allocs;
static char *arena;
static size_t arena_bytes, arena_next;
static unsigned long name_seq, freed_seq;
static size_t nfreed_pinned;
static size_t page_bytes;

static size_t round_page(size_t n)
{
    return (n + page_bytes - 1) / page_bytes * page_bytes;
}

/* Segments of processes that died without freeing (kill -9 in the fault tests) would stay
 * in /dev/shm for good: the first allocation of each process unlinks those whose owner is
 * gone. A pid reused by a live process keeps its stale names; that is only a leak. */
static void sweep_dead_segments(void)
{
    static const char prefix[] = "chorus-fakegpu-";
    struct dirent *d;
    DIR *dir = opendir("/dev/shm");
    if (!dir) return;
    while ((d = readdir(dir))) {
        char name[300];
        long pid;
        if (strncmp(d->d_name, prefix, sizeof prefix - 1) != 0) continue;
        pid = strtol(d->d_name + sizeof prefix - 1, NULL, 10);
        if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(name, sizeof name, "/%s", d->d_name);
        shm_unlink(name);
    }
    closedir(dir);
}

/* The device address range, reserved on first use. No backing: MAP_NORESERVE, PROT_NONE.
 * 1 TiB where the address space allows (valgrind may not), less otherwise. */
static chorus_status_t arena_reserve(void)
{
    static const size_t sizes[] = {(size_t)1 << 40, (size_t)1 << 36, (size_t)1 << 32};
    if (arena) return CHORUS_SUCCESS;
    page_bytes = (size_t)sysconf(_SC_PAGESIZE);
    sweep_dead_segments();
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = mmap(NULL, sizes[i], PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (p != MAP_FAILED) {
            arena = p;
            arena_bytes = sizes[i];
            return CHORUS_SUCCESS;
        }
    }
    return fake_error(CHORUS_ERR_NO_MEMORY, "fake GPU: cannot reserve a device address range: %s",
                      strerror(errno));
}

/* Takes map_bytes of device addresses plus a guard page; called with mem_lock held. */
static chorus_status_t arena_take(size_t map_bytes, const char *what, char **addr_p)
{
    chorus_status_t status = arena_reserve();
    if (status != CHORUS_SUCCESS) return status;
    if (map_bytes > arena_bytes - arena_next - page_bytes)
        return fake_error(CHORUS_ERR_NO_MEMORY,
                          "%s: out of fake device address space (%zu bytes asked, %zu left)",
                          what, map_bytes, arena_bytes - arena_next);
    *addr_p = arena + arena_next;
    arena_next += map_bytes + page_bytes;
    return CHORUS_SUCCESS;
}

static int in_arena(const void *p)
{
    return arena && (const char *)p >= arena && (const char *)p < arena + arena_bytes;
}

/* The allocation holding p (any kind), or NULL; with mem_lock held. */
static alloc_t *find(const void *p)
{
    size_t lo = 0, hi = nallocs;
    const char *c = p;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c < allocs[mid].addr) hi = mid;
        else if (c >= allocs[mid].addr + allocs[mid].map_bytes) lo = mid + 1;
        else return &allocs[mid];
    }
    return NULL;
}

static chorus_status_t insert(const alloc_t *a)
{
    size_t i = 0;
    if (nallocs == cap_allocs) {
        size_t ncap = cap_allocs ? 2 * cap_allocs : 64;
        alloc_t *n = realloc(allocs, ncap * sizeof *n);
        if (!n) return fake_error(CHORUS_ERR_NO_MEMORY, "fake GPU: allocation table full");
        allocs = n;
        cap_allocs = ncap;
    }
    while (i < nallocs && allocs[i].addr < a->addr) i++;
    memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    allocs[i] = *a;
    nallocs++;
    return CHORUS_SUCCESS;
}

static void erase(alloc_t *a)
{
    size_t i = (size_t)(a - allocs);
    memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
    nallocs--;
}

/* A fresh shm segment of map_bytes, mapped read-write, filled with 0xff bytes: cudaMalloc
 * does not clear memory, and all-ones reads as NaN or -1, so code that forgets a copy sees
 * wrong results rather than lucky zeros. */
static chorus_status_t segment_create(alloc_t *a)
{
    int fd, err;
    snprintf(a->name, sizeof a->name, "/chorus-fakegpu-%d-%lu", (int)getpid(), ++name_seq);
    fd = shm_open(a->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return fake_error(CHORUS_ERR_SYSTEM, "fake cudaMalloc: shm_open %s: %s", a->name,
                          strerror(errno));
    /* posix_fallocate, so a full /dev/shm fails here and not as SIGBUS later. */
    err = posix_fallocate(fd, 0, (off_t)a->map_bytes);
    if (err == 0) {
        a->backing = mmap(NULL, a->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (a->backing == MAP_FAILED) err = errno;
    }
    close(fd);
    if (err != 0) {
        shm_unlink(a->name);
        return fake_error(err == ENOSPC ? CHORUS_ERR_NO_MEMORY : CHORUS_ERR_SYSTEM,
                          "fake cudaMalloc: %zu bytes (%s): %s", a->bytes, a->name,
                          strerror(err));
    }
    memset(a->backing, 0xff, a->map_bytes);
    return CHORUS_SUCCESS;
}

chorus_status_t fake_mem_malloc_device(void **p, size_t bytes)
{
    alloc_t a;
    chorus_status_t status;
    if (!p) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaMalloc: NULL pointer");
    if (fake_ndevices() == 0)
        return fake_error(CHORUS_ERR_UNSUPPORTED, "fake cudaMalloc: no CUDA-capable device");
    if (bytes == 0) { /* cudaMalloc(0) succeeds with NULL */
        *p = NULL;
        return CHORUS_SUCCESS;
    }
    memset(&a, 0, sizeof a);
    pthread_rwlock_wrlock(&mem_lock);
    status = arena_reserve();
    if (status != CHORUS_SUCCESS) goto out;
    a.bytes = bytes;
    a.map_bytes = round_page(bytes);
    a.kind = ALLOC_OWN;
    a.device = fake_current_device();
    a.owner = getpid();
    status = arena_take(a.map_bytes, "fake cudaMalloc", &a.addr);
    if (status != CHORUS_SUCCESS) goto out;
    status = segment_create(&a);
    if (status != CHORUS_SUCCESS) goto out;
    status = insert(&a);
    if (status != CHORUS_SUCCESS) goto err_segment;
    *p = a.addr;
    goto out;
err_segment:
    munmap(a.backing, a.map_bytes);
    shm_unlink(a.name);
out:
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

chorus_status_t fake_mem_free_device(void *p)
{
    alloc_t *a;
    chorus_status_t status = CHORUS_SUCCESS;
    if (!p) return CHORUS_SUCCESS; /* cudaFree(NULL) */
    pthread_rwlock_wrlock(&mem_lock);
    a = find(p);
    if (!a || a->kind == ALLOC_PINNED || a->kind == ALLOC_FREED_PINNED) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaFree: %p is not device memory from cudaMalloc%s", p,
                            in_arena(p) ? " (freed already?)" : "");
    } else if (a->kind == ALLOC_IPC) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaFree: %p was opened with cudaIpcOpenMemHandle: close it "
                            "with cudaIpcCloseMemHandle", p);
    } else if (a->kind == ALLOC_VMM) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaFree: %p was mapped with cuMemMap (vmm_alloc or "
                            "vmm_import): unmap it with vmm_free", p);
    } else if ((char *)p != a->addr) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaFree: %p is %zu bytes inside the allocation at %p, not "
                            "its base", p, (size_t)((char *)p - a->addr), (void *)a->addr);
    } else {
        /* Peers that opened the segment keep their mapping; the name goes now. The device
         * addresses are never handed out again. */
        munmap(a->backing, a->map_bytes);
        shm_unlink(a->name);
        erase(a);
    }
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

chorus_status_t fake_mem_malloc_host(void **p, size_t bytes)
{
    alloc_t a;
    chorus_status_t status;
    if (!p) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaMallocHost: NULL pointer");
    memset(&a, 0, sizeof a);
    pthread_rwlock_wrlock(&mem_lock);
    if (!page_bytes) page_bytes = (size_t)sysconf(_SC_PAGESIZE);
    a.bytes = bytes;
    a.map_bytes = round_page(bytes ? bytes : 1);
    a.kind = ALLOC_PINNED;
    a.owner = getpid();
    a.addr = mmap(NULL, a.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a.addr == MAP_FAILED) {
        status = fake_error(CHORUS_ERR_NO_MEMORY, "fake cudaMallocHost: %zu bytes: %s", bytes,
                            strerror(errno));
        goto out;
    }
    a.backing = a.addr;
    status = insert(&a);
    if (status != CHORUS_SUCCESS) {
        munmap(a.addr, a.map_bytes);
        goto out;
    }
    *p = a.addr;
out:
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

/* Unmaps the oldest freed pinned range when more than FAKE_PINNED_QUARANTINE are kept;
 * with mem_lock held for writing. */
static void quarantine_trim(void)
{
    alloc_t *oldest = NULL;
    if (nfreed_pinned <= FAKE_PINNED_QUARANTINE) return;
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].kind == ALLOC_FREED_PINNED &&
            (!oldest || allocs[i].freed_seq < oldest->freed_seq))
            oldest = &allocs[i];
    if (!oldest) return;
    munmap(oldest->addr, oldest->map_bytes);
    erase(oldest);
    nfreed_pinned--;
}

chorus_status_t fake_mem_free_host(void *p)
{
    alloc_t *a;
    chorus_status_t status = CHORUS_SUCCESS;
    if (!p) return CHORUS_SUCCESS;
    pthread_rwlock_wrlock(&mem_lock);
    a = find(p);
    if (a && a->kind == ALLOC_FREED_PINNED) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaFreeHost: %p was freed already", p);
    } else if (!a || a->kind != ALLOC_PINNED || a->addr != (char *)p) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaFreeHost: %p is not the base of memory from cudaMallocHost",
                            p);
    } else if (mmap(a->addr, a->map_bytes, PROT_NONE,
                    MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) ==
               MAP_FAILED) {
        /* No quarantine possible: release the range (a late copy then faults). */
        munmap(a->addr, a->map_bytes);
        erase(a);
    } else {
        a->kind = ALLOC_FREED_PINNED;
        a->backing = NULL;
        a->freed_seq = ++freed_seq;
        nfreed_pinned++;
        quarantine_trim();
    }
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

/* With mem_lock held. */
static chorus_status_t check_locked(const void *p, size_t bytes, const char *what,
                                    alloc_t **a_p)
{
    const char *c = p;
    alloc_t *a = find(p);
    *a_p = a;
    if (a && a->kind == ALLOC_FREED_PINNED)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "%s: %p is pinned memory freed with cudaFreeHost (a task queued "
                          "before the free and run after it, or a stale pointer)", what, p);
    if (!a) {
        if (in_arena(p))
            return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                              "%s: %p is in the fake device range but in no live allocation "
                              "(freed, or past the end of one)", what, p);
        return CHORUS_SUCCESS; /* pageable host memory */
    }
    if (bytes > a->bytes || (size_t)(c - a->addr) > a->bytes - bytes)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "%s: %zu bytes at %p run past the end of a %zu-byte allocation "
                          "(at %p)", what, bytes, p, a->bytes, (void *)a->addr);
    return CHORUS_SUCCESS;
}

chorus_status_t fake_mem_check(const void *p, size_t bytes, const char *what,
                               fake_ptr_kind_t *kind_p)
{
    alloc_t *a;
    chorus_status_t status;
    if (!p) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "%s: NULL pointer", what);
    pthread_rwlock_rdlock(&mem_lock);
    status = check_locked(p, bytes, what, &a);
    if (status == CHORUS_SUCCESS)
        *kind_p = !a ? FAKE_PTR_HOST : a->kind == ALLOC_PINNED ? FAKE_PTR_PINNED
                                                                : FAKE_PTR_DEVICE;
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

void fake_mem_lock(void)
{
    pthread_rwlock_rdlock(&mem_lock);
}

void fake_mem_unlock(void)
{
    pthread_rwlock_unlock(&mem_lock);
}

chorus_status_t fake_mem_resolve(const void *p, size_t bytes, const char *what, void **host_p)
{
    alloc_t *a;
    chorus_status_t status = check_locked(p, bytes, what, &a);
    if (status != CHORUS_SUCCESS) return status;
    *host_p = a ? a->backing + ((const char *)p - a->addr) : (void *)p;
    return CHORUS_SUCCESS;
}

chorus_status_t fake_mem_pointer_kind(const void *p, int *is_device_p, int *device_p)
{
    alloc_t *a;
    chorus_status_t status = CHORUS_SUCCESS;
    if (!is_device_p)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaPointerGetAttributes: NULL");
    pthread_rwlock_rdlock(&mem_lock);
    a = p ? find(p) : NULL;
    if (!a && p && in_arena(p)) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaPointerGetAttributes: %p is in the fake device range but "
                            "in no live allocation (freed, or past the end of one)", p);
    } else {
        int dev = a && a->kind != ALLOC_PINNED && a->kind != ALLOC_FREED_PINNED;
        *is_device_p = dev;
        if (device_p) *device_p = dev ? a->device : -1;
    }
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

chorus_status_t fake_mem_ipc_get_handle(void *base, void *handle)
{
    ipc_handle_t h;
    alloc_t *a;
    chorus_status_t status = CHORUS_SUCCESS;
    if (!base || !handle)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaIpcGetMemHandle: NULL");
    pthread_rwlock_rdlock(&mem_lock);
    a = find(base);
    if (!a || a->kind != ALLOC_OWN) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaIpcGetMemHandle: %p is not memory from this process's "
                            "cudaMalloc", base);
    } else if (a->addr != (char *)base) {
        /* CUDA would export the whole allocation and ipc_open would return its base, so a
         * caller passing an inner pointer would read the wrong bytes: refuse it loudly. */
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaIpcGetMemHandle: %p is %zu bytes inside the allocation at "
                            "%p; pass the base (the peer's cudaIpcOpenMemHandle returns the "
                            "base)", base, (size_t)((char *)base - a->addr), (void *)a->addr);
    } else {
        memset(&h, 0, sizeof h);
        h.magic = FAKE_IPC_MAGIC;
        h.owner = (int32_t)a->owner;
        h.map_bytes = a->map_bytes;
        snprintf(h.name, sizeof h.name, "%s", a->name);
        memcpy(handle, &h, sizeof h);
    }
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

/* Maps the segment a handle names; with mem_lock held for writing. */
static chorus_status_t ipc_map(const ipc_handle_t *h, alloc_t *a)
{
    struct stat st;
    chorus_status_t status;
    int fd = shm_open(h->name, O_RDWR, 0);
    if (fd < 0)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaIpcOpenMemHandle: %s from process %d: %s (freed by its "
                          "owner, or the owner exited)", h->name, (int)h->owner, strerror(errno));
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != h->map_bytes) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaIpcOpenMemHandle: %s is not the %llu-byte segment the "
                            "handle names", h->name, (unsigned long long)h->map_bytes);
        goto err_close;
    }
    memset(a, 0, sizeof *a);
    a->map_bytes = a->bytes = (size_t)h->map_bytes;
    a->kind = ALLOC_IPC;
    a->opens = 1;
    a->owner = h->owner;
    a->device = fake_current_device();
    snprintf(a->name, sizeof a->name, "%s", h->name);
    status = arena_take(a->map_bytes, "fake cudaIpcOpenMemHandle", &a->addr);
    if (status != CHORUS_SUCCESS) goto err_close;
    a->backing = mmap(NULL, a->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->backing == MAP_FAILED) {
        status = fake_error(CHORUS_ERR_SYSTEM, "fake cudaIpcOpenMemHandle: mmap %s: %s",
                            h->name, strerror(errno));
        goto err_close;
    }
    close(fd);
    status = insert(a);
    if (status != CHORUS_SUCCESS) munmap(a->backing, a->map_bytes);
    return status;
err_close:
    close(fd);
    return status;
}

chorus_status_t fake_mem_ipc_open(const void *handle, void **p)
{
    ipc_handle_t h;
    alloc_t a;
    chorus_status_t status = CHORUS_SUCCESS;
    if (!handle || !p)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaIpcOpenMemHandle: NULL");
    memcpy(&h, handle, sizeof h);
    h.name[sizeof h.name - 1] = '\0';
    if (h.magic != FAKE_IPC_MAGIC || strncmp(h.name, "/chorus-fakegpu-", 16) != 0)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaIpcOpenMemHandle: not a handle from cudaIpcGetMemHandle");
    if (h.owner == (int32_t)getpid())
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaIpcOpenMemHandle: the handle is this process's own memory "
                          "(cudaErrorDeviceUninitialized: a process cannot open its own IPC "
                          "handle; use the pointer)");
    if (kill((pid_t)h.owner, 0) != 0 && errno == ESRCH)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaIpcOpenMemHandle: the owner of %s, process %d, is gone",
                          h.name, (int)h.owner);
    pthread_rwlock_wrlock(&mem_lock);
    /* Opening the same handle again returns the same pointer, counted (as CUDA 11+). */
    for (size_t i = 0; i < nallocs; i++) {
        if (allocs[i].kind == ALLOC_IPC && strcmp(allocs[i].name, h.name) == 0) {
            allocs[i].opens++;
            *p = allocs[i].addr;
            goto out;
        }
    }
    status = arena_reserve();
    if (status == CHORUS_SUCCESS) status = ipc_map(&h, &a);
    if (status == CHORUS_SUCCESS) *p = a.addr;
out:
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

chorus_status_t fake_mem_ipc_close(void *p)
{
    alloc_t *a;
    chorus_status_t status = CHORUS_SUCCESS;
    if (!p) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaIpcCloseMemHandle: NULL");
    pthread_rwlock_wrlock(&mem_lock);
    a = find(p);
    if (!a || a->kind != ALLOC_IPC || a->addr != (char *)p) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaIpcCloseMemHandle: %p is not a pointer returned by "
                            "cudaIpcOpenMemHandle", p);
    } else if (--a->opens == 0) {
        munmap(a->backing, a->map_bytes);
        erase(a);
    }
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

/* The dma-buf stand-in: a new descriptor of the allocation's shm segment, so that a test
 * can map it and see the device bytes (a real dma-buf cannot be mapped like that, but an
 * RDMA NIC reads the same bytes through it). The segment starts at the allocation's base,
 * so p's offset in it is p - base. As CUDA, only this process's cudaMalloc memory
 * exports, and the range must lie inside one allocation. */
chorus_status_t fake_mem_dmabuf_export(const void *p, size_t bytes, int *fd_p,
                                       uint64_t *offset_p)
{
    const char *c = p;
    chorus_status_t status = CHORUS_SUCCESS;
    alloc_t *a;
    int fd = -1;

    if (!p || !fd_p || !offset_p || bytes == 0)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cuMemGetHandleForAddressRange: NULL argument or 0 bytes");
    pthread_rwlock_rdlock(&mem_lock);
    a = find(p);
    if (!a || (a->kind != ALLOC_OWN && a->kind != ALLOC_IPC)) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cuMemGetHandleForAddressRange: %p is not device memory", p);
    } else if (a->kind != ALLOC_OWN) {
        status = fake_error(CHORUS_ERR_UNSUPPORTED,
                            "fake cuMemGetHandleForAddressRange: %p is a peer's memory opened "
                            "with cudaIpcOpenMemHandle: CUDA_ERROR_NOT_SUPPORTED", p);
    } else if (bytes > a->bytes || (size_t)(c - a->addr) > a->bytes - bytes) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cuMemGetHandleForAddressRange: [%p, +%zu) runs past the end "
                            "of the allocation at %p of %zu bytes", p, bytes, (void *)a->addr,
                            a->bytes);
    } else {
        fd = shm_open(a->name, O_RDWR, 0);
        if (fd < 0)
            status = fake_error(CHORUS_ERR_SYSTEM, "fake cuMemGetHandleForAddressRange: "
                                "shm_open %s: %s", a->name, strerror(errno));
        else
            *offset_p = (uint64_t)(c - a->addr);
    }
    pthread_rwlock_unlock(&mem_lock);
    if (status == CHORUS_SUCCESS) *fd_p = fd;
    return status;
}

/* Maps the memfd fd (map_bytes) at fresh device addresses as ALLOC_VMM; mem_lock held for
 * writing. */
static chorus_status_t vmm_map(int fd, size_t map_bytes, const char *what, void **p)
{
    alloc_t a;
    chorus_status_t status = arena_reserve();

    if (status != CHORUS_SUCCESS) return status;
    memset(&a, 0, sizeof a);
    a.bytes = a.map_bytes = map_bytes;
    a.kind = ALLOC_VMM;
    a.device = fake_current_device();
    a.owner = getpid();
    snprintf(a.name, sizeof a.name, "vmm");
    status = arena_take(map_bytes, what, &a.addr);
    if (status != CHORUS_SUCCESS) return status;
    a.backing = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a.backing == MAP_FAILED)
        return fake_error(CHORUS_ERR_SYSTEM, "%s: mmap of %zu bytes: %s", what, map_bytes,
                          strerror(errno));
    status = insert(&a);
    if (status != CHORUS_SUCCESS) {
        munmap(a.backing, map_bytes);
        return status;
    }
    *p = a.addr;
    return CHORUS_SUCCESS;
}

chorus_status_t fake_mem_vmm_alloc(size_t bytes, void **p, size_t *granted_p, int *fd_p)
{
    size_t granted;
    chorus_status_t status;
    int fd, err;

    if (!p || !granted_p || bytes == 0 || bytes > ((size_t)1 << 40))
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cuMemCreate: NULL argument or %zu bytes", bytes);
    if (fake_ndevices() == 0)
        return fake_error(CHORUS_ERR_UNSUPPORTED, "fake cuMemCreate: no CUDA-capable device");
    granted = (bytes + FAKE_VMM_GRANULARITY - 1) / FAKE_VMM_GRANULARITY * FAKE_VMM_GRANULARITY;
    fd = (int)syscall(SYS_memfd_create, "chorus-fakegpu-vmm", 0);
    if (fd < 0)
        return fake_error(CHORUS_ERR_SYSTEM, "fake cuMemCreate: memfd_create: %s",
                          strerror(errno));
    err = posix_fallocate(fd, 0, (off_t)granted);
    if (err != 0) {
        close(fd);
        return fake_error(err == ENOSPC ? CHORUS_ERR_NO_MEMORY : CHORUS_ERR_SYSTEM,
                          "fake cuMemCreate: %zu bytes: %s", granted, strerror(err));
    }
    pthread_rwlock_wrlock(&mem_lock);
    status = vmm_map(fd, granted, "fake cuMemMap", p);
    if (status == CHORUS_SUCCESS) {
        alloc_t *a = find(*p);
        memset(a->backing, 0xff, granted); /* as cudaMalloc: not cleared (segment_create) */
    }
    pthread_rwlock_unlock(&mem_lock);
    if (status != CHORUS_SUCCESS || fd_p == NULL) {
        close(fd); /* the mapping keeps the memory */
    } else {
        *fd_p = fd;
    }
    if (status == CHORUS_SUCCESS) *granted_p = granted;
    return status;
}

chorus_status_t fake_mem_vmm_import(int fd, size_t bytes, void **p)
{
    struct stat st;
    chorus_status_t status;

    if (!p || fd < 0 || bytes == 0)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cuMemImportFromShareableHandle: "
                          "bad descriptor %d or 0 bytes", fd);
    if (bytes % FAKE_VMM_GRANULARITY != 0)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cuMemMap: %zu bytes is not a "
                          "multiple of the granularity %zu", bytes, FAKE_VMM_GRANULARITY);
    /* What CUDA checks of a shareable handle, the fake checks of its memfd: that it is one
     * and of the size the peer says. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != bytes)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cuMemImportFromShareableHandle: "
                          "descriptor %d is not shareable device memory of %zu bytes", fd,
                          bytes);
    pthread_rwlock_wrlock(&mem_lock);
    status = vmm_map(fd, bytes, "fake cuMemMap", p);
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

chorus_status_t fake_mem_vmm_free(void *p)
{
    chorus_status_t status = CHORUS_SUCCESS;
    alloc_t *a;

    pthread_rwlock_wrlock(&mem_lock);
    a = p ? find(p) : NULL;
    if (!a || a->kind != ALLOC_VMM || a->addr != (char *)p) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cuMemUnmap: %p is not a pointer "
                            "from vmm_alloc or vmm_import", p);
    } else {
        munmap(a->backing, a->map_bytes);
        erase(a); /* the device addresses are never handed out again */
    }
    pthread_rwlock_unlock(&mem_lock);
    return status;
}

void fake_mem_atexit(void)
{
    /* No lock and no unmapping: a worker may still be copying. Only the names go, so a
     * process that exits without freeing leaves nothing in /dev/shm. */
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].kind == ALLOC_OWN) shm_unlink(allocs[i].name);
}
