// MetricsWriter: the JSONL metrics file of every training app, one JSON object per line, safe
// across --resume (Note [Resume-safe metrics]).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::apps {

// Note [Resume-safe metrics]
// A run that is stopped or crashes after its last checkpoint has already logged steps past it;
// the resumed run logs them again. Appending would leave those lines twice (or stale ones from
// another trajectory), so a writer opened for a run resumed at step N truncates the file at its
// first line whose "step" exceeds N, keeping every byte before it (lines without a "step", such
// as train_gpt's "config" line, stay where they are), and appends from there. A last line cut off
// mid-write (no newline: the process died writing it) is dropped too; any other line that is not
// a JSON object is an error naming the file and the line. Each line is flushed as written.
class MetricsWriter {
 public:
  MetricsWriter() = default;  // writes nothing
  // An empty path writes nothing. resume_step <= 0: a fresh run, the file is emptied; N > 0: the
  // run resumed after optimizer step N, the file is cut as in the Note (created when missing).
  explicit MetricsWriter(const std::string& path, int64_t resume_step = 0);

  bool enabled() const { return out_.is_open(); }
  void write(const nlohmann::json& object);
  // The lines kept from before the resume, in file order (empty for a fresh run).
  const std::vector<nlohmann::json>& kept() const { return kept_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::vector<nlohmann::json> kept_;
};

}  // namespace kiln::apps
