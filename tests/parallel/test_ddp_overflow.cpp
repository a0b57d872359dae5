// Note [Divide before summing] (parallel/reducer.cpp): gradients whose sum over ranks overflows
// f16 but whose average does not come out exact from the reducer (f16 buckets) and from the
// fp16/bf16 compress hooks (f32 buckets, 16-bit wire). Summing first would give inf.
#include <cmath>

#include <kiln/parallel/comm_hooks.h>
#include <kiln/parallel/ddp.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using kiln::test::expect;
using kiln::test::run_ranks;

namespace {

// loss = sum(w * c): the gradient of w is c exactly, in w's dtype.
struct Scaled : nn::Module {
  explicit Scaled(DType dtype) { w = register_parameter("w", ones({4}, dtype)); }
  Tensor forward(const Tensor& c) { return sum(w * c); }
  std::string name() const override { return "Scaled"; }
  Tensor w;
};

// Rank r's gradient is 30000 + 20000 * r / (world - 1): between 30000 and 50000, so any two
// ranks' sum passes f16's largest finite value (65504) while the average is 40000.
double rank_gradient(int rank, int world) { return 30000.0 + 20000.0 * rank / (world - 1); }

std::vector<double> reduced_gradient(ProcessGroup& pg, DType dtype, CommHook hook) {
  auto net = std::make_shared<Scaled>(dtype);
  DistributedDataParallel ddp(net, test::borrow(pg));
  if (hook) ddp.register_comm_hook(hook);
  Tensor c = full({4}, rank_gradient(pg.rank(), pg.size()), dtype);
  ddp.forward<Scaled>(c).backward();
  ddp.finish_gradient_synchronization();
  return test::values(net->w.grad());
}

}  // namespace

TEST_CASE("f16 buckets: the average of gradients whose sum overflows f16 is finite and right") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    run_ranks(world, [&](ProcessGroup& pg) {
      auto g = reduced_gradient(pg, DType::f16, nullptr);
      for (double v : g)
        expect(std::isfinite(v) && std::fabs(v - 40000.0) <= 40000.0 * 2e-3,
               "f16 average " + std::to_string(v) + ", expected 40000 (inf means the sum came before the division)");
    });
  }
}

TEST_CASE("fp16 and bf16 compress hooks divide before the 16-bit sum") {
  run_ranks(2, [&](ProcessGroup& pg) {
    for (auto [hook, rtol, name] : {std::tuple{CommHook(fp16_compress_hook), 1e-3, "fp16"},
                                    std::tuple{CommHook(bf16_compress_hook), 8e-3, "bf16"}}) {
      auto g = reduced_gradient(pg, DType::f32, hook);
      for (double v : g)
        expect(std::isfinite(v) && std::fabs(v - 40000.0) <= 40000.0 * rtol,
               std::string(name) + " hook average " + std::to_string(v) + ", expected 40000");
    }
  });
}
