// Deferred device checks (Note [Deferred device checks]): the mode, and fault records copied to
// pinned host memory behind an event, queued in one process-wide FaultQueue.
#include <kiln/core/cuda/runtime/deferred_check.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/error.h>
#include <kiln/core/factory.h>

namespace kiln::cuda {

namespace {

CheckMode mode_from_env() {
  const char* v = std::getenv("KILN_CUDA_CHECKS");
  const std::string s = v ? v : "";
  if (s.empty() || s == "deferred") return CheckMode::deferred;
  KILN_CHECK(s == "immediate", "KILN_CUDA_CHECKS must be 'deferred' or 'immediate', got '", s, "'");
  return CheckMode::immediate;
}

std::atomic<int> g_mode{-1};  // -1: not decided yet

FaultQueue& queue() {
  static FaultQueue q;
  return q;
}

std::vector<CapturedFault>& captured_faults() {  // this thread's, while it captures
  thread_local std::vector<CapturedFault> faults;
  return faults;
}

}  // namespace

CheckMode check_mode() {
  int m = g_mode.load();
  if (m < 0) {
    int fresh = static_cast<int>(mode_from_env());
    g_mode.compare_exchange_strong(m, fresh);
    m = g_mode.load();
  }
  return static_cast<CheckMode>(m);
}

void set_check_mode(CheckMode mode) { g_mode.store(static_cast<int>(mode)); }

void check_fault_record(const Tensor& record, RaiseFault raise) {
  KILN_ASSERT(record.defined() && record.device().is_cuda() && record.dtype() == DType::i64 && record.numel() == 2 &&
                  record.is_contiguous(),
              "a fault record must be a contiguous (2,) i64 CUDA tensor");
  if (is_capturing()) {
    captured_faults().push_back({record, std::move(raise)});
    return;
  }
  if (check_mode() == CheckMode::immediate) {
    const std::vector<int64_t> v = record.to_vector<int64_t>();  // the host sync
    if (v[0] >= 0) raise(v[0], v[1], /*late=*/false);
    return;
  }
  Tensor host = empty({2}, TensorOptions(DType::i64).pinned_memory());
  host.copy_(record, /*non_blocking=*/true);
  auto done = std::make_shared<Event>();
  done->record(current_stream(record.device().index));
  queue().push({[done] { return done->query(); }, [done] { done->synchronize(); },
                [host] {
                  const int64_t* p = host.data<int64_t>();
                  return FaultRecord{p[0], p[1]};
                },
                std::move(raise)});
}

void check_deferred_faults(bool wait) {
  if (wait)
    queue().drain();
  else
    queue().poll();
}

size_t deferred_faults_pending() { return queue().size(); }

std::vector<CapturedFault> take_captured_fault_records() {
  std::vector<CapturedFault> out = std::move(captured_faults());
  captured_faults().clear();
  return out;
}

void check_captured_fault_records(const std::vector<CapturedFault>& faults) {
  for (const CapturedFault& f : faults) {
    const std::vector<int64_t> v = f.record.to_vector<int64_t>();  // the host sync
    if (v[0] >= 0) f.raise(v[0], v[1], /*late=*/true);
  }
}

}  // namespace kiln::cuda
