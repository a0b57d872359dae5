// The Reducer's data path: hooks mark parameters ready, full buckets are launched in bucket
// order, finalize waits, checks the collective order, averages and copies back. See
// Note [Bucket views], Note [When gradients are final] and Note [Bucket order check].
#include <kiln/parallel/reducer.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln::dist {

// Note [Bucket order check]
// Every rank must all-reduce the same buckets in the same order; if one rank issues an extra
// collective (or skips one), rank A's bucket 3 gets summed with rank B's bucket 4 and training goes
// silently wrong. So each bucket's flat tensor carries a tail after the gradients: 3 slots per
// rank, (iteration, bucket index, group sequence number). A rank writes its codes into its own 3
// slots and zeros elsewhere, so after the SUM every rank can read every other rank's codes and
// compare them with its own: any difference means the ranks reduced different things, and the
// reducer throws naming the bucket, the iteration and the sequence numbers on both sides. Codes are
// taken modulo the largest integer the dtype holds exactly (2^8 for bf16, 2^11 for f16, 2^24 for
// f32), since x + 0 is exact in every floating format. The check costs no extra collective. With
// find_unused_parameters the tail also carries one counter per parameter of the bucket (1 where
// this rank used it), so after the sum a zero means no rank did. A comm hook sees only the
// gradients, so with one the tail travels in a separate small f64 all-reduce launched just
// before the hook's collectives.
//
// Note [One rank]
// On a group of one rank the default all-reduce (a sum) leaves every bucket as it was, so finalize
// skips what could not change a value: the division by the world size (x * 1.0 == x), and, in
// copy mode, the copy back into .grad when finalize runs from the last gradient's hook, since
// every .grad then still holds exactly what was copied into its slice earlier in the same backward.
// When finish() finalizes instead (some parameter got no gradient), user code may have run since
// backward, so the copy back happens as on several ranks. Everything else is unchanged: buckets
// are filled, the collectives are issued (one per bucket, order-checked), views are installed.
// With a comm hook nothing is skipped: a hook may change values on one rank too (compression).
namespace {

constexpr int64_t kCodes = 3;  // iteration, bucket, sequence number

double code_modulus(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 256.0;
    case DType::f16: return 2048.0;
    case DType::f32: return 16777216.0;
    default: return 4503599627370496.0;  // 2^52
  }
}

std::string join_names(const std::vector<std::string>& names, size_t limit = 10) {
  std::ostringstream os;
  for (size_t i = 0; i < names.size() && i < limit; ++i) os << (i ? ", " : "") << "'" << names[i] << "'";
  if (names.size() > limit) os << " and " << names.size() - limit << " more";
  return os.str();
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
    : params_(std::move(params)), names_(std::move(names)), group_(std::move(group)), options_(options) {
  KILN_CHECK(group_ != nullptr, "Reducer: the process group is null");
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
  used_.assign(params_.size(), false);
  rebuild_pending_ = options_.rebuild_buckets_;
}

Reducer::~Reducer() { wait_launched_quietly(); }

void Reducer::install_hooks() {
  std::weak_ptr<Reducer> weak = weak_from_this();
  for (size_t i = 0; i < params_.size(); ++i)
    autograd::register_post_accumulate_grad_hook(params_[i], [weak, i](const Tensor&) {
      if (auto self = weak.lock()) self->on_grad_ready(i);
    });
}

int64_t Reducer::tail_size(size_t b) const {
  int64_t n = kCodes * group_->size();
  if (options_.find_unused_parameters_) n += static_cast<int64_t>(buckets_[b].params.size());
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
  sequence_.assign(buckets_.size(), 0);
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
    if (g.defined())
      view.copy_(g);
    else
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
  KILN_CHECK_DIST(false, message);
}

void Reducer::on_grad_ready(size_t i) {
  KILN_CHECK_DIST(failure_.empty(), "DistributedDataParallel is unusable after an earlier failure: ", failure_);
  if (options_.gradient_as_bucket_view_) install_view(i, true);
  used_[i] = true;
  if (!require_sync_) return;  // no_sync: gradients accumulate in .grad (the views)
  if (!active_) start_iteration();
  KILN_CHECK_DIST(!ready_[i], "DistributedDataParallel: parameter '", names_[i],
                  "' got its gradient twice in iteration ", iteration_,
                  "; run one backward per synced iteration (use no_sync() for the extra ones) and call "
                  "finish_gradient_synchronization() between iterations");
  if (!options_.gradient_as_bucket_view_) {
    NoGradGuard no_grad;
    slice_of(i).copy_(params_[i].grad());
  }
  if (rebuild_pending_) arrival_.push_back(i);
  mark_ready(i);
  if (num_ready_ == params_.size()) finalize(/*from_hook=*/true);
}

void Reducer::start_iteration() {
  active_ = true;
  ++iteration_;
  ready_.assign(params_.size(), false);
  num_ready_ = 0;
  next_launch_ = 0;
  launched_this_iteration_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].params.size();
}

void Reducer::mark_ready(size_t i) {
  ready_[i] = true;
  ++num_ready_;
  --pending_[bucket_of_[i]];
  // Launch in bucket order: a full bucket waits for the ones before it.
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void Reducer::launch(size_t b) {
  Bucket& bucket = buckets_[b];
  int rank = group_->rank();
  bool hooked = static_cast<bool>(comm_hook_);
  Tensor tail = hooked ? zeros({tail_size(b)}, TensorOptions(DType::f64).device(bucket.flat.device()))
                       : bucket.flat.narrow(0, bucket.numel, tail_size(b));
  NoGradGuard no_grad;
  tail.zero_();
  sequence_[b] = group_->sequence_number();
  double m = code_modulus(tail.dtype());
  std::vector<double> codes{std::fmod(double(iteration_), m), std::fmod(double(b), m), std::fmod(double(sequence_[b]), m)};
  for (int64_t k = 0; k < kCodes; ++k) tail.narrow(0, rank * kCodes + k, 1).fill_(codes[k]);
  if (options_.find_unused_parameters_)
    for (size_t k = 0; k < bucket.params.size(); ++k)
      tail.narrow(0, kCodes * group_->size() + int64_t(k), 1).fill_(used_[bucket.params[k]] ? 1.0 : 0.0);
  if (hooked) {
    side_[b] = tail;
    side_works_[b] = group_->allreduce(side_[b], AllreduceOptions().op(ReduceOp::sum));
    Tensor grads = bucket.grads();
    works_[b] = comm_hook_(*group_, grads);
    KILN_CHECK(works_[b] != nullptr, "DistributedDataParallel: the comm hook returned no Work for bucket ", b);
  } else {
    works_[b] = group_->allreduce(bucket.flat, AllreduceOptions().op(ReduceOp::sum));
  }
  ++launched_this_iteration_;
  ++launched_total_;
}

void Reducer::check_order(size_t b, const Tensor& tail) const {
  std::vector<double> got = tail.narrow(0, 0, kCodes * group_->size()).to_vector<double>();
  const int rank = group_->rank(), size = group_->size();
  double m = code_modulus(tail.dtype());
  const double mine[kCodes] = {std::fmod(double(iteration_), m), std::fmod(double(b), m),
                               std::fmod(double(sequence_[b]), m)};
  // The other ranks first: their slots say what they reduced. Our own slot can only differ when
  // someone contributed a tensor that is not a bucket (its "zeros" were data).
  for (int k = 1; k <= size; ++k) {
    int r = (rank + k) % size;
    const double* theirs = &got[size_t(r) * kCodes];
    if (theirs[0] == mine[0] && theirs[1] == mine[1] && theirs[2] == mine[2]) continue;
    std::ostringstream os;
    os << "DistributedDataParallel: collective order mismatch (Note [Bucket order check]): rank " << rank
       << " all-reduced bucket " << b << " of iteration " << iteration_ << " as collective sequence number "
       << sequence_[b] << ", but ";
    if (r != rank)
      os << "rank " << r << " contributed bucket " << theirs[1] << " of iteration " << theirs[0]
         << " at sequence number " << theirs[2];
    else
      os << "another rank contributed a tensor that is not a DDP bucket (this rank's own check slot reads bucket "
         << theirs[1] << " of iteration " << theirs[0] << ")";
    if (m < 1e9) os << " (codes modulo " << m << ")";
    os << "; every rank must issue the same collectives in the same order (an extra or missing all-reduce, "
          "barrier or broadcast on one rank, or a different model or control flow)";
    throw DistributedError(os.str());
  }
}

void Reducer::finalize(bool from_hook) {
  NoGradGuard no_grad;
  const double inv = 1.0 / group_->size();
  const bool one_rank = group_->size() == 1 && !comm_hook_;  // Note [One rank]
  std::string error;
  // Wait for every bucket even after an error, so nothing still writes into them.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    try {
      if (side_works_[b]) side_works_[b]->wait();
      works_[b]->wait();
      Bucket& bucket = buckets_[b];
      Tensor tail = comm_hook_ ? side_[b] : bucket.flat.narrow(0, bucket.numel, tail_size(b));
      if (error.empty()) {
        check_order(b, tail);
        if (!comm_hook_ && !one_rank) {
          Tensor grads = bucket.grads();
          ops::mul_(grads, inv);
        }
        copy_back(b, tail, /*grads_current=*/one_rank && from_hook);
      }
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
    works_[b] = nullptr;
    side_works_[b] = nullptr;
    side_[b] = Tensor();
  }
  if (!error.empty()) fail(error);
  active_ = false;
  used_.assign(params_.size(), false);
  if (rebuild_pending_) rebuild_in_arrival_order();
}

void Reducer::copy_back(size_t b, const Tensor& tail, bool grads_current) {
  const Bucket& bucket = buckets_[b];
  std::vector<double> used_by_any;
  if (options_.find_unused_parameters_)
    used_by_any = tail.narrow(0, kCodes * group_->size(), int64_t(bucket.params.size())).to_vector<double>();
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    size_t i = bucket.params[k];
    // No rank used it: leave .grad alone (copy mode; with views it is the zeroed slice).
    if (!used_by_any.empty() && used_by_any[k] < 0.5) continue;
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
  std::vector<size_t> missing;
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b].params)
      if (!ready_[i]) missing.push_back(i);
  if (!options_.find_unused_parameters_) {
    std::vector<std::string> names;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) names.push_back(names_[i]);  // registration order
    wait_launched_quietly();
    active_ = false;
    used_.assign(params_.size(), false);
    KILN_CHECK_DIST(false, "DistributedDataParallel: ", missing.size(), " parameter(s) got no gradient in iteration ",
                    iteration_, ": ", join_names(names),
                    ". Every parameter must take part in the loss of every synced backward; pass "
                    "DDPOptions().find_unused_parameters(true) if some legitimately do not, or call "
                    "requires_grad_(false) on them before wrapping the model");
  }
  // find_unused_parameters: the rest contribute what they accumulated under no_sync, else zeros.
  NoGradGuard no_grad;
  for (size_t i : missing) {
    Tensor s = slice_of(i);
    bool has = used_[i] && params_[i].grad().defined();
    if (!has)
      s.zero_();
    else if (!grad_is_view(i))
      s.copy_(params_[i].grad());
    mark_ready(i);
  }
  finalize(/*from_hook=*/false);
}

void Reducer::rebuild_in_arrival_order() {
  rebuild_pending_ = false;
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
