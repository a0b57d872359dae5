// broadcast_from_rank0: a module's or optimizer's tensors made equal to rank 0's, as DDP, FSDP and
// ZeRO do for parameters and buffers at start-up and before each forward.
#pragma once

#include <vector>

#include <kiln/core/tensor.h>
#include <kiln/parallel/process_group.h>

namespace kiln::dist {

/// Launches one broadcast from rank 0 per tensor, then waits for all of them. A non-contiguous
/// tensor is broadcast through a contiguous copy written back after the wait. Nothing is recorded
/// for autograd; a group of one rank returns at once.
void broadcast_from_rank0(ProcessGroup& group, const std::vector<Tensor>& tensors);

}  // namespace kiln::dist
