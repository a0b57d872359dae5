// The CPU's peak f32 FLOP/s, the denominator of CPU MFU, derived from the CPU itself: vector lanes
// from /proc/cpuinfo's flags (avx512f: 16 f32 lanes, avx/avx2: 8, else 4; AMD family 0x19, Zen 4,
// runs AVX-512 on 256-bit units: 8), FMA units per core (2 assumed, the common case: the kernel
// does not say), the cores the threads run on, and the clock: measured where it can be (a chain of
// dependent adds, one per cycle), else sysfs cpuinfo_max_freq, else /proc/cpuinfo's "cpu MHz" (in
// a VM the nominal clock, below the turbo the cores run at, which made CPU MFU read above 100%).
// `describe()` says how, so every MFU figure printed on the CPU comes with its derivation.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::apps {

struct CpuPeak {
  double flops = 0;      // FLOP/s: cores x lanes x fma_units x 2 x ghz x 1e9
  int cores = 0;         // min(threads, physical cores)
  int threads = 0;       // as asked
  int lanes = 4;         // f32 lanes one FMA unit computes per cycle
  int fma_units = 0;     // per core, assumed 2 where the CPU has FMA; 0: one add and one multiply per cycle
  std::string isa;       // where the lanes come from: "avx512f", "avx512f on 256-bit units", "avx2", ...
  double ghz = 0;
  std::string clock_source;  // where ghz came from
  std::string describe() const;
};

// The peak from /proc/cpuinfo's text, a measured clock in GHz and sysfs' cpuinfo_max_freq in kHz
// (each 0: not there), for `threads` threads (the testable part of cpu_peak).
CpuPeak cpu_peak_from(const std::string& cpuinfo, double measured_ghz, int64_t max_freq_khz, int threads);

// This core's clock in GHz: a chain of dependent register adds (one cycle each on every x86-64
// core) timed by this thread's CPU time, so a preempted run is not slower; the best of several
// ~5 ms runs, measured once per process. 0 where it cannot be measured (not x86-64).
double measured_clock_ghz();

// This machine's peak for `threads` threads.
CpuPeak cpu_peak(int threads);

}  // namespace kiln::apps
