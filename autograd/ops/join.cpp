// Differentiable joins and splits. cat/stack hand each input
// its slice of g; split/chunk outputs are narrow() views that core's view hook records (see
// Note [Autograd and core views]), so their gradients sum at x by themselves.
#include <kiln/autograd/ops/join.h>

#include <kiln/autograd/function.h>
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

// ops::split and ops::chunk build their outputs with x.narrow(), which records each view.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) { return ops::split(x, split_size, dim); }
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return ops::split(x, sizes, dim);
}
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) { return ops::chunk(x, chunks, dim); }

}  // namespace kiln
