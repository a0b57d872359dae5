// spawn_ranks: run a function on N forked processes of this machine that rendezvous through a
// FileStore in a fresh temporary directory (under $TMPDIR), each with its own Gloo group (torch's
// multiprocessing.spawn, for tests and `--spawn` benchmarks; real jobs start under kiln-run).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <kiln/parallel/process_group.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {

/// Options of spawn: the store and Gloo timeout, and a wall-clock guard for all ranks.
struct SpawnOptions {
  Millis timeout_ = kDefaultTimeout;  ///< each rank's store and Gloo timeout
  std::chrono::seconds guard_{0};     ///< wall clock for all ranks together; 0: none
  SpawnOptions& timeout(Millis v) { timeout_ = v; return *this; }
  SpawnOptions& guard(std::chrono::seconds v) { guard_ = v; return *this; }
};

/// How one rank ended.
struct RankExit {
  bool hung = false;  ///< still running at the guard: killed
  int status = 0;     ///< waitpid's status otherwise
  bool ok() const;    ///< exited with code 0
  std::string describe() const;  ///< "exited with code 1", "died of signal 9", "hung: killed after 90 s"
};

/// Forks `world_size` ranks. Each builds its group, runs fn(group), meets the others at a barrier
/// (nobody tears down connections a peer still reads from) and exits 0; an exception is printed
/// to stderr ("rank R of N failed: ...") and exits 1. A rank may also _exit() itself. Waits for
/// every rank (killing those still running when the guard passes), removes the store directory
/// and returns how each ended, by rank. Throws when the directory or a fork cannot be made.
std::vector<RankExit> spawn_ranks(int world_size, const std::function<void(ProcessGroup&)>& fn,
                                  const SpawnOptions& options = {});

}  // namespace kiln::dist
