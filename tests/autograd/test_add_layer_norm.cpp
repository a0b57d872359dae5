// add_layer_norm (Note [Fused residual add]) against its composition {x + r, layer_norm(x + r)} on
// the CPU: bitwise equal sums, outputs and gradients (f64, f32, bf16; with and without weight and
// bias; gradients into the sum, the output or both), f64 finite differences, autocast, errors.
#include "test_util.h"

using namespace kiln;

namespace {

struct Result {
  std::vector<double> sum, out, dx, dr, dw, db;
};

// loss = <sum, gs> + <out, go>; want_sum / want_out pick which outputs carry a gradient.
Result run(bool fused, DType xdt, DType rdt, bool affine, bool with_bias, bool want_sum, bool want_out) {
  Tensor x = test::grad_leaf({3, 5, 24}, 1, xdt);
  Tensor r = test::grad_leaf({3, 5, 24}, 2, rdt);
  Tensor w = affine ? test::grad_leaf({24}, 3, 0.5, 1.5, DType::f32) : Tensor();
  Tensor b = affine && with_bias ? test::grad_leaf({24}, 4, DType::f32) : Tensor();
  Tensor sum, out;
  if (fused) {
    AddLayerNormOutput o = add_layer_norm(x, r, {24}, w, b, 1e-5);
    sum = o.sum, out = o.out;
  } else {
    sum = x + r;
    out = layer_norm(sum, {24}, w, b, 1e-5);
  }
  Tensor loss = zeros({}, TensorOptions(DType::f64));
  if (want_sum) loss = loss + kiln::sum(sum.to(DType::f64) * test::random(sum.shape(), DType::f64, 5));
  if (want_out) loss = loss + kiln::sum(out.to(DType::f64) * test::random(out.shape(), DType::f64, 6));
  loss.backward();
  auto grad = [](const Tensor& t) { return t.defined() && t.grad().defined() ? test::values(t.grad()) : std::vector<double>{}; };
  return {test::values(sum.detach()), test::values(out.detach()), grad(x), grad(r), grad(w), grad(b)};
}

}  // namespace

TEST_CASE("add_layer_norm is bitwise {x + r, layer_norm(x + r)} on the CPU, values and gradients") {
  struct Dtypes {
    DType x, r;
  };
  for (Dtypes d : {Dtypes{DType::f64, DType::f64}, Dtypes{DType::f32, DType::f32}, Dtypes{DType::f32, DType::bf16},
                   Dtypes{DType::bf16, DType::bf16}})
    for (bool affine : {true, false})
      for (bool with_bias : {true, false})
        for (int which = 0; which < 3; ++which) {
          const bool want_sum = which != 1, want_out = which != 0;
          INFO("x ", d.x, ", residual ", d.r, ", affine ", affine, ", bias ", with_bias, ", gradient into ",
               which == 0 ? "sum" : which == 1 ? "out" : "both");
          const Result ref = run(false, d.x, d.r, affine, with_bias, want_sum, want_out);
          const Result got = run(true, d.x, d.r, affine, with_bias, want_sum, want_out);
          CHECK(got.sum == ref.sum);
          CHECK(got.out == ref.out);
          CHECK(got.dx == ref.dx);
          CHECK(got.dr == ref.dr);
          CHECK(got.dw == ref.dw);
          CHECK(got.db == ref.db);
        }
}

TEST_CASE("add_layer_norm passes f64 finite differences") {
  Tensor x = test::grad_leaf({4, 6}, 7), r = test::grad_leaf({4, 6}, 8);
  Tensor w = test::grad_leaf({6}, 9), b = test::grad_leaf({6}, 10);
  CHECK(gradcheck([](const std::vector<Tensor>& in) -> Tensor {
          AddLayerNormOutput o = add_layer_norm(in[0], in[1], {6}, in[2], in[3]);
          return sum(o.out * o.out) + sum(o.sum * 0.3);
        }, {x, r, w, b}));
}

TEST_CASE("add_layer_norm under bf16 autocast: an f32 residual stream plus a bf16 sublayer output") {
  Tensor x = test::grad_leaf({8, 32}, 11, DType::f32), r = test::grad_leaf({8, 32}, 12, DType::bf16);
  Tensor w = test::grad_leaf({32}, 13, DType::f32);
  AutocastGuard guard(DType::bf16);
  AddLayerNormOutput o = add_layer_norm(x, r, {32}, w, Tensor());
  CHECK(o.sum.dtype() == DType::f32);
  CHECK(o.out.dtype() == DType::f32);
  Tensor ref = layer_norm(x + r, {32}, w, Tensor());
  CHECK(test::values(o.out) == test::values(ref));
  // Both addends 16-bit: the composition (layer_norm casts its input to f32 under autocast).
  Tensor x16 = x.detach().to(DType::bf16);
  AddLayerNormOutput o16 = add_layer_norm(x16, r, {32}, w, Tensor());
  CHECK(o16.sum.dtype() == DType::bf16);
  CHECK(o16.out.dtype() == DType::f32);
}

TEST_CASE("add_layer_norm names bad shapes") {
  Tensor x = test::random({4, 6}, DType::f32, 1);
  CHECK_THROWS_WITH_AS(add_layer_norm(x, test::random({4, 5}, DType::f32, 2), {6}, Tensor(), Tensor()),
                       doctest::Contains("differ"), Error);
  CHECK_THROWS_WITH_AS(add_layer_norm(x, x, {5}, Tensor(), Tensor()), doctest::Contains("normalized_shape"), Error);
}
