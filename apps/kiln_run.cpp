// kiln-run: Kiln's torchrun. Same flags (--nproc-per-node, --nnodes, --node-rank, --master-addr,
// --master-port, --standalone, --max-restarts, and for elastic jobs --nnodes MIN:MAX with
// --rdzv-endpoint, --rdzv-id, --rdzv-conf), same worker variables; the program and its arguments
// follow the first positional (or `--`) untouched. The work is kiln::dist::launch() (static) or
// kiln::dist::run_elastic() (with --rdzv-endpoint).
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/error.h>
#include <kiln/parallel/elastic_agent.h>
#include <kiln/parallel/launcher.h>

#include "common/app_main.h"

namespace {

const char* kDescription =
    "kiln-run: start nproc-per-node workers of a data-parallel job on this node, like torchrun.\n"
    "Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,\n"
    "MASTER_ADDR, MASTER_PORT and KILN_RESTART_COUNT; its output lines are prefixed \"[rank N] \".\n"
    "When a worker fails the others are stopped (SIGTERM, SIGKILL after a grace period) and\n"
    "kiln-run exits with the failed worker's status (128 + signal when killed).\n"
    "The worker command follows the options: kiln-run [OPTIONS] [--] program [args...];\n"
    "everything after the program is passed to it untouched.\n"
    "Elastic jobs: kiln-run --nnodes MIN:MAX --rdzv-endpoint HOST:PORT --rdzv-id ID on every node;\n"
    "the kiln-run on the endpoint's machine hosts the rendezvous store, and a failure on any node\n"
    "restarts every node's workers in a new generation (up to --max-restarts).";

// "N" or "MIN:MAX".
std::pair<int, int> parse_nnodes(const std::string& text) {
  const size_t colon = text.find(':');
  auto number = [&](const std::string& t) {
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(t, &used);
    } catch (const std::exception&) {
    }
    KILN_CHECK(used == t.size() && v >= 1, "--nnodes \"", text, "\": expected N or MIN:MAX with 1 <= MIN <= MAX");
    return v;
  };
  if (colon == std::string::npos) return {number(text), number(text)};
  std::pair<int, int> r{number(text.substr(0, colon)), number(text.substr(colon + 1))};
  KILN_CHECK(r.first <= r.second, "--nnodes \"", text, "\": MIN exceeds MAX");
  return r;
}

// torchrun's --rdzv-conf: "key=value,key=value"; times in seconds.
void apply_rdzv_conf(const std::string& text, kiln::dist::ElasticOptions& e) {
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    KILN_CHECK(eq != std::string::npos, "--rdzv-conf: \"", item, "\" is not key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto seconds = [&] {
      double v = -1;
      try {
        v = std::stod(value);
      } catch (const std::exception&) {
      }
      KILN_CHECK(v > 0, "--rdzv-conf: ", key, "=", value, " is not a positive number of seconds");
      return std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
    };
    if (key == "join_timeout") e.rendezvous_.join_timeout(seconds());
    else if (key == "last_call_timeout") e.rendezvous_.last_call(seconds());
    else if (key == "heartbeat_timeout") e.rendezvous_.heartbeat_timeout(seconds());
    else if (key == "max_connections") {
      size_t used = 0;
      long n = 0;
      try {
        n = std::stol(value, &used);
      } catch (const std::exception&) {
      }
      KILN_CHECK(used == value.size() && n >= 1, "--rdzv-conf: max_connections=", value, " is not a positive integer");
      e.max_connections(size_t(n));
    }
    else if (key == "is_host") e.is_host(value == "1" || value == "true" || value == "True" ? "yes" : "no");
    else KILN_FAIL("--rdzv-conf: unknown key \"", key, "\" (known: join_timeout, last_call_timeout, heartbeat_timeout, max_connections, is_host)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  kiln::dist::LaunchOptions o;
  double monitor_interval_s = 0.1, stop_grace_s = 5.0;
  CLI::App app{kDescription, "kiln-run"};
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node_, "workers on this node (default 1)");
  std::string nnodes = "1", rdzv_endpoint, rdzv_conf, rdzv_backend = "c10d";
  kiln::dist::ElasticOptions elastic;
  app.add_option("--nnodes", nnodes, "nodes in the job, or MIN:MAX nodes for an elastic job (default 1)");
  app.add_option("--node-rank,--node_rank", o.node_rank_, "this node's index in [0, nnodes) (default 0)");
  app.add_option("--master-addr,--master_addr", o.master_addr_,
                 "address of the rank 0 node, exported as MASTER_ADDR (default 127.0.0.1)");
  app.add_option("--master-port,--master_port", o.master_port_,
                 "port of the rank 0 rendezvous, exported as MASTER_PORT (default 29500)");
  app.add_flag("--standalone", o.standalone_,
               "single-node job: MASTER_ADDR 127.0.0.1 and a free MASTER_PORT picked by kiln-run");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts_,
                 "restart all workers up to this many times after a failure (default 0)");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint,
                 "HOST:PORT of the rendezvous store ([V6]:PORT for IPv6): makes the job elastic; the kiln-run "
                 "on the machine owning that address hosts the store; workers get MASTER_ADDR/PORT = it");
  app.add_option("--rdzv-id,--rdzv_id", elastic.run_id_, "job id shared by all nodes of one job (default none)");
  app.add_option("--rdzv-bind,--rdzv_bind", elastic.bind_,
                 "address the hosted store listens on: default the endpoint's address; '*' every interface "
                 "(IPv6 and IPv4), '0.0.0.0' every IPv4 one");
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend, "c10d (the default; the only one)");
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "key=value,...: join_timeout (s, default 600), last_call_timeout (s, default 2), "
                 "heartbeat_timeout (s, default 15), max_connections (of the hosted store, default 1024), "
                 "is_host (auto when absent)");
  app.add_option("--monitor-interval,--monitor_interval", monitor_interval_s,
                 "seconds between checks for exited workers (default 0.1)");
  app.add_option("--stop-grace", stop_grace_s,
                 "seconds between SIGTERM and SIGKILL when stopping workers (default 5)");
  app.prefix_command();  // the first positional and everything after it is the worker command

  return kiln::apps::run_main(app, argc, argv, kiln::apps::AppMainOptions("kiln-run"), [&] {
    std::vector<std::string> command = app.remaining();
    if (!command.empty() && command[0] == "--") command.erase(command.begin());
    else if (!command.empty() && command[0].size() > 1 && command[0][0] == '-') {
      std::fprintf(stderr, "kiln-run: unknown option %s (see kiln-run --help)\n", command[0].c_str());
      return 2;
    }
    if (command.empty()) {
      std::fprintf(stderr, "kiln-run: no program given (usage: kiln-run [options] [--] program [args...])\n");
      return 2;
    }
    o.command_ = std::move(command);
    o.monitor_interval_ = std::chrono::milliseconds(static_cast<int64_t>(monitor_interval_s * 1000));
    o.stop_grace_ = std::chrono::milliseconds(static_cast<int64_t>(stop_grace_s * 1000));
    const auto [min_nodes, max_nodes] = parse_nnodes(nnodes);
    if (rdzv_endpoint.empty()) {
      KILN_CHECK(min_nodes == max_nodes, "--nnodes ", nnodes, ": a range needs --rdzv-endpoint (an elastic job)");
      o.nnodes_ = min_nodes;
      return kiln::dist::launch(o);
    }
    KILN_CHECK(rdzv_backend == "c10d", "--rdzv-backend ", rdzv_backend, ": only c10d is supported");
    KILN_CHECK(!o.standalone_, "--standalone and --rdzv-endpoint exclude each other");
    auto [host, port] = kiln::dist::parse_endpoint(rdzv_endpoint);
    elastic.endpoint_host(host).endpoint_port(port);
    elastic.rendezvous_.min_nodes(min_nodes).max_nodes(max_nodes);
    apply_rdzv_conf(rdzv_conf, elastic);
    elastic.launch(o);
    return kiln::dist::run_elastic(elastic);
  });
}
