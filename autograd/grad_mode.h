// Grad mode: whether ops record history. Thread-local, like torch.no_grad / torch.enable_grad.
#pragma once

namespace kiln {

bool grad_mode_enabled();
void set_grad_mode(bool enabled);

// Sets grad mode for its scope and restores the previous mode on exit (torch's AutoGradMode).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(grad_mode_enabled()) { set_grad_mode(enabled); }
  ~GradModeGuard() { set_grad_mode(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

// Disables recording for its scope (optimizer steps, evaluation, in-place parameter updates).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

// Re-enables recording inside a NoGradGuard scope.
class EnableGradGuard : public GradModeGuard {
 public:
  EnableGradGuard() : GradModeGuard(true) {}
};

}  // namespace kiln
