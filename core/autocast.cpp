// Thread-local autocast state and the guard that scopes it (see core/autocast.h).
#include <kiln/core/autocast.h>

#include <cstdio>
#include <exception>

#include <kiln/core/error.h>

namespace kiln {

namespace {
thread_local bool t_enabled = false;
thread_local DType t_dtype = DType::bf16;
thread_local int t_depth = 0;
thread_local uint64_t t_epoch = 0;
}  // namespace

namespace detail {
AutocastCacheClearHook autocast_cache_clear_hook = nullptr;
}  // namespace detail

bool autocast_enabled() { return t_enabled; }
DType autocast_dtype() { return t_dtype; }

void set_autocast(bool enabled, DType dtype) {
  KILN_CHECK(dtype == DType::bf16 || dtype == DType::f16, "autocast: the low-precision dtype must be bf16 or f16, got ",
             dtype);
  t_enabled = enabled;
  t_dtype = dtype;
}

int autocast_depth() { return t_depth; }
uint64_t autocast_epoch() { return t_epoch; }

AutocastGuard::AutocastGuard(DType low, bool enabled) : prev_enabled_(t_enabled), prev_dtype_(t_dtype) {
  set_autocast(enabled, low);  // checks the dtype before anything changes
  if (t_depth++ == 0) ++t_epoch;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = prev_enabled_;
  t_dtype = prev_dtype_;
  if (--t_depth == 0 && detail::autocast_cache_clear_hook) {
    try {
      detail::autocast_cache_clear_hook();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: AutocastGuard: dropping the cast cache failed: %s\n", e.what());
    }
  }
}

}  // namespace kiln
