// The elastic agents' rendezvous (kiln-run --rdzv-endpoint): the agents of every node meet in a
// Store hosted by one of them, form numbered generations of MIN..MAX nodes, and, while a
// generation runs, tell each other about failures, finished nodes, waiting newcomers and
// heartbeats. Only the agents use it; workers get their own per-generation key prefix.
// See Note [Elastic rendezvous] in parallel/rendezvous.cpp, in the source tree.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {

/// Options of the elastic rendezvous: node counts and timeouts (torchrun's rdzv settings).
struct RendezvousOptions {
  KILN_ARG(int, min_nodes) = 1;
  KILN_ARG(int, max_nodes) = 1;
  KILN_ARG(Millis, join_timeout){600000};     ///< a generation must form within this (torchrun: 600 s)
  KILN_ARG(Millis, last_call){2000};          ///< after min_nodes joined, wait this long for more
  KILN_ARG(Millis, heartbeat_timeout){15000}; ///< a node silent this long is declared gone
  KILN_ARG(Millis, poll_interval){50};
};

/// One node as the others see it.
struct NodeInfo {
  std::string name;     ///< "hostname/address", for messages
  std::string address;  ///< the address its workers advertise to peers
  int nproc = 1;
};

/// One generation as this node joined it.
struct Generation {
  int64_t number = -1;
  int node_rank = 0;   ///< join order within the generation
  int rank_offset = 0; ///< global rank of this node's local rank 0
  int world_size = 0;
  std::vector<NodeInfo> nodes;
  int nnodes() const { return int(nodes.size()); }
};

/// Forms the generations of an elastic job through a store: which nodes take part and their ranks.
class Rendezvous {
 public:
  /// `store` should be a prefix store of its own (one per run id).
  Rendezvous(std::shared_ptr<Store> store, RendezvousOptions options, NodeInfo self);

  /// Joins the next generation (for a new node: the one open now, or, when that one already runs,
  /// the next, which the running nodes start for it when they have room) and blocks until it
  /// closes. Throws DistributedError when none forms within join_timeout or the job was shut down.
  Generation join();

  /// While the generation runs. All cheap (one or two store round trips).
  int64_t events();                                   ///< a counter that moves on every report below
  void report_failure(const std::string& what);       ///< makes every node stop its workers
  std::optional<std::string> failure();               ///< the first failure reported, if any
  std::vector<std::string> failures();                ///< every failure reported, in report order
  void report_done();                                 ///< this node's workers all exited 0
  int64_t done_count();
  bool node_done(int node);
  /// This node's workers of the current generation are stopped and its agent leaves the generation
  /// (for the next one, or for good): from here on its heartbeat stops on purpose, so silent_nodes()
  /// does not take it for a vanished agent.
  void report_stopped();
  int64_t waiting_count();                            ///< nodes waiting to join the next generation
  void shutdown(const std::string& why);              ///< no more generations
  /// An agent leaving for good says so (best effort); the hosting agent waits, up to `at_most`,
  /// for `others` of them before it takes the store down, so they read why instead of finding
  /// it gone.
  void report_exit() noexcept;
  void await_exits(int64_t others, Millis at_most) noexcept;
  std::optional<std::string> shutdown_reason();
  /// Beats this node's heartbeat and returns the nodes (indices) whose heartbeat has not moved for
  /// heartbeat_timeout, finished nodes excepted. Call about once a second.
  std::vector<int> heartbeat();
  /// The nodes whose heartbeat does not move during `wait` (longer than their beat interval), finished
  /// and stopped nodes (report_done, report_stopped) excepted; no wait when every other node is one.
  std::vector<int> silent_nodes(Millis wait);

  const Generation& generation() const { return gen_; }

 private:
  std::string key(int64_t gen, const std::string& name) const;
  void wait_for_generation_after(int64_t gen, std::chrono::steady_clock::time_point deadline);
  void check_shutdown();

  std::shared_ptr<Store> store_;
  RendezvousOptions o_;
  NodeInfo self_;
  Generation gen_;
  int64_t last_joined_ = -1;
  std::map<int, std::pair<int64_t, std::chrono::steady_clock::time_point>> beats_;  ///< node -> (value, since)
};

/// "name nproc address" and back (names and addresses hold no spaces).
std::string encode_node(const NodeInfo& node);
NodeInfo decode_node(const std::string& text);

}  // namespace kiln::dist
