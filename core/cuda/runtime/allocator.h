// CUDA memory as CPU code sees it (no CUDA headers): the allocators and stream marks for memory
// used on other streams. Statistics, empty_cache and OutOfMemoryError are user API (kiln/cuda.h).
// Pinned host memory is Tensor::pin_memory() / empty(shape, TensorOptions().pinned_memory()).
#pragma once

#include <cstddef>
#include <cstdint>

#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/cuda.h>

namespace kiln {
class Allocator;
class Storage;
class Tensor;
}  // namespace kiln

namespace kiln::cuda {

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
