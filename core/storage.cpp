// Storage and the per-device allocator registry (the CPU allocator is in cpu_allocator.cpp).
#include <kiln/core/storage.h>

#include <cstdio>
#include <cstdlib>
#include <new>

#include <kiln/core/cpu_allocator.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/error.h>

namespace kiln {

namespace {

Allocator*& allocator_slot(DeviceType type) {
  static Allocator* slots[2] = {cpu_allocator(), nullptr};
  return slots[static_cast<int>(type)];
}

}  // namespace

Allocator* get_allocator(DeviceType type) {
  if (type == DeviceType::CUDA && allocator_slot(type) == nullptr) {
    KILN_CHECK(cuda::device_count() > 0, "cannot allocate CUDA memory: ", cuda::build_info(),
               " and no CUDA device is available");
  }
  Allocator* a = allocator_slot(type);
  KILN_ASSERT(a != nullptr, "no allocator installed for CUDA although a device was found");
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) { allocator_slot(type) = allocator; }

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  Allocator* a = get_allocator(device.type);
  void* p = a->allocate_on(nbytes, device);
  auto s = std::make_shared<Storage>(p, nbytes, device,
                                     [a, nbytes, device](void* q) { a->deallocate_on(q, nbytes, device); });
  s->allocator_ = a;
  return s;
}

void Storage::resize(size_t nbytes) {
  KILN_CHECK(allocator_ != nullptr, "Storage::resize: only storages from Storage::allocate can be resized (this one "
             "holds ", nbytes_, " bytes on ", device_.str(), (pinned_ ? ", pinned" : ", wrapped"), ")");
  if (nbytes == nbytes_) return;
  Allocator* a = allocator_;
  const Device device = device_;
  void* fresh = nbytes == 0 ? nullptr : a->allocate_on(nbytes, device);  // may throw: nothing changed yet
  if (deleter_) deleter_(data_);
  data_ = fresh;
  nbytes_ = nbytes;
  deleter_ = nbytes == 0 ? Deleter() : Deleter([a, nbytes, device](void* q) { a->deallocate_on(q, nbytes, device); });
}

std::shared_ptr<Storage> Storage::allocate_pinned(size_t nbytes) {
  KILN_CHECK(cuda::device_count() > 0, "pin_memory: page-locked host memory needs CUDA, but ", cuda::build_info(),
             " and no CUDA device is available");
  Allocator* a = cuda::pinned_host_allocator();
  void* p = a->allocate(nbytes);
  auto s = std::make_shared<Storage>(p, nbytes, Device::cpu(), [a, nbytes](void* q) { a->deallocate(q, nbytes); });
  s->pinned_ = true;
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, Deleter deleter) {
  return std::make_shared<Storage>(data, nbytes, device, std::move(deleter));
}

Storage::Storage(void* data, size_t nbytes, Device device, Deleter deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (!deleter_) return;
  try {
    deleter_(data_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: failed to release %zu bytes on %s: %s\n", nbytes_, device_.str().c_str(), e.what());
  }
}

}  // namespace kiln
