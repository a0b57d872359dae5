// The layer-norm kernels' launch variants (Note [Layer norm variants],
// core/cuda/plan/layer_norm_variant.h) on the CPU: parsing, names, launch shapes, sweep lists, and
// the process-wide setting (kiln/cuda.h), which a build without CUDA keeps too.
#include "test_util.h"


#include <kiln/core/cuda/plan/layer_norm_variant.h>
#include <kiln/cuda.h>

using namespace kiln;
using cuda::LayerNormVariant;

TEST_CASE("a variant's name parses back to it; empty and 'default' are the defaults") {
  CHECK(cuda::parse_layer_norm_variant("") == LayerNormVariant{});
  CHECK(cuda::parse_layer_norm_variant("default") == LayerNormVariant{});
  std::vector<LayerNormVariant> all = cuda::layer_norm_forward_sweep();
  for (const LayerNormVariant& v : cuda::layer_norm_backward_sweep(132)) all.push_back(v);
  for (const LayerNormVariant& v : all) {
    CHECK(cuda::parse_layer_norm_variant(cuda::layer_norm_variant_name(v)) == v);
    for (const LayerNormVariant& w : all)  // one name per variant
      CHECK((cuda::layer_norm_variant_name(v) == cuda::layer_norm_variant_name(w)) == (v == w));
  }
  CHECK(cuda::layer_norm_forward_sweep().front() == LayerNormVariant{});  // each list starts with the default
  CHECK(cuda::layer_norm_backward_sweep(132).front() == LayerNormVariant{});
  const LayerNormVariant v = cuda::parse_layer_norm_variant("fwd=block,vec=8");
  CHECK(v.vec_bytes == 8);
  CHECK(v.fwd_rows == LayerNormVariant::Rows::block);
  CHECK(v.bwd_blocks == LayerNormVariant{}.bwd_blocks);
  CHECK(cuda::parse_layer_norm_variant("bwd=split,bwd_blocks=528").bwd == LayerNormVariant::Backward::split);
  CHECK(cuda::layer_norm_variant_name(cuda::parse_layer_norm_variant("bwd=split")) ==
        "vec=16,fwd=warp,bwd_blocks=264,partials=auto,bwd=split");
  // The defaults the first GPU run measured fastest (cuda.h).
  CHECK(LayerNormVariant{}.fwd_rows == LayerNormVariant::Rows::warp);
  CHECK(LayerNormVariant{}.bwd_blocks == 264);
  CHECK(LayerNormVariant{}.bwd == LayerNormVariant::Backward::split);
}

TEST_CASE("a bad variant is a ValueError naming the text and the choices") {
  for (const char* bad : {"vec=4", "fwd=grid", "bwd_blocks=0", "bwd_blocks=70000", "bwd_blocks=x", "partials",
                          "speed=fast", "vec=16,,fwd=warp", "bwd=both"}) {
    INFO(bad);
    CHECK_THROWS_AS(cuda::parse_layer_norm_variant(bad), ValueError);
    CHECK_ERROR_CONTAINS(cuda::parse_layer_norm_variant(bad), "KILN_LAYER_NORM_VARIANT", bad);
  }
}

TEST_CASE("vector widths per element size: 16 bytes, 8 bytes, one element") {
  LayerNormVariant v;
  CHECK(cuda::layer_norm_vec(v, 2) == 8);
  CHECK(cuda::layer_norm_vec(v, 4) == 4);
  CHECK(cuda::layer_norm_vec(v, 8) == 2);
  v.vec_bytes = 8;
  CHECK(cuda::layer_norm_vec(v, 2) == 4);
  CHECK(cuda::layer_norm_vec(v, 8) == 1);
  v.vec_bytes = 0;
  CHECK(cuda::layer_norm_vec(v, 2) == 1);
}

TEST_CASE("forward launches: automatic as Note [Row launches], warp and block forced either way") {
  LayerNormVariant v;
  v.fwd_rows = LayerNormVariant::Rows::automatic;
  const auto auto_short = cuda::layer_norm_forward_launch(v, 16384, 768, 8);
  CHECK(auto_short.block_x == 32);
  CHECK(auto_short.block_y == 4);
  CHECK(auto_short.grid == 4096);
  const auto auto_long = cuda::layer_norm_forward_launch(v, 16384, 2048, 8);
  CHECK(auto_long.block_x == 256);
  CHECK(auto_long.block_y == 1);
  v.fwd_rows = LayerNormVariant::Rows::block;
  const auto block = cuda::layer_norm_forward_launch(v, 16384, 768, 8);
  CHECK(block.block_x == 96);
  CHECK(block.block_y == 1);
  CHECK(block.grid == 16384);
  v.fwd_rows = LayerNormVariant::Rows::warp;
  const auto warp = cuda::layer_norm_forward_launch(v, 16384, 2048, 8);
  CHECK(warp.block_x == 32);
  CHECK(warp.block_y == 4);
  CHECK(warp.grid == 4096);
}

TEST_CASE("backward: blocks and where partials live") {
  LayerNormVariant v;
  const auto split = cuda::layer_norm_backward_split(v, 16384);  // 264 blocks at most: 63 rows each
  CHECK(split.rows_per_block == 63);
  CHECK(split.blocks == 261);
  v.bwd_blocks = 1024;
  CHECK(cuda::layer_norm_backward_split(v, 16384).blocks == 1024);
  CHECK(cuda::layer_norm_partials_in_shared(v, 2 * 768 * 4, 46 * 1024));
  CHECK_FALSE(cuda::layer_norm_partials_in_shared(v, 2 * 8192 * 4, 46 * 1024));  // does not fit
  v.bwd_partials = LayerNormVariant::Partials::global;
  CHECK_FALSE(cuda::layer_norm_partials_in_shared(v, 2 * 768 * 4, 46 * 1024));
}

TEST_CASE("the process-wide variant: set, read back, restored") {
  const LayerNormVariant before = cuda::layer_norm_variant();
  LayerNormVariant v;
  v.vec_bytes = 8;
  v.bwd_blocks = 528;
  cuda::set_layer_norm_variant(v);
  CHECK(cuda::layer_norm_variant() == v);
  cuda::set_layer_norm_variant(before);
  CHECK(cuda::layer_norm_variant() == before);
}
