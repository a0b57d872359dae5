// gradcheck (float64 finite differences) for every differentiable reduction and form: all dims,
// dim sets with negative dims, keepdim true and false; forward values equal the raw kiln::ops;
// max routes to the arg-max and amax splits ties evenly.
#include "test_util.h"

using namespace kiln;
using test::leaf;

namespace {
const std::vector<std::vector<int64_t>> kDimSets = {{}, {0}, {-1}, {1}, {0, 2}, {-1, 0}, {0, 1, 2}};
}  // namespace

TEST_CASE("gradcheck: sum and mean over all dims and dim sets, keepdim true and false") {
  CHECK(gradcheck([](const auto& v) { return sum(v[0]); }, {test::grad_leaf({3, 4}, 1)}));
  CHECK(gradcheck([](const auto& v) { return mean(v[0]); }, {test::grad_leaf({3, 4}, 2)}));
  for (const auto& dims : kDimSets) {
    for (bool keepdim : {false, true}) {
      CAPTURE(Shape(dims.begin(), dims.end()));
      CAPTURE(keepdim);
      Tensor x = test::grad_leaf({2, 3, 4}, 3);
      CHECK(gradcheck([&](const auto& v) { return sum(v[0], dims, keepdim); }, {x}));
      CHECK(gradcheck([&](const auto& v) { return mean(v[0], dims, keepdim); }, {x}));
      CHECK(gradcheck([&](const auto& v) { return var(v[0], dims, 1, keepdim); }, {x}));
      CHECK(gradcheck([&](const auto& v) { return var(v[0], dims, 0, keepdim); }, {x}));
      CHECK(gradcheck([&](const auto& v) { return kiln::std(v[0], dims, 1, keepdim); }, {x}));
      CHECK(gradcheck([&](const auto& v) { return kiln::std(v[0], dims, 0, keepdim); }, {x}));
      CHECK(gradcheck([&](const auto& v) { return amax(v[0], dims, keepdim); }, {x}));
    }
  }
}

TEST_CASE("full-tensor var and std: torch's values and gradients, unbiased by default, correction 0 biased") {
  // torch.var/std of [[0.3, -1.2, 2.5], [0.7, 0.1, -0.4]] (float64; torch 1.13).
  auto make = [] { return from_vector<double>({0.3, -1.2, 2.5, 0.7, 0.1, -0.4}, {2, 3}).requires_grad_(); };
  Tensor x = make();
  CHECK(var(x).dim() == 0);
  CHECK(var(x).item() == doctest::Approx(1.5546666666666664).epsilon(1e-14));
  CHECK(var(x, {}, 0).item() == doctest::Approx(1.2955555555555553).epsilon(1e-14));  // unbiased=False
  CHECK(kiln::std(x).item() == doctest::Approx(1.2468627296806438).epsilon(1e-14));
  CHECK(kiln::std(x, {}, 0).item() == doctest::Approx(1.1382247385975914).epsilon(1e-14));
  kiln::std(x).backward();  // torch.std(x).backward()
  test::check_close(x.grad(), {-0.005346752700174288, -0.24595062420801728, 0.34753892551132876,
                               0.058814279701917174, -0.03742726890122002, -0.11762855940383436},
                    1e-12, 1e-14, "std grad");
  CHECK(gradcheck([](const auto& v) { return var(v[0]); }, {test::grad_leaf({3, 4}, 8)}));
  CHECK(gradcheck([](const auto& v) { return kiln::std(v[0]); }, {test::grad_leaf({3, 4}, 9)}));
  // f32 in, f32 out; one element with correction 1 divides by 0: NaN, as torch.
  CHECK(var(ones({4}, DType::f32)).dtype() == DType::f32);
  CHECK(std::isnan(var(ones({1}, DType::f64)).item()));
}

TEST_CASE("gradcheck: max over each dim (values only), negative dims, keepdim true and false") {
  for (int64_t dim : {0, 1, 2, -1, -2}) {
    for (bool keepdim : {false, true}) {
      CAPTURE(dim);
      CAPTURE(keepdim);
      Tensor x = test::grad_leaf({3, 4, 5}, 4);
      CHECK(gradcheck([&](const auto& v) { return max(v[0], dim, keepdim).values; }, {x}));
    }
  }
}

TEST_CASE("reductions compose with other ops and non-contiguous inputs") {
  // A reduction of a transposed view, then a product with another input.
  Tensor x = test::grad_leaf({4, 3}, 5), y = test::grad_leaf({4}, 6);
  CHECK(gradcheck([](const auto& v) { return sum(v[0].t(), {0}) * v[1]; }, {x, y}));
  CHECK(gradcheck([](const auto& v) { return mean(square(v[0]), {-1}, true) + var(v[0].t(), {-2}); }, {x}));
}

TEST_CASE("forward values equal the raw kiln::ops") {
  Tensor x = test::grad_leaf({2, 3, 4}, 7);
  for (const auto& dims : kDimSets) {
    for (bool keepdim : {false, true}) {
      CAPTURE(Shape(dims.begin(), dims.end()));
      CHECK(test::values(sum(x, dims, keepdim)) == test::values(ops::sum(x, dims, keepdim)));
      CHECK(sum(x, dims, keepdim).shape() == ops::sum(x, dims, keepdim).shape());
      CHECK(test::values(mean(x, dims, keepdim)) == test::values(ops::mean(x, dims, keepdim)));
      CHECK(test::values(var(x, dims, 1, keepdim)) == test::values(ops::var(x, dims, 1, keepdim)));
      CHECK(test::values(amax(x, dims, keepdim)) == test::values(ops::amax(x, dims, keepdim)));
    }
  }
  MaxResult m = max(x, 1);
  ops::ValuesIndices r = ops::max(x, 1);
  CHECK(test::values(m.values) == test::values(r.values));
  CHECK(test::values(m.indices) == test::values(r.indices));
  CHECK(m.values.requires_grad());
  CHECK_FALSE(m.indices.requires_grad());
  CHECK(test::values(sum(x)) == test::values(ops::sum(x)));
  CHECK(test::values(mean(x)) == test::values(ops::mean(x)));
}

TEST_CASE("sum and mean gradients by value") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  sum(x, {1}).backward(from_vector(std::vector<double>{10, 20}, {2}));
  CHECK(test::values(x.grad()) == std::vector<double>{10, 10, 10, 20, 20, 20});
  x.set_grad(Tensor());
  mean(x, {-2}, true).backward(from_vector(std::vector<double>{2, 4, 6}, {1, 3}));
  CHECK(test::values(x.grad()) == std::vector<double>{1, 2, 3, 1, 2, 3});
  x.set_grad(Tensor());
  mean(x).backward();
  test::check_close(x.grad(), std::vector<double>(6, 1.0 / 6), 1e-15, 0, "mean");
  x.set_grad(Tensor());
  // var over dim 1 of [1 2 3]: mean 2, d/dx = 2 (x - 2) / 2 = x - 2.
  var(x, {1}).backward(ones({2}, DType::f64));
  test::check_close(x.grad(), {-1, 0, 1, -1, 0, 1}, 1e-15, 0, "var");
}

TEST_CASE("max sends the gradient to the arg-max (the first on ties); amax splits ties evenly") {
  Tensor x = leaf({1, 5, 5, 2, 7, 0}, {2, 3});
  MaxResult m = max(x, 1);
  CHECK(test::values(m.indices) == std::vector<double>{1, 1});
  m.values.backward(from_vector(std::vector<double>{3, 4}, {2}));
  CHECK(test::values(x.grad()) == std::vector<double>{0, 3, 0, 0, 4, 0});
  x.set_grad(Tensor());
  amax(x, {1}).backward(from_vector(std::vector<double>{3, 4}, {2}));
  CHECK(test::values(x.grad()) == std::vector<double>{0, 1.5, 1.5, 0, 4, 0});
  x.set_grad(Tensor());
  Tensor t = leaf({2, 2, 2, 2}, {4});
  amax(t, {}).backward();
  CHECK(test::values(t.grad()) == std::vector<double>{0.25, 0.25, 0.25, 0.25});
}

TEST_CASE("reduction gradients arrive in the input's dtype") {
  Tensor x = test::random({3, 4}, DType::f32, 8);
  x.requires_grad_();
  sum(x, {0}).backward(ones({4}));
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(x.grad().shape() == Shape{3, 4});
  x.set_grad(Tensor());
  max(x, -1).values.backward(ones({3}));
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(test::values(sum(x.grad())) == std::vector<double>{3});
}

TEST_CASE("no graph is recorded under no_grad or for inputs that need no gradient") {
  Tensor x = test::grad_leaf({3}, 9);
  {
    NoGradGuard guard;
    CHECK_FALSE(sum(x).requires_grad());
    CHECK_FALSE(max(x, 0).values.requires_grad());
  }
  CHECK_FALSE(mean(x.detach()).requires_grad());
  CHECK(var(x, {0}).requires_grad());
}
