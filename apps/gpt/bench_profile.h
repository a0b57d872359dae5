// bench_gpt --profile-overhead: what the profiler costs a GPT step. On: the same step with and
// without a recording session, two models stepped in turn. Off: every hook is a disabled
// profiler::Range (Note [Profiler cost when off]); its measured cost times the hooks a step runs
// (the events one recorded step holds) bounds what the hooks cost when profiling is off.
#pragma once

#include <cstdint>

namespace kiln::apps {

// Nanoseconds per disabled profiler::Range (construct + destroy), over `iterations` in a loop.
double disabled_range_ns(int64_t iterations = 200'000'000);

}  // namespace kiln::apps
