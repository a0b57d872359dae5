// CUDA comparisons (eq ne lt le gt ge) of two tensors, giving bool, through the engine in
// core/cuda/loops.cuh. Operands arrive broadcast and in the promoted dtype. The tensor-scalar
// forms are in elementwise_compare_scalar.cu (the two compile in parallel).
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  KILN_CHECK(out.dtype() == DType::b8, name, ": the output must be bool, got ", out.dtype());
  KILN_CHECK(a.dtype() == b.dtype(), name, ": expected one dtype, got ", a.dtype(), " and ", b.dtype());
  // a > b is b < a and a >= b is b <= a (NaN included): four kernels serve six ops.
  dispatch_numeric_device(a.dtype(), name, [&]<class T>() {
    switch (op) {
      case CompareOp::eq: return launch_map<bool, T, T>(out, {&a, &b}, formulas::Eq{});
      case CompareOp::ne: return launch_map<bool, T, T>(out, {&a, &b}, formulas::Ne{});
      case CompareOp::lt: return launch_map<bool, T, T>(out, {&a, &b}, formulas::Lt{});
      case CompareOp::le: return launch_map<bool, T, T>(out, {&a, &b}, formulas::Le{});
      case CompareOp::gt: return launch_map<bool, T, T>(out, {&b, &a}, formulas::Lt{});
      case CompareOp::ge: return launch_map<bool, T, T>(out, {&b, &a}, formulas::Le{});
    }
    KILN_UNREACHABLE("compare: unknown op ", static_cast<int>(op));
  });
}

}  // namespace kiln::cuda
