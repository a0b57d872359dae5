// softmax family: argument checks, then the kernels of the operands' backend (core/cpu/softmax.cpp,
// core/cuda/kernels/softmax.cu) through one dispatch line (Note [One dispatch line]).
#include <kiln/core/ops/softmax.h>

#include <kiln/core/cpu/softmax.h>
#include <kiln/core/cuda/kernels/softmax.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

namespace {

Tensor forward(const char* op, const Tensor& x, int64_t dim, bool log) {
  check_defined(x, op);
  const int64_t d = wrap_dim(dim, x.dim(), op);
  return dispatch_device(op, {&x}, [&] { return cuda::softmax(op, x, d, log); },
                         [&] { return KILN_CPU_KERNEL(softmax)(op, x, d, log); });
}

// The forward output's gradient against it: both defined, one shape and dtype.
Tensor backward(const char* op, const Tensor& grad_out, const Tensor& out, int64_t dim, bool log) {
  check_defined(grad_out, op, "grad_out");
  check_defined(out, op, "out");
  KILN_CHECK_VALUE(grad_out.shape() == out.shape(), op, ": grad_out has shape ", grad_out.shape(),
                   " but the forward output has shape ", out.shape());
  KILN_CHECK_VALUE(grad_out.dtype() == out.dtype(), op, ": grad_out is ", grad_out.dtype(),
                   " but the forward output is ", out.dtype());
  const int64_t d = wrap_dim(dim, out.dim(), op);
  return dispatch_device(op, {&grad_out, &out}, [&] { return cuda::softmax_backward(op, grad_out, out, d, log); },
                         [&] { return KILN_CPU_KERNEL(softmax_backward)(op, grad_out, out, d, log); });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return forward("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return forward("log_softmax", x, dim, true); }

Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  return backward("softmax_backward", grad_out, out, dim, false);
}
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  return backward("log_softmax_backward", grad_out, out, dim, true);
}

}  // namespace kiln::ops
