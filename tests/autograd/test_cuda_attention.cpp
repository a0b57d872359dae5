// scaled_dot_product_attention on CUDA. The flash kernels (bf16/f16, head dim 64/128) against the
// CPU path in f32 run on the same rounded inputs: output, logsumexp, dq/dk/dv, causal and not, T
// that is not a multiple of the tiles, the GPT's qkv-split strides, misaligned inputs, partial
// gradients, determinism; and the composed path that CUDA takes for everything else.
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <kiln/core/cuda/kernels/flash_attention.h>

using namespace kiln;

namespace {

// Relative tolerance of a flash result against the f32 CPU path: probabilities and dS are rounded
// to the input type before their products (as in FlashAttention-2), and outputs once at the end.
double flash_rtol(DType dt) { return dt == DType::bf16 ? 2e-2 : 5e-3; }

// gpu (on the device, any dtype) against the CPU reference: |a - e| <= rtol |e| + atol, with atol
// rtol times the reference's largest magnitude (at least 0.01), so near-zero elements of a tensor
// are judged on the tensor's scale.
void check_against(const Tensor& gpu, const Tensor& ref, double rtol, const std::string& what) {
  REQUIRE_MESSAGE(gpu.defined(), what, ": no result");
  CHECK_MESSAGE(gpu.device().is_cuda(), what, ": result on ", gpu.device());
  REQUIRE_MESSAGE(gpu.shape() == ref.shape(), what, ": shape ", gpu.shape(), " vs reference ", ref.shape());
  const std::vector<double> expected = test::values(ref);
  double scale = 0.01;
  for (double e : expected) scale = std::max(scale, std::fabs(e));
  test::check_close(test::values(gpu.to(Device::cpu())), expected, rtol, rtol * scale, what);
}

struct Inputs {
  Tensor q, k, v, go;  // CPU, (B, H, T, D), in the dtype under test
};

Inputs make_inputs(int64_t b, int64_t h, int64_t t, int64_t d, DType dt, uint64_t seed) {
  // q and k in [-3, 3] give scores of std ~3: peaked rows whose running max moves between tiles.
  return {test::random({b, h, t, d}, dt, seed, -3, 3), test::random({b, h, t, d}, dt, seed + 1, -3, 3),
          test::random({b, h, t, d}, dt, seed + 2, -2, 2), test::random({b, h, t, d}, dt, seed + 3, -1, 1)};
}

struct Result {
  Tensor out, dq, dk, dv;
};

Tensor leaf(const Tensor& t) {
  Tensor l = t.clone();
  l.requires_grad_();
  return l;
}

// The CPU path in f32 from the same (rounded) values.
Result cpu_reference(const Inputs& in, bool causal) {
  Tensor q = leaf(in.q.to(DType::f32)), k = leaf(in.k.to(DType::f32)), v = leaf(in.v.to(DType::f32));
  Tensor out = scaled_dot_product_attention(q, k, v, causal);
  out.backward(in.go.to(DType::f32));
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

Result cuda_run(const Inputs& in, bool causal) {
  Tensor q = leaf(in.q.to(Device::cuda())), k = leaf(in.k.to(Device::cuda())), v = leaf(in.v.to(Device::cuda()));
  Tensor out = scaled_dot_product_attention(q, k, v, causal);
  out.backward(in.go.to(Device::cuda()));
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check_result(const Result& gpu, const Result& ref, double rtol, const std::string& what) {
  check_against(gpu.out, ref.out, rtol, what + " out");
  check_against(gpu.dq, ref.dq, rtol, what + " dq");
  check_against(gpu.dk, ref.dk, rtol, what + " dk");
  check_against(gpu.dv, ref.dv, rtol, what + " dv");
}

std::string describe(DType dt, int64_t b, int64_t h, int64_t t, int64_t d, bool causal) {
  return std::string(dtype_name(dt)) + " B" + std::to_string(b) + " H" + std::to_string(h) + " T" +
         std::to_string(t) + " D" + std::to_string(d) + (causal ? " causal" : " full");
}

// The GPT's heads: (B, T, 3C) -> the i-th (B, H, T, D) view (strides (3TC, D, 3C, 1)).
Tensor gpt_heads(const Tensor& qkv, int64_t i, int64_t h, int64_t d) {
  const int64_t b = qkv.size(0), t = qkv.size(1), c = h * d;
  return qkv.slice(2, i * c, (i + 1) * c).reshape({b, t, h, d}).transpose(1, 2);
}

// Runs `check(d, causal)` for both head dims the fused kernels take (64, 128), causal and not.
void for_each_head_dim_and_mask(const std::function<void(int64_t, bool)>& check) {
  for (int64_t d : {64, 128})
    for (bool causal : {true, false}) {
      CAPTURE(d);
      CAPTURE(causal);
      check(d, causal);
    }
}

}  // namespace

TEST_CASE("flash attention: output and gradients match the CPU path (bf16, f16; D 64, 128; causal and not)") {
  test::require_cuda();
  uint64_t seed = 100;
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128})
      for (int64_t t : {1, 17, 64, 100, 256, 1000})
        for (bool causal : {true, false}) {
          const int64_t b = t >= 1000 ? 1 : 2, h = t >= 1000 ? 2 : 3;
          const std::string what = describe(dt, b, h, t, d, causal);
          CAPTURE(what);
          Inputs in = make_inputs(b, h, t, d, dt, seed += 10);
          REQUIRE(cuda::flash_attention_supported(in.q.to(Device::cuda()), in.k.to(Device::cuda()),
                                                  in.v.to(Device::cuda())));
          Result gpu = cuda_run(in, causal);
          CHECK(gpu.out.dtype() == dt);
          CHECK(gpu.dq.dtype() == dt);
          check_result(gpu, cpu_reference(in, causal), flash_rtol(dt), what);
        }
}

TEST_CASE("flash attention: the saved logsumexp matches a double loop") {
  test::require_cuda();
  const int64_t b = 2, h = 2, t = 100;
  for_each_head_dim_and_mask([&](int64_t d, bool causal) {
    Inputs in = make_inputs(b, h, t, d, DType::bf16, 7);
    const double scale = 1.0 / std::sqrt(double(d));
    cuda::FlashAttentionForward f = cuda::flash_attention_forward(
        in.q.to(Device::cuda()), in.k.to(Device::cuda()), in.v.to(Device::cuda()), causal, scale);
    CHECK(f.lse.shape() == Shape{b, h, t});
    CHECK(f.lse.dtype() == DType::f32);
    CHECK(f.out.transpose(1, 2).is_contiguous());  // stored (B, T, H, D) for the output projection
    std::vector<double> expected;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t i = 0; i < t; ++i) {
          std::vector<double> s;
          for (int64_t j = 0; j < (causal ? i + 1 : t); ++j) {
            double dot = 0;
            for (int64_t k = 0; k < d; ++k) dot += test::at(in.q, {bi, hi, i, k}) * test::at(in.k, {bi, hi, j, k});
            s.push_back(dot * scale);
          }
          const double m = *std::max_element(s.begin(), s.end());
          double z = 0;
          for (double x : s) z += std::exp(x - m);
          expected.push_back(m + std::log(z));
        }
    test::check_close(f.lse, expected, 1e-4, 1e-4, "lse");
  });
}

TEST_CASE("flash attention: the GPT's qkv split and a strided dout, through the launchers and autograd") {
  test::require_cuda();
  const int64_t b = 2, t = 100, h = 3;
  for_each_head_dim_and_mask([&](int64_t d, bool causal) {
    const int64_t c = h * d;
    Tensor qkv = test::random({b, t, 3 * c}, DType::bf16, 40 + d, -3, 3);
    Tensor go = test::random({b, t, h, d}, DType::bf16, 41 + d, -1, 1);  // as the output projection's backward gives it

    // Reference: the CPU path in f32 through the same views.
    Tensor qkv_r = leaf(qkv.to(DType::f32));
    Tensor out_r = scaled_dot_product_attention(gpt_heads(qkv_r, 0, h, d), gpt_heads(qkv_r, 1, h, d),
                                                gpt_heads(qkv_r, 2, h, d), causal);
    out_r.backward(go.to(DType::f32).transpose(1, 2));
    Tensor grad_qkv_r = qkv_r.grad();

    // The launchers on the strided views (no autograd).
    Tensor qkv_g = qkv.to(Device::cuda());
    Tensor q = gpt_heads(qkv_g, 0, h, d), k = gpt_heads(qkv_g, 1, h, d), v = gpt_heads(qkv_g, 2, h, d);
    CHECK_FALSE(q.is_contiguous());
    Tensor dout = go.to(Device::cuda()).transpose(1, 2);
    const double scale = 1.0 / std::sqrt(double(d));
    cuda::FlashAttentionForward f = cuda::flash_attention_forward(q, k, v, causal, scale);
    check_against(f.out, out_r.detach(), 2e-2, "out");
    cuda::FlashAttentionGrads g = cuda::flash_attention_backward(dout, q, k, v, f.out, f.lse, causal, scale, true, true);
    check_against(g.dq, gpt_heads(grad_qkv_r, 0, h, d), 2e-2, "dq");
    check_against(g.dk, gpt_heads(grad_qkv_r, 1, h, d), 2e-2, "dk");
    check_against(g.dv, gpt_heads(grad_qkv_r, 2, h, d), 2e-2, "dv");

    // Autograd: the gradient reaches the (B, T, 3C) leaf as in models/gpt.cpp.
    Tensor qkv_leaf = leaf(qkv_g);
    Tensor out = scaled_dot_product_attention(gpt_heads(qkv_leaf, 0, h, d), gpt_heads(qkv_leaf, 1, h, d),
                                              gpt_heads(qkv_leaf, 2, h, d), causal);
    out.backward(dout);
    check_against(out.detach(), out_r.detach(), 2e-2, "autograd out");
    check_against(qkv_leaf.grad(), grad_qkv_r, 2e-2, "autograd grad qkv");
  });
}

TEST_CASE("flash attention: misaligned and odd-strided inputs give the same results") {
  test::require_cuda();
  const int64_t b = 2, h = 2, t = 33, d = 64;
  Tensor wide = test::random({b, h, t, d + 1}, DType::bf16, 61, -3, 3);
  Inputs in = make_inputs(b, h, t, d, DType::bf16, 62);
  in.q = wide.slice(3, 1, d + 1);  // offset 1 element, row stride 65: not 16-byte aligned
  Tensor wide_g = leaf(wide.to(Device::cuda()));
  Tensor q = wide_g.slice(3, 1, d + 1);
  Tensor k = leaf(in.k.to(Device::cuda())), v = leaf(in.v.to(Device::cuda()));
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  out.backward(in.go.to(Device::cuda()));
  Result ref = cpu_reference(in, true);
  check_against(out.detach(), ref.out, 2e-2, "out");
  check_against(wide_g.grad().slice(3, 1, d + 1), ref.dq, 2e-2, "dq");
  check_against(k.grad(), ref.dk, 2e-2, "dk");
  check_against(v.grad(), ref.dv, 2e-2, "dv");
}

TEST_CASE("flash attention: only the inputs that need a gradient get one") {
  test::require_cuda();
  const int64_t b = 1, h = 2, t = 70, d = 64;
  Inputs in = make_inputs(b, h, t, d, DType::bf16, 80);
  Result ref = cpu_reference(in, true);
  for (int which = 0; which < 3; ++which) {
    CAPTURE(which);
    Tensor q = in.q.to(Device::cuda()), k = in.k.to(Device::cuda()), v = in.v.to(Device::cuda());
    Tensor* x[3] = {&q, &k, &v};
    x[which]->requires_grad_();
    scaled_dot_product_attention(q, k, v, true).backward(in.go.to(Device::cuda()));
    const Tensor* want[3] = {&ref.dq, &ref.dk, &ref.dv};
    for (int i = 0; i < 3; ++i) {
      if (i == which) check_against(x[i]->grad(), *want[i], 2e-2, "grad " + std::to_string(i));
      else CHECK_FALSE(x[i]->grad().defined());
    }
  }
}

TEST_CASE("flash attention: the backward is deterministic") {
  test::require_cuda();
  Inputs in = make_inputs(2, 3, 300, 128, DType::bf16, 90);
  Tensor q = in.q.to(Device::cuda()), k = in.k.to(Device::cuda()), v = in.v.to(Device::cuda());
  Tensor dout = in.go.to(Device::cuda());
  const double scale = 1.0 / std::sqrt(128.0);
  cuda::FlashAttentionForward f = cuda::flash_attention_forward(q, k, v, true, scale);
  cuda::FlashAttentionGrads g1 = cuda::flash_attention_backward(dout, q, k, v, f.out, f.lse, true, scale, true, true);
  cuda::FlashAttentionGrads g2 = cuda::flash_attention_backward(dout, q, k, v, f.out, f.lse, true, scale, true, true);
  CHECK(test::values(g1.dq) == test::values(g2.dq));
  CHECK(test::values(g1.dk) == test::values(g2.dk));
  CHECK(test::values(g1.dv) == test::values(g2.dv));
  cuda::FlashAttentionForward f2 = cuda::flash_attention_forward(q, k, v, true, scale);
  CHECK(test::values(f.out) == test::values(f2.out));
}

TEST_CASE("attention on CUDA outside the fused kernels takes the composed path") {
  test::require_cuda();
  struct Case {
    DType dt;
    int64_t d;
    double rtol;
  };
  // f32 (TF32 matmuls allowed) and bf16 with a head dim the kernels do not take, each against the
  // CPU path in the same dtype: the composed path rounds scores and probabilities to the dtype at
  // the same points on both devices.
  for (Case cs : {Case{DType::f32, 64, 5e-3}, Case{DType::bf16, 32, 3e-2}}) {
    for (bool causal : {true, false}) {
      CAPTURE(dtype_name(cs.dt));
      CAPTURE(causal);
      Inputs in = make_inputs(2, 2, 37, cs.d, cs.dt, 120);
      CHECK_FALSE(cuda::flash_attention_supported(in.q.to(Device::cuda()), in.k.to(Device::cuda()),
                                                  in.v.to(Device::cuda())));
      Result gpu = cuda_run(in, causal);
      CHECK(gpu.out.dtype() == cs.dt);
      Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
      Tensor out = scaled_dot_product_attention(q, k, v, causal);
      out.backward(in.go);
      check_result(gpu, Result{out.detach(), q.grad(), k.grad(), v.grad()}, cs.rtol, dtype_name(cs.dt));
    }
  }
}

TEST_CASE("attention: q, k, v on different devices is an error naming the op") {
  test::require_cuda();
  Tensor q = test::random({1, 1, 4, 64}, DType::bf16).to(Device::cuda());
  Tensor k = test::random({1, 1, 4, 64}, DType::bf16);
  CHECK_ERROR_CONTAINS(scaled_dot_product_attention(q, k, q), "scaled_dot_product_attention", "one device");
}
