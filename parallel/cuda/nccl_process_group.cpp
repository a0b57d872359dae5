// ProcessGroup over NCCL: one communicator per group, collectives on a communication stream
// ordered after the caller's stream by events. See nccl_process_group.h for the contract.
#include <kiln/parallel/nccl_process_group.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include <kiln/core/cuda/runtime/allocator.h>
#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/factory.h>
#include <kiln/core/profiler/profiler.h>
#include <kiln/parallel/watchdog.h>

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

// What a communicator needs to be shared by the group, its watchdog and its pending Works. Every
// NCCL call on `comm` holds `mutex`, so the watchdog's abort (which frees the communicator) never
// races a call in the caller's thread.
struct Comm {
  ncclComm_t comm = nullptr;
  int device = 0;
  cuda::Stream stream;
  std::mutex mutex;
  std::condition_variable failed_cv;
  std::atomic<bool> aborted{false};  // ncclCommAbort ran (the handle is gone)
  bool closed = false;               // finalized and destroyed, or aborted (under mutex)
  bool finalized = false;            // closed cleanly by finalize (under mutex)
  std::string failure;               // the first failure's report, once written (under mutex)

  // An aborted or destroyed communicator is freed; this only cleans up one never closed (a
  // group that failed during construction). It never waits: NcclProcessGroup's destructor
  // finalizes with a bound.
  ~Comm() {
    std::lock_guard<std::mutex> lock(mutex);
    if (comm && !closed) (void)ncclCommAbort(comm);
  }

  // ncclSuccess, ncclInProgress (still enqueueing or finalizing) or the communicator's
  // asynchronous error (a peer died, a network failure). An aborted one reads as an error; one
  // finalized cleanly as success (the watchdog polls it once more between the destroy and its stop:
  // on an H100 that poll failed the healthy group and dumped its flight recorder).
  ncclResult_t async_error() {
    std::lock_guard<std::mutex> lock(mutex);
    if (closed) return finalized ? ncclSuccess : ncclInvalidUsage;
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclSystemError;
    return r;
  }

  // Frees the communicator at once; NCCL's kernels in flight quit (their results are garbage).
  void abort() {
    std::lock_guard<std::mutex> lock(mutex);
    if (closed) return;
    closed = true;
    aborted = true;
    (void)ncclCommAbort(comm);
  }

  void set_failure(const std::string& report) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (failure.empty()) failure = report;
    }
    failed_cv.notify_all();
  }
  // The first failure's report; waits for it after an abort (the watchdog writes it just after).
  std::string failure_report() {
    std::unique_lock<std::mutex> lock(mutex);
    failed_cv.wait_for(lock, std::chrono::seconds(30), [&] { return !failure.empty(); });
    return failure.empty() ? std::string("the communicator was aborted") : failure;
  }
};

// One collective the watchdog watches, from enqueue until its completion event fires.
struct InFlight {
  const char* what;
  uint64_t seq;
  Clock::time_point issued;  // the deadline is issued + timeout
  std::shared_ptr<cuda::Event> started, done;
  bool seen_started = false;
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, std::string what, uint64_t seq, std::vector<Tensor> keep, bool blocking,
           std::shared_ptr<cuda::Event> done)
      : comm_(std::move(comm)), what_(std::move(what)), seq_(seq), keep_(std::move(keep)), blocking_(blocking),
        done_(std::move(done)) {}

  void wait() override {
    check_not_aborted();
    // The caller's stream (on the group's device) continues only after the collective.
    done_->wait(cuda::current_stream(comm_->device));
    if (blocking_) wait_host();
  }

  bool is_completed() override { return !comm_->aborted && done_->query(); }

  // Blocks the host until the collective finished; throws when the watchdog failed the group
  // (its deadline passed, or NCCL reported an asynchronous error): Note [Watchdog].
  void wait_host() {
    cuda::note_host_sync();
    for (;;) {
      // After an abort this collective's event completes only because NCCL's kernels quit: its
      // result is garbage, never success.
      check_not_aborted();
      if (done_->query()) {
        check_not_aborted();
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  void check_not_aborted() const {
    if (comm_->aborted)
      KILN_FAIL_DIST("nccl ", what_, " (sequence number ", seq_, ") did not complete: the process group failed: ",
                     comm_->failure_report());
  }

  std::shared_ptr<Comm> comm_;
  std::string what_;
  uint64_t seq_;
  std::vector<Tensor> keep_;  // alive until the Work is dropped (the allocator also records the stream)
  bool blocking_;
  std::shared_ptr<cuda::Event> done_;
};

// cudaLaunchHostFunc body of an injected stall: holds the communication stream until the
// watchdog releases it (KILN_FAULT_INJECT, fault_injection.h).
struct HeldStream {
  std::shared_ptr<Watchdog> watchdog;
  uint64_t seq;
};
void CUDART_CB hold_stream(void* data) {
  std::unique_ptr<HeldStream> held(static_cast<HeldStream*>(data));
  held->watchdog->maybe_inject(held->seq);
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const NcclOptions& options)
      : ProcessGroup(rank, size), options_(options), comm_(std::make_shared<Comm>()) {
    KILN_CHECK_DIST(cuda::is_available(), "nccl process group: no usable CUDA device (", cuda::build_info(), ")");
    KILN_CHECK_DIST(options.timeout_.count() > 0, "nccl process group: timeout must be positive, got ",
                    options.timeout_.count(), " ms");
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
    ncclResult_t r = ncclCommInitRankConfig(&comm_->comm, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm_->comm) comm_->abort();  // a half-made communicator is aborted, never finalized
      KILN_FAIL_DIST("nccl process group: ncclCommInitRankConfig failed on rank ", rank, ": ",
                     ncclGetErrorString(r));
    }
    auto deadline = Clock::now() + options.timeout_;
    for (;;) {
      ncclResult_t state = comm_->async_error();
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) {
        comm_->abort();
        KILN_FAIL_DIST("nccl process group: rank ", rank, " of ", size, " failed to join: ",
                       ncclGetErrorString(state));
      }
      if (Clock::now() > deadline) {
        comm_->abort();
        KILN_FAIL_DIST("nccl process group: rank ", rank, " of ", size, " timed out after ",
                       options.timeout_.count(), " ms waiting for the other ranks to join");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    comm_->stream = cuda::Stream::create(comm_->device, /*high_priority=*/true);
    watchdog_ = std::make_shared<Watchdog>(
        store, WatchdogOptions{.backend = "nccl", .rank = rank, .size = size, .timeout = options.timeout_});
    watchdog_->start([this] { poll(); });
  }

  // Note [Destroying a NCCL group]
  // A healthy communicator is finalized (flushing its work, so peers are not left hanging) and
  // destroyed; finalizing waits at most until the last collective's deadline (or min(timeout,
  // 5 s) when none is in flight), and the watchdog keeps running meanwhile. A failed group (or
  // one destroyed while an exception unwinds the stack) is aborted at once: destruction never
  // waits out a timeout for a peer that is gone.
  ~NcclProcessGroup() override {
    try {
      watchdog_->release();  // an injected stall must not hold the stream during teardown
      cuda::DeviceGuard guard(comm_->device);
      if (!comm_->aborted && std::uncaught_exceptions() == 0) finalize();
      watchdog_->stop();
      if (!comm_->aborted && !finalized_) comm_->abort();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: nccl: closing the communicator of rank %d failed: %s; aborting it\n", rank(),
                   e.what());
      comm_->abort();
    }
  }

  std::string backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(comm_->device); }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options) override {
    check(tensor, "allreduce");
    return run("allreduce", {tensor}, tensor.dtype(), tensor.numel(), tensor.numel(), [&](cudaStream_t s) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                           nccl_dtype(tensor.dtype(), "allreduce"), nccl_op(options.op_, tensor.dtype(), "allreduce"),
                           comm_->comm, s);
    });
  }

  std::shared_ptr<Work> broadcast(Tensor& tensor, int root) override {
    check(tensor, "broadcast");
    KILN_CHECK_DIST(root >= 0 && root < size(), "nccl broadcast: root ", root, " is not a rank of this group of ",
                    size());
    return run("broadcast", {tensor}, tensor.dtype(), tensor.numel(), tensor.numel(), [&](cudaStream_t s) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                           nccl_dtype(tensor.dtype(), "broadcast"), root, comm_->comm, s);
    });
  }

  std::shared_ptr<Work> allgather(Tensor& output, const Tensor& input) override {
    check_split(output, input, "allgather", /*output_whole=*/true);
    return run("allgather", {output, input}, input.dtype(), input.numel(), output.numel(), [&](cudaStream_t s) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                           nccl_dtype(input.dtype(), "allgather"), comm_->comm, s);
    });
  }

  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, const AllreduceOptions& options) override {
    check_split(output, input, "reduce_scatter", /*output_whole=*/false);
    return run("reduce_scatter", {output, input}, input.dtype(), input.numel(), output.numel(), [&](cudaStream_t s) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                               nccl_dtype(input.dtype(), "reduce_scatter"),
                               nccl_op(options.op_, input.dtype(), "reduce_scatter"), comm_->comm, s);
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

  std::string describe(const char* what, uint64_t seq) const {
    return detail::str_cat("nccl ", what, " (sequence number ", seq, ")");
  }

  // `issue` makes the NCCL call on the given stream and returns its result.
  template <class Issue>
  std::shared_ptr<Work> run(const char* what, std::vector<Tensor> tensors, DType dtype, int64_t numel_in,
                            int64_t numel_out, Issue&& issue) {
    if (comm_->aborted)
      KILN_FAIL_DIST("nccl ", what, ": the process group is broken by an earlier failure: ", comm_->failure_report());
    const uint64_t seq = next_sequence_number();
    watchdog_->recorder().enqueued(seq, what, dtype, numel_in, numel_out);
    cuda::DeviceGuard guard(comm_->device);
    cudaStream_t stream = static_cast<cudaStream_t>(comm_->stream.handle());
    // The communication stream starts after everything the caller queued so far.
    cuda::Event ready;
    ready.record(cuda::current_stream(comm_->device));
    ready.wait(comm_->stream);
    for (const Tensor& t : tensors) cuda::record_stream(t, comm_->stream);
    if (watchdog_->stall_fires(seq)) {
      KILN_CUDA_CHECK(cudaLaunchHostFunc(stream, hold_stream, new HeldStream{watchdog_, seq}));
    } else {
      watchdog_->maybe_inject(seq);  // an injected exit dies here
    }
    auto entry = InFlight{what, seq, Clock::now(), std::make_shared<cuda::Event>(), std::make_shared<cuda::Event>()};
    entry.started->record(comm_->stream);  // the stream reached the collective: this rank arrived
    {
      // Note [Device spans]: the collective on the communication stream, joined to its launch by seq.
      profiler::DeviceRange span(what, profiler::Category::comm, comm_->device, comm_->stream.handle(),
                                 {"seq", int64_t(seq)});
      ncclResult_t r;
      {
        std::lock_guard<std::mutex> lock(comm_->mutex);
        r = comm_->closed ? ncclInvalidUsage : issue(stream);
      }
      if (r != ncclSuccess && r != ncclInProgress) {
        const std::string why = detail::str_cat(describe(what, seq), " could not be issued: NCCL error ",
                                                static_cast<int>(r), " (", ncclGetErrorString(r), ")");
        fail(what, seq, why);
        KILN_FAIL_DIST(comm_->failure_report());
      }
    }
    wait_enqueued(what, seq);
    entry.done->record(comm_->stream);
    auto done = entry.done;
    {
      std::lock_guard<std::mutex> lock(in_flight_mutex_);
      in_flight_.push_back(std::move(entry));
    }
    return std::make_shared<NcclWork>(comm_, what, seq, std::move(tensors), options_.blocking_wait_, done);
  }

  // A non-blocking communicator may still be enqueueing the last call: wait for that (it takes
  // microseconds unless the communicator failed) before recording the completion event.
  void wait_enqueued(const char* what, uint64_t seq) {
    auto deadline = Clock::now() + options_.timeout_;
    for (;;) {
      ncclResult_t state = comm_->async_error();
      if (state == ncclSuccess) return;
      if (comm_->aborted) KILN_FAIL_DIST(comm_->failure_report());
      if (state != ncclInProgress) {
        fail(what, seq, detail::str_cat("NCCL error while enqueueing: ", ncclGetErrorString(state)));
        KILN_FAIL_DIST(comm_->failure_report());
      }
      if (Clock::now() > deadline) {
        fail(what, seq, detail::str_cat("could not be enqueued within ", options_.timeout_.count(), " ms"));
        KILN_FAIL_DIST(comm_->failure_report());
      }
      std::this_thread::yield();
    }
  }

  // The watchdog's poll (Note [Watchdog]): retires completed collectives, marks started ones, and
  // fails the group on an asynchronous NCCL error or when the oldest collective passed its
  // deadline.
  void poll() {
    if (comm_->aborted) return;
    cuda::DeviceGuard guard(comm_->device);
    const char* what = nullptr;
    uint64_t seq = 0;
    Clock::time_point issued;
    {
      std::lock_guard<std::mutex> lock(in_flight_mutex_);
      for (InFlight& f : in_flight_) {
        if (f.seen_started || !f.started->query()) break;  // the stream is in order
        f.seen_started = true;
        watchdog_->entered(f.seq);
        watchdog_->recorder().started(f.seq);
      }
      while (!in_flight_.empty() && in_flight_.front().done->query()) {
        watchdog_->recorder().completed(in_flight_.front().seq);
        in_flight_.pop_front();
      }
      if (!in_flight_.empty()) what = in_flight_.front().what, seq = in_flight_.front().seq,
                               issued = in_flight_.front().issued;
    }
    ncclResult_t err = comm_->async_error();
    if (err != ncclSuccess && err != ncclInProgress && !comm_->aborted) {
      if (what == nullptr) what = "communicator", seq = sequence_number();
      fail(what, seq, detail::str_cat("NCCL reported an asynchronous error: ", ncclGetErrorString(err),
                                      " (a peer rank died or the network failed)"));
    } else if (what != nullptr && Clock::now() > issued + options_.timeout_) {
      fail(what, seq, detail::str_cat("timed out after ", options_.timeout_.count(),
                                      " ms (the watchdog's deadline for every collective)"));
    }
  }

  // The group's first failure: abort the communicator (NCCL's kernels quit, an injected stall
  // ends), then report (naming the late ranks, dumping the flight recorder) for every pending
  // and later wait. Later failures keep the first report.
  void fail(const char* what, uint64_t seq, const std::string& why) {
    std::lock_guard<std::mutex> lock(fail_mutex_);
    if (comm_->aborted) return;
    watchdog_->release();
    comm_->abort();
    watchdog_->recorder().failed(seq);
    comm_->set_failure(watchdog_->report_failure(
        what, seq, detail::str_cat(describe(what, seq), " failed on rank ", rank(), " of ", size(), " (timeout ",
                                   options_.timeout_.count(), " ms): ", why)));
  }

  // Note [Destroying a NCCL group]. Finalize only starts flushing on this non-blocking
  // communicator: the state reads ncclInProgress until it is quiescent, and only then may
  // ncclCommDestroy free it.
  void finalize() {
    Clock::time_point deadline = Clock::now() + std::min<Millis>(options_.timeout_, std::chrono::seconds(5));
    {
      std::lock_guard<std::mutex> lock(in_flight_mutex_);
      for (const InFlight& f : in_flight_) deadline = std::max(deadline, f.issued + options_.timeout_);
    }
    ncclResult_t state;
    {
      std::lock_guard<std::mutex> lock(comm_->mutex);
      if (comm_->closed) return;
      state = ncclCommFinalize(comm_->comm);
    }
    while (state == ncclInProgress && Clock::now() < deadline && !comm_->aborted) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      state = comm_->async_error();
    }
    if (comm_->aborted) return;  // the watchdog failed an in-flight collective meanwhile
    if (state == ncclSuccess) {
      std::lock_guard<std::mutex> lock(comm_->mutex);
      if (!comm_->closed) {
        comm_->closed = true;
        comm_->finalized = true;
        (void)ncclCommDestroy(comm_->comm);
      }
      finalized_ = true;
      return;
    }
    std::fprintf(stderr, "kiln: nccl: finalizing the communicator of rank %d %s; aborting it\n", rank(),
                 state == ncclInProgress ? "timed out" : ncclGetErrorString(state));
  }

  NcclOptions options_;
  std::shared_ptr<Comm> comm_;
  std::shared_ptr<Watchdog> watchdog_;
  std::mutex in_flight_mutex_;
  std::deque<InFlight> in_flight_;  // enqueued and not seen complete, oldest first
  std::mutex fail_mutex_;
  bool finalized_ = false;
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
