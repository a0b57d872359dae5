// ShardedReducer: per-bucket reduce-scatter into the ShardedOptimizer's local gradient, launched
// from the parameters' hooks in bucket order. See Note [ZeRO-2 gradients].
#include <kiln/parallel/sharded_reducer.h>

#include <cstdio>
#include <sstream>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/parallel/broadcast.h>

namespace kiln::dist {

std::shared_ptr<ShardedReducer> ShardedReducer::create(std::shared_ptr<ShardedOptimizer> optimizer,
                                                       std::shared_ptr<nn::Module> module) {
  std::shared_ptr<ShardedReducer> r(new ShardedReducer(std::move(optimizer), std::move(module)));
  std::weak_ptr<ShardedReducer> weak = r;
  for (size_t i = 0; i < r->params_.size(); ++i)
    autograd::register_post_accumulate_grad_hook(r->params_[i], [weak, i](const Tensor&) {
      if (auto self = weak.lock()) self->on_grad_ready(i);
    });
  return r;
}

ShardedReducer::ShardedReducer(std::shared_ptr<ShardedOptimizer> optimizer, std::shared_ptr<nn::Module> module)
    : optimizer_(std::move(optimizer)), module_(std::move(module)) {
  KILN_CHECK(optimizer_ != nullptr, "ShardedReducer: the optimizer is null");
  params_ = optimizer_->flat_parameters();
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].requires_grad(), "ShardedReducer: parameter ", i,
               " of the optimizer does not require grad; ZeRO-2 reduces every parameter it shards");
  const size_t buckets = optimizer_->layout().buckets().size();
  pending_.assign(buckets, 0);
  flats_.assign(buckets, Tensor());
  works_.assign(buckets, nullptr);
  ready_.assign(params_.size(), false);
  broadcast_from_rank0(optimizer_->process_group(), params_);
  broadcast_buffers();
  optimizer_->use_local_grad(true);
}

ShardedReducer::~ShardedReducer() {
  for (size_t b = 0; b < works_.size(); ++b) {
    if (!works_[b]) continue;
    try {
      works_[b]->wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: ShardedReducer: bucket %zu's reduce_scatter failed: %s\n", b, e.what());
    }
  }
}

void ShardedReducer::broadcast_buffers() {
  if (module_) broadcast_from_rank0(optimizer_->process_group(), module_->buffers());
}

void ShardedReducer::on_grad_ready(size_t i) {
  if (!require_sync_) return;  // no_sync: .grad accumulates unsharded
  const auto& buckets = optimizer_->layout().buckets();
  if (!active_) {
    active_ = true;
    ready_.assign(params_.size(), false);
    next_launch_ = 0;
    launch_order_.clear();
    for (size_t b = 0; b < buckets.size(); ++b) pending_[b] = buckets[b].params.size();
  }
  KILN_CHECK_DIST(!ready_[i], "ShardedReducer: parameter ", i, " got its gradient twice in one synced backward; "
                  "run one backward per synced step (no_sync for the others) and call finish() between steps");
  ready_[i] = true;
  --pending_[optimizer_->layout().bucket_of(i)];
  while (next_launch_ < buckets.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void ShardedReducer::launch(size_t b) {
  NoGradGuard no_grad;
  const ShardBucket& bucket = optimizer_->layout().buckets()[b];
  ProcessGroup& group = optimizer_->process_group();
  // At most two flat buffers alive (DeepSpeed's double-buffered reduce bucket, FSDP's rule): the
  // oldest reduce-scatter in flight is waited for, and its buffer freed, before a third is made.
  if (in_flight_.size() >= 2) {
    const size_t oldest = in_flight_.front();
    in_flight_.erase(in_flight_.begin());
    works_[oldest]->wait();  // a failure surfaces here, inside backward, naming the bucket
    works_[oldest] = nullptr;
    flats_[oldest] = Tensor();
  }
  const Tensor& first = params_[bucket.params.front()];
  // In the local gradient's dtype: the policy's reduce_dtype (Note [Master weights]), else the parameters'.
  const DType dtype = optimizer_->local_grad().dtype();
  Tensor flat = zeros({bucket.chunk * group.size()}, TensorOptions(dtype).device(first.device()));
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const Tensor& p = params_[bucket.params[k]];
    flat.narrow(0, bucket.offsets[k], p.numel()).copy_(p.grad().reshape({-1}));
    p.set_grad(Tensor());  // the full gradient is released: only the shard stays
  }
  Tensor out = optimizer_->local_grad().narrow(0, bucket.local_offset, bucket.chunk);
  flats_[b] = flat;
  works_[b] = group.reduce_scatter(out, flat, AllreduceOptions().op(ReduceOp::sum));
  in_flight_.push_back(b);
  launch_order_.push_back(b);
  ++launched_total_;
}

void ShardedReducer::finish() {
  if (!require_sync_ || !active_) return;
  std::ostringstream missing;
  size_t count = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) missing << (count++ ? ", " : "") << i;
  std::string error;
  for (size_t b = 0; b < works_.size(); ++b) {
    if (!works_[b]) continue;
    try {
      works_[b]->wait();
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
    works_[b] = nullptr;
    flats_[b] = Tensor();
  }
  in_flight_.clear();
  active_ = false;
  KILN_CHECK_DIST(error.empty(), "ShardedReducer: a reduce_scatter failed: ", error);
  KILN_CHECK_DIST(count == 0, "ShardedReducer: ", count, " parameter(s) got no gradient in this synced backward "
                  "(flat indices ", missing.str(), "); ZeRO-2 needs every sharded parameter in every loss, or "
                  "requires_grad_(false) on the unused ones before building the optimizer");
  const int world = optimizer_->process_group().size();
  if (world > 1) {
    NoGradGuard no_grad;
    ops::mul_(optimizer_->local_grad(), 1.0 / world);  // DDP's sum then multiply (reducer.cpp)
  }
  optimizer_->set_local_grad_ready(true);
}

}  // namespace kiln::dist
