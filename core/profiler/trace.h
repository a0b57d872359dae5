// A profiling session's events (what profiler::stop() returns) and their Chrome trace-event JSON
// form, which Perfetto (ui.perfetto.dev) and chrome://tracing open: one process per rank (pid =
// rank), one track per thread and per CUDA stream.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::profiler {

/// What a range measures; the trace's "cat" and what the summary (summary.h) sorts events by.
enum class Category : uint8_t {
  op,          ///< an op front in core/ops (the kernel of one backend)
  backward,    ///< an autograd node run by the backward engine
  reducer,     ///< DDP's reducer: bucket ready, all-reduce launched, waits
  comm,        ///< a collective as the communication side runs it (Gloo worker, NCCL stream)
  optimizer,   ///< an optimizer step
  data,        ///< data loading
  checkpoint,  ///< saving or loading a checkpoint
  step,        ///< a training step, and its phases (forward, backward)
  memory,      ///< allocator counters
  user,
};
const char* category_name(Category c);

inline constexpr size_t kMaxArgs = 3;

/// An integer argument; `key` is a string literal (nullptr: unused slot).
struct Arg {
  const char* key = nullptr;
  int64_t value = 0;
};

enum class Phase : char { complete = 'X', instant = 'i', counter = 'C' };

/// One event of a trace: a span, an instant or a counter, on one track.
struct TraceEvent {
  std::string name;
  Category category = Category::user;
  Phase phase = Phase::complete;
  uint32_t track = 0;        ///< index into Trace::tracks
  int64_t start_ns = 0;      ///< steady clock (CLOCK_MONOTONIC: one timeline for every process of a host)
  int64_t duration_ns = 0;   ///< complete events only
  std::array<Arg, kMaxArgs> args{};

  int64_t end_ns() const { return start_ns + duration_ns; }
  /// The argument `key`'s value, or `fallback` when the event has none.
  int64_t arg(const char* key, int64_t fallback = -1) const;
};

/// One timeline of a trace: a host thread or a CUDA stream.
struct Track {
  std::string name;     ///< "main", "gloo worker", "cuda:0 stream 0x..."
  bool device = false;  ///< a CUDA stream's track
};

/// A profiling session's tracks and events (what profiler::stop() returns).
struct Trace {
  std::vector<Track> tracks;
  std::vector<TraceEvent> events;  ///< sorted by start, then the longer first (a parent before its children)
};

/// How write_chrome_trace labels the process and what it adds to the file.
struct ChromeTraceOptions {
  int pid = 0;                   ///< the rank
  std::string process_name;      ///< default "rank <pid>"
  std::string summary_json;      ///< put under "otherData"."kiln_summary" when not empty (summary.h)
};

/// Note [Chrome trace layout]
/// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}. Per process: metadata
/// events naming it ("rank 0") and each track (tid = track index + 1), then the events with ts/dur in
/// microseconds. Derived from the reducer's and the comm side's events (joined by the collective's
/// sequence number, arg "seq"): one async slice per bucket all-reduce from launch to completion on
/// a "buckets" track (name "bucket <b>", id = seq) and a flow arrow from the launch to the comm
/// event, so Perfetto shows which all-reduce each launch became.
std::string chrome_trace_json(const Trace& trace, const ChromeTraceOptions& options = {});
void write_chrome_trace(const std::string& path, const Trace& trace, const ChromeTraceOptions& options = {});

/// Writes one trace holding every input's events (each keeps its pid: a track group per rank) and
/// the inputs' otherData under "ranks". Every input must be a file chrome_trace_json wrote.
void merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace kiln::profiler
