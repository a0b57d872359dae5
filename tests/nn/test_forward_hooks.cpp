// Module forward hooks run by nn::call (torch's module(args) with register_forward_pre_hook /
// register_forward_hook), and autograd::in_backward, which tells a forward run by checkpoint's
// recompute from the first one (both are what FSDP's units hook into).
#include "test_util.h"

#include <kiln/autograd/checkpoint.h>
#include <kiln/autograd/engine.h>
#include <kiln/nn/linear.h>

using namespace kiln;
using kiln::test::values;

TEST_CASE("nn::call runs the pre-hooks, forward, then the hooks with the output; forward() alone runs none") {
  Generator g(1);
  auto lin = std::make_shared<nn::Linear>(nn::LinearOptions(3, 2).generator(g));
  std::vector<std::string> log;
  lin->register_forward_pre_hook([&](nn::Module& m) { log.push_back("pre " + m.name()); });
  lin->register_forward_pre_hook([&](nn::Module&) { log.push_back("pre 2"); });
  Tensor seen;
  lin->register_forward_hook([&](nn::Module&, const Tensor& out) {
    log.push_back("post");
    seen = out;
  });
  Tensor x = ones({4, 3});
  Tensor y = nn::call(*lin, x);
  CHECK(log == std::vector<std::string>{"pre Linear", "pre 2", "post"});
  CHECK(seen.is_same(y));
  CHECK(values(y) == values(lin->forward(x)));
  CHECK(log.size() == 3);  // the direct forward ran no hook
}

TEST_CASE("autograd::in_backward is true in checkpoint's recompute and false in the first forward") {
  Generator g(2);
  auto lin = std::make_shared<nn::Linear>(nn::LinearOptions(3, 3).generator(g));
  std::vector<bool> seen;
  lin->register_forward_pre_hook([&](nn::Module&) { seen.push_back(autograd::in_backward()); });
  Tensor x = ones({2, 3});
  x.requires_grad_();
  Tensor y = autograd::checkpoint([&](const Tensor& in) { return nn::call(*lin, in); }, x);
  CHECK(!autograd::in_backward());
  sum(y).backward();
  CHECK(seen == std::vector<bool>{false, true});
  CHECK(!autograd::in_backward());
}
