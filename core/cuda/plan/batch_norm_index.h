// Index math of the CUDA batch norm kernels (batch_norm.cu) as plain integer code, callable from
// host and device, so that a CPU test (tests/core/test_batch_norm.cpp) checks it against division.
// x is (N, C, inner) contiguous; a grid-stride loop advances a cursor by a fixed step instead of
// dividing every flat index by inner and C.
#pragma once

#include <cstdint>

#include <kiln/core/host_device.h>

namespace kiln::cuda::batch_norm_index {

// (hi, lo) += (step_hi, step_lo) for a two-digit number whose low digit runs in [0, inner), with
// lo, step_lo < inner: the cursors' step without a division.
KILN_HOST_DEVICE inline void add_digits(int64_t& hi, int64_t& lo, int64_t step_hi, int64_t step_lo, int64_t inner) {
  lo += step_lo;
  hi += step_hi;
  if (lo >= inner) {
    lo -= inner;
    ++hi;
  }
}

// Position j (0 <= j < N*inner) among one channel's elements as n = j / inner, i = j % inner;
// advance() moves it by `step`.
struct ChannelCursor {
  int64_t n, i, step_n, step_i, inner;
  KILN_HOST_DEVICE ChannelCursor(int64_t j, int64_t step, int64_t inner_)
      : n(j / inner_), i(j % inner_), step_n(step / inner_), step_i(step % inner_), inner(inner_) {}
  KILN_HOST_DEVICE void advance() { add_digits(n, i, step_n, step_i, inner); }
  // The flat offset of (n, c, i) in (N, channels, inner).
  KILN_HOST_DEVICE int64_t offset(int64_t c, int64_t channels) const { return (n * channels + c) * inner + i; }
};

// The channel of flat position e of (N, C, inner), c = (e / inner) % C, with i = e % inner;
// advance() moves e by `step`.
struct ElementCursor {
  int64_t c, i, step_c, step_i, inner, channels;
  KILN_HOST_DEVICE ElementCursor(int64_t e, int64_t step, int64_t inner_, int64_t channels_)
      : c((e / inner_) % channels_),
        i(e % inner_),
        step_c((step / inner_) % channels_),
        step_i(step % inner_),
        inner(inner_),
        channels(channels_) {}
  KILN_HOST_DEVICE void advance() {
    add_digits(c, i, step_c, step_i, inner);
    if (c >= channels) c -= channels;  // c + step_c + 1 <= 2 * channels - 1
  }
};

// Channel c's elements split into `splits` near-equal ranges; range s is [begin, end).
KILN_HOST_DEVICE inline int64_t split_begin(int64_t s, int64_t count, int64_t splits) { return s * count / splits; }

}  // namespace kiln::cuda::batch_norm_index
