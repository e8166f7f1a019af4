// The pieces of the torch.distributed backend that are not the process group itself
// (process_group_chorus.cpp, whose head describes the design): the includes for both torch
// lines, the base class each line implements, argument checks and dtype and op maps, and the
// Work with the completion queue it shares with its group.
#ifndef CHORUS_TORCH_WORK_H
#define CHORUS_TORCH_WORK_H

#include <chorus.h>

#include <torch/version.h>
#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

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

// torch 2.0 split the ProcessGroup of 1.x in two: the ProcessGroup that Python holds (one
// per group, dispatching by device type) and the c10d::Backend a library implements, which
// torch.distributed.Backend.register_backend(..., devices=["cpu"]) binds to a device type.
// The operations a backend overrides kept their names and signatures, so one class serves
// both lines: it derives from whichever base this torch has.
#if TORCH_VERSION_MAJOR >= 2
using GroupBase = c10d::Backend;
#else
using GroupBase = c10d::ProcessGroup;
#endif

namespace {

std::string chorus_message(chorus_status_t status) {
  return std::string("chorus: ") + chorus_status_string(status) + ": " + chorus_last_error();
}

void check(chorus_status_t status) {
  if (status != CHORUS_SUCCESS) throw std::runtime_error(chorus_message(status));
}

// An argument error of op on rank: RuntimeError "chorus: op: rank R: what...". The parts of
// the message are formatted only when the check fails.
template <typename... Args>
void require(bool ok, const char* op, int rank, const Args&... what) {
  TORCH_CHECK(ok, "chorus: ", op, ": rank ", rank, ": ", what...);
}

chorus_dtype_t to_dtype(const at::Tensor& t, bool reducing, const char* op, int rank) {
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
  require(false, op, rank, "dtype ", c10::toString(t.scalar_type()),
          " is not supported (float32/64, float16, bfloat16, int8, uint8, int32, int64",
          reducing ? "; bool only where nothing is reduced)" : ", bool)");
  return CHORUS_UINT8;  // not reached
}

chorus_op_t to_op(const c10d::ReduceOp& op, const char* what, int rank) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return CHORUS_SUM;
    case c10d::ReduceOp::PRODUCT: return CHORUS_PROD;
    case c10d::ReduceOp::MIN: return CHORUS_MIN;
    case c10d::ReduceOp::MAX: return CHORUS_MAX;
    case c10d::ReduceOp::AVG: return CHORUS_AVG;
    default: break;
  }
  require(false, what, rank, "only SUM, PRODUCT, MIN, MAX and AVG are supported");
  return CHORUS_SUM;  // not reached
}

void check_cpu(const at::Tensor& t, const char* op, int rank) {
  require(t.defined(), op, rank, "an undefined tensor");
  require(t.device().is_cpu(), op, rank, "a ", t.device().str(),
          " tensor; this build of the backend takes CPU tensors");
}

// Every tensor of ts on the CPU and of dtype (that of the first when none is given).
void check_list(const std::vector<at::Tensor>& ts, const char* op, int rank,
                c10::optional<at::ScalarType> dtype = c10::nullopt) {
  for (size_t i = 0; i < ts.size(); i++) {
    check_cpu(ts[i], op, rank);
    at::ScalarType want = dtype ? *dtype : ts[0].scalar_type();
    require(ts[i].scalar_type() == want, op, rank, "tensor ", i, " is ",
            c10::toString(ts[i].scalar_type()), ", not ", c10::toString(want),
            " as the others");
  }
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op, int rank) {
  require(ts.size() == 1, op, rank, "expects one tensor per process, got ", ts.size());
  check_cpu(ts[0], op, rank);
  return ts[0];
}

void check_root(int64_t root, int64_t root_tensor, int size, const char* op, int rank) {
  require(root >= 0 && root < size, op, rank, "root ", root, " is not a rank of this group (0..",
          size - 1, ")");
  require(root_tensor == 0, op, rank, "rootTensor ", root_tensor,
          ": one tensor per process, so 0");
}

void check_peer(int peer, int tag, int size, const char* op, int rank) {
  require(peer >= 0 && peer < size, op, rank, "peer ", peer, " is not a rank of this group (0..",
          size - 1, ")");
  require(tag >= 0, op, rank, "tag ", tag, " (peer ", peer, ") is negative");
}

}  // namespace

// The completion queue, shared by the process group and its Works (a Work may outlive its
// group): the lock, the condition both sides wait on, the Works in issue order, and the
// Works completed since the last call.
//
// The completion thread never drops a reference to a tensor: the last reference to one whose
// Python object torch keeps alive from C++ destroys that object, which takes the GIL, and a
// thread that asks for the GIL while the interpreter exits is ended on the spot (in a
// destructor, std::terminate). So a completed Work, with its tensors and staging buffers,
// goes to `finished`, released by the next call on the group or by its destructor.
struct CompletionQueue {
  std::mutex lock;
  std::condition_variable cv;
  std::deque<c10::intrusive_ptr<class ChorusWork>> works;
  std::vector<c10::intrusive_ptr<class ChorusWork>> finished;
  bool stop = false;
  uint64_t issued = 0;     // Works submitted so far; a Work's seq is its place in that count
  uint64_t kick_seq = 0;   // every send/receive Work with seq <= this may be waited for
  uint64_t torch_seq = 0;  // torch's sequence number: Works since setSequenceNumberForGroup
  // The newest send/receive Work while its batch is still open (no wait, test or
  // collective since it was issued), else null.
  c10::intrusive_ptr<class ChorusWork> open_p2p;
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

  // recvAnysource: the rank the message came from, once complete.
  int sourceRank() const override { return source; }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    kick();  // whoever asks for the future is about to wait on it
    return future_;
  }

  // Completion thread: every request, then the host work, then the Work and its Future.
  void complete() {
    for (auto& r : requests) {
      chorus_status_t st = chorus_wait(&r);
      if (st != CHORUS_SUCCESS && early_msg.empty()) early_msg = chorus_message(st);
    }
    settle();
  }

  // Completion thread, without blocking: true once every request is complete (and the Work
  // with them). chorus_test frees a complete request and nulls it, so each is seen once.
  bool poll() {
    for (auto& r : requests) {
      if (r == nullptr) continue;
      int done = 0;
      chorus_status_t st = chorus_test(&r, &done);
      if (!done) return false;
      if (st != CHORUS_SUCCESS && early_msg.empty()) early_msg = chorus_message(st);
    }
    settle();
    return true;
  }

  // The requests are over (their first error in early_msg): the host work, then the Work.
  void settle() {
    std::exception_ptr error;
    const std::string msg = early_msg;
    if (msg.empty() && after) {
      try {
        after();
      } catch (...) {
        error = std::current_exception();
      }
    } else if (!msg.empty()) {
      error = std::make_exception_ptr(std::runtime_error(msg));
    }
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }

  // Sends and receives: Chorus starts the batch of consecutive isend/irecv at the first wait
  // on one of them (or at the next collective), and every rank's batches with a peer must
  // hold the same operations. So where a batch ends must follow from the program alone,
  // never from when the completion thread gets to a request: the completion thread waits
  // for a send or receive only once the caller has waited for or polled a Work issued at
  // or after it (kick: everything issued so far may start), or a collective was issued
  // after it (which started the batch itself). Waiting as soon as any later operation was
  // issued, as this did before, cut a batch between two of the caller's isend/irecv at a
  // moment that differed between ranks: a false "collective mismatch" (torch's
  // test_batch_isend_irecv_gloo, about 1 run in 10).
  //
  // The batch must also end at that point of the program, not later when the completion
  // thread wakes up (the caller may issue more sends meanwhile): so kick starts it here, on
  // the caller's thread, with chorus_test on the newest request of the open batch (which
  // the completion thread is not using: it waits for no send or receive past kick_seq).
  void kick() {
    if (!queue) return;
    {
      std::lock_guard<std::mutex> lock(queue->lock);
      if (queue->open_p2p) {
        ChorusWork& w = *queue->open_p2p;
        for (auto it = w.requests.rbegin(); it != w.requests.rend(); ++it) {
          if (*it == nullptr) continue;
          int done = 0;
          chorus_status_t st = chorus_test(&*it, &done);
          if (st != CHORUS_SUCCESS && w.early_msg.empty()) w.early_msg = chorus_message(st);
          break;
        }
        queue->open_p2p.reset();
      }
      queue->kick_seq = queue->issued;
    }
    queue->cv.notify_all();
  }

  std::vector<chorus_request_t> requests;
  std::function<void()> after;  // on success, after every request
  std::vector<at::Tensor> keep;  // staging buffers alive until the Work is released
  bool is_p2p = false;  // an untagged send/receive batch of comm_ (alltoall's)
  bool tagged = false;  // a tagged send or receive: completes in any order (completion_loop)
  int source = -1;      // set by Chorus when a tagged receive completes
  uint64_t seq = 0;  // set by submit, under queue->lock
  std::string early_msg;  // a request's first error (kick's chorus_test: under queue->lock)
  std::shared_ptr<CompletionQueue> queue;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
};

}  // namespace chorus_torch

#endif
