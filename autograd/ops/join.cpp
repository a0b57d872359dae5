// Differentiable joins and splits. cat/stack hand each input its slice of g. split/chunk outputs
// are narrow() views of x recorded as the outputs of one SplitBackward node, which writes every
// piece's gradient into one buffer shaped like x (zeros only where a piece got none): a q/k/v
// split costs one (B, T, 3C) gradient, not three zero-filled ones summed (torch's SplitBackward).
#include <kiln/autograd/ops/join.h>

#include <kiln/autograd/function.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/join.h>

namespace kiln {

using autograd::Grads;
using autograd::Needs;
using autograd::OpNode;
using autograd::record;

namespace {

// Backward of cat along `dim` (already wrapped): input i gets g's slice at its offset.
Grads cat_backward(const Tensor& g, const OpNode& node, int64_t dim) {
  Grads grads(node.input_info.size());
  int64_t at = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const int64_t n = node.input_info[i].shape[dim];
    if (node.needs_input_grad(i)) grads[i] = g.narrow(dim, at, n);
    at += n;
  }
  return grads;
}

// The node of split/chunk: one output per piece, one input (x).
class SplitBackward final : public OpNode {
 public:
  SplitBackward(int64_t dim, std::vector<int64_t> sizes)
      : OpNode(static_cast<uint32_t>(sizes.size())), dim_(dim), sizes_(std::move(sizes)) {}
  std::string name() const override { return "SplitBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor* first = nullptr;
    for (const Tensor& g : grads)
      if (g.defined()) {
        first = &g;
        break;
      }
    if (first == nullptr || !needs_input_grad(0)) return {Tensor()};
    const InputInfo& in = input_info[0];
    Tensor gx = empty(in.shape, first->dtype(), in.device);
    int64_t at = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      Tensor part = gx.narrow(dim_, at, sizes_[i]);
      if (grads[i].defined()) part.copy_(grads[i]);
      else part.zero_();
      grads[i] = Tensor();  // each piece's gradient is freed as soon as it is copied
      at += sizes_[i];
    }
    return {input_grad(0, gx)};
  }

 private:
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

// Records the pieces of x (views from ops::split/chunk, made without history) as SplitBackward's outputs.
std::vector<Tensor> record_split(const Tensor& x, std::vector<Tensor> pieces, int64_t dim) {
  if (!autograd::needs_grad({&x})) return pieces;
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  std::vector<int64_t> sizes;
  for (const Tensor& p : pieces) sizes.push_back(p.size(d));
  auto node = std::make_shared<SplitBackward>(d, std::move(sizes));
  autograd::connect(*node, {&x});
  for (size_t i = 0; i < pieces.size(); ++i) autograd::set_history(pieces[i], node, static_cast<uint32_t>(i));
  return pieces;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = ops::cat(tensors, dim);
  const int64_t d = wrap_dim(dim, tensors[0].dim(), "cat");
  return record(out, "CatBackward", tensors, [d](const Needs&) {
    return [d](const Tensor& g, const OpNode& node) { return cat_backward(g, node, d); };
  });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = ops::stack(tensors, dim);
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  return record(out, "StackBackward", tensors, [d](const Needs&) {
    return [d](const Tensor& g, const OpNode& node) {
      Grads grads(node.input_info.size());
      for (size_t i = 0; i < grads.size(); ++i)
        if (node.needs_input_grad(i)) grads[i] = g.select(d, int64_t(i));
      return grads;
    };
  });
}

// ops::split and ops::chunk build their outputs with narrow(); on x.detach() they carry no history
// of their own, and record_split makes them the outputs of one node.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  return record_split(x, ops::split(autograd::saved(x), split_size, dim), dim);
}
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return record_split(x, ops::split(autograd::saved(x), sizes, dim), dim);
}
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  return record_split(x, ops::chunk(autograd::saved(x), chunks, dim), dim);
}

}  // namespace kiln
