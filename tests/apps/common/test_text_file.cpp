// write_text_file: all or nothing. A full disk (simulated with RLIMIT_FSIZE in a child process, and
// /dev/full) is an IOError with the system's reason, and leaves the old file intact or no file at
// all, never a 0-byte or cut one, nor a .tmp beside it.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/text_file.h"
#include "test_util.h"

namespace fs = std::filesystem;
using kiln::apps::write_text_file;

namespace {

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("kiln_text_file_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("writes a new file, replaces an old one, leaves no .tmp") {
  Scratch s;
  const std::string p = s.file("plot.svg");
  write_text_file(p, "<svg>one</svg>\n", "the plot");
  CHECK(read(p) == "<svg>one</svg>\n");
  write_text_file(p, "<svg>two</svg>\n", "the plot");
  CHECK(read(p) == "<svg>two</svg>\n");
  CHECK_FALSE(fs::exists(p + ".tmp"));
}

TEST_CASE("a full disk is an IOError with the reason, and the old file stays whole") {
  Scratch s;
  const std::string old_file = s.file("old.svg"), new_file = s.file("new.svg");
  const std::string old_text(3000, 'o');
  write_text_file(old_file, old_text, "the plot");
  // A child whose files may not grow past 100 bytes (SIGXFSZ ignored: write fails with EFBIG).
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{100, 100};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int bad = 0;
    for (const std::string& p : {old_file, new_file}) {
      try {
        write_text_file(p, std::string(5000, 'n'), "the plot");
        bad |= 1;  // no error
      } catch (const kiln::IOError& e) {
        const std::string what = e.what();
        if (what.find("writing the plot " + p + " failed: File too large") == std::string::npos) bad |= 2;
      }
    }
    ::_exit(bad);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, "child: 1 = a write did not fail, 2 = the message lacked the reason");
  CHECK(read(old_file) == old_text);
  CHECK_FALSE(fs::exists(new_file));
  CHECK_FALSE(fs::exists(old_file + ".tmp"));
  CHECK_FALSE(fs::exists(new_file + ".tmp"));
}

TEST_CASE("a device or pipe is written in place: /dev/full fails with ENOSPC's reason and stays a device") {
  CHECK_ERROR_CONTAINS(write_text_file("/dev/full", "<svg/>\n", "the loss curve"),
                       "writing the loss curve /dev/full failed: No space left on device");
  struct stat st {};
  REQUIRE(::stat("/dev/full", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK_FALSE(fs::exists("/dev/full.tmp"));
}

TEST_CASE("a missing directory names the path and the reason") {
  Scratch s;
  const std::string p = s.file("no/such/dir/plot.svg");
  CHECK_ERROR_CONTAINS(write_text_file(p, "x", "the plot"), p.c_str(), "No such file or directory");
}
