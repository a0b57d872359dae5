// Values a forked rank hands back to the test process through a file: one double per line, written
// with 17 significant digits so that they read back bit for bit.
#pragma once

#include <fstream>
#include <string>
#include <vector>

namespace kiln::test {

inline void write_values(const std::string& path, const std::vector<double>& v) {
  std::ofstream f(path);
  f.precision(17);
  for (double x : v) f << x << "\n";
}

inline std::vector<double> read_values(const std::string& path) {
  std::ifstream f(path);
  std::vector<double> v;
  for (double x; f >> x;) v.push_back(x);
  return v;
}

}  // namespace kiln::test
