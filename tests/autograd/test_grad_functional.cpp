// The differentiable functional ops other than losses and attention: float64 gradchecks for
// softmax/log_softmax, layer_norm, dropout and embedding, forward values against plain loops,
// dropout's mask statistics and determinism, and bad-argument errors.
#include "test_util.h"

using namespace kiln;


TEST_CASE("softmax and log_softmax: gradcheck on every dim") {
  for (int64_t dim : {0, 1, 2, -1}) {
    CAPTURE(dim);
    CHECK(gradcheck([dim](const auto& v) { return softmax(v[0], dim); }, {test::grad_leaf({3, 4, 5}, 1)}));
    CHECK(gradcheck([dim](const auto& v) { return log_softmax(v[0], dim); }, {test::grad_leaf({3, 4, 5}, 2)}));
  }
  // Through a non-contiguous input.
  CHECK(gradcheck([](const auto& v) { return softmax(v[0].transpose(0, 1), 1); }, {test::grad_leaf({4, 3}, 3)}));
}

TEST_CASE("softmax and log_softmax: values match a plain loop over dim 1") {
  Tensor x = test::random({2, 3, 4}, DType::f64, 4, -3, 3);
  std::vector<double> sm(24), lsm(24);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t c = 0; c < 4; ++c) {
      double z = 0;
      for (int64_t b = 0; b < 3; ++b) z += std::exp(test::at(x, {a, b, c}));
      for (int64_t b = 0; b < 3; ++b) {
        sm[(a * 3 + b) * 4 + c] = std::exp(test::at(x, {a, b, c})) / z;
        lsm[(a * 3 + b) * 4 + c] = test::at(x, {a, b, c}) - std::log(z);
      }
    }
  test::check_close(softmax(x, 1), sm, 1e-12, 1e-14, "softmax");
  test::check_close(log_softmax(x, 1), lsm, 1e-12, 1e-14, "log_softmax");
}

TEST_CASE("layer_norm: gradcheck with and without weight and bias") {
  Tensor x = test::grad_leaf({3, 5}, 5);
  Tensor w = test::grad_leaf({5}, 6, 0.5, 1.5), b = test::grad_leaf({5}, 7);
  CHECK(gradcheck([](const auto& v) { return layer_norm(v[0], {5}, v[1], v[2]); }, {x, w, b}));
  CHECK(gradcheck([](const auto& v) { return layer_norm(v[0], {5}); }, {x}));
  CHECK(gradcheck([](const auto& v) { return layer_norm(v[0], {5}, v[1]); }, {x, w}));
  CHECK(gradcheck([](const auto& v) { return layer_norm(v[0], {5}, Tensor(), v[1]); }, {x, b}));
  // Multi-dim normalized_shape, eps changed, weight not requiring grad.
  Tensor x3 = test::grad_leaf({2, 3, 4}, 8), w2 = test::random({3, 4}, DType::f64, 9, 0.5, 1.5), b2 = test::grad_leaf({3, 4}, 10);
  CHECK(gradcheck([&](const auto& v) { return layer_norm(v[0], {3, 4}, w2, v[1], 1e-3); }, {x3, b2}));
}

TEST_CASE("layer_norm: values match a plain loop, and a bad normalized_shape is an error") {
  Tensor x = test::random({2, 3, 4}, DType::f64, 11), w = test::random({3, 4}, DType::f64, 12);
  Tensor b = test::random({3, 4}, DType::f64, 13);
  const double eps = 1e-5;
  std::vector<double> xs = test::values(x), ws = test::values(w), bs = test::values(b), ref(24);
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 12; ++i) mean += xs[r * 12 + i] / 12;
    for (int i = 0; i < 12; ++i) var += (xs[r * 12 + i] - mean) * (xs[r * 12 + i] - mean) / 12;
    for (int i = 0; i < 12; ++i) ref[r * 12 + i] = (xs[r * 12 + i] - mean) / std::sqrt(var + eps) * ws[i] + bs[i];
  }
  test::check_close(layer_norm(x, {3, 4}, w, b, eps), ref, 1e-12, 1e-12, "layer_norm");
  CHECK_ERROR_CONTAINS(layer_norm(x, {4, 3}), "layer_norm", "[4, 3]");
}

TEST_CASE("dropout: gradcheck with a fixed seed, and gradient = mask / (1 - p)") {
  for (double p : {0.2, 0.5, 0.9}) {
    CAPTURE(p);
    CHECK(gradcheck(
        [p](const auto& v) {
          Generator g(1234);  // every call draws the same mask
          return dropout(v[0], p, true, g);
        },
        {test::grad_leaf({4, 6}, 14)}));
  }
  Tensor x = test::grad_leaf({1000}, 15);
  Generator g(7);
  Tensor y = dropout(x, 0.25, true, g);
  y.backward(ones({1000}, DType::f64));
  std::vector<double> xs = test::values(x), ys = test::values(y), gs = test::values(x.grad());
  for (size_t i = 0; i < xs.size(); ++i) {
    const bool kept = philox_uniform(7, i) >= 0.25;  // the documented mask
    REQUIRE(gs[i] == doctest::Approx(kept ? 1.0 / 0.75 : 0.0));
    REQUIRE(ys[i] == doctest::Approx(kept ? xs[i] / 0.75 : 0.0));
  }
}

TEST_CASE("dropout: fraction kept is about 1 - p, kept values are scaled by 1/(1-p)") {
  for (double p : {0.1, 0.5, 0.8}) {
    CAPTURE(p);
    Generator g(99);
    Tensor y = dropout(ones({200000}), p, true, g);
    CHECK(y.dtype() == DType::f32);
    int64_t kept = 0;
    for (double v : test::values(y)) {
      if (v != 0.0) {
        ++kept;
        REQUIRE(v == doctest::Approx(1.0 / (1.0 - p)).epsilon(1e-6));
      }
    }
    CHECK(double(kept) / 200000.0 == doctest::Approx(1.0 - p).epsilon(0.01));
    CHECK(g.offset() == 200000);  // numel counters reserved
  }
}

TEST_CASE("dropout: the same seed gives the same mask, the next draw a different one") {
  Tensor x = test::random({64, 32}, DType::f32, 16);
  Generator g1(5), g2(5);
  std::vector<double> a = test::values(dropout(x, 0.5, true, g1));
  std::vector<double> b = test::values(dropout(x, 0.5, true, g2));
  CHECK(a == b);
  std::vector<double> c = test::values(dropout(x, 0.5, true, g1));  // g1 moved on
  CHECK(a != c);
  // The default generator follows manual_seed.
  manual_seed(21);
  std::vector<double> d = test::values(dropout(x, 0.5, true));
  manual_seed(21);
  CHECK(test::values(dropout(x, 0.5, true)) == d);
  Generator g3(21);
  CHECK(test::values(dropout(x, 0.5, true, g3)) == d);
}

TEST_CASE("dropout: identity in eval or at p = 0, zeros at p = 1, errors for bad p") {
  Tensor x = test::grad_leaf({3, 4}, 17);
  Generator g(3);
  CHECK(test::values(dropout(x, 0.5, false, g)) == test::values(x));
  CHECK(test::values(dropout(x, 0.0, true, g)) == test::values(x));
  CHECK(g.offset() == 0);
  Tensor z = dropout(x, 1.0, true, g);
  CHECK(test::values(z) == std::vector<double>(12, 0.0));
  z.backward(ones({3, 4}, DType::f64));
  CHECK(test::values(x.grad()) == std::vector<double>(12, 0.0));
  CHECK_ERROR_CONTAINS(dropout(x, 1.5, true, g), "dropout", "1.5");
  CHECK_ERROR_CONTAINS(dropout(x, -0.1, false, g), "dropout", "-0.1");
  CHECK_ERROR_CONTAINS(dropout(arange(4), 0.5, true, g), "dropout", "i64");
}

TEST_CASE("embedding: gradcheck w.r.t. the weight with repeated ids") {
  Tensor w = test::grad_leaf({5, 3}, 18);
  Tensor ids = from_vector(std::vector<int64_t>{1, 3, 1, 0, 1, 4}, {2, 3});
  CHECK(gradcheck([&](const auto& v) { return embedding(v[0], ids); }, {w}));
  Tensor ids32 = from_vector(std::vector<int32_t>{2, 2, 2}, {3});
  CHECK(gradcheck([&](const auto& v) { return embedding(v[0], ids32); }, {w}));
}

TEST_CASE("embedding: rows of repeated ids sum, unused rows get zero, ids get no gradient") {
  Tensor w = test::grad_leaf({4, 2}, 19);
  Tensor ids = from_vector(std::vector<int64_t>{1, 3, 1, 1}, {4});
  Tensor y = embedding(w, ids);
  CHECK(y.shape() == Shape{4, 2});
  CHECK(test::at(y, {2, 1}) == test::at(w, {1, 1}));
  y.backward(from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}));
  CHECK(test::values(w.grad()) == std::vector<double>{0, 0, 1 + 5 + 7, 2 + 6 + 8, 0, 0, 3, 4});
  CHECK(!ids.requires_grad());
  CHECK_ERROR_CONTAINS(embedding(w, from_vector(std::vector<int64_t>{0, 4}, {2})), "embedding", "4");
}
