// Differentiable index selection: index_select and gather scatter g back into zeros shaped like
// x (rows picked several times receive the sum of their gradients); embedding's gradient flows to
// the weight only (ids are integers), as the rows of g summed per id by ops::embedding_backward.
#include <kiln/autograd/ops/index.h>

#include <kiln/autograd/function.h>
#include <kiln/core/ops/index.h>

namespace kiln {

using autograd::Needs;
using autograd::OpNode;
using autograd::record;
using autograd::saved;

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::index_select(x, dim, index);
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  return record(out, "IndexSelectBackward", {&x}, [&](const Needs&) {
    return [d, idx = saved(index)](const Tensor& g, const OpNode& node) {
      Tensor gin = node.input_zeros(0, g.dtype());
      return ops::index_add_(gin, d, idx, g.contiguous());
    };
  });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::gather(x, dim, index);
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  return record(out, "GatherBackward", {&x}, [&](const Needs&) {
    return [d, idx = saved(index)](const Tensor& g, const OpNode& node) {
      Tensor gin = node.input_zeros(0, g.dtype());
      return ops::scatter_add_(gin, d, idx, g.contiguous());
    };
  });
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor out = ops::embedding(weight, ids);
  return record(out, "EmbeddingBackward", {&weight}, [&](const Needs&) {
    return [ids = saved(ids), num_embeddings = weight.size(0)](const Tensor& g) {
      return ops::embedding_backward(g, ids, num_embeddings);
    };
  });
}

}  // namespace kiln
