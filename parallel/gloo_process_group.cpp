// ProcessGroup over Gloo (Debian's 2022 libgloo): rendezvous through a kiln Store, a TCP device
// bound to this rank's hostname, and one worker thread running the collectives in issue order
// (none on a group of one rank, whose collectives run inline), watched by a Watchdog that fails
// the group when the oldest unfinished collective passes its deadline (Note [Watchdog]).
#include <kiln/parallel/gloo_process_group.h>

#include <algorithm>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <signal.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include <kiln/core/dispatch.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/profiler/profiler.h>
#include <kiln/parallel/watchdog.h>

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Gloo's rendezvous sees the kiln store under "gloo/".
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(kPrefix + key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    Bytes b = store_->get(kPrefix + key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_->timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(kPrefix + k);
    store_->wait(prefixed, timeout);
  }

 private:
  static inline const std::string kPrefix = "gloo/";
  std::shared_ptr<dist::Store> store_;
};

// Slot prefix of run_reduce_scatter's messages: Gloo's own collectives use 0x01 .. 0x08.
constexpr uint8_t kReduceScatterSlotPrefix = 0x20;

// Elementwise reductions in the accumulation type (float for bf16/f16), rounded once per pair.
// max/min propagate NaN like torch.
struct Sum {
  template <class A> A operator()(A a, A b) const { return a + b; }
};
struct Max {
  template <class A> A operator()(A a, A b) const { return (a != a || a > b) ? a : b; }
};
struct Min {
  template <class A> A operator()(A a, A b) const { return (a != a || a < b) ? a : b; }
};

template <class T, class Op>
void reduce_loop(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(Op{}(static_cast<acc_t<T>>(x[i]), static_cast<acc_t<T>>(y[i])));
}

gloo::AllreduceOptions::Func reduce_function(DType dtype, ReduceOp op) {
  return dispatch_numeric(dtype, "Gloo allreduce", [&]<class T>() -> gloo::AllreduceOptions::Func {
    switch (op) {
      case ReduceOp::max: return &reduce_loop<T, Max>;
      case ReduceOp::min: return &reduce_loop<T, Min>;
      default: return &reduce_loop<T, Sum>;
    }
  });
}

// x /= divisor elementwise (avg = sum then divide; floating dtypes only).
void divide(void* data, DType dtype, size_t n, int divisor) {
  dispatch_floating(dtype, "Gloo avg", [&]<class T>() {
    T* p = static_cast<T*>(data);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<acc_t<T>>(p[i]) / static_cast<acc_t<T>>(divisor));
  });
}


class GlooWork final : public Work {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    if (!error_.empty()) throw DistributedError(error_);
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  // The first call wins: the watchdog may finish a Work its collective is still running.
  void finish(std::string error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    error_ = std::move(error);
    done_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

struct Job {
  const char* name = "";
  uint64_t seq = 0;
  Clock::time_point issued;  // the deadline is issued + timeout
  std::function<void(uint32_t tag)> run;
  std::shared_ptr<GlooWork> work;
  int64_t bytes = 0;  // the whole tensor's (the larger of input and output): the profiler's "bytes" arg
};

void check_tensor(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  ops::check_in_storage(t, op, arg);  // Note [Reads within the storage]
  KILN_CHECK(t.device().is_cpu(), "Gloo ", op, ": ", arg, " must be a CPU tensor, got one on ", t.device());
  KILN_CHECK(t.is_contiguous(), "Gloo ", op, ": ", arg, " must be contiguous (shape ", t.shape(), ", strides ",
             t.strides(), "); call .contiguous() first");
  KILN_CHECK(t.dtype() != DType::b8, "Gloo ", op, ": ", arg, " has dtype bool, which collectives do not support");
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<dist::Store> store, int rank, int size, const GlooOptions& options)
      : ProcessGroup(rank, size), store_(std::move(store)), options_(options) {
    KILN_CHECK(store_ != nullptr, "make_gloo_process_group: store is null");
    KILN_CHECK(size >= 1 && rank >= 0 && rank < size, "make_gloo_process_group: rank ", rank,
               " is not in [0, ", size, ")");
    KILN_CHECK(options.timeout_.count() > 0, "make_gloo_process_group: timeout must be positive, got ",
               options.timeout_.count(), " ms");
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options.hostname_;
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context_->setTimeout(options.timeout_);
      GlooStore gloo_store(store_);
      context_->connectFullMesh(gloo_store, device_);
    } catch (const std::exception& e) {
      KILN_FAIL_DIST("Gloo rendezvous failed on rank ", rank, " of ", size, " (host ", options.hostname_,
                      ", timeout ", options.timeout_.count(), " ms): ", e.what());
    }
    watchdog_ = std::make_shared<Watchdog>(
        store_, WatchdogOptions{.backend = "Gloo", .rank = rank, .size = size, .timeout = options.timeout_});
    watchdog_->start([this] { poll(); });
    if (size > 1) worker_ = std::thread([this] { worker_loop(); });  // one rank runs inline: see enqueue
  }

  // After a failure the connections are already closed (fail()), so the worker's collective
  // ends at once: destruction never waits out a timeout.
  ~GlooProcessGroup() override {
    try {
      watchdog_->release();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      cv_.notify_all();
      if (worker_.joinable()) worker_.join();
      watchdog_->stop();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: stopping the Gloo worker of rank %d failed: %s\n", rank(), e.what());
    }
  }

  std::string backend() const override { return "gloo"; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options) override {
    check_tensor(tensor, "allreduce", "tensor");
    ReduceOp op = options.op_;
    KILN_CHECK(op != ReduceOp::avg || is_floating(tensor.dtype()), "Gloo allreduce: avg needs a floating dtype, got ",
               tensor.dtype(), "; use sum and divide yourself");
    auto fn = reduce_function(tensor.dtype(), op);
    return enqueue("allreduce", tensor.dtype(), tensor.numel(), tensor.numel(), [this, t = tensor, op, fn](uint32_t tag) { run_allreduce(t, op, fn, tag); });
  }

  std::shared_ptr<Work> broadcast(Tensor& tensor, int root) override {
    check_tensor(tensor, "broadcast", "tensor");
    KILN_CHECK(root >= 0 && root < size(), "Gloo broadcast: root ", root, " is not in [0, ", size(), ")");
    return enqueue("broadcast", tensor.dtype(), tensor.numel(), tensor.numel(), [this, t = tensor, root](uint32_t tag) {
      if (t.nbytes() == 0) return;
      gloo::BroadcastOptions o(context_);
      o.setOutput(static_cast<uint8_t*>(t.data_ptr()), t.nbytes());
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(options_.timeout_);
      gloo::broadcast(o);
    });
  }

  std::shared_ptr<Work> allgather(Tensor& output, const Tensor& input) override {
    check_split(output, input, "allgather", /*output_whole=*/true);
    return enqueue("allgather", input.dtype(), input.numel(), output.numel(), [this, out = output, in = input](uint32_t tag) {
      if (in.nbytes() == 0) return;
      gloo::AllgatherOptions o(context_);
      o.setInput(static_cast<uint8_t*>(in.data_ptr()), in.nbytes());
      o.setOutput(static_cast<uint8_t*>(out.data_ptr()), out.nbytes());
      o.setTag(tag);
      o.setTimeout(options_.timeout_);
      gloo::allgather(o);
    });
  }

  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, const AllreduceOptions& options) override {
    check_split(output, input, "reduce_scatter", /*output_whole=*/false);
    ReduceOp op = options.op_;
    KILN_CHECK(op != ReduceOp::avg || is_floating(input.dtype()),
               "Gloo reduce_scatter: avg needs a floating dtype, got ", input.dtype());
    auto fn = reduce_function(input.dtype(), op);
    return enqueue("reduce_scatter", input.dtype(), input.numel(), output.numel(), [this, out = output, in = input, op, fn](uint32_t tag) {
      run_reduce_scatter(out, in, fn, tag);
      if (op == ReduceOp::avg) divide(out.data_ptr(), out.dtype(), size_t(out.numel()), size());
    });
  }

  std::shared_ptr<Work> barrier() override {
    return enqueue("barrier", DType::u8, 0, 0, [this](uint32_t tag) {
      gloo::BarrierOptions o(context_);
      o.setTag(tag);
      o.setTimeout(options_.timeout_);
      gloo::barrier(o);
    });
  }

 private:
  // allgather (the output is whole) and reduce_scatter (the input is): usable tensors of one dtype,
  // the whole holding size() times the elements of the other.
  void check_split(const Tensor& output, const Tensor& input, const char* op, bool output_whole) const {
    check_tensor(output, op, "output");
    check_tensor(input, op, "input");
    KILN_CHECK(output.dtype() == input.dtype(), "Gloo ", op, ": output is ", output.dtype(), " but input is ",
               input.dtype());
    const Tensor& whole = output_whole ? output : input;
    const Tensor& part = output_whole ? input : output;
    KILN_CHECK(whole.numel() == size() * part.numel(), "Gloo ", op, ": ", output_whole ? "output" : "input",
               " has ", whole.numel(), " elements; expected size (", size(), ") * ",
               output_whole ? "input" : "output", ".numel() (", part.numel(), ")");
  }

  void run_allreduce(const Tensor& t, ReduceOp op, const gloo::AllreduceOptions::Func& fn, uint32_t tag) {
    size_t n = static_cast<size_t>(t.numel());
    if (n == 0) return;
    if (size() > 1) {
      gloo::AllreduceOptions o(context_);
      // Gloo only reads the element size from the pointer type; uint16_t stands for bf16/f16.
      dispatch_numeric(t.dtype(), "Gloo allreduce", [&]<class T>() {
        using Wire = std::conditional_t<std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>, uint16_t, T>;
        o.setOutput(static_cast<Wire*>(t.data_ptr()), n);
      });
      o.setReduceFunction(fn);
      o.setTag(tag);
      o.setTimeout(options_.timeout_);
      gloo::allreduce(o);
    }
    if (op == ReduceOp::avg) divide(t.data_ptr(), t.dtype(), n, size());
  }

  // Note [Ring reduce-scatter]
  // Gloo (2022) has no options-style reduce-scatter for arbitrary dtypes, so this is the classic
  // ring over Gloo's unbound buffers: the input is size() chunks of m elements; in step s (0 ..
  // size-2) rank r sends its partial sum of chunk (r - s - 1) mod size to rank r + 1 and receives
  // the partial of chunk (r - s - 2) mod size from rank r - 1, adding its own input chunk to it.
  // After size - 1 steps the partial that arrives is chunk r summed over every rank. Each rank
  // moves (size - 1) * m elements (an all-reduce moves twice that) and needs two m-element
  // scratch chunks, never a copy of the whole input. Chunk r's sum is formed in the order
  // r+1, r+2, ..., r (mod size); with two ranks that is the all-reduce's a + b bitwise.
  void run_reduce_scatter(const Tensor& out, const Tensor& in, const gloo::AllreduceOptions::Func& fn,
                          uint32_t tag) {
    const size_t bytes = out.nbytes();
    if (bytes == 0) return;
    const char* src = static_cast<const char*>(in.data_ptr());
    if (size() == 1) {
      std::memcpy(out.data_ptr(), src, bytes);
      return;
    }
    const int n = size(), r = rank();
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto chunk = [&](int c) { return src + size_t((c % n + n) % n) * bytes; };
    std::vector<char> acc(bytes), recv(bytes);
    auto send_buf = context_->createUnboundBuffer(acc.data(), bytes);
    auto recv_buf = context_->createUnboundBuffer(recv.data(), bytes);
    // The first step sends the input chunk itself: a buffer over it (Gloo only reads it).
    auto first_buf = context_->createUnboundBuffer(const_cast<char*>(chunk(r - 1)), bytes);
    const gloo::Slot slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
    const size_t count = size_t(out.numel());
    for (int s = 0; s < n - 1; ++s) {
      const uint64_t step_slot = slot + static_cast<uint8_t>(s % 256);  // Gloo keeps one pair's messages in order
      recv_buf->recv(prev, step_slot);
      auto& sending = s == 0 ? first_buf : send_buf;
      sending->send(next, step_slot);
      KILN_CHECK_DIST(recv_buf->waitRecv(options_.timeout_), "reduce_scatter: receiving step ", s, " from rank ",
                      prev, " was aborted");
      KILN_CHECK_DIST(sending->waitSend(options_.timeout_), "reduce_scatter: sending step ", s, " to rank ", next,
                      " was aborted");
      // recv holds the partial of chunk (r - s - 2); add this rank's share of it.
      void* dst = s == n - 2 ? out.data_ptr() : static_cast<void*>(acc.data());
      fn(dst, recv.data(), chunk(r - s - 2), count);
    }
  }

  std::shared_ptr<Work> enqueue(const char* name, DType dtype, int64_t numel_in, int64_t numel_out,
                                std::function<void(uint32_t)> run) {
    auto work = std::make_shared<GlooWork>();
    Job job{name, 0, Clock::now(), std::move(run), work,
            std::max(numel_in, numel_out) * int64_t(dtype_size(dtype))};
    if (size() == 1) {
      // Nothing to wait for on one rank: the collective (a local copy at most) runs now, in the
      // caller's thread, and its Work is complete when returned. Sequence numbers, errors, the
      // watchdog and the broken state behave as on the worker.
      std::lock_guard<std::mutex> inline_lock(inline_mutex_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        job.seq = next_sequence_number();
      }
      watchdog_->recorder().enqueued(job.seq, name, dtype, numel_in, numel_out);
      run_job(job);
      return work;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job.seq = next_sequence_number();
      watchdog_->recorder().enqueued(job.seq, name, dtype, numel_in, numel_out);
      if (!broken_.empty()) {
        // Later collectives fail at once, even if the worker is still stuck in the failed one.
        work->finish(not_run(job, broken_));
        return work;
      }
      queue_.push_back(std::move(job));
    }
    cv_.notify_all();
    return work;
  }

  void worker_loop() {
    profiler::set_thread_name("gloo worker");
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) {
          for (auto& j : queue_)
            j.work->finish(describe(j.name, j.seq) + " was not run: the process group was destroyed");
          queue_.clear();
          return;
        }
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      run_job(job);
    }
  }

  // Runs one collective and completes its Work (on the worker, or inline on one rank).
  void run_job(Job& job) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (failing_ || !broken_.empty()) {
        job.work->finish(not_run(job, wait_broken(lock)));
        return;
      }
      current_ = CurrentJob{true, job.name, job.seq, job.issued, job.work};
    }
    watchdog_->maybe_inject(job.seq);  // KILN_FAULT_INJECT: a stall ends when the watchdog fails the group
    std::string error;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (failing_ || !broken_.empty()) {
        // The group failed meanwhile (the watchdog, while this job was held back): fail() finishes
        // the job it reports with the report, this finishes any other (the first finish wins).
        current_ = CurrentJob{};
        job.run = nullptr;
        job.work->finish(not_run(job, wait_broken(lock)));
        return;
      }
    }
    watchdog_->entered(job.seq);
    watchdog_->recorder().started(job.seq);
    try {
      profiler::Range range(job.name, profiler::Category::comm, {"seq", int64_t(job.seq)},  // until completion
                            {"bytes", job.bytes});
      job.run(static_cast<uint32_t>(job.seq));
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "unknown error";
    }
    job.run = nullptr;  // the tensors it captured are released before wait() returns, not after
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ = CurrentJob{};
    }
    if (error.empty()) {
      watchdog_->recorder().completed(job.seq);
      job.work->finish({});
    } else {
      fail(job.name, job.seq, job.work, error);
    }
  }

  // The first failure's report, once fail() has written it (`lock` holds mutex_).
  const std::string& wait_broken(std::unique_lock<std::mutex>& lock) {
    cv_.wait(lock, [&] { return !broken_.empty(); });
    return broken_;
  }

  // The watchdog's poll: fails the group when the oldest unfinished collective (running, held
  // back, or queued behind a stuck one) passed its deadline.
  void poll() {
    const char* name = nullptr;
    uint64_t seq = 0;
    std::shared_ptr<GlooWork> work;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!broken_.empty() || failing_) return;
      const auto now = Clock::now();
      if (current_.active && now > current_.issued + options_.timeout_) {
        name = current_.name, seq = current_.seq, work = current_.work;
      } else if (!current_.active && !queue_.empty() && now > queue_.front().issued + options_.timeout_) {
        name = queue_.front().name, seq = queue_.front().seq, work = queue_.front().work;
      }
    }
    if (work)
      fail(name, seq, work, detail::str_cat("timed out after ", options_.timeout_.count(),
                                            " ms (the watchdog's deadline for every collective)"));
  }

  // The group's first failure: report it (naming the late ranks, dumping the flight recorder),
  // close the connections so every peer's and this worker's collective ends now, and fail the
  // Work of `seq` and every pending one. Later failures just cite the first.
  void fail(const char* name, uint64_t seq, const std::shared_ptr<GlooWork>& work, const std::string& what) {
    std::lock_guard<std::mutex> fail_lock(fail_mutex_);  // one report at a time
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!broken_.empty()) {
        work->finish(describe(name, seq) + " failed after the process group failed: " + broken_);
        return;
      }
      failing_ = true;
    }
    watchdog_->release();
    watchdog_->recorder().failed(seq);
    std::string message = watchdog_->report_failure(
        name, seq,
        detail::str_cat(describe(name, seq), " failed on rank ", rank(), " of ", size(), " (timeout ",
                        options_.timeout_.count(), " ms): ", what));
    std::vector<Job> pending;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      broken_ = message;
      failing_ = false;
      work->finish(message);  // before run_job, woken below, can finish it as "not run"
      cv_.notify_all();       // run_job waits for the report (wait_broken)
      if (current_.active && current_.work != work)
        pending.push_back(Job{current_.name, current_.seq, current_.issued, nullptr, current_.work});
      for (auto& j : queue_) pending.push_back(Job{j.name, j.seq, j.issued, nullptr, j.work});
    }
    try {
      context_->closeConnections();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: closing the Gloo connections of rank %d failed: %s\n", rank(), e.what());
    }
    for (auto& j : pending) j.work->finish(not_run(j, message));
  }

  static std::string not_run(const Job& job, const std::string& first_failure) {
    return describe(job.name, job.seq) + " was not run: the process group failed earlier: " + first_failure;
  }

  static std::string describe(const char* name, uint64_t seq) {
    return std::string("Gloo ") + name + " (sequence number " + std::to_string(seq) + ")";
  }

  std::shared_ptr<dist::Store> store_;
  GlooOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::shared_ptr<Watchdog> watchdog_;
  struct CurrentJob {
    bool active = false;
    const char* name = "";
    uint64_t seq = 0;
    Clock::time_point issued;
    std::shared_ptr<GlooWork> work;
  };
  std::mutex mutex_;  // guards everything below but the threads
  std::condition_variable cv_;
  std::deque<Job> queue_;
  CurrentJob current_;  // the job the worker (or the inline caller) took, until it ends
  bool stop_ = false;
  bool failing_ = false;  // fail() is reporting the first failure
  std::string broken_;    // the first failure's report
  std::mutex fail_mutex_;
  std::mutex inline_mutex_;  // one rank: collectives from several threads run one at a time
  std::thread worker_;
};

}  // namespace

// Note [SIGPIPE and dead peers]: Gloo's TCP transport writes to its peers' sockets; when a peer
// has died, the write raises SIGPIPE, whose default action kills this rank silently (exit by
// signal 13), so the survivors' named error ("not reached by rank 2") never happens on them. Python
// ignores SIGPIPE in every process, and so every torch rank does; kiln-run's workers do too. A
// group of several ranks ignores it here as well when it still has the default action (a program's
// own handler, or SIG_IGN, is left alone), so a rank launched by srun, mpirun or fork behaves the same.
static void ignore_default_sigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
}

std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const GlooOptions& options) {
  if (size > 1) ignore_default_sigpipe();
  return std::make_shared<GlooProcessGroup>(std::move(store), rank, size, options);
}

}  // namespace kiln::dist
