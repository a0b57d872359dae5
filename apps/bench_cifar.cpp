// bench_cifar: training-step throughput (images/s of forward, label-smoothed cross entropy,
// backward and an SGD Nesterov step) of the tiny and standard CifarCnn, Kiln and PyTorch side by
// side (apps/bench_cifar.py: the same network as the parity oracle, same batch, threads and timing
// rule: median of at least --min-iters steps and 0.5 s after 2 warm-ups; best of --rounds
// alternating rounds per side). Prints the Kiln/PyTorch ratio. --device cpu: f32 on the CPU.
// --device cuda: on the GPU, by default under bf16 autocast (PyTorch: channels-last, bf16
// autocast, the same SGD), each step ended by a device synchronize. --conv-variants (CPU): times
// each convolution layer's three passes and the whole step under both CPU convolution variants
// (KILN_CPU_WINOGRAD off and on, Note [CPU Winograd]) in alternating rounds, Kiln only.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/cpu/conv_winograd.h>
#include <kiln/core/cpu/onednn/switch.h>
#include <kiln/core/ops/ops.h>  // raw ops on tensors that need no gradient
#include <kiln/kiln.h>

#include "common/app_main.h"
#include "common/app_script.h"
#include "common/dtype_flag.h"

#include "bench_util.h"

#ifndef KILN_BENCH_CIFAR_PY
#define KILN_BENCH_CIFAR_PY ""  // the source tree's bench_cifar.py (apps/CMakeLists.txt)
#endif

using namespace kiln;

using bench::median_seconds;
using bench::run_command;

namespace {

struct Case {
  std::string name;  // "tiny" or "standard"
  int64_t batch;
  double kiln = 0, torch = 0;  // images/s, best round
};

// images/s of one training step of the named model at `batch` on `device` (autocast to `amp`
// unless it is f32).
double kiln_images_per_s(const std::string& name, int64_t batch, int min_iters, Device device, DType amp) {
  Generator gen(0);
  auto config = name == "tiny" ? models::CifarCnnConfig::tiny() : models::CifarCnnConfig::standard();
  auto model = std::make_shared<models::CifarCnn>(config, gen);
  model->to(device);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).momentum(0.9).nesterov(true).weight_decay(5e-4));
  Tensor x = randn({batch, 3, 32, 32}, gen).to(device);
  Tensor y = randint(0, 10, {batch}, gen).to(device);
  const auto ce = CrossEntropyOptions().label_smoothing(0.2);
  double t = median_seconds(
      [&] {
        opt.zero_grad();
        Tensor loss;
        {
          AutocastGuard autocast(amp == DType::f32 ? DType::bf16 : amp, amp != DType::f32);
          loss = cross_entropy(model->forward(x), y, ce);
        }
        loss.backward();
        opt.step();
        if (device.is_cuda()) cuda::synchronize(device.index);
      },
      min_iters);
  return double(batch) / t;
}

// One conv layer of a model: in -> out channels, 3x3 with padding 1 on size x size planes.
struct ConvLayer {
  int64_t in, out, size;
};

std::vector<ConvLayer> conv_layers(const std::string& name) {
  const auto config = name == "tiny" ? models::CifarCnnConfig::tiny() : models::CifarCnnConfig::standard();
  std::vector<ConvLayer> layers;
  int64_t in = config.in_channels_, size = 32;
  for (int64_t w : config.widths_) {  // conv1 -> max_pool2d(2) -> ... -> conv2 (Note [CifarCnn])
    layers.push_back({in, w, size});
    layers.push_back({w, w, size / 2});
    in = w, size /= 2;
  }
  return layers;
}

// --conv-variants: ms of each layer's forward, backward-input and backward-weight pass and the
// step's img/s, with the Winograd variant off and on, best of `rounds` alternating rounds.
void conv_variants(const std::vector<Case>& cases, int rounds, int min_iters) {
  const char* pass[] = {"forward", "backward input", "backward weight"};
  std::printf("%s\nconvolution variants: direct (oneDNN, or Kiln's im2col with KILN_ONEDNN=0) vs Winograd "
              "F(2x2,3x3) (KILN_CPU_WINOGRAD=1; layers with >= %lld channels)\n",
              cpu::capability_summary().c_str(), (long long)cpu::kWinogradMinChannels);
  std::printf("%-10s %-22s %-16s %10s %10s %8s\n", "model", "layer (N,C,HxW)->O", "pass", "direct ms", "wino ms",
              "speedup");
  for (const Case& c : cases) {
    for (const ConvLayer& l : conv_layers(c.name)) {
      Generator g(1);
      const auto opt = ops::Conv2dOptions().padding(1);
      Tensor x = randn({c.batch, l.in, l.size, l.size}, g), w = randn({l.out, l.in, 3, 3}, g);
      Tensor gy = randn({c.batch, l.out, l.size, l.size}, g);
      const std::function<void()> run[] = {[&] { ops::conv2d(x, w, Tensor(), opt); },
                                           [&] { ops::conv2d_backward_input(gy, w, x.shape(), opt); },
                                           [&] { ops::conv2d_backward_weight(gy, x, w.shape(), opt); }};
      for (int k = 0; k < 3; ++k) {
        double best[2] = {1e30, 1e30};
        for (int round = 0; round < rounds; ++round)
          for (int v = 0; v < 2; ++v) {
            cpu::CpuWinogradGuard guard(v == 1);
            best[v] = std::min(best[v], median_seconds(run[k], min_iters));
          }
        const std::string layer = std::to_string(l.in) + "," + std::to_string(l.size) + "x" + std::to_string(l.size) +
                                  "->" + std::to_string(l.out);
        std::printf("%-10s %-22s %-16s %10.2f %10.2f %7.2fx\n", c.name.c_str(), layer.c_str(), pass[k], best[0] * 1e3,
                    best[1] * 1e3, best[0] / best[1]);
      }
    }
    double step[2] = {0, 0};
    for (int round = 0; round < rounds; ++round)
      for (int v = 0; v < 2; ++v) {
        cpu::CpuWinogradGuard guard(v == 1);
        step[v] = std::max(step[v], kiln_images_per_s(c.name, c.batch, min_iters, Device::cpu(), DType::f32));
      }
    std::printf("%-10s step (batch %lld), img/s: direct %.1f, winograd %.1f (%.2fx)\n", c.name.c_str(),
                (long long)c.batch, step[0], step[1], step[1] / step[0]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cifar: Kiln vs PyTorch training-step throughput of the CIFAR CNN"};
  int threads = num_threads(), rounds = 3, min_iters = 5;
  int64_t tiny_batch = 0, standard_batch = 0;
  std::string python = "/usr/bin/python3", script, models = "tiny,standard";
  std::string device_name = "cpu", dtype_name;
  bool no_torch = false;
  app.add_option("--threads", threads, "threads for both Kiln and PyTorch")->check(CLI::PositiveNumber);
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--dtype", dtype_name, "f32 (or fp32) or bf16 (autocast); default f32 on the CPU, bf16 on cuda")
      ->transform(apps::dtype_flag({DType::f32, DType::bf16}));
  app.add_option("--tiny-batch", tiny_batch, "batch of the tiny model (16/32/32); default 256 on the CPU, 1024 on cuda")
      ->check(CLI::PositiveNumber);
  app.add_option("--standard-batch", standard_batch,
                 "batch of the standard model (64/256/256); default 64 on the CPU, 512 on cuda")
      ->check(CLI::PositiveNumber);
  app.add_option("--models", models, "which models: tiny, standard or tiny,standard");
  app.add_option("--rounds", rounds, "alternating Kiln/PyTorch rounds; each side keeps its best")->check(CLI::PositiveNumber);
  app.add_option("--min-iters", min_iters, "timed steps per measurement at least")->check(CLI::PositiveNumber);
  app.add_option("--python", python, "python with torch for the reference side");
  app.add_option("--torch-script", script, "path to bench_cifar.py (default: the one beside this executable, else the "
                 "source tree's)");
  app.add_flag("--no-torch", no_torch, "only run the Kiln side");
  bool variants = false;
  app.add_flag("--conv-variants", variants,
               "CPU: time each conv layer and the step with the Winograd variant off and on (Kiln only)");
  return kiln::apps::run_main(app, argc, argv, kiln::apps::AppMainOptions("bench_cifar"), [&]() -> int {
    set_num_threads(threads);
    const bool on_cuda = device_name == "cuda";
    KILN_CHECK(!on_cuda || cuda::is_available(), "--device cuda: no usable CUDA device (",
               cuda::build_info(), ")");
    const Device device = on_cuda ? Device::cuda(0) : Device::cpu();
    if (dtype_name.empty()) dtype_name = on_cuda ? "bf16" : "f32";
    const DType amp = apps::parse_dtype_flag(dtype_name, {DType::f32, DType::bf16});
    if (!no_torch) script = apps::find_app_script("bench_cifar.py", script, KILN_BENCH_CIFAR_PY);
    if (tiny_batch == 0) tiny_batch = on_cuda ? 1024 : 256;
    if (standard_batch == 0) standard_batch = on_cuda ? 512 : 64;
    std::vector<Case> cases;
    if (models.find("tiny") != std::string::npos) cases.push_back({"tiny", tiny_batch});
    if (models.find("standard") != std::string::npos) cases.push_back({"standard", standard_batch});
    KILN_CHECK(!cases.empty(), "--models must name tiny and/or standard, got '", models, "'");
    if (variants) {
      KILN_CHECK(!on_cuda && amp == DType::f32, "--conv-variants times the CPU's f32 convolutions");
      conv_variants(cases, rounds, min_iters);
      return 0;
    }
    std::string torch_version = "(not run)";
    nlohmann::json blas = {{"blas", "-"}};  // the PyTorch side's blas_report
    for (int round = 0; round < rounds; ++round) {
      // Alternating rounds: a burst of load from elsewhere on a shared machine hits both sides.
      for (Case& c : cases) c.kiln = std::max(c.kiln, kiln_images_per_s(c.name, c.batch, min_iters, device, amp));
      if (on_cuda) cuda::empty_cache();  // give PyTorch the memory Kiln's cache holds
      if (no_torch) continue;
      for (Case& c : cases) {
        std::string cmd = bench::shell_quote(python) + " " + bench::shell_quote(script) + " --threads " +
                          std::to_string(threads) + " --model " + c.name + " --batch " + std::to_string(c.batch) +
                          " --min-iters " + std::to_string(min_iters) + " --device " + device_name + " --dtype " +
                          dtype_name;
        std::string out = run_command(cmd);
        nlohmann::json r;
        try {
          r = nlohmann::json::parse(out);
        } catch (const std::exception&) {
          std::fprintf(stderr, "bench_cifar: the PyTorch side failed (%s); output: %s\n", cmd.c_str(), out.c_str());
          return 1;
        }
        c.torch = std::max(c.torch, r.at("images_per_s").get<double>());
        torch_version = r.value("torch", torch_version);
        if (!on_cuda) blas = r;
      }
    }
    std::printf("bench_cifar: training step (forward, cross entropy, backward, SGD), %s on %s, %d thread(s); PyTorch %s%s\n",
                dtype_name.c_str(), on_cuda ? "cuda" : "the CPU", threads, torch_version.c_str(),
                on_cuda ? " (channels-last)" : (", " + bench::blas_description(blas)).c_str());
    if (!on_cuda) std::printf("%s\n", cpu::capability_summary().c_str());
    std::printf("%-10s %6s %12s %12s %8s\n", "model", "batch", "kiln img/s", "torch img/s", "ratio");
    for (const Case& c : cases) {
      if (c.torch > 0)
        std::printf("%-10s %6lld %12.1f %12.1f %7.2fx\n", c.name.c_str(), (long long)c.batch, c.kiln, c.torch,
                    c.kiln / c.torch);
      else
        std::printf("%-10s %6lld %12.1f %12s %8s\n", c.name.c_str(), (long long)c.batch, c.kiln, "-", "-");
    }
    return 0;
  });
}
