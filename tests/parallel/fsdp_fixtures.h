// Shared pieces of the FSDP tests: the DDP tests' Net run through nn::call (so its Linear layers can
// be FSDP units), optionally with activation checkpointing per layer, and one rank's FSDP training
// loop that mirrors zero_fixtures.h's train_mode, so FSDP is compared with DDP inside one rank.
#pragma once

#include <string>
#include <vector>

#include <kiln/autograd/checkpoint.h>
#include <kiln/autograd/grad_mode.h>
#include <kiln/parallel/fsdp.h>

#include "parallel/zero_fixtures.h"

namespace kiln::test {

// Net's weights and math; each layer is called through nn::call (forward hooks), under
// autograd::checkpoint when `recompute` is set.
struct FsdpNet : Net {
  using Net::Net;
  Tensor layer(nn::Linear& l, const Tensor& x) {
    if (recompute && grad_mode_enabled())
      return autograd::checkpoint([&l](const Tensor& in) { return nn::call(l, in); }, x);
    return nn::call(l, x);
  }
  Tensor forward(const Tensor& x) { return layer(*fc3, relu(layer(*fc2, relu(layer(*fc1, x))))); }
  bool recompute = false;
};

struct FsdpSpec {
  std::vector<std::string> wrap = {"Linear"};  // fc1, fc2, fc3 are the units; the root holds nothing
  bool prefetch = true;
  bool recompute = false;
  Device device = Device::cpu();  // where the model and the batches live (CUDA: an NCCL group)
  dist::MixedPrecisionPolicy policy;  // FSDPOptions::mixed_precision (FSDP2's mp_policy)
  int64_t* gathered_bytes = nullptr;  // FullyShardedDataParallel::gathered_bytes() after the run, when set
};

// The model's full parameters, gathered and released again (collective).
inline std::vector<double> fsdp_parameters(dist::FullyShardedDataParallel& fsdp) {
  fsdp.gather_full_params();
  std::vector<double> out = flat_parameters(fsdp.module());
  fsdp.reshard_full_params(/*writeback=*/false);
  return out;
}

// train_mode's loop (train_steps: same data, loss scaling, AdamW, clipping) with FSDP.
// `after_step(fsdp, step)` runs after each optimizer step when given.
inline ZeroRun train_fsdp(dist::ProcessGroup& pg, const ZeroSpec& s, const FsdpSpec& f,
                          const std::function<void(dist::FullyShardedDataParallel&, int)>& after_step = nullptr) {
  auto net = std::make_shared<FsdpNet>(seed_for_rank(pg.rank()), s.net);  // rank 0's broadcast must win
  net->recompute = f.recompute;
  net->to(f.device);
  const auto adamw = optim::AdamWOptions(1e-2).weight_decay(0.1);
  optim::AdamW like(net->parameters(), adamw);
  auto fsdp = dist::FullyShardedDataParallel::create(net, like, test::borrow(pg),
                                                     dist::FSDPOptions().wrap(f.wrap).prefetch(f.prefetch).record_events(true)
                                                         .mixed_precision(f.policy));
  auto opt = fsdp->sharded_optimizer();
  ModeSteps m;
  m.opt = opt;
  m.forward = [&](const Tensor& x) { return net->forward(x); };
  m.before_forward = [&](bool sync) {
    fsdp->set_require_backward_grad_sync(sync);
    fsdp->prepare_forward();
  };
  m.finish = [&] { fsdp->finish(); };
  m.clip = [&](double max_norm) { opt->clip_grad_norm(max_norm); };
  if (after_step) m.after_step = [&](int step) { after_step(*fsdp, step); };
  ZeroRun run;
  run.losses = train_steps(pg, s, f.device, m);
  if (f.gathered_bytes) {
    fsdp->gather_full_params();
    *f.gathered_bytes = fsdp->gathered_bytes();
    fsdp->reshard_full_params(/*writeback=*/false);
  }
  run.weights = fsdp_parameters(*fsdp);
  return run;
}

}  // namespace kiln::test
