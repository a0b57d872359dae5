// NCCL reduce_scatter and allgather (ncclReduceScatter / ncclAllGather) on one rank per visible GPU
// (up to 4), with odd chunk sizes and the padded flat shards of Note [Padded flat shards], against
// the values the CPU computes here. Needs a GPU: exits 77 (skipped) without one.
#include "parallel/cuda_ranks.h"

#include <kiln/parallel/shard_layout.h>

using namespace kiln;
using kiln::test::expect_values;
using kiln::test::nccl_average;
using kiln::test::nccl_contributions;

TEST_CASE("NCCL reduce_scatter / allgather: odd chunks and padded shards equal the CPU's values") {
  test::run_nccl_ranks("kiln_nccl_rs", [](dist::ProcessGroup& gloo, std::shared_ptr<dist::ProcessGroup> pg) {
    const int r = gloo.rank(), world = gloo.size();
    const Device dev = Device::cuda(r);
    for (DType dt : {DType::f32, DType::bf16}) {
      for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(7), int64_t(1001)}) {
        const std::vector<double> in = nccl_contributions(r, chunk * world);
        const std::vector<double> want_rs = nccl_average(world, chunk, r * chunk);
        Tensor input = from_vector(in, {chunk * world}).to(dt).to(dev);
        Tensor out = zeros({chunk}, TensorOptions(dt).device(dev));
        pg->reduce_scatter(out, input, dist::AllreduceOptions().op(dist::ReduceOp::avg))->wait();
        expect_values(out.to(Device::cpu()), want_rs, test::rtol_for(dt), "nccl reduce_scatter avg");
        const std::vector<double> mine = nccl_contributions(r, chunk);
        std::vector<double> want_ag;
        for (int q = 0; q < world; ++q) {
          const std::vector<double> theirs = nccl_contributions(q, chunk);
          want_ag.insert(want_ag.end(), theirs.begin(), theirs.end());
        }
        Tensor part = from_vector(mine, {chunk}).to(dt).to(dev);
        Tensor whole = zeros({chunk * world}, TensorOptions(dt).device(dev));
        pg->allgather(whole, part)->wait();
        expect_values(whole.to(Device::cpu()), want_ag, test::rtol_for(dt), "nccl allgather");
      }
    }
    // 21 elements in padded chunks: reduce-scatter then allgather gives back the average.
    std::vector<Tensor> params = {zeros({5}), zeros({1}), zeros({13}), zeros({2})};
    dist::ShardLayout layout(params, r, world, 1 << 20, 1 << 20);
    const auto& b = layout.buckets()[0];
    std::vector<double> flat = nccl_contributions(r, b.numel), avg = nccl_average(world, b.numel);
    flat.resize(size_t(b.chunk * world), 0.0);
    Tensor mine = zeros({b.chunk}, TensorOptions(dev));
    Tensor in = from_vector(flat, {b.chunk * world}).to(DType::f32).to(dev);  // the shards' dtype
    pg->reduce_scatter(mine, in, dist::AllreduceOptions().op(dist::ReduceOp::avg))->wait();
    Tensor whole = zeros({b.chunk * world}, TensorOptions(dev));
    pg->allgather(whole, mine)->wait();
    expect_values(whole.to(Device::cpu()).narrow(0, 0, b.numel), avg, 1e-6, "nccl padded shards");
  });
}
