// doctest main for every Kiln test executable. A suite whose cases all need a GPU calls
// kiln::test::require_cuda() (see test_util.h); without a device the process exits 77 (skipped).
// Under KILN_CPU_CAPABILITY (the suites CTest runs again with CPU kernels forced, e.g. *_avx2) a
// capability this CPU cannot run is a skip (77), not a failure.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include <kiln/core/cpu_capability.h>

int main(int argc, char** argv) {
  if (const char* forced = std::getenv("KILN_CPU_CAPABILITY"); forced != nullptr && *forced != '\0') {
    kiln::cpu::Capability c{};
    try {
      c = kiln::cpu::parse_capability(forced);
    } catch (const std::exception& e) {  // a name that is not a capability is the caller's error
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    if (!kiln::cpu::cpu_supports(c)) {
      std::printf("SKIPPED: KILN_CPU_CAPABILITY=%s: this CPU (%s) cannot run it\n", forced,
                  kiln::cpu::cpu_model().c_str());
      return 77;
    }
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
