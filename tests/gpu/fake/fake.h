/*
 * The fake GPU plugin's internals (tests/gpu/fake): chorus_gpu_ops_t on host memory.
 *
 * fake_mem.c   device memory: an address range reserved PROT_NONE (so a host dereference of
 *              a device pointer faults, as on CUDA) whose allocations are backed by separate
 *              read-write mappings of shm segments; the table that translates one to the
 *              other; pinned host memory; CUDA IPC over the shm names.
 * fake_stream.c streams (one worker thread each, running a FIFO of tasks), events, sticky
 *              asynchronous errors.
 * fake_plugin.c the ops table: argument checks at enqueue time, then tasks.
 */
#ifndef CHORUS_FAKE_GPU_H
#define CHORUS_FAKE_GPU_H

#include "chorus.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FAKE_MAX_SRCS 16
#define FAKE_MSG_BYTES 320

/* Records the calling thread's last_error() message and returns status. */
chorus_status_t fake_error(chorus_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The calling thread's message (never NULL). */
const char *fake_last_error(void);
/* Copies a message (e.g. a stream's sticky error) into the thread's slot. */
chorus_status_t fake_error_set(chorus_status_t status, const char *msg);

/* Every entry point starts with this: it starts the plugin once and refuses calls in a
 * child forked after the parent used it (CUDA's cudaErrorInitializationError). */
chorus_status_t fake_enter(void);
int fake_ndevices(void);
int fake_current_device(void);
unsigned fake_delay_us(void);
/* Set by the library destructor: waits give up instead of holding the exit. */
extern atomic_int fake_shutting_down;

/* ---- fake_mem.c ---- */

typedef enum { FAKE_PTR_HOST, FAKE_PTR_PINNED, FAKE_PTR_DEVICE } fake_ptr_kind_t;

chorus_status_t fake_mem_malloc_device(void **p, size_t bytes);
chorus_status_t fake_mem_free_device(void *p);
chorus_status_t fake_mem_malloc_host(void **p, size_t bytes);
chorus_status_t fake_mem_free_host(void *p);
chorus_status_t fake_mem_pointer_kind(const void *p, int *is_device_p, int *device_p);
chorus_status_t fake_mem_ipc_get_handle(void *base, void *handle);
chorus_status_t fake_mem_ipc_open(const void *handle, void **p);
chorus_status_t fake_mem_ipc_close(void *p);
chorus_status_t fake_mem_vmm_alloc(size_t bytes, void **p, size_t *granted_p, int *fd_p);
chorus_status_t fake_mem_vmm_import(int fd, size_t bytes, void **p);
chorus_status_t fake_mem_vmm_free(void *p);

/* A descriptor of the shm segment behind the allocation holding [p, p + bytes) (this
 * process's own device memory only) and p's offset in it: the fake's dma-buf. */
chorus_status_t fake_mem_dmabuf_export(const void *p, size_t bytes, int *fd_p,
                                       uint64_t *offset_p);

/* Checks that [p, p + bytes) is wholly host memory, pinned memory or inside one live device
 * allocation, and says which. `what` names the call and the operand for the message
 * ("fake cudaMemcpyAsync: dst"). A device-range address outside every live allocation and a
 * range running past an allocation's end are CHORUS_ERR_INVALID_ARGUMENT. */
chorus_status_t fake_mem_check(const void *p, size_t bytes, const char *what,
                               fake_ptr_kind_t *kind_p);

/* Task execution brackets every access to device memory with lock/unlock (a shared lock:
 * free_device waits for copies in flight instead of unmapping under them), and translates
 * each operand with resolve, which checks again (the allocation may be gone by now). */
void fake_mem_lock(void);
void fake_mem_unlock(void);
chorus_status_t fake_mem_resolve(const void *p, size_t bytes, const char *what, void **host_p);

/* Unlinks the shm names of this process's live allocations (library destructor). */
void fake_mem_atexit(void);

/* ---- fake_stream.c ---- */

typedef enum {
    FAKE_TASK_COPY,
    FAKE_TASK_COPY2D,
    FAKE_TASK_REDUCE,
    FAKE_TASK_DIVIDE,
    FAKE_TASK_WAIT_EVENT,
    FAKE_TASK_WAIT_FLAG,
    FAKE_TASK_RECORD,
} fake_task_kind_t;

struct fake_mark;

typedef struct fake_task {
    struct fake_task *next;
    fake_task_kind_t kind;
    void *dst;
    const void *src[FAKE_MAX_SRCS];
    int nsrc;
    size_t bytes; /* copy: bytes; 2d: width; reduce/divide: count */
    size_t dpitch, spitch, height;
    chorus_dtype_t dtype;
    chorus_op_t op;
    uint64_t value; /* divide: divisor; wait_flag: the value awaited */
    volatile uint64_t *flag;
    struct fake_mark *mark; /* record / wait_event: one reference */
} fake_task_t;

/* A task allocated zeroed, or NULL with the thread's error set. */
fake_task_t *fake_task_new(fake_task_kind_t kind);
/* Queues t on stream (NULL: the default stream) and takes it, or frees it and fails when
 * the stream is not live. */
chorus_status_t fake_stream_enqueue(void *stream, fake_task_t *t, const char *what);

chorus_status_t fake_stream_create(void **stream_p);
chorus_status_t fake_stream_destroy(void *stream);
chorus_status_t fake_stream_synchronize(void *stream);
chorus_status_t fake_event_create(void **event_p);
chorus_status_t fake_event_destroy(void *event);
chorus_status_t fake_event_record(void *event, void *stream);
chorus_status_t fake_event_query(void *event, int *done_p);
chorus_status_t fake_event_elapsed_ms(void *start, void *end, float *ms_p);
chorus_status_t fake_stream_wait_event(void *stream, void *event);

/* Wakes waits in workers so they give up (library destructor, after fake_shutting_down). */
void fake_stream_shutdown(void);

/* Runs one copy / reduce / divide task on a worker (fake_plugin.c); the thread's error
 * message says what failed. */
chorus_status_t fake_task_run_data(const fake_task_t *t);

#endif
