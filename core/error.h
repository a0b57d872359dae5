// Errors: KILN_CHECK for user errors (throws kiln::Error carrying the offending values),
// KILN_CHECK_INDEX/_VALUE/_IO/_DIST for the subclasses, KILN_ASSERT for internal invariants.
// Messages are only built when the check fails.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

/// Every error Kiln throws for a user mistake or a failed environment is a kiln::Error; the
/// subclasses let an embedder tell the common kinds apart (catch kiln::Error to catch them all).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// Note [Error classes]: which kind a user mistake throws (catch kiln::Error for all of them).
///   ValueError        an argument with a bad value: shapes that do not fit (matmul's inner dims,
///                     broadcasting, reshape/view/expand, a layer's input), a dtype an op does not take
///                     or operands of different dtypes, an option out of its range, an undefined tensor
///   IndexError        an index or dim out of range: dims, select/narrow bounds, embedding ids,
///                     index_select/gather/scatter indices, cross-entropy targets, container indices
///   IOError           files: missing, unreadable, corrupt, failed writes
///   DistributedError  the job: rendezvous, collectives, timeouts, ranks that disagree
///   kiln::Error       the rest: tensors on different devices or on a device with no kernel, misuse
///                     of autograd state (requires_grad_ on a non-leaf, ...), bad environment variables
/// An argument with a bad value (wrong shape, dtype, option) where no more specific kind applies.
class ValueError : public Error {
 public:
  using Error::Error;
};
/// An index or dimension out of range (slice bounds, dims, embedding ids, gather indices, targets).
class IndexError : public Error {
 public:
  using Error::Error;
};
/// A file that cannot be read or written, or whose contents are not in the expected format
/// (safetensors, training checkpoints, token shards).
class IOError : public Error {
 public:
  using Error::Error;
};
/// A failure of the job rather than of one process: rendezvous/store timeouts, process-group and
/// collective errors, DDP misuse across ranks, the launcher's workers.
class DistributedError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg);
/// "message [file.cpp:42]": the text every failed check carries.
std::string check_message(const char* file, int line, const std::string& msg);
template <class E>
[[noreturn]] void throw_check_failure_as(const char* file, int line, const std::string& msg) {
  throw E(check_message(file, line, msg));
}
[[noreturn]] void throw_assert_failure(const char* file, int line, const char* cond, const std::string& msg);
[[noreturn]] void throw_unreachable(const char* file, int line, const std::string& msg);

}  // namespace detail
}  // namespace kiln

/// KILN_CHECK(cond, "message", values...): the values are streamed after the message.
#define KILN_CHECK(cond, ...)                                                               \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::kiln::detail::throw_check_failure(__FILE__, __LINE__, #cond,                        \
                                          ::kiln::detail::str_cat(__VA_ARGS__));            \
  } while (0)

/// KILN_CHECK_AS(ErrorType, cond, "message", values...): the same, throwing ErrorType (a kiln::Error).
#define KILN_CHECK_AS(ErrorType, cond, ...)                                                 \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::kiln::detail::throw_check_failure_as<ErrorType>(__FILE__, __LINE__,                 \
                                                        ::kiln::detail::str_cat(__VA_ARGS__)); \
  } while (0)
#define KILN_CHECK_VALUE(cond, ...) KILN_CHECK_AS(::kiln::ValueError, cond, __VA_ARGS__)
#define KILN_CHECK_INDEX(cond, ...) KILN_CHECK_AS(::kiln::IndexError, cond, __VA_ARGS__)
#define KILN_CHECK_IO(cond, ...) KILN_CHECK_AS(::kiln::IOError, cond, __VA_ARGS__)
#define KILN_CHECK_DIST(cond, ...) KILN_CHECK_AS(::kiln::DistributedError, cond, __VA_ARGS__)

/// KILN_FAIL("message", values...): a user error found without a condition left to test (a lookup
/// that found nothing, a failed system call, a parse error caught); throws like a failed KILN_CHECK.
/// KILN_FAIL_AS(ErrorType, ...) and KILN_FAIL_VALUE/_INDEX/_IO/_DIST throw the subclass.
#define KILN_FAIL(...) \
  ::kiln::detail::throw_check_failure(__FILE__, __LINE__, "", ::kiln::detail::str_cat(__VA_ARGS__))
#define KILN_FAIL_AS(ErrorType, ...) \
  ::kiln::detail::throw_check_failure_as<ErrorType>(__FILE__, __LINE__, ::kiln::detail::str_cat(__VA_ARGS__))
#define KILN_FAIL_VALUE(...) KILN_FAIL_AS(::kiln::ValueError, __VA_ARGS__)
#define KILN_FAIL_INDEX(...) KILN_FAIL_AS(::kiln::IndexError, __VA_ARGS__)
#define KILN_FAIL_IO(...) KILN_FAIL_AS(::kiln::IOError, __VA_ARGS__)
#define KILN_FAIL_DIST(...) KILN_FAIL_AS(::kiln::DistributedError, __VA_ARGS__)

/// KILN_UNREACHABLE(...): control reached a branch Kiln's own logic rules out (an enum value no
/// case handles, a kernel asked for in a build without it): "this is a bug in Kiln".
#define KILN_UNREACHABLE(...) \
  ::kiln::detail::throw_unreachable(__FILE__, __LINE__, ::kiln::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__))

/// KILN_ASSERT(cond, ...): "this is a bug in Kiln". Always evaluated (never compiled out).
#define KILN_ASSERT(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::kiln::detail::throw_assert_failure(__FILE__, __LINE__, #cond,                       \
                                           ::kiln::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
