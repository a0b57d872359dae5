// The fused add + layer norm switch of core/ops/layer_norm.h (KILN_FUSED_ADD_LN=0|1,
// set_fused_add_layer_norm_cuda): on unless "0" since the first GPU run (an H200) proved the CUDA
// kernels, read from the environment once, a bad value an error naming it until the setter decides.
// Runs in every build (only CUDA tensors consult it); ctest runs it again with 0 and with a bad value.
#include "test_util.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <kiln/core/ops/layer_norm.h>

using namespace kiln;

// First in the file (doctest runs a file's cases in order): nothing has read the switch yet.
TEST_CASE("fused add + layer norm switch: the first read takes KILN_FUSED_ADD_LN (unset: on)") {
  const char* env = std::getenv("KILN_FUSED_ADD_LN");
  const std::string value = env ? env : "";
  CAPTURE(value);
  if (value.empty() || value == "1") {
    CHECK(ops::fused_add_layer_norm_cuda());
  } else if (value == "0") {
    CHECK_FALSE(ops::fused_add_layer_norm_cuda());
  } else {
    const std::string got = "got '" + value + "'";
    CHECK_ERROR_CONTAINS(ops::fused_add_layer_norm_cuda(), "KILN_FUSED_ADD_LN must be 0 or 1", got.c_str());
    CHECK_ERROR_CONTAINS(ops::fused_add_layer_norm_cuda(), got.c_str());  // every read, until the setter
    ops::set_fused_add_layer_norm_cuda(false);
    CHECK_FALSE(ops::fused_add_layer_norm_cuda());
  }
}

TEST_CASE("fused add + layer norm switch: the setter wins, and the CPU path is the same either way") {
  Tensor x = test::random({5, 12}, DType::f32, 3), r = test::random({5, 12}, DType::f32, 4);
  Tensor w = test::random({12}, DType::f32, 5), b = test::random({12}, DType::f32, 6);
  std::vector<std::vector<double>> outs;
  for (bool on : {true, false}) {
    ops::set_fused_add_layer_norm_cuda(on);
    CHECK(ops::fused_add_layer_norm_cuda() == on);
    outs.push_back(test::values(ops::add_layer_norm(x, r, {12}, w, b).out));
  }
  CHECK(outs[0] == outs[1]);
}
