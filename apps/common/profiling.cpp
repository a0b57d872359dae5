// StepProfiler and the profiling flags (see profiling.h).
#include "profiling.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include <kiln/core/error.h>
#include <kiln/core/profiler/profiler.h>
#include <kiln/core/profiler/summary.h>
#include <kiln/core/profiler/trace.h>

namespace kiln::apps {

void add_profile_flags(CLI::App& app, ProfileFlags& flags) {
  app.add_option("--profile", flags.file,
                 "write a Chrome trace-event JSON of the --profile-steps (open it in ui.perfetto.dev or "
                 "chrome://tracing): ops, autograd nodes, DDP buckets and their all-reduces, optimizer, data, "
                 "checkpoints, memory; under a launcher one track group per rank (each rank also writes "
                 "FILE.rank<r>); prints a summary table");
  app.add_option("--profile-steps", flags.steps, "steps A:B to profile, half-open like a Python slice (0-based)")
      ->capture_default_str();
}

std::pair<int64_t, int64_t> parse_profile_steps(const std::string& text) {
  const size_t colon = text.find(':');
  KILN_CHECK(colon != std::string::npos, "--profile-steps: expected A:B (e.g. 2:5), got '", text, "'");
  int64_t a = -1, b = -1;
  try {
    size_t used_a = 0, used_b = 0;
    a = std::stoll(text.substr(0, colon), &used_a);
    b = std::stoll(text.substr(colon + 1), &used_b);
    KILN_CHECK(used_a == colon && used_b == text.size() - colon - 1, "--profile-steps: expected A:B, got '", text, "'");
  } catch (const std::logic_error&) {
    KILN_FAIL("--profile-steps: expected two integers A:B, got '", text, "'");
  }
  KILN_CHECK(a >= 0 && b > a, "--profile-steps: need 0 <= A < B, got ", a, ":", b);
  return {a, b};
}

std::string rank_trace_path(const std::string& file, int rank, int world) {
  if (world <= 1) return file;
  std::filesystem::path p(file);
  return (p.parent_path() / (p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string())).string();
}

StepProfiler::StepProfiler(const ProfileFlags& flags, std::shared_ptr<dist::ProcessGroup> group, Device device,
                           bool print_table)
    : file_(flags.file), group_(std::move(group)), device_(device), print_table_(print_table) {
  if (file_.empty()) return;
  std::tie(first_, end_) = parse_profile_steps(flags.steps);
  const std::filesystem::path parent = std::filesystem::path(file_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
}

StepProfiler::~StepProfiler() {
  if (recording_) profiler::stop();
}

void StepProfiler::begin_step(int64_t step) {
  if (!enabled() || done_) return;
  if (step == first_ && !recording_) {
    profiler::start();
    recording_ = true;
  }
  if (recording_) profiler::record_memory_counters(device_);
}

void StepProfiler::end_step(int64_t step) {
  if (!recording_) return;
  profiler::record_memory_counters(device_);
  if (step + 1 >= end_) stop_and_write();
}

void StepProfiler::finish() {
  if (recording_) stop_and_write();
}

void StepProfiler::stop_and_write() {
  recording_ = false;
  done_ = true;
  const profiler::Trace trace = profiler::stop();
  const int rank = group_ ? group_->rank() : 0, world = group_ ? group_->size() : 1;
  const profiler::Summary summary = profiler::summarize(trace);
  profiler::ChromeTraceOptions options;
  options.pid = rank;
  options.summary_json = profiler::summary_json(summary);
  written_ = rank_trace_path(file_, rank, world);
  profiler::write_chrome_trace(written_, trace, options);
  if (rank == 0 && print_table_) {
    std::cout << "profile of steps " << first_ << ":" << end_ << " (rank 0; trace " << written_ << ")\n"
              << profiler::format_summary(summary) << std::flush;
  } else if (rank != 0) {
    std::printf("profile rank %d: all-reduce overlapped by backward %.1f%% (%.2f of %.2f ms), mean step %.2f ms\n",
                rank, 100 * summary.overlapped_fraction, summary.overlapped_ns / 1e6, summary.allreduce_ns / 1e6,
                summary.mean_step_ms);
    std::fflush(stdout);
  }
  if (world <= 1) return;
  group_->barrier()->wait();  // every rank's file is complete
  if (rank != 0) return;
  std::vector<std::string> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(rank_trace_path(file_, r, world));
  for (const std::string& in : inputs)
    if (!std::filesystem::exists(in)) {
      std::printf("profile: %s is not visible from rank 0 (another host?); not merging into %s\n", in.c_str(),
                  file_.c_str());
      return;
    }
  profiler::merge_chrome_traces(inputs, file_);
  written_ = file_;
  std::printf("profile: merged %d ranks into %s\n", world, file_.c_str());
  std::fflush(stdout);
}

}  // namespace kiln::apps
