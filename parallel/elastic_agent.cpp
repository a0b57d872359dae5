// run_elastic (elastic_agent.h): host the rendezvous store when the endpoint is ours, join
// generations, run this node's workers in each, and turn any failure anywhere into a coordinated
// stop and a new generation (Note [Elastic rendezvous] in rendezvous.cpp).
#include <kiln/parallel/elastic_agent.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <thread>

#include <kiln/core/error.h>

#include "tcp_store_detail.h"
#include "worker_group.h"

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string numeric(const sockaddr* a, socklen_t len) {
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(a, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "";
  std::string s = host;
  if (auto pct = s.find('%'); pct != std::string::npos) s.resize(pct);  // drop an IPv6 scope
  return s;
}

// The address this machine uses to reach host:port (what peers can reach it at): a UDP socket
// "connected" there (no packet is sent) and asked for its own address.
std::string local_address_towards(const std::string& host, int port) {
  for (const tcp::Address& a : tcp::resolve(host, uint16_t(port))) {
    tcp::Fd fd(::socket(a.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid() || ::connect(fd.get(), a.get(), a.len) != 0) continue;
    sockaddr_storage self{};
    socklen_t len = sizeof self;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&self), &len) != 0) continue;
    std::string s = numeric(reinterpret_cast<sockaddr*>(&self), len);
    if (!s.empty()) return s;
  }
  KILN_FAIL_DIST("kiln-run: no route from this machine to the rendezvous endpoint ", tcp::host_port(host, uint16_t(port)));
  __builtin_unreachable();
}

// Whether one of this machine's interfaces has one of host's addresses.
bool is_local(const std::string& host, int port) {
  std::vector<std::string> mine;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return false;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    const socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    mine.push_back(numeric(i->ifa_addr, len));
  }
  ::freeifaddrs(ifs);
  for (const tcp::Address& a : tcp::resolve(host, uint16_t(port)))
    if (std::find(mine.begin(), mine.end(), numeric(a.get(), a.len)) != mine.end()) return true;
  return false;
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "host";
  std::string s = name;
  std::replace(s.begin(), s.end(), ' ', '_');
  return s;
}

// Every failure reported in the generation, the ones that killed a worker by signal first: after
// a death, the survivors' collectives fail too, and their reports may reach the store first; the
// worker that died of a signal is the likelier cause. A local failure waits a moment for the
// others' reports, and when none comes, looks for nodes whose agent went silent (killed with its
// workers: nobody reports those), so the message names the node that vanished.
// `vanished` counts those nodes (no exit report will come from them).
std::string all_failures(Rendezvous& rdzv, const std::string& known, bool local, Millis beat_every, int& vanished) {
  std::vector<std::string> all;
  vanished = 0;
  try {
    if (local) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      if (rdzv.failures().size() <= 1) {
        const Generation& g = rdzv.generation();
        for (int i : rdzv.silent_nodes(beat_every * 2 + Millis(200))) {
          ++vanished;
          all.push_back(kiln::detail::str_cat("node ", i, " (", g.nodes[size_t(i)].name,
                                              ") stopped responding: its agent is gone (killed, or the host is down?)"));
        }
      }
    }
    for (std::string& f : rdzv.failures()) all.push_back(std::move(f));
  } catch (const Error&) {
  }
  if (all.empty()) return known;
  std::stable_partition(all.begin(), all.end(),
                        [](const std::string& f) { return f.find("killed by SIG") != std::string::npos; });
  std::string s;
  for (size_t i = 0; i < all.size(); ++i) s += (i ? "; " : "") + all[i];
  return s;
}

class Agent {
 public:
  explicit Agent(const ElasticOptions& o) : o_(o) {}
  int run();

 private:
  void say(const std::string& line) { detail::write_all(o_.launch_.stderr_fd_, "kiln-run[" + self_.name + "]: " + line + "\n"); }
  std::string node(const Generation& g, int i) const {
    return kiln::detail::str_cat("node ", i, " (", g.nodes[size_t(i)].name, ")");
  }
  bool host_store();
  detail::WorkerEnv worker_env(const Generation& g, int restarts) const;

  const ElasticOptions& o_;
  NodeInfo self_;
  std::shared_ptr<void> server_;
};

bool Agent::host_store() {
  const std::string& mode = o_.is_host_;
  if (mode == "no" || (mode == "auto" && !is_local(o_.endpoint_host_, o_.endpoint_port_))) return false;
  TCPStoreOptions so;
  so.host(o_.endpoint_host_).port(uint16_t(o_.endpoint_port_)).bind(o_.bind_).max_connections(o_.max_connections_);
  try {
    server_ = serve_tcp_store(so);
    return true;
  } catch (const DistributedError& e) {
    // Another agent on this machine got there first (several nodes on one host, as in tests).
    if (mode == "auto" && std::string(e.what()).find(tcp::errno_text(EADDRINUSE)) != std::string::npos) return false;
    throw;
  }
}

detail::WorkerEnv Agent::worker_env(const Generation& g, int restarts) const {
  detail::WorkerEnv env;
  env.rank_offset = g.rank_offset;
  env.world_size = g.world_size;
  env.group_rank = g.node_rank;
  env.group_world_size = g.nnodes();
  env.master_addr = o_.endpoint_host_;
  env.master_port = o_.endpoint_port_;
  env.restart_count = restarts;
  env.extra = {
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_RUN_ID", o_.run_id_},
      {"KILN_STORE_PREFIX", "kiln-rdzv/" + o_.run_id_ + "/g" + std::to_string(g.number) + "/workers"},
      {"KILN_RDZV_GENERATION", std::to_string(g.number)},
      {"KILN_LOCAL_ADDR", self_.address},
  };
  return env;
}

int Agent::run() {
  self_.address = local_address_towards(o_.endpoint_host_, o_.endpoint_port_);
  self_.name = hostname() + "/" + self_.address;
  self_.nproc = o_.launch_.nproc_per_node_;
  detail::SignalGuard signals;
  const bool hosting = host_store();
  const std::string endpoint = tcp::host_port(o_.endpoint_host_, uint16_t(o_.endpoint_port_));
  if (hosting) say("hosting the rendezvous store at " + endpoint + (o_.bind_.empty() ? "" : " (bound to " + o_.bind_ + ")"));
  const RendezvousOptions& ro = o_.rendezvous_;
  std::shared_ptr<Store> store;
  try {
    store = make_tcp_store(TCPStoreOptions().host(o_.endpoint_host_).port(uint16_t(o_.endpoint_port_)).timeout(ro.join_timeout_));
  } catch (const Error& e) {
    say(std::string("cannot reach the rendezvous store: ") + e.what());
    return 1;
  }
  store->set_timeout(std::min<Millis>(ro.join_timeout_, Millis(30000)));
  Rendezvous rdzv(make_prefix_store("kiln-rdzv/" + o_.run_id_, store), ro, self_);
  const auto beat_every = std::clamp<Millis>(ro.heartbeat_timeout_ / 4, Millis(100), Millis(1000));

  for (int restarts = 0;;) {
    Generation g;
    try {
      g = rdzv.join();
    } catch (const Error& e) {
      say(std::string("rendezvous failed: ") + e.what());
      return 1;
    }
    std::string members;
    for (int i = 0; i < g.nnodes(); ++i) members += (i ? ", " : "") + g.nodes[size_t(i)].name;
    say(kiln::detail::str_cat("generation ", g.number, ": node ", g.node_rank, " of ", g.nnodes(), ", ranks ",
                              g.rank_offset, "..", g.rank_offset + self_.nproc - 1, " of world size ", g.world_size,
                              " (restart ", restarts, " of ", o_.launch_.max_restarts_, "; nodes: ", members, ")"));
    detail::WorkerGroup group(o_.launch_, worker_env(g, restarts), signals.read_fd());
    group.start();
    std::string failure;             // why this generation ends early, once known
    bool local = false, membership = false, shutdown = false, done = false;
    int64_t seen_events = -1;
    auto next_beat = Clock::now();
    for (;;) {
      const bool alive = group.poll();
      if (group.stop_signal() != 0) {
        try {
          rdzv.report_failure(kiln::detail::str_cat(node(g, g.node_rank), " was stopped by SIG",
                                                    sigabbrev_np(group.stop_signal()), " and leaves the job"));
        } catch (const Error&) {
        }
        group.wait();
        say(kiln::detail::str_cat("stopped by SIG", sigabbrev_np(group.stop_signal())));
        return group.result();
      }
      try {
        if (group.failed() && failure.empty()) {
          failure = node(g, g.node_rank) + ": " + group.failure();
          local = true;
          rdzv.report_failure(failure);
          say(group.failure() + "; stopping every node's workers");
        }
        if (!alive && !done && failure.empty() && !membership) {
          rdzv.report_done();
          done = true;
          if (!hosting) {
            say("this node's workers finished");
            rdzv.report_exit();
            return 0;
          }
        }
        if (const int64_t ev = rdzv.events(); ev != seen_events) {
          seen_events = ev;
          if (auto why = rdzv.shutdown_reason(); why && failure.empty()) {
            failure = "the job was shut down: " + *why;
            shutdown = true;
          } else if (auto f = rdzv.failure(); f && failure.empty()) {
            failure = *f;
            say(*f + "; stopping this node's workers");
          } else if (failure.empty() && !done && g.nnodes() < ro.max_nodes_ && rdzv.waiting_count() > 0) {
            membership = true;
            say("a node is waiting to join; stopping the workers to admit it");
          }
          if ((!failure.empty() || membership) && alive) group.stop(SIGTERM);
        }
        if (Clock::now() >= next_beat) {
          next_beat = Clock::now() + beat_every;
          std::vector<int> stale = rdzv.heartbeat();
          if (!stale.empty() && failure.empty()) {
            failure = kiln::detail::str_cat(node(g, stale.front()), " stopped responding (no heartbeat for ",
                                            ro.heartbeat_timeout_.count() / 1000.0, " s)");
            rdzv.report_failure(failure);
            say(failure + "; stopping this node's workers");
            if (alive) group.stop(SIGTERM);
          }
        }
        if (done && rdzv.done_count() >= g.nnodes()) {
          say("every node's workers finished");
          rdzv.await_exits(g.nnodes() - 1, Millis(3000));
          return 0;
        }
      } catch (const DistributedError& e) {
        say(std::string("lost the rendezvous store at ") + endpoint + " (its host agent is gone?): " + e.what() +
            "; stopping this node's workers");
        group.stop(SIGTERM);
        group.wait();
        return local ? group.result() : 1;
      }
      if (!alive && !done) break;
      if (done && !failure.empty()) break;  // a failure elsewhere after this node finished
    }
    try {
      rdzv.report_stopped();  // the heartbeat stops here on purpose: not a vanished agent
    } catch (const Error&) {
    }
    if (shutdown) {
      say(failure);
      if (hosting) rdzv.await_exits(g.nnodes() - 1, Millis(3000));
      else rdzv.report_exit();
      return local ? group.result() : 1;
    }
    if (membership && failure.empty()) continue;  // not a failure: no restart is used up
    int vanished = 0;
    failure = all_failures(rdzv, failure, local, beat_every, vanished);
    if (restarts < o_.launch_.max_restarts_) {
      ++restarts;
      say(kiln::detail::str_cat("restarting the workers in a new generation (restart ", restarts, " of ",
                                o_.launch_.max_restarts_, ") after: ", failure));
      continue;
    }
    say("no restarts left (--max-restarts " + std::to_string(o_.launch_.max_restarts_) + "); failing the job: " + failure);
    try {
      rdzv.shutdown(failure);
    } catch (const Error&) {
    }
    if (hosting) rdzv.await_exits(g.nnodes() - 1 - vanished, Millis(3000));  // not from vanished agents
    else rdzv.report_exit();
    return local ? group.result() : 1;
  }
}

}  // namespace

std::pair<std::string, int> parse_endpoint(const std::string& text) {
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    KILN_CHECK(close != std::string::npos && close + 1 < text.size() && text[close + 1] == ':',
               "--rdzv-endpoint \"", text, "\": expected [IPV6]:PORT");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    KILN_CHECK(colon != std::string::npos && colon > 0 && text.find(':') == colon, "--rdzv-endpoint \"", text,
               "\": expected HOST:PORT (an IPv6 address in brackets)");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  KILN_CHECK(ec == std::errc() && end == port.data() + port.size() && p >= 1 && p <= 65535, "--rdzv-endpoint \"",
             text, "\": the port must be in [1, 65535]");
  return {host, p};
}

int run_elastic(const ElasticOptions& options) {
  const LaunchOptions& l = options.launch_;
  KILN_CHECK(!l.command_.empty() && !l.command_[0].empty(), "launch: no program to run");
  KILN_CHECK(l.nproc_per_node_ >= 1, "launch: nproc_per_node must be at least 1, got ", l.nproc_per_node_);
  KILN_CHECK(l.max_restarts_ >= 0, "launch: max_restarts must be at least 0, got ", l.max_restarts_);
  KILN_CHECK(!options.endpoint_host_.empty(), "kiln-run: --rdzv-endpoint has no host");
  KILN_CHECK(options.endpoint_port_ >= 1 && options.endpoint_port_ <= 65535, "kiln-run: rendezvous port ",
             options.endpoint_port_, " is not in [1, 65535]");
  KILN_CHECK(options.is_host_ == "auto" || options.is_host_ == "yes" || options.is_host_ == "no",
             "kiln-run: is_host must be auto, yes or no, got \"", options.is_host_, "\"");
  KILN_CHECK(!options.run_id_.empty() && options.run_id_.find('/') == std::string::npos, "kiln-run: --rdzv-id \"",
             options.run_id_, "\" must be non-empty and hold no '/'");
  return Agent(options).run();
}

}  // namespace kiln::dist
