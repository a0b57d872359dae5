// CUDA graphs as CPU code sees them (no CUDA headers): capture the work one thread queues on a
// stream once, replay it with one launch (torch.cuda.CUDAGraph). The Trainer's whole-step graph
// (TrainerOptions::cuda_graph) is built on this.
#pragma once

#include <cstdint>

#include <kiln/core/cuda/runtime/stream.h>

namespace kiln::cuda {

// Note [CUDA graphs]
// capture_begin(stream) starts a stream capture (thread-local mode: other threads' CUDA calls are
// not disturbed) and points the stream's allocations at the graph's private pool (Note [Graph
// pools], caching_allocator.h), so every address the captured kernels use stays the graph's;
// capture_end() instantiates it; replay() launches it on the capture stream. While this thread
// captures, anything that would make the host wait for the device throws (note_host_sync) instead of
// invalidating the capture with an opaque CUDA error, and is_capturing() is true, so code whose
// host-side values would be baked into the graph (the optimizer's learning rate) reads them from
// device memory instead (Note [Learning rate on the device], optim/grouped_optimizer.h). What a
// graph cannot hold: host reads, shapes that change, the legacy default stream, and work on other
// streams that does not join the capture through events.
class Graph {
 public:
  Graph() = default;
  ~Graph();  // frees the executable graph and releases its pool (logs, never throws)
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // `stream`: a stream of its own (Stream::create), not the legacy default stream.
  void capture_begin(Stream stream);
  void capture_end();  // also after a failed capture: then it cleans up and throws
  void replay();       // queues the graph on the capture stream
  void reset();        // back to empty: frees the graph and releases its pool
  bool captured() const { return exec_ != nullptr; }
  bool capturing() const { return capturing_; }
  Stream stream() const { return stream_; }

 private:
  [[maybe_unused]] void* graph_ = nullptr;  // cudaGraph_t (unused without CUDA)
  void* exec_ = nullptr;   // cudaGraphExec_t
  Stream stream_;
  [[maybe_unused]] uint64_t pool_ = 0;
  bool capturing_ = false;
};

namespace detail {
// Marks this thread as capturing for the scope's lifetime (Graph uses it; tests too).
class CaptureScope {
 public:
  CaptureScope();
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
};
}  // namespace detail

// The caching allocator's private pools on `device` (Note [Graph pools]).
uint64_t create_graph_pool(int device);
void begin_allocate_to_graph_pool(int device, uint64_t pool, Stream stream);
void end_allocate_to_graph_pool(int device, uint64_t pool);
void release_graph_pool(int device, uint64_t pool);

}  // namespace kiln::cuda
