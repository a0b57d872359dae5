// Rendezvous (rendezvous.h): generations of agents formed through store counters, and the
// reports a running generation's agents exchange. See Note [Elastic rendezvous].
#include <kiln/parallel/rendezvous.h>

#include <charconv>
#include <sstream>
#include <thread>

#include <kiln/core/error.h>

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Elastic rendezvous]
// Keys (under the run's prefix), all written with set/add, which the store does atomically:
//   generation          the newest generation opened (add(0) reads it; starts at 0)
//   open/<g>            elects the one agent that opens generation g after g-1 failed
//   g/<g>/joined        add(1) gives each joining agent its index (join order)
//   g/<g>/node/<i>      agent i's NodeInfo
//   g/<g>/closed        the number of members, set once by agent 0 when MAX joined, or MIN did
//                       and last_call passed without another; later joiners wait for g+1
//   g/<g>/waiting       agents waiting for g+1 (newcomers, late joiners)
//   g/<g>/failure       the first failure reported; g/<g>/failure/<i> all of them, counted by
//                       g/<g>/failures; g/<g>/done counts finished nodes
//   g/<g>/hb/<i>        agent i's heartbeat counter
//   g/<g>/events        moves on every failure, done, waiting: the one key agents poll
//   shutdown            set by an agent out of restarts: every agent stops, nobody rejoins
// Restarting agents all ask for g+1 and exactly one opens it; a node that died simply does not
// join, so the next generation is smaller, and a newcomer counted in `waiting` makes the running
// agents stop their workers and reform with it while the generation has fewer than MAX nodes.
// Workers never see these keys: each generation's workers get the prefix
// "<run prefix>/g<g>/workers", so every worker key (the NCCL id included) is new per generation.

int64_t parse_i64(const std::string& s, const std::string& what) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK_DIST(ec == std::errc() && end == s.data() + s.size(), "rendezvous: ", what, " holds \"", s,
                  "\", not an integer");
  return v;
}

}  // namespace

std::string encode_node(const NodeInfo& node) {
  return node.name + " " + std::to_string(node.nproc) + " " + node.address;
}

NodeInfo decode_node(const std::string& text) {
  std::istringstream in(text);
  NodeInfo n;
  in >> n.name >> n.nproc >> n.address;
  KILN_CHECK_DIST(!in.fail() && n.nproc >= 1, "rendezvous: malformed node record \"", text, "\"");
  return n;
}

Rendezvous::Rendezvous(std::shared_ptr<Store> store, RendezvousOptions options, NodeInfo self)
    : store_(std::move(store)), o_(options), self_(std::move(self)) {
  KILN_CHECK(o_.min_nodes_ >= 1 && o_.max_nodes_ >= o_.min_nodes_, "rendezvous: nnodes ", o_.min_nodes_, ":",
             o_.max_nodes_, " is not a range MIN:MAX with 1 <= MIN <= MAX");
  KILN_CHECK(self_.name.find(' ') == std::string::npos && self_.address.find(' ') == std::string::npos &&
                 !self_.name.empty() && !self_.address.empty(),
             "rendezvous: node name \"", self_.name, "\" and address \"", self_.address, "\" must be non-empty words");
}

std::string Rendezvous::key(int64_t gen, const std::string& name) const {
  return "g/" + std::to_string(gen) + "/" + name;
}

void Rendezvous::check_shutdown() {
  if (auto why = shutdown_reason()) KILN_FAIL_DIST("rendezvous: the job was shut down: ", *why);
}

void Rendezvous::wait_for_generation_after(int64_t gen, Clock::time_point deadline) {
  while (store_->add("generation", 0) <= gen) {
    check_shutdown();
    KILN_CHECK_DIST(Clock::now() < deadline, "rendezvous: no generation after ", gen, " opened within ",
                    o_.join_timeout_.count() / 1000.0, " s");
    std::this_thread::sleep_for(o_.poll_interval_);
  }
}

Generation Rendezvous::join() {
  const auto deadline = Clock::now() + o_.join_timeout_;
  beats_.clear();
  for (;;) {
    check_shutdown();
    int64_t g = store_->add("generation", 0);
    if (g <= last_joined_) {  // restarting after generation g: one agent opens the next
      if (store_->add("open/" + std::to_string(last_joined_ + 1), 1) == 1) store_->add("generation", 1);
      wait_for_generation_after(last_joined_, deadline);
      continue;
    }
    if (store_->check(key(g, "closed"))) {  // it runs already: ask for room in the next one
      store_->add(key(g, "waiting"), 1);
      store_->add(key(g, "events"), 1);
      wait_for_generation_after(g, deadline);
      continue;
    }
    const int64_t index = store_->add(key(g, "joined"), 1) - 1;
    store_->set(key(g, "node/" + std::to_string(index)), encode_node(self_));
    if (index == 0) {
      // The closer: take members until MAX, or MIN and a quiet last call.
      int64_t seen = 1;
      auto changed = Clock::now();
      for (;;) {
        const int64_t n = store_->add(key(g, "joined"), 0);
        if (n != seen) seen = n, changed = Clock::now();
        if (n >= o_.max_nodes_ || (n >= o_.min_nodes_ && Clock::now() - changed >= o_.last_call_)) {
          store_->set(key(g, "closed"), std::to_string(std::min<int64_t>(n, o_.max_nodes_)));
          break;
        }
        if (Clock::now() >= deadline) {
          shutdown(kiln::detail::str_cat("only ", n, " of at least ", o_.min_nodes_, " nodes joined generation ", g,
                                         " within ", o_.join_timeout_.count() / 1000.0, " s"));
          check_shutdown();
        }
        std::this_thread::sleep_for(o_.poll_interval_);
      }
    } else {
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      try {
        store_->wait({key(g, "closed")}, std::max(left, Millis(1)));
      } catch (const DistributedError&) {
        check_shutdown();
        throw;
      }
    }
    const int64_t members = parse_i64(store_->get_string(key(g, "closed")), key(g, "closed"));
    last_joined_ = g;
    if (index >= members) {  // joined after it closed
      store_->add(key(g, "waiting"), 1);
      store_->add(key(g, "events"), 1);
      wait_for_generation_after(g, deadline);
      continue;
    }
    Generation gen;
    gen.number = g;
    gen.node_rank = int(index);
    for (int64_t i = 0; i < members; ++i) {
      const std::string k = key(g, "node/" + std::to_string(i));
      store_->wait({k}, o_.join_timeout_);
      NodeInfo n = decode_node(store_->get_string(k));
      if (i < index) gen.rank_offset += n.nproc;
      gen.world_size += n.nproc;
      gen.nodes.push_back(std::move(n));
    }
    gen_ = gen;
    return gen;
  }
}

int64_t Rendezvous::events() { return store_->add(key(gen_.number, "events"), 0); }

void Rendezvous::report_failure(const std::string& what) {
  const int64_t n = store_->add(key(gen_.number, "failures"), 1);
  store_->set(key(gen_.number, "failure/" + std::to_string(n - 1)), what);
  if (!store_->check(key(gen_.number, "failure"))) store_->set(key(gen_.number, "failure"), what);
  store_->add(key(gen_.number, "events"), 1);
}

std::vector<std::string> Rendezvous::failures() {
  std::vector<std::string> out;
  const int64_t n = store_->add(key(gen_.number, "failures"), 0);
  for (int64_t i = 0; i < n; ++i) {
    const std::string k = key(gen_.number, "failure/" + std::to_string(i));
    if (store_->check(k)) out.push_back(store_->get_string(k));
  }
  return out;
}

std::optional<std::string> Rendezvous::failure() {
  if (!store_->check(key(gen_.number, "failure"))) return std::nullopt;
  return store_->get_string(key(gen_.number, "failure"));
}

void Rendezvous::report_done() {
  store_->set(key(gen_.number, "done/" + std::to_string(gen_.node_rank)), "1");
  store_->add(key(gen_.number, "events"), 1);
  store_->add(key(gen_.number, "done"), 1);  // last: the hosting agent may leave once the count is full
}

void Rendezvous::report_exit() noexcept {
  try {
    store_->add("exited/" + std::to_string(gen_.number), 1);
  } catch (const std::exception&) {  // the store's host may be gone already: nothing to tell
  }
}

void Rendezvous::await_exits(int64_t others, Millis at_most) noexcept {
  const auto deadline = Clock::now() + at_most;
  try {
    while (Clock::now() < deadline && store_->add("exited/" + std::to_string(gen_.number), 0) < others)
      std::this_thread::sleep_for(o_.poll_interval_);
  } catch (const std::exception&) {
  }
}

int64_t Rendezvous::done_count() { return store_->add(key(gen_.number, "done"), 0); }
bool Rendezvous::node_done(int node) { return store_->check(key(gen_.number, "done/" + std::to_string(node))); }

void Rendezvous::report_stopped() {
  store_->set(key(gen_.number, "stopped/" + std::to_string(gen_.node_rank)), "1");
}
int64_t Rendezvous::waiting_count() { return store_->add(key(gen_.number, "waiting"), 0); }

void Rendezvous::shutdown(const std::string& why) {
  if (!store_->check("shutdown")) store_->set("shutdown", why);
  if (gen_.number >= 0) store_->add(key(gen_.number, "events"), 1);
}

std::optional<std::string> Rendezvous::shutdown_reason() {
  if (!store_->check("shutdown")) return std::nullopt;
  return store_->get_string("shutdown");
}

std::vector<int> Rendezvous::silent_nodes(Millis wait) {
  // Finished and stopped nodes beat no more on purpose; when every other node is one, nothing to wait for.
  auto accounted = [&](int i) {
    return node_done(i) || store_->check(key(gen_.number, "stopped/" + std::to_string(i)));
  };
  std::vector<int> candidates;
  for (int i = 0; i < gen_.nnodes(); ++i)
    if (i != gen_.node_rank && !accounted(i)) candidates.push_back(i);
  if (candidates.empty()) return {};
  std::vector<int64_t> before;
  for (int i : candidates) before.push_back(store_->add(key(gen_.number, "hb/" + std::to_string(i)), 0));
  std::this_thread::sleep_for(wait);
  std::vector<int> silent;
  for (size_t k = 0; k < candidates.size(); ++k) {
    const int i = candidates[k];
    if (store_->add(key(gen_.number, "hb/" + std::to_string(i)), 0) == before[k] && !accounted(i)) silent.push_back(i);
  }
  return silent;
}

std::vector<int> Rendezvous::heartbeat() {
  store_->add(key(gen_.number, "hb/" + std::to_string(gen_.node_rank)), 1);
  std::vector<int> stale;
  const auto now = Clock::now();
  for (int i = 0; i < gen_.nnodes(); ++i) {
    if (i == gen_.node_rank) continue;
    const int64_t v = store_->add(key(gen_.number, "hb/" + std::to_string(i)), 0);
    auto it = beats_.find(i);
    if (it == beats_.end() || it->second.first != v) beats_[i] = {v, now};
    else if (now - it->second.second >= o_.heartbeat_timeout_ && !node_done(i)) stale.push_back(i);
  }
  return stale;
}

}  // namespace kiln::dist
