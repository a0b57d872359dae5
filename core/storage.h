// Storage: one owned (or wrapped) block of bytes on one device, shared by every tensor that views
// it. Memory comes from the device's Allocator; the CPU one hands out 64-byte aligned blocks, the
// CUDA one is a caching allocator (core/cuda/runtime/caching_allocator.h). Pinned storages are CPU
// memory page-locked with cudaHostAlloc, which the GPU copies from/to asynchronously.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <kiln/core/device.h>

namespace kiln {

/// Hands out and takes back the raw memory of one device type's storages.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) noexcept = 0;
  /// For allocators serving several devices of a type (CUDA: one pool per device); Storage calls
  /// these. The defaults ignore the device.
  virtual void* allocate_on(size_t nbytes, Device device) {
    (void)device;
    return allocate(nbytes);
  }
  virtual void deallocate_on(void* ptr, size_t nbytes, Device device) noexcept {
    (void)device;
    deallocate(ptr, nbytes);
  }
};

///@{
/// The allocator for a device type; CUDA's is installed by the CUDA backend when it is built.
Allocator* get_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);
///@}

/// A block of bytes on one device, owned (from the device's Allocator) or wrapped, shared by every
/// tensor that views it (the file's header).
class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  /// Fresh memory from the device's allocator.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  /// Fresh page-locked host memory (a CPU storage) from the CUDA pinned-memory cache; throws when
  /// Kiln was built without CUDA or no device is available.
  static std::shared_ptr<Storage> allocate_pinned(size_t nbytes);
  /// Memory owned elsewhere (an mmap, a caller's buffer); `deleter` runs when the last view dies.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device, Deleter deleter = nullptr);

  Storage(void* data, size_t nbytes, Device device, Deleter deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_pinned() const { return pinned_; }

  /// torch's UntypedStorage::resize_ for the bytes of an allocator-owned storage (Storage::allocate):
  /// 0 releases them, any other size gets fresh, uninitialised ones from the same allocator (the old
  /// bytes are dropped, not copied). Every tensor viewing the storage keeps its shape and sees the new
  /// bytes, so FSDP frees a gathered parameter while the autograd graph still holds views of it, and
  /// refills it before they are read again (Note [FSDP unit storage], parallel/fsdp.h). Reading a view
  /// while its storage is released is an error of the caller. Not synchronised.
  void resize(size_t nbytes);

  /// Note [Storage release notes]
  /// An owner that releases and refills a storage (FSDP, Note [FSDP unit storage]) tells the ops that
  /// meet it (Note [Reads within the storage] in core/ops/common.h, in the source tree): `pending` while an
  /// asynchronous write into the bytes (a prefetched all-gather) is not waited for, and a note saying what
  /// the tensor at a byte offset is and how to get its bytes back, which their errors quote. Core knows
  /// nothing of the owner. The note is called only to build an error. Not synchronised: the owner sets both
  /// on the thread that runs the ops.
  using ReleaseNote = std::function<std::string(size_t byte_offset)>;
  void set_release_note(ReleaseNote note) { release_note_ = std::move(note); }
  const ReleaseNote& release_note() const { return release_note_; }
  void set_pending(bool pending) { pending_ = pending; }
  bool is_pending() const { return pending_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
  Allocator* allocator_ = nullptr;  ///< set by allocate(): what resize() takes bytes from
  bool pinned_ = false;
  bool pending_ = false;
  ReleaseNote release_note_;
};

}  // namespace kiln
