// The session summary (summary.h): interval unions, the bucket join, self times and the table.
#include <kiln/core/profiler/summary.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kiln::profiler {

std::vector<Interval> interval_union(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : intervals) {
    if (i.end <= i.begin) continue;
    if (!out.empty() && i.begin <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

int64_t total_length(const std::vector<Interval>& u) {
  int64_t n = 0;
  for (const Interval& i : u) n += i.end - i.begin;
  return n;
}

std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (lo < hi) out.push_back({lo, hi});
    if (a[i].end < b[j].end)
      ++i;
    else
      ++j;
  }
  return out;
}

std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (Interval cur : a) {
    while (j < b.size() && b[j].end <= cur.begin) ++j;
    for (size_t k = j; k < b.size() && b[k].begin < cur.end; ++k) {
      if (b[k].begin > cur.begin) out.push_back({cur.begin, b[k].begin});
      cur.begin = std::max(cur.begin, b[k].end);
      if (cur.begin >= cur.end) break;
    }
    if (cur.begin < cur.end) out.push_back(cur);
  }
  return out;
}

double overlapped_fraction(const std::vector<Interval>& allreduce, const std::vector<Interval>& compute) {
  const std::vector<Interval> a = interval_union(allreduce);
  const int64_t total = total_length(a);
  if (total == 0) return std::numeric_limits<double>::quiet_NaN();
  return double(total_length(intersect(a, interval_union(compute)))) / double(total);
}

std::vector<BucketAllreduce> bucket_allreduces(const Trace& trace) {
  std::map<int64_t, size_t> comm_of_seq;  // the first comm event of each sequence number
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.category == Category::comm && e.phase == Phase::complete && e.arg("seq") >= 0)
      comm_of_seq.emplace(e.arg("seq"), i);
  }
  std::vector<BucketAllreduce> out;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.category != Category::reducer || e.phase != Phase::complete || e.name != "allreduce launch") continue;
    BucketAllreduce b;
    b.bucket = e.arg("bucket");
    b.seq = e.arg("seq");
    b.launch = i;
    if (auto it = comm_of_seq.find(b.seq); it != comm_of_seq.end()) b.comm = it->second;
    out.push_back(b);
  }
  return out;  // trace.events is sorted by start
}

namespace {

Interval interval_of(const TraceEvent& e) { return {e.start_ns, e.end_ns()}; }

// Self time of every complete event: its duration minus that of the events directly nested in it
// on the same track (events are sorted by start, the longer first).
std::vector<int64_t> self_times(const Trace& trace) {
  std::vector<int64_t> self(trace.events.size(), 0);
  std::map<uint32_t, std::vector<size_t>> stacks;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.phase != Phase::complete) continue;
    self[i] = e.duration_ns;
    std::vector<size_t>& stack = stacks[e.track];
    while (!stack.empty() && trace.events[stack.back()].end_ns() <= e.start_ns) stack.pop_back();
    if (!stack.empty()) self[stack.back()] -= e.duration_ns;
    stack.push_back(i);
  }
  return self;
}

}  // namespace

Summary summarize(const Trace& trace, size_t top_ops) {
  Summary s;
  const bool has_device = std::any_of(trace.tracks.begin(), trace.tracks.end(), [](const Track& t) { return t.device; });
  const std::vector<int64_t> self = self_times(trace);
  std::map<std::string, OpStat> ops;
  std::vector<Interval> comm, backward, waits, device_ops;
  int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  int64_t step_ns = 0;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    first = std::min(first, e.start_ns);
    last = std::max(last, e.end_ns());
    if (e.phase == Phase::counter) {
      const int64_t peak = e.arg("peak");
      if (e.name == "cpu memory") s.cpu_peak_bytes = std::max(s.cpu_peak_bytes, peak);
      else if (e.name.rfind("cuda", 0) == 0) s.cuda_peak_bytes = std::max(s.cuda_peak_bytes, peak);
      continue;
    }
    if (e.phase != Phase::complete) continue;
    const bool on_device = trace.tracks[e.track].device;
    switch (e.category) {
      case Category::op: {
        OpStat& o = ops[on_device ? e.name + " [gpu]" : e.name];
        o.count += 1;
        ++(on_device ? s.device_op_calls : s.host_op_calls);
        o.total_ns += e.duration_ns;
        o.self_ns += self[i];
        if (on_device) device_ops.push_back(interval_of(e));
        break;
      }
      case Category::comm: comm.push_back(interval_of(e)); break;
      case Category::backward:
        if (!on_device) backward.push_back(interval_of(e));
        break;
      case Category::reducer:
        if (e.name == "bucket wait") waits.push_back(interval_of(e));
        break;
      case Category::step:
        if (e.name == "step") {
          ++s.steps;
          step_ns += e.duration_ns;
        }
        break;
      default: break;
    }
  }
  s.span_ns = trace.events.empty() ? 0 : last - first;
  s.mean_step_ms = s.steps > 0 ? double(step_ns) / double(s.steps) / 1e6 : 0;
  for (auto& [name, o] : ops) {
    o.name = name;
    s.top_ops.push_back(o);
  }
  std::sort(s.top_ops.begin(), s.top_ops.end(), [](const OpStat& a, const OpStat& b) { return a.self_ns > b.self_ns; });
  if (s.top_ops.size() > top_ops) s.top_ops.resize(top_ops);
  s.comm_ns = total_length(interval_union(comm));

  // Note [Overlapped fraction]
  std::vector<Interval> allreduce;
  for (const BucketAllreduce& b : bucket_allreduces(trace)) {
    ++s.bucket_allreduces;
    if (b.completed()) allreduce.push_back(interval_of(trace.events[b.comm]));
  }
  const std::vector<Interval> compute =
      has_device ? interval_union(device_ops) : subtract(interval_union(backward), interval_union(waits));
  const std::vector<Interval> a = interval_union(allreduce);
  s.allreduce_ns = total_length(a);
  s.backward_compute_ns = total_length(compute);
  s.overlapped_ns = total_length(intersect(a, compute));
  s.overlapped_fraction = s.allreduce_ns > 0 ? double(s.overlapped_ns) / double(s.allreduce_ns)
                                             : std::numeric_limits<double>::quiet_NaN();
  return s;
}

std::string format_summary(const Summary& s) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-34s %8s %12s %12s %7s\n", "op", "calls", "self ms", "total ms", "self %");
  os << line;
  int64_t self_sum = 0;
  for (const OpStat& o : s.top_ops) self_sum += o.self_ns;
  for (const OpStat& o : s.top_ops) {
    std::snprintf(line, sizeof line, "%-34.34s %8lld %12.3f %12.3f %6.1f%%\n", o.name.c_str(), (long long)o.count,
                  o.self_ns / 1e6, o.total_ns / 1e6, s.span_ns > 0 ? 100.0 * double(o.self_ns) / double(s.span_ns) : 0.0);
    os << line;
  }
  auto mib = [](int64_t b) { return b < 0 ? std::string("-") : std::to_string(b / (1 << 20)) + " MiB"; };
  std::snprintf(line, sizeof line, "steps %lld, mean step %.2f ms, profiled span %.2f ms\n", (long long)s.steps,
                s.mean_step_ms, s.span_ns / 1e6);
  os << line;
  if (s.steps > 0) {
    // Launch gaps scale with these: on CUDA each device span is at least one kernel.
    std::snprintf(line, sizeof line, "ops per step: %.1f op calls on the host, %.1f op spans on the device\n",
                  double(s.host_op_calls) / double(s.steps), double(s.device_op_calls) / double(s.steps));
    os << line;
  }
  os << "memory peak: cpu " << mib(s.cpu_peak_bytes) << ", cuda " << mib(s.cuda_peak_bytes) << "\n";
  std::snprintf(line, sizeof line,
                "comm %.2f ms (all collectives); %lld bucket all-reduces, %.2f ms; backward compute %.2f ms; "
                "all-reduce time overlapped by backward compute: %.2f ms = %.1f%%\n",
                s.comm_ns / 1e6, (long long)s.bucket_allreduces, s.allreduce_ns / 1e6, s.backward_compute_ns / 1e6,
                s.overlapped_ns / 1e6, 100 * s.overlapped_fraction);
  os << line;
  return os.str();
}

std::string summary_json(const Summary& s) {
  nlohmann::json j;
  j["steps"] = s.steps;
  j["mean_step_ms"] = s.mean_step_ms;
  j["span_ms"] = s.span_ns / 1e6;
  j["host_op_calls"] = s.host_op_calls;
  j["device_op_calls"] = s.device_op_calls;
  j["cpu_peak_bytes"] = s.cpu_peak_bytes;
  j["cuda_peak_bytes"] = s.cuda_peak_bytes;
  j["comm_ms"] = s.comm_ns / 1e6;
  j["bucket_allreduces"] = s.bucket_allreduces;
  j["allreduce_ms"] = s.allreduce_ns / 1e6;
  j["backward_compute_ms"] = s.backward_compute_ns / 1e6;
  j["overlapped_ms"] = s.overlapped_ns / 1e6;
  j["overlapped_fraction"] = std::isnan(s.overlapped_fraction) ? nlohmann::json(nullptr)
                                                                : nlohmann::json(s.overlapped_fraction);
  nlohmann::json ops = nlohmann::json::array();
  for (const OpStat& o : s.top_ops)
    ops.push_back({{"name", o.name}, {"calls", o.count}, {"self_ms", o.self_ns / 1e6}, {"total_ms", o.total_ns / 1e6}});
  j["top_ops"] = ops;
  return j.dump();
}

}  // namespace kiln::profiler
