// format_duration: how every app prints an elapsed time or an ETA.
#pragma once

#include <string>

namespace kiln::apps {

enum class DurationStyle {
  compact,  // "1h02m", "3m05s", "42s" (rounded to the second); "?" when negative or not finite
  clock,    // "1:02:05" (whole seconds, truncated; negative as 0:00:00); "?" when not finite
};

std::string format_duration(double seconds, DurationStyle style = DurationStyle::compact);

}  // namespace kiln::apps
