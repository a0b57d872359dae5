// The CPU's peak f32 FLOP/s (cpu_peak.h).
#include "cpu_peak.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace kiln::apps {
namespace {

constexpr double kUnknownClockGhz = 2.5;

// The value after "key<spaces>: " on each line that starts with `key`.
std::vector<std::string> field_values(const std::string& cpuinfo, const std::string& key) {
  std::vector<std::string> out;
  std::istringstream lines(cpuinfo);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) continue;
    const size_t v = line.find_first_not_of(" \t", colon + 1);
    out.push_back(v == std::string::npos ? "" : line.substr(v));
  }
  return out;
}

std::string first_value(const std::string& cpuinfo, const std::string& key) {
  const std::vector<std::string> v = field_values(cpuinfo, key);
  return v.empty() ? "" : v.front();
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream words(flags);
  for (std::string w; words >> w;)
    if (w == flag) return true;
  return false;
}

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

CpuPeak cpu_peak_from(const std::string& cpuinfo, double measured_ghz, int64_t max_freq_khz, int threads) {
  CpuPeak p;
  p.threads = threads;
  std::string f = first_value(cpuinfo, "flags");     // x86
  if (f.empty()) f = first_value(cpuinfo, "Features");  // arm64
  if (has_flag(f, "avx512f")) p.lanes = 16, p.isa = "avx512f";
  else if (has_flag(f, "avx2")) p.lanes = 8, p.isa = "avx2";
  else if (has_flag(f, "avx")) p.lanes = 8, p.isa = "avx";
  else p.lanes = 4, p.isa = "sse/neon";
  const bool zen4 = first_value(cpuinfo, "vendor_id") == "AuthenticAMD" && first_value(cpuinfo, "cpu family") == "25";
  if (p.lanes == 16 && zen4) p.lanes = 8, p.isa = "avx512f on Zen 4's 256-bit units";
  p.fma_units = has_flag(f, "fma") || has_flag(f, "asimd") ? 2 : 0;

  // Physical cores: distinct (physical id, core id) pairs; without them (arm64, some VMs) every
  // processor counts as a core.
  const std::vector<std::string> packages = field_values(cpuinfo, "physical id");
  const std::vector<std::string> ids = field_values(cpuinfo, "core id");
  std::set<std::pair<std::string, std::string>> cores;
  for (size_t i = 0; i < std::min(packages.size(), ids.size()); ++i) cores.insert({packages[i], ids[i]});
  int physical = static_cast<int>(cores.size());
  if (physical == 0) physical = static_cast<int>(field_values(cpuinfo, "processor").size());
  p.cores = physical > 0 ? std::min(threads, physical) : threads;

  double mhz = 0;
  for (const std::string& v : field_values(cpuinfo, "cpu MHz")) mhz = std::max(mhz, std::atof(v.c_str()));
  char said[64] = "";
  if (mhz > 0) std::snprintf(said, sizeof said, "; /proc/cpuinfo says %.0f MHz", mhz);
  if (measured_ghz > 0) p.ghz = measured_ghz, p.clock_source = std::string("measured") + said;
  else if (max_freq_khz > 0) p.ghz = double(max_freq_khz) / 1e6, p.clock_source = "sysfs cpuinfo_max_freq";
  else if (mhz > 0)
    p.ghz = mhz / 1e3, p.clock_source = "/proc/cpuinfo cpu MHz: in a VM the nominal clock, MFU may read high";
  else p.ghz = kUnknownClockGhz, p.clock_source = "clock unknown: assumed";
  p.flops = double(p.cores) * p.lanes * (p.fma_units > 0 ? 2.0 * p.fma_units : 2.0) * p.ghz * 1e9;
  return p;
}

double measured_clock_ghz() {
#if defined(__x86_64__)
  static const double ghz = [] {
    constexpr long kIters = 100000;  // x 256 adds: ~25.6M cycles, ~5-10 ms
    double best = 0;
    for (int run = 0; run < 6; ++run) {
      uint64_t x = 0, one = 1;
      const double t0 = thread_seconds();
      for (long i = 0; i < kIters; ++i) asm volatile(".rept 256\n\tadd %1, %0\n\t.endr" : "+r"(x) : "r"(one));
      const double s = thread_seconds() - t0;
      if (s > 0) best = std::max(best, double(kIters) * 256 / s / 1e9);
    }
    return best > 0.3 && best < 10 ? best : 0.0;  // outside that, the measurement is broken
  }();
  return ghz;
#else
  return 0;
#endif
}

CpuPeak cpu_peak(int threads) {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream cpuinfo;
  cpuinfo << in.rdbuf();
  int64_t khz = 0;
  if (std::ifstream max("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); max) max >> khz;
  return cpu_peak_from(cpuinfo.str(), measured_clock_ghz(), khz, threads);
}

std::string CpuPeak::describe() const {
  char buf[512];
  const std::string units = fma_units > 0 ? " x " + std::to_string(fma_units) + " FMA units (assumed) x 2 FLOP"
                                          : " x 2 FLOP (an add and a multiply)";
  const std::string of = cores < threads ? " (of " + std::to_string(threads) + " threads)" : "";
  std::snprintf(buf, sizeof buf, "%.4g GFLOP/s = %d core(s)%s x %d f32 lanes (%s)%s x %.2f GHz (%s)", flops / 1e9,
                cores, of.c_str(), lanes, isa.c_str(), units.c_str(), ghz, clock_source.c_str());
  return buf;
}

}  // namespace kiln::apps
