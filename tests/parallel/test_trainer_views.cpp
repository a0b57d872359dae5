// gradient_as_bucket_view under the Trainer: zero_grad keeps .grad as the bucket slice (zeroed in
// place), so after the first gradient of each parameter no step copies a gradient into a bucket.
#include <kiln/kiln.h>
#include <kiln/parallel/trainer.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using kiln::test::expect;
using kiln::test::run_ranks;
using kiln::test::TrainSpec;

TEST_CASE("Trainer + gradient_as_bucket_view: no gradient copies after the first, same weights as copy mode") {
  run_ranks(2, [](ProcessGroup& pg) {
    TrainSpec s;
    const int64_t b = 3;
    auto group = test::borrow(pg);
    auto train = [&](bool views, std::vector<int64_t>* copies) {
      auto net = std::make_shared<test::Net>(test::seed_for_rank(pg.rank()), s.net);
      auto opt = std::make_shared<optim::AdamW>(net->parameters(), optim::AdamWOptions(1e-2));
      Trainer t(net, opt, group,
                TrainerOptions().grad_accum_steps(2).clip_grad_norm(0.5).ddp(
                    test::small_buckets().gradient_as_bucket_view(views)));
      for (int step = 0; step < 4; ++step) {
        t.step([&](int m) {
          auto [x, y] = test::batch_rows(s, step, (m * 2 + pg.rank()) * b, b, 4 * b);
          return mse_loss(net->forward(x), y);
        });
        const Reducer& r = t.ddp()->reducer();
        if (copies) copies->push_back(r.grad_copies_into_buckets());
        if (!views) continue;
        for (size_t i = 0; i < r.parameters().size(); ++i) {
          Tensor g = r.parameters()[i].grad();
          const Bucket& bucket = r.buckets()[r.bucket_of(i)];
          expect(g.defined() && g.storage() == bucket.flat.storage(),
                 "after step " + std::to_string(step) + " .grad of parameter " + std::to_string(i) +
                     " is no longer its bucket slice");
          for (double v : test::values(g)) expect(v == 0.0, "zero_grad left a nonzero gradient");
        }
      }
      return test::flat_parameters(*net);
    };
    std::vector<int64_t> view_copies, copy_copies;
    auto viewed = train(true, &view_copies);
    auto copied = train(false, &copy_copies);
    // Views: each of the 6 parameters' first gradient (a fresh tensor) is copied in once, at step 0.
    expect(view_copies == std::vector<int64_t>(4, 6),
           "copies into buckets after each step: " + std::to_string(view_copies[0]) + ", " +
               std::to_string(view_copies[1]) + ", " + std::to_string(view_copies[2]) + ", " +
               std::to_string(view_copies[3]) + "; expected 6 at every step");
    // Copy mode copies every gradient of every synced backward (6 per step): the counter counts.
    expect(copy_copies.back() == 4 * 6, "copy mode made " + std::to_string(copy_copies.back()) + " copies");
    expect(viewed == copied, "view mode and copy mode give bit-identical parameters");
  });
}
