// bench_gpt's tables (bench_tables.h).
#include "gpt/bench_tables.h"

#include <algorithm>
#include <cstdio>

#include "gpt/mfu.h"

namespace kiln::apps {

namespace {

// "-" for a side that reports no peak (PyTorch on the CPU has no allocator statistics).
std::string gib(int64_t bytes) {
  if (bytes <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, bytes < (int64_t(1) << 30) ? "%.3f" : "%.2f", double(bytes) / double(int64_t(1) << 30));
  return buf;
}

std::string b_x_t(const BenchRow& r) { return std::to_string(r.b) + " x " + std::to_string(r.t); }

}  // namespace

double median_step_ratio(const std::vector<double>& without, const std::vector<double>& with) {
  std::vector<double> ratios;
  for (size_t i = 0; i < without.size() && i < with.size(); ++i) ratios.push_back(with[i] / without[i]);
  std::sort(ratios.begin(), ratios.end());
  return ratios[ratios.size() / 2];
}

void print_sides_table(const std::vector<BenchRow>& rows, double peak) {
  std::printf("%-10s %12s %-14s %10s %12s %7s %9s %10s\n", "config", "B x T", "side", "ms/step", "tok/s", "MFU",
              "peak GiB", "kiln/this");
  for (const BenchRow& r : rows) {
    const double flops_tok = flops_per_token(r.bc.config, r.t);
    const Side& kiln = r.sides[0];
    for (const Side& s : r.sides) {
      if (!s.ran) {
        std::printf("%-10s %12s %-14s %s\n", r.bc.name.c_str(), b_x_t(r).c_str(), s.name.c_str(), s.error.c_str());
        continue;
      }
      const double tok_s = double(r.b * r.t) / s.seconds;
      char ratio[32] = "-";
      if (&s != &kiln && kiln.ran) std::snprintf(ratio, sizeof ratio, "%.2fx", kiln.seconds / s.seconds);
      std::printf("%-10s %12s %-14s %10.2f %12.0f %6.1f%% %9s %10s\n", r.bc.name.c_str(), b_x_t(r).c_str(),
                  s.name.c_str(), s.seconds * 1e3, tok_s, 100 * tok_s * flops_tok / peak,
                  gib(s.peak_bytes).c_str(), ratio);
    }
  }
}

void print_ddp_overhead_table(const std::vector<BenchRow>& rows, double goal) {
  std::printf("%-10s %12s %12s %12s %10s  goal <= %g%%\n", "config", "B x T", "no DDP ms", "DDP ms", "overhead",
              100 * goal);
  for (const BenchRow& r : rows) {
    const Side &plain = r.sides[0], &ddp = r.sides[1];
    if (!plain.ran || !ddp.ran) {
      std::printf("%-10s %12s %s\n", r.bc.name.c_str(), b_x_t(r).c_str(),
                  (!plain.ran ? "no DDP: " + plain.error : "DDP: " + ddp.error).c_str());
      continue;
    }
    const double overhead = median_step_ratio(plain.step_seconds, ddp.step_seconds) - 1.0;
    std::printf("%-10s %12s %12.2f %12.2f %+9.2f%%  %s\n", r.bc.name.c_str(), b_x_t(r).c_str(), plain.seconds * 1e3,
                ddp.seconds * 1e3, 100 * overhead, overhead <= goal ? "met" : "NOT met");
  }
  std::printf("(ms: median step; overhead: median over i of DDP step i / no-DDP step i, which ran side by side)\n");
}

void print_profile_overhead_header() {
  std::printf("%-10s %12s %10s %10s %10s %9s %11s %12s  %s\n", "config", "B x T", "off ms", "on ms", "on cost",
              "hooks", "ns/hook off", "off bound", "goal");
}

void print_profile_overhead_row(const std::string& name, const std::string& bt, const StepTiming& off,
                                const StepTiming& on, double range_ns, double goal) {
  if (!off.ok() || !on.ok()) {
    std::printf("%-10s %12s %s\n", name.c_str(), bt.c_str(), (!off.ok() ? off.error : on.error).c_str());
    return;
  }
  const double on_overhead = median_step_ratio(off.step_seconds, on.step_seconds) - 1.0;
  const double off_bound = double(on.events_per_step) * range_ns * 1e-9 / off.seconds;
  std::printf("%-10s %12s %10.2f %10.2f %+9.2f%% %9lld %11.2f %11.4f%%  %s (<= %g%%)\n", name.c_str(), bt.c_str(),
              off.seconds * 1e3, on.seconds * 1e3, 100 * on_overhead, (long long)on.events_per_step, range_ns,
              100 * off_bound, off_bound <= goal ? "met" : "NOT met", 100 * goal);
}

void print_sharding_table(const std::vector<ShardingTiming>& rows) {
  double ddp_seconds = 0;
  for (const auto& r : rows)
    if (r.mode == dist::Sharding::none && r.error.empty()) ddp_seconds = r.seconds;
  std::printf("%-8s %10s %10s %14s\n", "mode", "ms/step", "vs DDP", "bytes/param");
  for (const auto& r : rows) {
    if (!r.error.empty()) {
      std::printf("%-8s %s\n", dist::sharding_name(r.mode), r.error.c_str());
      continue;
    }
    char ratio[32] = "-";
    if (ddp_seconds > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", r.seconds / ddp_seconds);
    std::printf("%-8s %10.2f %10s %14.2f\n", dist::sharding_name(r.mode), r.seconds * 1e3, ratio, r.bytes_per_param);
  }
  std::printf("(bytes/param: rank 0's CPU allocator, live bytes after a step above the pre-model baseline)\n");
}

}  // namespace kiln::apps
