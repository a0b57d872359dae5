// Device pieces shared by the flash-attention forward (flash_attention.cu) and backward
// (flash_attention_backward.cu): kernel arguments, tile loads into shared memory, the warp-level
// WMMA product, and the fragment coordinate trick. Included only by those two .cu files.
#pragma once

#include <mma.h>

#include <cstdint>
#include <type_traits>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/kernels/flash_attention_layout.h>
#include <kiln/core/cuda/plan/flash_attention_tiling.h>

namespace kiln::cuda::flash {

// Note [Flash attention tiling]
// Every kernel is "a block owns 64 rows of one operand, 16 per warp, and streams tiles of the
// other operand through shared memory":
//   forward     rows = queries (Q kept),     tiles = keys    (K, V):   S = Q K^T, online softmax, O += P V
//   dQ pass     rows = queries (Q, dO kept), tiles = keys    (K, V):   dQ += dS K
//   dK/dV pass  rows = keys    (K, V kept),  tiles = queries (Q, dO):  dV += P^T dO, dK += dS^T Q
// so each warp's scores (16 rows x a tile) are private to it: the block synchronises only around
// tile loads. Products use WMMA 16x16x16 fragments (16-bit inputs, f32 accumulators); a matrix that
// is the transpose of a stored tile (K^T, Q^T, V^T, dO^T) is read as a col_major matrix_b, so no
// tile is ever transposed in memory. Probabilities and dS are rounded to the input type before
// their product, as FlashAttention-2 does; everything else accumulates in f32.
//
// The backward is deterministic: dQ comes from its own pass over key tiles (recomputing S and dP)
// instead of FlashAttention-2's f32 atomicAdd into a dQ buffer, so no result depends on the order
// blocks finish, at the price of recomputing Q K^T and dO V^T once more.
//
// Per-row work on accumulator fragments (rescaling O by the softmax correction, subtracting a row's
// lse) needs to know which (row, col) each of a lane's fragment elements holds. WMMA leaves that
// layout unspecified, so the kernels ask: they load two 16x16 tables holding r and c into
// accumulator fragments (FragCoords); element i of any accumulator fragment of that type then sits
// at (row[i], col[i]) for this lane. This is sound because mma_sync adds a loaded accumulator
// element-wise, so loads and products share one layout.

namespace wmma = nvcuda::wmma;
using AccFrag = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;
inline constexpr int kAccElems = AccFrag::num_elements;

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// A (B, H, T, D) tensor with any batch/head/row strides and contiguous D, 16-byte aligned rows.
struct HeadTensor {
  const void* ptr;
  int64_t sb, sh, st;  // strides in elements (0 for size-1 dims)
};

// The first row of head bh = b * H + h.
template <class T>
__device__ __forceinline__ const T* head_rows(const HeadTensor& a, int64_t bh, int heads) {
  const int64_t b = bh / heads, h = bh - b * heads;
  return static_cast<const T*>(a.ptr) + b * a.sb + h * a.sh;
}
template <class T>
__device__ __forceinline__ T* head_rows_mut(const HeadTensor& a, int64_t bh, int heads) {
  return const_cast<T*>(head_rows<T>(a, bh, heads));
}

// dst (kRows, pitch) <- rows [r0, r0 + kRows) of src (T rows of D, row stride st); rows at or past
// t are zero. 16-byte vectors: src rows and dst rows are 16-byte aligned (host check / pitch).
template <class T, int D, int kRows>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t st, int r0, int t) {
  static_assert(sizeof(T) == 2 && D % 8 == 0);
  constexpr int kVecPerRow = D / 8, kVecs = kRows * kVecPerRow, kLd = tile_pitch(D);
  for (int i = threadIdx.x; i < kVecs; i += kThreads) {
    const int r = i / kVecPerRow, c = (i - r * kVecPerRow) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < t) v = *reinterpret_cast<const uint4*>(src + int64_t(r0 + r) * st + c);
    *reinterpret_cast<uint4*>(dst + r * kLd + c) = v;
  }
}

// The K and V tiles of keys [n0, n0 + kRows) into shared memory for one step of a loop over key
// tiles, between barriers: every warp is done with the previous tiles before they are overwritten,
// and the new ones are complete before any warp reads them. `p` is FwdParams or BwdParams.
template <class T, int D, int kRows, class Params>
__device__ __forceinline__ void load_kv_tiles(T* ks, T* vs, const T* k, const T* v, const Params& p, int n0) {
  __syncthreads();
  load_tile<T, D, kRows>(ks, k, p.k.st, n0, p.t);
  load_tile<T, D, kRows>(vs, v, p.v.st, n0, p.t);
  __syncthreads();
}

// tab (2, 16, 16) f32: tab[0][r][c] = r, tab[1][r][c] = c. Call before a __syncthreads.
__device__ __forceinline__ void fill_index_tables(float* tab) {
  for (int i = threadIdx.x; i < kFrag * kFrag; i += kThreads) {
    tab[i] = float(i / kFrag);
    tab[kFrag * kFrag + i] = float(i % kFrag);
  }
}

// Which (row, col) of a 16x16 accumulator fragment each of this lane's elements holds.
struct FragCoords {
  int row[kAccElems];
  int col[kAccElems];
};
__device__ __forceinline__ FragCoords frag_coords(const float* tab) {
  AccFrag r, c;
  wmma::load_matrix_sync(r, tab, kFrag, wmma::mem_row_major);
  wmma::load_matrix_sync(c, tab + kFrag * kFrag, kFrag, wmma::mem_row_major);
  FragCoords fc;
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) {
    fc.row[i] = static_cast<int>(r.x[i]);
    fc.col[i] = static_cast<int>(c.x[i]);
  }
  return fc;
}

template <int N>
__device__ __forceinline__ void zero(AccFrag (&acc)[N]) {
#pragma unroll
  for (int f = 0; f < N; ++f) wmma::fill_fragment(acc[f], 0.f);
}

// One warp: acc (16 x 16*kN) += A (16 x 16*kK) * B (16*kK x 16*kN). A is row-major at `a` (pitch
// lda). B is row-major at `b` (element (k, n) at b[k * ldb + n]) or, with kBTransposed, the
// transpose of a row-major tile (element (k, n) at b[n * ldb + k]).
template <class T, int kN, int kK, bool kBTransposed>
__device__ __forceinline__ void warp_mma(AccFrag (&acc)[kN], const T* a, int lda, const T* b, int ldb) {
  using BLayout = std::conditional_t<kBTransposed, wmma::col_major, wmma::row_major>;
#pragma unroll
  for (int kk = 0; kk < kK; ++kk) {
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, T, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + kk * kFrag, lda);
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, T, BLayout> fb;
      const T* bp = kBTransposed ? b + int64_t(n) * kFrag * ldb + kk * kFrag : b + int64_t(kk) * kFrag * ldb + n * kFrag;
      wmma::load_matrix_sync(fb, bp, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes a warp's 16 x 16*kN accumulators as T to rows [row0, row0 + 16) of dst (row stride st),
// element i of every fragment times scale[i] (a per-row factor gathered through FragCoords), and
// skips rows at or past t. Each lane stores its own elements (whole 32-byte row segments per
// fragment).
template <class T, int kN>
__device__ __forceinline__ void store_rows(T* dst, int64_t st, int row0, int t, const AccFrag (&acc)[kN],
                                           const FragCoords& fc, const float (&scale)[kAccElems]) {
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) {
    const int r = row0 + fc.row[i];
    if (r >= t) continue;
    T* p = dst + int64_t(r) * st + fc.col[i];
#pragma unroll
    for (int n = 0; n < kN; ++n) p[n * kFrag] = store_as<T>(acc[n].x[i] * scale[i]);
  }
}

// Writes fragments (16 x 16*kN) as T into a warp's row-major 16-bit tile at `dst` (pitch ld), the
// A operand of the next product.
template <class T, int kN>
__device__ __forceinline__ void store_frags_16bit(T* dst, int ld, const AccFrag (&acc)[kN], const FragCoords& fc) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int i = 0; i < kAccElems; ++i) dst[fc.row[i] * ld + n * kFrag + fc.col[i]] = store_as<T>(acc[n].x[i]);
}

// Forward arguments. out has the same (B, H, T, D) addressing; lse is (B, H, T) contiguous.
struct FwdParams {
  HeadTensor q, k, v, out;
  float* lse;
  int heads, t;
  float scale_log2;  // softmax scale * log2(e): scores go through exp2
  bool causal;
};

// Backward arguments. delta = rowsum(dO * O) and lse are (B, H, T) f32 contiguous.
struct BwdParams {
  HeadTensor q, k, v, dout, dq, dk, dv;
  const float* lse;
  const float* delta;
  int heads, t;
  float scale;       // 1/sqrt(D)
  float scale_log2;  // scale * log2(e)
  bool causal;
};

}  // namespace kiln::cuda::flash

namespace kiln::cuda::flash {

// Host side, defined in flash_attention.cu (kernel_readable and empty_heads: flash_attention_layout.h).
// The kernel's view of a (B, H, T, D) tensor that kernel_readable accepted.
HeadTensor head_tensor(const Tensor& t);
// Lets `kernel` use `bytes` of dynamic shared memory (opt-in above 48 KiB) on the current device.
void allow_shared_bytes(const void* kernel, int64_t bytes);

}  // namespace kiln::cuda::flash
