// ScopedSetting: a guard that sets one setting (read by Get, written by Set) for its scope and
// restores the previous value when the scope ends, so guards nest (torch's AutoGradMode pattern).
// GradModeGuard and OnednnGuard are instances.
#pragma once

namespace kiln {

/// Sets a setting (read by Get, written by Set) for the guard's scope and restores the previous
/// value when it ends, so guards nest.
template <class T, T (*Get)(), void (*Set)(T)>
class ScopedSetting {
 public:
  explicit ScopedSetting(T value) : previous_(Get()) { Set(value); }
  ~ScopedSetting() { Set(previous_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  T previous_;
};

}  // namespace kiln
