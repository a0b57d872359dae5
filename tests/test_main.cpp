// doctest main for every Kiln test executable. A suite whose cases all need a GPU calls
// kiln::test::require_cuda() (see test_util.h); without a device the process exits 77 (skipped).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
