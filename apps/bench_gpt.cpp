// bench_gpt: one f32 CPU training step of a GPT (forward, loss, backward, AdamW step, zero_grad)
// in Kiln and, in the same run, in PyTorch (apps/bench_gpt.py: the same architecture, config,
// batch, thread count and timing rule), for gpt-tiny and a ~10M model. Prints ms/step, tokens/s
// and the Kiln/PyTorch time ratio (below 1.0: Kiln is faster).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "bench_util.h"

#ifndef KILN_BENCH_GPT_PY
#define KILN_BENCH_GPT_PY "bench_gpt.py"
#endif

using namespace kiln;

using bench::run_command;

namespace {

struct BenchConfig {
  std::string name;
  models::GPTConfig config;
};

// gpt-tiny, and "gpt-10m": 6 layers, 6 heads, 384 dims, context 256, byte vocabulary (10.7M).
std::vector<BenchConfig> bench_configs() {
  models::GPTConfig ten = models::gpt_config("gpt-tiny");
  ten.n_layer = 6;
  ten.n_head = 6;
  ten.n_embd = 384;
  ten.block_size = 256;
  return {{"gpt-tiny", models::gpt_config("gpt-tiny")}, {"gpt-10m", ten}};
}

// Median seconds of `steps` timed training steps after `warmup` untimed ones.
double kiln_step_seconds(const models::GPTConfig& config, int64_t b, int64_t t, int warmup, int steps) {
  models::GPT model(config);
  model.train();
  optim::AdamW opt(model.parameters(), optim::AdamWOptions(3e-4).weight_decay(0.1));
  Generator g(0);
  Tensor idx = randint(0, config.vocab_size, {b, t}, g);
  Tensor targets = randint(0, config.vocab_size, {b, t}, g);
  auto step = [&] {
    Tensor loss = model.loss(idx, targets);
    loss.backward();
    opt.step();
    opt.zero_grad();
  };
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpt: Kiln vs PyTorch f32 CPU GPT training step on this machine"};
  int threads = num_threads(), rounds = 3, warmup = 2, steps = 10;
  int64_t batch = 8, seq = 0;
  std::string only, python = "/usr/bin/python3", script = KILN_BENCH_GPT_PY;
  bool no_torch = false;
  app.add_option("--threads", threads, "threads for both Kiln and PyTorch")->check(CLI::PositiveNumber);
  app.add_option("-B,--batch", batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("-T,--seq", seq, "tokens per sequence (default: the config's context)")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", warmup, "untimed steps before timing")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", steps, "timed steps per round (the median is kept)")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "alternating Kiln/PyTorch rounds; each side keeps its best")->check(CLI::PositiveNumber);
  app.add_option("--config", only, "run only this config (gpt-tiny or gpt-10m)");
  app.add_option("--python", python, "python with torch for the reference side");
  app.add_option("--torch-script", script, "path to bench_gpt.py");
  app.add_flag("--no-torch", no_torch, "only run the Kiln side");
  CLI11_PARSE(app, argc, argv);

  try {
    set_num_threads(threads);
    std::string torch_version = "(not run)";
    std::printf("bench_gpt: f32 CPU training step (forward, loss, backward, AdamW, zero_grad), %d thread(s), "
                "median of %d steps after %d warm-up, best of %d alternating round(s)\n",
                threads, steps, warmup, rounds);
    struct Result {
      std::string line;
      double kiln, torch;
      int64_t tokens;
    };
    std::vector<Result> results;
    for (const BenchConfig& bc : bench_configs()) {
      if (!only.empty() && bc.name != only) continue;
      const models::GPTConfig& c = bc.config;
      const int64_t t = seq > 0 ? std::min(seq, c.block_size) : c.block_size;
      char line[256];
      std::snprintf(line, sizeof line, "%s: n_layer %lld, n_head %lld, n_embd %lld, block %lld, vocab %lld; %s params; B=%lld T=%lld",
                    bc.name.c_str(), (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd,
                    (long long)c.block_size, (long long)c.vocab_size,
                    models::format_parameter_count(models::GPT::count_parameters(c)).c_str(), (long long)batch,
                    (long long)t);
      std::printf("%s\n", line);
      std::fflush(stdout);
      double best_kiln = 1e30, best_torch = 1e30;
      for (int r = 0; r < rounds; ++r) {
        best_kiln = std::min(best_kiln, kiln_step_seconds(c, batch, t, warmup, steps));
        if (no_torch) continue;
        std::string cmd = python + " " + script + " --threads " + std::to_string(threads) + " --batch " +
                          std::to_string(batch) + " --seq " + std::to_string(t) + " --warmup " +
                          std::to_string(warmup) + " --steps " + std::to_string(steps) + " --n-layer " +
                          std::to_string(c.n_layer) + " --n-head " + std::to_string(c.n_head) + " --n-embd " +
                          std::to_string(c.n_embd) + " --block " + std::to_string(c.block_size) + " --vocab " +
                          std::to_string(c.vocab_size) + " --padded-vocab " + std::to_string(c.padded_vocab_size);
        std::string out = run_command(cmd);
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(out);
        } catch (const std::exception&) {
          std::fprintf(stderr, "bench_gpt: the PyTorch side failed (%s); output: %s\n", cmd.c_str(), out.c_str());
          return 1;
        }
        KILN_CHECK(j.value("params", int64_t(0)) == models::GPT::count_parameters(c),
                   "bench_gpt: the PyTorch model has ", j.value("params", int64_t(0)), " parameters, Kiln's ",
                   models::GPT::count_parameters(c));
        best_torch = std::min(best_torch, j["step_s"].get<double>());
        torch_version = j.value("torch", torch_version);
      }
      results.push_back({bc.name, best_kiln, no_torch ? 0.0 : best_torch, batch * t});
    }
    std::printf("PyTorch %s\n", torch_version.c_str());
    std::printf("%-10s %12s %12s %14s %14s %8s\n", "config", "kiln ms", "pytorch ms", "kiln tok/s", "pytorch tok/s",
                "ratio");
    for (const Result& r : results) {
      if (no_torch) {
        std::printf("%-10s %12.2f %12s %14.0f %14s %8s\n", r.line.c_str(), r.kiln * 1e3, "-", r.tokens / r.kiln, "-",
                    "-");
      } else {
        std::printf("%-10s %12.2f %12.2f %14.0f %14.0f %7.2fx\n", r.line.c_str(), r.kiln * 1e3, r.torch * 1e3,
                    r.tokens / r.kiln, r.tokens / r.torch, r.kiln / r.torch);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
