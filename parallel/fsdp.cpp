// FullyShardedDataParallel: the unit plan, the unit storages, and the gather / release /
// reduce-scatter schedule driven by forward hooks, gradient hooks and post-accumulate-grad hooks.
// See Note [FSDP unit storage], Note [FSDP schedule] and Note [FSDP gradient accumulation].
#include <kiln/parallel/fsdp.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <kiln/autograd/engine.h>
#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/parallel/broadcast.h>
#include <kiln/parallel/sharding.h>

namespace kiln::dist {

namespace {

struct PlannedUnit {
  std::string name;
  nn::Module* module = nullptr;  // null: the root
  std::vector<size_t> params;    // flat indices
};

void find_wrapped(nn::Module& m, const std::string& prefix, const std::vector<std::string>& wrap,
                  std::vector<std::pair<std::string, nn::Module*>>& out) {
  for (const auto& [name, child] : m.named_children()) {
    if (!child) continue;
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (std::find(wrap.begin(), wrap.end(), child->name()) != wrap.end())
      out.emplace_back(full, child.get());
    else
      find_wrapped(*child, full, wrap, out);
  }
}

std::vector<Tensor> flat_params_of(const optim::Optimizer& optimizer) {
  std::vector<Tensor> out;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const Tensor& p : optimizer.params(g)) out.push_back(p);
  return out;
}

// Wrapped units in module order, then the root with every other flat parameter (if any).
std::vector<PlannedUnit> plan_units(nn::Module& model, const std::vector<Tensor>& flat, const FSDPOptions& options) {
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < flat.size(); ++i) index[flat[i].impl()] = i;
  std::vector<bool> model_param(flat.size(), false), taken(flat.size(), false);
  for (const Tensor& p : model.parameters()) {
    auto it = index.find(p.impl());
    if (it != index.end()) model_param[it->second] = true;
  }
  for (size_t i = 0; i < flat.size(); ++i)
    KILN_CHECK(model_param[i], "FSDP: optimizer parameter ", i, " (shape ", flat[i].shape(),
               ") is not a parameter of the model");
  std::vector<std::pair<std::string, nn::Module*>> wrapped;
  if (!options.wrap_.empty()) {
    if (std::find(options.wrap_.begin(), options.wrap_.end(), model.name()) != options.wrap_.end())
      KILN_FAIL("FSDP: the model itself (", model.name(), ") is in wrap; the root is always a unit, list its "
                "children's types");
    find_wrapped(model, "", options.wrap_, wrapped);
  }
  std::vector<PlannedUnit> out;
  for (const auto& [name, module] : wrapped) {
    PlannedUnit u{name, module, {}};
    for (const Tensor& p : module->parameters()) {
      auto it = index.find(p.impl());
      if (it == index.end() || taken[it->second]) continue;  // frozen, or shared with an earlier unit
      taken[it->second] = true;
      u.params.push_back(it->second);
    }
    if (!u.params.empty()) out.push_back(std::move(u));
  }
  PlannedUnit root{"", nullptr, {}};
  for (size_t i = 0; i < flat.size(); ++i)
    if (!taken[i]) root.params.push_back(i);
  if (!root.params.empty()) out.push_back(std::move(root));
  return out;
}

// Where a parameter lies in its unit's storage, for the release note.
struct ParamBytes {
  size_t begin, end;
  std::string name;
};

// The release note of a unit's storage (Note [Storage release notes]): which parameter the tensor at
// `byte_offset` is and how to get it gathered; ops quote it when they meet the unit released.
std::string release_note(bool alive, const std::string& unit, bool wrapped, const std::vector<ParamBytes>& params,
                         size_t byte_offset) {
  std::string what = "a tensor";
  for (const ParamBytes& p : params)
    if (byte_offset >= p.begin && byte_offset < p.end) what = "parameter `" + p.name + "`";
  const std::string owner = wrapped ? "FSDP unit `" + unit + "`" : "FSDP's root unit";
  if (!alive)
    return what + " was sharded by " + owner + ", whose FullyShardedDataParallel no longer exists: the parameters "
           "it sharded hold no bytes; read the sharded optimizer's local_params() or load a state_dict into a new model";
  const std::string outside = ". Outside a forward and backward, FullyShardedDataParallel::gather_full_params() or "
                              "full_state_dict() give the full parameters";
  if (wrapped)
    return what + " belongs to " + owner + " and is not gathered: call the module through `nn::call(module, x)` so "
           "its forward hooks run (FSDP gathers a unit in its forward pre-hook, which `module.forward(x)` skips)" +
           outside;
  return what + " belongs to " + owner + " and is not gathered: FullyShardedDataParallel::prepare_forward() gathers "
         "it before each forward (the Trainer calls it before each micro-step and in sync_buffers()) and its "
         "backward releases it" + outside;
}

}  // namespace

ShardedOptimizerOptions fsdp_optimizer_options(nn::Module& model, const optim::Optimizer& optimizer,
                                               const FSDPOptions& options) {
  std::vector<std::vector<size_t>> buckets;
  for (auto& u : plan_units(model, flat_params_of(optimizer), options)) buckets.push_back(std::move(u.params));
  return ShardedOptimizerOptions().buckets(std::move(buckets)).gather_parameters(false)
      .mixed_precision(options.mixed_precision_);
}

std::shared_ptr<FullyShardedDataParallel> FullyShardedDataParallel::create(std::shared_ptr<nn::Module> model,
                                                                           const optim::Optimizer& like,
                                                                           std::shared_ptr<ProcessGroup> group,
                                                                           FSDPOptions options) {
  KILN_CHECK(model != nullptr, "FSDP: the model is null");
  auto sharded = shard_optimizer(like, std::move(group), fsdp_optimizer_options(*model, like, options));
  return create(std::move(model), std::move(sharded), std::move(options));
}

std::shared_ptr<FullyShardedDataParallel> FullyShardedDataParallel::create(std::shared_ptr<nn::Module> model,
                                                                           std::shared_ptr<ShardedOptimizer> optimizer,
                                                                           FSDPOptions options) {
  std::shared_ptr<FullyShardedDataParallel> f(
      new FullyShardedDataParallel(std::move(model), std::move(optimizer), std::move(options)));
  f->install_hooks();
  return f;
}

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> model,
                                                   std::shared_ptr<ShardedOptimizer> optimizer, FSDPOptions options)
    : model_(std::move(model)), optimizer_(std::move(optimizer)), options_(std::move(options)) {
  KILN_CHECK(model_ != nullptr, "FSDP: the model is null");
  KILN_CHECK(optimizer_ != nullptr, "FSDP: the sharded optimizer is null");
  KILN_CHECK(!optimizer_->gathers_parameters(), "FSDP: the ShardedOptimizer gathers its parameters after each step "
             "(ZeRO-1/2); build it with fsdp_optimizer_options(model, optimizer, fsdp_options)");
  params_ = optimizer_->flat_parameters();
  auto plan = plan_units(*model_, params_, options_);
  const ShardLayout& layout = optimizer_->layout();
  KILN_CHECK(plan.size() == layout.buckets().size(), "FSDP: the optimizer's layout has ", layout.buckets().size(),
             " buckets but the model has ", plan.size(), " units; build it with fsdp_optimizer_options()");
  ProcessGroup& group = optimizer_->process_group();
  const int world = group.size();
  unit_of_.assign(params_.size(), 0);
  NoGradGuard no_grad;
  for (size_t u = 0; u < plan.size(); ++u) {
    const ShardBucket& bucket = layout.buckets()[u];
    KILN_CHECK(plan[u].params == bucket.params, "FSDP: bucket ", u, " of the optimizer's layout is not unit '",
               plan[u].name, "'; build the optimizer with fsdp_optimizer_options()");
    Unit unit;
    unit.name = plan[u].name;
    unit.module = plan[u].module;
    unit.params = plan[u].params;
    unit.bucket = u;
    const Tensor& first = params_[unit.params.front()];
    const DType dtype = first.dtype();
    const int64_t n = bucket.chunk * world;
    unit.storage = Storage::allocate(size_t(n) * dtype_size(dtype), first.device());
    unit.flat = Tensor(std::make_shared<TensorImpl>(unit.storage, dtype, Shape{n}, Strides{1}, 0));
    unit.flat.zero_();  // the padding
    for (size_t k = 0; k < unit.params.size(); ++k) {
      const Tensor& p = params_[unit.params[k]];
      unit.flat.narrow(0, bucket.offsets[k], p.numel()).copy_(p.detach().reshape({-1}));
      // The parameter becomes a view of the unit's storage (Note [FSDP unit storage]).
      p.set_data(Tensor(std::make_shared<TensorImpl>(unit.storage, dtype, p.shape(), contiguous_strides(p.shape()),
                                                     bucket.offsets[k])));
      unit_of_[unit.params[k]] = u;
    }
    unit.gathered = true;
    if (world > 1) group.broadcast(unit.flat, 0)->wait();  // rank 0's parameters, as DDP's constructor
    units_.push_back(std::move(unit));
    if (plan[u].module) wrapped_ = u + 1;
  }
  broadcast_buffers();
  reshard_full_params(/*writeback=*/true);  // this rank's chunks into the optimizer, the rest released
  optimizer_->use_local_grad(true);
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  for (auto& unit : units_)
    if (unit.gather) try {
        unit.gather->wait();
        unit.storage->set_pending(false);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln: FSDP: unit '%s''s all_gather failed: %s\n", unit.name.c_str(), e.what());
      }
  for (auto& s : scatters_) try {
      s.work->wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: FSDP: a reduce_scatter failed: %s\n", e.what());
    }
}

void FullyShardedDataParallel::install_hooks() {
  std::weak_ptr<FullyShardedDataParallel> weak = shared_from_this();
  set_release_notes();
  for (size_t u = 0; u < wrapped_; ++u) {
    units_[u].module->register_forward_pre_hook([weak, u](nn::Module&) {
      if (auto self = weak.lock()) self->pre_forward(u);
    });
    units_[u].module->register_forward_hook([weak, u](nn::Module&, const Tensor& out) {
      if (auto self = weak.lock()) self->post_forward(u, out);
    });
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    KILN_CHECK(params_[i].requires_grad(), "FSDP: parameter ", i, " of the optimizer does not require grad");
    autograd::register_post_accumulate_grad_hook(params_[i], [weak, i](const Tensor&) {
      if (auto self = weak.lock()) self->on_grad_ready(i);
    });
  }
}

void FullyShardedDataParallel::set_release_notes() {
  std::map<const TensorImpl*, std::string> names;
  for (const auto& [name, p] : model_->named_parameters()) names.emplace(p.impl(), name);
  std::weak_ptr<FullyShardedDataParallel> weak = weak_from_this();
  for (const Unit& unit : units_) {
    const ShardBucket& bucket = optimizer_->layout().buckets()[unit.bucket];
    std::vector<ParamBytes> params;
    for (size_t k = 0; k < unit.params.size(); ++k) {
      const Tensor& p = params_[unit.params[k]];
      const size_t begin = size_t(bucket.offsets[k]) * p.element_size();
      auto it = names.find(p.impl());
      std::string name = it != names.end() ? it->second : "#";
      if (it == names.end()) name += std::to_string(unit.params[k]);  // always found: FSDP checks them
      params.push_back({begin, begin + p.nbytes(), std::move(name)});
    }
    unit.storage->set_release_note([weak, unit_name = unit.name, wrapped = unit.module != nullptr,
                                    params = std::move(params)](size_t byte_offset) {
      return release_note(weak.lock() != nullptr, unit_name, wrapped, params, byte_offset);
    });
  }
}

void FullyShardedDataParallel::note(EventKind kind, size_t u) {
  if (options_.record_events_) events_.push_back({kind, u});
}

Tensor FullyShardedDataParallel::local_chunk(const Unit& unit) const {
  const ShardBucket& b = optimizer_->layout().buckets()[unit.bucket];
  return optimizer_->local_compute_params().narrow(0, b.local_offset, b.chunk);  // 16-bit with master weights
}

int64_t FullyShardedDataParallel::gathered_bytes() const {
  int64_t total = 0;
  for (const auto& u : units_) total += int64_t(u.storage->nbytes());
  return total;
}

void FullyShardedDataParallel::launch_gather(size_t u) {
  Unit& unit = units_[u];
  if (unit.gathered) return;
  unit.storage->resize(size_t(unit.flat.numel()) * dtype_size(unit.flat.dtype()));
  unit.gathered = true;
  unit.gather = optimizer_->process_group().allgather(unit.flat, local_chunk(unit));
  unit.storage->set_pending(true);  // no op reads it until wait_gather (Note [Storage release notes])
  note(EventKind::all_gather, u);
}

void FullyShardedDataParallel::wait_gather(size_t u) {
  Unit& unit = units_[u];
  launch_gather(u);
  if (!unit.gather) return;
  auto work = std::move(unit.gather);
  unit.gather = nullptr;
  work->wait();
  unit.storage->set_pending(false);
  note(EventKind::wait_gather, u);
}

void FullyShardedDataParallel::release(size_t u) {
  Unit& unit = units_[u];
  if (!unit.gathered) return;
  if (unit.gather) {  // never free bytes a collective still writes
    unit.gather->wait();
    unit.gather = nullptr;
  }
  unit.storage->set_pending(false);
  unit.storage->resize(0);
  unit.gathered = false;
  note(EventKind::release, u);
}

void FullyShardedDataParallel::pre_forward(size_t u) {
  if (!autograd::in_backward()) {
    launch_gather(u);
    if (options_.prefetch_ && u + 1 < wrapped_) launch_gather(u + 1);  // forward prefetch
  }
  wait_gather(u);
  note(EventKind::forward, u);
}

void FullyShardedDataParallel::post_forward(size_t u, const Tensor& output) {
  if (grad_mode_enabled() && output.defined() && output.requires_grad()) {
    std::weak_ptr<FullyShardedDataParallel> weak = weak_from_this();
    autograd::register_hook(output, [weak, u](const Tensor&) {
      if (auto self = weak.lock()) self->pre_backward(u);
      return Tensor();  // the gradient passes unchanged
    });
  }
  // A recompute (activation checkpointing) runs inside backward: the unit's backward follows.
  if (!autograd::in_backward()) release(u);
}

void FullyShardedDataParallel::pre_backward(size_t u) {
  wait_gather(u);
  note(EventKind::backward, u);
  if (options_.prefetch_ && u > 0 && u - 1 < wrapped_ && !units_[u - 1].backward_done) launch_gather(u - 1);
}

void FullyShardedDataParallel::on_grad_ready(size_t i) {
  const size_t u = unit_of_[i];
  Unit& unit = units_[u];
  KILN_CHECK_DIST(unit.ready < unit.params.size(), "FSDP: unit '", unit.name, "' got a gradient for parameter ", i,
                  " after its backward was complete; call prepare_forward() before every forward");
  if (require_sync_) synced_backward_ = true;
  if (++unit.ready < unit.params.size()) return;
  unit.backward_done = true;
  if (require_sync_) launch_reduce_scatter(u);
  release(u);
}

void FullyShardedDataParallel::wait_oldest_reduce_scatter() {
  PendingScatter s = std::move(scatters_.front());
  scatters_.erase(scatters_.begin());
  s.work->wait();
}

void FullyShardedDataParallel::launch_reduce_scatter(size_t u) {
  NoGradGuard no_grad;
  const Unit& unit = units_[u];
  const ShardBucket& bucket = optimizer_->layout().buckets()[unit.bucket];
  ProcessGroup& group = optimizer_->process_group();
  if (scatters_.size() >= 2) wait_oldest_reduce_scatter();  // at most two flat gradient buffers alive
  // In the local gradient's dtype: the policy's reduce_dtype (Note [Master weights]), else the parameters'.
  const DType dtype = optimizer_->local_grad().dtype();
  Tensor flat = zeros({bucket.chunk * group.size()}, TensorOptions(dtype).device(unit.flat.device()));
  for (size_t k = 0; k < unit.params.size(); ++k) {
    const Tensor& p = params_[unit.params[k]];
    KILN_CHECK(p.grad().defined(), "FSDP: parameter ", unit.params[k], " of unit '", unit.name, "' has no gradient");
    flat.narrow(0, bucket.offsets[k], p.numel()).copy_(p.grad().reshape({-1}));
    p.set_grad(Tensor());  // only the shard stays
  }
  Tensor out = optimizer_->local_grad().narrow(0, bucket.local_offset, bucket.chunk);
  scatters_.push_back({u, flat, group.reduce_scatter(out, flat, AllreduceOptions().op(ReduceOp::sum))});
  note(EventKind::reduce_scatter, u);
}

void FullyShardedDataParallel::broadcast_buffers() {
  broadcast_from_rank0(optimizer_->process_group(), model_->buffers());
}

void FullyShardedDataParallel::prepare_forward() {
  if (options_.broadcast_buffers_) broadcast_buffers();
  for (auto& unit : units_) {
    unit.ready = 0;
    unit.backward_done = false;
  }
  if (wrapped_ < units_.size()) launch_gather(wrapped_);  // the root
  if (options_.prefetch_ && wrapped_ > 0) launch_gather(0);
  if (wrapped_ < units_.size()) wait_gather(wrapped_);
}

void FullyShardedDataParallel::finish() {
  std::string error;
  while (!scatters_.empty()) {
    try {
      wait_oldest_reduce_scatter();
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  KILN_CHECK_DIST(error.empty(), "FSDP: a reduce_scatter failed: ", error);
  std::ostringstream missing;
  size_t count = 0;
  for (const auto& unit : units_)
    if (!unit.backward_done) missing << (count++ ? ", " : "") << "'" << unit.name << "' (" << unit.ready << " of "
                                     << unit.params.size() << " gradients)";
  KILN_CHECK_DIST(count == 0, "FSDP: ", count, " unit(s) did not finish their backward: ", missing.str(),
                  " (the root is ''); every sharded parameter needs a gradient in every backward, or "
                  "requires_grad_(false) before sharding");
  if (!require_sync_ || !synced_backward_) return;
  synced_backward_ = false;
  const int world = optimizer_->process_group().size();
  if (world > 1) {
    NoGradGuard no_grad;
    ops::mul_(optimizer_->local_grad(), 1.0 / world);  // DDP's sum then multiply (reducer.cpp)
  }
  optimizer_->set_local_grad_ready(true);
}

void FullyShardedDataParallel::gather_full_params() {
  for (size_t u = 0; u < units_.size(); ++u) launch_gather(u);
  for (size_t u = 0; u < units_.size(); ++u) wait_gather(u);
}

void FullyShardedDataParallel::reshard_full_params(bool writeback) {
  NoGradGuard no_grad;
  const int rank = optimizer_->process_group().rank();
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    if (!unit.gathered) continue;
    if (unit.gather) wait_gather(u);
    if (writeback) {
      const ShardBucket& b = optimizer_->layout().buckets()[unit.bucket];
      local_chunk(unit).copy_(unit.flat.narrow(0, int64_t(rank) * b.chunk, b.chunk));
    }
    release(u);
  }
}

optim::NamedTensors FullyShardedDataParallel::full_state_dict() {
  NoGradGuard no_grad;
  const bool keep = optimizer_->process_group().rank() == 0;
  optim::NamedTensors state = model_->state_dict();
  if (optimizer_->keeps_master_weights()) {  // the f32 master weights, not their 16-bit rounding
    state = with_master_weights(*optimizer_, std::move(state));  // collective
    if (!keep) return {};
    for (auto& entry : state)
      if (entry.second.storage()->nbytes() > 0) entry.second = entry.second.clone();
    return state;
  }
  std::vector<Tensor> out(state.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const bool was = units_[u].gathered && !units_[u].gather;
    wait_gather(u);
    for (size_t k = 0; k < state.size(); ++k)
      if (keep && state[k].second.storage() == units_[u].storage) out[k] = state[k].second.clone();
    if (!was) release(u);
  }
  optim::NamedTensors result;
  if (!keep) return result;
  for (size_t k = 0; k < state.size(); ++k)
    result.emplace_back(state[k].first, out[k].defined() ? out[k] : state[k].second.clone());
  return result;
}

}  // namespace kiln::dist
