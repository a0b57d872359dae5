// matmul / bmm / mm / linear / linear_gelu on CUDA (cuBLASLt) against the float64 reference of the
// CPU inputs: every shape case of test_matmul.cpp plus odd sizes up to 513, transposed and strided
// views of both operands, broadcast and unfoldable batches, batches above one call's limit, the
// bias and GELU epilogues and their fallbacks, TF32, f64, the plan cache, threads and streams.
#include "test_util.h"

#include <array>
#include <optional>
#include <thread>

#include <kiln/core/cuda/kernels/matmul.h>
#include <kiln/core/cuda/runtime/stream.h>

#include "matmul_reference.h"

using namespace kiln;
using test::Expected;
using test::reference_matmul;

namespace {

const DType kFloating[] = {DType::f32, DType::f64, DType::bf16, DType::f16};
const Device kCuda = Device::cuda();

// Sets the TF32 switch for a scope.
class Tf32Guard {
 public:
  explicit Tf32Guard(bool allow) : saved_(cuda::allow_tf32()) { cuda::set_allow_tf32(allow); }
  ~Tf32Guard() { cuda::set_allow_tf32(saved_); }

 private:
  bool saved_;
};

// Per-element tolerance factor (times sum |a b|): the dtype's CUDA rtol grown with K. With TF32 on,
// never below the worst case of rounding both inputs of every product to TF32 (2^-9, truncation).
double tolerance(DType dt, int64_t k) {
  const bool tf32 = dt == DType::f32 && cuda::allow_tf32();
  const double t = test::product_tolerance(test::cuda_rtol(dt, tf32), k);
  return tf32 ? std::max(t, std::ldexp(1.0, -9) + test::product_tolerance(test::cuda_rtol(dt), k)) : t;
}

// A result computed on the device: on cuda:0, contiguous, in dtype dt, within tolerance.
void check_gpu(const Tensor& out, const Expected& e, DType dt, int64_t k, const std::string& what) {
  REQUIRE_MESSAGE(out.device() == kCuda, what, ": result is on ", out.device().str());
  test::check_product_within(out, e, dt, tolerance(dt, k), what);
}

// ops::matmul on the device copies of a and b (`strided`: stored transposed, see test::to_cuda).
void check_matmul(const Tensor& a, const Tensor& b, const std::string& what, bool strided = false) {
  const Tensor da = test::to_cuda(a, strided), db = test::to_cuda(b, strided);
  check_gpu(ops::matmul(da, db), reference_matmul(a, b), a.dtype(), a.shape().back(), what);
}

std::string name(DType dt, int64_t m, int64_t k, int64_t n) { return detail::str_cat(dt, " ", m, "x", k, "x", n); }

}  // namespace

TEST_CASE("mm and matmul on 2-D operands: every dtype, odd sizes, row- and column-major storage") {
  test::require_cuda();
  const int64_t sizes[][3] = {{1, 1, 1},     {7, 33, 65},   {65, 7, 33},   {33, 65, 1},    {1, 65, 7},
                              {65, 65, 65},  {7, 1, 33},    {130, 67, 129}, {129, 513, 7}, {513, 33, 129},
                              {1, 513, 513}, {513, 1, 129}, {33, 129, 513}, {513, 7, 1}};
  uint64_t seed = 1;
  for (DType dt : kFloating)
    for (auto& s : sizes) {
      const Tensor a = test::random({s[0], s[1]}, dt, seed++), b = test::random({s[1], s[2]}, dt, seed++);
      const Expected e = reference_matmul(a, b);
      for (bool strided : {false, true}) {
        const std::string what = name(dt, s[0], s[1], s[2]) + (strided ? " column-major" : "");
        const Tensor da = test::to_cuda(a, strided), db = test::to_cuda(b, strided);
        check_gpu(ops::matmul(da, db), e, dt, s[1], "matmul " + what);
        check_gpu(ops::mm(da, db), e, dt, s[1], "mm " + what);
        check_gpu(ops::mm(da, test::to_cuda(b, !strided)), e, dt, s[1], "mm, b the other way " + what);
      }
    }
}

TEST_CASE("strided views on the device: transposed, sliced with a step, column slices, misaligned starts") {
  test::require_cuda();
  for (DType dt : kFloating) {
    const Tensor at_ = test::random({33, 7}, dt, 11), bt = test::random({65, 33}, dt, 12);
    const Tensor a = test::random({7, 33}, dt, 13), b = test::random({33, 65}, dt, 14);
    const Tensor dat = at_.to(kCuda).t(), dbt = bt.to(kCuda).t(), dA = a.to(kCuda), dB = b.to(kCuda);
    check_gpu(ops::matmul(dat, dB), reference_matmul(at_.t(), b), dt, 33, detail::str_cat(dt, " a^T"));
    check_gpu(ops::matmul(dA, dbt), reference_matmul(a, bt.t()), dt, 33, detail::str_cat(dt, " b^T"));
    check_gpu(ops::matmul(dat, dbt), reference_matmul(at_.t(), bt.t()), dt, 33, detail::str_cat(dt, " a^T b^T"));
    // A row-major view with an outer stride, starting 3 elements in (not 16-byte aligned).
    const Tensor wide = test::random({14, 80}, dt, 15);
    const Tensor rows_cols = wide.slice(0, 0, 14, 2).slice(1, 3, 36);  // (7, 33), outer stride 160
    const Tensor d_rows_cols = wide.to(kCuda).slice(0, 0, 14, 2).slice(1, 3, 36);
    check_gpu(ops::matmul(d_rows_cols, dB), reference_matmul(rows_cols, b), dt, 33,
              detail::str_cat(dt, " row-major with an outer stride, misaligned"));
    check_gpu(ops::matmul(dB.t(), d_rows_cols.t()), reference_matmul(b.t(), rows_cols.t()), dt, 33,
              detail::str_cat(dt, " both transposed views, misaligned"));
    // Inner stride 2: neither row- nor column-major, copied first.
    const Tensor stepped = wide.slice(1, 0, 66, 2);  // (14, 33)
    check_gpu(ops::matmul(wide.to(kCuda).slice(1, 0, 66, 2), dB), reference_matmul(stepped, b), dt, 33,
              detail::str_cat(dt, " inner stride 2"));
    const Tensor big = test::random({66, 40}, dt, 16);
    const Tensor both = big.slice(0, 0, 66, 2).slice(1, 1, 40, 3);  // (33, 13)
    check_gpu(ops::matmul(dA, big.to(kCuda).slice(0, 0, 66, 2).slice(1, 1, 40, 3)), reference_matmul(a, both), dt,
              33, detail::str_cat(dt, " stepped rhs"));
  }
}

TEST_CASE("1-D operands on the device: dot, matrix-vector, vector-matrix, batched") {
  test::require_cuda();
  for (DType dt : kFloating) {
    const Tensor v = test::random({65}, dt, 21), w = test::random({65}, dt, 22);
    const Tensor d = ops::matmul(v.to(kCuda), w.to(kCuda));
    CHECK(d.dim() == 0);
    check_gpu(d, reference_matmul(v, w), dt, 65, detail::str_cat(dt, " dot"));
    check_matmul(test::random({7, 65}, dt, 23), v, detail::str_cat(dt, " mv"));
    check_matmul(test::random({7, 65}, dt, 23), v, detail::str_cat(dt, " mv, strided"), true);
    check_matmul(v, test::random({65, 33}, dt, 24), detail::str_cat(dt, " vm"));
    check_matmul(v, test::random({65, 33}, dt, 24), detail::str_cat(dt, " vm, strided"), true);
    check_matmul(test::random({2, 3, 7, 65}, dt, 25), v, detail::str_cat(dt, " batched mv"));
    check_matmul(v, test::random({3, 65, 7}, dt, 26), detail::str_cat(dt, " vector times batch"));
    const Tensor sv = test::random({130}, dt, 27);
    const Tensor m = test::random({65, 2}, dt, 28);
    check_gpu(ops::matmul(sv.to(kCuda).slice(0, 0, 130, 2), m.to(kCuda)), reference_matmul(sv.slice(0, 0, 130, 2), m),
              dt, 65, detail::str_cat(dt, " strided vector"));
  }
}

TEST_CASE("batched products on the device: broadcasting, folded, unfoldable, expanded, transposed, bmm") {
  test::require_cuda();
  for (DType dt : kFloating) {
    // Batch dims that do not collapse: one call per entry of the outer dim.
    check_matmul(test::random({2, 1, 7, 5}, dt, 31), test::random({3, 5, 4}, dt, 32),
                 detail::str_cat(dt, " [2,1,7,5] @ [3,5,4]"));
    check_matmul(test::random({2, 1, 7, 5}, dt, 31), test::random({3, 5, 4}, dt, 32),
                 detail::str_cat(dt, " [2,1,7,5] @ [3,5,4], column-major"), true);
    check_matmul(test::random({4, 33, 65}, dt, 33), test::random({65, 7}, dt, 34),
                 detail::str_cat(dt, " batch @ matrix (folded)"));
    const Tensor p = test::random({7, 4, 65}, dt, 35);
    const Tensor pm = test::random({65, 7}, dt, 36);
    check_gpu(ops::matmul(p.to(kCuda).transpose(0, 1), pm.to(kCuda)), reference_matmul(p.transpose(0, 1), pm), dt,
              65, detail::str_cat(dt, " permuted batch @ matrix (not foldable)"));
    check_matmul(test::random({33, 65}, dt, 37), test::random({3, 65, 7}, dt, 38),
                 detail::str_cat(dt, " matrix @ batch (batch stride 0 for a)"));
    const Tensor e = test::random({1, 7, 33}, dt, 39);
    const Tensor eb = test::random({5, 33, 7}, dt, 40);
    check_gpu(ops::matmul(e.to(kCuda).expand({5, 7, 33}), eb.to(kCuda)), reference_matmul(e.expand({5, 7, 33}), eb),
              dt, 33, detail::str_cat(dt, " expanded batch"));
    const Tensor at_ = test::random({6, 33, 7}, dt, 41), bt = test::random({6, 1, 33}, dt, 42);
    const Tensor dat = at_.to(kCuda).transpose(1, 2), dbt = bt.to(kCuda).transpose(1, 2);  // (6, 7, 33), (6, 33, 1)
    check_gpu(ops::matmul(dat, dbt), reference_matmul(at_.transpose(1, 2), bt.transpose(1, 2)), dt, 33,
              detail::str_cat(dt, " transposed batches"));
    const Tensor a = test::random({5, 7, 33}, dt, 43), b = test::random({5, 33, 65}, dt, 44);
    check_gpu(ops::bmm(a.to(kCuda), b.to(kCuda)), reference_matmul(a, b), dt, 33, detail::str_cat(dt, " bmm"));
    const Tensor c = test::random({6, 65, 33}, dt, 45);
    check_gpu(ops::bmm(dat, c.to(kCuda).transpose(1, 2)), reference_matmul(at_.transpose(1, 2), c.transpose(1, 2)),
              dt, 33, detail::str_cat(dt, " bmm transposed"));
    check_matmul(test::random({3, 129, 513}, dt, 46), test::random({3, 513, 33}, dt, 47),
                 detail::str_cat(dt, " bmm-sized batch, K 513, column-major"), true);
  }
}

TEST_CASE("a batch above one call's limit is split over calls") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor a = test::random({70001, 2, 3}, dt, 48), b = test::random({70001, 3, 2}, dt, 49);
    check_gpu(ops::bmm(a.to(kCuda), b.to(kCuda)), reference_matmul(a, b), dt, 3,
              detail::str_cat(dt, " 70001 batches"));
    const Tensor m = test::random({3, 5}, dt, 50);
    check_gpu(ops::matmul(a.to(kCuda), m.to(kCuda)), reference_matmul(a, m), dt, 3,
              detail::str_cat(dt, " 70001 batches @ matrix (folded)"));
  }
}

TEST_CASE("empty products on the device") {
  test::require_cuda();
  const Tensor z = ops::mm(test::random({3, 0}).to(kCuda), test::random({0, 4}).to(kCuda));
  CHECK(z.device() == kCuda);
  CHECK(z.shape() == Shape{3, 4});
  CHECK(test::values(z) == std::vector<double>(12, 0.0));
  CHECK(ops::mm(test::random({0, 5}).to(kCuda), test::random({5, 4}).to(kCuda)).shape() == Shape{0, 4});
  CHECK(ops::bmm(test::random({0, 2, 5}).to(kCuda), test::random({0, 5, 4}).to(kCuda)).shape() == Shape{0, 2, 4});
  const Tensor in0 = ops::linear(test::random({3, 0}).to(kCuda), test::random({2, 0}).to(kCuda),
                                 tensor({1.5f, -2.f}).to(kCuda));
  CHECK(test::values(in0) == std::vector<double>{1.5, -2, 1.5, -2, 1.5, -2});
}

TEST_CASE("linear on the device: bias epilogue, its fallback for a misaligned bias, no bias") {
  test::require_cuda();
  for (DType dt : kFloating)
    for (int64_t out_features : {7, 64}) {
      const Tensor w = test::random({out_features, 33}, dt, 61), bias = test::random({out_features}, dt, 62);
      const Tensor x = test::random({2, 5, 33}, dt, 63);
      const Tensor dw = w.to(kCuda), dbias = bias.to(kCuda), dx = x.to(kCuda);
      const std::string what = detail::str_cat(dt, " out ", out_features);
      check_gpu(ops::linear(dx, dw, dbias), reference_matmul(x, w.t(), bias), dt, 33, what + " linear 3-D");
      check_gpu(ops::linear(dx, dw), reference_matmul(x, w.t()), dt, 33, what + " no bias");
      // A bias starting one element into its buffer cannot use the epilogue.
      const Tensor wide_bias = test::random({out_features + 1}, dt, 64);
      const Tensor mis = wide_bias.slice(0, 1, out_features + 1);
      check_gpu(ops::linear(dx, dw, wide_bias.to(kCuda).slice(0, 1, out_features + 1)),
                reference_matmul(x, w.t(), mis), dt, 33, what + " misaligned bias");
      const Tensor x1 = test::random({33}, dt, 65);
      const Tensor y1 = ops::linear(x1.to(kCuda), dw, dbias);
      CHECK(y1.shape() == Shape{out_features});
      check_gpu(y1, reference_matmul(x1, w.t(), bias), dt, 33, what + " 1-D input");
      const Tensor xt = test::random({33, 65}, dt, 66), wt = test::random({33, out_features}, dt, 67);
      check_gpu(ops::linear(xt.to(kCuda).t(), wt.to(kCuda).t(), dbias), reference_matmul(xt.t(), wt, bias), dt, 33,
                what + " transposed operands");
      const Tensor xp = test::random({5, 2, 33}, dt, 68);  // (2, 5, 33) after the transpose: not foldable
      check_gpu(ops::linear(xp.to(kCuda).transpose(0, 1), dw, dbias), reference_matmul(xp.transpose(0, 1), w.t(), bias),
                dt, 33, what + " permuted input");
    }
}

TEST_CASE("linear_gelu on the device: fused epilogue (with and without bias) and the composed fallback") {
  test::require_cuda();
  for (DType dt : kFloating)
    for (int64_t out_features : {64, 7, 136}) {  // 7: not a multiple of 8, composed
      const Tensor w = test::random({out_features, 129}, dt, 71), bias = test::random({out_features}, dt, 72);
      const Tensor x = test::random({3, 33, 129}, dt, 73, -1, 1);
      const double tol = tolerance(dt, 129);
      // The epilogue may evaluate tanh with the hardware approximation (relative error ~2^-11).
      const double tanh_error = dt == DType::f64 ? 1e-12 : std::ldexp(1.0, -10);
      for (bool with_bias : {true, false}) {
        const std::string what = detail::str_cat(dt, " out ", out_features, with_bias ? " bias" : " no bias");
        const Tensor b = with_bias ? bias : Tensor();
        const ops::LinearGelu r = ops::linear_gelu(x.to(kCuda), w.to(kCuda), with_bias ? bias.to(kCuda) : Tensor());
        REQUIRE(r.out.device() == kCuda);
        REQUIRE(r.pre_gelu.device() == kCuda);
        const Expected e = reference_matmul(x, w.t(), b);
        test::check_product_within(r.pre_gelu, e, dt, tol, what + " pre_gelu");
        test::check_gelu(r.out, e, dt, tol, test::cuda_rtol(dt), tanh_error, what + " out");
      }
      // Misaligned bias and a 1-D input.
      const Tensor wide_bias = test::random({out_features + 1}, dt, 74);
      const ops::LinearGelu m =
          ops::linear_gelu(x.to(kCuda), w.to(kCuda), wide_bias.to(kCuda).slice(0, 1, out_features + 1));
      test::check_gelu(m.out, reference_matmul(x, w.t(), wide_bias.slice(0, 1, out_features + 1)), dt, tol,
                       test::cuda_rtol(dt), tanh_error, detail::str_cat(dt, " out ", out_features, " misaligned bias"));
      const Tensor x1 = test::random({129}, dt, 75);
      const ops::LinearGelu r1 = ops::linear_gelu(x1.to(kCuda), w.to(kCuda), bias.to(kCuda));
      CHECK(r1.out.shape() == Shape{out_features});
      CHECK(r1.pre_gelu.shape() == Shape{out_features});
      test::check_gelu(r1.out, reference_matmul(x1, w.t(), bias), dt, tol, test::cuda_rtol(dt), tanh_error,
                       detail::str_cat(dt, " out ", out_features, " 1-D input"));
    }
}

TEST_CASE("TF32: off by default, within its tolerance when on, and only for f32") {
  test::require_cuda();
  CHECK_FALSE(cuda::allow_tf32());
  const Tensor a = test::random({257, 1024}, DType::f32, 81), b = test::random({1024, 129}, DType::f32, 82);
  const Tensor da = a.to(kCuda), db = b.to(kCuda);
  const Expected e = reference_matmul(a, b);
  // Largest error relative to sum |a b| (the scale the tolerance is measured in).
  auto worst = [&](const Tensor& out) {
    const std::vector<double> got = test::values(out);
    double w = 0;
    for (size_t i = 0; i < got.size(); ++i) w = std::max(w, std::fabs(got[i] - e.value[i]) / e.scale[i]);
    return w;
  };
  const Tensor exact = ops::mm(da, db);
  check_gpu(exact, e, DType::f32, 1024, "f32, TF32 off");
  CHECK_MESSAGE(test::values(ops::mm(da, db)) == test::values(exact), "the same product twice differs");
  double err_on = 0;
  {
    Tf32Guard on(true);
    const Tensor fast = ops::mm(da, db);
    check_gpu(fast, e, DType::f32, 1024, "f32, TF32 on");
    err_on = worst(fast);
    check_matmul(test::random({33, 65}, DType::f32, 83), test::random({65, 129}, DType::f32, 84), "TF32 small");
    check_matmul(test::random({4, 33, 513}, DType::f32, 85), test::random({513, 7}, DType::f32, 86),
                 "TF32 folded batch, column-major", true);
    // The switch leaves other dtypes alone: identical bits with it on and off.
    for (DType dt : {DType::bf16, DType::f16, DType::f64}) {
      const Tensor x = test::random({65, 129}, dt, 87).to(kCuda), y = test::random({129, 33}, dt, 88).to(kCuda);
      const std::vector<double> with = test::values(ops::mm(x, y));
      cuda::set_allow_tf32(false);
      const std::vector<double> without = test::values(ops::mm(x, y));
      cuda::set_allow_tf32(true);
      CHECK_MESSAGE(with == without, dtype_name(dt), ": TF32 changed a non-f32 product");
    }
  }
  CHECK_FALSE(cuda::allow_tf32());
  // TF32 rounds the inputs to 10-bit mantissas: its error is far above f32's on a K = 1024 product.
  CHECK_MESSAGE(err_on > 8 * worst(exact), "TF32 error ", err_on, " vs f32 error ", worst(exact),
                ": the switch seems to have no effect");
  check_gpu(ops::mm(da, db), e, DType::f32, 1024, "f32, TF32 off again");
}

TEST_CASE("the plan cache: one shape with other data, other pointers and other alignments") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (uint64_t pass = 0; pass < 2; ++pass)        // the second pass finds every plan cached
      for (int64_t start = 0; start < 4; ++start) {  // each start shifts every operand's alignment
        const uint64_t seed = 90 + 10 * pass + start;
        const Tensor abuf = test::random({33 * 65 + 4}, dt, seed), bbuf = test::random({65 * 24 + 4}, dt, seed + 100);
        const Tensor biasbuf = test::random({24 + 4}, dt, seed + 200);
        auto views = [&](const Tensor& ab, const Tensor& bb, const Tensor& cb) {
          return std::array<Tensor, 3>{ab.slice(0, start, start + 33 * 65).view({33, 65}),
                                       bb.slice(0, start, start + 65 * 24).view({24, 65}),
                                       cb.slice(0, start, start + 24)};
        };
        const auto cpu = views(abuf, bbuf, biasbuf);
        const auto gpu = views(abuf.to(kCuda), bbuf.to(kCuda), biasbuf.to(kCuda));
        const std::string what = detail::str_cat(dt, " pass ", pass, " start ", start);
        check_gpu(ops::mm(gpu[0], gpu[1].t()), reference_matmul(cpu[0], cpu[1].t()), dt, 65, what + " mm");
        check_gpu(ops::linear(gpu[0], gpu[1], gpu[2]), reference_matmul(cpu[0], cpu[1].t(), cpu[2]), dt, 65,
                  what + " linear");
        const ops::LinearGelu r = ops::linear_gelu(gpu[0], gpu[1], gpu[2]);
        test::check_product_within(r.pre_gelu, reference_matmul(cpu[0], cpu[1].t(), cpu[2]), dt, tolerance(dt, 65),
                                   what + " linear_gelu pre_gelu");
      }
}

TEST_CASE("products from two threads, one on the default stream and one on a stream of its own") {
  test::require_cuda();
  const Tensor a = test::random({129, 65}, DType::f32, 101), b = test::random({65, 33}, DType::f32, 102);
  const Expected e = reference_matmul(a, b);
  const Tensor da = a.to(kCuda), db = b.to(kCuda);
  std::vector<Tensor> results[2];
  std::string errors[2];
  auto work = [&](int t) {
    try {
      const cuda::Stream s = t == 0 ? cuda::current_stream(0) : cuda::Stream::create(0);
      std::optional<cuda::StreamGuard> guard;
      if (t == 1) guard.emplace(s);
      for (int i = 0; i < 20; ++i) results[t].push_back(ops::linear(da, db.t()));
      s.synchronize();  // the copies back run on the legacy stream, which does not wait for s
    } catch (const std::exception& ex) {
      errors[t] = ex.what();
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  for (int t = 0; t < 2; ++t) {
    REQUIRE_MESSAGE(errors[t].empty(), "thread ", t, ": ", errors[t]);
    REQUIRE(results[t].size() == 20);
    for (const Tensor& r : results[t]) check_gpu(r, e, DType::f32, 65, detail::str_cat("thread ", t));
  }
}

TEST_CASE("operands on two devices are an error naming both") {
  test::require_cuda();
  const Tensor a = test::random({3, 4}), b = test::random({4, 2});
  CHECK_ERROR_CONTAINS(ops::matmul(a, b.to(kCuda)), "matmul", "cpu", "cuda:0");
  CHECK_ERROR_CONTAINS(ops::bmm(a.unsqueeze(0).to(kCuda), b.unsqueeze(0)), "bmm", "cpu", "cuda:0");
  CHECK_ERROR_CONTAINS(ops::linear(a.to(kCuda), test::random({2, 4}).to(kCuda), test::random({2})), "linear", "cpu",
                       "cuda:0");
  CHECK_ERROR_CONTAINS(ops::linear_gelu(a.to(kCuda), test::random({2, 4})), "linear_gelu", "cpu", "cuda:0");
}
