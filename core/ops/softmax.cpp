// softmax family: argument checks, then the kernels of the operands' backend (core/cpu/softmax.cpp,
// core/cuda/kernels/softmax.cu) through one dispatch line (Note [One dispatch line]).
#include <kiln/core/ops/softmax.h>

#include <kiln/core/cpu/softmax.h>
#include <kiln/core/cuda/kernels/softmax.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

Tensor softmax(const Tensor& x, int64_t dim) {
  check_defined(x, "softmax");
  const int64_t d = wrap_dim(dim, x.dim(), "softmax");
  return dispatch_device("softmax", {&x}, [&] { return cuda::softmax(x, d); }, [&] { return cpu::softmax(x, d); });
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_defined(x, "log_softmax");
  const int64_t d = wrap_dim(dim, x.dim(), "log_softmax");
  return dispatch_device("log_softmax", {&x}, [&] { return cuda::log_softmax(x, d); },
                         [&] { return cpu::log_softmax(x, d); });
}

namespace {

// The forward output's gradient against it: both defined, one shape and dtype; returns dim wrapped.
int64_t check_backward(const char* op, const Tensor& grad_out, const Tensor& out, int64_t dim) {
  check_defined(grad_out, op, "grad_out");
  check_defined(out, op, "out");
  KILN_CHECK(grad_out.shape() == out.shape(), op, ": grad_out has shape ", grad_out.shape(),
             " but the forward output has shape ", out.shape());
  KILN_CHECK(grad_out.dtype() == out.dtype(), op, ": grad_out is ", grad_out.dtype(),
             " but the forward output is ", out.dtype());
  return wrap_dim(dim, out.dim(), op);
}

}  // namespace

Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  const int64_t d = check_backward("softmax_backward", grad_out, out, dim);
  return dispatch_device("softmax_backward", {&grad_out, &out}, [&] { return cuda::softmax_backward(grad_out, out, d); },
                         [&] { return cpu::softmax_backward(grad_out, out, d); });
}

Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  const int64_t d = check_backward("log_softmax_backward", grad_out, out, dim);
  return dispatch_device("log_softmax_backward", {&grad_out, &out},
                         [&] { return cuda::log_softmax_backward(grad_out, out, d); },
                         [&] { return cpu::log_softmax_backward(grad_out, out, d); });
}

}  // namespace kiln::ops
