// reduce_scatter and allgather on the Gloo group across 1-4 forked ranks with odd chunk sizes
// (0, 1, 7, 1001 elements) in every dtype and reduction, checked against values computed here; and
// the padded flat shards of Note [Padded flat shards] carrying sizes that do not divide by the
// world size through a reduce-scatter and back through an allgather.
#include "parallel/rank_values.h"
#include "parallel/run_ranks.h"

#include <kiln/parallel/shard_layout.h>

using namespace kiln;
using namespace kiln::test;

namespace {

void check_reduce_scatter(dist::ProcessGroup& pg) {
  const int world = pg.size(), r = pg.rank();
  for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(7), int64_t(1001)}) {
    for (DType dt : kCollectiveDTypes) {
      for (auto op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max, dist::ReduceOp::min}) {
        if (op == dist::ReduceOp::avg && !is_floating(dt)) continue;
        Tensor in = rank_tensor(r, chunk * world, dt);
        Tensor keep = in.clone();
        Tensor out = full({chunk}, 99, TensorOptions(dt));
        pg.reduce_scatter(out, in, dist::AllreduceOptions().op(op))->wait();
        std::vector<double> want(static_cast<size_t>(chunk), 0.0);
        for (int64_t i = 0; i < chunk; ++i) want[size_t(i)] = reduced(world, r * chunk + i, dt, op);
        const std::string what = "reduce_scatter chunk " + std::to_string(chunk) + " " + dtype_name(dt) +
                                 " op " + std::to_string(int(op)) + " rank " + std::to_string(r) + " of " +
                                 std::to_string(world);
        expect_values(out, want, kiln::test::rtol_for(dt), what);
        expect(kiln::test::values(in) == kiln::test::values(keep), what + ": the input was modified");
      }
    }
  }
}

void check_allgather(dist::ProcessGroup& pg) {
  const int world = pg.size(), r = pg.rank();
  for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(7), int64_t(1001)}) {
    for (DType dt : kCollectiveDTypes) {
      Tensor in = rank_tensor(r, chunk, dt);
      Tensor out = full({chunk * world}, 99, TensorOptions(dt));
      pg.allgather(out, in)->wait();
      std::vector<double> want;
      for (int q = 0; q < world; ++q)
        for (int64_t i = 0; i < chunk; ++i) want.push_back(contribution(q, i, dt));
      expect_values(out, want, 0.0,
                    "allgather chunk " + std::to_string(chunk) + " " + dtype_name(dt) + " rank " + std::to_string(r));
    }
  }
}

}  // namespace

TEST_CASE("reduce_scatter: every dtype and op, odd chunks, 1 to 4 ranks") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    run_ranks(n, check_reduce_scatter);
  }
}

TEST_CASE("allgather: every dtype, odd chunks, 1 to 4 ranks") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    run_ranks(n, check_allgather);
  }
}

TEST_CASE("reduce_scatter of a large f32 tensor across 3 ranks (several MiB per chunk)") {
  run_ranks(3, [](dist::ProcessGroup& pg) {
    const int64_t chunk = (1 << 20) + 3;
    Tensor in = rank_tensor(pg.rank(), 3 * chunk, DType::f32);
    Tensor out = zeros({chunk});
    pg.reduce_scatter(out, in)->wait();
    std::vector<double> want(static_cast<size_t>(chunk), 0.0);
    for (int64_t i = 0; i < chunk; ++i)
      want[size_t(i)] = reduced(3, pg.rank() * chunk + i, DType::f32, dist::ReduceOp::sum);
    expect_values(out, want, 1e-6, "large reduce_scatter");
  });
}

TEST_CASE("padded flat shards: sizes that do not divide by the world size survive reduce_scatter + allgather") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    run_ranks(n, [](dist::ProcessGroup& pg) {
      const int world = pg.size(), r = pg.rank();
      // Parameters of 5, 1, 13 and 2 elements: 21 in one bucket (caps large).
      std::vector<Tensor> params = {zeros({5}), zeros({1}), zeros({13}), zeros({2})};
      dist::ShardLayout layout(params, r, world, 1 << 20, 1 << 20);
      expect(layout.buckets().size() == 1, "one bucket");
      const auto& b = layout.buckets()[0];
      const int64_t n_el = b.numel;
      expect(n_el == 21 && b.chunk == (21 + world - 1) / world, "bucket size and chunk");
      // Every rank's full gradient is its contribution; padded to world * chunk with zeros.
      Tensor flat = zeros({b.chunk * world});
      flat.narrow(0, 0, n_el).copy_(rank_tensor(r, n_el, DType::f32));
      Tensor mine = zeros({b.chunk});
      pg.reduce_scatter(mine, flat, dist::AllreduceOptions().op(dist::ReduceOp::avg))->wait();
      const auto [lo, hi] = dist::ShardLayout::owned_range(n_el, b.chunk, r);
      std::vector<double> got = kiln::test::values(mine);
      for (int64_t i = 0; i < b.chunk; ++i) {
        const double want = lo + i < hi ? reduced(world, lo + i, DType::f32, dist::ReduceOp::avg) : 0.0;
        expect(std::fabs(got[size_t(i)] - want) <= 1e-6 * (1 + std::fabs(want)),
               "owned element " + std::to_string(i) + " of rank " + std::to_string(r));
      }
      // Every parameter's piece points at its owned elements of the chunk.
      int64_t owned = 0;
      for (size_t p = 0; p < params.size(); ++p) {
        const auto& piece = layout.piece(p);
        const int64_t start = b.offsets[std::find(b.params.begin(), b.params.end(), p) - b.params.begin()];
        for (int64_t e = piece.begin; e < piece.end; ++e)
          expect(piece.local_offset + (e - piece.begin) == start + e - lo, "piece offset of parameter " + std::to_string(p));
        owned += piece.size();
      }
      expect(owned == hi - lo && owned == layout.owned_numel(), "pieces cover the owned range");
      Tensor whole = zeros({b.chunk * world});
      pg.allgather(whole, mine)->wait();
      std::vector<double> all = kiln::test::values(whole);
      for (int64_t i = 0; i < n_el; ++i) {
        const double want = reduced(world, i, DType::f32, dist::ReduceOp::avg);
        expect(std::fabs(all[size_t(i)] - want) <= 1e-6 * (1 + std::fabs(all[size_t(i)])),
               "gathered element " + std::to_string(i));
      }
    });
  }
}
