// Multi-process test harness: run_ranks(n, fn) forks n processes that rendezvous through a file
// store in a fresh temporary directory, build a Gloo process group and run fn(pg). The parent
// checks every exit code and kills (and reports) a rank that outlives the wall-clock guard.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

#include <kiln/parallel/file_store.h>
#include <kiln/parallel/gloo_process_group.h>

namespace kiln::test {

struct RunRanksOptions {
  dist::Millis timeout = std::chrono::seconds(20);  // the Gloo timeout of each rank
  std::chrono::seconds guard = std::chrono::seconds(90);  // wall clock for all ranks together
};

// Inside a rank, failures are exceptions (doctest's checks live in the parent): the child prints
// the message and exits 1. A rank may also _exit() itself, e.g. to leave early on purpose.
inline void expect(bool cond, const std::string& what) {
  if (!cond) throw std::runtime_error(what);
}

// Every element of `t` within rtol of `expected` (exact for integer dtypes).
inline void expect_values(const Tensor& t, const std::vector<double>& expected, double rtol, const std::string& what) {
  std::vector<double> got = values(t);
  expect(got.size() == expected.size(), what + ": " + std::to_string(got.size()) + " values, expected " +
                                            std::to_string(expected.size()));
  for (size_t i = 0; i < got.size(); ++i)
    expect(std::fabs(got[i] - expected[i]) <= rtol * std::fabs(expected[i]),
           what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
               std::to_string(expected[i]));
}

inline void run_ranks(int n, const std::function<void(dist::ProcessGroup&)>& fn, RunRanksOptions options = {}) {
  char dir_template[] = "/tmp/kiln_test_ranks_XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  std::string dir = dir_template;
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    pid_t pid = ::fork();
    REQUIRE_MESSAGE(pid >= 0, "fork failed for rank ", rank);
    if (pid == 0) {
      int code = 0;
      try {
        auto store = dist::make_file_store(dir, n);
        auto pg = dist::make_gloo_process_group(store, rank, n, dist::GlooOptions().timeout(options.timeout));
        fn(*pg);
        pg->barrier()->wait();  // nobody tears down connections a peer still reads from
        pg.reset();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d of %d failed: %s\n", rank, n, e.what());
        code = 1;
      } catch (...) {
        std::fprintf(stderr, "rank %d of %d failed with a non-standard exception\n", rank, n);
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + options.guard;
  std::vector<int> status(n, -1);
  int running = n;
  while (running > 0) {
    for (int r = 0; r < n; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --running;
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r) {
        if (status[r] != -1) continue;
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], nullptr, 0);
        FAIL_CHECK("rank ", r, " of ", n, " hung: killed after ", options.guard.count(), " s");
        status[r] = -2;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; ++r) {
    int st = status[r];
    if (st == -2) continue;  // reported as hung above
    CHECK_MESSAGE((WIFEXITED(st) && WEXITSTATUS(st) == 0), "rank ", r, " of ", n, " ",
                  (WIFEXITED(st) ? "exited with code " + std::to_string(WEXITSTATUS(st))
                                 : "died of signal " + std::to_string(WTERMSIG(st))));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace kiln::test
