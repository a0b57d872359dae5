// FileStore: keys are files in one directory. A value is written to a temporary file and renamed
// into place (readers see all of it or nothing); add() holds an exclusive flock on the key's lock
// file while it reads, increments and republishes the counter; get/wait poll with short sleeps.
#include <kiln/parallel/file_store.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include <kiln/core/error.h>

namespace kiln::dist {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kClosedKey = "__kiln_file_store_closed";

// File-name-safe spelling of a key: [A-Za-z0-9._-] kept, every other byte as %XX.
std::string encode_key(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

class FileStore final : public Store {
 public:
  FileStore(std::string path, int world_size) : dir_(std::move(path)), world_size_(world_size) {
    KILN_CHECK(world_size >= 1, "make_file_store: world_size must be >= 1, got ", world_size);
    std::error_code ec;
    fs::create_directories(dir_, ec);
    KILN_CHECK_DIST(fs::is_directory(dir_), "make_file_store: cannot create directory ", dir_, ": ", ec.message());
  }

  ~FileStore() override {
    try {
      if (add(kClosedKey, 1) == world_size_) remove_files();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: FileStore at %s: cleanup failed: %s\n", dir_.c_str(), e.what());
    }
  }

  void set(const std::string& key, const Bytes& value) override { publish(key, value); }

  Bytes get(const std::string& key) override {
    wait({key}, timeout_);
    Bytes value;
    KILN_CHECK_DIST(read_value(key, value), "FileStore get: key \"", key, "\" vanished from ", dir_);
    return value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::string lock_path = dir_ + "/lock_" + encode_key(key);
    Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    KILN_CHECK_DIST(lock.fd >= 0, "FileStore add: cannot open ", lock_path, ": ", std::strerror(errno));
    while (::flock(lock.fd, LOCK_EX) != 0) {
      KILN_CHECK_DIST(errno == EINTR, "FileStore add: flock on ", lock_path, " failed: ", std::strerror(errno));
    }
    int64_t value = 0;
    Bytes current;
    if (read_value(key, current)) {
      std::string s(current.begin(), current.end());
      try {
        value = std::stoll(s);
      } catch (const std::exception&) {
        KILN_FAIL_DIST("FileStore add: key \"", key, "\" holds \"", s, "\", not an integer");
      }
    }
    value += delta;
    std::string s = std::to_string(value);
    publish(key, Bytes(s.begin(), s.end()));
    return value;  // the lock is released when `lock` closes
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::microseconds(100);
    while (true) {
      std::vector<std::string> missing;
      for (const auto& k : keys)
        if (!check(k)) missing.push_back(k);
      if (missing.empty()) return;
      if (Clock::now() >= deadline) {
        std::string names;
        for (const auto& k : missing) names += (names.empty() ? "\"" : ", \"") + k + "\"";
        KILN_FAIL_DIST("FileStore at ", dir_, ": timed out after ", timeout.count(), " ms waiting for key(s) ",
                        names);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10000));
    }
  }

  bool check(const std::string& key) override {
    struct stat st;
    return ::stat(value_path(key).c_str(), &st) == 0;
  }

 private:
  std::string value_path(const std::string& key) const { return dir_ + "/k_" + encode_key(key); }

  // Writes a temporary file and renames it over the key's file.
  void publish(const std::string& key, const Bytes& value) {
    static std::atomic<uint64_t> counter{0};
    std::string tmp = dir_ + "/.tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    {
      Fd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      KILN_CHECK_DIST(f.fd >= 0, "FileStore set \"", key, "\": cannot create ", tmp, ": ", std::strerror(errno));
      size_t done = 0;
      while (done < value.size()) {
        ssize_t n = ::write(f.fd, value.data() + done, value.size() - done);
        if (n < 0 && errno == EINTR) continue;
        KILN_CHECK_DIST(n > 0, "FileStore set \"", key, "\": write to ", tmp, " failed: ", std::strerror(errno));
        done += static_cast<size_t>(n);
      }
    }
    std::string path = value_path(key);
    KILN_CHECK_DIST(::rename(tmp.c_str(), path.c_str()) == 0, "FileStore set \"", key, "\": rename to ", path,
                    " failed: ", std::strerror(errno));
  }

  // The key's whole value, or false when the key does not exist.
  bool read_value(const std::string& key, Bytes& out) {
    Fd f(::open(value_path(key).c_str(), O_RDONLY | O_CLOEXEC));
    if (f.fd < 0) {
      KILN_CHECK_DIST(errno == ENOENT, "FileStore get \"", key, "\": cannot open ", value_path(key), ": ",
                      std::strerror(errno));
      return false;
    }
    out.clear();
    uint8_t buf[4096];
    while (true) {
      ssize_t n = ::read(f.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      KILN_CHECK_DIST(n >= 0, "FileStore get \"", key, "\": read failed: ", std::strerror(errno));
      if (n == 0) return true;
      out.insert(out.end(), buf, buf + n);
    }
  }

  // Every rank has closed its store: remove the key and lock files, and the directory when empty.
  void remove_files() {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      std::string name = entry.path().filename().string();
      if (name.rfind("k_", 0) == 0 || name.rfind("lock_", 0) == 0) fs::remove(entry.path(), ec);
    }
    fs::remove(dir_, ec);  // only succeeds when nothing else is there
  }

  std::string dir_;
  int world_size_;
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& path, int world_size) {
  return std::make_shared<FileStore>(path, world_size);
}

}  // namespace kiln::dist
