// Shared pieces of the sharded-memory tests (test_zero_memory.cpp, test_fsdp_memory.cpp): a 6-layer
// MLP wide enough that the state dwarfs everything else, and three training steps on every rank
// measured with the CPU allocator's live bytes (core/cpu_allocator.h) per parameter.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/autocast.h>
#include <kiln/core/cpu_allocator.h>
#include <kiln/optim/optimizer.h>

#include "parallel/ddp_fixtures.h"

namespace kiln::test {

constexpr int kMlpLayers = 6;
constexpr int64_t kMlpWidth = 192;  // 6 * (192 * 192 + 192) = 222336 parameters
constexpr double kMlpParams = double(kMlpLayers * (kMlpWidth * kMlpWidth + kMlpWidth));
constexpr double kMlpUnitBytes = double(kMlpWidth * kMlpWidth + kMlpWidth) * 4;  // one layer's f32 parameters

// relu(Linear(192, 192)) six times; each layer is called through nn::call (forward hooks), so FSDP
// can make it a unit.
struct WideMlp : nn::Module {
  explicit WideMlp(uint64_t seed) {
    Generator g(seed);
    for (int i = 0; i < kMlpLayers; ++i)
      layers.push_back(register_module(
          "l" + std::to_string(i), std::make_shared<nn::Linear>(nn::LinearOptions(kMlpWidth, kMlpWidth).generator(g))));
  }
  Tensor forward(Tensor x) {
    for (auto& l : layers) x = relu(nn::call(*l, x));
    return x;
  }
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

// What the mode under measurement does at the points of the measured step.
struct MeasuredMode {
  std::shared_ptr<optim::Optimizer> opt;
  std::function<void()> before_forward;  // when given
  std::function<void()> finish;          // after backward
  std::function<void()> after_step;      // when given: checks after the step and zero_grad
};

struct Measured {
  double before_step = 0, after_step = 0, peak = 0;  // bytes per parameter above the baseline
};

// Three steps of the mode that `wrap(net)` puts around a fresh WideMlp, on this rank's fixed batch
// of 4 rows, under bf16 autocast when amp is bf16. Live bytes per parameter above what was alive
// before the model was made: between backward and the step, after it (both at the last step), and
// the peak.
inline Measured measure_steps(dist::ProcessGroup& pg, DType amp,
                              const std::function<MeasuredMode(const std::shared_ptr<WideMlp>&)>& wrap) {
  Tensor x = random({4, kMlpWidth}, DType::f32, 7 + pg.rank()), y = random({4, kMlpWidth}, DType::f32, 8 + pg.rank());
  const size_t baseline = cpu_allocator_stats().allocated_bytes;
  Measured m;
  {
    auto net = std::make_shared<WideMlp>(3);
    double params = 0;
    for (const Tensor& p : net->parameters()) params += double(p.numel());
    const MeasuredMode mode = wrap(net);
    auto per_param = [&](size_t bytes) { return (double(bytes) - double(baseline)) / params; };
    for (int step = 0; step < 3; ++step) {
      if (mode.before_forward) mode.before_forward();
      {
        AutocastGuard autocast(DType::bf16, amp == DType::bf16);
        mse_loss(net->forward(x), y).to(DType::f32).backward();
      }
      mode.finish();
      m.before_step = per_param(cpu_allocator_stats().allocated_bytes);
      mode.opt->step();
      mode.opt->zero_grad();
      m.after_step = per_param(cpu_allocator_stats().allocated_bytes);
      if (mode.after_step) mode.after_step();
    }
    m.peak = per_param(cpu_allocator_stats().peak_allocated_bytes);
  }
  return m;
}

// The rank's measurement as text, for the failure messages.
inline std::string describe(const std::string& mode, dist::ProcessGroup& pg, const Measured& m, double want) {
  return mode + " at world " + std::to_string(pg.size()) + " rank " + std::to_string(pg.rank()) + ": " +
         std::to_string(m.before_step) + " B/param before the step, " + std::to_string(m.after_step) + " after, peak " +
         std::to_string(m.peak) + ", formula " + std::to_string(want);
}

// What every sharded mode keeps: `want` B/param between backward and the step (padding, 64-byte
// rounding and the small per-parameter tensors: within 3% + 0.1 B/param), and the same after it.
inline void expect_kept(const Measured& m, double want, const std::string& what) {
  expect(std::fabs(m.before_step - want) <= 0.03 * want + 0.1, what);
  expect(std::fabs(m.after_step - m.before_step) <= 0.1, what + ": the step changed what stays alive");
}

}  // namespace kiln::test
