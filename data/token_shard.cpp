// TokenShard: mmap + header validation, pread of windows; write_token_shard: tmp file, fsync, rename.
// Shards are little-endian on disk; Kiln only builds for little-endian hosts (checked below).
#include <kiln/data/token_shard.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include <kiln/core/error.h>

namespace kiln::data {

static_assert(std::endian::native == std::endian::little, "token shards are little-endian");

TokenShard::TokenShard(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK_IO(fd_ >= 0, "token shard ", path_, ": cannot open: ", std::strerror(errno));
  try {
    struct stat st {};
    KILN_CHECK_IO(::fstat(fd_, &st) == 0, "token shard ", path_, ": cannot stat: ", std::strerror(errno));
    const int64_t file_bytes = st.st_size;
    file_bytes_ = file_bytes;
    KILN_CHECK_IO(file_bytes >= kTokenShardHeaderBytes, "token shard ", path_, ": truncated: the file has ",
                  file_bytes, " bytes, fewer than the ", kTokenShardHeaderBytes, "-byte header");
    void* map = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd_, 0);
    KILN_CHECK_IO(map != MAP_FAILED, "token shard ", path_, ": mmap of ", file_bytes,
                  " bytes failed: ", std::strerror(errno));
    map_ = map;
    map_bytes_ = static_cast<size_t>(file_bytes);
    int32_t header[3];
    std::memcpy(header, map_, sizeof header);
    KILN_CHECK_IO(header[0] == kTokenShardMagic, "token shard ", path_, ": bad magic at byte offset 0: expected ",
                  kTokenShardMagic, ", found ", header[0], " (not an llm.c/modded-nanogpt token shard)");
    KILN_CHECK_IO(header[1] == kTokenShardVersion, "token shard ", path_,
                  ": unsupported version at byte offset 4: expected ", kTokenShardVersion, ", found ", header[1]);
    KILN_CHECK_IO(header[2] >= 0, "token shard ", path_, ": negative token count at byte offset 8: ", header[2]);
    const int64_t expected = kTokenShardHeaderBytes + 2 * int64_t(header[2]);
    KILN_CHECK_IO(file_bytes == expected, "token shard ", path_,
                  ": size mismatch: the header (byte offset 8) declares ",
                  header[2], " tokens, so the file should have 1024 + 2 * ", header[2], " = ", expected,
                  " bytes, but it has ", file_bytes, " bytes (", file_bytes < expected ? "truncated" : "trailing data",
                  ")");
    size_ = header[2];
    tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + kTokenShardHeaderBytes);
  } catch (...) {
    release();
    throw;
  }
}

TokenShard::~TokenShard() { release(); }

void TokenShard::read(int64_t first, int64_t count, uint16_t* out) const {
  KILN_CHECK_INDEX(first >= 0 && count >= 0 && first <= size_ - count, "token shard ", path_, ": tokens [", first,
                   ", ", first + count, ") are not in [0, ", size_, ")");
  const int64_t offset = kTokenShardHeaderBytes + 2 * first;
  const size_t want = static_cast<size_t>(count) * 2;
  char* dst = reinterpret_cast<char*>(out);
  for (size_t got = 0; got < want;) {
    const ssize_t n = ::pread(fd_, dst + got, want - got, static_cast<off_t>(offset + int64_t(got)));
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const std::string why = n < 0 ? std::string("failed: ") + std::strerror(errno) : "reached the end of the file";
    struct stat st {};
    const int64_t now = ::fstat(fd_, &st) == 0 ? int64_t(st.st_size) : -1;
    KILN_FAIL_IO("token shard ", path_, ": reading tokens [", first, ", ", first + count, ") at byte offset ", offset,
                 " (", want, " bytes) ", why, " after ", got, " bytes; the file has ", now, " bytes now and had ",
                 file_bytes_, " when it was opened (truncated or rewritten in place while it was being read?)");
  }
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_bytes_(std::exchange(other.file_bytes_, 0)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_bytes_ = std::exchange(other.file_bytes_, 0);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void TokenShard::release() noexcept {
  if (map_ != nullptr && ::munmap(map_, map_bytes_) != 0)
    std::fprintf(stderr, "kiln: token shard %s: munmap of %zu bytes failed: %s\n", path_.c_str(), map_bytes_,
                 std::strerror(errno));
  if (fd_ >= 0 && ::close(fd_) != 0)
    std::fprintf(stderr, "kiln: token shard %s: close failed: %s\n", path_.c_str(), std::strerror(errno));
  fd_ = -1;
  file_bytes_ = 0;
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  size_ = 0;
}

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  KILN_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()), "write_token_shard ", path, ": ",
             tokens.size(), " tokens do not fit the int32 token count of the header (at most ",
             std::numeric_limits<int32_t>::max(), ")");
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  KILN_CHECK_IO(f != nullptr, "write_token_shard ", path, ": cannot create ", tmp, ": ", std::strerror(errno));
  auto fail = [&](const char* what) {
    int err = errno;
    std::fclose(f);
    std::remove(tmp.c_str());
    KILN_FAIL_IO("write_token_shard ", path, ": ", what, " ", tmp, " failed: ", std::strerror(err));
  };
  std::array<int32_t, kTokenShardHeaderBytes / 4> header{};
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  if (std::fwrite(header.data(), sizeof header, 1, f) != 1) fail("writing the header of");
  if (!tokens.empty() && std::fwrite(tokens.data(), 2, tokens.size(), f) != tokens.size())
    fail("writing the tokens of");
  if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) fail("flushing");
  if (std::fclose(f) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    KILN_FAIL_IO("write_token_shard ", path, ": closing ", tmp, " failed: ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    KILN_FAIL_IO("write_token_shard ", path, ": renaming ", tmp, " failed: ", std::strerror(err));
  }
}

}  // namespace kiln::data
