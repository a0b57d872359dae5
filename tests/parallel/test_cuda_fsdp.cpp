// FSDP on CUDA over NCCL, one rank per visible GPU (up to 4): the FSDP fixtures' training (a unit per
// Linear, accumulation 2, AdamW, f32 and bf16 autocast, with and without activation checkpointing)
// against DDP on the CPU over Gloo with the same data, within GPU-vs-CPU tolerances. Needs a GPU:
// exits 77 (skipped) without one.
#include "parallel/cuda_ranks.h"
#include "parallel/fsdp_fixtures.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("FSDP over NCCL on CUDA equals DDP on the CPU (f32, bf16, activation checkpointing)") {
  run_nccl_ranks("kiln_cuda_fsdp", [](dist::ProcessGroup& gloo, std::shared_ptr<dist::ProcessGroup> nccl) {
    const int r = gloo.rank();
    for (DType amp : {DType::f32, DType::bf16}) {
      for (bool recompute : {false, true}) {
        ZeroSpec spec;
        spec.amp = amp;
        spec.steps = 10;
        const ZeroRun cpu = train_mode(gloo, Mode::ddp, spec);
        FsdpSpec f;
        f.recompute = recompute;
        f.device = Device::cuda(r);
        const ZeroRun gpu = train_fsdp(*nccl, spec, f);
        const std::string what = std::string("cuda fsdp ") + (amp == DType::bf16 ? "bf16" : "f32") +
                                 (recompute ? " recompute" : "") + " rank " + std::to_string(r);
        double scale = 0;
        for (double w : cpu.weights) scale = std::max(scale, std::fabs(w));
        // cuBLAS vs the CPU GEMM: f32 1e-4; bf16 autocast rounds differently on each side.
        const double rtol = amp == DType::bf16 ? 2e-2 : 1e-4;
        expect_rel(gpu.losses, cpu.losses, rtol, 0.0, what + " losses");
        expect_rel(gpu.weights, cpu.weights, rtol, scale, what + " weights");
      }
    }
  });
}
