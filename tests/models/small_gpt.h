// The GPT the memory tests measure with the CPU allocator (tests/parallel/test_memory_plan_ranks.cpp,
// tests/apps/gpt/test_fit_memory.cpp): 2 layers, 4 heads, 64 dims, context 64, vocab 256, 121k
// parameters, so every buffer stays under the CPU allocator's 1 MiB size classes (above them a block
// rounds up by as much as 1/8 and measured bytes drift from the planner's).
#pragma once

#include <kiln/models/gpt.h>

namespace kiln::test {

inline models::GPTConfig small_gpt() {
  models::GPTConfig c = models::gpt_config("gpt-tiny");
  c.n_layer = 2;
  c.n_embd = 64;
  c.block_size = 64;
  return c;
}

}  // namespace kiln::test
