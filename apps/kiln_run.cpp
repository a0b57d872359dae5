// kiln-run: Kiln's torchrun. Same flags (--nproc-per-node, --nnodes, --node-rank, --master-addr,
// --master-port, --standalone, --max-restarts), same worker variables; the program and its
// arguments follow the first positional (or `--`) untouched. The work is kiln::dist::launch().
#include <cstdio>
#include <string>
#include <vector>

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
    "everything after the program is passed to it untouched.";

}  // namespace

int main(int argc, char** argv) {
  kiln::dist::LaunchOptions o;
  double monitor_interval_s = 0.1, stop_grace_s = 5.0;
  CLI::App app{kDescription, "kiln-run"};
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node_, "workers on this node (default 1)");
  app.add_option("--nnodes", o.nnodes_, "nodes in the job (default 1)");
  app.add_option("--node-rank,--node_rank", o.node_rank_, "this node's index in [0, nnodes) (default 0)");
  app.add_option("--master-addr,--master_addr", o.master_addr_,
                 "address of the rank 0 node, exported as MASTER_ADDR (default 127.0.0.1)");
  app.add_option("--master-port,--master_port", o.master_port_,
                 "port of the rank 0 rendezvous, exported as MASTER_PORT (default 29500)");
  app.add_flag("--standalone", o.standalone_,
               "single-node job: MASTER_ADDR 127.0.0.1 and a free MASTER_PORT picked by kiln-run");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts_,
                 "restart all workers up to this many times after a failure (default 0)");
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
    return kiln::dist::launch(o);
  });
}
