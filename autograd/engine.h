// The backward engine: runs a graph's nodes in dependency order (in-degrees counted up front, no
// recursion), summing the gradients that reach a node from several uses before it runs.
#pragma once

#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::autograd {

/// Backpropagates from `roots` with the given output gradients (same count; undefined = ones for
/// a one-element root). Frees each node's saved tensors after it runs unless retain_graph.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

/// Whether this thread is inside backward() (nested ones included: checkpoint's recompute runs its
/// forward, and a backward, inside the outer one). FSDP keeps a unit gathered after a recomputed
/// forward by it.
bool in_backward();

}  // namespace kiln::autograd
