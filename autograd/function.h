// Helpers for writing differentiable ops. The pattern (see autograd/ops/elementwise.cpp):
//
//   Tensor out = ops::mul(a, b);                        // the raw kernel
//   if (auto node = autograd::make_node<MulBackward>({&a, &b})) {   // null when no grad needed
//     node->a = autograd::saved(a);
//     node->b = autograd::saved(b);
//     autograd::set_history(out, node);
//   }
//
// Backward formulas call kiln::ops (raw, unrecorded) and return one gradient per input, already
// reduced to the input's shape and dtype with Node::input_grad().
#pragma once

#include <initializer_list>
#include <memory>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>

namespace kiln::autograd {

// A node that remembers each input's shape, dtype and device (for reducing gradients).
class OpNode : public Node {
 public:
  using Node::Node;
  struct InputInfo {
    Shape shape;
    DType dtype = DType::f32;
    Device device;
  };
  std::vector<InputInfo> input_info;

  // g summed over broadcast dims down to input i's shape and cast to its dtype (undefined if
  // input i needs no gradient).
  Tensor input_grad(size_t i, const Tensor& g) const;
};

// True when grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Sets up node's edges and input info for `inputs` (undefined tensors get no edge).
void connect(OpNode& node, std::initializer_list<const Tensor*> inputs);

template <class N, class... Args>
std::shared_ptr<N> make_node(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  if (!needs_grad(inputs)) return nullptr;
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  connect(*node, inputs);
  return node;
}

// Makes `out` output `output_nr` of `node`. `out` must be a fresh tensor (no history yet).
void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr = 0);

// A saved tensor: the same data without history (saving the tensor itself would form a cycle).
inline Tensor saved(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

// Sums g over the dims that broadcasting added or expanded, giving `shape`.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace kiln::autograd
