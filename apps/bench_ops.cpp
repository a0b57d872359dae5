// bench_ops: CPU f32 (or bf16) GEMM GFLOP/s and elementwise/softmax GB/s, Kiln and PyTorch side by side on
// this machine (the PyTorch half is apps/bench_ops.py, run with the same sizes, thread count and
// timing rule: median of at least 5 runs and 0.5 s, after 2 warm-ups; best of --rounds alternating
// rounds per side). Prints the Kiln/PyTorch ratio.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/ops/ops.h>  // raw ops on tensors that need no gradient
#include <kiln/kiln.h>

#include "common/app_main.h"
#include "common/app_script.h"

#include "bench_util.h"

#ifndef KILN_BENCH_OPS_PY
#define KILN_BENCH_OPS_PY ""  // the source tree's bench_ops.py (apps/CMakeLists.txt)
#endif

using namespace kiln;

using bench::median_seconds;
using bench::run_command;

namespace {

struct Row {
  std::string name, unit;
  double kiln;
};

// One round of the Kiln side: GFLOP/s for GEMM, GB/s (bytes read + written) for the rest.
// gemm_dtype bf16 times the product autocast runs: bf16 operands, f32 accumulation, a bf16 result.
std::vector<Row> run_kiln(const std::string& gemm, DType gemm_dtype, int64_t n) {
  std::vector<Row> rows;
  Generator g(0);
  std::stringstream sizes(gemm);
  for (std::string s; std::getline(sizes, s, ',');) {
    if (s.empty()) continue;
    int64_t m = std::stoll(s);
    Tensor a = randn({m, m}, g).to(gemm_dtype), b = randn({m, m}, g).to(gemm_dtype);
    double t = median_seconds([&] { ops::matmul(a, b); });
    rows.push_back({"gemm_" + s, "GFLOP/s", 2.0 * m * m * m / t / 1e9});
  }
  Tensor x = randn({n}, g), y = randn({n}, g);
  rows.push_back({"add", "GB/s", 12.0 * n / median_seconds([&] { ops::add(x, y); }) / 1e9});
  rows.push_back({"mul_scalar", "GB/s", 8.0 * n / median_seconds([&] { ops::mul(x, 1.5); }) / 1e9});
  rows.push_back({"exp", "GB/s", 8.0 * n / median_seconds([&] { ops::exp(x); }) / 1e9});
  rows.push_back({"gelu_tanh", "GB/s", 8.0 * n / median_seconds([&] { ops::gelu_tanh(x); }) / 1e9});
  int64_t cols = std::min<int64_t>(n, 4096);
  Tensor s = x.slice(0, 0, n / cols * cols).view({-1, cols});
  rows.push_back({"softmax", "GB/s", 8.0 * n / median_seconds([&] { ops::softmax(s, -1); }) / 1e9});
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_ops: Kiln vs PyTorch CPU op throughput on this machine"};
  int threads = num_threads();
  int64_t elements = int64_t(1) << 24;
  std::string gemm = "512,1024,2048", gemm_dtype = "f32", python = "/usr/bin/python3", script;
  bool no_torch = false;
  int rounds = 3;
  app.add_option("--threads", threads, "threads for both Kiln and PyTorch")->check(CLI::PositiveNumber);
  app.add_option("--elements", elements, "elements for the elementwise and softmax benchmarks")->check(CLI::PositiveNumber);
  app.add_option("--gemm", gemm, "comma-separated square GEMM sizes");
  app.add_option("--gemm-dtype", gemm_dtype, "the GEMMs' dtype: f32, or bf16 (bf16 operands, f32 accumulation, "
                 "bf16 result, as under autocast; both sides)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--python", python, "python with torch for the reference side");
  app.add_option("--torch-script", script, "path to bench_ops.py (default: the one beside this executable, else the "
                 "source tree's)");
  app.add_flag("--no-torch", no_torch, "only run the Kiln side");
  app.add_option("--rounds", rounds, "alternating Kiln/PyTorch rounds; each side keeps its best")->check(CLI::PositiveNumber);
  return kiln::apps::run_main(app, argc, argv, kiln::apps::AppMainOptions("bench_ops"), [&]() -> int {
    set_num_threads(threads);
    if (!no_torch) script = apps::find_app_script("bench_ops.py", script, KILN_BENCH_OPS_PY);
    // Rounds alternate Kiln and PyTorch; each side keeps its best round, so a burst of load from
    // elsewhere on a shared machine does not land on one side only.
    std::vector<Row> rows;
    nlohmann::json ref = nlohmann::json::object();  // stays empty with --no-torch
    for (int round = 0; round < rounds; ++round) {
      std::vector<Row> now = run_kiln(gemm, gemm_dtype == "bf16" ? DType::bf16 : DType::f32, elements);
      if (rows.empty()) rows = now;
      for (size_t i = 0; i < rows.size(); ++i) rows[i].kiln = std::max(rows[i].kiln, now[i].kiln);
      if (no_torch) continue;
      std::string cmd = bench::shell_quote(python) + " " + bench::shell_quote(script) + " --threads " +
                        std::to_string(threads) + " --elements " + std::to_string(elements) + " --gemm=" + gemm +
                        " --gemm-dtype " + gemm_dtype;
      std::string out = run_command(cmd);
      nlohmann::json r;
      try {
        r = nlohmann::json::parse(out);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_ops: the PyTorch side failed (%s); output: %s\n", cmd.c_str(), out.c_str());
        return 1;
      }
      if (ref.empty()) ref = r;
      for (const Row& row : rows)
        if (r.contains(row.name)) ref[row.name] = std::max(ref[row.name].get<double>(), r[row.name].get<double>());
    }
    std::printf("bench_ops: %d thread(s), %lld elements, %s GEMMs; PyTorch %s, %s\n", threads,
                static_cast<long long>(elements), gemm_dtype.c_str(), ref.value("torch", std::string("(not run)")).c_str(), bench::blas_description(ref).c_str());
    std::printf("%s\n", cpu::capability_summary().c_str());
    bench::print_comparison(rows, {"op", 12, -8, 10, "kiln", "pytorch"}, ref);
    return 0;
  });
}
