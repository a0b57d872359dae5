// Which (B, H, T, D) views the fused attention kernels read in place (Note [Attention layouts],
// core/cuda/plan/attention_layout.h), checked on the CPU with real tensors' strides.
#include "test_util.h"

#include <kiln/core/cuda/plan/attention_layout.h>

using namespace kiln;
using cuda::flash::attention_readable_in_place;
using cuda::flash::AttentionReader;

namespace {
bool readable(const Tensor& t, AttentionReader reader, uintptr_t address = 256) {
  return attention_readable_in_place(t.shape().data(), t.strides().data(), address, reader);
}
}  // namespace

TEST_CASE("a contiguous (B, H, T, D) view and the (B, T, H, D) layout are read in place by both readers") {
  for (AttentionReader r : {AttentionReader::kiln, AttentionReader::cudnn}) {
    CHECK(readable(empty({2, 3, 16, 64}, DType::bf16), r));
    CHECK(readable(empty({2, 16, 3, 64}, DType::bf16).transpose(1, 2), r));  // empty_heads' layout
  }
}

TEST_CASE("an expanded dimension (stride 0) is read in place by Kiln's kernels only") {
  // One head broadcast over (B, H): D stays contiguous and aligned, so only the stride-0 rule
  // refuses it for cuDNN.
  Tensor head = empty({1, 1, 16, 64}, DType::bf16);
  Tensor expanded = head.expand({2, 3, 16, 64});
  REQUIRE(expanded.stride(0) == 0);
  REQUIRE(expanded.stride(1) == 0);
  CHECK(readable(expanded, AttentionReader::kiln));
  CHECK_FALSE(readable(expanded, AttentionReader::cudnn));
  // A size-1 dimension's stride never matters, 0 or not.
  Tensor one_head = empty({2 * 1024}, DType::bf16).as_strided({2, 1, 16, 64}, {1024, 0, 64, 1}, 0);
  CHECK(readable(one_head, AttentionReader::cudnn));
  // out.sum()'s dout: stride 0 everywhere, D included: neither reads it in place.
  Tensor scalar = empty({}, DType::bf16).expand({2, 3, 16, 64});
  CHECK_FALSE(readable(scalar, AttentionReader::kiln));
  CHECK_FALSE(readable(scalar, AttentionReader::cudnn));
}

TEST_CASE("misaligned rows or base, or a strided D, are copied for both readers") {
  for (AttentionReader r : {AttentionReader::kiln, AttentionReader::cudnn}) {
    Tensor wide = empty({2, 3, 16, 68}, DType::bf16);
    CHECK_FALSE(readable(wide.narrow(3, 0, 64), r));  // rows 68 elements apart: 136 bytes
    CHECK_FALSE(readable(empty({2, 3, 16, 64}, DType::bf16), r, 258));
    CHECK_FALSE(readable(empty({2, 3, 64, 16}, DType::bf16).transpose(2, 3), r));
  }
}
