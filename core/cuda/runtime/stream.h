// Streams and events as CPU code sees them (no CUDA headers). Each thread has a current stream
// per device, the device's default stream until a StreamGuard or set_current_stream changes it;
// every CUDA kernel Kiln launches goes to the current stream of the tensor's device.
#pragma once

#include <cstdint>

#include <kiln/cuda.h>  // current_device, set_device, synchronize

namespace kiln::cuda {

class Stream {
 public:
  Stream() = default;  // the default (legacy) stream of device 0
  Stream(void* handle, int device) : handle_(handle), device_(device) {}

  // A fresh stream from a small per-device pool (streams are never destroyed, like torch's pool).
  static Stream create(int device, bool high_priority = false);
  // A stream of its own, outside the pool, that no other create() hands out (a CUDA graph's
  // capture stream: work another thread queued on it would join or break the capture). Never
  // destroyed either.
  static Stream create_unshared(int device);
  static Stream default_stream(int device) { return Stream(nullptr, device); }

  void* handle() const { return handle_; }  // a cudaStream_t
  int device() const { return device_; }
  void synchronize() const;  // blocks the host until all work queued so far is done
  bool query() const;        // true when all queued work is done
  bool operator==(const Stream&) const = default;

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

Stream current_stream(int device = -1);  // -1: the current device
void set_current_stream(Stream stream);

// Makes `stream` current for its device for the guard's lifetime (and that device current).
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  int previous_device_;
};

// A marker in a stream. `wait` makes another stream wait for it without blocking the host.
class Event {
 public:
  explicit Event(bool enable_timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;

  void record(Stream stream);        // on `stream`'s device
  void record() { record(current_stream()); }
  void wait(Stream stream) const;    // `stream` waits until this event has happened
  void synchronize() const;          // the host waits
  bool query() const;
  float elapsed_ms(const Event& end) const;  // both recorded with enable_timing
  void* handle() const { return handle_; }   // a cudaEvent_t (nullptr before the first record)

 private:
  void* handle_ = nullptr;
  bool timing_ = false;
  int device_ = -1;
};

// How many times Kiln has made the host wait for a device in this process: Stream, Event and
// device synchronize, and so every blocking copy between a device and the host (item(), to(cpu),
// an upload from pageable memory), the caching allocator waiting for an event, and a NCCL Work
// waited on by the host. Tests read it to check that a loop runs ahead of the GPU (the idea of
// torch.cuda.set_sync_debug_mode); it stays 0 in a build without CUDA.
int64_t host_sync_count();
// Counts one host wait (for the few places that wait without Stream/Event::synchronize).
void note_host_sync();

// Makes `device` current for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

}  // namespace kiln::cuda
