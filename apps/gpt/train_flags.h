// train_gpt's command line: the arguments (TrainGptArgs, with their defaults) and the flags that set
// them, with --help's text, so that train_gpt.cpp is the run itself.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <kiln/core/dtype.h>

#include "common/parallel_flags.h"
#include "common/profiling.h"
#include "gpt/fit_memory.h"
#include "gpt/model_flags.h"

namespace kiln::apps {

// --dtype's choices: f32, or autocast to bf16 or f16.
inline const std::vector<DType> kTrainGptDTypes = {DType::f32, DType::bf16, DType::f16};

// What the command line sets; run() reads it (--fit-memory may change batch_size,
// total_batch_tokens and recompute).
struct TrainGptArgs {
  ModelFlags shape;
  std::string train, val;
  int64_t batch_size = 8, seq_len = 128, total_batch_tokens = 0;
  double lr = 6e-4, min_lr = 6e-5, weight_decay = 0.1, grad_clip = 1.0;
  int64_t warmup_steps = 20, steps = 200, stop_after = 0;
  std::string dtype = "f32", device = "cpu";
  int64_t eval_every = 0, eval_tokens = 65536, log_every = 10;
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  bool resume = false;
  bool cuda_graph = false;
  std::string recompute = "none", fused_head = "auto";
  FitMemoryFlags fit;
  ParallelFlags parallel;
  uint64_t seed = 1337;
  int threads = 0;
  std::string metrics, loss_svg;
  std::optional<double> entropy_floor;
  double peak_flops = 0;
  ProfileFlags profile;
};

// Adds every train_gpt flag to `app`, into `a`; --entropy-floor goes into `floor_flag` (NaN when not
// given: main keeps a.entropy_floor unset, and run() reads floor.txt).
void add_train_gpt_flags(CLI::App& app, TrainGptArgs& a, double& floor_flag);

}  // namespace kiln::apps
