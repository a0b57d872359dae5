// launch(): the static launcher of one node (fixed nnodes and node_rank): run its worker group
// (worker_group.h) and restart it after a failure up to max_restarts times.
#include <kiln/parallel/launcher.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <kiln/core/error.h>

#include "worker_group.h"

namespace kiln::dist {
namespace {

using detail::write_all;

void validate(const LaunchOptions& o) {
  KILN_CHECK(!o.command_.empty() && !o.command_[0].empty(), "launch: no program to run");
  KILN_CHECK(o.nproc_per_node_ >= 1, "launch: nproc_per_node must be at least 1, got ", o.nproc_per_node_);
  KILN_CHECK(o.nnodes_ >= 1, "launch: nnodes must be at least 1, got ", o.nnodes_);
  KILN_CHECK(o.node_rank_ >= 0 && o.node_rank_ < o.nnodes_, "launch: node_rank must be in [0, ", o.nnodes_,
             "), got ", o.node_rank_);
  KILN_CHECK(!o.standalone_ || o.nnodes_ == 1, "launch: standalone runs one node, got nnodes ", o.nnodes_);
  KILN_CHECK(o.standalone_ || (o.master_port_ >= 1 && o.master_port_ <= 65535),
             "launch: master_port must be in [1, 65535], got ", o.master_port_);
  KILN_CHECK(o.standalone_ || !o.master_addr_.empty(), "launch: master_addr is empty");
  KILN_CHECK(o.max_restarts_ >= 0, "launch: max_restarts must be at least 0, got ", o.max_restarts_);
  KILN_CHECK(o.monitor_interval_.count() > 0, "launch: monitor_interval must be positive, got ",
             o.monitor_interval_.count(), " ms");
  KILN_CHECK(o.stop_grace_.count() >= 0, "launch: stop_grace must be at least 0, got ", o.stop_grace_.count(),
             " ms");
}

}  // namespace

int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  KILN_CHECK(fd >= 0, "pick_free_port: socket failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // port 0: the kernel picks one
  socklen_t len = sizeof addr;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int e = errno;
  ::close(fd);
  KILN_CHECK(ok, "pick_free_port: could not bind a port on 127.0.0.1: ", std::strerror(e));
  return ntohs(addr.sin_port);
}

int launch(const LaunchOptions& options) {
  validate(options);
  int port = options.standalone_ ? pick_free_port() : options.master_port_;
  detail::SignalGuard signals;
  for (int restart = 0;; ++restart) {
    detail::WorkerEnv env;
    env.rank_offset = options.node_rank_ * options.nproc_per_node_;
    env.world_size = options.nproc_per_node_ * options.nnodes_;
    env.group_rank = options.node_rank_;
    env.group_world_size = options.nnodes_;
    env.master_addr = options.standalone_ ? std::string("127.0.0.1") : options.master_addr_;
    env.master_port = port;
    env.restart_count = restart;
    detail::WorkerGroup group(options, std::move(env), signals.read_fd());
    group.start();
    int status = group.wait();
    if (status == 0) return 0;
    if (group.stop_signal() != 0) return status;
    const std::string& failure = group.failure();
    if (restart < options.max_restarts_) {
      write_all(options.stderr_fd_, kiln::detail::str_cat("kiln-run: ", failure, "; restarting all ",
                                                          options.nproc_per_node_, " workers (restart ", restart + 1,
                                                          " of ", options.max_restarts_, ")\n"));
      continue;
    }
    write_all(options.stderr_fd_, "kiln-run: " + failure + "\n");
    return status;
  }
}

}  // namespace kiln::dist
