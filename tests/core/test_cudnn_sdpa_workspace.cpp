// When cuDNN's attention backward gets its dQ accumulator zeroed (Note [cuDNN dQ accumulator],
// core/cuda/plan/cudnn_sdpa_workspace.h).
#include "test_util.h"

#include <kiln/core/cuda/plan/cudnn_sdpa_workspace.h>

using kiln::cuda::sdpa_dq_accum_needs_zero;

TEST_CASE("by default as cudnn-frontend: zeroed before cuDNN 9.6 only") {
  CHECK(sdpa_dq_accum_needs_zero(90500, ""));
  CHECK(sdpa_dq_accum_needs_zero(90599, "auto"));
  CHECK_FALSE(sdpa_dq_accum_needs_zero(90600, ""));
  CHECK_FALSE(sdpa_dq_accum_needs_zero(91900, "auto"));
}

TEST_CASE("KILN_CUDNN_ZERO_DQ_ACCUM forces either way; anything else is a ValueError naming it") {
  CHECK(sdpa_dq_accum_needs_zero(91900, "1"));
  CHECK_FALSE(sdpa_dq_accum_needs_zero(90000, "0"));
  CHECK_THROWS_AS(sdpa_dq_accum_needs_zero(91900, "yes"), kiln::ValueError);
  CHECK_ERROR_CONTAINS(sdpa_dq_accum_needs_zero(91900, "yes"), "KILN_CUDNN_ZERO_DQ_ACCUM", "'yes'");
}
