// Size2, the (height, width) pair that kernel sizes, strides, paddings and dilations of the 2-D
// window ops (conv, pooling) take, and Conv2dOptions. One number means both: Conv2dOptions().stride(2).
#pragma once

#include <cstdint>
#include <ostream>

/// Size2 lives in kiln (not kiln::ops) so that an unqualified call like conv2d(x, w, b, options)
/// finds the differentiable kiln::conv2d by argument-dependent lookup, not also the raw op.
namespace kiln {

/// A 2-D window size, stride, padding or dilation (h, w); a single integer means both.
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: a square window reads naturally as `3`
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  bool operator==(const Size2&) const = default;
};

/// Prints (h, w).
inline std::ostream& operator<<(std::ostream& os, const Size2& s) { return os << "(" << s.h << ", " << s.w << ")"; }

/// Options of conv2d and its backward kernels.
struct Conv2dOptions {
  Size2 stride_{1}, padding_{0}, dilation_{1};
  int64_t groups_ = 1;

  Conv2dOptions& stride(Size2 s) { stride_ = s; return *this; }
  Conv2dOptions& padding(Size2 p) { padding_ = p; return *this; }
  Conv2dOptions& dilation(Size2 d) { dilation_ = d; return *this; }
  Conv2dOptions& groups(int64_t g) { groups_ = g; return *this; }
};

}  // namespace kiln
