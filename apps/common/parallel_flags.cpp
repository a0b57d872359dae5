// The shared data-parallel flags (parallel_flags.h).
#include "parallel_flags.h"

#include <memory>

#include <kiln/parallel/comm_hooks.h>
#include <kiln/parallel/powersgd_hook.h>
#include <kiln/parallel/sharding.h>

#include "dtype_flag.h"

namespace kiln::apps {

namespace {

const std::vector<DType> kPolicyDtypes = {DType::f32, DType::bf16, DType::f16};

}  // namespace

void add_parallel_flags(CLI::App& app, ParallelFlags& f, const std::string& full_units) {
  app.add_option("--sharding", f.sharding, "data parallel sharding: none (DDP), zero1 (optimizer state sharded, "
                 "ZeroRedundancyOptimizer), zero2 (state and gradients sharded: reduce-scatter per bucket), full "
                 "(FSDP: parameters sharded too, " + full_units + " a unit gathered before its forward and backward)")
      ->check(CLI::IsMember({"none", "zero1", "zero2", "full"}))->capture_default_str();
  app.add_flag("--sharded-checkpoints", f.sharded_checkpoints, "with zero1/zero2/full: every rank writes its optimizer "
               "shard next to the checkpoint (rank 0 the index) instead of rank 0 writing the gathered state; "
               "either kind resumes at any world size and sharding");
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "DDP: MiB of gradients per all-reduce bucket (torch's "
                 "bucket_cap_mb; the first bucket is 1 MiB)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--param-dtype", f.param_dtype, "parameters and gradients in this dtype (FSDP2's MixedPrecisionPolicy "
                 "param_dtype): bf16/f16 keep f32 master weights and AdamW moments only for each rank's shard (all of "
                 "them under --sharding none); needs --dtype set to the same; f32: f32 parameters under autocast")
      ->transform(dtype_flag(kPolicyDtypes))->capture_default_str();
  app.add_option("--reduce-dtype", f.reduce_dtype, "with --param-dtype bf16/f16: the dtype gradients are reduced in "
                 "(default: --param-dtype; f32 needs --sharding zero2 or full)")->transform(dtype_flag(kPolicyDtypes));
  app.add_option("--comm-hook", f.comm_hook, "DDP gradient reduction: none (built-in all-reduce), allreduce (the same "
                 "as a hook), fp16 or bf16 (16-bit on the wire), powersgd (rank --powersgd-rank with error feedback)")
      ->check(CLI::IsMember({"none", "allreduce", "fp16", "bf16", "powersgd"}))->capture_default_str();
  app.add_option("--powersgd-rank", f.powersgd_rank, "PowerSGD matrix approximation rank")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--powersgd-start", f.powersgd_start, "optimizer steps reduced by plain all-reduce before PowerSGD "
                 "starts (> 1)")->check(CLI::Range(int64_t(2), int64_t(1) << 40))->capture_default_str();
}

dist::TrainerOptions with_parallel_flags(dist::TrainerOptions options, const ParallelFlags& f) {
  return options.sharding(dist::parse_sharding(f.sharding))
      .sharded_checkpoints(f.sharded_checkpoints)
      .ddp(dist::DDPOptions().bucket_cap_mb(f.bucket_cap_mb))
      .mixed_precision(mixed_precision_policy(f));
}

dist::MixedPrecisionPolicy mixed_precision_policy(const ParallelFlags& f) {
  dist::MixedPrecisionPolicy p;
  p.param_dtype(parse_dtype_flag(f.param_dtype, kPolicyDtypes));
  if (!f.reduce_dtype.empty()) p.reduce_dtype(parse_dtype_flag(f.reduce_dtype, kPolicyDtypes));
  p.check();
  return p;
}

void register_comm_hook(dist::Trainer& trainer, const ParallelFlags& f, uint64_t seed) {
  if (f.comm_hook == "none") return;
  if (f.comm_hook == "allreduce") trainer.register_comm_hook(dist::allreduce_hook);
  if (f.comm_hook == "fp16") trainer.register_comm_hook(dist::fp16_compress_hook);
  if (f.comm_hook == "bf16") trainer.register_comm_hook(dist::bf16_compress_hook);
  if (f.comm_hook == "powersgd")
    trainer.register_comm_hook(std::make_shared<dist::PowerSGDState>(dist::PowerSGDOptions()
                                                                         .matrix_approximation_rank(f.powersgd_rank)
                                                                         .start_powerSGD_iter(f.powersgd_start)
                                                                         .random_seed(seed)),
                               dist::powersgd_hook);
}

}  // namespace kiln::apps
