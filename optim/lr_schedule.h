// Learning-rate schedules as multiplicative factors of the step (torch's LambdaLR idea: the lr of
// a group at step s is base_lr * factor(s)), and an LRScheduler that applies one to an optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/optim/optimizer.h>

namespace kiln::optim {

/// A schedule: step (0-based, the number of scheduler.step() calls so far) -> factor of base lr.
using LRLambda = std::function<double(int64_t step)>;

/// factor(s) = 1.
double constant_factor(int64_t step);

/// Linear warmup then cosine decay (llm.c's and nanoGPT's get_lr, as a factor):
///   s <  warmup:             (s + 1) / warmup
///   warmup <= s < total:     min + (1 - min) * 0.5 * (1 + cos(pi * (s - warmup) / (total - warmup)))
///   s >= total:              min                      where min = min_factor (min_lr / base lr)
struct WarmupCosineOptions {
  WarmupCosineOptions(int64_t warmup_steps, int64_t total_steps) : warmup_steps_(warmup_steps), total_steps_(total_steps) {}
  KILN_ARG(int64_t, warmup_steps);
  KILN_ARG(int64_t, total_steps);
  KILN_ARG(double, min_factor) = 0.0;
};
double warmup_cosine_factor(int64_t step, const WarmupCosineOptions& options);

/// Step decay, torch.optim.lr_scheduler.StepLR: factor(s) = gamma ^ floor(s / step_size).
double step_decay_factor(int64_t step, int64_t step_size, double gamma);

/// Linear interpolation, torch.optim.lr_scheduler.LinearLR's closed form:
///   factor(s) = start + (end - start) * min(s, total_steps) / total_steps
/// With the defaults (start 1) it is a linear decay to end_factor that then stays there.
struct LinearOptions {
  LinearOptions(double end_factor, int64_t total_steps) : end_factor_(end_factor), total_steps_(total_steps) {}
  KILN_ARG(double, end_factor);
  KILN_ARG(int64_t, total_steps);
  KILN_ARG(double, start_factor) = 1.0;
};
double linear_factor(int64_t step, const LinearOptions& options);

/// The same schedules as LRLambda values (options are checked here, once).
LRLambda constant_schedule();
LRLambda warmup_cosine_schedule(const WarmupCosineOptions& options);
LRLambda step_decay_schedule(int64_t step_size, double gamma);
LRLambda linear_schedule(const LinearOptions& options);

/// torch.optim.lr_scheduler.LambdaLR: on construction every group's base lr is recorded as its
/// initial_lr (kept when already recorded, e.g. by a loaded state_dict) and lr = initial_lr *
/// factor(0); each step() advances the step and sets lr = initial_lr * factor(step). The
/// scheduler holds a reference: the optimizer must outlive it.
class LRScheduler {
 public:
  LRScheduler(Optimizer& optimizer, LRLambda factor);

  void step();
  int64_t last_step() const { return step_; }
  /// Jumps to `step` (a restored checkpoint) and sets the lrs for it.
  void set_step(int64_t step);
  std::vector<double> last_lr() const;  ///< every group's current lr (torch's get_last_lr)

 private:
  void apply();

  Optimizer& optimizer_;
  LRLambda factor_;
  int64_t step_ = 0;
};

}  // namespace kiln::optim
