// Helpers for differentiable ops: edges, history, gradient reduction.
#include <kiln/autograd/function.h>

#include <kiln/core/factory.h>
#include <kiln/core/ops/reduce.h>

namespace kiln::autograd {

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_mode_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_mode_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

static void add_input(OpNode& node, const Tensor& t) {
  node.next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  node.input_info.push_back(t.defined() ? OpNode::InputInfo{t.shape(), t.dtype(), t.device()} : OpNode::InputInfo{});
}

void connect(OpNode& node, std::initializer_list<const Tensor*> inputs) {
  node.next_edges.clear();
  node.input_info.clear();
  for (const Tensor* t : inputs) add_input(node, *t);
}

void connect(OpNode& node, const std::vector<Tensor>& inputs) {
  node.next_edges.clear();
  node.input_info.clear();
  for (const Tensor& t : inputs) add_input(node, t);
}

std::vector<Tensor> LambdaNode::apply(std::vector<Tensor>&& grads) {
  if (!grads[0].defined()) return std::vector<Tensor>(next_edges.size());
  Grads out = fn_(grads[0], *this);
  KILN_ASSERT(out.size() == next_edges.size(), name_, " returned ", out.size(), " gradients for ",
              next_edges.size(), " inputs");
  for (size_t i = 0; i < out.size(); ++i) out[i] = input_grad(i, out[i]);
  return out;
}

void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMeta& m = ensure_meta(out);
  KILN_ASSERT(!m.grad_fn && !m.requires_grad, "set_history on a tensor that already has history");
  m.grad_fn = node;
  m.output_nr = output_nr;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  std::vector<int64_t> dims;
  int64_t lead = g.dim() - shape.ndim();
  KILN_ASSERT(lead >= 0, "sum_to: gradient ", g.shape(), " has fewer dims than ", shape);
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? g : ops::sum(g, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

Tensor OpNode::input_grad(size_t i, const Tensor& g) const {
  if (!needs_input_grad(i) || !g.defined()) return Tensor();
  Tensor r = sum_to(g, input_info[i].shape);
  if (r.dtype() != input_info[i].dtype) r = r.to(input_info[i].dtype);
  return r;
}

Tensor OpNode::input_zeros(size_t i, DType dtype) const {
  return zeros(input_info[i].shape, TensorOptions(dtype).device(input_info[i].device));
}

}  // namespace kiln::autograd
