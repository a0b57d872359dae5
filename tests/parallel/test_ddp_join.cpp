// DistributedDataParallel::join and Trainer::join on uneven inputs (Note [Join]): ranks with 3, 5
// and 7 batches end with the weights of one process that saw, at each step, the samples of the
// ranks still training; and throw_on_early_termination stops every rank at the first that ran out.
#include <algorithm>

#include <kiln/parallel/ddp.h>
#include <kiln/parallel/trainer.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

namespace {

struct JoinSpec {
  test::TrainSpec train;
  std::vector<int> batches;  // per rank
  bool initial_divisor = true;
  int world() const { return int(batches.size()); }
  int64_t total() const { return world() * train.batch * train.accum; }
  // Rank r's micro-batch m of step t.
  std::pair<Tensor, Tensor> rows(int t, int m, int r) const {
    return test::batch_rows(train, t, (int64_t(m) * world() + r) * train.batch, train.batch, total());
  }
};

// One process: at step t the ranks with more than t batches contribute their (mean) losses,
// summed and divided by the world size or by their count; AdamW as in the fixtures.
// `losses` gets the mean loss of the ranks still in, per step (before the update).
std::vector<double> reference(const JoinSpec& j, std::vector<double>* losses = nullptr) {
  auto net = std::make_shared<test::Net>(test::seed_for_rank(0), j.train.net);
  net->to(j.train.dtype);
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  const int steps = *std::max_element(j.batches.begin(), j.batches.end());
  for (int t = 0; t < steps; ++t) {
    std::vector<int> in;
    for (int r = 0; r < j.world(); ++r)
      if (j.batches[size_t(r)] > t) in.push_back(r);
    const double divisor = j.initial_divisor ? j.world() : double(in.size());
    opt.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < j.train.accum; ++m) {
      Tensor loss;
      for (int r : in) {
        auto [x, y] = j.rows(t, m, r);
        Tensor l = mse_loss(net->forward(x), y);
        loss_sum += l.item();
        loss = loss.defined() ? loss + l : l;
      }
      (loss * (1.0 / (divisor * j.train.accum))).backward();
    }
    if (losses) losses->push_back(loss_sum / double(in.size() * j.train.accum));
    opt.step();
  }
  return test::flat_parameters(*net);
}

std::vector<double> train_joined(ProcessGroup& pg, const JoinSpec& j, DDPOptions options) {
  DdpNet rank(pg, j.train, options);
  auto& [net, ddp] = rank;
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  int steps = 0;
  ddp.join(
      [&] {
        for (int t = 0; t < j.batches[size_t(pg.rank())]; ++t) {
          opt.zero_grad(/*set_to_none=*/false);
          for (int m = 0; m < j.train.accum; ++m) {
            // Before the forward, as torch's `with ddp.no_sync():` around forward and backward: the
            // join header tells the ranks that ran out whether this backward syncs.
            ddp.set_require_backward_grad_sync(m + 1 == j.train.accum);
            auto [x, y] = j.rows(t, m, pg.rank());
            Tensor loss = mse_loss(ddp.forward<test::Net>(x), y) * (1.0 / j.train.accum);
            loss.backward();
          }
          ddp.set_require_backward_grad_sync(true);
          ddp.finish_gradient_synchronization();
          opt.step();
          ++steps;
        }
      },
      JoinOptions().divide_by_initial_world_size(j.initial_divisor));
  expect(steps == j.batches[size_t(pg.rank())], "the body ran this rank's batches");
  expect(!ddp.join_active(), "join mode ends with join()");
  return test::flat_parameters(*net);
}

}  // namespace

TEST_CASE("join: ranks with 3, 5, 7 batches end with the weights of one process on the same samples (f64)") {
  struct Case {
    bool initial_divisor;
    int accum;
    bool views;
    bool unused;
  };
  for (Case c : {Case{true, 1, false, false}, Case{false, 1, false, false}, Case{false, 2, true, false},
                 Case{true, 2, false, true}}) {
    CAPTURE(c.initial_divisor);
    CAPTURE(c.accum);
    CAPTURE(c.views);
    CAPTURE(c.unused);
    JoinSpec j;
    j.train.dtype = DType::f64;
    j.train.batch = 2;
    j.train.accum = c.accum;
    j.train.net.unused = c.unused;
    j.batches = {3, 5, 7};
    j.initial_divisor = c.initial_divisor;
    const auto want = reference(j);
    run_ranks(3, [&](ProcessGroup& pg) {
      auto got = train_joined(pg, j, test::small_buckets().gradient_as_bucket_view(c.views)
                                         .find_unused_parameters(c.unused));
      test::expect_close(got, want, 1e-10, "rank " + std::to_string(pg.rank()) + "'s parameters after join");
    });
  }
}

TEST_CASE("Trainer::join with accumulation: 3, 5, 7 batches equal one process; logged losses average the ranks still in") {
  JoinSpec j;
  j.train.dtype = DType::f64;
  j.train.batch = 2;
  j.train.accum = 2;
  j.batches = {3, 5, 7};
  j.initial_divisor = false;
  std::vector<double> losses;
  const auto want = reference(j, &losses);
  run_ranks(3, [&](ProcessGroup& pg) {
    auto net = std::make_shared<test::Net>(test::seed_for_rank(pg.rank()), j.train.net);
    net->to(DType::f64);
    auto opt = std::make_shared<optim::AdamW>(net->parameters(), optim::AdamWOptions(1e-2));
    Trainer trainer(net, opt, borrow(pg), TrainerOptions().grad_accum_steps(2).log_every(2).ddp(test::small_buckets()));
    int logged = 0;
    trainer.join(
        [&] {
          for (int t = 0; t < j.batches[size_t(pg.rank())]; ++t) {
            StepStats st = trainer.step([&](int m) {
              auto [x, y] = j.rows(t, m, pg.rank());
              return mse_loss(net->forward(x), y);
            });
            expect(st.logged == (t % 2 == 0), "log steps every 2");
            if (!st.logged) continue;
            ++logged;
            expect(std::fabs(st.loss - losses[size_t(t)]) <= 1e-12 * std::fabs(losses[size_t(t)]),
                   "step " + std::to_string(t) + " loss " + std::to_string(st.loss) + ", expected the mean over the "
                   "ranks still training " + std::to_string(losses[size_t(t)]));
          }
        },
        JoinOptions().divide_by_initial_world_size(false));
    expect(logged == (j.batches[size_t(pg.rank())] + 1) / 2, "logged steps");
    expect(trainer.global_step() == 7, "every rank's global step advanced with the last one's: " +
                                           std::to_string(trainer.global_step()));
    test::expect_close(test::flat_parameters(*net), want, 1e-10, "rank " + std::to_string(pg.rank()));
    // Training goes on normally after join (even inputs again): one more synced step.
    trainer.step([&](int m) {
      auto [x, y] = j.rows(7, m, pg.rank());
      return mse_loss(net->forward(x), y);
    });
  });
}

TEST_CASE("join(throw_on_early_termination): every rank throws DistributedError when the first runs out") {
  run_ranks(2, [&](ProcessGroup& pg) {
    auto net = std::make_shared<test::Net>(1, test::NetSpec());
    DistributedDataParallel ddp(net, borrow(pg));
    const int mine = pg.rank() == 0 ? 2 : 4;
    int forwards = 0;
    std::string message;
    try {
      ddp.join(
          [&] {
            for (int t = 0; t < mine; ++t) {
              Tensor x = test::random({2, 6}, DType::f32, 10 + t);
              Tensor out = ddp.forward<test::Net>(x);
              ++forwards;
              mse_loss(out, zeros({2, 4})).backward();
              ddp.finish_gradient_synchronization();
            }
          },
          JoinOptions().throw_on_early_termination(true));
    } catch (const DistributedError& e) {
      message = e.what();
    }
    expect(!message.empty(), "no DistributedError");
    expect(forwards == 2, "rank " + std::to_string(pg.rank()) + " ran " + std::to_string(forwards) + " forwards");
    test::expect_contains(message, pg.rank() == 0 ? "rank 0 exhausted its inputs" : "exhausted its inputs",
                          "early termination");
    expect(!ddp.join_active(), "join mode ends with the exception");
  });
}
