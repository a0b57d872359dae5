// The oneDNN switch (switch.h). Compiled in every build; KILN_WITH_ONEDNN says whether the
// oneDNN kernels next to it were compiled too.
#include <kiln/core/cpu/onednn/switch.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include <kiln/core/cpu_capability.h>
#include <kiln/core/error.h>

namespace kiln::cpu {

namespace {

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on = [] {
    if (!onednn_built()) return false;
    const char* env = std::getenv("KILN_ONEDNN");
    return !(env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "off") == 0 || std::strcmp(env, "OFF") == 0));
  }();
  return on;
}

std::atomic<int64_t> calls{0};
std::atomic<int64_t> winograd_calls{0};

}  // namespace

bool onednn_built() {
#if defined(KILN_WITH_ONEDNN) && KILN_WITH_ONEDNN
  return true;
#else
  return false;
#endif
}

bool onednn_enabled() { return enabled_flag().load(std::memory_order_relaxed); }

void set_onednn_enabled(bool on) {
  KILN_CHECK(!on || onednn_built(), "set_onednn_enabled(true): this Kiln was built without oneDNN "
             "(configure with -DKILN_ONEDNN=ON and libdnnl-dev installed)");
  enabled_flag().store(on, std::memory_order_relaxed);
}

bool onednn_sgemm_enabled() {
  static const bool sgemm = [] {
    const char* env = std::getenv("KILN_ONEDNN_SGEMM");
    return !(env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "off") == 0 || std::strcmp(env, "OFF") == 0));
  }();
  return sgemm && onednn_enabled();
}

namespace {

// -1: unset (on for the avx2 set only), 0 off, 1 on.
std::atomic<int>& winograd_flag() {
  static std::atomic<int> on = [] {
    const char* env = std::getenv("KILN_CPU_WINOGRAD");
    if (!env) return -1;
    KILN_CHECK(std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0 || std::strcmp(env, "on") == 0 ||
                   std::strcmp(env, "off") == 0,
               "KILN_CPU_WINOGRAD must be 0, 1, off or on, got '", env, "'");
    return std::strcmp(env, "1") == 0 || std::strcmp(env, "on") == 0 ? 1 : 0;
  }();
  return on;
}

}  // namespace

bool cpu_winograd_enabled() {
  const int on = winograd_flag().load(std::memory_order_relaxed);
  return on < 0 ? capability() == Capability::kAvx2 : on == 1;
}
void set_cpu_winograd_enabled(bool on) { winograd_flag().store(on ? 1 : 0, std::memory_order_relaxed); }
int64_t cpu_winograd_calls() { return winograd_calls.load(std::memory_order_relaxed); }
void count_cpu_winograd_call() { winograd_calls.fetch_add(1, std::memory_order_relaxed); }

int64_t onednn_calls() { return calls.load(std::memory_order_relaxed); }
void count_onednn_call() { calls.fetch_add(1, std::memory_order_relaxed); }

}  // namespace kiln::cpu
