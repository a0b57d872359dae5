// Index math of the pooling kernels, shared by both backends (core/cpu/pool.cpp,
// core/cuda/kernels/pool.cu), as plain integer functions callable from host and device, so that a
// CPU test (tests/core/test_pool_index.cpp) checks them against brute force.
// The backward kernels gather: each input pixel sums the outputs whose windows cover it, in the
// order the CPU kernels scatter them, so both add the same terms in the same order.
#pragma once

#include <cstdint>

#include <kiln/core/host_device.h>
#include <kiln/core/shape.h>

namespace kiln::pool_index {

// A pooling window the ops front has checked, with its output plane (oh, ow).
struct Window {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};

// The planes of an (N, C, H, W) or (C, H, W) shape: `count` planes of h x w (host only).
struct Planes {
  int64_t count = 0, h = 0, w = 0;
};
inline Planes planes_of(const Shape& s) {
  const int64_t h = s[s.ndim() - 2], w = s[s.ndim() - 1];
  return {h * w == 0 ? 0 : shape_numel(s) / (h * w), h, w};
}
// s with its plane (the last two dims) replaced by (oh, ow).
inline Shape with_plane(const Shape& s, int64_t oh, int64_t ow) {
  Shape r = s;
  r[r.ndim() - 2] = oh;
  r[r.ndim() - 1] = ow;
  return r;
}

// A half-open range of output rows (or columns).
struct Range {
  int64_t begin, end;
};

// The first tap at or after `start` (>= 0) of a window whose taps are start, start + dilation, ...:
// where the CPU max_pool2d kernel's `while (y0 < 0) y0 += dh` lands.
KILN_HOST_DEVICE inline int64_t first_tap(int64_t start, int64_t dilation) {
  return start >= 0 ? start : start + ((-start + dilation - 1) / dilation) * dilation;
}

// Outputs o in [0, out) whose window [o*stride - pad, o*stride - pad + kernel) contains input i
// (avg_pool2d: no dilation). i >= 0, pad >= 0, stride >= 1.
KILN_HOST_DEVICE inline Range windows_covering(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out) {
  const int64_t lo = i + pad - kernel + 1;  // o*stride >= lo
  const int64_t hi = i + pad;               // o*stride <= hi (>= 0)
  int64_t begin = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  int64_t end = hi / stride + 1;
  if (end > out) end = out;
  if (begin > end) begin = end;
  return {begin, end};
}

// Adaptive average pooling of `in` cells to `out`: output o averages [start, end).
KILN_HOST_DEVICE inline int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
KILN_HOST_DEVICE inline int64_t adaptive_end(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}
// Outputs whose adaptive window contains input i (0 <= i < in): [floor(i*out/in), ceil((i+1)*out/in)).
// (start(o) <= i  <=>  o*in < (i+1)*out  <=>  o < ceil((i+1)*out/in); i < end(o)  <=>  i*out < (o+1)*in
//  <=>  o >= floor(i*out/in).)
KILN_HOST_DEVICE inline Range adaptive_covering(int64_t i, int64_t in, int64_t out) {
  return {(i * out) / in, ((i + 1) * out + in - 1) / in};
}

}  // namespace kiln::pool_index
