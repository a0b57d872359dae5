// bench_cuda --sweep: every candidate configuration of the GPU kernels whose best form is unknown,
// timed in one run (layer-norm launch variants, Kiln's vs cuDNN's attention, the bias+GELU epilogue,
// the fused residual add + layer norm, the cross entropy's forms), with the fastest of each named: a GPU tunes them in one call.
#pragma once

#include <functional>
#include <string>

namespace kiln::apps {

// Times fn on the current stream (median milliseconds): bench_cuda's rule.
using TimeFn = std::function<double(const std::function<void()>& fn)>;

struct SweepOptions {
  std::string only;       // one case: layer_norm, attention, epilogue, add_layer_norm, cross_entropy; empty: all
  std::string json_path;  // where the table goes as JSON too; empty: nowhere
};

// Prints one table per case (candidate, shape, ms, vs the default, fastest marked) and returns 0;
// a candidate that throws (cuDNN refusing a shape) is printed with its message, never fatal.
int run_sweep(const SweepOptions& options, const TimeFn& time_ms);

}  // namespace kiln::apps
