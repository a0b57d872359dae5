// The elementwise ops by name, for the op front (core/ops/elementwise.cpp) and both backends'
// kernels (core/cpu/elementwise.h, core/cuda/kernels/elementwise.h): one enum per arity, so a new
// op is a new list entry and a case in each backend's switch. No includes: a leaf header.
#pragma once

namespace kiln::ops {

// Each family as one list (an X-macro): the enums below, the names op_name() returns and the op
// fronts (core/ops/elementwise.cpp) are generated from it, so they cannot disagree.
#define KILN_UNARY_OPS(X) \
  X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(tanh) X(sigmoid) X(relu) X(gelu_tanh) X(gelu_erf) X(square) \
      X(sin) X(cos)
// rsub is b - a (scalar form only). gelu_*_backward take (grad, x) and give grad * gelu'(x).
#define KILN_BINARY_OPS(X) \
  X(add) X(sub) X(rsub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(gelu_tanh_backward) X(gelu_erf_backward)
#define KILN_COMPARE_OPS(X) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)

#define KILN_OP_ENUMERATOR(name) name,
enum class UnaryOp { KILN_UNARY_OPS(KILN_OP_ENUMERATOR) };
enum class BinaryOp { KILN_BINARY_OPS(KILN_OP_ENUMERATOR) };
enum class CompareOp { KILN_COMPARE_OPS(KILN_OP_ENUMERATOR) };
#undef KILN_OP_ENUMERATOR

// The op's name as error messages and the profiler show it ("gelu_tanh", "maximum", "le").
const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
const char* op_name(CompareOp op);

}  // namespace kiln::ops
