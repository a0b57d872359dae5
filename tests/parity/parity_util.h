// Helpers shared by the parity tests: find the oracle file (or skip), read prefixed entries, and
// compare tensors by norm-wise relative error.
#pragma once

#include <cmath>
#include <filesystem>
#include <string>

#include "test_util.h"

namespace kiln::test {

// The oracle file written by tests/parity/gen_<name>.py, or exit 77 (skipped) when it is missing.
inline SafetensorsFile load_oracle(const std::string& file) {
  const char* dir = std::getenv("KILN_TEST_DATA");
  std::string path = std::string(dir ? dir : ".") + "/" + file;
  if (!std::filesystem::exists(path)) {
    std::printf("SKIPPED: %s is missing (no python3 with torch to generate it)\n", path.c_str());
    std::exit(77);
  }
  return load_safetensors(path);
}

// Entries "<prefix><name>" as (name, tensor) pairs, in file order.
inline std::vector<std::pair<std::string, Tensor>> with_prefix(const SafetensorsFile& f, const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

// ||a - b|| / max(||b||, tiny), in double.
inline double rel_err(const Tensor& a, const Tensor& b) {
  auto va = values(a), vb = values(b);
  REQUIRE(va.size() == vb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    num += (va[i] - vb[i]) * (va[i] - vb[i]);
    den += vb[i] * vb[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

inline void check_rel(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  REQUIRE_MESSAGE(got.defined(), what, ": Kiln produced no tensor");
  CHECK_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs torch ", want.shape());
  if (got.shape() != want.shape()) return;
  double e = rel_err(got, want);
  CHECK_MESSAGE(e <= tol, what, ": relative error ", e, " > ", tol);
}

}  // namespace kiln::test
