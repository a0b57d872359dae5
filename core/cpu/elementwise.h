// The elementwise kernels on the CPU (the loops behind core/ops/elementwise.h for CPU tensors; the
// twin of core/cuda/kernels/elementwise.h; the op enums are core/ops/elementwise_op.h). The front
// promotes and broadcasts: operands already have the output's shape (stride 0 where broadcast) and
// the dtype the op computes in; any strides. `name` names the op in dtype errors. Outputs are
// written in place, so an output may also be an input (add_, mul_).
#pragma once

#include <kiln/core/cpu/kernel_set.h>
#include <kiln/core/ops/elementwise_op.h>
#include <kiln/core/tensor.h>

namespace kiln::cpu {

using ops::BinaryOp;
using ops::CompareOp;
using ops::UnaryOp;

KILN_CPU_DECLARE_KERNELS(
// out = op(x), both of one dtype: numeric for neg abs relu square, floating for the others.
void unary(const char* name, UnaryOp op, const Tensor& out, const Tensor& x);

// out = op(a, b): a, b and out of one numeric dtype (floating for div and the GELU backwards);
// rsub is b - a.
void binary(const char* name, BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);

// out (bool) = op(a, b); a and b of one numeric dtype.
void compare(const char* name, CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b);

// out = a + alpha * b in a's numeric dtype, alpha converted to its compute type (add_ with alpha).
void add_scaled(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, double alpha);

// out = cond ? a : b; cond bool, a, b and out of one dtype (any).
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);

// out = mask ? value : x; mask bool, x and out of one dtype (any).
void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value);
)

}  // namespace kiln::cpu
