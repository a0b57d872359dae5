// train_gpt's reporting (see report.h): the floor file, the progress lines and metrics, and the
// SVG loss curve.
#include "report.h"

#include <kiln/core/ops/ops.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <kiln/core/error.h>

#include "common/duration.h"
#include "common/text_file.h"

namespace kiln::apps {

std::optional<double> read_entropy_floor(const std::string& pattern) {
  std::filesystem::path dir = std::filesystem::path(pattern).parent_path();
  if (dir.empty()) dir = ".";
  std::ifstream in(dir / "floor.txt");
  double floor = 0;
  if (!(in >> floor)) return std::nullopt;
  return floor;
}

TrainReport::TrainReport(bool main, int64_t steps, std::optional<double> floor, MetricsWriter metrics)
    : main_(main), steps_(steps), floor_(floor), metrics_(std::move(metrics)) {
  char text[48] = "";
  if (floor_) std::snprintf(text, sizeof text, " (floor %.4f)", *floor_);
  floor_text_ = text;
}

double TrainReport::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void TrainReport::start(nlohmann::json config_line) {
  if (!main_) return;
  if (floor_) config_line["entropy_floor"] = *floor_;
  metrics_.write(config_line);
  std::fflush(stdout);
  start_ = std::chrono::steady_clock::now();  // elapsed_s counts the training, not the setup
}

void TrainReport::train(const TrainLine& l, double eta_seconds) {
  if (!main_) return;
  char skipped_text[48] = "";
  if (l.skipped_steps > 0) std::snprintf(skipped_text, sizeof skipped_text, " | skipped %lld", (long long)l.skipped_steps);
  std::printf("step %5lld/%lld | loss %.4f%s | lr %.2e | norm %.3f%s | %.0f tok/s | mfu %.1f%% | eta %s\n",
              (long long)l.step, (long long)steps_, l.loss, floor_text_.c_str(), l.lr, l.grad_norm, skipped_text,
              l.tokens_per_s, 100 * l.mfu, format_duration(eta_seconds).c_str());
  std::fflush(stdout);
  train_curve_.push_back({l.step, l.loss});
  nlohmann::json line = {{"type", "train"}, {"step", l.step},         {"loss", l.loss},
                         {"lr", l.lr},      {"tokens_per_s", l.tokens_per_s}, {"mfu", l.mfu},
                         {"grad_norm", l.grad_norm}, {"elapsed_s", elapsed()}};
  if (l.skipped) line["skipped"] = true;
  if (l.skipped_steps > 0) line["skipped_steps"] = l.skipped_steps;
  metrics_.write(line);
}

void TrainReport::eval(int64_t step, double val_loss) {
  if (!main_) return;
  std::printf("step %5lld/%lld | val loss %.4f%s\n", (long long)step, (long long)steps_, val_loss, floor_text_.c_str());
  std::fflush(stdout);
  val_curve_.push_back({step, val_loss});
  metrics_.write({{"type", "eval"}, {"step", step}, {"val_loss", val_loss}, {"elapsed_s", elapsed()}});
}

void TrainReport::finish(int64_t done, const std::string& loss_svg) {
  if (!main_) return;
  std::printf("%s step %lld in %s\n", done == steps_ ? "finished at" : "stopped after", (long long)done,
              format_duration(elapsed()).c_str());
  if (!loss_svg.empty()) write_loss_svg(loss_svg, train_curve_, val_curve_, floor_);
}

namespace {

constexpr double kWidth = 640, kHeight = 400, kLeft = 60, kRight = 20, kTop = 30, kBottom = 45;

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

void write_loss_svg(const std::string& path, const std::vector<TrainPoint>& train, const std::vector<TrainPoint>& val,
                    std::optional<double> floor) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto extend = [&](const std::vector<TrainPoint>& pts) {
    for (const auto& p : pts) {
      if (!std::isfinite(p.loss)) continue;
      x0 = std::min(x0, double(p.step)), x1 = std::max(x1, double(p.step));
      y0 = std::min(y0, p.loss), y1 = std::max(y1, p.loss);
    }
  };
  extend(train);
  extend(val);
  if (floor) y0 = std::min(y0, *floor), y1 = std::max(y1, *floor);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kWidth - kLeft - kRight); };
  auto py = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * (kHeight - kTop - kBottom); };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kLeft << "\" y=\"18\">train_gpt loss (nats/token)</text>\n"
      << "<line x1=\"" << kLeft << "\" y1=\"" << py(y0) << "\" x2=\"" << kWidth - kRight << "\" y2=\"" << py(y0)
      << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << kLeft << "\" y1=\"" << py(y0) << "\" x2=\"" << kLeft << "\" y2=\"" << py(y1)
      << "\" stroke=\"black\"/>\n";
  for (double y : {y0 + pad, y1 - pad})
    svg << "<text x=\"" << kLeft - 5 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">" << number(y) << "</text>\n";
  for (double x : {x0, x1})
    svg << "<text x=\"" << px(x) << "\" y=\"" << kHeight - kBottom + 16 << "\" text-anchor=\"middle\">" << number(x)
        << "</text>\n";
  svg << "<text x=\"" << (kLeft + kWidth - kRight) / 2 << "\" y=\"" << kHeight - 8
      << "\" text-anchor=\"middle\">step</text>\n";
  if (floor)
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << py(*floor) << "\" x2=\"" << kWidth - kRight << "\" y2=\""
        << py(*floor) << "\" stroke=\"gray\" stroke-dasharray=\"6,4\"/>\n"
        << "<text x=\"" << kWidth - kRight << "\" y=\"" << py(*floor) - 4
        << "\" text-anchor=\"end\" fill=\"gray\">entropy floor " << number(*floor) << "</text>\n";
  svg << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
  for (const auto& p : train)
    if (std::isfinite(p.loss)) svg << px(double(p.step)) << ',' << py(p.loss) << ' ';
  svg << "\"/>\n";
  for (const auto& p : val)
    if (std::isfinite(p.loss))
      svg << "<circle cx=\"" << px(double(p.step)) << "\" cy=\"" << py(p.loss) << "\" r=\"3\" fill=\"#ff7f0e\"/>\n";
  svg << "<text x=\"" << kWidth - kRight << "\" y=\"18\" text-anchor=\"end\"><tspan fill=\"#1f77b4\">train</tspan>"
      << " <tspan fill=\"#ff7f0e\">val</tspan></text>\n</svg>\n";

  write_text_file(path, svg.str(), "the loss curve");
}

void LogWindow::add(const dist::StepStats& s) {
  seconds_ += s.seconds;
  tokens_ += s.items;
  // A copy, not s.found_inf itself: under a CUDA graph it is the graph's output, rewritten next step.
  if (s.found_inf.defined()) skipped_ = skipped_.defined() ? ops::add(skipped_, s.found_inf) : s.found_inf.clone();
}

void LogWindow::fill(TrainLine& line) {
  line.tokens_per_s = seconds_ > 0 ? double(tokens_) / seconds_ : 0;
  line.skipped_steps = skipped_.defined() ? static_cast<int64_t>(skipped_.item()) : 0;
  *this = LogWindow();
}

}  // namespace kiln::apps
