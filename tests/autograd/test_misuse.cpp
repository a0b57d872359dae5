// Misuse of the differentiable API fails with a kiln::Error that says what went wrong: a parameter
// whose storage was released before its forward or before the backward that reads it (what FSDP does
// between uses, Note [FSDP unit storage]) is refused by the op that would read it (Note [Reads within
// the storage]), and backward twice keeps its message.
#include "test_util.h"

using namespace kiln;
using test::leaf;

TEST_CASE("a differentiable op refuses a parameter whose storage was released") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = leaf({1, 0, 0, 1, 1, 1}, {2, 3});
  w.storage()->resize(0);
  CHECK_ERROR_CONTAINS(kiln::linear(x, w, Tensor()), "linear: argument 1 of shape [2, 3] (f64, offset 0) reaches byte 48 "
                       "of its storage, which holds 0 bytes (released)");
  CHECK_ERROR_CONTAINS(kiln::matmul(x, w.t()), "matmul: argument 1 of shape [3, 2]");
}

TEST_CASE("a backward that reads a saved parameter after its storage was released fails naming the op") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = leaf({1, 0, 0, 1, 1, 1}, {2, 3});
  Tensor loss = kiln::sum(kiln::linear(x, w, Tensor()));
  w.storage()->resize(0);  // the graph saved w (a view of this storage) for x's gradient
  w.storage()->set_release_note([](size_t) { return std::string("gather it again before backward"); });
  CHECK_ERROR_CONTAINS(loss.backward(), "of its storage, which holds 0 bytes (released): gather it again before backward");
}

TEST_CASE("backward twice keeps its message") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = kiln::sum(x * x);
  y.backward();
  CHECK_ERROR_CONTAINS(y.backward(), "a second time, but its saved tensors were freed after the first backward",
                       "retain_graph=true");
}
