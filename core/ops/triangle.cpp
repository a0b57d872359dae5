// triu/tril: argument checks, then the kernel of the input's backend (core/cpu/triangle.cpp,
// core/cuda/kernels/triangle.cu) through one dispatch line (Note [One dispatch line]).
#include <kiln/core/ops/triangle.h>

#include <kiln/core/cpu/triangle.h>
#include <kiln/core/cuda/kernels/triangle.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

namespace {

Tensor triangle(const char* op, const Tensor& x, int64_t diagonal, bool upper) {
  check_defined(x, op);
  KILN_CHECK_VALUE(x.dim() >= 2, op, ": expected a tensor with at least 2 dims, got shape ", x.shape());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  dispatch_device(op, {&x}, [&] { cuda::triangle(out, x, diagonal, upper); },
                  [&] { KILN_CPU_KERNEL(triangle)(out, x, diagonal, upper); });
  return out;
}

}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, true); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, false); }

}  // namespace kiln::ops
