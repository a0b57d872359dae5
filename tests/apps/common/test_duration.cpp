// format_duration: both styles the apps print (train_gpt's compact ETA, train_cifar's clock),
// their rounding, and the values that have no duration.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "common/duration.h"

using kiln::apps::DurationStyle;
using kiln::apps::format_duration;

TEST_CASE("compact: seconds, minutes, hours; rounded to the second") {
  CHECK(format_duration(0) == "0s");
  CHECK(format_duration(42.4) == "42s");
  CHECK(format_duration(59.6) == "1m00s");
  CHECK(format_duration(185) == "3m05s");
  CHECK(format_duration(3600 + 2 * 60 + 29) == "1h02m");
  CHECK(format_duration(100 * 3600.0) == "100h00m");
}

TEST_CASE("clock: H:MM:SS, truncated to the second") {
  CHECK(format_duration(0, DurationStyle::clock) == "0:00:00");
  CHECK(format_duration(59.9, DurationStyle::clock) == "0:00:59");
  CHECK(format_duration(3725, DurationStyle::clock) == "1:02:05");
  CHECK(format_duration(36 * 3600 + 1, DurationStyle::clock) == "36:00:01");
}

TEST_CASE("no duration: negative and non-finite values") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  CHECK(format_duration(-1) == "?");
  CHECK(format_duration(inf) == "?");
  CHECK(format_duration(nan) == "?");
  CHECK(format_duration(-5, DurationStyle::clock) == "0:00:00");
  CHECK(format_duration(inf, DurationStyle::clock) == "?");
  CHECK(format_duration(nan, DurationStyle::clock) == "?");
}
