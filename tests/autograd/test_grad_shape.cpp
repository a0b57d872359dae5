// gradcheck (float64 finite differences) for the joins, splits, index selection and triangular
// masks, and for core's views (recorded through the view hook); forward values equal the raw
// kiln::ops; gradients through several split outputs add up at the input.
#include "test_util.h"

using namespace kiln;

namespace {
Tensor i64(std::vector<int64_t> v, Shape s) { return from_vector(v, s); }
}  // namespace

TEST_CASE("gradcheck: cat along several dims with inputs of different sizes") {
  Tensor a = test::grad_leaf({2, 3, 4}, 1), b = test::grad_leaf({2, 1, 4}, 2), c = test::grad_leaf({2, 2, 4}, 3);
  CHECK(gradcheck([](const auto& v) { return cat({v[0], v[1], v[2]}, 1); }, {a, b, c}));
  CHECK(gradcheck([](const auto& v) { return cat({v[1], v[0]}, -2); }, {a, b}));
  Tensor d = test::grad_leaf({1, 3, 4}, 4), e = test::grad_leaf({2, 3, 2}, 5);
  CHECK(gradcheck([](const auto& v) { return cat({v[0], v[1]}, 0); }, {a, d}));
  CHECK(gradcheck([](const auto& v) { return cat({v[0], v[1], v[0]}, -1); }, {a, e}));
  Tensor constant = test::random({2, 3, 1}, DType::f64, 6);
  CHECK(gradcheck([&](const auto& v) { return cat({constant, v[0]}, 2); }, {a}));
  CHECK(test::values(cat({a, e}, 2)) == test::values(ops::cat({a, e}, 2)));
}

TEST_CASE("gradcheck: stack at every position") {
  Tensor a = test::grad_leaf({2, 3}, 7), b = test::grad_leaf({2, 3}, 8);
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    CAPTURE(dim);
    CHECK(gradcheck([&](const auto& v) { return stack({v[0], v[1], v[0]}, dim); }, {a, b}));
    CHECK(test::values(stack({a, b}, dim)) == test::values(ops::stack({a, b}, dim)));
  }
}

TEST_CASE("gradcheck: split and chunk, where only some outputs are used") {
  Tensor x = test::grad_leaf({7, 3}, 9);
  // Unequal sizes; outputs 0 and 2 used (output 1 left out), and output 2 twice.
  CHECK(gradcheck(
      [](const auto& v) {
        auto p = split(v[0], std::vector<int64_t>{2, 1, 4}, 0);
        return cat({p[0] * 2.0, p[2], exp(p[2])}, 0);
      },
      {x}));
  CHECK(gradcheck(
      [](const auto& v) {
        auto p = split(v[0], 3, 0);  // sizes 3, 3, 1
        return p[2] * p[0].narrow(0, 0, 1);
      },
      {x}));
  CHECK(gradcheck(
      [](const auto& v) {
        auto p = chunk(v[0], 2, -1);  // sizes 2, 1
        return p[0] * p[1];
      },
      {x}));
  auto p = split(x, std::vector<int64_t>{2, 5}, 0);
  auto r = ops::split(x, std::vector<int64_t>{2, 5}, 0);
  REQUIRE(p.size() == r.size());
  for (size_t i = 0; i < p.size(); ++i) CHECK(test::values(p[i]) == test::values(r[i]));
  CHECK(chunk(x, 3, 0).size() == ops::chunk(x, 3, 0).size());
}

TEST_CASE("gradients through several split outputs sum at the input") {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5}, {5});
  x.requires_grad_();
  auto p = split(x, std::vector<int64_t>{2, 3});
  Tensor y = sum(p[0] * 3.0) + sum(p[1] * p[1]) + sum(p[0]);
  y.backward();
  CHECK(test::values(x.grad()) == std::vector<double>{4, 4, 6, 8, 10});
  x.set_grad(Tensor());
  auto q = chunk(x, 3);  // sizes 2, 2, 1; only the last used
  (q[2] * 7.0).backward(ones({1}, DType::f64));
  CHECK(test::values(x.grad()) == std::vector<double>{0, 0, 0, 0, 7});
}

TEST_CASE("gradcheck: index_select (repeated indices add up) and gather") {
  Tensor x = test::grad_leaf({4, 3}, 10);
  Tensor idx = i64({2, 0, 2, 3, 2}, {5});
  CHECK(gradcheck([&](const auto& v) { return index_select(v[0], 0, idx); }, {x}));
  CHECK(gradcheck([&](const auto& v) { return index_select(v[0], -1, i64({1, 1}, {2})); }, {x}));
  CHECK(test::values(index_select(x, 0, idx)) == test::values(ops::index_select(x, 0, idx)));
  Tensor gidx = i64({0, 0, 3, 1, 2, 2}, {2, 3});
  CHECK(gradcheck([&](const auto& v) { return gather(v[0], 0, gidx); }, {x}));
  Tensor gidx1 = i64({2, 2, 0, 1, 1, 1, 0, 0}, {4, 2});
  CHECK(gradcheck([&](const auto& v) { return gather(v[0], -1, gidx1); }, {x}));
  CHECK(test::values(gather(x, 1, gidx1)) == test::values(ops::gather(x, 1, gidx1)));

  Tensor y = from_vector(std::vector<double>{1, 2, 3}, {3});
  y.requires_grad_();
  index_select(y, 0, i64({2, 2, 0}, {3})).backward(from_vector(std::vector<double>{1, 10, 100}, {3}));
  CHECK(test::values(y.grad()) == std::vector<double>{100, 0, 11});
}

TEST_CASE("gradcheck: triu and tril, batched, with diagonals") {
  Tensor x = test::grad_leaf({2, 3, 4}, 11);
  for (int64_t diag : {-1, 0, 2}) {
    CAPTURE(diag);
    CHECK(gradcheck([&](const auto& v) { return triu(v[0], diag); }, {x}));
    CHECK(gradcheck([&](const auto& v) { return tril(v[0], diag); }, {x}));
    CHECK(test::values(triu(x, diag)) == test::values(ops::triu(x, diag)));
    CHECK(test::values(tril(x, diag)) == test::values(ops::tril(x, diag)));
  }
}

TEST_CASE("gradcheck: core views record through the view hook") {
  Tensor x = test::grad_leaf({2, 3, 4}, 12);
  const std::pair<const char*, std::function<Tensor(const std::vector<Tensor>&)>> cases[] = {
      {"reshape of a non-contiguous tensor", [](const auto& v) { return v[0].transpose(0, 2).reshape({4, 6}); }},
      {"view", [](const auto& v) { return v[0].view({6, 4}); }},
      {"transpose", [](const auto& v) { return v[0].transpose(1, -1); }},
      {"permute", [](const auto& v) { return v[0].permute({2, 0, 1}); }},
      {"slice with step", [](const auto& v) { return v[0].slice(2, 0, 4, 2); }},
      {"slice of a slice", [](const auto& v) { return v[0].slice(1, 1, 3).slice(2, 1, 4, 2); }},
      {"select", [](const auto& v) { return v[0].select(1, -1); }},
      {"narrow", [](const auto& v) { return v[0].narrow(2, 1, 2); }},
      {"expand", [](const auto& v) { return v[0].select(2, 0).unsqueeze(0).expand({5, 2, 3}); }},
      {"squeeze/unsqueeze", [](const auto& v) { return v[0].unsqueeze(1).narrow(0, 0, 1).squeeze() * 2.0; }},
      {"squeeze(dim)", [](const auto& v) { return v[0].slice(1, 0, 1).squeeze(1); }},
      {"flatten", [](const auto& v) { return v[0].flatten(1); }},
      {"flatten after permute", [](const auto& v) { return v[0].permute({1, 0, 2}).flatten(); }},
      {"t", [](const auto& v) { return v[0].select(0, 1).t(); }},
  };
  for (auto& [name, fn] : cases) {
    CAPTURE(name);
    CHECK(gradcheck(fn, {x}));
  }
}

TEST_CASE("shape op gradients arrive in the input's dtype") {
  Tensor a = test::grad_leaf({2, 3}, 13, DType::f32), b = test::grad_leaf({2, 3}, 14);
  cat({a, b}, 0).backward(ones({4, 3}, DType::f64));  // promoted to f64
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f64);
  CHECK(test::values(a.grad()) == std::vector<double>(6, 1.0));
  a.set_grad(Tensor());
  gather(a, 1, i64({0, 0, 1, 1}, {2, 2})).backward(ones({2, 2}));
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(test::values(a.grad()) == std::vector<double>{2, 0, 0, 0, 2, 0});
}
