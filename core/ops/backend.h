// The one place an op front picks its backend: after its checks and promotion, every front in
// core/ops ends in one line, dispatch_device(op, {operands}, cuda launcher, CPU kernel).
#pragma once

#include <initializer_list>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/profiler/profiler.h>

namespace kiln::ops {

// Note [One dispatch line]
// The fronts in core/ops/X.cpp check arguments and promote dtypes, then hand over to the kernels
// of one backend, core/cpu/X.cpp or core/cuda/kernels/X.{h,cu}:
//   return dispatch_device(op, {&x}, [&] { return cuda::softmax(op, x, d, log); },
//                          [&] { return cpu::softmax(op, x, d, log); });
// `operands` must all be defined and on one device (else the error names the op and both
// devices). The CUDA branch sits in a discarded `if constexpr` of this template, so a build
// without CUDA never instantiates it and never references a launcher: no stubs are needed.
// The line is also the profiler's hook for ops: a range named `op` on the host and, on CUDA, a
// span on the compute stream (Note [Profiler cost when off] in core/profiler/profiler.h).
template <class OnCuda, class OnCpu>
decltype(auto) dispatch_device(const char* op, std::initializer_list<const Tensor*> operands, OnCuda&& on_cuda_fn,
                               OnCpu&& on_cpu_fn) {
  profiler::Range range(op, profiler::Category::op);
  [[maybe_unused]] const bool gpu = on_cuda(op, operands);
  if constexpr (cuda::kBuilt)
    if (gpu) {
      profiler::DeviceRange span(op, profiler::Category::op, (*operands.begin())->device().index);
      return on_cuda_fn();
    }
  return on_cpu_fn();
}

// The same for a device already known (ops whose operands are not all tensors on one device).
template <class OnCuda, class OnCpu>
decltype(auto) dispatch_device(const char* op, Device device, OnCuda&& on_cuda_fn, OnCpu&& on_cpu_fn) {
  profiler::Range range(op, profiler::Category::op);
  if constexpr (cuda::kBuilt)
    if (device.is_cuda()) {
      profiler::DeviceRange span(op, profiler::Category::op, device.index);
      return on_cuda_fn();
    }
  return on_cpu_fn();
}

}  // namespace kiln::ops
