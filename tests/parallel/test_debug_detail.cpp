// KILN_DISTRIBUTED_DEBUG=DETAIL (checked_process_group.h) on 2 Gloo ranks: matching collectives run
// as without the check; ranks that issue mismatched collectives (size, dtype, kind, reduce op,
// root) all get an error naming both descriptions instead of a hang or garbage; DDP on a checked
// group trains like one process; the level is read from KILN_ / TORCH_DISTRIBUTED_DEBUG.
#include <cstdlib>

#include <kiln/parallel/checked_process_group.h>
#include <kiln/parallel/debug_level.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

TEST_CASE("DETAIL: matching collectives give the same results as the unchecked group") {
  run_ranks(2, [](ProcessGroup& pg) {
    CheckedProcessGroup checked(borrow(pg));
    Tensor t = full({5}, double(pg.rank() + 1));
    checked.allreduce(t)->wait();
    test::expect_values(t, {3, 3, 3, 3, 3}, 0, "allreduce sum");
    Tensor b = full({3}, double(pg.rank() + 7), DType::f64);
    checked.broadcast(b, 1)->wait();
    test::expect_values(b, {8, 8, 8}, 0, "broadcast from rank 1");
    Tensor out = zeros({4});
    checked.allgather(out, full({2}, double(pg.rank())))->wait();
    test::expect_values(out, {0, 0, 1, 1}, 0, "allgather");
    checked.barrier()->wait();
    expect(checked.collectives_checked() == 4 && checked.sequence_number() == 4, "four checked collectives");
  });
}

TEST_CASE("DETAIL: mismatched collectives fail on every rank, naming the first difference") {
  struct Case {
    const char* what;
    std::function<void(ProcessGroup&, int rank)> issue;
    std::vector<std::string> expected;  // parts of the message
  };
  std::vector<Case> cases = {
      {"size",
       [](ProcessGroup& g, int r) {
         Tensor t = zeros({r == 0 ? 10 : 12});
         g.allreduce(t)->wait();
       },
       {"rank 0 issued collective #1 allreduce(sum) of 10 f32 [10]", "rank 1 issued collective #1 allreduce(sum) of 12 f32 [12]"}},
      {"dtype",
       [](ProcessGroup& g, int r) {
         Tensor t = zeros({4}, r == 0 ? DType::f32 : DType::f64);
         g.allreduce(t)->wait();
       },
       {"4 f32 [4]", "4 f64 [4]"}},
      {"kind",
       [](ProcessGroup& g, int r) {
         Tensor t = zeros({4});
         if (r == 0)
           g.allreduce(t)->wait();
         else
           g.broadcast(t, 0)->wait();
       },
       {"allreduce(sum) of 4", "broadcast(root 0) of 4"}},
      {"op",
       [](ProcessGroup& g, int r) {
         Tensor t = zeros({2, 3});
         g.allreduce(t, AllreduceOptions().op(r == 0 ? ReduceOp::sum : ReduceOp::max))->wait();
       },
       {"allreduce(sum) of 6 f32 [2, 3]", "allreduce(max) of 6 f32 [2, 3]"}},
      {"root",
       [](ProcessGroup& g, int r) {
         Tensor t = zeros({3});
         g.broadcast(t, r)->wait();
       },
       {"broadcast(root 0)", "broadcast(root 1)"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    run_ranks(2, [&](ProcessGroup& pg) {
      CheckedProcessGroup checked(borrow(pg));
      Tensor warm = zeros({1});
      checked.allreduce(warm)->wait();  // collective #0 matches
      std::string msg = error_of([&] { c.issue(checked, pg.rank()); }, c.what);
      expect_contains(msg, "collective mismatch (KILN_DISTRIBUTED_DEBUG=DETAIL)", "says what");
      for (const std::string& part : c.expected) expect_contains(msg, part, c.what);
    });
  }
}

TEST_CASE("DETAIL: DDP on a checked group trains like one process; a stray collective is named") {
  run_ranks(2, [](ProcessGroup& pg) {
    auto checked = std::make_shared<CheckedProcessGroup>(borrow(pg));
    test::TrainSpec s;
    auto got = test::train_ddp(*checked, s, test::small_buckets().find_unused_parameters(true));
    test::expect_close(got, test::train_reference(s, 2), 1e-5, "parameters");
    expect(checked->collectives_checked() > s.steps, "the buckets' collectives were checked");
  });
  run_ranks(2, [](ProcessGroup& pg) {
    auto checked = std::make_shared<CheckedProcessGroup>(borrow(pg));
    auto net = std::make_shared<test::Net>(1, test::NetSpec{});
    DistributedDataParallel ddp(net, checked, test::small_buckets());
    Tensor extra = zeros({7});
    std::string msg = error_of(
        [&] {
          if (pg.rank() == 1) checked->allreduce(extra);  // one collective too many: meets bucket 0's
          mse_loss(ddp.forward<test::Net>(test::random({2, 6}, DType::f32, 3)), zeros({2, 4})).backward();
          ddp.finish_gradient_synchronization();
        },
        "stray collective");
    expect_contains(msg, "allreduce(sum) of 7 f32 [7]", "names the stray all-reduce");
  });
}

TEST_CASE("debug levels from KILN_DISTRIBUTED_DEBUG, else TORCH_DISTRIBUTED_DEBUG") {
  ::unsetenv("KILN_DISTRIBUTED_DEBUG");
  ::unsetenv("TORCH_DISTRIBUTED_DEBUG");
  expect(debug_level() == DebugLevel::off, "unset: off");
  ::setenv("TORCH_DISTRIBUTED_DEBUG", "detail", 1);
  expect(debug_level() == DebugLevel::detail, "torch's variable, any case");
  ::setenv("KILN_DISTRIBUTED_DEBUG", "INFO", 1);
  expect(debug_level() == DebugLevel::info, "Kiln's wins");
  ::setenv("KILN_DISTRIBUTED_DEBUG", "LOUD", 1);
  expect_contains(error_of([] { debug_level(); }, "bad level"), "KILN_DISTRIBUTED_DEBUG=LOUD", "names it");
  ::unsetenv("KILN_DISTRIBUTED_DEBUG");
  ::unsetenv("TORCH_DISTRIBUTED_DEBUG");
  run_ranks(2, [](ProcessGroup& pg) {
    auto group = borrow(pg);
    expect(with_debug_checks(group, DebugLevel::info) == group, "INFO: not wrapped");
    auto wrapped = with_debug_checks(group, DebugLevel::detail);
    expect(dynamic_cast<CheckedProcessGroup*>(wrapped.get()) != nullptr, "DETAIL: wrapped");
    expect(with_debug_checks(wrapped, DebugLevel::detail) == wrapped, "not twice");
  });
}
