// Helpers of the watchdog tests (with fork_ranks.h, whose ranks own their process group, so the
// test sees how long destruction takes after a failure): scoped environment variables, a test's
// directory with its injected fault, a failure timed, and the flight-recorder dump read back as JSON.
#pragma once

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/error.h>

#include "caught.h"
#include "parallel/fork_ranks.h"
#include "parallel/temp_dir.h"

namespace kiln::test {

inline bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

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

// A watchdog test's fresh directory: it receives the flight-recorder dumps (KILN_FLIGHT_RECORDER_DIR,
// when `record`) and holds the file store's directory; KILN_FAULT_INJECT is `fault` (none when "").
struct FaultScope {
  explicit FaultScope(const std::string& name, const std::string& fault = "", bool record = true) : dir(name) {
    REQUIRE(::mkdir(store_dir().c_str(), 0755) == 0);
    if (record) recorder.emplace("KILN_FLIGHT_RECORDER_DIR", dir.path);
    if (!fault.empty()) injected.emplace("KILN_FAULT_INJECT", fault);
  }
  std::string store_dir() const { return dir.path + "/store"; }

  TempDir dir;
  std::optional<ScopedEnv> recorder, injected;
};

// What a call that should fail gave: the DistributedError's message ("" when it threw none) and
// how long the call took, in seconds.
struct Failure {
  std::string message;
  double seconds = -1;
};

inline Failure failure_of(const std::function<void()>& fn) {
  const auto t0 = SteadyClock::now();
  std::string message = caught<DistributedError>(fn);
  return Failure{std::move(message), seconds_since(t0)};
}

// A one-rank group's collective 2 (`op`, e.g. "Gloo allreduce") held past its `timeout_ms`: the
// failure names it, the timeout and this rank as the one that did not reach it, and came after
// `min_s` but before `max_s` seconds.
inline void check_one_rank_timeout(const Failure& f, const std::string& op, int timeout_ms, double min_s, double max_s) {
  INFO(f.message);
  CHECK(contains(f.message, op + " (sequence number 2) failed on rank 0 of 1"));
  CHECK(contains(f.message, "timed out after " + std::to_string(timeout_ms) + " ms"));
  CHECK(contains(f.message, "not reached by rank 0 (this rank, last started sequence number 1)"));
  CHECK(f.seconds >= min_s);
  CHECK(f.seconds < max_s);
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
