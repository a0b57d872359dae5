// Which parameters a forward's outputs can send gradients to: a walk of the backward graph from
// the outputs (torch's Reducer::prepare_for_backward search), so DDP's find_unused_parameters can
// mark the others ready as backward starts instead of waiting for its end.
#pragma once

#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::dist {

/// What a walk of the backward graph from a forward's outputs found (the file's header).
struct GraphWalk {
  /// reachable[i]: a gradient can flow from some output to params[i] (its AccumulateGrad node is in
  /// the outputs' backward graph).
  std::vector<bool> reachable;
  /// The graph holds a re-entrant checkpoint region (Note [Checkpoint recompute]): the parameters
  /// used inside it get their graph only during backward, so "not reachable" proves nothing.
  bool has_checkpoint = false;
};

GraphWalk walk_backward_graph(const std::vector<Tensor>& outputs, const std::vector<Tensor>& params);

}  // namespace kiln::dist
