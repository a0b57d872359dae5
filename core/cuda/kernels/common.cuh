// Shared by every .cu file (never included from CPU code): the current stream, launch-size
// helpers, Kiln's 16-bit types as CUDA's, float load/store for every dtype, and dtype dispatch
// that hands kernels CUDA types.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/formulas.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

// The current stream of the tensor's device (the device is made current too).
inline cudaStream_t stream_for(const Tensor& t) {
  KILN_CHECK(t.device().is_cuda(), "expected a CUDA tensor, got one on ", t.device());
  set_device(t.device().index);
  return static_cast<cudaStream_t>(current_stream(t.device().index).handle());
}
inline cudaStream_t current_cuda_stream() { return static_cast<cudaStream_t>(current_stream().handle()); }

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items: enough to fill the GPU, capped.
inline int blocks_for(int64_t n, int threads = kThreads, int64_t max_blocks = 65535LL * 8) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<int>(b < max_blocks ? b : max_blocks);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Kiln's element type -> the type kernels use (same size and bits).
template <class T> struct device_type { using type = T; };
template <> struct device_type<BFloat16> { using type = __nv_bfloat16; };
template <> struct device_type<Half> { using type = __half; };
template <class T> using device_t = typename device_type<T>::type;

// Every kernel computes 16-bit types in float; `acc` is the type it computes in.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<__nv_bfloat16> { using type = float; };
template <> struct acc_type<__half> { using type = float; };
template <> struct acc_type<bool> { using type = bool; };
template <class T> using dacc_t = typename acc_type<T>::type;

template <class T>
__device__ __forceinline__ dacc_t<T> load_acc(const T& v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return v;
}

// Converts any computed value to T, rounding to nearest even for 16-bit types.
template <class T, class V>
__device__ __forceinline__ T store_as(V v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<V, __nv_bfloat16> || std::is_same_v<V, __half>) return static_cast<T>(load_acc(v));
  else return formulas::convert<T>(v);  // Note [Conversion to u8]
}

template <class T>
inline T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// dtype dispatch handing the lambda CUDA types (__nv_bfloat16 for bf16, __half for f16).
template <class F>
decltype(auto) dispatch_floating_device(DType t, const char* op, F&& fn) {
  return dispatch_floating(t, op, [&]<class T>() { return fn.template operator()<device_t<T>>(); });
}
template <class F>
decltype(auto) dispatch_numeric_device(DType t, const char* op, F&& fn) {
  return dispatch_numeric(t, op, [&]<class T>() { return fn.template operator()<device_t<T>>(); });
}
template <class F>
decltype(auto) dispatch_all_device(DType t, const char* op, F&& fn) {
  return dispatch_all(t, op, [&]<class T>() { return fn.template operator()<device_t<T>>(); });
}

// Warp and block reductions (blockDim.x a multiple of 32, at most 1024). `combine` is associative
// and `identity` its neutral element; every thread gets the result.
struct Plus {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct FloatMax {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class T, class Combine>
__device__ __forceinline__ T warp_reduce(T v, Combine combine) {
  for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// `scratch` holds 32 T; callable repeatedly.
template <class T, class Combine>
__device__ __forceinline__ T block_reduce(T v, T* scratch, T identity, Combine combine) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_reduce(v, combine);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity;
  return warp_reduce(v, combine);
}

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, Plus{}); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, FloatMax{}); }
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  return block_reduce(v, scratch, T(0), Plus{});
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  return block_reduce(v, scratch, -INFINITY, FloatMax{});
}

// V consecutive elements, loaded and stored as one access (two 16-byte ones for 8 floats): the
// row kernels' packs (softmax.cuh) and the column reductions' vectors (reduce.cu).
template <class T, int V>
struct alignas(sizeof(T) * V < 16 ? sizeof(T) * V : 16) Pack {
  T v[V];
};

}  // namespace kiln::cuda
