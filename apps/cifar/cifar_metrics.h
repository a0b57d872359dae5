// Per-epoch metrics of train_cifar: the JSON object of one epoch (a line of the JSONL file that
// apps::MetricsWriter writes and scripts and tests read), and a small hand-written SVG plot of test
// accuracy per epoch (no plotting dependency).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
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

nlohmann::json to_json(const EpochMetrics& m);
// The epoch's progress line on stdout (flushed): "epoch 3/10  step 96  train loss ...  elapsed 0:01:02".
void print_epoch(const EpochMetrics& m, int64_t epochs);
// The inverse; a missing or mistyped field throws naming it.
EpochMetrics epoch_metrics_from_json(const nlohmann::json& j);

// The live progress line on a terminal (stderr, rewritten in place); `step` is 1-based within the epoch.
void print_progress(int64_t epoch, int64_t epochs, int64_t step, int64_t steps_per_epoch, double loss, double images_per_s,
                    double eta_s);

// The cursor a train_cifar checkpoint carries, and its inverse on --resume; a cursor of another app
// is an error naming `path`. "epoch=E elapsed=S": E epochs done, S seconds trained; a run stopped
// by a signal inside epoch E + 1 adds "batch=K loss_sum=L": its first K steps are done and their
// losses (each the mean over ranks) sum to L, so the resumed epoch's mean loss is the same.
struct EpochCursor {
  int64_t epoch = 0;
  double elapsed_s = 0;
  int64_t batch = 0;
  double loss_sum = 0;
};
std::string epoch_cursor(const EpochCursor& c);
EpochCursor parse_epoch_cursor(const std::string& cursor, const std::string& path);

// A 480x300 SVG: test accuracy (%) against epoch, with axes, ticks and the final value.
void write_accuracy_svg(const std::string& path, const std::vector<EpochMetrics>& history, const std::string& title);

}  // namespace kiln::apps
