// TokenLoader: shard discovery (glob, sorted), the window index, the per-epoch permutation and
// the cursor. See Note [Token windows and the cursor] in token_loader.h.
#include <kiln/data/token_loader.h>

#include <glob.h>

#include <algorithm>
#include <sstream>

#include <kiln/core/factory.h>
#include <kiln/core/generator.h>
#include <kiln/core/profiler/profiler.h>

namespace kiln::data {
namespace {

std::vector<std::string> glob_sorted(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);  // GLOB sorts unless GLOB_NOSORT
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  KILN_CHECK_IO(rc == 0 || rc == GLOB_NOMATCH, "TokenLoader: glob(\"", pattern, "\") failed (code ", rc, ")");
  std::sort(out.begin(), out.end());
  return out;
}

// Note [Token range at open]: every token must index the model's vocabulary. Checking only the
// windows a batch draws found a bad token at whatever step drew it (step 93 of a run, again after
// every resume); so each shard's maximum is taken when it is opened, one pass over its tokens that
// the compiler vectorizes (it reads the whole shard once: memory or disk speed), and only a shard
// whose maximum is out of range is scanned again for the first bad token, to name it. Measured: a
// 256 MB shard in 16-18 ms from the page cache (about 65 ms per GB, 2-core AMD EPYC Zen 4 VM,
// 2026-11-28); from a cold disk it costs one read of the shards at disk speed.
void check_token_range(const TokenShard& shard, int64_t vocab) {
  const uint16_t* p = shard.data();  // (n,)
  const int64_t n = shard.size();
  uint16_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = p[i] > m ? p[i] : m;
  if (m < vocab) return;
  for (int64_t i = 0; i < n; ++i)
    KILN_CHECK_IO(p[i] < vocab, "TokenLoader: token shard ", shard.path(), ": token ", p[i], " at token index ", i,
                  " (byte offset ", kTokenShardHeaderBytes + 2 * i, ") is >= vocab_size ", vocab,
                  " (found when the shard was opened, before any step)");
}

}  // namespace

TokenLoader::TokenLoader(TokenLoaderOptions options) : options_(std::move(options)) {
  const int64_t B = options_.batch_size(), T = options_.seq_len();
  const int world = options_.world_size(), rank = options_.rank();
  KILN_CHECK(B > 0 && T > 0, "TokenLoader: batch_size and seq_len must be positive, got B=", B, " T=", T);
  KILN_CHECK(world > 0 && rank >= 0 && rank < world, "TokenLoader: rank ", rank, " is not in [0, world_size=", world,
             ")");
  KILN_CHECK(options_.vocab_size() >= 0 && options_.vocab_size() <= 65536,
             "TokenLoader: vocab_size must be in [0, 65536] (uint16 tokens; 0 = unchecked), got ",
             options_.vocab_size());
  paths_ = glob_sorted(options_.pattern());
  KILN_CHECK_IO(!paths_.empty(), "TokenLoader: no file matches the pattern \"", options_.pattern(), "\"");
  window_start_.push_back(0);
  for (const std::string& p : paths_) {
    TokenShard shard(p);
    KILN_CHECK_IO(shard.size() >= T + 1, "TokenLoader: token shard ", p, " has ", shard.size(),
                  " tokens, too few for one window of seq_len + 1 = ", T + 1, " tokens");
    if (options_.vocab_size() > 0) check_token_range(shard, options_.vocab_size());
    num_tokens_ += shard.size();
    window_start_.push_back(window_start_.back() + (shard.size() - 1) / T);
    shards_.push_back(std::move(shard));
  }
  num_windows_ = window_start_.back();
  global_batch_ = int64_t(world) * B;
  KILN_CHECK(global_batch_ <= num_windows_, "TokenLoader: one global batch needs world_size * B = ", world, " * ", B,
             " = ", global_batch_, " windows (B*T*world_size = ", global_batch_ * T, " tokens) but the ",
             paths_.size(), " shard(s) matching \"", options_.pattern(), "\" hold only ", num_windows_,
             " windows of ", T + 1, " tokens (", num_tokens_, " tokens)");
  // The Feistel network works on 2 * half bits, the smallest even width covering [0, N).
  while ((int64_t(1) << (2 * feistel_half_bits_)) < num_windows_) ++feistel_half_bits_;
}

// Note [Feistel window order]: a 6-round balanced Feistel network keyed by (seed, epoch) through
// Philox is a bijection of [0, 4^h); cycle-walking (re-applying it until the value is < N)
// restricts it to a bijection of [0, N). O(1) memory and O(1) random access, so set_cursor and
// any rank can jump anywhere in an epoch; 4^h < 4N keeps the expected walk under 4 steps.
int64_t TokenLoader::permuted(int64_t epoch, int64_t position) const {
  if (!options_.shuffle()) return position;
  const int h = feistel_half_bits_;
  const uint64_t mask = (uint64_t(1) << h) - 1;
  uint64_t x = static_cast<uint64_t>(position);
  do {
    uint64_t left = x >> h, right = x & mask;
    for (uint32_t round = 0; round < 6; ++round) {
      auto w = philox4x32({uint32_t(right), uint32_t(right >> 32), uint32_t(epoch), round}, options_.seed());
      uint64_t f = (uint64_t(w[0]) << 32 | w[1]) & mask;
      uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = left << h | right;
  } while (x >= static_cast<uint64_t>(num_windows_));
  return static_cast<int64_t>(x);
}

std::pair<int64_t, int64_t> TokenLoader::window_at(int64_t epoch, int64_t position) const {
  KILN_CHECK_INDEX(position >= 0 && position < num_windows_, "TokenLoader::window_at: position ", position,
                   " is not in [0, ", num_windows_, ")");
  int64_t w = permuted(epoch, position);
  auto it = std::upper_bound(window_start_.begin(), window_start_.end(), w);
  int64_t s = (it - window_start_.begin()) - 1;
  return {s, (w - window_start_[s]) * options_.seq_len()};
}

std::string TokenLoader::where(int64_t position) const {
  return detail::str_cat("epoch ", epoch_, ", window position ", position, " of the batch at cursor position ",
                         position_);
}

// Note [Shards changed under a run] (token_shard.h): each window is copied with pread, so a shard
// truncated in place is an IOError here rather than a SIGBUS. Cost against the copy out of the
// mapping it replaced, random windows of a 256 MB shard in the page cache: +0.34 us per window at
// T = 1024 (0.68 -> 1.02 us), +0.33 us at T = 64, +1.5 us at T = 8192 (2-core Intel Xeon VM,
// 2026-11-28): about 3 us for a batch of 8 windows of 1024, next to a step of milliseconds.
void TokenLoader::read_window(const TokenShard& shard, int64_t start, int64_t position, uint16_t* out) const {
  try {
    shard.read(start, options_.seq_len() + 1, out);
  } catch (const IOError& e) {
    throw IOError(detail::str_cat(e.what(), " (TokenLoader rank ", options_.rank(), ": ", where(position), ")"));
  }
}

TokenBatch TokenLoader::next() {
  profiler::Range range("token batch", profiler::Category::data);
  if (position_ + global_batch_ > num_windows_) {
    ++epoch_;
    position_ = 0;
  }
  const int64_t B = options_.batch_size(), T = options_.seq_len(), vocab = options_.vocab_size();
  const TensorOptions host = TensorOptions(DType::i64).pinned_memory(options_.pin_memory());
  Tensor x = empty({B, T}, host), y = empty({B, T}, host);
  int64_t* px = x.data<int64_t>();  // (B, T)
  int64_t* py = y.data<int64_t>();  // (B, T)
  const int64_t first = position_ + int64_t(options_.rank()) * B;
  window_.resize(size_t(T + 1));
  uint16_t* src = window_.data();  // (T + 1,)
  for (int64_t b = 0; b < B; ++b) {
    auto [s, start] = window_at(epoch_, first + b);
    read_window(shards_[s], start, first + b, src);
    if (vocab > 0) {
      for (int64_t t = 0; t <= T; ++t)
        KILN_CHECK_IO(src[t] < vocab, "TokenLoader: token shard ", shards_[s].path(), ": token ", src[t],
                      " at token index ", start + t, " (byte offset ", kTokenShardHeaderBytes + 2 * (start + t),
                      ") is >= vocab_size ", vocab, " (", where(first + b), "; the shard changed since it was opened?)");
    }
    for (int64_t t = 0; t < T; ++t) {
      px[b * T + t] = src[t];
      py[b * T + t] = src[t + 1];
    }
  }
  position_ += global_batch_;
  return {x, y};
}

std::string TokenLoader::cursor() const {
  std::ostringstream os;
  os << "epoch=" << epoch_ << " position=" << position_ << " windows=" << num_windows_
     << " seq_len=" << options_.seq_len() << " seed=" << options_.seed() << " shuffle=" << (options_.shuffle() ? 1 : 0);
  return os.str();
}

void TokenLoader::set_cursor(const std::string& cursor) {
  std::istringstream is(cursor);
  int64_t epoch = -1, position = -1, windows = -1, seq_len = -1, shuffle = -1;
  uint64_t seed = 0;
  bool has_seed = false;
  for (std::string field; is >> field;) {
    auto eq = field.find('=');
    KILN_CHECK(eq != std::string::npos, "TokenLoader::set_cursor: malformed field \"", field, "\" in \"", cursor, "\"");
    std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    try {
      if (key == "epoch") epoch = std::stoll(value);
      else if (key == "position") position = std::stoll(value);
      else if (key == "windows") windows = std::stoll(value);
      else if (key == "seq_len") seq_len = std::stoll(value);
      else if (key == "shuffle") shuffle = std::stoll(value);
      else if (key == "seed") seed = std::stoull(value), has_seed = true;
      else KILN_FAIL("TokenLoader::set_cursor: unknown field \"", key, "\" in \"", cursor, "\"");
    } catch (const std::logic_error&) {
      KILN_FAIL("TokenLoader::set_cursor: bad value \"", value, "\" for ", key, " in \"", cursor, "\"");
    }
  }
  KILN_CHECK(epoch >= 0 && position >= 0 && windows >= 0 && seq_len >= 0 && shuffle >= 0 && has_seed,
             "TokenLoader::set_cursor: \"", cursor, "\" lacks a field (expected ", this->cursor(), ")");
  KILN_CHECK(windows == num_windows_ && seq_len == options_.seq_len() && seed == options_.seed() &&
                 (shuffle != 0) == options_.shuffle(),
             "TokenLoader::set_cursor: the cursor \"", cursor,
             "\" was saved from another dataset or order; this loader is \"", this->cursor(),
             "\" (windows, seq_len, seed and shuffle must match)");
  KILN_CHECK(position <= num_windows_, "TokenLoader::set_cursor: position ", position, " is past the ", num_windows_,
             " windows of an epoch");
  epoch_ = epoch;
  position_ = position;
}

}  // namespace kiln::data
