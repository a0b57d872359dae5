// train_gpt's reporting helpers (see report.h): the floor file, durations, the JSONL writer and
// the SVG loss curve.
#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include <kiln/core/error.h>

namespace kiln::apps {

std::optional<double> read_entropy_floor(const std::string& pattern) {
  std::filesystem::path dir = std::filesystem::path(pattern).parent_path();
  if (dir.empty()) dir = ".";
  std::ifstream in(dir / "floor.txt");
  double floor = 0;
  if (!(in >> floor)) return std::nullopt;
  return floor;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else std::snprintf(buf, sizeof buf, "%llds", (long long)s);
  return buf;
}

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc), path_(path) {
  KILN_CHECK(out_.is_open(), "cannot open the metrics file ", path);
}

void MetricsWriter::write_line(const std::string& json_object) {
  if (!out_.is_open()) return;
  out_ << json_object << '\n';
  out_.flush();
  KILN_CHECK(out_.good(), "writing the metrics file ", path_, " failed");
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

  std::ofstream out(path, std::ios::trunc);
  out << svg.str();
  KILN_CHECK(out.good(), "cannot write the loss curve ", path);
}

}  // namespace kiln::apps
