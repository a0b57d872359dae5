// bench_gpt: one GPT training step (forward, loss, backward, AdamW step, zero_grad) in Kiln and, in
// the same run, in PyTorch (apps/bench_gpt.py: the same model from tests/parity/torch_gpt.py, the
// same config, batch, dtype and timing rule), side by side: ms/step, tokens/s, MFU, peak device
// memory and the Kiln/PyTorch time ratio (below 1.0: Kiln is faster).
//   --device cpu  (default): f32, gpt-tiny and gpt-10m, PyTorch eager.
//   --device cuda: bf16 autocast, gpt2-124m (B=16, T=1024) and gpt-1.3b (B=8, T=2048), PyTorch
//                  eager (SDPA attention, fused AdamW) and torch.compile, each its own process.
//   --ddp-overhead: Kiln alone, the plain step against the same step through
//                  DistributedDataParallel on a one-rank group, the two models stepped in turn
//                  (issue #6: goal <= 3%).
//   --profile-overhead: Kiln alone, the step with and without a profiling session, and the bound
//                  on the hooks' cost when profiling is off (issue #22: goal <= 1%).
//   --profile FILE --profile-steps A:B: a Chrome trace of the Kiln side's steps A..B-1 of the first
//                  config (warm-up steps count from 0).
//   --sharding none,zero1,zero2,full: Kiln alone, the step through dist::Trainer in each sharding mode on
//                  --world forked CPU ranks (Gloo), next to DDP (none): ms/step and bytes/param.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "bench_util.h"
#include "common/app_main.h"
#include "common/app_script.h"
#include "common/cpu_peak.h"
#include "common/dtype_flag.h"
#include "common/profiling.h"
#include "gpt/bench_profile.h"
#include "gpt/bench_sharding.h"
#include "gpt/bench_sides.h"
#include "gpt/bench_step.h"
#include "gpt/bench_tables.h"
#include "gpt/memory_plan.h"
#include "gpt/mfu.h"
#include "gpt/model_flags.h"

#ifndef KILN_BENCH_GPT_PY
#define KILN_BENCH_GPT_PY ""  // the source tree's bench_gpt.py (apps/CMakeLists.txt)
#endif

using namespace kiln;

namespace {

constexpr double kDdpOverheadGoal = 0.03;  // issue #6
constexpr double kProfilerOffGoal = 0.01;  // issue #22

struct Args {
  std::string device = "cpu", dtype, config, python = "/usr/bin/python3", script;
  std::string attention = "auto";
  std::string json;  // --json: the sides table as JSON too
  std::vector<std::string> torch_modes;
  int threads = 0, rounds = 0, warmup = 2, steps = 10;
  int64_t batch = 0, seq = 0;
  bool no_torch = false, ddp_overhead = false, bucket_view = false, profile_overhead = false, estimate_memory = false;
  bool cuda_graph = false;
  std::string recompute = "none", fused_head = "auto";
  std::vector<std::string> sharding;  // --sharding: modes to time on --world ranks
  int world = 2;
  double peak_flops = 0;
  apps::ProfileFlags profile;
  apps::MemoryPlanFlags plan;  // --estimate-memory --sharding: the policy
};

// --sharding: each mode on a.world forked CPU ranks, DDP (none) first as the reference row.
int run_sharding(const Args& a) {
  KILN_CHECK(a.device == "cpu", "--sharding runs forked CPU ranks (Gloo); GPU rows need one process per GPU "
             "under kiln-run (train_gpt --sharding), or --estimate-memory for the planner's");
  KILN_CHECK(a.world <= 16, "--sharding forks --world CPU ranks: at most 16, got ", a.world);
  apps::ShardingBenchOptions o;
  const apps::BenchConfig bc = apps::named_config(a.config.empty() ? "gpt-tiny" : a.config);
  o.config = bc.config;
  o.batch = a.batch > 0 ? a.batch : 4;
  o.seq = a.seq > 0 ? a.seq : std::min<int64_t>(64, bc.config.block_size);
  o.amp = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  o.warmup = a.warmup, o.steps = a.steps, o.world = a.world;
  o.threads_per_rank = std::max(1, (a.threads > 0 ? a.threads : num_threads()) / a.world);
  std::vector<dist::Sharding> modes;
  for (const std::string& m : a.sharding) modes.push_back(dist::parse_sharding(m));
  std::printf("bench_gpt --sharding: %s, B=%lld T=%lld per rank, %s, world %d (forked CPU ranks, Gloo, %d thread(s) "
              "each); median of %d steps after %d warm-up\n", bc.name.c_str(), (long long)o.batch, (long long)o.seq,
              o.amp == DType::bf16 ? "bf16 autocast" : "f32", o.world, o.threads_per_rank, o.steps, o.warmup);
  std::fflush(stdout);
  apps::print_sharding_table(apps::time_sharding_modes(o, modes));
  return 0;
}

// --json: every row's sides as the table prints them, with the formula's peak, for scripts
// (scripts/gpu_pending.py) that must not parse the table.
void write_sides_json(const std::string& path, const std::vector<apps::BenchRow>& rows, bool cuda, DType amp,
                      models::GPTRecompute recompute, models::GPTFusedHead fused_head) {
  const bool fused = models::uses_fused_head(fused_head, cuda ? Device::cuda(0) : Device::cpu());
  nlohmann::json out = nlohmann::json::array();
  for (const apps::BenchRow& r : rows) {
    nlohmann::json sides = nlohmann::json::array();
    for (const apps::Side& s : r.sides)
      sides.push_back({{"side", s.name}, {"ran", s.ran}, {"ms", s.ran ? s.seconds * 1e3 : 0.0},
                       {"peak_bytes", s.peak_bytes}, {"error", s.error}});
    out.push_back({{"config", r.bc.name}, {"batch", r.b}, {"seq", r.t},
                   {"formula_peak_bytes", models::estimate_gpt_training_memory(r.bc.config, r.b, r.t,
                        apps::gpt_memory_options(r.bc.config, cuda, amp, recompute, fused)).peak()}, {"sides", sides}});
  }
  std::ofstream f(path);
  KILN_CHECK_IO(f.good(), "bench_gpt --json: cannot write ", path);
  f << out.dump(1) << "\n";
  KILN_CHECK_IO(f.good(), "bench_gpt --json: writing ", path, " failed");
}

int run(Args a) {
  if (!a.sharding.empty() && !a.estimate_memory) return run_sharding(a);
  const bool cuda = a.device == "cuda";
  if (a.estimate_memory) {
    std::vector<apps::BenchRow> rows;
    for (const apps::BenchConfig& bc :
         a.config.empty() ? apps::default_configs(cuda) : std::vector{apps::named_config(a.config)})
      rows.push_back(apps::BenchRow{bc, a.batch > 0 ? a.batch : bc.batch, a.seq > 0 ? a.seq : bc.seq, {}});
    const std::string dtype = a.dtype.empty() ? (cuda ? "bf16" : "f32") : a.dtype;
    const DType amp = dtype == "bf16" ? DType::bf16 : DType::f32;
    const auto recompute = apps::parse_recompute_flag(a.recompute);
    if (a.sharding.empty()) {
      apps::print_memory_formula(rows, cuda, amp, recompute, apps::parse_fused_head(a.fused_head));
      return 0;
    }
    std::vector<dist::Sharding> modes;
    for (const std::string& m : a.sharding) modes.push_back(dist::parse_sharding(m));
    apps::print_memory_plan(rows, cuda, amp, recompute, apps::parse_fused_head(a.fused_head), modes,
                            dist::MemoryPlanOptions().world_size(a.world).mixed_precision(apps::parse_policy(a.plan))
                                .gradient_as_bucket_view(a.bucket_view));
    return 0;
  }
  KILN_CHECK(!cuda || cuda::is_available(), "--device cuda: no usable CUDA device (", cuda::build_info(),
             "); use --device cpu");
  if (a.dtype.empty()) a.dtype = cuda ? "bf16" : "f32";
  if (a.rounds == 0) a.rounds = cuda ? 1 : 3;
  if (a.torch_modes.empty()) a.torch_modes = cuda ? std::vector<std::string>{"eager", "compile"}
                                                  : std::vector<std::string>{"eager"};
  if (a.threads > 0) set_num_threads(a.threads);
  const int threads = num_threads();
  const Device device = cuda ? Device::cuda(0) : Device::cpu();
  if (cuda) cuda::set_device(0);
  const DType amp = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  const double peak = a.peak_flops > 0 ? a.peak_flops : apps::device_peak_flops(device, amp, threads);

  std::vector<apps::BenchConfig> configs =
      a.config.empty() ? apps::default_configs(cuda) : std::vector{apps::named_config(a.config)};
  // Two gpt-1.3b models with their optimizer states do not fit one 80 GB device beside the activations.
  if (a.ddp_overhead && cuda && a.config.empty()) configs = {apps::named_config("gpt2-124m")};
  KILN_CHECK(!(a.ddp_overhead && a.profile_overhead), "--ddp-overhead and --profile-overhead are separate runs");
  KILN_CHECK(!a.cuda_graph || (cuda && !a.ddp_overhead && !a.profile_overhead),
             "--cuda-graph needs --device cuda and runs without --ddp-overhead and --profile-overhead");
  KILN_CHECK(!(a.profile_overhead && !a.profile.file.empty()), "--profile-overhead runs its own sessions: drop --profile");
  std::shared_ptr<dist::ProcessGroup> group;
  if (a.ddp_overhead) group = apps::make_single_rank_group(device);
  apps::StepProfiler step_profiler(a.profile, nullptr, device);
  double range_ns = 0;
  if (a.profile_overhead) {
    range_ns = apps::disabled_range_ns();
    std::printf("bench_gpt: profiler overhead: the step with profiling off and on (a session per step), "
                "alternating step by step, median of %d steps each; a disabled range costs %.3f ns\n",
                a.steps * a.rounds, range_ns);
  }

  if (a.ddp_overhead)
    std::printf("bench_gpt: %s %s training step (forward, loss, backward, AdamW, zero_grad) without and with DDP; "
                "%d thread(s); the two alternate step by step, median of %d steps each after %d warm-up\n",
                a.device.c_str(), a.dtype == "bf16" ? "bf16 autocast" : "f32", threads, a.steps * a.rounds, a.warmup);
  else
    std::printf("bench_gpt: %s %s training step (forward, loss, backward, AdamW, zero_grad); %d thread(s); median "
                "of %d steps after %d warm-up, best of %d alternating round(s)\n",
                a.device.c_str(), a.dtype == "bf16" ? "bf16 autocast" : "f32", threads, a.steps, a.warmup, a.rounds);
  if (cuda) std::printf("%s; peak for MFU %.4g FLOP/s\n", cuda::build_info().c_str(), peak);
  else if (a.peak_flops > 0) std::printf("peak for MFU %.4g FLOP/s (--peak-flops)\n", peak);
  else std::printf("peak for MFU: %s\n", apps::cpu_peak(threads).describe().c_str());
  if (!cuda) std::printf("%s\n", cpu::capability_summary().c_str());
  if (!a.no_torch && !a.ddp_overhead && !a.profile_overhead)
    a.script = apps::find_app_script("bench_gpt.py", a.script, KILN_BENCH_GPT_PY);
  const models::GPTRecompute recompute = apps::parse_recompute_flag(a.recompute);
  const models::GPTFusedHead fused_head = apps::parse_fused_head(a.fused_head);
  if (recompute != models::GPTRecompute::none)
    std::printf("activation checkpointing (--recompute %s) on both sides\n", models::gpt_recompute_name(recompute));
  std::printf("Kiln's LM head + cross entropy: %s (--fused-head %s)\n",
              models::uses_fused_head(fused_head, device) ? "chunked" : "whole logits", a.fused_head.c_str());
  if (a.ddp_overhead)
    std::printf("DDP: world size 1, %s process group, bucket_cap_mb 25, gradient_as_bucket_view %s\n",
                group->backend().c_str(), a.bucket_view ? "true" : "false");
  std::fflush(stdout);

  std::vector<apps::BenchRow> rows;
  std::string torch_info;
  for (const apps::BenchConfig& bc : configs) {
    const models::GPTConfig& c = bc.config;
    const int64_t b = a.batch > 0 ? a.batch : bc.batch, t = a.seq > 0 ? a.seq : bc.seq;
    KILN_CHECK(t <= c.block_size, "-T ", t, " exceeds ", bc.name, "'s context ", c.block_size);
    std::printf("%s: n_layer %lld, n_head %lld, n_embd %lld, block %lld, vocab %lld; %s params; B=%lld T=%lld\n",
                bc.name.c_str(), (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd,
                (long long)c.block_size, (long long)c.vocab_size,
                models::format_parameter_count(models::GPT::count_parameters(c)).c_str(), (long long)b, (long long)t);
    std::fflush(stdout);
    apps::BenchStepOptions o;
    o.config = c, o.batch = b, o.seq = t, o.device = device, o.amp = amp, o.warmup = a.warmup, o.steps = a.steps;
    o.gradient_as_bucket_view = a.bucket_view;
    o.recompute = recompute;
    o.fused_head = fused_head;
    o.cuda_graph = a.cuda_graph;
    if (!a.ddp_overhead && !a.profile_overhead) o.profiler = &step_profiler;
    if (a.profile_overhead) {
      o.steps = a.steps * a.rounds;
      apps::BenchStepOptions on = o;
      on.profile_each_step = true;
      std::vector<apps::StepTiming> timed = apps::time_kiln_steps({o, on});
      if (rows.empty()) apps::print_profile_overhead_header();
      apps::print_profile_overhead_row(bc.name, std::to_string(b) + " x " + std::to_string(t), timed[0], timed[1],
                                       range_ns, kProfilerOffGoal);
      rows.push_back(apps::BenchRow{bc, b, t, {}});
      continue;
    }
    apps::BenchRow row{bc, b, t, {apps::Side{a.cuda_graph ? "kiln graph" : "kiln"}}};
    if (a.ddp_overhead) row.sides.push_back(apps::Side{"kiln + DDP"});
    else if (!a.no_torch)
      for (const std::string& m : a.torch_modes) row.sides.push_back(apps::Side{"torch " + m});
    if (a.ddp_overhead) {
      // One model each, stepped in turn (time_kiln_steps): the rounds' steps are pooled.
      o.steps = a.steps * a.rounds;
      apps::BenchStepOptions with_ddp = o;
      with_ddp.ddp_group = group;
      with_ddp.profiler = &step_profiler;  // --profile: the DDP model's steps (its buckets)
      std::vector<apps::StepTiming> timed = apps::time_kiln_steps({o, with_ddp});
      apps::record_kiln(timed[0], row.sides[0]);
      apps::record_kiln(timed[1], row.sides[1]);
      rows.push_back(row);
      continue;
    }
    for (int r = 0; r < a.rounds; ++r) {
      apps::Side& kiln = row.sides[0];
      if (kiln.ran || kiln.error.empty()) apps::record_kiln(apps::time_kiln_step(o), kiln);  // failed before: it would again
      for (size_t s = 1; s < row.sides.size(); ++s) {
        apps::Side& side = row.sides[s];
        if (!side.ran && !side.error.empty()) continue;  // failed before: it would again
        const apps::TorchSideOptions torch{a.python, a.script, a.device, a.dtype, a.attention, a.warmup, a.steps,
                                           models::gpt_recompute_name(recompute)};
        std::string v = apps::run_torch(torch, bc, b, t, a.torch_modes[s - 1], threads, side);
        if (!v.empty()) torch_info = v;
      }
    }
    rows.push_back(row);
  }

  step_profiler.finish();
  if (a.profile_overhead) {
    std::printf("(ms: median step; on cost: median over i of on step i / off step i, side by side; hooks: events one "
                "recorded step holds; off bound: hooks x ns/hook off / off step)\n");
    return 0;
  }
  if (!a.ddp_overhead && !a.no_torch) std::printf("PyTorch %s\n", torch_info.empty() ? "(no result)" : torch_info.c_str());
  if (a.ddp_overhead) apps::print_ddp_overhead_table(rows, kDdpOverheadGoal);
  else apps::print_sides_table(rows, peak);
  // The formula next to the measurement (models/gpt_memory.h): Kiln's peak above is the allocator's.
  apps::print_memory_formula(rows, cuda, amp, recompute, fused_head);
  if (!a.json.empty()) write_sides_json(a.json, rows, cuda, amp, recompute, fused_head);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpt: Kiln vs PyTorch GPT training step on this machine (CPU f32, or CUDA bf16 with "
               "torch eager and torch.compile), or Kiln's DDP overhead at world size 1 (--ddp-overhead)"};
  Args a;
  app.add_option("--device", a.device, "cpu or cuda (device 0)")->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--dtype", a.dtype, "f32, or bf16 autocast with f32 master weights (default: f32 on cpu, bf16 on "
                 "cuda; fp32 also taken)")->transform(apps::dtype_flag({DType::f32, DType::bf16}));
  app.add_option("--config", a.config, "run only this config: gpt-tiny, gpt-10m, gpt2-124m, gpt2-350m, gpt2-774m, "
                 "gpt-1.3b (default: gpt-tiny and gpt-10m on cpu, gpt2-124m and gpt-1.3b on cuda)");
  app.add_option("-B,--batch", a.batch, "sequences per step (default: 8; gpt2-124m 16)")->check(CLI::PositiveNumber);
  app.add_option("-T,--seq", a.seq, "tokens per sequence (default: the config's context)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", a.threads, "CPU threads for both Kiln and PyTorch (default: all)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", a.warmup, "untimed steps before timing")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps per round (the median is kept)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--rounds", a.rounds, "alternating rounds; each side keeps its best (default: 3 on cpu, 1 on cuda); "
                 "with --ddp-overhead, rounds x steps interleaved steps")
      ->check(CLI::PositiveNumber);
  app.add_option("--torch-modes", a.torch_modes, "PyTorch sides, each a process: eager, compile (default: eager on "
                 "cpu, eager,compile on cuda)")->delimiter(',')->check(CLI::IsMember({"eager", "compile"}));
  app.add_option("--attention", a.attention, "PyTorch attention: auto (SDPA where torch has it), manual, sdpa")
      ->check(CLI::IsMember({"auto", "manual", "sdpa"}))->capture_default_str();
  app.add_option("--peak-flops", a.peak_flops, "peak FLOP/s for MFU (default: 989e12 bf16 on cuda, half for f32; "
                 "on the CPU derived from /proc/cpuinfo and printed)")->check(CLI::PositiveNumber);
  app.add_option("--python", a.python, "python with torch for the reference side")->capture_default_str();
  app.add_option("--torch-script", a.script, "path to bench_gpt.py (default: the one beside this executable, else "
                 "the source tree's)");
  app.add_flag("--no-torch", a.no_torch, "only run the Kiln side");
  app.add_option("--json", a.json, "also write the side-by-side table (ms/step, peak bytes, the memory formula's peak) "
                 "as JSON to this file");
  app.add_flag("--estimate-memory", a.estimate_memory, "print the memory formula (models/gpt_memory.h) for the configs, "
               "device, dtype, --recompute and --fused-head given, and run nothing (no device needed); with --sharding "
               "MODE[,MODE] --world N, each rank's memory by term in those modes (parallel/memory_plan.h)");
  apps::add_memory_plan_flags(app, a.plan);
  // MFU still counts the model's FLOPs only under --recompute.
  apps::add_memory_flags(app, a.recompute, a.fused_head,
                         " on both sides (GPT::set_recompute; torch.utils.checkpoint in PyTorch)");
  app.add_flag("--cuda-graph", a.cuda_graph, "Kiln's step through the Trainer's whole-step CUDA graph (--device "
               "cuda; the warm-up's last step captures, every timed step replays)");
  app.add_flag("--ddp-overhead", a.ddp_overhead, "Kiln only: the step without DDP against the step through "
               "DistributedDataParallel on a one-rank group (Gloo on cpu, NCCL on cuda), two models stepped in "
               "turn (default configs on cuda: gpt2-124m only)");
  app.add_flag("--profile-overhead", a.profile_overhead, "Kiln only: the step with profiling off against the "
               "same step inside a profiling session (two models stepped in turn), and the off-cost bound");
  apps::add_profile_flags(app, a.profile);
  app.add_option("--sharding", a.sharding, "Kiln only: time the Trainer's step in these sharding modes (none = DDP, "
                 "zero1, zero2, full = FSDP with a unit per block) on --world forked CPU ranks, e.g. --sharding none,zero1,zero2 (default config "
                 "gpt-tiny, B=4 T=64 per rank)")->delimiter(',')->check(CLI::IsMember({"none", "zero1", "zero2", "full"}));
  app.add_option("--world", a.world, "ranks for --sharding (forked: at most 16; with --estimate-memory: any)")->check(CLI::Range(1, 65536))->capture_default_str();
  app.add_flag("--bucket-view", a.bucket_view, "with --ddp-overhead or --estimate-memory --sharding: "
               "DDPOptions().gradient_as_bucket_view(true)");
  return apps::run_main(app, argc, argv, apps::AppMainOptions("bench_gpt"), [&] { return run(a); });
}
