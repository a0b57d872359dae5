// TempDir: a fresh directory under the system's temporary directory ($TMPDIR, else /tmp), removed
// with its contents at scope exit, for stores and checkpoints of the multi-process tests.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace kiln::test {

struct TempDir {
  explicit TempDir(const std::string& prefix = "kiln_test") {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    REQUIRE_MESSAGE(::mkdtemp(t.data()) != nullptr, "cannot create a temporary directory from ", t);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path;
};

}  // namespace kiln::test
