// What a profiling session adds up to: interval arithmetic, the bucket all-reduces joined to their
// launches, the top ops by self time, memory peaks, communication time and how much of the
// all-reduce time backward compute hid (Note [Overlapped fraction]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/profiler/trace.h>

namespace kiln::profiler {

/// [begin, end) in nanoseconds.
struct Interval {
  int64_t begin = 0, end = 0;
  bool operator==(const Interval&) const = default;
};

/// Sorted, disjoint, non-empty intervals covering the same time as `intervals`.
std::vector<Interval> interval_union(std::vector<Interval> intervals);
/// Total length of a union (interval_union's result).
int64_t total_length(const std::vector<Interval>& u);
/// The time in both unions, and the time in `a` but not in `b` (both arguments are unions).
std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b);
std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b);

/// Note [Overlapped fraction]
///   overlapped fraction = |U(all-reduce) ∩ U(backward compute)| / |U(all-reduce)|
/// where U is the union of the intervals (interval_union), |.| the total length, and
///   all-reduce        the bucket all-reduces as the communication side ran them: from the moment the
///                     Gloo worker started the collective to its completion (on CUDA: the NCCL
///                     kernel's span on the communication stream), each joined by its sequence number
///                     to the reducer's launch of a bucket, so the loss average and buffer broadcasts
///                     do not count;
///   backward compute  host: the autograd nodes' ranges minus the reducer's waits inside them (the
///                     last parameter's hook finalizes the buckets inside backward: that is waiting,
///                     not computing); CUDA (a trace with device tracks): the ops' spans on the
///                     compute streams (the compute stream waits for the buckets before the optimizer,
///                     so an op that overlaps a bucket all-reduce is backward work).
/// 1 means every moment some bucket was being reduced, backward was also computing; 0 means the
/// all-reduces ran entirely after backward. With no bucket all-reduce the fraction is NaN.
double overlapped_fraction(const std::vector<Interval>& allreduce, const std::vector<Interval>& compute);

/// A reducer launch ("allreduce launch", args bucket and seq) and the comm event with that seq.
struct BucketAllreduce {
  int64_t bucket = -1, seq = -1;
  size_t launch = 0;                ///< index in Trace::events
  size_t comm = size_t(-1);         ///< index in Trace::events; size_t(-1) when not in the trace
  bool completed() const { return comm != size_t(-1); }
};
/// In launch order (the launches' start times).
std::vector<BucketAllreduce> bucket_allreduces(const Trace& trace);

/// One row of a Summary's op table: an op's name, call count, total and self time.
struct OpStat {
  std::string name;  ///< device spans: "<name> [gpu]"
  int64_t count = 0, total_ns = 0, self_ns = 0;
};

/// What a profiling session's events add up to (summarize()): span, steps, and time per op.
struct Summary {
  int64_t span_ns = 0;                 ///< first event to last
  int64_t steps = 0;                   ///< "step" ranges
  double mean_step_ms = 0;
  std::vector<OpStat> top_ops;         ///< op ranges by self time (time not inside a nested range), most first
  int64_t host_op_calls = 0;           ///< every op range on a host track (one per op front called)
  int64_t device_op_calls = 0;         ///< every op span on a device track (each one kernel launch or more)
  int64_t cpu_peak_bytes = -1;         ///< the largest "peak" of the memory counters (-1: none recorded)
  int64_t cuda_peak_bytes = -1;
  int64_t comm_ns = 0;                 ///< union of every comm event (all collectives)
  int64_t bucket_allreduces = 0;       ///< launched
  int64_t allreduce_ns = 0;            ///< union of the bucket all-reduces (Note [Overlapped fraction])
  int64_t backward_compute_ns = 0;     ///< union of backward compute
  int64_t overlapped_ns = 0;
  double overlapped_fraction = 0;      ///< overlapped_ns / allreduce_ns, NaN without all-reduces
};

Summary summarize(const Trace& trace, size_t top_ops = 15);
/// A table for people (one line per op, then the totals).
std::string format_summary(const Summary& summary);
/// The same as a JSON object (ChromeTraceOptions::summary_json).
std::string summary_json(const Summary& summary);

}  // namespace kiln::profiler
