// PreemptionGuard (preemption.h): the signal watcher and the ranks' agreement to stop.
#include <kiln/parallel/preemption.h>

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <thread>

#include <kiln/core/factory.h>

namespace kiln::dist {

namespace {

std::atomic<int> g_signal{0};

sigset_t preemption_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  return set;
}

}  // namespace

// Note [Signals and oneDNN]: no handler runs on a computing thread. A handler interrupts whatever
// the thread is in, and oneDNN's JIT sgemm (Debian's 2.6) does not survive that: with a handler
// that only stored a flag, SIGUSR1 sent 30 times during a CPU train_gpt run corrupted the heap in
// 8 of 8 runs (none with KILN_ONEDNN=0). So the signals are blocked (threads created later inherit
// the mask) and one watcher thread takes them with sigtimedwait.
struct PreemptionGuard::Saved {
  sigset_t old_mask{};
  std::atomic<bool> stop{false};
  std::thread watcher;
};

PreemptionGuard::PreemptionGuard() : saved_(std::make_unique<Saved>()) {
  g_signal.store(0);
  const sigset_t set = preemption_signals();
  pthread_sigmask(SIG_BLOCK, &set, &saved_->old_mask);
  saved_->watcher = std::thread([s = saved_.get(), set] {
    const timespec tick{0, 100 * 1000 * 1000};  // wakes to see `stop`
    while (!s->stop.load()) {
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig <= 0) continue;  // timeout or EINTR
      int expected = 0;
      if (!g_signal.compare_exchange_strong(expected, sig) && sig != SIGUSR1) {
        // A second SIGTERM/SIGINT: its default action, at once (the first may still be saving).
        std::signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
        std::raise(sig);
      }
    }
  });
}

PreemptionGuard::~PreemptionGuard() {
  saved_->stop.store(true);
  saved_->watcher.join();
  pthread_sigmask(SIG_SETMASK, &saved_->old_mask, nullptr);
}

int PreemptionGuard::signal_received() { return g_signal.load(); }

bool PreemptionGuard::stop_requested(ProcessGroup* group, int64_t step, int64_t every) {
  const bool mine = g_signal.load() != 0;
  if (!group || group->size() == 1) return mine;
  if (every > 1 && (step + 1) % every != 0) return false;
  Tensor flag = full({1}, mine ? 1.0 : 0.0, TensorOptions(DType::f32).device(group->device()));
  group->allreduce(flag, AllreduceOptions().op(ReduceOp::max))->wait();
  return flag.item() != 0;
}

}  // namespace kiln::dist
