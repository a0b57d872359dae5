// Which parameters a forward's outputs can send gradients to: a walk of the backward graph from
// the outputs (torch's Reducer::prepare_for_backward search), so DDP's find_unused_parameters can
// mark the others ready as backward starts instead of waiting for its end.
#pragma once

#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::dist {

// reachable[i]: a gradient can flow from some output to params[i] (its AccumulateGrad node is in the
// outputs' backward graph). A parameter used only inside a re-entrant checkpoint region is not
// reachable: its graph exists only during backward (Note [Checkpoint recompute]).
std::vector<bool> reachable_parameters(const std::vector<Tensor>& outputs, const std::vector<Tensor>& params);

}  // namespace kiln::dist
