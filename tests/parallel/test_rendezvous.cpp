// The elastic agents' rendezvous (parallel/rendezvous.h) with agents as threads over one TCP
// store: generations of MIN..MAX nodes with consistent ranks, failure reports every agent sees,
// a smaller next generation when a node does not come back, a late node admitted through
// `waiting`, stale heartbeats, shutdown, and a join timeout that names the count.
#include "test_util.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include <kiln/parallel/launcher.h>
#include <kiln/parallel/rendezvous.h>
#include <kiln/parallel/store.h>

using namespace kiln;
using namespace kiln::dist;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  uint16_t port = uint16_t(pick_free_port());
  std::shared_ptr<Store> server =
      make_tcp_store(TCPStoreOptions().host("127.0.0.1").port(port).is_server(true).timeout(10s));

  std::unique_ptr<Rendezvous> agent(int i, int min, int max, int nproc = 1) {
    auto client = make_tcp_store(TCPStoreOptions().host("127.0.0.1").port(port).timeout(10s));
    RendezvousOptions o;
    o.min_nodes(min).max_nodes(max).last_call(300ms).join_timeout(10s).heartbeat_timeout(400ms).poll_interval(10ms);
    return std::make_unique<Rendezvous>(make_prefix_store("kiln-rdzv/test", client), o,
                                        NodeInfo{"node" + std::to_string(i), "10.0.0." + std::to_string(i), nproc});
  }
};

std::vector<Generation> join_all(std::vector<std::unique_ptr<Rendezvous>>& agents) {
  std::vector<std::future<Generation>> f;
  for (auto& a : agents) f.push_back(std::async(std::launch::async, [&a] { return a->join(); }));
  std::vector<Generation> out;
  for (auto& x : f) out.push_back(x.get());
  return out;
}

}  // namespace

TEST_CASE("three agents form one generation with consistent node and global ranks") {
  Fixture fx;
  std::vector<std::unique_ptr<Rendezvous>> agents;
  for (int i = 0; i < 3; ++i) agents.push_back(fx.agent(i, 2, 3, i + 1));  // 1, 2 and 3 workers
  auto gens = join_all(agents);
  std::vector<int> node_ranks;
  for (const Generation& g : gens) {
    CHECK(g.number == 0);
    CHECK(g.nnodes() == 3);
    CHECK(g.world_size == 6);
    node_ranks.push_back(g.node_rank);
    int offset = 0;
    for (int i = 0; i < g.node_rank; ++i) offset += g.nodes[size_t(i)].nproc;
    CHECK(g.rank_offset == offset);
    CHECK(gens[0].nodes[size_t(g.node_rank)].name == g.nodes[size_t(g.node_rank)].name);
  }
  std::sort(node_ranks.begin(), node_ranks.end());
  CHECK(node_ranks == std::vector<int>{0, 1, 2});
}

TEST_CASE("a failure is seen by every agent; without the dead node the next generation is smaller") {
  Fixture fx;
  std::vector<std::unique_ptr<Rendezvous>> agents;
  for (int i = 0; i < 3; ++i) agents.push_back(fx.agent(i, 2, 3));
  join_all(agents);
  const int64_t before = agents[0]->events();
  agents[2]->report_failure("node 2: rank 2 failed: killed by SIGKILL");
  CHECK(agents[0]->events() > before);
  CHECK(agents[1]->failure().value_or("") == "node 2: rank 2 failed: killed by SIGKILL");
  agents.pop_back();  // that node is gone
  auto gens = join_all(agents);
  for (const Generation& g : gens) {
    CHECK(g.number == 1);
    CHECK(g.world_size == 2);
    CHECK_FALSE(agents[0]->failure().has_value());  // reports are per generation
  }
}

TEST_CASE("a node arriving while a generation runs waits, is counted, and joins the next one") {
  Fixture fx;
  std::vector<std::unique_ptr<Rendezvous>> agents;
  for (int i = 0; i < 2; ++i) agents.push_back(fx.agent(i, 2, 3));
  join_all(agents);
  auto late = fx.agent(7, 2, 3);
  auto late_join = std::async(std::launch::async, [&] { return late->join(); });
  for (int i = 0; i < 200 && agents[0]->waiting_count() == 0; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(agents[0]->waiting_count() == 1);
  auto gens = join_all(agents);  // the running agents make room: generation 1 with three nodes
  const Generation third = late_join.get();
  CHECK(third.number == 1);
  CHECK(third.nnodes() == 3);
  CHECK(gens[0].nnodes() == 3);
}

TEST_CASE("a silent node's heartbeat goes stale; a finished node's does not count") {
  Fixture fx;
  std::vector<std::unique_ptr<Rendezvous>> agents;
  for (int i = 0; i < 3; ++i) agents.push_back(fx.agent(i, 3, 3));
  auto gens = join_all(agents);
  int silent = -1, finished = -1, watcher = -1;
  for (int i = 0; i < 3; ++i) {
    if (gens[size_t(i)].node_rank == 1) silent = i;
    else if (gens[size_t(i)].node_rank == 2) finished = i;
    else watcher = i;
  }
  agents[size_t(finished)]->report_done();
  std::vector<int> stale;
  for (int i = 0; i < 100 && stale.empty(); ++i) {
    stale = agents[size_t(watcher)]->heartbeat();
    std::this_thread::sleep_for(20ms);
  }
  CHECK(stale == std::vector<int>{1});
  CHECK(agents[size_t(watcher)]->done_count() == 1);
}

TEST_CASE("shutdown stops later joins; too few nodes time out naming the count") {
  Fixture fx;
  {
    RendezvousOptions o;
    auto client = make_tcp_store(TCPStoreOptions().host("127.0.0.1").port(fx.port).timeout(10s));
    Rendezvous lonely(make_prefix_store("kiln-rdzv/other", client),
                      o.min_nodes(2).max_nodes(2).join_timeout(500ms).poll_interval(10ms), NodeInfo{"n", "1.2.3.4", 1});
    CHECK_THROWS_WITH_AS(lonely.join(), doctest::Contains("only 1 of at least 2 nodes joined generation 0"),
                         DistributedError);
  }
  std::vector<std::unique_ptr<Rendezvous>> agents;
  for (int i = 0; i < 2; ++i) agents.push_back(fx.agent(i, 2, 2));
  join_all(agents);
  agents[0]->shutdown("node 0: no restarts left");
  CHECK_THROWS_WITH_AS(agents[1]->join(), doctest::Contains("no restarts left"), DistributedError);
}
