// Index math of the CUDA elementwise engine (core/cuda/kernels/loops.cuh), kept free of CUDA headers so the
// CPU test tests/core/test_elementwise_offsets.cpp checks it: dim coalescing, splitting a loop into
// pieces that 32-bit indexing covers, fast 32-bit division, and linear index -> per-operand offset.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include <kiln/core/error.h>

#include <kiln/core/host_device.h>

namespace kiln::cuda {

// Dims an offset calculator holds after coalescing; loops with more are peeled (Note [32-bit pieces]).
inline constexpr int kMaxLoopDims = 8;
// Pieces handed to one strided launch have at most this many elements (Note [32-bit pieces]).
inline constexpr int64_t kMaxPieceNumel = INT32_MAX;

// n / d and n % d for 0 <= n < 2^31 and 1 <= d < 2^31 with one multiply-high instead of a
// division (Granlund & Montgomery; PyTorch's IntDivider): q = (umulhi(n, magic) + n) >> shift,
// where 2^shift >= d and magic = floor(2^32 (2^shift - d) / d) + 1 fits 32 bits.
struct IntDivider {
  uint32_t divisor = 1, magic = 1, shift = 0;

  IntDivider() = default;
  explicit IntDivider(int64_t d) {
    KILN_ASSERT(d >= 1 && d <= INT32_MAX, "IntDivider: divisor ", d, " out of range");
    divisor = static_cast<uint32_t>(d);
    while ((uint64_t(1) << shift) < uint64_t(d)) ++shift;
    const uint64_t m = ((uint64_t(1) << 32) * ((uint64_t(1) << shift) - uint64_t(d))) / uint64_t(d) + 1;
    KILN_ASSERT(m >= 1 && m <= UINT32_MAX, "IntDivider: magic ", m, " for divisor ", d);
    magic = static_cast<uint32_t>(m);
  }

  KILN_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, magic);
#else
    const uint32_t t = static_cast<uint32_t>((uint64_t(n) * magic) >> 32);
#endif
    return (t + n) >> shift;  // t <= n < 2^31: no overflow
  }
};

template <int N>
struct Offsets {
  int64_t v[N];
};

// Linear index (row-major over the loop's shape) -> element offset of each of N operands.
template <int N>
struct OffsetCalculator {
  int ndim = 0;
  IntDivider sizes[kMaxLoopDims];    // innermost first
  int64_t strides[kMaxLoopDims][N];  // in elements, innermost first

  KILN_HOST_DEVICE Offsets<N> get(uint32_t linear) const {
    Offsets<N> o;
    KILN_UNROLL
    for (int k = 0; k < N; ++k) o.v[k] = 0;
    KILN_UNROLL
    for (int d = 0; d < kMaxLoopDims; ++d) {
      if (d == ndim) break;
      const uint32_t q = sizes[d].div(linear);
      const int64_t i = static_cast<int64_t>(linear - q * sizes[d].divisor);
      KILN_UNROLL
      for (int k = 0; k < N; ++k) o.v[k] += i * strides[d][k];
      linear = q;
    }
    return o;
  }
};

// A loop over N operands that share one logical shape: sizes and per-operand strides in elements,
// innermost dim first, with size-1 dims dropped and mergeable neighbours merged.
template <int N>
struct Loop {
  std::vector<int64_t> sizes;
  std::array<std::vector<int64_t>, N> strides;

  int dims() const { return static_cast<int>(sizes.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  // Every operand walks memory densely in loop order (then one flat run serves all of them).
  bool contiguous() const {
    if (dims() == 0) return true;
    if (dims() > 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[k][0] != 1) return false;
    return true;
  }
};

// `shape` and each operand's `strides` are outermost first (a Tensor's). A dim merges into the one
// inside it when, for every operand, stride_outer == stride_inner * size_inner (broadcast dims
// with stride 0 merge with each other too).
template <int N>
Loop<N> coalesce(const std::vector<int64_t>& shape, const std::array<std::vector<int64_t>, N>& strides) {
  Loop<N> loop;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (!loop.sizes.empty()) {
      const size_t in = loop.sizes.size() - 1;  // the run just inside d
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && strides[k][d] == loop.strides[k][in] * loop.sizes[in];
      if (merge) {
        loop.sizes[in] *= shape[d];
        continue;
      }
    }
    loop.sizes.push_back(shape[d]);
    for (int k = 0; k < N; ++k) loop.strides[k].push_back(strides[k][d]);
  }
  return loop;
}

template <int N>
OffsetCalculator<N> make_offset_calculator(const Loop<N>& loop) {
  KILN_ASSERT(loop.dims() <= kMaxLoopDims, "offset calculator: ", loop.dims(), " dims");
  KILN_ASSERT(loop.numel() <= kMaxPieceNumel, "offset calculator: ", loop.numel(), " elements");
  OffsetCalculator<N> c;
  c.ndim = loop.dims();
  for (int d = 0; d < c.ndim; ++d) {
    c.sizes[d] = IntDivider(loop.sizes[d]);
    for (int k = 0; k < N; ++k) c.strides[d][k] = loop.strides[k][d];
  }
  return c;
}

// Note [32-bit pieces]
// The strided kernel divides 32-bit indices (IntDivider needs n < 2^31) and its calculator holds
// kMaxLoopDims dims. A loop with more dims is peeled: each step of its outermost dim becomes a loop
// of one dim fewer (more than 8 unmergeable dims of size >= 2 means at least 256 elements per
// launch). A loop with too many elements is cut along its outermost dim into pieces of at most
// `max_numel`; when even one step of that dim is too big, each step is cut again in the same way.
// fn(piece, base) gets each piece in linear order, `base[k]` being the element offset of the
// piece's first element in operand k. Offsets stay int64 throughout.
namespace detail {
template <int N, class Fn>
void split_pieces(const Loop<N>& loop, const std::array<int64_t, N>& base, Fn& fn, int64_t max_numel,
                  int max_dims) {
  const int64_t n = loop.numel();
  if (loop.dims() == 0 || (n <= max_numel && loop.dims() <= max_dims)) {
    fn(loop, base);
    return;
  }
  const int d = loop.dims() - 1;
  const int64_t outer = loop.sizes[d], inner = n / outer;
  Loop<N> piece = loop;
  std::array<int64_t, N> b;
  if (inner <= max_numel && loop.dims() <= max_dims) {
    const int64_t step = max_numel / inner;  // >= 1
    for (int64_t s = 0; s < outer; s += step) {
      piece.sizes[d] = std::min(step, outer - s);
      for (int k = 0; k < N; ++k) b[k] = base[k] + s * loop.strides[k][d];
      fn(piece, b);
    }
    return;
  }
  piece.sizes.pop_back();
  for (int k = 0; k < N; ++k) piece.strides[k].pop_back();
  for (int64_t s = 0; s < outer; ++s) {
    for (int k = 0; k < N; ++k) b[k] = base[k] + s * loop.strides[k][d];
    split_pieces<N>(piece, b, fn, max_numel, max_dims);
  }
}
}  // namespace detail

template <int N, class Fn>
void for_each_piece(const Loop<N>& loop, Fn&& fn, int64_t max_numel = kMaxPieceNumel, int max_dims = kMaxLoopDims) {
  detail::split_pieces<N>(loop, std::array<int64_t, N>{}, fn, max_numel, max_dims);
}

}  // namespace kiln::cuda
