// einsum 'bmk,bnk->mn' (deep_tile/kernels/einsum.py): d[m, n] += sum over batches s of a[s] @ b[s]^T,
// bf16 operands, float32 sums added into d.
//
// The batch and K dimensions are one reduction axis of s * k / 64 blocks; each CTA takes a
// 128 x 128 tile of d and `split` consecutive blocks of that axis, so that small (m, n) still fill
// every SM. One TMA warp loads both operands' tiles (128 rows x 128 bytes each, 128B-swizzled;
// the tensor maps see a and b as [s * m, k] and [s * n, k], and rows of the next batch that a
// partial tile reads only feed rows and columns that are not stored). Two math warpgroups (64
// rows each) issue four m64n128k16 BF16 wgmmas per block, keep one batch in flight and release the
// stage of the batch before. The tile is added into d with vector reductions (red.global.add):
// the splits of one tile meet in L2, in no fixed order.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/address.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/wgmma_bf16.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

#ifndef DT_EINSUM_STAGES
#error "DT_EINSUM_STAGES is set by deep_tile/kernels/einsum.py"
#endif

namespace deep_tile {

constexpr int kBmkBlockM = 128;  // two warpgroups of 64 rows
constexpr int kBmkBlockN = 128;  // the wgmma's N
constexpr int kBmkBlockK = 64;   // 128 bytes of bf16: one 128B-swizzle row
constexpr int kBmkMathThreads = 256;
constexpr int kBmkThreads = kBmkMathThreads + 32;  // and one TMA warp
constexpr int kBmkStages = DT_EINSUM_STAGES;
DT_STATIC_ASSERT(kBmkStages >= 2 && kBmkStages <= 6, "DT_EINSUM_STAGES must lie in [2, 6]");

/// Shared memory of one CTA: per stage the a tile then the b tile (each 1024-byte aligned), then
/// the full and empty barriers.
struct BmkSmem {
  static constexpr int kABytes = kBmkBlockM * kBmkBlockK * 2;
  static constexpr int kBBytes = kBmkBlockN * kBmkBlockK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kBarrierOffset = kBmkStages * kStageBytes;
  static constexpr int kBytes = kBarrierOffset + 2 * kBmkStages * 8;
};

/// `*ptr += (x, y)` as one vector reduction in L2 (PTX ISA red.global.add, .v2.f32).
DT_DEVICE void red_add_f32x2(float* ptr, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(ptr), "f"(x), "f"(y) : "memory");
}

/// One CTA: d tile (blockIdx.x % tiles), reduction blocks [split * (blockIdx.x / tiles), + split)
/// of the s * k / 64 (batch, K) blocks.
DT_DEVICE void bmk_bnk_mn(const TmaDescriptor* map_a, const TmaDescriptor* map_b, float* __restrict__ d,
                          int num_batches, int m, int n, int k, int split) {
  using Mma = ptx::WgmmaBf16<kBmkBlockN, 0, 0>;  // both operands K-major
  extern __shared__ __align__(1024) u8 smem[];
  u64* full = reinterpret_cast<u64*>(smem + BmkSmem::kBarrierOffset);
  u64* empty = full + kBmkStages;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int num_k_blocks = k / kBmkBlockK;
  const int num_n_blocks = ceil_div(n, kBmkBlockN);
  const int num_tiles = num_n_blocks * ceil_div(m, kBmkBlockM);
  const int tile = blockIdx.x % num_tiles, first = (blockIdx.x / num_tiles) * split;
  const int n_block = tile % num_n_blocks, m_block = tile / num_n_blocks;
  const int count = min_int(split, num_batches * num_k_blocks - first);

  if (tid == kBmkMathThreads) {
    ptx::tma_prefetch_descriptor(map_a);
    ptx::tma_prefetch_descriptor(map_b);
    for (int s = 0; s < kBmkStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kBmkMathThreads / 32);  // one arrival per math warp
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  ptx::grid_dependency_wait();  // the stream predecessor may write a, b or d
  ptx::launch_dependents();

  if (warp == kBmkMathThreads / 32) {
    if (lane == 0) {
      for (int i = 0; i < count; ++i) {
        const int stage = i % kBmkStages;
        ptx::mbarrier_wait(&empty[stage], ((i / kBmkStages) & 1) ^ 1);
        const int block = first + i, batch = block / num_k_blocks;
        const int k0 = (block % num_k_blocks) * kBmkBlockK;
        u8* tile_smem = smem + stage * BmkSmem::kStageBytes;
        ptx::mbarrier_arrive_expect_tx(&full[stage], BmkSmem::kStageBytes);
        ptx::tma_load_2d(tile_smem, map_a, &full[stage], k0, batch * m + m_block * kBmkBlockM);
        ptx::tma_load_2d(tile_smem + BmkSmem::kABytes, map_b, &full[stage], k0, batch * n + n_block * kBmkBlockN);
      }
    }
    return;
  }

  const int group = tid >> 7;
  float acc[Mma::kNumAccum];
#pragma unroll
  for (int i = 0; i < Mma::kNumAccum; ++i) acc[i] = 0.0f;
  const u32 smem_lo = ptx::sw128_lo(ptx::smem_addr(smem));
  for (int i = 0; i < count; ++i) {
    const int stage = i % kBmkStages;
    ptx::mbarrier_wait(&full[stage], (i / kBmkStages) & 1);
    const u32 a_lo = smem_lo + ((stage * BmkSmem::kStageBytes + group * 64 * 128) >> 4);
    const u32 b_lo = smem_lo + ((stage * BmkSmem::kStageBytes + BmkSmem::kABytes) >> 4);
#pragma unroll
    for (int r = 0; r < Mma::kNumAccum; ++r) ptx::fence_operand(acc[r]);
    __syncwarp();  // the wgmmas are .aligned: the warp leaves its barrier polls and arrives together
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBmkBlockK / 16; ++kk)  // k16: 32 bytes along the swizzled row
      Mma::mma(ptx::sw128_desc(a_lo + kk * 2), ptx::sw128_desc(b_lo + kk * 2), acc, true);
    ptx::wgmma_commit_group();
#pragma unroll
    for (int r = 0; r < Mma::kNumAccum; ++r) ptx::fence_operand(acc[r]);
    ptx::wgmma_wait_group<1>();  // the previous block's wgmmas are done: its stage is free
    if (i > 0 && lane == 0) ptx::mbarrier_arrive(&empty[(i - 1) % kBmkStages]);
  }
  ptx::wgmma_wait_group<0>();
#pragma unroll
  for (int r = 0; r < Mma::kNumAccum; ++r) ptx::fence_operand(acc[r]);

  const int row = m_block * kBmkBlockM + group * 64 + (warp & 3) * 16 + (lane >> 2);
  const int col0 = n_block * kBmkBlockN + 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < kBmkBlockN / 8; ++j) {
    const int col = col0 + 8 * j;
    if (col >= n) break;
    if (row < m) red_add_f32x2(d + static_cast<long long>(row) * n + col, acc[4 * j], acc[4 * j + 1]);
    if (row + 8 < m) red_add_f32x2(d + static_cast<long long>(row + 8) * n + col, acc[4 * j + 2], acc[4 * j + 3]);
  }
}

}  // namespace deep_tile
