// static_graph (Note [Static graph], reducer.cpp) on 2 Gloo ranks against one process: fc2 is used
// inside a re-entrant checkpoint region and again outside it (two gradients per backward), and
// 'spare' is never used; the first iteration records that, later ones reduce during backward.
#include <kiln/parallel/ddp.h>

#include "parallel/static_graph_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

TEST_CASE("static_graph: a parameter used twice per backward and an unused one, as one process") {
  test::TrainSpec s;
  s.net.unused = true;
  const auto want = twice_forward_reference(s, 2);
  for (bool views : {false, true}) {
    CAPTURE(views);
    run_ranks(2, [&](ProcessGroup& pg) {
      DdpNet rank(pg, s, small_buckets().static_graph(true).gradient_as_bucket_view(views));
      auto& [net, ddp] = rank;
      optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
      for (int step = 0; step < s.steps; ++step) {
        opt.zero_grad(/*set_to_none=*/false);
        auto [x, y] = test::batch_rows(s, step, pg.rank() * s.batch, s.batch, 2 * s.batch);
        ddp.prepare_forward();
        mse_loss(twice_forward(*net, x), y).backward();
        // The recording backward reduces at finish; later ones are final when backward returns.
        expect(ddp.reducer().iteration_in_progress() == (step == 0), "reduced during backward after step 0");
        ddp.finish_gradient_synchronization();
        expect(ddp.reducer().allreduces_this_iteration() == int64_t(ddp.reducer().bucket_count()), "every bucket");
        if (step == 0) {  // rebuilt in the recorded order: spare (6, 7) first, it is ready at once
          const std::vector<size_t>& first = ddp.reducer().buckets()[0].params;
          expect(first[0] >= 6, "the unused parameter leads the rebuilt buckets");
        }
        opt.step();
      }
      test::expect_close(test::flat_parameters(*net), want, 1e-5, "parameters");
    });
  }
}

TEST_CASE("without static_graph, a parameter used twice per backward fails naming it") {
  run_ranks(2, [&](ProcessGroup& pg) {
    test::TrainSpec s;
    DdpNet rank(pg, s, small_buckets());
    auto& [net, ddp] = rank;
    auto [x, y] = test::batch_rows(s, 0, pg.rank() * s.batch, s.batch, 2 * s.batch);
    ddp.prepare_forward();
    Tensor out = twice_forward(*net, x);
    std::string msg = error_of([&] { mse_loss(out, y).backward(); }, "two gradients");
    expect_contains(msg, "'fc2.", "names fc2");
    expect_contains(msg, "twice", "says what happened");
  });
}
