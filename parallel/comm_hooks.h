// Communication hooks for DistributedDataParallel (torch's register_comm_hook): replace how a
// bucket's gradients are reduced, e.g. compress them on the wire. A hook sees the bucket (index,
// parameters, whether it is the iteration's last) and may carry a state object. Built-ins:
// allreduce_hook, fp16_compress_hook, bf16_compress_hook, and PowerSGD (powersgd_hook.h).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <kiln/parallel/process_group.h>

namespace kiln::dist {

/// What a hook reduces: one DDP bucket (torch's GradBucket). Handles alias the reducer's tensors.
struct GradBucket {
  size_t index = 0;        ///< the bucket's position in reduction order (0 is reduced first)
  bool is_last = false;    ///< the last bucket of this iteration: per-iteration hook state advances here
  Tensor buffer;           ///< (numel) the bucket's gradients, flat and contiguous, the parameters' dtype
  std::vector<Tensor> parameters;  ///< the parameters whose gradients `buffer` holds, in its order
  std::vector<int64_t> offsets;    ///< each parameter's element offset in `buffer`

  /// Parameter k's gradient: a view of `buffer`, shaped like the parameter.
  Tensor gradient(size_t k) const {
    return buffer.narrow(0, offsets[k], parameters[k].numel()).view(parameters[k].shape());
  }
};

/// Starts reducing `bucket.buffer` across the group and returns the Work. Contract: when the
/// returned Work's wait() returns, `bucket.buffer` holds the AVERAGE over ranks (not the sum), or
/// the hook's approximation of it. The hook must issue the same collectives on every rank; the
/// reducer calls it for buckets in index order and waits for the Works in the same order.
using CommHook = std::function<std::shared_ptr<Work>(ProcessGroup& group, GradBucket& bucket)>;

/// A hook with a state object (torch's register_comm_hook(state, hook)): the state lives as long
/// as the registered hook.
template <class State>
CommHook with_state(std::shared_ptr<State> state, std::shared_ptr<Work> (*hook)(State&, ProcessGroup&, GradBucket&)) {
  return [state = std::move(state), hook](ProcessGroup& group, GradBucket& bucket) {
    return hook(*state, group, bucket);
  };
}

/// A Work that, on its first wait(), waits `inner` and then runs `then` (once): the continuation of
/// a hook whose later stages need the earlier collective's result. is_completed() is false until
/// `then` has run. `then` may issue and wait for further collectives.
std::shared_ptr<Work> then_work(std::shared_ptr<Work> inner, std::function<void()> then);

/// The default reduction as a hook: divides by the world size (Note [Divide before summing] in
/// parallel/reducer.cpp, in the source tree, reducer.cpp), then sums.
std::shared_ptr<Work> allreduce_hook(ProcessGroup& group, GradBucket& bucket);

/// Casts the bucket to bf16 / f16, divides the 16-bit copy by the world size (before the sum, so
/// it overflows no sooner than one rank's gradient: Note [Divide before summing] in parallel/reducer.cpp, in the source tree, in
/// the source tree), all-reduces it (half the bytes on the wire for f32) and, when the Work completes (its
/// wait()), casts the average back into the bucket.
std::shared_ptr<Work> bf16_compress_hook(ProcessGroup& group, GradBucket& bucket);
std::shared_ptr<Work> fp16_compress_hook(ProcessGroup& group, GradBucket& bucket);

}  // namespace kiln::dist
