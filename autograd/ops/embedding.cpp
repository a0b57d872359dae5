// Differentiable embedding lookup: the gradient flows to the weight only (ids are integers), as
// the rows of the output gradient summed per id by ops::embedding_backward.
#include <kiln/autograd/ops/functional.h>

#include <kiln/autograd/function.h>
#include <kiln/core/ops/index.h>

namespace kiln {

namespace {

class EmbeddingBackward final : public autograd::OpNode {
 public:
  explicit EmbeddingBackward(int64_t num_embeddings) : num_embeddings_(num_embeddings) {}
  Tensor ids;
  std::string name() const override { return "EmbeddingBackward"; }
  void release_saved() override { ids = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    if (!g[0].defined()) return {Tensor()};
    return {input_grad(0, ops::embedding_backward(g[0], ids, num_embeddings_))};
  }

 private:
  int64_t num_embeddings_;
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor out = ops::embedding(weight, ids);
  if (auto node = autograd::make_node<EmbeddingBackward>({&weight}, weight.size(0))) {
    node->ids = autograd::saved(ids);
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kiln
