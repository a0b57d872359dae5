// The CPU's peak FLOP/s for MFU, derived from /proc/cpuinfo: vector width from the flags (Zen 4's
// 256-bit units), FMA, physical cores capped by the threads, and the clock: measured, else sysfs,
// else "cpu MHz".
#include <doctest/doctest.h>

#include <string>

#include "common/cpu_peak.h"

using kiln::apps::cpu_peak;
using kiln::apps::cpu_peak_from;
using kiln::apps::measured_clock_ghz;

namespace {

// Two processors of one package, "cpu family" left to the caller (flags shortened).
std::string two_cores(const std::string& vendor, const std::string& family) {
  std::string out;
  for (int i = 0; i < 2; ++i)
    out += "processor\t: " + std::to_string(i) + "\nvendor_id\t: " + vendor + "\ncpu family\t: " + family +
           "\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2596.140\nphysical id\t: 0\ncore id\t\t: " + std::to_string(i) +
           "\nflags\t\t: fpu sse sse2 fma avx avx2 avx512f avx512bw\n\n";
  return out;
}

}  // namespace

TEST_CASE("AVX-512 with FMA: cores x 16 lanes x 2 FMA x 2 FLOP x the clock") {
  auto p = cpu_peak_from(two_cores("GenuineIntel", "6"), 0, 0, 2);
  CHECK(p.lanes == 16);
  CHECK(p.isa == "avx512f");
  CHECK(p.fma_units == 2);
  CHECK(p.cores == 2);
  CHECK(p.ghz == doctest::Approx(2.59614));
  CHECK(p.flops == doctest::Approx(2 * 16 * 2 * 2 * 2.59614e9));
  CHECK(p.describe().find("assumed") != std::string::npos);
  CHECK(p.describe().find("cpu MHz") != std::string::npos);
}

TEST_CASE("Zen 4 (AMD family 25) runs AVX-512 on 256-bit units; Zen 5 (26) does not") {
  CHECK(cpu_peak_from(two_cores("AuthenticAMD", "25"), 0, 0, 2).lanes == 8);
  CHECK(cpu_peak_from(two_cores("AuthenticAMD", "26"), 0, 0, 2).lanes == 16);
}

TEST_CASE("the clock: measured, else sysfs max freq, else cpu MHz; threads beyond the cores add nothing") {
  const std::string cpu = two_cores("GenuineIntel", "6");
  auto measured = cpu_peak_from(cpu, 3.3, 3700000, 2);
  CHECK(measured.ghz == doctest::Approx(3.3));
  CHECK(measured.describe().find("measured") != std::string::npos);
  CHECK(measured.describe().find("2596 MHz") != std::string::npos);  // what /proc/cpuinfo said, beside it
  auto sysfs = cpu_peak_from(cpu, 0, 3700000, 8);
  CHECK(sysfs.cores == 2);
  CHECK(sysfs.ghz == doctest::Approx(3.7));
  CHECK(sysfs.flops == doctest::Approx(2 * 16 * 2 * 2 * 3.7e9));
  CHECK(sysfs.describe().find("of 8 threads") != std::string::npos);
}

TEST_CASE("narrower vectors and no FMA") {
  const std::string avx2 = "processor : 0\ncpu MHz : 3000.0\nflags : sse avx fma avx2\n";
  CHECK(cpu_peak_from(avx2, 0, 0, 1).flops == doctest::Approx(8 * 2 * 2 * 3e9));
  const std::string sse = "processor : 0\ncpu MHz : 2000.0\nflags : sse sse2\n";
  auto p = cpu_peak_from(sse, 0, 0, 1);
  CHECK(p.lanes == 4);
  CHECK(p.fma_units == 0);
  CHECK(p.flops == doctest::Approx(4 * 2 * 2e9));
}

TEST_CASE("this machine: a plausible measured clock and a peak that grows with cores") {
#if defined(__x86_64__)
  const double ghz = measured_clock_ghz();
  CHECK(ghz > 0.3);
  CHECK(ghz < 10);
  CHECK(measured_clock_ghz() == ghz);  // measured once
#endif
  auto one = cpu_peak(1);
  CHECK(one.flops > 0);
  CHECK(one.cores == 1);
  CHECK(cpu_peak(64).flops >= one.flops);
}
