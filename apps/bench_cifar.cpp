// bench_cifar: training-step throughput (images/s of forward, label-smoothed cross entropy,
// backward and an SGD Nesterov step) of the tiny and standard CifarCnn, Kiln and PyTorch side by
// side (apps/bench_cifar.py: the same network as the parity oracle, same batch, threads and timing
// rule: median of at least --min-iters steps and 0.5 s after 2 warm-ups; best of --rounds
// alternating rounds per side). Prints the Kiln/PyTorch ratio. --device cpu: f32 on the CPU.
// --device cuda: on the GPU, by default under bf16 autocast (PyTorch: channels-last, bf16
// autocast, the same SGD), each step ended by a device synchronize.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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
