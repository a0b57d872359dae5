// Kernels for the bias of conv2d (conv_bias.h): a broadcast add over each (n, o) plane, and the
// per-channel sum of grad_out accumulated in double, one block per channel, in a fixed order (so
// the result does not vary from run to run).
#include <kiln/core/cuda/kernels/conv_bias.h>

#include <algorithm>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/factory.h>

namespace kiln::cuda {

namespace {

// y (rows = N*O, plane) += bias[row % O]: a block per row at a time, its threads across the plane.
template <class T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t rows, int64_t channels, int64_t plane) {
  using A = dacc_t<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const A b = load_acc(bias[row % channels]);
    T* yr = y + row * plane;
    for (int64_t p = threadIdx.x; p < plane; p += blockDim.x) yr[p] = store_as<T>(load_acc(yr[p]) + b);
  }
}

// gy (N, O, plane) -> out (O): out[o] = sum over n, p of gy[n, o, p]. A block per channel at a time;
// the channel's N*plane elements are taken flat, j = n * plane + p.
template <class T>
__global__ void bias_grad_kernel(const T* gy, T* out, int64_t n, int64_t channels, int64_t plane) {
  __shared__ double scratch[32];
  const int64_t count = n * plane;
  for (int64_t o = blockIdx.x; o < channels; o += gridDim.x) {  // uniform across the block
    double sum = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t b = j / plane, p = j - b * plane;
      sum += static_cast<double>(load_acc(gy[(b * channels + o) * plane + p]));
    }
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) out[o] = store_as<T>(sum);
  }
}

}  // namespace

void conv2d_add_bias_(const Tensor& y, const Tensor& bias) {
  KILN_CHECK(y.dim() == 4 && y.is_contiguous(), "conv2d: expected a contiguous (N, O, OH, OW) output, got shape ",
             y.shape());
  KILN_CHECK(bias.dim() == 1 && bias.size(0) == y.size(1) && bias.dtype() == y.dtype(),
             "conv2d: bias of shape ", bias.shape(), " and dtype ", bias.dtype(), " does not match output ", y.shape(),
             " of dtype ", y.dtype());
  if (y.numel() == 0) return;
  const Tensor b = bias.contiguous();
  const int64_t channels = y.size(1), plane = y.size(2) * y.size(3), rows = y.size(0) * channels;
  cudaStream_t s = stream_for(y);
  // Up to 256 threads, fewer for small planes (whole warps).
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, ceil_div(plane, 32) * 32));
  const int blocks = static_cast<int>(std::min<int64_t>(rows, 65535LL * 8));
  dispatch_floating_device(y.dtype(), "conv2d (bias)", [&]<class T>() {
    add_bias_kernel<T><<<blocks, threads, 0, s>>>(ptr<T>(y), ptr<T>(b), rows, channels, plane);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

Tensor conv2d_backward_bias(const Tensor& grad_out) {
  KILN_CHECK(grad_out.dim() == 4, "conv2d_backward_bias: expected grad_out (N, O, OH, OW), got shape ",
             grad_out.shape());
  const int64_t n = grad_out.size(0), channels = grad_out.size(1), plane = grad_out.size(2) * grad_out.size(3);
  Tensor out = empty({channels}, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  if (channels == 0) return out;
  const Tensor gy = grad_out.contiguous();
  cudaStream_t s = stream_for(gy);
  const int blocks = static_cast<int>(std::min<int64_t>(channels, 65535LL * 8));
  dispatch_floating_device(gy.dtype(), "conv2d_backward_bias", [&]<class T>() {
    bias_grad_kernel<T><<<blocks, kThreads, 0, s>>>(ptr<T>(gy), ptr<T>(out), n, channels, plane);
    KILN_CUDA_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace kiln::cuda
