// Watchdog: what both process groups (Gloo, NCCL) share to turn a dead or stalled rank into a
// DistributedError instead of a hang (c10d's ProcessGroupNCCL watchdog, heartbeat monitor and
// flight recorder): a poll thread that lets the group check its collectives' deadlines, a
// heartbeat thread that publishes how far this rank got, and the failure report that names the
// ranks that did not arrive and dumps the flight recorder. Note [Watchdog] in parallel/watchdog.cpp, in the source tree, in the
// source tree.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <kiln/parallel/fault_injection.h>
#include <kiln/parallel/flight_recorder.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {

/// Options of a Watchdog: which group it watches, its deadline and heartbeat.
struct WatchdogOptions {
  std::string backend;  ///< "Gloo" or "nccl", for messages and the dump's name
  int rank = 0, size = 1;
  Millis timeout = kDefaultTimeout;              ///< every collective's deadline
  Millis heartbeat = std::chrono::milliseconds(500);  ///< how often this rank's progress is published
  Millis poll = std::chrono::milliseconds(50);        ///< how often the group's deadlines are checked
};

/// One per process group, made with std::make_shared: the group owns it, and threads that may
/// outlive the group (a heartbeat or a report stuck in a dead store, NCCL's held stream callback)
/// hold references too. Not copyable.
class Watchdog : public std::enable_shared_from_this<Watchdog> {
 public:
  Watchdog(std::shared_ptr<Store> store, WatchdogOptions options);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Starts the threads: `poll` runs every options.poll on the poll thread (the group checks its
  /// deadlines there and fails itself); the heartbeat thread publishes progress (store key
  /// "watchdog/<rank>") and watches for a peer's failure ("watchdog/failure") to dump this rank's
  /// record too. A group of one rank publishes nothing.
  void start(std::function<void()> poll);
  /// Joins both threads; idempotent. Never call it from `poll`.
  void stop();

  const WatchdogOptions& options() const { return options_; }
  FlightRecorder& recorder() { return recorder_; }

  /// Hot path: this rank started collective `seq` (published by the next heartbeat).
  void entered(uint64_t seq) { started_.store(static_cast<int64_t>(seq), std::memory_order_relaxed); }
  int64_t last_started() const { return started_.load(std::memory_order_relaxed); }

  /// KILN_FAULT_INJECT, applied where collective `seq` would start: returns at once unless the
  /// fault fires for this rank and `seq`; `exit` dies here; `stall` blocks until release() or
  /// the fault's duration.
  void maybe_inject(uint64_t seq);
  /// Whether a stall fires for `seq` on this rank (NCCL holds its stream instead of blocking).
  bool stall_fires(uint64_t seq) const;
  /// Ends every injected stall, now and later (the group failed or is being destroyed).
  void release();

  /// The failure report for collective `op` number `seq` after `what` went wrong: "<what>; not reached by
  /// rank 1 (...); flight recorder: <path>". Publishes this rank's progress, waits up to
  /// liveness_window() for the peers' (a live peer may not have published yet), dumps the flight
  /// recorder and tells the peers to dump theirs. Slow (about a second with late ranks): call it
  /// once per failure, holding no lock the group's threads need.
  std::string report_failure(const char* op, uint64_t seq, const std::string& what);

  /// The ranks that had not started `seq` ("not reached by rank 1 (last started sequence number
  /// 4)", or "every rank started ..."), waiting as report_failure does.
  std::string late_ranks(uint64_t seq);
  /// Writes the flight recorder to dump_path(); returns the path, or why it was not written.
  std::string dump(const std::string& reason);
  /// How long a failure report waits at most for a late peer's heartbeat to move (4 heartbeats
  /// and a quarter second) before calling it dead or frozen.
  Millis liveness_window() const { return 4 * options_.heartbeat + Millis(250); }
  /// `<flight_recorder_dir()>/kiln_flight_recorder_<backend>_rank<R>_pid<P>.jsonl`
  std::string dump_path() const;

 private:
  struct ProgressRead;
  std::string late_ranks(uint64_t seq, const std::string& failure_note);  ///< sets watchdog/failure when given
  void poll_loop(std::function<void()> poll);
  void heartbeat_loop();
  void publish();
  void watch_peer_failure();

  std::shared_ptr<Store> store_;
  WatchdogOptions options_;
  FlightRecorder recorder_;
  std::optional<FaultInjection> fault_;
  std::atomic<int64_t> started_{-1};
  int64_t beat_ = 0;  ///< heartbeat thread (and report_failure, under publish_mutex_)
  std::mutex publish_mutex_;

  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool released_ = false;
  bool reported_ = false;  ///< this rank reported (and dumped) a failure
  bool heartbeat_done_ = false;
  std::thread poll_thread_, heartbeat_thread_;
};

}  // namespace kiln::dist
