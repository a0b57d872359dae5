// DataLoader: worker threads turn slices of an index list into batches (gather + augment +
// normalize) ahead of the consumer, in a bounded queue, and hand them out in order. With
// pin_memory the workers also copy each batch into page-locked host memory, and with a CUDA
// device next() uploads it asynchronously, so the GPU's queue never waits on decoding or on a
// pageable copy (torch's DataLoader(pin_memory=True) plus .to(device, non_blocking=True)).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/core/tensor.h>
#include <kiln/data/augment.h>
#include <kiln/data/cifar10.h>

namespace kiln::data {

/// One batch of a DataLoader: its index in the epoch, inputs and targets.
struct Batch {
  int64_t index = 0;             ///< position in the epoch: 0, 1, ...
  Tensor inputs;                 ///< e.g. (B, 3, 32, 32) f32
  Tensor targets;                ///< e.g. (B) i64
  std::vector<int64_t> indices;  ///< the dataset indices it holds, in order
};

/// Builds the batch for `indices` (inputs and targets; the loader fills index and indices). It runs
/// on worker threads, several at once, so it must be thread-safe and depend only on its arguments.
using BatchFn = std::function<Batch(std::span<const int64_t> indices)>;

/// Options of DataLoader (torch's DataLoader arguments): batch size, worker threads, prefetch depth
/// and the rest below.
struct DataLoaderOptions {
  KILN_ARG(int64_t, batch_size) = 512;
  KILN_ARG(int64_t, num_workers) = 2;  ///< 0: batches are built on the consumer's thread inside next()
  KILN_ARG(int64_t, prefetch) = 4;     ///< batches built ahead of the consumer at most (the queue's bound)
  KILN_ARG(bool, drop_last) = false;   ///< drop a final batch smaller than batch_size
  KILN_ARG(bool, pin_memory) = false;  ///< workers copy batches into page-locked memory (CUDA builds with a GPU)
  KILN_ARG(Device, device) = Device::cpu();  ///< next() returns batches on this device (non-blocking if pinned)

  explicit DataLoaderOptions(int64_t batch_size = 512) : batch_size_(batch_size) {}
};

/// Note [DataLoader ordering]
/// Batch b holds indices[b * batch_size, (b + 1) * batch_size). Workers claim batch numbers in
/// increasing order but may finish out of order; next() returns batch b only after b - 1, so the
/// sequence is the same for any num_workers. A worker does not start batch b until
/// b < (next batch to hand out) + prefetch: at most `prefetch` batches wait in memory. An
/// exception thrown while building batch b is rethrown by the next() that would return b, as a
/// kiln::Error naming the batch; batches after it are then not built and every later next()
/// throws the same error. The destructor stops the
/// workers and joins them whether or not the consumer read every batch.
class DataLoader {
 public:
  DataLoader(std::vector<int64_t> indices, BatchFn make_batch, const DataLoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// The next batch in order, or nullopt after the last. With options.device a CUDA device, its
  /// tensors are uploaded there on the calling thread's current stream (non-blocking when pinned:
  /// the host block is kept until the copy is done, and later work on that stream sees the data).
  std::optional<Batch> next();

  int64_t num_batches() const { return num_batches_; }
  int64_t batch_size() const { return options_.batch_size_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::string error;
  };
  Slot build(int64_t b) const;
  void worker_loop();

  std::vector<int64_t> indices_;
  BatchFn make_batch_;
  DataLoaderOptions options_;
  int64_t num_batches_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Slot> ready_;  ///< built, not yet handed out
  int64_t next_claim_ = 0;         ///< the next batch a worker builds
  int64_t next_out_ = 0;           ///< the next batch next() returns
  bool stop_ = false;
  bool failed_ = false;
  std::string error_;  ///< set once a batch failed; every later next() rethrows it
  std::vector<std::thread> workers_;
};

/// A BatchFn over a CIFAR split: inputs = augment_gather(data, indices, epoch, rank, augment)
/// (f32 (B, 3, 32, 32)), targets = the labels (i64 (B)).
BatchFn cifar10_batches(std::shared_ptr<const Cifar10Dataset> data, const AugmentOptions& augment, int64_t epoch,
                        int64_t rank);

}  // namespace kiln::data
