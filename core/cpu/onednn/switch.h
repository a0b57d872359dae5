// Whether the CPU kernels hand convolutions and f32 GEMMs to oneDNN (core/cpu/onednn/*): only in a
// build with KILN_ONEDNN, and only while it is switched on (the default; KILN_ONEDNN=0 in the
// environment or set_onednn_enabled(false) switch it off, so one binary can run both paths).
#pragma once

#include <cstdint>

#include <kiln/core/scoped_setting.h>

namespace kiln::cpu {

bool onednn_built();    // compiled with oneDNN (CMake KILN_ONEDNN)
bool onednn_enabled();  // built and switched on: the CPU kernels dispatch to oneDNN
// Fails when turning it on in a build without oneDNN. Process-wide.
void set_onednn_enabled(bool on);
// onednn_enabled() and f32 GEMMs not kept off oneDNN's sgemm by KILN_ONEDNN_SGEMM=0 (which runs
// them on Eigen with Kiln's threading while convolutions stay on oneDNN: the two GEMMs can be
// timed against each other on one machine, Note [GEMM threading]).
bool onednn_sgemm_enabled();
// oneDNN primitives and sgemm calls run so far in this process (tests check that a path was taken).
int64_t onednn_calls();
void count_onednn_call();

// Sets onednn_enabled() for a scope and restores the previous setting.
using OnednnGuard = ScopedSetting<bool, onednn_enabled, set_onednn_enabled>;

// Whether f32/bf16/f16 convolutions that winograd_eligible() takes (wide 3x3 stride-1 layers) run
// Kiln's own Winograd F(2x2, 3x3) (core/cpu/conv_winograd.h) instead of oneDNN's or Kiln's im2col
// kernels. KILN_CPU_WINOGRAD=1/on or 0/off in the environment; unset, on with the avx2 kernel set
// only (there oneDNN has only direct kernels and the variant is faster end to end; with AVX-512
// oneDNN runs its own Winograd; docs/benchmarks.md has the figures of both variants).
// set_cpu_winograd_enabled overrides it for the process.
bool cpu_winograd_enabled();
void set_cpu_winograd_enabled(bool on);
// Winograd passes run so far in this process (tests check that the variant was taken).
int64_t cpu_winograd_calls();
void count_cpu_winograd_call();
using CpuWinogradGuard = ScopedSetting<bool, cpu_winograd_enabled, set_cpu_winograd_enabled>;

}  // namespace kiln::cpu
