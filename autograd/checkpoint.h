// Activation checkpointing (torch.utils.checkpoint, the re-entrant kind): run a piece of the
// forward without recording it, keep only its inputs, and run it again with recording during
// backward to get its gradients. Trades one extra forward of that piece for not holding its
// activations: a GPT block then keeps one (B, T, C) input instead of ~20 activations of that size.
#pragma once

#include <functional>
#include <vector>

#include <kiln/core/generator.h>
#include <kiln/core/tensor.h>

namespace kiln::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

/// Note [Checkpoint recompute]
/// checkpoint(fn, inputs, generators) with grad mode on:
///   forward:  outputs = fn(inputs) under NoGradGuard; the node saves the inputs (detached), fn,
///             the autocast state and the offset of each generator in `generators`.
///   backward: the node rewinds those generators to the saved offsets (so dropout draws the same
///             masks), restores autocast, runs fn again with recording on detached copies of the
///             inputs, back-propagates the incoming gradients through that graph, and returns the
///             inputs' gradients. Parameters used inside fn receive theirs on the way, through
///             their usual accumulators (so their hooks, DDP's included, fire as without
///             checkpointing, once per backward). The generators are then put back where they were.
/// fn must be deterministic given its inputs, the generators and the parameters it reads (so do
/// not change those parameters between forward and backward), and must outlive the backward pass:
/// capture modules by pointer or reference to something that lives as long as the graph.
/// The outputs require grad whenever grad mode is on (fn's parameters are not visible from here),
/// even if nothing inside needs a gradient; their backward then returns undefined gradients.
/// With grad mode off, checkpoint just returns fn(inputs).
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Generator*>& generators = {});

/// One input, one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const std::vector<Generator*>& generators = {});

}  // namespace kiln::autograd
