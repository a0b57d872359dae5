// Conv2d, BatchNorm2d, MaxPool2d, AdaptiveAvgPool2d and Flatten: forward values against plain
// loops written here, parameter/buffer names, shapes and init, gradients after backward, train vs
// eval (BatchNorm2d), and the wrong-input-shape errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "test_util.h"

using namespace kiln;
using test::at;
using test::names;
using test::values;

namespace {

// Direct convolution: out[n][o][i][j] = b[o] + sum over the group's channels and kernel taps.
std::vector<double> conv_ref(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t pad,
                             int64_t groups) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), CG = w.size(1), KH = w.size(2), KW = w.size(3), OG = O / groups;
  const int64_t OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
  (void)C;
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double s = b.defined() ? at(b, {o}) : 0.0;
          for (int64_t cg = 0; cg < CG; ++cg)
            for (int64_t ki = 0; ki < KH; ++ki)
              for (int64_t kj = 0; kj < KW; ++kj) {
                int64_t h = i * stride - pad + ki, ww = j * stride - pad + kj;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                s += at(x, {n, (o / OG) * CG + cg, h, ww}) * at(w, {o, cg, ki, kj});
              }
          out.push_back(s);
        }
  return out;
}

}  // namespace

TEST_CASE("Conv2d: names, init, forward (stride, padding, groups), backward, shape errors") {
  Generator gen(5);
  nn::Conv2d conv(nn::Conv2dOptions(2, 3, 3).stride(2).padding(1).generator(gen));
  CHECK(names(conv.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(conv.weight.shape() == Shape{3, 2, 3, 3});
  CHECK(conv.bias.shape() == Shape{3});
  double bound = 1.0 / std::sqrt(18.0);  // fan_in = 2 * 3 * 3
  for (double v : values(conv.weight)) CHECK(std::fabs(v) <= bound);
  for (double v : values(conv.bias)) CHECK(std::fabs(v) <= bound);

  Tensor x = test::random({2, 2, 5, 5}, DType::f32, 6);
  Tensor y = conv.forward(x);
  REQUIRE(y.shape() == Shape{2, 3, 3, 3});
  test::check_close(y, conv_ref(x, conv.weight, conv.bias, 2, 1, 1), 1e-4, 1e-5, "Conv2d forward");
  y.backward(ones_like(y));
  REQUIRE(conv.weight.grad().defined());
  CHECK(conv.weight.grad().shape() == Shape{3, 2, 3, 3});
  test::check_close(conv.bias.grad(), {18, 18, 18}, 1e-6, 0, "Conv2d bias grad");  // N * OH * OW

  nn::Conv2d grouped(nn::Conv2dOptions(4, 6, {2, 3}).groups(2).bias(false).generator(gen));
  CHECK(names(grouped.named_parameters()) == std::vector<std::string>{"weight"});
  CHECK(grouped.weight.shape() == Shape{6, 2, 2, 3});
  Tensor xg = test::random({1, 4, 4, 5}, DType::f32, 7);
  Tensor yg = grouped.forward(xg);
  REQUIRE(yg.shape() == Shape{1, 6, 3, 3});
  test::check_close(yg, conv_ref(xg, grouped.weight, Tensor(), 1, 0, 2), 1e-4, 1e-5, "grouped Conv2d");

  CHECK_ERROR_CONTAINS(conv.forward(zeros({2, 3, 5, 5})), "Conv2d(in_channels=2", "(N, 2, H, W)", "[2, 3, 5, 5]");
  CHECK_ERROR_CONTAINS(conv.forward(zeros({2, 5, 5})), "Conv2d(in_channels=2", "[2, 5, 5]");
  CHECK_ERROR_CONTAINS(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).groups(2)), "divisible by groups (2)");
  std::ostringstream os;
  os << conv;
  CHECK(os.str() == "Conv2d(2, 3, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))");
}

TEST_CASE("BatchNorm2d: buffers, train statistics and running updates, eval uses running stats") {
  nn::BatchNorm2d bn(nn::BatchNormOptions(3).momentum(0.1).eps(1e-5));
  CHECK(names(bn.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(names(bn.named_buffers()) == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  CHECK(names(bn.state_dict()) ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn.num_batches_tracked.dtype() == DType::i64);
  CHECK(bn.num_batches_tracked.dim() == 0);
  CHECK(values(bn.running_var) == std::vector<double>{1, 1, 1});
  test::randomize(bn.weight, 21);
  test::randomize(bn.bias, 22);

  const int64_t N = 4, C = 3, H = 2, W = 5, M = N * H * W;
  Tensor x = test::random({N, C, H, W}, DType::f32, 3);
  std::vector<double> mean(C, 0.0), var(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) mean[c] += at(x, {n, c, h, w}) / double(M);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) var[c] += std::pow(at(x, {n, c, h, w}) - mean[c], 2) / double(M);
  }
  auto normalized = [&](const std::vector<double>& mu, const std::vector<double>& v) {
    std::vector<double> out;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w)
            out.push_back((at(x, {n, c, h, w}) - mu[c]) / std::sqrt(v[c] + 1e-5) * at(bn.weight, {c}) +
                          at(bn.bias, {c}));
    return out;
  };

  Tensor y = bn.forward(x);  // training
  test::check_close(y, normalized(mean, var), 1e-4, 1e-5, "BatchNorm2d train forward");
  std::vector<double> rm(C), rv(C);
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = 0.1 * mean[c];
    rv[c] = 0.9 + 0.1 * var[c] * double(M) / double(M - 1);  // unbiased variance in the running stat
  }
  test::check_close(bn.running_mean, rm, 1e-4, 1e-6, "running_mean");
  test::check_close(bn.running_var, rv, 1e-4, 1e-6, "running_var");
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  y.backward(ones_like(y));
  REQUIRE(bn.weight.grad().defined());
  test::check_close(bn.bias.grad(), {double(M), double(M), double(M)}, 1e-6, 0, "BatchNorm2d bias grad");

  const std::vector<double> mean_before = test::values(bn.running_mean);
  const std::vector<double> var_before = test::values(bn.running_var);
  bn.eval();
  Tensor ye = bn.forward(x);
  test::check_close(ye, normalized(rm, rv), 1e-4, 1e-5, "BatchNorm2d eval forward");
  test::check_close(bn.running_mean, mean_before, 0, 0, "eval leaves running_mean");
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);

  nn::BatchNorm2d untracked(nn::BatchNormOptions(3).track_running_stats(false).affine(false));
  CHECK(untracked.state_dict().empty());
  untracked.eval();  // no running stats: still the batch statistics
  std::vector<double> plain;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) plain.push_back((at(x, {n, c, h, w}) - mean[c]) / std::sqrt(var[c] + 1e-5));
  test::check_close(untracked.forward(x), plain, 1e-4, 1e-5, "untracked BatchNorm2d");

  CHECK_ERROR_CONTAINS(bn.forward(zeros({4, 2, 2, 2})), "BatchNorm2d(num_features=3)", "(N, 3, H, W)",
                       "[4, 2, 2, 2]");
  CHECK_ERROR_CONTAINS(bn.forward(zeros({4, 3, 2})), "BatchNorm2d(num_features=3)", "[4, 3, 2]");
}

TEST_CASE("MaxPool2d and AdaptiveAvgPool2d against window loops") {
  const int64_t N = 1, C = 2, H = 5, W = 7;
  Tensor x = test::random({N, C, H, W}, DType::f32, 8);
  x.requires_grad_();
  auto max_ref = [&](int64_t k, int64_t s, int64_t p) {
    const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
    std::vector<double> out;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t a = 0; a < k; ++a)
            for (int64_t b = 0; b < k; ++b) {
              int64_t h = i * s - p + a, w = j * s - p + b;
              if (h >= 0 && h < H && w >= 0 && w < W) m = std::max(m, at(x, {0, c, h, w}));
            }
          out.push_back(m);
        }
    return out;
  };
  nn::MaxPool2d pool(2);
  Tensor y = pool.forward(x);
  REQUIRE(y.shape() == Shape{1, 2, 2, 3});
  test::check_close(y, max_ref(2, 2, 0), 0, 0, "MaxPool2d(2)");
  nn::MaxPool2d padded(nn::MaxPool2dOptions(3).stride(1).padding(1));
  Tensor yp = padded.forward(x);
  REQUIRE(yp.shape() == Shape{1, 2, 5, 7});
  test::check_close(yp, max_ref(3, 1, 1), 0, 0, "MaxPool2d(3, stride 1, padding 1)");
  y.backward(ones_like(y));
  double grad_sum = 0;
  for (double g : values(x.grad())) grad_sum += g;
  CHECK(grad_sum == doctest::Approx(12.0));  // one arg-max per window
  CHECK_ERROR_CONTAINS(pool.forward(zeros({2, 5, 7})), "MaxPool2d(kernel_size=(2, 2))", "[2, 5, 7]");

  // torch's adaptive bins: [floor(i * H / OH), ceil((i + 1) * H / OH)).
  auto avg_ref = [&](int64_t oh, int64_t ow) {
    std::vector<double> out;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh;
          int64_t w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += at(x, {0, c, h, w});
          out.push_back(s / double((h1 - h0) * (w1 - w0)));
        }
    return out;
  };
  nn::AdaptiveAvgPool2d avg(nn::AdaptiveAvgPool2dOptions({2, 3}));
  Tensor ya = avg.forward(x);
  REQUIRE(ya.shape() == Shape{1, 2, 2, 3});
  test::check_close(ya, avg_ref(2, 3), 1e-5, 1e-6, "AdaptiveAvgPool2d(2, 3)");
  test::check_close(nn::AdaptiveAvgPool2d(1).forward(x), avg_ref(1, 1), 1e-5, 1e-6, "AdaptiveAvgPool2d(1)");
  CHECK_ERROR_CONTAINS(avg.forward(zeros({5, 7})), "AdaptiveAvgPool2d(output_size=(2, 3))", "[5, 7]");
}

TEST_CASE("Flatten keeps values and checks its dims") {
  Tensor x = test::random({2, 3, 4, 5}, DType::f32, 9);
  Tensor y = nn::Flatten().forward(x);
  CHECK(y.shape() == Shape{2, 60});
  CHECK(values(y) == values(x));
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(0)).forward(x).shape() == Shape{120});
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(1).end_dim(2)).forward(x).shape() == Shape{2, 12, 5});
  CHECK_ERROR_CONTAINS(nn::Flatten(nn::FlattenOptions().start_dim(4)).forward(x), "Flatten(start_dim=4",
                       "[2, 3, 4, 5]");
}
