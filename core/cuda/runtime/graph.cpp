// cuda::Graph over the CUDA runtime's stream capture (Note [CUDA graphs], graph.h). Built with CUDA
// only; graph_none.cpp stands in without it.
#include <kiln/core/cuda/runtime/graph.h>

#include <cstdio>
#include <exception>
#include <memory>

#include <cuda_runtime.h>

#include <kiln/core/cuda/runtime/check.cuh>

namespace kiln::cuda {

namespace {
thread_local std::unique_ptr<detail::CaptureScope> capture_scope;  // set between begin and end
}  // namespace

Graph::~Graph() {
  try {
    reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: freeing a CUDA graph failed: %s\n", e.what());
  }
}

void Graph::capture_begin(Stream stream) {
  KILN_CHECK(!capturing_ && exec_ == nullptr, "cuda::Graph::capture_begin: the graph is ",
             capturing_ ? "capturing already" : "captured already (reset() it first)");
  KILN_CHECK(stream.handle() != nullptr, "cuda::Graph::capture_begin: cannot capture the legacy default stream of "
             "cuda:", stream.device(), "; capture on a stream of its own (cuda::Stream::create)");
  KILN_CHECK(!is_capturing(), "cuda::Graph::capture_begin: this thread is capturing another graph");
  DeviceGuard device(stream.device());
  pool_ = create_graph_pool(stream.device());
  stream_ = stream;
  begin_allocate_to_graph_pool(stream.device(), pool_, stream);
  const cudaError_t err =
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream.handle()), cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    end_allocate_to_graph_pool(stream.device(), pool_);
    release_graph_pool(stream.device(), pool_);
    pool_ = 0;
    KILN_CUDA_CHECK(err);
  }
  capture_scope = std::make_unique<detail::CaptureScope>();
  capturing_ = true;
}

void Graph::capture_end() {
  KILN_CHECK(capturing_, "cuda::Graph::capture_end: capture_begin was not called");
  DeviceGuard device(stream_.device());
  capture_scope.reset();
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &graph);
  end_allocate_to_graph_pool(stream_.device(), pool_);
  graph_ = graph;
  if (err != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();
    reset();
    KILN_FAIL("cuda::Graph::capture_end: the capture on cuda:", stream_.device(), " failed (CUDA error ",
              static_cast<int>(err), ": ", cudaGetErrorString(err), "): something in the captured region cannot "
              "be captured (a synchronizing call, work on the legacy default stream, or another stream that "
              "did not join the capture)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    (void)cudaGetLastError();
    reset();
    KILN_CUDA_CHECK(inst);
  }
  exec_ = exec;
}

void Graph::replay() {
  KILN_CHECK(exec_ != nullptr, "cuda::Graph::replay: nothing captured");
  DeviceGuard device(stream_.device());
  KILN_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_.handle())));
}

void Graph::reset() {
  if (capturing_) {  // abandon the capture
    capture_scope.reset();
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &graph);
    (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    end_allocate_to_graph_pool(stream_.device(), pool_);
  }
  if (exec_) {
    // The graph's work may still be queued: its memory goes back to the cache only after it ran.
    stream_.synchronize();
    KILN_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
    exec_ = nullptr;
  }
  if (graph_) {
    KILN_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
    graph_ = nullptr;
  }
  if (pool_ != 0) {
    release_graph_pool(stream_.device(), pool_);
    pool_ = 0;
  }
}

}  // namespace kiln::cuda
