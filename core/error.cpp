// Builds the text of a failed KILN_CHECK / KILN_FAIL / KILN_ASSERT / KILN_UNREACHABLE and throws kiln::Error (or, for
// KILN_CHECK_AS, the subclass asked for).
#include <kiln/core/error.h>

#include <cstring>

namespace kiln::detail {

static const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

std::string check_message(const char* file, int line, const std::string& msg) {
  return str_cat(msg, " [", basename_of(file), ":", line, "]");
}

void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(check_message(file, line, msg));
}

void throw_assert_failure(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(str_cat("internal assertion `", cond, "` failed at ", basename_of(file), ":", line,
                      msg.empty() ? "" : ": ", msg, " (this is a bug in Kiln; please report it)"));
}

void throw_unreachable(const char* file, int line, const std::string& msg) {
  throw Error(str_cat("internal error: reached unreachable code at ", basename_of(file), ":", line,
                      msg.empty() ? "" : ": ", msg, " (this is a bug in Kiln; please report it)"));
}

}  // namespace kiln::detail
