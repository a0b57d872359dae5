// Shared by the bench_* apps: the timing rule (median of at least `min_iters` runs and 0.5 s,
// after 2 warm-ups), running the PyTorch side as a child process (its script: common/app_script.h),
// what it says about its BLAS, and the Kiln-vs-PyTorch table.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <kiln/core/error.h>

namespace kiln::bench {

inline double median_seconds(const std::function<void()>& fn, int min_iters = 5) {
  fn();
  fn();
  std::vector<double> times;
  auto since = [](auto t0) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(times.size()) < min_iters || since(start) < 0.5) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Runs `cmd` through the shell and returns its standard output; `exit_status`, when given, gets
// the command's exit status (-1 when it did not exit normally, e.g. killed by a signal).
inline std::string run_command(const std::string& cmd, int* exit_status = nullptr) {
  FILE* pipe = popen(cmd.c_str(), "r");
  KILN_CHECK(pipe != nullptr, "could not run ", cmd);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  if (exit_status != nullptr) *exit_status = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  return out;
}

// What to print after "BLAS <library>" for PyTorch's CPU side: a warning when it is not OpenBLAS
// (Debian's torch then runs on the reference BLAS, and every GEMM-bound ratio flatters Kiln ~50x).
inline std::string blas_warning(const std::string& blas) {
  if (blas.empty() || blas == "-" || blas.find("openblas") != std::string::npos) return "";
  return " (not OpenBLAS: PyTorch's GEMMs are slow here and the ratios flatter Kiln; apt-get install "
         "libopenblas0-pthread)";
}

// What the PyTorch side's blas_report (apps/bench_util.py) says: "BLAS <library>, OpenBLAS core
// <core> (<what was changed for it>)" and blas_warning's warning.
inline std::string blas_description(const nlohmann::json& r) {
  const std::string blas = r.value("blas", std::string("-")), core = r.value("blas_core", std::string("-"));
  const std::string note = r.value("blas_note", std::string());
  std::string out = "BLAS " + blas;
  if (core != "-") out += ", OpenBLAS core " + core;
  if (!note.empty()) out += " (" + note + ")";
  return out + blas_warning(blas);
}

// `s` quoted for the shell: 'it'\''s' (safe for any path).
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The columns of a Kiln-vs-PyTorch table; a negative width left-aligns its column.
struct TableLayout {
  const char* case_header;  // "case", "op"
  int case_width, unit_width, value_width;
  const char* kiln_header;  // "Kiln", "kiln"
  const char* torch_header;
};

// Prints the header and one line per row (anything with `name`, `unit` and `kiln`): Kiln's figure,
// PyTorch's (torch[name], the PyTorch side's JSON; "-" where it has none) and their ratio.
template <class Row>
void print_comparison(const std::vector<Row>& rows, const TableLayout& l, const nlohmann::json& torch) {
  const int c = -l.case_width, u = l.unit_width, v = l.value_width;
  std::printf("%*s %*s %*s %*s %8s\n", c, l.case_header, u, "unit", v, l.kiln_header, v, l.torch_header, "ratio");
  for (const Row& r : rows) {
    if (torch.contains(r.name)) {
      const double t = torch[r.name].template get<double>();
      std::printf("%*s %*s %*.2f %*.2f %7.2fx\n", c, r.name.c_str(), u, r.unit.c_str(), v, r.kiln, v, t, r.kiln / t);
    } else {
      std::printf("%*s %*s %*.2f %*s %8s\n", c, r.name.c_str(), u, r.unit.c_str(), v, r.kiln, v, "-", "-");
    }
  }
}

}  // namespace kiln::bench
