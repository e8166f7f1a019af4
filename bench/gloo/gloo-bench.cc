/*
 * gloo-bench: Gloo's allreduce (any of its algorithms), gloo::allgather,
 * ReduceScatterHalvingDoubling, gloo::broadcast, gloo::reduce, gloo::alltoall, gloo::gather,
 * gloo::scatter, gloo::allgatherv, gloo::alltoallv and gloo::barrier over Gloo's TCP
 * transport, timed and checked exactly as chorus-bench times
 * and checks the same Chorus collectives, for bench/compare.sh. The driver is
 * bench/mpi/peer.h, shared with ompi-bench.
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
 * Gloo lacks some of the forms chorus-bench times, and the program pays what a Gloo user
 * would to get them: out-of-place reduce_scatter copies the input into a scratch buffer
 * and the block out of it (the class only works in place), in-place alltoall copies the
 * input aside first. An in-place reduce_scatter leaves the block at the start of the
 * buffer, as MPI_IN_PLACE does, and the check reads it there.
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
#include <gloo/allgatherv.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/gather.h>
#include <gloo/scatter.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
/* Gloo's only reduce-scatter is the classic ReduceScatterHalvingDoubling class, defined
 * in full in this header; a libgloo-dev without it gets a "skipped" reduce_scatter. */
#if __has_include(<gloo/reduce_scatter.h>)
#include <gloo/reduce_scatter.h>
#define HAVE_GLOO_REDUCE_SCATTER 1
#else
#define HAVE_GLOO_REDUCE_SCATTER 0
#endif
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
    /* The classic algorithm objects (an allreduce, the reduce-scatter), each bound to one
     * buffer and count: built by the driver's setup() before the timed loop of a size and
     * placement, so that the loop measures run() alone. */
    std::unique_ptr<gloo::Algorithm> classic;
    float *classic_buf = nullptr;
    size_t classic_count = 0;
    std::unique_ptr<gloo::Algorithm> rs;
    float *rs_buf = nullptr;
    size_t rs_count = 0;
    /* Room for a whole input where Gloo has no form that reads it where the driver has it:
     * reduce_scatter out of place, alltoall in place. Allocated (and touched) once. */
    std::vector<float> scratch;
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

/* Builds the classic allreduce object for this buffer and count, unless it is there. */
void classic_ready(GlooBench *b, float *recv, size_t count)
{
    if (count > static_cast<size_t>(INT32_MAX)) throw std::runtime_error("count over 2^31");
    if (b->classic != nullptr && b->classic_buf == recv && b->classic_count == count) return;
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
    default: b->classic.reset(new gloo::AllreduceBcube<float>(b->context, ptrs, n)); break;
    }
    b->classic_buf = recv;
    b->classic_count = count;
}

/* The classic algorithms reduce in place: out of place, the input is first copied to the
 * output (a memcpy that Gloo's users pay too, as PyTorch does for these classes). */
void classic_allreduce(GlooBench *b, const peer_call_t &call)
{
    classic_ready(b, call.recv, call.count);
    if (!call.in_place) memcpy(call.recv, call.send, call.count * sizeof(float));
    b->classic->run();
}

/* ReduceScatterHalvingDoubling reduces a whole buffer of n * count elements in place and
 * leaves this rank's block at its start. In place that buffer is the driver's own
 * (call.send, the whole input; in_place_rs_at_start tells the driver where the result
 * is); out of place the class has no separate input or output, so the input is copied
 * into scratch, reduced there, and the block copied out to recv, as a user of the class
 * with separate buffers must. */
void rs_ready(GlooBench *b, const peer_call_t &call)
{
#if HAVE_GLOO_REDUCE_SCATTER
    float *buf = call.in_place ? const_cast<float *>(call.send) : b->scratch.data();
    size_t n = static_cast<size_t>(b->context->size), total = call.count * n;

    /* The class counts elements and bytes in ints. */
    if (total > static_cast<size_t>(INT32_MAX) / sizeof(float))
        throw std::runtime_error("buffer over 2 GiB");
    if (b->rs != nullptr && b->rs_buf == buf && b->rs_count == call.count) return;
    if (!call.in_place && b->scratch.size() < total) throw std::runtime_error("no scratch");
    b->rs.reset();
    b->rs.reset(new gloo::ReduceScatterHalvingDoubling<float>(
        b->context, std::vector<float *>{buf}, static_cast<int>(total),
        std::vector<int>(n, static_cast<int>(call.count))));
    b->rs_buf = buf;
    b->rs_count = call.count;
#else
    (void)b;
    (void)call;
    throw std::runtime_error("no gloo/reduce_scatter.h");
#endif
}

void reduce_scatter(GlooBench *b, const peer_call_t &call)
{
    size_t total = call.count * static_cast<size_t>(b->context->size);

    rs_ready(b, call);
    if (!call.in_place) memcpy(b->scratch.data(), call.send, total * sizeof(float));
    b->rs->run();
    if (!call.in_place) memcpy(call.recv, b->scratch.data(), call.count * sizeof(float));
}

void run_coll(GlooBench *b, const peer_call_t &call)
{
    size_t n = static_cast<size_t>(b->context->size);
    float *send = const_cast<float *>(call.send);
    const ReduceFn sum = static_cast<ReduceFn>(&gloo::sum<float>);

    switch (call.coll) {
    case PEER_ALLREDUCE: {
        if (b->algo != ALGO_RING && b->algo != ALGO_BCUBE) {
            classic_allreduce(b, call);
            return;
        }
        gloo::AllreduceOptions opts(b->context);
        opts.setAlgorithm(b->algo == ALGO_BCUBE ? gloo::AllreduceOptions::Algorithm::BCUBE
                                                : gloo::AllreduceOptions::Algorithm::RING);
        /* Without an input the output is reduced in place. */
        if (!call.in_place) opts.setInput(send, call.count);
        opts.setOutput(call.recv, call.count);
        opts.setReduceFunction(sum);
        gloo::allreduce(opts);
        return;
    }
    case PEER_ALLGATHER: {
        gloo::AllgatherOptions opts(b->context);
        /* Without an input Gloo takes this rank's slot of the output: in place. */
        if (!call.in_place) opts.setInput(send, call.count);
        opts.setOutput(call.recv, call.count * n);
        gloo::allgather(opts);
        return;
    }
    case PEER_REDUCE_SCATTER: reduce_scatter(b, call); return;
    case PEER_BROADCAST: {
        gloo::BroadcastOptions opts(b->context);
        /* Only the root may have an input; without one it sends from its output (in
         * place), with one it also copies it to its output, as chorus_broadcast does. */
        if (!call.in_place && b->context->rank == call.root) opts.setInput(send, call.count);
        opts.setOutput(call.recv, call.count);
        opts.setRoot(call.root);
        gloo::broadcast(opts);
        return;
    }
    case PEER_REDUCE: {
        gloo::ReduceOptions opts(b->context);
        /* Without an input the output is the input (in place). Every rank needs an
         * output: the ring reduces into it before the root gathers the blocks. */
        if (!call.in_place) opts.setInput(send, call.count);
        opts.setOutput(call.recv, call.count);
        opts.setRoot(call.root);
        opts.setReduceFunction(sum);
        gloo::reduce(opts);
        return;
    }
    case PEER_ALLTOALL: {
        gloo::AlltoallOptions opts(b->context);
        size_t total = call.count * n;
        /* gloo::alltoall posts every send from the input and every receive into the output
         * at once, so with one buffer for both a block can be overwritten before it is
         * sent (tried: wrong values from 64 B up). In place, the input is first copied
         * aside, as its users must. */
        if (call.in_place) {
            if (b->scratch.size() < total) throw std::runtime_error("no scratch");
            memcpy(b->scratch.data(), call.recv, total * sizeof(float));
            send = b->scratch.data();
        }
        opts.setInput(send, total);
        opts.setOutput(call.recv, total);
        gloo::alltoall(opts);
        return;
    }
    case PEER_GATHER: {
        gloo::GatherOptions opts(b->context);
        /* Gloo's gather has no in-place form: in place the input is this rank's block of
         * the root's output (peer.h's layout), which Gloo's root copies onto itself. */
        opts.setInput(send, call.count);
        if (b->context->rank == call.root) opts.setOutput(call.recv, call.count * n);
        opts.setRoot(call.root);
        gloo::gather(opts);
        return;
    }
    case PEER_SCATTER: {
        gloo::ScatterOptions opts(b->context);
        if (b->context->rank == call.root) {
            std::vector<float *> blocks(n);
            for (size_t r = 0; r < n; r++) blocks[r] = send + r * call.count;
            opts.setInputs(blocks, call.count);
        }
        opts.setOutput(call.recv, call.count);
        opts.setRoot(call.root);
        gloo::scatter(opts);
        return;
    }
    case PEER_ALLGATHERV: {
        gloo::AllgathervOptions opts(b->context);
        /* Every block holds count elements, back to back (peer.h). */
        opts.setInput(send, call.count);
        opts.setOutput(call.recv, std::vector<size_t>(n, call.count));
        gloo::allgatherv(opts);
        return;
    }
    case PEER_ALLTOALLV: {
        gloo::AlltoallvOptions opts(b->context);
        std::vector<int64_t> per(n, static_cast<int64_t>(call.count));
        opts.setInput(send, per);
        opts.setOutput(call.recv, per);
        gloo::alltoallv(opts);
        return;
    }
    default: throw std::runtime_error("unknown collective");
    }
}

int gloo_barrier(void *ctx)
{
    GlooBench *b = static_cast<GlooBench *>(ctx);

    return guarded("barrier", [&] {
        gloo::BarrierOptions opts(b->context);
        gloo::barrier(opts);
    });
}

int gloo_coll(void *ctx, const peer_call_t *call)
{
    GlooBench *b = static_cast<GlooBench *>(ctx);

    if (call->coll == PEER_BARRIER) return gloo_barrier(ctx);
    /* Gloo divides by the element count (SIGFPE on 0): an empty call is a no-op, as it is
     * for MPI and Chorus, so it is not made. */
    if (call->count == 0) return 0;
    return guarded(peer_coll_names[call->coll], [&] { run_coll(b, *call); });
}

/* Builds the classic objects before a timed loop (peer_backend_t.setup). */
int gloo_setup(void *ctx, const peer_call_t *call)
{
    GlooBench *b = static_cast<GlooBench *>(ctx);

    if (call->count == 0) return 0;
    if (call->coll == PEER_ALLREDUCE && b->algo != ALGO_RING && b->algo != ALGO_BCUBE)
        return guarded("allreduce setup", [&] { classic_ready(b, call->recv, call->count); });
    if (call->coll == PEER_REDUCE_SCATTER)
        return guarded("reduce_scatter setup", [&] { rs_ready(b, *call); });
    return 0;
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
    char library[160], variant[64] = "";
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
    if (opt.coll == PEER_REDUCE_SCATTER && !HAVE_GLOO_REDUCE_SCATTER) {
        if (rank == 0)
            printf("skipped: this libgloo-dev has no gloo/reduce_scatter.h "
                   "(ReduceScatterHalvingDoubling)\n");
        return PEER_EXIT_SKIPPED;
    }
    /* Gloo has no reduce_scatterv with a reduction of its own choosing over uneven
     * blocks apart from ReduceScatterHalvingDoubling, which reduce_scatter already times:
     * skipped (before the rendezvous, so every rank leaves alike), and compare.sh shows
     * "-" for Gloo there. */
    if (opt.coll == PEER_REDUCE_SCATTERV) {
        if (rank == 0)
            printf("skipped: gloo-bench does not time %s\n", peer_coll_names[opt.coll]);
        return PEER_EXIT_SKIPPED;
    }
    /* Whole inputs for the forms Gloo lacks (see the scratch member), touched now so that
     * no page fault lands in a timed loop. */
    if (opt.coll == PEER_REDUCE_SCATTER || opt.coll == PEER_ALLTOALL)
        bench.scratch.assign(opt.max_bytes / sizeof(float) + 16, 0.0f);
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
    /* GLOO_BENCH_ALGO picks among the allreduce algorithms only; the other collectives have
     * one each. */
    if (opt.coll == PEER_ALLREDUCE)
        snprintf(variant, sizeof(variant), ", allreduce %s", algo);
    else if (opt.coll == PEER_REDUCE_SCATTER)
        snprintf(variant, sizeof(variant), ", ReduceScatterHalvingDoubling");
    snprintf(library, sizeof(library), "Gloo %d.%d.%d tcp %s%s", GLOO_VERSION_MAJOR,
             GLOO_VERSION_MINOR, GLOO_VERSION_PATCH,
             iface != nullptr && *iface != '\0' ? iface : host != nullptr && *host != '\0' ? host
                                                                                       : "loopback",
             variant);
    memset(&be, 0, sizeof(be));
    be.prog = "gloo-bench";
    be.library = library;
    be.rank = rank;
    be.nranks = size;
    be.ctx = &bench;
    be.coll = gloo_coll;
    be.setup = gloo_setup;
    be.barrier = gloo_barrier;
    be.max_double = gloo_max_double;
    be.sum_u64 = gloo_sum_u64;
    be.gather_pids = gloo_gather_pids;
    be.in_place_rs_at_start = 1;
    return peer_main(&be, &opt);
}
