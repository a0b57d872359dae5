// NCCL reduce_scatter and allgather (ncclReduceScatter / ncclAllGather) on one rank per visible GPU
// (up to 4), with odd chunk sizes and the padded flat shards of Note [Padded flat shards], against
// the values the CPU computes here. Needs a GPU: exits 77 (skipped) without one.
#include "parallel/cuda_ranks.h"
#include "parallel/run_ranks.h"
#include "parallel/temp_dir.h"

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/parallel/file_store.h>
#include <kiln/parallel/nccl_process_group.h>
#include <kiln/parallel/shard_layout.h>

using namespace kiln;
using kiln::test::expect_values;

namespace {

double contribution(int r, int64_t i) { return double((r * 5 + i * 3) % 7) - 3.0 + 0.25 * r; }

}  // namespace

TEST_CASE("NCCL reduce_scatter / allgather: odd chunks and padded shards equal the CPU's values") {
  const int world = test::gpu_ranks_or_skip();
  test::TempDir dir("kiln_nccl_rs");
  const std::string path = dir.path;
  test::run_ranks(world, [&](dist::ProcessGroup& gloo) {
    const int r = gloo.rank();
    auto store = dist::make_file_store(path, world);
    auto pg = dist::make_nccl_process_group(store, r, world, dist::NcclOptions().device(r).blocking_wait(true));
    const Device dev = Device::cuda(r);
    for (DType dt : {DType::f32, DType::bf16}) {
      for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(7), int64_t(1001)}) {
        std::vector<double> in(static_cast<size_t>(chunk * world)), want_rs(static_cast<size_t>(chunk)), want_ag;
        for (int64_t i = 0; i < chunk * world; ++i) in[size_t(i)] = contribution(r, i);
        for (int64_t i = 0; i < chunk; ++i) {
          double s = 0;
          for (int q = 0; q < world; ++q) s += contribution(q, r * chunk + i);
          want_rs[size_t(i)] = s / world;
        }
        Tensor input = from_vector(in, {chunk * world}).to(dt).to(dev);
        Tensor out = zeros({chunk}, TensorOptions(dt).device(dev));
        pg->reduce_scatter(out, input, dist::AllreduceOptions().op(dist::ReduceOp::avg))->wait();
        expect_values(out.to(Device::cpu()), want_rs, test::rtol_for(dt), "nccl reduce_scatter avg");
        std::vector<double> mine(static_cast<size_t>(chunk));
        for (int64_t i = 0; i < chunk; ++i) mine[size_t(i)] = contribution(r, i);
        for (int q = 0; q < world; ++q)
          for (int64_t i = 0; i < chunk; ++i) want_ag.push_back(contribution(q, i));
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
    std::vector<double> flat(size_t(b.chunk * world), 0.0), avg(size_t(b.numel));
    for (int64_t i = 0; i < b.numel; ++i) {
      flat[size_t(i)] = contribution(r, i);
      for (int q = 0; q < world; ++q) avg[size_t(i)] += contribution(q, i) / world;
    }
    Tensor mine = zeros({b.chunk}, TensorOptions(dev));
    Tensor in = from_vector(flat, {b.chunk * world}).to(dev);
    pg->reduce_scatter(mine, in, dist::AllreduceOptions().op(dist::ReduceOp::avg))->wait();
    Tensor whole = zeros({b.chunk * world}, TensorOptions(dev));
    pg->allgather(whole, mine)->wait();
    expect_values(whole.to(Device::cpu()).narrow(0, 0, b.numel), avg, 1e-6, "nccl padded shards");
  });
}
