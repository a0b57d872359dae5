// Graceful preemption: SIGTERM and SIGINT (what SLURM, Kubernetes and Ctrl-C send before a kill)
// and SIGUSR1 (what SLURM's --signal sends ahead of the time limit) ask a training loop to finish
// the step it is in, write a checkpoint and exit with kPreemptedExitStatus; a second SIGTERM or
// SIGINT ends the process at once, as without the guard. See Note [Preemption].
#pragma once

#include <memory>

#include <kiln/parallel/process_group.h>

namespace kiln::dist {

/// The exit status of a run that stopped for a signal after saving its state: EX_TEMPFAIL (75, "try
/// again later"), so a requeue script can tell it from success (0) and from a failure (1).
inline constexpr int kPreemptedExitStatus = 75;

/// Note [Preemption]
/// A watcher thread records the signal (Note [Signals and oneDNN] in parallel/preemption.cpp, in the source tree, in the source
/// tree: no handler runs on a computing thread), and the loop asks stop_requested()
/// at a step boundary. Ranks may receive the signal at different steps, so with a process group the
/// question is collective: every rank contributes its flag to one small all-reduce (max), and all
/// stop after the same step. `every` asks only every that many steps (the others answer false
/// without a collective): on CUDA with NCCL the all-reduce reads the device, so a loop there asks at
/// its log steps, which read it anyway.
class PreemptionGuard {
 public:
  /// Blocks SIGTERM, SIGINT and SIGUSR1 in this thread and in every thread it starts later, and
  /// starts the thread that takes them; the destructor stops it and restores this thread's mask.
  /// Construct it before the program starts threads (first thing in main, or before the first
  /// parallel kernel): a thread started earlier would still take the signals' default action.
  PreemptionGuard();
  ~PreemptionGuard();
  PreemptionGuard(const PreemptionGuard&) = delete;
  PreemptionGuard& operator=(const PreemptionGuard&) = delete;

  /// The signal received by this process (0: none).
  static int signal_received();

  /// Whether to stop after `step` (0-based count of finished steps): this process's flag, or with a
  /// group (collective: every rank calls it at the same steps) whether any rank received a signal.
  bool stop_requested(ProcessGroup* group, int64_t step, int64_t every = 1);

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

}  // namespace kiln::dist
