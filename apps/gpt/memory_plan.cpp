// bench_gpt --estimate-memory (memory_plan.h): the GPT's terms handed to the planner, and the tables.
#include "gpt/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "common/dtype_flag.h"

namespace kiln::apps {

namespace {

const std::vector<DType> kParamDtypes = {DType::f32, DType::bf16, DType::f16};

}  // namespace

models::GPTMemoryOptions gpt_memory_options(const models::GPTConfig& config, bool device_is_cuda, DType amp,
                                           models::GPTRecompute recompute, bool fused_head, DType param_dtype) {
  const int64_t d = config.n_embd / config.n_head;
  const bool sixteen = amp != DType::f32 || dtype_size(param_dtype) == 2;
  models::GPTMemoryOptions o;
  o.autocast = amp != DType::f32;
  o.flash_attention = device_is_cuda && sixteen && (d == 64 || d == 128);
  o.recompute = recompute;
  o.fused_head = fused_head;
  o.param_dtype = param_dtype;
  return o;
}

dist::MemoryPlanModel gpt_memory_plan_model(const models::GPTConfig& config, int64_t batch, int64_t seq,
                                            const models::GPTMemoryOptions& options) {
  const models::GPTMemoryEstimate est = models::estimate_gpt_training_memory(config, batch, seq, options);
  models::GPTParameterLayout layout = models::gpt_parameter_layout(config);
  dist::MemoryPlanModel m;
  m.param_numels = std::move(layout.numels);
  m.units = std::move(layout.blocks);
  m.step.activations = est.activations;
  m.step.weight_copies = est.weight_copies;
  m.step.head = est.head;
  m.step.head_transient = est.head_transient;
  m.step.block_transient = est.block_transient;
  m.step.end_transient = est.end_transient;
  return m;
}

void print_memory_formula(const std::vector<BenchRow>& rows, bool cuda, DType amp, models::GPTRecompute recompute,
                          models::GPTFusedHead fused_head) {
  const bool fused = models::uses_fused_head(fused_head, cuda ? Device::cuda(0) : Device::cpu());
  for (const BenchRow& r : rows) {
    const models::GPTMemoryEstimate est = models::estimate_gpt_training_memory(
        r.bc.config, r.b, r.t, gpt_memory_options(r.bc.config, cuda, amp, recompute, fused));
    const double g = double(int64_t(1) << 30);
    std::printf("%s B=%lld T=%lld recompute %s, head %s: memory formula %.2f GiB after forward (weights+AdamW %.2f, "
                "16-bit weight copies %.2f, activations %.2f, head %.2f), peak %.2f GiB with gradients and "
                "transients\n",
                r.bc.name.c_str(), (long long)r.b, (long long)r.t, models::gpt_recompute_name(recompute),
                fused ? "chunked" : "whole logits", est.after_forward() / g, (est.parameters + est.optimizer) / g,
                est.weight_copies / g, est.activations / g, est.head / g, est.peak() / g);
  }
}

void add_memory_plan_flags(CLI::App& app, MemoryPlanFlags& flags) {
  app.add_option("--param-dtype", flags.param_dtype, "with --estimate-memory --sharding: the mixed-precision policy's "
                 "parameter dtype (f32: today's f32 parameters under autocast; bf16/f16: 16-bit parameters, f32 master "
                 "weights for the rank's shard only)")->transform(dtype_flag(kParamDtypes))->capture_default_str();
  app.add_option("--reduce-dtype", flags.reduce_dtype, "with --estimate-memory --sharding: the policy's gradient "
                 "reduction dtype (default: --param-dtype)")->transform(dtype_flag(kParamDtypes));
}

dist::MixedPrecisionPolicy parse_policy(const MemoryPlanFlags& flags) {
  dist::MixedPrecisionPolicy p;
  p.param_dtype(parse_dtype_flag(flags.param_dtype, kParamDtypes));
  if (!flags.reduce_dtype.empty()) p.reduce_dtype(parse_dtype_flag(flags.reduce_dtype, kParamDtypes));
  return p;
}

void print_memory_plan(const std::vector<BenchRow>& rows, bool cuda, DType amp, models::GPTRecompute recompute,
                       models::GPTFusedHead fused_head, const std::vector<dist::Sharding>& modes,
                       const dist::MemoryPlanOptions& options) {
  const bool fused = models::uses_fused_head(fused_head, cuda ? Device::cuda(0) : Device::cpu());
  const dist::MixedPrecisionPolicy& policy = options.mixed_precision();
  const double gib = double(int64_t(1) << 30);
  for (const BenchRow& r : rows) {
    const dist::MemoryPlanModel model = gpt_memory_plan_model(
        r.bc.config, r.b, r.t, gpt_memory_options(r.bc.config, cuda, amp, recompute, fused, policy.param_dtype()));
    std::vector<dist::MemoryPlan> plans;
    for (dist::Sharding s : modes) plans.push_back(dist::plan_memory(model, dist::MemoryPlanOptions(options).sharding(s)));
    double params = 0;
    for (int64_t n : model.param_numels) params += double(n);
    const std::string compute = amp == DType::f32 ? "f32" : std::string(dtype_name(amp)) + " autocast";
    std::printf("\n%s (%s params) B=%lld T=%lld per rank, %s, %s, recompute %s, head %s; policy param_dtype %s, "
                "reduce_dtype %s; world %d; AdamW; GiB per rank (Note [Memory plan], parallel/memory_plan.h)\n",
                r.bc.name.c_str(), models::format_parameter_count(int64_t(params)).c_str(), (long long)r.b,
                (long long)r.t, cuda ? "cuda" : "cpu", compute.c_str(),
                models::gpt_recompute_name(recompute), fused ? "chunked" : "whole logits",
                dtype_name(policy.param_dtype()), dtype_name(policy.effective_reduce_dtype()), options.world_size());
    std::printf("%-28s", "term");
    for (dist::Sharding s : modes) std::printf(" %10s", dist::sharding_name(s));
    std::printf("\n");
    auto row = [&](const char* name, int64_t dist::MemoryPlan::*field) {
      std::printf("%-28s", name);
      for (const dist::MemoryPlan& p : plans) std::printf(" %10.3f", double(p.*field) / gib);
      std::printf("\n");
    };
    row("parameters", &dist::MemoryPlan::parameters);
    row("gradients (shard)", &dist::MemoryPlan::gradients);
    row("master weights", &dist::MemoryPlan::master_weights);
    row("optimizer states", &dist::MemoryPlan::optimizer_states);
    row("DDP buckets", &dist::MemoryPlan::buckets);
    std::printf("%-28s", "after a step");
    for (const dist::MemoryPlan& p : plans) std::printf(" %10.3f", double(p.after_step()) / gib);
    std::printf("\n%-28s", "  bytes/param");
    for (const dist::MemoryPlan& p : plans) std::printf(" %10.2f", double(p.after_step()) / params);
    std::printf("\n");
    row("full gradients (step)", &dist::MemoryPlan::full_gradients);
    row("reduce-scatter buffers", &dist::MemoryPlan::reduce_buffers);
    row("FSDP gathered + prefetch", &dist::MemoryPlan::gathered);
    row("ZeRO step all-gather", &dist::MemoryPlan::parameter_gather);
    row("weight copies (autocast)", &dist::MemoryPlan::weight_copies);
    row("activations", &dist::MemoryPlan::activations);
    row("head", &dist::MemoryPlan::head);
    row("backward transient", &dist::MemoryPlan::transient);
    row("end transient", &dist::MemoryPlan::end_transient);
    std::printf("%-28s", "peak");
    for (const dist::MemoryPlan& p : plans) std::printf(" %10.3f", double(p.peak()) / gib);
    std::printf("\n%-28s", "  at");
    for (const dist::MemoryPlan& p : plans)
      std::printf(" %10s", p.peak() == p.start_of_backward ? "bwd start" : p.peak() == p.end_of_backward ? "bwd end" : "opt step");
    std::printf("\n");
  }
}

}  // namespace kiln::apps
