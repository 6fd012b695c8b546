// Epilogue of the split-K kernel: the kSplitK CTAs of a cluster each hold an FP32 partial of the
// same output tile. Each writes its partial into its own shared memory; after a cluster barrier,
// CTA `rank` sums its share of the rows over all kSplitK partials, always in rank order (so the
// result is bitwise identical run to run), and stores bf16 to global memory.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/epilogue/store_direct.cuh"
#include "deep_tile/kernels/swap_fragment.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/warpgroup.cuh"

namespace deep_tile {

/// This thread's fragments of `result` into the row-major fp32 `partial` (kPartialPitch floats
/// per row) at the tile rows of consumer warpgroup `wg`.
template <class Cfg>
DT_DEVICE void write_partial(float* partial, const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int wg,
                             int thread_in_wg) {
  const int warp_in_wg = thread_in_wg / 32, lane = thread_in_wg % 32;
  if constexpr (Cfg::kSwapAB) {  // result[0] is D^T (SwapFragment's layout): written back transposed
    using Frag = SwapFragment<Cfg>;
    Frag::for_each([&](int mb, int j, int h, int q) {
      const int row = Frag::token(j, q, lane), col = Frag::weight_row(mb, h, warp_in_wg, lane);
      partial[row * Cfg::kPartialPitch + col] = result[0][Frag::index(mb, j, h, q)];
    });
    return;
  }
#pragma unroll
  for (int slab = 0; slab < Cfg::kNumSlabs; ++slab) {
    const int row = wg * Cfg::kWgM + slab * 64 + warp_in_wg * 16 + lane / 4;
    float* lo = partial + row * Cfg::kPartialPitch + 2 * (lane % 4);
    float* hi = lo + 8 * Cfg::kPartialPitch;
#pragma unroll
    for (int part = 0; part < Cfg::kNumNParts; ++part) {
      const float* r = result[slab * Cfg::kNumNParts + part];
#pragma unroll
      for (int j = 0; j < Cfg::kAccumPerSubtile / 4; ++j) {
        const int col = part * Cfg::kWgmmaN + 8 * j;
        ptx::store_shared_f32x2(lo + col, r[4 * j + 0], r[4 * j + 1]);
        ptx::store_shared_f32x2(hi + col, r[4 * j + 2], r[4 * j + 3]);
      }
    }
  }
}

/// Sum this rank's share of the tile's real rows (those below m_end, Tile::m_end; rows
/// [rank * ceil(real / kSplitK), ...)) over the cluster's kSplitK partials in rank order and store
/// them as bf16 to `d` (row pitch `ldd` elements) at the tile's origin (m0, n0), clipped to the
/// columns below n. `tid` runs over the kNumMathThreads consumer threads.
/// NOTES: the share is of the real rows, not of the tile's: with a share of the tile's 64 rows, the first
/// rank of a tile with few real rows summed them all while its peers waited at the cluster barrier.
/// NOTES: the loop over this thread's 8-column chunks has a compile-time bound (the chunks past
/// the valid rows are predicated off), so every remote load of every chunk is issued before the
/// first sum waits: a loop with a run-time bound waited for one distributed-shared-memory round
/// trip per chunk (64x2112x128, 64x64 k2 on an H200: the split cost 1.5 us at M = 64, 0.5 us at
/// M = 1).
/// The output variants (Cfg::kDirectStore: FP32 D, or C added, store_direct.cuh) load C's 8 values
/// of each chunk with the partials (before any store: C may be D) and store D = C + sum in D's type.
template <class Cfg>
DT_DEVICE void reduce_partials_and_store(const float* partial, u8* d, int ldd, int m0, int n0, int m_end, int n, u32 rank,
                                         int tid, const u8* c = nullptr, int ldc = 0) {
  constexpr int kRowsPerRank = ceil_div(Cfg::kBlockM, Cfg::kSplitK);
  constexpr int kChunks = Cfg::kBlockN / 8;  // 8 columns = 16 bytes of bf16 per store
  constexpr int kItems = ceil_div(kRowsPerRank * kChunks, Cfg::kNumMathThreads);  // chunks per thread
  const int real_rows = min_int(Cfg::kBlockM, m_end - m0);
  const int rows_per_rank = ceil_div(real_rows, Cfg::kSplitK);  // at most kRowsPerRank
  const int row_begin = static_cast<int>(rank) * rows_per_rank;
  const int rows = min_int(rows_per_rank, real_rows - row_begin);
  float part[kItems][Cfg::kSplitK][8];
  float cv[Cfg::kCKind != 0 ? kItems : 1][8];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = tid + i * Cfg::kNumMathThreads;
    const int row = row_begin + idx / kChunks, chunk = idx % kChunks;
    if (idx < rows * kChunks && n0 + chunk * 8 < n) {
      const float* src = partial + row * Cfg::kPartialPitch + chunk * 8;
#pragma unroll
      for (int peer = 0; peer < Cfg::kSplitK; ++peer) {
        float* v = part[i][peer];
        ptx::load_cluster_f32x4(ptx::map_to_cluster_rank(src, static_cast<u32>(peer)), *reinterpret_cast<float(*)[4]>(v));
        ptx::load_cluster_f32x4(ptx::map_to_cluster_rank(src + 4, static_cast<u32>(peer)),
                                *reinterpret_cast<float(*)[4]>(v + 4));
      }
      if constexpr (Cfg::kCKind != 0) {
        const long long at = static_cast<long long>(m0 + row) * ldc + n0 + chunk * 8;
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
          const float2 pair = load_c_pair<Cfg>(c, at + j);
          cv[i][j] = pair.x;
          cv[i][j + 1] = pair.y;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = tid + i * Cfg::kNumMathThreads;
    const int row = row_begin + idx / kChunks, chunk = idx % kChunks;
    const int col = n0 + chunk * 8;
    if (idx < rows * kChunks && col < n) {
      float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int peer = 0; peer < Cfg::kSplitK; ++peer)
#pragma unroll
        for (int j = 0; j < 8; ++j) sum[j] += part[i][peer][j];
      if constexpr (Cfg::kDirectStore) {
        const long long at = static_cast<long long>(m0 + row) * ldd + col;
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
          if constexpr (Cfg::kCKind != 0) {
            store_d_pair<Cfg>(d, at + j, sum[j] + cv[i][j], sum[j + 1] + cv[i][j + 1]);
          } else {
            store_d_pair<Cfg>(d, at + j, sum[j], sum[j + 1]);
          }
        }
      } else {
        u8* dst = d + (static_cast<long long>(m0 + row) * ldd + col) * 2;
        ptx::store_global_u32x4(dst, ptx::pack_bf16x2(sum[0], sum[1]), ptx::pack_bf16x2(sum[2], sum[3]),
                                ptx::pack_bf16x2(sum[4], sum[5]), ptx::pack_bf16x2(sum[6], sum[7]));
      }
    }
  }
}

}  // namespace deep_tile
