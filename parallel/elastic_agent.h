// The elastic agent behind `kiln-run --rdzv-endpoint HOST:PORT` (torchrun's c10d rendezvous):
// one per node. The agent on the node that owns the endpoint hosts the rendezvous store, so it
// outlives every worker. Agents form a generation of MIN..MAX nodes (rendezvous.h), start their
// workers with the generation's ranks, and when any worker on any node fails (or a node goes
// silent) every node stops its workers and a new generation forms, up to max_restarts times.
#pragma once

#include <string>

#include <kiln/core/arg.h>
#include <kiln/parallel/launcher.h>
#include <kiln/parallel/rendezvous.h>

namespace kiln::dist {

/// Options of an elastic agent: what to launch, the rendezvous, and its endpoint.
struct ElasticOptions {
  LaunchOptions launch_;         ///< command, nproc_per_node, max_restarts, monitor_interval, stop_grace, fds
  RendezvousOptions rendezvous_; ///< min/max nodes and the timeouts
  std::string endpoint_host_;    ///< --rdzv-endpoint HOST (IPv4, IPv6 in brackets, or a name)
  KILN_ARG(int, endpoint_port) = 29400;
  std::string run_id_ = "none";  ///< --rdzv-id: agents with different ids never meet
  /// --rdzv-bind: the address the hosting agent's store listens on; empty: the endpoint's address;
  /// "*" (or "::", "0.0.0.0"): every interface.
  std::string bind_;
  /// Whether this agent hosts the store: "auto" when the endpoint is one of this machine's
  /// addresses (and its port is free), "yes", "no".
  std::string is_host_ = "auto";
  KILN_ARG(size_t, max_connections) = 1024;  ///< the hosted store's connection limit

  ElasticOptions& launch(LaunchOptions v) { launch_ = std::move(v); return *this; }
  ElasticOptions& rendezvous(RendezvousOptions v) { rendezvous_ = v; return *this; }
  ElasticOptions& endpoint_host(std::string v) { endpoint_host_ = std::move(v); return *this; }
  ElasticOptions& run_id(std::string v) { run_id_ = std::move(v); return *this; }
  ElasticOptions& bind(std::string v) { bind_ = std::move(v); return *this; }
  ElasticOptions& is_host(std::string v) { is_host_ = std::move(v); return *this; }
};

/// Runs this node's part of the job until it succeeds (0), or fails for good: the failed worker's
/// status when the failure was on this node, 1 when it was elsewhere or the rendezvous failed,
/// 128 + signal when the agent was signalled. Every line it prints starts "kiln-run[<node>]: ".
int run_elastic(const ElasticOptions& options);

/// "HOST:PORT" or "[V6]:PORT" split; throws naming the text when malformed.
std::pair<std::string, int> parse_endpoint(const std::string& text);

}  // namespace kiln::dist
