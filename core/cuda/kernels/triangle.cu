// triu/tril on CUDA: one block per (batch, row) of the output (grid-stride over rows), its threads
// across the columns, so each row's keep range is computed once. Elements are moved as raw bits
// of their width (zero bits are 0 in every dtype), so four kernels serve all eight dtypes.
#include <algorithm>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/plan/elementwise_offsets.h>
#include <kiln/core/cuda/kernels/triangle.h>

namespace kiln::cuda {

namespace {

// Element offset of each matrix in x: its batch index decomposed over the coalesced batch dims.
struct BatchOffsets {
  int ndim = 0;
  int64_t sizes[kMaxLoopDims];    // innermost first
  int64_t strides[kMaxLoopDims];  // in elements

  __device__ int64_t get(int64_t m) const {
    int64_t off = 0;
    KILN_UNROLL
    for (int d = 0; d < kMaxLoopDims; ++d) {
      if (d == ndim) break;
      off += (m % sizes[d]) * strides[d];
      m /= sizes[d];
    }
    return off;
  }
};

template <class W>
__global__ void triangle_kernel(W* __restrict__ out, const W* __restrict__ x, BatchOffsets batch, int64_t rows,
                                int64_t cols, int64_t row_stride, int64_t col_stride, int64_t diagonal, bool upper,
                                int64_t total_rows) {
  // out: (total_rows, cols) contiguous; x: (batch..., rows, cols) strided.
  for (int64_t r = blockIdx.x; r < total_rows; r += gridDim.x) {
    const int64_t i = r % rows;
    const W* src = x + batch.get(r / rows) + i * row_stride;
    const int64_t lo = upper ? std::clamp<int64_t>(i + diagonal, 0, cols) : 0;
    const int64_t hi = upper ? cols : std::clamp<int64_t>(i + diagonal + 1, 0, cols);
    W* dst = out + r * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      dst[j] = (j >= lo && j < hi) ? src[j * col_stride] : W(0);
  }
}

template <class W>
void launch(const Tensor& out, const Tensor& x, const BatchOffsets& batch, int64_t diagonal, bool upper) {
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const int64_t total_rows = out.numel() / cols;
  const int threads = cols >= kThreads ? kThreads : static_cast<int>(ceil_div(cols, 32) * 32);
  const int blocks = static_cast<int>(std::min<int64_t>(total_rows, 65535LL * 8));
  cudaStream_t stream = stream_for(out);
  W* o = static_cast<W*>(out.data_ptr());
  const W* in = static_cast<const W*>(x.data_ptr());
  triangle_kernel<W><<<blocks, threads, 0, stream>>>(o, in, batch, rows, cols, x.stride(-2), x.stride(-1), diagonal,
                                                       upper, total_rows);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void triangle(const Tensor& out, const Tensor& x, int64_t diagonal, bool upper) {
  const char* op = upper ? "triu" : "tril";
  KILN_CHECK(x.dim() >= 2, op, ": expected a tensor with at least 2 dims, got shape ", x.shape());
  KILN_CHECK(out.shape() == x.shape() && out.dtype() == x.dtype() && out.is_contiguous(), op,
             ": the output must be a contiguous ", x.dtype(), " tensor of shape ", x.shape());
  if (out.numel() == 0) return;
  // Diagonals beyond the matrix clamp to the same keep ranges; clamping here keeps i + diagonal
  // from overflowing.
  const int64_t rows = x.size(-2), cols = x.size(-1);
  diagonal = std::clamp<int64_t>(diagonal, -rows - 1, cols + 1);
  const std::vector<int64_t> bshape(x.shape().begin(), x.shape().end() - 2);
  const std::vector<int64_t> bstrides(x.strides().begin(), x.strides().end() - 2);
  const Loop<1> loop = coalesce<1>(bshape, {bstrides});
  if (loop.dims() > kMaxLoopDims) {
    // More unmergeable batch dims than BatchOffsets holds (rare): one launch per outermost index.
    for (int64_t i = 0; i < x.size(0); ++i) triangle(out.select(0, i), x.select(0, i), diagonal, upper);
    return;
  }
  BatchOffsets batch;
  batch.ndim = loop.dims();
  for (int d = 0; d < batch.ndim; ++d) {
    batch.sizes[d] = loop.sizes[d];
    batch.strides[d] = loop.strides[0][d];
  }
  switch (x.element_size()) {
    case 1: return launch<uint8_t>(out, x, batch, diagonal, upper);
    case 2: return launch<uint16_t>(out, x, batch, diagonal, upper);
    case 4: return launch<uint32_t>(out, x, batch, diagonal, upper);
    case 8: return launch<uint64_t>(out, x, batch, diagonal, upper);
  }
  KILN_UNREACHABLE(op, ": unexpected element size ", x.element_size());
}

}  // namespace kiln::cuda
