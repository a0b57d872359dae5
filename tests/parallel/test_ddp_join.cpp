// DistributedDataParallel::join and Trainer::join on uneven inputs (Note [Join]): ranks with 3, 5
// and 7 batches end with the weights of one process that saw, at each step, the samples of the
// ranks still training; and throw_on_early_termination stops every rank at the first that ran out.
#include <kiln/parallel/trainer.h>

#include "parallel/join_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

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
    const auto want = join_reference(j);
    run_ranks(3, [&](ProcessGroup& pg) {
      auto got = train_joined(borrow(pg), j, test::small_buckets().gradient_as_bucket_view(c.views)
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
  const auto want = join_reference(j, &losses);
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
