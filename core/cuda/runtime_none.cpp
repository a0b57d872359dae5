// The CUDA runtime entry points of a build without CUDA: no devices, and transfers say why.
#include <kiln/core/cuda/runtime.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

int device_count() { return 0; }
std::string build_info() { return "built without CUDA"; }

void copy_across(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(false, "copy_: cannot copy from ", src.device(), " to ", dst.device(),
             ": Kiln was built without CUDA (configure with -DKILN_CUDA=ON)");
}

void fill(const Tensor& dst, double) {
  KILN_CHECK(false, "fill_: tensor on ", dst.device(), " but Kiln was built without CUDA");
}

}  // namespace kiln::cuda
