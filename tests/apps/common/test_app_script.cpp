// Where an app finds its Python side: beside the executable first, then the source path, an
// explicit --torch-script over both, and an error naming every path tried when none exists.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <kiln/core/error.h>

#include "common/app_script.h"

namespace fs = std::filesystem;
using kiln::apps::executable_dir;
using kiln::apps::find_app_script;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("kiln_app_script_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path / "exe");
    fs::create_directories(path / "src");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string touch(const std::string& rel) const {
    std::ofstream(path / rel) << "print('hi')\n";
    return (path / rel).string();
  }
};

}  // namespace

TEST_CASE("executable_dir is this test's folder") {
  const std::string dir = executable_dir();
  REQUIRE(!dir.empty());
  CHECK(fs::exists(fs::path(dir)));
  CHECK(fs::equivalent(fs::path(dir), fs::canonical("/proc/self/exe").parent_path()));
}

TEST_CASE("beside the executable first, then the source path") {
  TempDir t;
  const std::string source = t.touch("src/bench_x.py");
  const std::string exe = (t.path / "exe").string();
  CHECK(find_app_script("bench_x.py", "", source, exe) == source);  // nothing beside the executable
  const std::string beside = t.touch("exe/bench_x.py");
  CHECK(find_app_script("bench_x.py", "", source, exe) == beside);
  CHECK(find_app_script("bench_x.py", "", "", exe) == beside);  // no source path recorded
}

TEST_CASE("--torch-script overrides both, and must exist") {
  TempDir t;
  t.touch("exe/bench_x.py");
  const std::string mine = t.touch("mine.py");
  const std::string exe = (t.path / "exe").string();
  CHECK(find_app_script("bench_x.py", mine, "", exe) == mine);
  const std::string missing = (t.path / "nope.py").string();
  CHECK_THROWS_WITH_AS(find_app_script("bench_x.py", missing, "", exe), doctest::Contains(missing.c_str()),
                       kiln::IOError);
}

TEST_CASE("none there: the error names every path tried") {
  TempDir t;
  const std::string exe = (t.path / "exe").string(), source = (t.path / "src/bench_x.py").string();
  try {
    find_app_script("bench_x.py", "", source, exe);
    FAIL("no error");
  } catch (const kiln::IOError& e) {
    const std::string what = e.what();
    CHECK(what.find((fs::path(exe) / "bench_x.py").string()) != std::string::npos);
    CHECK(what.find(source) != std::string::npos);
    CHECK(what.find("--torch-script") != std::string::npos);
  }
}
