// Fused softmax cross-entropy on the GPU (llm.c's fused_classifier, split into the forward and
// backward that autograd needs). Forward: one warp or block per row (Note [Row launches]) finds
// the row's max and sum of exp in one read (Note [Online softmax]) and writes only the per-row loss
// and logsumexp. Backward: exp(x - lse) - onehot, scaled per row, written straight into dlogits in
// the logits' dtype. Neither allocates anything of size (N, C) besides dlogits.
#include <kiln/core/cuda/kernels/cross_entropy.h>

#include <kiln/core/cuda/kernels/softmax.cuh>

namespace kiln::cuda {

namespace {

using namespace rowwise;

constexpr unsigned long long kNoFault = ~0ull;  // -1 as i64

// Note [Unaligned rows]
// A row of c elements starts on a 16-byte boundary only when c is a multiple of the vector (or it
// is the first row). GPT-2's vocabulary, 50257, is not, so every row was read element by element:
// gpt2-124m's (16384, 50257) cross entropy took 4.24 ms forward and 4.12 ms backward per step on the
// first GPU run (an H200, 2026-11-28). Each row is therefore read as a scalar head up to its first
// 16-byte boundary, whole vectors, and a scalar tail: 4.05 and 3.44 ms on the same GPU, so the width
// of the loads was not what held it (docs/benchmarks.md, "GPU (H200)"). A row that is
// aligned and a multiple of the vector has neither head nor tail, so it adds in the same order as
// before; V == 1 has no head. `row` must be aligned to its element (every tensor's data is).
template <int V, class T>
__device__ __forceinline__ int64_t row_head(const T* row, int64_t c) {
  if constexpr (V == 1) {
    return 0;
  } else {
    const auto misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(row) % 16);
    const int64_t head = misaligned == 0 ? 0 : (16 - misaligned) / static_cast<int64_t>(sizeof(T));
    return head < c ? head : c;
  }
}

// status[0] counts the rows whose target is not ignore_index; status[1] becomes the first row whose
// target is neither ignore_index nor in [0, c) (kNoFault when none), status[2] is set after.
template <class T, class I, int V>
__global__ void __launch_bounds__(1024, 1)
    cross_entropy_forward_kernel(dacc_t<T>* __restrict__ loss,             // (rows,)
                                 dacc_t<T>* __restrict__ lse,              // (rows,)
                                 unsigned long long* __restrict__ status,  // (3,)
                                 const T* __restrict__ logits,             // (rows, c)
                                 const I* __restrict__ targets,            // (rows,)
                                 int64_t rows, int64_t c, int64_t ignore_index, double ls) {
  using A = dacc_t<T>;
  __shared__ A scratch[64];
  __shared__ A scratch_sum[32];
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const int64_t t = static_cast<int64_t>(targets[row]);
    if (t == ignore_index || t < 0 || t >= c) {  // the same for every thread of the row
      if (threadIdx.x == 0) {
        loss[row] = A(0);
        lse[row] = A(0);
        if (t != ignore_index) atomicMin(&status[1], static_cast<unsigned long long>(row));
      }
      continue;
    }
    const T* xr = logits + row * c;
    MaxSum<A> ms;
    A sum[1] = {A(0)};  // sum of the logits, for label smoothing
    const int64_t head = row_head<V>(xr, c), body_end = head + (c - head) / V * V;  // Note [Unaligned rows]
    auto add_one = [&](int64_t j) {
      A v[1];
      load_pack<1>(xr + j, v);
      ms.add(v[0]);
      sum[0] += v[0];
    };
    for (int64_t j = threadIdx.x; j < head; j += blockDim.x) add_one(j);
    for (int64_t j = head + int64_t(threadIdx.x) * V; j < body_end; j += int64_t(blockDim.x) * V) {
      A v[V];
      load_pack<V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        ms.add(v[k]);
        sum[0] += v[k];
      }
    }
    for (int64_t j = body_end + threadIdx.x; j < c; j += blockDim.x) add_one(j);
    ms = row_max_sum(ms, scratch);
    if (ls > 0) row_sum<1>(sum, scratch_sum);
    if (threadIdx.x == 0) {
      const A l = ms.lse();
      double value = -(1.0 - ls) * static_cast<double>(load_acc(xr[t]) - l);
      if (ls > 0)  // sum_c logp[row, c] = sum_c x[row, c] - c * lse
        value -= ls / static_cast<double>(c) *
                 (static_cast<double>(sum[0]) - static_cast<double>(c) * static_cast<double>(l));
      loss[row] = static_cast<A>(value);
      lse[row] = l;
      atomicAdd(&status[0], 1ull);
    }
  }
}

// status[2] = the target of row status[1], when there is one (one thread, after the forward kernel).
template <class I>
__global__ void bad_target_kernel(const I* __restrict__ targets, unsigned long long* __restrict__ status) {
  if (status[1] != kNoFault)
    status[2] = static_cast<unsigned long long>(static_cast<long long>(targets[static_cast<int64_t>(status[1])]));
}

// dlogits[row, j] = ((p - (j == t ? 1 - ls : 0)) - ls / c) * grad_loss[row * grad_stride] * s,
// s = scale (times 1 / *count when count is given), with p = exp(x - lse); 0 on ignored rows (and
// on out-of-range targets, which the forward reports).
template <class T, class I, int V>
__global__ void __launch_bounds__(1024, 1)
    cross_entropy_backward_kernel(T* __restrict__ dlogits,                  // (rows, c)
                                  const T* __restrict__ logits,             // (rows, c)
                                  const I* __restrict__ targets,            // (rows,)
                                  const dacc_t<T>* __restrict__ lse,        // (rows,)
                                  const dacc_t<T>* __restrict__ grad_loss,  // (rows,) or (1,)
                                  const long long* __restrict__ count,      // (1,) or null
                                  int64_t grad_stride, int64_t rows, int64_t c, int64_t ignore_index, double ls,
                                  double scale) {
  using A = dacc_t<T>;
  const A on = static_cast<A>(1.0 - ls), off = static_cast<A>(ls / static_cast<double>(c));
  if (count != nullptr) scale *= 1.0 / static_cast<double>(*count);  // as the CPU: scale * (1 / count)
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const int64_t t = static_cast<int64_t>(targets[row]);
    const bool skip = t == ignore_index || t < 0 || t >= c;
    const A coef = skip ? A(0) : static_cast<A>(static_cast<double>(grad_loss[row * grad_stride]) * scale);
    const A l = skip ? A(0) : lse[row];
    const T* xr = logits + row * c;
    T* dr = dlogits + row * c;
    // dlogits and logits rows share their offset from a 16-byte boundary (the launch checks it).
    const int64_t head = row_head<V>(xr, c), body_end = head + (c - head) / V * V;  // Note [Unaligned rows]
    auto grad_of = [&](A x, int64_t j) {
      const A p = exp_of(x - l);
      return ((j == t ? p - on : p) - off) * coef;
    };
    auto one = [&](int64_t j) {
      A v[1] = {A(0)};
      if (!skip) {
        load_pack<1>(xr + j, v);
        v[0] = grad_of(v[0], j);
      }
      store_pack<1>(dr + j, v);
    };
    for (int64_t j = threadIdx.x; j < head; j += blockDim.x) one(j);
    for (int64_t j = head + int64_t(threadIdx.x) * V; j < body_end; j += int64_t(blockDim.x) * V) {
      A v[V];
      if (skip) {
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = A(0);
      } else {
        load_pack<V>(xr + j, v);
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = grad_of(v[k], j + k);
      }
      store_pack<V>(dr + j, v);
    }
    for (int64_t j = body_end + threadIdx.x; j < c; j += blockDim.x) one(j);
  }
}

DType loss_dtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }

}  // namespace

ops::CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                              double label_smoothing, Tensor& fault) {
  const char* op = "cross_entropy";
  cudaStream_t s = stream_for(logits);
  const Tensor x = logits.contiguous(), t = targets.contiguous();
  const Device dev = x.device();
  const int64_t rows = x.size(0), c = x.size(1);
  // status: [0] the count, [1] the first bad row, [2] its target. count and fault are views of it.
  Tensor status = empty({3}, DType::i64, dev);
  auto* status_ptr = static_cast<unsigned long long*>(status.data_ptr());
  KILN_CUDA_CHECK(cudaMemsetAsync(status_ptr, 0, sizeof(unsigned long long), s));
  KILN_CUDA_CHECK(cudaMemsetAsync(status_ptr + 1, 0xFF, 2 * sizeof(unsigned long long), s));  // kNoFault
  ops::CrossEntropyResult r{empty({rows}, loss_dtype(x.dtype()), dev), empty({rows}, loss_dtype(x.dtype()), dev),
                            status.narrow(0, 0, 1).reshape({})};
  fault = status.narrow(0, 1, 2);
  if (rows == 0) return r;
  dispatch_floating_device(x.dtype(), op, [&]<class T>() {
    using A = dacc_t<T>;
    dispatch_index(t.dtype(), op, [&]<class I>() {
      with_vec<T>(true, [&]<int V>() {  // any row length and offset: Note [Unaligned rows]
        const RowLaunch rl = row_launch(rows, c, V);
        cross_entropy_forward_kernel<T, I, V><<<grid_of(rl), block_of(rl), 0, s>>>(
            ptr<A>(r.loss), ptr<A>(r.lse), status_ptr, ptr<const T>(x), ptr<const I>(t), rows, c, ignore_index,
            label_smoothing);
      });
      KILN_CUDA_CHECK_LAUNCH();
      bad_target_kernel<I><<<1, 1, 0, s>>>(ptr<const I>(t), status_ptr);
    });
    KILN_CUDA_CHECK_LAUNCH();
  });
  return r;  // nothing read back (Note [Deferred device checks])
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, double label_smoothing, double scale, const Tensor& count) {
  const char* op = "cross_entropy_backward";
  cudaStream_t s = stream_for(logits);
  const Tensor x = logits.contiguous(), t = targets.contiguous();
  const Device dev = x.device();
  const int64_t rows = x.size(0), c = x.size(1);
  const DType ldt = loss_dtype(x.dtype());
  const Tensor l = lse.to(ldt).contiguous(), g = grad_loss.to(ldt).contiguous();
  const int64_t grad_stride = g.numel() == 1 ? 0 : 1;
  const Tensor n = count.defined() ? count.contiguous() : Tensor();
  const auto* count_ptr = n.defined() ? static_cast<const long long*>(n.data_ptr()) : nullptr;
  Tensor dx = empty({rows, c}, x.dtype(), dev);
  if (dx.numel() == 0) return dx;
  dispatch_floating_device(x.dtype(), op, [&]<class T>() {
    using A = dacc_t<T>;
    dispatch_index(t.dtype(), op, [&]<class I>() {
      // Note [Unaligned rows]: vectors wherever both rows sit at the same offset from a boundary.
      const bool same_offset = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 ==
                               reinterpret_cast<uintptr_t>(dx.data_ptr()) % 16;
      with_vec<T>(same_offset, [&]<int V>() {
        const RowLaunch rl = row_launch(rows, c, V);
        cross_entropy_backward_kernel<T, I, V><<<grid_of(rl), block_of(rl), 0, s>>>(
            ptr<T>(dx), ptr<const T>(x), ptr<const I>(t), ptr<const A>(l), ptr<const A>(g), count_ptr, grad_stride,
            rows, c, ignore_index, label_smoothing, scale);
      });
    });
    KILN_CUDA_CHECK_LAUNCH();
  });
  return dx;
}

}  // namespace kiln::cuda
