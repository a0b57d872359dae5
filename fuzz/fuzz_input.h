// What every harness shares: the fuzz input as a file that the readers open by path (a memfd, so
// no disk I/O and nothing left behind), and the rule they enforce (Note [Fuzz contract]).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include <kiln/core/error.h>

namespace kiln::fuzz {

// Note [Fuzz contract]
// A reader given arbitrary bytes either accepts them (the harness then checks the result against
// the input: sizes add up, every element is read, nothing is larger than the input allows) or
// throws kiln::Error. Any other exception, a crash, an ASan/UBSan report, a timeout or one
// allocation over libFuzzer's -malloc_limit_mb (scripts/fuzz.sh sets 256 MB, far above anything a
// few-KB input may ask for) is a finding: the reader is fixed, the input goes to corpus/<name>/.

// Aborts (a finding) with a message; libFuzzer saves the input as crash-*.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "kiln fuzz finding: %s\n", what.c_str());
  std::abort();
}

inline void check(bool ok, const char* what) {
  if (!ok) finding(what);
}

// Runs fn; a kiln::Error is a refusal (fine), anything else a finding.
template <class Fn>
void run_reader(Fn&& fn) {
  try {
    fn();
  } catch (const kiln::Error&) {
  } catch (const std::exception& e) {
    finding(std::string("a reader threw ") + typeid(e).name() + " instead of kiln::Error: " + e.what());
  } catch (...) {
    finding("a reader threw a non-std exception");
  }
}

// One memfd per process, rewritten for each input and opened by the readers as /proc/self/fd/N.
class InputFile {
 public:
  InputFile() : fd_(::memfd_create("kiln-fuzz-input", MFD_CLOEXEC)) {
    if (fd_ < 0) finding("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) finding("ftruncate failed");
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) finding("pwrite failed");
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

inline const std::string& input_path(const uint8_t* data, size_t size) {
  static InputFile file;
  return file.write(data, size);
}

}  // namespace kiln::fuzz
