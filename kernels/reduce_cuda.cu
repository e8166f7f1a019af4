/*
 * The CUDA kernels of the GPU plugin (lib/gpu/gpu.h): fused reduction of 1..16 sources into
 * one destination, division (the end of AVG), the exactly rounded sum (kernels.h's
 * chorus_kernel_reduce_exact), and a one-thread spin wait. The element operations live in
 * reduce_cuda_ops.h and exact_sum.h, where host unit tests (test_cuda_ops.c,
 * test_reduce_exact.c) check them against the CPU kernels; this file only moves data.
 *
 * Instantiation. One reduce kernel per dtype x op (40) and one divide kernel per dtype
 * (10), the number of sources a run-time loop: a template per source count would multiply
 * the compile time (and the plugin) by 16 for a loop whose trip count is uniform across
 * the grid, so the branch costs nothing.
 *
 * Memory access. When dst and every source have the same offset modulo 16 bytes (and it is
 * a multiple of the element size), each thread moves 16-byte vectors (uint4) through a
 * grid-stride loop, UNROLL vectors per source in flight before any arithmetic, to keep
 * enough loads outstanding to cover memory latency; the few elements before the first and
 * after the last aligned vector go through a scalar loop. Pointers with different
 * offsets take the scalar loop for everything (correct, slower; collectives pass aligned
 * buffers). Each element is read before it is written by the same thread, so dst == src[0]
 * is safe.
 *
 * Order. Every element is folded op(...op(op(s0, s1), s2)..., sn-1), each step one
 * operation of reduce_cuda_ops.h, so the result is the bytes of
 * chorus_kernel_reduce_multi (NaN produced by arithmetic aside: the GPU's is canonical).
 * nvcc contracts a * b + c into FMA by default, but no step here has that shape.
 */
#include "chorus.h"
#include "exact_sum.h"
#include "reduce_cuda_ops.h"

#include <atomic>
#include <cuda_runtime.h>

namespace
{

constexpr int THREADS = 512;
constexpr int UNROLL = 4;
/* Blocks per SM the grid is sized for, and the occupancy __launch_bounds__ asks the
 * compiler to allow (at most 64 registers a thread). 1024 threads with UNROLL 16-byte loads
 * each per source keep far more bytes in flight than memory latency needs. */
constexpr int BLOCKS_PER_SM = 2;
constexpr int MAX_DEVICES = 64;

struct srcs_t {
    const void *p[CHORUS_CU_MAX_SRC];
};

/* One op x dtype: the element type and the operation, for the kernel template. */
#define DEFINE_OP(name, Ty, op)                                                                    \
    struct op_##name##_##op {                                                                      \
        typedef Ty T;                                                                              \
        static __device__ __forceinline__ T apply(T x, T y)                                        \
        {                                                                                          \
            return chorus__cu_##name##_##op(x, y);                                                 \
        }                                                                                          \
    };
#define DEFINE_DIV(name, Ty)                                                                       \
    struct div_##name {                                                                            \
        typedef Ty T;                                                                              \
        static __device__ __forceinline__ T apply(T x, uint64_t d)                                 \
        {                                                                                          \
            return chorus__cu_##name##_div(x, d);                                                  \
        }                                                                                          \
    };
#define DEFINE_OPS(name, Ty)                                                                       \
    DEFINE_OP(name, Ty, sum)                                                                       \
    DEFINE_OP(name, Ty, prod)                                                                      \
    DEFINE_OP(name, Ty, min)                                                                       \
    DEFINE_OP(name, Ty, max)                                                                       \
    DEFINE_DIV(name, Ty)

/* The dtypes in chorus_dtype_t order, with their element types (fp16/bf16 as bits). */
#define CU_TYPES(X)                                                                                \
    X(CHORUS_INT8, int8, int8_t)                                                                   \
    X(CHORUS_UINT8, uint8, uint8_t)                                                                \
    X(CHORUS_INT32, int32, int32_t)                                                                \
    X(CHORUS_UINT32, uint32, uint32_t)                                                             \
    X(CHORUS_INT64, int64, int64_t)                                                                \
    X(CHORUS_UINT64, uint64, uint64_t)                                                             \
    X(CHORUS_FLOAT16, float16, uint16_t)                                                           \
    X(CHORUS_BFLOAT16, bfloat16, uint16_t)                                                         \
    X(CHORUS_FLOAT32, float32, float)                                                              \
    X(CHORUS_FLOAT64, float64, double)

#define X_OPS(e, name, Ty) DEFINE_OPS(name, Ty)
CU_TYPES(X_OPS)
#undef X_OPS

/* A 16-byte vector seen as its lanes. */
template <typename T> union vec_t {
    uint4 u;
    T t[16 / sizeof(T)];
};

template <class O> __device__ __forceinline__ uint4 vec_apply(uint4 a, uint4 b)
{
    typedef typename O::T T;
    vec_t<T> x, y;

    x.u = a;
    y.u = b;
#pragma unroll
    for (int l = 0; l < (int)(16 / sizeof(T)); l++)
        x.t[l] = O::apply(x.t[l], y.t[l]);
    return x.u;
}

/* Elements [head, head + nvec * V) as vectors, the rest ([0, head) and the tail) scalar.
 * The sources are __grid_constant__ so that src.p[s], indexed at run time, is read from
 * the parameter bank instead of a copy of the struct in local memory. */
template <class O>
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM)
    reduce_kernel(void *dst_, const __grid_constant__ srcs_t src, int nsrc, size_t count,
                  size_t head, size_t nvec)
{
    typedef typename O::T T;
    const size_t V = 16 / sizeof(T);
    const size_t nthr = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    T *dst = (T *)dst_;
    uint4 *dv = (uint4 *)(dst + head);
    const uint4 *s0 = (const uint4 *)((const T *)src.p[0] + head);
    size_t i = tid;

    for (; i + (UNROLL - 1) * nthr < nvec; i += UNROLL * nthr) {
        uint4 acc[UNROLL], x[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            acc[u] = s0[i + u * nthr];
        for (int s = 1; s < nsrc; s++) {
            const uint4 *sv = (const uint4 *)((const T *)src.p[s] + head);
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
                x[u] = sv[i + u * nthr];
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
                acc[u] = vec_apply<O>(acc[u], x[u]);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            dv[i + u * nthr] = acc[u];
    }
    for (; i < nvec; i += nthr) {
        uint4 acc = s0[i];
        for (int s = 1; s < nsrc; s++)
            acc = vec_apply<O>(acc, ((const uint4 *)((const T *)src.p[s] + head))[i]);
        dv[i] = acc;
    }

    const size_t tail = head + nvec * V;
    const size_t nscalar = head + (count - tail);
    for (size_t j = tid; j < nscalar; j += nthr) {
        size_t e = j < head ? j : tail + (j - head);
        T acc = ((const T *)src.p[0])[e];
        for (int s = 1; s < nsrc; s++)
            acc = O::apply(acc, ((const T *)src.p[s])[e]);
        dst[e] = acc;
    }
}

template <class D>
__global__ void __launch_bounds__(THREADS) divide_kernel(void *buf_, size_t count, uint64_t d)
{
    typedef typename D::T T;
    const size_t nthr = (size_t)gridDim.x * blockDim.x;
    T *buf = (T *)buf_;

    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += nthr)
        buf[i] = D::apply(buf[i], d);
}

/* The exact sum (chorus__cu_reduce_exact): one element per thread through a grid-stride loop,
 * all of it in exact_sum.h. E::apply is chorus__exact_elem_<format>: it reads element i of
 * every source before the thread writes dst[i], so dst may be src[0]. */
#define DEFINE_EXACT(name, Ty)                                                                     \
    struct exact_##name {                                                                          \
        typedef Ty T;                                                                              \
        static __device__ __forceinline__ T apply(const void *const *s, int n, size_t i,           \
                                                  uint64_t d)                                      \
        {                                                                                          \
            return chorus__exact_elem_##name(s, n, i, d);                                          \
        }                                                                                          \
    };
DEFINE_EXACT(f16, uint16_t)
DEFINE_EXACT(bf16, uint16_t)
DEFINE_EXACT(f32, uint32_t)
DEFINE_EXACT(f64, uint64_t)
#undef DEFINE_EXACT

template <class E>
__global__ void __launch_bounds__(THREADS)
    exact_kernel(void *dst_, const __grid_constant__ srcs_t src, int nsrc, size_t count,
                 uint64_t d)
{
    typedef typename E::T T;
    const size_t nthr = (size_t)gridDim.x * blockDim.x;
    T *dst = (T *)dst_;

    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += nthr)
        dst[i] = E::apply(src.p, nsrc, i, d);
}

/* The same test as cuStreamWaitValue64(CU_STREAM_WAIT_VALUE_GEQ), which tolerates a
 * counter that wraps. The sleep keeps the poll from hammering the PCIe link. */
__global__ void spin_kernel(volatile uint64_t *flag, uint64_t value)
{
    while ((int64_t)(*flag - value) < 0)
        __nanosleep(1000);
}

/* SM count of each device, read once: cudaDeviceGetAttribute is cheap, but not free enough
 * for every launch of a pipelined collective. 0 means not read yet. */
std::atomic<int> sm_cache[MAX_DEVICES];

cudaError_t grid_for(size_t work, unsigned *blocks_p)
{
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    size_t want = (work + THREADS - 1) / THREADS, max;

    if (e != cudaSuccess) return e;
    if (dev >= 0 && dev < MAX_DEVICES) sms = sm_cache[dev].load(std::memory_order_relaxed);
    if (sms <= 0) {
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return e;
        if (dev >= 0 && dev < MAX_DEVICES) sm_cache[dev].store(sms, std::memory_order_relaxed);
    }
    max = (size_t)sms * BLOCKS_PER_SM;
    *blocks_p = (unsigned)(want < 1 ? 1 : want > max ? max : want);
    return cudaSuccess;
}

template <class O>
cudaError_t launch_reduce(void *dst, const void *const *src, int nsrc, size_t count,
                          cudaStream_t stream)
{
    typedef typename O::T T;
    const size_t V = 16 / sizeof(T);
    uintptr_t mis = (uintptr_t)dst & 15u;
    size_t head = count, nvec = 0;
    unsigned blocks;
    srcs_t s = {};
    int same = mis % sizeof(T) == 0;
    cudaError_t e;

    for (int k = 0; k < nsrc; k++) {
        s.p[k] = src[k];
        same = same && ((uintptr_t)src[k] & 15u) == mis;
    }
    if (same) {
        head = ((16 - mis) & 15u) / sizeof(T);
        if (head > count) head = count;
        nvec = (count - head) / V;
    }
    e = grid_for(nvec > 0 ? (nvec + UNROLL - 1) / UNROLL : count, &blocks);
    if (e != cudaSuccess) return e;
    /* Clear an error an earlier call of this thread left, so the answer is the launch's. */
    (void)cudaGetLastError();
    reduce_kernel<O><<<blocks, THREADS, 0, stream>>>(dst, s, nsrc, count, head, nvec);
    return cudaGetLastError();
}

template <class D> cudaError_t launch_divide(void *buf, size_t count, uint64_t d, cudaStream_t st)
{
    unsigned blocks;
    cudaError_t e = grid_for(count, &blocks);

    if (e != cudaSuccess) return e;
    (void)cudaGetLastError();
    divide_kernel<D><<<blocks, THREADS, 0, st>>>(buf, count, d);
    return cudaGetLastError();
}

template <class E>
cudaError_t launch_exact(void *dst, const void *const *src, int nsrc, size_t count, uint64_t d,
                         cudaStream_t stream)
{
    unsigned blocks;
    srcs_t s = {};
    cudaError_t e = grid_for(count, &blocks);

    if (e != cudaSuccess) return e;
    for (int k = 0; k < nsrc; k++)
        s.p[k] = src[k];
    (void)cudaGetLastError();
    exact_kernel<E><<<blocks, THREADS, 0, stream>>>(dst, s, nsrc, count, d);
    return cudaGetLastError();
}

} // namespace

extern "C" int chorus__cu_reduce(void *dst, const void *const *src, int nsrc, size_t count,
                                 int dtype, int op, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;

    if (nsrc < 1 || nsrc > CHORUS_CU_MAX_SRC) return (int)cudaErrorInvalidValue;
    if (count == 0) return (int)cudaSuccess;
    /* A copy applies no op: one kernel per element size serves every dtype. */
    if (nsrc == 1) {
        switch (dtype) {
        case CHORUS_INT8:
        case CHORUS_UINT8: return (int)launch_reduce<op_uint8_sum>(dst, src, 1, count, st);
        case CHORUS_FLOAT16:
        case CHORUS_BFLOAT16: return (int)launch_reduce<op_bfloat16_sum>(dst, src, 1, count, st);
        case CHORUS_INT32:
        case CHORUS_UINT32:
        case CHORUS_FLOAT32: return (int)launch_reduce<op_uint32_sum>(dst, src, 1, count, st);
        case CHORUS_INT64:
        case CHORUS_UINT64:
        case CHORUS_FLOAT64: return (int)launch_reduce<op_uint64_sum>(dst, src, 1, count, st);
        default: return (int)cudaErrorInvalidValue;
        }
    }
#define X_CASE(e, name, Ty)                                                                        \
    case e:                                                                                        \
        switch (op) {                                                                              \
        case CHORUS_SUM: return (int)launch_reduce<op_##name##_sum>(dst, src, nsrc, count, st);    \
        case CHORUS_PROD: return (int)launch_reduce<op_##name##_prod>(dst, src, nsrc, count, st);  \
        case CHORUS_MIN: return (int)launch_reduce<op_##name##_min>(dst, src, nsrc, count, st);    \
        case CHORUS_MAX: return (int)launch_reduce<op_##name##_max>(dst, src, nsrc, count, st);    \
        default: return (int)cudaErrorInvalidValue;                                                \
        }
    switch (dtype) {
        CU_TYPES(X_CASE)
    default: return (int)cudaErrorInvalidValue;
    }
#undef X_CASE
}

extern "C" int chorus__cu_divide(void *buf, size_t count, int dtype, uint64_t divisor, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;

    if (divisor == 0) return (int)cudaErrorInvalidValue;
    if (count == 0) return (int)cudaSuccess;
#define X_CASE(e, name, Ty)                                                                        \
    case e: return (int)launch_divide<div_##name>(buf, count, divisor, st);
    switch (dtype) {
        CU_TYPES(X_CASE)
    default: return (int)cudaErrorInvalidValue;
    }
#undef X_CASE
}

extern "C" int chorus__cu_reduce_exact(void *dst, const void *const *src, int nsrc,
                                       size_t count, int dtype, uint64_t divisor, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;

    if (nsrc < 1 || nsrc > CHORUS_CU_MAX_SRC || divisor == 0) return (int)cudaErrorInvalidValue;
    if (count == 0) return (int)cudaSuccess;
    switch (dtype) {
    case CHORUS_FLOAT16: return (int)launch_exact<exact_f16>(dst, src, nsrc, count, divisor, st);
    case CHORUS_BFLOAT16: return (int)launch_exact<exact_bf16>(dst, src, nsrc, count, divisor, st);
    case CHORUS_FLOAT32: return (int)launch_exact<exact_f32>(dst, src, nsrc, count, divisor, st);
    case CHORUS_FLOAT64: return (int)launch_exact<exact_f64>(dst, src, nsrc, count, divisor, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

/* Loads every kernel of this file on the current device now. With lazy loading (the
 * default since CUDA 12.2) a kernel's first launch loads it, and loading may synchronise
 * the context (CUDA Programming Guide, "Lazy Loading"): if that first launch comes from the
 * proxy thread while a caller's stream is held by stream_wait_flag until the proxy is done,
 * the load waits for the stream and the stream for the proxy. cudaFuncGetAttributes makes
 * the runtime fetch the function, which loads it (NCCL preloads its kernels the same way
 * when a communicator starts). */
extern "C" int chorus__cu_preload(void)
{
    cudaFuncAttributes attr;
    cudaError_t e = cudaSuccess;

#define X_LOAD(en, name, Ty)                                                                       \
    if (e == cudaSuccess)                                                                          \
        e = cudaFuncGetAttributes(&attr, (const void *)reduce_kernel<op_##name##_sum>);            \
    if (e == cudaSuccess)                                                                          \
        e = cudaFuncGetAttributes(&attr, (const void *)reduce_kernel<op_##name##_prod>);           \
    if (e == cudaSuccess)                                                                          \
        e = cudaFuncGetAttributes(&attr, (const void *)reduce_kernel<op_##name##_min>);            \
    if (e == cudaSuccess)                                                                          \
        e = cudaFuncGetAttributes(&attr, (const void *)reduce_kernel<op_##name##_max>);            \
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, (const void *)divide_kernel<div_##name>);
    CU_TYPES(X_LOAD)
#undef X_LOAD
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, (const void *)exact_kernel<exact_f16>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, (const void *)exact_kernel<exact_bf16>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, (const void *)exact_kernel<exact_f32>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, (const void *)exact_kernel<exact_f64>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, (const void *)spin_kernel);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return (int)e;
}

extern "C" int chorus__cu_spin_wait(volatile uint64_t *flag, uint64_t value, void *stream)
{
    (void)cudaGetLastError();
    spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(flag, value);
    return (int)cudaGetLastError();
}
