// ProcessGroup over NCCL: one communicator per group, collectives on a communication stream
// ordered after the caller's stream by events. See nccl_process_group.h for the contract.
#include <kiln/parallel/nccl_process_group.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <kiln/core/cuda/runtime/allocator.h>
#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/factory.h>
#include <kiln/core/profiler/profiler.h>

// The communicator is non-blocking (so a missing rank times out instead of hanging), so a call
// may answer ncclInProgress: the operation is still being enqueued and completes on its own.
#define KILN_NCCL_CHECK(expr)                                                                      \
  do {                                                                                             \
    ncclResult_t kiln_nccl_ = (expr);                                                              \
    KILN_CHECK_DIST(kiln_nccl_ == ncclSuccess || kiln_nccl_ == ncclInProgress, "NCCL error ",      \
                    static_cast<int>(kiln_nccl_), " (", ncclGetErrorString(kiln_nccl_), ") in ", #expr); \
  } while (0)

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType t, const char* op) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i64: return ncclInt64;
    case DType::i32: return ncclInt32;
    case DType::u8: return ncclUint8;
    default: break;
  }
  KILN_FAIL_DIST("nccl ", op, ": dtype ", t, " is not supported (f32, f64, bf16, f16, i64, i32, u8)");
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op, DType t, const char* name) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg:
      KILN_CHECK_DIST(is_floating(t), "nccl ", name, ": avg needs a floating dtype, got ", t);
      return ncclAvg;
  }
  return ncclSum;
}

// What a communicator needs to be shared by the group and its pending Works.
struct Comm {
  ncclComm_t comm = nullptr;
  int device = 0;
  Millis timeout = kDefaultTimeout;  // also bounds the finalize at destruction
  cuda::Stream stream;
  bool aborted = false;
  std::string first_failure;

  // Finalize flushes outstanding work (destroying without it can hang peers on shutdown). On this
  // non-blocking communicator it only starts that: the state reads ncclInProgress until the
  // communicator is quiescent, and only then may ncclCommDestroy free it. A failure, or no
  // quiescence within the timeout (a dead peer), aborts it instead of hanging the exit.
  ~Comm() {
    if (!comm || aborted) return;  // an aborted communicator was freed by ncclCommAbort
    try {
      cuda::DeviceGuard guard(device);
      ncclResult_t state = ncclCommFinalize(comm);
      const auto deadline = Clock::now() + timeout;
      while (state == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        state = async_error();
      }
      if (state == ncclSuccess) {
        (void)ncclCommDestroy(comm);
        return;
      }
      std::fprintf(stderr, "kiln: nccl: finalizing the communicator %s; aborting it\n",
                   state == ncclInProgress ? "timed out" : ncclGetErrorString(state));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: nccl: finalizing the communicator failed: %s; aborting it\n", e.what());
    }
    (void)ncclCommAbort(comm);
  }

  // Non-success when the communicator reported an asynchronous error (a peer died, a network
  // failure); records the first one.
  ncclResult_t async_error() {
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclSystemError;
    return r;
  }

  void abort(const std::string& why) {
    if (aborted) return;
    first_failure = why;
    aborted = true;
    (void)ncclCommAbort(comm);
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, std::string what, uint64_t seq, std::vector<Tensor> keep, bool blocking,
           Millis timeout)
      : comm_(std::move(comm)), what_(std::move(what)), seq_(seq), keep_(std::move(keep)), blocking_(blocking),
        timeout_(timeout) {
    done_.record(comm_->stream);
  }

  void wait() override {
    check_not_aborted();
    // The caller's stream (on the group's device) continues only after the collective.
    done_.wait(cuda::current_stream(comm_->device));
    if (blocking_) wait_host();
  }

  bool is_completed() override { return done_.query(); }

  // Polls until the collective finished, the communicator failed or the timeout passed.
  void wait_host() {
    cuda::note_host_sync();
    auto deadline = Clock::now() + timeout_;
    for (;;) {
      // After an abort (another Work's failure) the communicator is freed, and this collective's
      // event completes only because NCCL's kernels quit: its result is garbage, never success.
      check_not_aborted();
      if (done_.query()) return;
      ncclResult_t err = comm_->async_error();
      if (err != ncclSuccess && err != ncclInProgress) {
        std::string why = detail::str_cat("nccl ", what_, " #", seq_, " failed: ", ncclGetErrorString(err),
                                          " (a peer rank died or the network failed)");
        comm_->abort(why);
        KILN_FAIL_DIST(why);
      }
      if (Clock::now() > deadline) {
        std::string why = detail::str_cat("nccl ", what_, " #", seq_, " timed out after ", timeout_.count(),
                                          " ms: some rank did not take part (dead, or issued collectives in a "
                                          "different order)");
        comm_->abort(why);
        KILN_FAIL_DIST(why);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  void check_not_aborted() const {
    KILN_CHECK_DIST(!comm_->aborted, "nccl ", what_, " #", seq_, ": the process group was aborted by an earlier "
                    "failure: ", comm_->first_failure);
  }

  std::shared_ptr<Comm> comm_;
  std::string what_;
  uint64_t seq_;
  std::vector<Tensor> keep_;  // alive until the Work is dropped (the allocator also records the stream)
  bool blocking_;
  Millis timeout_;
  cuda::Event done_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const NcclOptions& options)
      : ProcessGroup(rank, size), options_(options), comm_(std::make_shared<Comm>()) {
    KILN_CHECK_DIST(cuda::is_available(), "nccl process group: no usable CUDA device (", cuda::build_info(), ")");
    comm_->device = options.device_ >= 0 ? options.device_ : cuda::current_device();
    KILN_CHECK_DIST(comm_->device < cuda::device_count(), "nccl process group: rank ", rank, " asked for cuda:",
                    comm_->device, " but this machine has ", cuda::device_count(), " device(s)");
    cuda::DeviceGuard guard(comm_->device);
    ncclUniqueId id;
    if (rank == 0) {
      KILN_NCCL_CHECK(ncclGetUniqueId(&id));
      store->set("nccl/uid", Bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id));
    } else {
      Bytes b = store->get("nccl/uid");
      KILN_CHECK_DIST(b.size() == sizeof id, "nccl process group: the store's nccl/uid has ", b.size(),
                      " bytes, expected ", sizeof id, " (another job on the same store?)");
      std::memcpy(&id, b.data(), sizeof id);
    }
    // Non-blocking init so a rank that never arrives turns into a timeout, not a hang.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    comm_->timeout = options.timeout_;
    ncclResult_t r = ncclCommInitRankConfig(&comm_->comm, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm_->comm) comm_->abort("init failed");  // a half-made communicator is aborted, never finalized
      KILN_FAIL_DIST("nccl process group: ncclCommInitRankConfig failed on rank ", rank, ": ",
                      ncclGetErrorString(r));
    }
    auto deadline = Clock::now() + options.timeout_;
    for (;;) {
      ncclResult_t state = comm_->async_error();
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) {
        comm_->abort("init failed");
        KILN_FAIL_DIST("nccl process group: rank ", rank, " of ", size, " failed to join: ",
                        ncclGetErrorString(state));
      }
      if (Clock::now() > deadline) {
        comm_->abort("init timed out");
        KILN_FAIL_DIST("nccl process group: rank ", rank, " of ", size, " timed out after ",
                        options.timeout_.count(), " ms waiting for the other ranks to join");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    comm_->stream = cuda::Stream::create(comm_->device, /*high_priority=*/true);
  }

  std::string backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(comm_->device); }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options) override {
    check(tensor, "allreduce");
    return run("allreduce", {tensor}, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                                    nccl_dtype(tensor.dtype(), "allreduce"),
                                    nccl_op(options.op_, tensor.dtype(), "allreduce"), comm_->comm, s));
    });
  }

  std::shared_ptr<Work> broadcast(Tensor& tensor, int root) override {
    check(tensor, "broadcast");
    KILN_CHECK_DIST(root >= 0 && root < size(), "nccl broadcast: root ", root, " is not a rank of this group of ",
                    size());
    return run("broadcast", {tensor}, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                                    nccl_dtype(tensor.dtype(), "broadcast"), root, comm_->comm, s));
    });
  }

  std::shared_ptr<Work> allgather(Tensor& output, const Tensor& input) override {
    check_split(output, input, "allgather", /*output_whole=*/true);
    return run("allgather", {output, input}, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                                    nccl_dtype(input.dtype(), "allgather"), comm_->comm, s));
    });
  }

  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, const AllreduceOptions& options) override {
    check_split(output, input, "reduce_scatter", /*output_whole=*/false);
    return run("reduce_scatter", {output, input}, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                                        nccl_dtype(input.dtype(), "reduce_scatter"),
                                        nccl_op(options.op_, input.dtype(), "reduce_scatter"), comm_->comm, s));
    });
  }

  // A one-element allreduce waited on by the host (with the timeout), like torch's NCCL barrier.
  std::shared_ptr<Work> barrier() override {
    Tensor one = ones({1}, TensorOptions(DType::f32).device(Device::cuda(comm_->device)));
    auto work = std::static_pointer_cast<NcclWork>(allreduce(one, {}));
    work->wait_host();
    return work;
  }

 private:
  void check(const Tensor& t, const char* op) const {
    KILN_CHECK_DIST(t.defined(), "nccl ", op, ": undefined tensor");
    KILN_CHECK_DIST(t.device() == Device::cuda(comm_->device), "nccl ", op, ": tensor on ", t.device(),
                    " but this rank's NCCL group is on cuda:", comm_->device, " (move it with .to(Device::cuda(",
                    comm_->device, ")))");
    KILN_CHECK_DIST(t.is_contiguous(), "nccl ", op, ": tensor of shape ", t.shape(), " is not contiguous");
  }

  // allgather (the output is whole) and reduce_scatter (the input is): usable tensors of one dtype,
  // the whole holding world size times the elements of the other.
  void check_split(const Tensor& output, const Tensor& input, const char* op, bool output_whole) const {
    check(output, op);
    check(input, op);
    const Tensor& whole = output_whole ? output : input;
    const Tensor& part = output_whole ? input : output;
    KILN_CHECK_DIST(output.dtype() == input.dtype() && whole.numel() == part.numel() * size(), "nccl ", op, ": ",
                    output_whole ? "output" : "input", " has ", whole.numel(), " ", whole.dtype(),
                    " elements, expected ", part.numel() * size(), " ", part.dtype(), " (world size x ",
                    output_whole ? "input" : "output", ")");
  }

  template <class Issue>
  std::shared_ptr<Work> run(const char* what, std::vector<Tensor> tensors, Issue&& issue) {
    KILN_CHECK_DIST(!comm_->aborted, "nccl ", what, ": the process group is broken by an earlier failure: ",
                    comm_->first_failure);
    uint64_t seq = next_sequence_number();
    cuda::DeviceGuard guard(comm_->device);
    // The communication stream starts after everything the caller queued so far.
    cuda::Event ready;
    ready.record(cuda::current_stream(comm_->device));
    ready.wait(comm_->stream);
    for (const Tensor& t : tensors) cuda::record_stream(t, comm_->stream);
    {
      // Note [Device spans]: the collective on the communication stream, joined to its launch by seq.
      profiler::DeviceRange span(what, profiler::Category::comm, comm_->device, comm_->stream.handle(),
                                 {"seq", int64_t(seq)});
      issue(static_cast<cudaStream_t>(comm_->stream.handle()));
    }
    wait_enqueued(what, seq);
    return std::make_shared<NcclWork>(comm_, what, seq, std::move(tensors), options_.blocking_wait_,
                                      options_.timeout_);
  }

  // A non-blocking communicator may still be enqueueing the last call: wait for that (it takes
  // microseconds unless the communicator failed) before recording the completion event.
  void wait_enqueued(const char* what, uint64_t seq) {
    auto deadline = Clock::now() + options_.timeout_;
    for (;;) {
      ncclResult_t state = comm_->async_error();
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        std::string why = detail::str_cat("nccl ", what, " #", seq, " failed: ", ncclGetErrorString(state));
        comm_->abort(why);
        KILN_FAIL_DIST(why);
      }
      if (Clock::now() > deadline) {
        std::string why = detail::str_cat("nccl ", what, " #", seq, " could not be enqueued within ",
                                          options_.timeout_.count(), " ms");
        comm_->abort(why);
        KILN_FAIL_DIST(why);
      }
      std::this_thread::yield();
    }
  }

  NcclOptions options_;
  std::shared_ptr<Comm> comm_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const NcclOptions& options) {
  KILN_CHECK_DIST(size >= 1 && rank >= 0 && rank < size, "nccl process group: rank ", rank, " is not in [0, ", size, ")");
  return std::make_shared<NcclProcessGroup>(std::move(store), rank, size, options);
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  return detail::str_cat("NCCL ", v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace kiln::dist
