// Shared by the bench_* apps: the timing rule (median of at least `min_iters` runs and 0.5 s,
// after 2 warm-ups) and running the PyTorch side as a child process.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

// Runs `cmd` through the shell and returns its standard output.
inline std::string run_command(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  KILN_CHECK(pipe != nullptr, "could not run ", cmd);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  return out;
}

}  // namespace kiln::bench
