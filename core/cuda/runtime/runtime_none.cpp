// The CUDA runtime entry points of a build without CUDA: no devices, and transfers, pinned
// memory and the allocator queries say why they cannot work.
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/storage.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  KILN_FAIL(what, ": Kiln was built without CUDA (configure with -DKILN_CUDA=ON)");
  __builtin_unreachable();
}
}  // namespace

int device_count() { return 0; }
std::string build_info() { return "built without CUDA"; }

void copy_across(const Tensor& dst, const Tensor& src, bool) {
  KILN_FAIL("copy_: cannot copy from ", src.device(), " to ", dst.device(),
             ": Kiln was built without CUDA (configure with -DKILN_CUDA=ON)");
}

void fill(const Tensor& dst, double) {
  KILN_FAIL("fill_: tensor on ", dst.device(), " but Kiln was built without CUDA");
}

Allocator* device_allocator() { no_cuda("the CUDA allocator"); }
Allocator* pinned_host_allocator() { no_cuda("pin_memory (page-locked host memory)"); }
MemoryStats memory_stats(int) { no_cuda("memory_stats"); }
void reset_peak_stats(int) { no_cuda("reset_peak_stats"); }
void empty_cache() {}  // nothing is cached
void record_stream(const Tensor&, Stream) { no_cuda("record_stream"); }
void record_stream(const Storage&, Stream) { no_cuda("record_stream"); }

}  // namespace kiln::cuda
