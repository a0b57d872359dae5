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

}  // namespace kiln::cpu
