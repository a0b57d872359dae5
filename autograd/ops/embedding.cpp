// Differentiable embedding lookup: the gradient flows to the weight only (ids are integers), as
// the rows of the output gradient summed per id by ops::embedding_backward.
#include <kiln/autograd/ops/functional.h>

#include <kiln/autograd/function.h>
#include <kiln/core/ops/index.h>

namespace kiln {

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor out = ops::embedding(weight, ids);
  return autograd::record(out, "EmbeddingBackward", {&weight}, [&](const autograd::Needs&) {
    return [ids = autograd::saved(ids), num_embeddings = weight.size(0)](const Tensor& g) {
      return ops::embedding_backward(g, ids, num_embeddings);
    };
  });
}

}  // namespace kiln
