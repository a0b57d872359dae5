// Flash-attention forward: one block per (head, 64 query rows) streams 64-key tiles of K and V
// through shared memory with an online softmax (running max and sum per row, O rescaled as the
// max grows), so no T x T matrix exists; it also writes each row's logsumexp for the backward.
// Plus the host helpers both passes share. Math and tiling: Note [Flash attention tiling].
#include <kiln/core/cuda/kernels/flash_attention.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include <kiln/core/cuda/kernels/flash_attention_device.cuh>
#include <kiln/core/shape.h>

namespace kiln::cuda {

namespace flash {

// out (B, H, T, D), lse (B, H, T) from q, k, v (B, H, T, D). Grid: one block per (head, query
// tile), flattened (block_tile). Warp w owns query rows m0 + 16w .. m0 + 16w + 15; in the softmax
// each row belongs to two lanes (lane / 2), which split the tile's columns in halves.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(FwdParams p) {
  using L = FwdLayout<D>;
  constexpr int kCols = L::kCols, kLd = L::kLd, kSLd = L::kSLd, kPLd = L::kPLd, kHalf = kCols / 2;
  static_assert(L::kBytes <= kMaxSharedBytes);
  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem + L::kQ);          // (64, kLd)
  T* ks = reinterpret_cast<T*>(smem + L::kK);          // (kCols, kLd)
  T* vs = reinterpret_cast<T*>(smem + L::kV);          // (kCols, kLd)
  float* ss = reinterpret_cast<float*>(smem + L::kS);  // (64, kSLd) scores
  T* ps = reinterpret_cast<T*>(smem + L::kP);          // (64, kPLd) probabilities
  float* tab = reinterpret_cast<float*>(smem + L::kTab);
  float* row_val = reinterpret_cast<float*>(smem + L::kRowVal);  // (64,) alpha, then 1/l

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const BlockTile bt = block_tile(blockIdx.x, ceil_div(p.t, kRowsPerBlock), /*heavy_last=*/p.causal);
  const int m0 = bt.tile * kRowsPerBlock;
  const T* q = head_rows<T>(p.q, bt.bh, p.heads);
  const T* k = head_rows<T>(p.k, bt.bh, p.heads);
  const T* v = head_rows<T>(p.v, bt.bh, p.heads);
  T* out = head_rows_mut<T>(p.out, bt.bh, p.heads);

  fill_index_tables(tab);
  load_tile<T, D, kRowsPerBlock>(qs, q, p.q.st, m0, p.t);
  __syncthreads();
  const FragCoords fc = frag_coords(tab);

  const T* qw = qs + warp * kFrag * kLd;  // this warp's rows
  float* sw = ss + warp * kFrag * kSLd;
  T* pw = ps + warp * kFrag * kPLd;
  float* rw = row_val + warp * kFrag;
  const int r = lane / 2, c0 = (lane % 2) * kHalf;  // softmax role: row r, columns [c0, c0 + kHalf)
  const int qi = m0 + warp * kFrag + r;
  float m_run = -INFINITY, l_run = 0.f;  // in log2 units of the scaled scores
  AccFrag o[D / kFrag];
  zero(o);

  const int n_end = key_end(m0, kRowsPerBlock, p.t, p.causal);
  for (int n0 = 0; n0 < n_end; n0 += kCols) {
    load_kv_tiles<T, D, kCols>(ks, vs, k, v, p, n0);
    {
      AccFrag s[kCols / kFrag];  // S = Q_w K^T (16, kCols)
      zero(s);
      warp_mma<T, kCols / kFrag, D / kFrag, /*kBTransposed=*/true>(s, qw, kLd, ks, kLd);
#pragma unroll
      for (int n = 0; n < kCols / kFrag; ++n) wmma::store_matrix_sync(sw + n * kFrag, s[n], kSLd, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax of row r: masked scores are -inf; `base` stays finite while the row has seen
    // no visible key (padded rows), so every exp2 is of -inf or a finite number.
    float x[kHalf];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kHalf; ++j) {
      x[j] = visible(qi, n0 + c0 + j, p.t, p.causal) ? sw[r * kSLd + c0 + j] * p.scale_log2 : -INFINITY;
      mx = fmaxf(mx, x[j]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m_run, mx);
    const float base = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = exp2f(m_run - base);  // 0 while m_run is -inf (l and O are 0 then)
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kHalf; ++j) {
      const float pj = exp2f(x[j] - base);
      sum += pj;
      pw[r * kPLd + c0 + j] = store_as<T>(pj);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l_run = l_run * alpha + sum;
    m_run = m_new;
    if (c0 == 0) rw[r] = alpha;
    __syncwarp();
    // O = alpha * O + P V
    float a[kAccElems];
#pragma unroll
    for (int i = 0; i < kAccElems; ++i) a[i] = rw[fc.row[i]];
#pragma unroll
    for (int n = 0; n < D / kFrag; ++n)
#pragma unroll
      for (int i = 0; i < kAccElems; ++i) o[n].x[i] *= a[i];
    warp_mma<T, D / kFrag, kCols / kFrag, /*kBTransposed=*/false>(o, pw, kPLd, vs, kLd);
  }

  __syncwarp();  // every lane has read its alphas from rw
  if (c0 == 0) {
    rw[r] = l_run > 0.f ? 1.f / l_run : 0.f;
    if (qi < p.t) p.lse[bt.bh * p.t + qi] = l_run > 0.f ? (m_run + log2f(l_run)) * kLn2 : INFINITY;
  }
  __syncwarp();
  float inv_l[kAccElems];
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) inv_l[i] = rw[fc.row[i]];
  store_rows<T, D / kFrag>(out, p.out.st, m0 + warp * kFrag, p.t, o, fc, inv_l);
}

template <class T, int D>
void launch_forward(const FwdParams& p, int64_t blocks, cudaStream_t stream) {
  auto kernel = flash_fwd_kernel<T, D>;
  allow_shared_bytes(reinterpret_cast<const void*>(kernel), FwdLayout<D>::kBytes);
  kernel<<<static_cast<unsigned>(blocks), kThreads, FwdLayout<D>::kBytes, stream>>>(p);
  KILN_CUDA_CHECK_LAUNCH();
}

// --- host helpers shared with the backward --------------------------------------------------

namespace {
bool readable_in_place(const Tensor& t, AttentionReader reader) {  // Note [Attention layouts]
  return attention_readable_in_place(t.shape().data(), t.strides().data(), reinterpret_cast<uintptr_t>(t.data_ptr()),
                                     reader);
}
}  // namespace

Tensor kernel_readable(const Tensor& t, AttentionReader reader) {
  if (readable_in_place(t, reader)) return t;
  Tensor c = t.contiguous();
  if (!readable_in_place(c, reader)) c = t.clone();  // contiguous but at a misaligned offset, or expanded
  KILN_ASSERT(readable_in_place(c, reader), "flash attention: a fresh copy of shape ", t.shape(),
              " is not 16-byte aligned");
  return c;
}

HeadTensor head_tensor(const Tensor& t) {
  auto stride = [&](int64_t d) { return t.size(d) > 1 ? t.stride(d) : int64_t(0); };
  return HeadTensor{t.data_ptr(), stride(0), stride(1), stride(2)};
}

Tensor empty_heads(int64_t b, int64_t h, int64_t t, int64_t d, DType dtype, Device device) {
  return empty({b, t, h, d}, dtype, device).transpose(1, 2);
}

void allow_shared_bytes(const void* kernel, int64_t bytes) {
  KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace flash

bool flash_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined()) return false;
  if (q.dim() != 4 || k.shape() != q.shape() || v.shape() != q.shape()) return false;
  if (!q.device().is_cuda() || k.device() != q.device() || v.device() != q.device()) return false;
  if ((q.dtype() != DType::bf16 && q.dtype() != DType::f16) || k.dtype() != q.dtype() || v.dtype() != q.dtype())
    return false;
  if (q.size(3) != 64 && q.size(3) != 128) return false;
  if (q.size(2) > INT_MAX / 2) return false;
  int major = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q.device().index));
  return major >= 8;  // bf16 WMMA
}

FlashAttentionForward flash_attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                              double scale) {
  KILN_CHECK(flash_attention_supported(q_in, k_in, v_in),
             "flash_attention_forward: needs q, k, v of one shape (B, H, T, 64 or 128) in bf16 or f16 on one CUDA "
             "device (sm_80+), got ", q_in.shape(), " ", q_in.dtype(), " on ", q_in.device(), ", ", k_in.shape(), " ",
             k_in.dtype(), " on ", k_in.device(), ", ", v_in.shape(), " ", v_in.dtype(), " on ", v_in.device());
  const int64_t b = q_in.size(0), h = q_in.size(1), t = q_in.size(2), d = q_in.size(3);
  cudaStream_t stream = stream_for(q_in);
  FlashAttentionForward r;
  r.out = flash::empty_heads(b, h, t, d, q_in.dtype(), q_in.device());
  r.lse = empty({b, h, t}, DType::f32, q_in.device());
  if (b * h * t == 0) return r;
  const Tensor q = flash::kernel_readable(q_in), k = flash::kernel_readable(k_in), v = flash::kernel_readable(v_in);

  const int64_t blocks = flash::ceil_div(static_cast<int>(t), flash::kRowsPerBlock) * b * h;
  KILN_CHECK(blocks <= INT_MAX && h <= INT_MAX, "flash_attention_forward: ", blocks, " blocks for shape ", q.shape(),
             " exceed the grid limit");
  flash::FwdParams p{flash::head_tensor(q), flash::head_tensor(k), flash::head_tensor(v), flash::head_tensor(r.out),
                     ptr<float>(r.lse),     static_cast<int>(h),   static_cast<int>(t),
                     static_cast<float>(scale * flash::kLog2e),   causal};
  dispatch_floating_device(q.dtype(), "flash_attention_forward", [&]<class T>() {
    if constexpr (sizeof(T) == 2) {
      if (d == 64) flash::launch_forward<T, 64>(p, blocks, stream);
      else flash::launch_forward<T, 128>(p, blocks, stream);
    }
  });
  return r;
}

}  // namespace kiln::cuda
