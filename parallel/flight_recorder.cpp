// FlightRecorder: a ring of the last collectives of a group and its JSON-lines dump.
#include <kiln/parallel/flight_recorder.h>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <kiln/core/error.h>

namespace kiln::dist {

const char* state_name(CollectiveState state) {
  switch (state) {
    case CollectiveState::enqueued: return "enqueued";
    case CollectiveState::started: return "started";
    case CollectiveState::completed: return "completed";
    case CollectiveState::failed: return "failed";
  }
  return "unknown";
}

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

FlightRecorder::FlightRecorder(size_t capacity) : slots_(capacity), used_(capacity, false) {}

size_t FlightRecorder::capacity_from_env() {
  const char* v = std::getenv("KILN_FLIGHT_RECORDER_ENTRIES");
  if (v == nullptr || *v == '\0') return 1024;
  size_t n = 0;
  const char* end = v + std::char_traits<char>::length(v);
  auto [ptr, ec] = std::from_chars(v, end, n);
  KILN_CHECK(ec == std::errc() && ptr == end, "environment variable KILN_FLIGHT_RECORDER_ENTRIES=\"", v,
             "\" is not a count of entries (0 turns the flight recorder off)");
  return n;
}

void FlightRecorder::enqueued(uint64_t seq, const char* op, DType dtype, int64_t numel_in, int64_t numel_out) {
  if (slots_.empty()) return;
  CollectiveRecord r;
  r.seq = seq;
  r.op = op;
  r.dtype = dtype;
  r.numel_in = numel_in;
  r.numel_out = numel_out;
  r.enqueued_us = wall_clock_us();
  std::lock_guard<std::mutex> lock(mutex_);
  slots_[seq % slots_.size()] = r;
  used_[seq % slots_.size()] = true;
}

void FlightRecorder::set_state(uint64_t seq, CollectiveState state, int64_t CollectiveRecord::*stamp) {
  if (slots_.empty()) return;
  const int64_t now = wall_clock_us();
  std::lock_guard<std::mutex> lock(mutex_);
  CollectiveRecord& r = slots_[seq % slots_.size()];
  if (!used_[seq % slots_.size()] || r.seq != seq) return;
  r.state = state;
  if (stamp != nullptr) r.*stamp = now;
}

void FlightRecorder::started(uint64_t seq) { set_state(seq, CollectiveState::started, &CollectiveRecord::started_us); }
void FlightRecorder::completed(uint64_t seq) {
  set_state(seq, CollectiveState::completed, &CollectiveRecord::completed_us);
}
void FlightRecorder::failed(uint64_t seq) { set_state(seq, CollectiveState::failed, nullptr); }

std::vector<CollectiveRecord> FlightRecorder::records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CollectiveRecord> out;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (used_[i]) out.push_back(slots_[i]);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return out;
}

// `text` as a JSON string (invalid UTF-8 replaced, never thrown: a dump must not fail).
std::string json_quote(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string to_json(const CollectiveRecord& r) {
  auto stamp = [](int64_t us) { return us == 0 ? std::string("null") : std::to_string(us); };
  return detail::str_cat("{\"seq\":", r.seq, ",\"op\":", json_quote(r.op), ",\"dtype\":", json_quote(dtype_name(r.dtype)),
                         ",\"numel_in\":", r.numel_in, ",\"numel_out\":", r.numel_out, ",\"state\":\"",
                         state_name(r.state), "\",\"enqueued_us\":", stamp(r.enqueued_us),
                         ",\"started_us\":", stamp(r.started_us), ",\"completed_us\":", stamp(r.completed_us), "}");
}

void FlightRecorder::dump(const std::string& path, const std::string& header_json) const {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    KILN_CHECK_IO(out.good(), "flight recorder: cannot write ", tmp, " (set KILN_FLIGHT_RECORDER_DIR to a writable "
                  "directory)");
    out << header_json << '\n';
    for (const CollectiveRecord& r : records()) out << to_json(r) << '\n';
    out.flush();
    KILN_CHECK_IO(out.good(), "flight recorder: writing ", tmp, " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  KILN_CHECK_IO(!ec, "flight recorder: cannot rename ", tmp, " to ", path, ": ", ec.message());
}

std::string flight_recorder_dir() {
  const char* v = std::getenv("KILN_FLIGHT_RECORDER_DIR");
  if (v != nullptr && *v != '\0') return v;
  std::error_code ec;
  auto tmp = std::filesystem::temp_directory_path(ec);
  return ec ? std::string("/tmp") : tmp.string();
}

}  // namespace kiln::dist
