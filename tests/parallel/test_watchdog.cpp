// The process groups' watchdog on Gloo (Note [Watchdog]): an injected stall or death of one rank
// turns into a DistributedError on every rank within the timeout (plus the report's couple of
// seconds), naming the collective, its sequence number and the missing rank; later collectives
// fail at once; the flight recorder's dump exists and parses; the group is destroyed at once.
// Also KILN_FAULT_INJECT parsing, the flight recorder's ring and KILN_DIST_TIMEOUT.
#include "parallel/temp_dir.h"
#include "parallel/watchdog_fixtures.h"
#include "test_util.h"

#include <filesystem>

#include <kiln/parallel/fault_injection.h>
#include <kiln/parallel/file_store.h>
#include <kiln/parallel/flight_recorder.h>
#include <kiln/parallel/gloo_process_group.h>
#include <kiln/parallel/init.h>

using namespace kiln;
using nlohmann::json;
using test::contains;
using test::failure_of;
using test::FaultScope;
using test::ScopedEnv;
using test::seconds_since;
using test::SteadyClock;

namespace {

// The finished Gloo flight-recorder dumps of `rank` in `dir` (a dump appears by rename, so a
// listed file is complete; the writer's ".tmp<pid>" file is not one).
std::vector<std::string> gloo_dumps(const std::string& dir, int rank) {
  const std::string prefix = "kiln_flight_recorder_Gloo_rank" + std::to_string(rank) + "_pid";
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && !contains(name, ".tmp")) paths.push_back(entry.path().string());
  }
  return paths;
}

// What one forked rank saw: the first failure, how long it took from the failing collective's
// issue, the next collective's error and how long destroying the group took.
struct Outcome {
  std::string message, later;
  double took = -1, later_took = -1, destroy = -1;
  int failed_iteration = -1;
};

// Rank `r` of `world`: allreduces of 256 ones until one fails, then a barrier, then destruction.
// Writes the outcome to <dir>/rank<r>.json; exit code 0 unless something unexpected threw.
// `linger`: how long a rank stays alive after its failure (a stalled rank that exits at once would
// rightly be reported dead by a slower peer).
int allreduce_until_failure(const std::string& dir, int r, int world, dist::Millis timeout, int iterations,
                            dist::Millis linger = dist::Millis(0)) {
  auto store = dist::make_file_store(dir + "/store", world);
  store->set_timeout(std::chrono::seconds(30));
  auto pg = dist::make_gloo_process_group(store, r, world, dist::GlooOptions().timeout(timeout));
  Outcome out;
  Tensor t = ones({256});
  for (int k = 0; k < iterations && out.message.empty(); ++k) {
    const test::Failure f = failure_of([&] { pg->allreduce(t)->wait(); });
    if (f.message.empty()) continue;
    out.message = f.message;
    out.took = f.seconds;
    out.failed_iteration = k;
  }
  const test::Failure later = failure_of([&] { pg->barrier()->wait(); });
  out.later = later.message;
  out.later_took = later.seconds;
  std::this_thread::sleep_for(linger);
  const auto t2 = SteadyClock::now();
  pg.reset();
  out.destroy = seconds_since(t2);
  test::write_text(dir + "/rank" + std::to_string(r) + ".json",
                   json{{"message", out.message}, {"later", out.later}, {"took", out.took},
                        {"later_took", out.later_took}, {"destroy", out.destroy},
                        {"failed_iteration", out.failed_iteration}}
                       .dump());
  return 0;
}

// Three forked ranks of allreduce_until_failure in `dir`: their exit codes.
std::vector<int> fork_three(const std::string& dir, dist::Millis timeout, int iterations,
                            dist::Millis linger = dist::Millis(0)) {
  return test::fork_ranks(3, [&](int r) { return allreduce_until_failure(dir, r, 3, timeout, iterations, linger); });
}

Outcome read_outcome(const std::string& dir, int r) {
  json j = json::parse(test::read_text(dir + "/rank" + std::to_string(r) + ".json"));
  Outcome o;
  o.message = j["message"];
  o.later = j["later"];
  o.took = j["took"];
  o.later_took = j["later_took"];
  o.destroy = j["destroy"];
  o.failed_iteration = j["failed_iteration"];
  return o;
}

// The outcome of rank r of fork_three, which must have exited 0 after its allreduce `seq` failed.
Outcome failed_outcome(const std::vector<int>& codes, const std::string& dir, int r, int seq) {
  REQUIRE(codes[size_t(r)] == 0);
  Outcome o = read_outcome(dir, r);
  CHECK(o.failed_iteration == seq);
  CHECK(contains(o.message, "Gloo allreduce (sequence number " + std::to_string(seq) + ") failed on rank " +
                                std::to_string(r) + " of 3"));
  return o;
}

// The dump named in `message`: header fields, and `seq`'s record in state `state`.
std::vector<json> check_dump(const std::string& message, const std::string& dir, int rank, int world,
                             uint64_t seq, const char* state) {
  const std::string path = test::dump_path_in(message);
  CHECK_MESSAGE(path.rfind(dir + "/kiln_flight_recorder_Gloo_rank" + std::to_string(rank) + "_pid", 0) == 0,
                "dump path ", path, " is not in KILN_FLIGHT_RECORDER_DIR ", dir);
  std::vector<json> lines = test::read_dump(path);
  REQUIRE(lines.size() >= 2);
  CHECK(lines[0]["kiln_flight_recorder"] == 1);
  CHECK(lines[0]["backend"] == "Gloo");
  CHECK(lines[0]["rank"] == rank);
  CHECK(lines[0]["world_size"] == world);
  CHECK(contains(lines[0]["reason"].get<std::string>(), "sequence number " + std::to_string(seq)));
  json rec = test::record_of(lines, seq);
  REQUIRE_MESSAGE(!rec.is_null(), "no record of sequence number ", seq, " in ", path);
  CHECK(rec["op"] == "allreduce");
  CHECK(rec["dtype"] == "f32");
  CHECK(rec["numel_in"] == 256);
  CHECK(rec["state"] == state);
  CHECK(rec["enqueued_us"].is_number());
  for (uint64_t earlier = 0; earlier < seq; ++earlier) {
    json e = test::record_of(lines, earlier);
    REQUIRE(!e.is_null());
    CHECK(e["state"] == "completed");
    CHECK(e["started_us"].get<int64_t>() >= e["enqueued_us"].get<int64_t>());
    CHECK(e["completed_us"].get<int64_t>() >= e["started_us"].get<int64_t>());
  }
  return lines;
}

}  // namespace

TEST_CASE("KILN_FAULT_INJECT: stall and exit, with rank, seq and an optional duration") {
  dist::FaultInjection f = dist::parse_fault_injection("stall:rank=1:seq=5");
  CHECK(f.kind == dist::FaultInjection::Kind::stall);
  CHECK(f.rank == 1);
  CHECK(f.seq == 5);
  CHECK(f.duration.count() == 0);
  CHECK(f.fires(1, 5));
  CHECK_FALSE(f.fires(0, 5));
  CHECK_FALSE(f.fires(1, 4));
  f = dist::parse_fault_injection("exit:seq=0:rank=3");
  CHECK(f.kind == dist::FaultInjection::Kind::exit);
  CHECK(f.str() == "exit:rank=3:seq=0");
  CHECK(dist::parse_fault_injection("stall:rank=0:seq=2:ms=250").duration.count() == 250);
  CHECK_ERROR_CONTAINS(dist::parse_fault_injection("hang:rank=1:seq=5"), "unknown kind \"hang\"");
  CHECK_ERROR_CONTAINS(dist::parse_fault_injection("stall:rank=1"), "lacks seq");
  CHECK_ERROR_CONTAINS(dist::parse_fault_injection("stall:rank=x:seq=1"), "rank=\"x\"");
  CHECK_ERROR_CONTAINS(dist::parse_fault_injection("exit:rank=1:seq=1:ms=5"), "unknown field \"ms\"");
}

TEST_CASE("flight recorder: a ring of the last N collectives, dumped as JSON lines") {
  dist::FlightRecorder rec(4);
  for (uint64_t s = 0; s < 10; ++s) {
    rec.enqueued(s, s % 2 ? "broadcast" : "allreduce", DType::bf16, 100 + int64_t(s), 100 + int64_t(s));
    rec.started(s);
    if (s < 8) rec.completed(s);
  }
  rec.completed(3);  // overwritten long ago: ignored
  rec.failed(9);
  std::vector<dist::CollectiveRecord> kept = rec.records();
  REQUIRE(kept.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(kept[i].seq == 6 + i);
  CHECK(kept[1].state == dist::CollectiveState::completed);
  CHECK(kept[2].state == dist::CollectiveState::started);
  CHECK(kept[2].completed_us == 0);
  CHECK(kept[3].state == dist::CollectiveState::failed);

  test::TempDir dir("kiln_fr");
  const std::string path = dir.path + "/dump.jsonl";
  rec.dump(path, "{\"reason\":" + dist::json_quote("quote \" backslash \\ newline \n tab \t") + "}");
  std::vector<json> lines = test::read_dump(path);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0]["reason"] == "quote \" backslash \\ newline \n tab \t");
  CHECK(lines[2]["seq"] == 7);
  CHECK(lines[2]["op"] == "broadcast");
  CHECK(lines[2]["dtype"] == "bf16");
  CHECK(lines[2]["numel_in"] == 107);
  CHECK(lines[3]["state"] == "started");
  CHECK(lines[3]["completed_us"].is_null());
  CHECK(lines[4]["state"] == "failed");
  CHECK(dist::FlightRecorder(0).records().empty());
}

TEST_CASE("KILN_DIST_TIMEOUT sets the collectives' deadline unless the options give one") {
  auto opts = dist::InitOptions().rank(0).world_size(1).master_addr("localhost").master_port(29500);
  {
    ScopedEnv env("KILN_DIST_TIMEOUT", "2.5");
    CHECK(dist::read_env(opts).timeout.count() == 2500);
    CHECK(dist::read_env(dist::InitOptions(opts).timeout(std::chrono::seconds(7))).timeout.count() == 7000);
  }
  {
    ScopedEnv env("KILN_DIST_TIMEOUT", "soon");
    CHECK_ERROR_CONTAINS(dist::read_env(opts), "KILN_DIST_TIMEOUT=\"soon\" is not a positive number of seconds");
  }
  ::unsetenv("KILN_DIST_TIMEOUT");
  CHECK(dist::read_env(opts).timeout == dist::kDefaultTimeout);
}

TEST_CASE("one Gloo rank: an injected stall fails the collective at its deadline, and later ones at once") {
  FaultScope scope("kiln_wd_one", "stall:rank=0:seq=2");
  auto pg = dist::make_gloo_process_group(dist::make_file_store(scope.store_dir(), 1), 0, 1,
                                          dist::GlooOptions().timeout(std::chrono::milliseconds(1000)));
  Tensor t = ones({256});
  pg->allreduce(t)->wait();
  pg->allreduce(t)->wait();
  const test::Failure failed = failure_of([&] { pg->allreduce(t)->wait(); });
  test::check_one_rank_timeout(failed, "Gloo allreduce", 1000, 0.9, 1.0 + 2.0);
  INFO(failed.message);
  check_dump(failed.message, scope.dir.path, 0, 1, 2, "failed");
  const test::Failure later = failure_of([&] { pg->broadcast(t, 0)->wait(); });
  CHECK(contains(later.message, "Gloo broadcast (sequence number 3) was not run: the process group failed earlier"));
  CHECK(later.seconds < 0.5);
  const auto t2 = SteadyClock::now();
  pg.reset();
  CHECK(seconds_since(t2) < 0.5);
}

TEST_CASE("one Gloo rank: a stall with a duration ends on its own before the deadline") {
  FaultScope scope("kiln_wd_short", "stall:rank=0:seq=1:ms=300", /*record=*/false);
  auto pg = dist::make_gloo_process_group(dist::make_file_store(scope.store_dir(), 1), 0, 1,
                                          dist::GlooOptions().timeout(std::chrono::seconds(5)));
  Tensor t = full({8}, 3.0);
  pg->allreduce(t)->wait();
  const auto t0 = SteadyClock::now();
  pg->allreduce(t)->wait();  // held 0.3 s, then run
  CHECK(seconds_since(t0) >= 0.25);
  CHECK(test::values(t) == std::vector<double>(8, 3.0));
}

TEST_CASE("three Gloo ranks, rank 1 stalled at collective 3: every rank fails naming allreduce 3 and rank 1") {
  FaultScope scope("kiln_wd_stall", "stall:rank=1:seq=3");
  const std::string& dir = scope.dir.path;
  const std::vector<int> codes = fork_three(dir, std::chrono::milliseconds(2000), 6, dist::Millis(3000));
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    const Outcome o = failed_outcome(codes, dir, r, 3);
    INFO(o.message);
    CHECK(contains(o.message, "timeout 2000 ms"));
    if (r == 1) {
      CHECK(contains(o.message, "not reached by rank 1 (this rank, last started sequence number 2)"));
    } else {
      CHECK(contains(o.message, "not reached by rank 1 (last started sequence number 2)"));
      CHECK_FALSE(contains(o.message, "no heartbeat"));  // rank 1 is alive, only stalled
    }
    CHECK_FALSE(contains(o.message, "rank 0 ("));  // ranks 0 and 2 both started collective 3
    CHECK_FALSE(contains(o.message, "rank 2 ("));
    // The deadline is 2 s after the issue; naming the late rank takes about 1.25 s more.
    CHECK(o.took >= 1.5);
    CHECK(o.took < 2.0 + 3.0);
    CHECK(contains(o.later, "Gloo barrier (sequence number 4) was not run: the process group failed earlier"));
    CHECK(o.later_took < 0.5);
    CHECK(o.destroy < 1.0);
    std::vector<json> lines = check_dump(o.message, dir, r, 3, 3, "failed");
    CHECK(lines.size() == 1 + 4);  // collectives 0..3
    json failed = test::record_of(lines, 3);
    // Rank 1 never started collective 3; the others did.
    CHECK(failed["started_us"].is_null() == (r == 1));
  }
}

TEST_CASE("three Gloo ranks, rank 2 dies at collective 4: the others fail long before the timeout, naming it") {
  FaultScope scope("kiln_wd_exit", "exit:rank=2:seq=4");
  const std::string& dir = scope.dir.path;
  const std::vector<int> codes = fork_three(dir, std::chrono::seconds(30), 8);
  CHECK(codes[2] == 9);  // KILN_FAULT_INJECT's _exit(9)
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    const Outcome o = failed_outcome(codes, dir, r, 4);
    INFO(o.message);
    CHECK(contains(o.message, "not reached by rank 2 ("));
    CHECK(contains(o.message, "no heartbeat for"));
    CHECK_FALSE(contains(o.message, "rank " + std::to_string(1 - r) + " ("));
    CHECK(o.took < 5.0);  // a closed connection, not the 30 s timeout
    CHECK(contains(o.later, "failed earlier"));
    CHECK(o.destroy < 1.0);
    std::vector<json> lines = check_dump(o.message, dir, r, 3, 4, "failed");
    CHECK(lines[0]["timeout_ms"] == 30000);
  }
}

TEST_CASE("a rank outside any collective dumps its flight recorder when a peer fails") {
  FaultScope scope("kiln_wd_peer");
  const std::string& dir = scope.dir.path;
  std::vector<int> codes = test::fork_ranks(2, [&](int r) {
    auto store = dist::make_file_store(scope.store_dir(), 2);
    store->set_timeout(std::chrono::seconds(30));
    auto pg = dist::make_gloo_process_group(store, r, 2, dist::GlooOptions().timeout(std::chrono::milliseconds(1500)));
    Tensor t = ones({16});
    pg->allreduce(t)->wait();
    if (r == 1) {  // "hung in user code": never issues collective 1, but its heartbeat runs
      // Stay "hung" until the heartbeat has dumped (or a minute, when it never does): rank 0's
      // 1.5 s timeout plus its settling heartbeats can take several seconds on a loaded machine.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (gloo_dumps(dir, 1).empty() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::fflush(nullptr);
      ::_exit(0);
    }
    try {
      pg->allreduce(t)->wait();
    } catch (const DistributedError& e) {
      test::write_text(dir + "/rank0.txt", e.what());
    }
    std::fflush(nullptr);
    ::_exit(0);  // the group failed: no barrier or teardown to wait for
    return 0;
  });
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
  CHECK(contains(test::read_text(dir + "/rank0.txt"), "not reached by rank 1 (last started sequence number 0)"));
  const std::vector<std::string> rank1_dumps = gloo_dumps(dir, 1);
  for (const std::string& path : rank1_dumps) {
    std::vector<json> lines = test::read_dump(path);
    CHECK(contains(lines[0]["reason"].get<std::string>(), "a peer failed: rank 0: Gloo allreduce (sequence number 1)"));
    CHECK(lines[0]["last_started"] == 0);
    CHECK(test::record_of(lines, 0)["state"] == "completed");
  }
  CHECK(rank1_dumps.size() == 1);
}
