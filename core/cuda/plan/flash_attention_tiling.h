// The index math of the flash-attention kernels, as plain constexpr functions that CPU code can
// include (no CUDA headers): which key tiles a query tile visits under the causal mask, the mask
// itself, the block -> (head, tile) order, and the shared-memory layout of each kernel. The
// kernels call exactly these, and tests/core/test_flash_tiling.cpp checks them on the CPU.
#pragma once

#include <cstdint>

#include <kiln/core/host_device.h>

namespace kiln::cuda::flash {

// Every kernel: 4 warps; each warp owns 16 rows of its tile (Note [Flash attention tiling] in
// flash_attention_device.cuh).
inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kFrag = 16;  // WMMA 16x16x16 fragments
inline constexpr int kRowsPerBlock = kWarps * kFrag;  // 64 rows owned by one block

KILN_HOST_DEVICE constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
KILN_HOST_DEVICE constexpr int min_int(int a, int b) { return a < b ? a : b; }
KILN_HOST_DEVICE constexpr int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// Query qi attends key kj: both exist (padded rows of a partial tile do not) and, when causal,
// the key is not in the query's future.
KILN_HOST_DEVICE constexpr bool visible(int qi, int kj, int t, bool causal) {
  return qi < t && kj < t && (!causal || kj <= qi);
}

// The query rows [m0, m0 + rows) visit keys [0, key_end): under the causal mask the keys after the
// block's last row are masked for every row, so their tiles are skipped.
KILN_HOST_DEVICE constexpr int key_end(int m0, int rows, int t, bool causal) {
  return causal ? min_int(t, m0 + rows) : t;
}

// The key rows [n0, ...) visit query tiles of `cols` rows starting at query_begin (tiles aligned
// at 0): under the causal mask a query before n0 sees none of these keys.
KILN_HOST_DEVICE constexpr int query_begin(int n0, int cols, bool causal) { return causal ? n0 / cols * cols : 0; }

// Flattened block index -> (head, tile). Blocks of one head are adjacent (its K/V stay in L2);
// `heavy_last` reverses the tile order within a head so the causal kernels whose last tiles do
// the most work (forward, dQ) start those first.
struct BlockTile {
  int64_t bh;
  int tile;
};
KILN_HOST_DEVICE constexpr BlockTile block_tile(int64_t block, int num_tiles, bool heavy_last) {
  const int64_t bh = block / num_tiles;
  const int i = static_cast<int>(block - bh * num_tiles);
  return {bh, heavy_last ? num_tiles - 1 - i : i};
}

// --- Shared-memory layouts ------------------------------------------------------------------
// 16-bit tiles are stored with a pitch of D + 8 elements (16 bytes of padding against bank
// conflicts); every region starts on a 128-byte boundary, which keeps every WMMA fragment pointer
// (rows at multiples of 16, columns at multiples of 16 elements) 32-byte aligned as WMMA requires.
inline constexpr int kElem = 2;  // bf16 / f16 bytes
KILN_HOST_DEVICE constexpr int tile_pitch(int d) { return d + 8; }
KILN_HOST_DEVICE constexpr int64_t tile_bytes(int rows, int d) { return round_up(int64_t(rows) * tile_pitch(d) * kElem, 128); }
// The two 16x16 float tables that reveal which (row, col) each accumulator element holds.
inline constexpr int64_t kIndexTableBytes = 2 * kFrag * kFrag * 4;

// Forward: Q (64 rows, kept), K and V (kCols rows per step), S as f32 (64 x kCols), P 16-bit
// (64 x kCols), the index tables, one float per row (alpha, then 1/l).
template <int D>
struct FwdLayout {
  static constexpr int kCols = 64;
  static constexpr int kLd = tile_pitch(D);
  static constexpr int kSLd = kCols + 4;  // f32 scores
  static constexpr int kPLd = kCols + 8;  // 16-bit probabilities
  static constexpr int64_t kQ = 0;
  static constexpr int64_t kK = kQ + tile_bytes(kRowsPerBlock, D);
  static constexpr int64_t kV = kK + tile_bytes(kCols, D);
  static constexpr int64_t kS = kV + tile_bytes(kCols, D);
  static constexpr int64_t kP = kS + round_up(int64_t(kRowsPerBlock) * kSLd * 4, 128);
  static constexpr int64_t kTab = kP + round_up(int64_t(kRowsPerBlock) * kPLd * kElem, 128);
  static constexpr int64_t kRowVal = kTab + kIndexTableBytes;
  static constexpr int64_t kBytes = kRowVal + round_up(int64_t(kRowsPerBlock) * 4, 128);
};

// dQ pass: Q and dO (64 query rows, kept), K and V (kCols keys per step), dS 16-bit, the index
// tables, lse and delta of the 64 rows.
template <int D>
struct DqLayout {
  static constexpr int kCols = 64;
  static constexpr int kLd = tile_pitch(D);
  static constexpr int kPLd = kCols + 8;
  static constexpr int64_t kQ = 0;
  static constexpr int64_t kDo = kQ + tile_bytes(kRowsPerBlock, D);
  static constexpr int64_t kK = kDo + tile_bytes(kRowsPerBlock, D);
  static constexpr int64_t kV = kK + tile_bytes(kCols, D);
  static constexpr int64_t kP = kV + tile_bytes(kCols, D);
  static constexpr int64_t kTab = kP + round_up(int64_t(kRowsPerBlock) * kPLd * kElem, 128);
  static constexpr int64_t kLse = kTab + kIndexTableBytes;
  static constexpr int64_t kDelta = kLse + round_up(int64_t(kRowsPerBlock) * 4, 128);
  static constexpr int64_t kBytes = kDelta + round_up(int64_t(kRowsPerBlock) * 4, 128);
};

// dK/dV pass: K and V (64 key rows, kept), Q and dO (kCols queries per step), P^T / dS^T 16-bit,
// the index tables, lse and delta of the kCols queries. D = 128 steps over 32 queries to keep the
// dK and dV accumulators plus two score tiles within the register file.
template <int D>
struct DkvLayout {
  static constexpr int kCols = D >= 128 ? 32 : 64;
  static constexpr int kLd = tile_pitch(D);
  static constexpr int kPLd = kCols + 8;
  static constexpr int64_t kK = 0;
  static constexpr int64_t kV = kK + tile_bytes(kRowsPerBlock, D);
  static constexpr int64_t kQ = kV + tile_bytes(kRowsPerBlock, D);
  static constexpr int64_t kDo = kQ + tile_bytes(kCols, D);
  static constexpr int64_t kP = kDo + tile_bytes(kCols, D);
  static constexpr int64_t kTab = kP + round_up(int64_t(kRowsPerBlock) * kPLd * kElem, 128);
  static constexpr int64_t kLse = kTab + kIndexTableBytes;
  static constexpr int64_t kDelta = kLse + round_up(int64_t(kCols) * 4, 128);
  static constexpr int64_t kBytes = kDelta + round_up(int64_t(kCols) * 4, 128);
};

// sm_90 gives a block at most 227 KiB of shared memory (opt-in above 48 KiB).
inline constexpr int64_t kMaxSharedBytes = 227 * 1024;

}  // namespace kiln::cuda::flash
