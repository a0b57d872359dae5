// --profile / --profile-steps (apps/common/profiling.h): the A:B parsing, the per-rank file names,
// and a single-process StepProfiler that records exactly steps [A, B) and writes a trace.
#include <doctest/doctest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include <kiln/kiln.h>

#include "common/profiling.h"
#include "parallel/temp_dir.h"
#include "test_util.h"

using namespace kiln;

TEST_CASE("--profile-steps A:B: half-open, 0 <= A < B") {
  CHECK(apps::parse_profile_steps("2:5") == std::pair<int64_t, int64_t>{2, 5});
  CHECK(apps::parse_profile_steps("0:1") == std::pair<int64_t, int64_t>{0, 1});
  CHECK_ERROR_CONTAINS(apps::parse_profile_steps("5"), "expected A:B");
  CHECK_ERROR_CONTAINS(apps::parse_profile_steps("3:3"), "0 <= A < B");
  CHECK_ERROR_CONTAINS(apps::parse_profile_steps("-1:3"), "0 <= A < B");
  CHECK_ERROR_CONTAINS(apps::parse_profile_steps("a:3"), "two integers");
  CHECK_ERROR_CONTAINS(apps::parse_profile_steps("1:3x"), "expected A:B");
}

TEST_CASE("per-rank trace files: FILE alone, FILE.rank<r>.ext under a launcher") {
  CHECK(apps::rank_trace_path("out/trace.json", 0, 1) == "out/trace.json");
  CHECK(apps::rank_trace_path("out/trace.json", 1, 2) == "out/trace.rank1.json");
  CHECK(apps::rank_trace_path("trace", 0, 4) == "trace.rank0");
}

TEST_CASE("StepProfiler records steps [A, B) only, then writes the trace with its summary") {
  test::TempDir dir("kiln_profiling");
  apps::ProfileFlags flags{dir.path + "/sub/trace.json", "1:3"};
  apps::StepProfiler p(flags, nullptr, Device::cpu(), /*print_table=*/false);
  Tensor a = test::random({4, 4}, DType::f32, 1);
  for (int64_t step = 0; step < 5; ++step) {
    p.begin_step(step);
    CHECK(p.recording() == (step >= 1 && step < 3));
    {  // ends before end_step, as the Trainer's range does
      profiler::Range r("step", profiler::Category::step, {"step", step});
      Tensor b = ops::matmul(a, a);
    }
    p.end_step(step);
  }
  p.finish();
  REQUIRE(p.written() == flags.file);
  std::ifstream f(flags.file);
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<int64_t> steps;
  int counters = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "step") steps.push_back(e["args"]["step"]);
    if (e["ph"] == "C") ++counters;
  }
  CHECK(steps == std::vector<int64_t>{1, 2});
  CHECK(counters == 4);  // memory at the start and end of each profiled step
  CHECK(j["otherData"]["kiln_summary"]["steps"] == 2);
  CHECK(j["otherData"]["kiln_summary"]["top_ops"][0]["name"] == "matmul");
}
