// Differentiable triangular masks: the gradient is g under the same mask.
#include <kiln/autograd/ops/triangle.h>

#include <kiln/autograd/function.h>
#include <kiln/core/ops/triangle.h>

namespace kiln {

using autograd::Needs;
using autograd::record;

Tensor triu(const Tensor& x, int64_t diagonal) {
  return record(ops::triu(x, diagonal), "TriuBackward", {&x}, [diagonal](const Needs&) {
    return [diagonal](const Tensor& g) { return ops::triu(g, diagonal); };
  });
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return record(ops::tril(x, diagonal), "TrilBackward", {&x}, [diagonal](const Needs&) {
    return [diagonal](const Tensor& g) { return ops::tril(g, diagonal); };
  });
}

}  // namespace kiln
