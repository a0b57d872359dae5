// DistributedDataParallel: bucket assignment (pure, no processes), then multi-process runs over
// Gloo (fork + a file store) comparing N ranks with one rank on N times the batch.
#include <algorithm>

#include <kiln/parallel/bucket.h>
#include <kiln/parallel/ddp.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using kiln::test::run_ranks;

namespace {

// f32 tensors of the given element counts.
std::vector<Tensor> f32_tensors(const std::vector<int64_t>& numels) {
  std::vector<Tensor> out;
  for (int64_t n : numels) out.push_back(empty({n}, DType::f32));
  return out;
}

std::vector<size_t> reversed(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

using Groups = std::vector<std::vector<size_t>>;

}  // namespace

TEST_CASE("bucket assignment: reverse order, first-bucket cap, then the main cap") {
  // 10 tensors of 100 floats (400 bytes). First cap 800 bytes -> 2 tensors, then 1200 -> 3 each.
  auto t = f32_tensors(std::vector<int64_t>(10, 100));
  Groups g = compute_bucket_assignment(t, reversed(10), 800, 1200);
  CHECK(g == Groups{{9, 8}, {7, 6, 5}, {4, 3, 2}, {1, 0}});
}

TEST_CASE("bucket assignment: a tensor bigger than the cap gets its own bucket; caps are inclusive") {
  auto t = f32_tensors({10, 1000, 10, 10});  // 40, 4000, 40, 40 bytes
  Groups g = compute_bucket_assignment(t, {0, 1, 2, 3}, 40, 100);
  // 40 >= 40 closes the first bucket at once; 4000 closes its own; 40 + 40 < 100 stays open.
  CHECK(g == Groups{{0}, {1}, {2, 3}});
}

TEST_CASE("bucket assignment: dtypes never share a bucket, each has its own first-bucket cap") {
  std::vector<Tensor> t{empty({100}, DType::f32), empty({100}, DType::f64), empty({100}, DType::f32),
                        empty({100}, DType::f64), empty({100}, DType::f32)};
  // f32: 400 bytes each; f64: 800 bytes each. First cap 400: one tensor per first bucket; then 1600.
  Groups g = compute_bucket_assignment(t, reversed(5), 400, 1600);
  // Visit order 4(f32) 3(f64) 2(f32) 1(f64) 0(f32): f32 first bucket {4}; f64 first bucket {3};
  // then f32 {2, 0} (800 < 1600, left open) and f64 {1} (left open), ordered by first position.
  CHECK(g == Groups{{4}, {3}, {2, 0}, {1}});
  for (const auto& bucket : g)
    for (size_t i : bucket) CHECK(t[i].dtype() == t[bucket.front()].dtype());
}

TEST_CASE("bucket assignment: default caps put a small model in one bucket; bad orders are refused") {
  auto t = f32_tensors({64, 8, 8, 1});
  CHECK(compute_bucket_assignment(t, reversed(4), mib_to_bytes(1), mib_to_bytes(25)) == Groups{{3, 2, 1, 0}});
  CHECK(mib_to_bytes(25) == 25u * 1024 * 1024);
  CHECK_ERROR_CONTAINS(compute_bucket_assignment(t, {0, 1, 1, 3}, 100, 100), "tensor 1 appears twice");
  CHECK_ERROR_CONTAINS(compute_bucket_assignment(t, {0, 7}, 100, 100), "index 7");
}

// ---- Multi-process: N ranks x batch b against one process with batch N*b (ddp_fixtures.h).

TEST_CASE("N ranks x batch b match one process on batch N*b after 5 AdamW steps (f32, f64)") {
  for (int world : {2, 3})
    for (DType dt : {DType::f32, DType::f64})
      for (bool small : {false, true}) {
        CAPTURE(world);
        CAPTURE(dt);
        CAPTURE(small);
        run_ranks(world, [&](ProcessGroup& pg) {
          test::TrainSpec s;
          s.dtype = dt;
          auto got = test::train_ddp(pg, s, small ? test::small_buckets() : DDPOptions(),
                                     [&](DistributedDataParallel& ddp, int) {
                                       test::expect(ddp.reducer().allreduces_this_iteration() ==
                                                        int64_t(ddp.reducer().bucket_count()),
                                                    "one all-reduce per bucket per step");
                                       test::expect(!small || ddp.reducer().bucket_count() >= 3,
                                                    "small caps give several buckets");
                                     });
          test::expect_close(got, test::train_reference(s, world), dt == DType::f64 ? 1e-10 : 1e-5,
                             "parameters on rank " + std::to_string(pg.rank()));
        });
      }
}

TEST_CASE("accumulation over 3 micro-steps under no_sync: one all-reduce per bucket per step, same result") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    run_ranks(world, [&](ProcessGroup& pg) {
      test::TrainSpec s;
      s.accum = 3;
      s.batch = 2;
      int64_t last_total = 0;
      auto got = test::train_ddp(pg, s, test::small_buckets(), [&](DistributedDataParallel& ddp, int step) {
        const Reducer& r = ddp.reducer();
        test::expect(r.allreduces_total() - last_total == int64_t(r.bucket_count()),
                     "step " + std::to_string(step) + ": " + std::to_string(r.allreduces_total() - last_total) +
                         " all-reduces for " + std::to_string(r.bucket_count()) + " buckets");
        test::expect(r.iteration() == step + 1, "one synced iteration per optimizer step");
        last_total = r.allreduces_total();
      });
      test::expect_close(got, test::train_reference(s, world), 1e-5, "accumulated parameters");
    });
  }
}

TEST_CASE("gradient_as_bucket_view: .grad lives inside its bucket, results equal the copy mode") {
  run_ranks(2, [&](ProcessGroup& pg) {
    test::TrainSpec s;
    auto copied = test::train_ddp(pg, s, test::small_buckets());
    int checked = 0;
    auto viewed = test::train_ddp(
        pg, s, test::small_buckets().gradient_as_bucket_view(true), [&](DistributedDataParallel& ddp, int step) {
          const Reducer& r = ddp.reducer();
          for (size_t i = 0; i < r.parameters().size(); ++i) {
            Tensor g = r.parameters()[i].grad();
            const Bucket& b = r.buckets()[r.bucket_of(i)];
            auto lo = static_cast<const char*>(b.flat.data_ptr());
            auto p = static_cast<const char*>(g.data_ptr());
            test::expect(g.storage() == b.flat.storage() && p >= lo && p + g.nbytes() <= lo + b.grads().nbytes(),
                         "step " + std::to_string(step) + ": .grad of parameter " + std::to_string(i) +
                             " is not a slice of bucket " + std::to_string(r.bucket_of(i)));
            ++checked;
          }
        });
    test::expect(checked == 5 * 6, "every parameter checked at every step");
    test::expect(viewed == copied, "view mode and copy mode give bit-identical parameters");
    test::expect_close(viewed, test::train_reference(s, 2), 1e-5, "view-mode parameters");
  });
}

TEST_CASE("buckets are rebuilt in gradient arrival order after iteration 1, unless rebuild_buckets(false)") {
  for (bool fixed : {false, true}) {
    CAPTURE(fixed);
    run_ranks(2, [&](ProcessGroup& pg) {
      test::TrainSpec s;
      s.net.shuffled = true;  // registered fc3, fc1, fc2: reverse registration starts with fc2
      auto order = [](const Reducer& r) {
        std::vector<size_t> o;
        for (const Bucket& b : r.buckets()) o.insert(o.end(), b.params.begin(), b.params.end());
        return o;
      };
      std::vector<size_t> first;
      auto got = test::train_ddp(pg, s, test::small_buckets().rebuild_buckets(!fixed),
                                 [&](DistributedDataParallel& ddp, int step) {
                                   const Reducer& r = ddp.reducer();
                                   if (step == 0) first = order(r);
                                   test::expect(r.bucket_rebuilds() == (fixed ? 0 : 1), "rebuild count");
                                 });
      // Initial: reverse registration, fc2.bias (5) first. Rebuilt: fc3 (0, 1) arrives first.
      std::vector<size_t> initial{5, 4, 3, 2, 1, 0};
      test::expect(fixed ? first == initial : first != initial, "bucket order after iteration 1");
      if (!fixed) test::expect(first[0] <= 1 && first[1] <= 1, "fc3's gradients arrive first");
      test::expect_close(got, test::train_reference(s, 2), 1e-5, "parameters");
    });
  }
}

TEST_CASE("bf16 and fp16 compress hooks: gradients close to the uncompressed ones, but not identical") {
  run_ranks(2, [&](ProcessGroup& pg) {
    test::TrainSpec s;
    auto grads_with = [&](CommHook hook) {
      test::DdpNet rank(pg, s, test::small_buckets());
      auto& [net, ddp] = rank;
      if (hook) ddp.register_comm_hook(hook);
      auto [x, y] = test::batch_rows(s, 0, pg.rank() * s.batch, s.batch, 2 * s.batch);
      mse_loss(ddp.forward<test::Net>(x), y).backward();
      ddp.finish_gradient_synchronization();
      std::vector<double> g;
      for (const Tensor& p : net->parameters()) {
        auto v = test::values(p.grad());
        g.insert(g.end(), v.begin(), v.end());
      }
      return g;
    };
    auto plain = grads_with(nullptr);
    double scale = 0;
    for (double v : plain) scale = std::max(scale, std::fabs(v));
    // Each rank's gradient and the sum are rounded to 16 bits, and opposite signs cancel in the
    // sum, so the bound is 4 units of rounding of the summands' scale, not of the result.
    for (auto [hook, unit, name] : {std::tuple{CommHook(bf16_compress_hook), 1.0 / 256, "bf16"},
                                    std::tuple{CommHook(fp16_compress_hook), 1.0 / 2048, "fp16"}}) {
      auto got = grads_with(hook);
      test::expect(got != plain, std::string(name) + ": the hook changed nothing (not compressed?)");
      for (size_t i = 0; i < got.size(); ++i)
        test::expect(std::fabs(got[i] - plain[i]) <= 4 * unit * (std::fabs(plain[i]) + scale * 0.1),
                     std::string(name) + ": gradient " + std::to_string(i) + " is " + std::to_string(got[i]) +
                         ", uncompressed " + std::to_string(plain[i]));
    }
  });
}

TEST_CASE("world size 1: DDP trains bit-identically to no DDP, and still fills and all-reduces every bucket") {
  for (bool view : {false, true}) {
    CAPTURE(view);
    run_ranks(1, [&](ProcessGroup& pg) {
      test::TrainSpec s;
      int checked = 0;
      auto got = test::train_ddp(pg, s, test::small_buckets().gradient_as_bucket_view(view),
                                 [&](DistributedDataParallel& ddp, int step) {
                                   const Reducer& r = ddp.reducer();
                                   test::expect(r.bucket_count() >= 3, "small caps give several buckets");
                                   test::expect(r.allreduces_this_iteration() == int64_t(r.bucket_count()),
                                                "one all-reduce per bucket at world size 1 too");
                                   // The bucket holds each gradient, copied in (or as the view).
                                   for (size_t i = 0; i < r.parameters().size(); ++i) {
                                     const Bucket& b = r.buckets()[r.bucket_of(i)];
                                     size_t k = std::find(b.params.begin(), b.params.end(), i) - b.params.begin();
                                     Tensor g = r.parameters()[i].grad();
                                     test::expect(test::values(b.slice(k, g.shape())) == test::values(g),
                                                  "step " + std::to_string(step) + ": bucket " +
                                                      std::to_string(r.bucket_of(i)) + " does not hold the gradient "
                                                      "of parameter " + std::to_string(i));
                                     ++checked;
                                   }
                                 });
      test::expect(checked == 5 * 6, "every parameter checked at every step");
      test::expect(got == test::train_reference(s, 1), "parameters differ from training without DDP");
    });
  }
}
