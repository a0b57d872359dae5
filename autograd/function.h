// Helpers for writing differentiable ops. Every op records itself the same way (see
// Note [Recording an op]):
//
//   Tensor out = ops::mul(a, b);                                   // the raw kernel
//   return autograd::record(out, "MulBackward", {&a, &b}, [&](const Needs&) {
//     return [a = saved(a), b = saved(b)](const Tensor& g) -> Grads { return {ops::mul(g, b), ops::mul(g, a)}; };
//   });
//
// Backward formulas call kiln::ops (raw, unrecorded); the node reduces each returned gradient to
// its input's shape and dtype with OpNode::input_grad().
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>

namespace kiln::autograd {

/// A node that remembers each input's shape, dtype and device (for reducing gradients).
class OpNode : public Node {
 public:
  using Node::Node;
  /// What OpNode keeps of each input: its shape, dtype and device.
  struct InputInfo {
    Shape shape;
    DType dtype = DType::f32;
    Device device;
  };
  std::vector<InputInfo> input_info;

  /// g summed over broadcast dims down to input i's shape and cast to its dtype (undefined if
  /// input i needs no gradient).
  Tensor input_grad(size_t i, const Tensor& g) const;
  /// Zeros shaped like input i, on its device, in `dtype` (a gradient to scatter into).
  Tensor input_zeros(size_t i, DType dtype) const;
};

// Note [Recording an op]
// autograd::record(out, name, inputs, factory) is the one way to make `out` differentiable:
// - inputs: {&a, &b} or a std::vector<Tensor>; undefined tensors get no edge.
// - factory(const Needs& needs): runs only when grad mode is on and some input requires grad,
//   after the node is connected, so needs[i] says whether input i gets a gradient (matmul saves
//   `a` only when `b` needs one). It saves what the backward reads (detached: saved(t)) into the
//   closure it returns.
// - the closure: (g) or (g, node) -> one gradient per input (Grads, undefined where not needed)
//   or a single Tensor for a one-input op. g is the gradient of `out`; an undefined g never
//   reaches it. node gives input_info (shape, dtype, device) and needs_input_grad(i).
// The node owns the closure and drops it, with all it saved, once it has run (release_saved).
// Only nodes that are not "one output, gradients in, gradients out" subclass OpNode by hand
// (checkpoint: several outputs, and a backward that re-runs the forward).

using Grads = std::vector<Tensor>;

/// A node whose backward is a closure: fn(g, node) returns one gradient per input, which the node
/// then reduces with input_grad(). The closure owns what it saved (detached tensors only) and is
/// dropped by release_saved().
class LambdaNode final : public OpNode {
 public:
  using Fn = std::function<Grads(const Tensor& g, const OpNode& node)>;
  explicit LambdaNode(const char* name) : name_(name) {}
  std::string name() const override { return name_; }
  void set_backward(Fn fn) { fn_ = std::move(fn); }
  void release_saved() override { fn_ = nullptr; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;

 private:
  const char* name_;
  Fn fn_;
};

/// Which inputs of the op being recorded need a gradient (the argument of record's factory).
class Needs {
 public:
  explicit Needs(const OpNode& node) : node_(&node) {}
  bool operator[](size_t i) const { return node_->needs_input_grad(i); }

 private:
  const OpNode* node_;
};

/// True when grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

/// Sets up node's edges and input info for `inputs` (undefined tensors get no edge).
void connect(OpNode& node, std::initializer_list<const Tensor*> inputs);
void connect(OpNode& node, const std::vector<Tensor>& inputs);

/// Makes `out` output `output_nr` of `node`. `out` must be a fresh tensor (no history yet).
void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr = 0);

namespace detail {

/// A backward closure taking (g) or (g, node) and returning Grads or one Tensor, as a LambdaNode::Fn.
template <class F>
LambdaNode::Fn as_backward(F fn) {
  return [fn = std::move(fn)](const Tensor& g, const OpNode& node) -> Grads {
    if constexpr (std::is_invocable_v<const F&, const Tensor&, const OpNode&>) {
      if constexpr (std::is_same_v<std::invoke_result_t<const F&, const Tensor&, const OpNode&>, Tensor>)
        return {fn(g, node)};
      else
        return fn(g, node);
    } else if constexpr (std::is_same_v<std::invoke_result_t<const F&, const Tensor&>, Tensor>) {
      return {fn(g)};
    } else {
      return fn(g);
    }
  };
}

template <class Inputs, class MakeFn>
Tensor record(Tensor out, const char* name, const Inputs& inputs, MakeFn& make_fn) {
  if (!needs_grad(inputs)) return out;
  auto node = std::make_shared<LambdaNode>(name);
  connect(*node, inputs);
  node->set_backward(as_backward(make_fn(Needs(*node))));
  set_history(out, node);
  return out;
}

}  // namespace detail

/// Records `out` = op(inputs) under `name` (a string literal); see Note [Recording an op].
/// Returns `out`.
template <class MakeFn>
Tensor record(Tensor out, const char* name, std::initializer_list<const Tensor*> inputs, MakeFn&& make_fn) {
  return detail::record(std::move(out), name, inputs, make_fn);
}
template <class MakeFn>
Tensor record(Tensor out, const char* name, const std::vector<Tensor>& inputs, MakeFn&& make_fn) {
  return detail::record(std::move(out), name, inputs, make_fn);
}

/// A saved tensor: the same data without history (saving the tensor itself would form a cycle).
inline Tensor saved(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

/// Sums g over the dims that broadcasting added or expanded, giving `shape`.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace kiln::autograd
