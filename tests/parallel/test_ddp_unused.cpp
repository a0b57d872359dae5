// find_unused_parameters by graph walk (Note [Unused parameters], reducer.cpp), on 2 Gloo ranks:
// the unused parameter's bucket launches as backward starts (not at finish), gradients are final
// when backward returns, the used counters are read only when something is unused, the result
// equals one process, also when a checkpoint region hides parameters from the walk; a parameter the
// walk did not see that still gets a gradient fails clearly.
#include <set>

#include <kiln/autograd/checkpoint.h>
#include <kiln/autograd/meta.h>
#include <kiln/parallel/ddp.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

namespace {

// 'spare' (never used by forward) registered last: bucket 0 (reduced first) holds it.
TrainSpec with_spare() {
  TrainSpec s;
  s.net.unused = true;
  return s;
}

DDPOptions find_unused() { return small_buckets().find_unused_parameters(true); }

}  // namespace

TEST_CASE("find_unused_parameters: the walk after forward launches the unused bucket during backward") {
  for (bool walk : {true, false}) {
    CAPTURE(walk);
    run_ranks(2, [&](ProcessGroup& pg) {
      const TrainSpec s = with_spare();
      DdpNet rank(pg, s, find_unused());
      auto& [net, ddp] = rank;
      REQUIRE(ddp.reducer().bucket_of(7) == 0);  // spare.bias (7): reduced first
      // fc2.weight's gradient arrives mid-backward (after fc3's, before fc1's); this hook runs after DDP's.
      int64_t launched_mid_backward = -1;
      autograd::register_post_accumulate_grad_hook(net->fc2->weight, [&](const Tensor&) {
        launched_mid_backward = ddp.reducer().allreduces_this_iteration();
      });
      optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
      for (int step = 0; step < s.steps; ++step) {
        opt.zero_grad();
        auto [x, y] = test::batch_rows(s, step, pg.rank() * s.batch, s.batch, 2 * s.batch);
        Tensor out;
        if (walk) {
          out = ddp.forward<test::Net>(x);  // walks the graph (prepare_for_backward)
        } else {
          ddp.prepare_forward();
          out = net->forward(x);  // no walk: unused parameters are found at finish()
        }
        mse_loss(out, y).backward();
        // The buckets of spare (6, 7) and fc3 (4, 5) come first (before and after the rebuild).
        std::set<size_t> first;
        for (size_t i = 4; i < 8; ++i) first.insert(ddp.reducer().bucket_of(i));
        if (walk) {
          expect(launched_mid_backward >= int64_t(first.size()),
                 "spare's and fc3's buckets launched before fc2's gradient arrived: " +
                     std::to_string(launched_mid_backward) + " of " + std::to_string(first.size()));
          expect(!ddp.reducer().iteration_in_progress(), "gradients final when backward returns");
        } else if (step == 0) {  // (the rebuild then puts spare last)
          expect(launched_mid_backward == 0, "without the walk bucket 0 waits for finish: " +
                                                 std::to_string(launched_mid_backward));
          expect(ddp.reducer().iteration_in_progress(), "open until finish");
        }
        ddp.finish_gradient_synchronization();
        expect(!net->spare->weight.grad().defined(), "no rank used spare: its .grad stays undefined");
        opt.step();
      }
      expect(ddp.reducer().used_counter_reads() == s.steps, "spare unused: counters read every step");
      test::expect_close(test::flat_parameters(*net), test::train_reference(s, 2), 1e-5, "parameters");
    });
  }
}

TEST_CASE("find_unused_parameters with nothing unused: no host read of the used counters") {
  for (bool views : {false, true}) {
    CAPTURE(views);
    run_ranks(2, [&](ProcessGroup& pg) {
      test::TrainSpec s;
      s.accum = 2;  // no_sync micro-steps walk too
      auto opts = find_unused().gradient_as_bucket_view(views);
      auto got = test::train_ddp(pg, s, opts, [&](DistributedDataParallel& ddp, int) {
        expect(ddp.reducer().used_counter_reads() == 0, "used counters never read");
      });
      test::expect_close(got, test::train_reference(s, 2), 1e-5, "parameters");
    });
  }
}

TEST_CASE("find_unused_parameters with a re-entrant checkpoint region: unused ones found at finish, as one process") {
  run_ranks(2, [&](ProcessGroup& pg) {
    const TrainSpec s = with_spare();
    DdpNet rank(pg, s, find_unused());
    auto& [net, ddp] = rank;
    optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
    for (int step = 0; step < s.steps; ++step) {
      opt.zero_grad();
      auto [x, y] = test::batch_rows(s, step, pg.rank() * s.batch, s.batch, 2 * s.batch);
      ddp.prepare_forward();
      Tensor h = relu(net->fc1->forward(x));
      h = autograd::checkpoint([&](const Tensor& t) { return relu(net->fc2->forward(t)); }, h);  // fc2 hidden
      Tensor out = net->fc3->forward(h);
      ddp.prepare_for_backward({out});
      mse_loss(out, y).backward();
      expect(ddp.reducer().iteration_in_progress(), "the walk saw a checkpoint: spare is left to finish");
      ddp.finish_gradient_synchronization();
      opt.step();
    }
    test::expect_close(test::flat_parameters(*net), test::train_reference(s, 2), 1e-5, "parameters");
  });
}

TEST_CASE("find_unused_parameters: a parameter the walk did not see that gets a gradient fails clearly") {
  run_ranks(2, [&](ProcessGroup& pg) {
    const TrainSpec s = with_spare();
    DdpNet rank(pg, s, find_unused());
    auto& [net, ddp] = rank;
    auto [x, y] = test::batch_rows(s, 0, pg.rank() * s.batch, s.batch, 2 * s.batch);
    Tensor out = ddp.forward<test::Net>(x);  // walks from out only: spare unreachable
    Tensor side = net->spare->forward(relu(net->fc1->forward(x)));  // ... but used here, into the same loss
    std::string msg = error_of([&] { (mse_loss(out, y) + mse_loss(side, y)).backward(); }, "unseen use");
    expect_contains(msg, "'spare.", "names spare");
    expect_contains(msg, "prepare_for_backward", "hint");
  });
}
