// Size2: the (height, width) pair that kernel sizes, strides, paddings and dilations of the 2-D
// window ops (conv, pooling) take. One number means both: conv2d(..., Conv2dOptions().stride(2)).
#pragma once

#include <cstdint>
#include <ostream>

// Size2 lives in kiln (not kiln::ops) so that an unqualified call like conv2d(x, w, b, options)
// finds the differentiable kiln::conv2d by argument-dependent lookup, not also the raw op.
namespace kiln {

struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: a square window reads naturally as `3`
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  bool operator==(const Size2&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const Size2& s) { return os << "(" << s.h << ", " << s.w << ")"; }

namespace ops {
using kiln::Size2;
}

}  // namespace kiln
