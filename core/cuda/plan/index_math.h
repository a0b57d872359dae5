// Row-major position -> element offsets for the CUDA index kernels (core/cuda/kernels/index.cu), kept free
// of CUDA headers so the CPU test tests/core/test_index_math.cpp checks it. A kernel walks the
// positions of one shape and reads several operands through their own strides; a stride set can
// also pick out one coordinate (unit_at) or leave one dim to the kernel (zeroed_at).
#pragma once

#include <array>
#include <cstdint>

#include <kiln/core/error.h>
#include <kiln/core/shape.h>

#include <kiln/core/host_device.h>

namespace kiln::cuda::indexing {

inline constexpr int kMaxDims = 12;

// A shape and N stride sets over it (passed to kernels by value). Size-1 dims are dropped when
// built, as they never change an offset.
template <int N>
struct Strided {
  int nd = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};

  // off[k] = sum over d of coordinate(flat)[d] * stride[k][d], for 0 <= flat < numel.
  KILN_HOST_DEVICE void offsets(int64_t flat, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t q = flat / size[d];
      const int64_t i = flat - q * size[d];
      flat = q;
      for (int k = 0; k < N; ++k) off[k] += i * stride[k][d];
    }
  }
};

// `shape` without dim `skip` (-1: keep all) and the matching entries of each stride set.
template <int N>
Strided<N> make_strided(const Shape& shape, const std::array<Strides, N>& strides, int64_t skip = -1) {
  Strided<N> g;
  for (int64_t d = 0; d < shape.ndim(); ++d) {
    if (d == skip || shape[d] == 1) continue;
    KILN_CHECK(g.nd < kMaxDims, "CUDA index kernels take at most ", kMaxDims, " dims of size > 1, got shape ", shape);
    g.size[g.nd] = shape[d];
    for (int k = 0; k < N; ++k) g.stride[k][g.nd] = strides[k][d];
    ++g.nd;
  }
  return g;
}

// Strides that make an offset equal to the coordinate along `dim`.
inline Strides unit_at(int64_t ndim, int64_t dim) {
  Strides s(static_cast<size_t>(ndim), 0);
  s[dim] = 1;
  return s;
}
// `strides` with the entry of `dim` zeroed: the kernel adds index * stride itself.
inline Strides zeroed_at(Strides strides, int64_t dim) {
  strides[dim] = 0;
  return strides;
}

}  // namespace kiln::cuda::indexing
