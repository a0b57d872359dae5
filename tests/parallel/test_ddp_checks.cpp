// DistributedDataParallel's refusals and consistency checks across real processes: different
// models at construction, BatchNorm buffers kept identical, parameters without a gradient, and a
// rank that issues an extra collective (Note [Bucket order check]).
#include <kiln/parallel/ddp.h>
#include <kiln/parallel/file_store.h>

#include "parallel/ddp_fixtures.h"
#include "parallel/temp_dir.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

namespace {

struct BnNet : nn::Module {
  BnNet() {
    Generator g(7);
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(3));
    fc = register_module("fc", std::make_shared<nn::Linear>(nn::LinearOptions(12, 4).generator(g)));
  }
  Tensor forward(const Tensor& x) { return fc->forward(bn->forward(x).flatten(1)); }
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> fc;
};

// Every rank's copy of `t` (f64, same shape everywhere), gathered.
std::vector<std::vector<double>> gather(ProcessGroup& pg, const Tensor& t) {
  Tensor in = t.to(DType::f64).contiguous();
  Tensor out = zeros({pg.size() * in.numel()}, DType::f64);
  pg.allgather(out, in)->wait();
  std::vector<std::vector<double>> per_rank;
  for (int r = 0; r < pg.size(); ++r) per_rank.push_back(test::values(out.narrow(0, r * in.numel(), in.numel())));
  return per_rank;
}

bool same_on_all_ranks(ProcessGroup& pg, const Tensor& t) {
  auto all = gather(pg, t);
  for (const auto& v : all)
    if (v != all[0]) return false;
  return true;
}

}  // namespace

TEST_CASE("different models across ranks are refused at construction, naming the parameter") {
  struct Case {
    int world_size;
    void (*differ)(test::NetSpec& spec, int rank);  // this rank's model
    const char* expected;
    const char* what;
  };
  const Case cases[] = {
      {2, [](test::NetSpec& s, int r) { if (r == 1) s.in = 7; },
       "rank 1 has 'fc1.weight' of shape [8, 7] where rank 0 has [8, 6]", "shape mismatch"},
      {3, [](test::NetSpec& s, int r) { s.shuffled = r == 2; },
       "rank 2 has parameter 'fc3.weight' where rank 0 has parameter 'fc1.weight'", "order mismatch"},
      {2, [](test::NetSpec& s, int r) { s.unused = r == 0; }, "the first one rank 1 lacks is parameter 'spare.weight'",
       "count mismatch"},
  };
  for (const Case& c : cases)
    run_ranks(c.world_size, [&](ProcessGroup& pg) {
      test::NetSpec spec;
      c.differ(spec, pg.rank());
      auto net = std::make_shared<test::Net>(1, spec);
      std::string msg = error_of([&] { DistributedDataParallel ddp(net, borrow(pg)); }, c.what);
      expect_contains(msg, c.expected, c.what);
    });
}

TEST_CASE("ranks that froze different parameters are refused at construction with a DistributedError") {
  run_ranks(2, [&](ProcessGroup& pg) {
    auto net = std::make_shared<test::Net>(1, test::NetSpec());
    if (pg.rank() == 1) net->fc2->weight.requires_grad_(false);
    bool refused = false;
    try {
      DistributedDataParallel ddp(net, borrow(pg));
    } catch (const DistributedError& e) {
      refused = true;
      expect_contains(e.what(), "rank 1 has parameter 'fc2.weight' with requires_grad=false where rank 0 has "
                                "requires_grad=true", "frozen mismatch");
    }
    expect(refused, "a model frozen differently across ranks was accepted");
    // The same parameter frozen everywhere is fine: it is broadcast, never reduced.
    auto same = std::make_shared<test::Net>(1, test::NetSpec());
    same->fc2->weight.requires_grad_(false);
    DistributedDataParallel ddp(same, borrow(pg));
    expect(ddp.reducer().parameters().size() == 5, "5 of 6 parameters reduced");
  });
}

TEST_CASE("broadcast_buffers keeps BatchNorm running statistics identical across ranks") {
  for (bool broadcast : {true, false}) {
    CAPTURE(broadcast);
    run_ranks(2, [&](ProcessGroup& pg) {
      auto net = std::make_shared<BnNet>();
      DistributedDataParallel ddp(net, borrow(pg), DDPOptions().broadcast_buffers(broadcast));
      optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        Tensor x = test::random({4, 3, 2, 2}, DType::f32, 10 * step + pg.rank());  // different data per rank
        mse_loss(ddp.forward<BnNet>(x), zeros({4, 4})).backward();
        ddp.finish_gradient_synchronization();
        opt.step();
      }
      // Each rank's last forward updated the statistics from its own batch...
      expect(!same_on_all_ranks(pg, net->bn->running_mean), "running_mean after local forwards differs");
      // ...and the next forward starts from rank 0's.
      ddp.prepare_forward();
      bool same = same_on_all_ranks(pg, net->bn->running_mean) && same_on_all_ranks(pg, net->bn->running_var) &&
                  same_on_all_ranks(pg, net->bn->num_batches_tracked);
      expect(same == broadcast, broadcast ? "buffers differ after the broadcast" : "buffers equal without broadcast");
      expect(same_on_all_ranks(pg, net->fc->weight), "parameters stay identical");
    });
  }
}

TEST_CASE("a parameter without a gradient: a clear error naming it, unless find_unused_parameters") {
  run_ranks(2, [](ProcessGroup& pg) {
    test::TrainSpec s;
    s.net.unused = true;
    std::string msg = error_of([&] { test::train_ddp(pg, s, test::small_buckets()); }, "unused parameter");
    expect_contains(msg, "'spare.weight', 'spare.bias'", "unused names");
    expect_contains(msg, "find_unused_parameters(true)", "hint");
    expect_contains(msg, "iteration 1", "iteration");
  });
  for (bool views : {false, true}) {
    CAPTURE(views);
    run_ranks(2, [&](ProcessGroup& pg) {
      test::TrainSpec s;
      s.net.unused = true;
      auto opts = test::small_buckets().find_unused_parameters(true).gradient_as_bucket_view(views);
      auto got = test::train_ddp(pg, s, opts, [&](DistributedDataParallel& ddp, int step) {
        // (Step 0 ends with the rebuild, which may change the number of buckets.)
        expect(step == 0 || ddp.reducer().allreduces_this_iteration() == int64_t(ddp.reducer().bucket_count()),
               "every bucket reduced, the unused one included: " +
                   std::to_string(ddp.reducer().allreduces_this_iteration()) + " of " +
                   std::to_string(ddp.reducer().bucket_count()));
      });
      // No rank used spare, so its .grad stays undefined and AdamW skips it, as in the reference.
      test::expect_close(got, test::train_reference(s, 2), 1e-5, "parameters with an unused branch");
    });
  }
}

TEST_CASE("a rank that issues an extra collective is caught by the bucket order check") {
  test::TempDir side("kiln_ddp_order");  // a store outside the group the order check breaks
  const std::string& dir = side.path;
  test::RunRanksOptions options;
  options.timeout = std::chrono::seconds(4);
  run_ranks(
      2,
      [&](ProcessGroup& pg) {
        // Three layers of 4x4: three buckets of 20 gradients (80 bytes) and the same tail each.
        test::NetSpec spec{4, 4, 4};
        auto net = std::make_shared<test::Net>(1, spec);
        auto opts = DDPOptions().first_bucket_cap_mb(80.0 / (1 << 20)).bucket_cap_mb(80.0 / (1 << 20));
        DistributedDataParallel ddp(net, borrow(pg), opts);
        expect(ddp.reducer().bucket_count() == 3, "three buckets");
        Tensor x = test::random({2, 4}, DType::f32, 3);
        if (pg.rank() == 1) {
          // 7 in every slot: f32 codes are two base-2^24 digits, so they read 7 + 7 * 2^24.
          Tensor extra = full({ddp.reducer().buckets()[0].flat.numel()}, 7.0);
          pg.allreduce(extra)->wait();  // rank 0 never issues this one
        }
        std::string msg = error_of(
            [&] {
              mse_loss(ddp.forward<test::Net>(x), zeros({2, 4})).backward();
              ddp.finish_gradient_synchronization();
            },
            "order check");
        expect_contains(msg, "collective order mismatch", "order");
        expect_contains(msg, "rank " + std::to_string(pg.rank()) + " all-reduced bucket 0 of iteration 1", "bucket");
        expect_contains(msg, "sequence number", "sequence number");
        expect_contains(msg, pg.rank() == 0 ? "rank 1 contributed bucket 117440519 of iteration 117440519"
                                            : "rank 0 contributed bucket 1 of iteration 1",
                        "the other rank's codes");
        // The DDP refuses to go on.
        std::string again = error_of([&] { ddp.finish_gradient_synchronization(); }, "after failure");
        expect_contains(again, "unusable after an earlier failure", "poisoned");
        // Rank 1's last bucket never gets a partner; meet outside the broken group, then leave
        // without the harness's final barrier.
        auto store = make_file_store(dir, 2);
        store->add("done", 1);
        for (int i = 0; i < 3000 && store->add("done", 0) < 2; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::fflush(nullptr);
        ::_exit(0);
      },
      options);
}

TEST_CASE("Note [Deferred order check]: where the order check is read, and the same results either way") {
  for (OrderCheck mode : {OrderCheck::automatic, OrderCheck::every_iteration, OrderCheck::deferred})
    for (bool hooked : {false, true})
      for (bool unused : {false, true}) {
        CAPTURE(static_cast<int>(mode));
        CAPTURE(hooked);
        CAPTURE(unused);
        run_ranks(2, [&](ProcessGroup& pg) {
          test::TrainSpec s;
          s.net.unused = unused;
          auto opts = test::small_buckets().order_check(mode).find_unused_parameters(unused);
          // An f64 comm hook: the codes travel in the side all-reduce.
          dist::CommHook hook = nullptr;
          if (hooked)
            hook = [](ProcessGroup& g, GradBucket& bucket) {
              ops::mul_(bucket.buffer, 0.5);
              return g.allreduce(bucket.buffer);
            };
          int64_t host = 0, deferred = 0;
          auto got = test::train_ddp(
              pg, s, opts,
              [&](DistributedDataParallel& ddp, int) {
                host = ddp.reducer().order_checks_on_host();
                deferred = ddp.reducer().order_checks_deferred();
                ddp.check_collective_order();  // nothing to report
              },
              hook);
          // On the CPU, automatic reads every iteration; find_unused_parameters always does.
          const bool read = mode != OrderCheck::deferred || unused;
          test::expect(host == (read ? s.steps : 0), "iterations read on the host: " + std::to_string(host));
          test::expect(deferred == (read ? 0 : s.steps), "iterations compared on the device: " + std::to_string(deferred));
          test::expect_close(got, test::train_reference(s, 2), 1e-5, "parameters on rank " + std::to_string(pg.rank()));
        });
      }
}

TEST_CASE("Note [Deferred order check]: a mismatch compared on the device is reported by check_collective_order") {
  run_ranks(2, [&](ProcessGroup& pg) {
    // Three buckets of the same size, as in the test above, kept (no rebuild, which would read the
    // deferred check at the end of iteration 1).
    test::NetSpec spec{4, 4, 4};
    auto net = std::make_shared<test::Net>(1, spec);
    auto opts = DDPOptions().first_bucket_cap_mb(80.0 / (1 << 20)).bucket_cap_mb(80.0 / (1 << 20))
                    .rebuild_buckets(false).order_check(OrderCheck::deferred);
    DistributedDataParallel ddp(net, borrow(pg), opts);
    REQUIRE(ddp.reducer().bucket_count() == 3);
    Tensor x = test::random({2, 4}, DType::f32, 3);
    Tensor extra = full({ddp.reducer().buckets()[0].flat.numel()}, 7.0);
    // Rank 1 issues one collective too many before backward, rank 0 one after: the counts match,
    // so nothing hangs, but every bucket is summed with the wrong partner.
    if (pg.rank() == 1) pg.allreduce(extra)->wait();
    mse_loss(ddp.forward<test::Net>(x), zeros({2, 4})).backward();
    ddp.finish_gradient_synchronization();  // deferred: no host read, no error yet
    if (pg.rank() == 0) pg.allreduce(extra)->wait();
    test::expect(ddp.reducer().order_checks_deferred() == 1 && ddp.reducer().order_checks_on_host() == 0,
                 "compared on the device");
    std::string msg = error_of([&] { ddp.check_collective_order(); }, "deferred order check");
    expect_contains(msg, "collective order mismatch", "order");
    expect_contains(msg, "rank " + std::to_string(pg.rank()) + " all-reduced bucket 0 of iteration 1", "bucket");
    expect_contains(msg, pg.rank() == 0 ? "rank 1 contributed bucket 117440519 of iteration 117440519"
                                        : "rank 0 contributed bucket 1 of iteration 1",
                    "the other rank's codes");
    expect_contains(msg, "deferred check", "says it was deferred");
    std::string again = error_of([&] { ddp.finish_gradient_synchronization(); }, "after failure");
    expect_contains(again, "unusable after an earlier failure", "poisoned");
  });
}
