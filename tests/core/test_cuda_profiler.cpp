// The profiler on CUDA (Note [Device spans]): an op on a CUDA tensor leaves a host range and a span
// on its stream's device track, placed after the host launched it and no longer than the device
// work can be; memory counters of the device; the summary's "[gpu]" rows. (The overlap from device
// spans is checked on a hand-made trace in test_profiler.cpp.) Skipped (exit 77) without a device.
#include <nlohmann/json.hpp>

#include "test_util.h"

#include <kiln/core/profiler/profiler.h>
#include <kiln/core/profiler/summary.h>
#include <kiln/core/profiler/trace.h>

using namespace kiln;
using namespace kiln::profiler;

TEST_CASE("CUDA: an op's device span on the stream's track, after its host launch; cuda memory counters") {
  test::require_cuda();
  Tensor a = test::to_cuda(test::random({1024, 1024}, DType::f32, 1), false);
  Tensor b = test::to_cuda(test::random({1024, 1024}, DType::f32, 2), false);
  Tensor warm = ops::matmul(a, b);
  cuda::synchronize();
  start();
  Tensor c = ops::matmul(a, b);
  Tensor d = ops::add(c, c);
  record_memory_counters(a.device());
  cuda::synchronize();
  const Trace trace = stop();

  const TraceEvent *host = nullptr, *device = nullptr, *add_device = nullptr, *memory = nullptr;
  for (const TraceEvent& e : trace.events) {
    const bool on_device = trace.tracks[e.track].device;
    if (e.name == "matmul" && e.phase == Phase::complete) (on_device ? device : host) = &e;
    if (e.name == "add" && on_device) add_device = &e;
    if (e.name == "cuda:0 memory") memory = &e;
  }
  REQUIRE(host != nullptr);
  REQUIRE(device != nullptr);
  REQUIRE(add_device != nullptr);
  CHECK(trace.tracks[device->track].name.rfind("cuda:0 stream", 0) == 0);
  CHECK(device->duration_ns > 0);
  // The anchor is taken after a synchronize, so device time maps to host time up to the anchor's
  // latency (tens of microseconds at most).
  CHECK(device->start_ns >= host->start_ns - 100'000);
  CHECK(add_device->start_ns >= device->end_ns() - 1'000);  // one stream: in order
  REQUIRE(memory != nullptr);
  CHECK(memory->arg("allocated") >= 3 * 1024 * 1024 * 4);
  CHECK(memory->arg("peak") >= memory->arg("allocated"));

  const Summary s = summarize(trace);
  bool gpu_row = false;
  for (const OpStat& o : s.top_ops) gpu_row |= o.name == "matmul [gpu]";
  CHECK(gpu_row);
  CHECK(s.cuda_peak_bytes == memory->arg("peak"));
  const nlohmann::json j = nlohmann::json::parse(chrome_trace_json(trace));
  CHECK(j["traceEvents"].is_array());
}
