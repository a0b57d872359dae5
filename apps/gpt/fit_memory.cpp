// train_gpt --fit-memory (fit_memory.h): candidates planned by dist::plan_memory, the accumulation
// term the planner's single micro-step leaves out, the choice, and how it is printed.
#include "gpt/fit_memory.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include <kiln/core/error.h>

#include "gpt/memory_plan.h"
#include "gpt/model_flags.h"

namespace kiln::apps {

namespace {

constexpr double kGiB = double(int64_t(1) << 30);

std::string format_bytes(int64_t bytes) {
  char buf[32];
  const double b = double(bytes);
  if (b >= kGiB) std::snprintf(buf, sizeof buf, "%.2f GiB", b / kGiB);
  else if (b >= double(1 << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1 << 20));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

const char* peak_moment(const FitMemoryPlan& p) {
  const int64_t start = p.memory.start_of_backward + p.accumulated_gradients;
  if (p.peak == start) return "start of backward";
  return p.peak == p.memory.end_of_backward ? "end of backward" : "optimizer step";
}

std::string describe_candidate(const FitMemoryPlan& p) {
  return detail::str_cat("micro-batch ", p.micro_batch, ", grad accum ", p.grad_accum, ", recompute ",
                         models::gpt_recompute_name(p.recompute));
}

}  // namespace

std::vector<models::GPTRecompute> recompute_modes_by_cost(const models::GPTConfig& config, int64_t seq_len) {
  // Forward FLOPs re-run per token and layer: attention's q/k/v and projection GEMMs (8C^2) and its
  // T-long products (4TC); the MLP's two 4C-wide GEMMs (16C^2); block re-runs both.
  const double c = double(config.n_embd), t = double(seq_len);
  const bool attention_first = 8 * c * c + 4 * t * c <= 16 * c * c;
  if (attention_first)
    return {models::GPTRecompute::none, models::GPTRecompute::attention, models::GPTRecompute::mlp,
            models::GPTRecompute::block};
  return {models::GPTRecompute::none, models::GPTRecompute::mlp, models::GPTRecompute::attention,
          models::GPTRecompute::block};
}

// Note [Accumulated gradients]
// The planner models one micro-step. With grad_accum > 1 the micro-steps after the first run while
// the earlier ones' gradients wait unsharded in .grad (DDP's no_sync; ZeRO-2 and FSDP accumulate the
// same way, Note [ZeRO-2 gradients], Note [FSDP gradient accumulation]): a full gradient of every
// parameter in the parameters' dtype joins the start of backward. Under none/zero1 that is the plan's
// full_gradients (0 with bucket views, where the buckets accumulate). The end of backward keeps its
// value: none/zero1 count .grad there already, and ZeRO-2 and FSDP free each bucket's or unit's .grad
// as its reduce-scatter buffer is made, so the .grad not yet reduced and the buffers already made add
// up to about what the plan counts. Checked against the CPU allocator in tests/apps/gpt/test_fit_memory.cpp.
FitMemoryPlan plan_gpt_step(const FitMemoryOptions& o, int64_t micro_batch, models::GPTRecompute recompute) {
  const int world = o.plan_.world_size();
  KILN_CHECK(world >= 1 && o.global_batch_ % world == 0, "--fit-memory: the global batch of ", o.global_batch_,
             " sequences does not split over ", world, " ranks");
  const int64_t per_rank = o.global_batch_ / world;
  KILN_CHECK(micro_batch >= 1 && per_rank % micro_batch == 0, "--fit-memory: micro-batch ", micro_batch,
             " does not divide the per-rank batch of ", per_rank, " sequences");
  const DType param_dtype = o.plan_.mixed_precision().param_dtype();
  const models::GPTMemoryOptions step =
      gpt_memory_options(o.config_, o.cuda_, o.amp_, recompute, o.fused_head_, param_dtype);
  const dist::MemoryPlanModel model = gpt_memory_plan_model(o.config_, micro_batch, o.seq_len_, step);
  FitMemoryPlan p;
  p.micro_batch = micro_batch;
  p.grad_accum = per_rank / micro_batch;
  p.recompute = recompute;
  p.memory = dist::plan_memory(model, o.plan_);
  if (p.grad_accum > 1) {
    int64_t params = 0;
    for (int64_t n : model.param_numels) params += n;
    const dist::Sharding mode = o.plan_.sharding();
    p.accumulated_gradients = mode == dist::Sharding::none || mode == dist::Sharding::zero1
                                  ? p.memory.full_gradients
                                  : int64_t(dtype_size(param_dtype)) * params;
  }
  p.peak = std::max({p.memory.start_of_backward + p.accumulated_gradients, p.memory.end_of_backward,
                     p.memory.optimizer_step});
  return p;
}

FitMemoryPlan fit_gpt_memory(const FitMemoryOptions& o) {
  KILN_CHECK(o.budget_bytes_ > 0, "--fit-memory: the budget must be positive, got ", o.budget_bytes_, " bytes");
  KILN_CHECK(o.global_batch_ >= 1 && o.seq_len_ >= 1, "--fit-memory: needs a global batch and a sequence length, got ",
             o.global_batch_, " and ", o.seq_len_);
  const int world = o.plan_.world_size();
  KILN_CHECK(world >= 1 && o.global_batch_ % world == 0, "--fit-memory: the global batch of ", o.global_batch_,
             " sequences does not split over ", world, " ranks");
  const std::vector<models::GPTRecompute> modes =
      o.recompute_modes_.empty() ? recompute_modes_by_cost(o.config_, o.seq_len_) : o.recompute_modes_;
  const int64_t per_rank = o.global_batch_ / world;
  FitMemoryPlan smallest;
  for (int64_t b = per_rank; b >= 1; --b) {
    if (per_rank % b != 0) continue;
    for (models::GPTRecompute mode : modes) {
      FitMemoryPlan p = plan_gpt_step(o, b, mode);
      if (p.peak <= o.budget_bytes_) return p;
      if (smallest.micro_batch == 0 || p.peak < smallest.peak) smallest = std::move(p);
    }
  }
  std::string tried;
  for (models::GPTRecompute mode : modes)
    tried += std::string(tried.empty() ? "" : ", ") + models::gpt_recompute_name(mode);
  KILN_FAIL("--fit-memory ", format_bytes(o.budget_bytes_), ": no plan for ", o.global_batch_,
             " sequences per step (world ", world, ": ", per_rank, " per rank; sharding ",
             dist::sharding_name(o.plan_.sharding()), "; recompute tried: ", tried,
             ") fits; the smallest predicted peak per rank is ", format_bytes(smallest.peak), " (",
             describe_candidate(smallest), "): raise the budget, shard more (--sharding zero2 or full), "
             "or shorten --seq-len");
}

std::string describe_fit(const FitMemoryPlan& p, const FitMemoryOptions& o) {
  const dist::MemoryPlan& m = p.memory;
  std::vector<std::pair<const char*, int64_t>> terms = {
      {"parameters", m.parameters}, {"gradient shard", m.gradients}, {"master weights", m.master_weights},
      {"optimizer states", m.optimizer_states}, {"DDP buckets", m.buckets}, {"full gradients", m.full_gradients},
      {"accumulated gradients", p.accumulated_gradients}, {"reduce-scatter buffers", m.reduce_buffers},
      {"FSDP gathered", m.gathered}, {"ZeRO all-gather", m.parameter_gather}, {"weight copies", m.weight_copies},
      {"activations", m.activations}, {"head", m.head}, {"backward transient", m.transient}};
  std::stable_sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string by_term;
  for (size_t i = 0; i < terms.size() && terms[i].second > 0; ++i)
    by_term += detail::str_cat(i ? ", " : "", terms[i].first, " ", format_bytes(terms[i].second));
  const int world = o.plan_.world_size();
  return detail::str_cat(
      "fit-memory: micro-batch ", p.micro_batch, " x grad accum ", p.grad_accum, " x world ", world, " = ",
      p.micro_batch * p.grad_accum * world, " sequences per step, recompute ", models::gpt_recompute_name(p.recompute),
      "\nfit-memory: predicted peak per rank ", format_bytes(p.peak), " at the ", peak_moment(p), " (budget ",
      format_bytes(o.budget_bytes_), "; sharding ", dist::sharding_name(o.plan_.sharding()), ", after a step ",
      format_bytes(m.after_step()), ")\nfit-memory: by term (each at its largest): ", by_term);
}

void add_fit_memory_flag(CLI::App& app, FitMemoryFlags& flags) {
  app.add_option("--fit-memory", flags.gib, "GiB per rank: choose the largest micro-batch (-b), the recompute mode "
                 "(none first; --recompute given fixes it) and the gradient accumulation that keep the global batch "
                 "(--total-batch-tokens, or B*T*world size) within this predicted peak (the memory planner, as "
                 "bench_gpt --estimate-memory --sharding), print the plan and train with it (0: off)")
      ->check(CLI::NonNegativeNumber);
  flags.recompute = app.get_option("--recompute");
}

void apply_fit_memory(const FitMemoryFlags& flags, const models::GPTConfig& config, int64_t seq_len, const Job& job,
                      DType amp, const std::string& fused_head, const ParallelFlags& parallel, int64_t& batch_size,
                      int64_t& total_batch_tokens, std::string& recompute) {
  const int64_t world = job.world;
  if (total_batch_tokens == 0) total_batch_tokens = batch_size * seq_len * world;
  KILN_CHECK(total_batch_tokens % (seq_len * world) == 0, "--fit-memory: --total-batch-tokens ", total_batch_tokens,
             " is not a multiple of T*world size = ", seq_len, "*", world);
  // Alone (no process group) the Trainer trains every mode as none.
  const dist::Sharding mode = job.group ? dist::parse_sharding(parallel.sharding) : dist::Sharding::none;
  FitMemoryOptions o = FitMemoryOptions()
                           .config(config)
                           .global_batch(total_batch_tokens / seq_len)
                           .seq_len(seq_len)
                           .budget_bytes(int64_t(flags.gib * kGiB))
                           .cuda(job.device.is_cuda())
                           .amp(amp)
                           .fused_head(models::uses_fused_head(parse_fused_head(fused_head), job.device))
                           .plan(dist::MemoryPlanOptions().sharding(mode).world_size(job.world)
                                     .bucket_cap_mb(parallel.bucket_cap_mb)
                                     .mixed_precision(mixed_precision_policy(parallel)));
  if (flags.recompute && flags.recompute->count() > 0) o.recompute_modes({parse_recompute_flag(recompute)});
  const FitMemoryPlan plan = fit_gpt_memory(o);
  batch_size = plan.micro_batch;
  recompute = models::gpt_recompute_name(plan.recompute);
  if (job.main()) std::printf("%s\n", describe_fit(plan, o).c_str());
}

}  // namespace kiln::apps
