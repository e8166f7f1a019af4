/*
 * Unit tests of the fake GPU plugin (tests/gpu/fake, libchorus-cuda-fake.so) inside one
 * process: that it behaves like CUDA where Chorus could get CUDA wrong (device memory the
 * host cannot touch, asynchronous streams, events, kernels that match the CPU's, threads)
 * and refuses misuse loudly; and the stream cases again in a fresh process under
 * CHORUS_FAKE_GPU_DELAY_US. What needs other processes (fork, IPC, the environment, exit)
 * is in test_gpu_fake_proc.c; how the plugin is found is in gpu_fake_util.h.
 */
#include "unit/gpu_fake_util.h"

#include "kernels.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- The table ---- */

static void test_table(void **state)
{
    void *h = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    chorus_gpu_plugin_fn fn = (chorus_gpu_plugin_fn)dlsym(h, CHORUS_GPU_PLUGIN_SYMBOL);
    int n = -1, dev = -1;
    const char *desc = NULL;
    (void)state;
    assert_non_null(fn);
    assert_null(fn(CHORUS_GPU_ABI_VERSION + 1));
    assert_ptr_equal(fn(CHORUS_GPU_ABI_VERSION), G);
    assert_int_equal(G->abi_version, CHORUS_GPU_ABI_VERSION);
    assert_string_equal(G->name, "fake");
    OK(G->init(&n, &desc));
    assert_int_equal(n, 1);
    assert_string_equal(desc, "fake GPU (host memory, for tests): 1 device(s)");
    OK(G->get_device(&dev));
    assert_int_equal(dev, 0);
    OK(G->set_device(0));
    FAILS(G->set_device(1), CHORUS_ERR_INVALID_ARGUMENT, "cudaErrorInvalidDevice");
    assert_non_null(G->last_error());
    dlclose(h);
}

/* ---- Memory ---- */

static void test_host_deref_faults(void **state)
{
    void *d;
    int st, kind = -1, dev = -1;
    pid_t pid;
    (void)state;
    OK(G->malloc_device(&d, 4096));
    OK(G->pointer_kind(d, &kind, &dev));
    assert_int_equal(kind, 1);
    assert_int_equal(dev, 0);
    for (int write = 0; write < 2; write++) {
        pid = fork();
        if (pid == 0) {
            signal(SIGSEGV, SIG_DFL); /* cmocka's handler would catch it */
            if (write) *(volatile char *)d = 1;
            else st = *(volatile char *)d;
            _exit(0);
        }
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGSEGV);
    }
    OK(G->free_device(d));
}

static void test_roundtrip(void **state)
{
    enum { N = 100000 };
    unsigned char *in = malloc(N), *out = malloc(N), *pin;
    void *a, *b;
    int kind = -1, dev = -1;
    (void)state;
    fill(in, N, 7);
    memset(out, 0, N);
    OK(G->malloc_device(&a, N));
    OK(G->malloc_device(&b, N));
    OK(G->malloc_host((void **)&pin, N));
    assert_int_equal((uintptr_t)pin % 4096, 0);
    OK(G->pointer_kind(pin, &kind, &dev));
    assert_int_equal(kind, 0);
    OK(G->pointer_kind(in, &kind, &dev));
    assert_int_equal(kind, 0);
    OK(G->pointer_kind(NULL, &kind, &dev));
    assert_int_equal(kind, 0);
    OK(G->pointer_kind((char *)a + N - 1, &kind, &dev));
    assert_int_equal(kind, 1);
    /* pageable -> device -> device -> pinned -> pageable, on the default stream */
    OK(G->memcpy_async(a, in, N, NULL));
    OK(G->memcpy_async(b, a, N, NULL));
    OK(G->memcpy_async(pin, b, N, NULL));
    OK(G->stream_synchronize(NULL));
    assert_memory_equal(pin, in, N);
    OK(G->memcpy_async(out, b, N, NULL));
    OK(G->memcpy_async(out, a, 0, NULL)); /* zero bytes: nothing */
    OK(G->stream_synchronize(NULL));
    assert_memory_equal(out, in, N);
    OK(G->free_device(a));
    OK(G->free_device(b));
    OK(G->free_host(pin));
    FAILS(G->pointer_kind(a, &kind, &dev), CHORUS_ERR_INVALID_ARGUMENT, "no live allocation");
    free(in);
    free(out);
}

static void test_bad_memory_use(void **state)
{
    char host[4096];
    void *d, *pin, *zero = (void *)1;
    (void)state;
    OK(G->malloc_device(&d, 1024));
    FAILS(G->memcpy_async(d, host, 4096, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "4096 bytes at");
    FAILS(G->memcpy_async(d, host, 4096, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "run past the end of a 1024-byte allocation");
    FAILS(G->memcpy_async(host, (char *)d + 1000, 25, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "run past the end");
    OK(G->memcpy_async(host, (char *)d + 1000, 24, NULL));
    /* the guard page after the allocation is in no allocation */
    FAILS(G->memcpy_async(host, (char *)d + 4096, 8, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "in no live allocation");
    FAILS(G->memcpy_async((char *)d + 8, d, 64, NULL), CHORUS_ERR_INVALID_ARGUMENT, "overlap");
    FAILS(G->memcpy_async(NULL, d, 64, NULL), CHORUS_ERR_INVALID_ARGUMENT, "NULL");
    FAILS(G->free_device((char *)d + 8), CHORUS_ERR_INVALID_ARGUMENT, "not its base");
    FAILS(G->free_device(host), CHORUS_ERR_INVALID_ARGUMENT, "not device memory");
    OK(G->stream_synchronize(NULL));
    OK(G->free_device(d));
    FAILS(G->free_device(d), CHORUS_ERR_INVALID_ARGUMENT, "freed already");
    FAILS(G->memcpy_async(host, d, 8, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "in no live allocation");
    OK(G->malloc_device(&zero, 0)); /* cudaMalloc(0) */
    assert_null(zero);
    OK(G->free_device(NULL));
    OK(G->malloc_host(&pin, 100));
    FAILS(G->free_host((char *)pin + 1), CHORUS_ERR_INVALID_ARGUMENT, "cudaMallocHost");
    FAILS(G->free_host(host), CHORUS_ERR_INVALID_ARGUMENT, "cudaMallocHost");
    OK(G->free_host(pin));
    OK(G->stream_synchronize(NULL));
}

static void test_memcpy2d(void **state)
{
    enum { W = 10, H = 7, SP = 16, DP = 32, OP = 12 };
    unsigned char src[SP * H], out[OP * H], want[OP * H];
    void *d;
    (void)state;
    fill(src, sizeof src, 3);
    memset(out, 0xee, sizeof out);
    memcpy(want, out, sizeof want);
    for (int r = 0; r < H; r++) memcpy(want + r * OP, src + r * SP, W);
    OK(G->malloc_device(&d, DP * (H - 1) + W)); /* exactly the span */
    OK(G->memcpy2d_async(d, DP, src, SP, W, H, NULL));
    OK(G->memcpy2d_async(out, OP, d, DP, W, H, NULL));
    OK(G->stream_synchronize(NULL));
    assert_memory_equal(out, want, sizeof out);
    FAILS(G->memcpy2d_async(d, DP, src, SP, W, H + 1, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "run past the end");
    FAILS(G->memcpy2d_async(d, 8, src, SP, W, 2, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "cudaErrorInvalidPitchValue");
    OK(G->free_device(d));
}

/* ---- Streams and events ---- */

/* A stream held by a flag runs nothing: the copies queued behind it leave stale bytes
 * until the host raises the flag to the value (and not when it raises it below). */
static void test_wait_flag(void **state)
{
    enum { N = 4096 };
    unsigned char in[N], out[N];
    void *s, *d, *ev;
    volatile uint64_t *flag;
    int done = -1;
    (void)state;
    fill(in, N, 1);
    memset(out, 0, N);
    OK(G->stream_create(&s));
    OK(G->event_create(&ev));
    OK(G->malloc_device(&d, N));
    OK(G->malloc_host((void **)&flag, 64));
    raise_flag(flag, 0);
    OK(G->stream_wait_flag(s, flag, 5));
    OK(G->memcpy_async(d, in, N, s));
    OK(G->memcpy_async(out, d, N, s));
    OK(G->event_record(ev, s));
    sleep_ms(20);
    OK(G->event_query(ev, &done));
    assert_int_equal(done, 0);
    assert_int_equal(out[1], 0);
    raise_flag(flag, 4);
    sleep_ms(20);
    OK(G->event_query(ev, &done));
    assert_int_equal(done, 0);
    assert_int_equal(out[1], 0);
    raise_flag(flag, 5);
    OK(G->stream_synchronize(s));
    OK(G->event_query(ev, &done));
    assert_int_equal(done, 1);
    assert_memory_equal(out, in, N);
    {
        uint64_t on_stack = 9;
        FAILS(G->stream_wait_flag(s, &on_stack, 1), CHORUS_ERR_INVALID_ARGUMENT, "malloc_host");
        FAILS(G->stream_wait_flag(s, (volatile uint64_t *)((char *)flag + 4), 1),
              CHORUS_ERR_INVALID_ARGUMENT, "aligned");
    }
    OK(G->free_device(d));
    OK(G->free_host((void *)flag));
    OK(G->event_destroy(ev));
    OK(G->stream_destroy(s));
    FAILS(G->stream_synchronize(s), CHORUS_ERR_INVALID_ARGUMENT, "not a live stream");
    FAILS(G->stream_destroy(NULL), CHORUS_ERR_INVALID_ARGUMENT, "default stream");
}

/* Same-stream order: a big copy, then a reduce reading what it wrote, then the copy back.
 * Run again under CHORUS_FAKE_GPU_DELAY_US, where any missing order shows. */
static void test_stream_order(void **state)
{
    enum { COUNT = 1 << 18 };
    int32_t *in = malloc(COUNT * 4), *out = malloc(COUNT * 4);
    void *s, *a, *b;
    const void *src[2];
    (void)state;
    for (int i = 0; i < COUNT; i++) in[i] = i * 3 - 7;
    OK(G->stream_create(&s));
    OK(G->malloc_device(&a, COUNT * 4));
    OK(G->malloc_device(&b, COUNT * 4));
    for (int rep = 0; rep < 3; rep++) {
        memset(out, 0, COUNT * 4);
        OK(G->memcpy_async(a, in, COUNT * 4, s));
        OK(G->memcpy_async(b, in, COUNT * 4, s));
        src[0] = a;
        src[1] = b;
        OK(G->reduce_async(a, src, 2, COUNT, CHORUS_INT32, CHORUS_SUM, s)); /* a = 2 in */
        OK(G->memcpy_async(out, a, COUNT * 4, s));
        OK(G->stream_synchronize(s));
        for (int i = 0; i < COUNT; i++)
            if (out[i] != 2 * in[i]) fail_msg("rep %d: out[%d] = %d, want %d", rep, i, out[i],
                                              2 * in[i]);
    }
    OK(G->free_device(a));
    OK(G->free_device(b));
    OK(G->stream_destroy(s));
    free(in);
    free(out);
}

/* Stream 2 waits for an event recorded on stream 1 (held by a flag); a later re-record of
 * the event elsewhere does not release that wait; never-recorded events count as done. */
static void test_events_two_streams(void **state)
{
    enum { N = 8192 };
    unsigned char in[N], out[N];
    void *s1, *s2, *s3, *d, *ev, *t0, *never;
    volatile uint64_t *flag;
    int done = -1;
    float ms = -1;
    (void)state;
    fill(in, N, 9);
    memset(out, 0, N);
    OK(G->stream_create(&s1));
    OK(G->stream_create(&s2));
    OK(G->stream_create(&s3));
    OK(G->event_create(&ev));
    OK(G->event_create(&t0));
    OK(G->event_create(&never));
    OK(G->malloc_device(&d, N));
    OK(G->malloc_host((void **)&flag, 8));
    raise_flag(flag, 0);
    OK(G->event_query(never, &done));
    assert_int_equal(done, 1);
    FAILS(G->event_elapsed_ms(never, never, &ms), CHORUS_ERR_INVALID_ARGUMENT,
          "never recorded");
    OK(G->stream_wait_event(s2, never)); /* a no-op */
    OK(G->event_record(t0, s1));
    OK(G->stream_wait_flag(s1, flag, 1));
    OK(G->memcpy_async(d, in, N, s1));
    OK(G->event_record(ev, s1));
    OK(G->stream_wait_event(s2, ev));
    OK(G->memcpy_async(out, d, N, s2));
    OK(G->event_record(ev, s3)); /* re-record: s2 still waits for the first record */
    OK(G->stream_synchronize(s3));
    OK(G->event_query(ev, &done));
    assert_int_equal(done, 1);
    sleep_ms(20);
    assert_int_equal(out[3], 0);
    raise_flag(flag, 1);
    OK(G->stream_synchronize(s2));
    assert_memory_equal(out, in, N);
    OK(G->event_record(ev, s1));
    OK(G->stream_synchronize(s1));
    OK(G->event_elapsed_ms(t0, ev, &ms));
    assert_true(ms >= 0.0f);
    OK(G->event_destroy(ev));
    FAILS(G->event_query(ev, &done), CHORUS_ERR_INVALID_ARGUMENT, "not a live event");
    OK(G->event_destroy(t0));
    OK(G->event_destroy(never));
    OK(G->free_device(d));
    OK(G->free_host((void *)flag));
    OK(G->stream_destroy(s1));
    OK(G->stream_destroy(s2));
    OK(G->stream_destroy(s3));
}

/* An error found when a task runs (its memory freed meanwhile) is sticky on its stream,
 * reaches events recorded after it and the streams that wait on them. */
static void test_async_error(void **state)
{
    char host[256];
    void *s, *s2, *d, *ev;
    volatile uint64_t *flag;
    int done;
    (void)state;
    OK(G->stream_create(&s));
    OK(G->stream_create(&s2));
    OK(G->event_create(&ev));
    OK(G->malloc_device(&d, 256));
    OK(G->malloc_host((void **)&flag, 8));
    raise_flag(flag, 0);
    OK(G->stream_wait_flag(s, flag, 1));
    OK(G->memcpy_async(d, host, 256, s));
    OK(G->event_record(ev, s));
    OK(G->stream_wait_event(s2, ev));
    OK(G->free_device(d)); /* the copy has not run yet */
    raise_flag(flag, 1);
    FAILS(G->stream_synchronize(s), CHORUS_ERR_INVALID_ARGUMENT, "no live allocation");
    FAILS(G->stream_synchronize(s), CHORUS_ERR_INVALID_ARGUMENT, "no live allocation");
    FAILS(G->event_query(ev, &done), CHORUS_ERR_INVALID_ARGUMENT, "failed stream");
    FAILS(G->stream_synchronize(s2), CHORUS_ERR_INVALID_ARGUMENT, "failed stream");
    OK(G->stream_synchronize(NULL)); /* other streams are unaffected */
    OK(G->event_destroy(ev));
    OK(G->free_host((void *)flag));
    OK(G->stream_destroy(s));
    OK(G->stream_destroy(s2));
}

/* ---- Kernels ---- */

static void check_reduce(chorus_dtype_t dt, chorus_op_t op, size_t count, int alias)
{
    enum { NSRC = 3 };
    size_t sz = chorus_dtype_size(dt), bytes = count * sz;
    unsigned char *h[NSRC], *want = malloc(bytes), *got = malloc(bytes);
    void *d[NSRC], *dst, *s;
    const void *hs[NSRC], *ds[NSRC];
    for (int i = 0; i < NSRC; i++) {
        h[i] = malloc(bytes);
        /* small values, so PROD and float sums stay meaningful */
        for (size_t j = 0; j < count; j++) {
            int v = (int)((j * 7 + (size_t)i * 13) % 9) - 3;
            switch (dt) {
            case CHORUS_INT8: ((int8_t *)h[i])[j] = (int8_t)v; break;
            case CHORUS_UINT8: ((uint8_t *)h[i])[j] = (uint8_t)(v + 3); break;
            case CHORUS_INT32: ((int32_t *)h[i])[j] = v * 100003; break;
            case CHORUS_INT64: ((int64_t *)h[i])[j] = (int64_t)v * ((int64_t)1 << 40); break;
            case CHORUS_FLOAT16: ((uint16_t *)h[i])[j] = chorus_float_to_half(v * 0.3f); break;
            case CHORUS_BFLOAT16: ((uint16_t *)h[i])[j] = chorus_float_to_bf16(v * 0.3f); break;
            case CHORUS_FLOAT32: ((float *)h[i])[j] = v * 0.1f; break;
            case CHORUS_FLOAT64: ((double *)h[i])[j] = v * 0.1; break;
            default: fail();
            }
        }
        hs[i] = h[i];
        OK(G->malloc_device(&d[i], bytes));
        ds[i] = d[i];
    }
    assert_int_equal(chorus_kernel_reduce_multi(want, hs, NSRC, count, dt, op), CHORUS_SUCCESS);
    OK(G->stream_create(&s));
    OK(G->malloc_device(&dst, bytes));
    for (int i = 0; i < NSRC; i++) OK(G->memcpy_async(d[i], h[i], bytes, s));
    OK(G->reduce_async(alias ? d[0] : dst, ds, NSRC, count, dt, op, s));
    OK(G->memcpy_async(got, alias ? d[0] : dst, bytes, s));
    OK(G->stream_synchronize(s));
    if (memcmp(got, want, bytes) != 0)
        fail_msg("reduce %s %s count %zu alias %d differs from the CPU kernel",
                 chorus_dtype_name(dt), chorus_op_name(op), count, alias);
    if (op == CHORUS_SUM) { /* AVG = SUM then divide */
        assert_int_equal(chorus_kernel_divide(want, count, dt, NSRC), CHORUS_SUCCESS);
        OK(G->divide_async(alias ? d[0] : dst, count, dt, NSRC, s));
        OK(G->memcpy_async(got, alias ? d[0] : dst, bytes, s));
        OK(G->stream_synchronize(s));
        if (memcmp(got, want, bytes) != 0)
            fail_msg("divide %s count %zu differs from the CPU kernel", chorus_dtype_name(dt),
                     count);
    }
    for (int i = 0; i < NSRC; i++) {
        OK(G->free_device(d[i]));
        free(h[i]);
    }
    OK(G->free_device(dst));
    OK(G->stream_destroy(s));
    free(want);
    free(got);
}

static void test_reduce_divide(void **state)
{
    static const chorus_dtype_t dts[] = {CHORUS_INT8,    CHORUS_UINT8,    CHORUS_INT32,
                                         CHORUS_INT64,   CHORUS_FLOAT16,  CHORUS_BFLOAT16,
                                         CHORUS_FLOAT32, CHORUS_FLOAT64};
    (void)state;
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
        for (int op = CHORUS_SUM; op <= CHORUS_MAX; op++)
            check_reduce(dts[i], (chorus_op_t)op, 1000 + i, (int)(i + (size_t)op) % 2);
}

static void test_reduce_misuse(void **state)
{
    float host[64];
    void *a, *b, *pin;
    const void *src[17];
    (void)state;
    OK(G->malloc_device(&a, 256));
    OK(G->malloc_device(&b, 256));
    OK(G->malloc_host(&pin, 256));
    src[0] = a;
    src[1] = host;
    FAILS(G->reduce_async(b, src, 2, 64, CHORUS_FLOAT32, CHORUS_SUM, NULL),
          CHORUS_ERR_INVALID_ARGUMENT, "pageable host memory");
    src[1] = pin; /* pinned memory is fine for a kernel */
    OK(G->reduce_async(b, src, 2, 64, CHORUS_FLOAT32, CHORUS_SUM, NULL));
    FAILS(G->reduce_async(b, src, 2, 64, CHORUS_FLOAT32, CHORUS_AVG, NULL),
          CHORUS_ERR_INVALID_ARGUMENT, "AVG");
    FAILS(G->reduce_async(b, src, 17, 64, CHORUS_FLOAT32, CHORUS_SUM, NULL),
          CHORUS_ERR_INVALID_ARGUMENT, "nsrc");
    FAILS(G->reduce_async(b, src, 2, 65, CHORUS_FLOAT32, CHORUS_SUM, NULL),
          CHORUS_ERR_INVALID_ARGUMENT, "run past the end");
    src[1] = (char *)b + 4;
    FAILS(G->reduce_async(b, src, 2, 32, CHORUS_FLOAT32, CHORUS_SUM, NULL),
          CHORUS_ERR_INVALID_ARGUMENT, "overlaps");
    FAILS(G->divide_async(b, 64, CHORUS_FLOAT32, 0, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "divisor");
    FAILS(G->divide_async(host, 64, CHORUS_FLOAT32, 2, NULL), CHORUS_ERR_INVALID_ARGUMENT,
          "pageable");
    OK(G->stream_synchronize(NULL));
    OK(G->free_device(a));
    OK(G->free_device(b));
    OK(G->free_host(pin));
}

/* ---- Threads ---- */

static void *thread_body(void *arg)
{
    enum { N = 3000 };
    unsigned char in[N], out[N];
    void *s, *d;
    unsigned seed = (unsigned)(uintptr_t)arg;
    long bad = 0;
    if (G->stream_create(&s) != CHORUS_SUCCESS) return (void *)1;
    for (int it = 0; it < 100; it++) {
        fill(in, N, seed + (unsigned)it);
        if (G->malloc_device(&d, N) != CHORUS_SUCCESS ||
            G->memcpy_async(d, in, N, it % 3 ? s : NULL) != CHORUS_SUCCESS ||
            G->memcpy_async(out, d, N, it % 3 ? s : NULL) != CHORUS_SUCCESS ||
            G->stream_synchronize(it % 3 ? s : NULL) != CHORUS_SUCCESS ||
            memcmp(in, out, N) != 0 || G->free_device(d) != CHORUS_SUCCESS)
            bad++;
    }
    if (G->stream_destroy(s) != CHORUS_SUCCESS) bad++;
    return (void *)bad;
}

static void test_threads(void **state)
{
    pthread_t t[4];
    void *r;
    (void)state;
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, thread_body,
                                                                (void *)(uintptr_t)(i * 17)), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_null(r);
    }
}

/* ---- Slow copies ---- */

/* The stream cases and the round trip again in a fresh process (the plugin reads
 * CHORUS_FAKE_GPU_DELAY_US once, at start), where every copy runs late: any missing wait
 * or order shows as stale bytes. */
static void test_with_delay(void **state)
{
    (void)state;
    assert_int_equal(run_self("--delayed", "", "CHORUS_FAKE_GPU_DELAY_US", "300"), 0);
}

int main(int argc, char **argv)
{
    int rc;
    if (!gfu_open("gpu_fake", &rc)) return rc;
    if (argc >= 2 && strcmp(argv[1], "--delayed") == 0) {
        const struct CMUnitTest delayed[] = {
            cmocka_unit_test(test_stream_order),
            cmocka_unit_test(test_events_two_streams),
            cmocka_unit_test(test_roundtrip),
        };
        return cmocka_run_group_tests_name("gpu_fake_delayed", delayed, NULL, NULL) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_host_deref_faults),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_bad_memory_use),
        cmocka_unit_test(test_memcpy2d),
        cmocka_unit_test(test_wait_flag),
        cmocka_unit_test(test_stream_order),
        cmocka_unit_test(test_events_two_streams),
        cmocka_unit_test(test_async_error),
        cmocka_unit_test(test_reduce_divide),
        cmocka_unit_test(test_reduce_misuse),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_with_delay),
    };
    return cmocka_run_group_tests_name("gpu_fake", tests, NULL, NULL);
}
