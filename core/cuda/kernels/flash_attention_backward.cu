// Flash-attention backward, deterministic, in three kernels on the current stream:
//   delta   delta_i = rowsum(dO_i * O_i)                                           (B, H, T) f32
//   dK/dV   one block per (head, 64 keys) walks the query tiles that see them:
//           P^T = exp(scale K Q^T - lse), dV += P^T dO, dS^T = P^T (V dO^T - delta), dK += scale dS^T Q
//   dQ      one block per (head, 64 queries) walks the key tiles they see:
//           P = exp(scale Q K^T - lse), dS = P (dO V^T - delta), dQ += scale dS K
// P is rebuilt from the forward's logsumexp, so no T x T matrix exists. Note [Flash attention tiling].
#include <kiln/core/cuda/kernels/flash_attention.h>

#include <climits>
#include <cstdint>

#include <kiln/core/cuda/kernels/flash_attention_device.cuh>
#include <kiln/core/shape.h>

namespace kiln::cuda {

namespace flash {

inline constexpr int kDeltaThreads = 256;

// delta (rows,) with rows = B * H * T, row = bh * T + i: one warp per row.
template <class T, int D>
__global__ void flash_bwd_delta_kernel(HeadTensor out, HeadTensor dout, float* delta, int heads, int t, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; row < rows; row += warps) {
    const int64_t bh = row / t;
    const int i = static_cast<int>(row - bh * t);
    const T* o = head_rows<T>(out, bh, heads) + int64_t(i) * out.st;
    const T* g = head_rows<T>(dout, bh, heads) + int64_t(i) * dout.st;
    float acc = 0.f;
#pragma unroll
    for (int d = lane; d < D; d += 32) acc += load_acc(o[d]) * load_acc(g[d]);
    acc = warp_sum(acc);
    if (lane == 0) delta[row] = acc;
  }
}

// dk, dv (B, H, T, D). Warp w owns keys n0 + 16w .. n0 + 16w + 15 and keeps their dK and dV in
// f32 fragments across all query tiles.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_bwd_dkdv_kernel(BwdParams p) {
  using L = DkvLayout<D>;
  constexpr int kCols = L::kCols, kLd = L::kLd, kPLd = L::kPLd, kN = kCols / kFrag;
  static_assert(L::kBytes <= kMaxSharedBytes);
  extern __shared__ __align__(128) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem + L::kK);   // (64, kLd)
  T* vs = reinterpret_cast<T*>(smem + L::kV);   // (64, kLd)
  T* qs = reinterpret_cast<T*>(smem + L::kQ);   // (kCols, kLd)
  T* dos = reinterpret_cast<T*>(smem + L::kDo); // (kCols, kLd)
  T* ps = reinterpret_cast<T*>(smem + L::kP);   // (64, kPLd): P^T, then dS^T
  float* tab = reinterpret_cast<float*>(smem + L::kTab);
  float* lse_s = reinterpret_cast<float*>(smem + L::kLse);      // (kCols,) lse * log2(e)
  float* delta_s = reinterpret_cast<float*>(smem + L::kDelta);  // (kCols,)

  const int warp = threadIdx.x / 32;
  const BlockTile bt = block_tile(blockIdx.x, ceil_div(p.t, kRowsPerBlock), /*heavy_last=*/false);
  const int n0 = bt.tile * kRowsPerBlock;
  const T* q = head_rows<T>(p.q, bt.bh, p.heads);
  const T* k = head_rows<T>(p.k, bt.bh, p.heads);
  const T* v = head_rows<T>(p.v, bt.bh, p.heads);
  const T* dout = head_rows<T>(p.dout, bt.bh, p.heads);
  const float* lse = p.lse + bt.bh * p.t;
  const float* delta = p.delta + bt.bh * p.t;

  fill_index_tables(tab);
  load_tile<T, D, kRowsPerBlock>(ks, k, p.k.st, n0, p.t);
  load_tile<T, D, kRowsPerBlock>(vs, v, p.v.st, n0, p.t);
  __syncthreads();
  const FragCoords fc = frag_coords(tab);

  const T* kw = ks + warp * kFrag * kLd;
  const T* vw = vs + warp * kFrag * kLd;
  T* pw = ps + warp * kFrag * kPLd;
  const int row0 = n0 + warp * kFrag;  // this warp's first key
  AccFrag dk[D / kFrag], dv[D / kFrag];
  zero(dk);
  zero(dv);

  for (int m0 = query_begin(n0, kCols, p.causal); m0 < p.t; m0 += kCols) {
    __syncthreads();  // every warp is done with the previous Q, dO, lse, delta
    load_tile<T, D, kCols>(qs, q, p.q.st, m0, p.t);
    load_tile<T, D, kCols>(dos, dout, p.dout.st, m0, p.t);
    for (int i = threadIdx.x; i < kCols; i += kThreads) {
      const bool in = m0 + i < p.t;
      lse_s[i] = in ? lse[m0 + i] * kLog2e : 0.f;
      delta_s[i] = in ? delta[m0 + i] : 0.f;
    }
    __syncthreads();

    AccFrag pt[kN];  // S^T = K_w Q^T (16, kCols), then P^T in f32
    zero(pt);
    warp_mma<T, kN, D / kFrag, /*kBTransposed=*/true>(pt, kw, kLd, qs, kLd);
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int i = 0; i < kAccElems; ++i) {
        const int c = n * kFrag + fc.col[i];
        pt[n].x[i] = visible(m0 + c, row0 + fc.row[i], p.t, p.causal)
                         ? exp2f(pt[n].x[i] * p.scale_log2 - lse_s[c]) : 0.f;
      }
    store_frags_16bit<T, kN>(pw, kPLd, pt, fc);
    __syncwarp();
    warp_mma<T, D / kFrag, kN, /*kBTransposed=*/false>(dv, pw, kPLd, dos, kLd);  // dV += P^T dO

    AccFrag ds[kN];  // dP^T = V_w dO^T (16, kCols), then dS^T = P^T (dP^T - delta)
    zero(ds);
    warp_mma<T, kN, D / kFrag, /*kBTransposed=*/true>(ds, vw, kLd, dos, kLd);
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int i = 0; i < kAccElems; ++i) ds[n].x[i] = pt[n].x[i] * (ds[n].x[i] - delta_s[n * kFrag + fc.col[i]]);
    __syncwarp();  // every lane has read P^T from pw
    store_frags_16bit<T, kN>(pw, kPLd, ds, fc);
    __syncwarp();
    warp_mma<T, D / kFrag, kN, /*kBTransposed=*/false>(dk, pw, kPLd, qs, kLd);  // dK += dS^T Q
  }

  float scale_k[kAccElems], one[kAccElems];
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) {
    scale_k[i] = p.scale;
    one[i] = 1.f;
  }
  store_rows<T, D / kFrag>(head_rows_mut<T>(p.dk, bt.bh, p.heads), p.dk.st, row0, p.t, dk, fc, scale_k);
  store_rows<T, D / kFrag>(head_rows_mut<T>(p.dv, bt.bh, p.heads), p.dv.st, row0, p.t, dv, fc, one);
}

// dq (B, H, T, D). Warp w owns queries m0 + 16w .. m0 + 16w + 15.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_bwd_dq_kernel(BwdParams p) {
  using L = DqLayout<D>;
  constexpr int kCols = L::kCols, kLd = L::kLd, kPLd = L::kPLd, kN = kCols / kFrag;
  static_assert(L::kBytes <= kMaxSharedBytes);
  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem + L::kQ);    // (64, kLd)
  T* dos = reinterpret_cast<T*>(smem + L::kDo);  // (64, kLd)
  T* ks = reinterpret_cast<T*>(smem + L::kK);    // (kCols, kLd)
  T* vs = reinterpret_cast<T*>(smem + L::kV);    // (kCols, kLd)
  T* ps = reinterpret_cast<T*>(smem + L::kP);    // (64, kPLd): dS
  float* tab = reinterpret_cast<float*>(smem + L::kTab);
  float* lse_s = reinterpret_cast<float*>(smem + L::kLse);      // (64,) lse * log2(e)
  float* delta_s = reinterpret_cast<float*>(smem + L::kDelta);  // (64,)

  const int warp = threadIdx.x / 32;
  const BlockTile bt = block_tile(blockIdx.x, ceil_div(p.t, kRowsPerBlock), /*heavy_last=*/p.causal);
  const int m0 = bt.tile * kRowsPerBlock;
  const T* q = head_rows<T>(p.q, bt.bh, p.heads);
  const T* k = head_rows<T>(p.k, bt.bh, p.heads);
  const T* v = head_rows<T>(p.v, bt.bh, p.heads);
  const T* dout = head_rows<T>(p.dout, bt.bh, p.heads);

  fill_index_tables(tab);
  load_tile<T, D, kRowsPerBlock>(qs, q, p.q.st, m0, p.t);
  load_tile<T, D, kRowsPerBlock>(dos, dout, p.dout.st, m0, p.t);
  for (int i = threadIdx.x; i < kRowsPerBlock; i += kThreads) {
    const bool in = m0 + i < p.t;
    lse_s[i] = in ? p.lse[bt.bh * p.t + m0 + i] * kLog2e : 0.f;
    delta_s[i] = in ? p.delta[bt.bh * p.t + m0 + i] : 0.f;
  }
  __syncthreads();
  const FragCoords fc = frag_coords(tab);

  const T* qw = qs + warp * kFrag * kLd;
  const T* dow = dos + warp * kFrag * kLd;
  T* pw = ps + warp * kFrag * kPLd;
  const int row0 = m0 + warp * kFrag;  // this warp's first query
  float lse_r[kAccElems], delta_r[kAccElems];
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) {
    lse_r[i] = lse_s[warp * kFrag + fc.row[i]];
    delta_r[i] = delta_s[warp * kFrag + fc.row[i]];
  }
  AccFrag dq[D / kFrag];
  zero(dq);

  const int n_end = key_end(m0, kRowsPerBlock, p.t, p.causal);
  for (int n0 = 0; n0 < n_end; n0 += kCols) {
    load_kv_tiles<T, D, kCols>(ks, vs, k, v, p, n0);

    AccFrag s[kN], ds[kN];  // S = Q_w K^T, dP = dO_w V^T (16, kCols); then dS = P (dP - delta)
    zero(s);
    zero(ds);
    warp_mma<T, kN, D / kFrag, /*kBTransposed=*/true>(s, qw, kLd, ks, kLd);
    warp_mma<T, kN, D / kFrag, /*kBTransposed=*/true>(ds, dow, kLd, vs, kLd);
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int i = 0; i < kAccElems; ++i) {
        const float pr = visible(row0 + fc.row[i], n0 + n * kFrag + fc.col[i], p.t, p.causal)
                             ? exp2f(s[n].x[i] * p.scale_log2 - lse_r[i]) : 0.f;
        ds[n].x[i] = pr * (ds[n].x[i] - delta_r[i]);
      }
    store_frags_16bit<T, kN>(pw, kPLd, ds, fc);
    __syncwarp();
    warp_mma<T, D / kFrag, kN, /*kBTransposed=*/false>(dq, pw, kPLd, ks, kLd);  // dQ += dS K
  }

  float scale_q[kAccElems];
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) scale_q[i] = p.scale;
  store_rows<T, D / kFrag>(head_rows_mut<T>(p.dq, bt.bh, p.heads), p.dq.st, row0, p.t, dq, fc, scale_q);
}

template <class T, int D>
void launch_backward(const BwdParams& p, const HeadTensor& out, float* delta, int64_t rows, int64_t blocks,
                     bool need_dq, bool need_dkdv, cudaStream_t stream) {
  flash_bwd_delta_kernel<T, D><<<blocks_for(rows * 32, kDeltaThreads), kDeltaThreads, 0, stream>>>(
      out, p.dout, delta, p.heads, p.t, rows);
  KILN_CUDA_CHECK_LAUNCH();
  if (need_dkdv) {
    auto kernel = flash_bwd_dkdv_kernel<T, D>;
    allow_shared_bytes(reinterpret_cast<const void*>(kernel), DkvLayout<D>::kBytes);
    kernel<<<static_cast<unsigned>(blocks), kThreads, DkvLayout<D>::kBytes, stream>>>(p);
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (need_dq) {
    auto kernel = flash_bwd_dq_kernel<T, D>;
    allow_shared_bytes(reinterpret_cast<const void*>(kernel), DqLayout<D>::kBytes);
    kernel<<<static_cast<unsigned>(blocks), kThreads, DqLayout<D>::kBytes, stream>>>(p);
    KILN_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace flash

FlashAttentionGrads flash_attention_backward(const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in,
                                             const Tensor& v_in, const Tensor& out_in, const Tensor& lse, bool causal,
                                             double scale, bool need_dq, bool need_dkdv) {
  KILN_CHECK(flash_attention_supported(q_in, k_in, v_in),
             "flash_attention_backward: needs q, k, v of one shape (B, H, T, 64 or 128) in bf16 or f16 on one CUDA "
             "device (sm_80+), got ", q_in.shape(), " ", q_in.dtype(), " on ", q_in.device(), ", ", k_in.shape(), " ",
             k_in.dtype(), " on ", k_in.device(), ", ", v_in.shape(), " ", v_in.dtype(), " on ", v_in.device());
  for (const Tensor* t : {&dout_in, &out_in})
    KILN_CHECK(t->defined() && t->shape() == q_in.shape() && t->dtype() == q_in.dtype() &&
                   t->device() == q_in.device(),
               "flash_attention_backward: dout and out must match q ", q_in.shape(), " ", q_in.dtype(), " on ",
               q_in.device(), ", got ", t->defined() ? t->shape() : Shape{}, " ",
               t->defined() ? t->dtype() : q_in.dtype(), " on ", t->defined() ? t->device() : q_in.device());
  const int64_t b = q_in.size(0), h = q_in.size(1), t = q_in.size(2), d = q_in.size(3);
  const bool lse_ok = lse.defined() && lse.shape() == Shape({b, h, t}) && lse.dtype() == DType::f32 &&
                      lse.is_contiguous() && lse.device() == q_in.device();
  KILN_CHECK(lse_ok,
             "flash_attention_backward: lse must be the forward's contiguous f32 (", b, ", ", h, ", ", t, ") on ",
             q_in.device());
  cudaStream_t stream = stream_for(q_in);
  FlashAttentionGrads r;
  if (need_dq) r.dq = flash::empty_heads(b, h, t, d, q_in.dtype(), q_in.device());
  if (need_dkdv) {
    r.dk = flash::empty_heads(b, h, t, d, q_in.dtype(), q_in.device());
    r.dv = flash::empty_heads(b, h, t, d, q_in.dtype(), q_in.device());
  }
  if (b * h * t == 0 || (!need_dq && !need_dkdv)) return r;
  const Tensor q = flash::kernel_readable(q_in), k = flash::kernel_readable(k_in), v = flash::kernel_readable(v_in);
  const Tensor out = flash::kernel_readable(out_in), dout = flash::kernel_readable(dout_in);
  Tensor delta = empty({b, h, t}, DType::f32, q_in.device());

  const int64_t blocks = flash::ceil_div(static_cast<int>(t), flash::kRowsPerBlock) * b * h;
  KILN_CHECK(blocks <= INT_MAX && h <= INT_MAX, "flash_attention_backward: ", blocks, " blocks for shape ", q.shape(),
             " exceed the grid limit");
  const flash::HeadTensor none{nullptr, 0, 0, 0};
  flash::BwdParams p{flash::head_tensor(q),
                     flash::head_tensor(k),
                     flash::head_tensor(v),
                     flash::head_tensor(dout),
                     need_dq ? flash::head_tensor(r.dq) : none,
                     need_dkdv ? flash::head_tensor(r.dk) : none,
                     need_dkdv ? flash::head_tensor(r.dv) : none,
                     ptr<float>(lse),
                     ptr<float>(delta),
                     static_cast<int>(h),
                     static_cast<int>(t),
                     static_cast<float>(scale),
                     static_cast<float>(scale * flash::kLog2e),
                     causal};
  dispatch_floating_device(q.dtype(), "flash_attention_backward", [&]<class T>() {
    if constexpr (sizeof(T) == 2) {
      if (d == 64)
        flash::launch_backward<T, 64>(p, flash::head_tensor(out), ptr<float>(delta), b * h * t, blocks, need_dq,
                                      need_dkdv, stream);
      else
        flash::launch_backward<T, 128>(p, flash::head_tensor(out), ptr<float>(delta), b * h * t, blocks, need_dq,
                                       need_dkdv, stream);
    }
  });
  return r;
}

}  // namespace kiln::cuda
