// Sequential::forward and the bounds-checked element access of both containers.
#include <kiln/nn/container.h>

namespace kiln::nn {

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& step : steps_) y = step(y);
  return y;
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  KILN_CHECK_INDEX(i < modules_.size(), "Sequential: index ", i, " out of range for ", modules_.size(), " modules");
  return modules_[i];
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  KILN_CHECK_INDEX(i < modules_.size(), "ModuleList: index ", i, " out of range for ", modules_.size(), " modules");
  return modules_[i];
}

}  // namespace kiln::nn
