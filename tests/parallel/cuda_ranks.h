// How many GPU ranks a multi-process NCCL test runs: one per visible GPU, up to 4. CUDA must not
// be initialized in the parent before the ranks fork, so a forked child asks. Without a usable
// device the test prints SKIPPED and exits 77 (CTest's skip code): never reported as passed.
// run_nccl_ranks gives each of those ranks its Gloo group and an NCCL group on its own GPU.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/parallel/file_store.h>
#include <kiln/parallel/nccl_process_group.h>

#include "parallel/run_ranks.h"
#include "parallel/temp_dir.h"

namespace kiln::test {

inline int gpu_ranks_or_skip() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(cuda::is_available() ? std::min(cuda::device_count(), 4) : 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const int gpus = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  if (gpus == 0) {
    std::printf("SKIPPED: no usable CUDA device\n");
    std::exit(77);
  }
  return gpus;
}

// Runs fn(gloo, nccl) on gpu_ranks_or_skip() ranks: run_ranks' Gloo group, and an NCCL group on
// device `rank` over a file store in a fresh directory named after `name`. blocking_wait: Work::wait
// blocks the host until the collective ends (a host sync); without it, wait only orders the
// caller's stream after the collective.
// min_world: at least that many ranks, sharing the GPUs round robin (one GPU is what a lent machine
// has); ranks sharing a GPU each get their own NCCL_HOSTID, since NCCL refuses two ranks of one host
// on one device.
inline void run_nccl_ranks(const std::string& name,
                           const std::function<void(dist::ProcessGroup& gloo, std::shared_ptr<dist::ProcessGroup> nccl)>& fn,
                           bool blocking_wait = true, int min_world = 1) {
  const int gpus = gpu_ranks_or_skip();
  const int world = std::max(gpus, min_world);
  TempDir dir(name);
  const std::string path = dir.path;
  run_ranks(world, [&](dist::ProcessGroup& gloo) {
    const int r = gloo.rank();
    if (world > gpus) ::setenv("NCCL_HOSTID", ("kiln-test-rank-" + std::to_string(r)).c_str(), 1);
    auto store = dist::make_file_store(path, world);
    fn(gloo, dist::make_nccl_process_group(store, r, world,
                                           dist::NcclOptions().device(r % gpus).blocking_wait(blocking_wait)));
  });
}

// Rank r's value at element i in the NCCL tests (multiples of 1/4: exact in f32 and bf16).
inline double nccl_contribution(int r, int64_t i) { return double((r * 5 + i * 3) % 7) - 3.0 + 0.25 * r; }

// Rank r's values at elements [first, first + n).
inline std::vector<double> nccl_contributions(int r, int64_t n, int64_t first = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = nccl_contribution(r, first + i);
  return v;
}

// The average over `world` ranks of elements [first, first + n).
inline std::vector<double> nccl_average(int world, int64_t n, int64_t first = 0) {
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int q = 0; q < world; ++q) v[size_t(i)] += nccl_contribution(q, first + i) / world;
  return v;
}

}  // namespace kiln::test
