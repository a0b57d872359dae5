// What train_gpt reports while it runs: the progress lines and the JSONL metrics of the main rank
// (TrainReport), the entropy floor kiln-make-shards leaves next to synthetic shards, and the SVG
// loss curve drawn at the end (the MFU estimate is mfu.h, shared with bench_gpt). Kept apart from
// the training loop so train_gpt.cpp reads as the loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <kiln/parallel/trainer.h>

#include "common/metrics_writer.h"

namespace kiln::apps {

// The floor in nats/token from `dir`/floor.txt (its first number), or nullopt when there is no
// such file. `pattern` is a shard glob; its directory part is the directory looked in.
std::optional<double> read_entropy_floor(const std::string& pattern);

struct TrainPoint {
  int64_t step;
  double loss;
};

// One logged optimizer step as train_gpt prints and records it.
struct TrainLine {
  int64_t step = 0;             // 1-based: steps done
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, mfu = 0;
  bool skipped = false;         // this step's update was skipped (f16 overflow)
  int64_t skipped_steps = 0;    // ... and how many were since the last line
};

// The steps since the last log line: their tokens and time (for tokens/s) and, under f16, how many
// were skipped, counted on the device so that nothing reads it before the line (Note [Trainer host
// reads]).
class LogWindow {
 public:
  void add(const dist::StepStats& s);
  // Fills line.tokens_per_s and line.skipped_steps (one host read under f16), then starts over.
  void fill(TrainLine& line);

 private:
  double seconds_ = 0;
  int64_t tokens_ = 0;
  Tensor skipped_;  // 0-dim f32 on the device; undefined without f16
};

// The main rank's reporting; on other ranks (main = false) every call does nothing. The JSONL
// lines: "config" (written by start), "train" and "eval", each with elapsed_s since construction.
class TrainReport {
 public:
  TrainReport(bool main, int64_t steps, std::optional<double> floor, MetricsWriter metrics);
  void start(nlohmann::json config_line);  // the "config" line (entropy_floor added when known)
  void train(const TrainLine& line, double eta_seconds);
  void eval(int64_t step, double val_loss);
  void finish(int64_t done, const std::string& loss_svg);  // the last line, and the SVG when asked
  double elapsed() const;

 private:
  bool main_;
  int64_t steps_;
  std::optional<double> floor_;
  std::string floor_text_;  // " (floor 3.4700)" or ""
  MetricsWriter metrics_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::vector<TrainPoint> train_curve_, val_curve_;
};

// A hand-written SVG: the training loss (blue), the validation loss (orange dots) and the entropy
// floor (dashed) against the step, with the axes' ranges labelled.
void write_loss_svg(const std::string& path, const std::vector<TrainPoint>& train, const std::vector<TrainPoint>& val,
                    std::optional<double> floor);

}  // namespace kiln::apps
