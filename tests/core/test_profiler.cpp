// The profiler (core/profiler): nothing recorded when off, nesting of ranges, ops and autograd
// nodes in valid Chrome trace JSON, per-thread tracks, session boundaries, memory counters, the
// interval arithmetic and the overlapped fraction on hand-made traces, and merging ranks' files.
#include <doctest/doctest.h>

#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "parallel/temp_dir.h"
#include "test_util.h"

#include <kiln/core/profiler/profiler.h>
#include <kiln/core/profiler/summary.h>
#include <kiln/core/profiler/trace.h>

using namespace kiln;
using namespace kiln::profiler;
using nlohmann::json;

namespace {

// The complete ("X") events of a Chrome trace, by name (the first of each name wins).
std::vector<json> complete_events(const json& trace, const std::string& name = "") {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && (name.empty() || e["name"] == name)) out.push_back(e);
  return out;
}

json only(const json& trace, const std::string& name) {
  auto v = complete_events(trace, name);
  REQUIRE_MESSAGE(v.size() == 1, "expected one '", name, "' event, got ", v.size());
  return v[0];
}

// b lies within a on the same thread (times in microseconds, printed with nanosecond digits).
bool inside(const json& a, const json& b) {
  const double a0 = a["ts"], a1 = a0 + double(a["dur"]), b0 = b["ts"], b1 = b0 + double(b["dur"]);
  return a["pid"] == b["pid"] && a["tid"] == b["tid"] && a0 <= b0 && b1 <= a1 + 1e-3;
}

TraceEvent complete(const char* name, Category c, int64_t begin, int64_t end, uint32_t track = 0, Arg a0 = {},
                    Arg a1 = {}) {
  TraceEvent e;
  e.name = name;
  e.category = c;
  e.start_ns = begin;
  e.duration_ns = end - begin;
  e.track = track;
  e.args = {a0, a1, Arg{}};
  return e;
}

}  // namespace

TEST_CASE("off: no range, instant or counter is recorded, and ranges report not recording") {
  (void)stop();  // whatever an earlier case left
  CHECK_FALSE(enabled());
  {
    Range r("never", Category::user);
    CHECK_FALSE(r.recording());
    instant("never", Category::user);
    counter("never", {"x", 1});
    Tensor y = ops::add(test::random({4}, DType::f32, 1), test::random({4}, DType::f32, 2));
  }
  start();
  const Trace t = stop();
  CHECK(t.events.empty());
}

TEST_CASE("ranges nest: outer contains inner contains the op's range, on one track, in valid JSON") {
  Tensor a = test::random({8, 8}, DType::f32, 1), b = test::random({8, 8}, DType::f32, 2);
  start();
  {
    Range outer("outer", Category::step, {"step", 7});
    CHECK(outer.recording());
    {
      Range inner("inner", Category::user);
      inner.arg("late", 3);
      Tensor c = ops::matmul(a, b);
    }
    instant("mark", Category::user, {"k", 1});
  }
  const Trace trace = stop();
  const json j = json::parse(chrome_trace_json(trace, ChromeTraceOptions{3, "", ""}));
  const json outer = only(j, "outer"), inner = only(j, "inner"), mm = only(j, "matmul");
  CHECK(outer["cat"] == "step");
  CHECK(outer["args"]["step"] == 7);
  CHECK(inner["args"]["late"] == 3);
  CHECK(mm["cat"] == "op");
  CHECK(inside(outer, inner));
  CHECK(inside(inner, mm));
  CHECK_FALSE(inside(mm, inner));
  CHECK(outer["pid"] == 3);
  bool named = false, mark = false;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") named = e["args"]["name"] == "rank 3";
    if (e["ph"] == "i" && e["name"] == "mark") mark = e["args"]["k"] == 1;
  }
  CHECK(named);
  CHECK(mark);
}

TEST_CASE("backward: autograd nodes inside the backward range, the ops of each node inside the node") {
  Tensor w = test::random({6, 6}, DType::f32, 3).requires_grad_(true);
  Tensor x = test::random({4, 6}, DType::f32, 4);
  Tensor loss = sum(relu(matmul(x, w)));
  start();
  loss.backward();
  const Trace trace = stop();
  const json j = json::parse(chrome_trace_json(trace));
  const json whole = only(j, "backward");
  int nodes = 0, nested_ops = 0;
  const auto all = complete_events(j);
  for (const json& e : all) {
    if (e["cat"] != "backward") continue;
    ++nodes;
    CHECK_MESSAGE(inside(whole, e), e.dump());
    for (const json& o : all)
      if (o["cat"] == "op" && inside(e, o)) ++nested_ops;
  }
  CHECK(nodes >= 3);  // sum, relu, matmul (+ AccumulateGrad)
  CHECK(nested_ops >= 3);
  bool accumulate = false;
  for (const json& e : all) accumulate |= e["name"] == "AccumulateGrad";
  CHECK(accumulate);
}

TEST_CASE("threads get their own tracks, named by set_thread_name") {
  start();
  std::thread t([] {
    set_thread_name("helper");
    Range r("on helper", Category::user);
  });
  t.join();
  { Range r("on this", Category::user); }
  const Trace trace = stop();
  const json j = json::parse(chrome_trace_json(trace));
  const json a = only(j, "on helper"), b = only(j, "on this");
  CHECK(a["tid"] != b["tid"]);
  std::string helper_track;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == a["tid"]) helper_track = e["args"]["name"];
  CHECK(helper_track == "helper");
}

TEST_CASE("sessions: a range that began before start() or ends after stop() is dropped") {
  std::optional<Range> early;
  early.emplace("early", Category::user);  // profiling is off: nothing to end
  start();
  std::optional<Range> late;
  late.emplace("late", Category::user);
  { Range kept("kept", Category::user); }
  early.reset();
  Trace first = stop();
  late.reset();  // its session is over
  REQUIRE(first.events.size() == 1);
  CHECK(first.events[0].name == "kept");
  start();
  Trace second = stop();
  CHECK(second.events.empty());
}

TEST_CASE("memory counters: the CPU allocator's allocated, peak and cached bytes") {
  Tensor big = zeros({1 << 20});  // 4 MiB, alive while the counters are read
  start();
  record_memory_counters();
  const Trace trace = stop();
  const CpuAllocatorStats s = cpu_allocator_stats();
  REQUIRE(trace.events.size() == 1);
  const TraceEvent& e = trace.events[0];
  CHECK(e.phase == Phase::counter);
  CHECK(e.name == "cpu memory");
  CHECK(e.arg("allocated") >= int64_t(4u << 20));
  CHECK(e.arg("peak") >= e.arg("allocated"));
  CHECK(e.arg("peak") <= int64_t(s.peak_allocated_bytes));
  CHECK(e.arg("cached") >= 0);
  const json j = json::parse(chrome_trace_json(trace));
  bool found = false;
  for (const json& ev : j["traceEvents"])
    if (ev["ph"] == "C") found = ev["args"]["allocated"] == e.arg("allocated");
  CHECK(found);
  CHECK(summarize(trace).cpu_peak_bytes == e.arg("peak"));
}

TEST_CASE("interval arithmetic: union, intersection, difference") {
  const std::vector<Interval> u = interval_union({{5, 15}, {0, 10}, {20, 30}, {30, 31}, {40, 40}});
  CHECK(u == std::vector<Interval>{{0, 15}, {20, 31}});
  CHECK(total_length(u) == 26);
  const std::vector<Interval> c = interval_union({{12, 22}, {25, 26}, {29, 50}});
  CHECK(intersect(u, c) == std::vector<Interval>{{12, 15}, {20, 22}, {25, 26}, {29, 31}});
  CHECK(subtract(u, c) == std::vector<Interval>{{0, 12}, {22, 25}, {26, 29}});
  CHECK(subtract(c, u) == std::vector<Interval>{{15, 20}, {31, 50}});
  CHECK(subtract(u, {}) == u);
  CHECK(intersect(u, {}).empty());
}

TEST_CASE("overlapped fraction: |U(all-reduce) ∩ U(compute)| / |U(all-reduce)| on hand-made intervals") {
  // All-reduces [0,10) and [20,30); compute [5,25): 5 + 5 of 20 ns overlapped.
  CHECK(overlapped_fraction({{0, 10}, {20, 30}}, {{5, 25}}) == doctest::Approx(0.5));
  // Overlapping all-reduces count once: U = [0,15); compute [10,40) covers 5 of 15.
  CHECK(overlapped_fraction({{0, 10}, {5, 15}}, {{10, 40}}) == doctest::Approx(1.0 / 3));
  CHECK(overlapped_fraction({{0, 10}}, {{0, 10}}) == doctest::Approx(1.0));
  CHECK(overlapped_fraction({{0, 10}}, {{10, 20}}) == doctest::Approx(0.0));
  CHECK(std::isnan(overlapped_fraction({}, {{0, 1}})));
}

TEST_CASE("summarize: bucket all-reduces joined by seq, reducer waits are not compute, self times") {
  // Track 0 (main): backward [0,100) holding nodes [0,40) and [40,100); the second node's
  // [70,100) is a bucket wait. Two buckets launched at 10 (seq 5) and 50 (seq 6); the comm
  // track runs seq 5 over [20,60) and seq 6 over [60,90), plus an unrelated collective (seq 7).
  Trace t;
  t.tracks = {{"main", false}, {"gloo worker", false}};
  t.events = {
      complete("backward", Category::step, 0, 100),
      complete("MmBackward", Category::backward, 0, 40),
      complete("allreduce launch", Category::reducer, 10, 12, 0, {"bucket", 0}, {"seq", 5}),
      complete("mm", Category::op, 15, 35),
      complete("mm", Category::op, 20, 30),  // nested in the first mm: 10 ns of its 20 are not self
      complete("allreduce", Category::comm, 20, 60, 1, {"seq", 5}),
      complete("AccumulateGrad", Category::backward, 40, 100),
      complete("allreduce launch", Category::reducer, 50, 52, 0, {"bucket", 1}, {"seq", 6}),
      complete("allreduce", Category::comm, 60, 90, 1, {"seq", 6}),
      complete("bucket wait", Category::reducer, 70, 100, 0, {"bucket", 1}),
      complete("allreduce", Category::comm, 110, 120, 1, {"seq", 7}),
  };
  const std::vector<BucketAllreduce> b = bucket_allreduces(t);
  REQUIRE(b.size() == 2);
  CHECK(b[0].bucket == 0);
  CHECK(b[0].seq == 5);
  CHECK(t.events[b[0].comm].start_ns == 20);
  CHECK(b[1].bucket == 1);
  CHECK(t.events[b[1].comm].start_ns == 60);

  const Summary s = summarize(t);
  CHECK(s.bucket_allreduces == 2);
  CHECK(s.allreduce_ns == 70);           // [20,90)
  CHECK(s.backward_compute_ns == 70);    // [0,70): the nodes minus the wait
  CHECK(s.overlapped_ns == 50);          // [20,70)
  CHECK(s.overlapped_fraction == doctest::Approx(50.0 / 70));
  CHECK(s.comm_ns == 80);                // every collective: [20,90) + [110,120)
  REQUIRE(s.top_ops.size() == 1);
  CHECK(s.top_ops[0].name == "mm");
  CHECK(s.top_ops[0].count == 2);
  CHECK(s.top_ops[0].total_ns == 30);
  CHECK(s.top_ops[0].self_ns == 20);     // 10 of the outer + 10 of the inner
  CHECK(s.host_op_calls == 2);           // both mm ranges; no device track here
  CHECK(s.device_op_calls == 0);
  CHECK(s.steps == 0);                   // "backward" is a step-category range, not a "step"
  const json j = json::parse(summary_json(s));
  CHECK(j["host_op_calls"].get<int64_t>() == 2);
  CHECK(j["overlapped_fraction"].get<double>() == doctest::Approx(50.0 / 70));
  CHECK(format_summary(s).find("71.4%") != std::string::npos);

  // The trace shows each bucket as an async slice from its launch to its comm event's end.
  const json trace = json::parse(chrome_trace_json(t));
  std::vector<std::pair<std::string, double>> slices;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "b" || e["ph"] == "e") slices.emplace_back(e["name"].get<std::string>() + e["ph"].get<std::string>(), e["ts"]);
  REQUIRE(slices.size() == 4);
  CHECK(slices[0] == std::make_pair(std::string("bucket 0b"), 0.010));
  CHECK(slices[1] == std::make_pair(std::string("bucket 0e"), 0.060));
  CHECK(slices[2] == std::make_pair(std::string("bucket 1b"), 0.050));
  CHECK(slices[3] == std::make_pair(std::string("bucket 1e"), 0.090));
}

TEST_CASE("summarize: with device tracks (CUDA), the overlap uses the device spans of comm and compute streams") {
  // Hand-made: a device op span [0,100) and a comm span [50,150) joined to a launch: half overlapped.
  Trace t;
  t.tracks = {{"main", false}, {"cuda:0 stream 0x1", true}, {"cuda:0 stream 0x2", true}};
  t.events = {complete("MmBackward", Category::backward, 0, 10, 0),
              complete("mm", Category::op, 0, 100, 1),
              complete("allreduce launch", Category::reducer, 5, 6, 0, {"bucket", 0}, {"seq", 1}),
              complete("allreduce", Category::comm, 50, 150, 2, {"seq", 1})};
  const Summary s = summarize(t);
  CHECK(s.overlapped_fraction == doctest::Approx(0.5));
  CHECK(s.backward_compute_ns == 100);  // the device span, not the host node
}

TEST_CASE("merge: every rank's events keep their pid; otherData per rank") {
  test::TempDir dir("kiln_profiler");
  std::vector<std::string> files;
  for (int rank : {0, 1}) {
    Trace t;
    t.tracks = {{"main", false}};
    t.events = {complete("step", Category::step, 100 * rank, 100 * rank + 50)};
    files.push_back(dir.path + "/r" + std::to_string(rank) + ".json");
    write_chrome_trace(files.back(), t, ChromeTraceOptions{rank, "", summary_json(summarize(t))});
  }
  merge_chrome_traces(files, dir.path + "/all.json");
  std::ifstream f(dir.path + "/all.json");
  const json j = json::parse(f);
  std::set<int> pids, named;
  for (const json& e : j["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "M" && e["name"] == "process_name")
      named.insert(e["args"]["name"] == "rank " + std::to_string(e["pid"].get<int>()) ? e["pid"].get<int>() : -1);
  }
  CHECK(pids == std::set<int>{0, 1});
  CHECK(named == std::set<int>{0, 1});
  REQUIRE(j["otherData"]["ranks"].size() == 2);
  CHECK(j["otherData"]["ranks"][1]["rank"] == 1);
  CHECK(j["otherData"]["ranks"][1]["kiln_summary"]["steps"] == 1);
  CHECK_THROWS_AS(merge_chrome_traces({dir.path + "/missing.json"}, dir.path + "/x.json"), IOError);
}
