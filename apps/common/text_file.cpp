// write_text_file (see text_file.h).
#include "text_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <kiln/core/error.h>

namespace kiln::apps {
namespace {

// Writes all of contents to `file` (then closes it); false with errno set on the first failure.
bool write_all(const std::string& file, const std::string& contents, bool sync) {
  FILE* f = std::fopen(file.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = contents.empty() || std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  ok = ok && std::fflush(f) == 0 && (!sync || ::fsync(fileno(f)) == 0);
  const int err = errno;
  if (std::fclose(f) != 0 && ok) return false;  // errno from fclose
  errno = err;
  return ok;
}

}  // namespace

void write_text_file(const std::string& path, const std::string& contents, const std::string& what) {
  struct stat st {};
  const bool special = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  if (special) {
    KILN_CHECK_IO(write_all(path, contents, /*sync=*/false), "writing ", what, " ", path,
                  " failed: ", std::strerror(errno));
    return;
  }
  const std::string tmp = path + ".tmp";
  if (!write_all(tmp, contents, /*sync=*/true) || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    KILN_FAIL_IO("writing ", what, " ", path, " failed: ", std::strerror(err),
                 " (nothing written: the file is as it was before)");
  }
}

}  // namespace kiln::apps
