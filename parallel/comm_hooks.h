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

// Casts the bucket to bf16 / f16, all-reduces the 16-bit copy (half the bytes on the wire for f32),
// and, when the Work completes (its wait()), casts the sum back into the bucket and divides by the
// world size.
std::shared_ptr<Work> bf16_compress_hook(ProcessGroup& group, Tensor& bucket);
std::shared_ptr<Work> fp16_compress_hook(ProcessGroup& group, Tensor& bucket);

}  // namespace kiln::dist
