// bench_gpt's rows and sides: the configs it times (the presets plus gpt-10m, with their default
// batch and context), one side's best time over the rounds, and the PyTorch side run as a child
// process (apps/bench_gpt.py) whose last JSON line is its result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/models/gpt.h>

#include "gpt/bench_step.h"

namespace kiln::apps {

struct BenchConfig {
  std::string name;
  models::GPTConfig config;
  int64_t batch, seq;  // the defaults for this config (-B / -T override)
};

// A named config: a preset or "gpt-10m" (6 layers, 6 heads, 384 dims, context 256, bytes).
BenchConfig named_config(const std::string& name);
// gpt2-124m and gpt-1.3b on cuda; gpt-tiny and gpt-10m on the CPU.
std::vector<BenchConfig> default_configs(bool cuda);

// One row of the table: a side's best time over the rounds, or why it has none.
struct Side {
  std::string name;  // "kiln", "torch eager", "torch compile", "kiln + DDP"
  double seconds = 0;
  int64_t peak_bytes = 0;
  std::vector<double> step_seconds;  // --ddp-overhead: every step, in the order they ran
  std::string error;
  bool ran = false;
  void add(double s, int64_t peak) {
    if (!ran || s < seconds) seconds = s, peak_bytes = peak;
    ran = true;
    error.clear();
  }
  void add_error(const std::string& e) {
    if (!ran) error = e;
  }
};

// How to run bench_gpt.py: the interpreter, the script and the flags both sides share.
struct TorchSideOptions {
  std::string python, script, device, dtype, attention;
  int warmup = 2, steps = 10;
  std::string recompute = "none";  // none, block, attention, mlp
};

// Runs the PyTorch side once in `mode` and records it in `side`; returns "<torch version> (<attention>...)"
// or "" when it failed.
std::string run_torch(const TorchSideOptions& a, const BenchConfig& bc, int64_t b, int64_t t, const std::string& mode,
                      int threads, Side& side);

// Records Kiln's timing (or its failure) in `side`.
void record_kiln(const StepTiming& r, Side& side);

}  // namespace kiln::apps
