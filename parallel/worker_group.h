// Private to the launcher (launcher.cpp, elastic_agent.cpp): one generation of a node's worker
// processes. Forks and execs them with their rank variables, relays their output line by line
// with a "[rank N] " prefix, reports the first failure and stops the rest (SIGTERM, then SIGKILL
// after the grace period). Driven by the caller's loop through poll(), so the elastic agent can
// watch the rendezvous between rounds.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/parallel/launcher.h>

namespace kiln::dist::detail {

/// What one generation's workers are told, beyond LaunchOptions' command and local count.
struct WorkerEnv {
  int rank_offset = 0;        ///< global rank of local rank 0
  int world_size = 1;
  int group_rank = 0;         ///< this node's index (GROUP_RANK)
  int group_world_size = 1;   ///< nodes (GROUP_WORLD_SIZE)
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  std::vector<std::pair<std::string, std::string>> extra;  ///< further variables
};

/// Writes everything, retrying on EINTR; a closed reader loses the text (SIGPIPE is ignored).
void write_all(int fd, const std::string& s);

/// Installs SIGINT/SIGTERM handlers feeding a self-pipe (and ignores SIGPIPE) for its lifetime;
/// the previous handlers come back on destruction. One at a time per process.
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  int read_fd() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
  struct Saved;
  Saved* saved_;
};

class WorkerGroup {
 public:
  WorkerGroup(const LaunchOptions& o, WorkerEnv env, int signal_fd);
  ~WorkerGroup();  ///< kills and reaps workers still running (exception paths)
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  void start();
  /// One round of the monitor loop: waits up to monitor_interval for output, exits and signals.
  /// A worker failing (exit != 0, or killed) stops the others; a SIGINT/SIGTERM on the signal
  /// pipe stops them all. False once every worker has exited and its output is relayed.
  bool poll();
  /// Stops every worker (SIGTERM now, SIGKILL after stop_grace); exits after this are not failures.
  void stop(int sig = 15);
  int wait() {
    while (poll()) {
    }
    return result();
  }
  /// 0, the first failure's status, or 128 + the signal received.
  int result() const { return stop_signal_ != 0 ? 128 + stop_signal_ : failure_status_; }
  bool failed() const { return failure_status_ != 0; }
  const std::string& failure() const { return failure_; }  ///< "rank 1 (local rank 1, pid 42) failed: ..."
  int failed_rank() const { return failed_rank_; }
  int stop_signal() const { return stop_signal_; }

 private:
  std::string default_omp_threads() const;  ///< OMP_NUM_THREADS kiln-run sets, or ""
  struct Worker {
    int rank = 0, local_rank = 0;
    int pid = -1;  ///< also its process group
    bool running = false;
    int fd[2] = {-1, -1};  ///< read ends: [0] stdout, [1] stderr
    std::string pending[2];
  };
  std::vector<std::string> environment(const Worker& w) const;
  void spawn(Worker& w);
  void relay(Worker& w, int stream, bool eof);
  void read_pipe(Worker& w, int stream);
  void signal_all(int sig);
  void drain();

  const LaunchOptions& o_;
  WorkerEnv env_;
  int signal_fd_;
  std::vector<Worker> workers_;
  int failure_status_ = 0, stop_signal_ = 0, failed_rank_ = -1;
  std::string failure_;
  std::optional<std::chrono::steady_clock::time_point> kill_at_;
  bool killed_ = false, stopping_ = false, drained_ = false;
};

/// "exit code 3" or "killed by SIGKILL (signal 9), status 137" from a waitpid() status.
std::string describe_wait_status(int st);

}  // namespace kiln::dist::detail
