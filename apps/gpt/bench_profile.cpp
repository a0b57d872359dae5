// The disabled-range timing of bench_gpt --profile-overhead (bench_profile.h).
#include "bench_profile.h"

#include <chrono>

#include <kiln/core/profiler/profiler.h>

namespace kiln::apps {

double disabled_range_ns(int64_t iterations) {
  if (profiler::enabled()) profiler::stop();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    profiler::Range range("bench", profiler::Category::user);
    // The range must stay: an empty asm that claims to read it keeps the compiler from deleting it.
    asm volatile("" : : "r"(&range) : "memory");
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s * 1e9 / double(iterations);
}

}  // namespace kiln::apps
