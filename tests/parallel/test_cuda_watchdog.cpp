// The NCCL group's watchdog at world size 1 (one GPU is enough): KILN_FAULT_INJECT holds the
// communication stream before collective 2, and the watchdog must abort the communicator at the
// deadline so that a blocking wait throws DistributedError naming the collective, its sequence
// number and this rank, a non-blocking wait's failure surfaces at the next collective, the flight
// recorder's dump parses, and destruction is prompt (Note [Destroying a NCCL group]). Needs a
// GPU: exits 77 (skipped) without one.
#include "parallel/watchdog_fixtures.h"
#include "test_util.h"

#include <filesystem>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/parallel/file_store.h>
#include <kiln/parallel/nccl_process_group.h>

using namespace kiln;
using nlohmann::json;
using test::contains;
using test::failure_of;
using test::FaultScope;
using test::seconds_since;
using test::SteadyClock;

namespace {

std::shared_ptr<dist::ProcessGroup> one_rank_group(const FaultScope& scope, bool blocking, dist::Millis timeout) {
  return dist::make_nccl_process_group(dist::make_file_store(scope.store_dir(), 1), 0, 1,
                                       dist::NcclOptions().device(0).timeout(timeout).blocking_wait(blocking));
}

// A one-rank NCCL group whose stream KILN_FAULT_INJECT holds before collective 2, after collectives
// 0 and 1 ran on t (`numel` elements of `value` on GPU 0, which a sum over one rank leaves alone).
struct HeldGroup {
  HeldGroup(const std::string& name, bool blocking, dist::Millis timeout, int64_t numel, double value)
      : scope(name, "stall:rank=0:seq=2"),
        pg(one_rank_group(scope, blocking, timeout)),
        t(full({numel}, value, TensorOptions(DType::f32).device(Device::cuda(0)))) {
    pg->allreduce(t)->wait();
    pg->allreduce(t)->wait();
  }
  FaultScope scope;
  std::shared_ptr<dist::ProcessGroup> pg;
  Tensor t;
};

void check_nccl_dump(const std::string& message, const std::string& dir) {
  const std::string path = test::dump_path_in(message);
  CHECK_MESSAGE(path.rfind(dir + "/kiln_flight_recorder_nccl_rank0_pid", 0) == 0, "dump at ", path);
  std::vector<json> lines = test::read_dump(path);
  REQUIRE(lines.size() >= 4);
  CHECK(lines[0]["backend"] == "nccl");
  CHECK(lines[0]["last_started"].get<int64_t>() <= 1);
  json held = test::record_of(lines, 2);
  REQUIRE(!held.is_null());
  CHECK(held["op"] == "allreduce");
  CHECK(held["state"] == "failed");
  CHECK(held["started_us"].is_null());  // the stream never reached it
  CHECK(test::record_of(lines, 0)["state"] == "completed");
}

}  // namespace

TEST_CASE("NCCL, one rank, stream held at collective 2: a blocking wait throws at the deadline") {
  test::require_cuda();
  HeldGroup held("kiln_nccl_wd", /*blocking=*/true, std::chrono::milliseconds(2000), 1024, 2.0);
  auto& [scope, pg, t] = held;
  CHECK(test::values(t.to(Device::cpu())) == std::vector<double>(1024, 2.0));
  const test::Failure failed = failure_of([&] { pg->allreduce(t)->wait(); });
  test::check_one_rank_timeout(failed, "nccl allreduce", 2000, 1.8, 2.0 + 3.0);
  INFO(failed.message);
  check_nccl_dump(failed.message, scope.dir.path);
  const std::string later = failure_of([&] { pg->allreduce(t)->wait(); }).message;
  CHECK(contains(later, "broken by an earlier failure"));
  CHECK(contains(later, "sequence number 2"));
  const auto t1 = SteadyClock::now();
  pg.reset();
  CHECK(seconds_since(t1) < 2.0);
}

TEST_CASE("NCCL, one rank, stream held with non-blocking waits: the watchdog still aborts, the next call throws") {
  test::require_cuda();
  HeldGroup held("kiln_nccl_wd_nb", /*blocking=*/false, std::chrono::milliseconds(1500), 64, 1.0);
  auto& [scope, pg, t] = held;
  auto work = pg->allreduce(t);
  work->wait();  // returns at once: only the caller's stream waits
  CHECK_FALSE(work->is_completed());
  // Nobody waits on the host, yet the watchdog aborts at the deadline and reports.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500 + 2500));
  CHECK_FALSE(work->is_completed());
  const std::string message = failure_of([&] { pg->allreduce(t); }).message;
  INFO(message);
  CHECK(contains(message, "nccl allreduce (sequence number 2) failed on rank 0 of 1"));
  CHECK(contains(message, "timed out after 1500 ms"));
  check_nccl_dump(message, scope.dir.path);
  cuda::synchronize();  // the held stream was released and the aborted kernels quit: no hang
  const auto t1 = SteadyClock::now();
  pg.reset();
  CHECK(seconds_since(t1) < 2.0);
}

TEST_CASE("NCCL, one rank, healthy: destruction finalizes promptly and nothing is dumped") {
  test::require_cuda();
  FaultScope scope("kiln_nccl_wd_ok");
  auto pg = one_rank_group(scope, /*blocking=*/false, std::chrono::seconds(60));
  Tensor t = full({4096}, 3.0, TensorOptions(DType::f32).device(Device::cuda(0)));
  for (int k = 0; k < 20; ++k) pg->allreduce(t)->wait();
  pg->barrier()->wait();
  CHECK(test::values(t.to(Device::cpu())) == std::vector<double>(4096, 3.0));
  const auto t1 = SteadyClock::now();
  pg.reset();
  CHECK(seconds_since(t1) < 5.0);
  int dumps = 0;
  for (const auto& e : std::filesystem::directory_iterator(scope.dir.path))
    dumps += e.path().filename().string().rfind("kiln_flight_recorder", 0) == 0;
  CHECK(dumps == 0);
}
