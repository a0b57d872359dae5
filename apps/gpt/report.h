// What train_gpt reports while it runs: the progress line, the JSONL metrics file, the entropy
// floor kiln-make-shards leaves next to synthetic shards, and the SVG loss curve drawn at the end
// (the MFU estimate is mfu.h, shared with bench_gpt). Kept apart from the training loop so
// train_gpt.cpp reads as the loop.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace kiln::apps {

// The floor in nats/token from `dir`/floor.txt (its first number), or nullopt when there is no
// such file. `pattern` is a shard glob; its directory part is the directory looked in.
std::optional<double> read_entropy_floor(const std::string& pattern);

// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds);

struct TrainPoint {
  int64_t step;
  double loss;
};

// One JSON object per line, flushed as written (a crashed run keeps every line it reached).
// Opened for appending on resume, so a resumed run continues the same file.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  MetricsWriter(const std::string& path, bool append);
  bool enabled() const { return out_.is_open(); }
  void write_line(const std::string& json_object);

 private:
  std::ofstream out_;
  std::string path_;
};

// A hand-written SVG: the training loss (blue), the validation loss (orange dots) and the entropy
// floor (dashed) against the step, with the axes' ranges labelled.
void write_loss_svg(const std::string& path, const std::vector<TrainPoint>& train, const std::vector<TrainPoint>& val,
                    std::optional<double> floor);

}  // namespace kiln::apps
