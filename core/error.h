// Errors: KILN_CHECK for user errors (throws kiln::Error carrying the offending values),
// KILN_ASSERT for internal invariants. Messages are only built when the check fails.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg);
[[noreturn]] void throw_assert_failure(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace detail
}  // namespace kiln

// KILN_CHECK(cond, "message", values...): the values are streamed after the message.
#define KILN_CHECK(cond, ...)                                                               \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::kiln::detail::throw_check_failure(__FILE__, __LINE__, #cond,                        \
                                          ::kiln::detail::str_cat(__VA_ARGS__));            \
  } while (0)

// KILN_ASSERT(cond, ...): "this is a bug in Kiln". Always evaluated (never compiled out).
#define KILN_ASSERT(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::kiln::detail::throw_assert_failure(__FILE__, __LINE__, #cond,                       \
                                           ::kiln::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
