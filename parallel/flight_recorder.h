// FlightRecorder: the last N collectives of one process group (PyTorch's NCCL flight recorder):
// what each was (sequence number, op, element counts, dtype), how far it got (enqueued, started,
// completed, failed) and when. Cheap enough for every collective (one short lock per state
// change, slots reused in a ring); dumped as JSON lines when the group fails (watchdog.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <kiln/core/dtype.h>

namespace kiln::dist {

enum class CollectiveState { enqueued, started, completed, failed };
const char* state_name(CollectiveState state);

/// One collective in the flight recorder: what it was, how far it got and when.
struct CollectiveRecord {
  uint64_t seq = 0;
  const char* op = "";  ///< a string literal ("allreduce", ...)
  DType dtype = DType::f32;
  int64_t numel_in = 0, numel_out = 0;  ///< elements of the input and output tensors (0: none)
  CollectiveState state = CollectiveState::enqueued;
  /// Wall clock, microseconds since the Unix epoch (comparable across ranks); 0: not reached.
  int64_t enqueued_us = 0, started_us = 0, completed_us = 0;
};

/// Microseconds since the Unix epoch.
int64_t wall_clock_us();

/// Thread-safe. Sequence numbers of one group are consecutive, so record `seq` lives in slot
/// seq % capacity; a state change for a record already overwritten is ignored.
class FlightRecorder {
 public:
  /// `capacity` 0 records nothing (dump still writes the header).
  explicit FlightRecorder(size_t capacity);
  /// KILN_FLIGHT_RECORDER_ENTRIES, default 1024 (0 turns recording off).
  static size_t capacity_from_env();

  void enqueued(uint64_t seq, const char* op, DType dtype, int64_t numel_in, int64_t numel_out);
  void started(uint64_t seq);
  void completed(uint64_t seq);
  void failed(uint64_t seq);  ///< the collective that failed (later ones stay enqueued)

  size_t capacity() const { return slots_.size(); }
  /// The records kept, oldest first.
  std::vector<CollectiveRecord> records() const;
  /// One JSON object per line: `header_json` (an object, without newline) and then every record,
  /// oldest first. Writes to a temporary name and renames, so a reader never sees half a dump.
  /// Throws IOError naming the path.
  void dump(const std::string& path, const std::string& header_json) const;

 private:
  void set_state(uint64_t seq, CollectiveState state, int64_t CollectiveRecord::*stamp);

  mutable std::mutex mutex_;
  std::vector<CollectiveRecord> slots_;
  std::vector<bool> used_;
};

/// One record as a JSON object (no newline): {"seq":5,"op":"allreduce","dtype":"f32",...}.
std::string to_json(const CollectiveRecord& record);
/// `text` as a JSON string literal, quotes included.
std::string json_quote(const std::string& text);

/// Where dumps go: KILN_FLIGHT_RECORDER_DIR, else the system's temporary directory ($TMPDIR, else /tmp).
std::string flight_recorder_dir();

}  // namespace kiln::dist
