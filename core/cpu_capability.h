// Which instruction set the CPU kernels run with. One build runs on every x86-64 CPU: the hot
// kernels (core/cpu/*.cpp) are compiled once per capability and the best one this CPU has is
// chosen at start-up from cpuid, as ATen's CPU_CAPABILITY does (Note [CPU capabilities]).
#pragma once

#include <string>
#include <vector>

namespace kiln::cpu {

/// Note [CPU capabilities]
/// kDefault is the x86-64 baseline (SSE2); kAvx2 is x86-64-v3 (AVX2, FMA, F16C, BMI1/2); kAvx512
/// is x86-64-v4 (AVX-512 F, BW, CD, DQ, VL). Each kernel file in core/cpu is compiled three times,
/// into namespaces kiln::cpu::cap_default, cap_avx2 and cap_avx512; the fronts in core/ops call
/// KILN_CPU_KERNEL(name) (core/cpu/kernel_set.h), which picks the capability in use. Everything
/// else in Kiln is compiled for the baseline. The weak (inline and template) functions of the
/// avx2/avx512 objects are renamed when they are compiled (cmake/kiln-cap-cc.sh), so the linker can
/// never pick a copy with AVX-512 instructions for the baseline code; scripts/check-isa.py proves it
/// on the linked binaries. KILN_CPU_CAPABILITY=default|avx2|avx512 forces one (a capability this
/// CPU lacks is an error, not a SIGILL); a -DKILN_NATIVE=ON build compiles everything with
/// -march=native instead and has one capability, "native".
enum class Capability : int { kDefault = 0, kAvx2 = 1, kAvx512 = 2, kNative = 3 };

/// "default", "avx2", "avx512", "native".
const char* capability_name(Capability c);

/// The capabilities this build has kernels for, lowest first: default, avx2, avx512 on x86-64;
/// native in a KILN_NATIVE build; default elsewhere.
std::vector<Capability> built_capabilities();

/// Whether this CPU (and its OS, which must save the wider registers) can run c's kernels.
bool cpu_supports(Capability c);

/// The best built capability this CPU supports.
Capability best_capability();

/// The capability in use: KILN_CPU_CAPABILITY when set (read once, on the first call; a name that
/// is not built, or that this CPU cannot run, throws kiln::ValueError naming it and the CPU), else
/// best_capability().
Capability capability();

/// Forces the capability in use for the rest of the process (tests compare the kernel sets of one
/// build). Throws kiln::ValueError for one that is not built or not supported here. Not
/// thread-safe against kernels running at the same time.
void set_capability(Capability c);

/// Parses "default", "avx2", "avx512" or "native"; throws kiln::ValueError naming `what` otherwise.
Capability parse_capability(const std::string& name, const char* what = "KILN_CPU_CAPABILITY");

/// The CPU's brand string from cpuid (e.g. "AMD EPYC 7B13"), or "unknown CPU".
std::string cpu_model();

/// One line for banners and benchmarks: "cpu: avx512 (best avx512) on AMD EPYC".
std::string capability_summary();

}  // namespace kiln::cpu
