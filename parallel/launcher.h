// The process launcher behind kiln-run (torchrun's job on one node): starts nproc_per_node
// workers with torchrun's rank variables, prefixes their output with the rank, stops the group
// when one fails and restarts it up to max_restarts times. Lives in the library so it is testable.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <kiln/core/arg.h>

namespace kiln::dist {

/// torchrun's flags, torch C++ style: LaunchOptions({"python", "train.py"}).nproc_per_node(4).
/// Every worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (= node_rank),
/// GROUP_WORLD_SIZE (= nnodes), MASTER_ADDR, MASTER_PORT, KILN_RESTART_COUNT and
/// KILN_MAX_RESTARTS (also under torchrun's names TORCHELASTIC_RESTART_COUNT/_MAX_RESTARTS).
struct LaunchOptions {
  std::vector<std::string> command_;  ///< program (looked up in PATH) and its arguments
  KILN_ARG(int, nproc_per_node) = 1;
  KILN_ARG(int, nnodes) = 1;
  KILN_ARG(int, node_rank) = 0;
  std::string master_addr_ = "127.0.0.1";
  KILN_ARG(int, master_port) = 29500;
  KILN_ARG(bool, standalone) = false;  ///< one node; MASTER_ADDR 127.0.0.1 and a free port picked here
  KILN_ARG(int, max_restarts) = 0;     ///< restarts of the whole group after a failure
  KILN_ARG(std::chrono::milliseconds, monitor_interval){100};  ///< how often worker exits are checked
  KILN_ARG(std::chrono::milliseconds, stop_grace){5000};      ///< SIGTERM to SIGKILL when stopping workers
  KILN_ARG(int, stdout_fd) = 1;  ///< where "[rank N] " lines from the workers' stdout go (not owned)
  KILN_ARG(int, stderr_fd) = 2;  ///< same for their stderr, and the launcher's own "kiln-run: " lines

  LaunchOptions() = default;
  explicit LaunchOptions(std::vector<std::string> command) : command_(std::move(command)) {}
  LaunchOptions& command(std::vector<std::string> v) { command_ = std::move(v); return *this; }
  LaunchOptions& master_addr(std::string v) { master_addr_ = std::move(v); return *this; }
};

/// Runs the workers until all exit; returns 0, or the first failed worker's status (its exit
/// code, 128 + signal when killed; 127 when the program could not be executed). SIGINT and
/// SIGTERM sent to the launcher are forwarded to the workers and make it return 128 + signal.
/// Workers run in their own process groups with stdin from /dev/null, SIGPIPE ignored (as in
/// Python), and get SIGKILL if the launcher itself dies. Installs its own SIGINT,
/// SIGTERM and SIGPIPE handlers while running (restored on return): one launch() at a time per
/// process. Throws kiln::Error for invalid options.
int launch(const LaunchOptions& options);

/// A TCP port on 127.0.0.1 that was free a moment ago (bind port 0 and ask the kernel).
int pick_free_port();

}  // namespace kiln::dist
