// conv2d and its backward kernels on CUDA (cuDNN) against the CPU kernels run in f64 on the same
// inputs: stride / padding / dilation / groups, 1x1 and 3x3 and rectangular kernels, odd sizes,
// size 1, many blocks, strided inputs, every floating dtype, TF32 on and off, benchmark and
// deterministic modes, batches split for cuDNN's 32-bit sizes, the autograd node, device errors.
// Skipped (exit 77) without a usable device.
#include "test_util.h"

#include <cmath>

#include <kiln/core/cuda/kernels/conv.h>

using namespace kiln;
using ops::Conv2dOptions;

namespace {

// Every cuDNN algorithm sums the same terms in its own order (Winograd and FFT through transforms),
// so the error is bounded by the sum of |terms|: |gpu - ref| <= tol * (|ref| + scale) with scale the
// same op on |inputs| (in f64). Per dtype: the rounding of the inputs the kernels see (TF32: 10-bit
// mantissas; bf16/f16: the output) and, for f32, the transforms of FFT/Winograd algorithms, whose
// error follows the tile rather than one output's terms.
double conv_tol(DType dt, bool tf32) {
  switch (dt) {
    case DType::f64: return 1e-10;
    case DType::f32: return tf32 ? 2e-3 : 1e-4;
    case DType::bf16: return test::cuda_rtol(DType::bf16);
    case DType::f16: return test::cuda_rtol(DType::f16);
    default: return 0;
  }
}

void check_scaled(const Tensor& gpu, const Tensor& ref, const Tensor& scale, double tol, DType dt,
                  const std::string& what) {
  REQUIRE_MESSAGE(gpu.device().is_cuda(), what, ": result is on ", gpu.device().str());
  CHECK_MESSAGE(gpu.dtype() == dt, what, ": dtype ", dtype_name(gpu.dtype()), ", expected ", dtype_name(dt));
  REQUIRE_MESSAGE(gpu.shape() == ref.shape(), what, ": shape ", gpu.shape(), " vs CPU ", ref.shape());
  const std::vector<double> a = test::values(gpu), e = test::values(ref), s = test::values(scale);
  for (size_t i = 0; i < a.size(); ++i) {
    const double bound = tol * (std::fabs(e[i]) + s[i]);
    if (!(std::fabs(a[i] - e[i]) <= bound)) {
      FAIL_CHECK(what, ": element ", i, " is ", a[i], ", expected ", e[i], " (bound ", bound, ", scale ", s[i], ")");
      return;
    }
  }
  CHECK(true);
}

// Sets one of the cuDNN settings for a scope and puts back the old value, even when a check throws.
class SettingGuard {
 public:
  SettingGuard(bool (*get)(), void (*set)(bool), bool on) : set_(set), old_(get()) { set_(on); }
  ~SettingGuard() { set_(old_); }
  SettingGuard(const SettingGuard&) = delete;
  SettingGuard& operator=(const SettingGuard&) = delete;

 private:
  void (*set_)(bool);
  bool old_;
};

struct Case {
  const char* name;
  Shape x, w;
  Conv2dOptions opt;
};

std::vector<Case> cases() {
  return {
      {"3x3 pad 1", {2, 3, 9, 11}, {4, 3, 3, 3}, Conv2dOptions().padding(1)},
      {"3x3 stride 2 pad 1, odd sizes", {3, 4, 13, 7}, {5, 4, 3, 3}, Conv2dOptions().stride(2).padding(1)},
      {"1x1", {4, 8, 5, 5}, {6, 8, 1, 1}, Conv2dOptions()},
      {"1x1 stride 2", {2, 6, 7, 9}, {4, 6, 1, 1}, Conv2dOptions().stride(2)},
      {"3x3 dilation 2 pad 2", {2, 3, 12, 10}, {4, 3, 3, 3}, Conv2dOptions().dilation(2).padding(2)},
      {"groups 2", {2, 6, 8, 8}, {4, 3, 3, 3}, Conv2dOptions().groups(2).padding(1)},
      {"depthwise", {2, 8, 9, 9}, {8, 1, 3, 3}, Conv2dOptions().groups(8).padding(1)},
      {"rectangular kernel, stride and padding", {1, 3, 10, 15}, {2, 3, 2, 5},
       Conv2dOptions().stride({2, 3}).padding({1, 2}).dilation({1, 2})},
      {"size 1", {1, 1, 1, 1}, {1, 1, 1, 1}, Conv2dOptions()},
      {"many blocks", {8, 16, 32, 32}, {32, 16, 3, 3}, Conv2dOptions().padding(1)},
  };
}

// The three directions and the bias gradient of one case in one dtype, against the CPU in f64.
void check_case(const Case& c, DType dt, bool tf32, uint64_t seed) {
  CAPTURE(c.name);
  CAPTURE(dt);
  CAPTURE(tf32);
  SettingGuard tf32_guard(cuda::cudnn_allow_tf32, cuda::set_cudnn_allow_tf32, tf32);
  const double tol = conv_tol(dt, tf32);
  const Tensor x = test::random(c.x, dt, seed), w = test::random(c.w, dt, seed + 1);
  const Tensor b = test::random({c.w[0]}, dt, seed + 2);
  const Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64), b64 = b.to(DType::f64);
  const Tensor ax = ops::abs(x64), aw = ops::abs(w64), ab = ops::abs(b64);

  const Tensor y = ops::conv2d(test::to_cuda(x, /*strided=*/true), test::to_cuda(w), test::to_cuda(b, true), c.opt);
  check_scaled(y, ops::conv2d(x64, w64, b64, c.opt), ops::conv2d(ax, aw, ab, c.opt), tol, dt, "forward");
  const Tensor y_nobias = ops::conv2d(test::to_cuda(x), test::to_cuda(w, true), Tensor(), c.opt);
  check_scaled(y_nobias, ops::conv2d(x64, w64, Tensor(), c.opt), ops::conv2d(ax, aw, Tensor(), c.opt), tol, dt,
               "forward without bias");

  const Tensor g = test::random(y.shape(), dt, seed + 3);
  const Tensor g64 = g.to(DType::f64), ag = ops::abs(g64);
  const Tensor gx = ops::conv2d_backward_input(test::to_cuda(g, true), test::to_cuda(w), c.x, c.opt);
  check_scaled(gx, ops::conv2d_backward_input(g64, w64, c.x, c.opt), ops::conv2d_backward_input(ag, aw, c.x, c.opt),
               tol, dt, "backward input");
  const Tensor gw = ops::conv2d_backward_weight(test::to_cuda(g), test::to_cuda(x, true), c.w, c.opt);
  check_scaled(gw, ops::conv2d_backward_weight(g64, x64, c.w, c.opt), ops::conv2d_backward_weight(ag, ax, c.w, c.opt),
               tol, dt, "backward weight");
  // The bias gradient is summed in double on both sides: only the final rounding differs.
  const Tensor gb = ops::conv2d_backward_bias(test::to_cuda(g, true));
  check_scaled(gb, ops::conv2d_backward_bias(g64), ops::conv2d_backward_bias(ag), test::cuda_rtol(dt), dt,
               "backward bias");
}

}  // namespace

TEST_CASE("cuDNN settings start at torch's defaults") {
  test::require_cuda();
  CHECK(cuda::cudnn_allow_tf32());
  CHECK(!cuda::cudnn_benchmark());
  CHECK(!cuda::cudnn_deterministic());
}

TEST_CASE("conv2d and its backward kernels match the CPU: f32 without TF32, f64") {
  test::require_cuda();
  uint64_t seed = 100;
  for (const Case& c : cases())
    for (DType dt : {DType::f32, DType::f64}) check_case(c, dt, /*tf32=*/false, seed += 10);
}

TEST_CASE("conv2d and its backward kernels match the CPU: f32 with TF32 (the default), bf16, f16") {
  test::require_cuda();
  uint64_t seed = 300;
  for (const Case& c : cases()) {
    check_case(c, DType::f32, /*tf32=*/true, seed += 10);
    check_case(c, DType::bf16, true, seed += 10);
    check_case(c, DType::f16, true, seed += 10);
  }
}

TEST_CASE("benchmark mode (cudnnFind) and deterministic mode give the same convolutions") {
  test::require_cuda();
  const std::vector<Case> all = cases();
  {
    SettingGuard benchmark(cuda::cudnn_benchmark, cuda::set_cudnn_benchmark, true);
    for (size_t i : {size_t(0), size_t(5), all.size() - 1}) check_case(all[i], DType::f32, false, 500 + i);
  }
  SettingGuard deterministic(cuda::cudnn_deterministic, cuda::set_cudnn_deterministic, true);
  const Case& c = all.back();
  check_case(c, DType::f32, false, 600);
  const Tensor x = test::to_cuda(test::random(c.x, DType::f32, 601));
  const Tensor g = test::to_cuda(test::random({c.x[0], c.w[0], c.x[2], c.x[3]}, DType::f32, 602));
  const Tensor gw1 = ops::conv2d_backward_weight(g, x, c.w, c.opt), gw2 = ops::conv2d_backward_weight(g, x, c.w, c.opt);
  CHECK(test::values(gw1) == test::values(gw2));  // bitwise, run to run
}

TEST_CASE("empty batches and channels give empty or zero results like the CPU") {
  test::require_cuda();
  const Tensor x = test::random({0, 3, 5, 5}, DType::f32, 700), w = test::random({4, 3, 3, 3}, DType::f32, 701);
  const Tensor y = ops::conv2d(test::to_cuda(x), test::to_cuda(w), Tensor(), Conv2dOptions().padding(1));
  CHECK(y.shape() == Shape{0, 4, 5, 5});
  const Tensor gw = ops::conv2d_backward_weight(test::to_cuda(empty({0, 4, 5, 5}, DType::f32)), test::to_cuda(x),
                                                w.shape(), Conv2dOptions().padding(1));
  test::check_cuda_matches(gw, zeros(w.shape()), 0, 0, "weight gradient of an empty batch");
}

TEST_CASE("batches beyond cuDNN's 32-bit sizes are split along N") {
  test::require_cuda();
  // (2100, 1, 1024, 1024) bf16: 2.2e9 elements. Image n holds pattern n % 7, so a chunk that reads
  // or writes the wrong images or offsets shows at the chunk boundaries (every 256 images).
  const int64_t n = 2100, side = 1024;
  std::vector<Tensor> patterns;
  for (int k = 0; k < 7; ++k) patterns.push_back(test::random({1, 1, side, side}, DType::bf16, 800 + k));
  Tensor x = empty({n, 1, side, side}, TensorOptions(DType::bf16).device(Device::cuda()));
  for (int64_t i = 0; i < n; ++i) x.narrow(0, i, 1).copy_(patterns[i % 7]);
  const Tensor w = test::random({1, 1, 1, 1}, DType::bf16, 810);
  const Tensor y = ops::conv2d(x, test::to_cuda(w));
  const Tensor gx = ops::conv2d_backward_input(y, test::to_cuda(w), x.shape(), Conv2dOptions());
  for (int64_t i : {int64_t(0), int64_t(255), int64_t(256), int64_t(1023), int64_t(1024), n - 1}) {
    CAPTURE(i);
    const Tensor want = ops::conv2d(patterns[i % 7], w);
    test::check_cuda_matches(y.narrow(0, i, 1), want, test::cuda_rtol(DType::bf16), 1e-2, "forward image");
    test::check_cuda_matches(gx.narrow(0, i, 1), ops::conv2d_backward_input(want, w, want.shape(), Conv2dOptions()),
                             test::cuda_rtol(DType::bf16), 1e-2, "backward input image");
  }
}

TEST_CASE("the autograd conv2d runs its backward on the device") {
  test::require_cuda();
  const Case c = cases()[1];
  SettingGuard tf32(cuda::cudnn_allow_tf32, cuda::set_cudnn_allow_tf32, false);
  Tensor x = test::random(c.x, DType::f32, 900), w = test::random(c.w, DType::f32, 901);
  Tensor b = test::random({c.w[0]}, DType::f32, 902);
  Tensor xd = test::to_cuda(x), wd = test::to_cuda(w), bd = test::to_cuda(b);
  for (Tensor* t : {&x, &w, &b, &xd, &wd, &bd}) t->requires_grad_();
  const Tensor g = test::random({c.x[0], c.w[0], 7, 4}, DType::f32, 903);
  Tensor y = conv2d(x, w, b, c.opt), yd = conv2d(xd, wd, bd, c.opt);
  REQUIRE(yd.shape() == g.shape());
  y.backward(g);
  yd.backward(test::to_cuda(g));
  const double tol = 1e-4;
  test::check_cuda_matches(yd, y.detach(), tol, tol, "output");
  test::check_cuda_matches(xd.grad(), x.grad(), tol, tol, "x.grad");
  test::check_cuda_matches(wd.grad(), w.grad(), tol, tol, "weight.grad");
  test::check_cuda_matches(bd.grad(), b.grad(), tol, tol, "bias.grad");
}

TEST_CASE("conv2d with operands on different devices names the devices") {
  test::require_cuda();
  const Tensor x = test::random({1, 2, 5, 5}, DType::f32, 950), w = test::random({3, 2, 3, 3}, DType::f32, 951);
  CHECK_ERROR_CONTAINS(ops::conv2d(test::to_cuda(x), w), "conv2d", "one device", "cuda:0", "cpu");
  CHECK_ERROR_CONTAINS(ops::conv2d(test::to_cuda(x), test::to_cuda(w), ones({3})), "conv2d", "one device");
  CHECK_ERROR_CONTAINS(ops::conv2d_backward_input(test::to_cuda(ones({1, 3, 3, 3})), w, x.shape()),
                       "conv2d_backward_input", "one device");
}
