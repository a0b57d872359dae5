// scaled_dot_product_attention on CUDA through cuDNN's fused flash attention (KILN_ATTENTION=cudnn,
// core/cuda/kernels/attention_cudnn.h), against the CPU path in f32 on the same rounded inputs: T 77,
// 2000, 2048; D 64 and 128; bf16 and f16; causal and not; contiguous and the GPT's (B, T, H, D)
// views; the lse both kernels share; the switch's other settings. Written without a GPU: its first
// pass on one (with bench_cuda) is what flips auto to cuDNN (Note [Attention kernel choice]).
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <kiln/core/cuda/kernels/attention_cudnn.h>
#include <kiln/core/cuda/kernels/attention_cudnn_graph.cuh>
#include <kiln/core/cuda/kernels/flash_attention.h>

using namespace kiln;

namespace {

// Sets the attention switch for one scope.
struct AttentionScope {
  cuda::AttentionBackend before = cuda::attention_backend();
  explicit AttentionScope(cuda::AttentionBackend b) { cuda::set_attention_backend(b); }
  ~AttentionScope() { cuda::set_attention_backend(before); }
};

// As in test_cuda_attention.cpp: P and dS are rounded to the input type before their products.
double rtol_for(DType dt) { return dt == DType::bf16 ? 2e-2 : 5e-3; }

void check_against(const Tensor& gpu, const Tensor& ref, double rtol, const std::string& what) {
  REQUIRE_MESSAGE(gpu.defined(), what, ": no result");
  REQUIRE_MESSAGE(gpu.shape() == ref.shape(), what, ": shape ", gpu.shape(), " vs reference ", ref.shape());
  const std::vector<double> expected = test::values(ref);
  double scale = 0.01;
  for (double e : expected) scale = std::max(scale, std::fabs(e));
  test::check_close(test::values(gpu.to(Device::cpu())), expected, rtol, rtol * scale, what);
}

struct Inputs {
  Tensor q, k, v, go;  // CPU (B, H, T, D) in the dtype under test
};
Inputs make_inputs(int64_t b, int64_t h, int64_t t, int64_t d, DType dt, uint64_t seed) {
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
Result run(const Inputs& in, bool causal, Device device, DType dtype) {
  Tensor q = leaf(in.q.to(dtype).to(device)), k = leaf(in.k.to(dtype).to(device)), v = leaf(in.v.to(dtype).to(device));
  Tensor out = scaled_dot_product_attention(q, k, v, causal);
  out.backward(in.go.to(dtype).to(device));
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}
void check_result(const Result& gpu, const Result& ref, double rtol, const std::string& what) {
  check_against(gpu.out, ref.out, rtol, what + " out");
  check_against(gpu.dq, ref.dq, rtol, what + " dq");
  check_against(gpu.dk, ref.dk, rtol, what + " dk");
  check_against(gpu.dv, ref.dv, rtol, what + " dv");
}

// The GPT's heads: (B, T, 3C) -> the i-th (B, H, T, D) view (strides (3TC, D, 3C, 1)).
Tensor gpt_heads(const Tensor& qkv, int64_t i, int64_t h, int64_t d) {
  const int64_t b = qkv.size(0), t = qkv.size(1), c = h * d;
  return qkv.slice(2, i * c, (i + 1) * c).reshape({b, t, h, d}).transpose(1, 2);
}

}  // namespace

TEST_CASE("cuDNN attention: output and gradients match the CPU path (T 77, 2000, 2048; D 64, 128)") {
  test::require_cuda();
  AttentionScope scope(cuda::AttentionBackend::cudnn);
  uint64_t seed = 500;
  // Each new case builds a forward and a backward plan that NVRTC compiles at run time (seconds
  // each): KILN_TEST_CUDNN_FEW=1 keeps the shapes a first GPU run needs (bf16, causal, the two
  // head sizes at a short and a GPT length: 4 plans of each kind instead of 24).
  const char* few_env = std::getenv("KILN_TEST_CUDNN_FEW");
  const bool few = few_env != nullptr && std::string(few_env) == "1";
  const std::vector<DType> dtypes = few ? std::vector<DType>{DType::bf16} : std::vector<DType>{DType::bf16, DType::f16};
  const std::vector<int64_t> lengths = few ? std::vector<int64_t>{77, 2048} : std::vector<int64_t>{77, 2000, 2048};
  const std::vector<bool> masks = few ? std::vector<bool>{true} : std::vector<bool>{true, false};
  for (DType dt : dtypes)
    for (int64_t d : {64, 128})
      for (int64_t t : lengths)
        for (bool causal : masks) {
          const int64_t b = t > 100 ? 1 : 2, h = 2;
          const std::string what = std::string(dtype_name(dt)) + " T" + std::to_string(t) + " D" +
                                   std::to_string(d) + (causal ? " causal" : " full");
          CAPTURE(what);
          Inputs in = make_inputs(b, h, t, d, dt, seed += 10);
          const int64_t fwd = cuda::attention_cudnn_forward_count(), bwd = cuda::attention_cudnn_backward_count();
          Result gpu = run(in, causal, Device::cuda(), dt);
          CHECK(cuda::attention_cudnn_forward_count() == fwd + 1);
          CHECK(cuda::attention_cudnn_backward_count() == bwd + 1);
          CHECK(gpu.out.dtype() == dt);
          check_result(gpu, run(in, causal, Device::cpu(), DType::f32), rtol_for(dt), what);
        }
}

TEST_CASE("cuDNN attention: the GPT's qkv split and a (B, T, H, D) dout, through autograd") {
  test::require_cuda();
  AttentionScope scope(cuda::AttentionBackend::cudnn);
  const int64_t b = 2, t = 300, h = 3;
  for (int64_t d : {64, 128}) {
    CAPTURE(d);
    const int64_t c = h * d;
    Tensor qkv = test::random({b, t, 3 * c}, DType::bf16, 40 + d, -3, 3);
    Tensor go = test::random({b, t, h, d}, DType::bf16, 41 + d, -1, 1);
    Tensor qkv_r = leaf(qkv.to(DType::f32));
    Tensor out_r = scaled_dot_product_attention(gpt_heads(qkv_r, 0, h, d), gpt_heads(qkv_r, 1, h, d),
                                                gpt_heads(qkv_r, 2, h, d), true);
    out_r.backward(go.to(DType::f32).transpose(1, 2));

    Tensor qkv_g = leaf(qkv.to(Device::cuda()));
    const int64_t fwd = cuda::attention_cudnn_forward_count();
    Tensor out = scaled_dot_product_attention(gpt_heads(qkv_g, 0, h, d), gpt_heads(qkv_g, 1, h, d),
                                              gpt_heads(qkv_g, 2, h, d), true);
    CHECK(cuda::attention_cudnn_forward_count() == fwd + 1);
    CHECK(out.transpose(1, 2).is_contiguous());  // stored (B, T, H, D) like Kiln's kernels' output
    out.backward(go.to(Device::cuda()).transpose(1, 2));
    check_against(out.detach(), out_r.detach(), 2e-2, "out");
    check_against(qkv_g.grad(), qkv_r.grad(), 2e-2, "grad qkv");
  }
}

// Note [cuDNN SDPA engine choice]: each config the heuristics offer, forced for both passes in
// turn, gives the CPU path's results; an index past the list is an error naming the candidates.
TEST_CASE("cuDNN attention: every engine candidate, chosen by index, matches the CPU path") {
  test::require_cuda();
  AttentionScope scope(cuda::AttentionBackend::cudnn);
  struct ChoiceScope {
    int64_t fwd = cuda::attention_cudnn_engine_choice(false), bwd = cuda::attention_cudnn_engine_choice(true);
    ~ChoiceScope() {
      cuda::set_attention_cudnn_engine_choice(false, fwd);
      cuda::set_attention_cudnn_engine_choice(true, bwd);
    }
  } restore;
  const int64_t b = 1, h = 2, t = 300;
  for (int64_t d : {64, 128}) {
    Inputs in = make_inputs(b, h, t, d, DType::bf16, 900 + d);
    const Result ref = run(in, true, Device::cpu(), DType::f32);
    const Tensor q = in.q.to(Device::cuda()), k = in.k.to(Device::cuda()), v = in.v.to(Device::cuda());
    const Tensor go = in.go.to(Device::cuda());
    for (bool backward : {false, true}) {
      const std::vector<std::string> labels =
          cuda::attention_cudnn_engine_candidates(q, k, v, go, true, backward, /*with_knobs=*/false);
      REQUIRE_FALSE(labels.empty());
      for (size_t i = 0; i < labels.size(); ++i) {
        const std::string what = std::string(backward ? "bwd" : "fwd") + " D" + std::to_string(d) + " candidate " +
                                 std::to_string(i) + ": " + labels[i];
        CAPTURE(what);
        MESSAGE(what);
        cuda::set_attention_cudnn_engine_choice(backward, static_cast<int64_t>(i));
        check_result(run(in, true, Device::cuda(), DType::bf16), ref, rtol_for(DType::bf16), what);
        CHECK(cuda::attention_cudnn_last_engine(backward) == labels[i]);
      }
      cuda::set_attention_cudnn_engine_choice(backward, static_cast<int64_t>(labels.size()) + 500);
      try {
        (void)cuda::attention_cudnn_forward(q, k, v, true, 1.0 / std::sqrt(double(d)), cuda::CudnnMiss::fail);
        if (backward) {
          Tensor out = scaled_dot_product_attention(leaf(q), leaf(k), leaf(v), true);
          out.backward(go);
        }
        FAIL("candidate ", labels.size() + 500, " of ", labels.size(), " ran");
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find("asks for candidate") != std::string::npos);
      }
      cuda::set_attention_cudnn_engine_choice(backward, -1);
    }
  }
}

TEST_CASE("cuDNN attention: an expanded dout (out.sum()) is copied for cuDNN, not handed over with 0 strides") {
  test::require_cuda();
  AttentionScope scope(cuda::AttentionBackend::cudnn);
  const int64_t b = 2, h = 2, t = 128, d = 64;
  Inputs in = make_inputs(b, h, t, d, DType::bf16, 77);
  auto sum_backward = [&](Device device, DType dtype) {
    Tensor q = leaf(in.q.to(dtype).to(device)), k = leaf(in.k.to(dtype).to(device)), v = leaf(in.v.to(dtype).to(device));
    sum(scaled_dot_product_attention(q, k, v, true)).backward();  // dout: ones expanded, stride 0 everywhere
    return Result{Tensor(), q.grad(), k.grad(), v.grad()};
  };
  const int64_t bwd = cuda::attention_cudnn_backward_count();
  const Result gpu = sum_backward(Device::cuda(), DType::bf16), ref = sum_backward(Device::cpu(), DType::f32);
  CHECK(cuda::attention_cudnn_backward_count() == bwd + 1);
  check_against(gpu.dq, ref.dq, rtol_for(DType::bf16), "dq");
  check_against(gpu.dk, ref.dk, rtol_for(DType::bf16), "dk");
  check_against(gpu.dv, ref.dv, rtol_for(DType::bf16), "dv");
}

TEST_CASE("cuDNN attention: its lse is Kiln's, so either backward follows either forward") {
  test::require_cuda();
  const int64_t b = 2, h = 2, t = 200, d = 128;
  const double scale = 1.0 / std::sqrt(double(d));
  Inputs in = make_inputs(b, h, t, d, DType::bf16, 77);
  const Tensor q = in.q.to(Device::cuda()), k = in.k.to(Device::cuda()), v = in.v.to(Device::cuda());
  const Tensor dout = in.go.to(Device::cuda());
  Result ref = run(in, true, Device::cpu(), DType::f32);

  std::optional<cuda::FlashAttentionForward> c =
      cuda::attention_cudnn_forward(q, k, v, true, scale, cuda::CudnnMiss::fail);
  REQUIRE(c.has_value());
  cuda::FlashAttentionForward f = cuda::flash_attention_forward(q, k, v, true, scale);
  test::check_close(c->lse, test::values(f.lse), 1e-3, 1e-3, "cuDNN lse vs Kiln lse");
  check_against(c->out, ref.out, 2e-2, "cuDNN out");

  cuda::FlashAttentionGrads kiln_after_cudnn =
      cuda::flash_attention_backward(dout, q, k, v, c->out, c->lse, true, scale, true, true);
  check_against(kiln_after_cudnn.dq, ref.dq, 2e-2, "Kiln backward after cuDNN forward: dq");
  check_against(kiln_after_cudnn.dk, ref.dk, 2e-2, "Kiln backward after cuDNN forward: dk");
  check_against(kiln_after_cudnn.dv, ref.dv, 2e-2, "Kiln backward after cuDNN forward: dv");

  std::optional<cuda::FlashAttentionGrads> cudnn_after_kiln =
      cuda::attention_cudnn_backward(dout, q, k, v, f.out, f.lse, true, scale, true, true, cuda::CudnnMiss::fail);
  REQUIRE(cudnn_after_kiln.has_value());
  check_against(cudnn_after_kiln->dq, ref.dq, 2e-2, "cuDNN backward after Kiln forward: dq");
  check_against(cudnn_after_kiln->dk, ref.dk, 2e-2, "cuDNN backward after Kiln forward: dk");
  check_against(cudnn_after_kiln->dv, ref.dv, 2e-2, "cuDNN backward after Kiln forward: dv");

  // Only what is asked for comes back.
  std::optional<cuda::FlashAttentionGrads> only_dq =
      cuda::attention_cudnn_backward(dout, q, k, v, f.out, f.lse, true, scale, true, false, cuda::CudnnMiss::fail);
  REQUIRE(only_dq.has_value());
  CHECK(only_dq->dq.defined());
  CHECK_FALSE(only_dq->dk.defined());
  CHECK_FALSE(only_dq->dv.defined());
}

TEST_CASE("cuDNN attention: kiln runs Kiln's kernels, auto cuDNN's (Kiln's when deterministic); deterministic "
          "mode refuses cudnn") {
  test::require_cuda();
  Inputs in = make_inputs(1, 2, 65, 64, DType::bf16, 90);
  Result ref = run(in, true, Device::cpu(), DType::f32);
  for (cuda::AttentionBackend b : {cuda::AttentionBackend::kiln, cuda::AttentionBackend::automatic})
    for (bool deterministic : {false, true}) {
      const std::string name = cuda::attention_backend_name(b);
      CAPTURE(name);
      CAPTURE(deterministic);
      AttentionScope scope(b);
      cuda::set_cudnn_deterministic(deterministic);
      const int64_t fwd = cuda::attention_cudnn_forward_count(), bwd = cuda::attention_cudnn_backward_count();
      check_result(run(in, true, Device::cuda(), DType::bf16), ref, 2e-2, name);
      cuda::set_cudnn_deterministic(false);
      // auto takes cuDNN's kernels since the first GPU run (an H200) flipped kCudnnAttentionByDefault.
      const int64_t want = b == cuda::AttentionBackend::automatic && !deterministic ? 1 : 0;
      CHECK(cuda::attention_cudnn_forward_count() == fwd + want);
      CHECK(cuda::attention_cudnn_backward_count() == bwd + want);
    }
  AttentionScope scope(cuda::AttentionBackend::cudnn);
  cuda::set_cudnn_deterministic(true);
  CHECK_ERROR_CONTAINS(run(in, true, Device::cuda(), DType::bf16), "KILN_ATTENTION=cudnn", "deterministic");
  cuda::set_cudnn_deterministic(false);
}

TEST_CASE("cuDNN attention: under cudnn, a case cuDNN cannot take is an error naming why") {
  test::require_cuda();
  AttentionScope scope(cuda::AttentionBackend::cudnn);
  Inputs f32 = make_inputs(1, 2, 16, 64, DType::f32, 95);
  CHECK_ERROR_CONTAINS(run(f32, true, Device::cuda(), DType::f32), "KILN_ATTENTION=cudnn", "bf16 or all f16");
  Inputs d32 = make_inputs(1, 2, 16, 32, DType::bf16, 96);
  CHECK_ERROR_CONTAINS(run(d32, true, Device::cuda(), DType::bf16), "KILN_ATTENTION=cudnn", "head dim 32");
}

TEST_CASE("cuDNN attention: this device's DEVICEPROP, and the committed H200 one gives the same engines") {
  test::require_cuda();
  // Printed (and written to $KILN_DEVICEPROP_OUT when set): tests/core/data/h200_deviceprop.json is
  // the one the first H200 run dumped, read by the deviceless test (core_cudnn_sdpa_graph).
  cuda::BackendDescriptor prop(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  const int32_t device = 0;
  prop.set(CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &device).finalize();
  std::vector<char> json(1 << 16, '\0');
  int64_t n = 0;
  REQUIRE(cudnnBackendGetAttribute(prop.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                   static_cast<int64_t>(json.size()), &n, json.data()) == CUDNN_STATUS_SUCCESS);
  const std::string real(json.data());
  std::printf("DEVICEPROP of cuda:0: %s\n", real.c_str());
  CHECK(real.find("multiProcessorCount") != std::string::npos);
  if (const char* out = std::getenv("KILN_DEVICEPROP_OUT")) std::ofstream(out) << real << "\n";

  const char* root = std::getenv("KILN_SOURCE_DIR");
  std::ifstream in(std::string(root ? root : ".") + "/tests/core/data/h200_deviceprop.json");
  if (!in.good() || real.find("\"NVIDIA H200\"") == std::string::npos) {
    MESSAGE("not an H200, or the committed description is not readable here: no comparison");
    return;
  }
  std::stringstream text;
  text << in.rdbuf();
  const std::string stored = text.str();
  cuda::BackendDescriptor stored_prop(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  stored_prop
      .set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, static_cast<int64_t>(stored.size() + 1),
           stored.c_str())
      .finalize();
  cuda::SdpaGraphSpec s;
  s.b = 8, s.h = 16, s.t = 2048, s.d = 128;
  s.q = s.k = s.v = s.o = s.dout = s.dq = s.dk = s.dv = cuda::sdpa_strides_bthd(8, 16, 2048, 128);
  for (bool backward : {false, true}) {
    CAPTURE(backward);
    const cuda::SdpaGraph g =
        backward ? cuda::build_sdpa_backward_graph(s, nullptr) : cuda::build_sdpa_forward_graph(s, nullptr);
    std::vector<int64_t> from_real, from_stored;
    for (const cuda::SdpaEngineConfig& c : cuda::sdpa_engine_configs(g, prop.get())) from_real.push_back(c.engine);
    for (const cuda::SdpaEngineConfig& c : cuda::sdpa_engine_configs(g, stored_prop.get()))
      from_stored.push_back(c.engine);
    CHECK_FALSE(from_real.empty());
    CHECK(from_real == from_stored);
  }
}
