// The device side of the shared elementwise functors (core/formulas.h, Note [Elementwise
// functors]): DeviceMath, CUDA's accurate libm for them (expf, tanhf, erff: no fast-math
// intrinsics, so f32 agrees with the CPU to a few ulp), and WithScalar for the tensor-scalar
// kernels. CUDA-only header.
#pragma once

#include <cmath>
#include <type_traits>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/formulas.h>
#include <kiln/core/ops/elementwise_table.h>

namespace kiln::cuda::fn {

// The device's math for the shared formulas of core/formulas.h: for float the f suffixed libm
// function, for double the plain one (global names: kiln has pow too).
#define KILN_DEVICE_LIBM(name)                                                            \
  template <class T>                                                                      \
  __device__ static T name(T v) {                                                         \
    if constexpr (std::is_same_v<T, float>) return ::name##f(v); else return ::name(v);   \
  }
struct DeviceMath {
  KILN_DEVICE_LIBM(exp)
  KILN_DEVICE_LIBM(log)
  KILN_DEVICE_LIBM(sqrt)
  KILN_DEVICE_LIBM(tanh)
  KILN_DEVICE_LIBM(sin)
  KILN_DEVICE_LIBM(cos)
  KILN_DEVICE_LIBM(erf)
  template <class T>
  __device__ static T pow(T x, T y) {
    if constexpr (std::is_same_v<T, float>) return ::powf(x, y); else return ::pow(x, y);
  }
};
#undef KILN_DEVICE_LIBM

// op(x, s) with s a kernel argument (tensor-scalar ops need no device copy of the scalar).
template <class Op, class A>
struct WithScalar {
  Op op;
  A s;
  __device__ auto operator()(A x) const { return op(x, s); }
};

}  // namespace kiln::cuda::fn
