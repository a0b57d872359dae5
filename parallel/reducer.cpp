// The Reducer's data path: hooks mark parameters ready, full buckets are launched in bucket
// order, finalize waits, has the OrderChecker check the collective order (order_check.h),
// averages and copies back. See Note [Bucket views] and Note [When gradients are final].
#include <kiln/parallel/reducer.h>

#include <cstdio>
#include <sstream>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/join.h>
#include <kiln/core/profiler/profiler.h>
#include <kiln/parallel/graph_walk.h>

namespace kiln::dist {

// Note [One rank]
// On a group of one rank the default all-reduce (a sum) leaves every bucket as it was, so finalize
// skips what could not change a value: the division by the world size (x * 1.0 == x), and, in
// copy mode, the copy back into .grad when finalize runs from the last gradient's hook, since
// every .grad then still holds exactly what was copied into its slice earlier in the same backward.
// When finish() finalizes instead (some parameter got no gradient), user code may have run since
// backward, so the copy back happens as on several ranks. Everything else is unchanged: buckets
// are filled, the collectives are issued (one per bucket, order-checked), views are installed.
// With a comm hook nothing is skipped: a hook may change values on one rank too (compression).
//
// Note [Divide before summing]
// The average is taken as sum(g_r / W), not sum(g_r) / W (torch's reducer divides each bucket by
// its div factor before the all-reduce, and its fp16/bf16 hooks divide the compressed copy): in a
// 16-bit bucket, or with f16-scaled gradients, the partial sums of W ranks' values then stay as
// large as one rank's gradient instead of growing W times and overflowing W times sooner. The
// division happens at launch, on the gradient part of the bucket only (the tail carries integer
// codes, Note [Bucket order check]); with views it divides .grad in place, which is overwritten
// by the average anyway.
//
// Note [Unused parameters]
// With find_unused_parameters, a parameter that gets no gradient in a synced backward contributes
// zeros (or what it accumulated under no_sync), and one that no rank used keeps its .grad. As in
// torch's reducer, DDP's forward (and the Trainer) hand the outputs to prepare_for_backward, which
// walks the backward graph from them; the parameters it cannot reach are marked ready when the
// backward's first gradient arrives, so the buckets holding them launch during backward instead
// of all waiting for finish(). Without a walk (a caller that ran the module itself), or when the
// graph holds a re-entrant checkpoint region (whose parameters get their graph only during
// backward, so the walk cannot see them; torch fails there), finish() finds them, as before. A
// parameter the walk missed that still gets a gradient (used by a second forward into the same
// loss) fails loudly, as in torch. Whether a parameter was used by some rank
// travels in the bucket tails (the used counters); the host reads them only when this rank left
// some parameter unused: if it used them all, every parameter was used by some rank.
//
// Note [Static graph]
// static_graph (torch's): the graph is the same every iteration, so the first synced backward
// records it instead of reducing: how many gradients each parameter gets (a parameter used inside
// and outside a re-entrant checkpoint region, or by two checkpoint regions, gets two, each
// accumulated into .grad) and which parameters get none. All its buckets are reduced at finish(),
// then rebuilt in the recorded order (the last gradient of each parameter; unused ones first).
// From then on a parameter is ready at its recorded number of gradients, and the unused ones as
// backward starts, without a graph walk. The used counters travel in the bucket tails, as with
// find_unused_parameters (a parameter no rank used keeps its .grad).
namespace {

std::string join_names(const std::vector<std::string>& names, size_t limit = 10) {
  std::ostringstream os;
  for (size_t i = 0; i < names.size() && i < limit; ++i) os << (i ? ", " : "") << "'" << names[i] << "'";
  if (names.size() > limit) os << " and " << names.size() - limit << " more";
  return os.str();
}

std::shared_ptr<ProcessGroup> non_null(std::shared_ptr<ProcessGroup> group) {
  KILN_CHECK(group != nullptr, "Reducer: the process group is null");
  return group;
}

}  // namespace

std::shared_ptr<Reducer> Reducer::create(std::vector<Tensor> params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> group, ReducerOptions options) {
  std::shared_ptr<Reducer> r(new Reducer(std::move(params), std::move(names), std::move(group), options));
  r->install_hooks();
  return r;
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
                 ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(non_null(std::move(group))),
      options_(options),
      order_(group_->rank(), group_->size(), options.order_check_) {
  KILN_CHECK(params_.size() == names_.size(), "Reducer: ", params_.size(), " parameters but ", names_.size(),
             " names");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    check_defined(p, "DistributedDataParallel", "parameter");
    KILN_CHECK(p.requires_grad() && p.is_leaf(), "DistributedDataParallel: parameter '", names_[i],
               "' must be a leaf that requires grad");
    KILN_CHECK(is_floating(p.dtype()), "DistributedDataParallel: parameter '", names_[i], "' has dtype ", p.dtype(),
               "; gradients are reduced for floating parameters only");
  }
  std::vector<size_t> reverse(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) reverse[i] = params_.size() - 1 - i;
  build_buckets(reverse);
  ready_.assign(params_.size(), false);
  marked_unused_.assign(params_.size(), false);
  used_.assign(params_.size(), false);
  rebuild_pending_ = options_.rebuild_buckets_;
  static_recording_ = options_.static_graph_;
  hooks_seen_.assign(params_.size(), 0);
  div_factor_ = group_->size();
}

void Reducer::set_div_factor(int factor) {
  KILN_CHECK(factor >= 1 && factor <= group_->size(), "Reducer: div factor ", factor, " outside [1, ",
             group_->size(), "]");
  div_factor_ = factor;
}

void Reducer::shadow_iteration() {
  KILN_CHECK_DIST(failure_.empty(), "DistributedDataParallel is unusable after an earlier failure: ", failure_);
  KILN_CHECK(!active_, "Reducer::shadow_iteration: a backward pass is in progress (iteration ", iteration_, ")");
  start_iteration();
  NoGradGuard no_grad;
  used_.assign(params_.size(), false);  // this rank used nothing
  for (Bucket& b : buckets_) {
    Tensor grads = b.grads();
    grads.zero_();
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b].params) {
      if (rebuild_pending_) arrival_.push_back(i);
      mark_ready(i);
    }
  finalize(/*from_hook=*/false);
}

Reducer::~Reducer() {
  wait_launched_quietly();
  if (!order_.has_deferred() || !failure_.empty()) return;
  try {
    check_collective_order();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
  }
}

void Reducer::install_hooks() {
  std::weak_ptr<Reducer> weak = weak_from_this();
  for (size_t i = 0; i < params_.size(); ++i)
    autograd::register_post_accumulate_grad_hook(params_[i], [weak, i](const Tensor&) {
      if (auto self = weak.lock()) self->on_grad_ready(i);
    });
}

int64_t Reducer::tail_size(size_t b) const {
  int64_t n = order_.slots(bucket_dtype(b));
  if (tracks_used()) n += static_cast<int64_t>(buckets_[b].params.size());
  return n;
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  auto groups = compute_bucket_assignment(params_, order, options_.first_bucket_cap_bytes_, options_.bucket_cap_bytes_);
  NoGradGuard no_grad;
  buckets_.assign(groups.size(), Bucket{});
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.params = std::move(groups[b]);
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      size_t i = bucket.params[k];
      bucket_of_[i] = b;
      slot_of_[i] = k;
      bucket.offsets.push_back(bucket.numel);
      bucket.lengths.push_back(params_[i].numel());
      bucket.numel += params_[i].numel();
    }
    const Tensor& first = params_[bucket.params.front()];
    bucket.flat = zeros({bucket.numel + tail_size(b)}, TensorOptions(first.dtype()).device(first.device()));
  }
  pending_.assign(buckets_.size(), 0);
  works_.assign(buckets_.size(), nullptr);
  side_works_.assign(buckets_.size(), nullptr);
  side_.assign(buckets_.size(), Tensor());
  order_.reset(buckets_.size());
  // Views replace existing gradients now; a parameter without one gets its view on its first
  // gradient (so until then .grad stays undefined, as without DDP).
  if (options_.gradient_as_bucket_view_)
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].grad().defined()) install_view(i, true);
}

Tensor Reducer::slice_of(size_t i) const { return buckets_[bucket_of_[i]].slice(slot_of_[i], params_[i].shape()); }

bool Reducer::grad_is_view(size_t i) const {
  Tensor g = params_[i].grad();
  return g.defined() && g.storage() == buckets_[bucket_of_[i]].flat.storage() && g.data_ptr() == slice_of(i).data_ptr();
}

// Note [Bucket views]: the slice becomes .grad; with `keep_grad` it first takes the current .grad
// (zeros when there is none), otherwise it keeps its own contents (a reduced result).
void Reducer::install_view(size_t i, bool keep_grad) {
  if (grad_is_view(i)) return;
  NoGradGuard no_grad;
  Tensor view = slice_of(i);
  if (keep_grad) {
    Tensor g = params_[i].grad();
    if (g.defined()) {
      view.copy_(g);
      ++grad_copies_;
    } else
      view.zero_();
  }
  params_[i].set_grad(view);
}

void Reducer::register_comm_hook(CommHook hook) {
  KILN_CHECK(!active_, "register_comm_hook: called during a backward pass (iteration ", iteration_, ")");
  KILN_CHECK(!comm_hook_, "register_comm_hook: a comm hook is already registered; it can be set only once");
  KILN_CHECK(hook != nullptr, "register_comm_hook: the hook is empty");
  comm_hook_ = std::move(hook);
}

void Reducer::fail(const std::string& message) {
  if (failure_.empty()) failure_ = message;
  active_ = false;
  KILN_FAIL_DIST(message);
}

void Reducer::on_grad_ready(size_t i) {
  KILN_CHECK_DIST(failure_.empty(), "DistributedDataParallel is unusable after an earlier failure: ", failure_);
  if (options_.gradient_as_bucket_view_) install_view(i, true);
  used_[i] = true;
  if (!require_sync_) {  // no_sync: gradients accumulate in .grad (the views)
    walked_ = false;
    return;
  }
  if (!active_) {
    start_iteration();
    mark_walked_unused_ready();
    if (options_.static_graph_ && !static_recording_) {  // Note [Static graph]
      NoGradGuard no_grad;
      for (size_t u : static_unused_) mark_unused_ready(u);
    }
  }
  if (static_recording_) {  // Note [Static graph]: reduced at finish()
    ++hooks_seen_[i];
    static_arrival_.push_back(i);
    return;
  }
  if (options_.static_graph_ && --hooks_left_[i] > 0) return;  // more gradients to come
  KILN_CHECK_DIST(!marked_unused_[i], "DistributedDataParallel: parameter '", names_[i], "' got a gradient in iteration ",
                  iteration_, " although the graph walk from the forward's outputs found it unused "
                  "(find_unused_parameters; Note [Unused parameters]): it is used outside that graph, e.g. by "
                  "another forward; pass every output to prepare_for_backward, or use static_graph(true)");
  KILN_CHECK_DIST(!ready_[i], "DistributedDataParallel: parameter '", names_[i],
                  "' got its gradient twice in iteration ", iteration_,
                  "; run one backward per synced iteration (use no_sync() for the extra ones) and call "
                  "finish_gradient_synchronization() between iterations; a parameter used twice per backward "
                  "(e.g. inside and outside a re-entrant checkpoint region) needs static_graph(true)");
  if (!options_.gradient_as_bucket_view_) {
    NoGradGuard no_grad;
    slice_of(i).copy_(params_[i].grad());
    ++grad_copies_;
  }
  if (rebuild_pending_) arrival_.push_back(i);
  mark_ready(i);
  if (num_ready_ == params_.size()) finalize(/*from_hook=*/true);
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  if (!options_.find_unused_parameters_ || options_.static_graph_) return;  // static: recorded instead
  const GraphWalk walk = walk_backward_graph(outputs, params_);
  walk_unused_.clear();
  for (size_t i = 0; i < params_.size(); ++i)
    if (!walk.reachable[i]) walk_unused_.push_back(i);
  walked_ = !walk.has_checkpoint;  // a checkpoint region hides its parameters: finish() finds the unused
}

void Reducer::mark_walked_unused_ready() {
  if (!walked_) return;
  walked_ = false;
  NoGradGuard no_grad;
  for (size_t i : walk_unused_) {
    if (rebuild_pending_) arrival_.push_back(i);
    marked_unused_[i] = true;
    mark_unused_ready(i);
  }
}

// A parameter without a gradient in this synced backward: what it accumulated under no_sync, else zeros.
void Reducer::mark_unused_ready(size_t i) {
  Tensor s = slice_of(i);
  if (!(used_[i] && params_[i].grad().defined()))
    s.zero_();
  else if (!grad_is_view(i)) {
    s.copy_(params_[i].grad());
    ++grad_copies_;
  }
  mark_ready(i);
}

void Reducer::start_iteration() {
  active_ = true;
  ++iteration_;
  ready_.assign(params_.size(), false);
  marked_unused_.assign(params_.size(), false);
  hooks_left_ = hooks_seen_;
  num_ready_ = 0;
  next_launch_ = 0;
  launched_this_iteration_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].params.size();
}

void Reducer::mark_ready(size_t i) {
  ready_[i] = true;
  ++num_ready_;
  if (--pending_[bucket_of_[i]] == 0)
    profiler::instant("bucket ready", profiler::Category::reducer, {"bucket", int64_t(bucket_of_[i])});
  // Launch in bucket order: a full bucket waits for the ones before it.
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void Reducer::launch(size_t b) {
  // The collective's sequence number joins this range to the comm side's (Note [Chrome trace layout]).
  profiler::Range range("allreduce launch", profiler::Category::reducer, {"bucket", int64_t(b)},
                        {"seq", int64_t(group_->sequence_number()) + (comm_hook_ ? 1 : 0)});
  Bucket& bucket = buckets_[b];
  const bool hooked = static_cast<bool>(comm_hook_);
  NoGradGuard no_grad;
  Tensor tail = hooked ? empty({tail_size(b)}, TensorOptions(DType::f64).device(bucket.flat.device()))
                       : bucket.flat.narrow(0, bucket.numel, tail_size(b));
  // Note [Bucket order check]: this rank's codes in its own slots, zeros elsewhere, then the used
  // counters; one copy from the host (asynchronous on CUDA).
  std::vector<double> values(size_t(tail_size(b)), 0.0);
  order_.write_codes(values, b, iteration_, group_->sequence_number(), bucket_dtype(b));
  if (tracks_used())
    for (size_t k = 0; k < bucket.params.size(); ++k)
      values[size_t(order_.slots(bucket_dtype(b))) + k] = used_[bucket.params[k]] ? 1.0 : 0.0;
  tail.copy_(host_values(values, tail.device()), /*non_blocking=*/true);
  if (hooked) {
    side_[b] = tail;
    side_works_[b] = group_->allreduce(side_[b], AllreduceOptions().op(ReduceOp::sum));
    GradBucket view;
    view.index = b;
    view.is_last = b + 1 == buckets_.size();
    view.buffer = bucket.grads();
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      view.parameters.push_back(params_[bucket.params[k]]);
      view.offsets.push_back(bucket.offsets[k]);
    }
    works_[b] = comm_hook_(*group_, view);
    KILN_CHECK(works_[b] != nullptr, "DistributedDataParallel: the comm hook returned no Work for bucket ", b);
  } else {
    // Note [Divide before summing]
    if (div_factor_ > 1) {
      Tensor grads = bucket.grads();
      ops::mul_(grads, 1.0 / div_factor_);
    }
    works_[b] = group_->allreduce(bucket.flat, AllreduceOptions().op(ReduceOp::sum));
  }
  ++launched_this_iteration_;
  ++launched_total_;
}

Tensor Reducer::tail_of(size_t b) const {
  const Bucket& bucket = buckets_[b];
  return comm_hook_ ? side_[b] : bucket.flat.narrow(0, bucket.numel, tail_size(b));
}

// Every bucket's tail as doubles, read with one copy to the host.
std::vector<std::vector<double>> Reducer::read_tails() const {
  std::vector<Tensor> parts;
  for (size_t b = 0; b < buckets_.size(); ++b) parts.push_back(tail_of(b).to(DType::f64));
  const std::vector<double> all = ops::cat(parts, 0).to_vector<double>();
  std::vector<std::vector<double>> out;
  size_t at = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const size_t n = size_t(tail_size(b));
    out.emplace_back(all.begin() + at, all.begin() + at + n);
    at += n;
  }
  return out;
}

void Reducer::check_collective_order() {
  KILN_CHECK_DIST(failure_.empty(), "DistributedDataParallel is unusable after an earlier failure: ", failure_);
  std::string why = order_.read_deferred(iteration_);
  if (!why.empty()) fail(why);
}

void Reducer::finalize(bool from_hook) {
  NoGradGuard no_grad;
  // Wait for every bucket even after an error, so nothing still writes into them.
  std::vector<std::string> wait_errors(buckets_.size());
  bool waited = true;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    profiler::Range range("bucket wait", profiler::Category::reducer, {"bucket", int64_t(b)});
    try {
      if (side_works_[b]) side_works_[b]->wait();
      works_[b]->wait();
    } catch (const std::exception& e) {
      wait_errors[b] = e.what();
      waited = false;
    }
    works_[b] = nullptr;
    side_works_[b] = nullptr;
  }
  std::string error;
  if (!waited) {
    // A collective failed (often a timeout because the ranks' collectives no longer pair up): the
    // first error in bucket order wins, and the order check of the buckets before it comes first,
    // so a mismatch that caused the failure is what gets reported.
    for (size_t b = 0; b < buckets_.size() && error.empty(); ++b) {
      if (!wait_errors[b].empty()) {
        error = wait_errors[b];
        break;
      }
      try {
        error = order_.mismatch(b, tail_of(b).to_vector<double>(), iteration_);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
  } else {
    try {
      // Note [Deferred order check]: one host read of every tail, or a comparison on the device.
      // (find_unused_parameters reads the tails for their used counters anyway.)
      std::vector<std::vector<double>> tails;
      const bool on_cuda = !buckets_.empty() && buckets_.front().flat.device().is_cuda();
      // Note [Unused parameters]: the used counters matter only when this rank left one unused.
      bool check_used = false;
      if (tracks_used())
        for (bool u : used_) check_used = check_used || !u;
      used_reads_ += check_used ? 1 : 0;
      if (check_used || order_.read_on_host(iteration_, on_cuda)) {
        tails = read_tails();
        order_.check(tails, iteration_);
      } else {
        std::vector<Tensor> device_tails;
        for (size_t b = 0; b < buckets_.size(); ++b) device_tails.push_back(tail_of(b));
        order_.defer(device_tails, iteration_);
      }
      const bool one_rank = group_->size() == 1 && !comm_hook_;  // Note [One rank]
      for (size_t b = 0; b < buckets_.size(); ++b) {
        copy_back(b, tails.empty() ? std::vector<double>() : tails[b], check_used,
                  /*grads_current=*/one_rank && from_hook);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  for (Tensor& t : side_) t = Tensor();
  if (!error.empty()) fail(error);
  active_ = false;
  used_.assign(params_.size(), false);
  if (rebuild_pending_) rebuild_in_arrival_order();
}

void Reducer::copy_back(size_t b, const std::vector<double>& tail, bool check_used, bool grads_current) {
  const Bucket& bucket = buckets_[b];
  const size_t used_at = size_t(order_.slots(bucket_dtype(b)));
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    size_t i = bucket.params[k];
    // No rank used it: leave .grad alone (copy mode; with views it is the zeroed slice).
    if (check_used && tail[used_at + k] < 0.5) continue;
    if (options_.gradient_as_bucket_view_) {
      install_view(i, false);  // a locally unused parameter may have no view yet
      continue;
    }
    if (grads_current) continue;  // Note [One rank]
    Tensor g = params_[i].grad();
    Tensor s = bucket.slice(k, params_[i].shape());
    if (g.defined())
      g.copy_(s);
    else
      params_[i].set_grad(s.clone());
  }
}

void Reducer::finish() {
  KILN_CHECK_DIST(failure_.empty(), "DistributedDataParallel is unusable after an earlier failure: ", failure_);
  if (!require_sync_ || !active_) return;  // no_sync, or already finalized by the last hook
  if (static_recording_) return finish_static_recording();
  std::vector<size_t> missing;
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b].params)
      if (!ready_[i]) missing.push_back(i);
  if (!tracks_used()) {
    std::vector<std::string> names;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) names.push_back(names_[i]);  // registration order
    wait_launched_quietly();
    active_ = false;
    used_.assign(params_.size(), false);
    KILN_FAIL_DIST("DistributedDataParallel: ", missing.size(), " parameter(s) got no gradient in iteration ",
                    iteration_, ": ", join_names(names),
                    ". Every parameter must take part in the loss of every synced backward; pass "
                    "DDPOptions().find_unused_parameters(true) if some legitimately do not, or call "
                    "requires_grad_(false) on them before wrapping the model");
  }
  // find_unused_parameters: the rest contribute what they accumulated under no_sync, else zeros.
  NoGradGuard no_grad;
  for (size_t i : missing) mark_unused_ready(i);
  finalize(/*from_hook=*/false);
}

void Reducer::finish_static_recording() {
  static_recording_ = false;
  static_unused_.clear();
  for (size_t i = 0; i < params_.size(); ++i)
    if (hooks_seen_[i] == 0) static_unused_.push_back(i);
  // The order parameters become ready from now on: unused ones at once, the others at their last
  // gradient.
  std::vector<size_t> last(params_.size(), 0);
  for (size_t k = 0; k < static_arrival_.size(); ++k) last[static_arrival_[k]] = k + 1;
  if (rebuild_pending_) {
    arrival_ = static_unused_;
    for (size_t k = 0; k < static_arrival_.size(); ++k)
      if (last[static_arrival_[k]] == k + 1) arrival_.push_back(static_arrival_[k]);
  }
  static_arrival_.clear();
  NoGradGuard no_grad;
  for (const Bucket& b : buckets_)
    for (size_t i : b.params) mark_unused_ready(i);  // copies what the used ones accumulated
  finalize(/*from_hook=*/false);
}

void Reducer::rebuild_in_arrival_order() {
  rebuild_pending_ = false;
  // The deferred record is laid out per bucket: read it before the buckets change (this function
  // reads the agreed order on the host anyway).
  check_collective_order();
  // Parameters that never arrived go last, in reverse registration order.
  std::vector<bool> seen(params_.size(), false);
  for (size_t i : arrival_) seen[i] = true;
  for (size_t j = params_.size(); j-- > 0;)
    if (!seen[j]) arrival_.push_back(j);
  // Every rank must bucket identically: rank 0's order wins.
  std::vector<int64_t> order64(arrival_.begin(), arrival_.end());
  Tensor order = from_vector(order64, {int64_t(order64.size())}).to(group_->device());
  group_->broadcast(order, 0)->wait();
  std::vector<int64_t> agreed = order.to_vector<int64_t>();
  arrival_.clear();
  std::vector<size_t> current;
  for (const Bucket& b : buckets_) current.insert(current.end(), b.params.begin(), b.params.end());
  std::vector<size_t> next(agreed.begin(), agreed.end());
  if (next == current) return;
  // With views the finished gradients live in the old buckets: build_buckets copies each .grad
  // into its new view, so the old ones must stay alive until it returns.
  std::vector<Bucket> old = std::move(buckets_);
  build_buckets(next);
  ++rebuilds_;
}

void Reducer::wait_launched_quietly() noexcept {
  for (size_t b = 0; b < works_.size(); ++b) {
    for (auto* w : {&side_works_[b], &works_[b]}) {
      if (!*w) continue;
      try {
        (*w)->wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln: DistributedDataParallel: bucket %zu's collective failed: %s\n", b, e.what());
      }
      *w = nullptr;
    }
  }
}

}  // namespace kiln::dist
