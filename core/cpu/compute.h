// The compute type of the CPU kernels that work in f32 or f64 only (GEMM, convolution, batch norm,
// loss and norm statistics): double for f64, float for f32 and the 16-bit types (rounded once).
#pragma once

#include <kiln/core/dtype.h>

namespace kiln::cpu {

inline DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// Runs fn.template operator()<C>() with C = double for f64, float for every other dtype.
template <class F>
decltype(auto) dispatch_compute(DType t, F&& fn) {
  if (t == DType::f64) return fn.template operator()<double>();
  return fn.template operator()<float>();
}

}  // namespace kiln::cpu
