// Byte-matrix transposition (FP8 operands are bytes): src [rows, cols] row-major (leading dimension
// cols) -> dst [cols, rows] row-major (leading dimension rows), for up to two matrices of the same
// row count in one launch (the K-grouped TN form's dY and X: [sum_k, m] and [sum_k, n] turned into
// the K-major [m, sum_k] and [n, sum_k] the FP8 WGMMA reads).
//
// One CTA of kTransposeThreads (256) threads per 128x128-byte tile:
//   load: each thread reads four 16-byte chunks of the tile (a warp reads four whole 128-byte rows)
//     and stores them to shared memory, chunk c of row r at chunk c ^ ((r >> 4) & 7);
//   transpose: thread (warp w, lane 8 q + j) reads the 32-bit words 4 w + q of rows 16 j .. 16 j + 15
//     (that swizzle puts a warp's 32 reads of one row index in 32 distinct banks), transposes the
//     four 4x4 byte blocks with byte permutes, and writes dst rows (columns of src) 16 w + 4 q + i,
//     bytes 16 j .. 16 j + 15, one 16-byte store each: the 8 lanes of one q write a whole 128-byte
//     row segment.
// rows and cols must be multiples of 16 and the pointers 16-byte aligned (the host checks); partial
// tiles at the edges are guarded per 16-byte chunk.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"

namespace deep_tile {

constexpr int kTransposeThreads = 256;
constexpr int kTransposeTile = 128;

/// One matrix of a transposition launch.
struct TransposeOperand {
  const u8* src;  // [rows, cols]
  u8* dst;        // [cols, rows]
  int cols;
};

/// The 4x4 byte block whose rows are the words w0..w3 (byte b of word r = element (r, b)),
/// transposed in place: afterwards byte b of word r is element (b, r).
DT_DEVICE void transpose_4x4_bytes(u32& w0, u32& w1, u32& w2, u32& w3) {
  // first the 2x2 blocks of byte pairs, then the bytes inside each pair
  const u32 a0 = __byte_perm(w0, w2, 0x5410), a1 = __byte_perm(w1, w3, 0x5410);  // rows 0|2, 1|3: bytes 0-1
  const u32 a2 = __byte_perm(w0, w2, 0x7632), a3 = __byte_perm(w1, w3, 0x7632);  // bytes 2-3
  w0 = __byte_perm(a0, a1, 0x6240);
  w1 = __byte_perm(a0, a1, 0x7351);
  w2 = __byte_perm(a2, a3, 0x6240);
  w3 = __byte_perm(a2, a3, 0x7351);
}

/// The CTA's tile of `op` (tile index `tile` in row-major tile order) transposed through `smem`.
DT_DEVICE void transpose_tile(const TransposeOperand& op, int rows, int tile, uint4* smem) {
  const int tiles_c = (op.cols + kTransposeTile - 1) / kTransposeTile;
  const int r0 = (tile / tiles_c) * kTransposeTile, c0 = (tile % tiles_c) * kTransposeTile;
  const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
  // load: chunk (t % 8) of rows t / 8 + 32 i; 16-byte granularity, so a chunk is all in or all out
  const int chunk = t % 8;
  uint4 v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = t / 8 + 32 * i;
    const bool in = r0 + r < rows && c0 + 16 * chunk < op.cols;
    v[i] = in ? __ldg(reinterpret_cast<const uint4*>(op.src + static_cast<long long>(r0 + r) * op.cols + c0) + chunk)
              : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = t / 8 + 32 * i;
    smem[r * 8 + (chunk ^ ((r >> 4) & 7))] = v[i];
  }
  __syncthreads();
  const int q = lane / 8, j = lane % 8, word = 4 * warp + q;  // src columns 4 word .. 4 word + 3
  const u32* words = reinterpret_cast<const u32*>(smem);
  u32 x[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int r = 16 * j + i;
    x[i] = words[r * 32 + (((word >> 2) ^ j) << 2) + (word & 3)];  // (r >> 4) & 7 == j
  }
#pragma unroll
  for (int b = 0; b < 4; ++b) transpose_4x4_bytes(x[4 * b], x[4 * b + 1], x[4 * b + 2], x[4 * b + 3]);
  // x[4 b + i] now holds src column 4 word + i, src rows 16 j + 4 b .. + 3
  const int dst_r = r0 + 16 * j;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int col = c0 + 4 * word + i;
    if (col < op.cols && dst_r < rows) {
      *reinterpret_cast<uint4*>(op.dst + static_cast<long long>(col) * rows + dst_r) =
          make_uint4(x[i], x[4 + i], x[8 + i], x[12 + i]);
    }
  }
}

/// Transpose both operands (op1.cols == 0: only op0); the grid covers both operands' tiles,
/// op0's first.
DT_DEVICE void transpose_bytes(const TransposeOperand& op0, const TransposeOperand& op1, int rows) {
  __shared__ __align__(16) uint4 smem[kTransposeTile * kTransposeTile / 16];
  ptx::grid_dependency_wait();  // the stream predecessor may write src or read dst
  ptx::launch_dependents();
  const int tiles_r = (rows + kTransposeTile - 1) / kTransposeTile;
  const int tiles0 = tiles_r * ((op0.cols + kTransposeTile - 1) / kTransposeTile);
  const int tile = static_cast<int>(blockIdx.x);
  if (tile < tiles0) {
    transpose_tile(op0, rows, tile, smem);
  } else {
    transpose_tile(op1, rows, tile - tiles0, smem);
  }
}

}  // namespace deep_tile
