// CUDA memory as CPU code sees it (no CUDA headers): statistics and cache control of the caching
// device allocator, stream marks for memory used on other streams, and the out-of-memory error.
// Pinned host memory is Tensor::pin_memory() / empty(shape, TensorOptions().pinned_memory()).
#pragma once

#include <cstddef>
#include <cstdint>

#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/error.h>

namespace kiln {
class Allocator;
class Storage;
class Tensor;
}  // namespace kiln

namespace kiln::cuda {

// The device had no room even after the allocator gave its cached memory back. The message says
// how many bytes were asked, what Kiln holds, and the device's total and free memory.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// One device's allocator statistics. Byte counts are of blocks (requests rounded up to 512 B).
struct MemoryStats {
  int64_t allocated_bytes = 0;       // in blocks handed out to tensors now
  int64_t reserved_bytes = 0;        // in segments obtained with cudaMalloc (allocated + cached)
  int64_t peak_allocated_bytes = 0;  // since the start or the last reset_peak_stats()
  int64_t peak_reserved_bytes = 0;
  int64_t num_allocs = 0;            // allocations served, from the cache or not
  int64_t num_device_mallocs = 0;    // cudaMalloc calls (each a new segment)
  int64_t num_device_frees = 0;      // cudaFree calls (each a whole segment given back)
  int64_t num_alloc_retries = 0;     // cudaMalloc failures answered by freeing the cache and retrying
  int64_t num_ooms = 0;              // allocations that ended in OutOfMemoryError
  int64_t pending_frees = 0;         // freed blocks waiting for other streams (see record_stream)
};

// Statistics of `device` (-1: the current device).
MemoryStats memory_stats(int device = -1);
// Peaks restart from the current values.
void reset_peak_stats(int device = -1);
// Gives every cached segment that holds no live block back to the driver (cudaFree), on every
// device, and frees the cached pinned host blocks. Waits for deferred frees first. Memory in
// live tensors stays where it is.
void empty_cache();

// Marks that `stream` uses the memory of `t` (a CUDA tensor, or a pinned CPU tensor read or
// written by an asynchronous copy). The allocator hands a freed block out again only to
// allocations on the stream it was allocated on; after record_stream it also waits, before
// reusing the block, until the work queued on `stream` up to the free has finished (torch's
// Tensor.record_stream). Needed whenever a tensor allocated on one stream is used on another
// and may be freed while that work is still queued.
void record_stream(const Tensor& t, Stream stream);
void record_stream(const Storage& storage, Stream stream);

// The caching device allocator, installed for DeviceType::CUDA when a device is found.
Allocator* device_allocator();
// The caching allocator of page-locked (pinned) host memory, cudaHostAlloc'd. Storages from it
// are CPU storages with Storage::is_pinned(). Built without CUDA it throws.
Allocator* pinned_host_allocator();

}  // namespace kiln::cuda
