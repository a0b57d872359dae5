// PowerSGD (Note [PowerSGD], parallel/powersgd_hook.cpp) on small matrices across 2 Gloo ranks,
// checked step by step against its definition computed here on the host in f64 (every rank's
// gradients are known to every rank): plain all-reduce before start_powerSGD_iter, then
// P = orth(sum M Q), Q = mean(M)^T P, M = P Q^T, error feedback and warm start; and DDP with a
// full-rank PowerSGD trains exactly like plain all-reduce.
#include <kiln/parallel/ddp.h>
#include <kiln/parallel/powersgd_hook.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using kiln::test::expect;
using kiln::test::run_ranks;

namespace {

using Mat = std::vector<double>;  // row-major

Mat mm(const Mat& a, const Mat& b, int64_t n, int64_t k, int64_t m) {  // (n,k) x (k,m)
  Mat c(size_t(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t l = 0; l < k; ++l) c[size_t(i * m + j)] += a[size_t(i * k + l)] * b[size_t(l * m + j)];
  return c;
}
Mat transpose(const Mat& a, int64_t n, int64_t m) {
  Mat t(a.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) t[size_t(j * n + i)] = a[size_t(i * m + j)];
  return t;
}
// Classical Gram-Schmidt on the columns of (n, r).
Mat orth(Mat a, int64_t n, int64_t r) {
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      double d = 0;
      for (int64_t x = 0; x < n; ++x) d += a[size_t(x * r + i)] * a[size_t(x * r + j)];
      for (int64_t x = 0; x < n; ++x) a[size_t(x * r + i)] -= d * a[size_t(x * r + j)];
    }
    double norm = 0;
    for (int64_t x = 0; x < n; ++x) norm += a[size_t(x * r + i)] * a[size_t(x * r + i)];
    norm = std::sqrt(norm);
    for (int64_t x = 0; x < n; ++x) a[size_t(x * r + i)] /= norm;
  }
  return a;
}
Mat part(const Mat& v, int64_t at, int64_t n) { return Mat(v.begin() + at, v.begin() + at + n); }
void expect_near(const Mat& got, const Mat& want, double tol, const std::string& what) {
  expect(got.size() == want.size(), what + ": size");
  for (size_t i = 0; i < got.size(); ++i)
    expect(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])),
           what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
               std::to_string(want[i]));
}

// A bucket of A (10, 8) (compressed at rank 2: 80 > 2 * 2 * 18), B (3, 2) (not: 6 <= 2 * 2 * 5)
// and c (4) (a vector): 90 elements, A first.
constexpr int64_t kN = 10, kM = 8, kR = 2, kSize = 90;
Mat gradient_of(int rank, int call) { return test::values(test::random({kSize}, DType::f64, 100 * call + rank)); }

}  // namespace

TEST_CASE("orthogonalize_columns: orthonormal columns spanning the same space; zero columns stay zero") {
  Tensor a = test::random({5, 3}, DType::f64, 9);
  Tensor q = a.clone();
  orthogonalize_columns(q, 0.0);
  const Mat qv = test::values(q), av = test::values(a);
  expect_near(mm(transpose(qv, 5, 3), qv, 3, 5, 3), {1, 0, 0, 0, 1, 0, 0, 0, 1}, 1e-12, "Q^T Q");
  expect_near(mm(mm(qv, transpose(qv, 5, 3), 5, 3, 5), av, 5, 5, 3), av, 1e-12, "Q Q^T A = A");
  expect_near(qv, orth(av, 5, 3), 1e-12, "classical Gram-Schmidt");
  Tensor z = zeros({4, 2}, DType::f64);
  orthogonalize_columns(z, 0.0);
  for (double v : test::values(z)) expect(v == 0.0, "a zero matrix stays zero (no NaN)");
}

TEST_CASE("PowerSGD hook = its definition on small matrices: warm-up, compression, error feedback, warm start") {
  run_ranks(2, [&](ProcessGroup& pg) {
    const int W = 2;
    auto state = std::make_shared<PowerSGDState>(
        PowerSGDOptions().matrix_approximation_rank(kR).start_powerSGD_iter(2).random_seed(5));
    GradBucket bucket;
    bucket.index = 0;
    bucket.is_last = true;
    bucket.parameters = {empty({kN, kM}, DType::f64), empty({3, 2}, DType::f64), empty({4}, DType::f64)};
    bucket.offsets = {0, kN * kM, kN * kM + 6};
    std::vector<Mat> error(W, Mat(kSize, 0.0));  // the reference's error feedback, per rank
    Mat q_prev;
    for (int call = 0; call < 5; ++call) {
      CAPTURE(call);
      bucket.buffer = from_vector(gradient_of(pg.rank(), call), {kSize});
      powersgd_hook(*state, pg, bucket)->wait();
      const Mat got = test::values(bucket.buffer);
      std::vector<Mat> in(W);
      for (int r = 0; r < W; ++r) in[size_t(r)] = gradient_of(r, call);
      Mat mean(kSize, 0.0);
      if (call < 2) {  // warm-up: the exact average
        for (int r = 0; r < W; ++r)
          for (int64_t i = 0; i < kSize; ++i) mean[size_t(i)] += in[size_t(r)][size_t(i)] / W;
        expect_near(got, mean, 1e-12, "plain all-reduce before start_powerSGD_iter");
        expect(!state->p(0).defined(), "no P before start_powerSGD_iter");
        continue;
      }
      for (int r = 0; r < W; ++r)
        for (int64_t i = 0; i < kSize; ++i) {
          in[size_t(r)][size_t(i)] += error[size_t(r)][size_t(i)];  // 1. error feedback
          mean[size_t(i)] += in[size_t(r)][size_t(i)] / W;
        }
      const Mat p = part(test::values(state->p(0)), 0, kN * kR), q = part(test::values(state->q(0)), 0, kM * kR);
      expect_near(mm(transpose(p, kN, kR), p, kR, kN, kR), {1, 0, 0, 1}, 1e-10, "P^T P = I");
      if (call > 2) {  // warm start: P = orth(sum_r M_r Q_prev) with last iteration's Q
        Mat psum(size_t(kN * kR), 0.0);
        for (int r = 0; r < W; ++r) {
          Mat mr = mm(part(in[size_t(r)], 0, kN * kM), q_prev, kN, kM, kR);
          for (size_t i = 0; i < psum.size(); ++i) psum[i] += mr[i];
        }
        expect_near(p, orth(psum, kN, kR), 1e-9, "P = orth(sum M Q_prev)");
      }
      const Mat a_mean = part(mean, 0, kN * kM);
      expect_near(q, mm(transpose(a_mean, kN, kM), p, kM, kN, kR), 1e-10, "Q = mean(M)^T P");
      Mat want = mean;  // B and c: the exact average
      const Mat approx = mm(p, transpose(q, kM, kR), kN, kR, kM);
      std::copy(approx.begin(), approx.end(), want.begin());
      expect_near(got, want, 1e-10, "bucket = P Q^T for A, the average for B and c");
      for (int r = 0; r < W; ++r)
        for (int64_t i = 0; i < kSize; ++i) error[size_t(r)][size_t(i)] = in[size_t(r)][size_t(i)] - want[size_t(i)];
      expect_near(test::values(state->error(0)), error[size_t(pg.rank())], 1e-10, "error = input - result");
      q_prev = q;
      expect(state->sent_elements() == kR * (kN + kM) + 10 && state->dense_elements() == kSize,
             "elements sent: P and Q, r (n + m), and the 10 uncompressed: " +
                 std::to_string(state->sent_elements()));
    }
    expect(state->iteration() == 5, "one iteration per is_last bucket");
  });
}

// At rank min(n, m) PowerSGD loses nothing: P spans the column space of sum M Q, so P Q^T is the
// average. DDP with it must train like plain all-reduce (here: the single-process oracle) to float
// error, with and without warm start, over several compressed steps. This net's gradients are rank
// deficient (dead ReLU units): with Gram-Schmidt at r > 2 it drifted 0.05-5.5% (Note [PowerSGD
// orthogonalization]).
TEST_CASE("DDP + full-rank PowerSGD trains exactly like plain all-reduce") {
  for (bool warm : {true, false}) {
    CAPTURE(warm);
    test::TrainSpec s;
    s.dtype = DType::f64;
    s.steps = 6;
    const auto want = test::train_reference(s, 2);
    run_ranks(2, [&](ProcessGroup& pg) {
      auto state = std::make_shared<PowerSGDState>(
          PowerSGDOptions().matrix_approximation_rank(8).min_compression_rate(0).start_powerSGD_iter(2).warm_start(warm));
      auto got = test::train_ddp(pg, s, test::small_buckets(), nullptr, with_state(state, powersgd_hook));
      expect(state->iteration() == 6, "6 iterations");
      expect(state->error(0).defined() && state->q(0).defined() == warm, "PowerSGD ran; Q kept only with warm start");
      expect(state->sent_elements() < state->dense_elements() + 200, "it compressed");
      test::expect_close(got, want, 1e-9, "full-rank PowerSGD vs one process");
    });
  }
}
