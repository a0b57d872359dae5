// Autocast (Note [Autocast op lists] in autograd/autocast.h): the output dtype of every listed op
// under bf16 and f16, nothing changed outside a guard, nesting, one cached cast per weight per
// guard, f32 gradients for f32 parameters, and gradients close to the f32 ones.
#include "test_util.h"

#include <cmath>

using namespace kiln;

namespace {

// ||a - b|| / ||b|| over all elements, in double.
double rel_err(const Tensor& a, const Tensor& b) {
  std::vector<double> va = test::values(a), vb = test::values(b);
  REQUIRE(va.size() == vb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    num += (va[i] - vb[i]) * (va[i] - vb[i]);
    den += vb[i] * vb[i];
  }
  return std::sqrt(num / den);
}

Tensor param(const Shape& shape, uint64_t seed, double scale = 0.5) {
  return test::random(shape, DType::f32, seed, -scale, scale).requires_grad_();
}

}  // namespace

TEST_CASE("each op runs in its documented dtype under bf16 and f16 autocast") {
  const Tensor a = test::random({3, 4}), b = test::random({4, 5}, DType::f32, 2);
  const Tensor ba = test::random({2, 3, 4}), bb = test::random({2, 4, 5}, DType::f32, 3);
  const Tensor w = test::random({6, 4}, DType::f32, 4), bias = test::random({6}, DType::f32, 5);
  const Tensor img = test::random({1, 2, 5, 5}), kernel = test::random({3, 2, 3, 3}, DType::f32, 6);
  const Tensor q = test::random({1, 2, 4, 8}), k = test::random({1, 2, 4, 8}, DType::f32, 7);
  const Tensor targets = from_vector(std::vector<int64_t>{0, 3, 5}, {3});
  for (DType low : {DType::bf16, DType::f16}) {
    CAPTURE(low);
    AutocastGuard guard(low);
    CHECK(autocast_enabled());
    CHECK(autocast_dtype() == low);
    // The low-precision list.
    CHECK(matmul(a, b).dtype() == low);
    CHECK(mm(a, b).dtype() == low);
    CHECK(bmm(ba, bb).dtype() == low);
    CHECK(linear(a, w, bias).dtype() == low);
    CHECK(linear(a, w).dtype() == low);
    CHECK(conv2d(img, kernel, bias.narrow(0, 0, 3)).dtype() == low);
    CHECK(scaled_dot_product_attention(q, k, k).dtype() == low);
    // The f32 list, fed low-precision inputs.
    const Tensor x = linear(a, w, bias);  // (3, 6) in `low`
    REQUIRE(x.dtype() == low);
    CHECK(softmax(x, -1).dtype() == DType::f32);
    CHECK(log_softmax(x, -1).dtype() == DType::f32);
    CHECK(layer_norm(x, {6}, ones({6}), zeros({6})).dtype() == DType::f32);
    CHECK(layer_norm(x, {6}).dtype() == DType::f32);
    CHECK(cross_entropy(x, targets).dtype() == DType::f32);
    CHECK(mse_loss(x, x.to(low)).dtype() == DType::f32);
    CHECK(sum(x).dtype() == DType::f32);
    CHECK(sum(x, {1}).dtype() == DType::f32);
    CHECK(mean(x).dtype() == DType::f32);
    CHECK(mean(x, {0}, true).dtype() == DType::f32);
    CHECK(var(x, {1}).dtype() == DType::f32);
    // Everything else keeps its inputs' dtype; binary ops promote.
    CHECK(gelu(x).dtype() == low);
    CHECK(add(x, ones({3, 6})).dtype() == DType::f32);
    // f64 and integer tensors are never cast.
    CHECK(matmul(a.to(DType::f64), b.to(DType::f64)).dtype() == DType::f64);
    CHECK(softmax(a.to(DType::f64), -1).dtype() == DType::f64);
    CHECK(autograd::autocast_to_low(targets).dtype() == DType::i64);
  }
  // Values: the low-precision result is the f32 one within the low dtype's rounding.
  Tensor ref = matmul(a, b);
  {
    AutocastGuard guard(DType::bf16);
    CHECK(rel_err(matmul(a, b), ref) < 2e-2);
    CHECK(rel_err(softmax(a, -1), softmax(a, -1).detach()) == 0.0);  // f32 input: untouched
  }
}

TEST_CASE("outside autocast nothing is cast") {
  CHECK_FALSE(autocast_enabled());
  const Tensor a = test::random({3, 4}), b = test::random({4, 5}, DType::f32, 2);
  CHECK(matmul(a, b).dtype() == DType::f32);
  const Tensor xb = a.to(DType::bf16);
  CHECK(softmax(xb, -1).dtype() == DType::bf16);
  CHECK(sum(xb).dtype() == DType::bf16);
  CHECK(matmul(xb, b.to(DType::bf16)).dtype() == DType::bf16);
  CHECK(autograd::autocast_to_low(a).is_same(a));
  CHECK(autograd::autocast_to_f32(xb).is_same(xb));
}

TEST_CASE("guards nest and restore the previous state") {
  const Tensor a = test::random({2, 2}), b = test::random({2, 2}, DType::f32, 2);
  {
    AutocastGuard outer(DType::bf16);
    {
      AutocastGuard inner(DType::f16);
      CHECK(matmul(a, b).dtype() == DType::f16);
      {
        AutocastGuard off(DType::f16, /*enabled=*/false);
        CHECK_FALSE(autocast_enabled());
        CHECK(matmul(a, b).dtype() == DType::f32);
      }
      CHECK(autocast_dtype() == DType::f16);
    }
    CHECK(autocast_enabled());
    CHECK(autocast_dtype() == DType::bf16);
    CHECK(matmul(a, b).dtype() == DType::bf16);
    CHECK(autocast_depth() == 1);
  }
  CHECK_FALSE(autocast_enabled());
  CHECK(autocast_depth() == 0);
  CHECK_ERROR_CONTAINS(AutocastGuard(DType::f32), "bf16 or f16", "f32");
  CHECK_FALSE(autocast_enabled());  // a refused guard changes nothing
  CHECK(autocast_depth() == 0);
}

TEST_CASE("a weight is cast once per outermost guard and the cache is dropped at its end") {
  Tensor w = param({6, 4}, 11);
  const Tensor x1 = test::random({3, 4}), x2 = test::random({5, 4}, DType::f32, 2);
  Tensor first;
  {
    AutocastGuard guard(DType::bf16);
    CHECK(autograd::autocast_cache_size() == 0);
    Tensor y1 = linear(x1, w), y2 = linear(x2, w);
    CHECK(autograd::autocast_cache_size() == 1);  // one weight, one cast; activations are not cached
    first = autograd::autocast_to_low(w);
    CHECK(first.is_same(autograd::autocast_to_low(w)));
    CHECK_FALSE(autograd::autocast_to_low(x1).is_same(autograd::autocast_to_low(x1)));
    {
      AutocastGuard inner(DType::bf16);  // a nested guard shares the outer one's cache
      CHECK(autograd::autocast_to_low(w).is_same(first));
    }
    CHECK(autograd::autocast_cache_size() == 1);
    {
      NoGradGuard no_grad;  // a cast made without history is kept apart
      Tensor c = autograd::autocast_to_low(w);
      CHECK_FALSE(c.is_same(first));
      CHECK_FALSE(c.requires_grad());
    }
    CHECK(autograd::autocast_cache_size() == 2);
    CHECK(autograd::autocast_to_low(w).requires_grad());
    {
      AutocastGuard f16(DType::f16);  // another dtype, another entry
      CHECK(autograd::autocast_to_low(w).dtype() == DType::f16);
    }
    CHECK(autograd::autocast_cache_size() == 3);
    // Both uses reached the weight through the one cached cast: its gradient sums them.
    Tensor loss = add(sum(y1), sum(y2));
    loss.backward();
  }
  CHECK(autograd::autocast_cache_size() == 0);
  CHECK(w.grad().dtype() == DType::f32);
  // d/dw sum(x w^T) = column sums of x broadcast to each output row.
  Tensor expect = add(sum(x1, {0}, true), sum(x2, {0}, true)).expand({6, 4});
  CHECK(rel_err(w.grad(), expect) < 1e-2);
  {
    AutocastGuard guard(DType::bf16);
    CHECK_FALSE(autograd::autocast_to_low(w).is_same(first));  // a new forward casts afresh
  }
}

TEST_CASE("f32 parameters get f32 gradients close to the f32 ones") {
  Tensor w1 = param({16, 8}, 21), b1 = param({16}, 22), w2 = param({5, 16}, 23), b2 = param({5}, 24);
  Tensor g = param({16}, 25), beta = param({16}, 26);  // layer norm affine
  const Tensor x = test::random({12, 8}, DType::f32, 27);
  const Tensor targets = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}, {12});
  auto forward = [&] {
    Tensor h = gelu(linear(x, w1, b1));
    h = layer_norm(h, {16}, g, beta);
    return cross_entropy(linear(h, w2, b2), targets);
  };
  std::vector<Tensor> params = {w1, b1, w2, b2, g, beta};
  forward().backward();
  std::vector<Tensor> ref;
  for (Tensor& p : params) {
    ref.push_back(p.grad());
    p.set_grad(Tensor());
  }
  for (DType low : {DType::bf16, DType::f16}) {
    CAPTURE(low);
    Tensor loss;
    {
      AutocastGuard guard(low);
      loss = forward();
    }
    CHECK(loss.dtype() == DType::f32);
    loss.backward();
    // bf16 keeps 8 bits of mantissa, f16 11: the gradients differ from f32 by that rounding.
    const double tol = low == DType::bf16 ? 3e-2 : 5e-3;
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      REQUIRE(params[i].grad().defined());
      CHECK(params[i].grad().dtype() == DType::f32);
      const double e = rel_err(params[i].grad(), ref[i]);
      CHECK(e < tol);
      CHECK(e > 0.0);  // the forward really ran in low precision
      params[i].set_grad(Tensor());
    }
  }
}

TEST_CASE("conv2d and attention under autocast give f32 gradients to f32 inputs") {
  Tensor kernel = param({3, 2, 3, 3}, 31), cb = param({3}, 32);
  Tensor img = test::random({2, 2, 6, 6}, DType::f32, 33).requires_grad_();
  Tensor q = param({1, 2, 5, 4}, 34, 1.0), k = param({1, 2, 5, 4}, 35, 1.0), v = param({1, 2, 5, 4}, 36, 1.0);
  Tensor loss;
  {
    AutocastGuard guard(DType::bf16);
    loss = add(mean(conv2d(img, kernel, cb)), mean(scaled_dot_product_attention(q, k, v)));
  }
  loss.backward();
  for (const Tensor& t : {kernel, cb, img, q, k, v}) {
    REQUIRE(t.grad().defined());
    CHECK(t.grad().dtype() == DType::f32);
    CHECK(t.grad().shape() == t.shape());
  }
  Tensor ref_kernel = kernel.grad(), ref_v = v.grad();
  for (Tensor t : {kernel, cb, img, q, k, v}) t.set_grad(Tensor());
  add(mean(conv2d(img, kernel, cb)), mean(scaled_dot_product_attention(q, k, v))).backward();
  CHECK(rel_err(ref_kernel, kernel.grad()) < 3e-2);
  CHECK(rel_err(ref_v, v.grad()) < 3e-2);
}
