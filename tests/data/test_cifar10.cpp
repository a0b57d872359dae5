// CIFAR-10 reader and writer on files in the official format (generated here), corrupted files
// (wrong size, bad label: the error names the file and record), and the synthetic set.
#include "test_util.h"

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <kiln/data/cifar10.h>

using namespace kiln;
using namespace kiln::data;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_test_cifar10_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// n records whose pixel p of record r is (r * 7 + p) % 256 and label r % 10.
Cifar10Dataset pattern(int64_t n, int64_t label_shift = 0) {
  Cifar10Dataset d{empty({n, 3, 32, 32}, DType::u8), empty({n}, DType::i64)};
  for (int64_t r = 0; r < n; ++r) {
    d.labels.data<int64_t>()[r] = (r + label_shift) % 10;
    for (int64_t p = 0; p < kCifarImageBytes; ++p) d.images.data<uint8_t>()[r * kCifarImageBytes + p] = (r * 7 + p) % 256;
  }
  return d;
}

std::vector<uint8_t> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("a written batch has the official layout and reads back") {
  fs::path dir = temp_dir("layout");
  Cifar10Dataset d = pattern(5);
  write_cifar10_batch((dir / "b.bin").string(), d);
  auto bytes = file_bytes(dir / "b.bin");
  REQUIRE(bytes.size() == 5 * 3073);
  CHECK(bytes[0] == 0);              // label of record 0
  CHECK(bytes[3073] == 1);           // label of record 1
  CHECK(bytes[3073 + 1 + 1024] == (7 + 1024) % 256);  // record 1, G plane, pixel (0, 0)
  Cifar10Dataset back = read_cifar10_batch((dir / "b.bin").string(), Cifar10Options().records_per_file(0));
  CHECK(back.size() == 5);
  CHECK(back.images.shape() == Shape{5, 3, 32, 32});
  CHECK(back.labels.to_vector<int64_t>() == d.labels.to_vector<int64_t>());
  CHECK(back.images.to_vector<int>() == d.images.to_vector<int>());
  // The official size is required by default.
  CHECK_ERROR_CONTAINS(read_cifar10_batch((dir / "b.bin").string()), "b.bin", "15365 bytes", "30730000");
  fs::remove_all(dir);
}

TEST_CASE("load_cifar10 concatenates the five train files in order and reads the test file") {
  fs::path dir = temp_dir("dir");
  Cifar10Dataset train = pattern(20), test = pattern(4, 3);
  write_cifar10(dir.string(), train, test);
  for (int i = 1; i <= 5; ++i) CHECK(fs::file_size(dir / ("data_batch_" + std::to_string(i) + ".bin")) == 4 * 3073);
  auto opts = Cifar10Options().records_per_file(4);
  Cifar10Dataset tr = load_cifar10(dir.string(), Cifar10Split::train, opts);
  CHECK(tr.labels.to_vector<int64_t>() == train.labels.to_vector<int64_t>());
  CHECK(tr.images.to_vector<int>() == train.images.to_vector<int>());
  Cifar10Dataset te = load_cifar10(dir.string(), Cifar10Split::test, opts);
  CHECK(te.labels.to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5, 6});
  fs::remove(dir / "data_batch_4.bin");
  CHECK_ERROR_CONTAINS(load_cifar10(dir.string(), Cifar10Split::train, opts), "data_batch_4.bin", "missing");
  CHECK_ERROR_CONTAINS(write_cifar10(dir.string(), pattern(7), test), "5 equal");
  fs::remove_all(dir);
}

TEST_CASE("corrupted files are refused naming the file and the record") {
  fs::path dir = temp_dir("bad");
  write_cifar10_batch((dir / "ok.bin").string(), pattern(3));
  auto bytes = file_bytes(dir / "ok.bin");

  // Truncated: record 2 is incomplete.
  {
    std::ofstream out(dir / "short.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() - 10));
  }
  CHECK_ERROR_CONTAINS(read_cifar10_batch((dir / "short.bin").string(), Cifar10Options().records_per_file(0)),
                       "short.bin", "9209 bytes", "record 2 is incomplete");
  CHECK_ERROR_CONTAINS(read_cifar10_batch((dir / "ok.bin").string(), Cifar10Options().records_per_file(4)),
                       "ok.bin", "3 records", "expected 12292", "record 3 is missing");

  // Label 10 in record 1.
  bytes[3073] = 10;
  {
    std::ofstream out(dir / "label.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  CHECK_ERROR_CONTAINS(read_cifar10_batch((dir / "label.bin").string(), Cifar10Options().records_per_file(0)),
                       "label.bin", "record 1", "label 10");
  CHECK_ERROR_CONTAINS(read_cifar10_batch((dir / "none.bin").string()), "none.bin", "does not exist");

  Cifar10Dataset bad = pattern(2);
  bad.labels.data<int64_t>()[1] = 12;
  CHECK_ERROR_CONTAINS(write_cifar10_batch((dir / "w.bin").string(), bad), "record 1", "label 12");
  fs::remove_all(dir);
}

TEST_CASE("the synthetic set is deterministic, balanced enough, and class-dependent") {
  Cifar10Dataset a = make_synthetic_cifar10(SyntheticCifarOptions(2000).seed(3));
  Cifar10Dataset b = make_synthetic_cifar10(SyntheticCifarOptions(2000).seed(3));
  Cifar10Dataset c = make_synthetic_cifar10(SyntheticCifarOptions(2000).seed(4));
  REQUIRE(a.images.shape() == Shape{2000, 3, 32, 32});
  CHECK(a.images.to_vector<int>() == b.images.to_vector<int>());
  CHECK(a.labels.to_vector<int64_t>() == b.labels.to_vector<int64_t>());
  CHECK(a.images.to_vector<int>() != c.images.to_vector<int>());
  // Same result with one thread.
  int threads = num_threads();
  set_num_threads(1);
  Cifar10Dataset one = make_synthetic_cifar10(SyntheticCifarOptions(2000).seed(3));
  set_num_threads(threads);
  CHECK(one.images.to_vector<int>() == a.images.to_vector<int>());

  std::vector<int64_t> count(10, 0);
  for (int64_t l : a.labels.to_vector<int64_t>()) count[static_cast<size_t>(l)]++;
  for (int64_t k : count) CHECK((k > 140 && k < 260));
  // The pattern is tinted by class: class 0 is strongest in red, 3 in green, 7 in blue, so the
  // average per-channel variance within an image (noise is the same in every channel) peaks there.
  auto px = a.images.to_vector<int>();
  auto lab = a.labels.to_vector<int64_t>();
  std::vector<std::array<double, 3>> var(10, {0, 0, 0});
  for (size_t i = 0; i < lab.size(); ++i) {
    for (int ch = 0; ch < 3; ++ch) {
      double s = 0, s2 = 0;
      for (int p = 0; p < 1024; ++p) {
        double v = px[i * 3072 + ch * 1024 + p];
        s += v;
        s2 += v * v;
      }
      var[lab[i]][ch] += (s2 / 1024 - (s / 1024) * (s / 1024)) / static_cast<double>(count[lab[i]]);
    }
  }
  const std::pair<int, int> strongest[] = {{0, 0}, {3, 1}, {7, 2}};
  for (auto [cls, ch] : strongest) {
    CAPTURE(cls);
    for (int other = 0; other < 3; ++other)
      if (other != ch) CHECK(var[cls][ch] > 1.1 * var[cls][other]);
  }
  CHECK(std::string(kSyntheticCifarNotice).find("SYNTHETIC") != std::string::npos);
}
