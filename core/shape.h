// Shape and strides: a list of int64 extents (strides counted in elements, not bytes).
// A distinct type (not a bare std::vector) so it prints as [2, 3] in error messages.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

namespace kiln {

/// A list of int64 extents (or strides, in elements) that prints as [2, 3] in errors.
struct Shape : std::vector<int64_t> {
  using std::vector<int64_t>::vector;
  Shape(std::initializer_list<int64_t> il) : std::vector<int64_t>(il) {}
  int64_t ndim() const { return static_cast<int64_t>(size()); }
};
using Strides = Shape;  ///< strides, in elements

/// Prints [2, 3].
std::ostream& operator<<(std::ostream& os, const Shape& s);

/// The number of elements: the product of the extents (1 for a 0-dim shape).
int64_t shape_numel(const Shape& shape);
/// The strides of a row-major contiguous tensor of that shape, in elements.
Strides contiguous_strides(const Shape& shape);

/// Wraps a possibly negative dim into [0, ndim); KILN_CHECK names the op and the dim on failure.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op = "");

/// The broadcast of two shapes (numpy rules); error names both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");

}  // namespace kiln
