// layer_norm and layer_norm_backward on CUDA against the CPU: every floating dtype, rows of 1 ..
// 50257 values (warp / block rows, vector / scalar paths, shared / global partial sums), every
// weight / bias combination, parameters in another dtype than x, non-contiguous inputs, and enough
// rows that each backward block sums several. Skipped (exit 77) without a usable device.
#include "test_util.h"

#include <kiln/core/cuda/plan/layer_norm_variant.h>

using namespace kiln;

namespace {

struct Params {
  bool weight, bias;
};
const Params kParams[] = {{true, true}, {true, false}, {false, true}, {false, false}};

// Forward and backward on both devices. The device backward gets the CPU's mean / rstd so both
// backward passes see the same inputs.
void check_layer_norm(int64_t rows, int64_t n, DType dt, DType param_dt, Params p, bool strided) {
  CAPTURE(rows);
  CAPTURE(n);
  CAPTURE(dt);
  CAPTURE(param_dt);
  CAPTURE(p.weight);
  CAPTURE(p.bias);
  CAPTURE(strided);
  const double rtol = test::cuda_rtol(dt);
  const uint64_t seed = uint64_t(rows * 131 + n);
  Tensor x = test::random({rows, n}, dt, seed, -3, 5);
  Tensor w = p.weight ? test::random({n}, param_dt, seed + 1, 0.5, 1.5) : Tensor();
  Tensor b = p.bias ? test::random({n}, param_dt, seed + 2, -1, 1) : Tensor();
  auto dev = [&](const Tensor& t) { return t.defined() ? test::to_cuda(t, strided) : Tensor(); };

  ops::LayerNormResult want = ops::layer_norm(x, {n}, w, b, 1e-5);
  ops::LayerNormResult got = ops::layer_norm(dev(x), {n}, dev(w), dev(b), 1e-5);
  test::check_cuda_matches(got.out, want.out, rtol, rtol, "out");
  test::check_cuda_matches(got.mean, want.mean, 1e-5, 1e-5, "mean");
  test::check_cuda_matches(got.rstd, want.rstd, 1e-5, 1e-5, "rstd");

  Tensor g = test::random({rows, n}, dt, seed + 3, -1, 1);
  ops::LayerNormGrads gw = ops::layer_norm_backward(g, x, want.mean, want.rstd, w, {n}, p.bias);
  ops::LayerNormGrads gg = ops::layer_norm_backward(dev(g), dev(x), want.mean.to(Device::cuda()),
                                                    want.rstd.to(Device::cuda()), dev(w), {n}, p.bias);
  test::check_cuda_matches(gg.grad_x, gw.grad_x, rtol, rtol, "grad_x");
  CHECK(gg.grad_weight.defined() == p.weight);
  CHECK(gg.grad_bias.defined() == p.bias);
  // Sums over rows: the tolerance grows with their size (float partials vs the CPU's doubles).
  const double sum_tol = std::max(rtol, test::cuda_rtol(param_dt)) * 4;
  if (p.weight) test::check_cuda_matches(gg.grad_weight, gw.grad_weight, sum_tol, sum_tol, "grad_weight");
  if (p.bias) test::check_cuda_matches(gg.grad_bias, gw.grad_bias, sum_tol, sum_tol, "grad_bias");
}

}  // namespace

TEST_CASE("CUDA layer_norm matches the CPU for every row length, dtype and weight / bias combination") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (int64_t n : {1, 7, 32, 1000, 1025, 4096})
      for (const Params& p : kParams) check_layer_norm(n > 1024 ? 9 : 37, n, dt, dt, p, false);
}

TEST_CASE("CUDA layer_norm: non-contiguous inputs, parameters in f32 for 16-bit x, long rows") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::bf16}) {
    check_layer_norm(13, 768, dt, dt, {true, true}, true);
    check_layer_norm(13, 77, dt, dt, {true, false}, true);
  }
  // f32 weight / bias with 16-bit x: the kernel reads them as float.
  check_layer_norm(21, 768, DType::bf16, DType::f32, {true, true}, false);
  check_layer_norm(21, 7, DType::f16, DType::f32, {true, true}, false);
  // bf16 weight with f32 x: converted to f32 first.
  check_layer_norm(5, 64, DType::f32, DType::bf16, {true, true}, false);
  // Partial sums that do not fit in 48 KiB of shared memory go to global memory.
  check_layer_norm(6, 8192, DType::bf16, DType::bf16, {true, true}, false);
  check_layer_norm(6, 7001, DType::f32, DType::f32, {true, true}, false);
  check_layer_norm(3, 50257, DType::f32, DType::f32, {true, false}, false);
}

TEST_CASE("CUDA layer_norm_backward: many rows per partial-sum block, a multi-dim normalized shape") {
  test::require_cuda();
  // 8192 rows: 1024 blocks of 8 rows each; 3001 rows: a shorter last block.
  check_layer_norm(8192, 768, DType::bf16, DType::bf16, {true, true}, false);
  check_layer_norm(3001, 96, DType::f32, DType::f32, {true, true}, false);
  check_layer_norm(3001, 5, DType::f64, DType::f64, {false, true}, false);

  Tensor x = test::random({4, 3, 5, 6}, DType::f32, 3);
  Tensor w = test::random({5, 6}, DType::f32, 4), b = test::random({5, 6}, DType::f32, 5);
  ops::LayerNormResult want = ops::layer_norm(x, {5, 6}, w, b);
  ops::LayerNormResult got = ops::layer_norm(x.to(Device::cuda()), {5, 6}, w.to(Device::cuda()), b.to(Device::cuda()));
  test::check_cuda_matches(got.out, want.out, 1e-5, 1e-5, "2-d normalized");
  CHECK(got.mean.shape() == Shape{12});
}

TEST_CASE("CUDA layer_norm: empty inputs, mixed devices") {
  test::require_cuda();
  ops::LayerNormResult r = ops::layer_norm(empty({0, 8}, DType::f32, Device::cuda()), {8}, Tensor(), Tensor());
  CHECK(r.out.shape() == Shape{0, 8});
  ops::LayerNormGrads g = ops::layer_norm_backward(empty({0, 8}, DType::f32, Device::cuda()),
                                                   empty({0, 8}, DType::f32, Device::cuda()), r.mean, r.rstd,
                                                   ones({8}).to(Device::cuda()), {8}, true);
  CHECK(test::values(g.grad_weight) == std::vector<double>(8, 0.0));
  CHECK(test::values(g.grad_bias) == std::vector<double>(8, 0.0));
  Tensor x = test::random({2, 8}).to(Device::cuda());
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {8}, ones({8}), Tensor()), "layer_norm", "cuda:0", "cpu");
}

TEST_CASE("CUDA layer_norm: every variant a sweep times matches the CPU (Note [Layer norm variants])") {
  test::require_cuda();
  const cuda::LayerNormVariant before = cuda::layer_norm_variant();
  std::vector<cuda::LayerNormVariant> variants = cuda::layer_norm_forward_sweep();
  for (const cuda::LayerNormVariant& v : cuda::layer_norm_backward_sweep(132)) variants.push_back(v);
  for (const cuda::LayerNormVariant& v : variants) {
    INFO("variant ", cuda::layer_norm_variant_name(v));
    cuda::set_layer_norm_variant(v);
    for (DType dt : {DType::f32, DType::bf16})
      for (int64_t n : {7, 768, 2048})  // scalar rows, GPT-2's width (warp rows), gpt-1.3b's (block rows)
        check_layer_norm(n == 7 ? 37 : 1500, n, dt, dt, kParams[0], false);
  }
  cuda::set_layer_norm_variant(before);
}
