// Grad mode: whether ops record history. Thread-local, like torch.no_grad / torch.enable_grad.
#pragma once

#include <kiln/core/scoped_setting.h>

namespace kiln {

///@{
/// Whether ops record history on this thread (default true), and its setter; prefer the guards.
bool grad_mode_enabled();
void set_grad_mode(bool enabled);
///@}

/// Sets grad mode for its scope and restores the previous mode on exit (torch's AutoGradMode).
using GradModeGuard = ScopedSetting<bool, grad_mode_enabled, set_grad_mode>;

/// Disables recording for its scope (optimizer steps, evaluation, in-place parameter updates).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

/// Re-enables recording inside a NoGradGuard scope.
class EnableGradGuard : public GradModeGuard {
 public:
  EnableGradGuard() : GradModeGuard(true) {}
};

}  // namespace kiln
