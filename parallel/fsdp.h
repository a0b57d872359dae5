// FullyShardedDataParallel (FSDP / ZeRO-3, torch's FSDP2 `fully_shard` per unit): parameters,
// gradients and optimizer state all live sharded. Each unit (e.g. each GPT block) all-gathers its
// parameters before its forward and again before its backward, releases the full copy after each,
// and reduce-scatters its gradients into the ShardedOptimizer's shard, prefetching the next unit's
// all-gather so that communication overlaps compute.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/core/storage.h>
#include <kiln/nn/module.h>
#include <kiln/optim/optimizer.h>
#include <kiln/parallel/mixed_precision_policy.h>
#include <kiln/parallel/sharded_optimizer.h>

namespace kiln::dist {

/// Options of FullyShardedDataParallel: the units, prefetching, buffer broadcasts and the event log.
struct FSDPOptions {
  /// Module::name()s whose instances become units (torch's ModuleWrapPolicy), e.g. {"GPTBlock"};
  /// a matched module's descendants are not searched. Every other parameter is in the root unit.
  /// Empty: the root is the only unit (the whole model gathered at once).
  KILN_ARG(std::vector<std::string>, wrap);
  KILN_ARG(bool, prefetch) = true;           ///< forward and backward prefetch (Note [FSDP schedule])
  KILN_ARG(bool, broadcast_buffers) = true;  ///< rank 0's buffers to every rank in prepare_forward (DDP's)
  KILN_ARG(bool, record_events) = false;     ///< keep events() (tests, debugging; grows every step)
  /// FSDP2's mp_policy: a 16-bit param_dtype gathers 16-bit units and keeps f32 master weights in the
  /// shard (Note [Master weights] in sharded_optimizer.h); run forward under autocast of that dtype.
  /// The Trainer takes TrainerOptions::mixed_precision instead (this one must then be the default or
  /// the same).
  KILN_ARG(MixedPrecisionPolicy, mixed_precision);
};

/// Note [FSDP unit storage]
/// A unit's parameters are views of ONE storage laid out as the ShardedOptimizer's bucket of that
/// unit (Note [Padded flat shards]: N chunks of c elements, rank r's chunk r), so the all-gather
/// writes straight into the parameters and nothing is copied. Between uses the storage is resized
/// to 0 bytes (Storage::resize, torch's storage resize_ in FSDP): every parameter keeps its shape,
/// its autograd meta and its hooks, the optimizer and the graph keep their handles, and a view that
/// the graph saved for backward (an f32 matmul's weight) sees the bytes again once the unit is
/// re-gathered for backward. The persistent copy of the parameters is the optimizer's
/// local_params() (c elements per unit); by default there are no other master weights (Kiln's
/// autocast casts per op, so bf16 autocast keeps the same state as f32); with a 16-bit policy the units
/// are 16-bit and gathered from the optimizer's 16-bit local_compute_params().
/// Persistent state per rank, f32 AdamW: parameter chunk 4 + gradient chunk 4 + m, v 8 = 16/N B/param
/// (plus the padding, < N elements per unit). During a step: the root unit's parameters (gathered from
/// prepare_forward until its backward ends), at most two other units (the one computing and the one
/// prefetched), their full gradients until reduce-scattered, and at most two reduce-scatter buffers.
/// An op never reads a unit that is released, or whose all-gather is launched but not waited for (the
/// storage is `pending` then): it fails with the storage's release note, which names the parameter,
/// its unit and what gathers it (Note [Reads within the storage] in core/ops/common.h, in the source tree;
/// Note [Storage release notes] in kiln/core/storage.h). So a forward that calls a wrapped module as
/// `module.forward(x)`, skipping the hooks nn::call runs, stops at the first op that reads the unit. FSDP
/// does not gather lazily there instead: the trigger would be whichever op reads first, launching a
/// collective from inside any op (a read on one rank only, as a log line, would hang instead of failing), and
/// without the hooks nothing marks the end of the unit's forward or the start of its backward: the unit would
/// stay gathered until its backward (DDP's parameter memory, silently) or, after a forward with no backward,
/// until something else released it before the optimizer step made it stale; and with no output to hook there
/// is no backward prefetch. torch's FSDP hooks `module(x)` in the same way.
///
/// Note [FSDP schedule]
/// Units are numbered in module order (depth first), the root (what no wrapped module holds) last;
/// forward is assumed to run them in that order (another order is correct, only prefetches are then
/// early or useless).
///   prepare_forward()  gathers the root (it stays gathered until its backward is done, as FSDP2's root
///                      does) and launches unit 0's gather.
///   unit u pre-forward (nn::call's pre-hook): launches u's gather if not in flight, launches u+1's
///                      (forward prefetch), waits for u's. Post-forward: registers the pre-backward hook
///                      on the output (when it requires grad) and releases u; in a recompute
///                      (autograd::in_backward(), activation checkpointing) u stays gathered for its
///                      backward.
///   u pre-backward     (a gradient hook on u's output, which runs before any node of u): gathers u if
///                      released and launches u-1's gather (backward prefetch). With activation
///                      checkpointing the recompute's pre-forward gathers u, then this hook fires on the
///                      recomputed output.
///   u post-backward    (when every parameter of u had its post-accumulate-grad hook): in a synced
///                      backward the gradients are packed into a padded flat buffer, their .grad freed,
///                      and reduce_scatter(sum) writes this rank's chunk into local_grad(); then u is
///                      released. finish() waits and multiplies by 1/N (DDP's arithmetic).
/// Every rank runs the same model, so every rank issues the same gathers and reduce-scatters in the
/// same order. events() records the launches and waits, so a test can see the prefetch order.
///
/// Note [FSDP gradient accumulation]
/// Under no_sync (set_require_backward_grad_sync(false)) the post-backward step only releases the
/// unit: its gradients accumulate unsharded in .grad, as in ZeRO-2 (Note [ZeRO-2 gradients]) and
/// torch FSDP's no_sync. That holds a full gradient (4 B/param) during accumulation but costs no
/// communication and gives DDP's numbers (one reduce-scatter of the accumulated sum). Accumulating
/// shards instead would keep 4/N but reduce-scatter every micro-step and change the sum order.
class FullyShardedDataParallel : public std::enable_shared_from_this<FullyShardedDataParallel> {
 public:
  /// Collective: restructures every unit's parameters into its storage, broadcasts rank 0's
  /// parameters and buffers, keeps this rank's chunks in `optimizer`'s local_params() and releases
  /// the full parameters. `optimizer` must have been built with fsdp_optimizer_options() (the same
  /// model and options) over parameters of `model`. From then on (also after this object is gone) the
  /// model's sharded parameters hold no bytes outside a gather: run the model only between
  /// prepare_forward() and the end of its backward (or inside gather_full_params()), and do not
  /// move or cast it (Module::to would replace the unit views).
  static std::shared_ptr<FullyShardedDataParallel> create(std::shared_ptr<nn::Module> model,
                                                          std::shared_ptr<ShardedOptimizer> optimizer,
                                                          FSDPOptions options = {});
  /// The same after sharding `like` (an SGD or AdamW over model parameters, not stepped) with
  /// shard_optimizer() into the unit layout; the sharded optimizer is sharded_optimizer().
  static std::shared_ptr<FullyShardedDataParallel> create(std::shared_ptr<nn::Module> model,
                                                          const optim::Optimizer& like,
                                                          std::shared_ptr<ProcessGroup> group,
                                                          FSDPOptions options = {});
  ~FullyShardedDataParallel();
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  /// Before each forward (every micro-step): broadcasts buffers (option), gathers the root unit and
  /// starts a new backward's bookkeeping. Collective.
  void prepare_forward();
  /// Note [FSDP gradient accumulation].
  void set_require_backward_grad_sync(bool sync) { require_sync_ = sync; }
  bool require_backward_grad_sync() const { return require_sync_; }
  /// After backward: waits for the reduce-scatters and averages (the optimizer's local gradient is
  /// final); checks every unit finished its backward. Call before clipping and the step.
  void finish();
  void broadcast_buffers();  ///< rank 0's buffers to every rank. Collective.

  /// Every unit gathered (collective), e.g. to read or load the model's state_dict; then
  /// reshard_full_params(writeback): with writeback each rank first copies its chunks of the (changed)
  /// full parameters into its shard; every unit is released. Not inside a forward/backward.
  void gather_full_params();
  void reshard_full_params(bool writeback);
  /// The model's state_dict with full parameters, gathered one unit at a time: clones on rank 0,
  /// empty on the others (torch's FULL_STATE_DICT with rank0_only). Collective. With master weights
  /// (Note [Master weights]) the parameters' entries are their f32 master values and nothing is gathered.
  optim::NamedTensors full_state_dict();

  const std::shared_ptr<ShardedOptimizer>& sharded_optimizer() const { return optimizer_; }
  nn::Module& module() const { return *model_; }
  size_t num_units() const { return units_.size(); }
  /// The unit's dotted module name ("transformer.h.3"); the root is "".
  const std::string& unit_name(size_t u) const { return units_[u].name; }
  bool is_gathered(size_t u) const { return units_[u].gathered; }
  /// Bytes of full parameter storage alive now (gathered units).
  int64_t gathered_bytes() const;

  /// What the schedule did, in order (Note [FSDP schedule]), when FSDPOptions::record_events is on.
  enum class EventKind { all_gather, wait_gather, forward, backward, reduce_scatter, release };
  /// One entry of the event log (tests and debugging): what happened to which unit.
  struct Event {
    EventKind kind;
    size_t unit;
  };
  const std::vector<Event>& events() const { return events_; }
  void clear_events() { events_.clear(); }

 private:
  struct Unit {
    std::string name;
    nn::Module* module = nullptr;       ///< null: the root
    std::vector<size_t> params;         ///< flat parameter indices (the layout bucket's)
    size_t bucket = 0;                  ///< index in the optimizer's layout
    std::shared_ptr<Storage> storage;   ///< chunk * N elements when gathered, 0 bytes when released
    Tensor flat;                        ///< (chunk * N) over storage
    std::shared_ptr<Work> gather;       ///< in flight
    bool gathered = false;              ///< storage holds (or is receiving) the full parameters
    size_t ready = 0;                   ///< parameters whose gradient is final in this backward
    bool backward_done = false;
  };
  FullyShardedDataParallel(std::shared_ptr<nn::Module> model, std::shared_ptr<ShardedOptimizer> optimizer,
                           FSDPOptions options);
  void install_hooks();
  void set_release_notes();  ///< on every unit's storage (Note [Storage release notes])
  void launch_gather(size_t u);
  void wait_gather(size_t u);
  void release(size_t u);
  void pre_forward(size_t u);
  void post_forward(size_t u, const Tensor& output);
  void pre_backward(size_t u);
  void on_grad_ready(size_t i);
  void launch_reduce_scatter(size_t u);
  void wait_oldest_reduce_scatter();
  Tensor local_chunk(const Unit& unit) const;
  void note(EventKind kind, size_t u);

  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<ShardedOptimizer> optimizer_;
  FSDPOptions options_;
  std::vector<Tensor> params_;       ///< the optimizer's flat parameters
  std::vector<size_t> unit_of_;      ///< flat parameter index -> unit
  std::vector<Unit> units_;          ///< wrapped units in module order, then the root (if it has parameters)
  size_t wrapped_ = 0;               ///< units_[0, wrapped_) are wrapped modules
  bool require_sync_ = true;
  bool synced_backward_ = false;     ///< some gradient arrived in this backward with sync on
  struct PendingScatter {
    size_t unit;
    Tensor flat;
    std::shared_ptr<Work> work;
  };
  std::vector<PendingScatter> scatters_;  ///< launched, not waited, oldest first
  std::vector<Event> events_;
};

using FSDP = FullyShardedDataParallel;

/// ShardedOptimizerOptions whose explicit buckets are `model`'s units (Note [FSDP schedule]'s order)
/// over the parameters of `optimizer` (registration order over its groups), with gather_parameters
/// off and `options`' mixed_precision. Every optimizer parameter must be a parameter of `model`.
ShardedOptimizerOptions fsdp_optimizer_options(nn::Module& model, const optim::Optimizer& optimizer,
                                               const FSDPOptions& options);

}  // namespace kiln::dist
