// ShardedReducer: the gradient side of ZeRO-2. Like DDP's Reducer it marks parameters ready from
// their post-accumulate-grad hooks and launches a bucket's collective as soon as the bucket is
// complete (overlapping the rest of backward), but the collective is a reduce-scatter into this
// rank's chunk of the ShardedOptimizer's local gradient, and the full .grad is released at once:
// each rank keeps only its gradient shard (Note [ZeRO-2 gradients]).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <kiln/nn/module.h>
#include <kiln/parallel/sharded_optimizer.h>

namespace kiln::dist {

/// Note [ZeRO-2 gradients]
/// The buckets are the ShardedOptimizer's layout (Note [Padded flat shards]): fixed at
/// construction (no re-bucketing in arrival order, since the optimizer state is laid out by them).
/// In a synced backward, when every parameter of bucket b has its gradient (buckets launch in
/// order, as DDP's do), the gradients are copied into a padded flat buffer, their .grad is set to
/// none (freed), and reduce_scatter(sum) writes this rank's chunk of the sum into the optimizer's
/// local_grad(). At most two buckets' flat buffers are alive: launching a third first waits for the
/// oldest reduce-scatter and frees its buffer (DeepSpeed's double-buffered reduce bucket; FSDP does
/// the same per unit). finish() waits and multiplies by 1/world, DDP's own arithmetic (so the shards hold
/// the bits of DDP's averaged gradients where the sum order agrees: always at world 1 and 2).
/// Gradient accumulation: under no_sync the hooks do nothing and .grad accumulates unsharded, as in
/// DDP and FSDP's no_sync. That costs a full gradient (4 B/param) during accumulation, but no
/// communication and the same numbers as DDP; reduce-scattering every micro-step would keep only
/// the shard, at the price of one reduce-scatter per micro-step.
/// Every parameter must get a gradient in every synced backward (finish() names those that did not).
class ShardedReducer : public std::enable_shared_from_this<ShardedReducer> {
 public:
  /// Collective: broadcasts rank 0's parameters (and `module`'s buffers, if given) like DDP's
  /// constructor, switches `optimizer` to its local gradient, and registers the hooks.
  static std::shared_ptr<ShardedReducer> create(std::shared_ptr<ShardedOptimizer> optimizer,
                                                std::shared_ptr<nn::Module> module = nullptr);
  ~ShardedReducer();
  ShardedReducer(const ShardedReducer&) = delete;
  ShardedReducer& operator=(const ShardedReducer&) = delete;

  void set_require_backward_grad_sync(bool sync) { require_sync_ = sync; }
  bool require_backward_grad_sync() const { return require_sync_; }
  /// Waits for every bucket's reduce-scatter and averages: the optimizer's local gradient is final.
  /// Call after backward, before clipping and the step (a no-op under no_sync).
  void finish();
  /// Rank 0's buffers to every rank (DDP's broadcast_buffers). Collective.
  void broadcast_buffers();

  int64_t reduce_scatters_total() const { return launched_total_; }
  /// The order in which buckets were launched in the last synced backward (bucket indices).
  const std::vector<size_t>& launch_order() const { return launch_order_; }

 private:
  explicit ShardedReducer(std::shared_ptr<ShardedOptimizer> optimizer, std::shared_ptr<nn::Module> module);
  void on_grad_ready(size_t i);
  void launch(size_t b);

  std::shared_ptr<ShardedOptimizer> optimizer_;
  std::shared_ptr<nn::Module> module_;
  std::vector<Tensor> params_;  ///< the optimizer's parameters, flat (registration) order
  bool require_sync_ = true;
  bool active_ = false;
  std::vector<bool> ready_;
  std::vector<size_t> pending_;
  size_t next_launch_ = 0;
  std::vector<Tensor> flats_;                 ///< per bucket while launched
  std::vector<std::shared_ptr<Work>> works_;  ///< per bucket while launched
  std::vector<size_t> in_flight_;             ///< launched buckets not yet waited for, oldest first (at most 2)
  std::vector<size_t> launch_order_;
  int64_t launched_total_ = 0;
};

}  // namespace kiln::dist
