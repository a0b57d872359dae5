// Capability detection and the one switch the CPU kernel fronts read (Note [CPU capabilities] in
// core/cpu_capability.h). This file is compiled for the x86-64 baseline: it runs before any kernel.
#include <kiln/core/cpu_capability.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <kiln/core/error.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln::cpu {

namespace {

// -1 until the first capability() (or set_capability) fixes it.
std::atomic<int> g_capability{-1};
std::mutex g_init;

bool built(Capability c) {
  for (Capability b : built_capabilities())
    if (b == c) return true;
  return false;
}

std::string supported_list() {
  std::string s;
  for (Capability c : built_capabilities())
    if (cpu_supports(c)) s += std::string(s.empty() ? "" : ", ") + capability_name(c);
  return s;
}

void check_usable(Capability c, const char* what) {
  KILN_CHECK_VALUE(built(c), what, "=", capability_name(c), ": this build has no ", capability_name(c),
                   " kernels (built: ", [] {
                     std::string s;
                     for (Capability b : built_capabilities()) s += std::string(s.empty() ? "" : ", ") + capability_name(b);
                     return s;
                   }(), ")");
  KILN_CHECK_VALUE(cpu_supports(c), what, "=", capability_name(c), ": this CPU (", cpu_model(),
                   ") cannot run it; it supports ", supported_list());
}

}  // namespace

const char* capability_name(Capability c) {
  switch (c) {
    case Capability::kDefault: return "default";
    case Capability::kAvx2: return "avx2";
    case Capability::kAvx512: return "avx512";
    case Capability::kNative: return "native";
  }
  return "unknown";
}

std::vector<Capability> built_capabilities() {
#if KILN_NATIVE
  return {Capability::kNative};
#elif KILN_CPU_DISPATCH
  return {Capability::kDefault, Capability::kAvx2, Capability::kAvx512};
#else
  return {Capability::kDefault};
#endif
}

bool cpu_supports(Capability c) {
  switch (c) {
    case Capability::kDefault:
    case Capability::kNative:  // the build machine's own set: runs where it was built
      return true;
#if defined(__x86_64__) || defined(__i386__)
    // libgcc's cpu model checks cpuid and, for AVX and AVX-512, that the OS saves the YMM/ZMM
    // state (XGETBV), so a feature the kernel does not enable reads as missing.
    case Capability::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
    case Capability::kAvx512:
      return cpu_supports(Capability::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd");
#endif
    default:
      return false;
  }
}

Capability best_capability() {
  Capability best = built_capabilities().front();
  for (Capability c : built_capabilities())
    if (cpu_supports(c)) best = c;
  return best;
}

Capability parse_capability(const std::string& name, const char* what) {
  for (Capability c : {Capability::kDefault, Capability::kAvx2, Capability::kAvx512, Capability::kNative})
    if (name == capability_name(c)) return c;
  KILN_CHECK_VALUE(false, what, "=", name, " is not a CPU capability (default, avx2, avx512",
                   built(Capability::kNative) ? ", native" : "", ")");
  return Capability::kDefault;
}

Capability capability() {
  int v = g_capability.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<Capability>(v);
  std::lock_guard<std::mutex> lock(g_init);
  v = g_capability.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<Capability>(v);
  Capability c = best_capability();
  if (const char* env = std::getenv("KILN_CPU_CAPABILITY"); env != nullptr && *env != '\0') {
    c = parse_capability(env);
    check_usable(c, "KILN_CPU_CAPABILITY");
  }
  g_capability.store(static_cast<int>(c), std::memory_order_release);
  return c;
}

void set_capability(Capability c) {
  check_usable(c, "set_capability");
  std::lock_guard<std::mutex> lock(g_init);
  g_capability.store(static_cast<int>(c), std::memory_order_release);
}

std::string cpu_model() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned int max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext >= 0x80000004u) {
    unsigned int regs[12];
    for (unsigned int i = 0; i < 3; ++i)
      __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    char brand[49];
    std::memcpy(brand, regs, 48);
    brand[48] = '\0';
    std::string s(brand);
    const size_t b = s.find_first_not_of(' ');
    const size_t e = s.find_last_not_of(' ');
    if (b != std::string::npos) return s.substr(b, e - b + 1);
  }
#endif
  return "unknown CPU";
}

std::string capability_summary() {
  return std::string("cpu: ") + capability_name(capability()) + " kernels (best here " +
         capability_name(best_capability()) + ") on " + cpu_model();
}

}  // namespace kiln::cpu
