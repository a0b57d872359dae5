// Issue #20's device paths on NCCL, one rank per visible GPU (up to 4): the DETAIL check layer
// (CheckedProcessGroup) all-gathers its descriptions on the GPU and still reduces correctly, and
// names a size mismatch (2+ GPUs); PowerSGD on CUDA buckets (Householder QR on the device) at full
// rank reproduces the average the CPU computes here. Needs a GPU: exits 77 (skipped) without one.
#include "parallel/cuda_ranks.h"
#include "parallel/ddp_fixtures.h"

#include <kiln/parallel/checked_process_group.h>
#include <kiln/parallel/powersgd_hook.h>

using namespace kiln;
using kiln::test::expect;
using kiln::test::expect_values;

TEST_CASE("NCCL: DETAIL checks on the GPU, and full-rank PowerSGD on CUDA buckets equals the average") {
  test::run_nccl_ranks("kiln_nccl_detail", [](dist::ProcessGroup& gloo, std::shared_ptr<dist::ProcessGroup> nccl) {
    const int r = gloo.rank(), world = gloo.size();
    auto checked = std::make_shared<dist::CheckedProcessGroup>(nccl);
    const Device dev = Device::cuda(r);

    // A bucket of a (6, 4) matrix and a (3) vector: 27 elements, this rank's contributions.
    const int64_t n = 27;
    const std::vector<double> in = test::nccl_contributions(r, n), mean = test::nccl_average(world, n);
    Tensor t = from_vector(in, {n}).to(dev);
    ops::mul_(t, 1.0 / world);
    checked->allreduce(t)->wait();
    expect_values(t.to(Device::cpu()), mean, 1e-6, "checked all-reduce on the GPU");
    expect(checked->collectives_checked() == 1, "checked");

    auto state = std::make_shared<dist::PowerSGDState>(
        dist::PowerSGDOptions().matrix_approximation_rank(4).min_compression_rate(0).start_powerSGD_iter(2));
    dist::GradBucket bucket;
    bucket.is_last = true;
    bucket.parameters = {empty({6, 4}, TensorOptions(DType::f32).device(dev)), empty({3}, TensorOptions(DType::f32).device(dev))};
    bucket.offsets = {0, 24};
    for (int call = 0; call < 4; ++call) {
      bucket.buffer = from_vector(in, {n}).to(dev);
      dist::powersgd_hook(*state, *checked, bucket)->wait();
      // P Q^T rebuilds the matrix to rounding, not exactly: zeros of the average come back as
      // +-1e-7, so the tolerance has an absolute part (the values are of order 1).
      expect_values(bucket.buffer.to(Device::cpu()), mean, 1e-5, "full-rank PowerSGD on CUDA, call " + std::to_string(call),
                    1e-5);
    }
    expect(state->q(0).defined() && state->q(0).device() == dev, "PowerSGD ran on the device");

    if (world > 1) {
      Tensor bad = zeros({r == 0 ? 10 : 12}, TensorOptions(DType::f32).device(dev));
      std::string msg = test::error_of([&] { checked->allreduce(bad)->wait(); }, "size mismatch on NCCL");
      test::expect_contains(msg, "allreduce(sum) of 10 f32 [10]", "rank 0's");
      test::expect_contains(msg, "allreduce(sum) of 12 f32 [12]", "rank 1's");
    }
  });
}
