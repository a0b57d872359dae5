// Activation checkpointing: CheckpointNode re-runs the forward piece in backward. See Note
// [Checkpoint recompute] in checkpoint.h.
#include <kiln/autograd/checkpoint.h>

#include <utility>

#include <kiln/autograd/engine.h>
#include <kiln/autograd/function.h>
#include <kiln/autograd/grad_mode.h>
#include <kiln/core/autocast.h>

namespace kiln::autograd {

namespace {

class CheckpointNode final : public OpNode {
 public:
  CheckpointNode(CheckpointFn fn, std::vector<Generator*> generators, uint32_t num_outputs)
      : OpNode(num_outputs), fn_(std::move(fn)), generators_(std::move(generators)) {}

  std::string name() const override { return "CheckpointBackward"; }

  void release_saved() override {
    fn_ = nullptr;
    inputs_.clear();
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> input_grads(next_edges.size());
    std::vector<Tensor> outputs, roots, root_grads, leaves;
    {
      // Replay the forward as it ran: same generator offsets, same autocast, recording on.
      std::vector<uint64_t> offsets_now;
      for (size_t i = 0; i < generators_.size(); ++i) {
        offsets_now.push_back(generators_[i]->offset());
        generators_[i]->set_offset(offsets_[i]);
      }
      struct RestoreOffsets {
        const std::vector<Generator*>& g;
        const std::vector<uint64_t>& off;
        ~RestoreOffsets() {
          for (size_t i = 0; i < g.size(); ++i) g[i]->set_offset(off[i]);
        }
      } restore{generators_, offsets_now};
      AutocastGuard autocast(autocast_dtype_, autocast_enabled_);
      EnableGradGuard grad;
      for (size_t i = 0; i < inputs_.size(); ++i) {
        Tensor x = inputs_[i].defined() ? inputs_[i].detach() : Tensor();
        if (x.defined() && needs_input_grad(i)) x.requires_grad_(true);
        leaves.push_back(x);
      }
      outputs = fn_(leaves);
    }
    KILN_CHECK(outputs.size() == grads.size(), "checkpoint: the recomputed function returned ", outputs.size(),
               " outputs, the forward returned ", grads.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!grads[i].defined() || !outputs[i].defined() || !outputs[i].requires_grad()) continue;
      KILN_CHECK(outputs[i].shape() == grads[i].shape(), "checkpoint: recomputed output ", i, " has shape ",
                 outputs[i].shape(), ", the forward's had ", grads[i].shape(),
                 " (the function must be deterministic)");
      roots.push_back(outputs[i]);
      root_grads.push_back(grads[i]);
    }
    if (!roots.empty()) backward(roots, root_grads);
    for (size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].defined() && leaves[i].requires_grad()) input_grads[i] = input_grad(i, leaves[i].grad());
    return input_grads;
  }

  CheckpointFn fn_;
  std::vector<Generator*> generators_;
  std::vector<uint64_t> offsets_;
  std::vector<Tensor> inputs_;  // detached
  bool autocast_enabled_ = false;
  DType autocast_dtype_ = DType::bf16;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Generator*>& generators) {
  KILN_CHECK(static_cast<bool>(fn), "checkpoint: the function is empty");
  for (const Generator* g : generators) KILN_CHECK(g != nullptr, "checkpoint: a null generator was passed");
  if (!grad_mode_enabled()) return fn(inputs);

  std::vector<uint64_t> offsets;
  for (const Generator* g : generators) offsets.push_back(g->offset());
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  KILN_CHECK(!outputs.empty(), "checkpoint: the function returned no tensors");
  auto node = std::make_shared<CheckpointNode>(fn, generators, static_cast<uint32_t>(outputs.size()));
  connect(*node, inputs);
  node->offsets_ = std::move(offsets);
  for (const Tensor& x : inputs) node->inputs_.push_back(saved(x));
  node->autocast_enabled_ = autocast_enabled();
  node->autocast_dtype_ = autocast_dtype();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) continue;
    KILN_CHECK(is_floating(outputs[i].dtype()), "checkpoint: output ", i, " has dtype ", outputs[i].dtype(),
               "; only floating outputs can carry gradients");
    // A fresh handle: the output may alias an input (fn returned it, or a view of it).
    outputs[i] = outputs[i].detach();
    set_history(outputs[i], node, static_cast<uint32_t>(i));
  }
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const std::vector<Generator*>& generators) {
  KILN_CHECK(static_cast<bool>(fn), "checkpoint: the function is empty");
  CheckpointFn many = [fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; };
  return checkpoint(many, {input}, generators)[0];
}

}  // namespace kiln::autograd
