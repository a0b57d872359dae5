// What each rank contributes to a collective in the process-group tests, and what the reduction
// of all ranks' contributions must be: small values, exact in every dtype (negative for floats),
// so sums and gathers compare exactly and only avg needs a tolerance.
#pragma once

#include <algorithm>
#include <vector>

#include "test_util.h"

#include <kiln/parallel/process_group.h>

namespace kiln::test {

inline const DType kCollectiveDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                          DType::i64, DType::i32, DType::u8};

// Rank r's value at element i.
inline double contribution(int r, int64_t i, DType dt) {
  const double v = double((r * 7 + i * 3) % 11);
  return is_floating(dt) ? v - 5.0 + 0.5 * r : v;
}

// Rank r's n contributions as a tensor of dtype dt.
inline Tensor rank_tensor(int r, int64_t n, DType dt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = contribution(r, i, dt);
  return from_vector(v, {n}).to(dt);
}

// Element i reduced over ranks 0..world-1 with op.
inline double reduced(int world, int64_t i, DType dt, dist::ReduceOp op) {
  double s = 0, mx = -1e300, mn = 1e300;
  for (int r = 0; r < world; ++r) {
    const double v = contribution(r, i, dt);
    s += v;
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  switch (op) {
    case dist::ReduceOp::max: return mx;
    case dist::ReduceOp::min: return mn;
    case dist::ReduceOp::avg: return s / world;
    default: return s;
  }
}

// Elements 0..n-1 reduced over ranks 0..world-1 with op.
inline std::vector<double> reduced_all(int world, int64_t n, DType dt, dist::ReduceOp op) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = reduced(world, i, dt, op);
  return out;
}

}  // namespace kiln::test
