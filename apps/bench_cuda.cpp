// bench_cuda: the CUDA backend's kernels against PyTorch on the same GPU, in one run: bf16 GEMM,
// causal attention fwd+bwd, layer norm fwd+bwd, fused cross-entropy fwd+bwd, and one AdamW step
// over 1.3B f32 parameters. Each case is timed with CUDA events (median of >= 10 runs and 0.5 s
// after 3 warm-ups, the rule bench_cuda.py applies to torch) and printed with Kiln / PyTorch.
// PyTorch runs as a child process (--python) so both sides get the whole GPU in turn.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"

#include <kiln/core/cuda/runtime/stream.h>  // Event, for timing
#include <kiln/core/ops/ops.h>  // raw ops on tensors that need no gradient
#include <kiln/kiln.h>

#include "common/app_main.h"
#include "common/app_script.h"
#include "cuda/gpu_inputs.h"
#include "cuda/sweep.h"

#ifndef KILN_BENCH_CUDA_PY
#define KILN_BENCH_CUDA_PY ""  // the source tree's bench_cuda.py (apps/CMakeLists.txt)
#endif

using namespace kiln;

namespace {

using apps::gpu_randn;
using apps::on_gpu;

struct Result {
  std::string name, unit;
  double kiln = 0;        // the figure in `unit` (higher is better)
  double ms = 0;          // median milliseconds per run
};

// Median milliseconds of fn() on the current stream, timed with events.
double median_ms(const std::function<void()>& fn, int min_iters = 10, double min_seconds = 0.5) {
  for (int i = 0; i < 3; ++i) fn();
  cuda::synchronize();
  std::vector<double> times;
  const auto start = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  cuda::Event a(true), b(true);
  while (static_cast<int>(times.size()) < min_iters || since() < min_seconds) {
    a.record();
    fn();
    b.record();
    b.synchronize();
    times.push_back(a.elapsed_ms(b));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Result bench_gemm(int64_t n) {
  Tensor a = gpu_randn({n, n}, DType::bf16, 1), b = gpu_randn({n, n}, DType::bf16, 2);
  double ms = median_ms([&] { (void)ops::matmul(a, b); });
  return {"gemm bf16 " + std::to_string(n) + "^3", "TFLOP/s", 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12, ms};
}

// Causal attention at (B, H, T, D), forward and backward through autograd, or the forward alone
// (inputs requiring grad, so it saves the log-sum-exp as a training step's does). The name carries
// the shape unless it is gpt-1.3b's, the case's first form.
Result bench_attention(int64_t B, int64_t H, int64_t T, int64_t D, bool with_backward) {
  auto leaf = [&](uint64_t seed) {
    Tensor t = gpu_randn({B, H, T, D}, DType::bf16, seed);
    t.requires_grad_();
    return t;
  };
  Tensor q = leaf(3), k = leaf(4), v = leaf(5);
  Tensor grad = gpu_randn({B, H, T, D}, DType::bf16, 6);
  double ms = median_ms([&] {
    Tensor o = scaled_dot_product_attention(q, k, v, /*causal=*/true);
    if (with_backward) o.backward(grad);
  });
  // Causal: half of the 4*B*H*T*T*D forward FLOPs, and backward = 2.5x forward (FA2's count).
  double flops = (with_backward ? 3.5 : 1.0) * 4.0 * double(B) * H * T * T * D / 2.0;
  std::string name = std::string("attention causal ") + (with_backward ? "fwd+bwd" : "fwd") + " bf16";
  if (B != 8 || H != 16 || T != 2048 || D != 128)
    name += " B" + std::to_string(B) + " H" + std::to_string(H) + " T" + std::to_string(T) + " D" + std::to_string(D);
  return {name, "TFLOP/s", flops / (ms * 1e-3) / 1e12, ms};
}

Result bench_layer_norm(int64_t rows, int64_t C) {
  Tensor x = gpu_randn({rows, C}, DType::bf16, 7);
  x.requires_grad_();
  Tensor w = ones({C}, on_gpu(DType::bf16)), b = zeros({C}, on_gpu(DType::bf16));
  w.requires_grad_();
  b.requires_grad_();
  Tensor grad = gpu_randn({rows, C}, DType::bf16, 8);
  double ms = median_ms([&] {
    Tensor y = layer_norm(x, {C}, w, b);
    y.backward(grad);
  });
  // Bytes that must move: x and y (fwd), x, dy, dx (bwd) in bf16.
  double bytes = 5.0 * double(rows) * C * 2;
  return {"layer_norm fwd+bwd bf16", "GB/s", bytes / (ms * 1e-3) / 1e9, ms};
}

Result bench_cross_entropy(int64_t N, int64_t V) {
  Tensor logits = gpu_randn({N, V}, DType::bf16, 9);
  logits.requires_grad_();
  Generator g(10);
  Tensor targets = (rand({N}, g, DType::f64) * double(V - 1)).to(DType::i64).to(Device::cuda());
  double ms = median_ms([&] {
    Tensor loss = cross_entropy(logits, targets);
    loss.backward();
  });
  double bytes = 3.0 * double(N) * V * 2;  // read logits (fwd), read again + write dlogits (bwd)
  return {"cross_entropy fwd+bwd bf16", "GB/s", bytes / (ms * 1e-3) / 1e9, ms};
}

// One AdamW step over `total` f32 parameters split like a GPT's tensors (48 layers' worth).
Result bench_adamw(int64_t total) {
  std::vector<Tensor> params;
  const int64_t pieces = 4 * 48 + 2;
  for (int64_t i = 0; i < pieces; ++i) {
    int64_t n = total / pieces + (i < total % pieces ? 1 : 0);
    Tensor p = full({n}, 0.01, on_gpu(DType::f32));
    p.requires_grad_();
    p.set_grad(full({n}, 1e-3, on_gpu(DType::f32)));
    params.push_back(p);
  }
  optim::AdamW opt(params, optim::AdamWOptions(1e-4).weight_decay(0.1));
  double ms = median_ms([&] { opt.step(); }, 5);
  // Reads p, g, m, v and writes p, m, v: 7 x 4 bytes per parameter.
  return {"adamw step 1.3B f32", "GB/s", 28.0 * double(total) / (ms * 1e-3) / 1e9, ms};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cuda: Kiln's CUDA kernels vs PyTorch on this GPU (ratio = Kiln / PyTorch throughput)"};
  std::string python = "python3", script, only;
  bool no_torch = false;
  int64_t adamw_params = 1300000000;
  app.add_option("--python", python, "python with a CUDA build of torch for the reference side");
  app.add_option("--torch-script", script, "path to bench_cuda.py (default: the one beside this executable, else the "
                 "source tree's)");
  app.add_flag("--no-torch", no_torch, "Kiln's figures only");
  app.add_option("--only", only, "run one case: gemm, attention, layer_norm, cross_entropy, adamw");
  app.add_option("--adamw-params", adamw_params, "parameters in the AdamW step (default 1.3e9)")
      ->check(CLI::PositiveNumber);
  bool sweep = false;
  std::string sweep_json;
  app.add_flag("--sweep", sweep, "time every candidate configuration of the kernels whose best form is unknown "
               "(layer-norm variants, Kiln vs cuDNN attention, the GELU epilogue, the fused add + layer norm, the "
               "cross entropy's forms, the column sums' forms) and print the fastest of each; Kiln only (--only picks "
               "one: layer_norm, attention, epilogue, add_layer_norm, cross_entropy, reduce)");
  app.add_option("--sweep-json", sweep_json, "with --sweep: also write the table as JSON to this file");
  return kiln::apps::run_main(app, argc, argv, kiln::apps::AppMainOptions("bench_cuda"), [&]() -> int {
    KILN_CHECK(cuda::is_available(), "bench_cuda: no usable CUDA device (", cuda::build_info(), ")");
    if (!no_torch && !sweep) script = apps::find_app_script("bench_cuda.py", script, KILN_BENCH_CUDA_PY);
    std::printf("bench_cuda: %s\n", cuda::build_info().c_str());
    std::fflush(stdout);
    if (sweep) return apps::run_sweep({only, sweep_json}, [](const std::function<void()>& fn) { return median_ms(fn); });
    std::vector<Result> results;
    auto want = [&](const char* name) { return only.empty() || only == name; };
    if (want("gemm")) {
      results.push_back(bench_gemm(4096));
      results.push_back(bench_gemm(8192));
    }
    if (want("attention")) {
      results.push_back(bench_attention(8, 16, 2048, 128, true));
      results.push_back(bench_attention(8, 16, 2048, 128, false));
      results.push_back(bench_attention(16, 12, 1024, 64, true));
      results.push_back(bench_attention(16, 12, 1024, 64, false));
    }
    if (want("layer_norm")) results.push_back(bench_layer_norm(8 * 1024, 1600));
    if (want("cross_entropy")) results.push_back(bench_cross_entropy(8 * 1024, 50257));
    if (want("adamw")) results.push_back(bench_adamw(adamw_params));
    cuda::synchronize();
    cuda::empty_cache();  // hand the cached blocks back so PyTorch gets the whole GPU

    nlohmann::json ref = nlohmann::json::object();
    if (!no_torch) {
      std::string cmd = bench::shell_quote(python) + " " + bench::shell_quote(script) + " --adamw-params " +
                        std::to_string(adamw_params) + (only.empty() ? "" : " --only " + only);
      std::string out = bench::run_command(cmd);
      try {
        ref = nlohmann::json::parse(out);
      } catch (const std::exception&) {
        std::fprintf(stderr, "bench_cuda: the PyTorch side printed no JSON (%s); output:\n%s\n", cmd.c_str(),
                     out.c_str());
      }
    }
    bench::print_comparison(results, {"case", 32, 10, 12, "Kiln", "PyTorch"}, ref);
    if (ref.contains("device")) std::printf("PyTorch %s on %s\n", ref.value("torch", "?").c_str(),
                                            ref["device"].get<std::string>().c_str());
    return 0;
  });
}
