// Differentiable joins, splits, index selection and triangular masks. cat/stack hand each input
// its slice of g; split/chunk outputs are narrow() views that core's view hook records (see
// Note [Autograd and core views]), so their gradients sum at x by themselves.
#include <kiln/autograd/ops/shape.h>

#include <functional>

#include <kiln/autograd/function.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/index.h>
#include <kiln/core/ops/join.h>
#include <kiln/core/ops/triangle.h>

namespace kiln {

using autograd::OpNode;
using autograd::saved;

namespace {

using Fn = autograd::LambdaNode::Fn;

// Records `out` = op(inputs) with the backward closure `fn`.
Tensor record(Tensor out, const char* name, const std::vector<Tensor>& inputs, Fn fn) {
  return autograd::record(std::move(out), name, inputs, [&] { return std::move(fn); });
}

// Backward of cat along `dim` (already wrapped): input i gets g's slice at its offset.
std::vector<Tensor> cat_backward(const Tensor& g, const OpNode& node, int64_t dim) {
  std::vector<Tensor> grads(node.input_info.size());
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
  return record(out, "CatBackward", tensors,
                [d](const Tensor& g, const OpNode& node) { return cat_backward(g, node, d); });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = ops::stack(tensors, dim);
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  return record(out, "StackBackward", tensors, [d](const Tensor& g, const OpNode& node) {
    std::vector<Tensor> grads(node.input_info.size());
    for (size_t i = 0; i < grads.size(); ++i)
      if (node.needs_input_grad(i)) grads[i] = g.select(d, int64_t(i));
    return grads;
  });
}

// ops::split and ops::chunk build their outputs with x.narrow(), which records each view.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) { return ops::split(x, split_size, dim); }
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return ops::split(x, sizes, dim);
}
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) { return ops::chunk(x, chunks, dim); }

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::index_select(x, dim, index);
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  return record(out, "IndexSelectBackward", {x}, [d, idx = saved(index)](const Tensor& g, const OpNode& node) {
    // Rows picked several times receive the sum of their gradients.
    const OpNode::InputInfo& in = node.input_info[0];
    Tensor gin = zeros(in.shape, TensorOptions(g.dtype()).device(in.device));
    ops::index_add_(gin, d, idx, g.contiguous());
    return std::vector<Tensor>{gin};
  });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::gather(x, dim, index);
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  return record(out, "GatherBackward", {x}, [d, idx = saved(index)](const Tensor& g, const OpNode& node) {
    const OpNode::InputInfo& in = node.input_info[0];
    Tensor gin = zeros(in.shape, TensorOptions(g.dtype()).device(in.device));
    ops::scatter_add_(gin, d, idx, g.contiguous());
    return std::vector<Tensor>{gin};
  });
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return record(ops::triu(x, diagonal), "TriuBackward", {x}, [diagonal](const Tensor& g, const OpNode&) {
    return std::vector<Tensor>{ops::triu(g, diagonal)};
  });
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return record(ops::tril(x, diagonal), "TrilBackward", {x}, [diagonal](const Tensor& g, const OpNode&) {
    return std::vector<Tensor>{ops::tril(g, diagonal)};
  });
}

}  // namespace kiln
