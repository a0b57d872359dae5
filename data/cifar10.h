// CIFAR-10 in its official binary format (data_batch_1.bin ... data_batch_5.bin, test_batch.bin:
// records of 1 label byte + 3072 pixel bytes, the R, G and B 32x32 planes), a writer for that
// format, and a synthetic CIFAR-shaped set for machines without the download.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::data {

inline constexpr int64_t kCifarClasses = 10;
inline constexpr int64_t kCifarChannels = 3;
inline constexpr int64_t kCifarHeight = 32;
inline constexpr int64_t kCifarWidth = 32;
inline constexpr int64_t kCifarImageBytes = kCifarChannels * kCifarHeight * kCifarWidth;  ///< 3072
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;                          ///< 3073
inline constexpr int64_t kCifarRecordsPerFile = 10000;

/// A split held in host memory. Copying aliases the tensors (Tensor is a shared handle).
struct Cifar10Dataset {
  Tensor images;  ///< (N, 3, 32, 32) u8, CHW as in the files
  Tensor labels;  ///< (N) i64 in [0, 10)
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

enum class Cifar10Split { train, test };

/// Options of the CIFAR-10 reader.
struct Cifar10Options {
  int64_t records_per_file_ = kCifarRecordsPerFile;  ///< the official size; 0 accepts any whole count
  Cifar10Options& records_per_file(int64_t n) { records_per_file_ = n; return *this; }
};

/// One batch file. Refuses a size that is not records_per_file records (naming the file, its size
/// and the first incomplete record) and a label >= 10 (naming the file and the record number).
Cifar10Dataset read_cifar10_batch(const std::string& path, const Cifar10Options& options = {});

/// The train split (data_batch_1.bin ... data_batch_5.bin, concatenated in that order) or the test
/// split (test_batch.bin) from `dir`, as extracted from cifar-10-binary.tar.gz (the folder
/// cifar-10-batches-bin). A missing file is reported with the path and the expected names.
Cifar10Dataset load_cifar10(const std::string& dir, Cifar10Split split, const Cifar10Options& options = {});

/// Writes `data` as one file in the official format (checks shapes, dtypes and labels first).
void write_cifar10_batch(const std::string& path, const Cifar10Dataset& data);
/// Writes a directory load_cifar10 reads: train split into 5 equal data_batch_*.bin files (its size
/// must be a multiple of 5; read back with records_per_file(train.size() / 5)) and test_batch.bin.
void write_cifar10(const std::string& dir, const Cifar10Dataset& train, const Cifar10Dataset& test);

/// Rows [begin, end) of a dataset (views, no copy).
Cifar10Dataset slice(const Cifar10Dataset& data, int64_t begin, int64_t end);

/// Note [Synthetic CIFAR]
/// Each class c has its own low-frequency pattern: a sinusoidal grating at orientation c * 18
/// degrees and a class-specific spatial frequency, tinted with a class colour, seen through a
/// Gaussian window centred at a random position with a random phase and contrast. Strong
/// independent pixel noise (std `noise` grey levels) is added and values are clamped to [0, 255].
/// A small CNN learns it well above chance, but not to 100% in one epoch. Everything is a pure
/// function of (seed, sample index), so the set is the same for any thread count.
struct SyntheticCifarOptions {
  int64_t size_ = 10000;
  uint64_t seed_ = 0;
  double noise_ = 48.0;     ///< pixel noise std, in grey levels
  double contrast_ = 70.0;  ///< pattern amplitude, in grey levels (jittered per sample)

  SyntheticCifarOptions() = default;
  explicit SyntheticCifarOptions(int64_t size) : size_(size) {}
  SyntheticCifarOptions& size(int64_t n) { size_ = n; return *this; }
  SyntheticCifarOptions& seed(uint64_t s) { seed_ = s; return *this; }
  SyntheticCifarOptions& noise(double v) { noise_ = v; return *this; }
  SyntheticCifarOptions& contrast(double v) { contrast_ = v; return *this; }
};

/// What a program using the synthetic set should print, so nobody mistakes its accuracy for CIFAR's.
inline constexpr const char* kSyntheticCifarNotice =
    "NOTICE: training on SYNTHETIC CIFAR-shaped data (class-dependent patterns plus noise), not "
    "CIFAR-10; accuracies are not comparable to CIFAR-10 results. Run scripts/get-cifar10.sh DIR "
    "to download the real data set.";

Cifar10Dataset make_synthetic_cifar10(const SyntheticCifarOptions& options = {});

}  // namespace kiln::data
