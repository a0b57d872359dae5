// DistributedSampler against torch.utils.data.DistributedSampler's semantics: counts with and
// without drop_last, padding by repeating the list's head, rank striding, disjointness and
// coverage across ranks, and epochs/seeds.
#include "test_util.h"

#include <algorithm>
#include <set>

#include <kiln/data/sampler.h>

using namespace kiln;
using namespace kiln::data;

namespace {

std::vector<std::vector<int64_t>> all_ranks(int64_t n, int64_t world, bool shuffle, uint64_t seed, bool drop_last,
                                            int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

}  // namespace

TEST_CASE("counts follow torch: ceil without drop_last, floor with it") {
  struct Case { int64_t n, world; bool drop_last; int64_t per_rank; };
  const Case cases[] = {{10, 3, false, 4}, {10, 3, true, 3}, {12, 4, false, 3}, {12, 4, true, 3},
                        {2, 4, false, 1},  {2, 4, true, 0},  {1, 1, false, 1},  {0, 2, false, 0}};
  for (const auto& c : cases) {
    CAPTURE(c.n);
    CAPTURE(c.world);
    CAPTURE(c.drop_last);
    for (int64_t r = 0; r < c.world; ++r) {
      DistributedSampler s(c.n, c.world, r, true, 0, c.drop_last);
      CHECK(s.num_samples() == c.per_rank);
      CHECK(s.total_size() == c.per_rank * c.world);
      CHECK(static_cast<int64_t>(s.indices().size()) == c.per_rank);
    }
  }
}

TEST_CASE("without shuffle: torch's exact lists (padding repeats the head, rank r takes r::world)") {
  // torch: list(DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False))
  auto ranks = all_ranks(10, 3, false, 0, false);
  CHECK(ranks[0] == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(ranks[1] == std::vector<int64_t>{1, 4, 7, 0});
  CHECK(ranks[2] == std::vector<int64_t>{2, 5, 8, 1});
  auto dropped = all_ranks(10, 3, false, 0, true);
  CHECK(dropped[0] == std::vector<int64_t>{0, 3, 6});
  CHECK(dropped[1] == std::vector<int64_t>{1, 4, 7});
  CHECK(dropped[2] == std::vector<int64_t>{2, 5, 8});
  // Padding larger than the dataset cycles through it: N=2, world=5 -> [0, 1, 0, 1, 0].
  auto cyc = all_ranks(2, 5, false, 0, false);
  std::vector<int64_t> flat;
  for (auto& r : cyc) flat.insert(flat.end(), r.begin(), r.end());
  CHECK(flat == std::vector<int64_t>{0, 1, 0, 1, 0});
}

TEST_CASE("shuffled ranks are disjoint and cover the dataset; padding repeats the permutation's head") {
  const int64_t n = 103, world = 4;
  auto ranks = all_ranks(n, world, true, 17, false, 2);
  // Interleave back into the padded permuted list: list[i] = ranks[i % world][i / world].
  std::vector<int64_t> list;
  for (int64_t i = 0; i < 26 * world; ++i) list.push_back(ranks[i % world][i / world]);
  std::vector<int64_t> perm(list.begin(), list.begin() + n);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < n; ++i) CHECK(sorted[i] == i);  // a permutation: disjoint + covering
  CHECK(perm != sorted);                                  // and actually shuffled
  CHECK(list[103] == perm[0]);                            // padding: the permutation's head
  CHECK(perm == random_permutation(n, 17 + 2));           // seeded with seed + epoch

  auto dropped = all_ranks(n, world, true, 17, true, 2);
  std::set<int64_t> seen;
  for (auto& r : dropped) {
    CHECK(r.size() == 25u);
    for (int64_t i : r) CHECK(seen.insert(i).second);  // no repeats with drop_last
  }
  CHECK(seen.size() == 100u);
}

TEST_CASE("epochs reshuffle; the same seed and epoch give the same order on every rank") {
  DistributedSampler a(1000, 2, 1, true, 5), b(1000, 2, 1, true, 5), c(1000, 2, 1, true, 6);
  CHECK(a.indices() == b.indices());
  CHECK(a.indices() != c.indices());
  auto e0 = a.indices();
  a.set_epoch(1);
  CHECK(a.epoch() == 1);
  CHECK(a.indices() != e0);
  b.set_epoch(1);
  CHECK(a.indices() == b.indices());
  // seed + epoch: (seed 5, epoch 1) shuffles like (seed 6, epoch 0), as torch.
  CHECK(a.indices() == c.indices());
}

TEST_CASE("invalid arguments name the values") {
  CHECK_ERROR_CONTAINS(DistributedSampler(10, 2, 2), "invalid rank 2", "[0, 1]");
  CHECK_ERROR_CONTAINS(DistributedSampler(10, 0, 0), "world_size must be >= 1, got 0");
  CHECK_ERROR_CONTAINS(DistributedSampler(-1, 1, 0), "dataset_size must be >= 0, got -1");
}
