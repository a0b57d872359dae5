// The backward pass's memory (Note [Backward frees gradients], Note [Autograd and core views]):
// views hand their gradient back as a view (no allocation), a split's backward makes one buffer,
// and a leaf steals a gradient nobody else holds. The depth test on a whole GPT is in
// tests/models/test_gpt_memory.cpp.
#include "test_util.h"

#include <kiln/core/memory_stats.h>

using namespace kiln;

namespace {

int64_t allocs() { return memory_stats(Device::cpu()).num_allocs; }

}  // namespace

TEST_CASE("backward through reshape, transpose, permute, squeeze, unsqueeze and a full slice allocates nothing") {
  // x holds 0..23, so each element of the view says which element of x it is.
  Tensor x = test::leaf([] {
    std::vector<double> v(24);
    for (int i = 0; i < 24; ++i) v[i] = i;
    return v;
  }(), {2, 3, 4});
  Tensor h = x * 1.0;  // a node whose gradient we watch arrive
  Tensor y = h.reshape({6, 4}).transpose(0, 1).unsqueeze(0).permute({2, 0, 1}).squeeze(1).slice(0, 0, 6);  // (6, 4)
  REQUIRE(y.shape() == Shape{6, 4});
  Tensor g = test::random(y.shape(), DType::f64, 7);
  int64_t at_h = -1;
  Tensor g_at_h;
  autograd::register_hook(h, [&](const Tensor& gh) {
    at_h = allocs();
    g_at_h = gh;
    return Tensor();
  });
  const int64_t before = allocs();
  y.backward(g);
  CHECK(at_h == before);                       // no allocation on the way from y to h
  CHECK(g_at_h.storage() == g.storage());      // h's gradient is g itself, viewed
  // And it is the right gradient: x.grad[y[j]] = g[j].
  const std::vector<double> ids = test::values(y.detach()), gv = test::values(g), xg = test::values(x.grad());
  for (size_t j = 0; j < ids.size(); ++j) CHECK(xg[size_t(ids[j])] == gv[j]);
}

TEST_CASE("a partial slice still gets zeros with its part filled") {
  Tensor x = test::grad_leaf({4, 5}, 3);
  Tensor y = x.slice(1, 1, 4) * 2.0;
  sum(y).backward();
  const std::vector<double> xg = test::values(x.grad());
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 5; ++c) CHECK(xg[r * 5 + c] == (c >= 1 && c < 4 ? 2.0 : 0.0));
}

TEST_CASE("split's backward fills one buffer shaped like x: one allocation, unused pieces zero") {
  Tensor x = test::grad_leaf({2, 3, 12}, 5);
  std::vector<Tensor> parts = split(x, 4, 2);  // 3 x (2, 3, 4)
  REQUIRE(parts.size() == 3);
  CHECK(autograd::gradient_edge(parts[0]).fn == autograd::gradient_edge(parts[2]).fn);  // one node, 3 outputs
  CHECK(autograd::gradient_edge(parts[2]).input_nr == 2);
  Tensor loss = sum(parts[0] * 3.0) + sum(parts[2] * parts[2]);  // parts[1] unused
  loss.backward();
  const std::vector<double> xv = test::values(x.detach()), xg = test::values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t col = i % 12;
    const double want = col < 4 ? 3.0 : col < 8 ? 0.0 : 2.0 * xv[i];
    CHECK(xg[i] == doctest::Approx(want).epsilon(1e-14));
  }
  // chunk records the same way, and gradcheck agrees with finite differences.
  Tensor a = test::grad_leaf({3, 6}, 9);
  CHECK(gradcheck([](const std::vector<Tensor>& in) -> Tensor {
          std::vector<Tensor> c = chunk(in[0], 3, 1);
          return sum(c[0] * c[2]) + sum(c[1]) * 0.5;
        }, {a}));
}

TEST_CASE("split's node allocates one buffer for the whole input") {
  Tensor x = test::grad_leaf({4, 9}, 11);
  Tensor base = x * 1.0;
  std::vector<Tensor> parts = split(base, 3, 1);
  std::vector<Tensor> grads;
  for (const Tensor& p : parts) grads.push_back(test::random(p.shape(), DType::f64, 20 + grads.size()));
  int64_t at_base = -1;
  autograd::register_hook(base, [&](const Tensor&) {
    at_base = allocs();
    return Tensor();
  });
  const int64_t before = allocs();
  autograd::backward(parts, grads);
  CHECK(at_base - before == 1);  // the (4, 9) buffer, nothing else
}

TEST_CASE("a leaf takes a gradient nobody else holds instead of copying it, and copies one that is shared") {
  Tensor w = test::grad_leaf({64, 64}, 1);
  Tensor x = test::random({8, 64}, DType::f64, 2);
  sum(matmul(x, w)).backward();  // MatmulBackward's dW is fresh and held by no one else
  Tensor first = w.grad();
  CHECK(first.storage().use_count() == 1);
  // A user's gradient for a leaf root is theirs: .grad must not alias it.
  Tensor v = test::grad_leaf({5}, 3);
  Tensor g = test::random({5}, DType::f64, 4);
  v.backward(g);
  CHECK(v.grad().storage() != g.storage());
  g.fill_(0.0);
  CHECK(test::values(v.grad())[0] != 0.0);
}
