// Pooling on CUDA against the CPU kernels: max (values and argmax indices equal to the CPU's, ties
// and NaN included; backward through the indices), average (padding counted) and adaptive average,
// forward and backward, (N, C, H, W) and (C, H, W), odd sizes, size 1, many blocks, strided inputs,
// every floating dtype, and the errors for operands on two devices. Skipped without a device.
#include "test_util.h"

#include <cmath>
#include <functional>
#include <limits>

using namespace kiln;

namespace {

const DType kDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

std::vector<Shape> shapes() { return {{2, 3, 9, 11}, {3, 13, 7}, {1, 1, 1, 1}, {8, 64, 33, 35}}; }

struct Window {
  Size2 kernel;
  std::optional<Size2> stride;
  Size2 padding;
  Size2 dilation;
};

std::vector<Window> max_windows() {
  return {{2, std::nullopt, 0, 1}, {3, Size2(2), 1, 1}, {3, Size2(1), 1, 2}, {{2, 3}, Size2(1, 2), {1, 1}, 1},
          {1, std::nullopt, 0, 1}};
}

std::vector<Window> avg_windows() {
  return {{2, std::nullopt, 0, 1}, {3, Size2(2), 1, 1}, {{3, 2}, Size2(2, 1), {1, 0}, 1}, {1, std::nullopt, 0, 1}};
}

bool fits(const Shape& s, const Window& w) {
  const int64_t h = s[s.ndim() - 2], wd = s[s.ndim() - 1];
  return h + 2 * w.padding.h >= w.dilation.h * (w.kernel.h - 1) + 1 &&
         wd + 2 * w.padding.w >= w.dilation.w * (w.kernel.w - 1) + 1;
}

// Runs `check(dtype, shape, window)` for every floating dtype, every shape of shapes() and every
// window of `windows` that fits it, with the case captured for the failure messages.
void for_each_case(const std::vector<Window>& windows,
                   const std::function<void(DType, const Shape&, const Window&)>& check) {
  for (DType dt : kDtypes)
    for (const Shape& s : shapes())
      for (const Window& w : windows) {
        if (!fits(s, w)) continue;
        CAPTURE(dt);
        CAPTURE(s);
        CAPTURE(w.kernel);
        CAPTURE(w.padding);
        CAPTURE(w.dilation);
        check(dt, s, w);
      }
}

// The device's max_pool2d: values exactly the CPU's (a max is one of the inputs), indices equal,
// and the gradient routed through them.
void check_max_pool(const Tensor& x, const Window& w, uint64_t seed, const std::string& what) {
  const ops::MaxPool2dResult cpu = ops::max_pool2d(x, w.kernel, w.stride, w.padding, w.dilation);
  const ops::MaxPool2dResult gpu = ops::max_pool2d(test::to_cuda(x, true), w.kernel, w.stride, w.padding, w.dilation);
  test::check_cuda_equal(gpu.out, cpu.out, what + " out");
  test::check_cuda_equal(gpu.indices, cpu.indices, what + " indices");
  const Tensor g = test::random(cpu.out.shape(), x.dtype(), seed);
  const Tensor gx = ops::max_pool2d_backward(test::to_cuda(g, true), gpu.indices, x.shape());
  // Overlapping windows add in an order the atomics choose: one rounding per extra term.
  test::check_cuda_matches(gx, ops::max_pool2d_backward(g, cpu.indices, x.shape()), test::cuda_rtol(x.dtype()), -1,
                           what + " backward");
}

}  // namespace

TEST_CASE("max_pool2d: values and indices equal the CPU's, backward through the indices") {
  test::require_cuda();
  uint64_t seed = 10;
  for_each_case(max_windows(), [&](DType dt, const Shape& s, const Window& w) {
    check_max_pool(test::random(s, dt, ++seed), w, ++seed, "random");
  });
}

TEST_CASE("max_pool2d: ties pick the first maximum, NaN wins, -inf windows keep their first tap") {
  test::require_cuda();
  for (DType dt : kDtypes) {
    CAPTURE(dt);
    // Integers in {0, 1, 2}: many ties inside each window.
    check_max_pool(test::random({2, 3, 10, 9}, DType::i64, 40, 0.0, 3.0).to(dt), {3, Size2(2), 1, 1}, 41, "ties");
    check_max_pool(test::random({2, 3, 10, 9}, DType::i64, 42, 0.0, 2.0).to(dt), {2, std::nullopt, 0, 1}, 43,
                   "ties, 2x2");
    Tensor x = test::random({1, 2, 7, 8}, DType::f64, 44);
    for (int64_t i : {3, 17, 18, 40, 100}) x.data<double>()[i] = std::nan("");
    check_max_pool(x.to(dt), {3, Size2(2), 1, 1}, 45, "NaN");
    check_max_pool(full({1, 2, 5, 5}, -std::numeric_limits<double>::infinity(), dt), {3, Size2(2), 1, 1}, 46, "-inf");
  }
}

TEST_CASE("avg_pool2d forward and backward match the CPU (padding in the divisor)") {
  test::require_cuda();
  uint64_t seed = 100;
  for_each_case(avg_windows(), [&](DType dt, const Shape& s, const Window& w) {
    const Tensor x = test::random(s, dt, ++seed);
    const double tol = test::cuda_rtol(dt);
    const Tensor cpu = ops::avg_pool2d(x, w.kernel, w.stride, w.padding);
    test::check_cuda_matches(ops::avg_pool2d(test::to_cuda(x, true), w.kernel, w.stride, w.padding), cpu, tol, -1,
                             "avg_pool2d");
    const Tensor g = test::random(cpu.shape(), dt, ++seed);
    test::check_cuda_matches(ops::avg_pool2d_backward(test::to_cuda(g, true), s, w.kernel, w.stride, w.padding),
                             ops::avg_pool2d_backward(g, s, w.kernel, w.stride, w.padding), tol, -1,
                             "avg_pool2d_backward");
  });
}

TEST_CASE("adaptive_avg_pool2d forward and backward match the CPU, divisible or not, up or down") {
  test::require_cuda();
  uint64_t seed = 200;
  for (DType dt : kDtypes)
    for (const Shape& s : {Shape{2, 3, 9, 11}, Shape{3, 13, 7}, Shape{8, 64, 33, 35}, Shape{1, 1, 1, 1}})
      for (Size2 out : {Size2(1), Size2(2, 3), Size2(5), Size2(13, 15), Size2(s[s.ndim() - 2], s[s.ndim() - 1])}) {
        CAPTURE(dt);
        CAPTURE(s);
        CAPTURE(out);
        const Tensor x = test::random(s, dt, ++seed);
        const double tol = test::cuda_rtol(dt);
        const Tensor cpu = ops::adaptive_avg_pool2d(x, out);
        test::check_cuda_matches(ops::adaptive_avg_pool2d(test::to_cuda(x, true), out), cpu, tol, -1,
                                 "adaptive_avg_pool2d");
        const Tensor g = test::random(cpu.shape(), dt, ++seed);
        test::check_cuda_matches(ops::adaptive_avg_pool2d_backward(test::to_cuda(g, true), s),
                                 ops::adaptive_avg_pool2d_backward(g, s), tol, -1, "adaptive_avg_pool2d_backward");
      }
}

TEST_CASE("the autograd pooling ops run their backward on the device") {
  test::require_cuda();
  Tensor x = test::random({2, 3, 9, 8}, DType::f32, 300);
  Tensor xd = test::to_cuda(x);
  x.requires_grad_();
  xd.requires_grad_();
  for (int op = 0; op < 3; ++op) {
    CAPTURE(op);
    auto run = [&](const Tensor& t) {
      return op == 0 ? max_pool2d(t, 3, Size2(2), 1) : op == 1 ? avg_pool2d(t, 2) : adaptive_avg_pool2d(t, Size2(4, 3));
    };
    x.set_grad(Tensor());
    xd.set_grad(Tensor());
    Tensor y = run(x), yd = run(xd);
    const Tensor g = test::random(y.shape(), DType::f32, 301 + op);
    y.backward(g);
    yd.backward(test::to_cuda(g));
    test::check_cuda_matches(yd, y.detach(), 1e-6, -1, "output");
    test::check_cuda_matches(xd.grad(), x.grad(), 1e-6, -1, "x.grad");
  }
}

TEST_CASE("pooling with operands on two devices names the devices") {
  test::require_cuda();
  const Tensor x = test::random({1, 2, 6, 6}, DType::f32, 400);
  const ops::MaxPool2dResult r = ops::max_pool2d(x, 2);
  CHECK_ERROR_CONTAINS(ops::max_pool2d_backward(test::to_cuda(r.out), r.indices, x.shape()), "max_pool2d_backward",
                       "one device", "cuda:0", "cpu");
}
