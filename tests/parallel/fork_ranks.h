// fork_ranks(n, body): n forked processes, each running body(rank) -> exit code, with a wall-clock
// guard; unlike run_ranks (run_ranks.h) no process group is made for them, so a body can own, break
// or time its own group or store.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace kiln::test {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// How a forked rank ended: its exit code, -signal, or -1000 when killed at the guard.
constexpr int kHung = -1000;

// Forks n ranks running body(rank) -> exit code (an exception prints and exits 1); waits for all,
// killing those still running after `guard`.
inline std::vector<int> fork_ranks(int n, const std::function<int(int)>& body,
                                   std::chrono::seconds guard = std::chrono::seconds(60)) {
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 1;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d failed: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(n, kHung);
  const auto deadline = SteadyClock::now() + guard;
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] == 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        pids[r] = 0;
        --left;
      }
    }
    if (left > 0 && SteadyClock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (pids[r] != 0) {
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], nullptr, 0);
          pids[r] = 0;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return codes;
}

}  // namespace kiln::test
