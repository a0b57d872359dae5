// Element offsets of N operands that share one logical shape, each with its own strides (0 for
// a broadcast dim): the index math of the CUDA copy, fill and other strided kernels. CUDA-free
// and __host__ __device__, so tests/core/test_offset_calc.cpp checks it on the CPU.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

#include <kiln/core/error.h>
#include <kiln/core/formulas.h>
#include <kiln/core/host_device.h>
#include <kiln/core/shape.h>

namespace kiln::cuda {

inline constexpr int kMaxOffsetDims = 16;  // after merging; more is rejected with an error

template <int N>
struct OffsetCalc {
  int ndim = 1;
  int64_t sizes[kMaxOffsetDims] = {1};        // merged dims, outermost first
  int64_t strides[N][kMaxOffsetDims] = {};    // in elements, per operand

  // Offsets (in elements) of the element with row-major linear index `i`. I is the index type
  // the kernel uses: uint32_t when fits_32bit(), else int64_t.
  template <class I>
  KILN_HOST_DEVICE void get(I i, I (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d > 0; --d) {
      const I size = static_cast<I>(sizes[d]);
      const I q = i / size;
      const I r = i - q * size;
      for (int k = 0; k < N; ++k) off[k] += r * static_cast<I>(strides[k][d]);
      i = q;
    }
    for (int k = 0; k < N; ++k) off[k] += i * static_cast<I>(strides[k][0]);
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }

  // Every linear index and every operand's offsets fit in 31 bits (uint32_t math is safe).
  bool fits_32bit() const {
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (numel() > kMax) return false;
    for (int k = 0; k < N; ++k) {
      int64_t last = 0;
      for (int d = 0; d < ndim; ++d) last += (sizes[d] - 1) * strides[k][d];
      if (last > kMax) return false;
    }
    return true;
  }
};

// Drops size-1 dims and merges dims wherever every operand is laid out contiguously across the
// pair (Note [Collapsing dims]: contiguous operands become one dim and need no division). `strides[k]`
// are operand k's strides for `shape`, all non-negative.
template <int N>
OffsetCalc<N> make_offset_calc(const Shape& shape, const std::array<const Strides*, N>& strides) {
  for (int k = 0; k < N; ++k)
    KILN_ASSERT(strides[k]->size() == shape.size(), "operand ", k, " has strides ", *strides[k], " for shape ", shape);
  std::array<Strides, N> given;
  for (int k = 0; k < N; ++k) given[k] = *strides[k];
  Shape sh;
  std::array<Strides, N> st;
  formulas::collapse_dims<N>(shape, given, sh, st);  // Note [Collapsing dims]
  OffsetCalc<N> c;
  if (sh.empty()) return c;  // one element (or a shape with a 0 dim, which callers skip)
  KILN_CHECK(sh.ndim() <= kMaxOffsetDims, "CUDA strided kernel: shape ", shape, " has ", sh.ndim(),
             " dims that cannot be merged; at most ", kMaxOffsetDims, " are supported (make the tensor contiguous)");
  c.ndim = static_cast<int>(sh.ndim());
  for (int d = 0; d < c.ndim; ++d) {
    c.sizes[d] = sh[d];
    for (int k = 0; k < N; ++k) c.strides[k][d] = st[k][d];
  }
  return c;
}

}  // namespace kiln::cuda
