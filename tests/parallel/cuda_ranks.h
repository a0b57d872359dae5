// How many GPU ranks a multi-process NCCL test runs: one per visible GPU, up to 4. CUDA must not
// be initialized in the parent before the ranks fork, so a forked child asks. Without a usable
// device the test prints SKIPPED and exits 77 (CTest's skip code): never reported as passed.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <kiln/core/cuda/runtime/runtime.h>

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

}  // namespace kiln::test
