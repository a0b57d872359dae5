// Autocast state (torch.autocast(dtype)): whether this thread runs the matmul-like ops in a low
// dtype and which one. Core only holds the state; which op casts what is autograd's policy
// (Note [Autocast op lists] in autograd/autocast.h).
#pragma once

#include <cstdint>

#include <kiln/core/dtype.h>

namespace kiln {

///@{
/// Thread-local, like grad mode. The dtype is bf16 or f16; autocast_dtype() reports the last one
/// set even while autocast is off.
bool autocast_enabled();
DType autocast_dtype();
void set_autocast(bool enabled, DType dtype = DType::bf16);
///@}

///@{
/// How many AutocastGuards are open on this thread, and a counter bumped each time the outermost
/// one opens: the cast cache (one low-precision copy of each weight per forward) lives for one
/// epoch and is only used while a guard is open.
int autocast_depth();
uint64_t autocast_epoch();
///@}

namespace detail {
/// Installed by kiln_autograd at static initialisation: drops this thread's cast cache. Called
/// when the outermost AutocastGuard closes (never throws).
using AutocastCacheClearHook = void (*)();
extern AutocastCacheClearHook autocast_cache_clear_hook;
}  // namespace detail

/// Turns autocast on (or, with enabled = false, off) for its scope and restores the previous state
/// when it ends, so guards nest. Closing the outermost guard drops the cast cache.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType low = DType::bf16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

}  // namespace kiln
