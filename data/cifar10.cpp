// CIFAR-10 binary batches: reading (with size and label checks that name the file and record),
// writing, and the synthetic CIFAR-shaped set (Note [Synthetic CIFAR] in cifar10.h).
#include <kiln/data/cifar10.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>

#include <kiln/core/factory.h>
#include <kiln/core/generator.h>
#include <kiln/core/parallel.h>

namespace kiln::data {

namespace {

namespace fs = std::filesystem;

void check_dataset(const Cifar10Dataset& data, const char* what) {
  KILN_CHECK(data.images.defined() && data.labels.defined(), what, ": the dataset has no images or labels");
  KILN_CHECK(data.images.dtype() == DType::u8 && data.images.dim() == 4 && data.images.size(1) == kCifarChannels &&
                 data.images.size(2) == kCifarHeight && data.images.size(3) == kCifarWidth,
             what, ": images must be u8 (N, 3, 32, 32), got ", data.images.dtype(), " ", data.images.shape());
  KILN_CHECK(data.labels.dtype() == DType::i64 && data.labels.dim() == 1 && data.labels.size(0) == data.images.size(0),
             what, ": labels must be i64 (", data.images.size(0), "), got ", data.labels.dtype(), " ",
             data.labels.shape());
}

Cifar10Dataset allocate(int64_t n) {
  return {empty({n, kCifarChannels, kCifarHeight, kCifarWidth}, DType::u8), empty({n}, DType::i64)};
}

// Reads `path` into rows [row, row + records) of `out`.
void read_into(const std::string& path, int64_t records, Cifar10Dataset& out, int64_t row) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "CIFAR-10: cannot open ", path);
  std::vector<uint8_t> record(kCifarRecordBytes);
  uint8_t* images = out.images.data<uint8_t>() + row * kCifarImageBytes;
  int64_t* labels = out.labels.data<int64_t>() + row;
  for (int64_t r = 0; r < records; ++r) {
    in.read(reinterpret_cast<char*>(record.data()), kCifarRecordBytes);
    KILN_CHECK(in.gcount() == kCifarRecordBytes, "CIFAR-10: ", path, ": record ", r, " is truncated (read ",
               in.gcount(), " of ", kCifarRecordBytes, " bytes)");
    KILN_CHECK(record[0] < kCifarClasses, "CIFAR-10: ", path, ": record ", r, " (byte offset ", r * kCifarRecordBytes,
               ") has label ", int(record[0]), ", expected 0..9");
    labels[r] = record[0];
    std::memcpy(images + r * kCifarImageBytes, record.data() + 1, kCifarImageBytes);
  }
}

// The number of records in `path`, checked against the options.
int64_t record_count(const std::string& path, const Cifar10Options& options) {
  std::error_code ec;
  KILN_CHECK(fs::is_regular_file(path, ec), "CIFAR-10: ", path, " does not exist or is not a file");
  const auto bytes = static_cast<int64_t>(fs::file_size(path, ec));
  KILN_CHECK(!ec, "CIFAR-10: cannot read the size of ", path, ": ", ec.message());
  KILN_CHECK(bytes > 0 && bytes % kCifarRecordBytes == 0, "CIFAR-10: ", path, " has ", bytes,
             " bytes, not a whole number of ", kCifarRecordBytes, "-byte records (record ", bytes / kCifarRecordBytes,
             " is incomplete)");
  const int64_t records = bytes / kCifarRecordBytes;
  const int64_t want = options.records_per_file_;
  KILN_CHECK(want == 0 || records == want, "CIFAR-10: ", path, " has ", bytes, " bytes (", records,
             " records), expected ", want * kCifarRecordBytes, " (", want, " records of ", kCifarRecordBytes,
             " bytes)", records > want ? "" : detail::str_cat("; record ", records, " is missing"));
  return records;
}

// splitmix64: mixes a seed into a Philox key.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

Cifar10Dataset read_cifar10_batch(const std::string& path, const Cifar10Options& options) {
  KILN_CHECK(options.records_per_file_ >= 0, "CIFAR-10: records_per_file must be >= 0, got ",
             options.records_per_file_);
  const int64_t n = record_count(path, options);
  Cifar10Dataset out = allocate(n);
  read_into(path, n, out, 0);
  return out;
}

Cifar10Dataset load_cifar10(const std::string& dir, Cifar10Split split, const Cifar10Options& options) {
  std::vector<std::string> names;
  if (split == Cifar10Split::train) {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  std::vector<std::string> paths;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const auto& name : names) {
    std::string path = (fs::path(dir) / name).string();
    KILN_CHECK(fs::exists(path), "CIFAR-10: ", path, " is missing (expected ", names.front(),
               names.size() > 1 ? " ... " + names.back() : std::string(), " in ", dir,
               ", the cifar-10-batches-bin folder of cifar-10-binary.tar.gz; scripts/get-cifar10.sh fetches it)");
    paths.push_back(path);
    counts.push_back(record_count(path, options));
    total += counts.back();
  }
  Cifar10Dataset out = allocate(total);
  int64_t row = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    read_into(paths[i], counts[i], out, row);
    row += counts[i];
  }
  return out;
}

void write_cifar10_batch(const std::string& path, const Cifar10Dataset& data) {
  check_dataset(data, "write_cifar10_batch");
  const Tensor images = data.images.contiguous();
  const std::vector<int64_t> labels = data.labels.to_vector<int64_t>();
  for (size_t r = 0; r < labels.size(); ++r)
    KILN_CHECK(labels[r] >= 0 && labels[r] < kCifarClasses, "write_cifar10_batch: record ", r, " has label ",
               labels[r], ", expected 0..9");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out.good(), "write_cifar10_batch: cannot create ", path);
  const auto* pixels = images.data<uint8_t>();
  for (size_t r = 0; r < labels.size(); ++r) {
    const char label = static_cast<char>(labels[r]);
    out.write(&label, 1);
    out.write(reinterpret_cast<const char*>(pixels + r * kCifarImageBytes), kCifarImageBytes);
  }
  out.flush();
  KILN_CHECK(out.good(), "write_cifar10_batch: writing ", path, " failed");
}

void write_cifar10(const std::string& dir, const Cifar10Dataset& train, const Cifar10Dataset& test) {
  check_dataset(train, "write_cifar10 (train)");
  check_dataset(test, "write_cifar10 (test)");
  KILN_CHECK(train.size() > 0 && train.size() % 5 == 0, "write_cifar10: the train split (", train.size(),
             " images) must split into 5 equal batch files");
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec, "write_cifar10: cannot create ", dir, ": ", ec.message());
  const int64_t per_file = train.size() / 5;
  for (int64_t i = 0; i < 5; ++i)
    write_cifar10_batch((fs::path(dir) / ("data_batch_" + std::to_string(i + 1) + ".bin")).string(),
                        slice(train, i * per_file, (i + 1) * per_file));
  write_cifar10_batch((fs::path(dir) / "test_batch.bin").string(), test);
}

Cifar10Dataset slice(const Cifar10Dataset& data, int64_t begin, int64_t end) {
  KILN_CHECK(0 <= begin && begin <= end && end <= data.size(), "slice: rows [", begin, ", ", end,
             ") are outside a dataset of ", data.size());
  return {data.images.slice(0, begin, end), data.labels.slice(0, begin, end)};
}

Cifar10Dataset make_synthetic_cifar10(const SyntheticCifarOptions& options) {
  const int64_t n = options.size_;
  KILN_CHECK(n >= 0, "make_synthetic_cifar10: size must be >= 0, got ", n);
  KILN_CHECK(options.noise_ >= 0 && options.contrast_ >= 0, "make_synthetic_cifar10: noise (", options.noise_,
             ") and contrast (", options.contrast_, ") must be >= 0");
  Cifar10Dataset out = allocate(n);
  uint8_t* images = out.images.data<uint8_t>();
  int64_t* labels = out.labels.data<int64_t>();
  const uint64_t key = mix(options.seed_ ^ 0xC1FA510ull);
  // Per sample: counters [i * kStride, i * kStride + 8) for the parameters, then one per pixel.
  constexpr uint64_t kParams = 8, kStride = kParams + kCifarImageBytes;
  parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t base = static_cast<uint64_t>(i) * kStride;
      auto u = [&](uint64_t k) { return philox_uniform(key, base + k); };
      const int64_t c = std::min<int64_t>(static_cast<int64_t>(u(0) * kCifarClasses), kCifarClasses - 1);
      labels[i] = c;
      const double theta = std::numbers::pi * static_cast<double>(c) / kCifarClasses;
      const double freq = 2.0 * std::numbers::pi * (1.5 + 0.25 * static_cast<double>(c % 4)) / kCifarWidth;
      const double phase = 2.0 * std::numbers::pi * u(1);
      const double cy = 8.0 + 16.0 * u(2), cx = 8.0 + 16.0 * u(3);  // window centre
      const double sigma = 7.0 + 4.0 * u(4);
      const double amp = options.contrast_ * (0.6 + 0.8 * u(5));
      const double bg = 100.0 + 56.0 * u(6);
      // Class tint: a hue c/10 around the colour wheel, as a per-channel gain in [0.2, 1].
      double tint[3];
      for (int ch = 0; ch < 3; ++ch)
        tint[ch] = 0.6 + 0.4 * std::cos(2.0 * std::numbers::pi * (static_cast<double>(c) / kCifarClasses - ch / 3.0));
      uint8_t* img = images + i * kCifarImageBytes;
      for (int64_t y = 0; y < kCifarHeight; ++y) {
        for (int64_t x = 0; x < kCifarWidth; ++x) {
          const double dy = static_cast<double>(y) - cy, dx = static_cast<double>(x) - cx;
          const double window = std::exp(-(dx * dx + dy * dy) / (2.0 * sigma * sigma));
          const double wave = std::cos(freq * (dx * std::cos(theta) + dy * std::sin(theta)) + phase);
          for (int64_t ch = 0; ch < kCifarChannels; ++ch) {
            const int64_t p = (ch * kCifarHeight + y) * kCifarWidth + x;
            const double noise = options.noise_ * philox_normal(key, base + kParams + static_cast<uint64_t>(p));
            const double v = bg + amp * tint[ch] * window * wave + noise;
            img[p] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
          }
        }
      }
    }
  });
  return out;
}

}  // namespace kiln::data
