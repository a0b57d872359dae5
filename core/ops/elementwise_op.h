// The elementwise ops by name, for the op front (core/ops/elementwise.cpp) and both backends'
// kernels (core/cpu/elementwise.h, core/cuda/kernels/elementwise.h): one enum per arity, so a new
// op is a new enumerator and a case in each backend's switch. No includes: a leaf header.
#pragma once

namespace kiln::ops {

enum class UnaryOp { neg, abs, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu_tanh, gelu_erf, square };
// rsub is b - a (scalar form only). gelu_*_backward take (grad, x) and give grad * gelu'(x).
enum class BinaryOp { add, sub, rsub, mul, div, pow, maximum, minimum, gelu_tanh_backward, gelu_erf_backward };
enum class CompareOp { eq, ne, lt, le, gt, ge };

// The op's name as error messages and the profiler show it ("gelu_tanh", "maximum", "le").
const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
const char* op_name(CompareOp op);

}  // namespace kiln::ops
