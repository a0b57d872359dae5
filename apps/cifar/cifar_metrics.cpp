// The per-epoch JSON record and the SVG accuracy plot of train_cifar (see cifar_metrics.h).
#include "cifar_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <kiln/core/error.h>

#include "common/duration.h"
#include "common/text_file.h"

namespace kiln::apps {

nlohmann::json to_json(const EpochMetrics& m) {
  return {{"epoch", m.epoch},
          {"step", m.step},
          {"train_loss", m.train_loss},
          {"test_accuracy", m.test_accuracy},
          {"test_correct", m.test_correct},
          {"test_total", m.test_total},
          {"images_per_s", m.images_per_s},
          {"elapsed_s", m.elapsed_s},
          {"lr", m.lr}};
}

void print_epoch(const EpochMetrics& m, int64_t epochs) {
  std::printf("epoch %lld/%lld  step %lld  train loss %.4f  test acc %.2f%%  %.0f img/s  elapsed %s\n",
              (long long)m.epoch, (long long)epochs, (long long)m.step, m.train_loss, 100.0 * m.test_accuracy,
              m.images_per_s, format_duration(m.elapsed_s, DurationStyle::clock).c_str());
  std::fflush(stdout);
}

EpochMetrics epoch_metrics_from_json(const nlohmann::json& j) {
  EpochMetrics m;
  m.epoch = j.at("epoch").get<int64_t>();
  m.step = j.at("step").get<int64_t>();
  m.train_loss = j.at("train_loss").get<double>();
  m.test_accuracy = j.at("test_accuracy").get<double>();
  m.test_correct = j.at("test_correct").get<int64_t>();
  m.test_total = j.at("test_total").get<int64_t>();
  m.images_per_s = j.at("images_per_s").get<double>();
  m.elapsed_s = j.at("elapsed_s").get<double>();
  m.lr = j.at("lr").get<double>();
  return m;
}

void write_accuracy_svg(const std::string& path, const std::vector<EpochMetrics>& history, const std::string& title) {
  constexpr double kW = 480, kH = 300, kLeft = 50, kRight = 20, kTop = 30, kBottom = 40;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  int64_t last_epoch = 1;
  for (const EpochMetrics& m : history) last_epoch = std::max(last_epoch, m.epoch);
  auto x_of = [&](double epoch) { return kLeft + pw * epoch / double(last_epoch); };
  auto y_of = [&](double acc) { return kTop + ph * (1.0 - acc); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kW / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">" << title << "</text>\n";
  for (int pct = 0; pct <= 100; pct += 20) {  // horizontal grid lines and y labels
    double y = y_of(pct / 100.0);
    s << "<line x1=\"" << kLeft << "\" y1=\"" << y << "\" x2=\"" << kLeft + pw << "\" y2=\"" << y
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << pct
      << "%</text>\n";
  }
  const int64_t tick = std::max<int64_t>(1, (last_epoch + 9) / 10);
  for (int64_t e = 0; e <= last_epoch; e += tick)
    s << "<text x=\"" << x_of(double(e)) << "\" y=\"" << kTop + ph + 16 << "\" text-anchor=\"middle\">" << e
      << "</text>\n";
  s << "<line x1=\"" << kLeft << "\" y1=\"" << kTop + ph << "\" x2=\"" << kLeft + pw << "\" y2=\"" << kTop + ph
    << "\" stroke=\"black\"/>\n<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\""
    << kTop + ph << "\" stroke=\"black\"/>\n"
    << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kH - 6 << "\" text-anchor=\"middle\">epoch</text>\n";
  if (!history.empty()) {
    s << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"";
    for (const EpochMetrics& m : history) s << x_of(double(m.epoch)) << ',' << y_of(m.test_accuracy) << ' ';
    s << "\"/>\n";
    for (const EpochMetrics& m : history)
      s << "<circle cx=\"" << x_of(double(m.epoch)) << "\" cy=\"" << y_of(m.test_accuracy)
        << "\" r=\"2.5\" fill=\"#1f77b4\"/>\n";
    const EpochMetrics& last = history.back();
    char label[64];
    std::snprintf(label, sizeof label, "%.2f%%", 100.0 * last.test_accuracy);
    s << "<text x=\"" << x_of(double(last.epoch)) - 4 << "\" y=\"" << y_of(last.test_accuracy) + 16
      << "\" text-anchor=\"end\" fill=\"#1f77b4\">test accuracy " << label << "</text>\n";
  }
  s << "</svg>\n";
  write_text_file(path, s.str(), "the accuracy plot");
}

void print_progress(int64_t epoch, int64_t epochs, int64_t step, int64_t steps_per_epoch, double loss, double images_per_s,
                    double eta_s) {
  std::fprintf(stderr, "\repoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f img/s  ETA %s   ", (long long)epoch,
               (long long)epochs, (long long)step, (long long)steps_per_epoch, loss, images_per_s,
               format_duration(eta_s, DurationStyle::clock).c_str());
  std::fflush(stderr);
}

std::string epoch_cursor(const EpochCursor& c) {
  char cursor[160];
  if (c.batch == 0)
    std::snprintf(cursor, sizeof cursor, "epoch=%lld elapsed=%.17g", (long long)c.epoch, c.elapsed_s);
  else
    std::snprintf(cursor, sizeof cursor, "epoch=%lld elapsed=%.17g batch=%lld loss_sum=%.17g", (long long)c.epoch,
                  c.elapsed_s, (long long)c.batch, c.loss_sum);
  return cursor;
}

EpochCursor parse_epoch_cursor(const std::string& cursor, const std::string& path) {
  long long epoch = 0, batch = 0;
  EpochCursor c;
  const int n = std::sscanf(cursor.c_str(), "epoch=%lld elapsed=%lf batch=%lld loss_sum=%lf", &epoch, &c.elapsed_s,
                            &batch, &c.loss_sum);
  KILN_CHECK(n == 2 || n == 4, "checkpoint ", path, " has no train_cifar cursor (found '", cursor, "')");
  c.epoch = epoch;
  c.batch = batch;
  return c;
}

}  // namespace kiln::apps
