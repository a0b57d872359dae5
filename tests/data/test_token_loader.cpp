// TokenLoader: windows equal the file contents (x/y shift, no window across shards), ranks are
// disjoint and rank-major, shuffling is a per-epoch permutation fixed by the seed, and a cursor
// resumes at the same global position under the same or a different world size.
#include <map>
#include <set>

#include "data/shard_fixtures.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::data;

namespace {

using Window = std::vector<int64_t>;  // T + 1 tokens

// Shards of the given sizes in dir/train_00000s.bin, plus the windows expected from them.
struct Dataset {
  test::ScratchDir dir;
  std::vector<std::vector<uint16_t>> shards;
  std::string pattern() const { return dir.file("train_*.bin"); }

  Dataset(const std::vector<int64_t>& sizes) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      shards.push_back(test::ramp_tokens(sizes[s], int64_t(s)));
      char name[32];
      std::snprintf(name, sizeof name, "train_%06zu.bin", s);
      write_token_shard(dir.file(name), shards.back());
    }
    write_token_shard(dir.file("val_000000.bin"), test::ramp_tokens(500, 99));  // must not match
  }
  // Every window of T+1 tokens with stride T, shard by shard, in file order.
  std::vector<Window> windows(int64_t T) const {
    std::vector<Window> out;
    for (const auto& s : shards)
      for (int64_t start = 0; start + T + 1 <= int64_t(s.size()); start += T)
        out.emplace_back(s.begin() + start, s.begin() + start + T + 1);
    return out;
  }
};

// The rows of a batch as windows (x row plus the last y token), checking y is x shifted by one.
std::vector<Window> rows(const TokenBatch& b) {
  REQUIRE(b.x.dtype() == DType::i64);
  REQUIRE(b.y.dtype() == DType::i64);
  REQUIRE(b.x.dim() == 2);
  REQUIRE(b.x.shape() == b.y.shape());
  int64_t B = b.x.size(0), T = b.x.size(1);
  std::vector<int64_t> x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
  std::vector<Window> out;
  for (int64_t i = 0; i < B; ++i) {
    Window w(x.begin() + i * T, x.begin() + (i + 1) * T);
    for (int64_t t = 0; t + 1 < T; ++t) CHECK(y[i * T + t] == x[i * T + t + 1]);
    w.push_back(y[i * T + T - 1]);
    out.push_back(w);
  }
  return out;
}

std::vector<Window> concat(std::vector<Window> a, const std::vector<Window>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("validation order: windows are the file contents, stride T, never across shards") {
  Dataset data({101, 64, 250});  // 101 tokens: 6 windows of T=16 (the 5-token tail is unused)
  const int64_t T = 16;
  std::vector<Window> expected = data.windows(T);
  TokenLoader loader(TokenLoaderOptions(data.pattern(), 1, T).shuffle(false));
  REQUIRE(loader.shard_paths().size() == 3);
  CHECK(loader.num_windows() == int64_t(expected.size()));
  CHECK(loader.num_windows() == 6 + 3 + 15);
  CHECK(loader.num_tokens() == 101 + 64 + 250);
  for (size_t i = 0; i < expected.size(); ++i) {
    std::vector<Window> got = rows(loader.next());
    REQUIRE(got.size() == 1);
    CHECK_MESSAGE(got[0] == expected[i], "window ", i);
  }
  CHECK(loader.epoch() == 0);
  CHECK(rows(loader.next())[0] == expected[0]);  // the next epoch starts over
  CHECK(loader.epoch() == 1);
  loader.reset();
  CHECK(loader.epoch() == 0);
  CHECK(loader.position() == 0);
  CHECK(rows(loader.next())[0] == expected[0]);
}

TEST_CASE("ranks read disjoint windows that together form the global batch, rank-major") {
  Dataset data({400, 333, 300});
  const int64_t T = 8, B = 2;
  const int W = 3;
  std::vector<Window> expected = data.windows(T);
  std::map<Window, int> id;
  for (size_t i = 0; i < expected.size(); ++i) id[expected[i]] = int(i);
  REQUIRE(id.size() == expected.size());  // windows are distinguishable by content

  std::vector<TokenLoader> ranks;
  for (int r = 0; r < W; ++r)
    ranks.emplace_back(TokenLoaderOptions(data.pattern(), B, T).rank(r).world_size(W).seed(5));
  TokenLoader whole(TokenLoaderOptions(data.pattern(), B * W, T).seed(5));
  const int64_t steps = ranks[0].batches_per_epoch();
  CHECK(steps == int64_t(expected.size()) / (B * W));
  std::set<int> seen;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<Window> global;
    for (int r = 0; r < W; ++r) {
      std::vector<Window> mine = rows(ranks[r].next());
      REQUIRE(mine.size() == size_t(B));
      for (const Window& w : mine) {
        REQUIRE_MESSAGE(id.count(w) == 1, "a batch row is not a window of the files");
        CHECK_MESSAGE(seen.insert(id[w]).second, "window ", id[w], " read twice in one epoch");
      }
      global = concat(global, mine);
    }
    CHECK(global == rows(whole.next()));  // rank r holds rows [r*B, (r+1)*B) of the global batch
  }
  CHECK(seen.size() == size_t(steps * B * W));
  CHECK(ranks[0].position() == steps * B * W);
  CHECK(ranks[2].cursor() == ranks[0].cursor());  // the cursor is global, the same on every rank
}

TEST_CASE("shuffling is a permutation per epoch, fixed by the seed, different across epochs") {
  Dataset data({1000, 700});
  const int64_t T = 10;
  const int64_t N = int64_t(data.windows(T).size());
  auto epoch_order = [&](uint64_t seed, int epochs) {
    TokenLoader loader(TokenLoaderOptions(data.pattern(), 1, T).seed(seed));
    std::vector<std::vector<Window>> out(epochs);
    for (int e = 0; e < epochs; ++e)
      for (int64_t i = 0; i < N; ++i) out[e].push_back(rows(loader.next())[0]);
    CHECK(loader.epoch() == epochs - 1);
    return out;
  };
  auto a = epoch_order(1, 2), b = epoch_order(1, 2), c = epoch_order(2, 1);
  CHECK(a == b);
  CHECK(a[0] != a[1]);
  CHECK(a[0] != c[0]);
  std::vector<Window> sorted_expected = data.windows(T);
  std::sort(sorted_expected.begin(), sorted_expected.end());
  for (auto order : {a[0], a[1], c[0]}) {
    CHECK(order != data.windows(T));  // actually shuffled
    std::sort(order.begin(), order.end());
    CHECK(order == sorted_expected);  // every window exactly once
  }
  // Not a near-identity: few windows stay in their file position.
  std::vector<Window> files = data.windows(T);
  int fixed = 0;
  for (int64_t i = 0; i < N; ++i) fixed += a[0][i] == files[i];
  CHECK(fixed < N / 10);
}

TEST_CASE("a cursor resumes exactly where the loader stopped, across epochs") {
  Dataset data({300, 260});
  const int64_t T = 8, B = 3;
  TokenLoaderOptions opts = TokenLoaderOptions(data.pattern(), B, T).seed(11);
  TokenLoader reference(opts);
  std::vector<std::vector<Window>> batches;
  for (int i = 0; i < 50; ++i) batches.push_back(rows(reference.next()));  // crosses 2 epochs
  CHECK(reference.epoch() == 2);
  for (int stop : {0, 7, 22, 23, 40}) {
    TokenLoader first(opts);
    for (int i = 0; i < stop; ++i) first.next();
    std::string cursor = first.cursor();
    TokenLoader resumed(opts);
    resumed.set_cursor(cursor);
    CHECK(resumed.cursor() == cursor);
    for (int i = stop; i < 50; ++i) CHECK_MESSAGE(rows(resumed.next()) == batches[i], "stop ", stop, " batch ", i);
  }
}

TEST_CASE("a cursor resumes at the same global position under a different world size") {
  Dataset data({500, 420});
  const int64_t T = 8;
  // The single-rank order of windows in epoch 0 and 1 (B = 1 consumes every position).
  TokenLoader serial(TokenLoaderOptions(data.pattern(), 1, T).seed(3));
  const int64_t N = serial.num_windows();
  std::vector<Window> order;
  for (int64_t i = 0; i < 2 * N; ++i) order.push_back(rows(serial.next())[0]);

  // World 2, B 3: 4 steps consume positions [0, 24).
  std::vector<TokenLoader> old_world;
  for (int r = 0; r < 2; ++r)
    old_world.emplace_back(TokenLoaderOptions(data.pattern(), 3, T).seed(3).rank(r).world_size(2));
  for (int step = 0; step < 4; ++step)
    for (int r = 0; r < 2; ++r) {
      int64_t first = step * 6 + r * 3;
      CHECK(rows(old_world[r].next()) == std::vector<Window>(order.begin() + first, order.begin() + first + 3));
    }
  std::string cursor = old_world[0].cursor();
  CHECK(cursor.find("position=24") != std::string::npos);

  // World 3, B 2 continues at position 24: rank r reads [24 + 2r, 26 + 2r), then [30 + 2r, ...).
  std::vector<TokenLoader> new_world;
  for (int r = 0; r < 3; ++r) {
    new_world.emplace_back(TokenLoaderOptions(data.pattern(), 2, T).seed(3).rank(r).world_size(3));
    new_world.back().set_cursor(cursor);
  }
  for (int step = 0; step < 3; ++step)
    for (int r = 0; r < 3; ++r) {
      int64_t first = 24 + step * 6 + r * 2;
      CHECK(rows(new_world[r].next()) == std::vector<Window>(order.begin() + first, order.begin() + first + 2));
    }
  CHECK(new_world[1].position() == 42);

  // Near the end of an epoch: a world whose global batch no longer fits starts the next epoch.
  TokenLoader late(TokenLoaderOptions(data.pattern(), 4, T).seed(3));
  late.set_cursor("epoch=0 position=" + std::to_string(N - 3) + " windows=" + std::to_string(N) +
                  " seq_len=8 seed=3 shuffle=1");
  CHECK(rows(late.next()) == std::vector<Window>(order.begin() + N, order.begin() + N + 4));
  CHECK(late.epoch() == 1);
}

TEST_CASE("set_cursor rejects cursors of another dataset or order") {
  Dataset data({300});
  TokenLoader loader(TokenLoaderOptions(data.pattern(), 2, 8).seed(1));
  std::string c = loader.cursor();
  TokenLoader other_seed(TokenLoaderOptions(data.pattern(), 2, 8).seed(2));
  CHECK_ERROR_CONTAINS(other_seed.set_cursor(c), "seed=1", "seed=2");
  TokenLoader other_t(TokenLoaderOptions(data.pattern(), 2, 9).seed(1));
  CHECK_ERROR_CONTAINS(other_t.set_cursor(c), "seq_len=8", "seq_len=9");
  CHECK_ERROR_CONTAINS(loader.set_cursor("epoch=0 position=x"), "bad value", "position");
  CHECK_ERROR_CONTAINS(loader.set_cursor("epoch=0"), "lacks a field");
  CHECK_ERROR_CONTAINS(loader.set_cursor("epoch=0 position=999999 windows=37 seq_len=8 seed=1 shuffle=1"),
                       "position 999999");
}

TEST_CASE("clear errors: no match, shard too small, global batch larger than the dataset, vocab") {
  Dataset data({100, 90});
  std::string none = data.dir.file("nothing_*.bin");
  CHECK_ERROR_CONTAINS(TokenLoader(TokenLoaderOptions(none, 1, 8)), "no file matches", none.c_str());

  write_token_shard(data.dir.file("small_000.bin"), test::ramp_tokens(8, 0));
  std::string small = data.dir.file("small_000.bin");
  CHECK_ERROR_CONTAINS(TokenLoader(TokenLoaderOptions(data.dir.file("small_*.bin"), 1, 8)), small.c_str(), "8 tokens",
                       "9 tokens");

  // 100 and 90 tokens with T = 8: 12 + 11 = 23 windows; 2 ranks * B 12 = 24 > 23.
  CHECK_ERROR_CONTAINS(TokenLoader(TokenLoaderOptions(data.pattern(), 12, 8).world_size(2)), "24 windows",
                       "23 windows", "192 tokens");
  CHECK_ERROR_CONTAINS(TokenLoader(TokenLoaderOptions(data.pattern(), 1, 8).rank(2).world_size(2)), "rank 2");

  // ramp tokens of shard 0 reach 31 * 99 = 3069: a vocab of 1000 is exceeded early, and found when
  // the shard is opened, before any batch (Note [Token range at open]), whatever order windows come in.
  CHECK_ERROR_CONTAINS(TokenLoader(TokenLoaderOptions(data.pattern(), 23, 8).vocab_size(1000)), "train_000000.bin",
                       ">= vocab_size 1000", "token index 33", "byte offset 1090", "before any step");
  TokenLoader enough(TokenLoaderOptions(data.pattern(), 23, 8).vocab_size(50000));
  CHECK(enough.next().x.size(0) == 23);
}

TEST_CASE("a shard truncated in place while the loader reads it is an IOError naming the file, not SIGBUS") {
  // Note [Shards changed under a run]: 2 shards of 100 tokens, T = 8: 12 windows each, read in order.
  Dataset data({100, 100});
  TokenLoader loader(TokenLoaderOptions(data.pattern(), 4, 8).shuffle(false).vocab_size(50000));
  const std::vector<Window> windows = data.windows(8);
  CHECK(rows(loader.next()) == std::vector<Window>(windows.begin(), windows.begin() + 4));
  const std::string second = data.dir.file("train_000001.bin");
  std::filesystem::resize_file(second, 1024 + 2 * 20);  // 20 of its 100 tokens left
  CHECK(loader.next().x.size(0) == 4);  // windows 4..7 of shard 0: unaffected
  CHECK(loader.next().x.size(0) == 4);  // windows 8..11
  // Windows 12..15 are shard 1's windows 0..3: tokens [0, 9), [8, 17) are still there, [16, 25) is not.
  CHECK_THROWS_AS(loader.next(), IOError);
  loader.set_cursor("epoch=0 position=12 windows=24 seq_len=8 seed=0 shuffle=0");
  CHECK_ERROR_CONTAINS(loader.next(), second.c_str(), "tokens [16, 25)", "byte offset 1056", "has 1064 bytes now",
                       "had 1224", "epoch 0", "window position 14", "cursor position 12");
}
