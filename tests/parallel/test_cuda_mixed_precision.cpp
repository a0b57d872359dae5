// The 16-bit MixedPrecisionPolicy on CUDA over NCCL (Note [Master weights]), two ranks sharing the
// GPU when there is one: NCCL's bf16 all-reduce, reduce-scatter and all-gather give the CPU's values
// (inputs exact in bf16), and the Trainer with bf16 parameters takes the CPU's steps (Gloo, same
// policy, same data) under none, zero2 and full, with bf16 and f32 reductions, within bf16 noise.
// Needs a GPU: exits 77 (skipped) without one.
#include <cmath>
#include <optional>

#include <kiln/parallel/trainer.h>

#include "parallel/cuda_ranks.h"
#include "parallel/fsdp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

namespace {

constexpr int64_t kGlobalRows = 12;

std::vector<double> host_values(const Tensor& t) { return t.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>(); }

// Eight bf16-policy steps of the FSDP fixtures' net on `device` over `pg`: the logged losses.
std::vector<double> train(ProcessGroup& pg, std::shared_ptr<ProcessGroup> group, Device device, Sharding mode,
                          std::optional<DType> reduce) {
  auto net = std::make_shared<FsdpNet>(seed_for_rank(pg.rank()), NetSpec{5, 6, 3});
  net->to(device);
  auto opt = std::make_shared<optim::AdamW>(net->parameters(), optim::AdamWOptions(2e-2).weight_decay(0.1));
  MixedPrecisionPolicy policy = MixedPrecisionPolicy().param_dtype(DType::bf16);
  if (reduce) policy.reduce_dtype(*reduce);
  Trainer trainer(net, opt, std::move(group),
                  TrainerOptions().sharding(mode).amp(DType::bf16).mixed_precision(policy).clip_grad_norm(0.5)
                      .grad_accum_steps(2).log_every(1).fsdp(FSDPOptions().wrap({"Linear"})));
  const int64_t rows = kGlobalRows / pg.size();
  TrainSpec spec;
  spec.net = NetSpec{5, 6, 3};
  std::vector<double> losses;
  for (int step = 0; step < 8; ++step)
    losses.push_back(trainer.step([&](int micro) {
      auto [x, y] = batch_rows(spec, step * 10 + micro, pg.rank() * rows, rows, kGlobalRows);
      return mse_loss(net->forward(x.to(device)).to(DType::f32), y.to(device));
    }).loss);
  return losses;
}

}  // namespace

TEST_CASE("NCCL bf16 all-reduce, reduce-scatter and all-gather equal the CPU's values") {
  run_nccl_ranks("kiln_cuda_mp_collectives", [](ProcessGroup& gloo, std::shared_ptr<ProcessGroup> nccl) {
    const int r = gloo.rank(), world = gloo.size();
    const Device dev = Device::cuda(r % cuda::device_count());
    const int64_t chunk = 5, n = chunk * world;
    Tensor mine = from_vector(nccl_contributions(r, n), {n}).to(DType::bf16).to(dev);
    Tensor sum = mine.clone();
    nccl->allreduce(sum)->wait();
    std::vector<double> want = nccl_average(world, n);
    for (double& v : want) v *= world;
    expect_rel(host_values(sum), want, 0.0, 1e-9, "bf16 all-reduce");
    Tensor part = zeros({chunk}, TensorOptions(DType::bf16).device(dev));
    nccl->reduce_scatter(part, mine)->wait();
    expect_rel(host_values(part), std::vector<double>(want.begin() + r * chunk, want.begin() + (r + 1) * chunk), 0.0, 1e-9,
               "bf16 reduce-scatter");
    Tensor whole = zeros({n}, TensorOptions(DType::bf16).device(dev));
    nccl->allgather(whole, mine.narrow(0, r * chunk, chunk))->wait();
    std::vector<double> gathered;
    for (int q = 0; q < world; ++q) {
      std::vector<double> c = nccl_contributions(q, chunk, q * chunk);
      gathered.insert(gathered.end(), c.begin(), c.end());
    }
    expect_rel(host_values(whole), gathered, 0.0, 1e-9, "bf16 all-gather");
  }, true, /*min_world=*/2);
}

TEST_CASE("bf16 policy on CUDA over NCCL takes the CPU's steps: none, zero2, full; bf16 and f32 reductions") {
  run_nccl_ranks("kiln_cuda_mp_trainer", [](ProcessGroup& gloo, std::shared_ptr<ProcessGroup> nccl) {
    const Device dev = Device::cuda(gloo.rank() % cuda::device_count());
    for (Sharding mode : {Sharding::none, Sharding::zero2, Sharding::full})
      for (std::optional<DType> reduce : {std::optional<DType>(), std::optional<DType>(DType::f32)}) {
        if (mode == Sharding::none && reduce) continue;  // DDP reduces in the gradients' dtype
        const std::string what = std::string(sharding_name(mode)) + (reduce ? " f32 reduce" : " bf16 reduce") +
                                 " rank " + std::to_string(gloo.rank());
        const std::vector<double> cpu = train(gloo, test::borrow(gloo), Device::cpu(), mode, reduce);
        const std::vector<double> gpu = train(gloo, nccl, dev, mode, reduce);
        // cuBLAS vs the CPU GEMM in bf16 and another reduction order: bf16 noise (the CUDA FSDP test's bound).
        expect_rel(gpu, cpu, 2e-2, 0.0, what + " losses");
      }
  }, true, /*min_world=*/2);
}
