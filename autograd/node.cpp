// Node bookkeeping and AccumulateGrad.
#include <kiln/autograd/node.h>

#include <atomic>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node(uint32_t num_outputs)
    : pre_hooks(num_outputs), retain_hooks(num_outputs), num_outputs_(num_outputs), sequence_nr_(g_next_sequence_nr++) {}

std::vector<Tensor> Node::run(std::vector<Tensor>&& grads) {
  KILN_CHECK(!released_, "backward: trying to backward through ", name(),
             " a second time, but its saved tensors were freed after the first backward; pass "
             "retain_graph=true to the first backward() if you need to backward twice");
  for (size_t i = 0; i < pre_hooks.size() && i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    for (auto& hook : pre_hooks[i])
      if (Tensor r = hook(grads[i]); r.defined()) grads[i] = r;
    for (auto& hook : retain_hooks[i]) hook(grads[i]);
  }
  return apply(std::move(grads));
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  const Tensor& leaf = leaf_;
  AutogradMeta& m = *leaf.impl()->autograd_meta();
  for (auto& hook : m.hooks)
    if (Tensor r = hook(g); r.defined()) g = r;
  KILN_CHECK(g.shape() == leaf.shape(), "backward: gradient of shape ", g.shape(), " for a leaf of shape ",
             leaf.shape());
  NoGradGuard no_grad;
  if (!m.grad.defined()) {
    // A gradient buffer the leaf owns alone (never alias a tensor the graph or a hook may still
    // use): g itself when nobody else holds it (as PyTorch's AccumulateGrad steals it), else a copy.
    if (g.dtype() != leaf.dtype() || !g.is_contiguous()) g = g.to(leaf.dtype()).contiguous();
    else if (!g.is_sole_owner() || g.impl()->autograd_meta() != nullptr) g = g.clone();
    m.grad = std::move(g);
  } else {
    // In place: .grad may be a view into a DDP bucket (Note [Bucket views] in parallel/).
    ops::add_(m.grad, g);
  }
  for (auto& hook : m.post_accumulate_hooks) hook(leaf);
  return {};
}

}  // namespace kiln
