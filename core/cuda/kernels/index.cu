// CUDA indexing kernels: row/element lookups (index_select, gather, embedding) that copy words of
// the element's width, in-order accumulations (scatter_add_, index_add_, embedding_backward), and
// the device-side index check. See Note [Deterministic index accumulation].
#include <kiln/core/cuda/kernels/index.h>

#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cstring>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/plan/index_math.h>

namespace kiln::cuda {

// Note [Deterministic index accumulation]
// index_add_ and embedding_backward add many source rows into few targets. Instead of atomics
// (whose order, and so whose float rounding, changes from run to run), the positions are sorted by
// index with CUB's radix sort, which is stable, so each run of equal indices lists its positions
// in increasing order; segment_starts finds where each index's run begins (a binary search per
// index). Then one thread per target element adds its run in position order: the same additions
// in the same order as the CPU (core/ops/index.cpp), so the results are bitwise equal to it.
// embedding_backward accumulates in float for 16-bit dtypes and rounds once; index_add_ rounds to
// the dtype after each addition, like the CPU. A run is added by one thread, so a very frequent
// index makes a long serial loop (bounded by that index's count, not by the input's size).
// scatter_add_ keeps the CPU's fibers (one thread adds a whole fiber along dim, in order) when
// that gives enough threads, and falls back to atomics otherwise (see index.h).

namespace {

using indexing::make_strided;
using indexing::Strided;
using indexing::unit_at;
using indexing::zeroed_at;

constexpr unsigned long long kNoFault = ~0ull;

__device__ __forceinline__ int64_t first_index() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

__device__ __forceinline__ void report(unsigned long long* fault, int64_t position) {
  atomicMin(fault, static_cast<unsigned long long>(position));
}

// Every dtype moves as an unsigned word of its width (lookups never convert).
template <class F>
void dispatch_width(size_t bytes, F&& fn) {
  switch (bytes) {
    case 1: fn.template operator()<uint8_t>(); break;
    case 2: fn.template operator()<uint16_t>(); break;
    case 4: fn.template operator()<uint32_t>(); break;
    default: fn.template operator()<uint64_t>(); break;
  }
}

// record[1] = the index at row-major position record[0], when there is a fault (one thread).
template <class I>
__global__ void fault_value_kernel(const I* index, Strided<1> g, unsigned long long* record) {
  const unsigned long long pos = record[0];
  if (pos == kNoFault) return;
  int64_t off[1];
  g.offsets(static_cast<int64_t>(pos), off);
  record[1] = static_cast<unsigned long long>(static_cast<long long>(index[off[0]]));
}

// One op's fault record on the device: [0] the smallest row-major position of an out-of-range
// index (kNoFault, i.e. -1 as i64, when none), [1] the index there (Note [Deferred device checks]).
class FaultFlag {
 public:
  FaultFlag(Device device, cudaStream_t s) : flag_(empty({2}, DType::i64, device)), stream_(s) {
    KILN_CUDA_CHECK(cudaMemsetAsync(flag_.data_ptr(), 0xFF, 2 * sizeof(unsigned long long), s));  // kNoFault
  }
  unsigned long long* ptr() const { return static_cast<unsigned long long*>(flag_.data_ptr()); }

  // The record with the bad value filled in by a kernel queued after the op's: no host read.
  Tensor record(const Tensor& index) const {
    if (index.numel() > 0) {
      dispatch_index(index.dtype(), "index", [&]<class I>() {
        fault_value_kernel<I><<<1, 1, 0, stream_>>>(static_cast<const I*>(index.data_ptr()),
                                                    make_strided<1>(index.shape(), {index.strides()}), ptr());
        KILN_CUDA_CHECK_LAUNCH();
      });
    }
    return flag_;
  }

 private:
  Tensor flag_;  // (1,) holding an unsigned long long
  cudaStream_t stream_;
};

// --- checks and sort keys ---------------------------------------------------------------------
template <class I>
__global__ void check_kernel(const I* index, Strided<1> g, int64_t count, int64_t size, unsigned long long* fault) {
  for (int64_t e = first_index(); e < count; e += grid_stride()) {
    int64_t off[1];
    g.offsets(e, off);
    const int64_t v = static_cast<int64_t>(index[off[0]]);
    if (v < 0 || v >= size) report(fault, e);
  }
}

// keys[e] = index at position e (out-of-range ones become `size`, which sorts last), positions[e] = e.
template <class I>
__global__ void keys_kernel(const I* index, Strided<1> g, int64_t count, int64_t size, uint32_t* keys,
                            uint32_t* positions, unsigned long long* fault) {
  for (int64_t e = first_index(); e < count; e += grid_stride()) {
    int64_t off[1];
    g.offsets(e, off);
    const int64_t v = static_cast<int64_t>(index[off[0]]);
    const bool ok = v >= 0 && v < size;
    if (!ok) report(fault, e);
    keys[e] = static_cast<uint32_t>(ok ? v : size);
    positions[e] = static_cast<uint32_t>(e);
  }
}

// start[v] = the first k with sorted[k] >= v, for v in [0, size]: run v is [start[v], start[v+1]).
__global__ void segment_starts_kernel(const uint32_t* sorted, int64_t count, int64_t size, int64_t* start) {
  for (int64_t v = first_index(); v <= size; v += grid_stride()) {
    int64_t lo = 0, hi = count;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (static_cast<int64_t>(sorted[mid]) < v) lo = mid + 1;
      else hi = mid;
    }
    start[v] = lo;
  }
}

template <class I>
void launch_check(const Tensor& index, int64_t size, const FaultFlag& flag, cudaStream_t s) {
  const int64_t count = index.numel();
  if (count == 0) return;
  auto g = make_strided<1>(index.shape(), {index.strides()});
  check_kernel<I><<<blocks_for(count), kThreads, 0, s>>>(static_cast<const I*>(index.data_ptr()), g, count, size,
                                                         flag.ptr());
  KILN_CUDA_CHECK_LAUNCH();
}

// Positions of `index` (any shape, row-major) sorted stably by value, and each value's run.
struct Runs {
  Tensor keys;       // (count,) u32 in an i32 tensor: the sorted values (`size` marks a bad index)
  Tensor positions;  // (count,) u32 in an i32 tensor: positions in index order within each run
  Tensor start;      // (size + 1,) i64
  const uint32_t* pos() const { return static_cast<const uint32_t*>(positions.data_ptr()); }
  const int64_t* starts() const { return static_cast<const int64_t*>(start.data_ptr()); }
};

// Writes the sort keys (checking every index into `flag`); the sort itself is sort_runs.
struct Keys {
  Tensor keys, positions;
};
Keys make_keys(const char* op, const Tensor& index, int64_t size, const FaultFlag& flag, cudaStream_t s) {
  const int64_t count = index.numel();
  KILN_CHECK(count < INT32_MAX && size < int64_t(UINT32_MAX), op, ": ", count, " indices into a dim of size ",
             size, " is more than the CUDA kernel takes (2^31 indices, 2^32 - 1 rows)");
  Keys k{empty({count}, DType::i32, index.device()), empty({count}, DType::i32, index.device())};
  if (count == 0) return k;
  dispatch_index(index.dtype(), op, [&]<class I>() {
    auto g = make_strided<1>(index.shape(), {index.strides()});
    keys_kernel<I><<<blocks_for(count), kThreads, 0, s>>>(static_cast<const I*>(index.data_ptr()), g, count, size,
                                                          static_cast<uint32_t*>(k.keys.data_ptr()),
                                                          static_cast<uint32_t*>(k.positions.data_ptr()), flag.ptr());
    KILN_CUDA_CHECK_LAUNCH();
  });
  return k;
}

Runs sort_runs(const Keys& in, int64_t size, Device device, cudaStream_t s) {
  const int64_t count = in.keys.numel();
  Runs r{empty({count}, DType::i32, device), empty({count}, DType::i32, device), empty({size + 1}, DType::i64, device)};
  int bits = 1;  // keys are in [0, size]
  while (bits < 32 && (int64_t(1) << bits) <= size) ++bits;
  if (count > 0) {
    const auto* kin = static_cast<const uint32_t*>(in.keys.data_ptr());
    const auto* pin = static_cast<const uint32_t*>(in.positions.data_ptr());
    auto* kout = static_cast<uint32_t*>(r.keys.data_ptr());
    auto* pout = static_cast<uint32_t*>(r.positions.data_ptr());
    size_t temp_bytes = 0;
    KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, kin, kout, pin, pout, static_cast<int>(count),
                                                    0, bits, s));
    Tensor temp = empty({static_cast<int64_t>(temp_bytes) + 1}, DType::u8, device);
    KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, kin, kout, pin, pout,
                                                    static_cast<int>(count), 0, bits, s));
  }
  segment_starts_kernel<<<blocks_for(size + 1), kThreads, 0, s>>>(static_cast<const uint32_t*>(r.keys.data_ptr()),
                                                                   count, size, static_cast<int64_t*>(r.start.data_ptr()));
  KILN_CUDA_CHECK_LAUNCH();
  return r;
}

// --- lookups ---------------------------------------------------------------------------------
// g walks out's shape: [0] x's strides without dim, [1] the coordinate along dim.
template <class W, class I>
__global__ void index_select_kernel(W* out, const W* x, const I* index, int64_t index_stride, Strided<2> g,
                                    int64_t count, int64_t size, int64_t x_dim_stride, unsigned long long* fault) {
  for (int64_t e = first_index(); e < count; e += grid_stride()) {
    int64_t off[2];
    g.offsets(e, off);
    const int64_t v = static_cast<int64_t>(index[off[1] * index_stride]);
    if (v < 0 || v >= size) {
      report(fault, off[1]);
      out[e] = W(0);
      continue;
    }
    out[e] = x[off[0] + v * x_dim_stride];
  }
}

// g walks index's shape (== out's): [0] index's strides, [1] x's strides without dim.
template <class W, class I>
__global__ void gather_kernel(W* out, const W* x, const I* index, Strided<2> g, int64_t count, int64_t size,
                              int64_t x_dim_stride, unsigned long long* fault) {
  for (int64_t e = first_index(); e < count; e += grid_stride()) {
    int64_t off[2];
    g.offsets(e, off);
    const int64_t v = static_cast<int64_t>(index[off[0]]);
    if (v < 0 || v >= size) {
      report(fault, e);
      out[e] = W(0);
      continue;
    }
    out[e] = x[off[1] + v * x_dim_stride];
  }
}

// out (rows, C) = weight (V, C) at ids; g walks ids' shape with ids' strides.
template <class W, class I>
__global__ void embedding_kernel(W* out, const W* weight, const I* ids, Strided<1> g, int64_t count, int64_t C,
                                 int64_t V, int64_t ws0, int64_t ws1, unsigned long long* fault) {
  for (int64_t e = first_index(); e < count; e += grid_stride()) {
    const int64_t row = e / C, c = e - row * C;
    int64_t off[1];
    g.offsets(row, off);
    const int64_t v = static_cast<int64_t>(ids[off[0]]);
    if (v < 0 || v >= V) {
      report(fault, row);
      out[e] = W(0);
      continue;
    }
    out[e] = weight[v * ws0 + c * ws1];
  }
}

// --- accumulations ---------------------------------------------------------------------------
// out (V, C) = sum over each id's run of grad (count, C) rows, in position order, in Acc.
template <class T>
__global__ void embedding_backward_kernel(T* out, const T* grad, const uint32_t* positions, const int64_t* start,
                                          int64_t V, int64_t C) {
  using Acc = dacc_t<T>;
  for (int64_t e = first_index(); e < V * C; e += grid_stride()) {
    const int64_t v = e / C, c = e - v * C;
    Acc acc = Acc(0);
    for (int64_t k = start[v]; k < start[v + 1]; ++k) acc += load_acc(grad[static_cast<int64_t>(positions[k]) * C + c]);
    out[e] = store_as<T>(acc);
  }
}

// g walks self's shape: [0] self's strides, [1] src's strides without dim, [2] the coordinate along
// dim. Each element of self adds its run of src in position order, rounding to T each step.
template <class T>
__global__ void index_add_kernel(T* self, const T* src, Strided<3> g, int64_t count, int64_t src_dim_stride,
                                 const uint32_t* positions, const int64_t* start, const unsigned long long* fault) {
  if (*fault != kNoFault) return;  // a bad index: nothing is written
  for (int64_t e = first_index(); e < count; e += grid_stride()) {
    int64_t off[3];
    g.offsets(e, off);
    const int64_t b = start[off[2]], end = start[off[2] + 1];
    if (b == end) continue;
    T cur = self[off[0]];
    for (int64_t k = b; k < end; ++k)
      cur = store_as<T>(load_acc(cur) + load_acc(src[off[1] + static_cast<int64_t>(positions[k]) * src_dim_stride]));
    self[off[0]] = cur;
  }
}

// One thread per fiber (positions differing only along dim); g walks index's shape without dim:
// [0] self's, [1] src's, [2] index's strides. Fibers write disjoint elements of self.
template <class T, class I>
__global__ void scatter_add_fibers_kernel(T* self, const T* src, const I* index, Strided<3> g, int64_t fibers,
                                          int64_t len, int64_t self_ds, int64_t src_ds, int64_t index_ds,
                                          const unsigned long long* fault) {
  if (*fault != kNoFault) return;  // a bad index: nothing is written
  for (int64_t f = first_index(); f < fibers; f += grid_stride()) {
    int64_t off[3];
    g.offsets(f, off);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t v = static_cast<int64_t>(index[off[2] + j * index_ds]);
      T& t = self[off[0] + v * self_ds];
      t = store_as<T>(load_acc(t) + load_acc(src[off[1] + j * src_ds]));
    }
  }
}

// 8-bit atomic add through the aligned 32-bit word that holds the byte.
__device__ __forceinline__ void atomic_add_u8(uint8_t* p, uint8_t v) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
  const unsigned int shift = static_cast<unsigned int>(a & 3) * 8;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const unsigned int byte = ((assumed >> shift) + v) & 0xFFu;
    old = atomicCAS(word, assumed, (assumed & ~(0xFFu << shift)) | (byte << shift));
  } while (old != assumed);
}

template <class T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>)
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));  // wraps like i64
  else if constexpr (std::is_same_v<T, uint8_t>) atomic_add_u8(p, v);
  else atomicAdd(p, v);  // float, double, int, __half, __nv_bfloat16 (sm_80+)
}

// One thread per index element; g walks index's shape: [0] self's strides without dim, [1] src's,
// [2] index's.
template <class T, class I>
__global__ void scatter_add_atomic_kernel(T* self, const T* src, const I* index, Strided<3> g, int64_t count,
                                          int64_t self_ds, const unsigned long long* fault) {
  if (*fault != kNoFault) return;  // a bad index: nothing is written
  for (int64_t e = first_index(); e < count; e += grid_stride()) {
    int64_t off[3];
    g.offsets(e, off);
    const int64_t v = static_cast<int64_t>(index[off[2]]);
    atomic_add(self + off[0] + v * self_ds, src[off[1]]);
  }
}

// scatter_add_ keeps one thread per fiber when fibers are short or many (Note [Deterministic index
// accumulation]).
constexpr int64_t kShortFiber = 64;
constexpr int64_t kManyFibers = 8192;

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  cudaStream_t s = stream_for(x);
  FaultFlag flag(x.device(), s);
  const int64_t count = out.numel(), size = x.size(dim);
  dispatch_index(index.dtype(), "index_select", [&]<class I>() {
    if (index.numel() == 0) return;
    if (count == 0) {
      launch_check<I>(index, size, flag, s);
      return;
    }
    const int64_t index_stride = index.dim() == 1 ? index.stride(0) : 0;
    auto g = make_strided<2>(out.shape(), {zeroed_at(x.strides(), dim), unit_at(x.dim(), dim)});
    dispatch_width(x.element_size(), [&]<class W>() {
      index_select_kernel<W, I><<<blocks_for(count), kThreads, 0, s>>>(
          ptr<W>(out), ptr<const W>(x), static_cast<const I*>(index.data_ptr()), index_stride, g, count, size,
          x.stride(dim), flag.ptr());
      KILN_CUDA_CHECK_LAUNCH();
    });
  });
  return flag.record(index);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  cudaStream_t s = stream_for(x);
  FaultFlag flag(x.device(), s);
  const int64_t count = index.numel(), size = x.size(dim);
  dispatch_index(index.dtype(), "gather", [&]<class I>() {
    if (count == 0) return;
    auto g = make_strided<2>(index.shape(), {index.strides(), zeroed_at(x.strides(), dim)});
    dispatch_width(x.element_size(), [&]<class W>() {
      gather_kernel<W, I><<<blocks_for(count), kThreads, 0, s>>>(ptr<W>(out), ptr<const W>(x),
                                                                 static_cast<const I*>(index.data_ptr()), g, count,
                                                                 size, x.stride(dim), flag.ptr());
      KILN_CUDA_CHECK_LAUNCH();
    });
  });
  return flag.record(index);
}

Tensor scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  cudaStream_t s = stream_for(self);
  FaultFlag flag(self.device(), s);
  const int64_t count = index.numel();
  dispatch_index(index.dtype(), "scatter_add_", [&]<class I>() { launch_check<I>(index, self.size(dim), flag, s); });
  if (count == 0) return flag.record(index);
  const int64_t len = index.size(dim), fibers = count / len;
  // The adding kernels run after the check on the same stream and return at once on a fault.
  dispatch_numeric_device(self.dtype(), "scatter_add_", [&]<class T>() {
    dispatch_index(index.dtype(), "scatter_add_", [&]<class I>() {
      const auto* ip = static_cast<const I*>(index.data_ptr());
      if (len <= kShortFiber || fibers >= kManyFibers) {
        auto g = make_strided<3>(index.shape(), {self.strides(), src.strides(), index.strides()}, dim);
        scatter_add_fibers_kernel<T, I><<<blocks_for(fibers), kThreads, 0, s>>>(
            ptr<T>(self), ptr<const T>(src), ip, g, fibers, len, self.stride(dim), src.stride(dim), index.stride(dim),
            flag.ptr());
      } else {
        auto g = make_strided<3>(index.shape(), {zeroed_at(self.strides(), dim), src.strides(), index.strides()});
        scatter_add_atomic_kernel<T, I><<<blocks_for(count), kThreads, 0, s>>>(ptr<T>(self), ptr<const T>(src), ip, g,
                                                                               count, self.stride(dim), flag.ptr());
      }
      KILN_CUDA_CHECK_LAUNCH();
    });
  });
  return flag.record(index);
}

Tensor index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  cudaStream_t s = stream_for(self);
  FaultFlag flag(self.device(), s);
  const int64_t size = self.size(dim);
  Keys keys = make_keys("index_add_", index, size, flag, s);
  if (index.numel() == 0 || src.numel() == 0) return flag.record(index);
  Runs runs = sort_runs(keys, size, self.device(), s);
  const int64_t count = self.numel();
  // The adding kernel runs after the check on the same stream and returns at once on a fault.
  dispatch_numeric_device(self.dtype(), "index_add_", [&]<class T>() {
    auto g = make_strided<3>(self.shape(), {self.strides(), zeroed_at(src.strides(), dim), unit_at(self.dim(), dim)});
    index_add_kernel<T><<<blocks_for(count), kThreads, 0, s>>>(ptr<T>(self), ptr<const T>(src), g, count,
                                                               src.stride(dim), runs.pos(), runs.starts(), flag.ptr());
    KILN_CUDA_CHECK_LAUNCH();
  });
  return flag.record(index);
}

Tensor embedding(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  cudaStream_t s = stream_for(weight);
  FaultFlag flag(weight.device(), s);
  const int64_t V = weight.size(0), C = weight.size(1), rows = ids.numel();
  dispatch_index(ids.dtype(), "embedding", [&]<class I>() {
    if (rows == 0) return;
    if (C == 0) {
      launch_check<I>(ids, V, flag, s);
      return;
    }
    auto g = make_strided<1>(ids.shape(), {ids.strides()});
    dispatch_width(weight.element_size(), [&]<class W>() {
      embedding_kernel<W, I><<<blocks_for(rows * C), kThreads, 0, s>>>(
          ptr<W>(out), ptr<const W>(weight), static_cast<const I*>(ids.data_ptr()), g, rows * C, C, V,
          weight.stride(0), weight.stride(1), flag.ptr());
      KILN_CUDA_CHECK_LAUNCH();
    });
  });
  return flag.record(ids);
}

Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings, const Tensor& out) {
  cudaStream_t s = stream_for(grad_out);
  FaultFlag flag(grad_out.device(), s);
  const int64_t V = num_embeddings, C = grad_out.size(-1);
  Keys keys = make_keys("embedding_backward", ids, V, flag, s);
  dispatch_numeric_device(grad_out.dtype(), "embedding_backward", [&]<class T>() {
    if (out.numel() == 0) return;
    if (ids.numel() == 0) {
      KILN_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), s));  // all-zero bits are 0 in every dtype
      return;
    }
    Runs runs = sort_runs(keys, V, out.device(), s);
    Tensor g = grad_out.contiguous();  // (rows, C)
    embedding_backward_kernel<T><<<blocks_for(V * C), kThreads, 0, s>>>(ptr<T>(out), ptr<const T>(g), runs.pos(),
                                                                        runs.starts(), V, C);
    KILN_CUDA_CHECK_LAUNCH();
  });
  return flag.record(ids);
}

}  // namespace kiln::cuda
