// AutogradMeta: the autograd state core's TensorImpl carries as an opaque pointer.
// Only tensors that require grad (leaves) or have history (outputs of recorded ops) have one.
#pragma once

#include <memory>
#include <vector>

#include <kiln/autograd/node.h>

namespace kiln {

/// Runs after a gradient was accumulated into param.grad (torch's register_post_accumulate_grad_hook).
using PostAccumulateHook = std::function<void(const Tensor& param)>;

/// A tensor's autograd state: whether it requires and retains a gradient, its .grad, and the node
/// that made it (Note [TensorImpl]: attached once, never replaced).
struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;                           ///< leaves (and retain_grad non-leaves)
  std::shared_ptr<Node> grad_fn;         ///< non-leaves: the node that made this tensor
  uint32_t output_nr = 0;                ///< which output of grad_fn this is
  std::weak_ptr<AccumulateGrad> accumulator;  ///< leaves: shared by every graph using this leaf
  std::vector<GradHook> hooks;                ///< leaves: run before accumulation
  std::vector<PostAccumulateHook> post_accumulate_hooks;
};

namespace autograd {

/// The tensor's meta, or null.
inline AutogradMeta* meta(const Tensor& t) { return t.defined() ? t.impl()->autograd_meta() : nullptr; }
/// Creates the meta when missing (and installs core's derived-tensor hook on first use).
AutogradMeta& ensure_meta(const Tensor& t);
/// Where the gradient of `t` goes: its grad_fn, its leaf accumulator, or nowhere.
Edge gradient_edge(const Tensor& t);
/// The leaf's AccumulateGrad node (created on demand; the meta holds it weakly).
std::shared_ptr<AccumulateGrad> grad_accumulator(const Tensor& leaf);

/// Clears the .grad of each tensor: set to undefined, or zeroed in place (keeping the buffer, e.g. a
/// DDP bucket view). Used by Module::zero_grad and Optimizer::zero_grad.
void zero_grad(const std::vector<Tensor>& params, bool set_to_none = true);

/// Registers a hook on the gradient w.r.t. `t` (leaf or not); it may return a replacement.
void register_hook(const Tensor& t, GradHook hook);
/// Registers a hook that fires when a leaf's .grad is final for the current backward pass.
void register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook);

}  // namespace autograd
}  // namespace kiln
