// bench_cuda --sweep (sweep.h). Each case builds its inputs once per shape, then times every
// candidate on them in turn, switching the process-wide setting between runs.
#include "cuda/sweep.h"

#include "cuda/gpu_inputs.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include <kiln/core/cuda/kernels/attention_cudnn.h>
#include <kiln/core/cuda/plan/layer_norm_variant.h>
#include <kiln/core/ops/cross_entropy.h>
#include <kiln/core/ops/layer_norm.h>
#include <kiln/core/ops/ops.h>
#include <kiln/kiln.h>

namespace kiln::apps {

namespace {

struct Row {
  std::string candidate, shape;
  double ms = std::numeric_limits<double>::quiet_NaN();  // NaN: failed
  std::string error;
  std::string group;  // set where the name's last word is not the variant (group_of)
};

Row timed(const std::string& candidate, const std::string& shape, const TimeFn& time_ms,
          const std::function<void()>& fn) {
  Row r{candidate, shape};
  try {
    r.ms = time_ms(fn);
  } catch (const std::exception& e) {
    r.error = e.what();
    cuda::synchronize();
  }
  return r;
}

// Layer norm forward and backward timed apart, so the best of each is chosen on its own.
void sweep_layer_norm(std::vector<Row>& rows, const TimeFn& time_ms) {
  const cuda::LayerNormVariant before = cuda::layer_norm_variant();
  int sms = 0;
  if (const char* s = std::getenv("KILN_SWEEP_SMS")) sms = std::atoi(s);  // default: 132, an H100's
  for (auto [r, n] : {std::pair<int64_t, int64_t>{16 * 1024, 768}, {8 * 2048, 2048}}) {
    const std::string shape = "bf16 (" + std::to_string(r) + ", " + std::to_string(n) + ")";
    Tensor x = gpu_randn({r, n}, DType::bf16, 1), g = gpu_randn({r, n}, DType::bf16, 2);
    Tensor w = gpu_randn({n}, DType::bf16, 3), b = gpu_randn({n}, DType::bf16, 4);
    for (const cuda::LayerNormVariant& v : cuda::layer_norm_forward_sweep()) {
      cuda::set_layer_norm_variant(v);
      rows.push_back(timed("layer_norm fwd " + cuda::layer_norm_variant_name(v), shape, time_ms,
                           [&] { (void)ops::layer_norm(x, {n}, w, b); }));
    }
    cuda::set_layer_norm_variant(before);
    const ops::LayerNormResult f = ops::layer_norm(x, {n}, w, b);
    for (const cuda::LayerNormVariant& v : cuda::layer_norm_backward_sweep(sms)) {
      cuda::set_layer_norm_variant(v);
      rows.push_back(timed("layer_norm bwd " + cuda::layer_norm_variant_name(v), shape, time_ms,
                           [&] { (void)ops::layer_norm_backward(g, x, f.mean, f.rstd, w, {n}, true); }));
    }
  }
  cuda::set_layer_norm_variant(before);
}

// Causal attention forward + backward with Kiln's kernels and with cuDNN's (the two shapes of
// issue #52's targets). KILN_CUDNN_ZERO_DQ_ACCUM is per process: run the sweep again with it set.
void sweep_attention(std::vector<Row>& rows, const TimeFn& time_ms) {
  const cuda::AttentionBackend before = cuda::attention_backend();
  for (auto [B, H, T, D] : {std::array<int64_t, 4>{8, 16, 2048, 128}, {16, 12, 1024, 64}}) {
    const std::string shape = "B" + std::to_string(B) + " H" + std::to_string(H) + " T" + std::to_string(T) + " D" +
                              std::to_string(D);
    auto leaf = [&](uint64_t seed) { return gpu_randn({B, H, T, D}, DType::bf16, seed).requires_grad_(); };
    Tensor q = leaf(5), k = leaf(6), v = leaf(7);
    Tensor grad = gpu_randn({B, H, T, D}, DType::bf16, 8);
    for (cuda::AttentionBackend backend : {cuda::AttentionBackend::kiln, cuda::AttentionBackend::cudnn}) {
      cuda::set_attention_backend(backend);
      rows.push_back(timed(std::string("attention fwd+bwd ") + cuda::attention_backend_name(backend), shape, time_ms,
                           [&] { scaled_dot_product_attention(q, k, v, /*causal=*/true).backward(grad); }));
    }
  }
  cuda::set_attention_backend(before);
}

// cuDNN's attention forward and backward timed apart, once per engine config its heuristics offer
// (Note [cuDNN SDPA engine choice]), on contiguous (B, H, T, D) inputs and on GPT's layout (q, k, v
// sliced from the (B, T, 3C) qkv projection, dout in the (B, T, H, D) storage of the output). With
// KILN_SWEEP_SDPA_KNOBS=1 also each engine's knob values on gpt-1.3b's case (each one compiled by
// NVRTC when its plan is built: minutes). Rows print as they finish, so a step cut short by its
// time limit still shows what it measured.
void sweep_attention_engines(std::vector<Row>& rows, const TimeFn& time_ms) {
  const char* knobs_env = std::getenv("KILN_SWEEP_SDPA_KNOBS");
  const bool sweep_knobs = knobs_env && std::string(knobs_env) == "1";
  auto progress = [](const Row& r) {
    if (r.ms == r.ms)
      std::printf("  %-90s %-22s %9.3f ms\n", r.candidate.c_str(), r.shape.c_str(), r.ms);
    else
      std::printf("  %-90s %-22s failed: %.160s\n", r.candidate.c_str(), r.shape.c_str(), r.error.c_str());
    std::fflush(stdout);
  };
  const int64_t before_fwd = cuda::attention_cudnn_engine_choice(false);
  const int64_t before_bwd = cuda::attention_cudnn_engine_choice(true);
  for (auto [B, H, T, D] : {std::array<int64_t, 4>{8, 16, 2048, 128}, {16, 12, 1024, 64}}) {
    for (bool gpt : {false, true}) {
      const std::string shape = "B" + std::to_string(B) + " H" + std::to_string(H) + " T" + std::to_string(T) + " D" +
                                std::to_string(D) + (gpt ? " qkv" : " bhtd");
      Tensor q, k, v, dout;
      if (gpt) {
        const Tensor qkv = gpu_randn({B, T, 3, H, D}, DType::bf16, 5);
        q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2), v = qkv.select(2, 2).transpose(1, 2);
        dout = gpu_randn({B, T, H, D}, DType::bf16, 8).transpose(1, 2);
      } else {
        q = gpu_randn({B, H, T, D}, DType::bf16, 5), k = gpu_randn({B, H, T, D}, DType::bf16, 6);
        v = gpu_randn({B, H, T, D}, DType::bf16, 7), dout = gpu_randn({B, H, T, D}, DType::bf16, 8);
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(D));
      const auto fail = cuda::CudnnMiss::fail;
      cuda::set_attention_cudnn_engine_choice(false, -1);
      cuda::set_attention_cudnn_engine_choice(true, -1);
      std::optional<cuda::FlashAttentionForward> f;
      Row def = timed("attention fwd cudnn default", shape, time_ms,
                      [&] { f = cuda::attention_cudnn_forward(q, k, v, true, scale, fail); });
      def.candidate += " = " + cuda::attention_cudnn_last_engine(false);
      def.group = "attention fwd cudnn";
      rows.push_back(def);
      progress(rows.back());
      if (!f) continue;
      def = timed("attention bwd cudnn default", shape, time_ms, [&] {
        (void)cuda::attention_cudnn_backward(dout, q, k, v, f->out, f->lse, true, scale, true, true, fail);
      });
      def.candidate += " = " + cuda::attention_cudnn_last_engine(true);
      def.group = "attention bwd cudnn";
      rows.push_back(def);
      progress(rows.back());
      for (bool backward : {false, true}) {
        std::vector<std::string> labels;
        try {
          labels = cuda::attention_cudnn_engine_candidates(q, k, v, dout, true, backward, sweep_knobs && gpt && D == 128);
        } catch (const std::exception& e) {
          rows.push_back(Row{std::string("attention ") + (backward ? "bwd" : "fwd") + " cudnn candidates", shape,
                             std::numeric_limits<double>::quiet_NaN(), e.what()});
          continue;
        }
        for (size_t i = 0; i < labels.size(); ++i) {
          cuda::set_attention_cudnn_engine_choice(backward, static_cast<int64_t>(i));
          const std::string name = std::string("attention ") + (backward ? "bwd" : "fwd") + " cudnn #" +
                                   std::to_string(i) + " " + labels[i];
          rows.push_back(timed(name, shape, time_ms, [&] {
            if (backward)
              (void)cuda::attention_cudnn_backward(dout, q, k, v, f->out, f->lse, true, scale, true, true, fail);
            else
              (void)cuda::attention_cudnn_forward(q, k, v, true, scale, fail);
          }));
          rows.back().group = std::string("attention ") + (backward ? "bwd" : "fwd") + " cudnn";
          progress(rows.back());
        }
        cuda::set_attention_cudnn_engine_choice(backward, -1);
      }
    }
  }
  cuda::set_attention_cudnn_engine_choice(false, before_fwd);
  cuda::set_attention_cudnn_engine_choice(true, before_bwd);
}

// A GPT MLP (c_fc, GELU, c_proj) forward + backward under bf16 autocast, composed and through
// linear_gelu_linear (bias + GELU in cuBLASLt's epilogue).
void sweep_epilogue(std::vector<Row>& rows, const TimeFn& time_ms) {
  for (auto [tokens, C] : {std::pair<int64_t, int64_t>{16 * 1024, 768}, {8 * 2048, 2048}}) {
    const std::string shape = "tokens " + std::to_string(tokens) + ", C " + std::to_string(C);
    Tensor x = gpu_randn({tokens, C}, DType::f32, 9).requires_grad_();
    Tensor w1 = gpu_randn({4 * C, C}, DType::f32, 10, 0.02).requires_grad_();
    Tensor b1 = zeros({4 * C}, on_gpu(DType::f32)).requires_grad_();
    Tensor w2 = gpu_randn({C, 4 * C}, DType::f32, 11, 0.02).requires_grad_();
    Tensor b2 = zeros({C}, on_gpu(DType::f32)).requires_grad_();
    Tensor grad = gpu_randn({tokens, C}, DType::f32, 12);
    for (bool fused : {false, true}) {
      rows.push_back(timed(fused ? "mlp fwd+bwd epilogue" : "mlp fwd+bwd composed", shape, time_ms, [&] {
        Tensor y;
        {
          AutocastGuard guard(DType::bf16);
          y = fused ? linear_gelu_linear(x, w1, b1, w2, b2)
                    : gelu_linear(linear(x, w1, b1), w2, b2, GeluApproximate::tanh);  // GPT's unfused MLP
        }
        y.backward(grad.to(y.dtype()));
      }));
    }
  }
}

// The residual add and the layer norm after it, composed and fused (ops::add_layer_norm's kernels).
void sweep_add_layer_norm(std::vector<Row>& rows, const TimeFn& time_ms) {
  const bool before = ops::fused_add_layer_norm_cuda();
  for (auto [r, n] : {std::pair<int64_t, int64_t>{16 * 1024, 768}, {8 * 2048, 2048}}) {
    const std::string shape = "bf16 (" + std::to_string(r) + ", " + std::to_string(n) + ")";
    Tensor x = gpu_randn({r, n}, DType::bf16, 13).requires_grad_(), res = gpu_randn({r, n}, DType::bf16, 14).requires_grad_();
    Tensor w = gpu_randn({n}, DType::bf16, 15).requires_grad_(), b = gpu_randn({n}, DType::bf16, 16).requires_grad_();
    Tensor gs = gpu_randn({r, n}, DType::bf16, 17), go = gpu_randn({r, n}, DType::bf16, 18);
    for (bool fused : {false, true}) {
      ops::set_fused_add_layer_norm_cuda(fused);
      rows.push_back(timed(fused ? "add+layer_norm fwd+bwd fused" : "add+layer_norm fwd+bwd composed", shape, time_ms,
                           [&] {
                             AddLayerNormOutput o = add_layer_norm(x, res, {n}, w, b);
                             autograd::backward({o.sum, o.out}, {gs, go});
                           }));
    }
  }
  ops::set_fused_add_layer_norm_cuda(before);
}

// The fused cross entropy's forms (cuda::CrossEntropyKernel, Note [Cross-entropy kernels]), forward
// and backward timed apart, on gpt2-124m's (16384, 50257) bf16 logits: contiguous, and the first
// 50257 columns of GPT's padded (16384, 50304) ones read in place (the gradient written padded).
void sweep_cross_entropy(std::vector<Row>& rows, const TimeFn& time_ms) {
  const cuda::CrossEntropyKernel before = cuda::cross_entropy_kernel();
  const int64_t n = 16 * 1024, c = 50257;
  Generator g(19);
  Tensor targets = (rand({n}, g, DType::f64) * double(c - 1)).to(DType::i64).to(Device::cuda());
  Tensor one = ones({}, on_gpu(DType::f32));
  for (int64_t padded : {c, int64_t(50304)}) {
    const std::string shape = "bf16 (" + std::to_string(n) + ", " + std::to_string(c) +
                              (padded == c ? ")" : " of " + std::to_string(padded) + ")");
    Tensor wide = gpu_randn({n, padded}, DType::bf16, 20);
    Tensor x = wide.narrow(1, 0, c);
    for (cuda::CrossEntropyKernel form : {cuda::CrossEntropyKernel::accurate, cuda::CrossEntropyKernel::fast,
                                          cuda::CrossEntropyKernel::registers}) {
      cuda::set_cross_entropy_kernel(form);
      const std::string name = cuda::cross_entropy_kernel_name(form);
      rows.push_back(timed("cross_entropy fwd " + name, shape, time_ms,
                           [&] { (void)ops::cross_entropy_forward(x, targets, -1, 0.0); }));
      const ops::CrossEntropyResult f = ops::cross_entropy_forward(x, targets, -1, 0.0);
      rows.push_back(timed("cross_entropy bwd " + name, shape, time_ms, [&] {
        (void)ops::cross_entropy_backward(one, x, targets, f.lse, -1, 0.0, 1.0, f.count, padded);
      }));
    }
  }
  cuda::set_cross_entropy_kernel(before);
}

// Column sums (the bias gradients of GPT's linears: (tokens, C) summed over tokens) in the scalar
// and vector forms (Note [Vector columns]).
void sweep_reduce_cols(std::vector<Row>& rows, const TimeFn& time_ms) {
  const bool before = cuda::vector_column_reductions();
  for (int64_t c : {int64_t(768), int64_t(2304), int64_t(3072), int64_t(2048), int64_t(6144), int64_t(8192)}) {
    const int64_t n = 16 * 1024;
    const std::string shape = "bf16 (" + std::to_string(n) + ", " + std::to_string(c) + ")";
    Tensor x = gpu_randn({n, c}, DType::bf16, 21);
    for (bool vector : {false, true}) {
      cuda::set_vector_column_reductions(vector);
      rows.push_back(timed(std::string("sum cols ") + (vector ? "vector" : "scalar"), shape, time_ms,
                           [&] { (void)ops::sum(x, {0}); }));
    }
  }
  cuda::set_vector_column_reductions(before);
}

// The candidate's group: its name up to the variant ("layer_norm fwd", "attention fwd+bwd", ...).
std::string group_of(const Row& r) {
  if (!r.group.empty()) return r.group + " | " + r.shape;
  const size_t cut = r.candidate.rfind(' ');
  return r.candidate.substr(0, cut) + " | " + r.shape;
}

}  // namespace

int run_sweep(const SweepOptions& options, const TimeFn& time_ms) {
  std::vector<Row> rows;
  auto want = [&](const char* name) { return options.only.empty() || options.only == name; };
  if (want("layer_norm")) sweep_layer_norm(rows, time_ms);
  if (want("attention")) sweep_attention(rows, time_ms);
  if (want("attention")) sweep_attention_engines(rows, time_ms);
  if (want("epilogue")) sweep_epilogue(rows, time_ms);
  if (want("add_layer_norm")) sweep_add_layer_norm(rows, time_ms);
  if (want("cross_entropy")) sweep_cross_entropy(rows, time_ms);
  if (want("reduce")) sweep_reduce_cols(rows, time_ms);

  // The first row of each group is its default; the fastest row of each group is marked.
  std::map<std::string, size_t> first, best;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string g = group_of(rows[i]);
    first.try_emplace(g, i);
    if (rows[i].ms == rows[i].ms) {
      auto [it, fresh] = best.try_emplace(g, i);
      if (!fresh && rows[i].ms < rows[it->second].ms) it->second = i;
    }
  }
  nlohmann::json out = nlohmann::json::array();
  std::printf("\n%-72s %-24s %9s %9s\n", "sweep candidate", "shape", "ms", "vs first");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const std::string g = group_of(r);
    const double base = rows[first[g]].ms;
    const bool fastest = best.count(g) && best[g] == i;
    if (r.ms == r.ms)
      std::printf("%-72s %-24s %9.3f %8.2fx%s\n", r.candidate.c_str(), r.shape.c_str(), r.ms, base / r.ms,
                  fastest ? "  <- fastest" : "");
    else
      std::printf("%-72s %-24s %9s  failed: %.200s\n", r.candidate.c_str(), r.shape.c_str(), "-", r.error.c_str());
    out.push_back({{"candidate", r.candidate}, {"shape", r.shape}, {"ms", r.ms == r.ms ? nlohmann::json(r.ms) : nlohmann::json()},
                   {"error", r.error}, {"fastest", fastest}});
  }
  std::printf("\nfastest per group:\n");
  for (const auto& [g, i] : best)
    std::printf("  %-60s %s (%.3f ms, %.2fx the first)\n", g.c_str(), rows[i].candidate.c_str(), rows[i].ms,
                rows[first[g]].ms / rows[i].ms);
  if (!options.json_path.empty()) {
    std::ofstream f(options.json_path);
    KILN_CHECK_IO(f.good(), "bench_cuda --sweep: cannot write ", options.json_path);
    f << out.dump(1) << "\n";
    KILN_CHECK_IO(f.good(), "bench_cuda --sweep: writing ", options.json_path, " failed");
  }
  return 0;
}

}  // namespace kiln::apps
