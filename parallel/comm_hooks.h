// Communication hooks for DistributedDataParallel (torch's register_comm_hook): replace how a
// bucket's gradients are reduced, e.g. compress them to 16 bits on the wire. The built-in ones are
// bf16_compress_hook and fp16_compress_hook.
#pragma once

#include <functional>
#include <memory>

#include <kiln/parallel/process_group.h>

namespace kiln::dist {

// Starts reducing `bucket` (the bucket's gradients: flat, contiguous, the parameters' dtype) across
// the group and returns the Work. Contract: when the returned Work's wait() returns, `bucket` holds
// the AVERAGE over ranks (not the sum). The hook must issue the same collectives on every rank.
using CommHook = std::function<std::shared_ptr<Work>(ProcessGroup& group, Tensor& bucket)>;

// Casts the bucket to bf16 / f16, divides the 16-bit copy by the world size (before the sum, so
// it overflows no sooner than one rank's gradient: Note [Divide before summing], reducer.cpp),
// all-reduces it (half the bytes on the wire for f32) and, when the Work completes (its wait()),
// casts the average back into the bucket.
std::shared_ptr<Work> bf16_compress_hook(ProcessGroup& group, Tensor& bucket);
std::shared_ptr<Work> fp16_compress_hook(ProcessGroup& group, Tensor& bucket);

}  // namespace kiln::dist
