// SyncBatchNorm (Note [SyncBatchNorm], nn/sync_batch_norm.cpp) across Gloo ranks against one
// process holding the whole batch in f64: outputs, input and parameter gradients, running
// statistics, with uneven per-rank batch sizes; and DDP training with it against one process.
#include <kiln/parallel/ddp.h>
#include <kiln/parallel/sync_batch_norm.h>

#include "parallel/ddp_fixtures.h"
#include "parallel/sync_batch_norm_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

namespace {

constexpr int64_t kC = test::kBnChannels;

// Gradient sums over ranks (what DDP would reduce), as a CPU tensor.
Tensor summed(ProcessGroup& pg, const Tensor& g) {
  Tensor s = g.contiguous().clone();
  pg.allreduce(s)->wait();
  return s;
}

}  // namespace

TEST_CASE("SyncBatchNorm with uneven batches (1, 2, 4 rows) equals BatchNorm2d on the whole batch (f64, 1e-10)") {
  const std::vector<int64_t> rows{1, 2, 4};
  const int64_t total = 7;
  Tensor x_all = test::random({total, kC, 2, 3}, DType::f64, 11, -3.0, 5.0);
  Tensor w_all = test::random({total, kC, 2, 3}, DType::f64, 12);  // loss weights: sum(y * w)
  test::BnOracle oracle = test::bn_oracle(x_all, w_all);
  const auto& ref = oracle.bn;
  const Tensor &x_ref = oracle.x, &y_ref = oracle.y;
  run_ranks(3, [&](ProcessGroup& pg) {
    int64_t start = 0;
    for (int r = 0; r < pg.rank(); ++r) start += rows[size_t(r)];
    const int64_t n = rows[size_t(pg.rank())];
    auto bn = make_bn();
    expect(convert_sync_batchnorm(*bn, borrow(pg)) == 1, "one layer converted");
    bn->train();
    Tensor x = x_all.narrow(0, start, n).clone().requires_grad_(true);
    Tensor y;
    for (int pass = 0; pass < 2; ++pass) {
      y = bn->forward(x);
      sum(y * w_all.narrow(0, start, n)).backward();
    }
    test::expect_close(test::values(y), test::values(y_ref.narrow(0, start, n)), 1e-10, "output rows");
    test::expect_close(test::values(x.grad()), test::values(x_ref.grad().narrow(0, start, n)), 1e-10,
                       "input gradient rows");
    test::expect_close(all_values({summed(pg, bn->weight.grad()), summed(pg, bn->bias.grad())}),
                       all_values({ref->weight.grad(), ref->bias.grad()}), 1e-10, "weight and bias gradients");
    test::expect_close(all_values({bn->running_mean, bn->running_var}),
                       all_values({ref->running_mean, ref->running_var}), 1e-10, "running statistics");
    // Eval uses the running statistics, with no collective (rank 2 alone would hang otherwise).
    bn->eval();
    if (pg.rank() == 2) {
      ref->eval();
      test::expect_close(test::values(bn->forward(x_all)), test::values(ref->forward(x_all)), 1e-12, "eval");
    }
  });
}

namespace {

struct BnNet : nn::Module {
  explicit BnNet(std::shared_ptr<ProcessGroup> group) {
    Generator g(7);
    auto options = nn::BatchNormOptions(kC);
    if (group)
      bn = register_module("bn", std::make_shared<nn::SyncBatchNorm>(options, group));
    else
      bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(options));
    fc = register_module("fc", std::make_shared<nn::Linear>(nn::LinearOptions(kC * 4, 2).generator(g)));
    to(DType::f64);
  }
  Tensor forward(const Tensor& x) { return fc->forward(relu(bn->forward(x)).flatten(1)); }
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace

TEST_CASE("DDP + nn::SyncBatchNorm: 2 ranks x 3 rows train like one process on 6 rows with BatchNorm2d (f64)") {
  auto batch = [](int step) {
    return std::pair{test::random({6, kC, 2, 2}, DType::f64, 50 + step, -1.0, 3.0),
                     test::random({6, 2}, DType::f64, 60 + step)};
  };
  auto ref = std::make_shared<BnNet>(nullptr);
  optim::AdamW ref_opt(ref->parameters(), optim::AdamWOptions(1e-2));
  for (int step = 0; step < 4; ++step) {
    ref_opt.zero_grad();
    auto [x, y] = batch(step);
    mse_loss(ref->forward(x), y).backward();
    ref_opt.step();
  }
  run_ranks(2, [&](ProcessGroup& pg) {
    auto net = std::make_shared<BnNet>(borrow(pg));
    expect(net->bn->name() == "SyncBatchNorm", "the layer is a SyncBatchNorm");
    DistributedDataParallel ddp(net, borrow(pg));
    optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad();
      auto [x, y] = batch(step);
      mse_loss(ddp.forward<BnNet>(x.narrow(0, 3 * pg.rank(), 3)), y.narrow(0, 3 * pg.rank(), 3)).backward();
      ddp.finish_gradient_synchronization();
      opt.step();
    }
    test::expect_close(test::flat_parameters(*net), test::flat_parameters(*ref), 1e-10, "parameters");
    test::expect_close(all_values({net->bn->running_mean, net->bn->running_var}),
                       all_values({ref->bn->running_mean, ref->bn->running_var}), 1e-10, "running statistics");
  });
}
