// format_duration (see duration.h).
#include "duration.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace kiln::apps {

std::string format_duration(double seconds, DurationStyle style) {
  if (!std::isfinite(seconds)) return "?";
  char buf[32];
  if (style == DurationStyle::clock) {
    const auto t = static_cast<long long>(std::max(0.0, seconds));
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
    return buf;
  }
  if (seconds < 0) return "?";
  const auto s = static_cast<long long>(std::llround(seconds));
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%llds", s);
  return buf;
}

}  // namespace kiln::apps
