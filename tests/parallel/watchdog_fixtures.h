// Helpers of the watchdog tests: ranks forked with a body that owns its process group (so the
// test sees how long destruction takes after a failure), scoped environment variables, and the
// flight-recorder dump read back as JSON.
#pragma once

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace kiln::test {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// Sets an environment variable for the scope (forked ranks inherit it).
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

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

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The path after "flight recorder: " in a failure message ("" when absent).
inline std::string dump_path_in(const std::string& message) {
  const std::string tag = "flight recorder: ";
  auto at = message.rfind(tag);
  if (at == std::string::npos) return "";
  std::string path = message.substr(at + tag.size());
  auto end = path.find_first_of(" \n;");
  return end == std::string::npos ? path : path.substr(0, end);
}

// Every line of a dump, parsed (throws nlohmann::json::parse_error on a malformed line).
inline std::vector<nlohmann::json> read_dump(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "no flight recorder dump at ", path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The record of `seq` in a dump's lines (null json when absent).
inline nlohmann::json record_of(const std::vector<nlohmann::json>& lines, uint64_t seq) {
  for (size_t i = 1; i < lines.size(); ++i)
    if (lines[i].value("seq", uint64_t(-1)) == seq) return lines[i];
  return nullptr;
}

}  // namespace kiln::test
