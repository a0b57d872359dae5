// DataLoader: in-order delivery from a pool of workers over a bounded window of batches
// (Note [DataLoader ordering] in data_loader.h), and the CIFAR batch builder.
#include <kiln/data/data_loader.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/factory.h>
#include <kiln/core/profiler/profiler.h>

namespace kiln::data {

DataLoader::DataLoader(std::vector<int64_t> indices, BatchFn make_batch, const DataLoaderOptions& options)
    : indices_(std::move(indices)), make_batch_(std::move(make_batch)), options_(options) {
  KILN_CHECK(make_batch_ != nullptr, "DataLoader: make_batch is empty");
  KILN_CHECK(options_.batch_size_ >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size_);
  KILN_CHECK(options_.num_workers_ >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers_);
  KILN_CHECK(options_.prefetch_ >= 1, "DataLoader: prefetch must be >= 1, got ", options_.prefetch_);
  KILN_CHECK(!(options_.pin_memory_ || options_.device_.is_cuda()) || cuda::device_count() > 0, "DataLoader: ",
             options_.pin_memory_ ? "pin_memory" : "a CUDA device", " needs a usable CUDA device, but ",
             cuda::build_info(), " and no CUDA device is available");
  const auto n = static_cast<int64_t>(indices_.size());
  num_batches_ = options_.drop_last_ ? n / options_.batch_size_ : (n + options_.batch_size_ - 1) / options_.batch_size_;
  const int64_t threads = std::min(options_.num_workers_, num_batches_);
  workers_.reserve(static_cast<size_t>(threads));
  try {
    for (int64_t i = 0; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
}

DataLoader::Slot DataLoader::build(int64_t b) const {
  profiler::Range range("build batch", profiler::Category::data, {"batch", b});
  const int64_t begin = b * options_.batch_size_;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size_, static_cast<int64_t>(indices_.size()));
  std::span<const int64_t> part(indices_.data() + begin, static_cast<size_t>(end - begin));
  Slot slot;
  try {
    Batch batch = make_batch_(part);
    if (options_.pin_memory_) {
      batch.inputs = batch.inputs.pin_memory();
      batch.targets = batch.targets.pin_memory();
    }
    batch.index = b;
    batch.indices.assign(part.begin(), part.end());
    slot.batch = std::move(batch);
  } catch (const std::exception& e) {
    slot.error = e.what();
  } catch (...) {
    slot.error = "unknown exception";
  }
  return slot;
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ || failed_ || next_claim_ >= num_batches_ || next_claim_ < next_out_ + options_.prefetch_;
    });
    if (stop_ || failed_ || next_claim_ >= num_batches_) return;
    const int64_t b = next_claim_++;
    lock.unlock();
    Slot slot = build(b);
    lock.lock();
    if (!slot.error.empty()) failed_ = true;  // later batches are not started
    ready_.emplace(b, std::move(slot));
    cv_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  profiler::Range range("next batch", profiler::Category::data);
  std::unique_lock<std::mutex> lock(mu_);
  KILN_CHECK(error_.empty(), error_);  // a failed loader keeps failing
  if (next_out_ >= num_batches_) return std::nullopt;
  const int64_t b = next_out_;
  Slot slot;
  if (workers_.empty()) {
    lock.unlock();
    slot = build(b);
    lock.lock();
  } else {
    // Batches are claimed in increasing order and a failure only stops later claims, so b has
    // been claimed and arrives.
    cv_.wait(lock, [&] { return ready_.count(b) != 0; });
    auto it = ready_.find(b);
    slot = std::move(it->second);
    ready_.erase(it);
  }
  if (!slot.error.empty()) {
    failed_ = true;
    error_ = detail::str_cat("DataLoader: building batch ", b, " (dataset indices from ",
                             indices_[static_cast<size_t>(b * options_.batch_size_)], ") failed: ", slot.error);
    cv_.notify_all();
    KILN_FAIL(error_);
  }
  ++next_out_;
  cv_.notify_all();  // a window slot is free
  lock.unlock();
  Batch& batch = *slot.batch;
  if (!options_.device_.is_cpu()) {
    batch.inputs = batch.inputs.to(options_.device_, /*non_blocking=*/true);
    batch.targets = batch.targets.to(options_.device_, /*non_blocking=*/true);
  }
  return std::move(slot.batch);
}

BatchFn cifar10_batches(std::shared_ptr<const Cifar10Dataset> data, const AugmentOptions& augment, int64_t epoch,
                        int64_t rank) {
  KILN_CHECK(data != nullptr, "cifar10_batches: no dataset");
  KILN_CHECK(data->images.is_contiguous() && data->labels.is_contiguous(),
             "cifar10_batches: images and labels must be contiguous (call .contiguous() on a sliced set)");
  return [data = std::move(data), augment, epoch, rank](std::span<const int64_t> indices) {
    Batch batch;
    batch.inputs = augment_gather(*data, indices, epoch, rank, augment);
    batch.targets = empty({static_cast<int64_t>(indices.size())}, DType::i64);
    const int64_t* labels = data->labels.data<int64_t>();
    int64_t* out = batch.targets.data<int64_t>();
    for (size_t i = 0; i < indices.size(); ++i) out[i] = labels[indices[i]];  // range checked by augment_gather
    return batch;
  };
}

}  // namespace kiln::data
