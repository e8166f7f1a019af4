// The "chorus" backend of torch.distributed: a c10d::ProcessGroup over libchorus.
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
// process); otherwise a clear error. Device tensors are refused: this Debian torch is a CPU
// build, so the CUDA stream path of Chorus cannot be reached through it.

#include <chorus.h>

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace chorus_torch {

namespace {

std::string chorus_message(chorus_status_t status) {
  return std::string("chorus: ") + chorus_status_string(status) + ": " + chorus_last_error();
}

void check(chorus_status_t status) {
  if (status != CHORUS_SUCCESS) throw std::runtime_error(chorus_message(status));
}

chorus_dtype_t to_dtype(const at::Tensor& t, bool reducing, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return CHORUS_FLOAT32;
    case at::kDouble: return CHORUS_FLOAT64;
    case at::kHalf: return CHORUS_FLOAT16;
    case at::kBFloat16: return CHORUS_BFLOAT16;
    case at::kChar: return CHORUS_INT8;
    case at::kByte: return CHORUS_UINT8;
    case at::kInt: return CHORUS_INT32;
    case at::kLong: return CHORUS_INT64;
    case at::kBool:
      if (!reducing) return CHORUS_UINT8;
      break;
    default: break;
  }
  throw std::invalid_argument(std::string("chorus: ") + what + ": dtype " +
                              std::string(c10::toString(t.scalar_type())) +
                              " is not supported (float32/64, float16, bfloat16, int8, uint8, "
                              "int32, int64)");
}

chorus_op_t to_op(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return CHORUS_SUM;
    case c10d::ReduceOp::PRODUCT: return CHORUS_PROD;
    case c10d::ReduceOp::MIN: return CHORUS_MIN;
    case c10d::ReduceOp::MAX: return CHORUS_MAX;
    case c10d::ReduceOp::AVG: return CHORUS_AVG;
    default: break;
  }
  throw std::invalid_argument(std::string("chorus: ") + what +
                              ": only SUM, PRODUCT, MIN, MAX and AVG are supported");
}

void check_cpu(const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu())
    throw std::invalid_argument(std::string("chorus: ") + what + ": a " +
                                t.device().str() +
                                " tensor; this build of the backend takes CPU tensors");
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* what) {
  if (ts.size() != 1)
    throw std::invalid_argument(std::string("chorus: ") + what + ": expects one tensor per "
                                "process, got " + std::to_string(ts.size()));
  check_cpu(ts[0], what);
  return ts[0];
}

}  // namespace

// The completion queue, shared by the process group and its Works (a Work may outlive its
// group): the lock, the condition both sides wait on, and the Works in issue order.
struct CompletionQueue {
  std::mutex lock;
  std::condition_variable cv;
  std::deque<c10::intrusive_ptr<class ChorusWork>> works;
  bool stop = false;
};

// One operation: its Chorus requests, what runs after them, and its result tensors.
class ChorusWork : public c10d::Work {
 public:
  ChorusWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<at::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  bool isCompleted() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (completed_) return true;
    }
    kick();
    return false;
  }

  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ && !exception_;
  }

  bool wait(std::chrono::milliseconds timeout) override {
    kick();
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      throw std::runtime_error("chorus: Work.wait: timed out after " +
                               std::to_string(timeout.count()) + " ms");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    kick();  // whoever asks for the future is about to wait on it
    return future_;
  }

  // Completion thread: every request, then the host work, then the Work and its Future.
  void complete() {
    std::exception_ptr error;
    std::string msg;
    for (auto& r : requests) {
      chorus_status_t st = chorus_wait(&r);
      if (st != CHORUS_SUCCESS && msg.empty()) msg = chorus_message(st);
    }
    if (msg.empty() && after) {
      try {
        after();
      } catch (...) {
        error = std::current_exception();
      }
    } else if (!msg.empty()) {
      error = std::make_exception_ptr(std::runtime_error(msg));
    }
    keep.clear();
    after = nullptr;
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }

  // Sends and receives: Chorus starts the batch of consecutive isend/irecv at the first wait
  // on one of them, so the completion thread must not wait for this Work's requests before
  // the batch is complete: until a later operation was issued (it is then in the batch, or
  // has closed it) or the caller waits for or polls this Work (kick).
  void kick() {
    if (!is_p2p || !queue) return;
    {
      std::lock_guard<std::mutex> lock(queue->lock);
      kicked = true;
    }
    queue->cv.notify_all();
  }

  std::vector<chorus_request_t> requests;
  std::function<void()> after;  // on success, after every request
  std::vector<at::Tensor> keep;  // staging buffers alive until the end
  bool is_p2p = false;
  bool kicked = false;  // under queue->lock
  std::shared_ptr<CompletionQueue> queue;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
};

class ProcessGroupChorus : public c10d::ProcessGroup {
 public:
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout, int reproducible)
      : c10d::ProcessGroup(rank, size) {
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
    if (timeout.count() > 0) check(chorus_comm_set_timeout(comm_, timeout.count() / 1000.0));
    // -1: the communicator's own (CHORUS_REPRODUCIBLE).
    if (reproducible >= 0) check(chorus_comm_set_reproducible(comm_, reproducible));
    thread_ = std::thread([this] { completion_loop(); });
  }

  ~ProcessGroupChorus() override {
    {
      std::lock_guard<std::mutex> lock(q_->lock);
      q_->stop = true;
    }
    q_->cv.notify_all();
    thread_.join();
    chorus_comm_destroy(comm_);
  }

  const std::string getBackendName() const override { return "chorus"; }

  static c10::intrusive_ptr<c10d::ProcessGroup> create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const std::chrono::duration<float>& timeout, int reproducible) {
    return c10::make_intrusive<ProcessGroupChorus>(
        store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
        reproducible);
  }

  // ---- collectives ----

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const at::Tensor& t = single(tensors, "allreduce");
    auto work = make_work(c10d::OpType::ALLREDUCE, tensors);
    at::Tensor buf = staged(work, t);
    chorus_request_t req;
    check(chorus_iallreduce(buf.data_ptr(), buf.data_ptr(), buf.numel(),
                            to_dtype(t, true, "allreduce"), to_op(opts.reduceOp, "allreduce"),
                            comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    if (tensors.empty()) throw std::invalid_argument("chorus: allreduce_coalesced: no tensors");
    for (auto& t : tensors) {
      check_cpu(t, "allreduce_coalesced");
      if (t.scalar_type() != tensors[0].scalar_type())
        throw std::invalid_argument("chorus: allreduce_coalesced: tensors differ in dtype");
    }
    auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, tensors);
    std::vector<at::Tensor> flat_in;
    for (auto& t : tensors) flat_in.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_in);
    work->keep.push_back(flat);
    chorus_request_t req;
    check(chorus_iallreduce(flat.data_ptr(), flat.data_ptr(), flat.numel(),
                            to_dtype(tensors[0], true, "allreduce_coalesced"),
                            to_op(opts.reduceOp, "allreduce_coalesced"), comm_, &req));
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
    const at::Tensor& t = single(tensors, "broadcast");
    auto work = make_work(c10d::OpType::BROADCAST, tensors);
    at::Tensor buf = staged(work, t);
    chorus_request_t req;
    check(chorus_ibroadcast(buf.data_ptr(), buf.data_ptr(), buf.numel(),
                            to_dtype(t, false, "broadcast"), (int)opts.rootRank, comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const at::Tensor& t = single(tensors, "reduce");
    auto work = make_work(c10d::OpType::REDUCE, tensors);
    at::Tensor buf = staged(work, t);
    chorus_request_t req;
    check(chorus_ireduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), to_dtype(t, true, "reduce"),
                         to_op(opts.reduceOp, "reduce"), (int)opts.rootRank, comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    const at::Tensor& in = single(inputs, "allgather");
    if (outputs.size() != 1 || (int)outputs[0].size() != getSize())
      throw std::invalid_argument("chorus: allgather: expects one list of " +
                                  std::to_string(getSize()) + " output tensors");
    for (auto& o : outputs[0]) {
      check_cpu(o, "allgather");
      if (o.numel() != in.numel() || o.scalar_type() != in.scalar_type())
        throw std::invalid_argument("chorus: allgather: every output tensor must have the "
                                    "input's size and dtype");
    }
    auto work = make_work(c10d::OpType::ALLGATHER, outputs[0]);
    at::Tensor src = in.contiguous();
    at::Tensor flat = at::empty({(int64_t)getSize() * in.numel()}, in.options());
    work->keep = {src, flat};
    chorus_request_t req;
    check(chorus_iallgather(src.data_ptr(), flat.data_ptr(), src.numel(),
                            to_dtype(in, false, "allgather"), comm_, &req));
    std::vector<at::Tensor> outs = outputs[0];
    int64_t n = in.numel();
    work->after = [outs, flat, n]() mutable {
      for (size_t r = 0; r < outs.size(); r++)
        outs[r].copy_(flat.narrow(0, (int64_t)r * n, n).view(outs[r].sizes()));
    };
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    check_cpu(input, "_allgather_base");
    check_cpu(output, "_allgather_base");
    if (output.numel() != input.numel() * getSize() ||
        output.scalar_type() != input.scalar_type())
      throw std::invalid_argument("chorus: _allgather_base: the output must hold world_size x "
                                  "the input, same dtype");
    std::vector<at::Tensor> outs = {output};
    auto work = make_work(c10d::OpType::_ALLGATHER_BASE, outs);
    at::Tensor src = input.contiguous();
    at::Tensor dst = staged(work, output);
    work->keep.push_back(src);
    chorus_request_t req;
    check(chorus_iallgather(src.data_ptr(), dst.data_ptr(), src.numel(),
                            to_dtype(input, false, "_allgather_base"), comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const at::Tensor& out = single(outputs, "reduce_scatter");
    if (inputs.size() != 1 || (int)inputs[0].size() != getSize())
      throw std::invalid_argument("chorus: reduce_scatter: expects one list of " +
                                  std::to_string(getSize()) + " input tensors");
    std::vector<at::Tensor> flat_in;
    for (auto& t : inputs[0]) {
      check_cpu(t, "reduce_scatter");
      if (t.numel() != out.numel() || t.scalar_type() != out.scalar_type())
        throw std::invalid_argument("chorus: reduce_scatter: every input tensor must have the "
                                    "output's size and dtype");
      flat_in.push_back(t.reshape({-1}));
    }
    auto work = make_work(c10d::OpType::REDUCE_SCATTER, outputs);
    at::Tensor flat = at::cat(flat_in);
    at::Tensor dst = staged(work, out);
    work->keep.push_back(flat);
    chorus_request_t req;
    check(chorus_ireduce_scatter(flat.data_ptr(), dst.data_ptr(), dst.numel(),
                                 to_dtype(out, true, "reduce_scatter"),
                                 to_op(opts.reduceOp, "reduce_scatter"), comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    check_cpu(input, "_reduce_scatter_base");
    check_cpu(output, "_reduce_scatter_base");
    if (input.numel() != output.numel() * getSize() ||
        output.scalar_type() != input.scalar_type())
      throw std::invalid_argument("chorus: _reduce_scatter_base: the input must hold "
                                  "world_size x the output, same dtype");
    std::vector<at::Tensor> outs = {output};
    auto work = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, outs);
    at::Tensor src = input.contiguous();
    at::Tensor dst = staged(work, output);
    work->keep.push_back(src);
    chorus_request_t req;
    check(chorus_ireduce_scatter(src.data_ptr(), dst.data_ptr(), dst.numel(),
                                 to_dtype(output, true, "_reduce_scatter_base"),
                                 to_op(opts.reduceOp, "_reduce_scatter_base"), comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions&) override {
    check_cpu(input, "alltoall_base");
    check_cpu(output, "alltoall_base");
    if (input.scalar_type() != output.scalar_type())
      throw std::invalid_argument("chorus: alltoall_base: input and output differ in dtype");
    std::vector<at::Tensor> outs = {output};
    auto work = make_work(c10d::OpType::ALLTOALL_BASE, outs);
    at::Tensor src = input.contiguous();
    at::Tensor dst = staged(work, output);
    work->keep.push_back(src);
    const int n = getSize();
    chorus_dtype_t dt = to_dtype(input, false, "alltoall_base");
    if (out_splits.empty() && in_splits.empty()) {
      if (input.numel() != output.numel() || input.size(0) % n != 0)
        throw std::invalid_argument("chorus: alltoall_base: equal splits need input and output "
                                    "of the same size, dim 0 a multiple of world_size");
      chorus_request_t req;
      check(chorus_ialltoall(src.data_ptr(), dst.data_ptr(), src.numel() / n, dt, comm_, &req));
      return submit(work, {req});
    }
    // Uneven splits: one send and one receive per peer, issued together (one group).
    work->is_p2p = true;
    int64_t row_in = input.dim() > 0 && input.size(0) > 0 ? input.numel() / input.size(0) : 0;
    int64_t row_out =
        output.dim() > 0 && output.size(0) > 0 ? output.numel() / output.size(0) : 0;
    std::vector<int64_t> in_s = in_splits, out_s = out_splits;
    if (in_s.empty()) in_s.assign(n, input.size(0) / n);
    if (out_s.empty()) out_s.assign(n, output.size(0) / n);
    if ((int)in_s.size() != n || (int)out_s.size() != n)
      throw std::invalid_argument("chorus: alltoall_base: split sizes need world_size entries");
    std::vector<chorus_request_t> reqs;
    size_t es = input.element_size();
    auto* sp = static_cast<char*>(src.data_ptr());
    auto* dp = static_cast<char*>(dst.data_ptr());
    int64_t soff = 0, doff = 0;
    for (int p = 0; p < n; p++) {
      chorus_request_t rs, rr;
      check(chorus_isend(sp + soff * row_in * es, in_s[p] * row_in, dt, p, comm_, &rs));
      check(chorus_irecv(dp + doff * row_out * es, out_s[p] * row_out, dt, p, comm_, &rr));
      reqs.push_back(rs);
      reqs.push_back(rr);
      soff += in_s[p];
      doff += out_s[p];
    }
    return submit(work, reqs);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    const int n = getSize();
    if ((int)outputs.size() != n || (int)inputs.size() != n)
      throw std::invalid_argument("chorus: alltoall: expects world_size input and output "
                                  "tensors");
    auto work = make_work(c10d::OpType::ALLTOALL, outputs);
    work->is_p2p = true;
    std::vector<chorus_request_t> reqs;
    for (int p = 0; p < n; p++) {
      check_cpu(inputs[p], "alltoall");
      check_cpu(outputs[p], "alltoall");
      at::Tensor src = inputs[p].contiguous();
      at::Tensor dst = staged(work, outputs[p]);
      work->keep.push_back(src);
      chorus_request_t rs, rr;
      check(chorus_isend(src.data_ptr(), src.numel(), to_dtype(src, false, "alltoall"), p, comm_,
                         &rs));
      check(chorus_irecv(dst.data_ptr(), dst.numel(), to_dtype(dst, false, "alltoall"), p, comm_,
                         &rr));
      reqs.push_back(rs);
      reqs.push_back(rr);
    }
    return submit(work, reqs);
  }

  // Tags are not matched: messages between two ranks arrive in the order sent.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int /* tag */) override {
    const at::Tensor& t = single(tensors, "send");
    auto work = make_work(c10d::OpType::SEND, {});
    work->is_p2p = true;
    at::Tensor src = t.contiguous();
    work->keep.push_back(src);
    chorus_request_t req;
    check(chorus_isend(src.data_ptr(), src.numel(), to_dtype(t, false, "send"), dst, comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int /* tag */) override {
    const at::Tensor& t = single(tensors, "recv");
    auto work = make_work(c10d::OpType::RECV, tensors);
    work->is_p2p = true;
    at::Tensor dst = staged(work, t);
    chorus_request_t req;
    check(chorus_irecv(dst.data_ptr(), dst.numel(), to_dtype(t, false, "recv"), src, comm_, &req));
    return submit(work, {req});
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    auto work = make_work(c10d::OpType::BARRIER, {});
    chorus_request_t req;
    check(chorus_ibarrier(comm_, &req));
    return submit(work, {req});
  }

 private:
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
    {
      std::lock_guard<std::mutex> lock(q_->lock);
      q_->works.push_back(work);
    }
    q_->cv.notify_all();
    return work;
  }

  void completion_loop() {
    for (;;) {
      c10::intrusive_ptr<ChorusWork> work;
      {
        std::unique_lock<std::mutex> lock(q_->lock);
        q_->cv.wait(lock, [&] { return q_->stop || !q_->works.empty(); });
        if (q_->works.empty()) return;  // stop, and nothing left
        work = q_->works.front();
        q_->works.pop_front();
        // A send or receive waits until its batch is closed (ChorusWork::kick).
        if (work->is_p2p)
          q_->cv.wait(lock, [&] { return work->kicked || q_->stop || !q_->works.empty(); });
      }
      work->complete();
    }
  }

  chorus_comm_t comm_ = nullptr;
  std::shared_ptr<CompletionQueue> q_ = std::make_shared<CompletionQueue>();
  std::thread thread_;
};

}  // namespace chorus_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The chorus backend of torch.distributed (registered by import chorus.torch)";
  py::class_<chorus_torch::ProcessGroupChorus, c10d::ProcessGroup,
             c10::intrusive_ptr<chorus_torch::ProcessGroupChorus>>(m, "ProcessGroupChorus");
  m.def("create_process_group", &chorus_torch::ProcessGroupChorus::create, py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("reproducible") = -1,
        py::call_guard<py::gil_scoped_release>(),
        "Makes a Chorus process group (torch.distributed calls it through the registered "
        "backend).");
  m.def("build_info", []() { return std::string(chorus_build_info()); });
}
