// ShardedOptimizer: the wrapped optimizer over shard views, the gradient slices it steps with, the
// all-gather of the updated chunks, global-norm clipping and state dicts across shards. See Note
// [Sharded optimizer step] and Note [Padded flat shards].
#include <kiln/parallel/sharded_optimizer.h>

#include <cmath>
#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <tuple>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/parallel/broadcast.h>

namespace kiln::dist {

namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

TensorOptions opts_of(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }

std::string state_key(size_t g, size_t i, const std::string& name) {
  return "state." + std::to_string(g) + "." + std::to_string(i) + "." + name;
}
std::string shard_key(size_t g, size_t i) { return "shard." + std::to_string(g) + "." + std::to_string(i); }

}  // namespace

ShardedOptimizer::ShardedOptimizer(std::vector<std::vector<Tensor>> groups, std::shared_ptr<ProcessGroup> group,
                                   Factory factory, ShardedOptimizerOptions options)
    : Optimizer("ShardedOptimizer"), group_(std::move(group)) {
  policy_ = options.mixed_precision_;
  replicate_ = options.replicate_;
  master_ = policy_.keeps_16bit_parameters();
  KILN_CHECK(group_ != nullptr || replicate_, "ShardedOptimizer: the process group is null (only a replicating "
             "optimizer, ShardedOptimizerOptions::replicate, works without one)");
  policy_.check();
  KILN_CHECK(!replicate_ || options.gather_parameters_, "ShardedOptimizer: replicate keeps every parameter whole; "
             "gather_parameters(false) (FSDP) shards them");
  KILN_CHECK(factory != nullptr, "ShardedOptimizer: the optimizer factory is empty");
  KILN_CHECK(!groups.empty(), "ShardedOptimizer: needs at least one parameter group");
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const Tensor& p = groups[g][i];
      check_defined(p, "ShardedOptimizer", "parameter");
      if (!flat_params_.empty())
        KILN_CHECK(p.dtype() == flat_params_[0].dtype() && p.device() == flat_params_[0].device(),
                   "ShardedOptimizer: parameter ", i, " of group ", g, " is ", p.dtype(), " on ", p.device(),
                   " but the first is ", flat_params_[0].dtype(), " on ", flat_params_[0].device(),
                   "; one flat shard holds one dtype on one device");
      flat_params_.push_back(p);
      where_.emplace_back(g, i);
    }
    add_params(groups[g], master_);  // checks: leaves, f32/f64 (or 16 bits for master weights), no duplicates
  }
  gather_parameters_ = options.gather_parameters_;
  const int rank = replicate_ ? 0 : group_->rank(), world = replicate_ ? 1 : group_->size();
  layout_ = options.buckets_.empty()
                ? ShardLayout(flat_params_, rank, world, mib_to_bytes(options.first_bucket_cap_mb_),
                              mib_to_bytes(options.bucket_cap_mb_))
                : ShardLayout(flat_params_, rank, world, options.buckets_);
  const Tensor& first = flat_params_.front();
  if (master_) {
    KILN_CHECK(first.dtype() == DType::f32 || first.dtype() == policy_.param_dtype_, "ShardedOptimizer: master "
               "weights (param_dtype ", policy_.param_dtype_, ") start from f32 or ", policy_.param_dtype_,
               " parameters, got ", first.dtype());
    // The f32 values are gone once the parameters are 16-bit: every rank's master starts from rank 0's.
    if (group_ && group_->size() > 1) broadcast_from_rank0(*group_, flat_params_);
  }
  const TensorOptions to = TensorOptions(master_ ? DType::f32 : first.dtype()).device(first.device());
  local_params_ = zeros({layout_.local_numel()}, to);
  NoGradGuard no_grad;
  std::vector<std::vector<Tensor>> shard_groups(groups.size());
  inner_index_.assign(groups.size(), {});
  shard_views_.assign(flat_params_.size(), Tensor());
  for (size_t g = 0; g < groups.size(); ++g) inner_index_[g].assign(groups[g].size(), kNone);
  for (size_t i = 0; i < flat_params_.size(); ++i) {
    const ShardPiece& piece = layout_.piece(i);
    if (piece.size() == 0) continue;
    Tensor view = local_params_.narrow(0, piece.local_offset, piece.size());
    view.copy_(flat_params_[i].detach().reshape({-1}).narrow(0, piece.begin, piece.size()));
    shard_views_[i] = view;
    const auto [g, k] = where_[i];
    inner_index_[g][k] = shard_groups[g].size();
    shard_groups[g].push_back(view);
  }
  for (auto& s : shard_groups)
    if (s.empty()) s.push_back(zeros({0}, to));  // a placeholder: never has a gradient, never updated
  if (master_) {  // Note [Master weights]: the parameters become their 16-bit rounding
    if (!gather_parameters_) local_compute_ = local_params_.to(policy_.param_dtype_);  // FSDP gathers from it
    for (const Tensor& p : flat_params_) {
      if (p.dtype() == policy_.param_dtype_) continue;
      p.set_grad(Tensor());
      p.set_data(p.detach().to(policy_.param_dtype_));
    }
  }
  inner_ = factory(std::move(shard_groups));
  KILN_CHECK(inner_ != nullptr && inner_->num_param_groups() == groups.size(),
             "ShardedOptimizer: the factory must return an optimizer with one group per shard group (",
             groups.size(), ")");
  set_name(inner_->name());
}

std::vector<std::string> ShardedOptimizer::state_keys(const optim::HyperParams& values) const {
  for (size_t g = 0; g < num_param_groups(); ++g)
    if (inner_->hyper_parameters(g) == values) return inner_->state_buffer_names(g);
  return inner_->state_buffer_names(0);
}

Tensor& ShardedOptimizer::local_grad() {
  if (!local_grad_.defined()) {
    const DType dtype = master_ ? policy_.effective_reduce_dtype() : local_params_.dtype();
    local_grad_ = zeros({layout_.local_numel()}, TensorOptions(dtype).device(local_params_.device()));
  }
  return local_grad_;
}

std::vector<Tensor> ShardedOptimizer::step_gradients() const {
  if (master_) {  // the f32 copies the update uses (Note [Master weights], step 1)
    const_cast<ShardedOptimizer*>(this)->set_master_grads();
    std::vector<Tensor> out;
    for (const Tensor& v : shard_views_)
      if (v.defined() && v.grad().defined()) out.push_back(v.grad());
    return out;
  }
  if (!use_local_grad_) return Optimizer::step_gradients();
  if (!local_grad_ready_) return {};
  return {local_grad_};
}

void ShardedOptimizer::set_master_grads() {
  if (master_grads_set_) return;
  master_grads_set_ = true;
  NoGradGuard no_grad;
  for (size_t i = 0; i < flat_params_.size(); ++i) {
    const Tensor& view = shard_views_[i];
    if (!view.defined()) continue;
    const ShardPiece& piece = layout_.piece(i);
    Tensor source;
    if (use_local_grad_) {
      if (local_grad_ready_) source = local_grad_.narrow(0, piece.local_offset, piece.size());
    } else if (Tensor g = flat_params_[i].grad(); g.defined()) {
      KILN_CHECK(g.shape() == flat_params_[i].shape(), "ShardedOptimizer: the gradient of parameter ", i, " is ",
                 g.shape(), " but the parameter is ", flat_params_[i].shape());
      Tensor flat = g.is_contiguous() ? g.reshape({-1}) : g.contiguous().reshape({-1});
      source = flat.narrow(0, piece.begin, piece.size());
    }
    if (!source.defined()) {
      view.set_grad(Tensor());
      continue;
    }
    if (!master_grad_.defined()) master_grad_ = empty({layout_.local_numel()}, opts_of(local_params_));
    Tensor dst = master_grad_.narrow(0, piece.local_offset, piece.size());
    dst.copy_(source);  // rounded 16-bit (or reduce_dtype) values, exact in f32
    view.set_grad(dst);
  }
}

void ShardedOptimizer::drop_master_grads() {
  if (!master_grads_set_) return;
  for (const Tensor& v : shard_views_)
    if (v.defined()) v.set_grad(Tensor());
  master_grads_set_ = false;
  master_grad_ = Tensor();
}

void ShardedOptimizer::zero_grad(bool set_to_none) {
  Optimizer::zero_grad(set_to_none);
  drop_master_grads();
}

void ShardedOptimizer::set_shard_grads() {
  if (master_) {
    set_master_grads();
    return;
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < flat_params_.size(); ++i) {
    const Tensor& view = shard_views_[i];
    if (!view.defined()) continue;
    const ShardPiece& piece = layout_.piece(i);
    if (use_local_grad_) {
      view.set_grad(local_grad_ready_ ? local_grad().narrow(0, piece.local_offset, piece.size()) : Tensor());
      continue;
    }
    Tensor g = flat_params_[i].grad();
    if (!g.defined()) {
      view.set_grad(Tensor());
      continue;
    }
    KILN_CHECK(g.shape() == flat_params_[i].shape(), "ShardedOptimizer: the gradient of parameter ", i, " is ",
               g.shape(), " but the parameter is ", flat_params_[i].shape());
    Tensor flat = g.is_contiguous() ? g.reshape({-1}) : g.contiguous().reshape({-1});
    view.set_grad(flat.narrow(0, piece.begin, piece.size()));
  }
}

void ShardedOptimizer::pack_local_params() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < flat_params_.size(); ++i) {
    if (!shard_views_[i].defined()) continue;
    const ShardPiece& piece = layout_.piece(i);
    Tensor p = flat_params_[i].detach();
    Tensor flat = p.is_contiguous() ? p.reshape({-1}) : p.contiguous().reshape({-1});
    shard_views_[i].copy_(flat.narrow(0, piece.begin, piece.size()));
  }
}

void ShardedOptimizer::step(const Tensor& found_inf) {
  // ZeRO-1/2: the parameters are the truth (a broadcast or a loaded checkpoint changed them).
  // FSDP: they are released between uses; local_params_ is the truth. Master weights: always them.
  if (gather_parameters_ && !master_) pack_local_params();
  set_shard_grads();
  inner_->step(found_inf);
  // The shard views' .grad alias the full gradients, local_grad or master_grad_: drop them with the step.
  for (const Tensor& v : shard_views_)
    if (v.defined()) v.set_grad(Tensor());
  local_grad_ready_ = false;
  drop_master_grads();
  if (master_ && !gather_parameters_) {
    NoGradGuard no_grad;
    local_compute_.copy_(local_params_);  // Note [Master weights], step 3: one rounding
  }
  if (gather_parameters_) gather_parameters();
  has_consolidated_ = false;
  consolidated_.clear();
}

void ShardedOptimizer::gather_parameters() {
  NoGradGuard no_grad;
  if (replicate_) {  // world 1's layout: every piece is here (copy_ rounds master weights to 16 bits)
    for (size_t i = 0; i < flat_params_.size(); ++i) {
      const ShardPiece& piece = layout_.piece(i);
      if (piece.size() == 0) continue;
      flat_params_[i].detach().reshape({-1}).narrow(0, piece.begin, piece.size())
          .copy_(local_params_.narrow(0, piece.local_offset, piece.size()));
    }
    return;
  }
  // Master weights: ZeRO-1/2 round the shard into a 16-bit copy that lives for the all-gathers only.
  const Tensor source = master_ ? local_params_.to(policy_.param_dtype_) : local_params_;
  const int world = group_->size();
  struct InFlight {
    size_t bucket;
    Tensor whole;
    std::shared_ptr<Work> work;
  };
  std::deque<InFlight> flight;
  auto land = [&](InFlight& f) {
    f.work->wait();
    const ShardBucket& b = layout_.buckets()[f.bucket];
    for (size_t k = 0; k < b.params.size(); ++k) {
      Tensor p = flat_params_[b.params[k]].detach();
      p.copy_(f.whole.narrow(0, b.offsets[k], p.numel()).view(p.shape()));
    }
  };
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    const ShardBucket& bucket = layout_.buckets()[b];
    Tensor whole = empty({bucket.chunk * world}, opts_of(source));
    Tensor mine = source.narrow(0, bucket.local_offset, bucket.chunk);
    flight.push_back({b, whole, group_->allgather(whole, mine)});
    if (flight.size() > 1) {  // at most two buckets' full copies alive
      land(flight.front());
      flight.pop_front();
    }
  }
  while (!flight.empty()) {
    land(flight.front());
    flight.pop_front();
  }
}

std::vector<Tensor> ShardedOptimizer::full_master_parameters() {
  NoGradGuard no_grad;
  std::vector<Tensor> out(flat_params_.size());
  if (!master_ && gather_parameters_) {  // ZeRO-1/2 without a policy: the parameters are the truth
    for (size_t i = 0; i < flat_params_.size(); ++i) out[i] = flat_params_[i].detach().clone();
    return out;
  }
  const int world = replicate_ ? 1 : group_->size();
  for (const ShardBucket& b : layout_.buckets()) {
    Tensor mine = local_params_.narrow(0, b.local_offset, b.chunk);
    Tensor whole = mine;
    if (world > 1) {
      whole = empty({b.chunk * world}, opts_of(local_params_));
      group_->allgather(whole, mine)->wait();
    }
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = flat_params_[b.params[k]];
      out[b.params[k]] = whole.narrow(0, b.offsets[k], p.numel()).view(p.shape()).clone();
    }
  }
  return out;
}

void ShardedOptimizer::load_master_parameters(const std::vector<Tensor>& full) {
  KILN_CHECK_VALUE(full.size() == flat_params_.size(), "ShardedOptimizer::load_master_parameters: got ", full.size(),
                   " tensors for ", flat_params_.size(), " parameters");
  NoGradGuard no_grad;
  for (size_t i = 0; i < full.size(); ++i) {
    const Tensor& p = flat_params_[i];
    check_defined(full[i], "ShardedOptimizer::load_master_parameters", "value");
    KILN_CHECK_VALUE(full[i].shape() == p.shape() && is_floating(full[i].dtype()), "ShardedOptimizer::"
                     "load_master_parameters: value ", i, " is ", full[i].dtype(), full[i].shape(), " but parameter ",
                     i, " is ", p.shape());
    Tensor value = full[i].to(local_params_.device()).contiguous().reshape({-1});
    const ShardPiece& piece = layout_.piece(i);
    if (piece.size() > 0)
      local_params_.narrow(0, piece.local_offset, piece.size()).copy_(value.narrow(0, piece.begin, piece.size()));
    p.detach().copy_(value.view(p.shape()));
  }
  if (local_compute_.defined()) local_compute_.copy_(local_params_);
}

Tensor ShardedOptimizer::clip_grad_norm(double max_norm) {
  KILN_CHECK(max_norm >= 0.0 && std::isfinite(max_norm), "ShardedOptimizer::clip_grad_norm: max_norm must be finite and >= 0, got ", max_norm);
  NoGradGuard no_grad;
  set_shard_grads();
  double local = 0.0;
  std::vector<Tensor> grads;
  for (const Tensor& v : shard_views_) {
    if (!v.defined() || !v.grad().defined()) continue;
    Tensor g = v.grad();
    grads.push_back(g);
    for (double x : g.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>()) local += x * x;
  }
  double sum = local;
  if (!replicate_) {
    Tensor total = full({1}, local, TensorOptions(DType::f64).device(group_->device()));
    group_->allreduce(total)->wait();
    sum = total.item();
  }
  const double norm = std::sqrt(sum);
  const double coef = max_norm / (norm + 1e-6);
  if (!(coef >= 1.0))
    for (Tensor& g : grads) ops::mul_(g, coef);
  return scalar_tensor(norm, TensorOptions(DType::f64));
}

optim::NamedTensors ShardedOptimizer::group_entries() const {
  optim::NamedTensors out;
  for (const auto& [k, t] : inner_->state_dict())
    if (k.rfind("param_groups.", 0) == 0 && k.find(".num_params") == std::string::npos) out.emplace_back(k, t);
  for (size_t g = 0; g < num_param_groups(); ++g) {
    out.emplace_back("param_groups." + std::to_string(g) + ".num_params",
                     scalar_tensor(double(params(g).size()), DType::i64));
    // The LRScheduler records initial_lr on this wrapper, not on the wrapped optimizer.
    auto key = "param_groups." + std::to_string(g) + ".initial_lr";
    std::erase_if(out, [&](const auto& e) { return e.first == key; });
    if (!std::isnan(initial_lr(g))) out.emplace_back(key, scalar_tensor(initial_lr(g), DType::f64));
  }
  return out;
}

optim::NamedTensors ShardedOptimizer::local_state_dict() const {
  optim::NamedTensors out = group_entries();
  for (size_t i = 0; i < flat_params_.size(); ++i) {
    const auto [g, k] = where_[i];
    const size_t j = inner_index_[g][k];
    if (j == kNone) continue;
    const optim::ParamState& st = inner_->state(g, j);
    if (st.step == 0) continue;
    const ShardPiece& piece = layout_.piece(i);
    std::vector<int64_t> range = {piece.begin, piece.end, flat_params_[i].numel()};
    for (int64_t d : flat_params_[i].shape()) range.push_back(d);
    out.emplace_back(shard_key(g, k), from_vector<int64_t>(range, {int64_t(range.size())}));
    out.emplace_back(state_key(g, k, "step"), scalar_tensor(double(st.step), DType::i64));
    for (const std::string& name : inner_->state_buffer_names(g)) {
      auto it = st.buffers.find(name);
      if (it != st.buffers.end()) out.emplace_back(state_key(g, k, name), it->second);
    }
  }
  return out;
}

optim::NamedTensors ShardedOptimizer::merge_local_state_dicts(const std::vector<optim::NamedTensors>& shards) {
  KILN_CHECK(!shards.empty(), "ShardedOptimizer::merge_local_state_dicts: no shards");
  optim::NamedTensors out;
  std::map<std::string, size_t> at;  // key -> index in out
  for (const auto& [k, t] : shards[0])
    if (k.rfind("param_groups.", 0) == 0) {
      at[k] = out.size();
      out.emplace_back(k, t);
    }
  for (size_t s = 0; s < shards.size(); ++s) {
    std::map<std::string, Tensor> m(shards[s].begin(), shards[s].end());
    for (const auto& [k, t] : shards[s]) {
      if (k.rfind("shard.", 0) != 0) continue;
      const std::string gi = k.substr(6);  // "<g>.<i>"
      const std::vector<int64_t> range = t.to_vector<int64_t>();
      KILN_CHECK(range.size() >= 3 && 0 <= range[0] && range[0] <= range[1] && range[1] <= range[2],
                 "ShardedOptimizer: shard ", s, ": '", k, "' is not [begin, end, numel, shape...]");
      Shape shape(range.begin() + 3, range.end());
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      KILN_CHECK(count == range[2], "ShardedOptimizer: shard ", s, ": '", k, "' has shape ", shape, " but ", range[2],
                 " elements");
      const std::string prefix = "state." + gi + ".";
      for (const auto& [name, buf] : shards[s]) {
        if (name.rfind(prefix, 0) != 0) continue;
        auto it = at.find(name);
        if (name == prefix + "step") {
          if (it == at.end()) {
            at[name] = out.size();
            out.emplace_back(name, buf);
          }
          continue;
        }
        KILN_CHECK(buf.numel() == range[1] - range[0], "ShardedOptimizer: shard ", s, ": '", name, "' has ",
                   buf.numel(), " elements but its range [", range[0], ", ", range[1], ") holds ", range[1] - range[0]);
        if (it == at.end()) {
          at[name] = out.size();
          out.emplace_back(name, zeros(shape, TensorOptions(buf.dtype())));
          it = at.find(name);
        }
        NoGradGuard no_grad;
        out[it->second].second.reshape({-1}).narrow(0, range[0], range[1] - range[0]).copy_(buf.reshape({-1}));
      }
    }
  }
  return out;
}

void ShardedOptimizer::consolidate_state_dict() {
  NoGradGuard no_grad;
  if (replicate_) {  // every rank holds the whole state
    consolidated_ = merge_local_state_dicts({local_state_dict()});
    has_consolidated_ = true;
    return;
  }
  // Every rank's local_state_dict travels as (key count, then per buffer) would need variable
  // sizes; the layout is known to every rank instead, so each state buffer is all-gathered per
  // bucket exactly like the parameters (step counts: a max over ranks per parameter).
  const int world = group_->size();
  optim::NamedTensors out = group_entries();
  std::vector<std::string> names;
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const std::string& n : inner_->state_buffer_names(g))
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  std::vector<int64_t> steps(flat_params_.size(), 0);
  for (size_t i = 0; i < flat_params_.size(); ++i) {
    const auto [g, k] = where_[i];
    if (inner_index_[g][k] != kNone) steps[i] = inner_->state(g, inner_index_[g][k]).step;
  }
  Tensor step_t = from_vector<int64_t>(steps, {int64_t(steps.size())}).to(group_->device());
  group_->allreduce(step_t, AllreduceOptions().op(ReduceOp::max))->wait();
  steps = step_t.to(Device::cpu()).to_vector<int64_t>();
  std::map<std::string, Tensor> full;  // "state.g.i.name" -> full-shaped buffer
  for (const std::string& name : names) {
    Tensor local = zeros({layout_.local_numel()}, opts_of(local_params_));
    for (size_t i = 0; i < flat_params_.size(); ++i) {
      const auto [g, k] = where_[i];
      const size_t j = inner_index_[g][k];
      if (j == kNone) continue;
      auto it = inner_->state(g, j).buffers.find(name);
      if (it != inner_->state(g, j).buffers.end())
        local.narrow(0, layout_.piece(i).local_offset, layout_.piece(i).size()).copy_(it->second);
    }
    for (const ShardBucket& b : layout_.buckets()) {
      Tensor whole = empty({b.chunk * world}, opts_of(local));
      Tensor mine = local.narrow(0, b.local_offset, b.chunk);
      group_->allgather(whole, mine)->wait();
      for (size_t k = 0; k < b.params.size(); ++k) {
        const size_t i = b.params[k];
        const auto [g, idx] = where_[i];
        if (steps[i] == 0) continue;
        const auto keys = inner_->state_buffer_names(g);
        if (std::find(keys.begin(), keys.end(), name) == keys.end()) continue;
        full[state_key(g, idx, name)] =
            whole.narrow(0, b.offsets[k], flat_params_[i].numel()).view(flat_params_[i].shape()).clone();
      }
    }
  }
  for (size_t i = 0; i < flat_params_.size(); ++i) {
    if (steps[i] == 0) continue;
    const auto [g, k] = where_[i];
    out.emplace_back(state_key(g, k, "step"), scalar_tensor(double(steps[i]), DType::i64));
    for (const std::string& name : inner_->state_buffer_names(g)) out.emplace_back(state_key(g, k, name), full.at(state_key(g, k, name)));
  }
  consolidated_ = std::move(out);
  has_consolidated_ = true;
}

optim::NamedTensors ShardedOptimizer::state_dict() const {
  KILN_CHECK(has_consolidated_, "ShardedOptimizer::state_dict: call consolidate_state_dict() (collective) on "
             "every rank first, after the last step(); or save local_state_dict() per rank");
  return consolidated_;
}

void ShardedOptimizer::load_state_dict(const optim::NamedTensors& dict) {
  validate_state_dict(dict);  // the full parameters' shapes, this optimizer's hyper-parameters
  std::map<std::string, Tensor> m(dict.begin(), dict.end());
  optim::NamedTensors inner;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const std::string gp = "param_groups." + std::to_string(g) + ".";
    size_t count = 0;
    for (size_t k = 0; k < params(g).size(); ++k) count += inner_index_[g][k] != kNone;
    inner.emplace_back(gp + "num_params", scalar_tensor(double(std::max<size_t>(count, 1)), DType::i64));
    for (const auto& [name, v] : inner_->hyper_parameters(g))
      inner.emplace_back(gp + name, m.at(gp + name));
    auto il = m.find(gp + "initial_lr");
    if (il != m.end()) set_initial_lr(g, il->second.item());
  }
  for (size_t i = 0; i < flat_params_.size(); ++i) {
    const auto [g, k] = where_[i];
    const size_t j = inner_index_[g][k];
    auto step = m.find(state_key(g, k, "step"));
    if (j == kNone || step == m.end()) continue;
    const ShardPiece& piece = layout_.piece(i);
    inner.emplace_back(state_key(g, j, "step"), step->second);
    for (const std::string& name : inner_->state_buffer_names(g))
      inner.emplace_back(state_key(g, j, name), m.at(state_key(g, k, name)).reshape({-1}).narrow(0, piece.begin, piece.size()));
  }
  inner_->load_state_dict(inner);
  has_consolidated_ = false;
  consolidated_.clear();
}

namespace {

// Entry k of `state` -> the flat index of the optimizer parameter it is, or kNone. state_dict()'s
// entries are detached views of the parameters: the same bytes (storage, offset, shape), another impl.
std::vector<size_t> parameter_entries(const ShardedOptimizer& optimizer, const optim::NamedTensors& state) {
  using Key = std::tuple<const Storage*, int64_t, Shape>;
  auto key = [](const Tensor& t) { return Key{t.storage().get(), t.offset(), t.shape()}; };
  std::map<Key, size_t> index;
  for (size_t i = 0; i < optimizer.flat_parameters().size(); ++i) index[key(optimizer.flat_parameters()[i])] = i;
  std::vector<size_t> out(state.size(), kNone);
  for (size_t k = 0; k < state.size(); ++k)
    if (auto it = index.find(key(state[k].second)); it != index.end()) out[k] = it->second;
  return out;
}

}  // namespace

optim::NamedTensors with_master_weights(ShardedOptimizer& optimizer, optim::NamedTensors state) {
  if (!optimizer.keeps_master_weights()) return state;
  const std::vector<size_t> at = parameter_entries(optimizer, state);
  const std::vector<Tensor> masters = optimizer.full_master_parameters();  // collective
  for (size_t k = 0; k < state.size(); ++k)
    if (at[k] != kNone) state[k].second = masters[at[k]];
  return state;
}

std::vector<Tensor> master_stand_ins(const ShardedOptimizer& optimizer, optim::NamedTensors& state) {
  if (!optimizer.keeps_master_weights()) return {};
  const std::vector<size_t> at = parameter_entries(optimizer, state);
  const auto& params = optimizer.flat_parameters();
  std::vector<Tensor> out(params.size());
  for (size_t i = 0; i < params.size(); ++i) out[i] = zeros(params[i].shape(), TensorOptions(DType::f32));
  std::vector<bool> found(params.size(), false);
  for (size_t k = 0; k < state.size(); ++k)
    if (at[k] != kNone) {
      state[k].second = out[at[k]];
      found[at[k]] = true;
    }
  for (size_t i = 0; i < params.size(); ++i)
    KILN_CHECK_VALUE(found[i], "master_stand_ins: parameter ", i, " of the optimizer (shape ", params[i].shape(),
                     ") is not in the state dict: its master weights would load as zeros");
  return out;
}

}  // namespace kiln::dist
