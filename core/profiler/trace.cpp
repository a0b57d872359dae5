// Chrome trace-event JSON for a profiling session (Note [Chrome trace layout] in trace.h), and the
// merge of several ranks' files into one.
#include <kiln/core/profiler/trace.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <kiln/core/error.h>
#include <kiln/core/profiler/summary.h>

namespace kiln::profiler {

int64_t TraceEvent::arg(const char* key, int64_t fallback) const {
  for (const Arg& a : args)
    if (a.key != nullptr && std::strcmp(a.key, key) == 0) return a.value;
  return fallback;
}

namespace {

void put_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Microseconds with nanosecond digits.
void put_us(std::string& out, int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000 < 0 ? -(ns % 1000) : ns % 1000));
  out += buf;
}

void put_args(std::string& out, const std::array<Arg, kMaxArgs>& args) {
  out += "\"args\":{";
  bool first = true;
  for (const Arg& a : args) {
    if (a.key == nullptr) continue;
    if (!first) out += ',';
    first = false;
    put_string(out, a.key);
    out += ':';
    out += std::to_string(a.value);
  }
  out += '}';
}

// The common head of an event: {"ph":..,"pid":..,"tid":..,"name":..,"cat":..,"ts":..
void put_head(std::string& out, char phase, int pid, uint32_t tid, const std::string& name, const char* cat,
              int64_t ts_ns) {
  out += "{\"ph\":\"";
  out += phase;
  out += "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"name\":";
  put_string(out, name);
  out += ",\"cat\":\"";
  out += cat;
  out += "\",\"ts\":";
  put_us(out, ts_ns);
}

void put_metadata(std::string& out, int pid, uint32_t tid, const char* what, const std::string& key,
                  const std::string& value) {
  out += "{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"name\":\"" + what +
         "\",\"args\":{\"" + key + "\":" + value + "}},\n";
}

}  // namespace

std::string chrome_trace_json(const Trace& trace, const ChromeTraceOptions& options) {
  const int pid = options.pid;
  std::string out = "{\"traceEvents\":[\n";
  std::string quoted;
  put_string(quoted, options.process_name.empty() ? "rank " + std::to_string(pid) : options.process_name);
  put_metadata(out, pid, 0, "process_name", "name", quoted);
  put_metadata(out, pid, 0, "process_sort_index", "sort_index", std::to_string(pid));
  for (size_t t = 0; t < trace.tracks.size(); ++t) {
    quoted.clear();
    put_string(quoted, trace.tracks[t].name);
    put_metadata(out, pid, uint32_t(t + 1), "thread_name", "name", quoted);
    put_metadata(out, pid, uint32_t(t + 1), "thread_sort_index", "sort_index", std::to_string(t + 1));
  }
  const uint32_t buckets_tid = uint32_t(trace.tracks.size() + 1);
  put_metadata(out, pid, buckets_tid, "thread_name", "name", "\"buckets\"");
  for (const TraceEvent& e : trace.events) {
    const uint32_t tid = e.track + 1;
    put_head(out, static_cast<char>(e.phase), pid, e.phase == Phase::counter ? 0 : tid, e.name,
             category_name(e.category), e.start_ns);
    if (e.phase == Phase::complete) {
      out += ",\"dur\":";
      put_us(out, e.duration_ns);
    } else if (e.phase == Phase::instant) {
      out += ",\"s\":\"t\"";
    }
    out += ',';
    put_args(out, e.args);
    out += "},\n";
  }
  // Note [Chrome trace layout]: per bucket all-reduce, an async slice launch -> completion and a flow
  // arrow launch -> comm event. Ids are unique across ranks so that merged files keep them apart.
  for (const BucketAllreduce& b : bucket_allreduces(trace)) {
    if (!b.completed()) continue;
    const TraceEvent& launch = trace.events[b.launch];
    const TraceEvent& comm = trace.events[b.comm];
    const std::string id = std::to_string(int64_t(pid) * 1000000000LL + b.seq);
    const std::string name = "bucket " + std::to_string(b.bucket);
    put_head(out, 'b', pid, buckets_tid, name, "reducer", launch.start_ns);
    out += ",\"id\":" + id + ",\"args\":{\"bucket\":" + std::to_string(b.bucket) + ",\"seq\":" + std::to_string(b.seq) +
           "}},\n";
    put_head(out, 'e', pid, buckets_tid, name, "reducer", std::max(comm.end_ns(), launch.start_ns));
    out += ",\"id\":" + id + "},\n";
    put_head(out, 's', pid, launch.track + 1, "allreduce", "reducer", launch.start_ns);
    out += ",\"id\":" + id + "},\n";
    put_head(out, 'f', pid, comm.track + 1, "allreduce", "reducer", comm.start_ns);
    out += ",\"bp\":\"e\",\"id\":" + id + "},\n";
  }
  if (out.size() >= 2 && out[out.size() - 2] == ',') out.erase(out.size() - 2, 1);  // no trailing comma
  out += "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"rank\":" + std::to_string(pid);
  if (!options.summary_json.empty()) out += ",\"kiln_summary\":" + options.summary_json;
  out += "}}\n";
  return out;
}

void write_chrome_trace(const std::string& path, const Trace& trace, const ChromeTraceOptions& options) {
  const std::string json = chrome_trace_json(trace, options);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK_IO(f.good(), "profiler: cannot open ", path, " to write the trace");
  f.write(json.data(), std::streamsize(json.size()));
  f.close();
  KILN_CHECK_IO(f.good(), "profiler: writing the trace to ", path, " failed (", json.size(), " bytes)");
}

void merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& path : inputs) {
    std::ifstream f(path, std::ios::binary);
    KILN_CHECK_IO(f.good(), "merge_chrome_traces: cannot open ", path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
      KILN_FAIL_IO("merge_chrome_traces: ", path, " is not JSON: ", e.what());
    }
    KILN_CHECK_IO(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array(), "merge_chrome_traces: ",
                  path, " has no traceEvents array");
    for (auto& e : j["traceEvents"]) events.push_back(std::move(e));
    ranks.push_back(j.value("otherData", nlohmann::json::object()));
  }
  nlohmann::json merged = {{"traceEvents", std::move(events)},
                           {"displayTimeUnit", "ms"},
                           {"otherData", {{"ranks", std::move(ranks)}}}};
  std::ofstream f(output, std::ios::binary | std::ios::trunc);
  KILN_CHECK_IO(f.good(), "merge_chrome_traces: cannot open ", output, " to write");
  f << merged.dump() << "\n";
  KILN_CHECK_IO(f.good(), "merge_chrome_traces: writing ", output, " failed");
}

}  // namespace kiln::profiler
