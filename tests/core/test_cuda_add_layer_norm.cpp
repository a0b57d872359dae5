// add_layer_norm's fused CUDA kernels (Note [Fused residual add]; on only with the switch) against
// the CPU: the sum, the normalized output and the backward with the residual's gradient, for f32 x
// with an f32, bf16 or f16 residual, 16-bit x, vector and scalar rows, and the switch-off path (the
// composition). Skipped (exit 77) without a usable device.
#include "test_util.h"

#include <kiln/core/ops/layer_norm.h>

using namespace kiln;

namespace {

struct SwitchOn {
  bool was = ops::fused_add_layer_norm_cuda();
  explicit SwitchOn(bool on) { ops::set_fused_add_layer_norm_cuda(on); }
  ~SwitchOn() { ops::set_fused_add_layer_norm_cuda(was); }
};

void check(int64_t rows, int64_t n, DType xdt, DType rdt, bool fused) {
  CAPTURE(rows);
  CAPTURE(n);
  CAPTURE(xdt);
  CAPTURE(rdt);
  CAPTURE(fused);
  SwitchOn on(fused);
  const uint64_t seed = uint64_t(rows * 7 + n);
  const double rtol = std::max(test::cuda_rtol(xdt), test::cuda_rtol(rdt));
  Tensor x = test::random({rows, n}, xdt, seed, -3, 3), r = test::random({rows, n}, rdt, seed + 1, -2, 2);
  Tensor w = test::random({n}, DType::f32, seed + 2, 0.5, 1.5), b = test::random({n}, DType::f32, seed + 3, -1, 1);
  auto dev = [](const Tensor& t) { return t.to(Device::cuda()); };
  ops::LayerNormResult want = ops::add_layer_norm(x, r, {n}, w, b, 1e-5);
  ops::LayerNormResult got = ops::add_layer_norm(dev(x), dev(r), {n}, dev(w), dev(b), 1e-5);
  test::check_cuda_matches(got.sum, want.sum, rtol, rtol, "sum");
  test::check_cuda_matches(got.out, want.out, rtol * 4, rtol * 4, "out");
  test::check_cuda_matches(got.mean, want.mean, 1e-4, 1e-4, "mean");
  test::check_cuda_matches(got.rstd, want.rstd, 1e-4, 1e-4, "rstd");

  const DType sdt = want.sum.dtype();
  Tensor g = test::random({rows, n}, sdt, seed + 4, -1, 1), gres = test::random({rows, n}, sdt, seed + 5, -1, 1);
  ops::LayerNormGrads gw = ops::layer_norm_backward(g, want.sum, want.mean, want.rstd, w, {n}, true, gres);
  ops::LayerNormGrads gg = ops::layer_norm_backward(dev(g), dev(want.sum), dev(want.mean), dev(want.rstd), dev(w), {n},
                                                    true, dev(gres));
  test::check_cuda_matches(gg.grad_x, gw.grad_x, rtol * 4, rtol * 4, "grad_x with the residual's gradient");
  test::check_cuda_matches(gg.grad_weight, gw.grad_weight, rtol * 8, rtol * 8, "grad_weight");
  test::check_cuda_matches(gg.grad_bias, gw.grad_bias, rtol * 8, rtol * 8, "grad_bias");
}

}  // namespace

TEST_CASE("CUDA add_layer_norm (fused kernels) matches the CPU") {
  test::require_cuda();
  for (bool fused : {true, false}) {
    for (int64_t n : {768, 2048, 77, 1})  // vector rows, a long row, scalar rows
      check(n == 1 ? 33 : 37, n, DType::f32, DType::bf16, fused);
    check(64, 1024, DType::f32, DType::f32, fused);
    check(64, 1024, DType::f32, DType::f16, fused);
    check(64, 1024, DType::bf16, DType::bf16, fused);
    check(5, 8192, DType::f32, DType::bf16, fused);  // block rows
  }
}

TEST_CASE("CUDA add_layer_norm through autograd equals the composition within rounding") {
  test::require_cuda();
  SwitchOn on(true);
  Tensor x = test::random({16, 256}, DType::f32, 1).to(Device::cuda()).requires_grad_(true);
  Tensor r = test::random({16, 256}, DType::bf16, 2).to(Device::cuda()).requires_grad_(true);
  Tensor w = ones({256}).to(Device::cuda()).requires_grad_(true);
  AddLayerNormOutput o = add_layer_norm(x, r, {256}, w, Tensor());
  sum(o.out * o.out + o.sum).backward();
  Tensor x2 = x.detach().requires_grad_(true), r2 = r.detach().requires_grad_(true), w2 = w.detach().requires_grad_(true);
  Tensor s2 = x2 + r2;
  sum(layer_norm(s2, {256}, w2, Tensor()) * layer_norm(s2, {256}, w2, Tensor()) + s2).backward();
  test::check_cuda_matches(x.grad(), x2.grad().to(Device::cpu()), 1e-4, 1e-4, "dx");
  test::check_cuda_matches(r.grad(), r2.grad().to(Device::cpu()), 1e-2, 1e-2, "dresidual (bf16)");
  test::check_cuda_matches(w.grad(), w2.grad().to(Device::cpu()), 1e-4, 1e-4, "dweight");
}
