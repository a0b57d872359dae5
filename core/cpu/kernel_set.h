// The per-capability kernel sets (Note [CPU capabilities] in core/cpu_capability.h): the namespace
// a kernel file is compiled into, the declarations in every set, and the fronts' selection.
#pragma once

#include <kiln/core/cpu_capability.h>

// The namespace of the kernel set this translation unit compiles: set per object by
// core/CMakeLists.txt for core/cpu/*.cpp, cap_default everywhere else (the baseline build).
#ifndef KILN_CPU_CAP
#define KILN_CPU_CAP cap_default
#endif

// Declares the same kernels in each set's namespace (inside namespace kiln::cpu):
//   KILN_CPU_DECLARE_KERNELS(void unary(const Tensor& out, const Tensor& x);)
// Headers whose declarations live in core/kernels/X.inc use core/cpu/declare_kernels.h instead.
#define KILN_CPU_DECLARE_KERNELS(...)   \
  namespace cap_default {               \
  __VA_ARGS__                           \
  }                                     \
  namespace cap_avx2 {                  \
  __VA_ARGS__                           \
  }                                     \
  namespace cap_avx512 {                \
  __VA_ARGS__                           \
  }

namespace kiln::cpu {

template <class F>
inline F pick_kernel(F on_default, F on_avx2, F on_avx512) {
  switch (capability()) {
    case Capability::kAvx512: return on_avx512;
    case Capability::kAvx2: return on_avx2;
    default: return on_default;
  }
}

}  // namespace kiln::cpu

// KILN_CPU_KERNEL(name)(args...): the kernel `name` of the capability in use. Only kiln_core's
// fronts select (KILN_CPU_DISPATCH is private to it): a build without dispatch (KILN_NATIVE, or
// not x86-64) has the cap_default set only.
#if KILN_CPU_DISPATCH
#define KILN_CPU_KERNEL(name)                                                                \
  (::kiln::cpu::pick_kernel(&::kiln::cpu::cap_default::name, &::kiln::cpu::cap_avx2::name, \
                            &::kiln::cpu::cap_avx512::name))
#else
#define KILN_CPU_KERNEL(name) (&::kiln::cpu::cap_default::name)
#endif
