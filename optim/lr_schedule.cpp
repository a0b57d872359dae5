// Learning-rate schedules (formulas in lr_schedule.h) and the LambdaLR-style LRScheduler.
#include <kiln/optim/lr_schedule.h>

#include <cmath>
#include <numbers>

#include <kiln/core/error.h>

namespace kiln::optim {

namespace {

void check(const WarmupCosineOptions& o) {
  KILN_CHECK(o.warmup_steps_ >= 0 && o.total_steps_ > o.warmup_steps_,
             "warmup_cosine_schedule: need 0 <= warmup_steps < total_steps, got warmup_steps ", o.warmup_steps_,
             " and total_steps ", o.total_steps_);
  KILN_CHECK(o.min_factor_ >= 0.0 && o.min_factor_ <= 1.0, "warmup_cosine_schedule: min_factor must be in [0, 1], got ",
             o.min_factor_);
}

void check(const LinearOptions& o) {
  KILN_CHECK(o.total_steps_ > 0, "linear_schedule: total_steps must be > 0, got ", o.total_steps_);
  KILN_CHECK(o.start_factor_ >= 0.0 && o.end_factor_ >= 0.0, "linear_schedule: factors must be >= 0, got start ",
             o.start_factor_, " and end ", o.end_factor_);
}

void check_step_decay(int64_t step_size, double gamma) {
  KILN_CHECK(step_size > 0, "step_decay_schedule: step_size must be > 0, got ", step_size);
  KILN_CHECK(gamma >= 0.0, "step_decay_schedule: gamma must be >= 0, got ", gamma);
}

}  // namespace

double constant_factor(int64_t) { return 1.0; }

double warmup_cosine_factor(int64_t step, const WarmupCosineOptions& o) {
  check(o);
  if (step < o.warmup_steps_) return static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps_);
  if (step >= o.total_steps_) return o.min_factor_;
  const double ratio =
      static_cast<double>(step - o.warmup_steps_) / static_cast<double>(o.total_steps_ - o.warmup_steps_);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return o.min_factor_ + coeff * (1.0 - o.min_factor_);
}

double step_decay_factor(int64_t step, int64_t step_size, double gamma) {
  check_step_decay(step_size, gamma);
  KILN_CHECK(step >= 0, "step_decay_factor: step must be >= 0, got ", step);
  return std::pow(gamma, static_cast<double>(step / step_size));
}

double linear_factor(int64_t step, const LinearOptions& o) {
  check(o);
  const double s = static_cast<double>(std::min(step, o.total_steps_));
  return o.start_factor_ + (o.end_factor_ - o.start_factor_) * s / static_cast<double>(o.total_steps_);
}

LRLambda constant_schedule() { return constant_factor; }

LRLambda warmup_cosine_schedule(const WarmupCosineOptions& options) {
  check(options);
  return [options](int64_t s) { return warmup_cosine_factor(s, options); };
}

LRLambda step_decay_schedule(int64_t step_size, double gamma) {
  check_step_decay(step_size, gamma);
  return [step_size, gamma](int64_t s) { return step_decay_factor(s, step_size, gamma); };
}

LRLambda linear_schedule(const LinearOptions& options) {
  check(options);
  return [options](int64_t s) { return linear_factor(s, options); };
}

LRScheduler::LRScheduler(Optimizer& optimizer, LRLambda factor) : optimizer_(optimizer), factor_(std::move(factor)) {
  KILN_CHECK(static_cast<bool>(factor_), "LRScheduler: the schedule is an empty function");
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g)
    if (std::isnan(optimizer_.initial_lr(g))) optimizer_.set_initial_lr(g, optimizer_.lr(g));
  apply();
}

void LRScheduler::step() {
  ++step_;
  apply();
}

void LRScheduler::set_step(int64_t step) {
  KILN_CHECK(step >= 0, "LRScheduler::set_step: step must be >= 0, got ", step);
  step_ = step;
  apply();
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) out.push_back(optimizer_.lr(g));
  return out;
}

void LRScheduler::apply() {
  const double f = factor_(step_);
  KILN_CHECK(std::isfinite(f) && f >= 0.0, "LRScheduler: the schedule gave factor ", f, " at step ", step_);
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    // A group added after the scheduler was built starts from its own lr.
    if (std::isnan(optimizer_.initial_lr(g))) optimizer_.set_initial_lr(g, optimizer_.lr(g));
    optimizer_.set_lr(g, optimizer_.initial_lr(g) * f);
  }
}

}  // namespace kiln::optim
