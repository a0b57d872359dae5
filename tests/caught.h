// caught<E>(fn): the message of the E that fn throws, or "" when fn returns; any other exception
// passes through. For tests that check an error's wording (and, with "", that none was thrown).
#pragma once

#include <functional>
#include <string>

namespace kiln::test {

template <class E>
std::string caught(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace kiln::test
