// bench_gpt's tables: Kiln beside PyTorch (ms/step, tok/s, MFU, peak memory, the time ratio), the
// DDP overhead at world size 1, the profiler's cost, and the sharding modes. Each row's figures
// come from bench_sides / bench_step / bench_sharding; this file only lays them out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpt/bench_sharding.h"
#include "gpt/bench_sides.h"

namespace kiln::apps {

// One config's sides as timed.
struct BenchRow {
  BenchConfig bc;
  int64_t b, t;
  std::vector<Side> sides;  // [0] Kiln
};

// The median over i of with[i] / without[i]: steps that ran next to each other, so a load that
// changes over the run cancels out. Both non-empty.
double median_step_ratio(const std::vector<double>& without, const std::vector<double>& with);

// The side-by-side table; `peak` FLOP/s for MFU; each side's peak allocated memory where it reports one
// (Kiln on any device, PyTorch on CUDA).
void print_sides_table(const std::vector<BenchRow>& rows, double peak);

// --ddp-overhead: sides [0] the plain step and [1] the step through DDP; `goal` the overhead goal.
void print_ddp_overhead_table(const std::vector<BenchRow>& rows, double goal);

// --profile-overhead: the header, then one row per config (the step without and with a recording
// session, and the off bound from `range_ns` per disabled range); `goal` the off-bound goal.
void print_profile_overhead_header();
void print_profile_overhead_row(const std::string& name, const std::string& bt, const StepTiming& off,
                                const StepTiming& on, double range_ns, double goal);

// --sharding: one row per mode, DDP (none) as the reference.
void print_sharding_table(const std::vector<ShardingTiming>& rows);

}  // namespace kiln::apps
