// CPU threading: parallel_for splits [begin, end) into at most num_threads() chunks of at least
// `grain` iterations. Kernels must give results that do not depend on how the range is split
// (reductions combine fixed-size blocks in a fixed order), so outputs match for any thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

/// Iterations per chunk below which a loop stays on one thread (as in PyTorch's at::internal).
inline constexpr int64_t kGrainSize = 32768;

/// The threads parallel_for uses (set_num_threads).
int num_threads();
void set_num_threads(int n);  ///< n >= 1; defaults to OMP_NUM_THREADS or the hardware's count
/// Whether this thread is running a chunk of a parallel_for (nested loops then run serially).
bool in_parallel_region();

/// Calls fn(chunk_begin, chunk_end) over [begin, end) split into at most num_threads() chunks of at
/// least `grain` iterations; one chunk on this thread when the range is below grain.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace kiln
