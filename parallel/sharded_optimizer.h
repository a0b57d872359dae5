// ShardedOptimizer (torch's ZeroRedundancyOptimizer, ZeRO stage 1): wraps any Kiln optimizer so
// that each rank keeps the optimizer state of its shard of the parameters only (Note [Padded flat
// shards], shard_layout.h), steps that shard, and all-gathers the updated parameters. With a
// ShardedReducer (ZeRO-2) the gradients arrive already reduce-scattered into the shard.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/optim/optimizer.h>
#include <kiln/parallel/bucket.h>
#include <kiln/parallel/mixed_precision_policy.h>
#include <kiln/parallel/process_group.h>
#include <kiln/parallel/shard_layout.h>

namespace kiln::dist {

/// Options of ShardedOptimizer: the buckets that are sharded.
struct ShardedOptimizerOptions {
  KILN_ARG(double, bucket_cap_mb) = 25;       ///< the flat buckets that are sharded (DDPOptions' units)
  KILN_ARG(double, first_bucket_cap_mb) = 1;
  /// Explicit buckets instead of the caps: flat parameter indices (registration order over the
  /// groups) per bucket, each index once. FSDP makes one bucket per unit (parallel/fsdp.h).
  KILN_ARG(std::vector<std::vector<size_t>>, buckets);
  /// false (FSDP): the parameters are not kept whole between steps, so step() neither reads them
  /// (local_params() is the truth) nor all-gathers them afterwards; each unit gathers before use.
  KILN_ARG(bool, gather_parameters) = true;
  /// Note [Master weights]: a 16-bit param_dtype turns the parameters into 16-bit tensors and keeps
  /// the f32 master weights (and the moments) for this rank's shard only.
  KILN_ARG(MixedPrecisionPolicy, mixed_precision);
  /// Every rank keeps and steps all of the master weights and moments (DDP with a 16-bit policy, or
  /// one process): the layout is world 1's, nothing is gathered, and the group may be null.
  KILN_ARG(bool, replicate) = false;
};

/// Note [Master weights]
/// With a 16-bit MixedPrecisionPolicy::param_dtype (bf16 or f16), construction (collective when the
/// group has more than one rank: rank 0's f32 parameters are broadcast first, since the f32 values are
/// gone after the conversion) keeps this rank's chunks of the f32 parameters as the master weights
/// (local_params()), then sets every parameter's data to its param_dtype rounding (Tensor::set_data:
/// the same tensors, so the model and its hooks see 16-bit parameters). Forward and backward run in
/// 16 bits and produce 16-bit gradients. step():
///   1. the gradient slices (the parameters' 16-bit .grad under none and ZeRO-1; local_grad(), kept in
///      reduce_dtype, under ZeRO-2 and FSDP) are copied into one f32 flat of this rank's local_numel
///      elements, which the shard views' .grad alias (alive from the first of step_gradients(),
///      clip_grad_norm() and step() until the end of step(), so GradScaler unscales and clipping
///      scales the f32 values the update uses);
///   2. the wrapped optimizer steps the f32 master shard, as without a policy;
///   3. the updated shard is rounded once into 16 bits: a copy the all-gathers send (half the bytes of
///      f32) into the parameters, alive during the gathers only (ZeRO-1/2; replicating, it is the
///      parameters), or, under FSDP, local_compute_params(), which FSDP gathers each unit from.
/// The master weights are the truth: step() does not re-read the parameters (a 16-bit value cannot
/// restore them), so values set from outside go through load_master_parameters(), and checkpoints
/// save full_master_parameters() in place of the 16-bit tensors (f32, loadable by any mode, world
/// size and policy). Per parameter and rank at world N with AdamW this holds 2 bytes of parameters
/// (2/N under FSDP), the gradients in their dtype (whole or 1/N), 4/N of master weights and 8/N of
/// moments: the ZeRO paper's rule (replicate: 4 + 8).

/// Note [Sharded optimizer step]
/// The wrapper registers the full parameters as its own groups (so zero_grad, lr, the LRScheduler
/// and GradScaler::unscale_ see what they would see without sharding), and builds the wrapped
/// optimizer over shard views: for every parameter with elements in this rank's chunks, a 1-D leaf
/// that is a view of this rank's local flat buffer (ShardLayout::local_numel elements). A group
/// with no local elements gets one empty placeholder, so the wrapped optimizer has the same groups
/// and hyper-parameters. step():
///   0. the shard views take the parameters' current values (one copy of the owned elements), so
///      whatever changed the parameters since (DDP's broadcast, a loaded checkpoint) is respected;
///   1. each shard view's .grad is the matching slice of the gradient: of the parameter's full
///      .grad (ZeRO-1: DDP all-reduced it), or of local_grad() (ZeRO-2: reduce-scattered into it);
///   2. the wrapped optimizer steps the shard views: its state exists for the shard only;
///   3. every bucket's chunk is all-gathered (two buckets in flight, so the transient full copy is
///      at most two buckets) and copied into the parameters.
/// Parameters are f32 (Kiln's autocast casts per op, so there are no separate master weights: the
/// f32 parameters are the master copy; under bf16 autocast nothing else is kept).
class ShardedOptimizer : public optim::Optimizer {
 public:
  /// Builds the wrapped optimizer from the shard views: one vector of tensors per group, in the
  /// order of `groups`.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<std::vector<Tensor>> shard_groups)>;

  /// Collective only in what step() does; construction issues no collective (except the broadcast of
  /// Note [Master weights] with a 16-bit policy). Every rank must pass
  /// the same parameters (same shapes, same order) and the same options.
  ShardedOptimizer(std::vector<std::vector<Tensor>> groups, std::shared_ptr<ProcessGroup> group, Factory factory,
                   ShardedOptimizerOptions options = {});

  /// ShardedOptimizer::make<optim::AdamW>(params, group, optim::AdamWOptions(1e-3)): the shard groups
  /// get `options` each (use the Factory constructor for per-group options).
  template <class Opt, class Options>
  static std::shared_ptr<ShardedOptimizer> make(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                                                Options options, ShardedOptimizerOptions sharding = {}) {
    return std::make_shared<ShardedOptimizer>(
        std::vector<std::vector<Tensor>>{std::move(params)}, std::move(group),
        [options](std::vector<std::vector<Tensor>> shards) -> std::unique_ptr<optim::Optimizer> {
          std::vector<typename Opt::Group> groups;
          for (auto& s : shards) groups.push_back(typename Opt::Group{std::move(s), options});
          return std::make_unique<Opt>(std::move(groups));
        },
        sharding);
  }

  /// Note [Sharded optimizer step]. Collective (the all-gathers).
  void step() override { step(Tensor()); }
  void step(const Tensor& found_inf) override;

  /// Where step() takes the gradients from: the parameters' .grad (ZeRO-1, the default) or
  /// local_grad() (ZeRO-2, set by ShardedReducer).
  void use_local_grad(bool on) { use_local_grad_ = on; }
  bool uses_local_grad() const { return use_local_grad_; }
  /// This rank's gradient chunks (local_numel elements), allocated on first use.
  Tensor& local_grad();
  /// What step() reads: local_grad() once it holds this step's gradients (ZeRO-2, FSDP; nothing
  /// before), else the parameters' .grad. GradScaler unscales these, so f16 works in every mode.
  std::vector<Tensor> step_gradients() const override;
  /// ShardedReducer::finish() marks local_grad() as holding this step's gradients; step() uses it
  /// only then (and clears the mark), so a step without a backward updates nothing, as without ZeRO.
  void set_local_grad_ready(bool ready) {
    local_grad_ready_ = ready;
    drop_master_grads();  // new gradients: the f32 copies are made again
  }
  /// The parameters' .grad, and the f32 copies of Note [Master weights] step 1: a step the GradScaler
  /// skipped (step() is not called) leaves them, and the next backward's gradients are new.
  void zero_grad(bool set_to_none = true) override;
  /// This rank's parameter chunks, updated by the wrapped optimizer.
  const Tensor& local_params() const { return local_params_; }
  bool gathers_parameters() const { return gather_parameters_; }
  /// Note [Master weights]: whether the parameters are 16-bit with f32 master weights here.
  bool keeps_master_weights() const { return master_; }
  bool replicates() const { return replicate_; }
  const MixedPrecisionPolicy& mixed_precision() const { return policy_; }
  /// What FSDP gathers from: this rank's chunks in the parameters' dtype (with master weights their
  /// 16-bit rounding, else local_params() itself).
  const Tensor& local_compute_params() const { return local_compute_.defined() ? local_compute_ : local_params_; }
  /// Every flat parameter's full f32 master values (registration order), all-gathered per bucket.
  /// Collective (except when replicating). Without master weights: the parameters' values.
  std::vector<Tensor> full_master_parameters();
  /// Sets the master weights from full-shaped values (any floating dtype; registration order) and the
  /// parameters to their rounding. Not collective: every rank passes the same values. Under FSDP the
  /// parameters must be gathered (FullyShardedDataParallel::gather_full_params()).
  void load_master_parameters(const std::vector<Tensor>& full);

  /// torch.nn.utils.clip_grad_norm_ over every parameter, computed from the shards: each rank sums
  /// the squares of the gradient elements it owns (in double), one all-reduce adds the ranks'
  /// sums, and every shard gradient is scaled by min(1, max_norm / (total + 1e-6)). Returns the
  /// total norm (0-dim f64). Collective. Call it after the gradients are final, before step();
  /// in ZeRO-1 mode it reads the owned slices of the full .grad (and scales those slices only).
  Tensor clip_grad_norm(double max_norm);

  /// State dicts in Note [Optimizer state_dict]'s format of the FULL parameters, so that a DDP run,
  /// and a sharded run at any world size, load them:
  /// consolidate_state_dict() gathers every rank's shard state (collective); state_dict() then
  /// returns it (torch's ZeroRedundancyOptimizer; it fails when nothing was consolidated since the
  /// last step). load_state_dict() keeps this rank's slices of a full dict (not collective).
  void consolidate_state_dict();
  optim::NamedTensors state_dict() const override;
  void load_state_dict(const optim::NamedTensors& dict) override;
  /// This rank's shard state: param_groups as above, and for every parameter with local elements
  /// "state.<g>.<i>.step", "state.<g>.<i>.<buffer>" (its local elements, 1-D) and
  /// "shard.<g>.<i>" (i64 [begin, end, numel, shape...]: the flattened parameter's elements it
  /// holds, and the parameter's shape).
  optim::NamedTensors local_state_dict() const;
  /// Assembles full state from the local_state_dict()s of every rank of a run (any world size).
  static optim::NamedTensors merge_local_state_dicts(const std::vector<optim::NamedTensors>& shards);

  const ShardLayout& layout() const { return layout_; }
  /// Every parameter, in registration order over the groups (the layout's parameter indices).
  const std::vector<Tensor>& flat_parameters() const { return flat_params_; }
  optim::Optimizer& local_optimizer() const { return *inner_; }
  ProcessGroup& process_group() const { return *group_; }
  /// The (group, index) of flat parameter number i (registration order over the groups).
  std::pair<size_t, size_t> group_index(size_t i) const { return where_[i]; }

 protected:
  optim::HyperParams hyper_params(size_t group) const override { return inner_->hyper_parameters(group); }
  void set_hyper_params(size_t group, const optim::HyperParams& values) override {
    inner_->set_hyper_parameters(group, values);
  }
  std::vector<std::string> state_keys(const optim::HyperParams&) const override;
  void check_hyper_params(const optim::HyperParams&) const override {}  ///< the wrapped optimizer checks
  DType state_dtype(const Tensor& param) const override { return master_ ? DType::f32 : param.dtype(); }

 private:
  void set_shard_grads();
  void set_master_grads();  ///< Note [Master weights], step 1
  void drop_master_grads();
  void write_back();        ///< step 3: the 16-bit copy, then the parameters
  void pack_local_params();
  void gather_parameters();
  optim::NamedTensors group_entries() const;

  std::shared_ptr<ProcessGroup> group_;
  ShardLayout layout_;
  std::vector<Tensor> flat_params_;                 ///< every parameter, registration order over the groups
  std::vector<std::pair<size_t, size_t>> where_;    ///< flat index -> (group, index)
  std::vector<std::vector<size_t>> inner_index_;    ///< (group, index) -> index in the wrapped group, or npos
  std::vector<Tensor> shard_views_;                 ///< per flat parameter: its view of local_params_ (or undefined)
  Tensor local_params_, local_grad_;
  MixedPrecisionPolicy policy_;
  bool master_ = false, replicate_ = false;
  Tensor local_compute_;     ///< master_ under FSDP: the 16-bit rounding of local_params_
  Tensor master_grad_;       ///< master_: f32 gradients of the shard, during a step
  bool master_grads_set_ = false;
  std::unique_ptr<optim::Optimizer> inner_;
  bool use_local_grad_ = false;
  bool local_grad_ready_ = false;
  bool gather_parameters_ = true;
  optim::NamedTensors consolidated_;
  bool has_consolidated_ = false;
};

using ZeroRedundancyOptimizer = ShardedOptimizer;

/// Checkpoints with master weights (Note [Master weights]): `state`, a module's state_dict() (whose
/// entries are the parameter tensors themselves), with every entry that is one of `optimizer`'s
/// parameters replaced by its full f32 master values; other entries are left as they are. Collective
/// (full_master_parameters()). Without master weights `state` is returned unchanged.
optim::NamedTensors with_master_weights(ShardedOptimizer& optimizer, optim::NamedTensors state);
/// The other way: replaces `state`'s parameter entries by f32 stand-ins (zeros of the parameters'
/// shapes, on the CPU; a tied parameter's names share one) for a checkpoint to be loaded into, and
/// returns them in the optimizer's flat order for load_master_parameters(). Without master weights:
/// nothing is replaced and the result is empty.
std::vector<Tensor> master_stand_ins(const ShardedOptimizer& optimizer, optim::NamedTensors& state);

}  // namespace kiln::dist
