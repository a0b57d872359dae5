// Philox random fills (rand, randn, uniform_, normal_, randint) and the dropout mask on CUDA.
// One thread per element, each drawing its own Philox block, exactly as the CPU loop does.
#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/kernels/random.h>
#include <kiln/core/philox.h>

namespace kiln::cuda {

namespace {

template <class T>
__global__ void random_fill_kernel(T* out, RandomDraw draw, double a, double b, uint64_t seed, uint64_t first,
                                   int64_t n) {  // out: (n,)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t index = first + static_cast<uint64_t>(i);
    double v;
    switch (draw) {
      case RandomDraw::uniform: v = philox::uniform(seed, index); break;
      case RandomDraw::normal: v = philox::normal(seed, index); break;
      case RandomDraw::uniform_affine: v = fma(b, philox::uniform(seed, index), a); break;
      default: v = fma(b, philox::normal(seed, index), a); break;
    }
    out[i] = store_as<T>(v);
  }
}

template <class T>
__global__ void random_int_kernel(T* out, int64_t low, int64_t high, uint64_t seed, uint64_t first, int64_t n) {
  const double span = static_cast<double>(high - low);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = static_cast<int64_t>(philox::uniform(seed, first + static_cast<uint64_t>(i)) * span);
    out[i] = store_as<T>(static_cast<double>(low + (k < high - low - 1 ? k : high - low - 1)));
  }
}

template <class T>
__global__ void dropout_mask_kernel(T* mask, double p, T keep, uint64_t seed, uint64_t first, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    mask[i] = philox::uniform(seed, first + static_cast<uint64_t>(i)) >= p ? keep : T(0);
}

void check_out(const Tensor& out, const char* op) {
  KILN_CHECK(out.device().is_cuda() && out.is_contiguous(), op, ": expected a contiguous CUDA output, got one on ",
             out.device(), " with shape ", out.shape(), " and strides ", out.strides());
}

// The generator's position is a kernel argument: a CUDA graph would replay the same numbers.
void refuse_capture(const char* op) {
  KILN_CHECK(!is_capturing(), op, " on CUDA while capturing a CUDA graph: the generator's position is a kernel "
             "argument, so every replay would draw the same numbers (the same dropout mask each step). Draw "
             "them outside the capture; TrainerOptions::cuda_graph trains with dropout 0");
}

}  // namespace

void random_fill(const Tensor& out, RandomDraw draw, double a, double b, uint64_t seed, uint64_t first) {
  const char* op = draw == RandomDraw::uniform ? "rand" : draw == RandomDraw::normal ? "randn"
                   : draw == RandomDraw::uniform_affine ? "uniform_" : "normal_";
  check_out(out, op);
  refuse_capture(op);
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_for(out);
  dispatch_numeric_device(out.dtype(), op, [&]<class T>() {
    random_fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(ptr<T>(out), draw, a, b, seed, first, n);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void random_int(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t first) {
  check_out(out, "randint");
  refuse_capture("randint");
  KILN_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_for(out);
  dispatch_numeric_device(out.dtype(), "randint", [&]<class T>() {
    random_int_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(ptr<T>(out), low, high, seed, first, n);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

Tensor dropout_mask(const Shape& shape, DType dtype, double p, double scale, uint64_t seed, uint64_t first,
                    Device device) {
  KILN_CHECK(dtype == DType::f32 || dtype == DType::f64, "dropout: the mask is f32 or f64, got ", dtype);
  refuse_capture("dropout");
  Tensor mask = empty(shape, dtype, device);
  const int64_t n = mask.numel();
  if (n == 0) return mask;
  cudaStream_t stream = stream_for(mask);
  if (dtype == DType::f64) {
    dropout_mask_kernel<double><<<blocks_for(n), kThreads, 0, stream>>>(ptr<double>(mask), p, scale, seed, first, n);
  } else {
    dropout_mask_kernel<float>
        <<<blocks_for(n), kThreads, 0, stream>>>(ptr<float>(mask), p, static_cast<float>(scale), seed, first, n);
  }
  KILN_CUDA_CHECK_LAUNCH();
  return mask;
}

}  // namespace kiln::cuda
