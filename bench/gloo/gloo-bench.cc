/*
 * gloo-bench: Gloo's allreduce (any of its algorithms) and gloo::allgather over Gloo's TCP
 * transport, timed and checked exactly as chorus-bench times and checks Chorus, for
 * bench/compare.sh. The driver is bench/mpi/peer.h, shared with ompi-bench.
 *
 * Every rank is a process started by bench/gloo/gloorun.sh (or by
 * tests/cluster/cluster_compare.sh), which sets
 *   GLOO_BENCH_RANK, GLOO_BENCH_SIZE  this rank and the number of ranks;
 *   GLOO_BENCH_STORE                  an empty directory for the FileStore rendezvous,
 *                                     on a file system every rank sees;
 *   GLOO_BENCH_TIMEOUT                seconds a collective may take (default 300);
 *   GLOO_BENCH_ALGO                   the allreduce algorithm (default ring):
 *       ring, bcube                   gloo::allreduce() with that Algorithm;
 *       ring_chunked, halving_doubling, bcube_legacy
 *                                     the classic in-place classes (AllreduceRingChunked...),
 *                                     built once per buffer and size and then only run(),
 *                                     as Gloo's own benchmark and its users do;
 *   GLOO_BENCH_HOST                   the address the TCP device binds (default 127.0.0.1);
 *   GLOO_BENCH_IFACE                  or the interface it binds (instead of the address).
 *
 *   GLOO_BENCH_ALGO=halving_doubling bench/gloo/gloorun.sh -n 4 build/bin/gloo-bench \
 *       allreduce -b 8 -e 64M -f 4
 */
#include "peer.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace
{

enum AlgoKind { ALGO_RING, ALGO_BCUBE, ALGO_RING_CHUNKED, ALGO_HALVING_DOUBLING, ALGO_BCUBE_LEGACY };

struct AlgoName {
    const char *name;
    AlgoKind kind;
};

const AlgoName algo_names[] = {
    {"ring", ALGO_RING},
    {"bcube", ALGO_BCUBE},
    {"ring_chunked", ALGO_RING_CHUNKED},
    {"halving_doubling", ALGO_HALVING_DOUBLING},
    {"bcube_legacy", ALGO_BCUBE_LEGACY},
};

struct GlooBench {
    std::shared_ptr<gloo::Context> context;
    AlgoKind algo = ALGO_RING;
    /* The classic algorithm object, bound to one buffer and count: rebuilt only when the
     * driver moves to another size, so that the timed loop measures run() alone. */
    std::unique_ptr<gloo::Algorithm> classic;
    float *classic_buf = nullptr;
    size_t classic_count = 0;
};

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

/* Gloo reports failures (a peer gone, a timeout) by throwing; the driver wants 0 or 1. */
template <typename F> int guarded(const char *what, F &&fn)
{
    try {
        fn();
        return 0;
    } catch (const std::exception &e) {
        fprintf(stderr, "gloo-bench: %s failed: %s\n", what, e.what());
        return 1;
    }
}

/* The classic algorithms reduce in place: out of place, the input is first copied to the
 * output (a memcpy that Gloo's users pay too, as PyTorch does for these classes). */
void classic_allreduce(GlooBench *b, const float *send, float *recv, size_t count, int in_place)
{
    if (count > static_cast<size_t>(INT32_MAX)) throw std::runtime_error("count over 2^31");
    if (b->classic == nullptr || b->classic_buf != recv || b->classic_count != count) {
        std::vector<float *> ptrs{recv};
        int n = static_cast<int>(count);
        b->classic.reset();
        switch (b->algo) {
        case ALGO_RING_CHUNKED:
            b->classic.reset(new gloo::AllreduceRingChunked<float>(b->context, ptrs, n));
            break;
        case ALGO_HALVING_DOUBLING:
            b->classic.reset(new gloo::AllreduceHalvingDoubling<float>(b->context, ptrs, n));
            break;
        default:
            b->classic.reset(new gloo::AllreduceBcube<float>(b->context, ptrs, n));
            break;
        }
        b->classic_buf = recv;
        b->classic_count = count;
    }
    if (!in_place) memcpy(recv, send, count * sizeof(float));
    b->classic->run();
}

int gloo_coll(void *ctx, int coll, const float *send, float *recv, size_t count, int in_place)
{
    GlooBench *b = static_cast<GlooBench *>(ctx);

    /* Gloo divides by the element count (SIGFPE on 0): an empty call is a no-op, as it is
     * for MPI and Chorus, so it is not made. */
    if (count == 0) return 0;
    return guarded(coll == PEER_ALLGATHER ? "allgather" : "allreduce", [&] {
        if (coll == PEER_ALLGATHER) {
            gloo::AllgatherOptions opts(b->context);
            /* Without an input Gloo takes this rank's slot of the output: in place. */
            if (!in_place) opts.setInput(const_cast<float *>(send), count);
            opts.setOutput(recv, count * static_cast<size_t>(b->context->size));
            gloo::allgather(opts);
            return;
        }
        if (b->algo != ALGO_RING && b->algo != ALGO_BCUBE) {
            classic_allreduce(b, send, recv, count, in_place);
            return;
        }
        gloo::AllreduceOptions opts(b->context);
        opts.setAlgorithm(b->algo == ALGO_BCUBE ? gloo::AllreduceOptions::Algorithm::BCUBE
                                                : gloo::AllreduceOptions::Algorithm::RING);
        /* Without an input the output is reduced in place. */
        if (!in_place) opts.setInput(const_cast<float *>(send), count);
        opts.setOutput(recv, count);
        opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
        gloo::allreduce(opts);
    });
}

int gloo_barrier(void *ctx)
{
    GlooBench *b = static_cast<GlooBench *>(ctx);

    return guarded("barrier", [&] {
        gloo::BarrierOptions opts(b->context);
        gloo::barrier(opts);
    });
}

template <typename T> int gloo_reduce_one(GlooBench *b, T *value, ReduceFn fn, const char *what)
{
    return guarded(what, [&] {
        gloo::AllreduceOptions opts(b->context);
        opts.setOutput(value, 1);
        opts.setReduceFunction(fn);
        gloo::allreduce(opts);
    });
}

int gloo_max_double(void *ctx, double *value)
{
    return gloo_reduce_one(static_cast<GlooBench *>(ctx), value,
                           static_cast<ReduceFn>(&gloo::max<double>), "allreduce of the times");
}

int gloo_sum_u64(void *ctx, uint64_t *value)
{
    return gloo_reduce_one(static_cast<GlooBench *>(ctx), value,
                           static_cast<ReduceFn>(&gloo::sum<uint64_t>), "allreduce of the check");
}

int gloo_gather_pids(void *ctx, int32_t *pids)
{
    GlooBench *b = static_cast<GlooBench *>(ctx);
    int32_t me = static_cast<int32_t>(getpid());

    return guarded("allgather of the pids", [&] {
        gloo::AllgatherOptions opts(b->context);
        opts.setInput(&me, 1);
        opts.setOutput(pids, static_cast<size_t>(b->context->size));
        gloo::allgather(opts);
    });
}

int env_int(const char *name, int fallback)
{
    const char *text = getenv(name);
    char *end;
    long v;

    if (text == nullptr || *text == '\0') return fallback;
    v = strtol(text, &end, 10);
    return *end == '\0' && v >= 0 && v < 1000000 ? static_cast<int>(v) : -1;
}

} // namespace

int main(int argc, char **argv)
{
    peer_opts_t opt;
    peer_backend_t be;
    GlooBench bench;
    const char *store_dir = getenv("GLOO_BENCH_STORE");
    int rank = env_int("GLOO_BENCH_RANK", -1), size = env_int("GLOO_BENCH_SIZE", -1);
    int timeout_s = env_int("GLOO_BENCH_TIMEOUT", 300);
    const char *algo = getenv("GLOO_BENCH_ALGO");
    const char *host = getenv("GLOO_BENCH_HOST");
    const char *iface = getenv("GLOO_BENCH_IFACE");
    char library[128];
    bool known = false;

    if (peer_parse(argc, argv, "gloo-bench", &opt) != 0) return 2;
    if (rank < 0 || size < 1 || rank >= size || timeout_s <= 0 || store_dir == nullptr) {
        fprintf(stderr, "gloo-bench: set GLOO_BENCH_RANK, GLOO_BENCH_SIZE and GLOO_BENCH_STORE "
                        "(bench/gloo/gloorun.sh does)\n");
        return 2;
    }
    if (algo == nullptr || *algo == '\0') algo = "ring";
    for (const AlgoName &a : algo_names) {
        if (strcmp(a.name, algo) == 0) {
            bench.algo = a.kind;
            known = true;
        }
    }
    if (!known) {
        fprintf(stderr, "gloo-bench: GLOO_BENCH_ALGO=%s: not one of ring, bcube, ring_chunked, "
                        "halving_doubling, bcube_legacy\n", algo);
        return 2;
    }
    if (guarded("rendezvous", [&] {
            gloo::transport::tcp::attr attr;
            if (iface != nullptr && *iface != '\0')
                attr.iface = iface;
            else
                attr.hostname = host != nullptr && *host != '\0' ? host : "127.0.0.1";
            auto device = gloo::transport::tcp::CreateDevice(attr);
            gloo::rendezvous::FileStore store(store_dir);
            auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
            context->setTimeout(std::chrono::seconds(timeout_s));
            context->connectFullMesh(store, device);
            bench.context = context;
        }) != 0)
        return 1;
    snprintf(library, sizeof(library), "Gloo %d.%d.%d tcp %s, allreduce %s", GLOO_VERSION_MAJOR,
             GLOO_VERSION_MINOR, GLOO_VERSION_PATCH,
             iface != nullptr && *iface != '\0' ? iface : host != nullptr && *host != '\0' ? host
                                                                                       : "loopback",
             algo);
    memset(&be, 0, sizeof(be));
    be.prog = "gloo-bench";
    be.library = library;
    be.rank = rank;
    be.nranks = size;
    be.ctx = &bench;
    be.coll = gloo_coll;
    be.barrier = gloo_barrier;
    be.max_double = gloo_max_double;
    be.sum_u64 = gloo_sum_u64;
    be.gather_pids = gloo_gather_pids;
    return peer_main(&be, &opt);
}
