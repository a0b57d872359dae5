// Reducer: the gradient side of DistributedDataParallel. A post-accumulate-grad hook on every
// parameter marks it ready; a bucket whose parameters are all ready is all-reduced at once (in
// bucket order on every rank), overlapping the rest of backward; finalize waits and averages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/parallel/bucket.h>
#include <kiln/parallel/comm_hooks.h>
#include <kiln/parallel/order_check.h>
#include <kiln/parallel/process_group.h>

namespace kiln::dist {

/// Options of the Reducer, in bytes (DDPOptions gives them in MiB).
struct ReducerOptions {
  KILN_ARG(size_t, first_bucket_cap_bytes) = mib_to_bytes(1);
  KILN_ARG(size_t, bucket_cap_bytes) = mib_to_bytes(25);
  KILN_ARG(bool, gradient_as_bucket_view) = false;
  KILN_ARG(bool, find_unused_parameters) = false;
  KILN_ARG(bool, static_graph) = false;  ///< Note [Static graph] in parallel/reducer.cpp, in the source tree
  KILN_ARG(bool, rebuild_buckets) = true;  ///< re-bucket in arrival order after the first synced iteration
  KILN_ARG(OrderCheck, order_check) = OrderCheck::automatic;
};

/// Note [When gradients are final]
/// The backward engine has no "backward finished" callback, so the reducer finalizes (waits for
/// every bucket's Work, averages, copies back) inside the hook of the last parameter it expects:
/// when every parameter got a gradient, .grad holds the average as soon as backward() returns.
/// A parameter that gets no gradient leaves the iteration open; finish() (DDP's
/// finish_gradient_synchronization(), which the Trainer calls before every optimizer step) then
/// either treats it as a zero contribution (find_unused_parameters) or throws naming it. finish() is
/// cheap and idempotent, so the rule for callers is simply: call it after backward, before the step.
/// (static_graph's first synced backward is always completed by finish(): Note [Static graph] in
/// parallel/reducer.cpp, in the source tree.) An iteration starts with the first hook of a synced backward;
/// under no_sync (require sync off) hooks only keep the bucket views in place and gradients accumulate in
/// .grad.
class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  /// `params` in registration order (only those that require grad), with their dotted names.
  /// Registers the hooks, so the reducer must live in a shared_ptr: hooks hold it weakly and do
  /// nothing once it is gone.
  static std::shared_ptr<Reducer> create(std::vector<Tensor> params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> group, ReducerOptions options);
  ~Reducer();  ///< waits for collectives still writing into the buckets; logs their failures
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void set_require_backward_grad_sync(bool sync) { require_sync_ = sync; }
  bool require_backward_grad_sync() const { return require_sync_; }
  /// Completes the open iteration, if any; see Note [When gradients are final].
  void finish();
  /// Note [Unused parameters] in parallel/reducer.cpp, in the source tree: with find_unused_parameters, walks
  /// the backward graph from this forward's outputs (or its loss); the parameters it cannot reach are marked
  /// ready as the next synced backward starts, so buckets launch during backward. Without the call they are
  /// found at finish(). A no-op without find_unused_parameters.
  void prepare_for_backward(const std::vector<Tensor>& outputs);
  /// Reads the order checks that were compared on the device since the last call (one host read;
  /// nothing when there are none) and fails, like the check at the end of backward, when ranks
  /// reduced different buckets. Not collective. See Note [Deferred order check] in parallel/order_check.cpp,
  /// in the source tree.
  void check_collective_order();
  /// What the default reduction divides each bucket by before the sum (Note [Divide before
  /// summing] in parallel/reducer.cpp, in the source tree): the world size unless DDP's join() says fewer
  /// ranks contribute.
  void set_div_factor(int factor);
  int div_factor() const { return div_factor_; }
  /// Note [Join] in parallel/ddp_join.cpp, in the source tree: a rank that ran out of inputs issues the
  /// collectives of one synced backward with zero gradients (and nothing used), so the ranks still training
  /// can reduce theirs.
  void shadow_iteration();
  /// Replaces the default reduction (divide, then sum) for every bucket; see comm_hooks.h.
  void register_comm_hook(CommHook hook);
  bool has_comm_hook() const { return static_cast<bool>(comm_hook_); }

  /// Introspection (tests, logging).
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t bucket_count() const { return buckets_.size(); }
  /// Bucket index of parameter `i` (registration order) and its position in that bucket.
  size_t bucket_of(size_t i) const { return bucket_of_[i]; }
  /// All-reduces of buckets launched in the current (or last finished) synced iteration, and ever.
  int64_t allreduces_this_iteration() const { return launched_this_iteration_; }
  int64_t allreduces_total() const { return launched_total_; }
  int64_t iteration() const { return iteration_; }  ///< synced backward passes started
  int64_t bucket_rebuilds() const { return rebuilds_; }
  /// Gradients copied from a tensor of their own into their bucket slice, ever: every gradient of
  /// every synced backward in copy mode; with gradient_as_bucket_view only a parameter's first
  /// gradient and one whose .grad was replaced or set to none (Note [Bucket views]).
  int64_t grad_copies_into_buckets() const { return grad_copies_; }
  /// Synced iterations whose used counters were read on the host (find_unused_parameters, and only
  /// when this rank left some parameter unused: Note [Unused parameters] in parallel/reducer.cpp, in the source tree, in the
  /// source tree).
  int64_t used_counter_reads() const { return used_reads_; }
  /// Synced iterations whose order check was read on the host at the end of backward, and those
  /// compared on the device instead (Note [Deferred order check] in parallel/order_check.cpp, in the source tree, in the source
  /// tree).
  int64_t order_checks_on_host() const { return order_.checks_on_host(); }
  int64_t order_checks_deferred() const { return order_.checks_deferred(); }
  bool iteration_in_progress() const { return active_; }
  const std::vector<Tensor>& parameters() const { return params_; }

 private:
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
          ReducerOptions options);
  void install_hooks();
  void build_buckets(const std::vector<size_t>& order);
  Tensor slice_of(size_t i) const;
  bool grad_is_view(size_t i) const;
  void install_view(size_t i, bool keep_grad);

  void on_grad_ready(size_t i);
  void start_iteration();
  void mark_ready(size_t i);
  void mark_unused_ready(size_t i);
  void mark_walked_unused_ready();
  void finish_static_recording();
  bool tracks_used() const { return options_.find_unused_parameters_ || options_.static_graph_; }
  void launch(size_t b);
  void finalize(bool from_hook);
  Tensor tail_of(size_t b) const;  ///< the bucket's tail: in the flat tensor, or side_[b] with a comm hook
  std::vector<std::vector<double>> read_tails() const;
  void copy_back(size_t b, const std::vector<double>& tail, bool check_used, bool grads_current);
  void rebuild_in_arrival_order();
  void wait_launched_quietly() noexcept;
  int64_t tail_size(size_t b) const;
  DType bucket_dtype(size_t b) const { return params_[buckets_[b].params.front()].dtype(); }
  void fail(const std::string& message);

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  ReducerOptions options_;
  CommHook comm_hook_;

  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;  ///< per parameter

  /// Per iteration.
  bool require_sync_ = true;
  int div_factor_ = 1;
  bool active_ = false;
  int64_t iteration_ = 0;
  std::vector<bool> ready_;         ///< per parameter, this iteration
  std::vector<bool> used_;          ///< per parameter: got a gradient since the last synced step
  std::vector<size_t> pending_;     ///< per bucket: parameters not ready yet
  std::vector<std::shared_ptr<Work>> works_, side_works_;  ///< per bucket, while launched
  std::vector<Tensor> side_;        ///< per bucket: the tail when a comm hook reduces
  size_t next_launch_ = 0;
  size_t num_ready_ = 0;
  std::vector<size_t> arrival_;     ///< first synced iteration: parameters in the order they got ready
  bool rebuild_pending_ = false;
  /// Note [Unused parameters] in parallel/reducer.cpp, in the source tree: the last forward's graph walk,
  /// until the backward that uses it.
  bool walked_ = false;
  std::vector<size_t> walk_unused_;
  std::vector<bool> marked_unused_;  ///< per parameter, this iteration: marked ready by the walk
  /// Note [Static graph] in parallel/reducer.cpp, in the source tree: recording during the first synced
  /// backward, then what it recorded.
  bool static_recording_ = false;
  std::vector<int> hooks_seen_;      ///< per parameter: gradients in the recorded backward
  std::vector<int> hooks_left_;      ///< per parameter: gradients still to come in this backward
  std::vector<size_t> static_unused_;
  std::vector<size_t> static_arrival_;  ///< the recorded backward's hooks, in order

  OrderChecker order_;  ///< Note [Bucket order check] in parallel/order_check.cpp, in the source tree: the
                        ///< first slots of every tail

  int64_t launched_this_iteration_ = 0, launched_total_ = 0, rebuilds_ = 0, grad_copies_ = 0, used_reads_ = 0;
  std::string failure_;  ///< set once a collective failed or the order check fired: unusable
};

}  // namespace kiln::dist
