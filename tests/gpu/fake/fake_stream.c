/*
 * Fake streams and events (see fake.h). A stream is a worker thread running a FIFO of
 * tasks in order, so work is really asynchronous: a caller that reads a result without
 * waiting on the stream sees stale bytes, as on a GPU. Workers sleep on a condition
 * variable when idle (the test machines have few cores).
 *
 * An event's record is a "mark" task; the event points at the mark of its latest record,
 * and stream_wait_event holds the mark current at the time of the call, so a later
 * re-record never changes what an earlier wait waits for (cudaStreamWaitEvent). Marks are
 * reference counted: an event may be destroyed while its record is still queued.
 *
 * A task that fails (a bad pointer found at execution, a wait on a failed stream) makes
 * the error sticky on its stream: later data tasks there are skipped, marks still complete
 * (carrying the error, so waiters on other streams fail rather than hang), and every
 * stream_synchronize and event_query reports it, like CUDA's asynchronous errors.
 */
#include "fake.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STREAM_MAGIC 0x73747265616d2121ull
#define EVENT_MAGIC 0x6576656e74212121ull

typedef struct fake_stream {
    uint64_t magic;
    struct fake_stream *next_live;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the worker waits for tasks */
    pthread_cond_t idle_cv; /* synchronize waits for completions */
    fake_task_t *head, *tail;
    uint64_t enqueued, completed;
    int destroyed;
    chorus_status_t error; /* sticky */
    char msg[FAKE_MSG_BYTES];
} fake_stream_t;

typedef struct fake_mark {
    int refs; /* under marks_mu, like everything below */
    int done;
    chorus_status_t status;
    char msg[FAKE_MSG_BYTES];
    struct timespec ts;
} fake_mark_t;

typedef struct fake_event {
    uint64_t magic;
    struct fake_event *next_live;
    fake_mark_t *latest; /* NULL: never recorded */
} fake_event_t;

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_stream_t *live_streams;
static fake_event_t *live_events;
static pthread_mutex_t marks_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t marks_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static fake_stream_t *default_stream;
static chorus_status_t default_status;

static void mark_release(fake_mark_t *m)
{
    int last;
    if (!m) return;
    pthread_mutex_lock(&marks_mu);
    last = --m->refs == 0;
    pthread_mutex_unlock(&marks_mu);
    if (last) free(m);
}

fake_task_t *fake_task_new(fake_task_kind_t kind)
{
    fake_task_t *t = calloc(1, sizeof *t);
    if (!t) {
        fake_error(CHORUS_ERR_NO_MEMORY, "fake GPU: out of memory for a stream task");
        return NULL;
    }
    t->kind = kind;
    return t;
}

static void task_free(fake_task_t *t)
{
    mark_release(t->mark);
    free(t);
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Waits until *flag >= value: spin briefly (the proxy usually raises it soon), then yield,
 * then sleep 50 us between checks so an idle wait costs no core. */
static chorus_status_t wait_flag(volatile uint64_t *flag, uint64_t value)
{
    /* An acquire load, as the device's read would be ordered: what the host wrote before
     * raising the flag is visible to the tasks after the wait. */
    _Atomic uint64_t *f = (_Atomic uint64_t *)(uintptr_t)flag;
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(f, memory_order_acquire) >= value) return CHORUS_SUCCESS;
        if (fake_shutting_down)
            return fake_error(CHORUS_ERR_ABORTED, "fake cuStreamWaitValue64: process exiting");
        if (i >= 2000) sleep_us(50);
        else if (i >= 1000) sched_yield();
    }
}

static chorus_status_t wait_mark(fake_mark_t *m)
{
    chorus_status_t status = CHORUS_SUCCESS;
    pthread_mutex_lock(&marks_mu);
    while (!m->done && !fake_shutting_down) pthread_cond_wait(&marks_cv, &marks_mu);
    if (!m->done)
        status = fake_error(CHORUS_ERR_ABORTED, "fake cudaStreamWaitEvent: process exiting");
    else if (m->status != CHORUS_SUCCESS)
        status = fake_error(m->status, "waited on an event recorded on a failed stream: %s",
                            m->msg);
    pthread_mutex_unlock(&marks_mu);
    return status;
}

static void mark_complete(fake_stream_t *s, fake_mark_t *m)
{
    struct timespec ts;
    chorus_status_t status;
    char msg[FAKE_MSG_BYTES];
    clock_gettime(CLOCK_MONOTONIC, &ts);
    pthread_mutex_lock(&s->mu);
    status = s->error;
    memcpy(msg, s->msg, sizeof msg);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&marks_mu);
    m->ts = ts;
    m->status = status;
    memcpy(m->msg, msg, sizeof msg);
    m->done = 1;
    pthread_cond_broadcast(&marks_cv);
    pthread_mutex_unlock(&marks_mu);
}

/* Runs t; failed says the stream already has a sticky error (then only marks run). */
static chorus_status_t task_run(fake_stream_t *s, const fake_task_t *t, int failed)
{
    unsigned delay = fake_delay_us();
    if (delay) sleep_us(delay);
    switch (t->kind) {
    case FAKE_TASK_RECORD:
        mark_complete(s, t->mark);
        return CHORUS_SUCCESS;
    case FAKE_TASK_WAIT_EVENT:
        return failed ? CHORUS_SUCCESS : wait_mark(t->mark);
    case FAKE_TASK_WAIT_FLAG:
        return failed ? CHORUS_SUCCESS : wait_flag(t->flag, t->value);
    default:
        return failed ? CHORUS_SUCCESS : fake_task_run_data(t);
    }
}

static void *worker(void *arg)
{
    fake_stream_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        fake_task_t *t;
        chorus_status_t status;
        int failed;
        while (!s->head && !s->destroyed) pthread_cond_wait(&s->work_cv, &s->mu);
        if (!s->head) break;
        t = s->head;
        s->head = t->next;
        if (!s->head) s->tail = NULL;
        failed = s->error != CHORUS_SUCCESS;
        pthread_mutex_unlock(&s->mu);
        status = task_run(s, t, failed);
        pthread_mutex_lock(&s->mu);
        if (status != CHORUS_SUCCESS && s->error == CHORUS_SUCCESS) {
            s->error = status;
            snprintf(s->msg, sizeof s->msg, "%s", fake_last_error());
        }
        s->completed++;
        pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mu);
        task_free(t);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    /* Destroyed and drained: cudaStreamDestroy lets queued work finish, then frees. */
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
}

/* A stream with its detached worker. Workers block every asynchronous signal, so signals
 * meant for the application's threads never land on them. The synchronous faults stay
 * open: a blocked SIGSEGV raised by a worker's own access kills the process without a word
 * (the kernel resets it to the default action), while an open one reaches the sanitizer's
 * or the debugger's handler, which names the task that faulted. */
static chorus_status_t stream_new(fake_stream_t **s_p)
{
    pthread_attr_t attr;
    pthread_t tid;
    sigset_t all, old;
    int err;
    fake_stream_t *s = calloc(1, sizeof *s);
    if (!s) return fake_error(CHORUS_ERR_NO_MEMORY, "fake cudaStreamCreate: out of memory");
    s->magic = STREAM_MAGIC;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&tid, &attr, worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        pthread_cond_destroy(&s->work_cv);
        pthread_cond_destroy(&s->idle_cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return fake_error(CHORUS_ERR_SYSTEM, "fake cudaStreamCreate: pthread_create: %s",
                          strerror(err));
    }
    *s_p = s;
    return CHORUS_SUCCESS;
}

static void default_init(void)
{
    default_status = stream_new(&default_stream);
}

/* The live stream behind a handle (NULL: the legacy default stream, started on first use). */
static chorus_status_t stream_get(void *handle, const char *what, fake_stream_t **s_p)
{
    fake_stream_t *s;
    if (!handle) {
        pthread_once(&default_once, default_init);
        if (default_status != CHORUS_SUCCESS)
            return fake_error(default_status, "%s: the default stream could not start", what);
        *s_p = default_stream;
        return CHORUS_SUCCESS;
    }
    pthread_mutex_lock(&live_mu);
    for (s = live_streams; s && s != handle; s = s->next_live) {
    }
    pthread_mutex_unlock(&live_mu);
    if (!s)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "%s: %p is not a live stream (destroyed, or not from "
                          "cudaStreamCreate): cudaErrorInvalidResourceHandle", what, handle);
    *s_p = s;
    return CHORUS_SUCCESS;
}

static chorus_status_t event_get(void *handle, const char *what, fake_event_t **e_p)
{
    fake_event_t *e;
    pthread_mutex_lock(&live_mu);
    for (e = live_events; e && e != handle; e = e->next_live) {
    }
    pthread_mutex_unlock(&live_mu);
    if (!e)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "%s: %p is not a live event (destroyed, or not from "
                          "cudaEventCreate): cudaErrorInvalidResourceHandle", what, handle);
    *e_p = e;
    return CHORUS_SUCCESS;
}

chorus_status_t fake_stream_enqueue(void *stream, fake_task_t *t, const char *what)
{
    fake_stream_t *s;
    chorus_status_t status = stream_get(stream, what, &s);
    if (status != CHORUS_SUCCESS) {
        task_free(t);
        return status;
    }
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = t;
    else s->head = t;
    s->tail = t;
    s->enqueued++;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    return CHORUS_SUCCESS;
}

chorus_status_t fake_stream_create(void **stream_p)
{
    fake_stream_t *s;
    chorus_status_t status;
    if (!stream_p)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaStreamCreate: NULL pointer");
    if (fake_ndevices() == 0)
        return fake_error(CHORUS_ERR_UNSUPPORTED, "fake cudaStreamCreate: no CUDA device");
    status = stream_new(&s);
    if (status != CHORUS_SUCCESS) return status;
    pthread_mutex_lock(&live_mu);
    s->next_live = live_streams;
    live_streams = s;
    pthread_mutex_unlock(&live_mu);
    *stream_p = s;
    return CHORUS_SUCCESS;
}

chorus_status_t fake_stream_destroy(void *stream)
{
    fake_stream_t **pp, *s = NULL;
    if (!stream)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaStreamDestroy: the default stream cannot be destroyed");
    pthread_mutex_lock(&live_mu);
    for (pp = &live_streams; *pp; pp = &(*pp)->next_live) {
        if (*pp == stream) {
            s = *pp;
            *pp = s->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&live_mu);
    if (!s)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaStreamDestroy: %p is not a live stream (destroyed twice?)",
                          stream);
    pthread_mutex_lock(&s->mu);
    s->destroyed = 1;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    return CHORUS_SUCCESS;
}

chorus_status_t fake_stream_synchronize(void *stream)
{
    fake_stream_t *s;
    uint64_t target;
    char msg[FAKE_MSG_BYTES];
    chorus_status_t status = stream_get(stream, "fake cudaStreamSynchronize", &s);
    if (status != CHORUS_SUCCESS) return status;
    pthread_mutex_lock(&s->mu);
    target = s->enqueued;
    while (s->completed < target) pthread_cond_wait(&s->idle_cv, &s->mu);
    status = s->error;
    memcpy(msg, s->msg, sizeof msg);
    pthread_mutex_unlock(&s->mu);
    if (status != CHORUS_SUCCESS) return fake_error(status, "stream %p: %s", stream, msg);
    return CHORUS_SUCCESS;
}

chorus_status_t fake_event_create(void **event_p)
{
    fake_event_t *e;
    if (!event_p)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaEventCreate: NULL pointer");
    e = calloc(1, sizeof *e);
    if (!e) return fake_error(CHORUS_ERR_NO_MEMORY, "fake cudaEventCreate: out of memory");
    e->magic = EVENT_MAGIC;
    pthread_mutex_lock(&live_mu);
    e->next_live = live_events;
    live_events = e;
    pthread_mutex_unlock(&live_mu);
    *event_p = e;
    return CHORUS_SUCCESS;
}

chorus_status_t fake_event_destroy(void *event)
{
    fake_event_t **pp, *e = NULL;
    pthread_mutex_lock(&live_mu);
    for (pp = &live_events; *pp; pp = &(*pp)->next_live) {
        if (*pp == event) {
            e = *pp;
            *pp = e->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&live_mu);
    if (!e)
        return fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "fake cudaEventDestroy: %p is not a live event (destroyed twice?)",
                          event);
    /* A record still queued keeps its mark alive through the task's reference. */
    mark_release(e->latest);
    e->magic = 0;
    free(e);
    return CHORUS_SUCCESS;
}

chorus_status_t fake_event_record(void *event, void *stream)
{
    fake_event_t *e;
    fake_mark_t *m, *old;
    fake_task_t *t;
    chorus_status_t status = event_get(event, "fake cudaEventRecord", &e);
    if (status != CHORUS_SUCCESS) return status;
    m = calloc(1, sizeof *m);
    t = fake_task_new(FAKE_TASK_RECORD);
    if (!m || !t) {
        free(m);
        free(t);
        return fake_error(CHORUS_ERR_NO_MEMORY, "fake cudaEventRecord: out of memory");
    }
    m->refs = 2; /* the event's and the task's */
    t->mark = m;
    status = fake_stream_enqueue(stream, t, "fake cudaEventRecord");
    if (status != CHORUS_SUCCESS) {
        mark_release(m);
        return status;
    }
    pthread_mutex_lock(&marks_mu);
    old = e->latest;
    e->latest = m;
    pthread_mutex_unlock(&marks_mu);
    mark_release(old);
    return CHORUS_SUCCESS;
}

chorus_status_t fake_event_query(void *event, int *done_p)
{
    fake_event_t *e;
    int done;
    chorus_status_t mstatus = CHORUS_SUCCESS;
    char msg[FAKE_MSG_BYTES];
    chorus_status_t status = event_get(event, "fake cudaEventQuery", &e);
    if (status != CHORUS_SUCCESS) return status;
    if (!done_p) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaEventQuery: NULL");
    pthread_mutex_lock(&marks_mu);
    done = !e->latest || e->latest->done; /* never recorded: done, as in CUDA */
    if (e->latest && e->latest->done && e->latest->status != CHORUS_SUCCESS) {
        mstatus = e->latest->status;
        memcpy(msg, e->latest->msg, sizeof msg);
    }
    pthread_mutex_unlock(&marks_mu);
    if (mstatus != CHORUS_SUCCESS)
        return fake_error(mstatus, "event %p recorded on a failed stream: %s", event, msg);
    *done_p = done;
    return CHORUS_SUCCESS;
}

chorus_status_t fake_event_elapsed_ms(void *start, void *end, float *ms_p)
{
    fake_event_t *a, *b;
    chorus_status_t status = event_get(start, "fake cudaEventElapsedTime: start", &a);
    double ms;
    if (status != CHORUS_SUCCESS) return status;
    status = event_get(end, "fake cudaEventElapsedTime: end", &b);
    if (status != CHORUS_SUCCESS) return status;
    if (!ms_p) return fake_error(CHORUS_ERR_INVALID_ARGUMENT, "fake cudaEventElapsedTime: NULL");
    pthread_mutex_lock(&marks_mu);
    if (!a->latest || !b->latest) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaEventElapsedTime: event %p was never recorded "
                            "(cudaErrorInvalidResourceHandle)", !a->latest ? start : end);
    } else if (!a->latest->done || !b->latest->done) {
        status = fake_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "fake cudaEventElapsedTime: event %p has not completed "
                            "(cudaErrorNotReady)", !a->latest->done ? start : end);
    } else {
        ms = (double)(b->latest->ts.tv_sec - a->latest->ts.tv_sec) * 1e3 +
             (double)(b->latest->ts.tv_nsec - a->latest->ts.tv_nsec) / 1e6;
        *ms_p = (float)ms;
    }
    pthread_mutex_unlock(&marks_mu);
    return status;
}

chorus_status_t fake_stream_wait_event(void *stream, void *event)
{
    fake_event_t *e;
    fake_mark_t *m;
    fake_task_t *t;
    chorus_status_t status = event_get(event, "fake cudaStreamWaitEvent", &e);
    if (status != CHORUS_SUCCESS) return status;
    pthread_mutex_lock(&marks_mu);
    m = e->latest;
    if (m) m->refs++;
    pthread_mutex_unlock(&marks_mu);
    if (!m) { /* never recorded: nothing to wait for (CUDA) */
        fake_stream_t *s;
        return stream_get(stream, "fake cudaStreamWaitEvent", &s);
    }
    t = fake_task_new(FAKE_TASK_WAIT_EVENT);
    if (!t) {
        mark_release(m);
        return CHORUS_ERR_NO_MEMORY;
    }
    t->mark = m;
    return fake_stream_enqueue(stream, t, "fake cudaStreamWaitEvent");
}

void fake_stream_shutdown(void)
{
    pthread_mutex_lock(&marks_mu);
    pthread_cond_broadcast(&marks_cv);
    pthread_mutex_unlock(&marks_mu);
}
