// Issue #20's DDP features on NCCL, one rank per visible GPU (up to 4; one GPU gives world 1),
// each against the single-process result computed on the CPU in f64 (the Gloo twins are
// test_ddp_join.cpp, test_sync_batch_norm.cpp, test_ddp_static_graph.cpp, test_ddp_unused.cpp):
// join's header and shadow all-reduces on the device (2+ GPUs: on one rank join() runs its body
// directly, so one GPU checks only that training inside it is unchanged); SyncBatchNorm's
// statistics table and its backward all-reduce on the device (called directly, so a world of 1
// still takes the synced path, which the module skips there as torch does); static_graph's
// recorded bucket order on device buckets; and the graph walk with nothing unused making no host
// sync after the first two steps (cuda::host_sync_count).
// Needs a GPU: exits 77 (skipped) without one.
#include "parallel/cuda_ranks.h"
#include "parallel/join_fixtures.h"
#include "parallel/static_graph_fixtures.h"
#include "parallel/sync_batch_norm_fixtures.h"

#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/parallel/sync_batch_norm.h>

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

namespace {

std::string on_rank(int r, const std::string& what) { return "rank " + std::to_string(r) + ": " + what; }

}  // namespace

TEST_CASE("NCCL join: ranks with 3, 5, 7, 9 batches (the first `world`) equal one process (f64)") {
  run_nccl_ranks("kiln_nccl_join", [](ProcessGroup& gloo, std::shared_ptr<ProcessGroup> nccl) {
    const int r = gloo.rank(), world = gloo.size();
    for (bool initial_divisor : {true, false}) {
      JoinSpec j;
      j.train.dtype = DType::f64;
      j.train.batch = 2;
      j.train.accum = 2;
      j.batches = std::vector<int>{3, 5, 7, 9}, j.batches.resize(size_t(world));
      j.initial_divisor = initial_divisor;
      auto got = train_joined(nccl, j, small_buckets().gradient_as_bucket_view(true), Device::cuda(r));
      expect_close(got, join_reference(j), 1e-9, on_rank(r, std::string("parameters after join, divide by ") + (initial_divisor ? "initial world" : "ranks in")));
    }
  });
}

TEST_CASE("NCCL SyncBatchNorm: uneven batches (1, 2, 4, 3 rows) equal BatchNorm2d on the whole batch (f64)") {
  run_nccl_ranks("kiln_nccl_sync_bn", [](ProcessGroup& gloo, std::shared_ptr<ProcessGroup> nccl) {
    const int r = gloo.rank(), world = gloo.size();
    const Device dev = Device::cuda(r);
    std::vector<int64_t> rows{1, 2, 4, 3};
    rows.resize(size_t(world));
    int64_t total = 0, start = 0;
    for (int q = 0; q < world; ++q) {
      if (q < r) start += rows[size_t(q)];
      total += rows[size_t(q)];
    }
    const int64_t n = rows[size_t(r)];
    Tensor x_all = random({total, 3, 2, 3}, DType::f64, 11, -3.0, 5.0);
    Tensor w_all = random({total, 3, 2, 3}, DType::f64, 12);  // loss weights: sum(y * w)

    BnOracle oracle = bn_oracle(x_all, w_all);  // on the CPU
    const auto& ref = oracle.bn;
    const Tensor &x_ref = oracle.x, &y_ref = oracle.y;

    auto bn = make_bn();
    bn->to(dev);
    GroupSum group_sum(nccl);
    Tensor x = x_all.narrow(0, start, n).contiguous().to(dev).requires_grad_(true);
    Tensor w = w_all.narrow(0, start, n).contiguous().to(dev);
    Tensor y;
    for (int pass = 0; pass < 2; ++pass) {
      y = nn::sync_batch_norm(x, group_sum, bn->running_mean, bn->running_var, bn->weight, bn->bias, 0.3, 1e-5);
      sum(y * w).backward();
    }
    expect(y.device() == dev, "the output stays on the device");
    expect_close(values(y), values(y_ref.narrow(0, start, n)), 1e-10, on_rank(r, "output rows"));
    expect_close(values(x.grad()), values(x_ref.grad().narrow(0, start, n)), 1e-10, on_rank(r, "input gradient rows"));
    Tensor wb = cat({bn->weight.grad(), bn->bias.grad()}, 0).to(Device::cpu());
    gloo.allreduce(wb)->wait();  // what DDP would reduce
    expect_close(values(wb), all_values({ref->weight.grad(), ref->bias.grad()}), 1e-10, on_rank(r, "weight and bias gradients"));
    expect_close(all_values({bn->running_mean, bn->running_var}), all_values({ref->running_mean, ref->running_var}), 1e-10,
                 on_rank(r, "running statistics"));
  });
}

TEST_CASE("NCCL static_graph: a parameter used twice per backward and an unused one, as one process (f64)") {
  run_nccl_ranks("kiln_nccl_static_graph", [](ProcessGroup& gloo, std::shared_ptr<ProcessGroup> nccl) {
    const int r = gloo.rank(), world = gloo.size();
    const Device dev = Device::cuda(r);
    TrainSpec s;
    s.dtype = DType::f64;
    s.net.unused = true;
    const auto want = twice_forward_reference(s, world);
    for (bool views : {false, true}) {
      auto net = std::make_shared<Net>(seed_for_rank(r), s.net);
      net->to(s.dtype);
      net->to(dev);
      DistributedDataParallel ddp(net, nccl, small_buckets().static_graph(true).gradient_as_bucket_view(views));
      optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
      for (int step = 0; step < s.steps; ++step) {
        opt.zero_grad(/*set_to_none=*/false);
        auto [x, y] = batch_rows(s, step, r * s.batch, s.batch, world * s.batch);
        ddp.prepare_forward();
        mse_loss(twice_forward(*net, x.to(dev)), y.to(dev)).backward();
        expect(ddp.reducer().iteration_in_progress() == (step == 0), on_rank(r, "reduced during backward after step 0"));
        ddp.finish_gradient_synchronization();
        expect(ddp.reducer().allreduces_this_iteration() == int64_t(ddp.reducer().bucket_count()), "every bucket");
        if (step == 0) expect(ddp.reducer().buckets()[0].params[0] >= 6, "the unused parameter leads the rebuilt buckets");
        opt.step();
      }
      expect_close(flat_parameters(*net), want, 1e-9, on_rank(r, views ? "parameters (bucket views)" : "parameters"));
    }
  });
}

TEST_CASE("NCCL find_unused_parameters with nothing unused: forward, walk, backward and reduction make no host sync") {
  run_nccl_ranks(
      "kiln_nccl_walk",
      [](ProcessGroup& gloo, std::shared_ptr<ProcessGroup> nccl) {
        // INFO/DETAIL debug levels read the order check on the host every iteration.
        ::unsetenv("KILN_DISTRIBUTED_DEBUG");
        ::unsetenv("TORCH_DISTRIBUTED_DEBUG");
        const int r = gloo.rank(), world = gloo.size();
        const Device dev = Device::cuda(r);
        TrainSpec s;
        s.dtype = DType::f64;
        s.steps = 6;
        auto net = std::make_shared<Net>(seed_for_rank(r), s.net);
        net->to(s.dtype);
        net->to(dev);
        DistributedDataParallel ddp(net, nccl, small_buckets().find_unused_parameters(true));
        optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
        std::vector<std::pair<Tensor, Tensor>> batches;  // on the device before any step is timed
        for (int step = 0; step < s.steps; ++step) {
          auto [x, y] = batch_rows(s, step, r * s.batch, s.batch, world * s.batch);
          batches.emplace_back(x.to(dev), y.to(dev));
        }
        for (int step = 0; step < s.steps; ++step) {
          opt.zero_grad();
          const int64_t before = cuda::host_sync_count();
          Tensor out = ddp.forward<Net>(batches[size_t(step)].first);  // walks the graph
          mse_loss(out, batches[size_t(step)].second).backward();
          ddp.finish_gradient_synchronization();
          // Steps 0 and 1 read on the host: the bucket rebuild and the order check's first two
          // synced iterations (OrderCheck::automatic on CUDA, Note [Deferred order check]).
          const int64_t syncs = cuda::host_sync_count() - before;
          if (step == 0) expect(syncs > 0, on_rank(r, "step 0 reads the order on the host (the counter counts)"));
          if (step >= 2)
            expect(syncs == 0, on_rank(r, "step " + std::to_string(step) + " synchronized " + std::to_string(syncs) + " time(s)"));
          opt.step();
        }
        expect(ddp.reducer().used_counter_reads() == 0, "used counters never read");
        expect_close(flat_parameters(*net), train_reference(s, world), 1e-9, on_rank(r, "parameters"));
      },
      /*blocking_wait=*/false);
}
