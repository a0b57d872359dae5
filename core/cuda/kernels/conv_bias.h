// The bias of conv2d on CUDA: y (N, O, OH, OW) += bias (O) in place, and its gradient, grad_out
// summed over N, OH, OW. Kernels in conv_bias.cu; CPU code includes this header (no CUDA headers).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::cuda {

// y: a contiguous CUDA tensor (N, O, OH, OW); bias: (O) of y's dtype on y's device, any strides.
// 16-bit values are added in float and rounded once.
void conv2d_add_bias_(const Tensor& y, const Tensor& bias);

// grad_out (N, O, OH, OW), any strides -> (O) in its dtype, summed in double and rounded once (as
// the CPU kernel does).
Tensor conv2d_backward_bias(const Tensor& grad_out);

}  // namespace kiln::cuda
