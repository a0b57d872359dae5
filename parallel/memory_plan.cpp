// The memory planner (memory_plan.h): ZeRO's model-state rule, and one rank's bytes by term in each
// sharding mode, laid out by the same bucket and shard arithmetic the Trainer's modes use.
// See Note [Memory plan].
#include <kiln/parallel/memory_plan.h>

#include <algorithm>

#include <kiln/core/error.h>
#include <kiln/core/storage.h>
#include <kiln/core/tensor.h>
#include <kiln/parallel/bucket.h>
#include <kiln/parallel/shard_layout.h>

namespace kiln::dist {

const char* zero_stage_name(ZeroStage s) {
  switch (s) {
    case ZeroStage::baseline: return "baseline";
    case ZeroStage::os: return "P_os";
    case ZeroStage::os_g: return "P_os+g";
    case ZeroStage::os_g_p: return "P_os+g+p";
  }
  return "?";
}

double zero_model_states_bytes(double psi, ZeroStage stage, int64_t n, double k) {
  KILN_CHECK(n >= 1 && psi >= 0 && k >= 0, "zero_model_states_bytes: needs psi >= 0, k >= 0 and n >= 1, got psi ", psi,
             ", k ", k, ", n ", n);
  const double nd = double(n);
  switch (stage) {
    case ZeroStage::baseline: return (2 + 2 + k) * psi;
    case ZeroStage::os: return 2 * psi + 2 * psi + k * psi / nd;
    case ZeroStage::os_g: return 2 * psi + (2 + k) * psi / nd;
    case ZeroStage::os_g_p: return (2 + 2 + k) * psi / nd;
  }
  return 0;
}

int64_t MemoryPlan::peak() const { return std::max({start_of_backward, end_of_backward, optimizer_step}); }

namespace {

// A tensor with a shape and no bytes: what the bucket and shard arithmetic reads (numel, dtype,
// device), so a 1.3B model is laid out without allocating it.
Tensor shape_only(int64_t numel, DType dtype) {
  return Tensor(std::make_shared<TensorImpl>(Storage::wrap(nullptr, 0, Device::cpu()), dtype, Shape{numel},
                                             Strides{1}, 0));
}

// The two consecutive buckets' padded sizes (elements) at their largest: what is alive when each
// transfer overlaps the next (ZeRO's step all-gather, FSDP's prefetch); one bucket alone when two.
int64_t largest_pair(const std::vector<int64_t>& sizes, bool pairs) {
  int64_t best = 0;
  for (size_t i = 0; i < sizes.size(); ++i)
    best = std::max(best, sizes[i] + (pairs && i + 1 < sizes.size() ? sizes[i + 1] : 0));
  return best;
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanModel& model, const MemoryPlanOptions& o) {
  const int n = o.world_size_;
  KILN_CHECK(n >= 1, "plan_memory: world_size must be >= 1, got ", n);
  KILN_CHECK(!model.param_numels.empty(), "plan_memory: the model has no parameters");
  KILN_CHECK(o.optimizer_buffers_ >= 0, "plan_memory: optimizer_buffers must be >= 0, got ", o.optimizer_buffers_);
  const MixedPrecisionPolicy& policy = o.mixed_precision_;
  const DType param_dtype = policy.param_dtype();
  KILN_CHECK(param_dtype == DType::f32 || policy.keeps_16bit_parameters(),
             "plan_memory: param_dtype must be f32, bf16 or f16, got ", param_dtype);
  const int64_t pb = int64_t(dtype_size(param_dtype));                        // a parameter, and its gradient
  const int64_t rb = int64_t(dtype_size(policy.effective_reduce_dtype()));   // a reduced gradient
  const int64_t gb = pb;
  const int64_t state = 4 * int64_t(o.optimizer_buffers_);                   // f32 moments per element
  std::vector<Tensor> tensors;
  int64_t p = 0;
  for (int64_t numel : model.param_numels) {
    KILN_CHECK(numel >= 0, "plan_memory: a parameter has ", numel, " elements");
    tensors.push_back(shape_only(numel, param_dtype));
    p += numel;
  }

  MemoryPlan m;
  // Note [Master weights]: autocast finds the GEMM weights 16-bit already and copies none.
  const bool master = policy.keeps_16bit_parameters();
  m.weight_copies = master ? 0 : model.step.weight_copies;
  m.activations = model.step.activations;
  m.head = model.step.head;
  m.transient = std::max(model.step.head_transient, model.step.block_transient);
  m.end_transient = model.step.end_transient;
  int64_t head_extra = 0, block_extra = 0, end_extra = 0, step_extra = 0;  // beyond after_step(), per moment
  int64_t scatter_extra = 0;  // FSDP: the first unit's gradients and buffer, in place of the block transient

  const Sharding mode = o.sharding_;
  const size_t first_cap = mib_to_bytes(o.first_bucket_cap_mb_), cap = mib_to_bytes(o.bucket_cap_mb_);
  if (mode == Sharding::none || mode == Sharding::zero1) {
    m.parameters = pb * p;
    const bool ddp = n > 1;  // the Trainer builds DDP only with more than one rank
    m.buckets = ddp ? rb * p : 0;
    const bool views = ddp && o.gradient_as_bucket_view_ && rb == gb;  // Note [Bucket views]
    m.full_gradients = views ? 0 : gb * p;
    if (mode == Sharding::none) {
      m.master_weights = policy.keeps_16bit_parameters() ? 4 * p : 0;
      m.optimizer_states = state * p;
    } else {
      const ShardLayout layout(tensors, 0, n, first_cap, cap);
      std::vector<int64_t> whole;
      for (const ShardBucket& b : layout.buckets()) whole.push_back(b.chunk * n);
      m.master_weights = 4 * layout.local_numel();
      m.optimizer_states = state * layout.local_numel();
      m.parameter_gather = pb * largest_pair(whole, true);
    }
    end_extra = m.full_gradients;
    // Master weights: the step's f32 gradient copy of what the rank steps, and ZeRO-1's 16-bit shard
    // for the all-gathers.
    const int64_t stepped = mode == Sharding::none ? p : m.master_weights / 4;
    const int64_t master_step = master ? 4 * stepped + (mode == Sharding::zero1 ? pb * stepped : 0) : 0;
    step_extra = m.full_gradients + m.parameter_gather + master_step;
  } else if (mode == Sharding::zero2) {
    const ShardLayout layout(tensors, 0, n, first_cap, cap);
    std::vector<int64_t> whole;
    for (const ShardBucket& b : layout.buckets()) whole.push_back(b.chunk * n);
    m.parameters = pb * p;
    m.gradients = rb * layout.local_numel();
    m.master_weights = 4 * layout.local_numel();
    m.optimizer_states = state * layout.local_numel();
    m.reduce_buffers = rb * largest_pair(whole, true);              // Note [ZeRO-2 gradients]: two in flight
    m.full_gradients = gb * layout.buckets().back().numel;          // the last bucket's, as its buffer is made
    m.parameter_gather = pb * largest_pair(whole, true);
    end_extra = m.reduce_buffers + m.full_gradients;
    step_extra = m.parameter_gather + (master ? (4 + pb) * layout.local_numel() : 0);  // as ZeRO-1's
  } else {
    // FSDP: the wrapped units in forward order, then the root (Note [FSDP schedule]).
    std::vector<std::vector<size_t>> buckets = model.units;
    std::vector<bool> taken(tensors.size(), false);
    for (const auto& u : buckets)
      for (size_t i : u) {
        KILN_CHECK(i < tensors.size() && !taken[i], "plan_memory: unit parameter ", i, " is out of range or in two units");
        taken[i] = true;
      }
    std::vector<size_t> root;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!taken[i]) root.push_back(i);
    const bool has_root = !root.empty();
    if (has_root) buckets.push_back(root);
    const size_t wrapped = model.units.size();
    const ShardLayout layout(tensors, 0, n, buckets);
    std::vector<int64_t> unit_whole;
    int64_t unit_grads = 0;
    for (size_t u = 0; u < wrapped; ++u) {
      unit_whole.push_back(layout.buckets()[u].chunk * n);
      unit_grads = std::max(unit_grads, layout.buckets()[u].numel);
    }
    const int64_t root_whole = has_root ? layout.buckets().back().chunk * n : 0;
    const int64_t root_numel = has_root ? layout.buckets().back().numel : 0;
    const int64_t largest_unit = largest_pair(unit_whole, false);
    m.parameters = policy.keeps_16bit_parameters() ? pb * layout.local_numel() : 0;
    m.gradients = rb * layout.local_numel();
    m.master_weights = 4 * layout.local_numel();
    m.optimizer_states = state * layout.local_numel();
    // The first block's backward (the last unit): the root (gathered from prepare_forward to its own
    // backward), the unit and the one prefetched. The gradients the head gave the root are in the
    // head's term (the chunked head keeps its dW) or its transient. When the unit's gradients are
    // final they and their reduce-scatter buffer take the place of the block's transient; deeper in
    // backward a second buffer may be in flight (launch_reduce_scatter waits for the oldest of two),
    // while a finished unit's activations are gone.
    const int64_t pair = largest_pair(unit_whole, o.prefetch_);
    const int64_t block_gathered = pb * (root_whole + pair);
    const int64_t block_buffers = rb * largest_pair(unit_whole, true);
    // The end: the root's gradients, its reduce-scatter buffer and the last unit's still in flight.
    const int64_t end_buffers = rb * (root_whole + largest_unit);
    m.gathered = block_gathered;
    m.reduce_buffers = std::max(block_buffers, end_buffers);
    m.full_gradients = gb * std::max(root_numel, unit_grads);
    head_extra = pb * root_whole;
    block_extra = block_gathered;
    scatter_extra = block_gathered + gb * unit_grads + rb * largest_unit;
    end_extra = pb * root_whole + gb * root_numel + end_buffers;
    step_extra = master ? 4 * layout.local_numel() : 0;  // the step's f32 gradient copy
  }

  const int64_t kept = m.after_step();
  const int64_t forward = m.activations + m.weight_copies + m.head;
  m.start_of_backward = kept + forward + std::max({model.step.head_transient + head_extra,
                                                   model.step.block_transient + block_extra, scatter_extra});
  m.end_of_backward = kept + end_extra + m.end_transient;
  m.optimizer_step = kept + step_extra;
  return m;
}

}  // namespace kiln::dist
