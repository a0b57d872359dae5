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

#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

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

// A node whose backward is a closure: fn(g, node) returns one gradient per input, which the node
// then reduces with input_grad(). The closure owns what it saved (detached tensors only) and is
// dropped by release_saved().
class LambdaNode final : public OpNode {
 public:
  using Fn = std::function<std::vector<Tensor>(const Tensor& g, const OpNode& node)>;
  LambdaNode(const char* name, Fn fn) : name_(name), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  void release_saved() override { fn_ = nullptr; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;

 private:
  const char* name_;
  Fn fn_;
};

// True when grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Sets up node's edges and input info for `inputs` (undefined tensors get no edge).
void connect(OpNode& node, std::initializer_list<const Tensor*> inputs);
void connect(OpNode& node, const std::vector<Tensor>& inputs);

template <class N, class... Args>
std::shared_ptr<N> make_node(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  if (!needs_grad(inputs)) return nullptr;
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  connect(*node, inputs);
  return node;
}

// Makes `out` output `output_nr` of `node`. `out` must be a fresh tensor (no history yet).
void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr = 0);

// Records `out` = op(inputs) with a LambdaNode whose closure make_fn() builds (called only when a
// gradient is needed, so nothing is saved otherwise). Returns `out`.
template <class MakeFn>
Tensor record(Tensor out, const char* name, const std::vector<Tensor>& inputs, MakeFn&& make_fn) {
  if (!needs_grad(inputs)) return out;
  auto node = std::make_shared<LambdaNode>(name, LambdaNode::Fn(make_fn()));
  connect(*node, inputs);
  set_history(out, node);
  return out;
}

// A saved tensor: the same data without history (saving the tensor itself would form a cycle).
inline Tensor saved(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

// Sums g over the dims that broadcasting added or expanded, giving `shape`.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace kiln::autograd
