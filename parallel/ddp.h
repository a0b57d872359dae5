// DistributedDataParallel: wraps a module so that every rank trains the same model on its own
// share of the batch (torch.nn.parallel.DistributedDataParallel). Construction checks the model
// is identical everywhere and broadcasts rank 0's weights; backward all-reduces gradients in buckets.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include <kiln/core/arg.h>
#include <kiln/nn/module.h>
#include <kiln/parallel/comm_hooks.h>
#include <kiln/parallel/process_group.h>
#include <kiln/parallel/reducer.h>

namespace kiln::dist {

/// Options of DistributedDataParallel (torch's DDP arguments).
struct DDPOptions {
  KILN_ARG(double, bucket_cap_mb) = 25;        ///< MiB of gradients per bucket (torch's bucket_cap_mb)
  KILN_ARG(double, first_bucket_cap_mb) = 1;   ///< the first bucket is small so communication starts early
  KILN_ARG(bool, gradient_as_bucket_view) = false;  ///< .grad is a view of its bucket: Note [Bucket views]
  KILN_ARG(bool, find_unused_parameters) = false;   ///< parameters without a gradient count as zero
  KILN_ARG(bool, broadcast_buffers) = true;         ///< rank 0's buffers (BatchNorm stats) before each forward
  /// The graph is the same every iteration: the first backward records it (unused parameters, bucket
  /// order, parameters that get two gradients, e.g. used inside and outside a re-entrant checkpoint
  /// region); Note [Static graph] in parallel/reducer.cpp, in the source tree.
  KILN_ARG(bool, static_graph) = false;
  /// Kiln's: re-bucket in gradient arrival order after the first synced iteration (torch always
  /// does; false keeps the initial reverse-registration buckets).
  KILN_ARG(bool, rebuild_buckets) = true;
  KILN_ARG(OrderCheck, order_check) = OrderCheck::automatic;  ///< Note [Deferred order check] in parallel/order_check.cpp, in the source tree in
                                                              ///< parallel/order_check.cpp, in the source
                                                              ///< tree
};

/// Options of DistributedDataParallel::join (torch's `ddp.join(...)` context manager).
struct JoinOptions {
  KILN_ARG(bool, enable) = true;  ///< false: join() just runs the body (every rank must have as many inputs)
  /// Averages divide by the world size the DDP was built with (torch's default), so a step in which
  /// only k ranks still train takes k/W of their average; false divides by the k ranks still in,
  /// which equals one process on the samples of those k ranks. Note [Join] in parallel/ddp_join.cpp, in the source tree, in the
  /// source tree.
  KILN_ARG(bool, divide_by_initial_world_size) = true;
  /// The first rank to run out makes every rank throw DistributedError at its next forward
  /// instead of shadowing the others' collectives.
  KILN_ARG(bool, throw_on_early_termination) = false;
};

/// Usage, per rank (a torch user's `ddp(x)` is `ddp.forward<Net>(x)`):
///   DistributedDataParallel ddp(net, group, DDPOptions().gradient_as_bucket_view(true));
///   Tensor loss = loss_fn(ddp.forward<Net>(x), y);   // or: ddp.prepare_forward(); net->forward(x)
///   loss.backward();                                 // buckets are all-reduced as grads arrive
///   ddp.finish_gradient_synchronization();           // Note [When gradients are final]
///   optimizer.step();
/// The module is shared (std::shared_ptr), not copied: the caller's handle and the optimizer see
/// the same parameters. A DistributedDataParallel is neither copyable nor movable (the parameter
/// hooks refer to its reducer).
class DistributedDataParallel {
 public:
  /// Collective: every rank of `group` must construct it at the same point.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// The wrapped module, as its concrete type (fails when it is not an M).
  template <class M = nn::Module>
  std::shared_ptr<M> module() const {
    auto m = std::dynamic_pointer_cast<M>(module_);
    KILN_CHECK(m != nullptr, "DistributedDataParallel::module: the wrapped module is a ", module_->name(),
               ", not the requested type");
    return m;
  }

  /// What must happen before every forward: rank 0's buffers are broadcast (broadcast_buffers).
  /// Collective. forward() calls it; a caller that runs the module itself must call it first.
  void prepare_forward();

  /// prepare_forward(), then the module's own forward with these arguments; a Tensor or
  /// std::vector<Tensor> result goes to prepare_for_backward.
  template <class M, class... Args>
  decltype(auto) forward(Args&&... args) {
    auto m = module<M>();
    prepare_forward();
    using Result = std::decay_t<decltype(m->forward(std::forward<Args>(args)...))>;
    if constexpr (std::is_same_v<Result, Tensor>) {
      Tensor out = m->forward(std::forward<Args>(args)...);
      prepare_for_backward({out});
      return out;
    } else if constexpr (std::is_same_v<Result, std::vector<Tensor>>) {
      std::vector<Tensor> out = m->forward(std::forward<Args>(args)...);
      prepare_for_backward(out);
      return out;
    } else {
      return m->forward(std::forward<Args>(args)...);
    }
  }

  /// What must happen after every forward (torch's reducer.prepare_for_backward): with
  /// find_unused_parameters, finds the parameters the outputs (or the loss computed from them)
  /// cannot reach, so backward marks them ready at once (Note [Unused parameters] in parallel/reducer.cpp, in the source tree, in
  /// the source tree). forward() and the Trainer call it; a caller that runs the module itself should too.
  void prepare_for_backward(const std::vector<Tensor>& outputs) { reducer_->prepare_for_backward(outputs); }

  /// Completes gradient averaging for the backward just run: a no-op when the last parameter's hook
  /// already did, or under no_sync. Call it after backward and before the optimizer step.
  void finish_gradient_synchronization() { reducer_->finish(); }

  /// Reports a collective order mismatch that the bucket order check found on the device in an
  /// earlier iteration (one host read when such checks are pending; see Note [Deferred order check] in
  /// parallel/order_check.cpp, in the source tree). Not collective; the Trainer calls it on log steps and
  /// before checkpoints.
  void check_collective_order() { reducer_->check_collective_order(); }

  /// Gradient accumulation: while off (or inside a no_sync() guard) backward only accumulates into
  /// .grad; the next backward with sync on reduces the sum, one all-reduce per bucket.
  void set_require_backward_grad_sync(bool sync) { reducer_->set_require_backward_grad_sync(sync); }
  bool require_backward_grad_sync() const { return reducer_->require_backward_grad_sync(); }  ///< the current setting

  /// What no_sync() returns: gradient synchronization is off while it lives and restored after.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.require_backward_grad_sync()) {
      ddp_.set_require_backward_grad_sync(false);
    }
    ~NoSyncGuard() { ddp_.set_require_backward_grad_sync(prev_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  /// `auto guard = ddp.no_sync();` -- torch's `with ddp.no_sync():`.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Uneven inputs (torch's `with ddp.join():`): runs `body`, this rank's training loop over its
  /// own batches; a rank whose body returned keeps taking part in the collectives the others'
  /// forward and backward passes issue (zero gradients, buffer broadcasts) until every rank's body
  /// has returned, then every rank takes the weights and buffers of the last rank to finish.
  /// `on_shadow_step` (may be empty) runs on a finished rank after each synced backward it
  /// shadowed, for collectives the caller issues after backward (the Trainer's). Inside join,
  /// no_sync must be set before the forward (as torch's `with ddp.no_sync():` around forward and
  /// backward): the forward tells the finished ranks whether the backward syncs. Collective;
  /// see Note [Join] in parallel/ddp_join.cpp, in the source tree.
  void join(const std::function<void()>& body, JoinOptions options = {},
            const std::function<void()>& on_shadow_step = nullptr);
  bool join_active() const { return join_.has_value(); }  ///< inside join()

  /// Replaces the default all-reduce for every bucket (comm_hooks.h); before the first backward.
  void register_comm_hook(CommHook hook) { reducer_->register_comm_hook(std::move(hook)); }
  /// With a state object (torch's register_comm_hook(state, hook)), e.g. PowerSGD:
  ///   ddp.register_comm_hook(std::make_shared<PowerSGDState>(...), powersgd_hook);
  template <class State>
  void register_comm_hook(std::shared_ptr<State> state, std::shared_ptr<Work> (*hook)(State&, ProcessGroup&, GradBucket&)) {
    register_comm_hook(with_state(std::move(state), hook));
  }

  const DDPOptions& options() const { return options_; }  ///< as constructed
  ProcessGroup& process_group() const { return *group_; }  ///< the group gradients are averaged over
  Reducer& reducer() const { return *reducer_; }  ///< the buckets and their statistics

 private:
  void verify_same_model_across_ranks();
  void broadcast_from_rank0(const std::vector<Tensor>& tensors) { broadcast_from(tensors, 0); }
  void broadcast_from(const std::vector<Tensor>& tensors, int root);
  /// Note [Join] in parallel/ddp_join.cpp, in the source tree: the per-forward header (who is still in,
  /// whether backward syncs, stop).
  struct JoinHeader {
    int active = 0;        ///< ranks still running their body
    bool sync = false;     ///< their backward reduces gradients
    bool terminate = false;
    int first_active = -1;  ///< lowest rank still in: whose buffers win
  };
  JoinHeader exchange_join_header(bool active);
  void sync_final_model(bool last_joiner);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;
  std::optional<JoinOptions> join_;  ///< set while join() runs its body
};

}  // namespace kiln::dist
