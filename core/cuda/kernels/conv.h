// conv2d on CUDA through cuDNN's legacy API (cudnnConvolutionForward / BackwardData /
// BackwardFilter), the algorithm chosen once per shape and cached under the settings of kiln/cuda.h
// (torch.backends.cudnn.{benchmark, deterministic, allow_tf32}). CPU code includes this header (no
// CUDA headers); the launchers exist only in CUDA builds.
#pragma once

#include <kiln/core/cuda/kernels/conv_bias.h>
#include <kiln/core/ops/conv.h>
#include <kiln/cuda.h>  // the cuDNN settings

namespace kiln::cuda {

// The CUDA halves of kiln::ops::conv2d and its backward kernels: floating CUDA tensors on one
// device whose shapes and dtypes the ops front has checked; any strides (made contiguous here).
// Results are fresh contiguous NCHW tensors in the inputs' dtype; bf16/f16 compute in f32.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options);
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dOptions& options);

}  // namespace kiln::cuda
