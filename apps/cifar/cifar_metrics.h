// Per-epoch metrics of train_cifar: one JSON object per line (JSONL) that scripts and tests read,
// and a small hand-written SVG plot of test accuracy per epoch (no plotting dependency).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::apps {

struct EpochMetrics {
  int64_t epoch = 0;          // 1-based: the number of epochs completed
  int64_t step = 0;           // optimizer steps completed
  double train_loss = 0;      // mean over the epoch's steps and ranks (label-smoothed loss)
  double test_accuracy = 0;   // fraction in [0, 1]
  int64_t test_correct = 0;
  int64_t test_total = 0;
  double images_per_s = 0;    // training images (all ranks) / training seconds of the epoch
  double elapsed_s = 0;       // wall time since the run started (summed over resumed runs)
  double lr = 0;              // lr after the epoch's last step
};

std::string to_json_line(const EpochMetrics& m);
EpochMetrics from_json_line(const std::string& line);

// Reads a metrics file; a missing file gives an empty list, a malformed line throws naming it.
std::vector<EpochMetrics> read_metrics(const std::string& path);

// Appends lines to a metrics file. With `keep_epochs` >= 0 (a resumed run) the file is first
// rewritten with only its entries of epoch <= keep_epochs, which are returned by history();
// otherwise it is truncated. An empty path writes nothing.
class MetricsLog {
 public:
  MetricsLog(std::string path, int64_t keep_epochs);
  void append(const EpochMetrics& m);
  const std::vector<EpochMetrics>& history() const { return history_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::vector<EpochMetrics> history_;
};

// A 480x300 SVG: test accuracy (%) against epoch, with axes, ticks and the final value.
void write_accuracy_svg(const std::string& path, const std::vector<EpochMetrics>& history, const std::string& title);

}  // namespace kiln::apps
