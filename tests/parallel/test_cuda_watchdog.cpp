// The NCCL group's watchdog at world size 1 (one GPU is enough): KILN_FAULT_INJECT holds the
// communication stream before collective 2, and the watchdog must abort the communicator at the
// deadline so that a blocking wait throws DistributedError naming the collective, its sequence
// number and this rank, a non-blocking wait's failure surfaces at the next collective, the flight
// recorder's dump parses, and destruction is prompt (Note [Destroying a NCCL group]). Needs a
// GPU: exits 77 (skipped) without one.
#include "parallel/temp_dir.h"
#include "parallel/watchdog_fixtures.h"
#include "test_util.h"

#include <sys/stat.h>

#include <filesystem>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/parallel/file_store.h>
#include <kiln/parallel/nccl_process_group.h>

using namespace kiln;
using nlohmann::json;
using test::ScopedEnv;
using test::seconds_since;
using test::SteadyClock;

namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

void require_gpu() {
  if (!cuda::is_available()) {
    std::printf("SKIPPED: no usable CUDA device\n");
    std::exit(77);
  }
}

std::shared_ptr<dist::ProcessGroup> one_rank_group(const std::string& dir, bool blocking, dist::Millis timeout) {
  const std::string store = dir + "/store";
  ::mkdir(store.c_str(), 0755);
  return dist::make_nccl_process_group(dist::make_file_store(store, 1), 0, 1,
                                       dist::NcclOptions().device(0).timeout(timeout).blocking_wait(blocking));
}

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
  require_gpu();
  test::TempDir dir("kiln_nccl_wd");
  ScopedEnv fr("KILN_FLIGHT_RECORDER_DIR", dir.path);
  ScopedEnv fault("KILN_FAULT_INJECT", "stall:rank=0:seq=2");
  auto pg = one_rank_group(dir.path, /*blocking=*/true, std::chrono::milliseconds(2000));
  Tensor t = full({1024}, 2.0, TensorOptions(DType::f32).device(Device::cuda(0)));
  pg->allreduce(t)->wait();
  pg->allreduce(t)->wait();
  CHECK(test::values(t.to(Device::cpu())) == std::vector<double>(1024, 2.0));
  const auto t0 = SteadyClock::now();
  std::string message;
  try {
    pg->allreduce(t)->wait();
  } catch (const DistributedError& e) {
    message = e.what();
  }
  const double took = seconds_since(t0);
  INFO(message);
  CHECK(contains(message, "nccl allreduce (sequence number 2) failed on rank 0 of 1"));
  CHECK(contains(message, "timed out after 2000 ms"));
  CHECK(contains(message, "not reached by rank 0 (this rank, last started sequence number 1)"));
  CHECK(took >= 1.8);
  CHECK(took < 2.0 + 3.0);
  check_nccl_dump(message, dir.path);
  std::string later;
  try {
    pg->allreduce(t)->wait();
  } catch (const DistributedError& e) {
    later = e.what();
  }
  CHECK(contains(later, "broken by an earlier failure"));
  CHECK(contains(later, "sequence number 2"));
  const auto t1 = SteadyClock::now();
  pg.reset();
  CHECK(seconds_since(t1) < 2.0);
}

TEST_CASE("NCCL, one rank, stream held with non-blocking waits: the watchdog still aborts, the next call throws") {
  require_gpu();
  test::TempDir dir("kiln_nccl_wd_nb");
  ScopedEnv fr("KILN_FLIGHT_RECORDER_DIR", dir.path);
  ScopedEnv fault("KILN_FAULT_INJECT", "stall:rank=0:seq=2");
  auto pg = one_rank_group(dir.path, /*blocking=*/false, std::chrono::milliseconds(1500));
  Tensor t = full({64}, 1.0, TensorOptions(DType::f32).device(Device::cuda(0)));
  pg->allreduce(t)->wait();
  pg->allreduce(t)->wait();
  auto held = pg->allreduce(t);
  held->wait();  // returns at once: only the caller's stream waits
  CHECK_FALSE(held->is_completed());
  // Nobody waits on the host, yet the watchdog aborts at the deadline and reports.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500 + 2500));
  CHECK_FALSE(held->is_completed());
  std::string message;
  try {
    pg->allreduce(t);
  } catch (const DistributedError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(contains(message, "nccl allreduce (sequence number 2) failed on rank 0 of 1"));
  CHECK(contains(message, "timed out after 1500 ms"));
  check_nccl_dump(message, dir.path);
  cuda::synchronize();  // the held stream was released and the aborted kernels quit: no hang
  const auto t1 = SteadyClock::now();
  pg.reset();
  CHECK(seconds_since(t1) < 2.0);
}

TEST_CASE("NCCL, one rank, healthy: destruction finalizes promptly and nothing is dumped") {
  require_gpu();
  test::TempDir dir("kiln_nccl_wd_ok");
  ScopedEnv fr("KILN_FLIGHT_RECORDER_DIR", dir.path);
  auto pg = one_rank_group(dir.path, /*blocking=*/false, std::chrono::seconds(60));
  Tensor t = full({4096}, 3.0, TensorOptions(DType::f32).device(Device::cuda(0)));
  for (int k = 0; k < 20; ++k) pg->allreduce(t)->wait();
  pg->barrier()->wait();
  CHECK(test::values(t.to(Device::cpu())) == std::vector<double>(4096, 3.0));
  const auto t1 = SteadyClock::now();
  pg.reset();
  CHECK(seconds_since(t1) < 5.0);
  int dumps = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    dumps += e.path().filename().string().rfind("kiln_flight_recorder", 0) == 0;
  CHECK(dumps == 0);
}
