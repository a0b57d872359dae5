// scaled_dot_product_attention: forward values against a plain double loop (causal and not),
// float64 gradchecks w.r.t. q, k and v, and shape/dtype errors.
#include "test_util.h"

#include <limits>

using namespace kiln;

namespace {

// out[b,h,i,:] = sum_j softmax_j(q_i . k_j / sqrt(D), j <= i if causal) v_j.
std::vector<double> attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Dv = v.size(3);
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(T, -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          if (causal && j > i) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += test::at(q, {b, h, i, d}) * test::at(k, {b, h, j, d});
          s[j] = dot / std::sqrt(double(D));
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < T; ++j) z += std::exp(s[j] - m);
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < T; ++j) acc += std::exp(s[j] - m) / z * test::at(v, {b, h, j, d});
          out.push_back(acc);
        }
      }
  return out;
}
}  // namespace

TEST_CASE("attention: values match a plain loop, causal and not") {
  Tensor q = test::random({2, 3, 5, 4}, DType::f64, 1), k = test::random({2, 3, 5, 4}, DType::f64, 2);
  Tensor v = test::random({2, 3, 5, 6}, DType::f64, 3);
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    Tensor out = scaled_dot_product_attention(q, k, v, causal);
    CHECK(out.shape() == Shape{2, 3, 5, 6});
    test::check_close(out, attention_reference(q, k, v, causal), 1e-12, 1e-12, "attention");
  }
  // Causal: the first query sees only the first key, so it returns v's first row exactly.
  Tensor first = scaled_dot_product_attention(q, k, v).select(2, 0);
  test::check_close(first, test::values(v.select(2, 0)), 1e-15, 0, "row 0");
  // f32 follows the same math.
  Tensor out32 = scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32));
  CHECK(out32.dtype() == DType::f32);
  test::check_close(out32, attention_reference(q, k, v, true), 1e-4, 1e-5, "f32");
}

TEST_CASE("attention: gradcheck w.r.t. q, k and v") {
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    Tensor q = test::grad_leaf({2, 2, 4, 3}, 4), k = test::grad_leaf({2, 2, 4, 3}, 5), v = test::grad_leaf({2, 2, 4, 3}, 6);
    CHECK(gradcheck([causal](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); },
                    {q, k, v}));
    // Only some inputs requiring grad; v with its own head dim.
    Tensor kc = test::random({1, 2, 4, 3}, DType::f64, 7);
    Tensor v5 = test::grad_leaf({1, 2, 4, 5}, 8);
    CHECK(gradcheck([&](const auto& x) { return scaled_dot_product_attention(x[0], kc, x[1], causal); },
                    {test::grad_leaf({1, 2, 4, 3}, 9), v5}));
  }
  // Through non-contiguous (B, T, H, D) -> (B, H, T, D) views, as a model produces them.
  CHECK(gradcheck(
      [](const auto& x) {
        return scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2));
      },
      {test::grad_leaf({1, 3, 2, 2}, 10), test::grad_leaf({1, 3, 2, 2}, 11), test::grad_leaf({1, 3, 2, 2}, 12)}));
}

TEST_CASE("attention: shape and dtype errors name the shapes") {
  Tensor q = test::random({1, 2, 4, 3}), k = test::random({1, 2, 4, 3}), v = test::random({1, 2, 4, 3});
  CHECK_ERROR_CONTAINS(scaled_dot_product_attention(test::random({2, 4, 3}), k, v), "scaled_dot_product_attention",
                       "4-D", "[2, 4, 3]");
  CHECK_ERROR_CONTAINS(scaled_dot_product_attention(q, test::random({1, 2, 4, 5}), v), "k has shape",
                       "[1, 2, 4, 5]");
  CHECK_ERROR_CONTAINS(scaled_dot_product_attention(q, k, test::random({1, 2, 6, 3})), "v of shape", "[1, 2, 6, 3]");
  CHECK_ERROR_CONTAINS(scaled_dot_product_attention(q, k, v.to(DType::f64)), "dtype", "f64");
}
