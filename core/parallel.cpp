// parallel_for over OpenMP (the same runtime Eigen's GEMM threads use, so they share one pool).
#include <kiln/core/parallel.h>

#include <omp.h>

#include <algorithm>

#include <kiln/core/error.h>

namespace kiln {

namespace {
int& thread_count() {
  static int n = std::max(1, omp_get_max_threads());
  return n;
}
}  // namespace

int num_threads() { return thread_count(); }

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  thread_count() = n;
  omp_set_num_threads(n);
}

bool in_parallel_region() { return omp_in_parallel() != 0; }

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(thread_count(), (n + grain - 1) / grain);
  if (chunks <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
  int64_t per = (n + chunks - 1) / chunks;
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = begin + c * per;
    int64_t e = std::min(end, b + per);
    if (b < e) fn(b, e);
  }
}

}  // namespace kiln
