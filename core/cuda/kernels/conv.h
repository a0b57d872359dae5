// conv2d on CUDA through cuDNN's legacy API (cudnnConvolutionForward / BackwardData /
// BackwardFilter), the algorithm chosen once per shape and cached, and the process-wide settings
// torch calls torch.backends.cudnn.{benchmark, deterministic, allow_tf32}. CPU code includes this
// header (no CUDA headers); the launchers exist only in CUDA builds, the settings in every build.
#pragma once

#include <kiln/core/cuda/kernels/conv_bias.h>
#include <kiln/core/ops/conv.h>

namespace kiln::cuda {

// The CUDA halves of kiln::ops::conv2d and its backward kernels: floating CUDA tensors on one
// device whose shapes and dtypes the ops front has checked; any strides (made contiguous here).
// Results are fresh contiguous NCHW tensors in the inputs' dtype; bf16/f16 compute in f32.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options);
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dOptions& options);

// Settings, read at each call (a changed setting means a fresh algorithm choice). Defaults are torch's.
// benchmark: false (cuDNN's heuristics, cudnnGet*_v7, pick the algorithm) or true (the first call
//   with a shape times every algorithm with cudnnFind*Ex, which synchronizes the device).
bool cudnn_benchmark();
void set_cudnn_benchmark(bool on);
// deterministic: only algorithms cuDNN reports as deterministic (false by default: some weight
//   gradient algorithms sum with atomics, so their last bits vary from run to run).
bool cudnn_deterministic();
void set_cudnn_deterministic(bool on);
// allow_tf32: f32 convolutions may run on TF32 tensor cores (10-bit mantissa inputs, f32
//   accumulation; torch's default is true for cuDNN convolutions). false forces FMA kernels.
bool cudnn_allow_tf32();
void set_cudnn_allow_tf32(bool on);

}  // namespace kiln::cuda
