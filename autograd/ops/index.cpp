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

namespace {

// index_select and gather: g goes back into zeros shaped like x through the raw op's scatter
// counterpart, scatter(gin, dim, index, g) (ops::index_add_ or ops::scatter_add_).
using Scatter = Tensor& (*)(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor record_indexing(Tensor out, const char* name, const Tensor& x, int64_t dim, const Tensor& index,
                       Scatter scatter) {
  return record(std::move(out), name, {&x}, [&](const Needs&) {
    return [dim, idx = saved(index), scatter](const Tensor& g, const OpNode& node) {
      Tensor gin = node.input_zeros(0, g.dtype());
      scatter(gin, dim, idx, g.contiguous());
      return gin;
    };
  });
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::index_select(x, dim, index);
  return record_indexing(out, "IndexSelectBackward", x, wrap_dim(dim, x.dim(), "index_select"),
                         index, &ops::index_add_);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::gather(x, dim, index);
  return record_indexing(out, "GatherBackward", x, wrap_dim(dim, x.dim(), "gather"),
                         index, &ops::scatter_add_);
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
