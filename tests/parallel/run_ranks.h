// Multi-process test harness: run_ranks(n, fn) runs fn(pg) on n forked ranks with a Gloo group
// (dist::spawn_ranks) and checks every exit code, reporting a rank that outlived the wall-clock
// guard (and was killed).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

#include <kiln/parallel/spawn.h>

namespace kiln::test {

struct RunRanksOptions {
  dist::Millis timeout = std::chrono::seconds(20);  // the store and Gloo timeout of each rank
  std::chrono::seconds guard = std::chrono::seconds(90);  // wall clock for all ranks together
};

// Inside a rank, failures are exceptions (doctest's checks live in the parent): the child prints
// the message and exits 1. A rank may also _exit() itself, e.g. to leave early on purpose.
inline void expect(bool cond, const std::string& what) {
  if (!cond) throw std::runtime_error(what);
}

// Every element of `t` within rtol * |expected| + atol of `expected` (exact with rtol = atol = 0).
inline void expect_values(const Tensor& t, const std::vector<double>& expected, double rtol, const std::string& what,
                          double atol = 0) {
  std::vector<double> got = values(t);
  expect(got.size() == expected.size(), what + ": " + std::to_string(got.size()) + " values, expected " +
                                            std::to_string(expected.size()));
  for (size_t i = 0; i < got.size(); ++i)
    expect(std::fabs(got[i] - expected[i]) <= rtol * std::fabs(expected[i]) + atol,
           what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
               std::to_string(expected[i]));
}

inline void run_ranks(int n, const std::function<void(dist::ProcessGroup&)>& fn, RunRanksOptions options = {}) {
  const std::vector<dist::RankExit> exits =
      dist::spawn_ranks(n, fn, dist::SpawnOptions().timeout(options.timeout).guard(options.guard));
  for (int r = 0; r < n; ++r) {
    if (exits[r].hung)
      FAIL_CHECK("rank ", r, " of ", n, " hung: killed after ", options.guard.count(), " s");
    else
      CHECK_MESSAGE(exits[r].ok(), "rank ", r, " of ", n, " ", exits[r].describe());
  }
}

// run_ranks(n, fn) for each world size n in `worlds` (fresh ranks each time).
inline void run_worlds(std::initializer_list<int> worlds, const std::function<void(dist::ProcessGroup&)>& fn,
                       RunRanksOptions options = {}) {
  for (int n : worlds) {
    CAPTURE(n);
    run_ranks(n, fn, options);
  }
}

}  // namespace kiln::test
