// Comparing whole tensors, as torch.isclose / torch.allclose / torch.equal. No gradient: the
// results are bool. Built from the elementwise comparisons, so they run on either device (the
// bool of allclose and equal is one host read).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

/// Per element (a and b broadcast): |a - b| <= atol + rtol * |b|, or a == b (so equal infinities are
/// close), or both NaN when equal_nan. Floating a and b must have one dtype and are compared in it;
/// integer and bool ones are compared in f64. rtol and atol must be >= 0 (ValueError otherwise).
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// Whether every element is close (isclose); true for empty tensors.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// Whether a and b have the same shape (no broadcasting) and equal elements after dtype promotion
/// (i32 1 equals f32 1.0, as torch.equal); NaN equals nothing.
bool equal(const Tensor& a, const Tensor& b);

}  // namespace kiln
