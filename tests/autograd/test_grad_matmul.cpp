// gradcheck (float64 finite differences) for matmul in every torch form (1-D operands, batch
// broadcasting in either operand), bmm, mm and linear (with and without bias, on 1-, 2- and 3-D
// inputs); forward values equal the raw kiln::ops; f32 gradients match f64 ones.
#include "test_util.h"

using namespace kiln;


TEST_CASE("gradcheck: matmul in every operand form, with batch broadcasting") {
  const std::pair<Shape, Shape> cases[] = {
      {{4}, {4}},                   // dot
      {{3, 4}, {4}},                // matrix-vector
      {{4}, {4, 5}},                // vector-matrix
      {{3, 4}, {4, 5}},             // GEMM
      {{2, 3, 4}, {4}},             // batched matrix-vector
      {{4}, {2, 4, 5}},             // vector-batched matrix
      {{2, 3, 4}, {4, 5}},          // b broadcast over the batch
      {{3, 4}, {2, 4, 5}},          // a broadcast over the batch
      {{2, 1, 3, 4}, {3, 4, 5}},    // both broadcast: (2, 1) with (3)
      {{1, 3, 4}, {2, 4, 5}},       // a size-1 batch dim expanded
      {{2, 3, 4}, {2, 4, 5}},       // plain batch
  };
  uint64_t seed = 1;
  for (const auto& [sa, sb] : cases) {
    CAPTURE(sa);
    CAPTURE(sb);
    Tensor a = test::grad_leaf(sa, seed++), b = test::grad_leaf(sb, seed++);
    CHECK(gradcheck([](const auto& v) { return matmul(v[0], v[1]); }, {a, b}));
    CHECK(test::values(matmul(a, b)) == test::values(ops::matmul(a, b)));
  }
}

TEST_CASE("gradcheck: matmul when only one operand needs a gradient, and on transposed views") {
  Tensor a = test::grad_leaf({3, 4}, 30), b = test::random({2, 4, 5}, DType::f64, 31);
  CHECK(gradcheck([&](const auto& v) { return matmul(v[0], b); }, {a}));
  CHECK(gradcheck([&](const auto& v) { return matmul(b.transpose(1, 2), v[0].t()); }, {a}));
  Tensor c = test::random({4}, DType::f64, 32);
  CHECK(gradcheck([&](const auto& v) { return matmul(c, v[0]); }, {test::grad_leaf({2, 4, 3}, 33)}));
}

TEST_CASE("gradcheck: bmm and mm") {
  Tensor a = test::grad_leaf({2, 3, 4}, 40), b = test::grad_leaf({2, 4, 5}, 41);
  CHECK(gradcheck([](const auto& v) { return bmm(v[0], v[1]); }, {a, b}));
  CHECK(test::values(bmm(a, b)) == test::values(ops::bmm(a, b)));
  Tensor c = test::grad_leaf({3, 4}, 42), d = test::grad_leaf({4, 2}, 43);
  CHECK(gradcheck([](const auto& v) { return mm(v[0], v[1]); }, {c, d}));
  CHECK(gradcheck([](const auto& v) { return mm(v[1].t(), v[0].t()); }, {c, d}));
  CHECK(test::values(mm(c, d)) == test::values(ops::mm(c, d)));
}

TEST_CASE("gradcheck: linear with and without bias on 1-, 2- and 3-D inputs") {
  Tensor w = test::grad_leaf({5, 4}, 50), bias = test::grad_leaf({5}, 51);
  for (const Shape& sx : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    CAPTURE(sx);
    Tensor x = test::grad_leaf(sx, 52);
    CHECK(gradcheck([](const auto& v) { return linear(v[0], v[1], v[2]); }, {x, w, bias}));
    CHECK(gradcheck([](const auto& v) { return linear(v[0], v[1]); }, {x, w}));
    CHECK(test::values(linear(x, w, bias)) == test::values(ops::linear(x, w, bias)));
  }
  // Only the weight or only the bias needs a gradient; x a non-contiguous view.
  Tensor x = test::random({4, 3, 2}, DType::f64, 53);
  CHECK(gradcheck([&](const auto& v) { return linear(x.permute({2, 1, 0}), v[0]); }, {w}));
  CHECK(gradcheck([&](const auto& v) { return linear(x.permute({2, 1, 0}), w.detach(), v[0]); }, {bias}));
}

TEST_CASE("linear gradients by value: dW = g^T x over all leading dims, db = sum of g") {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 1, 2});  // two rows (1, 2), (3, 4)
  Tensor w = from_vector(std::vector<double>{1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor b = zeros({3}, DType::f64);
  x.requires_grad_();
  w.requires_grad_();
  b.requires_grad_();
  linear(x, w, b).backward(ones({2, 1, 3}, DType::f64));
  CHECK(test::values(b.grad()) == std::vector<double>{2, 2, 2});
  CHECK(test::values(w.grad()) == std::vector<double>{4, 6, 4, 6, 4, 6});
  CHECK(test::values(x.grad()) == std::vector<double>{2, 2, 2, 2});
}

TEST_CASE("gradients arrive in the input's dtype; f32 matmul backward matches f64") {
  Tensor a64 = test::grad_leaf({2, 3, 6}, 60), b64 = test::grad_leaf({6, 5}, 61);
  Tensor a32 = a64.detach().to(DType::f32), b32 = b64.detach().to(DType::f32);
  a32.requires_grad_();
  b32.requires_grad_();
  Tensor g64 = test::random({2, 3, 5}, DType::f64, 62);
  matmul(a64, b64).backward(g64);
  matmul(a32, b32).backward(g64.to(DType::f32));
  CHECK(a32.grad().dtype() == DType::f32);
  CHECK(b32.grad().dtype() == DType::f32);
  CHECK(a32.grad().shape() == a64.shape());
  CHECK(b32.grad().shape() == b64.shape());
  test::check_close(a32.grad(), test::values(a64.grad()), 1e-5, 1e-6, "dA f32 vs f64");
  test::check_close(b32.grad(), test::values(b64.grad()), 1e-5, 1e-6, "dB f32 vs f64");

  // An f32 weight used with an f64 activation cast down gets an f32 gradient.
  Tensor w = test::grad_leaf({4, 3}, 63, DType::f32);
  Tensor x = test::grad_leaf({2, 3}, 64);
  linear(x.to(DType::f32), w).backward(ones({2, 4}));
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(x.grad().dtype() == DType::f64);
}
