// The raw batch norm kernels (kiln::ops::batch_norm, batch_norm_backward) on the CPU against plain
// double loops: statistics, output, running-stat update, eval mode, the three gradients and which
// are computed, thread independence, errors. Also the index cursors of the CUDA kernels
// (core/cuda/plan/batch_norm_index.h) against division, which run here on the CPU.
#include "test_util.h"

#include <kiln/core/cuda/plan/batch_norm_index.h>
#include <kiln/core/ops/batch_norm.h>

using namespace kiln;
namespace bi = kiln::cuda::batch_norm_index;

namespace {

// x (N, C, inner) values, by hand.
struct Ref {
  int64_t n, c, inner;
  std::vector<double> x, mean, var;  // var biased
  int64_t channel(int64_t e) const { return (e / inner) % c; }
  int64_t m() const { return n * inner; }
};

Ref reference(const Tensor& x) {
  Ref r{x.size(0), x.size(1), x.numel() / (x.size(0) * x.size(1)), test::values(x), {}, {}};
  r.mean.assign(r.c, 0.0);
  r.var.assign(r.c, 0.0);
  for (size_t e = 0; e < r.x.size(); ++e) r.mean[r.channel(e)] += r.x[e] / r.m();
  for (size_t e = 0; e < r.x.size(); ++e) {
    const double d = r.x[e] - r.mean[r.channel(e)];
    r.var[r.channel(e)] += d * d / r.m();
  }
  return r;
}

std::vector<double> per_channel(int64_t c, uint64_t seed, double lo, double hi) {
  return test::values(test::random({c}, DType::f64, seed, lo, hi));
}

}  // namespace

TEST_CASE("ChannelCursor and ElementCursor track j / inner, j % inner and the channel without dividing") {
  for (int64_t inner : {1, 2, 7, 64, 1000})
    for (int64_t channels : {1, 3, 64})
      for (int64_t step : {1, 5, 32, 256, 1031, 70000})
        for (int64_t start : {0, 1, 6, 255}) {
          CAPTURE(inner);
          CAPTURE(channels);
          CAPTURE(step);
          CAPTURE(start);
          const int64_t n = 5, total = n * channels * inner;
          bi::ChannelCursor cc(start, step, inner);
          for (int64_t j = start; j < n * inner; j += step, cc.advance()) {
            REQUIRE(cc.n == j / inner);
            REQUIRE(cc.i == j % inner);
            REQUIRE(cc.offset(channels - 1, channels) == ((j / inner) * channels + channels - 1) * inner + j % inner);
          }
          bi::ElementCursor ec(start, step, inner, channels);
          for (int64_t e = start; e < total; e += step, ec.advance()) {
            REQUIRE(ec.c == (e / inner) % channels);
            REQUIRE(ec.i == e % inner);
          }
        }
}

TEST_CASE("split_begin cuts a channel into contiguous near-equal ranges") {
  for (int64_t count : {1, 2, 9, 1000, 131072})
    for (int64_t splits : {1, 2, 3, 7, 16}) {
      CHECK(bi::split_begin(0, count, splits) == 0);
      CHECK(bi::split_begin(splits, count, splits) == count);
      for (int64_t s = 0; s < splits; ++s) {
        const int64_t len = bi::split_begin(s + 1, count, splits) - bi::split_begin(s, count, splits);
        CHECK(len >= count / splits);
        CHECK(len <= count / splits + 1);
      }
    }
}

TEST_CASE("batch_norm training: statistics, output and running update match double loops") {
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : {Shape{7, 3}, Shape{4, 3, 5}, Shape{3, 4, 5, 3}}) {
      CAPTURE(dt);
      CAPTURE(shape);
      const int64_t c = shape[1];
      Tensor x = test::random(shape, dt, 21, -1.0, 3.0);
      const std::vector<double> w = per_channel(c, 22, 0.5, 2.0), b = per_channel(c, 23, -1.0, 1.0);
      const std::vector<double> rm0 = per_channel(c, 24, -1.0, 1.0), rv0 = per_channel(c, 25, 0.5, 2.0);
      Tensor rm = from_vector(rm0, {c}).to(dt), rv = from_vector(rv0, {c}).to(dt);
      const std::vector<double> rm_start = test::values(rm), rv_start = test::values(rv);
      const double eps = 1e-3, momentum = 0.2;
      ops::BatchNormResult r = ops::batch_norm(x, from_vector(w, {c}).to(dt), from_vector(b, {c}).to(dt), rm, rv,
                                               /*training=*/true, momentum, eps);
      const Ref ref = reference(x);
      const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
      CHECK(r.out.dtype() == dt);
      CHECK(r.out.shape() == shape);
      CHECK(r.mean.dtype() == ct);
      CHECK(r.invstd.dtype() == ct);
      const double tol = test::rtol_for(ct);
      std::vector<double> invstd(c), out(ref.x.size()), rm_want(c), rv_want(c);
      for (int64_t k = 0; k < c; ++k) {
        invstd[k] = 1.0 / std::sqrt(ref.var[k] + eps);
        rm_want[k] = (1 - momentum) * rm_start[k] + momentum * ref.mean[k];
        rv_want[k] = (1 - momentum) * rv_start[k] + momentum * ref.var[k] * ref.m() / (ref.m() - 1);
      }
      for (size_t e = 0; e < out.size(); ++e) {
        const int64_t k = ref.channel(e);
        out[e] = (ref.x[e] - ref.mean[k]) * invstd[k] * w[k] + b[k];
      }
      test::check_close(r.mean, ref.mean, tol, tol, "mean");
      test::check_close(r.invstd, invstd, tol, tol, "invstd");
      test::check_close(r.out, out, test::rtol_for(dt), test::rtol_for(dt), "output");
      test::check_close(rm, rm_want, test::rtol_for(dt), test::rtol_for(dt), "running_mean");
      test::check_close(rv, rv_want, test::rtol_for(dt), test::rtol_for(dt), "running_var");
      CHECK(rm.dtype() == dt);
    }
}

TEST_CASE("batch_norm: the variance of data with a large mean keeps its digits (sums in double)") {
  Tensor x = test::random({64, 2, 9, 9}, DType::f32, 26, 1000.0, 1001.0);
  const Ref ref = reference(x);
  ops::BatchNormResult r = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 0.0);
  std::vector<double> invstd(2);
  for (int k = 0; k < 2; ++k) invstd[k] = 1.0 / std::sqrt(ref.var[k]);
  test::check_close(r.invstd, invstd, 1e-6, 0, "invstd");
}

TEST_CASE("batch_norm eval: the running statistics, left unchanged; no affine parameters") {
  Tensor x = test::random({3, 4, 2, 3}, DType::f32, 27);
  const std::vector<double> rm0 = per_channel(4, 28, -1.0, 1.0), rv0 = per_channel(4, 29, 0.5, 2.0);
  Tensor rm = from_vector(rm0, {4}).to(DType::f32), rv = from_vector(rv0, {4}).to(DType::f32);
  const std::vector<double> rmv = test::values(rm), rvv = test::values(rv);
  ops::BatchNormResult r = ops::batch_norm(x, Tensor(), Tensor(), rm, rv, /*training=*/false, 0.1, 1e-5);
  CHECK(test::values(rm) == rmv);
  CHECK(test::values(rv) == rvv);
  const Ref ref = reference(x);
  std::vector<double> out(ref.x.size()), invstd(4);
  for (int k = 0; k < 4; ++k) invstd[k] = 1.0 / std::sqrt(rvv[k] + 1e-5);
  for (size_t e = 0; e < out.size(); ++e) out[e] = (ref.x[e] - rmv[ref.channel(e)]) * invstd[ref.channel(e)];
  test::check_close(r.mean, rmv, 0, 0, "eval mean");
  test::check_close(r.invstd, invstd, 1e-6, 1e-6, "eval invstd");
  test::check_close(r.out, out, 1e-5, 1e-5, "eval output");
}

TEST_CASE("batch_norm_backward matches Note [Batch norm gradient], computing only what is asked") {
  for (bool training : {true, false})
    for (bool affine : {true, false})
      for (DType dt : {DType::f64, DType::f32}) {
        CAPTURE(training);
        CAPTURE(affine);
        CAPTURE(dt);
        const Shape shape{4, 3, 3, 2};
        Tensor x = test::random(shape, dt, 30, -1.0, 2.0), dy = test::random(shape, dt, 31);
        const std::vector<double> w = per_channel(3, 32, 0.5, 2.0);
        Tensor wt = affine ? from_vector(w, {3}).to(dt) : Tensor();
        Tensor rm = from_vector(per_channel(3, 33, -1, 1), {3}).to(dt);
        Tensor rv = from_vector(per_channel(3, 34, 0.5, 2), {3}).to(dt);
        ops::BatchNormResult f = ops::batch_norm(x, wt, Tensor(), rm, rv, training, 0.1, 1e-5);
        ops::BatchNormGrads g = ops::batch_norm_backward(dy, x, wt, f.mean, f.invstd, training, {true, true, true});
        // By hand from the saved statistics.
        const Ref ref = reference(x);
        const std::vector<double> mean = test::values(f.mean), invstd = test::values(f.invstd), dyv = test::values(dy);
        std::vector<double> sdy(3, 0.0), sdx(3, 0.0), dx(ref.x.size());
        for (size_t e = 0; e < dyv.size(); ++e) {
          const int64_t k = ref.channel(e);
          sdy[k] += dyv[e];
          sdx[k] += dyv[e] * (ref.x[e] - mean[k]) * invstd[k];
        }
        for (size_t e = 0; e < dyv.size(); ++e) {
          const int64_t k = ref.channel(e);
          const double kk = (affine ? w[k] : 1.0) * invstd[k], xhat = (ref.x[e] - mean[k]) * invstd[k];
          dx[e] = training ? kk * (dyv[e] - sdy[k] / ref.m() - xhat * sdx[k] / ref.m()) : kk * dyv[e];
        }
        const double tol = test::rtol_for(dt);
        test::check_close(g.input, dx, tol * 10, tol * 10, "dx");
        test::check_close(g.weight, sdx, tol * 10, tol * 10, "dweight");
        test::check_close(g.bias, sdy, tol * 10, tol * 10, "dbias");
        CHECK(g.input.dtype() == dt);
        ops::BatchNormGrads only_bias = ops::batch_norm_backward(dy, x, wt, f.mean, f.invstd, training, {false, false, true});
        CHECK(!only_bias.input.defined());
        CHECK(!only_bias.weight.defined());
        CHECK(test::values(only_bias.bias) == test::values(g.bias));
        ops::BatchNormGrads only_dx = ops::batch_norm_backward(dy, x, wt, f.mean, f.invstd, training, {true, false, false});
        CHECK(test::values(only_dx.input) == test::values(g.input));
        CHECK(!only_dx.bias.defined());
      }
}

TEST_CASE("batch_norm results do not depend on the thread count") {
  Tensor x = test::random({16, 5, 7, 7}, DType::f32, 35), dy = test::random({16, 5, 7, 7}, DType::f32, 36);
  const int saved = num_threads();
  std::vector<std::vector<double>> runs;
  for (int t = 0; t < 2; ++t) {
    set_num_threads(t == 0 ? 1 : std::max(2, saved));
    ops::BatchNormResult f = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    ops::BatchNormGrads g = ops::batch_norm_backward(dy, x, Tensor(), f.mean, f.invstd, true, {true, true, true});
    std::vector<double> all = test::values(f.out);
    for (const Tensor& t2 : {f.invstd, g.input, g.weight, g.bias})
      for (double v : test::values(t2)) all.push_back(v);
    runs.push_back(all);
  }
  set_num_threads(saved);
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("batch_norm raw ops: errors name the op and the shapes") {
  Tensor x = test::random({4, 3, 2}, DType::f32, 37);
  CHECK_ERROR_CONTAINS(ops::batch_norm(test::random({1, 3}, DType::f32, 38), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       "batch_norm", "more than 1 value per channel", "[1, 3]");
  CHECK_ERROR_CONTAINS(ops::batch_norm(x, ones({4}), Tensor(), Tensor(), Tensor(), true), "weight", "[3]", "[4]");
  CHECK_ERROR_CONTAINS(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false), "eval mode");
  CHECK_ERROR_CONTAINS(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, -1.0), "eps");
  ops::BatchNormResult f = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  CHECK_ERROR_CONTAINS(ops::batch_norm_backward(ones({4, 3}), x, Tensor(), f.mean, f.invstd, true, {true, true, true}),
                       "batch_norm_backward", "[4, 3]", "[4, 3, 2]");
}
