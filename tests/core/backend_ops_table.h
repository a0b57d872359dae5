// The runner behind the backend op table (tests/core/test_backend_ops.cpp, after ggml's
// test-backend-ops): what a row is, how its inputs are made, rounded and laid out, and how one
// (row, dtype, backend) case is run and compared with the CPU float64 reference of the same inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace kiln::test::table {

// What an input holds. Values are drawn once per row (seeded by the row's name and the input's
// position), so every dtype and backend of a row sees the same numbers.
enum class Fill {
  uniform,    // floating, uniform in [-2, 2)
  positive,   // floating, uniform in [0.5, 2): log, sqrt, divisors, variances
  small_int,  // floating, integers in [-3, 3): exact in every dtype, so comparisons meet ties
  index,      // integers in [0, hi), i64 (or i32): ids, targets, gather / select indices
  mask,       // bool, about half set
};

// How the backend under test sees an input; the values are the same in every layout.
enum class Layout {
  contiguous,
  transposed,  // stored transposed in its last two dims: a column-major view
  strided,     // every other element, from offset 1, of a buffer twice as long in the last dim
  broadcast,   // `shape` expanded (stride 0) to `expand_to`
};

struct Input {
  Shape shape;
  Fill fill = Fill::uniform;
  Layout layout = Layout::contiguous;
  int64_t hi = 0;               // Fill::index: the exclusive bound
  DType index_dtype = DType::i64;  // Fill::index
  Shape expand_to{};            // Layout::broadcast

  Input transposed() const { Input c = *this; c.layout = Layout::transposed; return c; }
  Input strided() const { Input c = *this; c.layout = Layout::strided; return c; }
  Input broadcast_to(const Shape& to) const { Input c = *this; c.layout = Layout::broadcast; c.expand_to = to; return c; }
  Input i32() const { Input c = *this; c.index_dtype = DType::i32; return c; }
  bool converted() const { return fill != Fill::index && fill != Fill::mask; }
};

// Shorthands the rows read with: x({4, 8}), positive({4, 8}).strided(), ids({6}, 10), ...
inline Input x(const Shape& s) { return Input{s}; }
inline Input positive(const Shape& s) { return Input{s, Fill::positive}; }
inline Input small_int(const Shape& s) { return Input{s, Fill::small_int}; }
inline Input ids(const Shape& s, int64_t hi) { return Input{s, Fill::index, Layout::contiguous, hi}; }
inline Input mask(const Shape& s) { return Input{s, Fill::mask}; }

using Args = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

// One op: its name, its inputs, and what it computes from them through kiln::ops. Floating inputs
// reach `op` in the case's dtype on the case's device; every output is compared.
struct Row {
  std::string name;
  std::vector<Input> inputs;
  std::function<Outputs(const Args&)> op;
  double tol = 1;  // scales the dtype's tolerance (long sums, chained ops)
  std::vector<DType> dtypes = {DType::f32, DType::bf16, DType::f16, DType::f64};
};

struct Backend {
  std::string name;
  Device device;
};

// What a run of the table on one backend did.
struct Report {
  int64_t cases = 0;
  int64_t failed = 0;
  std::vector<int64_t> cases_per_row;  // cases run (passed or not) of each row
};

// Relative tolerance of a result computed in `dt` on `device` against the f64 reference; the
// absolute tolerance is the same number (the inputs are O(1)).
inline double case_rtol(DType dt, Device device) { return device.is_cuda() ? cuda_rtol(dt) : rtol_for(dt); }

// A stable seed from the row's name (FNV-1a), so adding a row changes no other row's inputs.
inline uint64_t seed_of(const std::string& name, size_t input) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return (h ^ input) * 1099511628211ull % 1000000007ull + 1;
}

// The input's values on the CPU: f64 for floating fills, else the index or bool dtype.
inline Tensor make_values(const Input& in, uint64_t seed) {
  switch (in.fill) {
    case Fill::uniform: return random(in.shape, DType::f64, seed, -2.0, 2.0);
    case Fill::positive: return random(in.shape, DType::f64, seed, 0.5, 2.0);
    case Fill::small_int: return random(in.shape, DType::i64, seed, -3.0, 3.0).to(DType::f64);
    case Fill::index: return random(in.shape, in.index_dtype, seed, 0.0, double(in.hi));
    case Fill::mask: return random(in.shape, DType::i64, seed, 0.0, 2.0).to(DType::b8);
  }
  return {};
}

// `t` (on the CPU) on `device` in the input's layout.
inline Tensor place(const Tensor& t, const Input& in, Device device) {
  switch (in.layout) {
    case Layout::contiguous: return t.to(device);
    case Layout::transposed:
      REQUIRE_MESSAGE(t.dim() >= 2, "a transposed input needs 2 dims, got ", t.shape());
      return t.transpose(-1, -2).contiguous().to(device).transpose(-1, -2);
    case Layout::strided: {
      REQUIRE_MESSAGE(t.dim() >= 1, "a strided input needs a dim");
      int64_t last = t.dim() - 1, n = t.size(last);
      Shape wide = t.shape();
      wide[last] = 2 * n + 1;
      Tensor buf = empty(wide, t.dtype(), device);
      buf.fill_(is_floating(t.dtype()) ? std::nan("") : 0.0);  // a kernel reading the gaps sees NaN
      Tensor v = buf.slice(last, 1, 2 * n + 1, 2);
      v.copy_(t.to(device));
      return v;
    }
    case Layout::broadcast: return t.to(device).expand(in.expand_to);
  }
  return {};
}

// The row's inputs for one case: floating values rounded to `dt` (then widened to f64 for the
// reference), laid out on `device`. The reference takes the rounded values, so the tolerance
// measures the computation, not the rounding of the inputs.
inline Args case_inputs(const Row& row, const std::vector<Tensor>& values, DType dt, Device device, bool reference) {
  Args args;
  for (size_t i = 0; i < row.inputs.size(); ++i) {
    const Input& in = row.inputs[i];
    Tensor v = in.converted() ? values[i].to(dt) : values[i];
    if (reference) {
      if (in.converted()) v = v.to(DType::f64);
      args.push_back(in.layout == Layout::broadcast ? v.expand(in.expand_to) : v);
    } else {
      args.push_back(place(v, in, device));
    }
  }
  return args;
}

// Compares one case's outputs with the reference's; reports the first mismatch of each output
// (FAIL_CHECK names the row, dtype, backend and output) and returns whether all matched.
inline bool compare(const Outputs& got, const Outputs& ref, const std::string& what, DType dt, Device device,
                    double tol) {
  if (got.size() != ref.size()) {
    FAIL_CHECK(what, ": ", got.size(), " outputs, the reference has ", ref.size());
    return false;
  }
  bool ok = true;
  for (size_t k = 0; k < got.size(); ++k) {
    std::string out = what + " output " + std::to_string(k);
    const Tensor& g = got[k];
    const Tensor& r = ref[k];
    if (g.device() != device || g.shape() != r.shape() || is_floating(g.dtype()) != is_floating(r.dtype()) ||
        (is_floating(g.dtype()) && g.dtype() != dt && g.dtype() != DType::f32)) {
      FAIL_CHECK(out, ": got ", dtype_name(g.dtype()), g.shape(), " on ", g.device().str(), ", reference ",
                 dtype_name(r.dtype()), r.shape());
      ok = false;
      continue;
    }
    // Floating outputs within the dtype's tolerance; indices, counts and booleans exactly.
    double rtol = is_floating(r.dtype()) ? case_rtol(dt, device) * tol : 0.0;
    std::vector<double> a = values(g), e = values(r);
    double worst = 0;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < a.size(); ++i) {
      double err = std::fabs(a[i] - e[i]);
      bool close = (std::isnan(a[i]) && std::isnan(e[i])) || a[i] == e[i] || err <= rtol * (1 + std::fabs(e[i]));
      if (close) continue;
      if (first < 0) first = int64_t(i);
      ++bad;
      worst = std::isnan(err) ? err : std::max(worst, err / (1 + std::fabs(e[i])));
    }
    if (bad > 0) {
      FAIL_CHECK(out, ": ", bad, " of ", a.size(), " elements differ; first at ", first, ": ", a[first],
                 ", expected ", e[first], " (worst error ", worst, " vs tolerance ", rtol, ")");
      ok = false;
    }
  }
  return ok;
}

// Runs every row in each of its dtypes on `backend` and compares it with the CPU f64 reference.
// An op that throws fails its case with the message; the other cases still run.
inline Report run_table(const std::vector<Row>& rows, const Backend& backend) {
  Report report;
  for (const Row& row : rows) {
    int64_t ran = 0;
    std::vector<Tensor> vals;
    for (size_t i = 0; i < row.inputs.size(); ++i) vals.push_back(make_values(row.inputs[i], seed_of(row.name, i)));
    for (DType dt : row.dtypes) {
      std::string what = row.name + " [" + dtype_name(dt) + ", " + backend.name + "]";
      bool ok = false;
      try {
        Outputs ref = row.op(case_inputs(row, vals, dt, Device::cpu(), /*reference=*/true));
        Outputs got = row.op(case_inputs(row, vals, dt, backend.device, /*reference=*/false));
        ok = compare(got, ref, what, dt, backend.device, row.tol);
      } catch (const std::exception& e) {
        FAIL_CHECK(what, " threw: ", e.what());
      }
      ++ran;
      ++report.cases;
      if (!ok) ++report.failed;
    }
    report.cases_per_row.push_back(ran);
  }
  return report;
}

}  // namespace kiln::test::table
