// --profile FILE --profile-steps A:B, shared by train_gpt, train_cifar and bench_gpt: a profiling
// session over steps [A, B) written as Chrome trace-event JSON (Perfetto, chrome://tracing), one
// track group per rank, plus the summary table (core/profiler/summary.h) on stdout.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include <kiln/core/device.h>
#include <kiln/parallel/process_group.h>

namespace kiln::apps {

struct ProfileFlags {
  std::string file;           // empty: no profiling
  std::string steps = "1:4";  // half-open [A, B), as a Python slice
};
void add_profile_flags(CLI::App& app, ProfileFlags& flags);

// "A:B" -> {A, B} with 0 <= A < B; throws naming the flag otherwise.
std::pair<int64_t, int64_t> parse_profile_steps(const std::string& text);

// Where rank `rank` of `world` writes its own trace: FILE itself alone, else FILE with
// ".rank<r>" before its extension (trace.json -> trace.rank1.json); rank 0 then merges them into FILE.
std::string rank_trace_path(const std::string& file, int rank, int world);

// Drives one session: begin_step(s) / end_step(s) around every step s (any order of steps is
// fine; only [A, B) is recorded). At the end of step B - 1, or at finish() when the run ends
// before it, the session stops, each rank writes its trace (with its summary under otherData) and
// prints its summary line, and with several ranks rank 0 merges every rank's file into FILE
// after a barrier: so end_step and finish are collective when a group is given.
class StepProfiler {
 public:
  StepProfiler(const ProfileFlags& flags, std::shared_ptr<dist::ProcessGroup> group, Device device,
               bool print_table = true);
  ~StepProfiler();  // stops a session still running without writing (the run failed)
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  bool enabled() const { return !file_.empty(); }
  bool recording() const { return recording_; }
  void begin_step(int64_t step);
  void end_step(int64_t step);
  void finish();
  // The path of the trace this process wrote (empty before), and of the merged file (rank 0).
  const std::string& written() const { return written_; }

 private:
  void stop_and_write();

  std::string file_;
  int64_t first_ = 0, end_ = 0;
  std::shared_ptr<dist::ProcessGroup> group_;
  Device device_;
  bool print_table_ = true;
  bool recording_ = false, done_ = false;
  std::string written_;
};

}  // namespace kiln::apps
