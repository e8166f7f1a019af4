// The "chorus" backend of torch.distributed over libchorus: a c10d::Backend on torch 2.x, a
// c10d::ProcessGroup on torch 1.13 (GroupBase below).
//
// Bootstrap: rank 0 makes a Chorus unique id and puts it in the Store that
// init_process_group hands every backend (as NCCL's backend passes its id), the others read
// it there; so env://, tcp://, file:// and torchrun all work, and each process group (a
// PrefixStore of its own) gets its own communicator.
//
// Asynchrony: every operation is started with the nonblocking C API (chorus_i*) on the
// calling thread, which returns at once. One completion thread per process group waits for
// the requests in the order they were issued (Chorus completes them in that order), runs
// what must follow on the host (copying a flat result into a list of tensors, or back into
// a non-contiguous tensor), and then completes the Work and its Future. So work.wait(),
// work.is_completed() and work.get_future() (DistributedDataParallel's communication
// hooks) behave as with Gloo, while the transfer itself progresses on libchorus's own
// progress thread.
//
// Tensors: CPU tensors of float32/64, float16, bfloat16, int8/uint8/int32/int64 (bool as
// uint8 where nothing is reduced). A non-contiguous tensor is staged through a contiguous
// copy (copied back when the operation completes). One tensor per process in the tensor
// lists of allreduce, broadcast, reduce, send and recv (as NCCL with one device per
// process); otherwise a clear error. Device tensors are refused: the backend is registered
// for the cpu device only (Chorus's CUDA stream path is not wired to torch's streams yet).
//
// Shapes that differ between ranks: an uneven all_gather is one allgatherv and an
// all_to_all_single with split sizes one alltoallv, whose counts Chorus checks across the
// ranks, so sizes that disagree between ranks are a mismatch error (on every rank for
// allgatherv; for alltoallv on the ranks whose pairs disagree), never a hang or a write
// past a tensor. A mismatch fails the group's communicator, as in the C API.
//
// Arguments: every tensor list, size, dtype, split list, root and peer is checked on the
// calling rank before anything is allocated or issued, and a bad one raises RuntimeError
// (TORCH_CHECK) naming the operation and the rank. So a bad call made alike on every rank
// fails on every rank at once, and no peer is left waiting on half an operation; and
// Chorus never reads or writes past a tensor because of a split size it trusted.
//
// Send and recv: matched by tag, and recvAnysource from whichever rank sends first, as Gloo
// does. They run on a second communicator made with the group (p2p_), on which Chorus's
// tagged calls match messages as MPI does (include/chorus.h); collectives keep the first.

#include "chorus_work.h"

namespace chorus_torch {

class ProcessGroupChorus : public GroupBase {
 public:
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout, int reproducible)
      : GroupBase(rank, size) {
    chorus_unique_id_t id;
    const std::string key = "chorus/unique_id";
    if (rank == 0) {
      check(chorus_get_unique_id(&id));
      const auto* p = reinterpret_cast<const uint8_t*>(&id);
      store->set(key, std::vector<uint8_t>(p, p + sizeof id));
    } else {
      std::vector<uint8_t> v = store->get(key);
      if (v.size() != sizeof id)
        throw std::runtime_error("chorus: the store's unique id has " +
                                 std::to_string(v.size()) + " bytes, not " +
                                 std::to_string(sizeof id));
      std::memcpy(&id, v.data(), sizeof id);
    }
    check(chorus_comm_init(&comm_, size, &id, rank));
    check(chorus_comm_split(comm_, 0, rank, &p2p_));
    timeout_s_ = timeout.count() / 1000.0;
    if (timeout.count() > 0) {
      check(chorus_comm_set_timeout(comm_, timeout.count() / 1000.0));
      check(chorus_comm_set_timeout(p2p_, timeout.count() / 1000.0));
    }
    // -1: the communicator's own (CHORUS_REPRODUCIBLE).
    if (reproducible >= 0) check(chorus_comm_set_reproducible(comm_, reproducible));
    thread_ = std::thread([this] { completion_loop(); });
  }

  // Adopts comm (from chorus_comm_shrink, chorus_comm_grow, or an init of a new process):
  // this group owns it from here on, also when the constructor fails. Collective over comm
  // (the second communicator for send/recv is split from it).
  ProcessGroupChorus(chorus_comm_t comm, std::chrono::milliseconds timeout)
      : GroupBase(comm_rank(comm), comm_size(comm)) {
    comm_ = comm;
    try {
      check(chorus_comm_split(comm_, 0, getRank(), &p2p_));
      if (timeout.count() > 0) {
        check(chorus_comm_set_timeout(comm_, timeout.count() / 1000.0));
        check(chorus_comm_set_timeout(p2p_, timeout.count() / 1000.0));
      }
    } catch (...) {
      chorus_comm_destroy(p2p_);
      chorus_comm_destroy(comm_);
      throw;
    }
    thread_ = std::thread([this] { completion_loop(); });
  }

  static int comm_rank(chorus_comm_t comm) {
    int r = -1;
    check(chorus_comm_rank(comm, &r));
    return r;
  }

  static int comm_size(chorus_comm_t comm) {
    int n = 0;
    check(chorus_comm_size(comm, &n));
    return n;
  }

  // ---- recovery (chorus.torch.shrink / grow / join) ----

  // Collective over the live ranks, after a failure: the survivors' communicator, for a new
  // group (adopt). This group's communicator is revoked; the group must still be dropped.
  uintptr_t shrink_comm() {
    chorus_comm_t n = nullptr;
    check(chorus_comm_shrink(comm_, 0, &n));
    return reinterpret_cast<uintptr_t>(n);
  }

  std::vector<int> failed_ranks() {
    int count = 0;
    check(chorus_comm_failed_ranks(comm_, nullptr, 0, &count));
    std::vector<int> ranks(static_cast<size_t>(count > 0 ? count : 1));
    check(chorus_comm_failed_ranks(comm_, ranks.data(), count, &count));
    ranks.resize(static_cast<size_t>(count));
    return ranks;
  }

  // Collective: the communicator with nnew more ranks (rank 0 gives the id's bytes).
  uintptr_t grow_comm(int nnew, const std::string& id) {
    chorus_unique_id_t uid;
    chorus_comm_t n = nullptr;
    const bool have = id.size() == sizeof uid;
    if (have) std::memcpy(&uid, id.data(), sizeof uid);
    else if (getRank() == 0)
      throw std::runtime_error("chorus: grow: rank 0: the id has " + std::to_string(id.size()) +
                               " bytes, not " + std::to_string(sizeof uid));
    check(chorus_comm_grow(comm_, nnew, have ? &uid : nullptr, &n));
    return reinterpret_cast<uintptr_t>(n);
  }

  double timeout_seconds() {
    // The group's deadline, for the groups made from it (chorus_comm_set_timeout's value is
    // not readable back: the one this group was made with).
    return timeout_s_;
  }

  double timeout_s_ = 0.0;

  ~ProcessGroupChorus() override {
    {
      std::lock_guard<std::mutex> lock(q_->lock);
      q_->stop = true;
    }
    q_->cv.notify_all();
    // Python drops a group with the GIL held, and the completion thread may need the GIL to
    // finish: releasing the last reference to a tensor whose Python object torch keeps
    // alive from C++ destroys that object. So the join waits without the GIL.
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      thread_.join();
    } else {
      thread_.join();
    }
    q_->open_p2p.reset();  // with the GIL again, if it was held (they hold q_: a cycle)
    q_->finished.clear();
    chorus_comm_destroy(p2p_);
    chorus_comm_destroy(comm_);
  }

  const std::string getBackendName() const override { return "chorus"; }

  // The number of operations this group has issued, the same on every rank of a correct
  // program: TORCH_DISTRIBUTED_DEBUG=DETAIL compares it across ranks before each collective.
  void setSequenceNumberForGroup() override {
    std::lock_guard<std::mutex> lock(q_->lock);
    q_->torch_seq = 0;
  }

  uint64_t getSequenceNumberForGroup() override {
    std::lock_guard<std::mutex> lock(q_->lock);
    return q_->torch_seq;
  }

  static c10::intrusive_ptr<GroupBase> create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const std::chrono::duration<float>& timeout, int reproducible) {
    return c10::make_intrusive<ProcessGroupChorus>(
        store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
        reproducible);
  }

  // ---- registered memory (chorus_mem_alloc; chorus.torch.empty) ----

  // Collective over the group: every rank asks the same bytes. The address, for a tensor
  // made over it in Python; it lives until mem_free or the group's end.
  uintptr_t mem_alloc(size_t bytes) {
    void* p = nullptr;
    check(chorus_mem_alloc(comm_, bytes, &p));
    return reinterpret_cast<uintptr_t>(p);
  }

  void mem_free(uintptr_t ptr) { check(chorus_mem_free(comm_, reinterpret_cast<void*>(ptr))); }

  std::pair<uint64_t, uint64_t> mem_stats() {
    uint64_t calls = 0, bytes = 0;
    check(chorus_mem_stats(comm_, &calls, &bytes));
    return {calls, bytes};
  }

  // ---- collectives ----

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const int rank = getRank();
    const at::Tensor& t = single(tensors, "allreduce", rank);
    const chorus_dtype_t dt = to_dtype(t, true, "allreduce", rank);
    const chorus_op_t op = to_op(opts.reduceOp, "allreduce", rank);
    auto work = make_work(c10d::OpType::ALLREDUCE, tensors);
    at::Tensor buf = staged(work, t);
    chorus_request_t req;
    check(chorus_iallreduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, op, comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    const int rank = getRank();
    require(!tensors.empty(), "allreduce_coalesced", rank, "no tensors");
    check_list(tensors, "allreduce_coalesced", rank);
    const chorus_dtype_t dt = to_dtype(tensors[0], true, "allreduce_coalesced", rank);
    const chorus_op_t op = to_op(opts.reduceOp, "allreduce_coalesced", rank);
    auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, tensors);
    std::vector<at::Tensor> flat_in;
    for (auto& t : tensors) flat_in.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_in);
    work->keep.push_back(flat);
    chorus_request_t req;
    check(chorus_iallreduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), dt, op, comm_, &req));
    std::vector<at::Tensor> outs = tensors;
    work->after = [outs, flat]() mutable {
      int64_t off = 0;
      for (auto& t : outs) {
        t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    };
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const int rank = getRank();
    const at::Tensor& t = single(tensors, "broadcast", rank);
    check_root(opts.rootRank, opts.rootTensor, getSize(), "broadcast", rank);
    const chorus_dtype_t dt = to_dtype(t, false, "broadcast", rank);
    auto work = make_work(c10d::OpType::BROADCAST, tensors);
    at::Tensor buf = staged(work, t);
    chorus_request_t req;
    check(chorus_ibroadcast(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, (int)opts.rootRank,
                            comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const int rank = getRank();
    const at::Tensor& t = single(tensors, "reduce", rank);
    check_root(opts.rootRank, opts.rootTensor, getSize(), "reduce", rank);
    const chorus_dtype_t dt = to_dtype(t, true, "reduce", rank);
    const chorus_op_t op = to_op(opts.reduceOp, "reduce", rank);
    auto work = make_work(c10d::OpType::REDUCE, tensors);
    at::Tensor buf = staged(work, t);
    chorus_request_t req;
    check(chorus_ireduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, op, (int)opts.rootRank,
                         comm_, &req));
    return submit(work, {req});
  }

  // Rank r's tensor goes to outputs[0][r] everywhere. The outputs may differ in size (an
  // uneven all_gather, as torch 2.x allows): then one allgatherv, whose counts are those
  // sizes (the same on every rank, or Chorus reports a mismatch on every rank).
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    const int rank = getRank();
    const int n = getSize();
    const at::Tensor& in = single(inputs, "allgather", rank);
    const chorus_dtype_t dt = to_dtype(in, false, "allgather", rank);
    require(outputs.size() == 1 && (int)outputs[0].size() == n, "allgather", rank,
            "expects one list of world_size (", n, ") output tensors, got ", outputs.size(),
            " lists of ", outputs.empty() ? 0 : outputs[0].size());
    check_list(outputs[0], "allgather", rank, in.scalar_type());
    require(outputs[0][rank].numel() == in.numel(), "allgather", rank, "output tensor ", rank,
            " (this rank's) has ", outputs[0][rank].numel(), " elements, the input ",
            in.numel());
    bool even = true;
    std::vector<size_t> counts(n), displs(n);
    size_t total = 0;
    for (int r = 0; r < n; r++) {
      counts[r] = (size_t)outputs[0][r].numel();
      displs[r] = total;
      total += counts[r];
      even = even && outputs[0][r].numel() == in.numel();
    }
    auto work = make_work(c10d::OpType::ALLGATHER, outputs[0]);
    at::Tensor src = in.contiguous();
    at::Tensor flat = at::empty({(int64_t)total}, in.options());
    work->keep = {src, flat};
    chorus_request_t req;
    if (even)
      check(chorus_iallgather(src.data_ptr(), flat.data_ptr(), src.numel(), dt, comm_, &req));
    else
      check(chorus_iallgatherv(src.data_ptr(), flat.data_ptr(), src.numel(), counts.data(),
                               displs.data(), dt, comm_, &req));
    std::vector<at::Tensor> outs = outputs[0];
    work->after = [outs, flat, displs]() mutable {
      for (size_t r = 0; r < outs.size(); r++)
        outs[r].copy_(flat.narrow(0, (int64_t)displs[r], outs[r].numel()).view(outs[r].sizes()));
    };
    return submit(work, {req});
  }

  // Rooted: rank r's tensor lands in outputs[0][r] on the root; the other ranks pass no
  // output list (as Gloo wants).
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    const int rank = getRank();
    const int n = getSize();
    const at::Tensor& in = single(inputs, "gather", rank);
    check_root(opts.rootRank, 0, n, "gather", rank);
    const chorus_dtype_t dt = to_dtype(in, false, "gather", rank);
    const int root = (int)opts.rootRank;
    if (rank == root) {
      require(outputs.size() == 1 && (int)outputs[0].size() == n, "gather", rank,
              "the root expects one list of world_size (", n, ") output tensors, got ",
              outputs.size(), " lists of ", outputs.empty() ? 0 : outputs[0].size());
      check_list(outputs[0], "gather", rank, in.scalar_type());
      for (int r = 0; r < n; r++)
        require(outputs[0][r].numel() == in.numel(), "gather", rank, "output tensor ", r,
                " has ", outputs[0][r].numel(), " elements, the input ", in.numel());
    } else {
      require(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "gather", rank,
              "only the root (", root, ") takes output tensors");
    }
    std::vector<at::Tensor> outs = rank == root ? outputs[0] : std::vector<at::Tensor>{};
    auto work = make_work(c10d::OpType::GATHER, outs);
    at::Tensor src = in.contiguous();
    at::Tensor flat;
    if (rank == root) flat = at::empty({(int64_t)n * in.numel()}, in.options());
    work->keep = {src};
    if (flat.defined()) work->keep.push_back(flat);
    chorus_request_t req;
    check(chorus_igather(src.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, src.numel(),
                         dt, root, comm_, &req));
    if (rank == root) {
      const int64_t len = in.numel();
      work->after = [outs, flat, len]() mutable {
        for (size_t r = 0; r < outs.size(); r++)
          outs[r].copy_(flat.narrow(0, (int64_t)r * len, len).view(outs[r].sizes()));
      };
    }
    return submit(work, {req});
  }

  // Rooted: inputs[0][r] on the root goes to rank r's outputs[0].
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    const int rank = getRank();
    const int n = getSize();
    const at::Tensor& out = single(outputs, "scatter", rank);
    check_root(opts.rootRank, 0, n, "scatter", rank);
    const chorus_dtype_t dt = to_dtype(out, false, "scatter", rank);
    const int root = (int)opts.rootRank;
    at::Tensor flat;
    if (rank == root) {
      require(inputs.size() == 1 && (int)inputs[0].size() == n, "scatter", rank,
              "the root expects one list of world_size (", n, ") input tensors, got ",
              inputs.size(), " lists of ", inputs.empty() ? 0 : inputs[0].size());
      check_list(inputs[0], "scatter", rank, out.scalar_type());
      std::vector<at::Tensor> flat_in;
      for (int r = 0; r < n; r++) {
        require(inputs[0][r].numel() == out.numel(), "scatter", rank, "input tensor ", r,
                " has ", inputs[0][r].numel(), " elements, the output ", out.numel());
        flat_in.push_back(inputs[0][r].reshape({-1}));
      }
      flat = at::cat(flat_in);
    } else {
      require(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "scatter", rank,
              "only the root (", root, ") takes input tensors");
    }
    auto work = make_work(c10d::OpType::SCATTER, outputs);
    at::Tensor dst = staged(work, out);
    if (flat.defined()) work->keep.push_back(flat);
    chorus_request_t req;
    check(chorus_iscatter(flat.defined() ? flat.data_ptr() : nullptr, dst.data_ptr(), dst.numel(),
                          dt, root, comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    const int rank = getRank();
    check_list({input, output}, "_allgather_base", rank);
    const chorus_dtype_t dt = to_dtype(input, false, "_allgather_base", rank);
    require(output.numel() == input.numel() * getSize(), "_allgather_base", rank,
            "the output has ", output.numel(), " elements, not world_size (", getSize(),
            ") x the input's ", input.numel());
    std::vector<at::Tensor> outs = {output};
    auto work = make_work(c10d::OpType::_ALLGATHER_BASE, outs);
    at::Tensor src = input.contiguous();
    at::Tensor dst = staged(work, output);
    work->keep.push_back(src);
    chorus_request_t req;
    check(chorus_iallgather(src.data_ptr(), dst.data_ptr(), src.numel(), dt, comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const int rank = getRank();
    const at::Tensor& out = single(outputs, "reduce_scatter", rank);
    const chorus_dtype_t dt = to_dtype(out, true, "reduce_scatter", rank);
    const chorus_op_t op = to_op(opts.reduceOp, "reduce_scatter", rank);
    require(inputs.size() == 1 && (int)inputs[0].size() == getSize(), "reduce_scatter", rank,
            "expects one list of world_size (", getSize(), ") input tensors, got ",
            inputs.size(), " lists of ", inputs.empty() ? 0 : inputs[0].size());
    check_list(inputs[0], "reduce_scatter", rank, out.scalar_type());
    std::vector<at::Tensor> flat_in;
    for (size_t i = 0; i < inputs[0].size(); i++) {
      require(inputs[0][i].numel() == out.numel(), "reduce_scatter", rank, "input tensor ", i,
              " has ", inputs[0][i].numel(), " elements, the output ", out.numel());
      flat_in.push_back(inputs[0][i].reshape({-1}));
    }
    auto work = make_work(c10d::OpType::REDUCE_SCATTER, outputs);
    at::Tensor flat = at::cat(flat_in);
    at::Tensor dst = staged(work, out);
    work->keep.push_back(flat);
    chorus_request_t req;
    check(chorus_ireduce_scatter(flat.data_ptr(), dst.data_ptr(), dst.numel(), dt, op, comm_,
                                 &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    const int rank = getRank();
    check_list({input, output}, "_reduce_scatter_base", rank);
    const chorus_dtype_t dt = to_dtype(output, true, "_reduce_scatter_base", rank);
    const chorus_op_t op = to_op(opts.reduceOp, "_reduce_scatter_base", rank);
    require(input.numel() == output.numel() * getSize(), "_reduce_scatter_base", rank,
            "the input has ", input.numel(), " elements, not world_size (", getSize(),
            ") x the output's ", output.numel());
    std::vector<at::Tensor> outs = {output};
    auto work = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, outs);
    at::Tensor src = input.contiguous();
    at::Tensor dst = staged(work, output);
    work->keep.push_back(src);
    chorus_request_t req;
    check(chorus_ireduce_scatter(src.data_ptr(), dst.data_ptr(), dst.numel(), dt, op, comm_,
                                 &req));
    return submit(work, {req});
  }

  // torch's layout: output_lists[r][i] receives rank r's inputs[i]. One allgather of the
  // inputs laid end to end (so one message per step whatever the number of tensors), then
  // each rank's block of each tensor copied to its output.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions&) override {
    static const char* const kOp = "allgather_coalesced";
    const int rank = getRank();
    const int n = getSize();
    require(!inputs.empty(), kOp, rank, "no input tensors");
    require((int)output_lists.size() == n, kOp, rank, "expects world_size (", n,
            ") output lists, one per rank, got ", output_lists.size());
    check_list(inputs, kOp, rank);
    const chorus_dtype_t dt = to_dtype(inputs[0], false, kOp, rank);
    std::vector<at::Tensor> flat_in, all_outs;
    for (int r = 0; r < n; r++) {
      require(output_lists[r].size() == inputs.size(), kOp, rank, "output list ", r, " has ",
              output_lists[r].size(), " tensors, not one per input (", inputs.size(), ")");
      check_list(output_lists[r], kOp, rank, inputs[0].scalar_type());
      for (size_t i = 0; i < inputs.size(); i++)
        require(output_lists[r][i].numel() == inputs[i].numel(), kOp, rank, "output ", r, "[",
                i, "] has ", output_lists[r][i].numel(), " elements, input ", i, " ",
                inputs[i].numel());
      all_outs.insert(all_outs.end(), output_lists[r].begin(), output_lists[r].end());
    }
    for (auto& t : inputs) flat_in.push_back(t.reshape({-1}));
    auto work = make_work(c10d::OpType::ALLGATHER_COALESCED, all_outs);
    at::Tensor src = at::cat(flat_in);
    const int64_t total = src.numel();
    at::Tensor flat = at::empty({(int64_t)n * total}, src.options());
    work->keep = {src, flat};
    chorus_request_t req;
    check(chorus_iallgather(src.data_ptr(), flat.data_ptr(), total, dt, comm_, &req));
    std::vector<std::vector<at::Tensor>> outs = output_lists;
    work->after = [outs, flat, total]() mutable {
      for (size_t r = 0; r < outs.size(); r++) {
        int64_t off = 0;
        for (auto& t : outs[r]) {
          t.copy_(flat.narrow(0, (int64_t)r * total + off, t.numel()).view(t.sizes()));
          off += t.numel();
        }
      }
    };
    return submit(work, {req});
  }

#if TORCH_VERSION_MAJOR >= 2
  // torch 2.x's coalesced forms of all_gather_into_tensor and reduce_scatter_tensor
  // (_coalescing_manager, FSDP): one Chorus collective per pair, issued back to back without
  // waiting, completed together as one Work.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions&) override {
    static const char* const kOp = "allgather_into_tensor_coalesced";
    const int rank = getRank();
    require(outputs.size() == inputs.size(), kOp, rank, inputs.size(), " inputs but ",
            outputs.size(), " outputs");
    for (size_t i = 0; i < inputs.size(); i++) {
      check_list({inputs[i], outputs[i]}, kOp, rank);
      to_dtype(inputs[i], false, kOp, rank);
      require(outputs[i].numel() == inputs[i].numel() * getSize(), kOp, rank, "output ", i,
              " has ", outputs[i].numel(), " elements, not world_size (", getSize(),
              ") x input ", i, "'s ", inputs[i].numel());
    }
    auto work = make_work(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, outputs);
    return submit_pairs(work, outputs, inputs, [&](const at::Tensor& src, const at::Tensor& dst) {
      chorus_request_t req;
      check(chorus_iallgather(src.data_ptr(), dst.data_ptr(), src.numel(),
                              to_dtype(src, false, kOp, rank), comm_, &req));
      return req;
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    static const char* const kOp = "reduce_scatter_tensor_coalesced";
    const int rank = getRank();
    require(outputs.size() == inputs.size(), kOp, rank, inputs.size(), " inputs but ",
            outputs.size(), " outputs");
    const chorus_op_t op = to_op(opts.reduceOp, kOp, rank);
    for (size_t i = 0; i < inputs.size(); i++) {
      check_list({inputs[i], outputs[i]}, kOp, rank);
      to_dtype(outputs[i], true, kOp, rank);
      require(inputs[i].numel() == outputs[i].numel() * getSize(), kOp, rank, "input ", i,
              " has ", inputs[i].numel(), " elements, not world_size (", getSize(),
              ") x output ", i, "'s ", outputs[i].numel());
    }
    auto work = make_work(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, outputs);
    return submit_pairs(work, outputs, inputs, [&](const at::Tensor& src, const at::Tensor& dst) {
      chorus_request_t req;
      check(chorus_ireduce_scatter(src.data_ptr(), dst.data_ptr(), dst.numel(),
                                   to_dtype(dst, true, kOp, rank), op, comm_, &req));
      return req;
    });
  }

 private:
  // One collective per (inputs[i], outputs[i]) pair, issued back to back by issue(src, dst)
  // on contiguous buffers (dst staged back into a non-contiguous output), one Work for all.
  c10::intrusive_ptr<c10d::Work> submit_pairs(
      const c10::intrusive_ptr<ChorusWork>& work, const std::vector<at::Tensor>& outputs,
      const std::vector<at::Tensor>& inputs,
      const std::function<chorus_request_t(const at::Tensor&, const at::Tensor&)>& issue) {
    std::vector<chorus_request_t> reqs;
    for (size_t i = 0; i < inputs.size(); i++) {
      at::Tensor src = inputs[i].contiguous();
      at::Tensor dst = staged(work, outputs[i]);
      work->keep.push_back(src);
      reqs.push_back(issue(src, dst));
    }
    return submit(work, reqs);
  }

 public:
#endif

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions&) override {
    static const char* const kOp = "all_to_all_single (alltoall_base)";
    const int rank = getRank();
    const int n = getSize();
    check_list({input, output}, kOp, rank);
    const chorus_dtype_t dt = to_dtype(input, false, kOp, rank);
    require(input.dim() > 0 && output.dim() > 0, kOp, rank,
            "a 0-dimensional tensor has no first dimension to split");
    if (out_splits.empty() && in_splits.empty()) {
      require(input.numel() == output.numel() && input.size(0) % n == 0, kOp, rank,
              "equal splits need input and output of the same size (", input.numel(), " and ",
              output.numel(), " elements), the first dimension (", input.size(0),
              ") a multiple of world_size (", n, ")");
      std::vector<at::Tensor> outs = {output};
      auto work = make_work(c10d::OpType::ALLTOALL_BASE, outs);
      at::Tensor src = input.contiguous();
      at::Tensor dst = staged(work, output);
      work->keep.push_back(src);
      chorus_request_t req;
      check(chorus_ialltoall(src.data_ptr(), dst.data_ptr(), src.numel() / n, dt, comm_, &req));
      return submit(work, {req});
    }
    // Uneven splits: every row count checked against the tensor it indexes before any
    // pointer is formed, then one alltoallv (whose counts Chorus checks pairwise: my send
    // to p must be p's receive from me, or both get a mismatch).
    const std::vector<int64_t> in_s = checked_splits(in_splits, input, "input", kOp);
    const std::vector<int64_t> out_s = checked_splits(out_splits, output, "output", kOp);
    std::vector<at::Tensor> outs = {output};
    auto work = make_work(c10d::OpType::ALLTOALL_BASE, outs);
    at::Tensor src = input.contiguous();
    at::Tensor dst = staged(work, output);
    work->keep.push_back(src);
    const int64_t row_in = input.size(0) > 0 ? input.numel() / input.size(0) : 0;
    const int64_t row_out = output.size(0) > 0 ? output.numel() / output.size(0) : 0;
    std::vector<size_t> scounts(n), sdispls(n), rcounts(n), rdispls(n);
    int64_t soff = 0, doff = 0;
    for (int p = 0; p < n; p++) {
      scounts[p] = (size_t)(in_s[p] * row_in);
      sdispls[p] = (size_t)(soff * row_in);
      rcounts[p] = (size_t)(out_s[p] * row_out);
      rdispls[p] = (size_t)(doff * row_out);
      soff += in_s[p];
      doff += out_s[p];
    }
    chorus_request_t req;
    check(chorus_ialltoallv(src.data_ptr(), dst.data_ptr(), scounts.data(), sdispls.data(),
                            rcounts.data(), rdispls.data(), dt, comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    static const char* const kOp = "all_to_all (alltoall)";
    const int rank = getRank();
    const int n = getSize();
    require((int)outputs.size() == n && (int)inputs.size() == n, kOp, rank,
            "expects world_size (", n, ") input and output tensors, got ", inputs.size(),
            " and ", outputs.size());
    check_list(inputs, kOp, rank);
    check_list(outputs, kOp, rank, inputs[0].scalar_type());
    const chorus_dtype_t dt = to_dtype(inputs[0], false, kOp, rank);
    auto work = make_work(c10d::OpType::ALLTOALL, outputs);
    work->is_p2p = true;
    std::vector<chorus_request_t> reqs;
    for (int p = 0; p < n; p++) {
      at::Tensor src = inputs[p].contiguous();
      at::Tensor dst = staged(work, outputs[p]);
      work->keep.push_back(src);
      chorus_request_t rs, rr;
      check(chorus_isend(src.data_ptr(), src.numel(), dt, p, comm_, &rs));
      check(chorus_irecv(dst.data_ptr(), dst.numel(), dt, p, comm_, &rr));
      reqs.push_back(rs);
      reqs.push_back(rr);
    }
    return submit(work, reqs);
  }

  // Matched by tag on p2p_ (the file's head): a send completes once the peer's receive took
  // it; a dtype or size the receive does not share fails both Works.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override {
    const int rank = getRank();
    const at::Tensor& t = single(tensors, "send", rank);
    check_peer(dst, tag, getSize(), "send", rank);
    const chorus_dtype_t dt = to_dtype(t, false, "send", rank);
    auto work = make_work(c10d::OpType::SEND, {});
    work->tagged = true;
    at::Tensor src = t.contiguous();
    work->keep.push_back(src);
    chorus_request_t req;
    check(chorus_tagged_isend(src.data_ptr(), src.numel(), dt, dst, tag, p2p_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override {
    return receive(tensors, src, tag, "recv");
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override {
    return receive(tensors, CHORUS_ANY_SOURCE, tag, "recv (any source)");
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    auto work = make_work(c10d::OpType::BARRIER, {});
    chorus_request_t req;
    check(chorus_ibarrier(comm_, &req));
    return submit(work, {req});
  }

 private:
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int src, int tag,
                                         const char* op) {
    const int rank = getRank();
    const at::Tensor& t = single(tensors, op, rank);
    if (src == CHORUS_ANY_SOURCE)
      require(tag >= 0, op, rank, "tag ", tag, " is negative");
    else
      check_peer(src, tag, getSize(), op, rank);
    const chorus_dtype_t dt = to_dtype(t, false, op, rank);
    auto work = make_work(
        src == CHORUS_ANY_SOURCE ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV, tensors);
    work->tagged = true;
    if (src != CHORUS_ANY_SOURCE) work->source = src;
    at::Tensor dst = staged(work, t);
    chorus_request_t req;
    check(chorus_tagged_irecv(dst.data_ptr(), dst.numel(), dt, src, tag, p2p_, &work->source,
                              &req));
    return submit(work, {req});
  }

  // One side's split sizes of all_to_all_single, as row counts per peer: world_size entries,
  // none negative, adding up to the first dimension of t (the sum never overflows: each
  // entry is checked against what is left of it); or none given, for equal blocks (the first
  // dimension then a multiple of world_size).
  std::vector<int64_t> checked_splits(const std::vector<int64_t>& given, const at::Tensor& t,
                                      const char* side, const char* op) {
    const int rank = getRank();
    const int n = getSize();
    const int64_t rows = t.size(0);
    if (given.empty()) {
      require(rows % n == 0, op, rank, "no ", side, " split sizes, so equal blocks: the ", side,
              "'s first dimension (", rows, ") must be a multiple of world_size (", n, ")");
      return std::vector<int64_t>(n, rows / n);
    }
    require((int64_t)given.size() == n, op, rank, side, " split sizes [", c10::Join(", ", given),
            "] have ", given.size(), " entries, not world_size (", n, ")");
    int64_t left = rows;
    for (int p = 0; p < n; p++) {
      require(given[p] >= 0, op, rank, side, " split size ", p, " is negative: [",
              c10::Join(", ", given), "]");
      require(given[p] <= left, op, rank, side, " split sizes [", c10::Join(", ", given),
              "] add up to more than the ", side, "'s first dimension (", rows, ")");
      left -= given[p];
    }
    require(left == 0, op, rank, side, " split sizes [", c10::Join(", ", given), "] add up to ",
            rows - left, ", not the ", side, "'s first dimension (", rows, ")");
    return given;
  }

  c10::intrusive_ptr<ChorusWork> make_work(c10d::OpType type, std::vector<at::Tensor> outputs) {
    return c10::make_intrusive<ChorusWork>(getRank(), type, std::move(outputs));
  }

  // The contiguous buffer an operation writes for t: t itself, or a copy that goes back
  // into t when the operation completes.
  at::Tensor staged(const c10::intrusive_ptr<ChorusWork>& work, const at::Tensor& t) {
    if (t.is_contiguous()) return t;
    at::Tensor c = t.contiguous();
    work->keep.push_back(c);
    at::Tensor target = t;
    auto prev = std::move(work->after);
    work->after = [prev, target, c]() mutable {
      if (prev) prev();
      target.copy_(c);
    };
    return c;
  }

  c10::intrusive_ptr<c10d::Work> submit(const c10::intrusive_ptr<ChorusWork>& work,
                                        std::vector<chorus_request_t> reqs) {
    work->requests = std::move(reqs);
    work->queue = q_;
    std::vector<c10::intrusive_ptr<ChorusWork>> finished;  // released here, unlocked
    {
      std::lock_guard<std::mutex> lock(q_->lock);
      work->seq = ++q_->issued;
      q_->torch_seq++;
      // A collective starts the open batch itself (chorus.h); a send or receive joins it.
      if (work->is_p2p)
        q_->open_p2p = work;
      else
        q_->open_p2p.reset();
      q_->works.push_back(work);
      finished.swap(q_->finished);
    }
    q_->cv.notify_all();
    return work;
  }

  // Works complete in issue order, each waited for in turn, except tagged sends and
  // receives: one of those may need a later receive of this rank to be matched first (a
  // send under tag 1, then a receive under tag 2 that the peer answers before it takes tag
  // 1), so they are polled, together, and complete in whatever order they finish. While
  // any is pending the thread polls everything and sleeps between rounds (50 us growing to
  // 1 ms); with none it blocks in chorus_wait as before, costing nothing.
  void completion_loop() {
    std::vector<c10::intrusive_ptr<ChorusWork>> tagged;
    c10::intrusive_ptr<ChorusWork> current;  // the collective (or batch) being completed
    auto nap = std::chrono::microseconds(50);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(q_->lock);
        // Whether the front Work may be taken: a send/receive batch only once it is closed
        // (ChorusWork::kick).
        auto front_ready = [&] {
          if (q_->works.empty()) return false;
          const auto& w = q_->works.front();
          if (w->tagged || !w->is_p2p || q_->stop || w->seq <= q_->kick_seq) return true;
          for (const auto& later : q_->works)
            if (!later->is_p2p && !later->tagged) return true;
          return false;
        };
        auto take = [&] {
          while (front_ready() && (q_->works.front()->tagged || !current)) {
            auto w = q_->works.front();
            q_->works.pop_front();
            if (w->tagged) tagged.push_back(std::move(w));
            else current = std::move(w);
          }
        };
        take();
        if (!current && tagged.empty()) {
          q_->cv.wait(lock, [&] { return q_->stop || front_ready(); });
          if (q_->works.empty() && q_->stop) return;  // stop, and nothing left
          take();
        }
      }
      if (current && tagged.empty()) {
        current->complete();
        finish_works({current});
        current.reset();
        continue;
      }
      std::vector<c10::intrusive_ptr<ChorusWork>> done;
      if (current && current->poll()) {
        done.push_back(current);
        current.reset();
      }
      for (size_t i = 0; i < tagged.size();) {
        if (tagged[i]->poll()) {
          done.push_back(tagged[i]);
          tagged.erase(tagged.begin() + i);
        } else {
          i++;
        }
      }
      if (!done.empty()) {
        finish_works(done);
        nap = std::chrono::microseconds(50);
        continue;
      }
      std::unique_lock<std::mutex> lock(q_->lock);
      if (q_->stop && q_->works.empty() && !current) {
        // The group is going away with sends or receives nothing matched: they end here
        // (their requests are left to the communicator's destruction, which ends them).
        lock.unlock();
        for (auto& w : tagged) {
          for (auto& r : w->requests) chorus_request_free(&r);
          if (w->early_msg.empty())
            w->early_msg = "chorus: the process group was destroyed while this send or "
                           "receive waited for its match";
          w->settle();
        }
        finish_works(tagged);
        return;
      }
      q_->cv.wait_for(lock, nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }

  void finish_works(const std::vector<c10::intrusive_ptr<ChorusWork>>& done) {
    std::lock_guard<std::mutex> lock(q_->lock);
    for (const auto& w : done) q_->finished.push_back(w);
  }

  chorus_comm_t comm_ = nullptr;
  chorus_comm_t p2p_ = nullptr;  // tagged sends and receives only
  std::shared_ptr<CompletionQueue> q_ = std::make_shared<CompletionQueue>();
  std::thread thread_;
};

}  // namespace chorus_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The chorus backend of torch.distributed (registered by import chorus.torch)";
  py::class_<chorus_torch::ProcessGroupChorus, chorus_torch::GroupBase,
             c10::intrusive_ptr<chorus_torch::ProcessGroupChorus>>(m, "ProcessGroupChorus")
      .def("mem_alloc", &chorus_torch::ProcessGroupChorus::mem_alloc, py::arg("bytes"),
           py::call_guard<py::gil_scoped_release>(),
           "Collective: registered memory of this group's communicator (chorus_mem_alloc).")
      .def("mem_free", &chorus_torch::ProcessGroupChorus::mem_free, py::arg("ptr"),
           py::call_guard<py::gil_scoped_release>(), "Collective: chorus_mem_free.")
      .def("mem_stats", &chorus_torch::ProcessGroupChorus::mem_stats,
           "chorus_mem_stats: (single-copy calls, bytes read from peers' buffers).")
      .def("shrink_comm", &chorus_torch::ProcessGroupChorus::shrink_comm,
           py::call_guard<py::gil_scoped_release>(),
           "Collective over the live ranks: chorus_comm_shrink; the new comm's handle.")
      .def("failed_ranks", &chorus_torch::ProcessGroupChorus::failed_ranks,
           "chorus_comm_failed_ranks: the ranks the survivors agreed were lost.")
      .def("grow_comm", &chorus_torch::ProcessGroupChorus::grow_comm, py::arg("nnew"),
           py::arg("id"), py::call_guard<py::gil_scoped_release>(),
           "Collective: chorus_comm_grow; the new comm's handle (rank 0 gives the id).")
      .def("timeout_seconds", &chorus_torch::ProcessGroupChorus::timeout_seconds);
  m.def("create_process_group", &chorus_torch::ProcessGroupChorus::create, py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("reproducible") = -1,
        py::call_guard<py::gil_scoped_release>(),
        "Makes a Chorus process group (torch.distributed calls it through the registered "
        "backend).");
  m.def(
      "adopt_comm",
      [](uintptr_t comm, double timeout_s) {
        auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
        auto pg = c10::make_intrusive<chorus_torch::ProcessGroupChorus>(
            reinterpret_cast<chorus_comm_t>(comm), ms);
        pg->timeout_s_ = timeout_s;
        return pg;
      },
      py::arg("comm"), py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>(),
      "A Chorus process group over a communicator handle (from shrink_comm or grow_comm), "
      "which it owns from then on. Collective over the communicator.");
  m.def(
      "join_comm",
      [](const std::string& id, int size, int rank, double timeout_s) {
        chorus_unique_id_t uid;
        chorus_comm_t comm = nullptr;
        if (id.size() != sizeof uid)
          throw std::runtime_error("chorus: join: the id has " + std::to_string(id.size()) +
                                   " bytes, not " + std::to_string(sizeof uid));
        std::memcpy(&uid, id.data(), sizeof uid);
        chorus_torch::check(chorus_comm_init(&comm, size, &uid, rank));
        auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
        auto pg = c10::make_intrusive<chorus_torch::ProcessGroupChorus>(comm, ms);
        pg->timeout_s_ = timeout_s;
        return pg;
      },
      py::arg("id"), py::arg("size"), py::arg("rank"), py::arg("timeout_s"),
      py::call_guard<py::gil_scoped_release>(),
      "A new process's side of a grow: chorus_comm_init on the id, as rank `rank` of `size`.");
  m.def("build_info", []() { return std::string(chorus_build_info()); });
  m.attr("torch_version_major") = TORCH_VERSION_MAJOR;
}
