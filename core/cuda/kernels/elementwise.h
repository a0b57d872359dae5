// CUDA launchers for the elementwise ops of core/ops/elementwise.h. The op front does the dtype
// promotion and broadcasting and calls these with operands that already have the output's shape
// (Tensor::expand: stride 0) and the dtype the op computes in; any strides and offsets. Outputs
// are written in place, so an output may also be an input (add_, mul_). No CUDA headers here.
#pragma once

#include <kiln/core/ops/elementwise_op.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

using ops::BinaryOp;
using ops::CompareOp;
using ops::UnaryOp;
using ops::op_name;

// out = op(x), both of one dtype: numeric for neg abs relu square, floating for the others.
void unary(UnaryOp op, const Tensor& out, const Tensor& x);

// out = op(a, b): a, b and out of one numeric dtype (floating for div and the GELU backwards).
// Not rsub.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);

// out = op(a, s) (rsub: s - a), the scalar passed by value to the kernel after rounding to a's
// dtype, as the CPU front's 0-dim scalar_tensor(s, a.dtype()) does. Not the GELU backwards.
void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, double s);

// out (bool) = op(a, b) or op(a, s); a and b of one numeric dtype, s rounded to it.
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double s);

// out = a + alpha * b in a's numeric dtype, alpha converted to its compute type (add_ with alpha).
void add_scaled(const Tensor& out, const Tensor& a, const Tensor& b, double alpha);

// out = cond ? a : b; cond bool, a, b and out of one dtype (any).
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);

// out = mask ? value : x; mask bool, x and out of one dtype (any).
void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value);

}  // namespace kiln::cuda
