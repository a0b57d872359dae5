// cuda::Graph in a build without CUDA: nothing can be captured.
#include <kiln/core/cuda/runtime/graph.h>

#include <kiln/core/error.h>

namespace kiln::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  KILN_FAIL(what, ": Kiln was built without CUDA (configure with -DKILN_CUDA=ON)");
  __builtin_unreachable();
}
}  // namespace

Graph::~Graph() = default;
void Graph::capture_begin(Stream) { no_cuda("cuda::Graph::capture_begin"); }
void Graph::capture_end() { no_cuda("cuda::Graph::capture_end"); }
void Graph::replay() { no_cuda("cuda::Graph::replay"); }
void Graph::reset() {}

uint64_t create_graph_pool(int) { no_cuda("a CUDA graph's memory pool"); }
void begin_allocate_to_graph_pool(int, uint64_t, Stream) { no_cuda("a CUDA graph's memory pool"); }
void end_allocate_to_graph_pool(int, uint64_t) { no_cuda("a CUDA graph's memory pool"); }
void release_graph_pool(int, uint64_t) { no_cuda("a CUDA graph's memory pool"); }

}  // namespace kiln::cuda
